// CpuGenerator: MT19937 generator bit-compatible with PyTorch's at::CPUGeneratorImpl
// (aten/src/ATen/CPUGeneratorImpl.cpp), including its 5056-byte get_state() layout and cached
// normal samples.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "engine/rng/generator.h"

namespace tb::rng {

/// The MT19937 engine with PyTorch's seeding (at::mt19937): only the low 32 bits of the seed feed
/// the state, the full 64-bit seed is kept for initial_seed(). Not thread-safe by itself.
class Mt19937 {
 public:
  static constexpr int kStateSize = 624;  // N
  static constexpr int kShift = 397;      // M

  /// Seeds like at::mt19937(seed) (default seed 5489, the standard MT default).
  explicit Mt19937(std::uint64_t seed = 5489) { seed_engine(seed); }

  /// Re-initialises the state from the low 32 bits of `seed`; remembers all 64 bits.
  void seed_engine(std::uint64_t seed);

  /// The next tempered 32-bit output.
  std::uint32_t operator()();

  /// The next n outputs, as n calls of operator() give them (same state afterwards), a block of
  /// the state at a time.
  void fill(std::uint32_t* out, std::size_t n);

  /// The 64-bit seed last given to seed_engine().
  std::uint64_t seed() const noexcept { return seed_; }

  /// at::mt19937::is_valid(): seeded, 0 < left <= 624, next <= 624.
  bool is_valid() const noexcept {
    return seeded_ && left_ > 0 && left_ <= kStateSize && next_ <= kStateSize;
  }

  // Raw state (what get_state() serialises). Mutating it may make is_valid() false.
  std::uint64_t seed_ = 0;
  std::int32_t left_ = 1;
  bool seeded_ = false;
  std::uint32_t next_ = 0;
  std::array<std::uint32_t, kStateSize> state_{};

 private:
  void next_state();
};

/// PyTorch-compatible CPU generator. Drawing methods (random, random64, the normal-sample caches)
/// require the caller to hold mutex(); the cpu_sampling.h functions do that for you.
class CpuGenerator final : public Generator {
 public:
  /// Size in bytes of get_state() (sizeof(CPUGeneratorImplState) on LP64).
  static constexpr std::size_t kStateBytes = 5056;
  /// Size of the legacy state (sizeof(CPUGeneratorImplStateLegacy)) also accepted by set_state.
  static constexpr std::size_t kLegacyStateBytes = 5048;

  /// A generator seeded with `seed` (default: kDefaultRngSeed, like torch.Generator()).
  explicit CpuGenerator(std::uint64_t seed = kDefaultRngSeed);

  /// Always the CPU device.
  core::Device device() const override { return core::Device(core::DeviceType::CPU, 0); }

  /// One 32-bit MT19937 output. Caller holds mutex().
  std::uint32_t random() { return engine_(); }
  /// n calls of random() into out, faster.
  void random_fill(std::uint32_t* out, std::size_t n) { engine_.fill(out, n); }

  /// (first << 32) | second of two 32-bit outputs. Caller holds mutex().
  std::uint64_t random64() {
    const std::uint64_t hi = engine_();
    const std::uint64_t lo = engine_();
    return (hi << 32) | lo;
  }

  /// Cached second double normal sample (Box–Muller's sin half), if any. Caller holds mutex().
  std::optional<double> next_double_normal_sample() const { return next_double_normal_; }
  /// Sets/clears the cached double normal sample. Caller holds mutex().
  void set_next_double_normal_sample(std::optional<double> v) { next_double_normal_ = v; }
  /// Cached float normal sample, if any. Caller holds mutex().
  std::optional<float> next_float_normal_sample() const { return next_float_normal_; }
  /// Sets/clears the cached float normal sample. Caller holds mutex().
  void set_next_float_normal_sample(std::optional<float> v) { next_float_normal_ = v; }

 protected:
  void set_current_seed_unlocked(std::uint64_t seed) override;
  std::uint64_t current_seed_unlocked() const override { return engine_.seed(); }
  std::vector<std::uint8_t> get_state_unlocked() const override;
  void set_state_unlocked(std::span<const std::uint8_t> state) override;
  void set_offset_unlocked(std::uint64_t offset) override;
  std::uint64_t get_offset_unlocked() const override;
  std::unique_ptr<Generator> clone_unlocked() const override;

 private:
  Mt19937 engine_;
  std::optional<float> next_float_normal_;
  std::optional<double> next_double_normal_;
};

}  // namespace tb::rng
