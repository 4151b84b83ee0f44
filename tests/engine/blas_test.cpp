// Tests of the CPU GEMM/SYRK layer (both backends) and of the kernel thread pool.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <mutex>
#include <random>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "engine/backends/cpu/blas.h"
#include "engine/core/error.h"
#include "engine/core/thread_pool.h"

#ifdef TB_HAVE_OPENBLAS
#include <cblas.h>
#endif

namespace tb::cpu {
namespace {

// ---------------------------------------------------------------------------------------------
// Helpers

// Restores the process-wide GEMM backend when a test ends.
class ScopedBackend {
 public:
  explicit ScopedBackend(GemmBackend b) : previous_(requested_gemm_backend()) {
    set_gemm_backend(b);
  }
  ~ScopedBackend() { set_gemm_backend(previous_); }

 private:
  GemmBackend previous_;
};

std::vector<GemmBackend> cpu_backends() {
  std::vector<GemmBackend> backends;
  for (GemmBackend b : {GemmBackend::OneDnn, GemmBackend::OpenBlas, GemmBackend::Reference}) {
    if (gemm_backend_available_on_cpu(b)) backends.push_back(b);
  }
  return backends;
}

// The backend Auto resolves to in this build.
GemmBackend default_backend() {
  if (gemm_backend_available_on_cpu(GemmBackend::OneDnn)) return GemmBackend::OneDnn;
  if (gemm_backend_available_on_cpu(GemmBackend::OpenBlas)) return GemmBackend::OpenBlas;
  return GemmBackend::Reference;
}

// A row-major rows×cols matrix inside a buffer with leading dimension ld >= cols; the padding
// holds `pad` so that reads outside the view show up (NaN) or writes outside it are caught.
template <typename T>
struct Matrix {
  int64_t rows, cols, ld;
  std::vector<T> data;
  Matrix(int64_t r, int64_t c, int64_t ld_, T pad)
      : rows(r), cols(c), ld(ld_), data(static_cast<size_t>(std::max<int64_t>(r * ld_, 1)), pad) {}
  T& at(int64_t i, int64_t j) { return data[static_cast<size_t>(i * ld + j)]; }
  T at(int64_t i, int64_t j) const { return data[static_cast<size_t>(i * ld + j)]; }
};

template <typename T>
Matrix<T> random_matrix(int64_t rows, int64_t cols, int64_t extra_ld, std::mt19937& rng,
                        T pad = std::numeric_limits<T>::quiet_NaN()) {
  Matrix<T> m(rows, cols, std::max<int64_t>(cols + extra_ld, 1), pad);
  std::uniform_real_distribution<double> dist(-1.0, 1.0);
  for (int64_t i = 0; i < rows; ++i) {
    for (int64_t j = 0; j < cols; ++j)
      m.at(i, j) = static_cast<T>(dist(rng));
  }
  return m;
}

template <typename T>
T element_of_op(const Matrix<T>& x, bool trans, int64_t i, int64_t j) {
  return trans ? x.at(j, i) : x.at(i, j);
}

// Checks C_out against alpha·op(A)·op(B) + beta·C_in computed in long double, with a per-element
// bound 2·k·eps·(|alpha|·Σ|a||b| + |beta·c|) (the standard dot-product error bound), and checks
// that C's padding was left alone.
template <typename T>
void expect_gemm_close(bool ta, bool tb, int64_t m, int64_t n, int64_t k, T alpha,
                       const Matrix<T>& a, const Matrix<T>& b, T beta, const Matrix<T>& c_in,
                       const Matrix<T>& c_out) {
  const long double eps = std::numeric_limits<T>::epsilon();
  int failures = 0;
  for (int64_t i = 0; i < m && failures < 5; ++i) {
    for (int64_t j = 0; j < n && failures < 5; ++j) {
      long double sum = 0, abs_sum = 0;
      for (int64_t p = 0; p < k; ++p) {
        const long double prod =
            static_cast<long double>(element_of_op(a, ta, i, p)) * element_of_op(b, tb, p, j);
        sum += prod;
        abs_sum += std::fabs(prod);
      }
      long double expected = static_cast<long double>(alpha) * sum;
      long double scale = std::fabs(static_cast<long double>(alpha)) * abs_sum;
      if (beta != T(0)) {
        expected += static_cast<long double>(beta) * c_in.at(i, j);
        scale += std::fabs(static_cast<long double>(beta) * c_in.at(i, j));
      }
      const long double tol = 2.0L * static_cast<long double>(k + 2) * eps * scale + 1e-30L;
      const T got = c_out.at(i, j);
      if (!(std::fabs(static_cast<long double>(got) - expected) <= tol)) {
        ADD_FAILURE() << "C(" << i << "," << j << ") = " << got << ", expected "
                      << static_cast<double>(expected) << " (tol " << static_cast<double>(tol)
                      << ")";
        ++failures;
      }
    }
  }
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = n; j < c_out.ld; ++j) {
      ASSERT_EQ(c_out.at(i, j), c_in.at(i, j))
          << "padding of C written at (" << i << "," << j << ")";
    }
  }
}

