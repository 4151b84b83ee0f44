// PhiloxGenerator, the (seed, offset) generator of CUDA-like devices (as PyTorch's
// at::CUDAGeneratorImpl, aten/src/ATen/cuda/CUDAGeneratorImpl.cpp), over the Philox4x32-10
// functions of philox_core.h.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <utility>
#include <vector>

#include "engine/rng/generator.h"
#include "engine/rng/philox_core.h"

namespace tb::rng {

/// The (seed, offset) generator of CUDA-like devices (PyTorch's CUDAGeneratorImpl without graph
/// capture). Kernels call reserve() and then draw with PhiloxState::init(seed, thread id, offset).
class PhiloxGenerator final : public Generator {
 public:
  /// Size in bytes of get_state(): seed (u64 LE) then offset (u64 LE).
  static constexpr std::size_t kStateBytes = 16;

  /// A generator of `device` seeded with `seed` (default kDefaultRngSeed) and offset 0.
  explicit PhiloxGenerator(core::Device device, std::uint64_t seed = kDefaultRngSeed);

  /// The device given at construction.
  core::Device device() const override { return device_; }

  /// Reserves `increment` 32-bit draws per thread: returns (seed, offset before the call) and
  /// advances the offset by `increment` rounded up to a multiple of 4. Caller holds mutex().
  std::pair<std::uint64_t, std::uint64_t> reserve(std::uint64_t increment);

 protected:
  void set_current_seed_unlocked(std::uint64_t seed) override;
  std::uint64_t current_seed_unlocked() const override { return seed_; }
  std::vector<std::uint8_t> get_state_unlocked() const override;
  void set_state_unlocked(std::span<const std::uint8_t> state) override;
  void set_offset_unlocked(std::uint64_t offset) override;
  std::uint64_t get_offset_unlocked() const override { return offset_; }
  std::unique_ptr<Generator> clone_unlocked() const override;

 private:
  core::Device device_;
  std::uint64_t seed_;
  std::uint64_t offset_ = 0;
};

/// The Philox generator a device kernel of `op` draws from: `gen`, or `device`'s default when it
/// is null. Throws tb::TypeError naming `op` when that is not a Philox generator of `device`.
PhiloxGenerator& philox_generator_for(const char* op, core::Device device, Generator* gen);

}  // namespace tb::rng
