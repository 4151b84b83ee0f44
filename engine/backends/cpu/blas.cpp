// GEMM / SYRK for the CPU backend: validation, backend selection, the oneDNN and OpenBLAS calls
// (the portable blocked kernels of the Reference backend are in reference_gemm.cpp).
#include "engine/backends/cpu/blas.h"

#include <algorithm>
#include <atomic>
#include <cctype>
#include <climits>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <new>
#include <type_traits>

#include "engine/backends/cpu/capability.h"
#include "engine/backends/cpu/onednn_gemm.h"
#include "engine/backends/cpu/reference_gemm.h"
#include "engine/core/error.h"
#include "engine/core/thread_pool.h"

#ifdef TB_HAVE_OPENBLAS
#include <cblas.h>
#endif

namespace tb::cpu {
namespace {

using detail::ceil_div;
using detail::GemmProblem;
using detail::kParallelFlops;
using detail::reference_gemm_tiles;
using detail::reference_lower_tiles;
using detail::usable_threads;

// ---------------------------------------------------------------------------------------------
// Backend selection

// oneDNN's float matmul is faster than OpenBLAS's sgemm on the MLP, CNN and qwen-tiny products
// (docs/benchmarks.md, bench/gemm_bench), and much faster where OpenBLAS does not recognise the
// CPU; double GEMMs, which oneDNN lacks, then run on OpenBLAS. Auto also sends the largest float
// products to OpenBLAS (see auto_runs_on_openblas).
constexpr GemmBackend kDefaultBackend =
#if defined(TB_HAVE_ONEDNN)
    GemmBackend::OneDnn;
#elif defined(TB_HAVE_OPENBLAS)
    GemmBackend::OpenBlas;
#else
    GemmBackend::Reference;
#endif

std::atomic<GemmBackend> g_backend{kDefaultBackend};
std::atomic<GemmBackend> g_requested{GemmBackend::Auto};

// ---------------------------------------------------------------------------------------------
// Argument validation (messages name the argument and the numbers)

const char* bool_name(bool v) {
  return v ? "true" : "false";
}

void check_ld(const char* op, const char* ld_name, int64_t ld, const char* mat, int64_t rows,
              int64_t cols, const char* trans_name, bool trans) {
  const int64_t need = std::max<int64_t>(1, cols);
  if (ld >= need) return;
  if (trans_name != nullptr) {
    throw ValueError(tb::detail::str_cat(
        "[", op, "] ", ld_name, "=", ld, " is too small: ", mat, " is stored ", rows, "x", cols,
        " (", trans_name, "=", bool_name(trans), "), so ", ld_name, " must be >= ", need));
  }
  throw ValueError(tb::detail::str_cat("[", op, "] ", ld_name, "=", ld, " is too small: ", mat,
                                       " is ", rows, "x", cols, ", so ", ld_name,
                                       " must be >= ", need));
}

void check_gemm_args(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const void* a,
                     int64_t lda, const void* b, int64_t ldb, const void* c, int64_t ldc) {
  TB_CHECK(m >= 0 && n >= 0 && k >= 0, "[gemm] sizes must be >= 0, got m=", m, ", n=", n,
           ", k=", k);
  check_ld("gemm", "lda", lda, "A", trans_a ? k : m, trans_a ? m : k, "trans_a", trans_a);
  check_ld("gemm", "ldb", ldb, "B", trans_b ? n : k, trans_b ? k : n, "trans_b", trans_b);
  check_ld("gemm", "ldc", ldc, "C", m, n, nullptr, false);
  if (m > 0 && n > 0) {
    TB_CHECK(c != nullptr, "[gemm] c is null but C is ", m, "x", n);
    if (k > 0) {
      TB_CHECK(a != nullptr, "[gemm] a is null but op(A) is ", m, "x", k);
      TB_CHECK(b != nullptr, "[gemm] b is null but op(B) is ", k, "x", n);
    }
  }
}

void check_syrk_args(bool trans, int64_t n, int64_t k, const void* a, int64_t lda, const void* c,
                     int64_t ldc) {
  TB_CHECK(n >= 0 && k >= 0, "[syrk] sizes must be >= 0, got n=", n, ", k=", k);
  check_ld("syrk", "lda", lda, "A", trans ? k : n, trans ? n : k, "trans", trans);
  check_ld("syrk", "ldc", ldc, "C", n, n, nullptr, false);
  if (n > 0) {
    TB_CHECK(c != nullptr, "[syrk] c is null but C is ", n, "x", n);
    TB_CHECK(k == 0 || a != nullptr, "[syrk] a is null but A is ", trans ? k : n, "x",
             trans ? n : k);
  }
}

// C[m×n] = beta·C, where beta == 0 writes zeros without reading C.
template <typename T>
void scale_c(int64_t m, int64_t n, T beta, T* c, int64_t ldc) {
  if (beta == T(1)) return;
  const int64_t grain = std::max<int64_t>(1, (int64_t{1} << 15) / std::max<int64_t>(n, 1));
  core::parallel_for(0, m, grain, [&](int64_t r0, int64_t r1) {
    for (int64_t i = r0; i < r1; ++i) {
      T* row = c + i * ldc;
      if (beta == T(0)) {
        std::fill(row, row + n, T(0));
      } else {
        for (int64_t j = 0; j < n; ++j)
          row[j] *= beta;
      }
    }
  });
}

template <typename T>
void reference_gemm_unchecked(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, T alpha,
                              const T* a, int64_t lda, const T* b, int64_t ldb, T beta, T* c,
                              int64_t ldc) {
  if (m == 0 || n == 0) return;
  if (k == 0 || alpha == T(0)) {
    scale_c(m, n, beta, c, ldc);
    return;
  }
  reference_gemm_tiles(
      GemmProblem<T>{trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, false});
}

// ---------------------------------------------------------------------------------------------
// Mirror of the lower triangle onto the upper one, in kMirrorBlock² blocks (the source block of
// a transposed copy then sits in L1). Block row p is paired with block row nb-1-p so that every
// parallel task gets about the same number of blocks.

constexpr int64_t kMirrorBlock = 32;
constexpr int64_t kMirrorParallelN = 384;

template <typename T>
void mirror_unchecked(T* c, int64_t n, int64_t ldc) {
  const int64_t nb = ceil_div(n, kMirrorBlock);
  auto block_row = [&](int64_t bi) {
    const int64_t i0 = bi * kMirrorBlock;
    const int64_t i1 = std::min(n, i0 + kMirrorBlock);
    for (int64_t j0 = i0; j0 < n; j0 += kMirrorBlock) {
      const int64_t j1 = std::min(n, j0 + kMirrorBlock);
      for (int64_t i = i0; i < i1; ++i) {
        T* row = c + i * ldc;
        for (int64_t j = std::max(j0, i + 1); j < j1; ++j)
          row[j] = c[j * ldc + i];
      }
    }
  };
  const int64_t pairs = (nb + 1) / 2;
  core::parallel_for(0, pairs, n < kMirrorParallelN ? pairs : 1, [&](int64_t p0, int64_t p1) {
    for (int64_t p = p0; p < p1; ++p) {
      block_row(p);
      if (nb - 1 - p != p) block_row(nb - 1 - p);
    }
  });
}

template <typename T>
void reference_syrk_unchecked(bool trans, int64_t n, int64_t k, T alpha, const T* a, int64_t lda,
                              T beta, T* c, int64_t ldc) {
  if (n == 0) return;
  if (k == 0 || alpha == T(0)) {
    scale_c(n, n, beta, c, ldc);
  } else {
    // !trans: A is n×k, C = A·Aᵀ (op(B) = Aᵀ);  trans: A is k×n, C = Aᵀ·A (op(A) = Aᵀ).
    reference_lower_tiles(
        GemmProblem<T>{trans, !trans, n, n, k, alpha, a, lda, a, lda, beta, c, ldc, true});
  }
  mirror_unchecked(c, n, ldc);
}

// ---------------------------------------------------------------------------------------------
// OpenBLAS

#ifdef TB_HAVE_OPENBLAS
bool fits_blas_int(std::initializer_list<int64_t> values) {
  return std::all_of(values.begin(), values.end(), [](int64_t v) { return v <= INT_MAX; });
}

CBLAS_TRANSPOSE cblas_trans(bool t) {
  return t ? CblasTrans : CblasNoTrans;
}

void blas_gemm(bool ta, bool tb, int m, int n, int k, float alpha, const float* a, int lda,
               const float* b, int ldb, float beta, float* c, int ldc) {
  cblas_sgemm(CblasRowMajor, cblas_trans(ta), cblas_trans(tb), m, n, k, alpha, a, lda, b, ldb, beta,
              c, ldc);
}
void blas_gemm(bool ta, bool tb, int m, int n, int k, double alpha, const double* a, int lda,
               const double* b, int ldb, double beta, double* c, int ldc) {
  cblas_dgemm(CblasRowMajor, cblas_trans(ta), cblas_trans(tb), m, n, k, alpha, a, lda, b, ldb, beta,
              c, ldc);
}
void blas_syrk(bool trans, int n, int k, float alpha, const float* a, int lda, float beta, float* c,
               int ldc) {
  cblas_ssyrk(CblasRowMajor, CblasLower, cblas_trans(trans), n, k, alpha, a, lda, beta, c, ldc);
}
void blas_syrk(bool trans, int n, int k, double alpha, const double* a, int lda, double beta,
               double* c, int ldc) {
  cblas_dsyrk(CblasRowMajor, CblasLower, cblas_trans(trans), n, k, alpha, a, lda, beta, c, ldc);
}

#endif

// ---------------------------------------------------------------------------------------------
// Dispatch (arguments already validated)

// oneDNN, float: C's rows in blocks whose size depends on the shape only (at least 64 rows, at
// most 8 blocks, a multiple of 16), the blocks spread over the pool, each a single-threaded oneDNN
// call. oneDNN's kernels may block the k loop differently for different row counts, so the blocks
// must not follow the thread count: this way the result is the same at every thread count.
// (Blocks of columns instead, for short wide products, measured slower.)
// Fixed blocks of `extent` rows or columns: at least `min_size`, at most `max_blocks` of them, a
// multiple of 16 — from the shape alone, never the thread count, so that splitting a product
// into per-block calls gives the same bits at every thread count. run(i0, i1) computes blocks
// [i0, i1) of `count`, spread over the pool.
struct FixedBlocks {
  int64_t size;
  int64_t count;
};

FixedBlocks fixed_blocks(int64_t extent, int64_t min_size, int64_t max_blocks) {
  const int64_t size = (std::max(min_size, (extent + max_blocks - 1) / max_blocks) + 15) / 16 * 16;
  return {size, (extent + size - 1) / size};
}

template <typename F>
void run_blocks(int64_t count, F&& run) {
  if (usable_threads() <= 1) {
    run(0, count);
  } else {
    core::parallel_for(0, count, 1, run);
  }
}

constexpr int64_t kOneDnnMinRows = 64;
constexpr int64_t kOneDnnMaxBlocks = 8;

void onednn_gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                 const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c,
                 int64_t ldc) {
  if (2.0 * m * n * k < kParallelFlops || m < 2 * kOneDnnMinRows) {
    onednn::sgemm(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    return;
  }
  // Plain names, not a structured binding: clang 14 (the fuzz build) cannot capture those.
  const FixedBlocks fb = fixed_blocks(m, kOneDnnMinRows, kOneDnnMaxBlocks);
  const int64_t block_rows = fb.size, blocks = fb.count;
  run_blocks(blocks, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) {
      const int64_t r0 = i * block_rows;
      const int64_t r1 = std::min(m, r0 + block_rows);
      // Rows r0..r1 of op(A): rows of A, or columns of the stored Aᵀ.
      const float* a_rows = trans_a ? a + r0 : a + r0 * lda;
      onednn::sgemm(trans_a, trans_b, r1 - r0, n, k, alpha, a_rows, lda, b, ldb, beta, c + r0 * ldc,
                    ldc);
    }
  });
}