template <typename T>
void run_gemm_case(GemmBackend backend, bool ta, bool tb, int64_t m, int64_t n, int64_t k, T alpha,
                   T beta, int64_t extra_ld, std::mt19937& rng) {
  SCOPED_TRACE(testing::Message() << "backend=" << gemm_backend_name(backend) << " ta=" << ta
                                  << " tb=" << tb << " m=" << m << " n=" << n << " k=" << k
                                  << " alpha=" << alpha << " beta=" << beta
                                  << " extra_ld=" << extra_ld);
  const Matrix<T> a =
      ta ? random_matrix<T>(k, m, extra_ld, rng) : random_matrix<T>(m, k, extra_ld, rng);
  const Matrix<T> b =
      tb ? random_matrix<T>(n, k, extra_ld, rng) : random_matrix<T>(k, n, extra_ld, rng);
  Matrix<T> c_in = random_matrix<T>(m, n, extra_ld + 1, rng, T(1234.5));
  if (beta == T(0)) {  // BLAS semantics: C is not read, so NaN in it must not leak
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n; ++j)
        c_in.at(i, j) = std::numeric_limits<T>::quiet_NaN();
    }
  }
  Matrix<T> c_out = c_in;
  ScopedBackend scoped(backend);
  gemm(ta, tb, m, n, k, alpha, a.data.data(), a.ld, b.data.data(), b.ld, beta, c_out.data.data(),
       c_out.ld);
  expect_gemm_close(ta, tb, m, n, k, alpha, a, b, beta, c_in, c_out);
}

struct AlphaBeta {
  double alpha, beta;
};
const AlphaBeta kAlphaBetas[] = {{1.0, 0.0}, {0.5, -1.5}, {-2.0, 1.0}, {0.0, 0.5}, {0.0, 0.0}};
const int64_t kSizes[] = {1, 7, 33, 130};

// ---------------------------------------------------------------------------------------------
// GEMM

TEST(Gemm, FloatAllTransposesSizesAndScalars) {
  std::mt19937 rng(1);
  for (GemmBackend backend : cpu_backends()) {
    for (int t = 0; t < 4; ++t) {
      for (int64_t m : kSizes) {
        for (int64_t n : kSizes) {
          for (int64_t k : kSizes) {
            for (const AlphaBeta& ab : kAlphaBetas) {
              run_gemm_case<float>(backend, t & 1, t & 2, m, n, k, static_cast<float>(ab.alpha),
                                   static_cast<float>(ab.beta), (m + n + k) % 3 == 0 ? 0 : 5, rng);
              if (HasFatalFailure() || HasNonfatalFailure()) return;
            }
          }
        }
      }
    }
  }
}

TEST(Gemm, DoubleAllTransposesSizes) {
  std::mt19937 rng(2);
  for (GemmBackend backend : cpu_backends()) {
    for (int t = 0; t < 4; ++t) {
      for (int64_t m : kSizes) {
        for (int64_t k : kSizes) {
          const AlphaBeta& ab = kAlphaBetas[(m + k + t) % 3];
          run_gemm_case<double>(backend, t & 1, t & 2, m, 33, k, ab.alpha, ab.beta, 3, rng);
          if (HasFatalFailure() || HasNonfatalFailure()) return;
        }
      }
    }
  }
}

TEST(Gemm, ParallelTilingAcrossThreadCounts) {
  std::mt19937 rng(3);
  for (int threads : {1, 2, 3}) {
    core::ScopedNumThreads scoped(threads);
    for (GemmBackend backend : cpu_backends()) {
      for (int t = 0; t < 4; ++t) {
        run_gemm_case<float>(backend, t & 1, t & 2, 201, 259, 317, 1.0f, 0.0f, 2, rng);
        run_gemm_case<float>(backend, t & 1, t & 2, 9, 700, 300, 0.5f, 2.0f, 0, rng);
        run_gemm_case<double>(backend, t & 1, t & 2, 400, 13, 260, -1.0, 1.0, 1, rng);
      }
    }
  }
}

TEST(Gemm, ZeroSizesAndZeroK) {
  for (GemmBackend backend : cpu_backends()) {
    ScopedBackend scoped(backend);
    std::vector<float> c(12, std::numeric_limits<float>::quiet_NaN());
    gemm(false, false, 3, 4, 0, 1.0f, nullptr, 1, nullptr, 4, 0.0f, c.data(), 4);
    for (float v : c)
      EXPECT_EQ(v, 0.0f);
    std::vector<float> c2(12, 2.0f);
    gemm(false, false, 3, 4, 0, 1.0f, nullptr, 1, nullptr, 4, 0.5f, c2.data(), 4);
    for (float v : c2)
      EXPECT_EQ(v, 1.0f);
    gemm(false, false, 0, 4, 5, 1.0f, nullptr, 5, nullptr, 4, 0.0f, nullptr, 4);  // no-op
    // alpha == 0: A and B are not read even when they hold NaN.
    std::vector<float> nan_a(15, std::numeric_limits<float>::quiet_NaN());
    std::vector<float> c3(12, 3.0f);
    gemm(false, false, 3, 4, 5, 0.0f, nan_a.data(), 5, nan_a.data(), 4, 2.0f, c3.data(), 4);
    for (float v : c3)
      EXPECT_EQ(v, 6.0f);
  }
}

TEST(Gemm, ReferenceMatchesOpenBlas) {
#ifndef TB_HAVE_OPENBLAS
  GTEST_SKIP() << "built without OpenBLAS";
#else
  std::mt19937 rng(4);
  const int64_t m = 150, n = 170, k = 333;
  const Matrix<float> a = random_matrix<float>(m, k, 0, rng);
  const Matrix<float> b = random_matrix<float>(n, k, 0, rng);
  Matrix<float> c_ref(m, n, n, 0.0f), c_blas(m, n, n, 0.0f);
  reference_gemm(false, true, m, n, k, 1.0f, a.data.data(), k, b.data.data(), k, 0.0f,
                 c_ref.data.data(), n);
  ScopedBackend scoped(GemmBackend::OpenBlas);
  gemm(false, true, m, n, k, 1.0f, a.data.data(), k, b.data.data(), k, 0.0f, c_blas.data.data(), n);
  for (size_t i = 0; i < c_ref.data.size(); ++i) {
    ASSERT_NEAR(c_ref.data[i], c_blas.data[i], 2e-4f) << "at " << i;
  }
#endif
}

