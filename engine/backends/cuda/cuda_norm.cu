// RMSNorm and LayerNorm on CUDA, forward and backward: a warp per row (statistics by warp sums,
// then the row written), and the weight/bias gradients as per-chunk partial sums over fixed
// groups of rows (a thread per column) added in chunk order by a second launch — no atomics, so
// results are deterministic. Arithmetic in float (double for float64).
#include <cmath>

#include "engine/backends/cuda/cuda_device.cuh"

namespace tb::cuda {

namespace {

using namespace dev;  // NOLINT(google-build-using-namespace): kernel-file helpers

constexpr int kRowsPerBlock = 8;     // warps per block, a row each
constexpr std::int64_t kChunk = 64;  // rows per partial sum of the weight/bias gradients (at least)
constexpr std::int64_t kMaxChunks = 65535;  // grid.y limit

template <typename T, bool Rms>
__global__ void norm_forward_kernel(const T* x, const T* w, const T* b, T* y, compute_t<T>* stats,
                                    std::int64_t rows, std::int64_t n, double eps) {
  using C = compute_t<T>;
  const int lane = static_cast<int>(threadIdx.x) % kWarp;
  const std::int64_t r =
      static_cast<std::int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.x / kWarp;
  if (r >= rows) return;  // a whole warp leaves together
  const T* xr = x + r * n;
  C mean = 0;
  if (!Rms) {
    C s = 0;
    for (std::int64_t j = lane; j < n; j += kWarp)
      s += static_cast<C>(xr[j]);
    mean = warp_sum(s) / static_cast<C>(n);
  }
  C ss = 0;
  for (std::int64_t j = lane; j < n; j += kWarp) {
    const C d = static_cast<C>(xr[j]) - mean;
    ss += d * d;
  }
  const C var = warp_sum(ss) / static_cast<C>(n);
  const C rstd = C(1) / ::sqrt(var + static_cast<C>(eps));
  T* yr = y + r * n;
  for (std::int64_t j = lane; j < n; j += kWarp) {
    C v = (static_cast<C>(xr[j]) - mean) * rstd;
    if (w != nullptr) v *= static_cast<C>(w[j]);
    if (b != nullptr) v += static_cast<C>(b[j]);
    yr[j] = T(v);
  }
  if (lane == 0) {
    stats[2 * r] = mean;
    stats[2 * r + 1] = rstd;
  }
}

template <typename T, bool Rms>
__global__ void norm_dx_kernel(const T* dy, const T* x, const T* w, const compute_t<T>* stats,
                               T* dx, std::int64_t rows, std::int64_t n) {
  using C = compute_t<T>;
  const int lane = static_cast<int>(threadIdx.x) % kWarp;
  const std::int64_t r =
      static_cast<std::int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.x / kWarp;
  if (r >= rows) return;
  const T* xr = x + r * n;
  const T* gr = dy + r * n;
  const C mean = stats[2 * r];
  const C rstd = stats[2 * r + 1];
  C s1 = 0;
  C s2 = 0;
  for (std::int64_t j = lane; j < n; j += kWarp) {
    const C xhat = (static_cast<C>(xr[j]) - mean) * rstd;
    const C g = w != nullptr ? static_cast<C>(gr[j]) * static_cast<C>(w[j]) : static_cast<C>(gr[j]);
    s1 += g;
    s2 += g * xhat;
  }
  const C m1 = Rms ? C(0) : warp_sum(s1) / static_cast<C>(n);
  const C m2 = warp_sum(s2) / static_cast<C>(n);
  T* dxr = dx + r * n;
  for (std::int64_t j = lane; j < n; j += kWarp) {
    const C xhat = (static_cast<C>(xr[j]) - mean) * rstd;
    const C g = w != nullptr ? static_cast<C>(gr[j]) * static_cast<C>(w[j]) : static_cast<C>(gr[j]);
    dxr[j] = T(rstd * (g - m1 - xhat * m2));
  }
}

// partial_w[c][j] = Σ_{rows r of chunk c} dy[r][j]·x̂[r][j], partial_b[c][j] = Σ dy[r][j]
// (either null when not wanted); blockIdx.y = chunk, a thread per column.
template <typename T>
__global__ void norm_partials_kernel(const T* dy, const T* x, const compute_t<T>* stats,
                                     compute_t<T>* partial_w, compute_t<T>* partial_b,
                                     std::int64_t rows, std::int64_t n, std::int64_t chunk) {
  using C = compute_t<T>;
  const std::int64_t j = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (j >= n) return;
  const std::int64_t c = blockIdx.y;
  const std::int64_t r1 = (c + 1) * chunk < rows ? (c + 1) * chunk : rows;
  C aw = 0;
  C ab = 0;
  for (std::int64_t r = c * chunk; r < r1; ++r) {
    const C g = static_cast<C>(dy[r * n + j]);
    if (partial_w != nullptr)
      aw += g * ((static_cast<C>(x[r * n + j]) - stats[2 * r]) * stats[2 * r + 1]);
    ab += g;
  }
  if (partial_w != nullptr) partial_w[c * n + j] = aw;
  if (partial_b != nullptr) partial_b[c * n + j] = ab;
}

template <typename T>
__global__ void norm_sum_chunks_kernel(const compute_t<T>* partial, T* out, std::int64_t chunks,
                                       std::int64_t n) {
  using C = compute_t<T>;
  const std::int64_t j = global_index();
  if (j >= n) return;
  C acc = 0;
  for (std::int64_t c = 0; c < chunks; ++c)
    acc += partial[c * n + j];
  out[j] = T(acc);
}

unsigned row_blocks(std::int64_t rows) {
  return static_cast<unsigned>((rows + kRowsPerBlock - 1) / kRowsPerBlock);
}

// Rows per partial sum: kChunk, more when the rows would need over kMaxChunks chunks.
std::int64_t rows_per_chunk(std::int64_t rows) {
  const std::int64_t spread = (rows + kMaxChunks - 1) / kMaxChunks;
  return spread > kChunk ? spread : kChunk;
}

}  // namespace

std::int64_t norm_partial_chunks(std::int64_t rows) {
  const std::int64_t chunk = rows_per_chunk(rows);
  return (rows + chunk - 1) / chunk;
}

int launch_row_norm(int st, bool rms, const void* x, const void* w, const void* b, void* y,
                    void* stats, std::int64_t rows, std::int64_t n, double eps) {
  if (rows == 0 || n == 0) return 0;
  return dispatch_float(st, [&](auto tag) {
    using T = decltype(tag);
    using C = compute_t<T>;
    const auto* xp = static_cast<const T*>(x);
    const auto* wp = static_cast<const T*>(w);
    const auto* bp = static_cast<const T*>(b);
    if (rms) {
      TB_LAUNCH(row_blocks(rows), kRowsPerBlock * kWarp, norm_forward_kernel<T, true>)
      (xp, wp, bp, static_cast<T*>(y), static_cast<C*>(stats), rows, n, eps);
    } else {
      TB_LAUNCH(row_blocks(rows), kRowsPerBlock * kWarp, norm_forward_kernel<T, false>)
      (xp, wp, bp, static_cast<T*>(y), static_cast<C*>(stats), rows, n, eps);
    }
    return status();
  });
}

int launch_row_norm_backward(int st, bool rms, const void* dy, const void* x, const void* w,
                             const void* stats, void* dx, void* dw, void* db, void* partial_w,
                             void* partial_b, std::int64_t rows, std::int64_t n) {
  if (n == 0) return 0;
  return dispatch_float(st, [&](auto tag) {
    using T = decltype(tag);
    using C = compute_t<T>;
    const auto* gp = static_cast<const T*>(dy);
    const auto* xp = static_cast<const T*>(x);
    const auto* sp = static_cast<const C*>(stats);
    const std::int64_t chunks = norm_partial_chunks(rows);
    if (rows > 0) {
      if (rms) {
        TB_LAUNCH(row_blocks(rows), kRowsPerBlock * kWarp, norm_dx_kernel<T, true>)
        (gp, xp, static_cast<const T*>(w), sp, static_cast<T*>(dx), rows, n);
      } else {
        TB_LAUNCH(row_blocks(rows), kRowsPerBlock * kWarp, norm_dx_kernel<T, false>)
        (gp, xp, static_cast<const T*>(w), sp, static_cast<T*>(dx), rows, n);
      }
      if (const int err = status(); err != 0) return err;
      if (dw != nullptr || db != nullptr) {
        const dim3 grid(static_cast<unsigned>((n + kThreads - 1) / kThreads),
                        static_cast<unsigned>(chunks));
        TB_LAUNCH(grid, kThreads, norm_partials_kernel<T>)
        (gp, xp, sp, dw != nullptr ? static_cast<C*>(partial_w) : nullptr,
         db != nullptr ? static_cast<C*>(partial_b) : nullptr, rows, n, rows_per_chunk(rows));
        if (const int err = status(); err != 0) return err;
      }
    }
    for (const auto& [out, part] : {std::pair{dw, partial_w}, {db, partial_b}}) {
      if (out == nullptr) continue;
      TB_LAUNCH(blocks_for(n), kThreads, norm_sum_chunks_kernel<T>)
      (static_cast<const C*>(part), static_cast<T*>(out), chunks, n);
      if (const int err = status(); err != 0) return err;
    }
    return 0;
  });
}

}  // namespace tb::cuda
