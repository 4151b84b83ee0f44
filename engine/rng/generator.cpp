// Generator base methods, seed parsing and the per-device default-generator registry.
#include "engine/rng/generator.h"

#include <array>
#include <random>
#include <string>
#include <unordered_map>

#include "engine/core/error.h"
#include "engine/rng/cpu_generator.h"

namespace tb::rng {

void Generator::manual_seed(std::uint64_t seed) {
  std::lock_guard<std::mutex> lock(mutex_);
  set_current_seed_unlocked(seed);
}

std::uint64_t Generator::initial_seed() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return current_seed_unlocked();
}

std::uint64_t Generator::seed() {
  const std::uint64_t s = nondeterministic_seed();
  std::lock_guard<std::mutex> lock(mutex_);
  set_current_seed_unlocked(s);
  return s;
}

std::vector<std::uint8_t> Generator::get_state() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return get_state_unlocked();
}

void Generator::set_state(std::span<const std::uint8_t> state) {
  std::lock_guard<std::mutex> lock(mutex_);
  set_state_unlocked(state);
}

void Generator::set_offset(std::uint64_t offset) {
  std::lock_guard<std::mutex> lock(mutex_);
  set_offset_unlocked(offset);
}

std::uint64_t Generator::get_offset() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return get_offset_unlocked();
}

std::unique_ptr<Generator> Generator::clone() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return clone_unlocked();
}

std::uint64_t nondeterministic_seed() {
  std::random_device rd;
  const std::uint64_t hi = rd();
  const std::uint64_t lo = rd();
  return ((hi << 32) + lo) & 0x1FFFFFFFFFFFFFULL;
}

std::uint64_t parse_seed(std::string_view text) {
  constexpr const char* kRange = "[-9223372036854775808, 18446744073709551615]";
  std::size_t pos = 0;
  bool negative = false;
  if (pos < text.size() && (text[pos] == '-' || text[pos] == '+')) {
    negative = text[pos] == '-';
    ++pos;
  }
  TB_CHECK(pos < text.size(), "[generator] invalid seed '", text,
           "': expected a decimal integer in ", kRange);
  std::uint64_t value = 0;
  bool overflow = false;  // the magnitude exceeds 2^64 - 1
  for (; pos < text.size(); ++pos) {
    const char c = text[pos];
    TB_CHECK(c >= '0' && c <= '9', "[generator] invalid seed '", text,
             "': expected a decimal integer in ", kRange);
    const auto digit = static_cast<std::uint64_t>(c - '0');
    if (!overflow && value > (UINT64_MAX - digit) / 10) overflow = true;
    if (!overflow) value = value * 10 + digit;
  }
  constexpr std::uint64_t kMinMagnitude = std::uint64_t{1} << 63;  // |INT64_MIN|
  TB_CHECK(!overflow && (!negative || value <= kMinMagnitude), "[generator] seed ", text,
           " is out of range: seeds must be integers in ", kRange);
  // Negative seeds reinterpret the two's-complement bit pattern (-1 -> 2^64 - 1).
  return negative ? std::uint64_t{0} - value : value;
}

namespace {

// Process-wide registry of factories and default generators. Intentionally never destroyed, so
// references returned by default_generator() stay valid during static destruction.
struct Registry {
  std::mutex mutex;
  std::array<GeneratorFactory, core::kNumDeviceTypes> factories;
  std::unordered_map<core::Device, std::unique_ptr<Generator>> defaults;
  bool has_manual_seed = false;
  std::uint64_t manual_seed = 0;
};

Registry& registry() {
  static Registry* r = new Registry();
  return *r;
}

std::size_t type_slot(core::DeviceType type) {
  return static_cast<std::size_t>(type);
}

std::unique_ptr<Generator> create_from_factory(const Registry& r, core::Device device) {
  const GeneratorFactory& factory = r.factories[type_slot(device.type())];
  TB_CHECK_T(::tb::Error, static_cast<bool>(factory),
             "[generator] no random-number generator is available for device ", device.str(),
             ": no generator factory is registered for device type '",
             core::device_type_name(device.type()), "' (is its backend loaded?)");
  std::unique_ptr<Generator> gen = factory(device.index());
  TB_INTERNAL_ASSERT(gen != nullptr, "generator factory for ", device.str(), " returned null");
  return gen;
}

}  // namespace

void register_generator_factory(core::DeviceType type, GeneratorFactory factory) {
  TB_CHECK(type != core::DeviceType::CPU,
           "[generator] cannot register a generator factory for device type 'cpu': the CPU "
           "generator is built in");
  TB_CHECK(static_cast<bool>(factory), "[generator] the generator factory for device type '",
           core::device_type_name(type), "' is empty");
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  TB_CHECK(!r.factories[type_slot(type)], "[generator] a generator factory for device type '",
           core::device_type_name(type), "' is already registered; register it only once");
  r.factories[type_slot(type)] = std::move(factory);
}

bool has_generator_factory(core::DeviceType type) {
  if (type == core::DeviceType::CPU) return true;
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  return static_cast<bool>(r.factories[type_slot(type)]);
}

Generator& default_generator(core::Device device) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  auto it = r.defaults.find(device);
  if (it != r.defaults.end()) return *it->second;
  std::unique_ptr<Generator> gen;
  if (device.is_cpu()) {
    gen =
        std::make_unique<CpuGenerator>(r.has_manual_seed ? r.manual_seed : nondeterministic_seed());
  } else {
    gen = create_from_factory(r, device);
    if (r.has_manual_seed) {
      gen->manual_seed(r.manual_seed);
    } else {
      gen->seed();
    }
  }
  Generator& ref = *gen;
  r.defaults.emplace(device, std::move(gen));
  return ref;
}

std::uint64_t manual_seed(std::uint64_t seed) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  r.has_manual_seed = true;
  r.manual_seed = seed;
  for (auto& [device, gen] : r.defaults)
    gen->manual_seed(seed);
  return seed;
}

std::unique_ptr<Generator> make_generator(core::Device device) {
  if (device.is_cpu()) return std::make_unique<CpuGenerator>(kDefaultRngSeed);
  std::unique_ptr<Generator> gen;
  {
    Registry& r = registry();
    std::lock_guard<std::mutex> lock(r.mutex);
    gen = create_from_factory(r, device);
  }
  gen->manual_seed(kDefaultRngSeed);
  return gen;
}

}  // namespace tb::rng
