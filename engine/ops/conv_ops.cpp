// Convolutional-network ops: conv2d, max/avg/adaptive-average pooling and batch norm, with their
// backward ops. The checks and PyTorch's argument conventions live here (an int or a pair for
// kernel/stride/padding/dilation, unbatched [C, H, W] inputs); the kernels (engine/backends/
// <device>/) see contiguous float32/float64 NCHW tensors. 16-bit floats compute in float32 and
// come back in their own dtype.
#include <cmath>
#include <string>

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

// A pair from an int or a pair (PyTorch's _pair); `fallback` when empty.
struct Pair {
  std::int64_t v[2];
  IntList list() const { return IntList(v, 2); }
};

Pair pair_of(const char* op, const char* what, IntList l, Pair fallback) {
  if (l.empty()) return fallback;
  TB_CHECK(l.size() <= 2, "[", op, "] ", what, " must be one int or two (height, width), got ",
           l.size(), " values");
  return l.size() == 1 ? Pair{{l[0], l[0]}} : Pair{{l[0], l[1]}};
}

std::string pair_str(const Pair& p) {
  return "(" + std::to_string(p.v[0]) + ", " + std::to_string(p.v[1]) + ")";
}

void check_float(const char* op, const Tensor& t, const char* arg) {
  TB_CHECK_T(TypeError, core::is_floating_point(t.dtype()), "[", op, "] expects a floating-point ",
             arg, ", got ", t.dtype());
}

// The dtype the kernel computes in: float64 when any operand is float64, float32 otherwise.
ScalarType compute_dtype(std::initializer_list<const Tensor*> ts) {
  for (const Tensor* t : ts)
    if (t->defined() && t->dtype() == ScalarType::Float64) return ScalarType::Float64;
  return ScalarType::Float32;
}

// The dtype the result has: the promotion of the operands' dtypes.
ScalarType result_dtype(std::initializer_list<const Tensor*> ts) {
  ScalarType dt = ScalarType::Float32;
  bool first = true;
  for (const Tensor* t : ts) {
    if (!t->defined()) continue;
    dt = first ? t->dtype() : core::promote_types(dt, t->dtype());
    first = false;
  }
  return dt;
}

Tensor prepared(const Tensor& t, ScalarType dt) {
  return t.defined() ? cast_if_needed(t, dt).contiguous() : Tensor();
}

// An unbatched [C, H, W] input runs as a batch of one.
Tensor batched(const char* op, const Tensor& x) {
  check_defined(op, x, "input");
  check_float(op, x, "input");
  TB_CHECK(x.dim() == 3 || x.dim() == 4, "[", op,
           "] expects a 3-D [C, H, W] or 4-D [N, C, H, W] input, got shape ", DimVector(x.sizes()));
  return x.dim() == 3 ? x.unsqueeze(0) : x;
}

Tensor unbatched_like(const Tensor& y, const Tensor& x) {
  return x.dim() == 3 ? y.squeeze(0) : y;
}

struct ConvArgs {
  Pair stride, padding, dilation;
};