template <typename Fn>
std::string error_message(Fn&& fn) {
  try {
    fn();
  } catch (const ValueError& e) {
    return e.what();
  }
  return "<no tb::ValueError thrown>";
}

TEST(Gemm, ArgumentValidation) {
  std::vector<float> buf(100, 0.0f);
  float* p = buf.data();
  EXPECT_EQ(error_message([&] { gemm(false, false, -1, 2, 3, 1.0f, p, 3, p, 2, 0.0f, p, 2); }),
            "[gemm] sizes must be >= 0, got m=-1, n=2, k=3");
  EXPECT_EQ(error_message([&] { gemm(false, false, 4, 5, 6, 1.0f, p, 5, p, 5, 0.0f, p, 5); }),
            "[gemm] lda=5 is too small: A is stored 4x6 (trans_a=false), so lda must be >= 6");
  EXPECT_EQ(error_message([&] { gemm(true, false, 4, 5, 6, 1.0f, p, 3, p, 5, 0.0f, p, 5); }),
            "[gemm] lda=3 is too small: A is stored 6x4 (trans_a=true), so lda must be >= 4");
  EXPECT_EQ(error_message([&] { gemm(false, true, 4, 5, 6, 1.0f, p, 6, p, 5, 0.0f, p, 5); }),
            "[gemm] ldb=5 is too small: B is stored 5x6 (trans_b=true), so ldb must be >= 6");
  EXPECT_EQ(error_message([&] { gemm(false, false, 4, 5, 6, 1.0f, p, 6, p, 5, 0.0f, p, 4); }),
            "[gemm] ldc=4 is too small: C is 4x5, so ldc must be >= 5");
  EXPECT_EQ(error_message([&] { gemm(false, false, 0, 0, 0, 1.0f, p, 0, p, 1, 0.0f, p, 1); }),
            "[gemm] lda=0 is too small: A is stored 0x0 (trans_a=false), so lda must be >= 1");
  EXPECT_EQ(error_message([&] { gemm(false, false, 2, 2, 2, 1.0f, nullptr, 2, p, 2, 0.0f, p, 2); }),
            "[gemm] a is null but op(A) is 2x2");
  EXPECT_EQ(error_message([&] { syrk(false, 4, 6, 1.0f, p, 5, 0.0f, p, 4); }),
            "[syrk] lda=5 is too small: A is stored 4x6 (trans=false), so lda must be >= 6");
  EXPECT_EQ(error_message([&] { syrk(true, 4, 6, 1.0f, p, 4, 0.0f, p, 3); }),
            "[syrk] ldc=3 is too small: C is 4x4, so ldc must be >= 4");
  EXPECT_EQ(error_message([&] { syrk(true, -2, 6, 1.0f, p, 4, 0.0f, p, 3); }),
            "[syrk] sizes must be >= 0, got n=-2, k=6");
}

// ---------------------------------------------------------------------------------------------
// Batched GEMM

template <typename T>
void run_batched_case(GemmBackend backend, int threads, bool ta, bool tb, int64_t m, int64_t n,
                      int64_t k, int64_t batch, bool broadcast_b, std::mt19937& rng) {
  SCOPED_TRACE(testing::Message() << "backend=" << gemm_backend_name(backend)
                                  << " threads=" << threads << " ta=" << ta << " tb=" << tb
                                  << " m=" << m << " n=" << n << " k=" << k << " batch=" << batch
                                  << " broadcast_b=" << broadcast_b);
  ScopedBackend scoped_backend(backend);
  core::ScopedNumThreads scoped_threads(threads);
  const int64_t a_rows = ta ? k : m, a_cols = ta ? m : k;
  const int64_t b_rows = tb ? n : k, b_cols = tb ? k : n;
  std::vector<Matrix<T>> as, bs, cs;
  const int64_t lda = a_cols + 1, ldb = b_cols + 2, ldc = n + 3;
  const int64_t stride_a = a_rows * lda + 7, stride_b = broadcast_b ? 0 : b_rows * ldb + 1;
  const int64_t stride_c = m * ldc + 5;
  std::vector<T> a_all(static_cast<size_t>(batch * stride_a), std::numeric_limits<T>::quiet_NaN());
  std::vector<T> b_all(static_cast<size_t>(std::max<int64_t>(batch * stride_b, b_rows * ldb)),
                       std::numeric_limits<T>::quiet_NaN());
  std::vector<T> c_all(static_cast<size_t>(batch * stride_c), T(-7));
  for (int64_t i = 0; i < batch; ++i) {
    as.push_back(random_matrix<T>(a_rows, a_cols, 1, rng));
    bs.push_back(broadcast_b && i > 0 ? bs[0] : random_matrix<T>(b_rows, b_cols, 2, rng));
    cs.push_back(random_matrix<T>(m, n, 3, rng, T(-7)));
    std::copy(as[i].data.begin(), as[i].data.end(), a_all.begin() + i * stride_a);
    if (!broadcast_b || i == 0) {
      std::copy(bs[i].data.begin(), bs[i].data.end(), b_all.begin() + i * stride_b);
    }
    std::copy(cs[i].data.begin(), cs[i].data.end(), c_all.begin() + i * stride_c);
  }
  gemm_batched_strided(ta, tb, m, n, k, T(0.75), a_all.data(), lda, stride_a, b_all.data(), ldb,
                       stride_b, T(-0.5), c_all.data(), ldc, stride_c, batch);
  for (int64_t i = 0; i < batch; ++i) {
    Matrix<T> out = cs[i];
    std::copy(c_all.begin() + i * stride_c, c_all.begin() + i * stride_c + m * ldc,
              out.data.begin());
    expect_gemm_close(ta, tb, m, n, k, T(0.75), as[i], bs[i], T(-0.5), cs[i], out);
    for (int64_t g = m * ldc; g < stride_c; ++g) {
      ASSERT_EQ(c_all[static_cast<size_t>(i * stride_c + g)], T(-7)) << "gap between C matrices";
    }
  }
}

