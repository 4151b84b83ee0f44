// The portable blocked GEMM / SYRK kernels of the CPU backend's Reference GEMM (and of the
// products the other backends leave to it): the classic packed GEMM (Goto / BLIS layout),
// internal to backends/cpu (blas.cpp checks the arguments and picks the backend).
#pragma once

#include <cstdint>

namespace tb::cpu::detail {

// Below this many flops a GEMM runs on the calling thread only (pool hop > gain).
constexpr double kParallelFlops = 1 << 21;

/// Threads a GEMM may use here: 1 inside a parallel region (a batch item's product), else the
/// pool's.
int usable_threads();

inline int64_t ceil_div(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}

/// One product C[m×n] = alpha·op(A)·op(B) + beta·C, row-major as in blas.h.
template <typename T>
struct GemmProblem {
  bool trans_a, trans_b;
  int64_t m, n, k;
  T alpha;
  const T* a;
  int64_t lda;
  const T* b;
  int64_t ldb;
  T beta;
  T* c;
  int64_t ldc;
  bool lower_only;  // SYRK: micro-tiles strictly above the diagonal are skipped
};

/// Full GEMM (lower_only == false) on rectangular tiles, shrunk until there are at least two
/// tiles per thread so the pool is balanced. Requires m, n, k > 0 and alpha != 0.
template <typename T>
void reference_gemm_tiles(const GemmProblem<T>& g);
/// SYRK's lower triangle (lower_only == true, n × n) on square tiles below the diagonal.
/// Requires n, k > 0 and alpha != 0.
template <typename T>
void reference_lower_tiles(const GemmProblem<T>& g);

extern template void reference_gemm_tiles<float>(const GemmProblem<float>&);
extern template void reference_gemm_tiles<double>(const GemmProblem<double>&);
extern template void reference_lower_tiles<float>(const GemmProblem<float>&);
extern template void reference_lower_tiles<double>(const GemmProblem<double>&);

}  // namespace tb::cpu::detail
