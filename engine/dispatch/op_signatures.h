// C++ signatures of the dispatcher-level operators, beside the dispatcher: shared by their
// definition and callers (ops/) and the kernels that backends register, so backends need not
// see ops/. One alias per calling convention (namespace tb::ops::sig, the ops' own names).
#pragma once

#include <cstdint>
#include <optional>
#include <tuple>
#include <vector>

#include "engine/core/tensor.h"
#include "engine/dispatch/dispatcher.h"

namespace tb::rng {
class Generator;
}

namespace tb::ops::sig {

using core::Device;
using core::IntList;
using core::Scalar;
using core::ScalarType;
using core::Tensor;

using Unary = Tensor(const Tensor&);
using Binary = Tensor(const Tensor&, const Tensor&);
using BinaryAlpha = Tensor(const Tensor&, const Tensor&, const Scalar&);
using InplaceBinaryAlpha = void(Tensor&, const Tensor&, const Scalar&);
using InplaceBinary = void(Tensor&, const Tensor&);
using Fill = void(Tensor&, const Scalar&);
using Ternary = Tensor(const Tensor&, const Tensor&, const Tensor&);
using MaskedFill = Tensor(const Tensor&, const Tensor&, const Scalar&);
using Reduce = Tensor(const Tensor&, IntList, bool);
using ReduceAll = Tensor(const Tensor&);
using ReduceDimWithIndex = std::tuple<Tensor, Tensor>(const Tensor&, std::int64_t, bool);
using Argmax = Tensor(const Tensor&, std::optional<std::int64_t>, bool);
using Norm = Tensor(const Tensor&, double, IntList, bool);
using Addmm = Tensor(const Tensor&, const Tensor&, const Tensor&, double, double);
using Syrk = Tensor(const Tensor&, double);
using Softmax = Tensor(const Tensor&, std::int64_t);
using IndexSelect = Tensor(const Tensor&, std::int64_t, const Tensor&);
using ScatterAdd = Tensor(const Tensor&, std::int64_t, const Tensor&, const Tensor&);
using RandomFill = void(Tensor&, double, double, rng::Generator*);
using BernoulliScalar = void(Tensor&, double, rng::Generator*);
using BernoulliTensor = Tensor(const Tensor&, rng::Generator*);
/// swiglu_backward(grad, gate, up) -> (grad of gate, grad of up).
using SwigluBackward = std::tuple<Tensor, Tensor>(const Tensor&, const Tensor&, const Tensor&);
using CrossEntropy = Tensor(const Tensor&, const Tensor&, std::int64_t, double);
using CrossEntropyBackward = Tensor(const Tensor&, const Tensor&, const Tensor&, std::int64_t,
                                    double);
using Randperm = Tensor(std::int64_t, ScalarType, Device, rng::Generator*);
/// _amp_foreach_non_finite_check_and_unscale_(grads, found_inf, inv_scale): in place.
using AmpUnscale = void(const std::vector<Tensor>&, Tensor&, const Tensor&);
/// _amp_update_scale_(scale, growth_tracker, found_inf, growth, backoff, interval): in place.
using AmpUpdateScale = void(Tensor&, Tensor&, const Tensor&, double, double, std::int64_t);

/// foreach_sum_sq(tensors): sum over every tensor of the sum of its squared elements, each
/// element converted to float64 before it is squared; a 0-d float64 tensor on the tensors' one
/// device. Fixed summation order (blocks of a fixed size within a tensor, then the blocks and
/// the tensors in order), so the value does not depend on the thread count.
using ForeachSumSq = Tensor(const std::vector<Tensor>&);

/// adam_step_(params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs (empty: no amsgrad),
/// step_sizes, bc2_sqrts (host float64, one per parameter), lr, beta1, beta2, eps, weight_decay,
/// maximize, decoupled): the fused multi-tensor Adam/AdamW update of torch/optim/adam.py, in
/// place.
using AdamStep = void(const std::vector<Tensor>&, const std::vector<Tensor>&,
                      const std::vector<Tensor>&, const std::vector<Tensor>&,
                      const std::vector<Tensor>&, const Tensor&, const Tensor&, double, double,
                      double, double, double, bool, bool);
/// sgd_step_(params, grads, momentum_buffers (empty: no momentum), first_steps (one entry per
/// buffer, 1 for a buffer that is new this step: it takes the gradient instead of the momentum
/// update), lr, momentum, dampening, weight_decay, nesterov, maximize): the fused multi-tensor
/// SGD update of torch/optim/sgd.py, in place.
using SgdStep = void(const std::vector<Tensor>&, const std::vector<Tensor>&,
                     const std::vector<Tensor>&, IntList, double, double, double, double, bool,
                     bool);

/// rms_norm / layer_norm(x [..., N] contiguous, weight [N] or undefined, bias [N] or undefined,
/// eps) -> (y like x, stats [rows, 2]: per row (mean, 1/sqrt(var + eps)), mean 0 for rms_norm;
/// float32, float64 for float64). Statistics in float32 (float64 for float64).
using RowNorm = std::tuple<Tensor, Tensor>(const Tensor&, const Tensor&, const Tensor&, double);
/// rms_norm_backward / layer_norm_backward(dy, x, weight, stats, with_bias) -> (dx, dweight,
/// dbias); dweight undefined without a weight, dbias undefined unless with_bias.
using RowNormBackward = std::tuple<Tensor, Tensor, Tensor>(const Tensor&, const Tensor&,
                                                           const Tensor&, const Tensor&, bool);
/// scaled_dot_product_attention(q [B,H,T,D], k [B,Hkv,S,D], v [B,Hkv,S,E], scale, causal)
/// -> (out [B,H,T,E] in q's dtype, logsumexp [B,H,T] in float32, float64 for float64 inputs);
/// H a multiple of Hkv (grouped-query), the last dimensions contiguous.
using Attention = std::tuple<Tensor, Tensor>(const Tensor&, const Tensor&, const Tensor&, double,
                                             bool);
/// scaled_dot_product_attention_backward(grad_out, q, k, v, out, logsumexp, scale, causal)
/// -> (dq, dk, dv), contiguous, in the inputs' dtype.
using AttentionBackward = std::tuple<Tensor, Tensor, Tensor>(const Tensor&, const Tensor&,
                                                             const Tensor&, const Tensor&,
                                                             const Tensor&, const Tensor&, double,
                                                             bool);
/// foreach_lerp_(selfs, ends, weight (0-d tensor, or undefined), w): selfs[i] = lerp(selfs[i],
/// ends[i], weight) in place, weight the tensor's value when defined and w otherwise; one float
/// dtype and device, contiguous tensors (the public ops::foreach_lerp_ groups and checks).
using ForeachLerp = void(const std::vector<Tensor>&, const std::vector<Tensor>&, const Tensor&,
                         double);
/// muon_momentum_(bufs, grads, outs (empty: no nesterov), momentum): Muon's momentum
/// (torch/optim/_muon.py) in place, bufs[i] = lerp(bufs[i], grads[i], 1 − momentum), then
/// outs[i] = lerp(grads[i], bufs[i], momentum) when outs is given.
using MuonMomentum = void(const std::vector<Tensor>&, const std::vector<Tensor>&,
                          const std::vector<Tensor>&, double);

// ---- convolutional networks (contiguous NCHW float32/float64 tensors; the public ops check the
// arguments, convert other float dtypes and make the tensors contiguous) ----
/// conv2d(x [N,C,H,W], weight [O, C/groups, kh, kw], bias [O] or undefined, stride [2],
/// padding [2], dilation [2], groups) -> y [N, O, OH, OW], as torch.nn.functional.conv2d.
using Conv2d = Tensor(const Tensor&, const Tensor&, const Tensor&, IntList, IntList, IntList,
                      std::int64_t);
/// conv2d_backward(dy, x, weight, stride, padding, dilation, groups, with_bias, with_input) ->
/// (dx, dweight, dbias; dbias undefined unless with_bias, dx undefined unless with_input — the
/// first layer's input needs none, as PyTorch's output_mask).
using Conv2dBackward = std::tuple<Tensor, Tensor, Tensor>(const Tensor&, const Tensor&,
                                                          const Tensor&, IntList, IntList, IntList,
                                                          std::int64_t, bool, bool);
/// max_pool2d(x [N,C,H,W], kernel [2], stride [2], padding [2]) -> (y, indices: int64 positions
/// ih·W + iw of each maximum within its H×W plane, as PyTorch's return_indices).
using MaxPool2d = std::tuple<Tensor, Tensor>(const Tensor&, IntList, IntList, IntList);
/// max_pool2d_backward(dy, x, indices) -> dx (dy summed into the positions of the maxima).
using MaxPool2dBackward = Tensor(const Tensor&, const Tensor&, const Tensor&);
/// avg_pool2d(x [N,C,H,W], kernel, stride, padding, count_include_pad) -> y.
using AvgPool2d = Tensor(const Tensor&, IntList, IntList, IntList, bool);
/// avg_pool2d_backward(dy, x, kernel, stride, padding, count_include_pad) -> dx.
using AvgPool2dBackward = Tensor(const Tensor&, const Tensor&, IntList, IntList, IntList, bool);
/// adaptive_avg_pool2d(x [N,C,H,W], output size [2]) -> y [N,C,OH,OW] (PyTorch's windows:
/// rows floor(i·H/OH) to ceil((i+1)·H/OH)).
using AdaptiveAvgPool2d = Tensor(const Tensor&, IntList);
/// batch_norm(x [N,C,...], weight [C] or undefined, bias [C] or undefined, running_mean [C] or
/// undefined, running_var [C] or undefined, training, momentum, eps) -> (y, mean [C],
/// invstd [C]): training normalises with the batch's statistics (biased variance) and updates
/// the running ones in place (unbiased variance); otherwise the running statistics normalise.
/// mean/invstd are those used (float32, float64 for float64).
using BatchNorm = std::tuple<Tensor, Tensor, Tensor>(const Tensor&, const Tensor&, const Tensor&,
                                                     const Tensor&, const Tensor&, bool, double,
                                                     double);
/// batch_norm_backward(dy, x, weight, mean, invstd, training, with_weight_bias) -> (dx, dweight,
/// dbias; the last two undefined unless with_weight_bias). `training`: the statistics were the
/// batch's (their gradient flows into dx).
using BatchNormBackward = std::tuple<Tensor, Tensor, Tensor>(const Tensor&, const Tensor&,
                                                             const Tensor&, const Tensor&,
                                                             const Tensor&, bool, bool);

}  // namespace tb::ops::sig

// X-macros listing the elementwise families (name, differentiable) so that definitions, public
// functions and kernels are generated from one list.
// Unary ops that keep an integer dtype.
#define TB_UNARY_KEEP_DTYPE_OPS(_) _(neg) _(abs) _(sign) _(square) _(relu)
// Unary ops computed in floating point.
#define TB_UNARY_FLOAT_OPS(_) \
  _(exp)                      \
  _(log)                      \
  _(log1p)                    \
  _(expm1)                    \
  _(sqrt)                     \
  _(rsqrt) _(reciprocal) _(sin) _(cos) _(tanh) _(sigmoid) _(erf) _(silu) _(gelu) _(gelu_tanh)
#define TB_BINARY_OPS(_) _(mul) _(div) _(pow) _(maximum) _(minimum)
#define TB_COMPARE_OPS(_) _(eq) _(ne) _(lt) _(le) _(gt) _(ge)

namespace tb::ops {
/// Defines every built-in operator in the dispatcher (called once by register_all).
void define_builtin_ops(dispatch::Dispatcher& d);
}  // namespace tb::ops
