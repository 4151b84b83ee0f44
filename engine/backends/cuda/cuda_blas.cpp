// CUDA matrix products: mm, addmm, bmm, baddbmm and syrk through cuBLAS (cublasGemmEx,
// cublasGemmStridedBatchedEx, cublas{S,D}syrk) or, with gemm_backend = "cublaslt", cuBLASLt
// (cublasLtMatmul with heuristics, batched layouts and the bias epilogue for addmm with a bias
// row). fp32 (TF32 when allowed), fp64, fp16 and bf16 (fp32 accumulation). Transposed operands
// are passed as transposes, never copied.
//
// The libraries are loaded with dlopen on first use, not linked: linking them made every start of
// trainbench-cli take ~0.5 s and ~200 MB (cuBLASLt's initialisation), GPU or not, and made the
// binary refuse to start where the CUDA libraries are absent.
#include <cublasLt.h>
#include <cublas_v2.h>
#include <dlfcn.h>

#include <atomic>
#include <mutex>
#include <string>
#include <vector>

#include "engine/backends/common/mat_arg.h"
#include "engine/backends/cpu/blas.h"
#include "engine/backends/cuda/cuda_internal.h"
#include "engine/backends/cuda/cuda_kernels.h"
#include "engine/backends/cuda/cuda_status.h"
#include "engine/core/math_mode.h"
#include "engine/dispatch/op_signatures.h"

