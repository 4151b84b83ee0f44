// The per-block arithmetic of the device random ops (Philox, with the seed/offset semantics of
// PyTorch's at::CUDAGeneratorImpl, aten/src/ATen/cuda/CUDAGeneratorImpl.cpp), written once for
// host and device code: openreg's loops and the CUDA kernels call these, so the
// numbers of a CUDA device are the ones openreg's tests check in every run.
//
// Block b of a call is the first curand4() of Philox subsequence b started at (seed, offset):
// four float32 elements per block, or two float64 elements (two words each). A call reserves 4
// draws of offset, so its numbers depend only on (seed, offset at the call).
#pragma once

#include <cmath>
#include <cstdint>

#include "engine/core/half.h"
#include "engine/rng/philox_core.h"

namespace tb::backends::rnd {

/// The four words of block b at (seed, offset).
TB_HOST_DEVICE inline rng::Philox4 block_words(std::uint64_t seed, std::uint64_t offset,
                                               std::uint64_t b) {
  rng::PhiloxState st = rng::PhiloxState::init(seed, b, offset);
  return st.next4();
}

/// The storage dtype a float32 draw is rounded to afterwards (it decides the uniform_ edge case).
enum class Target : int { f32 = 0, f16 = 1, bf16 = 2 };

/// v rounded as storing it in `target` would.
TB_HOST_DEVICE inline float rounded_as(float v, Target target) {
  if (target == Target::f16) return static_cast<float>(core::Half(v));
  if (target == Target::bf16) return static_cast<float>(core::BFloat16(v));
  return v;
}

/// Element j (0..3) of a float32 uniform_ block: PyTorch's CUDA transform; a value that rounds
/// to `to` in the target dtype becomes `from`, so the result stays in [from, to).
TB_HOST_DEVICE inline float uniform_f32(const rng::Philox4& w, int j, float from, float to,
                                        Target target) {
  const std::uint32_t word = j == 0 ? w.x : j == 1 ? w.y : j == 2 ? w.z : w.w;
  const float v = rng::uniform_from_curand(rng::curand_uniform_from_bits(word), from, to);
  return rounded_as(v, target) == to ? from : v;
}

/// Element j (0..1) of a float64 uniform_ block (two words per element).
TB_HOST_DEVICE inline double uniform_f64(const rng::Philox4& w, int j, double from, double to) {
  const double u = j == 0 ? rng::curand_uniform_double_from_bits(w.x, w.y)
                          : rng::curand_uniform_double_from_bits(w.z, w.w);
  return (u == 1.0 ? 0.0 : u) * (to - from) + from;
}

/// Element j (0..3) of a float32 normal_ block: Box-Muller on the word pairs (0,1) and (2,3).
TB_HOST_DEVICE inline float normal_f32(const rng::Philox4& w, int j, float mean, float stdv) {
  constexpr float kTwoPi = 6.283185307179586f;
  const std::uint32_t a = j < 2 ? w.x : w.z;
  const std::uint32_t b = j < 2 ? w.y : w.w;
  const float u1 = rng::curand_uniform_from_bits(a);
  const float u2 = rng::curand_uniform_from_bits(b);
#if defined(__CUDA_ARCH__)
  const float radius = ::sqrtf(-2.0f * ::logf(u1));
  const float v = kTwoPi * u2;
  const float r = (j % 2 == 0) ? ::sinf(v) : ::cosf(v);
#else
  const float radius = std::sqrt(-2.0f * std::log(u1));
  const float v = kTwoPi * u2;
  const float r = (j % 2 == 0) ? std::sin(v) : std::cos(v);
#endif
  return r * radius * stdv + mean;
}

/// Element j (0..1) of a float64 normal_ block: Box-Muller on two doubles.
TB_HOST_DEVICE inline double normal_f64(const rng::Philox4& w, int j, double mean, double stdv) {
  constexpr double kTwoPi = 6.283185307179586476925286766559;
  const double u1 = rng::curand_uniform_double_from_bits(w.x, w.y);
  const double u2 = rng::curand_uniform_double_from_bits(w.z, w.w);
#if defined(__CUDA_ARCH__)
  const double radius = ::sqrt(-2.0 * ::log(u1));
  const double r = j == 0 ? ::sin(kTwoPi * u2) : ::cos(kTwoPi * u2);
#else
  const double radius = std::sqrt(-2.0 * std::log(u1));
  const double r = j == 0 ? std::sin(kTwoPi * u2) : std::cos(kTwoPi * u2);
#endif
  return r * radius * stdv + mean;
}

}  // namespace tb::backends::rnd
