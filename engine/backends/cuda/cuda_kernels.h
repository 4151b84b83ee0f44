// Launchers of the CUDA kernels (defined in the .cu files beside this header). Pointers are
// device pointers unless said otherwise; `n` counts elements; `st` is a core::ScalarType as int.
// Every launcher enqueues on the current device's default stream and returns the launch status
// (cudaSuccess or an error code) without synchronising. Plain C++: the backend's host code
// (compiled by the C++ compiler) includes it.
#pragma once

#include <cstdint>

#include "engine/backends/common/conv_math.h"

namespace tb::cuda {

/// Fills n elements of `elem_size` bytes at `dst` with the bit pattern at `value` (host memory).
int launch_fill(void* dst, std::int64_t n, int elem_size, const void* value);

/// Most dimensions a strided launch handles.
inline constexpr int kMaxDims = 8;
/// Most operands of a strided launch (output included).
inline constexpr int kMaxOperands = 4;

/// Shape and element strides of up to four operands of one elementwise launch (operand 0 is the
/// output; inputs are already broadcast to its shape, with stride 0 where broadcast).
struct Strided {
  int ndim = 0;
  std::int64_t sizes[kMaxDims] = {};
  std::int64_t strides[kMaxOperands][kMaxDims] = {};
};

// ---- elementwise (cuda_elementwise.cu) -------------------------------------------------------

/// out = op(in) (op: an ew::Unary code; float dtypes, 16-bit computed in float).
int launch_unary(int op, int st, void* out, const void* in, const Strided& s, std::int64_t n);

/// out = op(a, b, alpha) (op: an ew::Binary code; float dtypes, int32, int64 — pow floats only).
int launch_binary(int op, int st, void* out, const void* a, const void* b, double alpha,
                  const Strided& s, std::int64_t n);

/// out (bool) = a <op> b (op: an ew::Compare code; every dtype).
int launch_compare(int op, int st, bool* out, const void* a, const void* b, const Strided& s,
                   std::int64_t n);

/// out = cond ? a : b, elements of `elem_size` bytes (operands: out, cond, a, b).
int launch_where(int elem_size, void* out, const bool* cond, const void* a, const void* b,
                 const Strided& s, std::int64_t n);

/// Where mask: out = value (the element's bit pattern, host memory); operands: out, mask.
int launch_masked_fill(int elem_size, void* out, const bool* mask, const void* value,
                       const Strided& s, std::int64_t n);

/// Same-dtype copy between strided layouts (elements of `elem_size` bytes: 1, 2, 4 or 8).
int launch_strided_copy(int elem_size, void* out, const void* in, const Strided& s, std::int64_t n);

/// Converting copy between strided layouts (operands: dst, src) for dtypes float32/64, float16,
/// bfloat16, int64, int32, uint8 and bool; false when the pair is not handled (the caller then
/// converts on the host).
bool can_convert_on_device(int dst_st, int src_st);
int launch_convert(int dst_st, void* dst, int src_st, const void* src, const Strided& s,
                   std::int64_t n);

/// Copies the lower triangle of the n×n row-major matrix c (leading dimension ldc) to the upper.
int launch_mirror_lower(int st, void* c, std::int64_t n, std::int64_t ldc);

// ---- reductions, softmax, cross-entropy (cuda_reduce.cu) --------------------------------------

/// What a row reduction computes.
enum class RowReduce : int { sum, mean, norm1, norm2, norm_inf, norm_p };

/// out[k] = reduce(in[k, 0..r)) over a contiguous [k, r] input; `p` is the order of norm_p.
/// Floats accumulate in float (double for float64), integers (sum only) in int64.
/// `workspace` holds at least row_reduce_workspace_bytes(k, r) bytes (device memory).
int launch_row_reduce(RowReduce kind, int st, void* out, const void* in, std::int64_t k,
                      std::int64_t r, double p, void* workspace);
std::int64_t row_reduce_workspace_bytes(std::int64_t k, std::int64_t r);

/// values[k] / indices[k] = the max (Greater) or min of each contiguous row and its first index;
/// a NaN wins (the first one). `values` may be null (argmax). Workspace as row_reduce's.
int launch_row_arg_extreme(bool greater, int st, void* values, std::int64_t* indices,
                           const void* in, std::int64_t k, std::int64_t r, void* workspace);
std::int64_t row_arg_extreme_workspace_bytes(std::int64_t k, std::int64_t r);

/// softmax or log_softmax of each contiguous row of [rows, n] (float dtypes).
int launch_softmax(bool log, int st, void* out, const void* in, std::int64_t rows, std::int64_t n);

/// Cross-entropy (mean over rows whose target is not ignore_index, label smoothing) of contiguous
/// logits [n, c] and int64 targets [n]: writes the scalar loss (logits' dtype) to `loss`.
/// `bad_row` (device int64, preset to -1 by the launcher) receives the first row whose target is
/// out of range. `workspace`: cross_entropy_workspace_bytes(n).
int launch_cross_entropy(int st, void* loss, const void* logits, const std::int64_t* target,
                         std::int64_t n, std::int64_t c, std::int64_t ignore_index,
                         double smoothing, std::int64_t* bad_row, void* workspace);
std::int64_t cross_entropy_workspace_bytes(std::int64_t n);

/// Gradient of cross_entropy with respect to the logits, scaled by *grad (device scalar of the
/// logits' dtype) / the number of valid rows. `bad_row` and `workspace` as launch_cross_entropy's.
int launch_cross_entropy_backward(int st, void* grad_logits, const void* grad, const void* logits,
                                  const std::int64_t* target, std::int64_t n, std::int64_t c,
                                  std::int64_t ignore_index, double smoothing,
                                  std::int64_t* bad_row, void* workspace);

// ---- indexing and RoPE (cuda_index.cu) ---------------------------------------------------------

/// out[o, i, j] = in[o, index[i], j] for contiguous in [outer, size, inner] and out
/// [outer, n, inner] (elements of `elem_size` bytes). Negative indices wrap; the first index out
/// of range is written to *bad (device int64, preset to a sentinel by the caller) and skipped.
int launch_index_select(int elem_size, void* out, const void* in, const std::int64_t* index,
                        std::int64_t n, std::int64_t outer, std::int64_t size, std::int64_t inner,
                        std::int64_t* bad);

/// gather: out (contiguous, index's shape) = in[pos with dim replaced by index[pos]]. Operand 0 of
/// `s` holds in's strides with 0 along dim (its stride there is `dim_stride`), operand 1 index's;
/// sizes are index's.
int launch_gather(int elem_size, void* out, const void* in, const std::int64_t* index,
                  std::int64_t dim_stride, std::int64_t dim_size, const Strided& s, std::int64_t n,
                  std::int64_t* bad);

/// scatter_add into out: out[pos with dim replaced by index[pos]] += src[pos]. Operand 0 of `s`:
/// out's strides with 0 along dim (`dim_stride` there), 1: index's, 2: src's; sizes are index's.
/// Atomic adds.
int launch_scatter_add(int st, void* out, const std::int64_t* index, const void* src,
                       std::int64_t dim_stride, std::int64_t dim_size, const Strided& s,
                       std::int64_t n, std::int64_t* bad);

/// out = silu(gate)·up; dgate, dup = swiglu's gradients (contiguous, n elements, float types).
int launch_swiglu(int st, void* out, const void* gate, const void* up, std::int64_t n);
int launch_swiglu_backward(int st, void* dgate, void* dup, const void* grad, const void* gate,
                           const void* up, std::int64_t n);

/// RoPE on contiguous x [rows, d] (rows run over (..., t)), cos/sin [t_len, d / 2] in the
/// compute type (float, double for float64).
int launch_rope(int st, void* out, const void* x, const void* cos, const void* sin,
                std::int64_t rows, std::int64_t t_len, std::int64_t d);

// ---- random (cuda_random.cu) --------------------------------------------------------------------

/// uniform_ / normal_ into a contiguous float tensor at (seed, offset): the numbers of
/// engine/backends/common/random_math.h. 16-bit dtypes draw in float32 and round.
int launch_uniform(int st, void* out, std::int64_t n, std::uint64_t seed, std::uint64_t offset,
                   double from, double to);
int launch_normal(int st, void* out, std::int64_t n, std::uint64_t seed, std::uint64_t offset,
                  double mean, double stdv);
/// out = (uniform draw < p) for a contiguous float tensor; `p_tensor` (float32, n elements) when
/// not null replaces the scalar p.
int launch_bernoulli(int st, void* out, std::int64_t n, std::uint64_t seed, std::uint64_t offset,
                     double p, const float* p_tensor);

// ---- RMSNorm / LayerNorm (cuda_norm.cu) ---------------------------------------------------------

/// y = rms_norm or layer_norm of `rows` contiguous rows of n elements of dtype st (w, b: [n] or
/// null); stats [rows, 2] (mean, rstd) in float (double for float64). A warp per row.
int launch_row_norm(int st, bool rms, const void* x, const void* w, const void* b, void* y,
                    void* stats, std::int64_t rows, std::int64_t n, double eps);
/// Partial-sum chunks the backward needs for `rows` rows: partial_w/partial_b are
/// [chunks, n] workspaces of the stats' dtype.
std::int64_t norm_partial_chunks(std::int64_t rows);
/// dx (like x) and, when not null, dw = Σ_rows dy·x̂ and db = Σ_rows dy ([n], dtype st), summed
/// per chunk of rows then over chunks in order (deterministic).
int launch_row_norm_backward(int st, bool rms, const void* dy, const void* x, const void* w,
                             const void* stats, void* dx, void* dw, void* db, void* partial_w,
                             void* partial_b, std::int64_t rows, std::int64_t n);

// ---- fused attention (cuda_attention.cu) --------------------------------------------------------

/// One operand of the attention kernels: a [B, heads, length, width] tensor with unit stride in
/// width and element strides for the other three dimensions.
struct AttnOperand {
  const void* p = nullptr;
  std::int64_t sb = 0, sh = 0, sl = 0;
};

/// Shapes and operands of one attention call: q [B,H,T,D], k [B,Hkv,S,D], v [B,Hkv,S,E] of
/// dtype st (float dtypes), H a multiple of Hkv, max(D, E) <= kAttentionMaxHead.
struct AttentionArgs {
  int st = 0;
  std::int64_t b = 0, h = 0, t = 0, d = 0, hkv = 0, s = 0, e = 0;
  AttnOperand q, k, v;
  double scale = 1.0;
  bool causal = false;
};
/// Head sizes the fused kernels take (larger ones are composed by the caller).
inline constexpr std::int64_t kAttentionMaxHead = 128;

/// out (contiguous [B,H,T,E], dtype st) and lse (contiguous [B,H,T], float32, float64 for
/// float64) of softmax(q·kᵀ·scale + causal mask)·v; a warp per query row, key/value tiles in
/// shared memory, online softmax.
int launch_attention_forward(const AttentionArgs& a, void* out, void* lse);
/// dq [B,H,T,D], dk [B,Hkv,S,D], dv [B,Hkv,S,E] (contiguous, dtype st) from the output's
/// gradient g and the forward's out (operands like q) and lse; `dvec` is a [B,H,T] workspace of
/// lse's dtype. Two launches (dq by query rows, then dk/dv by key rows), no atomics.
int launch_attention_backward(const AttentionArgs& a, const AttnOperand& g, const AttnOperand& out,
                              const void* lse, void* dvec, void* dq, void* dk, void* dv);

// ---- convolutional networks (cuda_conv.cu): contiguous NCHW float32/float64 ---------------------

using conv::ConvShape;  // engine/backends/common/conv_math.h
using conv::PoolShape;

/// col [groups, c/groups·kh·kw, b·oh·ow] (row (c, i, j), column (sample, oy, ox)) from samples
/// [n0, n0 + b) of x: the input at (oy·sh − ph + i·dh, ox·sw − pw + j·dw), 0 outside the image.
int launch_im2col(int st, const ConvShape& g, const void* x, void* col, std::int64_t n0,
                  std::int64_t b);

/// The adjoint of launch_im2col: samples [n0, n0 + b) of dx (every element written) gathered
/// from col (same layout); each element sums its (i, j) taps in order, no atomics.
int launch_col2im(int st, const ConvShape& g, const void* col, void* dx, std::int64_t n0,
                  std::int64_t b);

/// max_pool2d: y and the int64 position ih·w + iw of each window's first maximum (a NaN wins).
int launch_max_pool2d(int st, const PoolShape& g, const void* x, void* y, std::int64_t* indices);

/// max_pool2d_backward: dx (planes × hw, every element written) = dy (planes × ohw) summed into
/// the positions `indices` names, in output order (a thread per plane, deterministic).
int launch_max_pool2d_backward(int st, std::int64_t planes, std::int64_t hw, std::int64_t ohw,
                               const void* dy, const std::int64_t* indices, void* dx);

/// avg_pool2d and its gradient (PyTorch's divisor: the window clipped to the padded image with
/// count_include_pad, to the image otherwise); the gradient gathers, no atomics.
int launch_avg_pool2d(int st, const PoolShape& g, bool count_include_pad, const void* x, void* y);
int launch_avg_pool2d_backward(int st, const PoolShape& g, bool count_include_pad, const void* dy,
                               void* dx);

/// adaptive_avg_pool2d and its gradient (windows floor(i·h/oh) .. ceil((i+1)·h/oh)); g's kernel,
/// stride and padding are unused.
int launch_adaptive_avg_pool2d(int st, const PoolShape& g, const void* x, void* y);
int launch_adaptive_avg_pool2d_backward(int st, const PoolShape& g, const void* dy, void* dx);

/// batch_norm over x viewed as [n, c, s]: a block per channel computes the statistics in double
/// (training: the batch's, running_mean/var updated in place when not null; otherwise the
/// running ones), writes mean and invstd (dtype st), then y = x·scale + shift. weight and bias
/// may be null.
int launch_batch_norm(int st, std::int64_t n, std::int64_t c, std::int64_t s, const void* x,
                      const void* weight, const void* bias, void* running_mean, void* running_var,
                      bool training, double momentum, double eps, void* y, void* mean,
                      void* invstd);

/// batch_norm_backward: per channel Σdy and Σdy·(x − mean) in double into `sums` (a device
/// buffer of 2·c doubles), dweight/dbias from them when not null, then dx.
int launch_batch_norm_backward(int st, std::int64_t n, std::int64_t c, std::int64_t s,
                               const void* dy, const void* x, const void* weight, const void* mean,
                               const void* invstd, bool training, double* sums, void* dx, void* dw,
                               void* db);

// ---- multi-tensor optimizer and mixed-precision kernels (cuda_optim.cu) -------------------------

/// One fused Adam/AdamW launch sequence over `count` tensors of one float dtype (float32 or
/// float64): host arrays of device pointers (vmax null when not amsgrad), element counts and the
/// per-tensor step size and sqrt(1 - beta2^step). No host synchronisation.
struct AdamArgs {
  int st = 0;
  int count = 0;
  void* const* params = nullptr;
  const void* const* grads = nullptr;
  void* const* exp_avgs = nullptr;
  void* const* exp_avg_sqs = nullptr;
  void* const* max_exp_avg_sqs = nullptr;  // null: no amsgrad
  const std::int64_t* numels = nullptr;
  const double* step_sizes = nullptr;
  const double* bc2_sqrts = nullptr;
  double lr = 0, beta1 = 0, beta2 = 0, eps = 0, weight_decay = 0;
  bool maximize = false;
  bool decoupled = false;
};
int launch_adam(const AdamArgs& a);

/// One fused SGD launch sequence over `count` tensors of one float dtype (float32 or float64):
/// host arrays of device pointers (momentum_buffers null without momentum; first_steps, a host
/// array of 0/1 per buffer, then too), element counts, and the group's hyper-parameters
/// (engine/backends/common/optim_math.h's sgd_element). No host synchronisation.
struct SgdArgs {
  int st = 0;
  int count = 0;
  void* const* params = nullptr;
  const void* const* grads = nullptr;
  void* const* momentum_buffers = nullptr;    // null: no momentum
  const std::int64_t* first_steps = nullptr;  // 1: the buffer's first step
  const std::int64_t* numels = nullptr;
  double lr = 0, momentum = 0, dampening = 0, weight_decay = 0;
  bool nesterov = false;
  bool maximize = false;
};
int launch_sgd(const SgdArgs& a);

/// foreach_lerp_ over `count` pairs of contiguous tensors of float dtype st: selfs[i] =
/// lerp(selfs[i], ends[i], w) (engine/backends/common/optim_math.h), w read on the device from
/// `weight` (a float32/float64 scalar of dtype weight_st) when it is not null.
int launch_foreach_lerp(int st, int count, void* const* selfs, const void* const* ends,
                        const std::int64_t* numels, const void* weight, int weight_st, double w);

/// muon_momentum_ over `count` contiguous tensors of float dtype st: bufs[i] = lerp(bufs[i],
/// grads[i], 1 − momentum), then outs[i] = lerp(grads[i], bufs[i], momentum) when outs is not
/// null (Nesterov).
int launch_muon_momentum(int st, int count, void* const* bufs, const void* const* grads,
                         void* const* outs, const std::int64_t* numels, double momentum);

/// GradScaler's unscale: for `count` contiguous tensors of dtype st, *found_inf (device float32)
/// = 1 when any element is not finite; every element *= *inv_scale (device float32) unless it
/// is 1. One launch per chunk list, no host synchronisation.
int launch_amp_unscale(int st, int count, void* const* data, const std::int64_t* numels,
                       float* found_inf, const float* inv_scale);

/// GradScaler's scale update on device scalars (PyTorch's _amp_update_scale_,
/// aten/src/ATen/native/cuda/AmpKernels.cu).
int launch_amp_update_scale(float* scale, std::int32_t* growth_tracker, const float* found_inf,
                            double growth, double backoff, std::int64_t interval);

}  // namespace tb::cuda
