// CpuGenerator: PyTorch-compatible MT19937 (at::mt19937 / at::CPUGeneratorImpl) and its state
// serialisation.
#include "engine/rng/cpu_generator.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numbers>
#include <type_traits>

#include "engine/core/error.h"

namespace tb::rng {

namespace {

constexpr std::uint32_t kMatrixA = 0x9908b0dfU;
constexpr std::uint32_t kUpperMask = 0x80000000U;
constexpr std::uint32_t kLowerMask = 0x7fffffffU;

inline std::uint32_t mix_bits(std::uint32_t u, std::uint32_t v) {
  return (u & kUpperMask) | (v & kLowerMask);
}

inline std::uint32_t twist(std::uint32_t u, std::uint32_t v) {
  return (mix_bits(u, v) >> 1) ^ ((v & 1U) ? kMatrixA : 0U);
}

// Byte offsets of the C structs CPUGeneratorImplStateLegacy / CPUGeneratorImplState on LP64
// (x86-64 / aarch64 System V), padding included:
//   legacy: i64 the_initial_seed @0; i32 left @8; i32 seeded @12; u64 next @16;
//           u64 state[624] @24; f64 normal_x @5016; f64 normal_y @5024; f64 normal_rho @5032;
//           i32 normal_is_valid @5040; 4 bytes padding -> 5048
//   current: legacy @0; f32 next_float_normal_sample @5048; bool valid @5052; 3 bytes padding
constexpr std::size_t kOffSeed = 0;
constexpr std::size_t kOffLeft = 8;
constexpr std::size_t kOffSeeded = 12;
constexpr std::size_t kOffNext = 16;
constexpr std::size_t kOffState = 24;
constexpr std::size_t kOffNormalX = kOffState + 8 * Mt19937::kStateSize;  // 5016
constexpr std::size_t kOffNormalY = kOffNormalX + 8;
constexpr std::size_t kOffNormalRho = kOffNormalY + 8;
constexpr std::size_t kOffNormalValid = kOffNormalRho + 8;  // 5040
constexpr std::size_t kOffFloatNormal = 5048;
constexpr std::size_t kOffFloatValid = 5052;
static_assert(kOffNormalValid + 8 == CpuGenerator::kLegacyStateBytes);
static_assert(kOffFloatValid + 4 == CpuGenerator::kStateBytes);

// Little-endian field access (the state layout is defined as little-endian).
template <typename T>
void put(std::vector<std::uint8_t>& out, std::size_t off, T value) {
  std::uint64_t bits = 0;
  if constexpr (std::is_floating_point_v<T>) {
    if constexpr (sizeof(T) == 8) {
      std::uint64_t b;
      std::memcpy(&b, &value, 8);
      bits = b;
    } else {
      std::uint32_t b;
      std::memcpy(&b, &value, 4);
      bits = b;
    }
  } else {
    bits = static_cast<std::uint64_t>(value);
  }
  for (std::size_t i = 0; i < sizeof(T); ++i)
    out[off + i] = static_cast<std::uint8_t>(bits >> (8 * i));
}

std::uint64_t get_bits(std::span<const std::uint8_t> in, std::size_t off, std::size_t n) {
  std::uint64_t bits = 0;
  for (std::size_t i = 0; i < n; ++i)
    bits |= static_cast<std::uint64_t>(in[off + i]) << (8 * i);
  return bits;
}

double get_f64(std::span<const std::uint8_t> in, std::size_t off) {
  const std::uint64_t b = get_bits(in, off, 8);
  double d;
  std::memcpy(&d, &b, 8);
  return d;
}

float get_f32(std::span<const std::uint8_t> in, std::size_t off) {
  const auto b = static_cast<std::uint32_t>(get_bits(in, off, 4));
  float f;
  std::memcpy(&f, &b, 4);
  return f;
}

}  // namespace

void Mt19937::seed_engine(std::uint64_t seed) {
  seed_ = seed;
  seeded_ = true;
  state_[0] = static_cast<std::uint32_t>(seed & 0xffffffffULL);
  for (int j = 1; j < kStateSize; ++j) {
    state_[j] =
        1812433253U * (state_[j - 1] ^ (state_[j - 1] >> 30)) + static_cast<std::uint32_t>(j);
  }
  left_ = 1;
  next_ = 0;
}

void Mt19937::next_state() {
  std::uint32_t* p = state_.data();
  left_ = kStateSize;
  next_ = 0;
  for (int j = kStateSize - kShift + 1; --j; ++p)
    p[0] = p[kShift] ^ twist(p[0], p[1]);
  for (int j = kShift; --j; ++p)
    p[0] = p[kShift - kStateSize] ^ twist(p[0], p[1]);
  p[0] = p[kShift - kStateSize] ^ twist(p[0], state_[0]);
}

namespace {
inline std::uint32_t temper(std::uint32_t y) {
  y ^= (y >> 11);
  y ^= (y << 7) & 0x9d2c5680U;
  y ^= (y << 15) & 0xefc60000U;
  y ^= (y >> 18);
  return y;
}
}  // namespace

std::uint32_t Mt19937::operator()() {
  if (--left_ == 0) next_state();
  return temper(state_[next_++]);
}

void Mt19937::fill(std::uint32_t* out, std::size_t n) {
  while (n > 0) {
    // operator() regenerates when left_ reaches 0 and then takes state_[0] without counting it:
    // left_ - 1 outputs are there before the next regeneration.
    if (left_ == 1 && next_ <= kStateSize) {
      next_state();
      left_ = kStateSize + 1;
    }
    const std::size_t k =
        left_ < 1 || next_ >= kStateSize
            ? 0
            : std::min({n, static_cast<std::size_t>(left_ - 1),
                        static_cast<std::size_t>(kStateSize - static_cast<int>(next_))});
    if (k == 0) {  // a state that set_state would refuse: as operator() does, call by call
      *out++ = (*this)();
      --n;
      continue;
    }
    const std::uint32_t* s = state_.data() + next_;
    for (std::size_t i = 0; i < k; ++i)
      out[i] = temper(s[i]);
    next_ += static_cast<std::uint32_t>(k);
    left_ -= static_cast<std::int32_t>(k);
    out += k;
    n -= k;
  }
}

CpuGenerator::CpuGenerator(std::uint64_t seed) : engine_(seed) {}

void CpuGenerator::set_current_seed_unlocked(std::uint64_t seed) {
  next_float_normal_.reset();
  next_double_normal_.reset();
  engine_.seed_engine(seed);
}

std::vector<std::uint8_t> CpuGenerator::get_state_unlocked() const {
  std::vector<std::uint8_t> out(kStateBytes, 0);  // padding bytes are zero, as in PyTorch
  put<std::uint64_t>(out, kOffSeed, engine_.seed_);
  put<std::int32_t>(out, kOffLeft, engine_.left_);
  put<std::int32_t>(out, kOffSeeded, engine_.seeded_ ? 1 : 0);
  put<std::uint64_t>(out, kOffNext, engine_.next_);
  for (int i = 0; i < Mt19937::kStateSize; ++i) {
    put<std::uint64_t>(out, kOffState + 8 * static_cast<std::size_t>(i), engine_.state_[i]);
  }
  // normal_x and normal_rho are dummies (0); the cached double normal goes to normal_y.
  put<double>(out, kOffNormalX, 0.0);
  put<double>(out, kOffNormalY, next_double_normal_.value_or(0.0));
  put<double>(out, kOffNormalRho, 0.0);
  put<std::int32_t>(out, kOffNormalValid, next_double_normal_.has_value() ? 1 : 0);
  put<float>(out, kOffFloatNormal, next_float_normal_.value_or(0.0f));
  out[kOffFloatValid] = next_float_normal_.has_value() ? 1 : 0;
  return out;
}

void CpuGenerator::set_state_unlocked(std::span<const std::uint8_t> state) {
  const std::size_t n = state.size();
  std::optional<float> float_normal;
  std::optional<double> double_normal;
  const bool normal_valid = n >= kLegacyStateBytes && get_bits(state, kOffNormalValid, 4) != 0;
  if (n == kLegacyStateBytes) {
    // The legacy state stored Box-Muller's intermediates; the cached sample is rho*sin(2*pi*x).
    if (normal_valid) {
      const double r = get_f64(state, kOffNormalRho);
      const double theta = 2.0 * std::numbers::pi * get_f64(state, kOffNormalX);
      double_normal = r * std::sin(theta);
    }
  } else if (n == kStateBytes) {
    if (state[kOffFloatValid] != 0) float_normal = get_f32(state, kOffFloatNormal);
    if (normal_valid) double_normal = get_f64(state, kOffNormalY);
  } else {
    throw ValueError(
        detail::str_cat("[generator] Expected either a CPUGeneratorImplStateLegacy of size ",
                        kLegacyStateBytes, " or a CPUGeneratorImplState of size ", kStateBytes,
                        " but found the input RNG state size to be ", n));
  }
  Mt19937 engine;
  for (int i = 0; i < Mt19937::kStateSize; ++i) {
    // Stored as u64, used as u32 (PyTorch's std::copy truncates the same way).
    engine.state_[i] =
        static_cast<std::uint32_t>(get_bits(state, kOffState + 8 * static_cast<std::size_t>(i), 8));
  }
  engine.seed_ = get_bits(state, kOffSeed, 8);
  engine.left_ =
      static_cast<std::int32_t>(static_cast<std::uint32_t>(get_bits(state, kOffLeft, 4)));
  engine.seeded_ = get_bits(state, kOffSeeded, 4) != 0;
  engine.next_ = static_cast<std::uint32_t>(get_bits(state, kOffNext, 8));
  TB_CHECK(engine.is_valid(), "[generator] Invalid mt19937 state (seeded=", engine.seeded_,
           ", left=", engine.left_, ", next=", engine.next_,
           "; expected seeded=1, 0 < left <= ", Mt19937::kStateSize,
           ", next <= ", Mt19937::kStateSize, ")");
  engine_ = engine;
  next_float_normal_ = float_normal;
  next_double_normal_ = double_normal;
}

void CpuGenerator::set_offset_unlocked(std::uint64_t /*offset*/) {
  throw Error("[generator] CPU Generator does not use offset");
}

std::uint64_t CpuGenerator::get_offset_unlocked() const {
  throw Error("[generator] CPU Generator does not use offset");
}

std::unique_ptr<Generator> CpuGenerator::clone_unlocked() const {
  auto gen = std::make_unique<CpuGenerator>();
  gen->engine_ = engine_;
  gen->next_float_normal_ = next_float_normal_;
  gen->next_double_normal_ = next_double_normal_;
  return gen;
}

}  // namespace tb::rng