TEST(GemmBatched, MatchesPerMatrixReference) {
  std::mt19937 rng(5);
  for (GemmBackend backend : cpu_backends()) {
    for (int threads : {1, 2, 3}) {
      for (int t = 0; t < 4; ++t) {
        run_batched_case<float>(backend, threads, t & 1, t & 2, 7, 9, 33, 5, false, rng);
        run_batched_case<float>(backend, threads, t & 1, t & 2, 64, 70, 80, 6, t == 1, rng);
        run_batched_case<float>(backend, threads, t & 1, t & 2, 3, 2, 4, 1, false, rng);
        run_batched_case<double>(backend, threads, t & 1, t & 2, 20, 21, 22, 4, t == 3, rng);
      }
    }
  }
}

TEST(GemmBatched, Validation) {
  std::vector<float> buf(1000, 0.0f);
  float* p = buf.data();
  EXPECT_EQ(error_message([&] {
              gemm_batched_strided(false, false, 4, 5, 6, 1.0f, p, 6, 24, p, 5, 30, 0.0f, p, 5, 19,
                                   3);
            }),
            "[gemm] stride_c=19 makes the 3 output matrices (4x5, ldc=5) overlap; use stride_c >= "
            "20");
  EXPECT_EQ(error_message([&] {
              gemm_batched_strided(false, false, 4, 5, 6, 1.0f, p, 6, -1, p, 5, 30, 0.0f, p, 5, 20,
                                   3);
            }),
            "[gemm] batch strides must be >= 0, got stride_a=-1, stride_b=30, stride_c=20");
  EXPECT_EQ(error_message([&] {
              gemm_batched_strided(false, false, 4, 5, 6, 1.0f, p, 6, 0, p, 5, 0, 0.0f, p, 5, 20,
                                   -2);
            }),
            "[gemm] batch must be >= 0, got batch=-2");
  // Interleaved outputs (C_i rows in the gaps of C_0's rows) are disjoint and accepted.
  gemm_batched_strided(false, false, 4, 5, 6, 1.0f, p, 6, 0, p, 5, 0, 0.0f, p + 500, 15, 5, 3);
}

// ---------------------------------------------------------------------------------------------
// SYRK

template <typename T>
void run_syrk_case(GemmBackend backend, bool trans, int64_t n, int64_t k, T alpha, T beta,
                   std::mt19937& rng) {
  SCOPED_TRACE(testing::Message() << "backend=" << gemm_backend_name(backend) << " trans=" << trans
                                  << " n=" << n << " k=" << k << " alpha=" << alpha
                                  << " beta=" << beta);
  ScopedBackend scoped(backend);
  const Matrix<T> a = trans ? random_matrix<T>(k, n, 2, rng) : random_matrix<T>(n, k, 2, rng);
  // Symmetric C input; with beta == 0 it is NaN and must be ignored.
  Matrix<T> c_in(n, n, n + 4, T(99));
  std::uniform_real_distribution<double> dist(-1.0, 1.0);
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = 0; j <= i; ++j) {
      c_in.at(i, j) = c_in.at(j, i) =
          beta == T(0) ? std::numeric_limits<T>::quiet_NaN() : static_cast<T>(dist(rng));
    }
  }
  Matrix<T> c_out = c_in;
  syrk(trans, n, k, alpha, a.data.data(), a.ld, beta, c_out.data.data(), c_out.ld);
  // op(A)·op(B) with op(A) = A (n×k) and op(B) = Aᵀ when !trans; Aᵀ·A when trans.
  expect_gemm_close(trans, !trans, n, n, k, alpha, a, a, beta, c_in, c_out);
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = 0; j < i; ++j) {
      ASSERT_EQ(c_out.at(i, j), c_out.at(j, i)) << "not symmetric at (" << i << "," << j << ")";
    }
  }
  // Same backend's gemm(A, Aᵀ) agrees closely.
  Matrix<T> c_gemm = c_in;
  gemm(trans, !trans, n, n, k, alpha, a.data.data(), a.ld, a.data.data(), a.ld, beta,
       c_gemm.data.data(), c_gemm.ld);
  const T tol = static_cast<T>(4 * (k + 2)) * std::numeric_limits<T>::epsilon() *
                (std::fabs(alpha) * static_cast<T>(k) + std::fabs(beta));
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      ASSERT_NEAR(c_out.at(i, j), c_gemm.at(i, j), tol) << "vs gemm at (" << i << "," << j << ")";
    }
  }
}

TEST(Syrk, BothTransMatchesGemmAndIsSymmetric) {
  std::mt19937 rng(6);
  for (GemmBackend backend : cpu_backends()) {
    for (bool trans : {false, true}) {
      for (int64_t n : kSizes) {
        for (int64_t k : kSizes) {
          run_syrk_case<float>(backend, trans, n, k, 1.0f, 0.0f, rng);
          run_syrk_case<float>(backend, trans, n, k, -0.5f, 2.0f, rng);
          run_syrk_case<double>(backend, trans, n, k, 1.5, -1.0, rng);
          if (HasFatalFailure() || HasNonfatalFailure()) return;
        }
      }
    }
  }
}

