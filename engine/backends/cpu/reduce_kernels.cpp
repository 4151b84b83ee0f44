// CPU reductions: sum, mean, norm over dims; max/min (all, or along a dim with indices); argmax.
//
// The input is permuted to [kept..., reduced...] and made contiguous, so every output element
// reduces one contiguous row of R elements. Floating sums accumulate in double, integer sums in
// int64. Rows run in parallel; a single long row (full reduction) is split into fixed blocks
// whose partial sums combine in a fixed order, so results never depend on the thread count.
#include <cmath>
#include <limits>
#include <vector>

#include "engine/backends/common/reduce_plan.h"
#include "engine/backends/cpu/capability_kernels.h"
#include "engine/dispatch/op_signatures.h"

namespace tb::cpu::TB_CPU_CAPABILITY {

using core::DimVector;
using core::ScalarType;
using dispatch::DispatchKey;
namespace sig = ops::sig;

namespace {

using backends::plan_reduce;
using backends::ReducePlan;

template <typename T>
using acc_t = std::conditional_t<std::is_floating_point_v<compute_t<T>>, double, std::int64_t>;

// Sum of f(x) over n contiguous elements, in acc type A.
template <typename A, typename T, typename F>
A row_sum(const T* x, std::int64_t n, F f) {
  A acc = 0;
  for (std::int64_t i = 0; i < n; ++i)
    acc += f(static_cast<A>(static_cast<compute_t<T>>(x[i])));
  return acc;
}

constexpr std::int64_t kBlock = 1 << 15;

// out[k] = finish(sum_r f(x[k, r])) for every k.
template <typename T, typename F, typename Finish>
void reduce_sum_rows(const ReducePlan& p, T* out, F f, Finish finish) {
  using A = acc_t<T>;
  const T* x = static_cast<const T*>(p.rows.data_ptr());
  if (p.k == 1 && p.r > 2 * kBlock) {
    const std::int64_t nblocks = (p.r + kBlock - 1) / kBlock;
    std::vector<A> partial(static_cast<std::size_t>(nblocks));
    core::parallel_for(0, nblocks, 1, [&](std::int64_t b0, std::int64_t b1) {
      for (std::int64_t b = b0; b < b1; ++b) {
        const std::int64_t start = b * kBlock;
        partial[static_cast<std::size_t>(b)] =
            row_sum<A>(x + start, std::min(kBlock, p.r - start), f);
      }
    });
    A total = 0;
    for (A v : partial)
      total += v;
    out[0] = convert<T>(finish(total));
    return;
  }
  const std::int64_t grain = std::max<std::int64_t>(1, 32768 / std::max<std::int64_t>(p.r, 1));
  core::parallel_for(0, p.k, grain, [&](std::int64_t k0, std::int64_t k1) {
    for (std::int64_t k = k0; k < k1; ++k)
      out[k] = convert<T>(finish(row_sum<A>(x + k * p.r, p.r, f)));
  });
}

Tensor sum_kernel(const Tensor& t, IntList dims, bool keepdim) {
  ReducePlan p = plan_reduce(t, dims, keepdim);
  Tensor out = Tensor::empty(p.out_shape.span(), t.dtype(), t.device());
  TB_DISPATCH_ALL_TYPES(t.dtype(), "sum", [&] {
    using A = acc_t<scalar_t>;
    reduce_sum_rows<scalar_t>(
        p, out.data_ptr<scalar_t>(), [](A v) { return v; }, [](A v) { return v; });
  });
  return out;
}

Tensor mean_kernel(const Tensor& t, IntList dims, bool keepdim) {
  ReducePlan p = plan_reduce(t, dims, keepdim);
  Tensor out = Tensor::empty(p.out_shape.span(), t.dtype(), t.device());
  const double inv =
      p.r == 0 ? std::numeric_limits<double>::quiet_NaN() : 1.0 / static_cast<double>(p.r);
  TB_DISPATCH_FLOATING_TYPES(t.dtype(), "mean", [&] {
    reduce_sum_rows<scalar_t>(
        p, out.data_ptr<scalar_t>(), [](double v) { return v; },
        [inv, &p](double v) { return p.r == 0 ? inv : v / static_cast<double>(p.r); });
  });
  return out;
}

Tensor norm_kernel(const Tensor& t, double pnorm, IntList dims, bool keepdim) {
  ReducePlan p = plan_reduce(t, dims, keepdim);
  Tensor out = Tensor::empty(p.out_shape.span(), t.dtype(), t.device());
  TB_DISPATCH_FLOATING_TYPES(t.dtype(), "norm", [&] {
    using T = scalar_t;
    T* o = out.data_ptr<T>();
    if (std::isinf(pnorm)) {
      const T* x = static_cast<const T*>(p.rows.data_ptr());
      core::parallel_for(0, p.k, 1, [&](std::int64_t k0, std::int64_t k1) {
        for (std::int64_t k = k0; k < k1; ++k) {
          double m = 0.0;
          for (std::int64_t i = 0; i < p.r; ++i) {
            const double v =
                std::abs(static_cast<double>(static_cast<compute_t<T>>(x[k * p.r + i])));
            if (std::isnan(v) || v > m) m = v;
            if (std::isnan(m)) break;
          }
          o[k] = convert<T>(m);
        }
      });
    } else if (pnorm == 2.0) {
      reduce_sum_rows<T>(
          p, o, [](double v) { return v * v; }, [](double s) { return std::sqrt(s); });
    } else if (pnorm == 1.0) {
      reduce_sum_rows<T>(
          p, o, [](double v) { return std::abs(v); }, [](double s) { return s; });
    } else {
      reduce_sum_rows<T>(
          p, o, [pnorm](double v) { return std::pow(std::abs(v), pnorm); },
          [pnorm](double s) { return std::pow(s, 1.0 / pnorm); });
    }
  });
  return out;
}

// Index of the max (Greater) or min along a contiguous row; NaN wins (first NaN), then the
// first extreme value.
template <typename T, bool Greater>
std::int64_t arg_extreme(const T* x, std::int64_t n) {
  using C = compute_t<T>;
  std::int64_t best = 0;
  C bv = static_cast<C>(x[0]);
  if constexpr (std::is_floating_point_v<C>) {
    if (std::isnan(bv)) return 0;
  }
  for (std::int64_t i = 1; i < n; ++i) {
    const C v = static_cast<C>(x[i]);
    if constexpr (std::is_floating_point_v<C>) {
      if (std::isnan(v)) return i;
    }
    if (Greater ? (v > bv) : (v < bv)) {
      bv = v;
      best = i;
    }
  }
  return best;
}

template <bool Greater>
std::tuple<Tensor, Tensor> extreme_dim_kernel(const Tensor& t, std::int64_t dim, bool keepdim) {
  const std::int64_t d[1] = {dim};
  ReducePlan p = plan_reduce(t, t.dim() == 0 ? IntList() : IntList(d, 1), keepdim);
  Tensor values = Tensor::empty(p.out_shape.span(), t.dtype(), t.device());
  Tensor indices = Tensor::empty(p.out_shape.span(), ScalarType::Int64, t.device());
  TB_DISPATCH_ALL_TYPES(t.dtype(), Greater ? "max" : "min", [&] {
    using T = scalar_t;
    const T* x = static_cast<const T*>(p.rows.data_ptr());
    T* v = values.data_ptr<T>();
    std::int64_t* ix = indices.data_ptr<std::int64_t>();
    core::parallel_for(0, p.k, std::max<std::int64_t>(1, 32768 / std::max<std::int64_t>(p.r, 1)),
                       [&](std::int64_t k0, std::int64_t k1) {
                         for (std::int64_t k = k0; k < k1; ++k) {
                           const std::int64_t i = arg_extreme<T, Greater>(x + k * p.r, p.r);
                           ix[k] = i;
                           v[k] = x[k * p.r + i];
                         }
                       });
  });
  return {values, indices};
}

template <bool Greater>
Tensor extreme_all_kernel(const Tensor& t) {
  const Tensor flat = t.contiguous().reshape({t.numel()});
  auto [v, i] = extreme_dim_kernel<Greater>(flat, 0, false);
  return v;
}

Tensor argmax_kernel(const Tensor& t, std::optional<std::int64_t> dim, bool keepdim) {
  if (!dim) {
    auto [v, i] = extreme_dim_kernel<true>(t.contiguous().reshape({t.numel()}), 0, false);
    if (!keepdim) return i;
    DimVector ones(static_cast<std::size_t>(t.dim()), 1);
    return i.reshape(ones.span());
  }
  auto [v, i] = extreme_dim_kernel<true>(t, *dim, keepdim);
  return i;
}

// Σ x² over n contiguous elements in float64: eight interleaved accumulators (lane j takes the
// elements j, j + 8, ...; the tail goes to lane 0), combined in lane order. Eight independent
// chains instead of one: the adds no longer wait on each other's latency.
template <typename T>
double sum_sq_block(const T* x, std::int64_t n) {
  double lane[8] = {};
  std::int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    for (int j = 0; j < 8; ++j) {
      const double v = static_cast<double>(x[i + j]);
      lane[j] += v * v;
    }
  }
  for (; i < n; ++i) {
    const double v = static_cast<double>(x[i]);
    lane[0] += v * v;
  }
  double total = 0.0;
  for (double l : lane)
    total += l;
  return total;
}

// foreach_sum_sq: every tensor cut into blocks of kBlock elements, the blocks of all tensors
// summed in parallel, their sums added in tensor and block order (thread-count independent).
Tensor foreach_sum_sq_kernel(const std::vector<Tensor>& ts) {
  struct Block {
    std::size_t tensor;
    std::int64_t begin, end;
  };
  std::vector<Block> blocks;
  for (std::size_t i = 0; i < ts.size(); ++i) {
    const std::int64_t n = ts[i].numel();
    for (std::int64_t b = 0; b < n; b += kBlock)
      blocks.push_back({i, b, std::min(n, b + kBlock)});
  }
  std::vector<double> partial(blocks.size(), 0.0);
  core::parallel_for(0, static_cast<std::int64_t>(blocks.size()), 1,
                     [&](std::int64_t b0, std::int64_t b1) {
                       for (std::int64_t b = b0; b < b1; ++b) {
                         const Block& k = blocks[static_cast<std::size_t>(b)];
                         const Tensor& t = ts[k.tensor];
                         partial[static_cast<std::size_t>(b)] =
                             t.dtype() == ScalarType::Float64
                                 ? sum_sq_block(t.data_ptr<double>() + k.begin, k.end - k.begin)
                                 : sum_sq_block(t.data_ptr<float>() + k.begin, k.end - k.begin);
                       }
                     });
  double total = 0.0;
  for (double v : partial)
    total += v;
  Tensor out = Tensor::empty({}, ScalarType::Float64);
  *out.data_ptr<double>() = total;
  return out;
}

}  // namespace

void register_reduce_kernels(dispatch::Dispatcher& d) {
  const auto cpu = DispatchKey::CPU;
  d.impl<sig::Reduce>("sum", cpu, sum_kernel).detach();
  d.impl<sig::Reduce>("mean", cpu, mean_kernel).detach();
  d.impl<sig::Norm>("norm", cpu, norm_kernel).detach();
  d.impl<sig::ReduceAll>("max", cpu, extreme_all_kernel<true>).detach();
  d.impl<sig::ReduceAll>("min", cpu, extreme_all_kernel<false>).detach();
  d.impl<sig::ReduceDimWithIndex>("max.dim", cpu, extreme_dim_kernel<true>).detach();
  d.impl<sig::ReduceDimWithIndex>("min.dim", cpu, extreme_dim_kernel<false>).detach();
  d.impl<sig::Argmax>("argmax", cpu, argmax_kernel).detach();
  d.impl<sig::ForeachSumSq>("foreach_sum_sq", cpu, foreach_sum_sq_kernel).detach();
}

}  // namespace tb::cpu::TB_CPU_CAPABILITY
