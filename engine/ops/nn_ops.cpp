// Fused neural-network ops: rotary position embedding, cross-entropy (log-softmax + NLL with
// ignore_index and label smoothing) and scaled dot-product attention. Checks here; kernels in
// engine/backends/<device>/.
#include <cmath>
#include <limits>

#include "engine/dispatch/op_signatures.h"
#include "engine/ops/op_common.h"
#include "engine/ops/ops.h"

namespace tb::ops {

using core::DimVector;
using detail::cast_if_needed;
using detail::check_defined;
using detail::check_same_device;
using dispatch::Dispatcher;

namespace {

void check_rope_args(const Tensor& x, const Tensor& cos, const Tensor& sin) {
  check_defined("rope", x, "self");
  check_defined("rope", cos, "cos");
  check_defined("rope", sin, "sin");
  TB_CHECK_T(TypeError, core::is_floating_point(x.dtype()),
             "[rope] expects a floating-point tensor, got ", x.dtype());
  TB_CHECK(x.dim() >= 2, "[rope] input must have at least 2 dimensions [..., T, D], got shape ",
           DimVector(x.sizes()));
  const std::int64_t t = x.size(-2);
  const std::int64_t d = x.size(-1);
  TB_CHECK(d % 2 == 0, "[rope] the last dimension (head size) must be even, got ", d);
  for (const Tensor* c : {&cos, &sin}) {
    const char* name = c == &cos ? "cos" : "sin";
    TB_CHECK(c->dim() == 2 && c->size(0) == t && c->size(1) == d / 2, "[rope] ", name,
             " must have shape [", t, ", ", d / 2, "] for an input of shape ", DimVector(x.sizes()),
             ", got ", DimVector(c->sizes()));
    check_same_device("rope", x, *c);
  }
}

void check_cross_entropy_args(const Tensor& logits, const Tensor& target, double smoothing) {
  check_defined("cross_entropy", logits, "input");
  check_defined("cross_entropy", target, "target");
  TB_CHECK_T(TypeError, core::is_floating_point(logits.dtype()),
             "[cross_entropy] expects floating-point logits, got ", logits.dtype());
  TB_CHECK_T(TypeError, target.dtype() == core::ScalarType::Int64,
             "[cross_entropy] target must hold int64 class indices, got ", target.dtype());
  TB_CHECK(logits.dim() == 2,
           "[cross_entropy] logits must have shape [N, C] (flatten batch and time first), got ",
           DimVector(logits.sizes()));
  TB_CHECK(target.dim() == 1 && target.size(0) == logits.size(0),
           "[cross_entropy] target of shape ", DimVector(target.sizes()),
           " does not match logits of shape ", DimVector(logits.sizes()), " (expected [",
           logits.size(0), "])");
  TB_CHECK(logits.size(1) > 0, "[cross_entropy] logits have no classes (shape ",
           DimVector(logits.sizes()), ")");
  TB_CHECK(smoothing >= 0.0 && smoothing <= 1.0,
           "[cross_entropy] label_smoothing must be in [0, 1], got ", smoothing);
  check_same_device("cross_entropy", logits, target);
}

}  // namespace

Tensor rope(const Tensor& x, const Tensor& cos, const Tensor& sin) {
  static const auto op = Dispatcher::singleton().typed<sig::Ternary>("rope");
  check_rope_args(x, cos, sin);
  return op.call(x, cos, sin);
}

namespace {
void check_swiglu_args(const char* op, const Tensor& gate, const Tensor& up) {
  check_defined(op, gate, "gate");
  check_defined(op, up, "up");
  TB_CHECK_T(TypeError, core::is_floating_point(gate.dtype()) && gate.dtype() == up.dtype(), "[",
             op, "] gate and up must have one floating-point dtype, got ", gate.dtype(), " and ",
             up.dtype());
  TB_CHECK(DimVector(gate.sizes()) == DimVector(up.sizes()), "[", op,
           "] gate and up must have one shape, got ", DimVector(gate.sizes()), " and ",
           DimVector(up.sizes()));
  check_same_device(op, gate, up);
}
}  // namespace

Tensor swiglu(const Tensor& gate, const Tensor& up) {
  static const auto op = Dispatcher::singleton().typed<sig::Binary>("swiglu");
  check_swiglu_args("swiglu", gate, up);
  return op.call(gate, up);
}

std::tuple<Tensor, Tensor> swiglu_backward(const Tensor& grad, const Tensor& gate,
                                           const Tensor& up) {
  static const auto op = Dispatcher::singleton().typed<sig::SwigluBackward>("swiglu_backward");
  check_swiglu_args("swiglu_backward", gate, up);
  check_defined("swiglu_backward", grad, "grad");
  TB_CHECK(DimVector(grad.sizes()) == DimVector(gate.sizes()),
           "[swiglu_backward] grad must have gate's shape ", DimVector(gate.sizes()), ", got ",
           DimVector(grad.sizes()));
  check_same_device("swiglu_backward", grad, gate);
  return op.call(cast_if_needed(grad, gate.dtype()), gate, up);
}

Tensor cross_entropy(const Tensor& logits, const Tensor& target, std::int64_t ignore_index,
                     double label_smoothing) {
  static const auto op = Dispatcher::singleton().typed<sig::CrossEntropy>("cross_entropy");
  check_cross_entropy_args(logits, target, label_smoothing);
  return op.call(logits, target, ignore_index, label_smoothing);
}

Tensor cross_entropy_backward(const Tensor& grad, const Tensor& logits, const Tensor& target,
                              std::int64_t ignore_index, double label_smoothing) {
  static const auto op =
      Dispatcher::singleton().typed<sig::CrossEntropyBackward>("cross_entropy_backward");
  check_cross_entropy_args(logits, target, label_smoothing);
  check_defined("cross_entropy_backward", grad, "grad");
  TB_CHECK(grad.numel() == 1, "[cross_entropy_backward] grad must have one element, got shape ",
           DimVector(grad.sizes()));
  return op.call(grad, logits, target, ignore_index, label_smoothing);
}

// ---- RMSNorm / LayerNorm ------------------------------------------------------------------------

namespace {

void check_norm_args(const char* op, const Tensor& x, const Tensor& weight, const Tensor& bias,
                     double eps) {
  check_defined(op, x, "input");
  TB_CHECK_T(TypeError, core::is_floating_point(x.dtype()), "[", op,
             "] expects a floating-point input, got ", x.dtype());
  TB_CHECK(x.dim() >= 1, "[", op,
           "] expects an input with at least one dimension, got a 0-d tensor");
  TB_CHECK(std::isfinite(eps) && eps >= 0.0, "[", op, "] eps must be finite and >= 0, got ", eps);
  const std::int64_t n = x.size(-1);
  for (const auto& [t, name] : {std::pair{&weight, "weight"}, {&bias, "bias"}}) {
    if (!t->defined()) continue;
    TB_CHECK_T(TypeError, core::is_floating_point(t->dtype()), "[", op, "] ", name,
               " must be floating point, got ", t->dtype());
    TB_CHECK(t->dim() == 1 && t->size(0) == n, "[", op, "] ", name, " must have shape [", n,
             "] (the input's last dimension), got ", DimVector(t->sizes()));
    check_same_device(op, x, *t);
  }
}

// The norms from ordinary ops (devices without the fused kernels).
Tensor norm_composed(bool rms, const Tensor& x, const Tensor& weight, const Tensor& bias,
                     double eps) {
  const std::int64_t last[1] = {-1};
  Tensor y;
  if (rms) {
    y = mul(x, rsqrt(add(mean(square(x), IntList(last, 1), true), eps)));
  } else {
    const Tensor centered = sub(x, mean(x, IntList(last, 1), true));
    y = mul(centered, rsqrt(add(mean(square(centered), IntList(last, 1), true), eps)));
  }
  if (weight.defined()) y = mul(y, weight);
  if (bias.defined()) y = add(y, bias);
  return y;
}

Tensor row_norm(bool rms, const Tensor& x, const Tensor& weight, const Tensor& bias, double eps) {
  const char* name = rms ? "rms_norm" : "layer_norm";
  check_norm_args(name, x, weight, bias, eps);
  if (!detail::device_has_kernel(name, x.device())) return norm_composed(rms, x, weight, bias, eps);
  static const auto rms_op = Dispatcher::singleton().typed<sig::RowNorm>("rms_norm");
  static const auto ln_op = Dispatcher::singleton().typed<sig::RowNorm>("layer_norm");
  ScalarType dt = x.dtype();
  for (const Tensor* t : {&weight, &bias}) {
    if (t->defined()) dt = core::promote_types(dt, t->dtype());
  }
  const Tensor w = weight.defined() ? cast_if_needed(weight, dt).contiguous() : Tensor();
  const Tensor b = bias.defined() ? cast_if_needed(bias, dt).contiguous() : Tensor();
  const Tensor xc = cast_if_needed(x, dt).contiguous();
  return std::get<0>(rms ? rms_op.call(xc, w, b, eps) : ln_op.call(xc, w, b, eps));
}

}  // namespace

Tensor rms_norm(const Tensor& x, const Tensor& weight, double eps) {
  return row_norm(true, x, weight, Tensor(), eps);
}

Tensor layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps) {
  return row_norm(false, x, weight, bias, eps);
}