ConvArgs check_conv(const Tensor& x4, const Tensor& weight, const Tensor& bias, IntList stride,
                    IntList padding, IntList dilation, std::int64_t groups) {
  const char* op = "conv2d";
  check_defined(op, weight, "weight");
  check_float(op, weight, "weight");
  check_same_device(op, x4, weight);
  TB_CHECK(weight.dim() == 4, "[conv2d] weight must be 4-D [out_channels, in_channels/groups, kh, ",
           "kw], got shape ", DimVector(weight.sizes()));
  TB_CHECK(groups > 0, "[conv2d] groups must be positive, got ", groups);
  const ConvArgs a{pair_of(op, "stride", stride, {{1, 1}}),
                   pair_of(op, "padding", padding, {{0, 0}}),
                   pair_of(op, "dilation", dilation, {{1, 1}})};
  for (int i = 0; i < 2; ++i) {
    TB_CHECK(a.stride.v[i] > 0, "[conv2d] stride must be positive, got ", pair_str(a.stride));
    TB_CHECK(a.padding.v[i] >= 0, "[conv2d] padding must be >= 0, got ", pair_str(a.padding));
    TB_CHECK(a.dilation.v[i] > 0, "[conv2d] dilation must be positive, got ", pair_str(a.dilation));
  }
  const std::int64_t out = weight.size(0);
  TB_CHECK(out > 0 && out % groups == 0, "[conv2d] out_channels ", out,
           " must be positive and divisible by groups ", groups);
  TB_CHECK(x4.size(1) == weight.size(1) * groups, "[conv2d] given groups=", groups,
           ", weight of shape ", DimVector(weight.sizes()), " expects an input with ",
           weight.size(1) * groups, " channels, got input of shape ", DimVector(x4.sizes()));
  if (bias.defined()) {
    check_float(op, bias, "bias");
    check_same_device(op, x4, bias);
    TB_CHECK(bias.dim() == 1 && bias.size(0) == out, "[conv2d] bias must have shape [", out,
             "] (out_channels), got ", DimVector(bias.sizes()));
  }
  for (int i = 0; i < 2; ++i) {
    const std::int64_t in = x4.size(2 + i) + 2 * a.padding.v[i];
    const std::int64_t k = a.dilation.v[i] * (weight.size(2 + i) - 1) + 1;
    TB_CHECK(in >= k, "[conv2d] the padded input (", x4.size(2), " x ", x4.size(3),
             " plus padding ", pair_str(a.padding), ") is smaller than the dilated kernel (",
             a.dilation.v[0] * (weight.size(2) - 1) + 1, " x ",
             a.dilation.v[1] * (weight.size(3) - 1) + 1, ")");
  }
  return a;
}

struct PoolArgs {
  Pair kernel, stride, padding;
};

PoolArgs check_pool(const char* op, const Tensor& x4, IntList kernel, IntList stride,
                    IntList padding) {
  TB_CHECK(!kernel.empty(), "[", op, "] kernel_size is required");
  PoolArgs a{};
  a.kernel = pair_of(op, "kernel_size", kernel, {{1, 1}});
  a.stride = pair_of(op, "stride", stride, a.kernel);  // PyTorch: stride defaults to the kernel
  a.padding = pair_of(op, "padding", padding, {{0, 0}});
  for (int i = 0; i < 2; ++i) {
    TB_CHECK(a.kernel.v[i] > 0, "[", op, "] kernel_size must be positive, got ",
             pair_str(a.kernel));
    TB_CHECK(a.stride.v[i] > 0, "[", op, "] stride must be positive, got ", pair_str(a.stride));
    TB_CHECK(a.padding.v[i] >= 0 && 2 * a.padding.v[i] <= a.kernel.v[i], "[", op,
             "] padding must be >= 0 and at most half the kernel size, got padding ",
             pair_str(a.padding), " for kernel_size ", pair_str(a.kernel));
    TB_CHECK(x4.size(2 + i) + 2 * a.padding.v[i] >= a.kernel.v[i], "[", op, "] the input (",
             x4.size(2), " x ", x4.size(3), ", padding ", pair_str(a.padding),
             ") is smaller than the kernel ", pair_str(a.kernel));
  }
  return a;
}

}  // namespace

// ---- conv2d -------------------------------------------------------------------------------------

Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias, IntList stride,
              IntList padding, IntList dilation, std::int64_t groups) {
  static const auto op = Dispatcher::singleton().typed<sig::Conv2d>("conv2d");
  const Tensor x4 = batched("conv2d", x);
  const ConvArgs a = check_conv(x4, weight, bias, stride, padding, dilation, groups);
  const ScalarType out = result_dtype({&x, &weight, &bias});
  const ScalarType dt = compute_dtype({&x, &weight, &bias});
  const Tensor y = op.call(prepared(x4, dt), prepared(weight, dt), prepared(bias, dt),
                           a.stride.list(), a.padding.list(), a.dilation.list(), groups);
  return unbatched_like(cast_if_needed(y, out), x);
}

