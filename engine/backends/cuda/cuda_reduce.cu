// CUDA reductions over contiguous rows ([k, r]: the host permutes the reduced dims last), the
// arg-extremes, softmax/log_softmax and the fused cross-entropy with its backward.
//
// A row is reduced by one warp; when there are few long rows, each row is split into segments
// whose partial results a second pass combines (one warp per row), so a full reduction of a large
// tensor still fills the GPU. Floats accumulate in float (double for float64), integers in int64.
// Every reduction order is fixed by the shapes, so results are deterministic run to run.
#include <cmath>
#include <limits>

#include "engine/backends/cuda/cuda_device.cuh"

namespace tb::cuda {

namespace {

using namespace dev;  // NOLINT(google-build-using-namespace): kernel-file helpers

template <typename T>
using acc_t = std::conditional_t<
    std::is_same_v<T, double>, double,
    std::conditional_t<std::is_floating_point_v<compute_t<T>>, float, std::int64_t>>;

constexpr int kWarpsPerBlock = kThreads / kWarp;

// Segments per row for k rows of length r: enough warps to fill the device, each segment at
// least 1024 elements.
std::int64_t segments_for(std::int64_t k, std::int64_t r) {
  constexpr std::int64_t kTargetWarps = 8192;
  constexpr std::int64_t kMinSegment = 1024;
  if (k >= kTargetWarps || r <= 2 * kMinSegment) return 1;
  std::int64_t s = kTargetWarps / (k < 1 ? 1 : k);
  const std::int64_t most = (r + kMinSegment - 1) / kMinSegment;
  if (s > most) s = most;
  if (s > 1024) s = 1024;
  return s < 1 ? 1 : s;
}

int warp_blocks(std::int64_t warps) {
  const std::int64_t b = (warps + kWarpsPerBlock - 1) / kWarpsPerBlock;
  return static_cast<int>(b < 1 ? 1 : (b > 65535 * 32 ? 65535 * 32 : b));
}

__device__ inline std::int64_t global_warp() {
  return global_index() / kWarp;
}
__device__ inline std::int64_t warp_count() {
  return global_stride() / kWarp;
}

// ---- sums and norms ---------------------------------------------------------------------------

template <typename A>
__device__ inline A map_value(RowReduce kind, A x, A p) {
  switch (kind) {
    case RowReduce::norm1:
    case RowReduce::norm_inf:
      return x < A(0) ? -x : x;
    case RowReduce::norm2:
      return x * x;
    case RowReduce::norm_p:
      if constexpr (std::is_floating_point_v<A>) {
        return ::pow(x < A(0) ? -x : x, p);
      } else {
        return x;
      }
    default:
      return x;
  }
}

template <typename A>
__device__ inline A combine(RowReduce kind, A a, A b) {
  return kind == RowReduce::norm_inf ? nan_max(a, b) : a + b;
}

template <typename A>
__device__ inline A warp_combine(RowReduce kind, A v) {
  return kind == RowReduce::norm_inf ? warp_max(v) : warp_sum(v);
}

template <typename A>
__device__ inline A finish(RowReduce kind, A v, std::int64_t r, A p) {
  if constexpr (std::is_floating_point_v<A>) {
    switch (kind) {
      case RowReduce::mean:
        return r == 0 ? A(NAN) : v / static_cast<A>(r);
      case RowReduce::norm2:
        return ::sqrt(v);
      case RowReduce::norm_p:
        return ::pow(v, A(1) / p);
      default:
        return v;
    }
  } else {
    return v;
  }
}

// Pass 1: warp w reduces segment (w % s) of row (w / s); with s == 1 it writes the result.
template <typename T, typename A>
__global__ void row_reduce_kernel(RowReduce kind, T* out, A* partial, const T* in, std::int64_t k,
                                  std::int64_t r, std::int64_t s, A p) {
  const int lane = threadIdx.x % kWarp;
  const std::int64_t seg_len = (r + s - 1) / s;
  for (std::int64_t w = global_warp(); w < k * s; w += warp_count()) {
    const std::int64_t row = w / s;
    const std::int64_t begin = (w % s) * seg_len;
    const std::int64_t end = begin + seg_len < r ? begin + seg_len : r;
    const T* x = in + row * r;
    A acc = A(0);
    for (std::int64_t i = begin + lane; i < end; i += kWarp) {
      acc = combine(kind, acc,
                    map_value<A>(kind, static_cast<A>(static_cast<compute_t<T>>(x[i])), p));
    }
    acc = warp_combine(kind, acc);
    if (lane == 0) {
      if (s == 1) {
        out[row] = T(static_cast<compute_t<T>>(finish(kind, acc, r, p)));
      } else {
        partial[w] = acc;
      }
    }
  }
}

// Short rows (r <= kShortRow): one thread per row, no shuffles (a warp per row would leave most
// lanes idle).
constexpr std::int64_t kShortRow = 16;

template <typename T, typename A>
__global__ void short_row_reduce_kernel(RowReduce kind, T* out, const T* in, std::int64_t k,
                                        std::int64_t r, A p) {
  for (std::int64_t row = global_index(); row < k; row += global_stride()) {
    const T* x = in + row * r;
    A acc = A(0);
    for (std::int64_t i = 0; i < r; ++i)
      acc = combine(kind, acc,
                    map_value<A>(kind, static_cast<A>(static_cast<compute_t<T>>(x[i])), p));
    out[row] = T(static_cast<compute_t<T>>(finish(kind, acc, r, p)));
  }
}

// Pass 2: one warp per row combines its s partials.
template <typename T, typename A>
__global__ void row_combine_kernel(RowReduce kind, T* out, const A* partial, std::int64_t k,
                                   std::int64_t r, std::int64_t s, A p) {
  const int lane = threadIdx.x % kWarp;
  for (std::int64_t row = global_warp(); row < k; row += warp_count()) {
    A acc = A(0);
    for (std::int64_t i = lane; i < s; i += kWarp)
      acc = combine(kind, acc, partial[row * s + i]);
    acc = warp_combine(kind, acc);
    if (lane == 0) out[row] = T(static_cast<compute_t<T>>(finish(kind, acc, r, p)));
  }
}

// ---- arg-extremes -------------------------------------------------------------------------------

// Whether (v2, i2) replaces (v1, i1): the first NaN wins, then the extreme, then the lower index;
// index -1 is "nothing yet".
template <bool Greater, typename C>
__device__ inline bool replaces(C v1, std::int64_t i1, C v2, std::int64_t i2) {
  if (i2 < 0) return false;
  if (i1 < 0) return true;
  const bool n1 = v1 != v1;
  const bool n2 = v2 != v2;
  if (n1 || n2) return n2 && (!n1 || i2 < i1);
  if (Greater ? v2 > v1 : v2 < v1) return true;
  return v2 == v1 && i2 < i1;
}

template <bool Greater, typename T>
__device__ inline void warp_arg(T& v, std::int64_t& idx) {
  using C = compute_t<T>;
  for (int o = kWarp / 2; o > 0; o /= 2) {
    const C ov = __shfl_xor_sync(0xffffffffu, static_cast<C>(v), o);
    const std::int64_t oi = __shfl_xor_sync(0xffffffffu, idx, o);
    if (replaces<Greater, C>(static_cast<C>(v), idx, ov, oi)) {
      v = T(ov);
      idx = oi;
    }
  }
}

template <bool Greater, typename T>
__global__ void row_arg_kernel(T* values, std::int64_t* indices, T* pv, std::int64_t* pi,
                               const T* in, std::int64_t k, std::int64_t r, std::int64_t s) {
  using C = compute_t<T>;
  const int lane = threadIdx.x % kWarp;
  const std::int64_t seg_len = (r + s - 1) / s;
  for (std::int64_t w = global_warp(); w < k * s; w += warp_count()) {
    const std::int64_t row = w / s;
    const std::int64_t begin = (w % s) * seg_len;
    const std::int64_t end = begin + seg_len < r ? begin + seg_len : r;
    const T* x = in + row * r;
    T best = T(C(0));
    std::int64_t bi = -1;
    for (std::int64_t i = begin + lane; i < end; i += kWarp) {
      if (replaces<Greater, C>(static_cast<C>(best), bi, static_cast<C>(x[i]), i)) {
        best = x[i];
        bi = i;
      }
    }
    warp_arg<Greater>(best, bi);
    if (lane == 0) {
      if (s == 1) {
        if (values != nullptr) values[row] = best;
        indices[row] = bi;
      } else {
        pv[w] = best;
        pi[w] = bi;
      }
    }
  }
}

template <bool Greater, typename T>
__global__ void short_row_arg_kernel(T* values, std::int64_t* indices, const T* in, std::int64_t k,
                                     std::int64_t r) {
  using C = compute_t<T>;
  for (std::int64_t row = global_index(); row < k; row += global_stride()) {
    const T* x = in + row * r;
    T best = x[0];
    std::int64_t bi = 0;
    for (std::int64_t i = 1; i < r; ++i) {
      if (replaces<Greater, C>(static_cast<C>(best), bi, static_cast<C>(x[i]), i)) {
        best = x[i];
        bi = i;
      }
    }
    if (values != nullptr) values[row] = best;
    indices[row] = bi;
  }
}

template <bool Greater, typename T>
__global__ void row_arg_combine_kernel(T* values, std::int64_t* indices, const T* pv,
                                       const std::int64_t* pi, std::int64_t k, std::int64_t s) {
  using C = compute_t<T>;
  const int lane = threadIdx.x % kWarp;
  for (std::int64_t row = global_warp(); row < k; row += warp_count()) {
    T best = T(C(0));
    std::int64_t bi = -1;
    for (std::int64_t i = lane; i < s; i += kWarp) {
      const std::int64_t j = row * s + i;
      if (replaces<Greater, C>(static_cast<C>(best), bi, static_cast<C>(pv[j]), pi[j])) {
        best = pv[j];
        bi = pi[j];
      }
    }
    warp_arg<Greater>(best, bi);
    if (lane == 0) {
      if (values != nullptr) values[row] = best;
      indices[row] = bi;
    }
  }
}

// ---- softmax ------------------------------------------------------------------------------------

// Sum / NaN-propagating max over a group of G threads (a warp, or the whole block).
template <int G, typename A>
__device__ inline A group_sum(A v) {
  if constexpr (G == kWarp) {
    return warp_sum(v);
  } else {
    return block_sum(v);
  }
}
template <int G, typename A>
__device__ inline A group_max(A v) {
  if constexpr (G == kWarp) {
    return warp_max(v);
  } else {
    return block_max(v, -std::numeric_limits<A>::infinity());
  }
}

template <typename A>
__device__ inline A exp_of(A x) {
  return ::exp(x);
}
template <typename A>
__device__ inline A log_of(A x) {
  return ::log(x);
}

// Rows handled by groups of G threads (G = 32: a warp per row; G = kThreads: a block per row).
template <int G, bool Log, typename T>
__global__ void softmax_kernel(T* out, const T* in, std::int64_t rows, std::int64_t n) {
  using A = std::conditional_t<std::is_same_v<T, double>, double, float>;
  const int lane = threadIdx.x % G;
  const std::int64_t groups_per_block = kThreads / G;
  const std::int64_t first = blockIdx.x * groups_per_block + threadIdx.x / G;
  const std::int64_t step = static_cast<std::int64_t>(gridDim.x) * groups_per_block;
  // Every thread of a block runs the same number of iterations (block reductions sync).
  const std::int64_t iterations = (rows + step - 1) / step;
  for (std::int64_t it = 0; it < iterations; ++it) {
    const std::int64_t row = first + it * step;
    const bool active = row < rows;
    const T* x = in + (active ? row : 0) * n;
    A m = -std::numeric_limits<A>::infinity();
    if (active) {
      for (std::int64_t i = lane; i < n; i += G)
        m = nan_max(m, static_cast<A>(static_cast<compute_t<T>>(x[i])));
    }
    m = group_max<G>(m);
    if (m == -std::numeric_limits<A>::infinity()) m = A(0);  // all -inf: avoid inf - inf
    A s = A(0);
    if (active) {
      for (std::int64_t i = lane; i < n; i += G)
        s += exp_of(static_cast<A>(static_cast<compute_t<T>>(x[i])) - m);
    }
    s = group_sum<G>(s);
    if (!active) continue;
    T* y = out + row * n;
    if constexpr (Log) {
      const A log_s = log_of(s);
      for (std::int64_t i = lane; i < n; i += G)
        y[i] = T(static_cast<compute_t<T>>((static_cast<A>(static_cast<compute_t<T>>(x[i])) - m) -
                                           log_s));
    } else {
      const A inv = A(1) / s;
      for (std::int64_t i = lane; i < n; i += G)
        y[i] = T(static_cast<compute_t<T>>(
            exp_of(static_cast<A>(static_cast<compute_t<T>>(x[i])) - m) * inv));
    }
  }
}

// ---- cross-entropy ------------------------------------------------------------------------------

__global__ void init_bad_kernel(std::int64_t* bad, std::int64_t value) {
  *bad = value;
}

// Row statistics (one warp): log-sum-exp and the mean of the logits, in double.
template <typename T>
__device__ inline void row_stats(const T* x, std::int64_t c, int lane, double& lse, double& mean) {
  double m = -INFINITY;
  for (std::int64_t i = lane; i < c; i += kWarp)
    m = nan_max(m, static_cast<double>(static_cast<compute_t<T>>(x[i])));
  m = warp_max(m);
  if (m == -INFINITY) m = 0;
  double s = 0.0;
  double sum = 0.0;
  for (std::int64_t i = lane; i < c; i += kWarp) {
    const double v = static_cast<double>(static_cast<compute_t<T>>(x[i]));
    s += ::exp(v - m);
    sum += v;
  }
  s = warp_sum(s);
  sum = warp_sum(sum);
  lse = m + ::log(s);
  mean = sum / static_cast<double>(c);
}

__device__ inline bool target_ok(std::int64_t t, std::int64_t c) {
  return t >= 0 && t < c;
}

template <typename T>
__global__ void ce_rows_kernel(double* row_loss, const T* logits, const std::int64_t* target,
                               std::int64_t n, std::int64_t c, std::int64_t ignore_index,
                               double smoothing, std::int64_t* bad) {
  const int lane = threadIdx.x % kWarp;
  for (std::int64_t r = global_warp(); r < n; r += warp_count()) {
    const std::int64_t t = target[r];
    if (t == ignore_index) {
      if (lane == 0) row_loss[r] = 0.0;
      continue;
    }
    if (!target_ok(t, c)) {
      if (lane == 0) {
        row_loss[r] = 0.0;
        atomicMin(reinterpret_cast<unsigned long long*>(bad), static_cast<unsigned long long>(r));
      }
      continue;
    }
    const T* x = logits + r * c;
    double lse = 0.0;
    double mean = 0.0;
    row_stats(x, c, lane, lse, mean);
    if (lane == 0) {
      const double nll = lse - static_cast<double>(static_cast<compute_t<T>>(x[t]));
      row_loss[r] = (1.0 - smoothing) * nll + smoothing * (lse - mean);
    }
  }
}

// One block: the mean over valid rows in a fixed order (thread j sums rows j, j + T, ...).
template <typename T>
__global__ void ce_finish_kernel(T* loss, const double* row_loss, const std::int64_t* target,
                                 std::int64_t n, std::int64_t ignore_index) {
  double total = 0.0;
  double valid = 0.0;
  for (std::int64_t r = threadIdx.x; r < n; r += blockDim.x) {
    if (target[r] == ignore_index) continue;
    total += row_loss[r];
    valid += 1.0;
  }
  total = block_sum(total);
  valid = block_sum(valid);
  if (threadIdx.x == 0) *loss = T(static_cast<compute_t<T>>(valid == 0.0 ? NAN : total / valid));
}

// One block: scale = grad / (number of valid rows), in double (NaN when none is valid).
template <typename T>
__global__ void ce_scale_kernel(double* scale, const T* grad, const std::int64_t* target,
                                std::int64_t n, std::int64_t ignore_index) {
  double valid = 0.0;
  for (std::int64_t r = threadIdx.x; r < n; r += blockDim.x)
    valid += target[r] == ignore_index ? 0.0 : 1.0;
  valid = block_sum(valid);
  if (threadIdx.x == 0) {
    *scale = static_cast<double>(static_cast<compute_t<T>>(*grad)) / valid;
  }
}

template <typename T>
__global__ void ce_backward_kernel(T* grad_logits, const double* scale, const T* logits,
                                   const std::int64_t* target, std::int64_t n, std::int64_t c,
                                   std::int64_t ignore_index, double smoothing, std::int64_t* bad) {
  const int lane = threadIdx.x % kWarp;
  const double off = smoothing / static_cast<double>(c);
  for (std::int64_t r = global_warp(); r < n; r += warp_count()) {
    const std::int64_t t = target[r];
    T* g = grad_logits + r * c;
    if (t == ignore_index || !target_ok(t, c)) {
      if (t != ignore_index && lane == 0) {
        atomicMin(reinterpret_cast<unsigned long long*>(bad), static_cast<unsigned long long>(r));
      }
      for (std::int64_t i = lane; i < c; i += kWarp)
        g[i] = T(compute_t<T>(0));
      continue;
    }
    const T* x = logits + r * c;
    double lse = 0.0;
    double mean = 0.0;
    row_stats(x, c, lane, lse, mean);
    const double sc = *scale;
    for (std::int64_t i = lane; i < c; i += kWarp) {
      const double p = ::exp(static_cast<double>(static_cast<compute_t<T>>(x[i])) - lse);
      const double target_p = (i == t ? 1.0 - smoothing : 0.0) + off;
      g[i] = T(static_cast<compute_t<T>>(sc * (p - target_p)));
    }
  }
}

std::int64_t round_up(std::int64_t bytes) {
  return (bytes + 255) / 256 * 256;
}

}  // namespace

std::int64_t row_reduce_workspace_bytes(std::int64_t k, std::int64_t r) {
  const std::int64_t s = segments_for(k, r);
  return s == 1 ? 0 : round_up(k * s * static_cast<std::int64_t>(sizeof(double)));
}

int launch_row_reduce(RowReduce kind, int st, void* out, const void* in, std::int64_t k,
                      std::int64_t r, double p, void* workspace) {
  if (k == 0) return 0;
  const std::int64_t s = segments_for(k, r);
  return dispatch_all(st, [&](auto tag) {
    using T = decltype(tag);
    using A = acc_t<T>;
    if constexpr (!std::is_floating_point_v<A>) {
      if (kind != RowReduce::sum) return static_cast<int>(cudaErrorInvalidValue);
    }
    if (r <= kShortRow) {
      TB_LAUNCH(blocks_for(k), kThreads, short_row_reduce_kernel<T, A>)
      (kind, static_cast<T*>(out), static_cast<const T*>(in), k, r, static_cast<A>(p));
      return status();
    }
    auto* partial = static_cast<A*>(workspace);
    TB_LAUNCH(warp_blocks(k * s), kThreads, row_reduce_kernel<T, A>)
    (kind, static_cast<T*>(out), partial, static_cast<const T*>(in), k, r, s, static_cast<A>(p));
    if (s > 1) {
      TB_LAUNCH(warp_blocks(k), kThreads, row_combine_kernel<T, A>)
      (kind, static_cast<T*>(out), partial, k, r, s, static_cast<A>(p));
    }
    return status();
  });
}

std::int64_t row_arg_extreme_workspace_bytes(std::int64_t k, std::int64_t r) {
  const std::int64_t s = segments_for(k, r);
  return s == 1 ? 0 : round_up(k * s * 8) * 2;
}

int launch_row_arg_extreme(bool greater, int st, void* values, std::int64_t* indices,
                           const void* in, std::int64_t k, std::int64_t r, void* workspace) {
  if (k == 0) return 0;
  if (r == 0) return static_cast<int>(cudaErrorInvalidValue);
  const std::int64_t s = segments_for(k, r);
  return dispatch_all(st, [&](auto tag) {
    using T = decltype(tag);
    T* pv = static_cast<T*>(workspace);
    auto* pi = reinterpret_cast<std::int64_t*>(static_cast<char*>(workspace) + round_up(k * s * 8));
    if (s == 1) pi = nullptr;
    auto run = [&](auto g) {
      constexpr bool G = decltype(g)::value;
      if (r <= kShortRow) {
        TB_LAUNCH(blocks_for(k), kThreads, short_row_arg_kernel<G, T>)
        (static_cast<T*>(values), indices, static_cast<const T*>(in), k, r);
        return;
      }
      TB_LAUNCH(warp_blocks(k * s), kThreads, row_arg_kernel<G, T>)
      (static_cast<T*>(values), indices, pv, pi, static_cast<const T*>(in), k, r, s);
      if (s > 1) {
        TB_LAUNCH(warp_blocks(k), kThreads, row_arg_combine_kernel<G, T>)
        (static_cast<T*>(values), indices, pv, pi, k, s);
      }
    };
    if (greater) {
      run(std::true_type{});
    } else {
      run(std::false_type{});
    }
    return status();
  });
}

int launch_softmax(bool log, int st, void* out, const void* in, std::int64_t rows, std::int64_t n) {
  if (rows == 0 || n == 0) return 0;
  return dispatch_float(st, [&](auto tag) {
    using T = decltype(tag);
    auto* y = static_cast<T*>(out);
    const auto* x = static_cast<const T*>(in);
    if (n <= 2048) {
      const int blocks = warp_blocks(rows);
      if (log) {
        TB_LAUNCH(blocks, kThreads, softmax_kernel<kWarp, true, T>)(y, x, rows, n);
      } else {
        TB_LAUNCH(blocks, kThreads, softmax_kernel<kWarp, false, T>)(y, x, rows, n);
      }
    } else {
      const int blocks = static_cast<int>(rows < 65535 * 16 ? rows : 65535 * 16);
      if (log) {
        TB_LAUNCH(blocks, kThreads, softmax_kernel<kThreads, true, T>)(y, x, rows, n);
      } else {
        TB_LAUNCH(blocks, kThreads, softmax_kernel<kThreads, false, T>)(y, x, rows, n);
      }
    }
    return status();
  });
}

std::int64_t cross_entropy_workspace_bytes(std::int64_t n) {
  return round_up((n < 1 ? 1 : n) * static_cast<std::int64_t>(sizeof(double)));
}

int launch_cross_entropy(int st, void* loss, const void* logits, const std::int64_t* target,
                         std::int64_t n, std::int64_t c, std::int64_t ignore_index,
                         double smoothing, std::int64_t* bad_row, void* workspace) {
  TB_LAUNCH(1, 1, init_bad_kernel)(bad_row, n);
  return dispatch_float(st, [&](auto tag) {
    using T = decltype(tag);
    auto* rows = static_cast<double*>(workspace);
    if (n > 0) {
      TB_LAUNCH(warp_blocks(n), kThreads, ce_rows_kernel<T>)
      (rows, static_cast<const T*>(logits), target, n, c, ignore_index, smoothing, bad_row);
    }
    TB_LAUNCH(1, kThreads, ce_finish_kernel<T>)
    (static_cast<T*>(loss), rows, target, n, ignore_index);
    return status();
  });
}

int launch_cross_entropy_backward(int st, void* grad_logits, const void* grad, const void* logits,
                                  const std::int64_t* target, std::int64_t n, std::int64_t c,
                                  std::int64_t ignore_index, double smoothing,
                                  std::int64_t* bad_row, void* workspace) {
  TB_LAUNCH(1, 1, init_bad_kernel)(bad_row, n);
  if (n == 0) return status();
  return dispatch_float(st, [&](auto tag) {
    using T = decltype(tag);
    auto* scale = static_cast<double*>(workspace);
    TB_LAUNCH(1, kThreads, ce_scale_kernel<T>)
    (scale, static_cast<const T*>(grad), target, n, ignore_index);
    TB_LAUNCH(warp_blocks(n), kThreads, ce_backward_kernel<T>)
    (static_cast<T*>(grad_logits), scale, static_cast<const T*>(logits), target, n, c, ignore_index,
     smoothing, bad_row);
    return status();
  });
}

}  // namespace tb::cuda
