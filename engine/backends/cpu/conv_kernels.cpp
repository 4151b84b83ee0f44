// CPU kernels of the convolutional-network ops: conv2d (+ backward) as im2col + GEMM on the GEMM
// backend in use, max/avg/adaptive-average pooling (+ backward) and batch norm (+ backward).
// Compiled once per CPU capability level like the other kernel files: the pooling and
// batch-norm loops are a third of a small CNN's step and vectorise with the level's
// instructions; the GEMMs pick their own.
//
// Determinism: every output element is computed by one thread in a fixed order, whatever the
// thread count. conv2d's weight gradient sums fixed chunks of kChunk samples (each chunk on one
// thread, its samples in order), then the chunks in order; batch-norm statistics and gradients
// are per channel, accumulated in float64.
//
// References: im2col lowering as in Caffe (Jia et al., 2014) and PyTorch's slow_conv2d
// (aten/src/ATen/native/ConvolutionMM2d.cpp); pooling and batch-norm semantics as in
// aten/src/ATen/native/{DilatedMaxPool2d,AveragePool2d,AdaptiveAveragePooling,Normalization}.cpp.
#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <type_traits>
#include <utility>
#include <vector>

#include "engine/backends/common/conv_math.h"
#include "engine/backends/cpu/blas.h"
#include "engine/backends/cpu/capability_kernels.h"
#include "engine/backends/cpu/float_or_double.h"
#include "engine/core/thread_pool.h"
#include "engine/dispatch/op_signatures.h"