std::tuple<Tensor, Tensor, Tensor> row_norm_backward(bool rms, const Tensor& dy, const Tensor& x,
                                                     const Tensor& weight, const Tensor& stats,
                                                     bool with_bias) {
  const char* name = rms ? "rms_norm_backward" : "layer_norm_backward";
  static const auto rms_op =
      Dispatcher::singleton().typed<sig::RowNormBackward>("rms_norm_backward");
  static const auto ln_op =
      Dispatcher::singleton().typed<sig::RowNormBackward>("layer_norm_backward");
  check_norm_args(name, x, weight, Tensor(), 0.0);
  check_defined(name, dy, "grad_output");
  check_defined(name, stats, "stats");
  TB_CHECK(DimVector(dy.sizes()) == DimVector(x.sizes()), "[", name,
           "] grad_output must have the input's shape ", DimVector(x.sizes()), ", got ",
           DimVector(dy.sizes()));
  const std::int64_t n = x.size(-1);
  const std::int64_t rows = n == 0 ? 0 : x.numel() / n;
  TB_CHECK(stats.dim() == 2 && stats.size(0) == rows && stats.size(1) == 2, "[", name,
           "] stats must have shape [", rows, ", 2], got ", DimVector(stats.sizes()));
  const Tensor xc = x.contiguous();
  const Tensor w = weight.defined() ? cast_if_needed(weight, x.dtype()).contiguous() : Tensor();
  const Tensor g = cast_if_needed(dy, x.dtype()).contiguous();
  return rms ? rms_op.call(g, xc, w, stats.contiguous(), with_bias)
             : ln_op.call(g, xc, w, stats.contiguous(), with_bias);
}

