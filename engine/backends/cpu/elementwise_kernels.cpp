// CPU elementwise kernels: unary, binary, comparisons, in-place updates, copy/cast, fill,
// where and masked_fill. Inputs arrive in one dtype (the ops layer promotes); kernels broadcast.
#include <cmath>
#include <cstring>
#include <type_traits>

#include "engine/backends/cpu/capability_kernels.h"
#include "engine/backends/cpu/vec_math.h"
#include "engine/dispatch/op_signatures.h"

namespace tb::cpu::TB_CPU_CAPABILITY {

using core::ScalarType;
using dispatch::DispatchKey;
namespace sig = ops::sig;

namespace {

// ---- unary functors (compute type C) ------------------------------------------------------------

template <typename C>
C relu_fn(C x) {
  if constexpr (std::is_floating_point_v<C>) {
    // One compare and select (vectorises; a NaN is not <= 0, so it passes through).
    return x <= C(0) ? C(0) : x;
  } else {
    return x > C(0) ? x : C(0);
  }
}

template <typename C>
C sign_fn(C x) {
  if constexpr (std::is_unsigned_v<C>) {
    return x > C(0) ? C(1) : C(0);
  } else if constexpr (std::is_floating_point_v<C>) {
    return std::isnan(x) ? x : static_cast<C>((x > C(0)) - (x < C(0)));
  } else {
    return static_cast<C>((x > C(0)) - (x < C(0)));
  }
}

template <typename C>
C abs_fn(C x) {
  if constexpr (std::is_unsigned_v<C>) {
    return x;
  } else if constexpr (std::is_integral_v<C>) {
    return static_cast<C>(x < 0 ? -x : x);
  } else {
    return std::abs(x);
  }
}

// sigmoid_fn (vec_math.h) and the Ops built on exp_f32 are always inlined: left to its
// heuristics, GCC kept them a call per element in this large file, so SiLU's loops (forward and
// backward) stayed scalar and took a quarter of a transformer's step.

template <typename C>
C gelu_fn(C x) {
  constexpr C kInvSqrt2 = static_cast<C>(0.70710678118654752440);
  return C(0.5) * x * (C(1) + std::erf(x * kInvSqrt2));
}

// GELU with the tanh approximation (GPT-2's "gelu_new"; torch.nn.functional.gelu(x,
// approximate="tanh")): 0.5·x·(1 + tanh u), u = √(2/π)·(x + 0.044715·x³), computed as x·σ(2u)
// (0.5·(1 + tanh u) = σ(2u)) so that float loops vectorise through sigmoid_fn; glibc's tanhf
// was a call per element and a tenth of a GPT-2 small step.
constexpr double kGeluTanh2K = 2 * 0.79788456080286535588;  // 2·√(2/π)
constexpr double kGeluTanhC = 0.044715;

template <typename C>
[[gnu::always_inline]] inline C gelu_tanh_fn(C x) {
  return x * sigmoid_fn(static_cast<C>(kGeluTanh2K) * x * (C(1) + C(kGeluTanhC) * x * x));
}

// grad · d/dx gelu_tanh(x) = grad·(σ + 2k·x·σ·(1 − σ)·(1 + 3c·x²)), σ = σ(2u) as above.
template <typename C>
[[gnu::always_inline]] inline C gelu_tanh_grad_fn(C grad, C x) {
  constexpr C k2 = static_cast<C>(kGeluTanh2K), c = static_cast<C>(kGeluTanhC);
  const C x2 = x * x;
  const C s = sigmoid_fn(k2 * x * (C(1) + c * x2));
  return grad * (s + k2 * x * s * (C(1) - s) * (C(1) + C(3) * c * x2));
}

// The fused activation gradients' formulas (always inlined, so the float loops vectorise).
struct GeluTanhGradOp {
  template <typename C>
  [[gnu::always_inline]] C operator()(C grad, C x) const {
    return gelu_tanh_grad_fn(grad, x);
  }
};
struct SiluGradOp {
  template <typename C>
  [[gnu::always_inline]] C operator()(C grad, C x) const {
    return silu_grad_fn(grad, x);
  }
};

// grad · f'(x) for an activation gradient Op (computed in the compute type), broadcasting as mul.
template <typename Op>
Tensor activation_grad_kernel(const char* name, const Tensor& g, const Tensor& x) {
  const auto shape = core::broadcast_shapes(g.sizes(), x.sizes(), name);
  Tensor out = Tensor::empty(shape.span(), g.dtype(), g.device());
  const Tensor u = expand_to(g, shape.span()), v = expand_to(x, shape.span());
  TB_DISPATCH_FLOATING_TYPES(g.dtype(), name, [&] {
    using C = compute_t<scalar_t>;
    binary_loop<scalar_t, scalar_t>(out, u, v, [](scalar_t a, scalar_t b) {
      return convert<scalar_t>(Op{}(static_cast<C>(a), static_cast<C>(b)));
    });
  });
  return out;
}

struct NegOp {
  template <typename C>
  C operator()(C x) const {
    return static_cast<C>(-x);
  }
};
struct AbsOp {
  template <typename C>
  C operator()(C x) const {
    return abs_fn(x);
  }
};
struct SignOp {
  template <typename C>
  C operator()(C x) const {
    return sign_fn(x);
  }
};
struct SquareOp {
  template <typename C>
  C operator()(C x) const {
    return static_cast<C>(x * x);
  }
};
struct ReluOp {
  template <typename C>
  C operator()(C x) const {
    return relu_fn(x);
  }
};
struct ExpOp {
  template <typename C>
  [[gnu::always_inline]] C operator()(C x) const {
    if constexpr (std::is_same_v<C, float>) {
      return exp_f32(x);  // vectorisable (vec_math.h)
    } else {
      return std::exp(x);
    }
  }
};
struct LogOp {
  template <typename C>
  C operator()(C x) const {
    return std::log(x);
  }
};
struct Log1pOp {
  template <typename C>
  C operator()(C x) const {
    return std::log1p(x);
  }
};
struct Expm1Op {
  template <typename C>
  C operator()(C x) const {
    return std::expm1(x);
  }
};
struct SqrtOp {
  template <typename C>
  C operator()(C x) const {
    return std::sqrt(x);
  }
};
struct RsqrtOp {
  template <typename C>
  C operator()(C x) const {
    return C(1) / std::sqrt(x);
  }
};
struct ReciprocalOp {
  template <typename C>
  C operator()(C x) const {
    return C(1) / x;
  }
};
struct SinOp {
  template <typename C>
  C operator()(C x) const {
    return std::sin(x);
  }
};
struct CosOp {
  template <typename C>
  C operator()(C x) const {
    return std::cos(x);
  }
};
struct TanhOp {
  template <typename C>
  C operator()(C x) const {
    return std::tanh(x);
  }
};
struct SigmoidOp {
  template <typename C>
  [[gnu::always_inline]] C operator()(C x) const {
    return sigmoid_fn(x);
  }
};
struct ErfOp {
  template <typename C>
  C operator()(C x) const {
    return std::erf(x);
  }
};
struct SiluOp {
  template <typename C>
  [[gnu::always_inline]] C operator()(C x) const {
    return x * sigmoid_fn(x);
  }
};
struct GeluOp {
  template <typename C>
  C operator()(C x) const {
    return gelu_fn(x);
  }
};
struct GeluTanhOp {
  template <typename C>
  [[gnu::always_inline]] C operator()(C x) const {
    return gelu_tanh_fn(x);
  }
};

template <typename Op>
Tensor unary_kernel(const char* name, const Tensor& a, bool float_only) {
  TB_CHECK_T(TypeError, !float_only || core::is_floating_point(a.dtype()), "[", name,
             "] expects a floating-point tensor, got ", a.dtype());
  Tensor out = Tensor::empty(a.sizes(), a.dtype(), a.device());
  TB_DISPATCH_ALL_TYPES(a.dtype(), name, [&] {
    if constexpr (std::is_same_v<scalar_t, bool>) {
      throw TypeError(tb::detail::str_cat("[", name, "] is not supported for bool tensors"));
    } else {
      using C = compute_t<scalar_t>;
      // The element function is inlined into the loop so that the loop vectorises (see
      // sigmoid_fn).
      unary_loop<scalar_t, scalar_t>(
          out, a, [](scalar_t x) __attribute__((always_inline)) {
            return convert<scalar_t>(static_cast<C>(Op{}(static_cast<C>(x))));
          });
    }
  });
  return out;
}

// ---- binary -------------------------------------------------------------------------------------

template <typename C>
C pow_fn(C a, C b) {
  if constexpr (std::is_floating_point_v<C>) {
    return std::pow(a, b);
  } else if constexpr (std::is_same_v<C, bool>) {
    return a || !b;
  } else {
    if constexpr (std::is_signed_v<C>) {
      if (b < 0) {
        if (a == 1) return 1;
        if (a == -1) return (b % 2 == 0) ? 1 : -1;
        throw ValueError("[pow] integers to negative integer powers are not allowed");
      }
    }
    C result = 1;
    C base = a;
    auto e = b;
    while (e > 0) {
      if (e & 1) result = static_cast<C>(result * base);
      base = static_cast<C>(base * base);
      e = static_cast<C>(e >> 1);
    }
    return result;
  }
}

template <typename C>
C max_fn(C a, C b) {
  if constexpr (std::is_floating_point_v<C>) {
    if (std::isnan(a) || std::isnan(b)) return std::numeric_limits<C>::quiet_NaN();
  }
  return a > b ? a : b;
}

template <typename C>
C min_fn(C a, C b) {
  if constexpr (std::is_floating_point_v<C>) {
    if (std::isnan(a) || std::isnan(b)) return std::numeric_limits<C>::quiet_NaN();
  }
  return a < b ? a : b;
}

// Runs f(C a, C b) -> C over the broadcast of a and b; the result has a's dtype.
template <typename F>
Tensor binary_kernel(const char* name, const Tensor& a, const Tensor& b, F f) {
  const auto shape = core::broadcast_shapes(a.sizes(), b.sizes(), name);
  Tensor out = Tensor::empty(shape.span(), a.dtype(), a.device());
  const Tensor x = expand_to(a, shape.span());
  const Tensor y = expand_to(b, shape.span());
  TB_DISPATCH_ALL_TYPES(a.dtype(), name, [&] {
    using C = compute_t<scalar_t>;
    binary_loop<scalar_t, scalar_t>(out, x, y, [&f](scalar_t u, scalar_t v) {
      return convert<scalar_t>(f(static_cast<C>(u), static_cast<C>(v)));
    });
  });
  return out;
}

template <typename Cmp>
Tensor compare_kernel(const char* name, const Tensor& a, const Tensor& b, Cmp cmp) {
  const auto shape = core::broadcast_shapes(a.sizes(), b.sizes(), name);
  Tensor out = Tensor::empty(shape.span(), ScalarType::Bool, a.device());
  const Tensor x = expand_to(a, shape.span());
  const Tensor y = expand_to(b, shape.span());
  TB_DISPATCH_ALL_TYPES(a.dtype(), name, [&] {
    using C = compute_t<scalar_t>;
    binary_loop<bool, scalar_t>(out, x, y, [&cmp](scalar_t u, scalar_t v) {
      return cmp(static_cast<C>(u), static_cast<C>(v));
    });
  });
  return out;
}

template <typename T>
Tensor add_typed(const char* name, const Tensor& a, const Tensor& b, const core::Scalar& alpha,
                 int sign) {
  using C = compute_t<T>;
  if constexpr (std::is_same_v<C, bool>) {
    return binary_kernel(name, a, b, [](C u, C v) { return static_cast<C>(u || v); });
  } else if constexpr (std::is_floating_point_v<C>) {
    const C al = static_cast<C>(alpha.to_double() * sign);
    if (al == C(1)) return binary_kernel(name, a, b, [](C u, C v) { return u + v; });
    return binary_kernel(name, a, b, [al](C u, C v) { return u + al * v; });
  } else {
    const auto al = static_cast<C>(alpha.to_int() * sign);
    return binary_kernel(name, a, b, [al](C u, C v) { return static_cast<C>(u + al * v); });
  }
}

Tensor add_kernel(const char* name, const Tensor& a, const Tensor& b, const core::Scalar& alpha,
                  int sign) {
  return TB_DISPATCH_ALL_TYPES(
      a.dtype(), name, [&]() -> Tensor { return add_typed<scalar_t>(name, a, b, alpha, sign); });
}

// In place: a = f(a, b) with b broadcast to a's shape.
template <typename F>
void inplace_binary(const char* name, Tensor& a, const Tensor& b, F f) {
  const Tensor y = expand_to(b, a.sizes());
  TB_DISPATCH_ALL_TYPES(a.dtype(), name, [&] {
    using C = compute_t<scalar_t>;
    binary_loop<scalar_t, scalar_t>(a, a, y, [&f](scalar_t u, scalar_t v) {
      return convert<scalar_t>(f(static_cast<C>(u), static_cast<C>(v)));
    });
  });
}

// ---- copy / fill --------------------------------------------------------------------------------

// dst (element type D) := src converted elementwise; the second dtype dispatch lives here so
// the two dispatch levels do not shadow each other's scalar_t.
template <typename D>
void copy_from(Tensor& dst, const Tensor& src) {
  TB_DISPATCH_ALL_TYPES(src.dtype(), "copy_", [&] {
    unary_loop<D, scalar_t>(dst, src, [](scalar_t v) { return convert<D>(v); });
  });
}

void copy_kernel(Tensor& dst, const Tensor& src) {
  TB_CHECK(src.device().is_cpu() && dst.device().is_cpu(),
           "[copy_] the CPU kernel got a non-CPU tensor (", src.device(), " -> ", dst.device(),
           ")");
  const Tensor s = expand_to(src, dst.sizes());
  if (dst.dtype() == s.dtype() && dst.is_contiguous() && s.is_contiguous()) {
    if (dst.data_ptr() == s.data_ptr()) return;
    const std::int64_t n = dst.numel();
    const std::int64_t es = static_cast<std::int64_t>(dst.element_size());
    char* d = static_cast<char*>(dst.data_ptr());
    const char* p = static_cast<const char*>(s.data_ptr());
    core::parallel_for(0, n, 1 << 16, [&](std::int64_t b, std::int64_t e) {
      std::memcpy(d + b * es, p + b * es, static_cast<std::size_t>((e - b) * es));
    });
    return;
  }
  TB_DISPATCH_ALL_TYPES(dst.dtype(), "copy_", [&] { copy_from<scalar_t>(dst, s); });
}

template <typename T>
void fill_typed(Tensor& t, T value) {
  LoopGeometry<1> g(t.sizes(), {&t});
  for_each_row<1>(
      g, {static_cast<char*>(t.data_ptr())}, {sizeof(T)},
      [value](const std::array<char*, 1>& p, const std::array<std::int64_t, 1>& s, std::int64_t n) {
        T* o = reinterpret_cast<T*>(p[0]);
        if (s[0] == 1) {
          for (std::int64_t i = 0; i < n; ++i)
            o[i] = value;
        } else {
          for (std::int64_t i = 0; i < n; ++i)
            o[i * s[0]] = value;
        }
      });
}

void fill_kernel(Tensor& t, const core::Scalar& value) {
  if (t.numel() == 0) return;
  TB_DISPATCH_ALL_TYPES(t.dtype(), "fill_", [&] { fill_typed<scalar_t>(t, value.to<scalar_t>()); });
}

// ---- where / masked_fill ------------------------------------------------------------------------

Tensor where_kernel(const Tensor& cond, const Tensor& a, const Tensor& b) {
  const auto ab = core::broadcast_shapes(a.sizes(), b.sizes(), "where");
  const auto shape = core::broadcast_shapes(cond.sizes(), ab.span(), "where");
  Tensor out = Tensor::empty(shape.span(), a.dtype(), a.device());
  const Tensor c = expand_to(cond, shape.span());
  const Tensor x = expand_to(a, shape.span());
  const Tensor y = expand_to(b, shape.span());
  TB_DISPATCH_ALL_TYPES(a.dtype(), "where", [&] {
    using T = scalar_t;
    LoopGeometry<4> g(out.sizes(), {&out, &c, &x, &y});
    std::array<char*, 4> base = {static_cast<char*>(out.data_ptr()),
                                 static_cast<char*>(c.data_ptr()), static_cast<char*>(x.data_ptr()),
                                 static_cast<char*>(y.data_ptr())};
    for_each_row<4>(
        g, base, {sizeof(T), sizeof(bool), sizeof(T), sizeof(T)},
        [](const std::array<char*, 4>& p, const std::array<std::int64_t, 4>& s, std::int64_t n) {
          T* o = reinterpret_cast<T*>(p[0]);
          const bool* m = reinterpret_cast<const bool*>(p[1]);
          const T* u = reinterpret_cast<const T*>(p[2]);
          const T* v = reinterpret_cast<const T*>(p[3]);
          for (std::int64_t i = 0; i < n; ++i) {
            o[i * s[0]] = m[i * s[1]] ? u[i * s[2]] : v[i * s[3]];
          }
        });
  });
  return out;
}

Tensor masked_fill_kernel(const Tensor& t, const Tensor& mask, const core::Scalar& value) {
  Tensor out = t.clone();
  const Tensor m = expand_to(mask, out.sizes());
  TB_DISPATCH_ALL_TYPES(t.dtype(), "masked_fill", [&] {
    using T = scalar_t;
    const T v = value.to<T>();
    LoopGeometry<2> g(out.sizes(), {&out, &m});
    std::array<char*, 2> base = {static_cast<char*>(out.data_ptr()),
                                 static_cast<char*>(m.data_ptr())};
    for_each_row<2>(
        g, base, {sizeof(T), sizeof(bool)},
        [v](const std::array<char*, 2>& p, const std::array<std::int64_t, 2>& s, std::int64_t n) {
          T* o = reinterpret_cast<T*>(p[0]);
          const bool* mm = reinterpret_cast<const bool*>(p[1]);
          for (std::int64_t i = 0; i < n; ++i) {
            if (mm[i * s[1]]) o[i * s[0]] = v;
          }
        });
  });
  return out;
}

}  // namespace

void register_elementwise_kernels(dispatch::Dispatcher& d) {
  const auto cpu = DispatchKey::CPU;
#define TB_REG_UNARY(name, Op, float_only)             \
  d.impl<sig::Unary>(#name, cpu, [](const Tensor& a) { \
     return unary_kernel<Op>(#name, a, float_only);    \
   }).detach();
  TB_REG_UNARY(neg, NegOp, false)
  TB_REG_UNARY(abs, AbsOp, false)
  TB_REG_UNARY(sign, SignOp, false)
  TB_REG_UNARY(square, SquareOp, false)
  TB_REG_UNARY(relu, ReluOp, false)
  TB_REG_UNARY(exp, ExpOp, true)
  TB_REG_UNARY(log, LogOp, true)
  TB_REG_UNARY(log1p, Log1pOp, true)
  TB_REG_UNARY(expm1, Expm1Op, true)
  TB_REG_UNARY(sqrt, SqrtOp, true)
  TB_REG_UNARY(rsqrt, RsqrtOp, true)
  TB_REG_UNARY(reciprocal, ReciprocalOp, true)
  TB_REG_UNARY(sin, SinOp, true)
  TB_REG_UNARY(cos, CosOp, true)
  TB_REG_UNARY(tanh, TanhOp, true)
  TB_REG_UNARY(sigmoid, SigmoidOp, true)
  TB_REG_UNARY(erf, ErfOp, true)
  TB_REG_UNARY(silu, SiluOp, true)
  TB_REG_UNARY(gelu, GeluOp, true)
  TB_REG_UNARY(gelu_tanh, GeluTanhOp, true)
#undef TB_REG_UNARY

  d.impl<sig::BinaryAlpha>("add", cpu,
                           [](const Tensor& a, const Tensor& b, const core::Scalar& al) {
                             return add_kernel("add", a, b, al, 1);
                           })
      .detach();
  d.impl<sig::BinaryAlpha>("sub", cpu,
                           [](const Tensor& a, const Tensor& b, const core::Scalar& al) {
                             return add_kernel("sub", a, b, al, -1);
                           })
      .detach();
  d.impl<sig::Binary>("mul", cpu, [](const Tensor& a, const Tensor& b) {
     return binary_kernel("mul", a, b,
                          [](auto u, auto v) { return static_cast<decltype(u)>(u * v); });
   }).detach();
  d.impl<sig::Binary>("div", cpu, [](const Tensor& a, const Tensor& b) {
     return binary_kernel("div", a, b,
                          [](auto u, auto v) { return static_cast<decltype(u)>(u / v); });
   }).detach();
  d.impl<sig::Binary>("pow", cpu, [](const Tensor& a, const Tensor& b) {
     return binary_kernel("pow", a, b, [](auto u, auto v) { return pow_fn(u, v); });
   }).detach();
  // The fused activation gradients, grad · f'(x) in one pass (gelu_tanh's formula was a dozen
  // elementwise ops, a tenth of a GPT-2 small step; silu's six, a twentieth of qwen-tiny's).
  d.impl<sig::Binary>("gelu_tanh_backward", cpu, [](const Tensor& g, const Tensor& x) {
     return activation_grad_kernel<GeluTanhGradOp>("gelu_tanh_backward", g, x);
   }).detach();
  d.impl<sig::Binary>("silu_backward", cpu, [](const Tensor& g, const Tensor& x) {
     return activation_grad_kernel<SiluGradOp>("silu_backward", g, x);
   }).detach();
  // relu's gradient in one pass (PyTorch's threshold_backward at 0).
  d.impl<sig::Binary>("relu_backward", cpu, [](const Tensor& g, const Tensor& x) {
     return binary_kernel("relu_backward", g, x,
                          [](auto u, auto v) { return v <= decltype(v)(0) ? decltype(u)(0) : u; });
   }).detach();
  d.impl<sig::Binary>("maximum", cpu, [](const Tensor& a, const Tensor& b) {
     return binary_kernel("maximum", a, b, [](auto u, auto v) { return max_fn(u, v); });
   }).detach();
  d.impl<sig::Binary>("minimum", cpu, [](const Tensor& a, const Tensor& b) {
     return binary_kernel("minimum", a, b, [](auto u, auto v) { return min_fn(u, v); });
   }).detach();

#define TB_REG_CMP(name, expr)                                                \
  d.impl<sig::Binary>(#name, cpu, [](const Tensor& a, const Tensor& b) {      \
     return compare_kernel(#name, a, b, [](auto u, auto v) { return expr; }); \
   }).detach();
  TB_REG_CMP(eq, u == v)
  TB_REG_CMP(ne, u != v)
  TB_REG_CMP(lt, u < v)
  TB_REG_CMP(le, u <= v)
  TB_REG_CMP(gt, u > v)
  TB_REG_CMP(ge, u >= v)
#undef TB_REG_CMP

  d.impl<sig::InplaceBinaryAlpha>(
       "add_", cpu,
       [](Tensor& a, const Tensor& b, const core::Scalar& al) {
         TB_DISPATCH_ALL_TYPES(a.dtype(), "add_", [&] {
           using C = compute_t<scalar_t>;
           if constexpr (std::is_same_v<C, bool>) {
             inplace_binary("add_", a, b, [](C u, C v) { return static_cast<C>(u || v); });
           } else {
             const C alpha = al.to<C>();
             inplace_binary("add_", a, b,
                            [alpha](C u, C v) { return static_cast<C>(u + alpha * v); });
           }
         });
       })
      .detach();
  d.impl<sig::InplaceBinary>("mul_", cpu, [](Tensor& a, const Tensor& b) {
     inplace_binary("mul_", a, b, [](auto u, auto v) { return static_cast<decltype(u)>(u * v); });
   }).detach();
  d.impl<sig::InplaceBinary>("copy_", cpu, copy_kernel).detach();
  d.impl<sig::Fill>("fill_", cpu, fill_kernel).detach();
  d.impl<sig::Ternary>("where", cpu, where_kernel).detach();
  d.impl<sig::MaskedFill>("masked_fill", cpu, masked_fill_kernel).detach();
}

}  // namespace tb::cpu::TB_CPU_CAPABILITY
