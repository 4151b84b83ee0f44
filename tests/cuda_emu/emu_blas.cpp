// Emulated cuBLAS / cuBLASLt (the functions the CUDA backend resolves): reference column-major
// GEMM, strided-batched GEMM, SYRK and Lt matmul with the bias epilogue, following cuBLAS's
// documented semantics, computing in double. Deliberately strict where cuBLAS leaves things
// undefined: SYRK fills the triangle it does not compute with NaN, so a caller that forgets to
// mirror it fails its tests. TF32 compute rounds the inputs to 10 mantissa bits.
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

struct cublasContext {
  cublasMath_t math = CUBLAS_DEFAULT_MATH;
};
struct cublasLtContext {
  int unused = 0;
};

namespace {

double load(cudaDataType t, const void* p, std::int64_t i) {
  switch (t) {
    case CUDA_R_32F:
      return static_cast<const float*>(p)[i];
    case CUDA_R_64F:
      return static_cast<const double*>(p)[i];
    case CUDA_R_16F:
      return __half2float(static_cast<const __half*>(p)[i]);
    case CUDA_R_16BF:
      return __bfloat162float(static_cast<const __nv_bfloat16*>(p)[i]);
    default:
      return std::numeric_limits<double>::quiet_NaN();
  }
}

void store(cudaDataType t, void* p, std::int64_t i, double v) {
  switch (t) {
    case CUDA_R_32F:
      static_cast<float*>(p)[i] = static_cast<float>(v);
      break;
    case CUDA_R_64F:
      static_cast<double*>(p)[i] = v;
      break;
    case CUDA_R_16F:
      static_cast<__half*>(p)[i] = __float2half(static_cast<float>(v));
      break;
    case CUDA_R_16BF:
      static_cast<__nv_bfloat16*>(p)[i] = __float2bfloat16(static_cast<float>(v));
      break;
    default:
      break;
  }
}

bool supported(cudaDataType t) {
  return t == CUDA_R_32F || t == CUDA_R_64F || t == CUDA_R_16F || t == CUDA_R_16BF;
}

double tf32(double v) {
  float f = static_cast<float>(v);
  std::uint32_t bits = 0;
  std::memcpy(&bits, &f, 4);
  bits = (bits + 0x1000u) & ~0x1FFFu;  // round to 10 mantissa bits
  std::memcpy(&f, &bits, 4);
  return f;
}

double scalar(cublasComputeType_t c, const void* p) {
  return c == CUBLAS_COMPUTE_64F ? *static_cast<const double*>(p) : *static_cast<const float*>(p);
}

// One column-major GEMM: C = alpha op(A) op(B) + beta C (+ bias[i] per row when bias).
void gemm_one(cublasOperation_t ta, cublasOperation_t tb, std::int64_t m, std::int64_t n,
              std::int64_t k, double alpha, const void* a, cudaDataType at, std::int64_t lda,
              const void* b, cudaDataType bt, std::int64_t ldb, double beta, const void* c, void* d,
              cudaDataType ct, std::int64_t ldc, bool round_tf32, const void* bias) {
  for (std::int64_t j = 0; j < n; ++j) {
    for (std::int64_t i = 0; i < m; ++i) {
      double acc = 0.0;
      for (std::int64_t p = 0; p < k; ++p) {
        double x = load(at, a, ta == CUBLAS_OP_N ? i + p * lda : p + i * lda);
        double y = load(bt, b, tb == CUBLAS_OP_N ? p + j * ldb : j + p * ldb);
        if (round_tf32) {
          x = tf32(x);
          y = tf32(y);
        }
        acc += x * y;
      }
      double v = alpha * acc;
      if (beta != 0.0) v += beta * load(ct, c, i + j * ldc);
      if (bias != nullptr) v += load(ct, bias, i);
      store(ct, d, i + j * ldc, v);
    }
  }
}

struct LtDesc {
  cublasComputeType_t compute;
  cudaDataType scale;
  cublasOperation_t ta = CUBLAS_OP_N;
  cublasOperation_t tb = CUBLAS_OP_N;
  cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  const void* bias = nullptr;
};

struct LtLayout {
  cudaDataType type;
  std::uint64_t rows;
  std::uint64_t cols;
  std::int64_t ld;
  std::int32_t batch = 1;
  std::int64_t stride = 0;
};

struct LtPref {
  std::uint64_t workspace = 0;
};

}  // namespace

