// Registration entry points of the CPU kernels, and helpers shared by the kernel files.
#pragma once

#include <type_traits>

#include "engine/backends/cpu/loops.h"
#include "engine/core/tensor.h"
#include "engine/dispatch/dispatcher.h"

namespace tb::cpu {

/// Registers every CPU kernel at DispatchKey::CPU (built-in: the registrations are permanent):
/// the BLAS-backed linear algebra, and the other kernels at the CPU capability level chosen once
/// for the process (capability.h).
void register_cpu_kernels(dispatch::Dispatcher& d);

/// The GEMM-backed kernels (mm, addmm, bmm, baddbmm, syrk): one build, the BLAS picks its own
/// instructions.
void register_linalg_kernels(dispatch::Dispatcher& d);

template <typename T>
inline constexpr bool is_reduced_float_v =
    std::is_same_v<T, core::Half> || std::is_same_v<T, core::BFloat16>;

/// Converts one element between any two engine element types (16-bit floats via float).
template <typename D, typename S>
inline D convert(S s) {
  if constexpr (std::is_same_v<D, S>) {
    return s;
  } else if constexpr (is_reduced_float_v<S>) {
    return convert<D>(static_cast<float>(s));
  } else if constexpr (std::is_same_v<D, bool>) {
    return s != S(0);
  } else if constexpr (is_reduced_float_v<D>) {
    return D(static_cast<float>(s));
  } else {
    return static_cast<D>(s);
  }
}

/// `t` expanded to `shape`, or `t` itself when it already has that shape (no allocation).
inline Tensor expand_to(const Tensor& t, IntList shape) {
  if (t.sizes().size() == shape.size() &&
      std::equal(shape.begin(), shape.end(), t.sizes().begin())) {
    return t;
  }
  return t.expand(shape);
}

}  // namespace tb::cpu
