// Single-precision GEMM through oneDNN's matmul primitive (https://oneapi-src.github.io/oneDNN/
// dev_guide_matmul.html), the CPU backend's `onednn` GEMM backend. Internal to engine/backends/cpu:
// blas.cpp validates the arguments and decides the threading; this file only builds and runs the
// primitive for one row block on the calling thread.
//
// Why one thread per call: Debian's oneDNN runs on OpenMP, a second thread pool beside the
// engine's. Each call runs oneDNN on one OpenMP thread and blas.cpp splits the product into row
// blocks on the engine's pool. A row block's elements are computed exactly as in the whole product
// (oneDNN's brgemm kernels reduce over k in the same order whatever the number of rows), so the
// result does not depend on the thread count (tests/engine/blas_test.cpp checks it).
#pragma once

#include <cstdint>
#include <string>

namespace tb::cpu::onednn {

/// True when this build has oneDNN (TB_HAVE_ONEDNN).
bool compiled();

/// "oneDNN 2.6.3 (brg:avx512_core)": the library version and the implementation its matmul picks
/// for a 256×256×256 float product on this CPU; "not built" without oneDNN.
std::string describe();

/// C[m×n] = alpha·op(A)·op(B) + beta·C, row-major with leading dimensions, as tb::cpu::gemm,
/// computed by oneDNN on the calling thread. Requires m, n, k > 0 and valid arguments (checked by
/// the caller). With beta == 0, C is not read. Throws tb::InternalError when oneDNN rejects the
/// problem (it names the shape and oneDNN's status).
void sgemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
           int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc);

}  // namespace tb::cpu::onednn
