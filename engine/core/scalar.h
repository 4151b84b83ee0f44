// Scalar: a single number (bool, integer or floating) passed to ops such as fill or add(alpha).
#pragma once

#include <cstdint>
#include <ostream>
#include <type_traits>

#include "engine/core/scalar_type.h"

namespace tb::core {

/// A dynamically typed number. Integers are kept exactly (int64); floating values as double.
class Scalar {
 public:
  /// Which member holds the value: Bool and Int use the int64, Float the double.
  enum class Kind : std::uint8_t { Bool, Int, Float };

  /// Integer zero.
  Scalar() : Scalar(std::int64_t{0}) {}
  /// A boolean (stored as 0 or 1).
  Scalar(bool v) : kind_(Kind::Bool) { i_ = v ? 1 : 0; }  // NOLINT(google-explicit-constructor)
  /// Any integral type other than bool, kept exactly as int64 (uint64 values above INT64_MAX
  /// wrap).
  template <typename T,
            std::enable_if_t<std::is_integral_v<T> && !std::is_same_v<T, bool>, int> = 0>
  Scalar(T v) : kind_(Kind::Int) {  // NOLINT(google-explicit-constructor)
    i_ = static_cast<std::int64_t>(v);
  }
  /// Any floating-point type, stored as double (long double is rounded).
  template <typename T, std::enable_if_t<std::is_floating_point_v<T>, int> = 0>
  Scalar(T v) : kind_(Kind::Float) {  // NOLINT(google-explicit-constructor)
    d_ = static_cast<double>(v);
  }

  /// The kind of value held.
  Kind kind() const noexcept { return kind_; }
  /// True for Kind::Float.
  bool is_floating_point() const noexcept { return kind_ == Kind::Float; }
  /// True for Kind::Int only (a bool is not integral here).
  bool is_integral() const noexcept { return kind_ == Kind::Int; }
  /// True for Kind::Bool.
  bool is_bool() const noexcept { return kind_ == Kind::Bool; }

  /// The value as double (integers beyond 2^53 are rounded).
  double to_double() const noexcept { return kind_ == Kind::Float ? d_ : static_cast<double>(i_); }
  /// The value as int64; a floating value is truncated toward zero (undefined behaviour when it
  /// is NaN or out of int64 range).
  std::int64_t to_int() const noexcept {
    return kind_ == Kind::Float ? static_cast<std::int64_t>(d_) : i_;
  }
  /// False for 0 (or 0.0), true otherwise (NaN is true).
  bool to_bool() const noexcept { return kind_ == Kind::Float ? d_ != 0.0 : i_ != 0; }

  /// The value converted to the C++ element type T (half/bfloat16 via float).
  template <typename T>
  T to() const noexcept {
    if constexpr (std::is_same_v<T, bool>) {
      return to_bool();
    } else if constexpr (std::is_integral_v<T>) {
      return static_cast<T>(to_int());
    } else if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>) {
      return T(static_cast<float>(to_double()));
    } else {
      return static_cast<T>(to_double());
    }
  }

  /// The dtype a tensor made from this scalar alone would have (bool, int64 or float32 default).
  ScalarType default_dtype() const noexcept {
    switch (kind_) {
      case Kind::Bool:
        return ScalarType::Bool;
      case Kind::Int:
        return ScalarType::Int64;
      case Kind::Float:
        return ScalarType::Float32;
    }
    return ScalarType::Float32;
  }

  /// Writes the value: "true"/"false", the integer, or the double with the stream's format.
  friend std::ostream& operator<<(std::ostream& os, const Scalar& s) {
    if (s.kind_ == Kind::Float) return os << s.d_;
    if (s.kind_ == Kind::Bool) return os << (s.i_ != 0 ? "true" : "false");
    return os << s.i_;
  }

 private:
  Kind kind_;
  union {
    std::int64_t i_;
    double d_;
  };
};

}  // namespace tb::core
