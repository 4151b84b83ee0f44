// Raw-pointer GEMM / SYRK layer of the CPU backend (row-major), with selectable implementation.
//
// Backends: oneDNN's matmul for float products (when the build defines TB_HAVE_ONEDNN; the
// default then, except for the largest products, which run faster on OpenBLAS), OpenBLAS
// (TB_HAVE_OPENBLAS; it also serves the oneDNN backend's double products) or a portable
// cache-blocked reference implementation that needs no BLAS. The choice is process-wide and
// validated up front by select_gemm_backend: a request that cannot run here falls back to the
// default with a warning instead of failing at the first matmul.
//
// Shapes use BLAS conventions: op(X) is X or Xᵀ, every matrix is row-major with a leading
// dimension (distance in elements between consecutive rows as stored), so sub-matrix views are
// expressed by a pointer to their first element plus the parent's leading dimension.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

namespace tb::cpu {

/// Implementation used for GEMM-family calls. The enumeration is the vocabulary of the
/// `gemm_backend` setting for every device; the CPU runs Auto, OpenBlas, OneDnn and Reference,
/// and knows the cuBLAS names only to say clearly that they apply to CUDA devices.
enum class GemmBackend {
  Auto,       // OneDnn when compiled in (but OpenBlas for float products whose right operand has
              // 2^20 elements or more and whose A is not transposed), else OpenBlas, else Reference
  OpenBlas,   // cblas_sgemm / dgemm / ssyrk / dsyrk
  OneDnn,     // float: oneDNN matmul, split by rows over the kernel pool; double: OpenBLAS
  Reference,  // portable blocked kernels in this file's .cpp, parallel with parallel_for
  Cublas,     // CUDA devices only
  CublasLt,   // CUDA devices only
};

/// The setting's spelling of `backend`: "auto", "openblas", "onednn", "reference", "cublas",
/// "cublaslt".
std::string_view gemm_backend_name(GemmBackend backend);

/// Parses a backend name (case-insensitive). Throws tb::ValueError "[gemm] unknown gemm_backend
/// 'x' (expected auto, openblas, onednn, reference, cublas, cublaslt)".
GemmBackend parse_gemm_backend(std::string_view name);

/// True when `backend` can run CPU GEMMs in this build (Auto and Reference always; OpenBlas
/// only with TB_HAVE_OPENBLAS, OneDnn only with TB_HAVE_ONEDNN; the cuBLAS backends never).
bool gemm_backend_available_on_cpu(GemmBackend backend);

/// Outcome of choosing a CPU GEMM backend.
struct GemmSelection {
  GemmBackend requested;  // what was asked for
  GemmBackend used;       // what runs: OneDnn, OpenBlas or Reference, never Auto
  std::string warning;    // empty, or why `requested` could not be honoured and what is used
};

/// Decides which backend serves `requested` on the CPU, without changing anything. A request
/// that cannot run here resolves to the default (Auto's choice) and says why in `warning`.
GemmSelection select_gemm_backend(GemmBackend requested);

/// Makes select_gemm_backend(requested).used the process-wide CPU GEMM backend and returns the
/// selection (the caller shows its warning). Thread-safe; affects calls that start afterwards.
GemmSelection set_gemm_backend(GemmBackend requested);

/// The backend CPU GEMM calls use now (OneDnn, OpenBlas or Reference). Defaults to Auto's choice.
GemmBackend current_gemm_backend();

/// The backend last requested with set_gemm_backend (Auto by default): CUDA devices use cuBLASLt
/// when it is CublasLt, cuBLAS otherwise.
GemmBackend requested_gemm_backend();

/// The GEMM libraries as they run here: "oneDNN 2.6.3 (brg:avx512_core); OpenBLAS 0.3.21 ...
/// (core SkylakeX)", naming only those this build has.
std::string gemm_libraries();

/// Empty, or a note that OpenBLAS did not recognise this CPU and runs kernels older than the CPU
/// supports (it then falls back to SSE3 "Prescott" kernels, about a fifth of the AVX-512 rate),
/// with the OPENBLAS_CORETYPE setting that fixes it. OpenBLAS reads that variable when it loads,
/// so it has to be set before the program starts.
std::string openblas_core_note();

/// C[m×n] = alpha·op(A)·op(B) + beta·C, row-major, with the current backend.
/// op(A) is m×k: A is stored m×k (lda >= k) or, with trans_a, k×m (lda >= m); likewise op(B) is
/// k×n from B stored k×n (ldb >= n) or, with trans_b, n×k (ldb >= k); ldc >= n. Every leading
/// dimension must also be >= 1. With beta == 0, C's prior contents (even NaN) are not read; with
/// alpha == 0 or k == 0, A and B are not read. C must not overlap A or B. On the OneDnn backend
/// the result does not depend on the thread count (OpenBLAS's may).
/// Throws tb::ValueError "[gemm] ..." naming the argument and the numbers for negative sizes,
/// too-small leading dimensions or null pointers to non-empty matrices.
void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
          int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc);
