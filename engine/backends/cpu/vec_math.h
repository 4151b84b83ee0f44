// Elementary functions the compiler can vectorise, for the CPU kernels' float loops.
//
// glibc's expf is a call per element (an eighth of qwen-tiny's step went to it: softmax in
// attention, sigmoid/SiLU). exp_f32 is branch-free float arithmetic the vectoriser turns into
// SIMD at every capability level — when it is inlined, hence always_inline: GCC left it a call
// per element inside sigmoid, which kept SiLU's loops scalar (12 % of qwen-tiny's step). The
// kernels are compiled with -ffp-contract=off, so each level computes the same bits. Accuracy:
// Cephes' expf (S. L. Moshier, "Methods and Programs for Mathematical Functions",
// https://www.netlib.org/cephes/): range reduction by ln 2 in two parts and a degree-5 polynomial,
// within 2 ulp of the true exp over the whole float range (checked against double exp in
// tests/engine/ops_test.cpp), as PyTorch's vectorised exp (Sleef, 1 ulp).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>

namespace tb::cpu {

/// 2^k as a float for k in [-126, 127] (the exponent field set directly).
[[gnu::always_inline]] inline float exp2_int_f32(std::int32_t k) {
  const std::uint32_t bits = static_cast<std::uint32_t>(k + 127) << 23;
  float f;
  std::memcpy(&f, &bits, sizeof(f));
  return f;
}

/// c ? a : b as bit operations (no branch, so loops around it vectorise even under the default
/// -ftrapping-math, which keeps GCC from if-converting float selects).
[[gnu::always_inline]] inline float select_f32(bool c, float a, float b) {
  const std::uint32_t m = 0u - static_cast<std::uint32_t>(c);
  std::uint32_t ai, bi;
  std::memcpy(&ai, &a, sizeof(a));
  std::memcpy(&bi, &b, sizeof(b));
  const std::uint32_t r = (ai & m) | (bi & ~m);
  float f;
  std::memcpy(&f, &r, sizeof(f));
  return f;
}

/// e^x in float: exp(-inf) = 0, exp(+inf) = inf, NaN stays NaN, underflows to denormals and 0
/// and overflows to inf as expf does.
[[gnu::always_inline]] inline float exp_f32(float x) {
  constexpr float kMax = 88.72283935546875f;       // above: inf
  constexpr float kMin = -103.97208404541015625f;  // below: 0
  constexpr float kLog2e = 1.44269504088896341f;
  constexpr float kLn2Hi = 0.693359375f;
  constexpr float kLn2Lo = -2.12194440e-4f;
  constexpr float kRound = 12582912.0f;  // 1.5 · 2^23: adding it rounds to an integer
  const bool nan = x != x;
  float xc = select_f32(nan, 0.0f, x);
  xc = select_f32(xc > kMax, kMax, xc);
  xc = select_f32(xc < kMin, kMin, xc);
  const float n = (xc * kLog2e + kRound) - kRound;  // round(x / ln 2)
  float r = xc - n * kLn2Hi;
  r = r - n * kLn2Lo;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  const float y = p * (r * r) + r + 1.0f;
  // y · 2^n in two factors, so that n in [-150, 128] never leaves the normal exponent range.
  const std::int32_t k = static_cast<std::int32_t>(n);
  const std::int32_t k1 = k / 2;
  float out = y * exp2_int_f32(k1) * exp2_int_f32(k - k1);
  out = select_f32(x > kMax, std::numeric_limits<float>::infinity(), out);
  out = select_f32(x < kMin, 0.0f, out);
  return select_f32(nan, x, out);
}

/// σ(x) = 1 / (1 + e^(−x)): exp_f32 for float (so float loops vectorise), std::exp otherwise.
template <typename C>
[[gnu::always_inline]] inline C sigmoid_fn(C x) {
  if constexpr (std::is_same_v<C, float>) {
    return 1.0f / (1.0f + exp_f32(-x));
  } else {
    return C(1) / (C(1) + std::exp(-x));
  }
}

/// grad · d/dx silu(x) = grad·σ(x)·(1 + x·(1 − σ(x))), as PyTorch's silu_backward.
template <typename C>
[[gnu::always_inline]] inline C silu_grad_fn(C grad, C x) {
  const C s = sigmoid_fn(x);
  return grad * (s * (C(1) + x * (C(1) - s)));
}

}  // namespace tb::cpu
