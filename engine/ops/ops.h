// The user-facing tensor operations. Each checks its arguments (shapes, dtypes, devices,
// indices) with messages naming the op and the values, promotes dtypes, and calls the
// dispatcher; the kernels only compute.
#pragma once

#include <cstdint>
#include <optional>
#include <tuple>
#include <vector>

#include "engine/core/tensor.h"

namespace tb::rng {
class Generator;
}

namespace tb::ops {

using core::Device;
using core::IntList;
using core::Scalar;
using core::ScalarType;
using core::Tensor;

// ---- factories ----------------------------------------------------------------------------------
Tensor empty(IntList sizes, ScalarType dtype = ScalarType::Float32, Device device = Device());
Tensor zeros(IntList sizes, ScalarType dtype = ScalarType::Float32, Device device = Device());
Tensor ones(IntList sizes, ScalarType dtype = ScalarType::Float32, Device device = Device());
Tensor full(IntList sizes, const Scalar& value, ScalarType dtype = ScalarType::Float32,
            Device device = Device());
Tensor zeros_like(const Tensor& t);
Tensor empty_like(const Tensor& t);
/// 0, 1, ..., n-1.
Tensor arange(std::int64_t n, ScalarType dtype = ScalarType::Int64, Device device = Device());
/// A 0-d tensor holding `value`.
Tensor scalar_tensor(const Scalar& value, ScalarType dtype, Device device = Device());

// ---- random (every op draws from `gen`, or the device's default generator when null) -----------
Tensor rand(IntList sizes, rng::Generator* gen = nullptr, ScalarType dtype = ScalarType::Float32,
            Device device = Device());
Tensor randn(IntList sizes, rng::Generator* gen = nullptr, ScalarType dtype = ScalarType::Float32,
             Device device = Device());
Tensor randperm(std::int64_t n, rng::Generator* gen = nullptr, ScalarType dtype = ScalarType::Int64,
                Device device = Device());
Tensor& uniform_(Tensor& t, double from = 0.0, double to = 1.0, rng::Generator* gen = nullptr);
Tensor& normal_(Tensor& t, double mean = 0.0, double std = 1.0, rng::Generator* gen = nullptr);
Tensor& bernoulli_(Tensor& t, double p, rng::Generator* gen = nullptr);
/// 1 with probability p (elementwise), else 0; same shape and dtype as p.
Tensor bernoulli(const Tensor& p, rng::Generator* gen = nullptr);

// ---- elementwise (broadcasting, dtype promotion) -----------------------------------------------
Tensor add(const Tensor& a, const Tensor& b, const Scalar& alpha = 1);
Tensor sub(const Tensor& a, const Tensor& b, const Scalar& alpha = 1);
Tensor mul(const Tensor& a, const Tensor& b);
/// True division: integer inputs give float32.
Tensor div(const Tensor& a, const Tensor& b);
Tensor pow(const Tensor& a, const Tensor& b);
Tensor maximum(const Tensor& a, const Tensor& b);
Tensor minimum(const Tensor& a, const Tensor& b);
Tensor add(const Tensor& a, const Scalar& b);
Tensor sub(const Tensor& a, const Scalar& b);
Tensor mul(const Tensor& a, const Scalar& b);
Tensor div(const Tensor& a, const Scalar& b);
Tensor pow(const Tensor& a, const Scalar& b);

Tensor eq(const Tensor& a, const Tensor& b);
Tensor ne(const Tensor& a, const Tensor& b);
Tensor lt(const Tensor& a, const Tensor& b);
Tensor le(const Tensor& a, const Tensor& b);
Tensor gt(const Tensor& a, const Tensor& b);
Tensor ge(const Tensor& a, const Tensor& b);

Tensor neg(const Tensor& a);
Tensor abs(const Tensor& a);
Tensor sign(const Tensor& a);
Tensor square(const Tensor& a);
Tensor relu(const Tensor& a);
// These compute in floating point (integer inputs give float32).
Tensor exp(const Tensor& a);
Tensor log(const Tensor& a);
Tensor log1p(const Tensor& a);
Tensor expm1(const Tensor& a);
Tensor sqrt(const Tensor& a);
Tensor rsqrt(const Tensor& a);
Tensor reciprocal(const Tensor& a);
Tensor sin(const Tensor& a);
Tensor cos(const Tensor& a);
Tensor tanh(const Tensor& a);
Tensor sigmoid(const Tensor& a);
Tensor erf(const Tensor& a);
Tensor silu(const Tensor& a);
/// GELU with the exact erf form.
Tensor gelu(const Tensor& a);
/// GELU with the tanh approximation, 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))): GPT-2's
/// activation (torch.nn.functional.gelu(x, approximate="tanh")).
Tensor gelu_tanh(const Tensor& a);
/// The gradient of gelu_tanh at x times `grad`, in one pass: grad·(σ + 2k·x·σ·(1 − σ)·(1 +
/// 3·0.044715·x²)) with k = √(2/π), σ = sigmoid(2k·(x + 0.044715·x³)) — d/dx of
/// 0.5·x·(1 + tanh u) rewritten with 0.5·(1 + tanh u) = σ(2u). Floating point (integers are
/// promoted), broadcasting as mul. Not itself differentiable (the backward of gelu_tanh).
Tensor gelu_tanh_backward(const Tensor& grad, const Tensor& x);
/// relu's gradient in one pass: 0 where x <= 0, else grad (PyTorch's threshold_backward at 0,
/// so a NaN input passes grad).
Tensor relu_backward(const Tensor& grad, const Tensor& x);
/// silu's gradient in one pass: grad·σ(x)·(1 + x·(1 − σ(x))) (PyTorch's silu_backward).
/// Floating point (integers are promoted), broadcasting as mul. Not itself differentiable.
Tensor silu_backward(const Tensor& grad, const Tensor& x);

/// In place: a += alpha * b (b broadcast to a's shape; result cast to a's dtype).
Tensor& add_(Tensor& a, const Tensor& b, const Scalar& alpha = 1);
Tensor& mul_(Tensor& a, const Tensor& b);
Tensor& mul_(Tensor& a, const Scalar& b);

/// cond ? a : b, broadcasting all three; cond must be bool.
Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b);
/// A copy of t with value where mask (bool, broadcastable to t) is true.
Tensor masked_fill(const Tensor& t, const Tensor& mask, const Scalar& value);