namespace tb::cpu::TB_CPU_CAPABILITY {

using core::ScalarType;
using dispatch::DispatchKey;
namespace sig = ops::sig;

namespace {

ScalarType stat_dtype(ScalarType dt) {
  return dt == ScalarType::Float64 ? ScalarType::Float64 : ScalarType::Float32;
}

// ---- conv2d ---------------------------------------------------------------------------------

using ConvGeom = conv::ConvShape;

ConvGeom conv_geom(const Tensor& x, const Tensor& weight, IntList stride, IntList padding,
                   IntList dilation, std::int64_t groups) {
  return conv::conv_shape(x.sizes().data(), weight.sizes().data(), stride.data(), padding.data(),
                          dilation.data(), groups);
}

// col[k, l] for one group of one sample: row (c, i, j) holds the input at (oh·sh − ph + i·dh,
// ow·sw − pw + j·dw) of channel c, 0 outside the image.
template <typename T>
void im2col(const ConvGeom& g, const T* x, T* col) {
  const std::int64_t L = g.l();
  for (std::int64_t c = 0; c < g.cg(); ++c) {
    const T* plane = x + c * g.h * g.w;
    for (std::int64_t i = 0; i < g.kh; ++i) {
      for (std::int64_t j = 0; j < g.kw; ++j) {
        T* row = col + ((c * g.kh + i) * g.kw + j) * L;
        for (std::int64_t oy = 0; oy < g.oh; ++oy) {
          const std::int64_t iy = oy * g.sh - g.ph + i * g.dh;
          T* out = row + oy * g.ow;
          if (iy < 0 || iy >= g.h) {
            std::fill(out, out + g.ow, T(0));
            continue;
          }
          const T* in = plane + iy * g.w;
          const std::int64_t x0 = j * g.dw - g.pw;
          if (g.sw == 1) {
            // Contiguous run: zeros left and right of the image, one copy between.
            const std::int64_t lo = std::clamp<std::int64_t>(-x0, 0, g.ow);
            const std::int64_t hi = std::clamp<std::int64_t>(g.w - x0, lo, g.ow);
            std::fill(out, out + lo, T(0));
            std::copy(in + x0 + lo, in + x0 + hi, out + lo);
            std::fill(out + hi, out + g.ow, T(0));
          } else {
            for (std::int64_t ox = 0; ox < g.ow; ++ox) {
              const std::int64_t ix = ox * g.sw + x0;
              out[ox] = ix >= 0 && ix < g.w ? in[ix] : T(0);
            }
          }
        }
      }
    }
  }
}

// The adjoint of im2col: dx (one group of one sample, zeroed by the caller) += col scattered back.
template <typename T>
void col2im(const ConvGeom& g, const T* col, T* dx) {
  const std::int64_t L = g.l();
  for (std::int64_t c = 0; c < g.cg(); ++c) {
    T* plane = dx + c * g.h * g.w;
    for (std::int64_t i = 0; i < g.kh; ++i) {
      for (std::int64_t j = 0; j < g.kw; ++j) {
        const T* row = col + ((c * g.kh + i) * g.kw + j) * L;
        for (std::int64_t oy = 0; oy < g.oh; ++oy) {
          const std::int64_t iy = oy * g.sh - g.ph + i * g.dh;
          if (iy < 0 || iy >= g.h) continue;
          T* out = plane + iy * g.w;
          const T* in = row + oy * g.ow;
          const std::int64_t x0 = j * g.dw - g.pw;
          for (std::int64_t ox = 0; ox < g.ow; ++ox) {
            const std::int64_t ix = ox * g.sw + x0;
            if (ix >= 0 && ix < g.w) out[ix] += in[ox];
          }
        }
      }
    }
  }
}

// A per-thread scratch buffer that only grows (no allocation in a steady-state step).
template <typename T>
T* scratch(std::size_t n, int which) {
  thread_local std::vector<T> buffers[2];
  auto& b = buffers[which];
  if (b.size() < n) b.resize(n);
  return b.data();
}

// Samples per chunk of the weight gradient's fixed summation order.
constexpr std::int64_t kChunk = 8;

Tensor conv2d_kernel(const Tensor& x, const Tensor& weight, const Tensor& bias, IntList stride,
                     IntList padding, IntList dilation, std::int64_t groups) {
  const ConvGeom g = conv_geom(x, weight, stride, padding, dilation, groups);
  Tensor y = Tensor::empty({g.n, g.o, g.oh, g.ow}, x.dtype(), x.device());
  if (y.numel() == 0) return y;
  float_or_double(x.dtype(), "conv2d", [&](auto zero) {
    using T = decltype(zero);
    const T* xp = x.data_ptr<T>();
    const T* wp = weight.data_ptr<T>();
    const T* bp = bias.defined() ? bias.data_ptr<T>() : nullptr;
    T* yp = y.data_ptr<T>();
    const std::int64_t K = g.k(), L = g.l(), Og = g.og();
    parallel_gemm_items(g.n, 1, [&](std::int64_t n0, std::int64_t n1) {
      T* col = g.pointwise() ? nullptr : scratch<T>(static_cast<std::size_t>(K * L), 0);
      for (std::int64_t n = n0; n < n1; ++n) {
        for (std::int64_t grp = 0; grp < g.groups; ++grp) {
          const T* xg = xp + (n * g.c + grp * g.cg()) * g.h * g.w;
          const T* cg = xg;
          if (col != nullptr) {
            im2col(g, xg, col);
            cg = col;
          }
          T* yg = yp + (n * g.o + grp * Og) * L;
          gemm(false, false, Og, L, K, T(1), wp + grp * Og * K, K, cg, L, T(0), yg, L);
        }
        if (bp != nullptr) {
          for (std::int64_t o = 0; o < g.o; ++o) {
            T* row = yp + (n * g.o + o) * L;
            const T b = bp[o];
            for (std::int64_t i = 0; i < L; ++i)
              row[i] += b;
          }
        }
      }
    });
  });
  return y;
}

std::tuple<Tensor, Tensor, Tensor> conv2d_backward_kernel(const Tensor& dy, const Tensor& x,
                                                          const Tensor& weight, IntList stride,
                                                          IntList padding, IntList dilation,
                                                          std::int64_t groups, bool with_bias,
                                                          bool with_input) {
  const ConvGeom g = conv_geom(x, weight, stride, padding, dilation, groups);
  Tensor dx = with_input ? Tensor::empty(x.sizes(), x.dtype(), x.device()) : Tensor();
  Tensor dw = Tensor::empty(weight.sizes(), x.dtype(), x.device());
  Tensor db = with_bias ? Tensor::empty({g.o}, x.dtype(), x.device()) : Tensor();
  float_or_double(x.dtype(), "conv2d_backward", [&](auto zero) {
    using T = decltype(zero);
    const T* xp = x.data_ptr<T>();
    const T* wp = weight.data_ptr<T>();
    const T* gp = dy.data_ptr<T>();
    T* dxp = with_input ? dx.data_ptr<T>() : nullptr;
    T* dwp = dw.data_ptr<T>();
    const std::int64_t K = g.k(), L = g.l(), Og = g.og();
    const std::int64_t wsize = g.o * K;
    const std::int64_t chunks = (g.n + kChunk - 1) / kChunk;
    // Each chunk's weight gradient, summed in chunk order below.
    std::vector<T> partial(static_cast<std::size_t>(std::max<std::int64_t>(chunks, 1) * wsize),
                           T(0));
    if (with_input) std::fill(dxp, dxp + x.numel(), T(0));
    parallel_gemm_items(chunks, 1, [&](std::int64_t c0, std::int64_t c1) {
      T* col = scratch<T>(static_cast<std::size_t>(K * L), 0);
      T* dcol = scratch<T>(static_cast<std::size_t>(K * L), 1);
      for (std::int64_t chunk = c0; chunk < c1; ++chunk) {
        T* pw = partial.data() + chunk * wsize;
        const std::int64_t nend = std::min(g.n, (chunk + 1) * kChunk);
        for (std::int64_t n = chunk * kChunk; n < nend; ++n) {
          const T beta = n == chunk * kChunk ? T(0) : T(1);
          for (std::int64_t grp = 0; grp < g.groups; ++grp) {
            const std::int64_t off = (n * g.c + grp * g.cg()) * g.h * g.w;
            const T* gg = gp + (n * g.o + grp * Og) * L;
            const T* wg = wp + grp * Og * K;
            // dx: columns = Wᵀ·dy, scattered back (a 1×1 stride-1 convolution writes dx directly).
            if (with_input && g.pointwise()) {
              gemm(true, false, K, L, Og, T(1), wg, K, gg, L, T(0), dxp + off, L);
            } else if (with_input) {
              gemm(true, false, K, L, Og, T(1), wg, K, gg, L, T(0), dcol, L);
              col2im(g, dcol, dxp + off);
            }
            // dweight += dy·colsᵀ.
            const T* cg = xp + off;
            if (!g.pointwise()) {
              im2col(g, xp + off, col);
              cg = col;
            }
            gemm(false, true, Og, K, L, T(1), gg, L, cg, L, beta, pw + grp * Og * K, K);
          }
        }
      }
    });
    core::parallel_for(0, wsize, 4096, [&](std::int64_t i0, std::int64_t i1) {
      for (std::int64_t i = i0; i < i1; ++i) {
        T s = partial[static_cast<std::size_t>(i)];
        for (std::int64_t chunk = 1; chunk < chunks; ++chunk)
          s += partial[static_cast<std::size_t>(chunk * wsize + i)];
        dwp[i] = s;
      }
    });
    if (with_bias) {
      T* dbp = db.data_ptr<T>();
      core::parallel_for(0, g.o, 1, [&](std::int64_t o0, std::int64_t o1) {
        for (std::int64_t o = o0; o < o1; ++o) {
          double s = 0.0;
          for (std::int64_t n = 0; n < g.n; ++n) {
            const T* row = gp + (n * g.o + o) * L;
            for (std::int64_t i = 0; i < L; ++i)
              s += static_cast<double>(row[i]);
          }
          dbp[o] = static_cast<T>(s);
        }
      });
    }
  });
  return {dx, dw, db};
}

// ---- pooling --------------------------------------------------------------------------------

using PoolGeom = conv::PoolShape;

PoolGeom pool_geom(const Tensor& x, IntList kernel, IntList stride, IntList padding) {
  return conv::pool_shape(x.sizes().data(), kernel.data(), stride.data(), padding.data());
}

std::int64_t plane_grain(std::int64_t plane_elems) {
  return std::max<std::int64_t>(1, 16384 / std::max<std::int64_t>(plane_elems, 1));
}

std::tuple<Tensor, Tensor> max_pool2d_kernel(const Tensor& x, IntList kernel, IntList stride,
                                             IntList padding) {
  const PoolGeom g = pool_geom(x, kernel, stride, padding);
  Tensor y = Tensor::empty({x.size(0), x.size(1), g.oh, g.ow}, x.dtype(), x.device());
  Tensor idx = Tensor::empty({x.size(0), x.size(1), g.oh, g.ow}, ScalarType::Int64, x.device());
  float_or_double(x.dtype(), "max_pool2d", [&](auto zero) {
    using T = decltype(zero);
    const T* xp = x.data_ptr<T>();
    T* yp = y.data_ptr<T>();
    auto* ip = idx.data_ptr<std::int64_t>();
    const bool two_by_two =
        g.kh == 2 && g.kw == 2 && g.sh == 2 && g.sw == 2 && g.ph == 0 && g.pw == 0;
    core::parallel_for(0, g.planes, plane_grain(g.h * g.w), [&](std::int64_t p0, std::int64_t p1) {
      for (std::int64_t p = p0; p < p1; ++p) {
        const T* plane = xp + p * g.h * g.w;
        if (two_by_two) {
          // The common 2x2 / stride 2 window without the general loop's bounds: the same scan
          // order (row 0 left, right, row 1 left, right), the first maximum, a NaN wins. The
          // four corners are first copied into contiguous blocks, so the compare-and-select loop
          // over them vectorises (written as one loop with selects, the compiler emitted
          // branches that the data's random order mispredicted: 20 ns per output). A block
          // holding a NaN is redone by the exact scalar scan.
          constexpr std::int64_t kBlock = 64;
          T a[kBlock], b[kBlock], c[kBlock], d[kBlock];
          std::int32_t which[kBlock];
          for (std::int64_t oy = 0; oy < g.oh; ++oy) {
            const T* r0 = plane + 2 * oy * g.w;
            const T* r1 = r0 + g.w;
            T* out = yp + (p * g.oh + oy) * g.ow;
            std::int64_t* at_out = ip + (p * g.oh + oy) * g.ow;
            for (std::int64_t o0 = 0; o0 < g.ow; o0 += kBlock) {
              const std::int64_t n = std::min(kBlock, g.ow - o0);
              for (std::int64_t j = 0; j < n; ++j) {
                a[j] = r0[2 * (o0 + j)];
                b[j] = r0[2 * (o0 + j) + 1];
                c[j] = r1[2 * (o0 + j)];
                d[j] = r1[2 * (o0 + j) + 1];
              }
              // The maximum (strictly greater wins, so the first of equal values stays), then
              // the first corner that holds it, then whether a NaN needs the exact scan: three
              // loops of one type each, which the compiler vectorises.
              for (std::int64_t j = 0; j < n; ++j) {
                T best = a[j];
                best = b[j] > best ? b[j] : best;
                best = c[j] > best ? c[j] : best;
                best = d[j] > best ? d[j] : best;
                out[o0 + j] = best;
              }
              for (std::int64_t j = 0; j < n; ++j) {
                const T best = out[o0 + j];
                const std::int32_t na = a[j] != best, nb = b[j] != best, nc = c[j] != best;
                which[j] = na * (1 + nb * (1 + nc));  // the first corner equal to the maximum
              }
              // NaN: the magnitude bits above infinity's.
              using Bits = std::conditional_t<sizeof(T) == 4, std::uint32_t, std::uint64_t>;
              constexpr Bits kMagnitude = ~Bits(0) >> 1;
              constexpr Bits kInf =
                  sizeof(T) == 4 ? Bits(0x7f800000u) : Bits(0x7ff0000000000000ull);
              Bits top = 0;
              for (std::int64_t j = 0; j < n; ++j) {
                const Bits ab = std::max(std::bit_cast<Bits>(a[j]) & kMagnitude,
                                         std::bit_cast<Bits>(b[j]) & kMagnitude);
                const Bits cd = std::max(std::bit_cast<Bits>(c[j]) & kMagnitude,
                                         std::bit_cast<Bits>(d[j]) & kMagnitude);
                top = std::max(top, std::max(ab, cd));
              }
              const bool nan = top > kInf;
              if (nan) {
                for (std::int64_t j = 0; j < n; ++j) {
                  const T v[4] = {a[j], b[j], c[j], d[j]};
                  T best = v[0];
                  std::int32_t k = 0;
                  for (std::int32_t q = 1; q < 4 && !std::isnan(best); ++q) {
                    if (v[q] > best || std::isnan(v[q])) {
                      best = v[q];
                      k = q;
                    }
                  }
                  out[o0 + j] = best;
                  which[j] = k;
                }
              }
              const std::int64_t base = 2 * oy * g.w + 2 * o0;
              for (std::int64_t j = 0; j < n; ++j)
                at_out[o0 + j] = base + 2 * j + (which[j] & 1) + (which[j] >> 1) * g.w;
            }
          }
          continue;
        }
        for (std::int64_t oy = 0; oy < g.oh; ++oy) {
          const std::int64_t y0 = std::max<std::int64_t>(oy * g.sh - g.ph, 0);
          const std::int64_t y1 = std::min(oy * g.sh - g.ph + g.kh, g.h);
          for (std::int64_t ox = 0; ox < g.ow; ++ox) {
            const std::int64_t x0 = std::max<std::int64_t>(ox * g.sw - g.pw, 0);
            const std::int64_t x1 = std::min(ox * g.sw - g.pw + g.kw, g.w);
            T best = -std::numeric_limits<T>::infinity();
            std::int64_t at = y0 * g.w + x0;
            for (std::int64_t iy = y0; iy < y1; ++iy) {
              for (std::int64_t ix = x0; ix < x1; ++ix) {
                const T v = plane[iy * g.w + ix];
                if (v > best || std::isnan(v)) {  // NaN propagates, as in PyTorch
                  best = v;
                  at = iy * g.w + ix;
                  if (std::isnan(v)) goto done;
                }
              }
            }
          done:
            yp[(p * g.oh + oy) * g.ow + ox] = best;
            ip[(p * g.oh + oy) * g.ow + ox] = at;
          }
        }
      }
    });
  });
  return {y, idx};
}

Tensor max_pool2d_backward_kernel(const Tensor& dy, const Tensor& x, const Tensor& indices) {
  Tensor dx = Tensor::empty(x.sizes(), x.dtype(), x.device());
  const std::int64_t planes = x.size(0) * x.size(1);
  const std::int64_t hw = x.size(2) * x.size(3);
  const std::int64_t ohw = dy.size(2) * dy.size(3);
  float_or_double(x.dtype(), "max_pool2d_backward", [&](auto zero) {
    using T = decltype(zero);
    const T* gp = dy.data_ptr<T>();
    const auto* ip = indices.data_ptr<std::int64_t>();
    T* dxp = dx.data_ptr<T>();
    core::parallel_for(0, planes, plane_grain(hw), [&](std::int64_t p0, std::int64_t p1) {
      for (std::int64_t p = p0; p < p1; ++p) {
        T* plane = dxp + p * hw;
        std::fill(plane, plane + hw, T(0));
        for (std::int64_t i = 0; i < ohw; ++i)
          plane[ip[p * ohw + i]] += gp[p * ohw + i];
      }
    });
  });
  return dx;
}

using conv::avg_window;
using conv::AvgWindow;

Tensor avg_pool2d_kernel(const Tensor& x, IntList kernel, IntList stride, IntList padding,
                         bool count_include_pad) {
  const PoolGeom g = pool_geom(x, kernel, stride, padding);
  Tensor y = Tensor::empty({x.size(0), x.size(1), g.oh, g.ow}, x.dtype(), x.device());
  float_or_double(x.dtype(), "avg_pool2d", [&](auto zero) {
    using T = decltype(zero);
    const T* xp = x.data_ptr<T>();
    T* yp = y.data_ptr<T>();
    core::parallel_for(0, g.planes, plane_grain(g.h * g.w), [&](std::int64_t p0, std::int64_t p1) {
      for (std::int64_t p = p0; p < p1; ++p) {
        const T* plane = xp + p * g.h * g.w;
        for (std::int64_t oy = 0; oy < g.oh; ++oy) {
          for (std::int64_t ox = 0; ox < g.ow; ++ox) {
            const AvgWindow a = avg_window(g, oy, ox, count_include_pad);
            T s = 0;
            for (std::int64_t iy = a.y0; iy < a.y1; ++iy)
              for (std::int64_t ix = a.x0; ix < a.x1; ++ix)
                s += plane[iy * g.w + ix];
            yp[(p * g.oh + oy) * g.ow + ox] = static_cast<T>(s / static_cast<T>(a.divisor));
          }
        }
      }
    });
  });
  return y;
}

Tensor avg_pool2d_backward_kernel(const Tensor& dy, const Tensor& x, IntList kernel, IntList stride,
                                  IntList padding, bool count_include_pad) {
  const PoolGeom g = pool_geom(x, kernel, stride, padding);
  Tensor dx = Tensor::empty(x.sizes(), x.dtype(), x.device());
  float_or_double(x.dtype(), "avg_pool2d_backward", [&](auto zero) {
    using T = decltype(zero);
    const T* gp = dy.data_ptr<T>();
    T* dxp = dx.data_ptr<T>();
    core::parallel_for(0, g.planes, plane_grain(g.h * g.w), [&](std::int64_t p0, std::int64_t p1) {
      for (std::int64_t p = p0; p < p1; ++p) {
        T* plane = dxp + p * g.h * g.w;
        std::fill(plane, plane + g.h * g.w, T(0));
        for (std::int64_t oy = 0; oy < g.oh; ++oy) {
          for (std::int64_t ox = 0; ox < g.ow; ++ox) {
            const AvgWindow a = avg_window(g, oy, ox, count_include_pad);
            const T v = gp[(p * g.oh + oy) * g.ow + ox] / static_cast<T>(a.divisor);
            for (std::int64_t iy = a.y0; iy < a.y1; ++iy)
              for (std::int64_t ix = a.x0; ix < a.x1; ++ix)
                plane[iy * g.w + ix] += v;
          }
        }
      }
    });
  });
  return dx;
}

using conv::adaptive_end;
using conv::adaptive_start;

Tensor adaptive_avg_pool2d_kernel(const Tensor& x, IntList output_size) {
  const std::int64_t planes = x.size(0) * x.size(1), h = x.size(2), w = x.size(3);
  const std::int64_t oh = output_size[0], ow = output_size[1];
  Tensor y = Tensor::empty({x.size(0), x.size(1), oh, ow}, x.dtype(), x.device());
  float_or_double(x.dtype(), "adaptive_avg_pool2d", [&](auto zero) {
    using T = decltype(zero);
    const T* xp = x.data_ptr<T>();
    T* yp = y.data_ptr<T>();
    core::parallel_for(0, planes, plane_grain(h * w), [&](std::int64_t p0, std::int64_t p1) {
      for (std::int64_t p = p0; p < p1; ++p) {
        const T* plane = xp + p * h * w;
        for (std::int64_t oy = 0; oy < oh; ++oy) {
          const std::int64_t y0 = adaptive_start(oy, oh, h), y1 = adaptive_end(oy, oh, h);
          for (std::int64_t ox = 0; ox < ow; ++ox) {
            const std::int64_t x0 = adaptive_start(ox, ow, w), x1 = adaptive_end(ox, ow, w);
            T s = 0;
            for (std::int64_t iy = y0; iy < y1; ++iy)
              for (std::int64_t ix = x0; ix < x1; ++ix)
                s += plane[iy * w + ix];
            yp[(p * oh + oy) * ow + ox] = s / static_cast<T>((y1 - y0) * (x1 - x0));
          }
        }
      }
    });
  });
  return y;
}

Tensor adaptive_avg_pool2d_backward_kernel(const Tensor& dy, const Tensor& x) {
  const std::int64_t planes = x.size(0) * x.size(1), h = x.size(2), w = x.size(3);
  const std::int64_t oh = dy.size(2), ow = dy.size(3);
  Tensor dx = Tensor::empty(x.sizes(), x.dtype(), x.device());
  float_or_double(x.dtype(), "adaptive_avg_pool2d_backward", [&](auto zero) {
    using T = decltype(zero);
    const T* gp = dy.data_ptr<T>();
    T* dxp = dx.data_ptr<T>();
    core::parallel_for(0, planes, plane_grain(h * w), [&](std::int64_t p0, std::int64_t p1) {
      for (std::int64_t p = p0; p < p1; ++p) {
        T* plane = dxp + p * h * w;
        std::fill(plane, plane + h * w, T(0));
        for (std::int64_t oy = 0; oy < oh; ++oy) {
          const std::int64_t y0 = adaptive_start(oy, oh, h), y1 = adaptive_end(oy, oh, h);
          for (std::int64_t ox = 0; ox < ow; ++ox) {
            const std::int64_t x0 = adaptive_start(ox, ow, w), x1 = adaptive_end(ox, ow, w);
            const T v = gp[(p * oh + oy) * ow + ox] / static_cast<T>((y1 - y0) * (x1 - x0));
            for (std::int64_t iy = y0; iy < y1; ++iy)
              for (std::int64_t ix = x0; ix < x1; ++ix)
                plane[iy * w + ix] += v;
          }
        }
      }
    });
  });
  return dx;
}

// ---- batch norm -----------------------------------------------------------------------------

// x viewed as [n, c, s] (s = product of the dimensions after the channel).
struct BnGeom {
  std::int64_t n, c, s;
  std::int64_t count() const { return n * s; }
};

// Σ f(i) for i in [0, n) in double: eight partial sums the compiler keeps in vector registers
// (a single running sum is one dependent add per element), added in a fixed order — the same
// result on every run and for every thread count.
template <typename F>
double sum8(std::int64_t n, F f) {
  double acc[8] = {};
  std::int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int k = 0; k < 8; ++k)
      acc[k] += f(i + k);
  double tail = 0.0;
  for (; i < n; ++i)
    tail += f(i);
  return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7])) + tail;
}