/// Double-precision overload of gemm, same contract.
void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, double alpha,
          const double* a, int64_t lda, const double* b, int64_t ldb, double beta, double* c,
          int64_t ldc);

/// For i in [0, batch): gemm on A + i·stride_a, B + i·stride_b, C + i·stride_c (same contract
/// as gemm per matrix). Strides are in elements and >= 0 (0 broadcasts an operand); the C
/// matrices must not overlap (stride_c >= (m-1)·ldc + n when batch > 1 and m, n > 0).
/// Threading: when batch >= core::num_threads() > 1 and the work is big enough, batches run in
/// parallel on the kernel pool, one thread each, with OpenBLAS set to 1 thread for the duration
/// (OpenBLAS's count is process-wide, so a GEMM another thread starts meanwhile also runs on
/// one thread: slower, still correct). Otherwise batches run one after another, each using
/// every thread. Either way, at most core::num_threads() threads compute at once.
void gemm_batched_strided(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                          const float* a, int64_t lda, int64_t stride_a, const float* b,
                          int64_t ldb, int64_t stride_b, float beta, float* c, int64_t ldc,
                          int64_t stride_c, int64_t batch);
/// Double-precision overload of gemm_batched_strided, same contract.
void gemm_batched_strided(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, double alpha,
                          const double* a, int64_t lda, int64_t stride_a, const double* b,
                          int64_t ldb, int64_t stride_b, double beta, double* c, int64_t ldc,
                          int64_t stride_c, int64_t batch);

/// Runs body(i0, i1) over [0, count) on the kernel pool in chunks of `grain` items, for work whose
/// items each call gemm (per-head attention tiles): when more than one chunk runs at once,
/// OpenBLAS is set to one thread for the duration (as gemm_batched_strided does); with one
/// thread or one chunk, body(0, count) runs here and each gemm uses every thread.
void parallel_gemm_items(int64_t count, int64_t grain,
                         const std::function<void(int64_t, int64_t)>& body);

/// Symmetric rank-k update, full output: C[n×n] = alpha·A·Aᵀ + beta·C with A stored n×k
/// (lda >= k) when !trans, or C = alpha·Aᵀ·A + beta·C with A stored k×n (lda >= n) when trans;
/// ldc >= n. Computes the lower triangle (about half a GEMM's work), then mirrors it so all of C
/// is written and exactly symmetric. With beta != 0 only C's lower triangle is read (C is taken
/// as symmetric); with beta == 0 C is not read. Throws tb::ValueError "[syrk] ..." like gemm.
void syrk(bool trans, int64_t n, int64_t k, float alpha, const float* a, int64_t lda, float beta,
          float* c, int64_t ldc);
/// Double-precision overload of syrk, same contract.
void syrk(bool trans, int64_t n, int64_t k, double alpha, const double* a, int64_t lda, double beta,
          double* c, int64_t ldc);

/// The reference backend called directly, whatever the current backend (tests cross-check
/// OpenBLAS with it; benchmarks time it). Same contracts as gemm / syrk. The float versions
/// accumulate in float, like BLAS sgemm (error grows with k; see the tests' tolerance), the
/// double versions in double.
void reference_gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                    const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c,
                    int64_t ldc);
/// Double-precision reference GEMM.
void reference_gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, double alpha,
                    const double* a, int64_t lda, const double* b, int64_t ldb, double beta,
                    double* c, int64_t ldc);
/// Float reference SYRK (full symmetric output), same contract as syrk.
void reference_syrk(bool trans, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
                    float beta, float* c, int64_t ldc);
/// Double reference SYRK (full symmetric output), same contract as syrk.
void reference_syrk(bool trans, int64_t n, int64_t k, double alpha, const double* a, int64_t lda,
                    double beta, double* c, int64_t ldc);

/// Copies the strictly lower triangle of the n×n row-major C onto the upper one (C = tril(C) +
/// tril(C, -1)ᵀ). Blocked for the cache and parallel for large n. Throws tb::ValueError for
/// n < 0 or ldc < max(1, n).
void mirror_lower_to_upper(float* c, int64_t n, int64_t ldc);
/// Double-precision mirror_lower_to_upper.
void mirror_lower_to_upper(double* c, int64_t n, int64_t ldc);

}  // namespace tb::cpu