// ---- reductions (dims empty = all dims) ---------------------------------------------------------
Tensor sum(const Tensor& t, IntList dims = {}, bool keepdim = false);
Tensor mean(const Tensor& t, IntList dims = {}, bool keepdim = false);
/// Max over all elements (NaN propagates).
Tensor max(const Tensor& t);
Tensor min(const Tensor& t);
/// (values, indices) of the max along dim; the first index wins ties.
std::tuple<Tensor, Tensor> max(const Tensor& t, std::int64_t dim, bool keepdim = false);
std::tuple<Tensor, Tensor> min(const Tensor& t, std::int64_t dim, bool keepdim = false);
/// Index of the max (over the flattened tensor when dim is empty).
Tensor argmax(const Tensor& t, std::optional<std::int64_t> dim = {}, bool keepdim = false);
/// p-norm (p = 1, 2, inf, or any p > 0) over dims.
Tensor norm(const Tensor& t, double p = 2.0, IntList dims = {}, bool keepdim = false);

// ---- linear algebra -----------------------------------------------------------------------------
/// NumPy matmul semantics: 1-D/2-D, and batched with broadcast batch dims.
Tensor matmul(const Tensor& a, const Tensor& b);
/// [m,k] x [k,n] -> [m,n].
Tensor mm(const Tensor& a, const Tensor& b);
/// beta * bias + alpha * (a @ b); bias broadcast to [m, n].
Tensor addmm(const Tensor& bias, const Tensor& a, const Tensor& b, double beta = 1.0,
             double alpha = 1.0);
/// [B,m,k] x [B,k,n] -> [B,m,n].
Tensor bmm(const Tensor& a, const Tensor& b);
/// beta * c + alpha * (a @ b), batched.
Tensor baddbmm(const Tensor& c, const Tensor& a, const Tensor& b, double beta = 1.0,
               double alpha = 1.0);
