// The geometry of the convolutional-network ops, written once for the CPU kernels
// (engine/backends/cpu/conv_kernels.cpp) and the CUDA ones (engine/backends/cuda/cuda_conv.cu and
// cuda_conv_ops.cpp): convolution and pooling shapes, PyTorch's averaging windows (the divisor
// with and without count_include_pad) and adaptive windows (floor/ceil bounds), so that the
// parity test compares kernels that agree on every window by construction.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define TB_CONV_HD __host__ __device__
#else
#define TB_CONV_HD
#endif

namespace tb::conv {

/// conv2d's geometry: input [n, c, h, w], weight [o, c/groups, kh, kw], output [n, o, oh, ow].
struct ConvShape {
  std::int64_t n = 0, c = 0, h = 0, w = 0;  ///< input
  std::int64_t o = 0, kh = 0, kw = 0;       ///< weight
  std::int64_t sh = 1, sw = 1, ph = 0, pw = 0, dh = 1, dw = 1, groups = 1;
  std::int64_t oh = 0, ow = 0;  ///< output

  /// Input channels per group.
  TB_CONV_HD std::int64_t cg() const { return c / groups; }
  /// Output channels per group.
  TB_CONV_HD std::int64_t og() const { return o / groups; }
  /// One group's column rows: cg · kh · kw.
  TB_CONV_HD std::int64_t k() const { return cg() * kh * kw; }
  /// Output positions: oh · ow.
  TB_CONV_HD std::int64_t l() const { return oh * ow; }
  /// 1×1, stride 1, no padding: a sample's input plane is its column matrix.
  TB_CONV_HD bool pointwise() const {
    return kh == 1 && kw == 1 && sh == 1 && sw == 1 && ph == 0 && pw == 0;
  }
};

/// The shape of x [n, c, h, w] convolved with weight [o, c/groups, kh, kw] (sizes as given;
/// stride, padding and dilation two values each, height first).
inline ConvShape conv_shape(const std::int64_t* x_sizes, const std::int64_t* w_sizes,
                            const std::int64_t* stride, const std::int64_t* padding,
                            const std::int64_t* dilation, std::int64_t groups) {
  ConvShape g;
  g.n = x_sizes[0];
  g.c = x_sizes[1];
  g.h = x_sizes[2];
  g.w = x_sizes[3];
  g.o = w_sizes[0];
  g.kh = w_sizes[2];
  g.kw = w_sizes[3];
  g.sh = stride[0];
  g.sw = stride[1];
  g.ph = padding[0];
  g.pw = padding[1];
  g.dh = dilation[0];
  g.dw = dilation[1];
  g.groups = groups;
  g.oh = (g.h + 2 * g.ph - g.dh * (g.kh - 1) - 1) / g.sh + 1;
  g.ow = (g.w + 2 * g.pw - g.dw * (g.kw - 1) - 1) / g.sw + 1;
  return g;
}

/// Pooling geometry: `planes` = n·c planes of h×w, window kh×kw, stride, padding; output oh×ow.
struct PoolShape {
  std::int64_t planes = 0, h = 0, w = 0, kh = 0, kw = 0, sh = 1, sw = 1, ph = 0, pw = 0;
  std::int64_t oh = 0, ow = 0;  ///< output
};

/// The pooling shape of x [n, c, h, w] (sizes as given) for a window pooling (max, average):
/// kernel, stride and padding two values each.
inline PoolShape pool_shape(const std::int64_t* x_sizes, const std::int64_t* kernel,
                            const std::int64_t* stride, const std::int64_t* padding) {
  PoolShape g;
  g.planes = x_sizes[0] * x_sizes[1];
  g.h = x_sizes[2];
  g.w = x_sizes[3];
  g.kh = kernel[0];
  g.kw = kernel[1];
  g.sh = stride[0];
  g.sw = stride[1];
  g.ph = padding[0];
  g.pw = padding[1];
  g.oh = (g.h + 2 * g.ph - g.kh) / g.sh + 1;
  g.ow = (g.w + 2 * g.pw - g.kw) / g.sw + 1;
  return g;
}

/// The averaging window of output (oy, ox): rows [y0, y1) and columns [x0, x1) inside the image,
/// and its divisor (PyTorch: the window clipped to the padded image when count_include_pad, to
/// the image otherwise).
struct AvgWindow {
  std::int64_t y0, y1, x0, x1, divisor;
};

TB_CONV_HD inline AvgWindow avg_window(const PoolShape& g, std::int64_t oy, std::int64_t ox,
                                       bool count_include_pad) {
  std::int64_t y0 = oy * g.sh - g.ph, x0 = ox * g.sw - g.pw;
  std::int64_t y1 = y0 + g.kh < g.h + g.ph ? y0 + g.kh : g.h + g.ph;
  std::int64_t x1 = x0 + g.kw < g.w + g.pw ? x0 + g.kw : g.w + g.pw;
  const std::int64_t padded = (y1 - y0) * (x1 - x0);
  y0 = y0 > 0 ? y0 : 0;
  x0 = x0 > 0 ? x0 : 0;
  y1 = y1 < g.h ? y1 : g.h;
  x1 = x1 < g.w ? x1 : g.w;
  return {y0, y1, x0, x1, count_include_pad ? padded : (y1 - y0) * (x1 - x0)};
}

/// Adaptive pooling's window of output i of `out` over an input of `in`: [start, end) with
/// start = floor(i·in/out), end = ceil((i+1)·in/out) (PyTorch's AdaptiveAveragePooling).
TB_CONV_HD inline std::int64_t adaptive_start(std::int64_t i, std::int64_t out, std::int64_t in) {
  return (i * in) / out;
}
TB_CONV_HD inline std::int64_t adaptive_end(std::int64_t i, std::int64_t out, std::int64_t in) {
  return ((i + 1) * in + out - 1) / out;
}

}  // namespace tb::conv
