// The Reference GEMM / SYRK kernels (reference_gemm.h).
#include "engine/backends/cpu/reference_gemm.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <new>
#include <type_traits>

#include "engine/core/error.h"
#include "engine/core/thread_pool.h"

namespace tb::cpu::detail {

int usable_threads() {
  return core::in_parallel_region() ? 1 : core::num_threads();
}

namespace {

// ---------------------------------------------------------------------------------------------
// Reference kernels: the classic packed GEMM (Goto / BLIS layout). C is cut into tiles that are
// computed independently in parallel; each tile walks K in kKc slices, packs its slice of op(A)
// into kMr-row panels and of op(B) into kNr-column panels (so transposes and leading dimensions
// only matter while packing), and runs a register-blocked kMr×kNr micro-kernel over them.

#if defined(__AVX512F__)
constexpr int kVecBytes = 64;
#elif defined(__AVX__)
constexpr int kVecBytes = 32;
#else
constexpr int kVecBytes = 16;
#endif

// Why 6×(2 vectors): 12 accumulators + 2 B vectors + 1 broadcast fit the 16 SSE/AVX registers;
// on the x86-64-v2 build it measured ~15% faster than 4×(2 vectors) and 4×(3 vectors).
template <typename T>
struct Blocking {
  static constexpr int kLanes = kVecBytes / static_cast<int>(sizeof(T));
  static constexpr int kNv = 2;              // vectors per micro-tile row
  static constexpr int kMr = 6;              // micro-tile rows
  static constexpr int kNr = kLanes * kNv;   // micro-tile columns
  static constexpr int64_t kKc = 256;        // K slice: a kKc×kNr B panel stays in L1
  static constexpr int64_t kMc = 72;         // tile rows: a kMc×kKc A block stays in L2
  static constexpr int64_t kNc = 256;        // tile columns
  static constexpr int64_t kSyrkTile = 128;  // square tiles for the triangular (SYRK) case
  static_assert(kNc % kNr == 0 && kSyrkTile % kNr == 0 && kMc % kMr == 0);
};

// Grow-only, 64-byte aligned scratch owned by one thread (reused across calls: no allocation in
// steady state).
template <typename T>
class Scratch {
 public:
  ~Scratch() { std::free(data_); }
  T* get(size_t count) {
    if (count > capacity_) {
      std::free(data_);
      const size_t bytes = (count * sizeof(T) + 63) / 64 * 64;
      data_ = static_cast<T*>(std::aligned_alloc(64, bytes));
      if (data_ == nullptr) {
        capacity_ = 0;
        throw std::bad_alloc();
      }
      capacity_ = count;
    }
    return data_;
  }

