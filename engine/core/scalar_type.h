// ScalarType (the engine's dtypes), their stable public codes, type promotion and finfo.
//
// The internal enum may be reordered or extended freely; anything that leaves the process
// (checkpoints, the run store, the C API, other libraries) uses the stable public code, which
// never changes. The codes are PyTorch's ScalarType integers, so files and tools that speak
// PyTorch's numbering interoperate (see docs/decisions/0002-dtype-codes.md).
#pragma once

#include <cstdint>
#include <ostream>
#include <string>
#include <string_view>

#include "engine/core/error.h"
#include "engine/core/half.h"

namespace tb::core {

/// The engine's element types. Internal order; never persist these integers (use stable codes).
enum class ScalarType : std::uint8_t {
  Bool,
  UInt8,
  Int8,
  Int16,
  Int32,
  Int64,
  Float16,
  BFloat16,
  Float32,
  Float64,
};

/// Number of ScalarType values.
inline constexpr int kNumScalarTypes = 10;

/// Every ScalarType, in internal order (for tables and tests).
inline constexpr ScalarType kAllScalarTypes[kNumScalarTypes] = {
    ScalarType::Bool,    ScalarType::UInt8,  ScalarType::Int8,    ScalarType::Int16,
    ScalarType::Int32,   ScalarType::Int64,  ScalarType::Float16, ScalarType::BFloat16,
    ScalarType::Float32, ScalarType::Float64};

/// Size of one element in bytes.
std::size_t element_size(ScalarType t) noexcept;

/// Canonical lower-case name: "float32", "bfloat16", "int64", "bool", ...
std::string_view scalar_type_name(ScalarType t) noexcept;

/// Parses a dtype name. Accepts the canonical names and the common aliases "float", "double",
/// "half", "long", "int", "short", "byte", "char", "bf16", "fp16", "fp32", "fp64". Throws
/// tb::TypeError naming the text and the valid names otherwise.
ScalarType parse_scalar_type(std::string_view name);

/// True for float16, bfloat16, float32 and float64.
bool is_floating_point(ScalarType t) noexcept;
/// True for the integer dtypes (uint8 ... int64); bool counts only when `include_bool`.
bool is_integral(ScalarType t, bool include_bool = false) noexcept;

/// The stable public code of a dtype (PyTorch's numbering: uint8 0, int8 1, int16 2, int32 3,
/// int64 4, float16 5, float32 6, float64 7, bool 11, bfloat16 15). Never changes.
std::int32_t to_stable_code(ScalarType t) noexcept;

/// Inverse of to_stable_code. Throws tb::TypeError "unsupported dtype code N" for any code that
/// is not one of ours (including valid PyTorch codes of dtypes we do not support, e.g. complex).
ScalarType from_stable_code(std::int32_t code);

/// Result dtype of a binary operation between tensors of dtypes a and b (PyTorch's lattice:
/// bool < integers < floating; uint8 with int8 -> int16; float16 with bfloat16 -> float32).
ScalarType promote_types(ScalarType a, ScalarType b) noexcept;

/// Machine limits of a floating-point dtype, as torch.finfo
/// (https://pytorch.org/docs/stable/type_info.html#torch.finfo).
struct FInfo {
  int bits;                ///< storage bits
  double eps;              ///< gap between 1.0 and the next representable value above it
  double max;              ///< largest finite value
  double min;              ///< -max
  double tiny;             ///< smallest positive normal (same as smallest_normal)
  double smallest_normal;  ///< smallest positive normal
  double resolution;       ///< 10^-digits10
  ScalarType dtype;        ///< the dtype described
};

/// finfo of a floating-point dtype. Throws tb::TypeError naming the dtype for non-float types.
FInfo finfo(ScalarType t);

/// Integer limits of an integral dtype, as torch.iinfo. Throws tb::TypeError for float types.
struct IInfo {
  int bits;          ///< storage bits (8 for bool)
  std::int64_t min;  ///< smallest value (0 for bool and uint8)
  std::int64_t max;  ///< largest value (1 for bool)
  ScalarType dtype;  ///< the dtype described
};
/// iinfo of an integral dtype or bool. Throws tb::TypeError naming the dtype for float types.
IInfo iinfo(ScalarType t);

/// Writes scalar_type_name(t).
std::ostream& operator<<(std::ostream& os, ScalarType t);

/// Compile-time C++ type -> ScalarType mapping, in `value`. Specialised for bool, std::uint8_t,
/// std::int8_t, std::int16_t, std::int32_t, std::int64_t, Half, BFloat16, float and double; other
/// types are incomplete (a compile error).
template <typename T>
struct CppTypeToScalarType;
template <>
struct CppTypeToScalarType<bool> {
  static constexpr ScalarType value = ScalarType::Bool;
};
template <>
struct CppTypeToScalarType<std::uint8_t> {
  static constexpr ScalarType value = ScalarType::UInt8;
};
template <>
struct CppTypeToScalarType<std::int8_t> {
  static constexpr ScalarType value = ScalarType::Int8;
};
template <>
struct CppTypeToScalarType<std::int16_t> {
  static constexpr ScalarType value = ScalarType::Int16;
};
template <>
struct CppTypeToScalarType<std::int32_t> {
  static constexpr ScalarType value = ScalarType::Int32;
};
template <>
struct CppTypeToScalarType<std::int64_t> {
  static constexpr ScalarType value = ScalarType::Int64;
};
template <>
struct CppTypeToScalarType<Half> {
  static constexpr ScalarType value = ScalarType::Float16;
};
template <>
struct CppTypeToScalarType<BFloat16> {
  static constexpr ScalarType value = ScalarType::BFloat16;
};
template <>
struct CppTypeToScalarType<float> {
  static constexpr ScalarType value = ScalarType::Float32;
};
template <>
struct CppTypeToScalarType<double> {
  static constexpr ScalarType value = ScalarType::Float64;
};

/// The ScalarType of C++ element type T (CppTypeToScalarType<T>::value).
template <typename T>
inline constexpr ScalarType scalar_type_of = CppTypeToScalarType<T>::value;

}  // namespace tb::core