// ---- scaled dot-product attention ---------------------------------------------------------------

namespace {

constexpr const char* kAttention = "scaled_dot_product_attention";
// The fused kernels keep a query row and a tile of key/value rows on chip: head sizes up to this.
constexpr std::int64_t kFusedMaxHeadSize = 128;

void check_attention_args(const char* op, const Tensor& q, const Tensor& k, const Tensor& v) {
  check_defined(op, q, "query");
  check_defined(op, k, "key");
  check_defined(op, v, "value");
  for (const auto& [t, name] : {std::pair{&q, "query"}, {&k, "key"}, {&v, "value"}}) {
    TB_CHECK_T(TypeError, core::is_floating_point(t->dtype()), "[", op,
               "] expects floating-point tensors, got ", name, " of dtype ", t->dtype());
  }
  TB_CHECK(q.dim() == 4 && k.dim() == 4 && v.dim() == 4, "[", op,
           "] query, key and value must be 4-D [batch, heads, length, head size], got shapes ",
           DimVector(q.sizes()), ", ", DimVector(k.sizes()), " and ", DimVector(v.sizes()));
  check_same_device(op, q, k);
  check_same_device(op, q, v);
  TB_CHECK(k.size(0) == q.size(0) && v.size(0) == q.size(0), "[", op,
           "] query, key and value must have one batch size, got ", q.size(0), ", ", k.size(0),
           " and ", v.size(0));
  TB_CHECK(v.size(1) == k.size(1) && v.size(2) == k.size(2), "[", op,
           "] key and value must have the same heads and length, got shapes ", DimVector(k.sizes()),
           " and ", DimVector(v.sizes()));
  TB_CHECK(k.size(3) == q.size(3), "[", op, "] query and key must have one head size, got ",
           q.size(3), " and ", k.size(3));
  TB_CHECK(k.size(1) > 0 && q.size(1) % k.size(1) == 0, "[", op, "] the query heads (", q.size(1),
           ") must be a multiple of the key/value heads (", k.size(1), ")");
}

// The kernels read rows with unit stride; other strides (batch, head, position) are free.
Tensor unit_last_stride(const Tensor& t) {
  return t.size(3) <= 1 || t.stride(3) == 1 ? t : t.contiguous();
}

// softmax(q·kᵀ·scale + causal mask)·v from ordinary ops (devices without the fused kernel, head
// sizes over kFusedMaxHeadSize).
Tensor attention_composed(const Tensor& q, Tensor k, Tensor v, bool causal, double scale) {
  const std::int64_t b = q.size(0);
  const std::int64_t h = q.size(1);
  const std::int64_t hkv = k.size(1);
  const std::int64_t s = k.size(2);
  if (hkv != h) {
    const std::int64_t rep = h / hkv;
    k = k.unsqueeze(2).expand({b, hkv, rep, s, k.size(3)}).reshape({b, h, s, k.size(3)});
    v = v.unsqueeze(2).expand({b, hkv, rep, s, v.size(3)}).reshape({b, h, s, v.size(3)});
  }
  Tensor scores = mul(matmul(q, k.transpose(-2, -1)), scale);  // [B, H, T, S]
  if (causal) {
    const Tensor qpos = arange(q.size(2), ScalarType::Int64, q.device());
    const Tensor kpos = arange(s, ScalarType::Int64, q.device());
    const Tensor future = gt(kpos.unsqueeze(0), qpos.unsqueeze(1));  // [T, S]: j > i
    scores = masked_fill(scores, future, -std::numeric_limits<double>::infinity());
  }
  return matmul(softmax(scores, -1), v);
}

}  // namespace

Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v, bool causal,
                                    std::optional<double> scale) {
  check_attention_args(kAttention, q, k, v);
  const double sc = scale.value_or(1.0 / std::sqrt(static_cast<double>(q.size(3))));
  TB_CHECK(std::isfinite(sc), "[", kAttention, "] scale must be finite, got ", sc);
  const bool fused = q.size(3) > 0 && v.size(3) > 0 && q.size(3) <= kFusedMaxHeadSize &&
                     v.size(3) <= kFusedMaxHeadSize &&
                     detail::device_has_kernel(kAttention, q.device());
  if (!fused) return attention_composed(q, k, v, causal, sc);
  return std::get<0>(scaled_dot_product_attention_forward(q, k, v, sc, causal));
}