template <typename T>
void gemm_unchecked(GemmBackend backend, bool trans_a, bool trans_b, int64_t m, int64_t n,
                    int64_t k, T alpha, const T* a, int64_t lda, const T* b, int64_t ldb, T beta,
                    T* c, int64_t ldc) {
  if (m == 0 || n == 0) return;
  if (k == 0 || alpha == T(0)) {  // BLAS semantics: A and B unread; beta == 0 ignores C
    scale_c(m, n, beta, c, ldc);
    return;
  }
  if constexpr (std::is_same_v<T, float>) {
    if (backend == GemmBackend::OneDnn) {
      onednn_gemm(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
      return;
    }
  }
#ifdef TB_HAVE_OPENBLAS
  // OpenBLAS takes 32-bit sizes; a larger problem (never seen in practice) uses the reference.
  // It also serves the oneDNN backend's double products (oneDNN has no double matmul).
  if ((backend == GemmBackend::OpenBlas || backend == GemmBackend::OneDnn) &&
      fits_blas_int({m, n, k, lda, ldb, ldc})) {
    blas_gemm(trans_a, trans_b, static_cast<int>(m), static_cast<int>(n), static_cast<int>(k),
              alpha, a, static_cast<int>(lda), b, static_cast<int>(ldb), beta, c,
              static_cast<int>(ldc));
    return;
  }
#else
  (void)backend;
#endif
  reference_gemm_tiles(
      GemmProblem<T>{trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, false});
}

// OpenBLAS's pre-AVX x86 cores, what its DYNAMIC_ARCH build picks for a CPU model it does not
// know (OpenBLAS 0.3.21 does not know Emerald Rapids, for one).
bool openblas_runs_generic_core() {
#ifdef TB_HAVE_OPENBLAS
  static const bool generic = [] {
    const std::string core = openblas_get_corename();
    static constexpr std::string_view kOld[] = {"Prescott",  "Core2",  "Penryn",  "Dunnington",
                                                "Nehalem",   "Atom",   "Opteron", "Opteron_SSE3",
                                                "Barcelona", "Bobcat", "Katmai",  "Northwood"};
    bool old = false;
    for (std::string_view o : kOld)
      old = old || core == o;
    return old;
  }();
  return generic;
#else
  return false;
#endif
}

// Right operands from this many elements (4 MiB of float: GPT-2 small's 768×2304 and 768×3072
// projections, a vocabulary head) make Auto use OpenBLAS for float products without a
// transposed A. gemm_bench at GPT-2 small's shapes, one thread: OpenBLAS 145–163 GFLOP/s, oneDNN
// 2.6 119–146, and the head's input gradient (256×50304 · 50304×768) 136 against 76; oneDNN
// stays faster on everything smaller (mlp, qwen-tiny, Newton–Schulz: 10–20 %) and on
// transposed-A weight gradients. The rule reads the shape only.
constexpr int64_t kAutoOpenBlasMinB = int64_t{1} << 20;

bool auto_runs_on_openblas(bool trans_a, int64_t n, int64_t k) {
#ifdef TB_HAVE_OPENBLAS
  return current_gemm_backend() == GemmBackend::OneDnn &&
         requested_gemm_backend() == GemmBackend::Auto && !trans_a && n * k >= kAutoOpenBlasMinB &&
         !openblas_runs_generic_core();
#else
  (void)trans_a, (void)n, (void)k;
  return false;
#endif
}

#ifdef TB_HAVE_OPENBLAS
// Auto's large products on OpenBLAS: C's columns in blocks whose width depends on the shape only
// (at least 128 columns, at most 8 blocks, a multiple of 16), each block one single-threaded
// OpenBLAS call, the blocks spread over the pool. OpenBLAS's own threading gives different bits
// at different thread counts (5×1400 · 1400×768 does); these blocks give the same bits at every
// thread count, as oneDNN's row blocks do. Each block packs op(A) again, the small operand here.
constexpr int64_t kOpenBlasMinCols = 128;
constexpr int64_t kOpenBlasMaxBlocks = 8;

void openblas_column_blocks(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
                            float alpha, const float* a, int64_t lda, const float* b, int64_t ldb,
                            float beta, float* c, int64_t ldc) {
  const FixedBlocks fb = fixed_blocks(n, kOpenBlasMinCols, kOpenBlasMaxBlocks);
  const int64_t block_cols = fb.size, blocks = fb.count;
  core::ScopedSingleThreadedBlas one_thread;
  run_blocks(blocks, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) {
      const int64_t c0 = i * block_cols;
      const int64_t c1 = std::min(n, c0 + block_cols);
      // Columns c0..c1 of op(B): columns of B, or rows of the stored Bᵀ.
      const float* b_cols = trans_b ? b + c0 * ldb : b + c0;
      blas_gemm(trans_a, trans_b, static_cast<int>(m), static_cast<int>(c1 - c0),
                static_cast<int>(k), alpha, a, static_cast<int>(lda), b_cols, static_cast<int>(ldb),
                beta, c + c0, static_cast<int>(ldc));
    }
  });
}
#endif