TEST(Syrk, LargeParallelAndMirror) {
  std::mt19937 rng(7);
  for (int threads : {1, 2, 3}) {
    core::ScopedNumThreads scoped(threads);
    for (GemmBackend backend : cpu_backends()) {
      run_syrk_case<float>(backend, false, 517, 300, 1.0f, 0.0f, rng);
      run_syrk_case<float>(backend, true, 450, 64, 1.0f, 1.0f, rng);
    }
  }
  Matrix<double> c(5, 5, 6, -1.0);
  for (int64_t i = 0; i < 5; ++i) {
    for (int64_t j = 0; j < 5; ++j)
      c.at(i, j) = j <= i ? 10.0 * i + j : -3.0;
  }
  mirror_lower_to_upper(c.data.data(), 5, 6);
  for (int64_t i = 0; i < 5; ++i) {
    for (int64_t j = 0; j < 5; ++j)
      EXPECT_EQ(c.at(i, j), j <= i ? 10.0 * i + j : 10.0 * j + i);
    EXPECT_EQ(c.at(i, 5), -1.0);
  }
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// oneDNN's float products are split by rows over the kernel pool (GEMM) or into fixed row blocks
// (SYRK); neither split changes a bit, so a run's numbers do not depend on its thread count.
TEST(OneDnn, SameBitsForEveryThreadCount) {
  if (!gemm_backend_available_on_cpu(GemmBackend::OneDnn)) GTEST_SKIP() << "built without oneDNN";
  ScopedBackend scoped(GemmBackend::OneDnn);
  std::mt19937 rng(8);
  struct Shape {
    bool ta, tb;
    int64_t m, n, k;
  };
  // The shipped workloads' products (MLP layers and their gradients, Newton–Schulz on 256×784,
  // qwen-tiny's projections) and ragged sizes.
  const Shape shapes[] = {{false, true, 128, 256, 784},  {true, false, 256, 784, 128},
                          {false, true, 256, 256, 784},  {false, false, 256, 784, 256},
                          {false, true, 1024, 512, 128}, {true, true, 100, 37, 333},
                          {false, false, 201, 259, 317}};
  for (const Shape& sh : shapes) {
    SCOPED_TRACE(testing::Message() << "ta=" << sh.ta << " tb=" << sh.tb << " m=" << sh.m
                                    << " n=" << sh.n << " k=" << sh.k);
    const Matrix<float> a =
        sh.ta ? random_matrix<float>(sh.k, sh.m, 3, rng) : random_matrix<float>(sh.m, sh.k, 3, rng);
    const Matrix<float> b =
        sh.tb ? random_matrix<float>(sh.n, sh.k, 1, rng) : random_matrix<float>(sh.k, sh.n, 1, rng);
    const Matrix<float> c_in = random_matrix<float>(sh.m, sh.n, 2, rng);
    std::vector<std::vector<float>> results;
    for (int threads : {1, 2, 3}) {
      core::ScopedNumThreads scoped_threads(threads);
      Matrix<float> c = c_in;
      gemm(sh.ta, sh.tb, sh.m, sh.n, sh.k, 0.5f, a.data.data(), a.ld, b.data.data(), b.ld, -1.0f,
           c.data.data(), c.ld);
      results.push_back(c.data);
    }
    // Bitwise (C's padding holds NaN, which == would call unequal).
    EXPECT_TRUE(same_bits(results[0], results[1])) << "2 threads differ from 1";
    EXPECT_TRUE(same_bits(results[0], results[2])) << "3 threads differ from 1";
  }
  for (bool trans : {false, true}) {
    const int64_t n = 256, k = 784;
    const Matrix<float> a =
        trans ? random_matrix<float>(k, n, 0, rng) : random_matrix<float>(n, k, 0, rng);
    std::vector<std::vector<float>> results;
    for (int threads : {1, 2, 3}) {
      core::ScopedNumThreads scoped_threads(threads);
      std::vector<float> c(static_cast<size_t>(n * n));
      syrk(trans, n, k, 1.0f, a.data.data(), a.ld, 0.0f, c.data(), n);
      results.push_back(c);
    }
    EXPECT_TRUE(same_bits(results[0], results[1]))
        << "syrk trans=" << trans << ": 2 threads differ from 1";
    EXPECT_TRUE(same_bits(results[0], results[2]))
        << "syrk trans=" << trans << ": 3 threads differ from 1";
  }
}

// Auto runs a float product whose right operand has 2^20 elements or more (and whose A is not
// transposed) on OpenBLAS, in column blocks of single-threaded calls: the same bits at every
// thread count (OpenBLAS's own threading does not give that) and OpenBLAS's values; smaller
// products and transposed-A ones stay on oneDNN, bit for bit.
TEST(Gemm, AutoRunsLargeProductsOnOpenBlasWithTheSameBitsAtEveryThreadCount) {
  if (!gemm_backend_available_on_cpu(GemmBackend::OneDnn) ||
      !gemm_backend_available_on_cpu(GemmBackend::OpenBlas))
    GTEST_SKIP() << "needs oneDNN and OpenBLAS";
  if (!openblas_core_note().empty()) GTEST_SKIP() << "OpenBLAS runs generic kernels here";
  std::mt19937 rng(9);
  struct Case {
    bool ta, tb;
    int64_t m, n, k;
    bool large;
  };
  const Case cases[] = {{false, true, 7, 1024, 1024, true},     // x·Wᵀ, W 1024×1024
                        {false, false, 5, 768, 1400, true},     // g·W, 6 blocks of 128 columns
                        {false, true, 3, 2000, 600, true},      // ragged last block
                        {true, false, 1024, 1024, 9, false},    // transposed A
                        {false, true, 64, 1023, 1024, false}};  // just below 2^20
  for (const Case& sh : cases) {
    SCOPED_TRACE(testing::Message() << "ta=" << sh.ta << " tb=" << sh.tb << " m=" << sh.m
                                    << " n=" << sh.n << " k=" << sh.k);
    const Matrix<float> a =
        sh.ta ? random_matrix<float>(sh.k, sh.m, 0, rng) : random_matrix<float>(sh.m, sh.k, 0, rng);
    const Matrix<float> b =
        sh.tb ? random_matrix<float>(sh.n, sh.k, 0, rng) : random_matrix<float>(sh.k, sh.n, 0, rng);
    auto product = [&](GemmBackend backend, int threads) {
      ScopedBackend scoped(backend);
      core::ScopedNumThreads scoped_threads(threads);
      std::vector<float> c(static_cast<size_t>(sh.m * sh.n));
      gemm(sh.ta, sh.tb, sh.m, sh.n, sh.k, 1.0f, a.data.data(), a.ld, b.data.data(), b.ld, 0.0f,
           c.data(), sh.n);
      return c;
    };
    const std::vector<float> got = product(GemmBackend::Auto, 1);
    for (int threads : {2, 3})
      EXPECT_TRUE(same_bits(product(GemmBackend::Auto, threads), got)) << threads << " threads";
    const std::vector<float> onednn = product(GemmBackend::OneDnn, 1);
    if (!sh.large) {
      EXPECT_TRUE(same_bits(got, onednn)) << "a small product left oneDNN";
      continue;
    }
    EXPECT_FALSE(same_bits(got, onednn)) << "a large product stayed on oneDNN";
    const std::vector<float> openblas = product(GemmBackend::OpenBlas, 1);
    for (size_t i = 0; i < got.size(); ++i)
      ASSERT_NEAR(got[i], openblas[i], 1e-4 * std::sqrt(static_cast<double>(sh.k))) << i;
  }
}

// ---------------------------------------------------------------------------------------------
// Backend names and selection

TEST(GemmBackendSelection, NamesRoundTrip) {
  for (GemmBackend b : {GemmBackend::Auto, GemmBackend::OpenBlas, GemmBackend::OneDnn,
                        GemmBackend::Reference, GemmBackend::Cublas, GemmBackend::CublasLt}) {
    EXPECT_EQ(parse_gemm_backend(gemm_backend_name(b)), b);
  }
  EXPECT_EQ(parse_gemm_backend("OpenBLAS"), GemmBackend::OpenBlas);
  EXPECT_EQ(parse_gemm_backend("oneDNN"), GemmBackend::OneDnn);
  EXPECT_EQ(parse_gemm_backend("cuBLASLt"), GemmBackend::CublasLt);
  EXPECT_EQ(error_message([] { parse_gemm_backend("mkl"); }),
            "[gemm] unknown gemm_backend 'mkl' (expected auto, openblas, onednn, reference, "
            "cublas, cublaslt)");
  EXPECT_EQ(error_message([] { parse_gemm_backend(""); }),
            "[gemm] unknown gemm_backend '' (expected auto, openblas, onednn, reference, cublas, "
            "cublaslt)");
}

TEST(GemmBackendSelection, ValidatesUpFront) {
  const GemmBackend def = default_backend();
  GemmSelection s = select_gemm_backend(GemmBackend::Auto);
  EXPECT_EQ(s.requested, GemmBackend::Auto);
  EXPECT_EQ(s.used, def);
  EXPECT_EQ(s.warning, "");

  s = select_gemm_backend(GemmBackend::Reference);
  EXPECT_EQ(s.used, GemmBackend::Reference);
  EXPECT_EQ(s.warning, "");

  s = select_gemm_backend(GemmBackend::OneDnn);
  if (gemm_backend_available_on_cpu(GemmBackend::OneDnn)) {
    EXPECT_EQ(s.used, GemmBackend::OneDnn);
    EXPECT_EQ(s.warning, "");
  } else {
    EXPECT_EQ(s.used, def);
    EXPECT_EQ(s.warning,
              std::string("[gemm] gemm_backend 'onednn' is not available: this build "
                          "has no oneDNN (install libdnnl-dev and reconfigure); using '") +
                  std::string(gemm_backend_name(def)) + "' instead");
  }

  s = select_gemm_backend(GemmBackend::OpenBlas);
#ifdef TB_HAVE_OPENBLAS
  EXPECT_EQ(s.used, GemmBackend::OpenBlas);
  EXPECT_EQ(s.warning, "");
#else
  EXPECT_EQ(s.used, GemmBackend::Reference);
  EXPECT_EQ(s.warning,
            "[gemm] gemm_backend 'openblas' is not available: this build has no OpenBLAS "
            "(compiled without TB_HAVE_OPENBLAS); using 'reference' instead");
#endif

  s = select_gemm_backend(GemmBackend::Cublas);
  EXPECT_EQ(s.requested, GemmBackend::Cublas);
  EXPECT_EQ(s.used, def);
  EXPECT_EQ(s.warning, std::string("[gemm] gemm_backend 'cublas' runs only on CUDA devices (which "
                                   "use it); CPU GEMMs use the default '") +
                           std::string(gemm_backend_name(def)) + "' instead");
  s = select_gemm_backend(GemmBackend::CublasLt);
  EXPECT_NE(s.warning.find("'cublaslt' runs only on CUDA devices"), std::string::npos);
  // The request is what CUDA devices follow: remembered even though CPU GEMMs cannot honour it.
  {
    const GemmBackend before = requested_gemm_backend();
    set_gemm_backend(GemmBackend::CublasLt);
    EXPECT_EQ(requested_gemm_backend(), GemmBackend::CublasLt);
    EXPECT_EQ(current_gemm_backend(), def);
    set_gemm_backend(before);
    EXPECT_EQ(requested_gemm_backend(), before);
  }

  {
    ScopedBackend scoped(GemmBackend::Reference);
    EXPECT_EQ(current_gemm_backend(), GemmBackend::Reference);
    s = set_gemm_backend(GemmBackend::Cublas);
    EXPECT_FALSE(s.warning.empty());
    EXPECT_EQ(current_gemm_backend(), def);
    s = set_gemm_backend(GemmBackend::Auto);
    EXPECT_EQ(current_gemm_backend(), def);
  }
  EXPECT_TRUE(gemm_backend_available_on_cpu(GemmBackend::Reference));
  EXPECT_FALSE(gemm_backend_available_on_cpu(GemmBackend::Cublas));
}

// ---------------------------------------------------------------------------------------------
// Thread pool

TEST(ThreadPool, CoversEveryIndexExactlyOnce) {
  const std::pair<int64_t, int64_t> ranges[] = {{0, 0},   {5, 3},    {0, 1},    {5, 6},    {0, 7},
                                                {3, 100}, {0, 1000}, {-50, 50}, {10, 4099}};
  for (int threads : {1, 2, 3, 4, 8}) {
    core::ScopedNumThreads scoped(threads);
    for (auto [begin, end] : ranges) {
      for (int64_t grain : {-1, 0, 1, 2, 7, 64, 1000}) {
        SCOPED_TRACE(testing::Message() << "threads=" << threads << " range=[" << begin << ","
                                        << end << ") grain=" << grain);
        const int64_t size = std::max<int64_t>(end - begin, 0);
        std::vector<std::atomic<int>> hits(static_cast<size_t>(size));
        std::atomic<int> chunks{0};
        std::mutex mu;
        std::set<std::thread::id> ids;
        core::parallel_for(begin, end, grain, [&](int64_t b, int64_t e) {
          ASSERT_LT(b, e);
          ASSERT_GE(b, begin);
          ASSERT_LE(e, end);
          EXPECT_TRUE(core::in_parallel_region() || threads == 1 || e - b == end - begin);
          chunks.fetch_add(1);
          {
            std::lock_guard<std::mutex> lock(mu);
            ids.insert(std::this_thread::get_id());
          }
          for (int64_t i = b; i < e; ++i)
            hits[static_cast<size_t>(i - begin)].fetch_add(1);
        });
        for (int64_t i = 0; i < size; ++i)
          ASSERT_EQ(hits[static_cast<size_t>(i)].load(), 1);
        EXPECT_LE(chunks.load(), 4 * threads);
        EXPECT_LE(ids.size(), static_cast<size_t>(threads));
        if (size > 0) {
          const int64_t g = std::max<int64_t>(grain, 1);
          const int64_t expected = size <= grain || threads == 1
                                       ? 1
                                       : std::min<int64_t>(4 * threads, (size + g - 1) / g);
          EXPECT_EQ(chunks.load(), expected);
          EXPECT_EQ(ids.count(std::this_thread::get_id()), 1u) << "caller ran no chunk";
        } else {
          EXPECT_EQ(chunks.load(), 0);
        }
      }
    }
  }
  EXPECT_FALSE(core::in_parallel_region());
}

// A thread that stalls inside its chunk (preempted by another process, say) holds back that
// chunk only: the others are taken by whoever is free. Here a worker's chunk waits until every
// other chunk has finished, which completes only if the caller took them all; with one chunk per
// thread it would wait for the caller's whole share and time out.
// The pool first grows to 7 workers, which must not all join a later two-thread loop.
TEST(ThreadPool, AStalledThreadHoldsBackOnlyItsOwnChunk) {
  {
    core::ScopedNumThreads wide(8);
    std::atomic<int64_t> count{0};
    core::parallel_for(0, 1 << 16, 1, [&](int64_t b, int64_t e) { count.fetch_add(e - b); });
    ASSERT_EQ(count.load(), 1 << 16);
  }
  core::ScopedNumThreads scoped(2);
  const std::thread::id caller = std::this_thread::get_id();
  for (int rep = 0; rep < 20; ++rep) {
    std::atomic<int> done{0};
    std::atomic<int> chunks{0};
    std::atomic<bool> timed_out{false};
    std::mutex mu;
    std::set<std::thread::id> ids;
    core::parallel_for(0, 8, 1, [&](int64_t, int64_t) {
      const int total = 8;
      chunks.fetch_add(1);
      {
        std::lock_guard<std::mutex> lock(mu);
        ids.insert(std::this_thread::get_id());
      }
      if (std::this_thread::get_id() != caller) {
        const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
        while (done.load() < total - 1) {
          if (std::chrono::steady_clock::now() > deadline) {
            timed_out = true;
            break;
          }
          std::this_thread::yield();
        }
      }
      done.fetch_add(1);
    });
    EXPECT_EQ(chunks.load(), 8);
    EXPECT_LE(ids.size(), 2u) << "more threads than the thread count worked on the loop";
    ASSERT_FALSE(timed_out.load()) << "the caller did not take over the stalled worker's share";
  }
}

TEST(ThreadPool, StdFunctionOverload) {
  core::ScopedNumThreads scoped(3);
  std::atomic<int64_t> sum{0};
  const std::function<void(int64_t, int64_t)> fn = [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i)
      sum.fetch_add(i);
  };
  core::parallel_for(0, 1000, 10, fn);
  EXPECT_EQ(sum.load(), 999 * 1000 / 2);
}