// Helper of the TB_DISPATCH_* macros (not for direct use): one `case` that binds `scalar_t`.
#define TB_DISPATCH_CASE_(ENUM, CPPTYPE, ...) \
  case ::tb::core::ScalarType::ENUM: {        \
    using scalar_t = CPPTYPE;                 \
    return __VA_ARGS__();                     \
  }

/// Calls `__VA_ARGS__` (a lambda taking no arguments that uses `scalar_t`) with `scalar_t` bound
/// to the C++ type of `TYPE`, and returns its result. `NAME` labels the error message.
/// Example: TB_DISPATCH_ALL_TYPES(t.dtype(), "add", [&] { kernel<scalar_t>(...); });
#define TB_DISPATCH_ALL_TYPES(TYPE, NAME, ...)                                        \
  [&] {                                                                               \
    switch (TYPE) {                                                                   \
      TB_DISPATCH_CASE_(Bool, bool, __VA_ARGS__)                                      \
      TB_DISPATCH_CASE_(UInt8, std::uint8_t, __VA_ARGS__)                             \
      TB_DISPATCH_CASE_(Int8, std::int8_t, __VA_ARGS__)                               \
      TB_DISPATCH_CASE_(Int16, std::int16_t, __VA_ARGS__)                             \
      TB_DISPATCH_CASE_(Int32, std::int32_t, __VA_ARGS__)                             \
      TB_DISPATCH_CASE_(Int64, std::int64_t, __VA_ARGS__)                             \
      TB_DISPATCH_CASE_(Float16, ::tb::core::Half, __VA_ARGS__)                       \
      TB_DISPATCH_CASE_(BFloat16, ::tb::core::BFloat16, __VA_ARGS__)                  \
      TB_DISPATCH_CASE_(Float32, float, __VA_ARGS__)                                  \
      TB_DISPATCH_CASE_(Float64, double, __VA_ARGS__)                                 \
    }                                                                                 \
    throw ::tb::InternalError(                                                        \
        ::tb::detail::str_cat("[", NAME, "] unhandled dtype (a bug in TrainBench)")); \
  }()

/// Like TB_DISPATCH_ALL_TYPES for the floating-point dtypes only; others raise tb::TypeError.
#define TB_DISPATCH_FLOATING_TYPES(TYPE, NAME, ...)                                            \
  [&] {                                                                                        \
    switch (TYPE) {                                                                            \
      TB_DISPATCH_CASE_(Float16, ::tb::core::Half, __VA_ARGS__)                                \
      TB_DISPATCH_CASE_(BFloat16, ::tb::core::BFloat16, __VA_ARGS__)                           \
      TB_DISPATCH_CASE_(Float32, float, __VA_ARGS__)                                           \
      TB_DISPATCH_CASE_(Float64, double, __VA_ARGS__)                                          \
      default:                                                                                 \
        throw ::tb::TypeError(::tb::detail::str_cat("[", NAME,                                 \
                                                    "] expected a floating-point dtype, got ", \
                                                    ::tb::core::scalar_type_name(TYPE)));      \
    }                                                                                          \
  }()
