// ScalarType names, stable codes, promotion and finfo/iinfo tables.
#include "engine/core/scalar_type.h"

#include <cmath>
#include <limits>

#include "engine/core/error.h"

namespace tb::core {

namespace {

struct TypeRow {
  ScalarType type;
  std::string_view name;
  std::size_t size;
  std::int32_t stable_code;
};

// Stable codes are PyTorch's c10::ScalarType integers; they must never change.
constexpr TypeRow kRows[kNumScalarTypes] = {
    {ScalarType::Bool, "bool", 1, 11},      {ScalarType::UInt8, "uint8", 1, 0},
    {ScalarType::Int8, "int8", 1, 1},       {ScalarType::Int16, "int16", 2, 2},
    {ScalarType::Int32, "int32", 4, 3},     {ScalarType::Int64, "int64", 8, 4},
    {ScalarType::Float16, "float16", 2, 5}, {ScalarType::BFloat16, "bfloat16", 2, 15},
    {ScalarType::Float32, "float32", 4, 6}, {ScalarType::Float64, "float64", 8, 7},
};

const TypeRow& row(ScalarType t) noexcept {
  return kRows[static_cast<int>(t)];
}

// Rank inside each kind, for "the wider wins".
int float_rank(ScalarType t) {
  switch (t) {
    case ScalarType::Float16:
    case ScalarType::BFloat16:
      return 1;
    case ScalarType::Float32:
      return 2;
    case ScalarType::Float64:
      return 3;
    default:
      return 0;
  }
}

}  // namespace

std::size_t element_size(ScalarType t) noexcept {
  return row(t).size;
}

std::string_view scalar_type_name(ScalarType t) noexcept {
  return row(t).name;
}

ScalarType parse_scalar_type(std::string_view name) {
  for (const auto& r : kRows) {
    if (r.name == name) return r.type;
  }
  struct Alias {
    std::string_view name;
    ScalarType type;
  };
  static constexpr Alias kAliases[] = {
      {"float", ScalarType::Float32},  {"fp32", ScalarType::Float32},
      {"double", ScalarType::Float64}, {"fp64", ScalarType::Float64},
      {"half", ScalarType::Float16},   {"fp16", ScalarType::Float16},
      {"bf16", ScalarType::BFloat16},  {"long", ScalarType::Int64},
      {"int", ScalarType::Int32},      {"short", ScalarType::Int16},
      {"byte", ScalarType::UInt8},     {"char", ScalarType::Int8},
  };
  for (const auto& a : kAliases) {
    if (a.name == name) return a.type;
  }
  throw TypeError(tb::detail::str_cat(
      "[dtype] unknown dtype '", name,
      "' (expected one of bool, uint8, int8, int16, int32, int64, float16, bfloat16, float32, "
      "float64)"));
}

bool is_floating_point(ScalarType t) noexcept {
  return float_rank(t) > 0;
}

bool is_integral(ScalarType t, bool include_bool) noexcept {
  if (t == ScalarType::Bool) return include_bool;
  return !is_floating_point(t);
}

std::int32_t to_stable_code(ScalarType t) noexcept {
  return row(t).stable_code;
}

ScalarType from_stable_code(std::int32_t code) {
  for (const auto& r : kRows) {
    if (r.stable_code == code) return r.type;
  }
  throw TypeError(tb::detail::str_cat("unsupported dtype code ", code));
}

ScalarType promote_types(ScalarType a, ScalarType b) noexcept {
  if (a == b) return a;
  if (a == ScalarType::Bool) return b;
  if (b == ScalarType::Bool) return a;
  const bool fa = is_floating_point(a);
  const bool fb = is_floating_point(b);
  if (fa && fb) {
    const int ra = float_rank(a);
    const int rb = float_rank(b);
    if (ra == rb) return ScalarType::Float32;  // float16 with bfloat16
    return ra > rb ? a : b;
  }
  if (fa) return a;
  if (fb) return b;
  // Both integral (bool excluded). uint8 with a signed type: the signed type if wider, else int16.
  if (a == ScalarType::UInt8 || b == ScalarType::UInt8) {
    const ScalarType other = a == ScalarType::UInt8 ? b : a;
    return other == ScalarType::Int8 ? ScalarType::Int16 : other;
  }
  return element_size(a) >= element_size(b) ? a : b;
}

FInfo finfo(ScalarType t) {
  switch (t) {
    case ScalarType::Float32: {
      using L = std::numeric_limits<float>;
      return {32, L::epsilon(), L::max(), -L::max(), L::min(), L::min(), 1e-6, t};
    }
    case ScalarType::Float64: {
      using L = std::numeric_limits<double>;
      return {64, L::epsilon(), L::max(), -L::max(), L::min(), L::min(), 1e-15, t};
    }
    case ScalarType::Float16: {
      // 10 mantissa bits, max exponent 15: max = (2 - 2^-10) * 2^15, digits10 = 3.
      const double max = (2.0 - std::ldexp(1.0, -10)) * std::ldexp(1.0, 15);
      return {16, std::ldexp(1.0, -10), max, -max, std::ldexp(1.0, -14), std::ldexp(1.0, -14), 1e-3,
              t};
    }
    case ScalarType::BFloat16: {
      // 7 mantissa bits, float32's exponent range: max = (2 - 2^-7) * 2^127, digits10 = 2.
      const double max = (2.0 - std::ldexp(1.0, -7)) * std::ldexp(1.0, 127);
      return {
          16, std::ldexp(1.0, -7), max, -max, std::ldexp(1.0, -126), std::ldexp(1.0, -126), 1e-2,
          t};
    }
    default:
      throw TypeError(
          tb::detail::str_cat("[finfo] ", scalar_type_name(t),
                              " is not a floating-point dtype (use iinfo for integers)"));
  }
}

IInfo iinfo(ScalarType t) {
  switch (t) {
    case ScalarType::Bool:
      return {8, 0, 1, t};
    case ScalarType::UInt8:
      return {8, 0, 255, t};
    case ScalarType::Int8:
      return {8, -128, 127, t};
    case ScalarType::Int16:
      return {16, std::numeric_limits<std::int16_t>::min(),
              std::numeric_limits<std::int16_t>::max(), t};
    case ScalarType::Int32:
      return {32, std::numeric_limits<std::int32_t>::min(),
              std::numeric_limits<std::int32_t>::max(), t};
    case ScalarType::Int64:
      return {64, std::numeric_limits<std::int64_t>::min(),
              std::numeric_limits<std::int64_t>::max(), t};
    default:
      throw TypeError(
          tb::detail::str_cat("[iinfo] ", scalar_type_name(t),
                              " is not an integer dtype (use finfo for floating point)"));
  }
}

std::ostream& operator<<(std::ostream& os, ScalarType t) {
  return os << scalar_type_name(t);
}

}  // namespace tb::core
