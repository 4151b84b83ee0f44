// CPU kernels of the fused neural-network ops: rope and cross_entropy (+ its backward).
// Row-parallel; every reduction is per row in double, and the batch sum of cross_entropy runs in
// row order after the parallel part, so results do not depend on the thread count.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "engine/backends/cpu/kernels.h"
#include "engine/ops/op_signatures.h"

namespace tb::cpu {

using core::ScalarType;
using dispatch::DispatchKey;
namespace sig = ops::sig;

namespace {

Tensor rope_kernel(const Tensor& x_in, const Tensor& cos_in, const Tensor& sin_in) {
  const Tensor x = x_in.contiguous();
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
    parallel_for(0, rows, std::max<std::int64_t>(1, 8192 / std::max<std::int64_t>(d, 1)),
                 [&](std::int64_t r0, std::int64_t r1) {
                   for (std::int64_t r = r0; r < r1; ++r) {
                     const std::int64_t t = r % t_len;
                     const T* xi = xp + r * d;
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

// Per-row pieces of cross-entropy: log-sum-exp (max-subtracted) and the row mean of the logits.
template <typename T>
void row_stats(const T* x, std::int64_t c, double& lse, double& mean) {
  double m = -std::numeric_limits<double>::infinity();
  for (std::int64_t i = 0; i < c; ++i)
    m = std::max(m, static_cast<double>(static_cast<compute_t<T>>(x[i])));
  if (std::isinf(m) && m < 0) m = 0;
  double s = 0.0;
  double sum = 0.0;
  for (std::int64_t i = 0; i < c; ++i) {
    const double v = static_cast<double>(static_cast<compute_t<T>>(x[i]));
    s += std::exp(v - m);
    sum += v;
  }
  lse = m + std::log(s);
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
    parallel_for(0, n, std::max<std::int64_t>(1, 16384 / c), [&](std::int64_t r0, std::int64_t r1) {
      for (std::int64_t r = r0; r < r1; ++r) {
        if (tp[r] == ignore_index) continue;
        const T* x = xp + r * c;
        double lse = 0.0;
        double mean = 0.0;
        row_stats(x, c, lse, mean);
        const double nll = lse - static_cast<double>(static_cast<compute_t<T>>(x[tp[r]]));
        row_loss[static_cast<std::size_t>(r)] = (1.0 - smoothing) * nll + smoothing * (lse - mean);
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
    parallel_for(0, n, std::max<std::int64_t>(1, 16384 / c), [&](std::int64_t r0, std::int64_t r1) {
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
        for (std::int64_t i = 0; i < c; ++i) {
          const double p = std::exp(static_cast<double>(static_cast<compute_t<T>>(x[i])) - lse);
          const double target_p = (i == tp[r] ? 1.0 - smoothing : 0.0) + off;
          g[i] = convert<T>(scale * (p - target_p));
        }
      }
    });
  });
  return out;
}

}  // namespace

void register_nn_kernels(dispatch::Dispatcher& d) {
  const auto cpu = DispatchKey::CPU;
  d.impl<sig::Ternary>("rope", cpu, rope_kernel).detach();
  d.impl<sig::CrossEntropy>("cross_entropy", cpu, cross_entropy_kernel).detach();
  d.impl<sig::CrossEntropyBackward>("cross_entropy_backward", cpu, cross_entropy_backward_kernel)
      .detach();
}

}  // namespace tb::cpu
