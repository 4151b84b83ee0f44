// Fused scaled dot-product attention on CUDA, flash-style: no [T, S] score matrix in memory. A
// block is a few warps, one query row (forward, dq) or key row (dk/dv) each, of one (batch,
// head); tiles of the other side's rows are staged in shared memory and shared by the warps.
// Within a tile each lane scores one row, then the tile's probabilities are broadcast by shuffles
// into the per-lane accumulators (lane c owns columns c, c + 32, ...). Softmax in float (double
// for float64) with an online max; the forward stores each row's log-sum-exp, the backward
// recomputes the probabilities from it. Sums run in a fixed order: results are deterministic.
#include <cmath>
#include <type_traits>

#include "engine/backends/cuda/cuda_device.cuh"

namespace tb::cuda {

namespace {

using namespace dev;  // NOLINT(google-build-using-namespace): kernel-file helpers

template <typename T>
struct Rows {
  const T* p;
  std::int64_t sb, sh, sl;
  __device__ const T* row(std::int64_t b, std::int64_t h, std::int64_t l) const {
    return p + b * sb + h * sh + l * sl;
  }
};

template <typename T>
Rows<T> rows_of(const AttnOperand& o) {
  return {static_cast<const T*>(o.p), o.sb, o.sh, o.sl};
}

struct Shape {
  std::int64_t b, h, t, d, hkv, s, e, group;
  double scale;
  bool causal;
};

Shape shape_of(const AttentionArgs& a) {
  return {a.b, a.h, a.t, a.d, a.hkv, a.s, a.e, a.hkv > 0 ? a.h / a.hkv : 1, a.scale, a.causal};
}

__device__ inline std::int64_t min64(std::int64_t a, std::int64_t b) {
  return a < b ? a : b;
}

template <typename C>
__device__ inline C dot_row(const C* a, const C* b, std::int64_t n) {
  C acc = 0;
  for (std::int64_t k = 0; k < n; ++k)
    acc += a[k] * b[k];
  return acc;
}

// Copies `rows` rows of `width` elements (row r from src(r)) into tile[r][0, width), as C.
template <typename T, typename C, int Stride, typename Src>
__device__ inline void stage(C (*tile)[Stride], int rows, std::int64_t width, Src src) {
  for (std::int64_t x = threadIdx.x; x < rows * width; x += blockDim.x) {
    const auto r = static_cast<int>(x / width);
    const std::int64_t c = x % width;
    tile[r][c] = static_cast<C>(src(r)[c]);
  }
}

// Where a warp's row is: the block is tile `blockIdx.x % tiles` of the (batch, head) pair
// `blockIdx.x / tiles` of a [batch, heads, rows] grid; the warp takes row first + warp.
struct RowOf {
  std::int64_t b, head, first, row;
  bool active;
};

template <int Warps>
__device__ inline RowOf row_of(std::int64_t heads, std::int64_t rows, int warp) {
  const std::int64_t tiles = (rows + Warps - 1) / Warps;
  const std::int64_t pair = static_cast<std::int64_t>(blockIdx.x) / tiles;
  const std::int64_t first = (static_cast<std::int64_t>(blockIdx.x) % tiles) * Warps;
  return {pair / heads, pair % heads, first, first + warp, first + warp < rows};
}

// ---- forward ------------------------------------------------------------------------------------

template <typename T, int MaxD, int Chunk, int Warps>
__global__ void attention_forward_kernel(Shape n, Rows<T> q, Rows<T> k, Rows<T> v, T* out,
                                         compute_t<T>* lse) {
  using C = compute_t<T>;
  constexpr int kPer = MaxD / kWarp;
  __shared__ C ks[Chunk][MaxD + 1];
  __shared__ C vs[Chunk][MaxD + 1];
  __shared__ C qs[Warps][MaxD];
  const int lane = static_cast<int>(threadIdx.x) % kWarp;
  const int warp = static_cast<int>(threadIdx.x) / kWarp;
  const RowOf at = row_of<Warps>(n.h, n.t, warp);  // query rows of (batch, head)
  const std::int64_t b = at.b, h = at.head, first = at.first, i = at.row;
  const std::int64_t bh = b * n.h + h;
  const std::int64_t hk = h / n.group;
  const bool active = at.active;
  if (active) {
    const T* qr = q.row(b, h, i);
    for (std::int64_t c = lane; c < n.d; c += kWarp)
      qs[warp][c] = static_cast<C>(qr[c]);
  }
  const std::int64_t kend = n.causal ? min64(n.s, min64(n.t, first + Warps)) : n.s;
  const std::int64_t jend = !active ? 0 : n.causal ? min64(i + 1, n.s) : n.s;
  const auto scale = static_cast<C>(n.scale);
  C m = -INFINITY;
  C l = 0;
  C acc[kPer] = {};
  for (std::int64_t j0 = 0; j0 < kend; j0 += Chunk) {
    __syncthreads();  // the previous tile is no longer read (and qs is visible)
    const auto rows = static_cast<int>(min64(Chunk, kend - j0));
    stage<T, C, MaxD + 1>(ks, rows, n.d, [&](int r) { return k.row(b, hk, j0 + r); });
    stage<T, C, MaxD + 1>(vs, rows, n.e, [&](int r) { return v.row(b, hk, j0 + r); });
    __syncthreads();
    if (j0 < jend) {  // warp-uniform
      const bool valid = lane < Chunk && j0 + lane < jend;
      const C s = valid ? scale * dot_row(qs[warp], ks[lane], n.d) : C(-INFINITY);
      const C m_new = nan_max(m, warp_max(s));
      const C corr = ::exp(m - m_new);
      const C p = valid ? ::exp(s - m_new) : C(0);
      l = l * corr + p;
      for (int t = 0; t < kPer; ++t)
        acc[t] *= corr;
      const auto cnt = static_cast<int>(min64(rows, jend - j0));
      for (int jj = 0; jj < cnt; ++jj) {
        const C pj = __shfl_sync(0xffffffffu, p, jj);
        for (int t = 0; t < kPer; ++t) {
          const std::int64_t c = lane + t * kWarp;
          if (c < n.e) acc[t] += pj * vs[jj][c];
        }
      }
      m = m_new;
    }
  }
  if (active) {
    // No keys: an empty sum (zeros) and lse -inf. Otherwise NaN/inf scores propagate, as on the
    // CPU and in PyTorch.
    const C total = warp_sum(l);
    const bool keys = jend > 0;
    const std::int64_t row = bh * n.t + i;
    for (int t = 0; t < kPer; ++t) {
      const std::int64_t c = lane + t * kWarp;
      if (c < n.e) out[row * n.e + c] = T(keys ? acc[t] / total : C(0));
    }
    if (lane == 0) lse[row] = keys ? m + ::log(total) : C(-INFINITY);
  }
}

// ---- backward: dq (query rows), and D_i = dout_i · out_i for the dk/dv pass ---------------------

template <typename T, int MaxD, int Chunk, int Warps>
__global__ void attention_dq_kernel(Shape n, Rows<T> q, Rows<T> k, Rows<T> v, Rows<T> g, Rows<T> o,
                                    const compute_t<T>* lse, compute_t<T>* dvec, T* dq) {
  using C = compute_t<T>;
  constexpr int kPer = MaxD / kWarp;
  __shared__ C ks[Chunk][MaxD + 1];
  __shared__ C vs[Chunk][MaxD + 1];
  __shared__ C qs[Warps][MaxD];
  __shared__ C gs[Warps][MaxD];
  const int lane = static_cast<int>(threadIdx.x) % kWarp;
  const int warp = static_cast<int>(threadIdx.x) / kWarp;
  const RowOf at = row_of<Warps>(n.h, n.t, warp);  // query rows of (batch, head)
  const std::int64_t b = at.b, h = at.head, first = at.first, i = at.row;
  const std::int64_t bh = b * n.h + h;
  const std::int64_t hk = h / n.group;
  const bool active = at.active;
  const std::int64_t row = bh * n.t + i;
  C di = 0;
  C lse_i = 0;
  if (active) {
    const T* qr = q.row(b, h, i);
    const T* gr = g.row(b, h, i);
    const T* orow = o.row(b, h, i);
    for (std::int64_t c = lane; c < n.d; c += kWarp)
      qs[warp][c] = static_cast<C>(qr[c]);
    C part = 0;
    for (std::int64_t c = lane; c < n.e; c += kWarp) {
      const auto gc = static_cast<C>(gr[c]);
      gs[warp][c] = gc;
      part += gc * static_cast<C>(orow[c]);
    }
    di = warp_sum(part);
    lse_i = lse[row];
    if (lane == 0) dvec[row] = di;
  }
  const std::int64_t kend = n.causal ? min64(n.s, min64(n.t, first + Warps)) : n.s;
  const std::int64_t jend = !active ? 0 : n.causal ? min64(i + 1, n.s) : n.s;
  const auto scale = static_cast<C>(n.scale);
  C acc[kPer] = {};
  for (std::int64_t j0 = 0; j0 < kend; j0 += Chunk) {
    __syncthreads();
    const auto rows = static_cast<int>(min64(Chunk, kend - j0));
    stage<T, C, MaxD + 1>(ks, rows, n.d, [&](int r) { return k.row(b, hk, j0 + r); });
    stage<T, C, MaxD + 1>(vs, rows, n.e, [&](int r) { return v.row(b, hk, j0 + r); });
    __syncthreads();
    if (j0 < jend) {
      const bool valid = lane < Chunk && j0 + lane < jend;
      C ds = 0;
      if (valid) {
        const C p = ::exp(scale * dot_row(qs[warp], ks[lane], n.d) - lse_i);
        ds = p * (dot_row(gs[warp], vs[lane], n.e) - di);
      }
      const auto cnt = static_cast<int>(min64(rows, jend - j0));
      for (int jj = 0; jj < cnt; ++jj) {
        const C dsj = __shfl_sync(0xffffffffu, ds, jj);
        for (int t = 0; t < kPer; ++t) {
          const std::int64_t c = lane + t * kWarp;
          if (c < n.d) acc[t] += dsj * ks[jj][c];
        }
      }
    }
  }
  if (active) {
    for (int t = 0; t < kPer; ++t) {
      const std::int64_t c = lane + t * kWarp;
      if (c < n.d) dq[row * n.d + c] = T(acc[t] * scale);
    }
  }
}

// ---- backward: dk, dv (key rows; the group's query heads summed in order) -----------------------

template <typename T, int MaxD, int Chunk, int Warps>
__global__ void attention_dkdv_kernel(Shape n, Rows<T> q, Rows<T> k, Rows<T> v, Rows<T> g,
                                      const compute_t<T>* lse, const compute_t<T>* dvec, T* dk,
                                      T* dv) {
  using C = compute_t<T>;
  constexpr int kPer = MaxD / kWarp;
  __shared__ C qs[Chunk][MaxD + 1];
  __shared__ C gs[Chunk][MaxD + 1];
  __shared__ C kw[Warps][MaxD];
  __shared__ C vw[Warps][MaxD];
  __shared__ C lse_s[Chunk];
  __shared__ C d_s[Chunk];
  const int lane = static_cast<int>(threadIdx.x) % kWarp;
  const int warp = static_cast<int>(threadIdx.x) / kWarp;
  const RowOf at = row_of<Warps>(n.hkv, n.s, warp);  // key rows of (batch, kv head)
  const std::int64_t b = at.b, hk = at.head, first = at.first, j = at.row;
  const std::int64_t bk = b * n.hkv + hk;
  const bool active = at.active;
  if (active) {
    const T* kr = k.row(b, hk, j);
    const T* vr = v.row(b, hk, j);
    for (std::int64_t c = lane; c < n.d; c += kWarp)
      kw[warp][c] = static_cast<C>(kr[c]);
    for (std::int64_t c = lane; c < n.e; c += kWarp)
      vw[warp][c] = static_cast<C>(vr[c]);
  }
  const auto scale = static_cast<C>(n.scale);
  C ak[kPer] = {};
  C av[kPer] = {};
  for (std::int64_t h = hk * n.group; h < (hk + 1) * n.group; ++h) {
    const std::int64_t qbase = (b * n.h + h) * n.t;
    // Queries that see a key of this block: i >= first when causal.
    for (std::int64_t i0 = n.causal ? first : 0; i0 < n.t; i0 += Chunk) {
      __syncthreads();
      const auto rows = static_cast<int>(min64(Chunk, n.t - i0));
      stage<T, C, MaxD + 1>(qs, rows, n.d, [&](int r) { return q.row(b, h, i0 + r); });
      stage<T, C, MaxD + 1>(gs, rows, n.e, [&](int r) { return g.row(b, h, i0 + r); });
      for (int r = static_cast<int>(threadIdx.x); r < rows; r += static_cast<int>(blockDim.x)) {
        lse_s[r] = lse[qbase + i0 + r];
        d_s[r] = dvec[qbase + i0 + r];
      }
      __syncthreads();
      if (active) {
        const std::int64_t i = i0 + lane;
        const bool valid = lane < rows && (!n.causal || i >= j);
        C p = 0;
        C ds = 0;
        if (valid) {
          p = ::exp(scale * dot_row(qs[lane], kw[warp], n.d) - lse_s[lane]);
          ds = p * (dot_row(gs[lane], vw[warp], n.e) - d_s[lane]);
        }
        for (int ii = 0; ii < rows; ++ii) {
          const C pi = __shfl_sync(0xffffffffu, p, ii);
          const C dsi = __shfl_sync(0xffffffffu, ds, ii);
          for (int t = 0; t < kPer; ++t) {
            const std::int64_t c = lane + t * kWarp;
            if (c < n.e) av[t] += pi * gs[ii][c];
            if (c < n.d) ak[t] += dsi * qs[ii][c];
          }
        }
      }
    }
  }
  if (active) {
    const std::int64_t row = bk * n.s + j;
    for (int t = 0; t < kPer; ++t) {
      const std::int64_t c = lane + t * kWarp;
      if (c < n.d) dk[row * n.d + c] = T(ak[t] * scale);
      if (c < n.e) dv[row * n.e + c] = T(av[t]);
    }
  }
}

// ---- launch -------------------------------------------------------------------------------------

std::int64_t tiles(std::int64_t rows, int warps) {
  return (rows + warps - 1) / warps;
}

// The tile configuration of a head size: 64 or 128 columns per row; float64 at 128 columns
// stages 16-row tiles with 4 warps (static shared memory under 48 KiB in every kernel).
template <int MaxD, int Chunk, int Warps>
struct Config {
  static constexpr int kMaxD = MaxD;
  static constexpr int kChunk = Chunk;
  static constexpr int kWarps = Warps;
};

// Calls f(Config<...>{}) for the widest row of the call, or fails for rows over
// kAttentionMaxHead (the caller composes those).
template <typename T, typename F>
int with_config(std::int64_t width, F&& f) {
  if (width <= 64) return f(Config<64, 32, 8>{});
  if (width > kAttentionMaxHead) return static_cast<int>(cudaErrorInvalidValue);
  if constexpr (std::is_same_v<T, double>) {
    return f(Config<128, 16, 4>{});
  } else {
    return f(Config<128, 32, 8>{});
  }
}

}  // namespace

int launch_attention_forward(const AttentionArgs& a, void* out, void* lse) {
  const Shape n = shape_of(a);
  if (n.b * n.h * n.t == 0) return 0;
  return dispatch_float(a.st, [&](auto tag) {
    using T = decltype(tag);
    using C = compute_t<T>;
    return with_config<T>(n.d > n.e ? n.d : n.e, [&](auto cfg) {
      using Cf = decltype(cfg);
      const auto grid = static_cast<unsigned>(n.b * n.h * tiles(n.t, Cf::kWarps));
      TB_LAUNCH(grid, Cf::kWarps * kWarp,
                attention_forward_kernel<T, Cf::kMaxD, Cf::kChunk, Cf::kWarps>)
      (n, rows_of<T>(a.q), rows_of<T>(a.k), rows_of<T>(a.v), static_cast<T*>(out),
       static_cast<C*>(lse));
      return status();
    });
  });
}

int launch_attention_backward(const AttentionArgs& a, const AttnOperand& g, const AttnOperand& out,
                              const void* lse, void* dvec, void* dq, void* dk, void* dv) {
  const Shape n = shape_of(a);
  return dispatch_float(a.st, [&](auto tag) {
    using T = decltype(tag);
    using C = compute_t<T>;
    return with_config<T>(n.d > n.e ? n.d : n.e, [&](auto cfg) {
      using Cf = decltype(cfg);
      if (n.b * n.h * n.t > 0) {
        const auto grid = static_cast<unsigned>(n.b * n.h * tiles(n.t, Cf::kWarps));
        TB_LAUNCH(grid, Cf::kWarps * kWarp,
                  attention_dq_kernel<T, Cf::kMaxD, Cf::kChunk, Cf::kWarps>)
        (n, rows_of<T>(a.q), rows_of<T>(a.k), rows_of<T>(a.v), rows_of<T>(g), rows_of<T>(out),
         static_cast<const C*>(lse), static_cast<C*>(dvec), static_cast<T*>(dq));
        if (const int err = status(); err != 0) return err;
      }
      if (n.b * n.hkv * n.s > 0) {
        const auto grid = static_cast<unsigned>(n.b * n.hkv * tiles(n.s, Cf::kWarps));
        TB_LAUNCH(grid, Cf::kWarps * kWarp,
                  attention_dkdv_kernel<T, Cf::kMaxD, Cf::kChunk, Cf::kWarps>)
        (n, rows_of<T>(a.q), rows_of<T>(a.k), rows_of<T>(a.v), rows_of<T>(g),
         static_cast<const C*>(lse), static_cast<const C*>(dvec), static_cast<T*>(dk),
         static_cast<T*>(dv));
        return status();
      }
      return 0;
    });
  });
}

}  // namespace tb::cuda