extern "C" {

cublasStatus_t cublasCreate_v2(cublasHandle_t* handle) {
  *handle = new cublasContext();
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetMathMode(cublasHandle_t handle, cublasMath_t mode) {
  handle->math = mode;
  return CUBLAS_STATUS_SUCCESS;
}

const char* cublasGetStatusString(cublasStatus_t status) {
  switch (status) {
    case CUBLAS_STATUS_SUCCESS:
      return "the operation completed successfully";
    case CUBLAS_STATUS_INVALID_VALUE:
      return "an invalid value was used as an argument";
    case CUBLAS_STATUS_NOT_SUPPORTED:
      return "the functionality requested is not supported";
    default:
      return "unknown cuBLAS status";
  }
}

cublasStatus_t cublasGemmStridedBatchedEx(
    cublasHandle_t handle, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
    const void* alpha, const void* a, cudaDataType at, int lda, long long stride_a, const void* b,
    cudaDataType bt, int ldb, long long stride_b, const void* beta, void* c, cudaDataType ct,
    int ldc, long long stride_c, int batch, cublasComputeType_t compute, cublasGemmAlgo_t) {
  if (!supported(at) || at != bt || bt != ct || m < 0 || n < 0 || k < 0 || batch < 0 ||
      lda < (ta == CUBLAS_OP_N ? std::max(1, m) : std::max(1, k)) ||
      ldb < (tb == CUBLAS_OP_N ? std::max(1, k) : std::max(1, n)) || ldc < std::max(1, m)) {
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  const bool round = compute == CUBLAS_COMPUTE_32F_FAST_TF32 ||
                     (handle->math == CUBLAS_TF32_TENSOR_OP_MATH && at == CUDA_R_32F &&
                      compute == CUBLAS_COMPUTE_32F);
  const double al = scalar(compute, alpha);
  const double be = scalar(compute, beta);
  const std::size_t es = at == CUDA_R_64F ? 8 : at == CUDA_R_32F ? 4 : 2;
  for (int i = 0; i < batch; ++i) {
    const auto* ap = static_cast<const char*>(a) + static_cast<std::size_t>(i * stride_a) * es;
    const auto* bp = static_cast<const char*>(b) + static_cast<std::size_t>(i * stride_b) * es;
    auto* cp = static_cast<char*>(c) + static_cast<std::size_t>(i * stride_c) * es;
    gemm_one(ta, tb, m, n, k, al, ap, at, lda, bp, bt, ldb, be, cp, cp, ct, ldc, round, nullptr);
  }
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasGemmEx(cublasHandle_t handle, cublasOperation_t ta, cublasOperation_t tb,
                            int m, int n, int k, const void* alpha, const void* a, cudaDataType at,
                            int lda, const void* b, cudaDataType bt, int ldb, const void* beta,
                            void* c, cudaDataType ct, int ldc, cublasComputeType_t compute,
                            cublasGemmAlgo_t algo) {
  return cublasGemmStridedBatchedEx(handle, ta, tb, m, n, k, alpha, a, at, lda, 0, b, bt, ldb, 0,
                                    beta, c, ct, ldc, 0, 1, compute, algo);
}

}  // extern "C"

namespace {
template <typename T>
cublasStatus_t syrk(cublasFillMode_t uplo, cublasOperation_t trans, int n, int k, T alpha,
                    const T* a, int lda, T beta, T* c, int ldc) {
  if (n < 0 || k < 0 || ldc < std::max(1, n) ||
      lda < (trans == CUBLAS_OP_N ? std::max(1, n) : std::max(1, k))) {
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  for (int j = 0; j < n; ++j) {
    for (int i = 0; i < n; ++i) {
      const bool in_triangle = uplo == CUBLAS_FILL_MODE_UPPER ? i <= j : i >= j;
      if (!in_triangle) {
        c[i + j * ldc] = std::numeric_limits<T>::quiet_NaN();  // cuBLAS leaves it undefined
        continue;
      }
      double acc = 0.0;
      for (int p = 0; p < k; ++p) {
        const double x = trans == CUBLAS_OP_N ? a[i + p * lda] : a[p + i * lda];
        const double y = trans == CUBLAS_OP_N ? a[j + p * lda] : a[p + j * lda];
        acc += x * y;
      }
      double v = alpha * acc;
      if (beta != T(0)) v += beta * c[i + j * ldc];
      c[i + j * ldc] = static_cast<T>(v);
    }
  }
  return CUBLAS_STATUS_SUCCESS;
}
}  // namespace

extern "C" {

cublasStatus_t cublasSsyrk_v2(cublasHandle_t, cublasFillMode_t uplo, cublasOperation_t trans, int n,
                              int k, const float* alpha, const float* a, int lda, const float* beta,
                              float* c, int ldc) {
  return syrk(uplo, trans, n, k, *alpha, a, lda, *beta, c, ldc);
}

cublasStatus_t cublasDsyrk_v2(cublasHandle_t, cublasFillMode_t uplo, cublasOperation_t trans, int n,
                              int k, const double* alpha, const double* a, int lda,
                              const double* beta, double* c, int ldc) {
  return syrk(uplo, trans, n, k, *alpha, a, lda, *beta, c, ldc);
}

// ---- cuBLASLt ----

cublasStatus_t cublasLtCreate(cublasLtHandle_t* handle) {
  *handle = new cublasLtContext();
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* desc, cublasComputeType_t compute,
                                        cudaDataType_t scale) {
  *desc = reinterpret_cast<cublasLtMatmulDesc_t>(new LtDesc{compute, scale});
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t desc) {
  delete reinterpret_cast<LtDesc*>(desc);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t desc,
                                              cublasLtMatmulDescAttributes_t attr, const void* buf,
                                              size_t size) {
  auto* d = reinterpret_cast<LtDesc*>(desc);
  switch (attr) {
    case CUBLASLT_MATMUL_DESC_TRANSA:
      if (size != sizeof d->ta) return CUBLAS_STATUS_INVALID_VALUE;
      std::memcpy(&d->ta, buf, size);
      return CUBLAS_STATUS_SUCCESS;
    case CUBLASLT_MATMUL_DESC_TRANSB:
      if (size != sizeof d->tb) return CUBLAS_STATUS_INVALID_VALUE;
      std::memcpy(&d->tb, buf, size);
      return CUBLAS_STATUS_SUCCESS;
    case CUBLASLT_MATMUL_DESC_EPILOGUE:
      if (size != sizeof d->epilogue) return CUBLAS_STATUS_INVALID_VALUE;
      std::memcpy(&d->epilogue, buf, size);
      return CUBLAS_STATUS_SUCCESS;
    case CUBLASLT_MATMUL_DESC_BIAS_POINTER:
      if (size != sizeof d->bias) return CUBLAS_STATUS_INVALID_VALUE;
      std::memcpy(&d->bias, buf, size);
      return CUBLAS_STATUS_SUCCESS;
    default:
      return CUBLAS_STATUS_NOT_SUPPORTED;
  }
}

cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* layout, cudaDataType type,
                                          uint64_t rows, uint64_t cols, int64_t ld) {
  if (ld < static_cast<std::int64_t>(std::max<std::uint64_t>(1, rows))) {
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  *layout = reinterpret_cast<cublasLtMatrixLayout_t>(new LtLayout{type, rows, cols, ld});
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t layout) {
  delete reinterpret_cast<LtLayout*>(layout);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatrixLayoutSetAttribute(cublasLtMatrixLayout_t layout,
                                                cublasLtMatrixLayoutAttribute_t attr,
                                                const void* buf, size_t size) {
  auto* l = reinterpret_cast<LtLayout*>(layout);
  if (attr == CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT && size == sizeof l->batch) {
    std::memcpy(&l->batch, buf, size);
    return CUBLAS_STATUS_SUCCESS;
  }
  if (attr == CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET && size == sizeof l->stride) {
    std::memcpy(&l->stride, buf, size);
    return CUBLAS_STATUS_SUCCESS;
  }
  return CUBLAS_STATUS_INVALID_VALUE;
}

cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* pref) {
  *pref = reinterpret_cast<cublasLtMatmulPreference_t>(new LtPref());
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t pref) {
  delete reinterpret_cast<LtPref*>(pref);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t pref,
                                                    cublasLtMatmulPreferenceAttributes_t attr,
                                                    const void* buf, size_t size) {
  auto* p = reinterpret_cast<LtPref*>(pref);
  if (attr == CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES && size == sizeof p->workspace) {
    std::memcpy(&p->workspace, buf, size);
    return CUBLAS_STATUS_SUCCESS;
  }
  return CUBLAS_STATUS_INVALID_VALUE;
}

cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t, cublasLtMatmulDesc_t desc,
                                              cublasLtMatrixLayout_t a, cublasLtMatrixLayout_t b,
                                              cublasLtMatrixLayout_t c, cublasLtMatrixLayout_t d,
                                              cublasLtMatmulPreference_t, int requested,
                                              cublasLtMatmulHeuristicResult_t* results,
                                              int* returned) {
  const auto* la = reinterpret_cast<LtLayout*>(a);
  const auto* lc = reinterpret_cast<LtLayout*>(c);
  (void)desc;
  (void)b;
  (void)d;
  *returned = 0;
  if (requested < 1 || !supported(la->type) || la->type != lc->type) {
    return CUBLAS_STATUS_NOT_SUPPORTED;
  }
  results[0] = cublasLtMatmulHeuristicResult_t{};
  results[0].state = CUBLAS_STATUS_SUCCESS;
  results[0].wavesCount = 1.0f;
  *returned = 1;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmul(cublasLtHandle_t, cublasLtMatmulDesc_t desc, const void* alpha,
                              const void* a, cublasLtMatrixLayout_t adesc, const void* b,
                              cublasLtMatrixLayout_t bdesc, const void* beta, const void* c,
                              cublasLtMatrixLayout_t cdesc, void* d, cublasLtMatrixLayout_t ddesc,
                              const cublasLtMatmulAlgo_t*, void*, size_t, cudaStream_t) {
  const auto* dd = reinterpret_cast<LtDesc*>(desc);
  const auto* la = reinterpret_cast<LtLayout*>(adesc);
  const auto* lb = reinterpret_cast<LtLayout*>(bdesc);
  const auto* lc = reinterpret_cast<LtLayout*>(cdesc);
  const auto* ld = reinterpret_cast<LtLayout*>(ddesc);
  // op(A) is m x k, op(B) k x n, C/D m x n.
  const std::uint64_t m = dd->ta == CUBLAS_OP_N ? la->rows : la->cols;
  const std::uint64_t k = dd->ta == CUBLAS_OP_N ? la->cols : la->rows;
  const std::uint64_t kb = dd->tb == CUBLAS_OP_N ? lb->rows : lb->cols;
  const std::uint64_t n = dd->tb == CUBLAS_OP_N ? lb->cols : lb->rows;
  if (k != kb || lc->rows != m || lc->cols != n || ld->rows != m || ld->cols != n ||
      la->batch != lc->batch || lb->batch != lc->batch || ld->batch != lc->batch) {
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  const bool bias = dd->epilogue == CUBLASLT_EPILOGUE_BIAS;
  if (!bias && dd->epilogue != CUBLASLT_EPILOGUE_DEFAULT) return CUBLAS_STATUS_NOT_SUPPORTED;
  if (bias && dd->bias == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  const double al = scalar(dd->compute, alpha);
  const double be = scalar(dd->compute, beta);
  const bool round = dd->compute == CUBLAS_COMPUTE_32F_FAST_TF32;
  const std::size_t es = la->type == CUDA_R_64F ? 8 : la->type == CUDA_R_32F ? 4 : 2;
  for (std::int32_t i = 0; i < lc->batch; ++i) {
    const auto* ap = static_cast<const char*>(a) + static_cast<std::size_t>(i * la->stride) * es;
    const auto* bp = static_cast<const char*>(b) + static_cast<std::size_t>(i * lb->stride) * es;
    const auto* cp = static_cast<const char*>(c) + static_cast<std::size_t>(i * lc->stride) * es;
    auto* dp = static_cast<char*>(d) + static_cast<std::size_t>(i * ld->stride) * es;
    gemm_one(dd->ta, dd->tb, static_cast<std::int64_t>(m), static_cast<std::int64_t>(n),
             static_cast<std::int64_t>(k), al, ap, la->type, la->ld, bp, lb->type, lb->ld, be, cp,
             dp, lc->type, lc->ld, round, bias ? dd->bias : nullptr);
  }
  return CUBLAS_STATUS_SUCCESS;
}

}  // extern "C"
