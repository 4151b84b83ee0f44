// ScalarType: stable codes, names, promotion, finfo/iinfo (PyTorch's
// torch/headeronly/core/ScalarType.h; https://pytorch.org/docs/stable/type_info.html) and the
// exact fp16/bf16 conversions.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>

#include "engine/core/error.h"
#include "engine/core/half.h"
#include "engine/core/scalar_type.h"

namespace {

using tb::core::BFloat16;
using tb::core::Half;
using tb::core::ScalarType;
namespace core = tb::core;

TEST(StableCode, RoundTripsEveryDtype) {
  for (ScalarType t : core::kAllScalarTypes) {
    EXPECT_EQ(core::from_stable_code(core::to_stable_code(t)), t) << core::scalar_type_name(t);
  }
}

TEST(StableCode, ValuesAreFrozen) {
  // These numbers are persisted; they must never change (PyTorch's numbering).
  EXPECT_EQ(core::to_stable_code(ScalarType::UInt8), 0);
  EXPECT_EQ(core::to_stable_code(ScalarType::Int8), 1);
  EXPECT_EQ(core::to_stable_code(ScalarType::Int16), 2);
  EXPECT_EQ(core::to_stable_code(ScalarType::Int32), 3);
  EXPECT_EQ(core::to_stable_code(ScalarType::Int64), 4);
  EXPECT_EQ(core::to_stable_code(ScalarType::Float16), 5);
  EXPECT_EQ(core::to_stable_code(ScalarType::Float32), 6);
  EXPECT_EQ(core::to_stable_code(ScalarType::Float64), 7);
  EXPECT_EQ(core::to_stable_code(ScalarType::Bool), 11);
  EXPECT_EQ(core::to_stable_code(ScalarType::BFloat16), 15);
}

TEST(StableCode, UnknownCodeRaisesNamedError) {
  for (int code : {-1, 8, 9, 10, 12, 16, 23, 99}) {
    try {
      core::from_stable_code(code);
      FAIL() << "code " << code << " was accepted";
    } catch (const tb::TypeError& e) {
      EXPECT_EQ(std::string(e.what()), "unsupported dtype code " + std::to_string(code));
    }
  }
}

TEST(ScalarTypeNames, ParseCanonicalNamesAndAliases) {
  for (ScalarType t : core::kAllScalarTypes) {
    EXPECT_EQ(core::parse_scalar_type(core::scalar_type_name(t)), t);
  }
  EXPECT_EQ(core::parse_scalar_type("bf16"), ScalarType::BFloat16);
  EXPECT_EQ(core::parse_scalar_type("double"), ScalarType::Float64);
  try {
    core::parse_scalar_type("float8");
    FAIL();
  } catch (const tb::TypeError& e) {
    EXPECT_NE(std::string(e.what()).find("unknown dtype 'float8'"), std::string::npos);
  }
}

TEST(ScalarTypeSizes, ElementSizes) {
  EXPECT_EQ(core::element_size(ScalarType::Bool), 1u);
  EXPECT_EQ(core::element_size(ScalarType::Float16), 2u);
  EXPECT_EQ(core::element_size(ScalarType::BFloat16), 2u);
  EXPECT_EQ(core::element_size(ScalarType::Int32), 4u);
  EXPECT_EQ(core::element_size(ScalarType::Float64), 8u);
}

TEST(Promotion, FollowsPyTorchLattice) {
  using S = ScalarType;
  EXPECT_EQ(core::promote_types(S::Bool, S::Int8), S::Int8);
  EXPECT_EQ(core::promote_types(S::UInt8, S::Int8), S::Int16);
  EXPECT_EQ(core::promote_types(S::UInt8, S::Int32), S::Int32);
  EXPECT_EQ(core::promote_types(S::Int32, S::Int64), S::Int64);
  EXPECT_EQ(core::promote_types(S::Int64, S::Float16), S::Float16);
  EXPECT_EQ(core::promote_types(S::Float16, S::BFloat16), S::Float32);
  EXPECT_EQ(core::promote_types(S::BFloat16, S::Float64), S::Float64);
  EXPECT_EQ(core::promote_types(S::Float32, S::Float64), S::Float64);
  for (ScalarType a : core::kAllScalarTypes) {
    for (ScalarType b : core::kAllScalarTypes) {
      EXPECT_EQ(core::promote_types(a, b), core::promote_types(b, a)) << a << " " << b;
    }
  }
}

// torch.finfo's values (https://pytorch.org/docs/stable/type_info.html), exact.
TEST(FInfo, MatchesSpecTable) {
  const auto f32 = core::finfo(ScalarType::Float32);
  EXPECT_EQ(f32.bits, 32);
  EXPECT_EQ(f32.eps, 1.1920928955078125e-07);
  EXPECT_EQ(f32.max, 3.4028234663852886e+38);
  EXPECT_EQ(f32.min, -3.4028234663852886e+38);
  EXPECT_EQ(f32.tiny, 1.1754943508222875e-38);
  EXPECT_EQ(f32.smallest_normal, 1.1754943508222875e-38);
  EXPECT_EQ(f32.resolution, 1e-06);

  const auto f16 = core::finfo(ScalarType::Float16);
  EXPECT_EQ(f16.bits, 16);
  EXPECT_EQ(f16.eps, 0.0009765625);
  EXPECT_EQ(f16.max, 65504.0);
  EXPECT_EQ(f16.min, -65504.0);
  EXPECT_EQ(f16.tiny, 6.103515625e-05);
  EXPECT_EQ(f16.resolution, 0.001);

  const auto bf16 = core::finfo(ScalarType::BFloat16);
  EXPECT_EQ(bf16.bits, 16);
  EXPECT_EQ(bf16.eps, 0.0078125);
  EXPECT_EQ(bf16.max, 3.3895313892515355e+38);
  EXPECT_EQ(bf16.tiny, 1.1754943508222875e-38);
  EXPECT_EQ(bf16.resolution, 0.01);

  const auto f64 = core::finfo(ScalarType::Float64);
  EXPECT_EQ(f64.bits, 64);
  EXPECT_EQ(f64.eps, 2.220446049250313e-16);
  EXPECT_EQ(f64.max, 1.7976931348623157e+308);
  EXPECT_EQ(f64.tiny, 2.2250738585072014e-308);
  EXPECT_EQ(f64.resolution, 1e-15);
}

// eps is the gap between 1.0 and the next value (the definition corrected by PyTorch PR 160502,
// issue 160397), not the smallest x with 1 + x != 1 (the old wording's values, about eps/2).
TEST(FInfo, EpsIsTheGapAboveOne) {
  EXPECT_EQ(std::nextafter(1.0f, 2.0f) - 1.0f,
            static_cast<float>(core::finfo(ScalarType::Float32).eps));
  EXPECT_EQ(
      core::half_bits_to_float(static_cast<std::uint16_t>(core::float_to_half_bits(1.0f) + 1)) -
          1.0f,
      static_cast<float>(core::finfo(ScalarType::Float16).eps));
  EXPECT_EQ(
      core::bf16_bits_to_float(static_cast<std::uint16_t>(core::float_to_bf16_bits(1.0f) + 1)) -
          1.0f,
      static_cast<float>(core::finfo(ScalarType::BFloat16).eps));
  // The old definition's value for float32 does change 1.0f, and is below eps.
  EXPECT_LT(5.960465188081798e-08, core::finfo(ScalarType::Float32).eps);
  EXPECT_NE(1.0f + std::nextafter(5.960465188081798e-08f, 1.0f), 1.0f);
}

TEST(FInfo, IntegerDtypeIsRejected) {
  try {
    core::finfo(ScalarType::Int32);
    FAIL();
  } catch (const tb::TypeError& e) {
    EXPECT_NE(std::string(e.what()).find("[finfo] int32 is not a floating-point dtype"),
              std::string::npos);
  }
  EXPECT_EQ(core::iinfo(ScalarType::Int8).min, -128);
  EXPECT_EQ(core::iinfo(ScalarType::UInt8).max, 255);
  EXPECT_EQ(core::iinfo(ScalarType::Int64).max, std::numeric_limits<std::int64_t>::max());
  EXPECT_THROW(core::iinfo(ScalarType::Float32), tb::TypeError);
}

// ---- conversions --------------------------------------------------------------------------------

TEST(Half, EveryBitPatternRoundTripsThroughFloat) {
  for (std::uint32_t b = 0; b <= 0xffffu; ++b) {
    const auto h = static_cast<std::uint16_t>(b);
    const float f = core::half_bits_to_float(h);
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(core::half_bits_to_float(core::float_to_half_bits(f))));
      EXPECT_EQ(core::float_to_half_bits(f) & 0x8000u, h & 0x8000u) << "sign of NaN " << b;
      continue;
    }
    ASSERT_EQ(core::float_to_half_bits(f), h) << "pattern 0x" << std::hex << b;
  }
}

