// The convolutional-network kernels on CUDA: im2col/col2im for conv2d (whose GEMMs run on cuBLAS,
// cuda_conv_ops.cpp), max/avg/adaptive-average pooling forward and backward, and batch norm
// forward and backward. Contiguous NCHW float32/float64 (the public ops convert other dtypes).
//
// Determinism: no atomics. Every output element is written by one thread that reads its inputs
// in a fixed order — gradients gather (col2im, average pooling) instead of scattering; max
// pooling's gradient scatters within its plane from one thread per plane; batch-norm statistics
// are per-channel block sums in double.
//
// References: PyTorch's aten/src/ATen/native/cuda/{im2col.cuh, DilatedMaxPool2d.cu,
// AveragePool2d.cu, AdaptiveAveragePooling.cu, Normalization.cuh}; semantics are the CPU
// kernels' (engine/backends/cpu/conv_kernels.cpp), which the parity test compares against.
#include <cmath>

#include "engine/backends/cuda/cuda_device.cuh"

namespace tb::cuda {

namespace {

using namespace dev;  // NOLINT(google-build-using-namespace): kernel-file helpers

// ---- conv2d: im2col / col2im --------------------------------------------------------------------

template <typename T>
__global__ void im2col_kernel(ConvShape g, const T* x, T* col, std::int64_t n0, std::int64_t b) {
  const std::int64_t cg = g.c / g.groups;
  const std::int64_t k = cg * g.kh * g.kw;
  const std::int64_t l = g.oh * g.ow;
  const std::int64_t cols = b * l;
  const std::int64_t total = g.groups * k * cols;
  for (std::int64_t idx = global_index(); idx < total; idx += global_stride()) {
    const std::int64_t column = idx % cols;
    const std::int64_t row = (idx / cols) % k;
    const std::int64_t grp = idx / (cols * k);
    const std::int64_t sample = n0 + column / l;
    const std::int64_t oy = (column % l) / g.ow;
    const std::int64_t ox = column % g.ow;
    const std::int64_t j = row % g.kw;
    const std::int64_t i = (row / g.kw) % g.kh;
    const std::int64_t c = grp * cg + row / (g.kh * g.kw);
    const std::int64_t iy = oy * g.sh - g.ph + i * g.dh;
    const std::int64_t ix = ox * g.sw - g.pw + j * g.dw;
    col[idx] = iy >= 0 && iy < g.h && ix >= 0 && ix < g.w
                   ? x[((sample * g.c + c) * g.h + iy) * g.w + ix]
                   : T(0);
  }
}

template <typename T>
__global__ void col2im_kernel(ConvShape g, const T* col, T* dx, std::int64_t n0, std::int64_t b) {
  const std::int64_t cg = g.c / g.groups;
  const std::int64_t k = cg * g.kh * g.kw;
  const std::int64_t l = g.oh * g.ow;
  const std::int64_t cols = b * l;
  const std::int64_t total = b * g.c * g.h * g.w;
  T* out = dx + n0 * g.c * g.h * g.w;
  for (std::int64_t idx = global_index(); idx < total; idx += global_stride()) {
    const std::int64_t ix = idx % g.w;
    const std::int64_t iy = (idx / g.w) % g.h;
    const std::int64_t ch = (idx / (g.w * g.h)) % g.c;
    const std::int64_t sample = idx / (g.w * g.h * g.c);
    const std::int64_t grp = ch / cg;
    const T* base = col + grp * k * cols + sample * l;
    const std::int64_t row0 = (ch % cg) * g.kh * g.kw;
    T acc = 0;
    for (std::int64_t i = 0; i < g.kh; ++i) {
      const std::int64_t ty = iy + g.ph - i * g.dh;
      if (ty < 0 || ty % g.sh != 0 || ty / g.sh >= g.oh) continue;
      const std::int64_t oy = ty / g.sh;
      for (std::int64_t j = 0; j < g.kw; ++j) {
        const std::int64_t tx = ix + g.pw - j * g.dw;
        if (tx < 0 || tx % g.sw != 0 || tx / g.sw >= g.ow) continue;
        acc += base[(row0 + i * g.kw + j) * cols + oy * g.ow + tx / g.sw];
      }
    }
    out[idx] = acc;
  }
}

// ---- pooling ------------------------------------------------------------------------------------

template <typename T>
__global__ void max_pool_kernel(PoolShape g, const T* x, T* y, std::int64_t* indices) {
  const std::int64_t total = g.planes * g.oh * g.ow;
  for (std::int64_t idx = global_index(); idx < total; idx += global_stride()) {
    const std::int64_t ox = idx % g.ow;
    const std::int64_t oy = (idx / g.ow) % g.oh;
    const T* plane = x + (idx / (g.ow * g.oh)) * g.h * g.w;
    const std::int64_t y0 = oy * g.sh - g.ph > 0 ? oy * g.sh - g.ph : 0;
    const std::int64_t y1 = oy * g.sh - g.ph + g.kh < g.h ? oy * g.sh - g.ph + g.kh : g.h;
    const std::int64_t x0 = ox * g.sw - g.pw > 0 ? ox * g.sw - g.pw : 0;
    const std::int64_t x1 = ox * g.sw - g.pw + g.kw < g.w ? ox * g.sw - g.pw + g.kw : g.w;
    T best = -INFINITY;
    std::int64_t at = y0 * g.w + x0;
    bool nan = false;
    for (std::int64_t iy = y0; iy < y1 && !nan; ++iy) {
      for (std::int64_t ix = x0; ix < x1; ++ix) {
        const T v = plane[iy * g.w + ix];
        if (v > best || v != v) {  // the first maximum; a NaN wins and ends the scan
          best = v;
          at = iy * g.w + ix;
          if (v != v) {
            nan = true;
            break;
          }
        }
      }
    }
    y[idx] = best;
    indices[idx] = at;
  }
}

template <typename T>
__global__ void max_pool_backward_kernel(std::int64_t planes, std::int64_t hw, std::int64_t ohw,
                                         const T* dy, const std::int64_t* indices, T* dx) {
  for (std::int64_t p = global_index(); p < planes; p += global_stride()) {
    T* plane = dx + p * hw;
    for (std::int64_t i = 0; i < hw; ++i)
      plane[i] = T(0);
    for (std::int64_t i = 0; i < ohw; ++i) {
      const std::int64_t at = indices[p * ohw + i];
      if (at >= 0 && at < hw) plane[at] += dy[p * ohw + i];
    }
  }
}

using conv::adaptive_end;
using conv::adaptive_start;
using conv::avg_window;
using conv::AvgWindow;

template <typename T>
__global__ void avg_pool_kernel(PoolShape g, bool count_include_pad, const T* x, T* y) {
  const std::int64_t total = g.planes * g.oh * g.ow;
  for (std::int64_t idx = global_index(); idx < total; idx += global_stride()) {
    const std::int64_t ox = idx % g.ow;
    const std::int64_t oy = (idx / g.ow) % g.oh;
    const T* plane = x + (idx / (g.ow * g.oh)) * g.h * g.w;
    const AvgWindow a = avg_window(g, oy, ox, count_include_pad);
    T s = 0;
    for (std::int64_t iy = a.y0; iy < a.y1; ++iy)
      for (std::int64_t ix = a.x0; ix < a.x1; ++ix)
        s += plane[iy * g.w + ix];
    y[idx] = s / static_cast<T>(a.divisor);
  }
}

// Outputs whose (unclipped) window covers input row i: [first, last] of o·s − p ≤ i < o·s − p + k.
__device__ inline void covering(std::int64_t i, std::int64_t k, std::int64_t s, std::int64_t p,
                                std::int64_t out, std::int64_t& first, std::int64_t& last) {
  const std::int64_t lo = i + p - k + 1;  // o·s ≥ lo
  first = lo <= 0 ? 0 : (lo + s - 1) / s;
  last = (i + p) / s;
  if (last > out - 1) last = out - 1;
}

template <typename T>
__global__ void avg_pool_backward_kernel(PoolShape g, bool count_include_pad, const T* dy, T* dx) {
  const std::int64_t total = g.planes * g.h * g.w;
  for (std::int64_t idx = global_index(); idx < total; idx += global_stride()) {
    const std::int64_t ix = idx % g.w;
    const std::int64_t iy = (idx / g.w) % g.h;
    const T* grad = dy + (idx / (g.w * g.h)) * g.oh * g.ow;
    std::int64_t oy0, oy1, ox0, ox1;
    covering(iy, g.kh, g.sh, g.ph, g.oh, oy0, oy1);
    covering(ix, g.kw, g.sw, g.pw, g.ow, ox0, ox1);
    T acc = 0;
    for (std::int64_t oy = oy0; oy <= oy1; ++oy) {
      for (std::int64_t ox = ox0; ox <= ox1; ++ox) {
        const AvgWindow a = avg_window(g, oy, ox, count_include_pad);
        if (iy < a.y0 || iy >= a.y1 || ix < a.x0 || ix >= a.x1) continue;
        acc += grad[oy * g.ow + ox] / static_cast<T>(a.divisor);
      }
    }
    dx[idx] = acc;
  }
}

template <typename T>
__global__ void adaptive_avg_pool_kernel(PoolShape g, const T* x, T* y) {
  const std::int64_t total = g.planes * g.oh * g.ow;
  for (std::int64_t idx = global_index(); idx < total; idx += global_stride()) {
    const std::int64_t ox = idx % g.ow;
    const std::int64_t oy = (idx / g.ow) % g.oh;
    const T* plane = x + (idx / (g.ow * g.oh)) * g.h * g.w;
    const std::int64_t y0 = adaptive_start(oy, g.oh, g.h), y1 = adaptive_end(oy, g.oh, g.h);
    const std::int64_t x0 = adaptive_start(ox, g.ow, g.w), x1 = adaptive_end(ox, g.ow, g.w);
    T s = 0;
    for (std::int64_t iy = y0; iy < y1; ++iy)
      for (std::int64_t ix = x0; ix < x1; ++ix)
        s += plane[iy * g.w + ix];
    y[idx] = s / static_cast<T>((y1 - y0) * (x1 - x0));
  }
}

template <typename T>
__global__ void adaptive_avg_pool_backward_kernel(PoolShape g, const T* dy, T* dx) {
  const std::int64_t total = g.planes * g.h * g.w;
  for (std::int64_t idx = global_index(); idx < total; idx += global_stride()) {
    const std::int64_t ix = idx % g.w;
    const std::int64_t iy = (idx / g.w) % g.h;
    const T* grad = dy + (idx / (g.w * g.h)) * g.oh * g.ow;
    T acc = 0;
    // The windows are ordered; the first that can hold row iy starts at floor(iy·oh/h).
    for (std::int64_t oy = (iy * g.oh) / g.h; oy < g.oh && adaptive_start(oy, g.oh, g.h) <= iy;
         ++oy) {
      const std::int64_t y0 = adaptive_start(oy, g.oh, g.h), y1 = adaptive_end(oy, g.oh, g.h);
      if (iy < y0 || iy >= y1) continue;
      for (std::int64_t ox = (ix * g.ow) / g.w; ox < g.ow && adaptive_start(ox, g.ow, g.w) <= ix;
           ++ox) {
        const std::int64_t x0 = adaptive_start(ox, g.ow, g.w), x1 = adaptive_end(ox, g.ow, g.w);
        if (ix < x0 || ix >= x1) continue;
        acc += grad[oy * g.ow + ox] / static_cast<T>((y1 - y0) * (x1 - x0));
      }
    }
    dx[idx] = acc;
  }
}

// ---- batch norm ---------------------------------------------------------------------------------

// Σ f(element) over channel ch of x viewed as [n, c, s], in double, by the whole block.
template <typename F>
__device__ inline double channel_sum(std::int64_t n, std::int64_t c, std::int64_t s,
                                     std::int64_t ch, F f) {
  double acc = 0.0;
  for (std::int64_t i = threadIdx.x; i < n * s; i += blockDim.x)
    acc += f(((i / s) * c + ch) * s + i % s);
  return block_sum(acc);
}

template <typename T>
__global__ void batch_norm_stats_kernel(std::int64_t n, std::int64_t c, std::int64_t s, const T* x,
                                        T* running_mean, T* running_var, bool training,
                                        double momentum, double eps, T* mean, T* invstd) {
  const std::int64_t ch = blockIdx.x;
  double mu = 0.0, var = 0.0;
  if (training) {
    const double m = static_cast<double>(n * s);
    mu = channel_sum(n, c, s, ch, [x](std::int64_t i) { return static_cast<double>(x[i]); }) / m;
    var = channel_sum(n, c, s, ch,
                      [x, mu](std::int64_t i) {
                        const double d = static_cast<double>(x[i]) - mu;
                        return d * d;
                      }) /
          m;
    if (threadIdx.x == 0 && running_mean != nullptr) {
      running_mean[ch] =
          static_cast<T>((1.0 - momentum) * static_cast<double>(running_mean[ch]) + momentum * mu);
      running_var[ch] = static_cast<T>((1.0 - momentum) * static_cast<double>(running_var[ch]) +
                                       momentum * var * m / (m - 1.0));
    }
  } else {
    mu = static_cast<double>(running_mean[ch]);
    var = static_cast<double>(running_var[ch]);
  }
  if (threadIdx.x == 0) {
    mean[ch] = static_cast<T>(mu);
    invstd[ch] = static_cast<T>(1.0 / ::sqrt(var + eps));
  }
}

template <typename T>
__global__ void batch_norm_apply_kernel(std::int64_t total, std::int64_t c, std::int64_t s,
                                        const T* x, const T* weight, const T* bias, const T* mean,
                                        const T* invstd, T* y) {
  for (std::int64_t idx = global_index(); idx < total; idx += global_stride()) {
    const std::int64_t ch = (idx / s) % c;
    // y = x·scale + shift with the CPU's per-channel scale and shift (made in double).
    const double is = static_cast<double>(invstd[ch]);
    const double w = weight != nullptr ? static_cast<double>(weight[ch]) : 1.0;
    const double b = bias != nullptr ? static_cast<double>(bias[ch]) : 0.0;
    const auto scale = static_cast<T>(w * is);
    const auto shift = static_cast<T>(b - static_cast<double>(mean[ch]) * w * is);
    y[idx] = x[idx] * scale + shift;
  }
}

template <typename T>
__global__ void batch_norm_grad_sums_kernel(std::int64_t n, std::int64_t c, std::int64_t s,
                                            const T* dy, const T* x, const T* mean, const T* invstd,
                                            double* sums, T* dw, T* db) {
  const std::int64_t ch = blockIdx.x;
  const double mu = static_cast<double>(mean[ch]);
  const double sum_g =
      channel_sum(n, c, s, ch, [dy](std::int64_t i) { return static_cast<double>(dy[i]); });
  const double sum_gx = channel_sum(n, c, s, ch, [dy, x, mu](std::int64_t i) {
    return static_cast<double>(dy[i]) * (static_cast<double>(x[i]) - mu);
  });
  if (threadIdx.x == 0) {
    sums[2 * ch] = sum_g;
    sums[2 * ch + 1] = sum_gx;
    if (dw != nullptr) dw[ch] = static_cast<T>(sum_gx * static_cast<double>(invstd[ch]));
    if (db != nullptr) db[ch] = static_cast<T>(sum_g);
  }
}

template <typename T>
__global__ void batch_norm_dx_kernel(std::int64_t total, std::int64_t c, std::int64_t s,
                                     double count, const T* dy, const T* x, const T* weight,
                                     const T* mean, const T* invstd, const double* sums,
                                     bool training, T* dx) {
  for (std::int64_t idx = global_index(); idx < total; idx += global_stride()) {
    const std::int64_t ch = (idx / s) % c;
    const double is = static_cast<double>(invstd[ch]);
    const double k = (weight != nullptr ? static_cast<double>(weight[ch]) : 1.0) * is;
    const double g = static_cast<double>(dy[idx]);
    if (training) {
      const double xc = static_cast<double>(x[idx]) - static_cast<double>(mean[ch]);
      dx[idx] =
          static_cast<T>(k * (g - sums[2 * ch] / count - xc * sums[2 * ch + 1] * is * is / count));
    } else {
      dx[idx] = static_cast<T>(k * g);
    }
  }
}

}  // namespace

int launch_im2col(int st, const ConvShape& g, const void* x, void* col, std::int64_t n0,
                  std::int64_t b) {
  const std::int64_t total = g.c * g.kh * g.kw * b * g.oh * g.ow;
  if (total == 0) return 0;
  return dispatch_float_double(st, [&](auto tag) {
    using T = decltype(tag);
    TB_LAUNCH(blocks_for(total), kThreads, im2col_kernel<T>)
    (g, static_cast<const T*>(x), static_cast<T*>(col), n0, b);
    return status();
  });
}

int launch_col2im(int st, const ConvShape& g, const void* col, void* dx, std::int64_t n0,
                  std::int64_t b) {
  const std::int64_t total = b * g.c * g.h * g.w;
  if (total == 0) return 0;
  return dispatch_float_double(st, [&](auto tag) {
    using T = decltype(tag);
    TB_LAUNCH(blocks_for(total), kThreads, col2im_kernel<T>)
    (g, static_cast<const T*>(col), static_cast<T*>(dx), n0, b);
    return status();
  });
}

int launch_max_pool2d(int st, const PoolShape& g, const void* x, void* y, std::int64_t* indices) {
  const std::int64_t total = g.planes * g.oh * g.ow;
  if (total == 0) return 0;
  return dispatch_float_double(st, [&](auto tag) {
    using T = decltype(tag);
    TB_LAUNCH(blocks_for(total), kThreads, max_pool_kernel<T>)
    (g, static_cast<const T*>(x), static_cast<T*>(y), indices);
    return status();
  });
}

int launch_max_pool2d_backward(int st, std::int64_t planes, std::int64_t hw, std::int64_t ohw,
                               const void* dy, const std::int64_t* indices, void* dx) {
  if (planes * hw == 0) return 0;
  return dispatch_float_double(st, [&](auto tag) {
    using T = decltype(tag);
    TB_LAUNCH(blocks_for(planes), kThreads, max_pool_backward_kernel<T>)
    (planes, hw, ohw, static_cast<const T*>(dy), indices, static_cast<T*>(dx));
    return status();
  });
}

int launch_avg_pool2d(int st, const PoolShape& g, bool count_include_pad, const void* x, void* y) {
  const std::int64_t total = g.planes * g.oh * g.ow;
  if (total == 0) return 0;
  return dispatch_float_double(st, [&](auto tag) {
    using T = decltype(tag);
    TB_LAUNCH(blocks_for(total), kThreads, avg_pool_kernel<T>)
    (g, count_include_pad, static_cast<const T*>(x), static_cast<T*>(y));
    return status();
  });
}

int launch_avg_pool2d_backward(int st, const PoolShape& g, bool count_include_pad, const void* dy,
                               void* dx) {
  const std::int64_t total = g.planes * g.h * g.w;
  if (total == 0) return 0;
  return dispatch_float_double(st, [&](auto tag) {
    using T = decltype(tag);
    TB_LAUNCH(blocks_for(total), kThreads, avg_pool_backward_kernel<T>)
    (g, count_include_pad, static_cast<const T*>(dy), static_cast<T*>(dx));
    return status();
  });
}

int launch_adaptive_avg_pool2d(int st, const PoolShape& g, const void* x, void* y) {
  const std::int64_t total = g.planes * g.oh * g.ow;
  if (total == 0) return 0;
  return dispatch_float_double(st, [&](auto tag) {
    using T = decltype(tag);
    TB_LAUNCH(blocks_for(total), kThreads, adaptive_avg_pool_kernel<T>)
    (g, static_cast<const T*>(x), static_cast<T*>(y));
    return status();
  });
}

int launch_adaptive_avg_pool2d_backward(int st, const PoolShape& g, const void* dy, void* dx) {
  const std::int64_t total = g.planes * g.h * g.w;
  if (total == 0) return 0;
  return dispatch_float_double(st, [&](auto tag) {
    using T = decltype(tag);
    TB_LAUNCH(blocks_for(total), kThreads, adaptive_avg_pool_backward_kernel<T>)
    (g, static_cast<const T*>(dy), static_cast<T*>(dx));
    return status();
  });
}

int launch_batch_norm(int st, std::int64_t n, std::int64_t c, std::int64_t s, const void* x,
                      const void* weight, const void* bias, void* running_mean, void* running_var,
                      bool training, double momentum, double eps, void* y, void* mean,
                      void* invstd) {
  if (c == 0) return 0;
  return dispatch_float_double(st, [&](auto tag) {
    using T = decltype(tag);
    TB_LAUNCH(static_cast<unsigned>(c), kThreads, batch_norm_stats_kernel<T>)
    (n, c, s, static_cast<const T*>(x), static_cast<T*>(running_mean), static_cast<T*>(running_var),
     training, momentum, eps, static_cast<T*>(mean), static_cast<T*>(invstd));
    if (const int err = status(); err != 0) return err;
    const std::int64_t total = n * c * s;
    if (total == 0) return 0;
    TB_LAUNCH(blocks_for(total), kThreads, batch_norm_apply_kernel<T>)
    (total, c, s, static_cast<const T*>(x), static_cast<const T*>(weight),
     static_cast<const T*>(bias), static_cast<const T*>(mean), static_cast<const T*>(invstd),
     static_cast<T*>(y));
    return status();
  });
}

int launch_batch_norm_backward(int st, std::int64_t n, std::int64_t c, std::int64_t s,
                               const void* dy, const void* x, const void* weight, const void* mean,
                               const void* invstd, bool training, double* sums, void* dx, void* dw,
                               void* db) {
  if (c == 0) return 0;
  return dispatch_float_double(st, [&](auto tag) {
    using T = decltype(tag);
    const auto* gp = static_cast<const T*>(dy);
    const auto* xp = static_cast<const T*>(x);
    const auto* mp = static_cast<const T*>(mean);
    const auto* ip = static_cast<const T*>(invstd);
    TB_LAUNCH(static_cast<unsigned>(c), kThreads, batch_norm_grad_sums_kernel<T>)
    (n, c, s, gp, xp, mp, ip, sums, static_cast<T*>(dw), static_cast<T*>(db));
    if (const int err = status(); err != 0) return err;
    const std::int64_t total = n * c * s;
    if (total == 0) return 0;
    TB_LAUNCH(blocks_for(total), kThreads, batch_norm_dx_kernel<T>)
    (total, c, s, static_cast<double>(n * s), gp, xp, static_cast<const T*>(weight), mp, ip,
     static_cast<const double*>(sums), training, static_cast<T*>(dx));
    return status();
  });
}

}  // namespace tb::cuda