/// The symmetric product X·Xᵀ of a 2-D X ([n,k] -> [n,n]) via SYRK: about half a GEMM's work.
Tensor syrk(const Tensor& x, double alpha = 1.0);

// ---- softmax ------------------------------------------------------------------------------------
Tensor softmax(const Tensor& t, std::int64_t dim);
Tensor log_softmax(const Tensor& t, std::int64_t dim);

// ---- indexing -----------------------------------------------------------------------------------
/// Rows of t along dim picked by a 1-D int64/int32 index.
Tensor index_select(const Tensor& t, std::int64_t dim, const Tensor& index);
/// out[i][j] = t[index[i][j]][j] (dim 0), etc.; index has t's rank.
Tensor gather(const Tensor& t, std::int64_t dim, const Tensor& index);
/// A copy of t with src added at index along dim (duplicates accumulate).
Tensor scatter_add(const Tensor& t, std::int64_t dim, const Tensor& index, const Tensor& src);

// ---- fused neural-network ops ------------------------------------------------------------------
/// Rotary position embedding, rotate-half form (as in Llama/Qwen): x is [..., T, D] with D even,
/// cos and sin are [T, D/2]. With x1 = x[..., :D/2], x2 = x[..., D/2:]:
/// out = [x1·cos − x2·sin, x2·cos + x1·sin]. Differentiable in x (its gradient is rope(g, cos,
/// −sin)); cos and sin are constants.
Tensor rope(const Tensor& x, const Tensor& cos, const Tensor& sin);

/// SwiGLU's gate, silu(gate)·up (Shazeer, "GLU Variants Improve Transformer", 2020), in one pass:
/// the same bits as mul(silu(gate), up) for float32/float64 (16-bit types round once, at the
/// end). gate and up have one shape and one floating dtype. Differentiable in both.
Tensor swiglu(const Tensor& gate, const Tensor& up);
/// swiglu's gradients in one pass: (silu_backward(grad·up, gate), grad·silu(gate)), the same
/// bits as the composite's for float32/float64. Not itself differentiable.
std::tuple<Tensor, Tensor> swiglu_backward(const Tensor& grad, const Tensor& gate,
                                           const Tensor& up);
/// Mean cross-entropy of logits [N, C] against int64 class indices [N], fused (stable
/// log-softmax + NLL, accumulated in double). Rows whose target equals ignore_index are left out
/// of the sum and of the count; with every row ignored the result is NaN (as in PyTorch). With
/// label smoothing ε the target distribution is (1 − ε)·one_hot + ε/C. Returns a 0-d tensor.
Tensor cross_entropy(const Tensor& logits, const Tensor& target, std::int64_t ignore_index = -100,
                     double label_smoothing = 0.0);
/// Gradient of cross_entropy w.r.t. the logits, scaled by the 1-element `grad`.
Tensor cross_entropy_backward(const Tensor& grad, const Tensor& logits, const Tensor& target,
                              std::int64_t ignore_index, double label_smoothing);
/// RMSNorm over the last dimension: x / sqrt(mean(x², -1) + eps) · weight (weight [N] or
/// undefined). LayerNorm: (x − mean) / sqrt(var + eps) · weight + bias (biased variance; weight
/// and bias [N] or undefined). Fused where the device has the kernel (CPU, CUDA; openreg through
/// the CPU): one pass per row, statistics in float32 (float64 for float64); differentiable in x,
/// weight and bias (the weight/bias gradients summed over rows in a fixed order).
Tensor rms_norm(const Tensor& x, const Tensor& weight, double eps);
Tensor layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps);
/// The norms' gradients (dx, dweight, dbias) given dy and the forward's per-row statistics
/// [rows, 2] (mean, rstd); `rms` picks RMSNorm (mean unused).
std::tuple<Tensor, Tensor, Tensor> row_norm_backward(bool rms, const Tensor& dy, const Tensor& x,
                                                     const Tensor& weight, const Tensor& stats,
                                                     bool with_bias);
