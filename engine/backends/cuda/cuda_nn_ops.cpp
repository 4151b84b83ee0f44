// The CUDA backend's fused nn kernels (host side): RMSNorm/LayerNorm forward and backward and
// scaled dot-product attention forward and backward — argument handling, outputs, workspaces and
// the launches of cuda_norm.cu and cuda_attention.cu, registered at the CUDA dispatch key.
#include <algorithm>
#include <tuple>

#include "engine/backends/cuda/cuda_internal.h"
#include "engine/backends/cuda/cuda_kernels.h"
#include "engine/core/error.h"
#include "engine/core/tensor.h"
#include "engine/dispatch/op_signatures.h"

namespace tb::backends::cuda_detail {

namespace {

using core::Device;
using core::ScalarType;
using core::Tensor;
namespace kern = tb::cuda;

// ---- RMSNorm / LayerNorm ------------------------------------------------------------------------

ScalarType norm_stat_dtype(ScalarType dt) {
  return dt == ScalarType::Float64 ? ScalarType::Float64 : ScalarType::Float32;
}

const void* ptr_or_null(const Tensor& t) {
  return t.defined() ? t.data_ptr() : nullptr;
}

template <bool Rms>
std::tuple<Tensor, Tensor> row_norm_kernel(const Tensor& x_in, const Tensor& weight,
                                           const Tensor& bias, double eps) {
  const Tensor x = x_in.contiguous();
  const std::int64_t n = x.size(-1);
  const std::int64_t rows = n == 0 ? 0 : x.numel() / n;
  Tensor y = Tensor::empty(x.sizes(), x.dtype(), x.device());
  Tensor stats = Tensor::empty({rows, 2}, norm_stat_dtype(x.dtype()), x.device());
  DeviceGuard guard(x.device().index());
  check_launch(
      kern::launch_row_norm(static_cast<int>(x.dtype()), Rms, x.data_ptr(), ptr_or_null(weight),
                            ptr_or_null(bias), y.data_ptr(), stats.data_ptr(), rows, n, eps),
      Rms ? "rms_norm" : "layer_norm");
  return {y, stats};
}

template <bool Rms>
std::tuple<Tensor, Tensor, Tensor> row_norm_backward_kernel(const Tensor& dy_in, const Tensor& x_in,
                                                            const Tensor& weight,
                                                            const Tensor& stats_in,
                                                            bool with_bias) {
  const Tensor x = x_in.contiguous();
  const Tensor dy = dy_in.contiguous();
  const std::int64_t n = x.size(-1);
  const std::int64_t rows = n == 0 ? 0 : x.numel() / n;
  const ScalarType st = norm_stat_dtype(x.dtype());
  const Tensor stats = stats_in.to(st).contiguous();
  Tensor dx = Tensor::empty(x.sizes(), x.dtype(), x.device());
  Tensor dw = weight.defined() ? Tensor::empty({n}, x.dtype(), x.device()) : Tensor();
  Tensor db = with_bias ? Tensor::empty({n}, x.dtype(), x.device()) : Tensor();
  const std::int64_t chunks = kern::norm_partial_chunks(rows);
  Tensor pw = dw.defined() ? Tensor::empty({chunks, n}, st, x.device()) : Tensor();
  Tensor pb = db.defined() ? Tensor::empty({chunks, n}, st, x.device()) : Tensor();
  auto ptr = [](Tensor& t) { return t.defined() ? t.data_ptr() : nullptr; };
  DeviceGuard guard(x.device().index());
  check_launch(
      kern::launch_row_norm_backward(static_cast<int>(x.dtype()), Rms, dy.data_ptr(), x.data_ptr(),
                                     ptr_or_null(weight), stats.data_ptr(), dx.data_ptr(), ptr(dw),
                                     ptr(db), ptr(pw), ptr(pb), rows, n),
      Rms ? "rms_norm_backward" : "layer_norm_backward");
  return {dx, dw, db};
}

// ---- fused attention ----------------------------------------------------------------------------

// A [B, heads, length, width] operand for the attention kernels (unit stride in width).
kern::AttnOperand attn_operand(const Tensor& t) {
  kern::AttnOperand o;
  o.p = t.data_ptr();
  o.sb = t.stride(0);
  o.sh = t.stride(1);
  o.sl = t.stride(2);
  return o;
}

Tensor unit_width(const Tensor& t) {
  return t.size(3) <= 1 || t.stride(3) == 1 ? t : t.contiguous();
}

kern::AttentionArgs attention_args(const Tensor& q, const Tensor& k, const Tensor& v, double scale,
                                   bool causal) {
  kern::AttentionArgs a;
  a.st = static_cast<int>(q.dtype());
  a.b = q.size(0);
  a.h = q.size(1);
  a.t = q.size(2);
  a.d = q.size(3);
  a.hkv = k.size(1);
  a.s = k.size(2);
  a.e = v.size(3);
  a.q = attn_operand(q);
  a.k = attn_operand(k);
  a.v = attn_operand(v);
  a.scale = scale;
  a.causal = causal;
  TB_CHECK_T(TypeError, k.dtype() == q.dtype() && v.dtype() == q.dtype(),
             "[scaled_dot_product_attention] the CUDA kernel takes query, key and value of one "
             "dtype, got ",
             q.dtype(), ", ", k.dtype(), " and ", v.dtype());
  TB_CHECK(a.b * a.h * ((a.t + 3) / 4) < (std::int64_t{1} << 31) &&
               a.b * a.hkv * ((a.s + 3) / 4) < (std::int64_t{1} << 31),
           "[scaled_dot_product_attention] too many rows for one launch: batch ", a.b, " x heads ",
           a.h, " x length ", std::max(a.t, a.s));
  TB_CHECK(std::max(a.d, a.e) <= kern::kAttentionMaxHead,
           "[scaled_dot_product_attention] the CUDA kernel takes head sizes up to ",
           kern::kAttentionMaxHead, ", got ", std::max(a.d, a.e));
  return a;
}

ScalarType attention_stat_dtype(ScalarType dt) {
  return dt == ScalarType::Float64 ? ScalarType::Float64 : ScalarType::Float32;
}

std::tuple<Tensor, Tensor> attention_kernel(const Tensor& q_in, const Tensor& k_in,
                                            const Tensor& v_in, double scale, bool causal) {
  const Tensor q = unit_width(q_in);
  const Tensor k = unit_width(k_in);
  const Tensor v = unit_width(v_in);
  const kern::AttentionArgs a = attention_args(q, k, v, scale, causal);
  Tensor out = Tensor::empty({a.b, a.h, a.t, a.e}, q.dtype(), q.device());
  Tensor lse = Tensor::empty({a.b, a.h, a.t}, attention_stat_dtype(q.dtype()), q.device());
  DeviceGuard guard(q.device().index());
  check_launch(kern::launch_attention_forward(a, out.data_ptr(), lse.data_ptr()),
               "scaled_dot_product_attention");
  return {out, lse};
}

std::tuple<Tensor, Tensor, Tensor> attention_backward_kernel(const Tensor& g_in, const Tensor& q_in,
                                                             const Tensor& k_in, const Tensor& v_in,
                                                             const Tensor& out_in,
                                                             const Tensor& lse_in, double scale,
                                                             bool causal) {
  const Tensor q = unit_width(q_in);
  const Tensor k = unit_width(k_in);
  const Tensor v = unit_width(v_in);
  const Tensor g = unit_width(g_in);
  const Tensor out = unit_width(out_in);
  const kern::AttentionArgs a = attention_args(q, k, v, scale, causal);
  TB_CHECK_T(TypeError, g.dtype() == q.dtype() && out.dtype() == q.dtype(),
             "[scaled_dot_product_attention_backward] grad_out and out must have the inputs' "
             "dtype ",
             q.dtype(), ", got ", g.dtype(), " and ", out.dtype());
  const ScalarType st = attention_stat_dtype(q.dtype());
  const Tensor lse = lse_in.to(st).contiguous();
  Tensor dvec = Tensor::empty({a.b, a.h, a.t}, st, q.device());
  Tensor dq = Tensor::empty({a.b, a.h, a.t, a.d}, q.dtype(), q.device());
  Tensor dk = Tensor::empty({a.b, a.hkv, a.s, a.d}, q.dtype(), q.device());
  Tensor dv = Tensor::empty({a.b, a.hkv, a.s, a.e}, q.dtype(), q.device());
  DeviceGuard guard(q.device().index());
  check_launch(
      kern::launch_attention_backward(a, attn_operand(g), attn_operand(out), lse.data_ptr(),
                                      dvec.data_ptr(), dq.data_ptr(), dk.data_ptr(), dv.data_ptr()),
      "scaled_dot_product_attention_backward");
  return {dq, dk, dv};
}

}  // namespace

void register_cuda_nn_ops(dispatch::Dispatcher& d) {
  namespace sig = ops::sig;
  const auto key = dispatch::DispatchKey::CUDA;
  d.impl<sig::Attention>("scaled_dot_product_attention", key, attention_kernel).detach();
  d.impl<sig::RowNorm>("rms_norm", key, row_norm_kernel<true>).detach();
  d.impl<sig::RowNorm>("layer_norm", key, row_norm_kernel<false>).detach();
  d.impl<sig::RowNormBackward>("rms_norm_backward", key, row_norm_backward_kernel<true>).detach();
  d.impl<sig::RowNormBackward>("layer_norm_backward", key, row_norm_backward_kernel<false>)
      .detach();
  d.impl<sig::AttentionBackward>("scaled_dot_product_attention_backward", key,
                                 attention_backward_kernel)
      .detach();
}

}  // namespace tb::backends::cuda_detail