std::tuple<Tensor, Tensor, Tensor> conv2d_backward(const Tensor& grad, const Tensor& x,
                                                   const Tensor& weight, IntList stride,
                                                   IntList padding, IntList dilation,
                                                   std::int64_t groups, bool with_bias,
                                                   bool with_input) {
  static const auto op = Dispatcher::singleton().typed<sig::Conv2dBackward>("conv2d_backward");
  const Tensor x4 = batched("conv2d_backward", x);
  const ConvArgs a = check_conv(x4, weight, Tensor(), stride, padding, dilation, groups);
  check_defined("conv2d_backward", grad, "grad_output");
  const Tensor g4 = grad.dim() == 3 ? grad.unsqueeze(0) : grad;
  const std::int64_t oh =
      (x4.size(2) + 2 * a.padding.v[0] - a.dilation.v[0] * (weight.size(2) - 1) - 1) /
          a.stride.v[0] +
      1;
  const std::int64_t ow =
      (x4.size(3) + 2 * a.padding.v[1] - a.dilation.v[1] * (weight.size(3) - 1) - 1) /
          a.stride.v[1] +
      1;
  const DimVector want{x4.size(0), weight.size(0), oh, ow};
  TB_CHECK(DimVector(g4.sizes()) == want, "[conv2d_backward] grad_output must have shape ", want,
           ", got ", DimVector(grad.sizes()));
  const ScalarType dt = compute_dtype({&x, &weight});
  auto [dx, dw, db] =
      op.call(prepared(g4, dt), prepared(x4, dt), prepared(weight, dt), a.stride.list(),
              a.padding.list(), a.dilation.list(), groups, with_bias, with_input);
  return {dx.defined() ? unbatched_like(cast_if_needed(dx, x.dtype()), x) : dx,
          cast_if_needed(dw, weight.dtype()), db};
}

// ---- pooling ------------------------------------------------------------------------------------

std::tuple<Tensor, Tensor> max_pool2d_with_indices(const Tensor& x, IntList kernel, IntList stride,
                                                   IntList padding) {
  static const auto op = Dispatcher::singleton().typed<sig::MaxPool2d>("max_pool2d");
  const Tensor x4 = batched("max_pool2d", x);
  const PoolArgs a = check_pool("max_pool2d", x4, kernel, stride, padding);
  auto [y, idx] = op.call(prepared(x4, compute_dtype({&x})), a.kernel.list(), a.stride.list(),
                          a.padding.list());
  return {unbatched_like(cast_if_needed(y, x.dtype()), x), unbatched_like(idx, x)};
}

Tensor max_pool2d(const Tensor& x, IntList kernel, IntList stride, IntList padding) {
  return std::get<0>(max_pool2d_with_indices(x, kernel, stride, padding));
}

Tensor max_pool2d_backward(const Tensor& grad, const Tensor& x, const Tensor& indices) {
  static const auto op =
      Dispatcher::singleton().typed<sig::MaxPool2dBackward>("max_pool2d_backward");
  const Tensor x4 = batched("max_pool2d_backward", x);
  check_defined("max_pool2d_backward", grad, "grad_output");
  check_defined("max_pool2d_backward", indices, "indices");
  TB_CHECK_T(TypeError, indices.dtype() == ScalarType::Int64,
             "[max_pool2d_backward] indices must be int64, got ", indices.dtype());
  TB_CHECK(DimVector(grad.sizes()) == DimVector(indices.sizes()),
           "[max_pool2d_backward] grad_output of shape ", DimVector(grad.sizes()),
           " does not match indices of shape ", DimVector(indices.sizes()));
  const Tensor g4 = grad.dim() == 3 ? grad.unsqueeze(0) : grad;
  const Tensor i4 = indices.dim() == 3 ? indices.unsqueeze(0) : indices;
  TB_CHECK(g4.dim() == 4 && g4.size(0) == x4.size(0) && g4.size(1) == x4.size(1),
           "[max_pool2d_backward] grad_output of shape ", DimVector(grad.sizes()),
           " does not match the input of shape ", DimVector(x.sizes()));
  const ScalarType dt = compute_dtype({&x});
  const Tensor dx = op.call(prepared(g4, dt), prepared(x4, dt), i4.contiguous());
  return unbatched_like(cast_if_needed(dx, x.dtype()), x);
}

Tensor avg_pool2d(const Tensor& x, IntList kernel, IntList stride, IntList padding,
                  bool count_include_pad) {
  static const auto op = Dispatcher::singleton().typed<sig::AvgPool2d>("avg_pool2d");
  const Tensor x4 = batched("avg_pool2d", x);
  const PoolArgs a = check_pool("avg_pool2d", x4, kernel, stride, padding);
  const Tensor y = op.call(prepared(x4, compute_dtype({&x})), a.kernel.list(), a.stride.list(),
                           a.padding.list(), count_include_pad);
  return unbatched_like(cast_if_needed(y, x.dtype()), x);
}

