// CPU softmax/log_softmax (max-subtracted, double accumulation) and the indexing kernels
// index_select, gather and scatter_add (every index is bounds-checked).
#include <cmath>
#include <cstring>
#include <vector>

#include "engine/backends/cpu/capability_kernels.h"
#include "engine/dispatch/op_signatures.h"

namespace tb::cpu::TB_CPU_CAPABILITY {

using core::DimVector;
using core::ScalarType;
using dispatch::DispatchKey;
namespace sig = ops::sig;

namespace {

template <bool Log>
Tensor softmax_kernel(const Tensor& t, std::int64_t dim) {
  if (t.dim() == 0) {
    Tensor out = Tensor::empty(t.sizes(), t.dtype(), t.device());
    return out.fill_(Log ? 0.0 : 1.0);
  }
  // Rows along `dim`: move it last, make contiguous, compute, move back.
  const Tensor x = t.transpose(dim, -1).contiguous();
  Tensor y = Tensor::empty(x.sizes(), x.dtype(), x.device());
  const std::int64_t n = x.size(-1);
  const std::int64_t rows = n == 0 ? 0 : x.numel() / n;
  TB_DISPATCH_FLOATING_TYPES(t.dtype(), Log ? "log_softmax" : "softmax", [&] {
    using T = scalar_t;
    using C = compute_t<T>;
    const T* xp = static_cast<const T*>(x.data_ptr());
    T* yp = y.data_ptr<T>();
    core::parallel_for(
        0, rows, std::max<std::int64_t>(1, 16384 / std::max<std::int64_t>(n, 1)),
        [&](std::int64_t r0, std::int64_t r1) {
          for (std::int64_t r = r0; r < r1; ++r) {
            const T* in = xp + r * n;
            T* out = yp + r * n;
            C m = -std::numeric_limits<C>::infinity();
            for (std::int64_t i = 0; i < n; ++i)
              m = std::max(m, static_cast<C>(in[i]));
            if (std::isinf(m) && m < 0) m = 0;  // all -inf: avoid inf - inf
            double s = 0.0;
            for (std::int64_t i = 0; i < n; ++i) {
              s += std::exp(static_cast<double>(static_cast<C>(in[i]) - m));
            }
            if constexpr (Log) {
              // (x - m) - log(s), not x - (m + log(s)): folding log(s) into m first rounds it
              // to m's ulp (~1e-3 for logits ~1e4 in float32).
              const double log_s = std::log(s);
              for (std::int64_t i = 0; i < n; ++i) {
                out[i] = convert<T>(static_cast<double>(static_cast<C>(in[i]) - m) - log_s);
              }
            } else {
              const double inv = 1.0 / s;
              for (std::int64_t i = 0; i < n; ++i) {
                out[i] = convert<T>(std::exp(static_cast<double>(static_cast<C>(in[i]) - m)) * inv);
              }
            }
          }
        });
  });
  return y.transpose(dim, -1).contiguous();
}

[[noreturn]] void index_error(const char* op, std::int64_t idx, std::int64_t dim,
                              std::int64_t size) {
  throw IndexError(tb::detail::str_cat("[", op, "] index ", idx, " is out of range for dimension ",
                                       dim, " with size ", size));
}

Tensor index_select_kernel(const Tensor& t, std::int64_t dim, const Tensor& index) {
  const Tensor idx = index.contiguous();
  const std::int64_t* ip = idx.data_ptr<std::int64_t>();
  const std::int64_t n = idx.numel();
  const std::int64_t size = t.dim() == 0 ? 1 : t.size(dim);
  for (std::int64_t i = 0; i < n; ++i) {
    if (ip[i] < -size || ip[i] >= size) index_error("index_select", ip[i], dim, size);
  }
  if (t.dim() == 0) {
    Tensor out = Tensor::empty(idx.sizes(), t.dtype(), t.device());
    return out.copy_(t);
  }
  DimVector shape(t.sizes());
  shape[static_cast<std::size_t>(dim)] = n;
  Tensor out = Tensor::empty(shape.span(), t.dtype(), t.device());
  if (dim == 0 && t.is_contiguous()) {
    // Rows of a contiguous tensor (embedding lookups): one memcpy per index.
    const std::size_t row_bytes =
        static_cast<std::size_t>(size == 0 ? 0 : t.numel() / size) * t.element_size();
    const char* src = static_cast<const char*>(t.data_ptr());
    char* dst = static_cast<char*>(out.data_ptr());
    core::parallel_for(
        0, n,
        std::max<std::int64_t>(
            1, 65536 / std::max<std::int64_t>(1, static_cast<std::int64_t>(row_bytes))),
        [&](std::int64_t i0, std::int64_t i1) {
          for (std::int64_t i = i0; i < i1; ++i) {
            const std::int64_t r = ip[i] < 0 ? ip[i] + size : ip[i];
            std::memcpy(dst + static_cast<std::size_t>(i) * row_bytes,
                        src + static_cast<std::size_t>(r) * row_bytes, row_bytes);
          }
        });
    return out;
  }
  for (std::int64_t i = 0; i < n; ++i) {
    const std::int64_t src = ip[i] < 0 ? ip[i] + size : ip[i];
    Tensor dst = out.select(dim, i);
    dst.copy_(t.select(dim, src));
  }
  return out;
}

// Walks every element of `index` (any strides) calling f(linear position vector, index value).
template <typename F>
void for_each_index(const Tensor& index, F f) {
  const Tensor idx = index.contiguous();
  const std::int64_t* ip = idx.data_ptr<std::int64_t>();
  const std::int64_t nd = idx.dim();
  DimVector pos(static_cast<std::size_t>(nd), 0);
  const std::int64_t n = idx.numel();
  for (std::int64_t i = 0; i < n; ++i) {
    f(pos, ip[i]);
    for (std::int64_t d = nd - 1; d >= 0; --d) {
      if (++pos[static_cast<std::size_t>(d)] < idx.size(d)) break;
      pos[static_cast<std::size_t>(d)] = 0;
    }
  }
}

Tensor gather_kernel(const Tensor& t, std::int64_t dim, const Tensor& index) {
  Tensor out = Tensor::empty(index.sizes(), t.dtype(), t.device());
  if (index.numel() == 0) return out;
  const std::int64_t size = t.dim() == 0 ? 1 : t.size(dim);
  TB_DISPATCH_ALL_TYPES(t.dtype(), "gather", [&] {
    using T = scalar_t;
    const T* src = static_cast<const T*>(t.data_ptr());
    T* dst = out.data_ptr<T>();
    std::int64_t k = 0;
    for_each_index(index, [&](const DimVector& pos, std::int64_t v) {
      if (v < -size || v >= size) index_error("gather", v, dim, size);
      if (v < 0) v += size;
      std::int64_t off = 0;
      for (std::int64_t d = 0; d < t.dim(); ++d) {
        off += (d == dim ? v : pos[static_cast<std::size_t>(d)]) * t.stride(d);
      }
      dst[k++] = src[off];
    });
  });
  return out;
}

Tensor scatter_add_kernel(const Tensor& t, std::int64_t dim, const Tensor& index,
                          const Tensor& src) {
  Tensor out = t.clone();
  if (index.numel() == 0) return out;
  const std::int64_t size = t.dim() == 0 ? 1 : t.size(dim);
  TB_DISPATCH_ALL_TYPES(t.dtype(), "scatter_add", [&] {
    using T = scalar_t;
    using C = compute_t<T>;
    const T* s = static_cast<const T*>(src.data_ptr());
    T* o = out.data_ptr<T>();
    const auto add = [](T a, T b) {
      return convert<T>(static_cast<C>(static_cast<C>(a) + static_cast<C>(b)));
    };
    // Contiguous index and source of the output's shape except along `dim` (index_select's
    // and embedding's backward): [outer, n, inner] blocks, walked in the same order as below,
    // so the sums are the same bits; a DimVector walk per element was 2.5 % of a qwen-tiny step.
    bool blocked = t.dim() > 0 && index.is_contiguous() && src.is_contiguous() &&
                   DimVector(index.sizes()) == DimVector(src.sizes());
    for (std::int64_t d = 0; blocked && d < t.dim(); ++d) {
      blocked = d == dim || index.size(d) == t.size(d);
    }
    if (blocked) {
      const std::int64_t n = index.size(dim);
      std::int64_t inner = 1;
      for (std::int64_t d = dim + 1; d < t.dim(); ++d)
        inner *= t.size(d);
      const std::int64_t outer = index.numel() / (n * inner);
      const std::int64_t* ip = index.data_ptr<std::int64_t>();
      for (std::int64_t a = 0; a < outer; ++a) {
        for (std::int64_t i = 0; i < n; ++i) {
          const std::int64_t* iv = ip + (a * n + i) * inner;
          const T* sv = s + (a * n + i) * inner;
          T* ob = o + a * size * inner;
          for (std::int64_t r = 0; r < inner; ++r) {
            std::int64_t v = iv[r];
            if (v < -size || v >= size) index_error("scatter_add", v, dim, size);
            if (v < 0) v += size;
            T& dst = ob[v * inner + r];
            dst = add(dst, sv[r]);
          }
        }
      }
      return;
    }
    for_each_index(index, [&](const DimVector& pos, std::int64_t v) {
      if (v < -size || v >= size) index_error("scatter_add", v, dim, size);
      if (v < 0) v += size;
      std::int64_t off_out = 0;
      std::int64_t off_src = 0;
      for (std::int64_t d = 0; d < t.dim(); ++d) {
        const std::int64_t p = pos[static_cast<std::size_t>(d)];
        off_out += (d == dim ? v : p) * out.stride(d);
        off_src += p * src.stride(d);
      }
      o[off_out] = add(o[off_out], s[off_src]);
    });
  });
  return out;
}

}  // namespace

void register_softmax_index_kernels(dispatch::Dispatcher& d) {
  const auto cpu = DispatchKey::CPU;
  d.impl<sig::Softmax>("softmax", cpu, softmax_kernel<false>).detach();
  d.impl<sig::Softmax>("log_softmax", cpu, softmax_kernel<true>).detach();
  d.impl<sig::IndexSelect>("index_select", cpu, index_select_kernel).detach();
  d.impl<sig::IndexSelect>("gather", cpu, gather_kernel).detach();
  d.impl<sig::ScatterAdd>("scatter_add", cpu, scatter_add_kernel).detach();
}

}  // namespace tb::cpu::TB_CPU_CAPABILITY