TEST(ThreadPool, RethrowsFirstExceptionAndStaysUsable) {
  for (int threads : {1, 2, 4}) {
    core::ScopedNumThreads scoped(threads);
    try {
      core::parallel_for(0, 100, 1, [](int64_t b, int64_t e) {
        if (b <= 37 && 37 < e) throw ValueError("[test] chunk with 37 failed");
      });
      ADD_FAILURE() << "no exception";
    } catch (const ValueError& e) {
      EXPECT_STREQ(e.what(), "[test] chunk with 37 failed");
    }
    EXPECT_THROW(
        core::parallel_for(0, 100, 1, [](int64_t, int64_t) { throw std::runtime_error("x"); }),
        std::runtime_error);
    std::atomic<int64_t> count{0};
    core::parallel_for(0, 10000, 1, [&](int64_t b, int64_t e) { count.fetch_add(e - b); });
    EXPECT_EQ(count.load(), 10000);
    EXPECT_FALSE(core::in_parallel_region());
  }
}

TEST(ThreadPool, NestedCallsRunInlineWithoutDeadlock) {
  core::ScopedNumThreads scoped(4);
  const int64_t n = 64;
  std::vector<std::atomic<int>> hits(static_cast<size_t>(n * n));
  core::parallel_for(0, n, 1, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      const std::thread::id outer = std::this_thread::get_id();
      core::parallel_for(0, n, 1, [&](int64_t b2, int64_t e2) {
        EXPECT_EQ(std::this_thread::get_id(), outer);  // inline on the same thread
        EXPECT_TRUE(b2 == 0 && e2 == n);
        for (int64_t j = b2; j < e2; ++j)
          hits[static_cast<size_t>(i * n + j)].fetch_add(1);
      });
    }
  });
  for (auto& h : hits)
    ASSERT_EQ(h.load(), 1);
}