/// softmax(q·kᵀ·scale + mask)·v for q [B, H, T, D], k [B, Hkv, S, D], v [B, Hkv, S, E], with H a
/// multiple of Hkv (grouped-query attention: query head h reads key/value head h / (H / Hkv)).
/// `causal`: query i attends to keys j <= i (PyTorch's is_causal, top-left aligned). `scale`
/// defaults to 1/sqrt(D). Returns [B, H, T, E]; differentiable in q, k and v. Fused where the
/// device has the kernel (CPU, CUDA; openreg through the CPU) and D, E <= 128: one pass, no
/// [T, S] score matrix in memory, softmax in float32 (float64 for float64), the row's
/// log-sum-exp kept for the backward pass; composed from matmul/softmax otherwise.
Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                                    bool causal = true, std::optional<double> scale = std::nullopt);
/// The fused kernel's forward: (out, logsumexp [B, H, T]); arguments as above, checked.
std::tuple<Tensor, Tensor> scaled_dot_product_attention_forward(const Tensor& q, const Tensor& k,
                                                                const Tensor& v, double scale,
                                                                bool causal);
/// Gradients (dq, dk, dv) of the fused attention given the output's gradient and the forward's
/// out and logsumexp.
std::tuple<Tensor, Tensor, Tensor> scaled_dot_product_attention_backward(
    const Tensor& grad_out, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
    const Tensor& lse, double scale, bool causal);

// ---- convolutional networks (PyTorch's torch.nn.functional conventions) -----------------------
/// 2-D cross-correlation of x [N, C, H, W] (or unbatched [C, H, W]) with weight
/// [O, C/groups, kh, kw], plus bias [O] when defined: y [N, O, OH, OW] with
/// OH = (H + 2·padding − dilation·(kh − 1) − 1) / stride + 1. stride, padding and dilation are
/// one int (both sides) or two (height, width); empty lists mean 1, 0 and 1. Differentiable in x,
/// weight and bias. CPU: im2col + the GEMM backend, one thread per sample; the weight gradient is
/// summed in a fixed order (deterministic at any thread count).
Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor(),
              IntList stride = {}, IntList padding = {}, IntList dilation = {},
              std::int64_t groups = 1);
/// conv2d's gradients (dx, dweight, dbias) given the output's gradient; dbias undefined unless
/// with_bias, dx undefined unless with_input (not computed: the first layer's input needs none).
std::tuple<Tensor, Tensor, Tensor> conv2d_backward(const Tensor& grad, const Tensor& x,
                                                   const Tensor& weight, IntList stride,
                                                   IntList padding, IntList dilation,
                                                   std::int64_t groups, bool with_bias,
                                                   bool with_input = true);
/// Max pooling over kernel windows of x [N, C, H, W] (or [C, H, W]); stride defaults to the
/// kernel, padding (at most half the kernel) to 0; padded positions never win. A NaN in a window
/// is its maximum (as in PyTorch). Differentiable in x.
Tensor max_pool2d(const Tensor& x, IntList kernel, IntList stride = {}, IntList padding = {});
/// max_pool2d and the int64 position (row·W + column within its plane) of each maximum.
std::tuple<Tensor, Tensor> max_pool2d_with_indices(const Tensor& x, IntList kernel,
                                                   IntList stride = {}, IntList padding = {});
/// max_pool2d's gradient: grad summed into the positions `indices` names.
Tensor max_pool2d_backward(const Tensor& grad, const Tensor& x, const Tensor& indices);
/// Average pooling; with count_include_pad the divisor counts padded positions (PyTorch's
/// default), otherwise only those inside the image. Differentiable in x.
Tensor avg_pool2d(const Tensor& x, IntList kernel, IntList stride = {}, IntList padding = {},
                  bool count_include_pad = true);
/// avg_pool2d's gradient.
Tensor avg_pool2d_backward(const Tensor& grad, const Tensor& x, IntList kernel, IntList stride,
                           IntList padding, bool count_include_pad);