TEST(Half, RoundsToNearestEven) {
  // 1 + 2^-11 is exactly between 1 and 1 + 2^-10: ties to even (1.0).
  EXPECT_EQ(static_cast<float>(Half(1.0f + std::ldexp(1.0f, -11))), 1.0f);
  // 1 + 3*2^-11 is between 1+2^-10 (odd mantissa) and 1+2^-9: ties to even (1 + 2^-9).
  EXPECT_EQ(static_cast<float>(Half(1.0f + 3 * std::ldexp(1.0f, -11))),
            1.0f + std::ldexp(1.0f, -9));
  // Just above the tie rounds up.
  EXPECT_EQ(static_cast<float>(Half(1.0f + std::ldexp(1.0f, -11) + std::ldexp(1.0f, -20))),
            1.0f + std::ldexp(1.0f, -10));
  // Overflow: 65504 is max; 65519.99 rounds to it; 65520 rounds to inf.
  EXPECT_EQ(static_cast<float>(Half(65519.0f)), 65504.0f);
  EXPECT_TRUE(std::isinf(static_cast<float>(Half(65520.0f))));
  EXPECT_TRUE(std::isinf(static_cast<float>(Half(-1e10f))));
  // Subnormals: 2^-24 is the smallest; half of it ties to zero; 1.5 * 2^-24 ties to 2 * 2^-24.
  EXPECT_EQ(static_cast<float>(Half(std::ldexp(1.0f, -24))), std::ldexp(1.0f, -24));
  EXPECT_EQ(static_cast<float>(Half(std::ldexp(1.0f, -25))), 0.0f);
  EXPECT_EQ(static_cast<float>(Half(1.5f * std::ldexp(1.0f, -24))), std::ldexp(1.0f, -23));
  EXPECT_EQ(core::float_to_half_bits(-0.0f), 0x8000u);
}