// Two sums at once, as sum8: f(i) returns both terms.
template <typename F>
std::pair<double, double> sum8x2(std::int64_t n, F f) {
  double a[8] = {}, b[8] = {};
  std::int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    for (int k = 0; k < 8; ++k) {
      const auto [u, v] = f(i + k);
      a[k] += u;
      b[k] += v;
    }
  }
  double ta = 0.0, tb = 0.0;
  for (; i < n; ++i) {
    const auto [u, v] = f(i);
    ta += u;
    tb += v;
  }
  return {((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7])) + ta,
          ((b[0] + b[1]) + (b[2] + b[3])) + ((b[4] + b[5]) + (b[6] + b[7])) + tb};
}

BnGeom bn_geom(const Tensor& x) {
  BnGeom g{x.size(0), x.size(1), 1};
  for (std::int64_t d = 2; d < x.dim(); ++d)
    g.s *= x.size(d);
  return g;
}

std::tuple<Tensor, Tensor, Tensor> batch_norm_kernel(const Tensor& x, const Tensor& weight,
                                                     const Tensor& bias, const Tensor& running_mean,
                                                     const Tensor& running_var, bool training,
                                                     double momentum, double eps) {
  const BnGeom g = bn_geom(x);
  Tensor y = Tensor::empty(x.sizes(), x.dtype(), x.device());
  Tensor mean = Tensor::empty({g.c}, stat_dtype(x.dtype()), x.device());
  Tensor invstd = Tensor::empty({g.c}, stat_dtype(x.dtype()), x.device());
  float_or_double(x.dtype(), "batch_norm", [&](auto zero) {
    using T = decltype(zero);
    const T* xp = x.data_ptr<T>();
    const T* wp = weight.defined() ? weight.data_ptr<T>() : nullptr;
    const T* bp = bias.defined() ? bias.data_ptr<T>() : nullptr;
    T* rm = running_mean.defined() ? running_mean.data_ptr<T>() : nullptr;
    T* rv = running_var.defined() ? running_var.data_ptr<T>() : nullptr;
    T* yp = y.data_ptr<T>();
    T* mp = mean.data_ptr<T>();
    T* ip = invstd.data_ptr<T>();
    const double m = static_cast<double>(g.count());
    core::parallel_for(0, g.c, 1, [&](std::int64_t c0, std::int64_t c1) {
      for (std::int64_t c = c0; c < c1; ++c) {
        double mu = 0.0, var = 0.0;
        if (training) {
          for (std::int64_t n = 0; n < g.n; ++n) {
            const T* row = xp + (n * g.c + c) * g.s;
            mu += sum8(g.s, [row](std::int64_t i) { return static_cast<double>(row[i]); });
          }
          mu /= m;
          for (std::int64_t n = 0; n < g.n; ++n) {
            const T* row = xp + (n * g.c + c) * g.s;
            var += sum8(g.s, [row, mu](std::int64_t i) {
              const double d = static_cast<double>(row[i]) - mu;
              return d * d;
            });
          }
          var /= m;
          if (rm != nullptr)
            rm[c] = static_cast<T>((1.0 - momentum) * static_cast<double>(rm[c]) + momentum * mu);
          if (rv != nullptr)
            rv[c] = static_cast<T>((1.0 - momentum) * static_cast<double>(rv[c]) +
                                   momentum * var * m / (m - 1.0));
        } else {
          mu = static_cast<double>(rm[c]);
          var = static_cast<double>(rv[c]);
        }
        const double is = 1.0 / std::sqrt(var + eps);
        mp[c] = static_cast<T>(mu);
        ip[c] = static_cast<T>(is);
        // y = x·scale + shift, per channel.
        const double w = wp != nullptr ? static_cast<double>(wp[c]) : 1.0;
        const double b = bp != nullptr ? static_cast<double>(bp[c]) : 0.0;
        const auto scale = static_cast<T>(w * is);
        const auto shift = static_cast<T>(b - mu * w * is);
        for (std::int64_t n = 0; n < g.n; ++n) {
          const T* row = xp + (n * g.c + c) * g.s;
          T* out = yp + (n * g.c + c) * g.s;
          for (std::int64_t i = 0; i < g.s; ++i)
            out[i] = row[i] * scale + shift;
        }
      }
    });
  });
  return {y, mean, invstd};
}

