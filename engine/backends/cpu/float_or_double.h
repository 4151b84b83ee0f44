// float_or_double: the dtype switch of the CPU kernels that compute only in float32 or float64
// (the GEMM-backed ones: linear algebra, convolution); their public ops convert 16-bit floats.
#pragma once

#include "engine/core/error.h"
#include "engine/core/scalar_type.h"

namespace tb::cpu {

/// Calls f(float{}) for Float32 or f(double{}) for Float64; any other dtype is a bug of the
/// caller (the op converts first) and throws tb::InternalError naming `op`.
template <typename F>
void float_or_double(core::ScalarType dt, const char* op, F&& f) {
  if (dt == core::ScalarType::Float32) {
    f(float{});
  } else if (dt == core::ScalarType::Float64) {
    f(double{});
  } else {
    throw InternalError(tb::detail::str_cat("[", op, "] unexpected compute dtype ", dt,
                                            " in the CPU kernel (a bug)"));
  }
}

}  // namespace tb::cpu