template <typename T>
void gemm_checked(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, T alpha, const T* a,
                  int64_t lda, const T* b, int64_t ldb, T beta, T* c, int64_t ldc) {
  check_gemm_args(trans_a, trans_b, m, n, k, a, lda, b, ldb, c, ldc);
  (void)core::num_threads();  // first use resolves the thread count and applies it to OpenBLAS
#ifdef TB_HAVE_OPENBLAS
  if constexpr (std::is_same_v<T, float>) {
    if (m > 0 && n > 0 && k > 0 && alpha != T(0) && auto_runs_on_openblas(trans_a, n, k) &&
        fits_blas_int({m, n, k, lda, ldb, ldc})) {
      openblas_column_blocks(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
      return;
    }
  }
#endif
  gemm_unchecked(current_gemm_backend(), trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c,
                 ldc);
}

// Output matrices of a strided batch do not overlap when stacked (each starts after the previous
// one ends) or interleaved (each row of C_i sits in the gap between rows of C_0).
bool batch_outputs_disjoint(int64_t m, int64_t n, int64_t ldc, int64_t stride_c, int64_t batch) {
  if (batch <= 1 || m == 0 || n == 0) return true;
  if (stride_c >= (m - 1) * ldc + n) return true;
  return m == 1 ? stride_c >= n : stride_c >= n && (batch - 1) * stride_c + n <= ldc;
}

// Work per parallel task in a batch (flops), so tiny matrices are grouped.
constexpr double kBatchTaskFlops = 1 << 18;

template <typename T>
void gemm_batched_checked(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, T alpha,
                          const T* a, int64_t lda, int64_t stride_a, const T* b, int64_t ldb,
                          int64_t stride_b, T beta, T* c, int64_t ldc, int64_t stride_c,
                          int64_t batch) {
  TB_CHECK(batch >= 0, "[gemm] batch must be >= 0, got batch=", batch);
  TB_CHECK(stride_a >= 0 && stride_b >= 0 && stride_c >= 0,
           "[gemm] batch strides must be >= 0, got stride_a=", stride_a, ", stride_b=", stride_b,
           ", stride_c=", stride_c);
  check_gemm_args(trans_a, trans_b, m, n, k, a, lda, b, ldb, c, ldc);
  TB_CHECK(batch_outputs_disjoint(m, n, ldc, stride_c, batch), "[gemm] stride_c=", stride_c,
           " makes the ", batch, " output matrices (", m, "x", n, ", ldc=", ldc,
           ") overlap; use stride_c >= ", (m - 1) * ldc + n);
  if (batch == 0 || m == 0 || n == 0) return;
  const GemmBackend backend = current_gemm_backend();
  auto run = [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) {
      gemm_unchecked(backend, trans_a, trans_b, m, n, k, alpha, a + i * stride_a, lda,
                     b + i * stride_b, ldb, beta, c + i * stride_c, ldc);
    }
  };
  const int threads = usable_threads();
  const double flops = std::max(1.0, 2.0 * m * n * k);
  const int64_t grain = std::max<int64_t>(1, static_cast<int64_t>(kBatchTaskFlops / flops));
  if (threads > 1 && batch >= threads && batch > grain) {
#ifdef TB_HAVE_OPENBLAS
    if (backend != GemmBackend::Reference) {
      core::ScopedSingleThreadedBlas one_thread;  // batches already run in parallel
      core::parallel_for(0, batch, grain, run);
      return;
    }
#endif
    core::parallel_for(0, batch, grain, run);  // the other kernels run serially inside
    return;
  }
  run(0, batch);
}

}  // namespace