 private:
  T* data_ = nullptr;
  size_t capacity_ = 0;
};

// Packs rows [i0, i0+mc) × cols [p0, p0+kc) of op(A) as kMr-row panels: dst[panel][p][r].
template <typename T>
void pack_a(const GemmProblem<T>& g, int64_t i0, int64_t mc, int64_t p0, int64_t kc, T* dst) {
  constexpr int kMr = Blocking<T>::kMr;
  for (int64_t ir = 0; ir < mc; ir += kMr) {
    const int rows = static_cast<int>(std::min<int64_t>(kMr, mc - ir));
    if (g.trans_a) {  // op(A)[i][p] = a[p·lda + i]
      const T* src = g.a + p0 * g.lda + i0 + ir;
      for (int64_t p = 0; p < kc; ++p, src += g.lda, dst += kMr) {
        for (int r = 0; r < kMr; ++r)
          dst[r] = r < rows ? src[r] : T(0);
      }
    } else {  // op(A)[i][p] = a[i·lda + p]
      const T* src = g.a + (i0 + ir) * g.lda + p0;
      for (int64_t p = 0; p < kc; ++p, dst += kMr) {
        for (int r = 0; r < kMr; ++r)
          dst[r] = r < rows ? src[r * g.lda + p] : T(0);
      }
    }
  }
}

// Packs rows [p0, p0+kc) × cols [j0, j0+nc) of op(B) as kNr-column panels: dst[panel][p][j].
template <typename T>
void pack_b(const GemmProblem<T>& g, int64_t p0, int64_t kc, int64_t j0, int64_t nc, T* dst) {
  constexpr int kNr = Blocking<T>::kNr;
  for (int64_t jr = 0; jr < nc; jr += kNr) {
    const int cols = static_cast<int>(std::min<int64_t>(kNr, nc - jr));
    if (g.trans_b) {  // op(B)[p][j] = b[j·ldb + p]
      const T* src = g.b + (j0 + jr) * g.ldb + p0;
      for (int64_t p = 0; p < kc; ++p, dst += kNr) {
        for (int j = 0; j < kNr; ++j)
          dst[j] = j < cols ? src[j * g.ldb + p] : T(0);
      }
    } else {  // op(B)[p][j] = b[p·ldb + j]
      const T* src = g.b + p0 * g.ldb + j0 + jr;
      for (int64_t p = 0; p < kc; ++p, src += g.ldb, dst += kNr) {
        for (int j = 0; j < kNr; ++j)
          dst[j] = j < cols ? src[j] : T(0);
      }
    }
  }
}

// acc[kMr×kNr] = Σ_p pa[p][:] ⊗ pb[p][:] over one packed A panel and one packed B panel.
template <typename T>
inline void micro_kernel(int64_t kc, const T* __restrict pa, const T* __restrict pb,
                         T* __restrict acc) {
  using B = Blocking<T>;
  typedef T Vec __attribute__((vector_size(kVecBytes)));
  Vec sum[B::kMr][B::kNv] = {};
  for (int64_t p = 0; p < kc; ++p, pa += B::kMr, pb += B::kNr) {
    Vec bv[B::kNv];
    for (int v = 0; v < B::kNv; ++v)
      std::memcpy(&bv[v], pb + v * B::kLanes, sizeof(Vec));
    for (int i = 0; i < B::kMr; ++i) {
      const T ai = pa[i];
      for (int v = 0; v < B::kNv; ++v)
        sum[i][v] += ai * bv[v];
    }
  }
  for (int i = 0; i < B::kMr; ++i) {
    for (int v = 0; v < B::kNv; ++v) {
      std::memcpy(acc + i * B::kNr + v * B::kLanes, &sum[i][v], sizeof(Vec));
    }
  }
}

// C[mr×nr] = alpha·acc + (first K slice ? beta·C (C unread when beta == 0) : C).
template <typename T>
inline void store_tile(const T* acc, int mr, int nr, const GemmProblem<T>& g, bool first, T* c) {
  for (int i = 0; i < mr; ++i) {
    T* row = c + i * g.ldc;
    const T* src = acc + i * Blocking<T>::kNr;
    if (!first) {
      for (int j = 0; j < nr; ++j)
        row[j] += g.alpha * src[j];
    } else if (g.beta == T(0)) {
      for (int j = 0; j < nr; ++j)
        row[j] = g.alpha * src[j];
    } else {
      for (int j = 0; j < nr; ++j)
        row[j] = g.beta * row[j] + g.alpha * src[j];
    }
  }
}

// Computes the C tile rows [i0, i0+mc) × cols [j0, j0+nc) over all of K.
template <typename T>
void compute_tile(const GemmProblem<T>& g, int64_t i0, int64_t mc, int64_t j0, int64_t nc) {
  using B = Blocking<T>;
  thread_local Scratch<T> a_buf;
  thread_local Scratch<T> b_buf;
  const int64_t mc_pad = (mc + B::kMr - 1) / B::kMr * B::kMr;
  const int64_t nc_pad = (nc + B::kNr - 1) / B::kNr * B::kNr;
  T* pa = a_buf.get(static_cast<size_t>(mc_pad * B::kKc));
  T* pb = b_buf.get(static_cast<size_t>(nc_pad * B::kKc));
  alignas(64) T acc[B::kMr * B::kNr];
  for (int64_t p0 = 0; p0 < g.k; p0 += B::kKc) {
    const int64_t kc = std::min(B::kKc, g.k - p0);
    pack_a(g, i0, mc, p0, kc, pa);
    pack_b(g, p0, kc, j0, nc, pb);
    for (int64_t jr = 0; jr < nc; jr += B::kNr) {
      const int nr = static_cast<int>(std::min<int64_t>(B::kNr, nc - jr));
      for (int64_t ir = 0; ir < mc; ir += B::kMr) {
        const int mr = static_cast<int>(std::min<int64_t>(B::kMr, mc - ir));
        if (g.lower_only && j0 + jr > i0 + ir + mr - 1) continue;
        micro_kernel(kc, pa + ir * kc, pb + jr * kc, acc);
        store_tile(acc, mr, nr, g, p0 == 0, g.c + (i0 + ir) * g.ldc + j0 + jr);
      }
    }
  }
}

}  // namespace

// Full GEMM (lower_only == false) on rectangular tiles, shrunk until there are at least two
// tiles per thread so the pool is balanced. Requires m, n, k > 0 and alpha != 0.
template <typename T>
void reference_gemm_tiles(const GemmProblem<T>& g) {
  using B = Blocking<T>;
  const int threads = usable_threads();
  const bool parallel = threads > 1 && 2.0 * g.m * g.n * g.k >= kParallelFlops;
  int64_t mc = B::kMc;
  int64_t nc = B::kNc;
  if (parallel) {
    while (ceil_div(g.m, mc) * ceil_div(g.n, nc) < 2 * threads) {
      const int64_t nc2 = std::max<int64_t>(B::kNr, nc / 2 / B::kNr * B::kNr);
      const int64_t mc2 = std::max<int64_t>(2 * B::kMr, mc / 2 / B::kMr * B::kMr);
      if (nc2 < nc && ceil_div(g.n, nc2) > ceil_div(g.n, nc)) {
        nc = nc2;
      } else if (mc2 < mc && ceil_div(g.m, mc2) > ceil_div(g.m, mc)) {
        mc = mc2;
      } else {
        break;
      }
    }
  }
  const int64_t tiles_n = ceil_div(g.n, nc);
  const int64_t tiles = ceil_div(g.m, mc) * tiles_n;
  core::parallel_for(0, tiles, parallel ? 1 : tiles, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t i0 = t / tiles_n * mc;
      const int64_t j0 = t % tiles_n * nc;
      compute_tile(g, i0, std::min(mc, g.m - i0), j0, std::min(nc, g.n - j0));
    }
  });
}

