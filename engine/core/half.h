// 16-bit floating-point storage types (IEEE binary16 and bfloat16) with exact conversions.
//
// Conversions from float round to nearest, ties to even; NaN stays NaN (sign kept, quiet bit
// set) and infinities stay infinite. Conversions to float are exact. Arithmetic on these types
// is done in float by the kernels; these structs are storage only.
#pragma once

#include <bit>
#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define TB_HD __host__ __device__
#else
#define TB_HD
#endif

namespace tb::core {

namespace detail {

TB_HD inline std::uint32_t f32_bits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  std::uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
#endif
}

TB_HD inline float f32_from_bits(std::uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
#endif
}

}  // namespace detail

/// float -> bfloat16 bits: round to nearest even; NaN -> quiet NaN with the same sign.
TB_HD inline std::uint16_t float_to_bf16_bits(float f) {
  const std::uint32_t u = detail::f32_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) {  // NaN
    return static_cast<std::uint16_t>((u >> 16) | 0x0040u);
  }
  const std::uint32_t rounding_bias = 0x7fffu + ((u >> 16) & 1u);
  return static_cast<std::uint16_t>((u + rounding_bias) >> 16);
}

/// bfloat16 bits -> float (exact).
TB_HD inline float bf16_bits_to_float(std::uint16_t h) {
  return detail::f32_from_bits(static_cast<std::uint32_t>(h) << 16);
}

/// float -> IEEE binary16 bits: round to nearest even, overflow to inf, gradual underflow to
/// subnormals, NaN -> quiet NaN with the same sign.
TB_HD inline std::uint16_t float_to_half_bits(float f) {
  const std::uint32_t u = detail::f32_bits(f);
  const std::uint16_t sign = static_cast<std::uint16_t>((u >> 16) & 0x8000u);
  const std::uint32_t abs = u & 0x7fffffffu;
  if (abs > 0x7f800000u) return static_cast<std::uint16_t>(sign | 0x7e00u | ((abs >> 13) & 0x3ffu));
  if (abs >= 0x477ff000u) return static_cast<std::uint16_t>(sign | 0x7c00u);  // >= 65520: inf
  if (abs < 0x38800000u) {
    // Result is subnormal (or zero): value = abs_float * 2^24 rounded to an integer, done exactly
    // by aligning the mantissa (with its implicit bit) and rounding to nearest even.
    if (abs < 0x33000000u) return sign;  // < 2^-25: rounds to zero (2^-25 itself ties to 0)
    const std::uint32_t exp = abs >> 23;
    const std::uint32_t mant = (abs & 0x7fffffu) | 0x800000u;
    const std::uint32_t shift = 126u - exp;  // 14..24 for exp in 102..112
    const std::uint32_t half_ulp = 1u << (shift - 1);
    const std::uint32_t rem = mant & ((1u << shift) - 1u);
    std::uint32_t q = mant >> shift;
    if (rem > half_ulp || (rem == half_ulp && (q & 1u))) ++q;
    return static_cast<std::uint16_t>(sign | q);
  }
  // Normal: rebias exponent (127 -> 15) and round the 13 dropped mantissa bits to nearest even.
  std::uint32_t h = ((abs >> 13) - (112u << 10));
  const std::uint32_t rem = abs & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) ++h;  // may carry into the exponent: fine
  return static_cast<std::uint16_t>(sign | h);
}

/// IEEE binary16 bits -> float (exact, subnormals included).
TB_HD inline float half_bits_to_float(std::uint16_t h) {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  const std::uint32_t exp = (h >> 10) & 0x1fu;
  std::uint32_t mant = h & 0x3ffu;
  if (exp == 0x1fu) return detail::f32_from_bits(sign | 0x7f800000u | (mant << 13));
  if (exp == 0) {
    if (mant == 0) return detail::f32_from_bits(sign);
    // Subnormal: value = mant * 2^-24, exact in float.
    const float v = static_cast<float>(mant) * 5.9604644775390625e-08f;
    return sign ? -v : v;
  }
  return detail::f32_from_bits(sign | ((exp + 112u) << 23) | (mant << 13));
}

/// IEEE binary16 storage type.
struct Half {
  std::uint16_t bits = 0;  ///< raw binary16 bit pattern (0 is +0.0)
  Half() = default;
  /// Rounds `f` to nearest even (see float_to_half_bits).
  TB_HD explicit Half(float f) : bits(float_to_half_bits(f)) {}
  /// The Half with bit pattern `b` (no conversion).
  TB_HD static Half from_bits(std::uint16_t b) {
    Half h;
    h.bits = b;
    return h;
  }
  /// Exact conversion to float.
  TB_HD operator float() const { return half_bits_to_float(bits); }
};

/// bfloat16 storage type (the upper half of a float32).
struct BFloat16 {
  std::uint16_t bits = 0;  ///< raw bfloat16 bit pattern (0 is +0.0)
  BFloat16() = default;
  /// Rounds `f` to nearest even (see float_to_bf16_bits).
  TB_HD explicit BFloat16(float f) : bits(float_to_bf16_bits(f)) {}
  /// The BFloat16 with bit pattern `b` (no conversion).
  TB_HD static BFloat16 from_bits(std::uint16_t b) {
    BFloat16 h;
    h.bits = b;
    return h;
  }
  /// Exact conversion to float.
  TB_HD operator float() const { return bf16_bits_to_float(bits); }
};

static_assert(sizeof(Half) == 2 && sizeof(BFloat16) == 2);

}  // namespace tb::core