void parallel_gemm_items(int64_t count, int64_t grain,
                         const std::function<void(int64_t, int64_t)>& body) {
  if (count <= 0) return;
  grain = std::max<int64_t>(1, grain);
  if (usable_threads() <= 1 || count <= grain) {
    body(0, count);
    return;
  }
#ifdef TB_HAVE_OPENBLAS
  if (current_gemm_backend() != GemmBackend::Reference) {
    core::ScopedSingleThreadedBlas one_thread;  // batches already run in parallel
    core::parallel_for(0, count, grain, body);
    return;
  }
#endif
  core::parallel_for(0, count, grain, body);
}

namespace {

// Rows per block of the oneDNN SYRK's lower triangle.
constexpr int64_t kOneDnnSyrkBlock = 64;

// oneDNN SYRK, float (oneDNN has no SYRK): the lower triangle in fixed row blocks, block i the
// product of its rows of op(A) with rows 0..end of block i (the strip left of and including the
// diagonal), then mirrored. About (blocks + 1) / (2 · blocks) of a full product's work; the blocks
// do not depend on the thread count, so neither does the result.
void onednn_syrk(bool trans, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
                 float beta, float* c, int64_t ldc) {
  const int64_t blocks = (n + kOneDnnSyrkBlock - 1) / kOneDnnSyrkBlock;
  auto block = [&](int64_t i) {
    const int64_t r0 = i * kOneDnnSyrkBlock;
    const int64_t r1 = std::min(n, r0 + kOneDnnSyrkBlock);
    // !trans: A is n×k and C = A·Aᵀ; trans: A is k×n and C = Aᵀ·A. Rows r0..r1 of op(A) are rows
    // of A (!trans) or columns of A (trans); op(B) = op(A)ᵀ restricted to columns 0..r1.
    const float* a_rows = trans ? a + r0 : a + r0 * lda;
    onednn::sgemm(trans, !trans, r1 - r0, r1, k, alpha, a_rows, lda, a, lda, beta, c + r0 * ldc,
                  ldc);
  };
  const int threads = 1.0 * n * n * k >= kParallelFlops ? usable_threads() : 1;
  if (threads <= 1 || blocks <= 1) {
    for (int64_t i = 0; i < blocks; ++i)
      block(i);
  } else {
    // Pair the longest strip with the shortest so each task has about the same work.
    const int64_t pairs = (blocks + 1) / 2;
    core::parallel_for(0, pairs, 1, [&](int64_t p0, int64_t p1) {
      for (int64_t p = p0; p < p1; ++p) {
        block(blocks - 1 - p);
        if (p != blocks - 1 - p) block(p);
      }
    });
  }
  mirror_unchecked(c, n, ldc);
}

template <typename T>
void syrk_checked(bool trans, int64_t n, int64_t k, T alpha, const T* a, int64_t lda, T beta, T* c,
                  int64_t ldc) {
  check_syrk_args(trans, n, k, a, lda, c, ldc);
  (void)core::num_threads();
  if constexpr (std::is_same_v<T, float>) {
    if (current_gemm_backend() == GemmBackend::OneDnn && n > 0 && k > 0 && alpha != 0.0f) {
      onednn_syrk(trans, n, k, alpha, a, lda, beta, c, ldc);
      return;
    }
  }
#ifdef TB_HAVE_OPENBLAS
  const GemmBackend backend = current_gemm_backend();
  if ((backend == GemmBackend::OpenBlas || backend == GemmBackend::OneDnn) &&
      fits_blas_int({n, k, lda, ldc})) {
    if (n == 0) return;
    if (k == 0 || alpha == T(0)) {
      scale_c(n, n, beta, c, ldc);
    } else {
      blas_syrk(trans, static_cast<int>(n), static_cast<int>(k), alpha, a, static_cast<int>(lda),
                beta, c, static_cast<int>(ldc));
    }
    mirror_unchecked(c, n, ldc);
    return;
  }
#endif
  reference_syrk_unchecked(trans, n, k, alpha, a, lda, beta, c, ldc);
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Public API

std::string_view gemm_backend_name(GemmBackend backend) {
  switch (backend) {
    case GemmBackend::Auto:
      return "auto";
    case GemmBackend::OpenBlas:
      return "openblas";
    case GemmBackend::Reference:
      return "reference";
    case GemmBackend::OneDnn:
      return "onednn";
    case GemmBackend::Cublas:
      return "cublas";
    case GemmBackend::CublasLt:
      return "cublaslt";
  }
  TB_INTERNAL_ASSERT(false, "unhandled GemmBackend ", static_cast<int>(backend));
  return {};
}

GemmBackend parse_gemm_backend(std::string_view name) {
  std::string lower(name);
  std::transform(lower.begin(), lower.end(), lower.begin(),
                 [](unsigned char ch) { return static_cast<char>(std::tolower(ch)); });
  for (GemmBackend b : {GemmBackend::Auto, GemmBackend::OpenBlas, GemmBackend::OneDnn,
                        GemmBackend::Reference, GemmBackend::Cublas, GemmBackend::CublasLt}) {
    if (lower == gemm_backend_name(b)) return b;
  }
  throw ValueError(
      tb::detail::str_cat("[gemm] unknown gemm_backend '", name,
                          "' (expected auto, openblas, onednn, reference, cublas, cublaslt)"));
}

bool gemm_backend_available_on_cpu(GemmBackend backend) {
  switch (backend) {
    case GemmBackend::Auto:
    case GemmBackend::Reference:
      return true;
    case GemmBackend::OpenBlas:
#ifdef TB_HAVE_OPENBLAS
      return true;
#else
      return false;
#endif
    case GemmBackend::OneDnn:
      return onednn::compiled();
    case GemmBackend::Cublas:
    case GemmBackend::CublasLt:
      return false;
  }
  return false;
}

GemmSelection select_gemm_backend(GemmBackend requested) {
  GemmSelection s{requested, requested, {}};
  if (requested == GemmBackend::Auto) {
    s.used = kDefaultBackend;
  } else if (!gemm_backend_available_on_cpu(requested)) {
    s.used = kDefaultBackend;
    const std::string_view name = gemm_backend_name(requested);
    const std::string_view fallback = gemm_backend_name(kDefaultBackend);
    if (requested == GemmBackend::OpenBlas) {
      s.warning = tb::detail::str_cat(
          "[gemm] gemm_backend 'openblas' is not available: this build ",
          "has no OpenBLAS (compiled without TB_HAVE_OPENBLAS); using '", fallback, "' instead");
    } else if (requested == GemmBackend::OneDnn) {
      s.warning = tb::detail::str_cat(
          "[gemm] gemm_backend 'onednn' is not available: this build has no oneDNN (install ",
          "libdnnl-dev and reconfigure); using '", fallback, "' instead");
    } else {
      s.warning = tb::detail::str_cat(
          "[gemm] gemm_backend '", name,
          "' runs only on CUDA devices (which use it); CPU GEMMs use the default '", fallback,
          "' instead");
    }
  }
  return s;
}

std::string gemm_libraries() {
  std::string out;
  if (onednn::compiled()) out = onednn::describe();
#ifdef TB_HAVE_OPENBLAS
  out += tb::detail::str_cat(out.empty() ? "" : "; ", openblas_get_config(), " (core ",
                             openblas_get_corename(), ")");
#endif
  return out.empty() ? "reference kernels only" : out;
}

std::string openblas_core_note() {
#ifdef TB_HAVE_OPENBLAS
  if (!openblas_runs_generic_core()) return {};
  const std::string core = openblas_get_corename();
  const char* fix = cpu_supports(CpuCapability::Avx512) ? "SkylakeX"
                    : cpu_supports(CpuCapability::Avx2) ? "Haswell"
                                                        : nullptr;
  if (fix == nullptr) return {};
  return tb::detail::str_cat("OpenBLAS did not recognise this CPU and runs its ", core,
                             " kernels (no AVX); start with OPENBLAS_CORETYPE=", fix,
                             " in the environment for its ", fix, " kernels");
#else
  return {};
#endif
}

GemmSelection set_gemm_backend(GemmBackend requested) {
  GemmSelection s = select_gemm_backend(requested);
  g_backend.store(s.used, std::memory_order_relaxed);
  g_requested.store(requested, std::memory_order_relaxed);
  return s;
}

GemmBackend current_gemm_backend() {
  return g_backend.load(std::memory_order_relaxed);
}

GemmBackend requested_gemm_backend() {
  return g_requested.load(std::memory_order_relaxed);
}

void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
          int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  gemm_checked(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, double alpha,
          const double* a, int64_t lda, const double* b, int64_t ldb, double beta, double* c,
          int64_t ldc) {
  gemm_checked(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

void gemm_batched_strided(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                          const float* a, int64_t lda, int64_t stride_a, const float* b,
                          int64_t ldb, int64_t stride_b, float beta, float* c, int64_t ldc,
                          int64_t stride_c, int64_t batch) {
  gemm_batched_checked(trans_a, trans_b, m, n, k, alpha, a, lda, stride_a, b, ldb, stride_b, beta,
                       c, ldc, stride_c, batch);
}

void gemm_batched_strided(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, double alpha,
                          const double* a, int64_t lda, int64_t stride_a, const double* b,
                          int64_t ldb, int64_t stride_b, double beta, double* c, int64_t ldc,
                          int64_t stride_c, int64_t batch) {
  gemm_batched_checked(trans_a, trans_b, m, n, k, alpha, a, lda, stride_a, b, ldb, stride_b, beta,
                       c, ldc, stride_c, batch);
}

void syrk(bool trans, int64_t n, int64_t k, float alpha, const float* a, int64_t lda, float beta,
          float* c, int64_t ldc) {
  syrk_checked(trans, n, k, alpha, a, lda, beta, c, ldc);
}

void syrk(bool trans, int64_t n, int64_t k, double alpha, const double* a, int64_t lda, double beta,
          double* c, int64_t ldc) {
  syrk_checked(trans, n, k, alpha, a, lda, beta, c, ldc);
}

void reference_gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                    const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c,
                    int64_t ldc) {
  check_gemm_args(trans_a, trans_b, m, n, k, a, lda, b, ldb, c, ldc);
  reference_gemm_unchecked(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

void reference_gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, double alpha,
                    const double* a, int64_t lda, const double* b, int64_t ldb, double beta,
                    double* c, int64_t ldc) {
  check_gemm_args(trans_a, trans_b, m, n, k, a, lda, b, ldb, c, ldc);
  reference_gemm_unchecked(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

void reference_syrk(bool trans, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
                    float beta, float* c, int64_t ldc) {
  check_syrk_args(trans, n, k, a, lda, c, ldc);
  reference_syrk_unchecked(trans, n, k, alpha, a, lda, beta, c, ldc);
}

void reference_syrk(bool trans, int64_t n, int64_t k, double alpha, const double* a, int64_t lda,
                    double beta, double* c, int64_t ldc) {
  check_syrk_args(trans, n, k, a, lda, c, ldc);
  reference_syrk_unchecked(trans, n, k, alpha, a, lda, beta, c, ldc);
}

void mirror_lower_to_upper(float* c, int64_t n, int64_t ldc) {
  TB_CHECK(n >= 0, "[syrk] mirror size must be >= 0, got n=", n);
  check_ld("syrk", "ldc", ldc, "C", n, n, nullptr, false);
  mirror_unchecked(c, n, ldc);
}

void mirror_lower_to_upper(double* c, int64_t n, int64_t ldc) {
  TB_CHECK(n >= 0, "[syrk] mirror size must be >= 0, got n=", n);
  check_ld("syrk", "ldc", ldc, "C", n, n, nullptr, false);
  mirror_unchecked(c, n, ldc);
}

}  // namespace tb::cpu
