// Generator: the abstract random-number generator of a device, seed parsing, and the per-device
// default generators (torch.Generator / torch.manual_seed semantics: torch/random.py,
// https://pytorch.org/docs/stable/generated/torch.Generator.html).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <string_view>
#include <vector>

#include "engine/core/device.h"

namespace tb::rng {

/// Seed of a fresh non-default CPU generator (PyTorch's default_rng_seed_val).
inline constexpr std::uint64_t kDefaultRngSeed = 67280421310721ULL;

/// A device's random-number generator.
///
/// Locking rule: random ops lock mutex() for the whole time they draw, and the drawing methods
/// of subclasses (CpuGenerator::random(), PhiloxGenerator::reserve(), ...) require the caller to
/// hold it. The control methods below (manual_seed, initial_seed, seed, get_state, set_state,
/// set_offset, get_offset, clone) lock mutex() themselves, so they must NOT be called while the
/// calling thread already holds it.
class Generator {
 public:
  Generator() = default;
  Generator(const Generator&) = delete;
  Generator& operator=(const Generator&) = delete;
  virtual ~Generator() = default;

  /// The device whose random ops this generator feeds.
  virtual core::Device device() const = 0;

  /// Reseeds deterministically; clears any cached samples / resets the offset. Locks mutex().
  void manual_seed(std::uint64_t seed);

  /// The seed last set by manual_seed()/seed()/set_state(). Locks mutex().
  std::uint64_t initial_seed() const;

  /// Reseeds from std::random_device (53 bits, like PyTorch) and returns the new seed. Locks
  /// mutex().
  std::uint64_t seed();

  /// The complete state as bytes (layout defined by the subclass). Locks mutex().
  std::vector<std::uint8_t> get_state() const;

  /// Restores a state produced by get_state(). Throws tb::ValueError (state unchanged) for a
  /// malformed state. Locks mutex().
  void set_state(std::span<const std::uint8_t> state);

  /// Sets the counter offset (counter-based generators only; others throw tb::Error). Locks
  /// mutex().
  void set_offset(std::uint64_t offset);

  /// The counter offset (counter-based generators only; others throw tb::Error). Locks mutex().
  std::uint64_t get_offset() const;

  /// An independent generator of the same kind, device and state. Locks this mutex().
  std::unique_ptr<Generator> clone() const;

  /// The mutex random ops hold while drawing from this generator.
  std::mutex& mutex() const noexcept { return mutex_; }

 protected:
  // Unlocked implementations; the public wrappers hold mutex() while calling them.
  virtual void set_current_seed_unlocked(std::uint64_t seed) = 0;
  virtual std::uint64_t current_seed_unlocked() const = 0;
  virtual std::vector<std::uint8_t> get_state_unlocked() const = 0;
  virtual void set_state_unlocked(std::span<const std::uint8_t> state) = 0;
  virtual void set_offset_unlocked(std::uint64_t offset) = 0;
  virtual std::uint64_t get_offset_unlocked() const = 0;
  virtual std::unique_ptr<Generator> clone_unlocked() const = 0;

 private:
  mutable std::mutex mutex_;
};

/// A fresh nondeterministic seed: two std::random_device draws masked to 53 bits (PyTorch's
/// getNonDeterministicRandom, so the seed is exactly representable as a double).
std::uint64_t nondeterministic_seed();

/// Reinterprets a signed seed's bit pattern as unsigned (PyTorch rule: -1 -> 2^64 - 1).
constexpr std::uint64_t seed_from_signed(std::int64_t seed) noexcept {
  return static_cast<std::uint64_t>(seed);
}

/// Parses a decimal seed ("42", "-1", "+7") in [-2^63, 2^64 - 1]; negative values are
/// reinterpreted with seed_from_signed(). Throws tb::ValueError naming the text and the range
/// for malformed or out-of-range text.
std::uint64_t parse_seed(std::string_view text);

/// Factory a backend registers to create the default generator of its devices.
using GeneratorFactory = std::function<std::unique_ptr<Generator>(core::DeviceIndex)>;

/// Registers the default-generator factory of a non-CPU device type. Throws tb::ValueError for
/// DeviceType::CPU, an empty factory, or a type that already has one.
void register_generator_factory(core::DeviceType type, GeneratorFactory factory);

/// Whether a factory is registered for `type` (always true for CPU, which is built in).
bool has_generator_factory(core::DeviceType type);

/// The process-wide default generator of `device`, created on first use (thread-safe) and alive
/// for the rest of the process. The CPU default is seeded nondeterministically unless
/// manual_seed() ran before, in which case it starts from that seed; other devices' defaults
/// come from their registered factory (then get the manual_seed() seed if one was set). Throws
/// tb::Error naming the device when no factory is registered for its type.
Generator& default_generator(core::Device device);

/// torch.manual_seed: seeds every default generator created so far and makes later-created
/// defaults start from `seed`. Returns `seed`.
std::uint64_t manual_seed(std::uint64_t seed);

/// A fresh, non-default generator for `device`: CPU ones are seeded with kDefaultRngSeed, others
/// come from the device type's factory (throws tb::Error naming the device when none is
/// registered).
std::unique_ptr<Generator> make_generator(core::Device device);

}  // namespace tb::rng