/// Average pooling to a fixed output size (one int or two): output (i, j) averages rows
/// floor(i·H/OH) .. ceil((i+1)·H/OH) − 1 and likewise columns. Differentiable in x.
Tensor adaptive_avg_pool2d(const Tensor& x, IntList output_size);
/// adaptive_avg_pool2d's gradient (the output size is grad's).
Tensor adaptive_avg_pool2d_backward(const Tensor& grad, const Tensor& x);
/// Batch normalisation of x [N, C, ...] per channel, as torch.nn.functional.batch_norm: in
/// training (or without running statistics) with the batch's mean and biased variance, and the
/// running statistics (when given) updated in place: running = (1 − momentum)·running +
/// momentum·batch, with the unbiased variance; otherwise with the running statistics. Then
/// ·weight + bias when given. Statistics accumulated in float64. Differentiable in x, weight and
/// bias.
Tensor batch_norm(const Tensor& x, const Tensor& running_mean, const Tensor& running_var,
                  const Tensor& weight, const Tensor& bias, bool training, double momentum = 0.1,
                  double eps = 1e-5);
/// batch_norm's gradients (dx, dweight, dbias) given the mean and 1/sqrt(var + eps) the forward
/// used; `training`: they were the batch's. dweight/dbias undefined unless with_weight_bias.
std::tuple<Tensor, Tensor, Tensor> batch_norm_backward(const Tensor& grad, const Tensor& x,
                                                       const Tensor& weight, const Tensor& mean,
                                                       const Tensor& invstd, bool training,
                                                       bool with_weight_bias);

// ---- multi-tensor updates (optimizer state; in place, not differentiable) ----------------------
/// selfs[i] = lerp(selfs[i], ends[i], weight) for every i, torch.lerp's formula (exact at both
/// ends) in float32 for the 16-bit dtypes: `self + w·(end − self)` for |w| < 0.5,
/// `end − (end − self)·(1 − w)` otherwise. ends[i] must have selfs[i]'s shape, dtype and device.
/// The pairs are grouped by (device, dtype): one fused kernel pass per group where the device
/// has the kernel (the CPU, CUDA; others through the CPU), elementwise ops otherwise.
void foreach_lerp_(const std::vector<Tensor>& selfs, const std::vector<Tensor>& ends,
                   double weight);
/// As above with the weight read from a one-element floating tensor (on the lists' device or
/// the CPU), so a weight computed on a device (SWA's 1/(n+1)) is never copied to the host.
void foreach_lerp_(const std::vector<Tensor>& selfs, const std::vector<Tensor>& ends,
                   const Tensor& weight);
/// Muon's momentum step (as torch/optim/_muon.py) over a list of parameters:
/// bufs[i] = lerp(bufs[i], grads[i], 1 − momentum) in place; returns the Newton–Schulz inputs,
/// lerp(grads[i], bufs[i], momentum) with `nesterov` (new tensors) or the buffers themselves
/// without. One fused pass per (device, dtype) group, as foreach_lerp_.
std::vector<Tensor> muon_momentum_(const std::vector<Tensor>& bufs,
                                   const std::vector<Tensor>& grads, double momentum,
                                   bool nesterov);
/// The squared global norm of a list of tensors, as torch.nn.utils.clip_grad_norm_ takes it
/// before the square root: Σ over the tensors of Σ x², every element converted to float64 before
/// it is squared. Undefined entries are skipped; returns a 0-d float64 tensor on the tensors'
/// device, or an undefined tensor when no entry is defined. Every defined tensor must be floating
/// point and on one device (tb::TypeError / tb::ValueError naming the index otherwise). The
/// summation order is fixed (blocks of a fixed size within each tensor, then the blocks and the
/// tensors in order), so the value is the same at every thread count. One fused pass where the
/// device has the kernel (the CPU; others through the CPU) and the tensors are contiguous
/// float32/float64; per-tensor float64 reductions otherwise.
Tensor foreach_sum_sq(const std::vector<Tensor>& tensors);
/// One Adam/AdamW step (torch/optim/adam.py's _single_tensor_adam, in its order of operations)
/// over a list of parameters, in place: with d = grad (negated with `maximize`), p *= 1 − lr·wd
/// (`decoupled`) or d += wd·p; m = lerp(m, d, 1 − beta1); v = beta2·v + (1 − beta2)·d²; with
/// max_exp_avg_sqs given (AMSGrad; empty otherwise) vmax = max(vmax, v) replaces v below;
/// p −= step_sizes[i]·m / (sqrt(v) / bc2_sqrts[i] + eps). step_sizes[i] (lr / (1 − beta1^t)) and
/// bc2_sqrts[i] (sqrt(1 − beta2^t)) are host values, one per parameter. Every list has one
/// tensor per parameter, of the parameter's shape, dtype and device (tb::ValueError /
/// tb::TypeError naming the list and index otherwise). One fused pass when every tensor is
/// contiguous, of one float32/float64 dtype, on one device with the kernel (the CPU, CUDA;
/// others through the CPU); the same math as elementwise ops otherwise.
void adam_step_(const std::vector<Tensor>& params, const std::vector<Tensor>& grads,
                const std::vector<Tensor>& exp_avgs, const std::vector<Tensor>& exp_avg_sqs,
                const std::vector<Tensor>& max_exp_avg_sqs, const std::vector<double>& step_sizes,
                const std::vector<double>& bc2_sqrts, double lr, double beta1, double beta2,
                double eps, double weight_decay, bool maximize, bool decoupled);