// Lower triangle (and the diagonal-crossing micro-tiles) of a square m == n product, on square
// tiles enumerated row by row over the lower triangle only: t -> (ti, tj ≤ ti).
template <typename T>
void reference_lower_tiles(const GemmProblem<T>& g) {
  using B = Blocking<T>;
  const int threads = usable_threads();
  const bool parallel = threads > 1 && 1.0 * g.n * g.n * g.k >= kParallelFlops;
  int64_t s = B::kSyrkTile;
  if (parallel) {
    while (s > B::kNr) {
      const int64_t nt = ceil_div(g.n, s);
      if (nt * (nt + 1) / 2 >= 2 * threads) break;
      s = std::max<int64_t>(B::kNr, s / 2 / B::kNr * B::kNr);
    }
  }
  const int64_t nt = ceil_div(g.n, s);
  const int64_t tiles = nt * (nt + 1) / 2;
  core::parallel_for(0, tiles, parallel ? 1 : tiles, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      int64_t ti = static_cast<int64_t>((std::sqrt(8.0 * static_cast<double>(t) + 1.0) - 1.0) / 2);
      while (ti * (ti + 1) / 2 > t)
        --ti;  // guard against rounding of the square root
      while ((ti + 1) * (ti + 2) / 2 <= t)
        ++ti;
      const int64_t tj = t - ti * (ti + 1) / 2;
      const int64_t i0 = ti * s;
      const int64_t j0 = tj * s;
      compute_tile(g, i0, std::min(s, g.n - i0), j0, std::min(s, g.n - j0));
    }
  });
}

template void reference_gemm_tiles<float>(const GemmProblem<float>&);
template void reference_gemm_tiles<double>(const GemmProblem<double>&);
template void reference_lower_tiles<float>(const GemmProblem<float>&);
template void reference_lower_tiles<double>(const GemmProblem<double>&);

}  // namespace tb::cpu::detail