std::tuple<Tensor, Tensor, Tensor> batch_norm_backward_kernel(const Tensor& dy, const Tensor& x,
                                                              const Tensor& weight,
                                                              const Tensor& mean_in,
                                                              const Tensor& invstd_in,
                                                              bool training, bool with_wb) {
  const BnGeom g = bn_geom(x);
  const Tensor mean = mean_in.to(stat_dtype(x.dtype())).contiguous();
  const Tensor invstd = invstd_in.to(stat_dtype(x.dtype())).contiguous();
  Tensor dx = Tensor::empty(x.sizes(), x.dtype(), x.device());
  Tensor dw = with_wb ? Tensor::empty({g.c}, x.dtype(), x.device()) : Tensor();
  Tensor db = with_wb ? Tensor::empty({g.c}, x.dtype(), x.device()) : Tensor();
  float_or_double(x.dtype(), "batch_norm_backward", [&](auto zero) {
    using T = decltype(zero);
    const T* xp = x.data_ptr<T>();
    const T* gp = dy.data_ptr<T>();
    const T* wp = weight.defined() ? weight.data_ptr<T>() : nullptr;
    const T* mp = mean.data_ptr<T>();
    const T* ip = invstd.data_ptr<T>();
    T* dxp = dx.data_ptr<T>();
    T* dwp = with_wb ? dw.data_ptr<T>() : nullptr;
    T* dbp = with_wb ? db.data_ptr<T>() : nullptr;
    const double m = static_cast<double>(g.count());
    core::parallel_for(0, g.c, 1, [&](std::int64_t c0, std::int64_t c1) {
      for (std::int64_t c = c0; c < c1; ++c) {
        const double mu = static_cast<double>(mp[c]);
        const double is = static_cast<double>(ip[c]);
        // Σ dy and Σ dy·(x − mean) in one pass (float64, sixteen partial sums), then
        // dx = w·invstd·(dy − Σdy/m − (x − mean)·invstd²·Σdy·(x − mean)/m) in training, as
        // dx = p·dy + q·x + r with per-channel coefficients made in float64: one fused
        // multiply-add pass in the tensor's type.
        double sum_g = 0.0, sum_gx = 0.0;
        for (std::int64_t n = 0; n < g.n; ++n) {
          const T* row = xp + (n * g.c + c) * g.s;
          const T* grow = gp + (n * g.c + c) * g.s;
          const auto [sg, sgx] = sum8x2(g.s, [row, grow, mu](std::int64_t i) {
            const double gi = static_cast<double>(grow[i]);
            return std::pair<double, double>{gi, gi * (static_cast<double>(row[i]) - mu)};
          });
          sum_g += sg;
          sum_gx += sgx;
        }
        if (with_wb) {
          dwp[c] = static_cast<T>(sum_gx * is);
          dbp[c] = static_cast<T>(sum_g);
        }
        const double w = wp != nullptr ? static_cast<double>(wp[c]) : 1.0;
        const double k = w * is;
        const double proj = training ? sum_gx * is * is / m : 0.0;
        const double mean_g = training ? sum_g / m : 0.0;
        const auto pc = static_cast<T>(k);
        const auto qc = static_cast<T>(-k * proj);
        const auto rc = static_cast<T>(k * (proj * mu - mean_g));
        for (std::int64_t n = 0; n < g.n; ++n) {
          const T* row = xp + (n * g.c + c) * g.s;
          const T* grow = gp + (n * g.c + c) * g.s;
          T* out = dxp + (n * g.c + c) * g.s;
          if (!training) {  // the running statistics: no term in x
            for (std::int64_t i = 0; i < g.s; ++i)
              out[i] = pc * grow[i];
            continue;
          }
          for (std::int64_t i = 0; i < g.s; ++i)
            out[i] = pc * grow[i] + (qc * row[i] + rc);
        }
      }
    });
  });
  return {dx, dw, db};
}

}  // namespace