/// One SGD step (torch/optim/sgd.py's _single_tensor_sgd, in its order of operations) over a
/// list of parameters, in place: d = grad (negated with `maximize`) + weight_decay·p; with
/// momentum != 0, buf = d on the buffer's first step (first_steps[i]) and
/// momentum·buf + (1 − dampening)·d after, then d = d + momentum·buf (`nesterov`) or buf;
/// p += −lr·d. With momentum 0, momentum_buffers and first_steps are empty; otherwise they have
/// one entry per parameter, the buffers of the parameter's shape, dtype and device (tb::ValueError
/// / tb::TypeError naming the list and index otherwise). Fused as adam_step_.
void sgd_step_(const std::vector<Tensor>& params, const std::vector<Tensor>& grads,
               const std::vector<Tensor>& momentum_buffers, const std::vector<bool>& first_steps,
               double lr, double momentum, double dampening, double weight_decay, bool nesterov,
               bool maximize);

// ---- mixed precision (GradScaler's kernels; in place, not differentiable) ----------------------
/// Fused unscale and inf/NaN check over a list of tensors of one dtype on one device (PyTorch's
/// `_amp_foreach_non_finite_check_and_unscale_`): for every element x, found_inf := 1 when x is
/// inf or NaN (never cleared), and x := x * inv_scale unless inv_scale is exactly 1 (computed in
/// float32 for 16-bit floats). found_inf and inv_scale are 1-element float32 tensors on the grads'
/// device. An empty list is a no-op. Throws tb::TypeError / tb::ValueError naming the argument
/// when these rules are broken.
void amp_foreach_non_finite_check_and_unscale_(const std::vector<Tensor>& grads, Tensor& found_inf,
                                               const Tensor& inv_scale);
/// In-place scale update (PyTorch's `_amp_update_scale_`): with found_inf != 0 the scale is
/// multiplied by `backoff_factor` and the tracker reset; otherwise the tracker counts the clean
/// step and, on reaching `growth_interval`, the scale is multiplied by `growth_factor` (only when
/// the result is finite) and the tracker reset. `scale` and `found_inf` are 1-element float32
/// tensors, `growth_tracker` a 1-element int32 tensor, all on one device type.
void amp_update_scale_(Tensor& scale, Tensor& growth_tracker, const Tensor& found_inf,
                       double growth_factor, double backoff_factor, std::int64_t growth_interval);

// ---- copies and casts ---------------------------------------------------------------------------
/// dst := src (broadcast, converted to dst's dtype, across devices). Returns dst.
Tensor& copy_(Tensor& dst, const Tensor& src);
Tensor& fill_(Tensor& t, const Scalar& value);
Tensor to_dtype(const Tensor& t, ScalarType dtype);
Tensor to_device(const Tensor& t, Device device);

/// Result dtype of a binary op between two tensors, by PyTorch's rule: dimensioned tensors
/// decide, unless a 0-d tensor is of a higher category (bool < integer < float), e.g.
/// int32 with a 0-d float64 gives float64 and float32 with a 0-d float64 gives float32.
ScalarType result_type(const Tensor& a, const Tensor& b);
/// Result dtype of a tensor with a Python-style scalar: the tensor's dtype unless the scalar is
/// of a higher category (bool < integer < float), then the default of that category.
ScalarType result_type(const Tensor& a, const Scalar& b);

}  // namespace tb::ops