TEST(ThreadPool, ConcurrentCallersFromSeveralThreads) {
  core::ScopedNumThreads scoped(3);
  std::vector<std::thread> callers;
  std::atomic<int> wrong{0};
  for (int t = 0; t < 4; ++t) {
    callers.emplace_back([&, t] {
      for (int rep = 0; rep < 200; ++rep) {
        std::atomic<int64_t> sum{0};
        const int64_t n = 100 + t * 37 + rep;
        core::parallel_for(0, n, 8, [&](int64_t b, int64_t e) {
          int64_t local = 0;
          for (int64_t i = b; i < e; ++i)
            local += i;
          sum.fetch_add(local);
        });
        if (sum.load() != n * (n - 1) / 2) wrong.fetch_add(1);
      }
    });
  }
  for (auto& c : callers)
    c.join();
  EXPECT_EQ(wrong.load(), 0);
}

TEST(ThreadPool, SetNumThreadsValidatesAndFollowsOpenBlas) {
  EXPECT_EQ(error_message([] { core::set_num_threads(0); }),
            "[threads] thread count must be in [1, 1024], got 0");
  EXPECT_EQ(error_message([] { core::set_num_threads(-3); }),
            "[threads] thread count must be in [1, 1024], got -3");
  EXPECT_EQ(error_message([] { core::set_num_threads(core::kMaxNumThreads + 1); }),
            "[threads] thread count must be in [1, 1024], got 1025");
  EXPECT_EQ(error_message([] { core::ScopedNumThreads bad(0); }),
            "[threads] thread count must be in [1, 1024], got 0");
  const int before = core::num_threads();
  EXPECT_GE(before, 1);
  {
    core::ScopedNumThreads one(1);
    EXPECT_EQ(core::num_threads(), 1);
#ifdef TB_HAVE_OPENBLAS
    EXPECT_EQ(openblas_get_num_threads(), 1);
#endif
    {
      core::ScopedNumThreads three(3);
      EXPECT_EQ(core::num_threads(), 3);
#ifdef TB_HAVE_OPENBLAS
      EXPECT_EQ(openblas_get_num_threads(), 3);
#endif
    }
    EXPECT_EQ(core::num_threads(), 1);
  }
  EXPECT_EQ(core::num_threads(), before);
#ifdef TB_HAVE_OPENBLAS
  EXPECT_EQ(openblas_get_num_threads(), before);
  core::set_num_threads(2);
  EXPECT_EQ(openblas_get_num_threads(), 2);
  core::set_num_threads(before);
#endif
}

