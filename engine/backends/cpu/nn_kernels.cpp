// CPU kernels of the fused neural-network ops: rope, cross_entropy (+ its backward) and the row
// norms (rms_norm, layer_norm + backward; the weight/bias gradients summed over fixed chunks of
// rows, then the chunks in order).
// Row-parallel; every reduction is per row in double, and the batch sum of cross_entropy runs in
// row order after the parallel part, so results do not depend on the thread count.
#include <algorithm>
#include <cmath>
#include <limits>
#include <tuple>
#include <type_traits>
#include <vector>

#include "engine/backends/cpu/capability_kernels.h"
#include "engine/backends/cpu/vec_math.h"
#include "engine/dispatch/op_signatures.h"

namespace tb::cpu::TB_CPU_CAPABILITY {

using core::ScalarType;
using dispatch::DispatchKey;
namespace sig = ops::sig;

namespace {

// Rows of a tensor whose last dimension is contiguous: the element offset of row r (rows counted
// in row-major order over the leading dimensions).
struct RowOffsets {
  core::DimVector sizes, strides;  // of the leading dimensions
  std::int64_t operator()(std::int64_t r) const {
    std::int64_t off = 0;
    for (std::size_t k = sizes.size(); k-- > 0;) {
      off += (r % sizes[k]) * strides[k];
      r /= sizes[k];
    }
    return off;
  }
};

Tensor rope_kernel(const Tensor& x_in, const Tensor& cos_in, const Tensor& sin_in) {
  // Attention's q and k arrive as transposed views ([B, T, H, D] memory read as [B, H, T, D]):
  // read them in place instead of copying them first (the copy was 1 % of a qwen-tiny step).
  const Tensor x = x_in.dim() > 0 && x_in.stride(-1) == 1 ? x_in : x_in.contiguous();
  RowOffsets row_of;
  for (std::int64_t k = 0; k + 1 < x.dim(); ++k) {
    row_of.sizes.push_back(x.size(k));
    row_of.strides.push_back(x.stride(k));
  }
  Tensor out = Tensor::empty(x.sizes(), x.dtype(), x.device());
  const std::int64_t t_len = x.size(-2);
  const std::int64_t d = x.size(-1);
  const std::int64_t h = d / 2;
  const std::int64_t rows = d == 0 ? 0 : x.numel() / d;
  TB_DISPATCH_FLOATING_TYPES(x.dtype(), "rope", [&] {
    using T = scalar_t;
    using C = compute_t<T>;
    const ScalarType ct = std::is_same_v<C, double> ? ScalarType::Float64 : ScalarType::Float32;
    const Tensor c = cos_in.to(ct).contiguous();
    const Tensor s = sin_in.to(ct).contiguous();
    const C* cp = static_cast<const C*>(c.data_ptr());
    const C* sp = static_cast<const C*>(s.data_ptr());
    const T* xp = static_cast<const T*>(x.data_ptr());
    T* op = out.data_ptr<T>();
    core::parallel_for(0, rows, std::max<std::int64_t>(1, 8192 / std::max<std::int64_t>(d, 1)),
                       [&](std::int64_t r0, std::int64_t r1) {
                         for (std::int64_t r = r0; r < r1; ++r) {
                           const std::int64_t t = r % t_len;
                           const T* xi = xp + row_of(r);
                           T* o = op + r * d;
                           const C* cr = cp + t * h;
                           const C* sr = sp + t * h;
                           for (std::int64_t j = 0; j < h; ++j) {
                             const C x1 = static_cast<C>(xi[j]);
                             const C x2 = static_cast<C>(xi[j + h]);
                             o[j] = convert<T>(x1 * cr[j] - x2 * sr[j]);
                             o[j + h] = convert<T>(x2 * cr[j] + x1 * sr[j]);
                           }
                         }
                       });
  });
  return out;
}

// Sums of cross-entropy's per-row terms in double over eight interleaved partial sums, then the
// eight in order: the loop vectorises, and the result is the same bits at every capability level
// (each partial sum adds the same elements in the same order).
constexpr std::int64_t kLanes = 8;

template <typename F>
double lane_sum(std::int64_t c, F term) {
  double acc[kLanes] = {};
  std::int64_t i = 0;
  for (; i + kLanes <= c; i += kLanes) {
    for (std::int64_t k = 0; k < kLanes; ++k)
      acc[k] += term(i + k);
  }
  for (; i < c; ++i)
    acc[i % kLanes] += term(i);
  double s = 0.0;
  for (std::int64_t k = 0; k < kLanes; ++k)
    s += acc[k];
  return s;
}

// float, bfloat16 and float16 rows compute e^(x − max) in float with the vectorised exp_f32
// (within 2 ulp, as PyTorch's float log-softmax with Sleef's exp); double rows in double. The
// sums and the log are in double either way. glibc's double exp, a call per element, three per
// logit over forward and backward, was 4 % of a qwen-tiny step.
template <typename T>
constexpr bool kFloatRows = std::is_same_v<compute_t<T>, float>;

// Per-row pieces of cross-entropy: log-sum-exp (max-subtracted) and the row mean of the logits.
template <typename T>
void row_stats(const T* x, std::int64_t c, double& lse, double& mean) {
  using C = compute_t<T>;
  C m = -std::numeric_limits<C>::infinity();
  for (std::int64_t i = 0; i < c; ++i)
    m = std::max(m, static_cast<C>(x[i]));
  if (std::isinf(m) && m < 0) m = 0;
  double s = 0.0;
  if constexpr (kFloatRows<T>) {
    s = lane_sum(c, [&](std::int64_t i) {
      return static_cast<double>(exp_f32(static_cast<float>(x[i]) - m));
    });
  } else {
    s = lane_sum(c, [&](std::int64_t i) { return std::exp(static_cast<double>(x[i]) - m); });
  }
  const double sum =
      lane_sum(c, [&](std::int64_t i) { return static_cast<double>(static_cast<C>(x[i])); });
  lse = static_cast<double>(m) + std::log(s);
  mean = sum / static_cast<double>(c);
}

void check_target(std::int64_t t, std::int64_t row, std::int64_t classes) {
  if (t < 0 || t >= classes) {
    throw IndexError(tb::detail::str_cat("[cross_entropy] target ", t, " of row ", row,
                                         " is out of range for ", classes,
                                         " classes (and is not ignore_index)"));
  }
}

Tensor cross_entropy_kernel(const Tensor& logits_in, const Tensor& target_in,
                            std::int64_t ignore_index, double smoothing) {
  const Tensor logits = logits_in.contiguous();
  const Tensor target = target_in.contiguous();
  const std::int64_t n = logits.size(0);
  const std::int64_t c = logits.size(1);
  const std::int64_t* tp = target.data_ptr<std::int64_t>();
  for (std::int64_t r = 0; r < n; ++r) {
    if (tp[r] != ignore_index) check_target(tp[r], r, c);
  }
  std::vector<double> row_loss(static_cast<std::size_t>(n), 0.0);
  TB_DISPATCH_FLOATING_TYPES(logits.dtype(), "cross_entropy", [&] {
    using T = scalar_t;
    const T* xp = static_cast<const T*>(logits.data_ptr());
    core::parallel_for(
        0, n, std::max<std::int64_t>(1, 16384 / c), [&](std::int64_t r0, std::int64_t r1) {
          for (std::int64_t r = r0; r < r1; ++r) {
            if (tp[r] == ignore_index) continue;
            const T* x = xp + r * c;
            double lse = 0.0;
            double mean = 0.0;
            row_stats(x, c, lse, mean);
            const double nll = lse - static_cast<double>(static_cast<compute_t<T>>(x[tp[r]]));
            row_loss[static_cast<std::size_t>(r)] =
                (1.0 - smoothing) * nll + smoothing * (lse - mean);
          }
        });
  });
  double total = 0.0;
  std::int64_t valid = 0;
  for (std::int64_t r = 0; r < n; ++r) {
    if (tp[r] == ignore_index) continue;
    total += row_loss[static_cast<std::size_t>(r)];
    ++valid;
  }
  Tensor out = Tensor::empty({}, logits.dtype(), logits.device());
  // No valid row: 0/0 = NaN, as PyTorch's mean reduction gives.
  out.fill_(valid == 0 ? std::numeric_limits<double>::quiet_NaN()
                       : total / static_cast<double>(valid));
  return out;
}

Tensor cross_entropy_backward_kernel(const Tensor& grad, const Tensor& logits_in,
                                     const Tensor& target_in, std::int64_t ignore_index,
                                     double smoothing) {
  const Tensor logits = logits_in.contiguous();
  const Tensor target = target_in.contiguous();
  const std::int64_t n = logits.size(0);
  const std::int64_t c = logits.size(1);
  const std::int64_t* tp = target.data_ptr<std::int64_t>();
  std::int64_t valid = 0;
  for (std::int64_t r = 0; r < n; ++r) {
    if (tp[r] == ignore_index) continue;
    check_target(tp[r], r, c);
    ++valid;
  }
  const double scale = grad.item() / static_cast<double>(valid);  // NaN when nothing is valid
  Tensor out = Tensor::empty(logits.sizes(), logits.dtype(), logits.device());
  TB_DISPATCH_FLOATING_TYPES(logits.dtype(), "cross_entropy_backward", [&] {
    using T = scalar_t;
    const T* xp = static_cast<const T*>(logits.data_ptr());
    T* gp = out.data_ptr<T>();
    const double off = smoothing / static_cast<double>(c);
    core::parallel_for(
        0, n, std::max<std::int64_t>(1, 16384 / c), [&](std::int64_t r0, std::int64_t r1) {
          for (std::int64_t r = r0; r < r1; ++r) {
            T* g = gp + r * c;
            if (tp[r] == ignore_index) {
              std::fill(g, g + c, convert<T>(0.0));
              continue;
            }
            const T* x = xp + r * c;
            double lse = 0.0;
            double mean = 0.0;
            row_stats(x, c, lse, mean);
            const auto prob = [&](std::int64_t i) {
              const double v = static_cast<double>(static_cast<compute_t<T>>(x[i])) - lse;
              if constexpr (kFloatRows<T>) {
                return static_cast<double>(exp_f32(static_cast<float>(v)));
              } else {
                return std::exp(v);
              }
            };
            for (std::int64_t i = 0; i < c; ++i)
              g[i] = convert<T>(scale * (prob(i) - off));
            // The target's term written again, so that the loop above has no branch.
            g[tp[r]] = convert<T>(scale * (prob(tp[r]) - ((1.0 - smoothing) + off)));
          }
        });
  });
  return out;
}

// ---- SwiGLU -------------------------------------------------------------------------------------
// silu(gate)·up and its gradients with the elementwise kernels' formulas (vec_math.h), so that
// float32/float64 results are the bits of mul(silu(gate), up) and of its composite backward.

constexpr std::int64_t kSwigluGrain = 16384;

Tensor swiglu_kernel(const Tensor& gate_in, const Tensor& up_in) {
  const Tensor gate = gate_in.contiguous();
  const Tensor up = up_in.contiguous();
  Tensor out = Tensor::empty(gate.sizes(), gate.dtype(), gate.device());
  TB_DISPATCH_FLOATING_TYPES(gate.dtype(), "swiglu", [&] {
    using T = scalar_t;
    using C = compute_t<T>;
    const T* gp = static_cast<const T*>(gate.data_ptr());
    const T* upp = static_cast<const T*>(up.data_ptr());
    T* op = out.data_ptr<T>();
    core::parallel_for(0, gate.numel(), kSwigluGrain, [&](std::int64_t i0, std::int64_t i1) {
      for (std::int64_t i = i0; i < i1; ++i) {
        const C x = static_cast<C>(gp[i]);
        op[i] = convert<T>((x * sigmoid_fn(x)) * static_cast<C>(upp[i]));
      }
    });
  });
  return out;
}

std::tuple<Tensor, Tensor> swiglu_backward_kernel(const Tensor& grad_in, const Tensor& gate_in,
                                                  const Tensor& up_in) {
  const Tensor grad = grad_in.contiguous();
  const Tensor gate = gate_in.contiguous();
  const Tensor up = up_in.contiguous();
  Tensor dgate = Tensor::empty(gate.sizes(), gate.dtype(), gate.device());
  Tensor dup = Tensor::empty(gate.sizes(), gate.dtype(), gate.device());
  TB_DISPATCH_FLOATING_TYPES(gate.dtype(), "swiglu_backward", [&] {
    using T = scalar_t;
    using C = compute_t<T>;
    const T* gr = static_cast<const T*>(grad.data_ptr());
    const T* gp = static_cast<const T*>(gate.data_ptr());
    const T* upp = static_cast<const T*>(up.data_ptr());
    T* dg = dgate.data_ptr<T>();
    T* du = dup.data_ptr<T>();
    core::parallel_for(0, gate.numel(), kSwigluGrain, [&](std::int64_t i0, std::int64_t i1) {
      for (std::int64_t i = i0; i < i1; ++i) {
        const C g = static_cast<C>(gr[i]);
        const C x = static_cast<C>(gp[i]);
        dg[i] = convert<T>(silu_grad_fn(g * static_cast<C>(upp[i]), x));
        du[i] = convert<T>(g * (x * sigmoid_fn(x)));
      }
    });
  });
  return {dgate, dup};
}

// ---- RMSNorm / LayerNorm ------------------------------------------------------------------------

constexpr std::int64_t kNormRowChunk = 32;  // rows per partial sum of the weight/bias gradients

ScalarType stat_dtype(ScalarType dt) {
  return dt == ScalarType::Float64 ? ScalarType::Float64 : ScalarType::Float32;
}

template <bool Rms>
std::tuple<Tensor, Tensor> row_norm_kernel(const Tensor& x, const Tensor& weight,
                                           const Tensor& bias, double eps) {
  const std::int64_t n = x.size(-1);
  const std::int64_t rows = n == 0 ? 0 : x.numel() / n;
  Tensor y = Tensor::empty(x.sizes(), x.dtype(), x.device());
  Tensor stats = Tensor::empty({rows, 2}, stat_dtype(x.dtype()), x.device());
  TB_DISPATCH_FLOATING_TYPES(x.dtype(), Rms ? "rms_norm" : "layer_norm", [&] {
    using T = scalar_t;
    using C = compute_t<T>;
    const T* xp = x.data_ptr<T>();
    const T* wp = weight.defined() ? weight.data_ptr<T>() : nullptr;
    const T* bp = bias.defined() ? bias.data_ptr<T>() : nullptr;
    T* yp = y.data_ptr<T>();
    C* sp = static_cast<C*>(stats.data_ptr());
    core::parallel_for(0, rows, std::max<std::int64_t>(1, 16384 / std::max<std::int64_t>(n, 1)),
                       [&](std::int64_t r0, std::int64_t r1) {
                         for (std::int64_t r = r0; r < r1; ++r) {
                           const T* xr = xp + r * n;
                           double mean = 0.0;
                           if (!Rms) {
                             for (std::int64_t j = 0; j < n; ++j)
                               mean += static_cast<double>(static_cast<C>(xr[j]));
                             mean /= static_cast<double>(n);
                           }
                           double ss = 0.0;
                           for (std::int64_t j = 0; j < n; ++j) {
                             const double d = static_cast<double>(static_cast<C>(xr[j])) - mean;
                             ss += d * d;
                           }
                           const auto m = static_cast<C>(mean);
                           const auto rstd =
                               static_cast<C>(1.0 / std::sqrt(ss / static_cast<double>(n) + eps));
                           T* yr = yp + r * n;
                           // Weight and bias as compile-time cases: with `if (bp)` inside the
                           // loop GCC vectorises it into masked loads from the null pointer,
                           // each a fault-suppression assist on AMD Zen (RMSNorm, which has no
                           // bias, ran 5x slower). Same operations in the same order.
                           auto normalize = [&](auto with_w, auto with_b) {
                             for (std::int64_t j = 0; j < n; ++j) {
                               C v = (static_cast<C>(xr[j]) - m) * rstd;
                               if constexpr (decltype(with_w)::value) v *= static_cast<C>(wp[j]);
                               if constexpr (decltype(with_b)::value) v += static_cast<C>(bp[j]);
                               yr[j] = convert<T>(v);
                             }
                           };
                           if (wp != nullptr && bp != nullptr)
                             normalize(std::true_type{}, std::true_type{});
                           else if (wp != nullptr)
                             normalize(std::true_type{}, std::false_type{});
                           else if (bp != nullptr)
                             normalize(std::false_type{}, std::true_type{});
                           else
                             normalize(std::false_type{}, std::false_type{});
                           sp[2 * r] = m;
                           sp[2 * r + 1] = rstd;
                         }
                       });
  });
  return {y, stats};
}

template <bool Rms>
std::tuple<Tensor, Tensor, Tensor> row_norm_backward_kernel(const Tensor& dy, const Tensor& x,
                                                            const Tensor& weight,
                                                            const Tensor& stats_in,
                                                            bool with_bias) {
  const std::int64_t n = x.size(-1);
  const std::int64_t rows = n == 0 ? 0 : x.numel() / n;
  const Tensor stats = stats_in.to(stat_dtype(x.dtype())).contiguous();
  Tensor dx = Tensor::empty(x.sizes(), x.dtype(), x.device());
  const bool want_w = weight.defined();
  Tensor dw = want_w ? Tensor::empty({n}, x.dtype(), x.device()) : Tensor();
  Tensor db = with_bias ? Tensor::empty({n}, x.dtype(), x.device()) : Tensor();
  TB_DISPATCH_FLOATING_TYPES(x.dtype(), Rms ? "rms_norm_backward" : "layer_norm_backward", [&] {
    using T = scalar_t;
    using C = compute_t<T>;
    const T* gp = dy.data_ptr<T>();
    const T* xp = x.data_ptr<T>();
    const T* wp = want_w ? weight.data_ptr<T>() : nullptr;
    const C* sp = static_cast<const C*>(stats.data_ptr());
    T* dxp = dx.data_ptr<T>();
    const std::int64_t chunks = (rows + kNormRowChunk - 1) / kNormRowChunk;
    // Per chunk of rows: dx, and the chunk's partial sums of dy·x̂ (weight) and dy (bias).
    std::vector<C> pw(static_cast<std::size_t>(want_w ? chunks * n : 0));
    std::vector<C> pb(static_cast<std::size_t>(with_bias ? chunks * n : 0));
    core::parallel_for(0, chunks, 1, [&](std::int64_t c0, std::int64_t c1) {
      for (std::int64_t c = c0; c < c1; ++c) {
        C* accw = want_w ? pw.data() + c * n : nullptr;
        C* accb = with_bias ? pb.data() + c * n : nullptr;
        if (accw != nullptr) std::fill(accw, accw + n, C(0));
        if (accb != nullptr) std::fill(accb, accb + n, C(0));
        for (std::int64_t r = c * kNormRowChunk; r < std::min(rows, (c + 1) * kNormRowChunk); ++r) {
          const T* xr = xp + r * n;
          const T* gr = gp + r * n;
          const C mean = sp[2 * r];
          const C rstd = sp[2 * r + 1];
          double s1 = 0.0;  // Σ g (LayerNorm)
          double s2 = 0.0;  // Σ g·x̂
          for (std::int64_t j = 0; j < n; ++j) {
            const C xhat = (static_cast<C>(xr[j]) - mean) * rstd;
            const C gj = wp != nullptr ? static_cast<C>(gr[j]) * static_cast<C>(wp[j])
                                       : static_cast<C>(gr[j]);
            s1 += static_cast<double>(gj);
            s2 += static_cast<double>(gj * xhat);
            if (accw != nullptr) accw[j] += static_cast<C>(gr[j]) * xhat;
            if (accb != nullptr) accb[j] += static_cast<C>(gr[j]);
          }
          const auto m1 = static_cast<C>(Rms ? 0.0 : s1 / static_cast<double>(n));
          const auto m2 = static_cast<C>(s2 / static_cast<double>(n));
          T* dxr = dxp + r * n;
          for (std::int64_t j = 0; j < n; ++j) {
            const C xhat = (static_cast<C>(xr[j]) - mean) * rstd;
            const C gj = wp != nullptr ? static_cast<C>(gr[j]) * static_cast<C>(wp[j])
                                       : static_cast<C>(gr[j]);
            dxr[j] = convert<T>(rstd * (gj - m1 - xhat * m2));
          }
        }
      }
    });
    // The chunks' partial sums, in chunk order.
    auto finish = [&](const std::vector<C>& part, Tensor& out) {
      T* op = out.data_ptr<T>();
      core::parallel_for(0, n, 1024, [&](std::int64_t j0, std::int64_t j1) {
        for (std::int64_t j = j0; j < j1; ++j) {
          C acc = 0;
          for (std::int64_t c = 0; c < chunks; ++c)
            acc += part[static_cast<std::size_t>(c * n + j)];
          op[j] = convert<T>(acc);
        }
      });
    };
    if (want_w) finish(pw, dw);
    if (with_bias) finish(pb, db);
  });
  return {dx, dw, db};
}

}  // namespace

void register_nn_kernels(dispatch::Dispatcher& d) {
  const auto cpu = DispatchKey::CPU;
  d.impl<sig::Ternary>("rope", cpu, rope_kernel).detach();
  d.impl<sig::RowNorm>("rms_norm", cpu, row_norm_kernel<true>).detach();
  d.impl<sig::RowNorm>("layer_norm", cpu, row_norm_kernel<false>).detach();
  d.impl<sig::RowNormBackward>("rms_norm_backward", cpu, row_norm_backward_kernel<true>).detach();
  d.impl<sig::RowNormBackward>("layer_norm_backward", cpu, row_norm_backward_kernel<false>)
      .detach();
  d.impl<sig::Binary>("swiglu", cpu, swiglu_kernel).detach();
  d.impl<sig::SwigluBackward>("swiglu_backward", cpu, swiglu_backward_kernel).detach();
  d.impl<sig::CrossEntropy>("cross_entropy", cpu, cross_entropy_kernel).detach();
  d.impl<sig::CrossEntropyBackward>("cross_entropy_backward", cpu, cross_entropy_backward_kernel)
      .detach();
}

}  // namespace tb::cpu::TB_CPU_CAPABILITY