namespace tb::backends {

namespace cuda_detail {

namespace {

using core::ScalarType;
using core::Tensor;

constexpr int kMaxDevices = 64;

#if defined(TB_CUDA_EMULATION)
// The test build's emulated cuBLAS (tests/cuda_emu) is linked in: resolved directly.
void* open_library(const char*) {
  return nullptr;
}
#define TB_SYMBOL(lib, field, name) static_cast<decltype(field)>(&::name)
#else
#define TB_SYMBOL(lib, field, name) symbol<decltype(field)>(lib, #name)
void* open_library(const char* base) {
  const std::string versioned = std::string(base) + "." + std::to_string(CUDART_VERSION / 1000);
  void* lib = dlopen(versioned.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) lib = dlopen(base, RTLD_NOW | RTLD_LOCAL);
  TB_CHECK_T(NotImplementedError, lib != nullptr, "[cuda] ", base, " could not be loaded (",
             versioned, "): ", dlerror(), "; install the CUDA toolkit's cuBLAS libraries");
  return lib;
}

template <typename F>
F symbol(void* lib, const char* name) {
  void* f = dlsym(lib, name);
  TB_CHECK_T(NotImplementedError, f != nullptr, "[cuda] the cuBLAS library lacks ", name);
  return reinterpret_cast<F>(f);
}
#endif

// cublasGemmEx and cublasGemmStridedBatchedEx are overloaded in C++ (the legacy compute-type
// form): the C ABI's signatures, spelled out.
using GemmExFn = cublasStatus_t (*)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int,
                                    int, const void*, const void*, cudaDataType, int, const void*,
                                    cudaDataType, int, const void*, void*, cudaDataType, int,
                                    cublasComputeType_t, cublasGemmAlgo_t);
using GemmBatchedExFn = cublasStatus_t (*)(cublasHandle_t, cublasOperation_t, cublasOperation_t,
                                           int, int, int, const void*, const void*, cudaDataType,
                                           int, long long int, const void*, cudaDataType, int,
                                           long long int, const void*, void*, cudaDataType, int,
                                           long long int, int, cublasComputeType_t,
                                           cublasGemmAlgo_t);

struct CublasApi {
  decltype(&cublasCreate_v2) create = nullptr;
  decltype(&cublasSetMathMode) set_math_mode = nullptr;
  GemmExFn gemm_ex = nullptr;
  GemmBatchedExFn gemm_batched_ex = nullptr;
  decltype(&cublasSsyrk_v2) ssyrk = nullptr;
  decltype(&cublasDsyrk_v2) dsyrk = nullptr;
  decltype(&cublasGetStatusString) status_string = nullptr;
};

const CublasApi& cublas() {
  static const CublasApi api = [] {
    void* lib = open_library("libcublas.so");
    (void)lib;  // unused in the emulated build
    CublasApi a;
    a.create = TB_SYMBOL(lib, a.create, cublasCreate_v2);
    a.set_math_mode = TB_SYMBOL(lib, a.set_math_mode, cublasSetMathMode);
    a.gemm_ex = TB_SYMBOL(lib, a.gemm_ex, cublasGemmEx);
    a.gemm_batched_ex = TB_SYMBOL(lib, a.gemm_batched_ex, cublasGemmStridedBatchedEx);
    a.ssyrk = TB_SYMBOL(lib, a.ssyrk, cublasSsyrk_v2);
    a.dsyrk = TB_SYMBOL(lib, a.dsyrk, cublasDsyrk_v2);
    a.status_string = TB_SYMBOL(lib, a.status_string, cublasGetStatusString);
    return a;
  }();
  return api;
}

struct LtApi {
  decltype(&cublasLtCreate) create = nullptr;
  decltype(&cublasLtMatmulDescCreate) desc_create = nullptr;
  decltype(&cublasLtMatmulDescDestroy) desc_destroy = nullptr;
  decltype(&cublasLtMatmulDescSetAttribute) desc_set = nullptr;
  decltype(&cublasLtMatrixLayoutCreate) layout_create = nullptr;
  decltype(&cublasLtMatrixLayoutDestroy) layout_destroy = nullptr;
  decltype(&cublasLtMatrixLayoutSetAttribute) layout_set = nullptr;
  decltype(&cublasLtMatmulPreferenceCreate) pref_create = nullptr;
  decltype(&cublasLtMatmulPreferenceDestroy) pref_destroy = nullptr;
  decltype(&cublasLtMatmulPreferenceSetAttribute) pref_set = nullptr;
  decltype(&cublasLtMatmulAlgoGetHeuristic) heuristic = nullptr;
  decltype(&cublasLtMatmul) matmul = nullptr;
};

const LtApi& lt() {
  static const LtApi api = [] {
    void* lib = open_library("libcublasLt.so");
    (void)lib;
    LtApi a;
    a.create = TB_SYMBOL(lib, a.create, cublasLtCreate);
    a.desc_create = TB_SYMBOL(lib, a.desc_create, cublasLtMatmulDescCreate);
    a.desc_destroy = TB_SYMBOL(lib, a.desc_destroy, cublasLtMatmulDescDestroy);
    a.desc_set = TB_SYMBOL(lib, a.desc_set, cublasLtMatmulDescSetAttribute);
    a.layout_create = TB_SYMBOL(lib, a.layout_create, cublasLtMatrixLayoutCreate);
    a.layout_destroy = TB_SYMBOL(lib, a.layout_destroy, cublasLtMatrixLayoutDestroy);
    a.layout_set = TB_SYMBOL(lib, a.layout_set, cublasLtMatrixLayoutSetAttribute);
    a.pref_create = TB_SYMBOL(lib, a.pref_create, cublasLtMatmulPreferenceCreate);
    a.pref_destroy = TB_SYMBOL(lib, a.pref_destroy, cublasLtMatmulPreferenceDestroy);
    a.pref_set = TB_SYMBOL(lib, a.pref_set, cublasLtMatmulPreferenceSetAttribute);
    a.heuristic = TB_SYMBOL(lib, a.heuristic, cublasLtMatmulAlgoGetHeuristic);
    a.matmul = TB_SYMBOL(lib, a.matmul, cublasLtMatmul);
    return a;
  }();
  return api;
}

void check_blas(cublasStatus_t st, const char* op, const char* call) {
  TB_CHECK(st == CUBLAS_STATUS_SUCCESS, "[", op, "] ", call,
           " failed: ", cublas().status_string(st));
}

cublasHandle_t cublas_handle(int device) {
  static std::mutex m;
  static std::vector<cublasHandle_t> handles(kMaxDevices, nullptr);
  std::lock_guard lock(m);
  auto& h = handles[static_cast<std::size_t>(device)];
  if (h == nullptr) check_blas(cublas().create(&h), "mm", "cublasCreate");
  return h;
}

cublasLtHandle_t lt_handle(int device) {
  static std::mutex m;
  static std::vector<cublasLtHandle_t> handles(kMaxDevices, nullptr);
  std::lock_guard lock(m);
  auto& h = handles[static_cast<std::size_t>(device)];
  if (h == nullptr) check_blas(lt().create(&h), "mm", "cublasLtCreate");
  return h;
}

using backends::mat_arg;
using backends::MatArg;

struct Types {
  cudaDataType_t data;
  cublasComputeType_t compute;
  cudaDataType_t scale;
};

Types types_of(ScalarType t, const char* op) {
  switch (t) {
    case ScalarType::Float32:
      return {CUDA_R_32F, core::allow_tf32() ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F,
              CUDA_R_32F};
    case ScalarType::Float64:
      return {CUDA_R_64F, CUBLAS_COMPUTE_64F, CUDA_R_64F};
    case ScalarType::Float16:
      return {CUDA_R_16F, CUBLAS_COMPUTE_32F, CUDA_R_32F};
    case ScalarType::BFloat16:
      return {CUDA_R_16BF, CUBLAS_COMPUTE_32F, CUDA_R_32F};
    default:
      throw NotImplementedError(tb::detail::str_cat(
          "[", op, "] the CUDA backend multiplies float32, float64, float16 and bfloat16, got ",
          t));
  }
}

// alpha/beta in the scale type (float or double) as cuBLAS reads them.
struct ScaleArgs {
  double d[2];
  float f[2];
  const void* alpha(const Types& ty) const {
    return ty.scale == CUDA_R_64F ? static_cast<const void*>(&d[0]) : &f[0];
  }
  const void* beta(const Types& ty) const {
    return ty.scale == CUDA_R_64F ? static_cast<const void*>(&d[1]) : &f[1];
  }
};

bool use_lt() {
  return cpu::requested_gemm_backend() == cpu::GemmBackend::CublasLt;
}

int to_int(std::int64_t v, const char* op, const char* what) {
  TB_CHECK(v <= std::numeric_limits<int>::max(), "[", op, "] ", what, " = ", v,
           " exceeds cuBLAS's 32-bit sizes");
  return static_cast<int>(v);
}

// out[b] (contiguous [batch, m, n] or [m, n]) = alpha * A[b] @ B[b] + beta * out[b], with an
// optional bias row [n] added by cuBLASLt's epilogue (then beta must be 0).
void gemm(const char* op, Tensor& out, const Tensor& a, const Tensor& b, std::int64_t batch,
          double alpha, double beta, const Tensor* bias) {
  const std::int64_t nd = a.dim();
  const std::int64_t m = a.size(nd - 2);
  const std::int64_t k = a.size(nd - 1);
  const std::int64_t n = b.size(nd - 1);
  if (batch == 0 || m == 0 || n == 0) return;
  const Types ty = types_of(out.dtype(), op);
  const MatArg A = mat_arg(a);
  const MatArg B = mat_arg(b);
  const ScaleArgs sc{{alpha, beta}, {static_cast<float>(alpha), static_cast<float>(beta)}};
  const int device = static_cast<int>(out.device().index());
  DeviceGuard guard(device);
  // Row-major C = A B is column-major C^T = B^T A^T: cuBLAS gets (B, A) and the sizes (n, m, k).
  const cublasOperation_t op_b = B.trans ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_a = A.trans ? CUBLAS_OP_T : CUBLAS_OP_N;
  const int N = to_int(n, op, "n");
  const int M = to_int(m, op, "m");
  const int K = to_int(k, op, "k");
  if (!use_lt() && bias == nullptr) {
    cublasHandle_t h = cublas_handle(device);
    check_blas(cublas().set_math_mode(
                   h, core::allow_tf32() ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH),
               op, "cublasSetMathMode");
    if (batch == 1 && nd == 2) {
      check_blas(cublas().gemm_ex(h, op_b, op_a, N, M, K, sc.alpha(ty), B.t.data_ptr(), ty.data,
                                  to_int(B.ld, op, "ldb"), A.t.data_ptr(), ty.data,
                                  to_int(A.ld, op, "lda"), sc.beta(ty), out.data_ptr(), ty.data, N,
                                  ty.compute, CUBLAS_GEMM_DEFAULT),
                 op, "cublasGemmEx");
    } else {
      check_blas(cublas().gemm_batched_ex(
                     h, op_b, op_a, N, M, K, sc.alpha(ty), B.t.data_ptr(), ty.data,
                     to_int(B.ld, op, "ldb"), B.batch_stride, A.t.data_ptr(), ty.data,
                     to_int(A.ld, op, "lda"), A.batch_stride, sc.beta(ty), out.data_ptr(), ty.data,
                     N, m * n, to_int(batch, op, "batch"), ty.compute, CUBLAS_GEMM_DEFAULT),
                 op, "cublasGemmStridedBatchedEx");
    }
    return;
  }
  // cuBLASLt: descriptors for this shape, the heuristic's first algorithm, a cached workspace.
  const LtApi& L = lt();
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t lb = nullptr, la = nullptr, lc = nullptr;
  cublasLtMatmulPreference_t pref = nullptr;
  struct Cleanup {
    const LtApi& L;
    cublasLtMatmulDesc_t& desc;
    cublasLtMatrixLayout_t &lb, &la, &lc;
    cublasLtMatmulPreference_t& pref;
    ~Cleanup() {
      if (pref != nullptr) L.pref_destroy(pref);
      if (lc != nullptr) L.layout_destroy(lc);
      if (la != nullptr) L.layout_destroy(la);
      if (lb != nullptr) L.layout_destroy(lb);
      if (desc != nullptr) L.desc_destroy(desc);
    }
  } cleanup{L, desc, lb, la, lc, pref};
  check_blas(L.desc_create(&desc, ty.compute, ty.scale), op, "cublasLtMatmulDescCreate");
  check_blas(L.desc_set(desc, CUBLASLT_MATMUL_DESC_TRANSA, &op_b, sizeof op_b), op,
             "cublasLtMatmulDescSetAttribute");
  check_blas(L.desc_set(desc, CUBLASLT_MATMUL_DESC_TRANSB, &op_a, sizeof op_a), op,
             "cublasLtMatmulDescSetAttribute");
  if (bias != nullptr) {
    const cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_BIAS;
    const void* bias_ptr = bias->data_ptr();
    check_blas(L.desc_set(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi), op,
               "cublasLtMatmulDescSetAttribute(EPILOGUE)");
    check_blas(L.desc_set(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias_ptr, sizeof bias_ptr), op,
               "cublasLtMatmulDescSetAttribute(BIAS_POINTER)");
  }
  // Stored (pre-op) shapes in column-major terms.
  const std::uint64_t b_rows = B.trans ? k : n;
  const std::uint64_t b_cols = B.trans ? n : k;
  const std::uint64_t a_rows = A.trans ? m : k;
  const std::uint64_t a_cols = A.trans ? k : m;
  check_blas(L.layout_create(&lb, ty.data, b_rows, b_cols, B.ld), op, "cublasLtMatrixLayoutCreate");
  check_blas(L.layout_create(&la, ty.data, a_rows, a_cols, A.ld), op, "cublasLtMatrixLayoutCreate");
  check_blas(L.layout_create(&lc, ty.data, n, m, n), op, "cublasLtMatrixLayoutCreate");
  if (batch > 1 || nd == 3) {
    const auto count = static_cast<std::int32_t>(batch);
    const std::int64_t strides[3] = {B.batch_stride, A.batch_stride, m * n};
    cublasLtMatrixLayout_t layouts[3] = {lb, la, lc};
    for (int i = 0; i < 3; ++i) {
      check_blas(L.layout_set(layouts[i], CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof count),
                 op, "cublasLtMatrixLayoutSetAttribute(BATCH_COUNT)");
      check_blas(L.layout_set(layouts[i], CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &strides[i],
                              sizeof strides[i]),
                 op, "cublasLtMatrixLayoutSetAttribute(STRIDED_BATCH_OFFSET)");
    }
  }
  constexpr std::size_t kWorkspace = 32u << 20;
  const Tensor ws = scratch(static_cast<std::int64_t>(kWorkspace), out.device());
  check_blas(L.pref_create(&pref), op, "cublasLtMatmulPreferenceCreate");
  const std::uint64_t ws_bytes = kWorkspace;
  check_blas(L.pref_set(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws_bytes, sizeof ws_bytes),
             op, "cublasLtMatmulPreferenceSetAttribute");
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  cublasLtHandle_t h = lt_handle(device);
  check_blas(L.heuristic(h, desc, lb, la, lc, lc, pref, 1, &result, &found), op,
             "cublasLtMatmulAlgoGetHeuristic");
  TB_CHECK_T(NotImplementedError, found > 0, "[", op,
             "] cuBLASLt has no algorithm for this product (m=", m, ", n=", n, ", k=", k,
             ", dtype ", out.dtype(), "); use gemm_backend = \"cublas\"");
  check_blas(L.matmul(h, desc, sc.alpha(ty), B.t.data_ptr(), lb, A.t.data_ptr(), la, sc.beta(ty),
                      out.data_ptr(), lc, out.data_ptr(), lc, &result.algo, ws.data_ptr(),
                      kWorkspace, nullptr),
             op, "cublasLtMatmul");
}

void check_float(const Tensor& t, const char* op) {
  (void)types_of(t.dtype(), op);
}

Tensor mm_kernel(const Tensor& a, const Tensor& b) {
  check_float(a, "mm");
  Tensor out = Tensor::empty({a.size(0), b.size(1)}, a.dtype(), a.device());
  gemm("mm", out, a, b, 1, 1.0, 0.0, nullptr);
  return out;
}

Tensor addmm_kernel(const Tensor& bias, const Tensor& a, const Tensor& b, double beta,
                    double alpha) {
  check_float(a, "addmm");
  Tensor out = Tensor::empty({a.size(0), b.size(1)}, a.dtype(), a.device());
  const std::int64_t n = b.size(1);
  // A bias row of the output's dtype goes to cuBLASLt's epilogue (one kernel, no copy).
  const bool row_bias = bias.dim() >= 1 && bias.numel() == n && bias.size(-1) == n &&
                        bias.dtype() == a.dtype() && bias.is_contiguous() && n > 0;
  if (use_lt() && row_bias && beta == 1.0 && a.size(0) > 0) {
    gemm("addmm", out, a, b, 1, alpha, 0.0, &bias);
    return out;
  }
  if (beta != 0.0) out.copy_(bias);  // broadcast + cast on the device
  gemm("addmm", out, a, b, 1, alpha, beta, nullptr);
  return out;
}

Tensor bmm_kernel(const Tensor& a, const Tensor& b) {
  check_float(a, "bmm");
  Tensor out = Tensor::empty({a.size(0), a.size(1), b.size(2)}, a.dtype(), a.device());
  gemm("bmm", out, a, b, a.size(0), 1.0, 0.0, nullptr);
  return out;
}

Tensor baddbmm_kernel(const Tensor& c, const Tensor& a, const Tensor& b, double beta,
                      double alpha) {
  check_float(a, "baddbmm");
  Tensor out = Tensor::empty({a.size(0), a.size(1), b.size(2)}, a.dtype(), a.device());
  if (beta != 0.0) out.copy_(c);
  gemm("baddbmm", out, a, b, a.size(0), alpha, beta, nullptr);
  return out;
}

// alpha * X X^T: cublas{S,D}syrk on one triangle + a mirror kernel for float32/64; the 16-bit
// types use a tensor-core GEMM with X^T (twice the flops, many times the throughput).
Tensor syrk_kernel(const Tensor& x, double alpha) {
  check_float(x, "syrk");
  const std::int64_t n = x.size(0);
  const std::int64_t k = x.size(1);
  Tensor out = Tensor::empty({n, n}, x.dtype(), x.device());
  if (n == 0) return out;
  if (x.dtype() == ScalarType::Float16 || x.dtype() == ScalarType::BFloat16 || k == 0) {
    if (k == 0) return out.fill_(0.0);
    gemm("syrk", out, x, x.t(), 1, alpha, 0.0, nullptr);
    return out;
  }
  const MatArg X = mat_arg(x);
  const int device = static_cast<int>(x.device().index());
  DeviceGuard guard(device);
  cublasHandle_t h = cublas_handle(device);
  // Row-major X (n×k) is column-major M = X^T (k×n): C = M^T M (trans T). A transposed X is
  // column-major X itself: C = X X^T (trans N). Column-major upper = row-major lower.
  const cublasOperation_t trans = X.trans ? CUBLAS_OP_N : CUBLAS_OP_T;
  const int N = to_int(n, "syrk", "n");
  const int K = to_int(k, "syrk", "k");
  const int ld = to_int(X.ld, "syrk", "ld");
  if (x.dtype() == ScalarType::Float32) {
    const float a = static_cast<float>(alpha);
    const float zero = 0.0f;
    check_blas(cublas().ssyrk(h, CUBLAS_FILL_MODE_UPPER, trans, N, K, &a,
                              static_cast<const float*>(X.t.data_ptr()), ld, &zero,
                              static_cast<float*>(out.data_ptr()), N),
               "syrk", "cublasSsyrk");
  } else {
    const double zero = 0.0;
    check_blas(cublas().dsyrk(h, CUBLAS_FILL_MODE_UPPER, trans, N, K, &alpha,
                              static_cast<const double*>(X.t.data_ptr()), ld, &zero,
                              static_cast<double*>(out.data_ptr()), N),
               "syrk", "cublasDsyrk");
  }
  check_launch(tb::cuda::launch_mirror_lower(st(out), out.data_ptr(), n, n), "syrk");
  return out;
}

}  // namespace

void register_cuda_blas(dispatch::Dispatcher& d) {
  namespace sig = ops::sig;
  const auto key = dispatch::DispatchKey::CUDA;
  d.impl<sig::Binary>("mm", key, mm_kernel).detach();
  d.impl<sig::Addmm>("addmm", key, addmm_kernel).detach();
  d.impl<sig::Binary>("bmm", key, bmm_kernel).detach();
  d.impl<sig::Addmm>("baddbmm", key, baddbmm_kernel).detach();
  d.impl<sig::Syrk>("syrk", key, syrk_kernel).detach();
}

}  // namespace cuda_detail

std::string cuda_blas_unavailable_reason(bool lt) {
  const CudaStatus st = cuda_status();
  if (st.device_count == 0) return st.reason;
  try {
    if (lt) {
      (void)cuda_detail::lt();
    } else {
      (void)cuda_detail::cublas();
    }
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace tb::backends
