// CUDA indexing kernels (index_select, gather, scatter_add) and RoPE. Indices are checked on
// the device: the first bad position is recorded (atomicMin) and skipped, and the host raises the
// CPU kernel's error after reading it back.
#include "engine/backends/common/elementwise_math.h"
#include "engine/backends/cuda/cuda_device.cuh"

namespace tb::cuda {

namespace {

using namespace dev;  // NOLINT(google-build-using-namespace): kernel-file helpers

__device__ inline void record_bad(std::int64_t* bad, std::int64_t position) {
  atomicMin(reinterpret_cast<unsigned long long*>(bad), static_cast<unsigned long long>(position));
}

// Wraps a negative index; -1 when out of range.
__device__ inline std::int64_t wrap(std::int64_t v, std::int64_t size) {
  if (v < -size || v >= size) return -1;
  return v < 0 ? v + size : v;
}

template <typename U>
__global__ void index_select_kernel(U* out, const U* in, const std::int64_t* index, std::int64_t n,
                                    std::int64_t outer, std::int64_t size, std::int64_t inner,
                                    std::int64_t* bad) {
  const std::int64_t total = outer * n * inner;
  for (std::int64_t e = global_index(); e < total; e += global_stride()) {
    const std::int64_t j = e % inner;
    const std::int64_t i = (e / inner) % n;
    const std::int64_t o = e / (inner * n);
    const std::int64_t src = wrap(index[i], size);
    if (src < 0) {
      record_bad(bad, i);
      continue;
    }
    out[e] = in[(o * size + src) * inner + j];
  }
}

template <typename U>
__global__ void gather_kernel(U* out, const U* in, const std::int64_t* index,
                              std::int64_t dim_stride, std::int64_t dim_size, Strided s,
                              std::int64_t n, std::int64_t* bad) {
  for (std::int64_t e = global_index(); e < n; e += global_stride()) {
    std::int64_t off[2];  // in (without dim's term), index
    offsets_of<2>(s, e, off);
    const std::int64_t v = wrap(index[off[1]], dim_size);
    if (v < 0) {
      record_bad(bad, e);
      continue;
    }
    out[e] = in[off[0] + v * dim_stride];
  }
}

// Atomic add for every dtype scatter_add supports on the device.
template <typename T>
__device__ inline void atomic_add(T* p, T v) {
  if constexpr (std::is_same_v<T, core::Half>) {
    atomicAdd(reinterpret_cast<__half*>(p), __float2half(static_cast<float>(v)));
  } else if constexpr (std::is_same_v<T, core::BFloat16>) {
    atomicAdd(reinterpret_cast<__nv_bfloat16*>(p), __float2bfloat16(static_cast<float>(v)));
  } else if constexpr (std::is_same_v<T, std::int64_t>) {
    atomicAdd(reinterpret_cast<unsigned long long*>(p), static_cast<unsigned long long>(v));
  } else {
    atomicAdd(p, v);
  }
}

template <typename T>
__global__ void scatter_add_kernel(T* out, const std::int64_t* index, const T* src,
                                   std::int64_t dim_stride, std::int64_t dim_size, Strided s,
                                   std::int64_t n, std::int64_t* bad) {
  for (std::int64_t e = global_index(); e < n; e += global_stride()) {
    std::int64_t off[3];  // out (without dim's term), index, src
    offsets_of<3>(s, e, off);
    const std::int64_t v = wrap(index[off[1]], dim_size);
    if (v < 0) {
      record_bad(bad, e);
      continue;
    }
    atomic_add(out + off[0] + v * dim_stride, src[off[2]]);
  }
}

// One thread per rotated pair (row r, j < d / 2), in the CPU kernel's arithmetic.
template <typename T, typename C>
__global__ void rope_kernel(T* out, const T* x, const C* cs, const C* sn, std::int64_t rows,
                            std::int64_t t_len, std::int64_t d) {
  const std::int64_t h = d / 2;
  const std::int64_t total = rows * h;
  for (std::int64_t e = global_index(); e < total; e += global_stride()) {
    const std::int64_t r = e / h;
    const std::int64_t j = e % h;
    const std::int64_t t = r % t_len;
    const C x1 = static_cast<C>(x[r * d + j]);
    const C x2 = static_cast<C>(x[r * d + j + h]);
    const C c = cs[t * h + j];
    const C s = sn[t * h + j];
    out[r * d + j] = T(x1 * c - x2 * s);
    out[r * d + j + h] = T(x2 * c + x1 * s);
  }
}

// SwiGLU's silu(gate)·up and its two gradients, with the shared formulas of silu and its
// derivative (the CPU kernel's arithmetic).
template <typename T, typename C>
__global__ void swiglu_kernel(T* out, const T* gate, const T* up, std::int64_t n) {
  for (std::int64_t i = global_index(); i < n; i += global_stride()) {
    const C x = static_cast<C>(gate[i]);
    out[i] = T((x * backends::ew::sigmoid(x)) * static_cast<C>(up[i]));
  }
}

template <typename T, typename C>
__global__ void swiglu_backward_kernel(T* dgate, T* dup, const T* grad, const T* gate, const T* up,
                                       std::int64_t n) {
  for (std::int64_t i = global_index(); i < n; i += global_stride()) {
    const C g = static_cast<C>(grad[i]);
    const C x = static_cast<C>(gate[i]);
    dgate[i] = T(backends::ew::silu_grad(g * static_cast<C>(up[i]), x));
    dup[i] = T(g * (x * backends::ew::sigmoid(x)));
  }
}

}  // namespace

int launch_swiglu(int st, void* out, const void* gate, const void* up, std::int64_t n) {
  if (n == 0) return 0;
  return dispatch_float(st, [&](auto tag) {
    using T = decltype(tag);
    using C = compute_t<T>;
    TB_LAUNCH(blocks_for(n), kThreads, swiglu_kernel<T, C>)
    (static_cast<T*>(out), static_cast<const T*>(gate), static_cast<const T*>(up), n);
    return status();
  });
}

int launch_swiglu_backward(int st, void* dgate, void* dup, const void* grad, const void* gate,
                           const void* up, std::int64_t n) {
  if (n == 0) return 0;
  return dispatch_float(st, [&](auto tag) {
    using T = decltype(tag);
    using C = compute_t<T>;
    TB_LAUNCH(blocks_for(n), kThreads, swiglu_backward_kernel<T, C>)
    (static_cast<T*>(dgate), static_cast<T*>(dup), static_cast<const T*>(grad),
     static_cast<const T*>(gate), static_cast<const T*>(up), n);
    return status();
  });
}

int launch_index_select(int elem_size, void* out, const void* in, const std::int64_t* index,
                        std::int64_t n, std::int64_t outer, std::int64_t size, std::int64_t inner,
                        std::int64_t* bad) {
  const std::int64_t total = outer * n * inner;
  if (total == 0) return 0;
  return dispatch_bits(elem_size, [&](auto tag) {
    using U = decltype(tag);
    TB_LAUNCH(blocks_for(total), kThreads, index_select_kernel<U>)
    (static_cast<U*>(out), static_cast<const U*>(in), index, n, outer, size, inner, bad);
    return status();
  });
}

int launch_gather(int elem_size, void* out, const void* in, const std::int64_t* index,
                  std::int64_t dim_stride, std::int64_t dim_size, const Strided& s, std::int64_t n,
                  std::int64_t* bad) {
  if (n == 0) return 0;
  return dispatch_bits(elem_size, [&](auto tag) {
    using U = decltype(tag);
    TB_LAUNCH(blocks_for(n), kThreads, gather_kernel<U>)
    (static_cast<U*>(out), static_cast<const U*>(in), index, dim_stride, dim_size, s, n, bad);
    return status();
  });
}

int launch_scatter_add(int st, void* out, const std::int64_t* index, const void* src,
                       std::int64_t dim_stride, std::int64_t dim_size, const Strided& s,
                       std::int64_t n, std::int64_t* bad) {
  if (n == 0) return 0;
  return dispatch_all(st, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double> ||
                  std::is_same_v<T, core::Half> || std::is_same_v<T, core::BFloat16> ||
                  std::is_same_v<T, std::int32_t> || std::is_same_v<T, std::int64_t>) {
      TB_LAUNCH(blocks_for(n), kThreads, scatter_add_kernel<T>)
      (static_cast<T*>(out), index, static_cast<const T*>(src), dim_stride, dim_size, s, n, bad);
      return status();
    } else {
      return static_cast<int>(cudaErrorInvalidValue);
    }
  });
}

int launch_rope(int st, void* out, const void* x, const void* cos, const void* sin,
                std::int64_t rows, std::int64_t t_len, std::int64_t d) {
  if (rows == 0 || d < 2) return 0;
  return dispatch_float(st, [&](auto tag) {
    using T = decltype(tag);
    using C = compute_t<T>;
    TB_LAUNCH(blocks_for(rows * (d / 2)), kThreads, rope_kernel<T, C>)
    (static_cast<T*>(out), static_cast<const T*>(x), static_cast<const C*>(cos),
     static_cast<const C*>(sin), rows, t_len, d);
    return status();
  });
}

}  // namespace tb::cuda