#ifdef TB_HAVE_OPENBLAS
TEST(ThreadPool, SingleThreadedBlasScopesNestAndDeferANewCount) {
  const core::ScopedNumThreads two(2);
  {
    const core::ScopedSingleThreadedBlas outer;
    EXPECT_EQ(openblas_get_num_threads(), 1);
    {
      const core::ScopedSingleThreadedBlas inner;
      EXPECT_EQ(openblas_get_num_threads(), 1);
    }
    EXPECT_EQ(openblas_get_num_threads(), 1);  // the outer scope still holds
    core::set_num_threads(3);                  // reaches OpenBLAS when the last scope ends
    EXPECT_EQ(core::num_threads(), 3);
    EXPECT_EQ(openblas_get_num_threads(), 1);
  }
  EXPECT_EQ(openblas_get_num_threads(), 3);
  core::set_num_threads(2);
}
#endif

TEST(ThreadPool, DefaultFromEnvironmentOrAffinity) {
  const char* saved = std::getenv("TB_NUM_THREADS");
  const std::string saved_value = saved ? saved : "";
  unsetenv("TB_NUM_THREADS");
  const int affinity = core::default_num_threads();
  EXPECT_GE(affinity, 1);
  EXPECT_LE(affinity, static_cast<int>(std::max(1u, std::thread::hardware_concurrency())));
  setenv("TB_NUM_THREADS", "3", 1);
  EXPECT_EQ(core::default_num_threads(), 3);
  setenv("TB_NUM_THREADS", "two", 1);
  EXPECT_EQ(
      error_message([] { core::default_num_threads(); }),
      "[threads] TB_NUM_THREADS must be an integer in [1, 1024], got 'two'; unset it to use every "
      "CPU this process may run on");
  setenv("TB_NUM_THREADS", "0", 1);
  EXPECT_THROW(core::default_num_threads(), ValueError);
  setenv("TB_NUM_THREADS", "99999", 1);  // a typo, not a machine
  EXPECT_THROW(core::default_num_threads(), ValueError);
  setenv("TB_NUM_THREADS", "1024", 1);
  EXPECT_EQ(core::default_num_threads(), 1024);
  if (saved) {
    setenv("TB_NUM_THREADS", saved_value.c_str(), 1);
  } else {
    unsetenv("TB_NUM_THREADS");
  }
}

}  // namespace
}  // namespace tb::cpu
