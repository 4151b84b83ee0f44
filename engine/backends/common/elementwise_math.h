// The arithmetic of the elementwise ops, written once for host and device code: the openreg
// backend's loops and the CUDA kernels call these, with the formulas of the CPU kernels
// (engine/backends/cpu/elementwise_kernels.cpp), so the parity test compares like with like.
// C is the compute type: float (also for float16/bfloat16 storage) or double.
#pragma once

#include <cmath>
#include <type_traits>

#if defined(__CUDACC__)
#define TB_EW_HD __host__ __device__
#else
#define TB_EW_HD
#endif

// Math functions: CUDA's float/double overloads in device code, the standard library's on the
// host.
#if defined(__CUDA_ARCH__)
#define TB_EW_M(f) ::f
#else
#define TB_EW_M(f) std::f
#endif

namespace tb::backends::ew {

/// Unary ops with a shared implementation (names as the dispatcher's ops).
enum class Unary : int {
  neg,
  abs,
  square,
  relu,
  exp,
  log,
  log1p,
  expm1,
  sqrt,
  rsqrt,
  reciprocal,
  sin,
  cos,
  tanh,
  sigmoid,
  erf,
  silu,
  gelu,
  gelu_tanh,
  kCount
};

/// Binary ops with a shared implementation (add/sub take alpha: a + alpha * b, a - alpha * b).
/// gelu_tanh_backward(grad, x) is gelu_tanh's gradient at x times grad; relu_backward(grad, x)
/// is 0 where x <= 0, else grad (PyTorch's threshold_backward at 0: a NaN passes grad);
/// silu_backward(grad, x) is silu's gradient at x times grad (PyTorch's silu_backward).
enum class Binary : int {
  add,
  sub,
  mul,
  div,
  maximum,
  minimum,
  pow,
  gelu_tanh_backward,
  relu_backward,
  silu_backward,
  kCount
};

/// Comparisons (results are bool; a NaN compares unequal to everything, as in C++).
enum class Compare : int { eq, ne, lt, le, gt, ge, kCount };

/// The dispatcher's name of a unary op.
inline const char* name(Unary op) {
  constexpr const char* kNames[] = {"neg",        "abs",   "square", "relu",     "exp",
                                    "log",        "log1p", "expm1",  "sqrt",     "rsqrt",
                                    "reciprocal", "sin",   "cos",    "tanh",     "sigmoid",
                                    "erf",        "silu",  "gelu",   "gelu_tanh"};
  return kNames[static_cast<int>(op)];
}

/// The dispatcher's name of a binary op.
inline const char* name(Binary op) {
  constexpr const char* kNames[] = {"add",           "sub",          "mul", "div",
                                    "maximum",       "minimum",      "pow", "gelu_tanh_backward",
                                    "relu_backward", "silu_backward"};
  return kNames[static_cast<int>(op)];
}

/// The dispatcher's name of a comparison.
inline const char* name(Compare op) {
  constexpr const char* kNames[] = {"eq", "ne", "lt", "le", "gt", "ge"};
  return kNames[static_cast<int>(op)];
}

/// a <op> b in compute type C.
template <typename C>
TB_EW_HD inline bool compare(Compare op, C a, C b) {
  switch (op) {
    case Compare::eq:
      return a == b;
    case Compare::ne:
      return a != b;
    case Compare::lt:
      return a < b;
    case Compare::le:
      return a <= b;
    case Compare::gt:
      return a > b;
    case Compare::ge:
      return a >= b;
    default:
      return false;
  }
}

template <typename C>
TB_EW_HD inline C sigmoid(C x) {
  return C(1) / (C(1) + TB_EW_M(exp)(-x));
}

/// grad · d/dx gelu_tanh(x) = grad·(σ + 2k·x·σ·(1 − σ)·(1 + 3c·x²)), σ = σ(2k·(x + c·x³)),
/// k = √(2/π), c = 0.044715.
template <typename C>
TB_EW_HD inline C gelu_tanh_grad(C grad, C x) {
  constexpr C k2 = static_cast<C>(2 * 0.79788456080286535588);
  constexpr C c = static_cast<C>(0.044715);
  const C x2 = x * x;
  const C s = sigmoid(k2 * x * (C(1) + c * x2));
  return grad * (s + k2 * x * s * (C(1) - s) * (C(1) + C(3) * c * x2));
}

/// grad · d/dx silu(x) = grad·σ(x)·(1 + x·(1 − σ(x))).
template <typename C>
TB_EW_HD inline C silu_grad(C grad, C x) {
  const C s = sigmoid(x);
  return grad * (s * (C(1) + x * (C(1) - s)));
}

/// op(x) in compute type C.
template <typename C>
TB_EW_HD inline C apply(Unary op, C x) {
  switch (op) {
    case Unary::neg:
      return -x;
    case Unary::abs:
      return TB_EW_M(fabs)(x);
    case Unary::square:
      return x * x;
    case Unary::relu:
      return x != x ? x : (x > C(0) ? x : C(0));  // NaN propagates
    case Unary::exp:
      return TB_EW_M(exp)(x);
    case Unary::log:
      return TB_EW_M(log)(x);
    case Unary::log1p:
      return TB_EW_M(log1p)(x);
    case Unary::expm1:
      return TB_EW_M(expm1)(x);
    case Unary::sqrt:
      return TB_EW_M(sqrt)(x);
    case Unary::rsqrt:
      return C(1) / TB_EW_M(sqrt)(x);
    case Unary::reciprocal:
      return C(1) / x;
    case Unary::sin:
      return TB_EW_M(sin)(x);
    case Unary::cos:
      return TB_EW_M(cos)(x);
    case Unary::tanh:
      return TB_EW_M(tanh)(x);
    case Unary::sigmoid:
      return sigmoid(x);
    case Unary::erf:
      return TB_EW_M(erf)(x);
    case Unary::silu:
      return x * sigmoid(x);
    case Unary::gelu:
      return C(0.5) * x * (C(1) + TB_EW_M(erf)(x * static_cast<C>(0.70710678118654752440)));
    case Unary::gelu_tanh:  // 0.5·x·(1 + tanh u) = x·σ(2u), u = √(2/π)·(x + 0.044715·x³)
      return x * sigmoid(static_cast<C>(2 * 0.79788456080286535588) * x *
                         (C(1) + static_cast<C>(0.044715) * x * x));
    default:
      return x;
  }
}

/// op(a, b) in compute type C; `alpha` scales b for add and sub.
template <typename C>
TB_EW_HD inline C apply(Binary op, C a, C b, C alpha) {
  switch (op) {
    case Binary::add:
      return alpha == C(1) ? a + b : a + alpha * b;
    case Binary::sub:
      return alpha == C(1) ? a - b : a + (-alpha) * b;
    case Binary::mul:
      return a * b;
    case Binary::div:
      return a / b;
    case Binary::maximum:
      return (a != a || b != b) ? (a != a ? a : b) : (a > b ? a : b);  // NaN propagates
    case Binary::minimum:
      return (a != a || b != b) ? (a != a ? a : b) : (a < b ? a : b);
    case Binary::pow:
      if constexpr (std::is_floating_point_v<C>) {
        return TB_EW_M(pow)(a, b);
      } else {
        return a;  // integer pow is the CPU's (it raises on negative exponents)
      }
    case Binary::gelu_tanh_backward:  // a = grad, b = x; floating point only
      if constexpr (std::is_floating_point_v<C>) {
        return gelu_tanh_grad(a, b);
      } else {
        return a;
      }
    case Binary::relu_backward:  // a = grad, b = x
      return b <= C(0) ? C(0) : a;
    case Binary::silu_backward:  // a = grad, b = x; floating point only
      if constexpr (std::is_floating_point_v<C>) {
        return silu_grad(a, b);
      } else {
        return a;
      }
    default:
      return a;
  }
}

}  // namespace tb::backends::ew