TEST(Half, InfAndNaNArePreserved) {
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(core::float_to_half_bits(inf), 0x7c00u);
  EXPECT_EQ(core::float_to_half_bits(-inf), 0xfc00u);
  EXPECT_TRUE(std::isnan(static_cast<float>(Half(std::numeric_limits<float>::quiet_NaN()))));
  EXPECT_TRUE(std::isnan(static_cast<float>(Half(-std::numeric_limits<float>::quiet_NaN()))));
  // A signalling NaN whose payload sits in the low bits must not turn into infinity.
  EXPECT_TRUE(std::isnan(static_cast<float>(Half(std::bit_cast<float>(0x7f800001u)))));
}

TEST(BFloat16, EveryBitPatternRoundTripsThroughFloat) {
  for (std::uint32_t b = 0; b <= 0xffffu; ++b) {
    const auto h = static_cast<std::uint16_t>(b);
    const float f = core::bf16_bits_to_float(h);
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(core::bf16_bits_to_float(core::float_to_bf16_bits(f))));
      continue;
    }
    ASSERT_EQ(core::float_to_bf16_bits(f), h) << "pattern 0x" << std::hex << b;
  }
}

TEST(BFloat16, RoundsToNearestEvenAndKeepsSpecials) {
  // 1 + 2^-8 is the tie between 1 and 1 + 2^-7: ties to even (1.0).
  EXPECT_EQ(static_cast<float>(BFloat16(1.0f + std::ldexp(1.0f, -8))), 1.0f);
  EXPECT_EQ(static_cast<float>(BFloat16(1.0f + 3 * std::ldexp(1.0f, -8))),
            1.0f + std::ldexp(1.0f, -6));
  EXPECT_EQ(static_cast<float>(BFloat16(1.0f + std::ldexp(1.0f, -8) + std::ldexp(1.0f, -20))),
            1.0f + std::ldexp(1.0f, -7));
  EXPECT_TRUE(std::isinf(static_cast<float>(BFloat16(std::numeric_limits<float>::infinity()))));
  // NaN whose payload is only in the low 16 bits stays NaN (plain truncation would make inf).
  EXPECT_TRUE(std::isnan(static_cast<float>(BFloat16(std::bit_cast<float>(0x7f800001u)))));
  // The largest finite float rounds up to inf, like PyTorch.
  EXPECT_TRUE(std::isinf(static_cast<float>(BFloat16(std::numeric_limits<float>::max()))));
  EXPECT_EQ(static_cast<double>(static_cast<float>(BFloat16(3.3895313892515355e+38f))),
            core::finfo(ScalarType::BFloat16).max);
}

}  // namespace
