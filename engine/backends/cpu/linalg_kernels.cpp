// CPU matrix products: mm, addmm, bmm, baddbmm and the symmetric product syrk, on the GEMM
// backend in use (OpenBLAS or the reference kernels). Transposed operands are passed to BLAS as
// transposes, never copied; 16-bit floats compute in float32.
#include "engine/backends/common/mat_arg.h"
#include "engine/backends/cpu/blas.h"
#include "engine/backends/cpu/float_or_double.h"
#include "engine/backends/cpu/kernels.h"
#include "engine/dispatch/op_signatures.h"

namespace tb::cpu {

using core::ScalarType;
using dispatch::DispatchKey;
namespace sig = ops::sig;

namespace {

using backends::mat_arg;
using backends::MatArg;

// 16-bit floats are multiplied in float32.
Tensor compute_copy(const Tensor& t) {
  return is_floating_point(t.dtype()) && core::element_size(t.dtype()) == 2
             ? t.to(ScalarType::Float32)
             : t;
}

Tensor finish(const Tensor& result, ScalarType dtype) {
  return result.dtype() == dtype ? result : result.to(dtype);
}

// out[m,n] (contiguous, compute dtype) = alpha * a @ b + beta * out
void gemm_into(Tensor& out, const Tensor& a, const Tensor& b, double alpha, double beta) {
  const std::int64_t m = a.size(0);
  const std::int64_t k = a.size(1);
  const std::int64_t n = b.size(1);
  if (m == 0 || n == 0) return;
  const MatArg A = mat_arg(a);
  const MatArg B = mat_arg(b);
  float_or_double(out.dtype(), "mm", [&](auto tag) {
    using scalar_t = decltype(tag);
    {
      gemm(A.trans, B.trans, m, n, k, static_cast<scalar_t>(alpha),
           static_cast<const scalar_t*>(A.t.data_ptr()), A.ld,
           static_cast<const scalar_t*>(B.t.data_ptr()), B.ld, static_cast<scalar_t>(beta),
           out.data_ptr<scalar_t>(), n);
    }
  });
}

Tensor mm_kernel(const Tensor& a0, const Tensor& b0) {
  const Tensor a = compute_copy(a0);
  const Tensor b = compute_copy(b0);
  Tensor out = Tensor::empty({a.size(0), b.size(1)}, a.dtype(), a.device());
  gemm_into(out, a, b, 1.0, 0.0);
  return finish(out, a0.dtype());
}

Tensor addmm_kernel(const Tensor& bias, const Tensor& a0, const Tensor& b0, double beta,
                    double alpha) {
  const Tensor a = compute_copy(a0);
  const Tensor b = compute_copy(b0);
  Tensor out = Tensor::empty({a.size(0), b.size(1)}, a.dtype(), a.device());
  if (beta != 0.0) out.copy_(bias);  // broadcast + cast; with beta == 0 bias is never read
  gemm_into(out, a, b, alpha, beta);
  return finish(out, a0.dtype());
}

void bgemm_into(Tensor& out, const Tensor& a, const Tensor& b, double alpha, double beta) {
  const std::int64_t batch = a.size(0);
  const std::int64_t m = a.size(1);
  const std::int64_t k = a.size(2);
  const std::int64_t n = b.size(2);
  if (batch == 0 || m == 0 || n == 0) return;
  const MatArg A = mat_arg(a);
  const MatArg B = mat_arg(b);
  float_or_double(out.dtype(), "bmm", [&](auto tag) {
    using scalar_t = decltype(tag);
    {
      gemm_batched_strided(A.trans, B.trans, m, n, k, static_cast<scalar_t>(alpha),
                           static_cast<const scalar_t*>(A.t.data_ptr()), A.ld, A.batch_stride,
                           static_cast<const scalar_t*>(B.t.data_ptr()), B.ld, B.batch_stride,
                           static_cast<scalar_t>(beta), out.data_ptr<scalar_t>(), n, m * n, batch);
    }
  });
}

Tensor bmm_kernel(const Tensor& a0, const Tensor& b0) {
  const Tensor a = compute_copy(a0);
  const Tensor b = compute_copy(b0);
  Tensor out = Tensor::empty({a.size(0), a.size(1), b.size(2)}, a.dtype(), a.device());
  bgemm_into(out, a, b, 1.0, 0.0);
  return finish(out, a0.dtype());
}

Tensor baddbmm_kernel(const Tensor& c, const Tensor& a0, const Tensor& b0, double beta,
                      double alpha) {
  const Tensor a = compute_copy(a0);
  const Tensor b = compute_copy(b0);
  Tensor out = Tensor::empty({a.size(0), a.size(1), b.size(2)}, a.dtype(), a.device());
  if (beta != 0.0) out.copy_(c);
  bgemm_into(out, a, b, alpha, beta);
  return finish(out, a0.dtype());
}

Tensor syrk_kernel(const Tensor& x0, double alpha) {
  const Tensor x = compute_copy(x0);
  const std::int64_t n = x.size(0);
  const std::int64_t k = x.size(1);
  Tensor out = Tensor::empty({n, n}, x.dtype(), x.device());
  if (n == 0) return finish(out, x0.dtype());
  const MatArg X = mat_arg(x);
  float_or_double(out.dtype(), "syrk", [&](auto tag) {
    using scalar_t = decltype(tag);
    {
      // X stored transposed (k×n row-major) is exactly syrk's trans form: Xᵀᵀ·Xᵀ.
      syrk(X.trans, n, k, static_cast<scalar_t>(alpha),
           static_cast<const scalar_t*>(X.t.data_ptr()), X.ld, scalar_t(0),
           out.data_ptr<scalar_t>(), n);
    }
  });
  return finish(out, x0.dtype());
}

}  // namespace

void register_linalg_kernels(dispatch::Dispatcher& d) {
  const auto cpu = DispatchKey::CPU;
  d.impl<sig::Binary>("mm", cpu, mm_kernel).detach();
  d.impl<sig::Addmm>("addmm", cpu, addmm_kernel).detach();
  d.impl<sig::Binary>("bmm", cpu, bmm_kernel).detach();
  d.impl<sig::Addmm>("baddbmm", cpu, baddbmm_kernel).detach();
  d.impl<sig::Syrk>("syrk", cpu, syrk_kernel).detach();
}

}  // namespace tb::cpu