Tensor avg_pool2d_backward(const Tensor& grad, const Tensor& x, IntList kernel, IntList stride,
                           IntList padding, bool count_include_pad) {
  static const auto op =
      Dispatcher::singleton().typed<sig::AvgPool2dBackward>("avg_pool2d_backward");
  const Tensor x4 = batched("avg_pool2d_backward", x);
  const PoolArgs a = check_pool("avg_pool2d_backward", x4, kernel, stride, padding);
  check_defined("avg_pool2d_backward", grad, "grad_output");
  const Tensor g4 = grad.dim() == 3 ? grad.unsqueeze(0) : grad;
  const DimVector want{x4.size(0), x4.size(1),
                       (x4.size(2) + 2 * a.padding.v[0] - a.kernel.v[0]) / a.stride.v[0] + 1,
                       (x4.size(3) + 2 * a.padding.v[1] - a.kernel.v[1]) / a.stride.v[1] + 1};
  TB_CHECK(DimVector(g4.sizes()) == want, "[avg_pool2d_backward] grad_output must have shape ",
           want, ", got ", DimVector(grad.sizes()));
  const ScalarType dt = compute_dtype({&x});
  const Tensor dx = op.call(prepared(g4, dt), prepared(x4, dt), a.kernel.list(), a.stride.list(),
                            a.padding.list(), count_include_pad);
  return unbatched_like(cast_if_needed(dx, x.dtype()), x);
}

Tensor adaptive_avg_pool2d(const Tensor& x, IntList output_size) {
  static const auto op =
      Dispatcher::singleton().typed<sig::AdaptiveAvgPool2d>("adaptive_avg_pool2d");
  const Tensor x4 = batched("adaptive_avg_pool2d", x);
  const Pair out = pair_of("adaptive_avg_pool2d", "output_size", output_size, {{1, 1}});
  TB_CHECK(out.v[0] > 0 && out.v[1] > 0, "[adaptive_avg_pool2d] output_size must be positive, got ",
           pair_str(out));
  TB_CHECK(x4.size(2) > 0 && x4.size(3) > 0,
           "[adaptive_avg_pool2d] the input's height and width must be positive, got shape ",
           DimVector(x.sizes()));
  const Tensor y = op.call(prepared(x4, compute_dtype({&x})), out.list());
  return unbatched_like(cast_if_needed(y, x.dtype()), x);
}

Tensor adaptive_avg_pool2d_backward(const Tensor& grad, const Tensor& x) {
  static const auto op = Dispatcher::singleton().typed<sig::Binary>("adaptive_avg_pool2d_backward");
  const Tensor x4 = batched("adaptive_avg_pool2d_backward", x);
  check_defined("adaptive_avg_pool2d_backward", grad, "grad_output");
  const Tensor g4 = grad.dim() == 3 ? grad.unsqueeze(0) : grad;
  TB_CHECK(g4.dim() == 4 && g4.size(0) == x4.size(0) && g4.size(1) == x4.size(1),
           "[adaptive_avg_pool2d_backward] grad_output of shape ", DimVector(grad.sizes()),
           " does not match the input of shape ", DimVector(x.sizes()));
  const ScalarType dt = compute_dtype({&x});
  const Tensor dx = op.call(prepared(g4, dt), prepared(x4, dt));
  return unbatched_like(cast_if_needed(dx, x.dtype()), x);
}

// ---- batch norm ---------------------------------------------------------------------------------