std::tuple<Tensor, Tensor> scaled_dot_product_attention_forward(const Tensor& q, const Tensor& k,
                                                                const Tensor& v, double scale,
                                                                bool causal) {
  static const auto op = Dispatcher::singleton().typed<sig::Attention>(kAttention);
  check_attention_args(kAttention, q, k, v);
  // Mixed dtypes promote, as in matmul (under autocast the dispatcher then casts to bf16/fp16).
  const ScalarType dt = core::promote_types(core::promote_types(q.dtype(), k.dtype()), v.dtype());
  return op.call(unit_last_stride(cast_if_needed(q, dt)), unit_last_stride(cast_if_needed(k, dt)),
                 unit_last_stride(cast_if_needed(v, dt)), scale, causal);
}

std::tuple<Tensor, Tensor, Tensor> scaled_dot_product_attention_backward(
    const Tensor& grad_out, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
    const Tensor& lse, double scale, bool causal) {
  constexpr const char* name = "scaled_dot_product_attention_backward";
  static const auto op = Dispatcher::singleton().typed<sig::AttentionBackward>(name);
  check_attention_args(name, q, k, v);
  check_defined(name, grad_out, "grad_out");
  check_defined(name, out, "out");
  check_defined(name, lse, "logsumexp");
  const DimVector out_shape{q.size(0), q.size(1), q.size(2), v.size(3)};
  TB_CHECK(DimVector(grad_out.sizes()) == out_shape && DimVector(out.sizes()) == out_shape, "[",
           name, "] grad_out and out must have shape ", out_shape, ", got ",
           DimVector(grad_out.sizes()), " and ", DimVector(out.sizes()));
  TB_CHECK(lse.dim() == 3 && lse.size(0) == q.size(0) && lse.size(1) == q.size(1) &&
               lse.size(2) == q.size(2),
           "[", name, "] logsumexp must have shape [", q.size(0), ", ", q.size(1), ", ", q.size(2),
           "], got ", DimVector(lse.sizes()));
  const ScalarType dt = core::promote_types(core::promote_types(q.dtype(), k.dtype()), v.dtype());
  return op.call(unit_last_stride(cast_if_needed(grad_out, dt)),
                 unit_last_stride(cast_if_needed(q, dt)), unit_last_stride(cast_if_needed(k, dt)),
                 unit_last_stride(cast_if_needed(v, dt)), unit_last_stride(cast_if_needed(out, dt)),
                 lse.contiguous(), scale, causal);
}

}  // namespace tb::ops
