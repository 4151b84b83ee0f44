// The CUDA backend's convolutional-network ops (host side): conv2d and its gradients as
// im2col/col2im kernels around cuBLAS batched GEMMs (one GEMM per group covering a chunk of
// samples, as PyTorch's slow_conv2d lowers a convolution), pooling and batch norm through the
// kernels of cuda_conv.cu, registered at the CUDA dispatch key.
//
// Not cuDNN: these kernels also run under the CPU emulation of the test build
// (tests/cuda_emu), so the parity test checks every one of them against the CPU's on machines
// without a GPU. The GEMMs are cuBLAS's, which carry nearly all of a convolution's work.
#include <algorithm>
#include <tuple>

#include "engine/backends/cuda/cuda_internal.h"
#include "engine/backends/cuda/cuda_kernels.h"
#include "engine/core/error.h"
#include "engine/core/tensor.h"
#include "engine/dispatch/op_signatures.h"

namespace tb::backends::cuda_detail {

namespace {

using core::IntList;
using core::ScalarType;
using core::Tensor;
namespace kern = tb::cuda;

// The ops the convolution is made of, through the dispatcher (backends do not include ops/): the
// CUDA kernels of bmm (cuBLAS), add_ and sum.
Tensor bmm(const Tensor& a, const Tensor& b) {
  static const auto op = dispatch::Dispatcher::singleton().typed<ops::sig::Binary>("bmm");
  return op.call(a, b);
}

void add_(Tensor& a, const Tensor& b) {
  static const auto op =
      dispatch::Dispatcher::singleton().typed<ops::sig::InplaceBinaryAlpha>("add_");
  op.call(a, b, 1);
}

Tensor sum(const Tensor& t, IntList dims) {
  static const auto op = dispatch::Dispatcher::singleton().typed<ops::sig::Reduce>("sum");
  return op.call(t, dims, false);
}

void require_float_or_double(const Tensor& t, const char* op) {
  TB_CHECK_T(NotImplementedError,
             t.dtype() == ScalarType::Float32 || t.dtype() == ScalarType::Float64, "[", op,
             "] the CUDA kernel takes float32 or float64 tensors, got ", t.dtype());
}

const void* ptr_or_null(const Tensor& t) {
  return t.defined() ? t.data_ptr() : nullptr;
}

void* mut_ptr_or_null(const Tensor& t) {
  return t.defined() ? t.data_ptr() : nullptr;
}

// ---- conv2d -------------------------------------------------------------------------------------

kern::ConvShape conv_shape(const Tensor& x, const Tensor& weight, IntList stride, IntList padding,
                           IntList dilation, std::int64_t groups) {
  return conv::conv_shape(x.sizes().data(), weight.sizes().data(), stride.data(), padding.data(),
                          dilation.data(), groups);
}

// Samples per chunk: at most kChunkSamples, and the column buffer [groups, K, chunk·L] within
// kColumnBytes (one sample at least). 128 samples of even a 4×4 map are GEMMs 2,048 columns wide.
constexpr std::int64_t kColumnBytes = std::int64_t{256} << 20;
constexpr std::int64_t kChunkSamples = 128;

std::int64_t chunk_samples(const kern::ConvShape& g, std::int64_t elem_size) {
  const std::int64_t per_sample = std::max<std::int64_t>(
      g.c * g.kh * g.kw * g.oh * g.ow * elem_size, 1);  // groups·K·L elements
  return std::clamp<std::int64_t>(kColumnBytes / per_sample, 1,
                                  std::clamp<std::int64_t>(g.n, 1, kChunkSamples));
}

// The first elems elements of buffer, viewed with `sizes` (a contiguous prefix).
Tensor prefix(const Tensor& buffer, IntList sizes) {
  std::int64_t elems = 1;
  for (const auto s : sizes)
    elems *= s;
  return buffer.view({-1}).narrow(0, 0, elems).view(sizes);
}

struct ConvChunks {
  kern::ConvShape g;
  std::int64_t k = 0, l = 0, og = 0, chunk = 0;
  Tensor col;  // [groups, K, chunk·L]
};

ConvChunks conv_chunks(const Tensor& x, const Tensor& weight, IntList stride, IntList padding,
                       IntList dilation, std::int64_t groups) {
  ConvChunks c;
  c.g = conv_shape(x, weight, stride, padding, dilation, groups);
  c.k = c.g.k();
  c.l = c.g.l();
  c.og = c.g.og();
  c.chunk = chunk_samples(c.g, static_cast<std::int64_t>(core::element_size(x.dtype())));
  c.col = Tensor::empty({groups, c.k, c.chunk * c.l}, x.dtype(), x.device());
  return c;
}

Tensor conv2d_kernel(const Tensor& x, const Tensor& weight, const Tensor& bias, IntList stride,
                     IntList padding, IntList dilation, std::int64_t groups) {
  require_float_or_double(x, "conv2d");
  const kern::ConvShape shape = conv_shape(x, weight, stride, padding, dilation, groups);
  Tensor y = Tensor::empty({shape.n, shape.o, shape.oh, shape.ow}, x.dtype(), x.device());
  if (y.numel() == 0) return y;
  DeviceGuard guard(x.device().index());
  ConvChunks c = conv_chunks(x, weight, stride, padding, dilation, groups);
  const Tensor w3 = weight.view({groups, c.og, c.k});
  for (std::int64_t n0 = 0; n0 < shape.n; n0 += c.chunk) {
    const std::int64_t b = std::min(c.chunk, shape.n - n0);
    const Tensor col = prefix(c.col, {groups, c.k, b * c.l});
    check_launch(kern::launch_im2col(st(x), c.g, x.data_ptr(), col.data_ptr(), n0, b), "conv2d");
    // [groups, Og, b·L] = W_g · col_g, then into y's samples as [b, O, L].
    const Tensor prod = bmm(w3, col);
    Tensor out = y.narrow(0, n0, b).view({b, shape.o, c.l});
    out.copy_(prod.view({shape.o, b, c.l}).permute({1, 0, 2}));
  }
  if (bias.defined()) add_(y, bias.view({1, shape.o, 1, 1}));
  return y;
}

std::tuple<Tensor, Tensor, Tensor> conv2d_backward_kernel(const Tensor& dy, const Tensor& x,
                                                          const Tensor& weight, IntList stride,
                                                          IntList padding, IntList dilation,
                                                          std::int64_t groups, bool with_bias,
                                                          bool with_input) {
  require_float_or_double(x, "conv2d_backward");
  const kern::ConvShape shape = conv_shape(x, weight, stride, padding, dilation, groups);
  Tensor dx = with_input ? Tensor::empty(x.sizes(), x.dtype(), x.device()) : Tensor();
  Tensor db = with_bias ? sum(dy, {0, 2, 3}) : Tensor();
  DeviceGuard guard(x.device().index());
  ConvChunks c = conv_chunks(x, weight, stride, padding, dilation, groups);
  const Tensor w3 = weight.view({groups, c.og, c.k});
  const Tensor w3t = w3.transpose(1, 2);  // [groups, K, Og]
  Tensor dw3;
  for (std::int64_t n0 = 0; n0 < shape.n; n0 += c.chunk) {
    const std::int64_t b = std::min(c.chunk, shape.n - n0);
    const Tensor col = prefix(c.col, {groups, c.k, b * c.l});
    check_launch(kern::launch_im2col(st(x), c.g, x.data_ptr(), col.data_ptr(), n0, b),
                 "conv2d_backward");
    // dy's samples as [groups, Og, b·L] (the columns' order).
    const Tensor dyg = dy.narrow(0, n0, b)
                           .view({b, shape.o, c.l})
                           .permute({1, 0, 2})
                           .contiguous()
                           .view({groups, c.og, b * c.l});
    // dweight += dy_g · col_gᵀ, chunk after chunk (a fixed order).
    const Tensor part = bmm(dyg, col.transpose(1, 2));
    if (dw3.defined()) {
      add_(dw3, part);
    } else {
      dw3 = part;
    }
    // dx: columns = W_gᵀ · dy_g, gathered back into the samples.
    if (!with_input) continue;
    const Tensor dcol = bmm(w3t, dyg);
    check_launch(kern::launch_col2im(st(x), c.g, dcol.data_ptr(), dx.data_ptr(), n0, b),
                 "conv2d_backward");
  }
  Tensor dw = dw3.defined() ? dw3.view(weight.sizes())
                            : Tensor::empty(weight.sizes(), x.dtype(), x.device()).zero_();
  return {dx, dw, db};
}

// ---- pooling ------------------------------------------------------------------------------------

kern::PoolShape window_pool_shape(const Tensor& x, IntList kernel, IntList stride,
                                  IntList padding) {
  return conv::pool_shape(x.sizes().data(), kernel.data(), stride.data(), padding.data());
}

// Adaptive pooling: planes and sizes only (no window parameters).
kern::PoolShape adaptive_shape(const Tensor& x, std::int64_t oh, std::int64_t ow) {
  kern::PoolShape g;
  g.planes = x.size(0) * x.size(1);
  g.h = x.size(2);
  g.w = x.size(3);
  g.oh = oh;
  g.ow = ow;
  return g;
}

std::tuple<Tensor, Tensor> max_pool2d_kernel(const Tensor& x, IntList kernel, IntList stride,
                                             IntList padding) {
  require_float_or_double(x, "max_pool2d");
  const kern::PoolShape g = window_pool_shape(x, kernel, stride, padding);
  Tensor y = Tensor::empty({x.size(0), x.size(1), g.oh, g.ow}, x.dtype(), x.device());
  Tensor idx = Tensor::empty({x.size(0), x.size(1), g.oh, g.ow}, ScalarType::Int64, x.device());
  DeviceGuard guard(x.device().index());
  check_launch(
      kern::launch_max_pool2d(st(x), g, x.data_ptr(), y.data_ptr(), idx.data_ptr<std::int64_t>()),
      "max_pool2d");
  return {y, idx};
}

Tensor max_pool2d_backward_kernel(const Tensor& dy, const Tensor& x, const Tensor& indices) {
  require_float_or_double(x, "max_pool2d_backward");
  same_device("max_pool2d_backward", x, indices);
  Tensor dx = Tensor::empty(x.sizes(), x.dtype(), x.device());
  DeviceGuard guard(x.device().index());
  check_launch(kern::launch_max_pool2d_backward(st(x), x.size(0) * x.size(1), x.size(2) * x.size(3),
                                                dy.size(2) * dy.size(3), dy.data_ptr(),
                                                indices.data_ptr<std::int64_t>(), dx.data_ptr()),
               "max_pool2d_backward");
  return dx;
}

Tensor avg_pool2d_kernel(const Tensor& x, IntList kernel, IntList stride, IntList padding,
                         bool count_include_pad) {
  require_float_or_double(x, "avg_pool2d");
  const kern::PoolShape g = window_pool_shape(x, kernel, stride, padding);
  Tensor y = Tensor::empty({x.size(0), x.size(1), g.oh, g.ow}, x.dtype(), x.device());
  DeviceGuard guard(x.device().index());
  check_launch(kern::launch_avg_pool2d(st(x), g, count_include_pad, x.data_ptr(), y.data_ptr()),
               "avg_pool2d");
  return y;
}

Tensor avg_pool2d_backward_kernel(const Tensor& dy, const Tensor& x, IntList kernel, IntList stride,
                                  IntList padding, bool count_include_pad) {
  require_float_or_double(x, "avg_pool2d_backward");
  const kern::PoolShape g = window_pool_shape(x, kernel, stride, padding);
  Tensor dx = Tensor::empty(x.sizes(), x.dtype(), x.device());
  DeviceGuard guard(x.device().index());
  check_launch(
      kern::launch_avg_pool2d_backward(st(x), g, count_include_pad, dy.data_ptr(), dx.data_ptr()),
      "avg_pool2d_backward");
  return dx;
}

Tensor adaptive_avg_pool2d_kernel(const Tensor& x, IntList output_size) {
  require_float_or_double(x, "adaptive_avg_pool2d");
  const kern::PoolShape g = adaptive_shape(x, output_size[0], output_size[1]);
  Tensor y = Tensor::empty({x.size(0), x.size(1), g.oh, g.ow}, x.dtype(), x.device());
  DeviceGuard guard(x.device().index());
  check_launch(kern::launch_adaptive_avg_pool2d(st(x), g, x.data_ptr(), y.data_ptr()),
               "adaptive_avg_pool2d");
  return y;
}

Tensor adaptive_avg_pool2d_backward_kernel(const Tensor& dy, const Tensor& x) {
  require_float_or_double(x, "adaptive_avg_pool2d_backward");
  const kern::PoolShape g = adaptive_shape(x, dy.size(2), dy.size(3));
  Tensor dx = Tensor::empty(x.sizes(), x.dtype(), x.device());
  DeviceGuard guard(x.device().index());
  check_launch(kern::launch_adaptive_avg_pool2d_backward(st(x), g, dy.data_ptr(), dx.data_ptr()),
               "adaptive_avg_pool2d_backward");
  return dx;
}

// ---- batch norm ---------------------------------------------------------------------------------

// x viewed as [n, c, s].
std::int64_t trailing(const Tensor& x) {
  std::int64_t s = 1;
  for (std::int64_t d = 2; d < x.dim(); ++d)
    s *= x.size(d);
  return s;
}

std::tuple<Tensor, Tensor, Tensor> batch_norm_kernel(const Tensor& x, const Tensor& weight,
                                                     const Tensor& bias, const Tensor& running_mean,
                                                     const Tensor& running_var, bool training,
                                                     double momentum, double eps) {
  require_float_or_double(x, "batch_norm");
  const std::int64_t c = x.size(1);
  Tensor y = Tensor::empty(x.sizes(), x.dtype(), x.device());
  Tensor mean = Tensor::empty({c}, x.dtype(), x.device());
  Tensor invstd = Tensor::empty({c}, x.dtype(), x.device());
  DeviceGuard guard(x.device().index());
  check_launch(kern::launch_batch_norm(
                   st(x), x.size(0), c, trailing(x), x.data_ptr(), ptr_or_null(weight),
                   ptr_or_null(bias), mut_ptr_or_null(running_mean), mut_ptr_or_null(running_var),
                   training, momentum, eps, y.data_ptr(), mean.data_ptr(), invstd.data_ptr()),
               "batch_norm");
  return {y, mean, invstd};
}

std::tuple<Tensor, Tensor, Tensor> batch_norm_backward_kernel(const Tensor& dy, const Tensor& x,
                                                              const Tensor& weight,
                                                              const Tensor& mean_in,
                                                              const Tensor& invstd_in,
                                                              bool training, bool with_wb) {
  require_float_or_double(x, "batch_norm_backward");
  const std::int64_t c = x.size(1);
  const Tensor mean = mean_in.to(x.dtype()).contiguous();
  const Tensor invstd = invstd_in.to(x.dtype()).contiguous();
  Tensor dx = Tensor::empty(x.sizes(), x.dtype(), x.device());
  Tensor dw = with_wb ? Tensor::empty({c}, x.dtype(), x.device()) : Tensor();
  Tensor db = with_wb ? Tensor::empty({c}, x.dtype(), x.device()) : Tensor();
  const Tensor sums = Tensor::empty({2 * c}, ScalarType::Float64, x.device());
  DeviceGuard guard(x.device().index());
  check_launch(
      kern::launch_batch_norm_backward(st(x), x.size(0), c, trailing(x), dy.data_ptr(),
                                       x.data_ptr(), ptr_or_null(weight), mean.data_ptr(),
                                       invstd.data_ptr(), training, sums.data_ptr<double>(),
                                       dx.data_ptr(), mut_ptr_or_null(dw), mut_ptr_or_null(db)),
      "batch_norm_backward");
  return {dx, dw, db};
}

}  // namespace

void register_cuda_conv_ops(dispatch::Dispatcher& d) {
  namespace sig = ops::sig;
  const auto key = dispatch::DispatchKey::CUDA;
  d.impl<sig::Conv2d>("conv2d", key, conv2d_kernel).detach();
  d.impl<sig::Conv2dBackward>("conv2d_backward", key, conv2d_backward_kernel).detach();
  d.impl<sig::MaxPool2d>("max_pool2d", key, max_pool2d_kernel).detach();
  d.impl<sig::MaxPool2dBackward>("max_pool2d_backward", key, max_pool2d_backward_kernel).detach();
  d.impl<sig::AvgPool2d>("avg_pool2d", key, avg_pool2d_kernel).detach();
  d.impl<sig::AvgPool2dBackward>("avg_pool2d_backward", key, avg_pool2d_backward_kernel).detach();
  d.impl<sig::AdaptiveAvgPool2d>("adaptive_avg_pool2d", key, adaptive_avg_pool2d_kernel).detach();
  d.impl<sig::Binary>("adaptive_avg_pool2d_backward", key, adaptive_avg_pool2d_backward_kernel)
      .detach();
  d.impl<sig::BatchNorm>("batch_norm", key, batch_norm_kernel).detach();
  d.impl<sig::BatchNormBackward>("batch_norm_backward", key, batch_norm_backward_kernel).detach();
}

}  // namespace tb::backends::cuda_detail