void register_conv_kernels(dispatch::Dispatcher& d) {
  const auto cpu = DispatchKey::CPU;
  d.impl<sig::Conv2d>("conv2d", cpu, conv2d_kernel).detach();
  d.impl<sig::Conv2dBackward>("conv2d_backward", cpu, conv2d_backward_kernel).detach();
  d.impl<sig::MaxPool2d>("max_pool2d", cpu, max_pool2d_kernel).detach();
  d.impl<sig::MaxPool2dBackward>("max_pool2d_backward", cpu, max_pool2d_backward_kernel).detach();
  d.impl<sig::AvgPool2d>("avg_pool2d", cpu, avg_pool2d_kernel).detach();
  d.impl<sig::AvgPool2dBackward>("avg_pool2d_backward", cpu, avg_pool2d_backward_kernel).detach();
  d.impl<sig::AdaptiveAvgPool2d>("adaptive_avg_pool2d", cpu, adaptive_avg_pool2d_kernel).detach();
  d.impl<sig::Binary>("adaptive_avg_pool2d_backward", cpu, adaptive_avg_pool2d_backward_kernel)
      .detach();
  d.impl<sig::BatchNorm>("batch_norm", cpu, batch_norm_kernel).detach();
  d.impl<sig::BatchNormBackward>("batch_norm_backward", cpu, batch_norm_backward_kernel).detach();
}

}  // namespace tb::cpu::TB_CPU_CAPABILITY
