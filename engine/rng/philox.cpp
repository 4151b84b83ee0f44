// PhiloxGenerator: (seed, offset) state, 16-byte serialisation and offset reservation, as
// PyTorch's at::CUDAGeneratorImpl (aten/src/ATen/cuda/CUDAGeneratorImpl.cpp).
#include "engine/rng/philox.h"

#include "engine/core/error.h"

namespace tb::rng {

PhiloxGenerator::PhiloxGenerator(core::Device device, std::uint64_t seed)
    : device_(device), seed_(seed) {}

std::pair<std::uint64_t, std::uint64_t> PhiloxGenerator::reserve(std::uint64_t increment) {
  const std::uint64_t rounded = ((increment + 3) / 4) * 4;
  TB_INTERNAL_ASSERT(offset_ % 4 == 0, "philox offset ", offset_, " is not a multiple of 4");
  const std::uint64_t old = offset_;
  offset_ += rounded;
  return {seed_, old};
}

void PhiloxGenerator::set_current_seed_unlocked(std::uint64_t seed) {
  seed_ = seed;
  offset_ = 0;
}

std::vector<std::uint8_t> PhiloxGenerator::get_state_unlocked() const {
  std::vector<std::uint8_t> out(kStateBytes);
  for (int i = 0; i < 8; ++i) {
    out[i] = static_cast<std::uint8_t>(seed_ >> (8 * i));
    out[8 + i] = static_cast<std::uint8_t>(offset_ >> (8 * i));
  }
  return out;
}

void PhiloxGenerator::set_state_unlocked(std::span<const std::uint8_t> state) {
  // Like CUDAGeneratorImpl::set_state, an 8-byte (seed-only) state is also accepted: offset 0.
  TB_CHECK(state.size() == kStateBytes || state.size() == 8,
           "[generator] RNG state is wrong size: a ", device_.str(), " generator state has ",
           kStateBytes, " bytes (seed, offset), got ", state.size());
  std::uint64_t seed = 0;
  std::uint64_t offset = 0;
  for (int i = 0; i < 8; ++i)
    seed |= static_cast<std::uint64_t>(state[i]) << (8 * i);
  if (state.size() == kStateBytes) {
    for (int i = 0; i < 8; ++i)
      offset |= static_cast<std::uint64_t>(state[8 + i]) << (8 * i);
  }
  TB_CHECK(offset % 4 == 0, "[generator] offset must be a multiple of 4 (state offset ", offset,
           ")");
  seed_ = seed;
  offset_ = offset;
}

void PhiloxGenerator::set_offset_unlocked(std::uint64_t offset) {
  TB_CHECK(offset % 4 == 0, "[generator] offset must be a multiple of 4, got ", offset);
  offset_ = offset;
}

std::unique_ptr<Generator> PhiloxGenerator::clone_unlocked() const {
  auto gen = std::make_unique<PhiloxGenerator>(device_, seed_);
  gen->offset_ = offset_;
  return gen;
}

PhiloxGenerator& philox_generator_for(const char* op, core::Device device, Generator* gen) {
  Generator& g = gen != nullptr ? *gen : default_generator(device);
  auto* p = dynamic_cast<PhiloxGenerator*>(&g);
  TB_CHECK_T(TypeError, p != nullptr && g.device() == device, "[", op, "] the generator of ",
             g.device(), " cannot fill a tensor on ", device,
             " (pass that device's generator or none)");
  return *p;
}

}  // namespace tb::rng