namespace {

void check_batch_norm(const Tensor& x, const Tensor& running_mean, const Tensor& running_var,
                      const Tensor& weight, const Tensor& bias, bool training, double momentum,
                      double eps, bool check_count = true) {
  const char* op = "batch_norm";
  check_defined(op, x, "input");
  check_float(op, x, "input");
  TB_CHECK(x.dim() >= 2, "[batch_norm] expects an input [N, C, ...] with at least 2 dimensions, ",
           "got shape ", DimVector(x.sizes()));
  const std::int64_t c = x.size(1);
  for (const auto& [t, name] : {std::pair{&running_mean, "running_mean"},
                                {&running_var, "running_var"},
                                {&weight, "weight"},
                                {&bias, "bias"}}) {
    if (!t->defined()) continue;
    check_float(op, *t, name);
    check_same_device(op, x, *t);
    TB_CHECK(t->dim() == 1 && t->size(0) == c, "[batch_norm] ", name, " must have shape [", c,
             "] (the input's channels), got ", DimVector(t->sizes()));
  }
  TB_CHECK(running_mean.defined() == running_var.defined(),
           "[batch_norm] running_mean and running_var must both be given or both be undefined");
  TB_CHECK(std::isfinite(eps) && eps >= 0.0, "[batch_norm] eps must be finite and >= 0, got ", eps);
  TB_CHECK(std::isfinite(momentum) && momentum >= 0.0 && momentum <= 1.0,
           "[batch_norm] momentum must be in [0, 1], got ", momentum);
  if (check_count && (training || !running_mean.defined())) {
    const std::int64_t per_channel = c == 0 ? 0 : x.numel() / c;
    TB_CHECK(per_channel > 1, "[batch_norm] expected more than 1 value per channel when ",
             "training, got input of shape ", DimVector(x.sizes()));
  }
}

}  // namespace

Tensor batch_norm(const Tensor& x, const Tensor& running_mean, const Tensor& running_var,
                  const Tensor& weight, const Tensor& bias, bool training, double momentum,
                  double eps) {
  static const auto op = Dispatcher::singleton().typed<sig::BatchNorm>("batch_norm");
  check_batch_norm(x, running_mean, running_var, weight, bias, training, momentum, eps);
  const bool batch_stats = training || !running_mean.defined();
  const ScalarType dt = compute_dtype({&x, &weight, &bias});
  // The running statistics are updated in place: a converted or non-contiguous copy is written
  // back afterwards.
  const Tensor rm = prepared(running_mean, dt);
  const Tensor rv = prepared(running_var, dt);
  auto [y, mean, invstd] = op.call(prepared(x, dt), prepared(weight, dt), prepared(bias, dt), rm,
                                   rv, batch_stats, momentum, eps);
  if (running_mean.defined() && training) {
    for (const auto& [copy, orig] : {std::pair{&rm, &running_mean}, {&rv, &running_var}}) {
      if (copy->impl() == orig->impl()) continue;
      Tensor target = *orig;
      target.copy_(*copy);
    }
  }
  return cast_if_needed(y, result_dtype({&x, &weight, &bias}));
}

std::tuple<Tensor, Tensor, Tensor> batch_norm_backward(const Tensor& grad, const Tensor& x,
                                                       const Tensor& weight, const Tensor& mean,
                                                       const Tensor& invstd, bool training,
                                                       bool with_weight_bias) {
  static const auto op =
      Dispatcher::singleton().typed<sig::BatchNormBackward>("batch_norm_backward");
  check_batch_norm(x, Tensor(), Tensor(), weight, Tensor(), training, 0.0, 0.0, false);
  check_defined("batch_norm_backward", grad, "grad_output");
  check_defined("batch_norm_backward", mean, "mean");
  check_defined("batch_norm_backward", invstd, "invstd");
  TB_CHECK(DimVector(grad.sizes()) == DimVector(x.sizes()),
           "[batch_norm_backward] grad_output must have the input's shape ", DimVector(x.sizes()),
           ", got ", DimVector(grad.sizes()));
  const std::int64_t c = x.size(1);
  TB_CHECK(mean.numel() == c && invstd.numel() == c,
           "[batch_norm_backward] mean and invstd must have ", c, " elements, got ", mean.numel(),
           " and ", invstd.numel());
  const ScalarType dt = compute_dtype({&x, &weight});
  auto [dx, dw, db] = op.call(prepared(grad, dt), prepared(x, dt), prepared(weight, dt),
                              mean.contiguous(), invstd.contiguous(), training, with_weight_bias);
  return {cast_if_needed(dx, x.dtype()),
          dw.defined() && weight.defined() ? cast_if_needed(dw, weight.dtype()) : dw, db};
}

}  // namespace tb::ops
