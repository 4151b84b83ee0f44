// CUDA elementwise kernels: fill, the strided unary/binary/compare family whose arithmetic is
// shared with openreg (engine/backends/common/elementwise_math.h), where, masked_fill, strided
// and converting copies, and the triangle mirror of syrk. 16-bit floats compute in float.
#include "engine/backends/common/elementwise_math.h"
#include "engine/backends/cuda/cuda_device.cuh"

namespace tb::cuda {

namespace {

using namespace dev;  // NOLINT(google-build-using-namespace): kernel-file helpers

template <typename T>
__global__ void fill_kernel(T* dst, std::int64_t n, T value) {
  for (std::int64_t i = global_index(); i < n; i += global_stride())
    dst[i] = value;
}

template <typename T, typename C>
__global__ void unary_kernel(int op, T* out, const T* in, Strided s, std::int64_t n) {
  for (std::int64_t i = global_index(); i < n; i += global_stride()) {
    std::int64_t off[2];
    offsets_of<2>(s, i, off);
    out[off[0]] =
        T(backends::ew::apply<C>(static_cast<backends::ew::Unary>(op), static_cast<C>(in[off[1]])));
  }
}

template <typename T, typename C>
__global__ void binary_kernel(int op, T* out, const T* a, const T* b, C alpha, Strided s,
                              std::int64_t n) {
  for (std::int64_t i = global_index(); i < n; i += global_stride()) {
    std::int64_t off[3];
    offsets_of<3>(s, i, off);
    out[off[0]] =
        T(backends::ew::apply<C>(static_cast<backends::ew::Binary>(op), static_cast<C>(a[off[1]]),
                                 static_cast<C>(b[off[2]]), alpha));
  }
}

template <typename T, typename C>
__global__ void compare_kernel(int op, bool* out, const T* a, const T* b, Strided s,
                               std::int64_t n) {
  for (std::int64_t i = global_index(); i < n; i += global_stride()) {
    std::int64_t off[3];
    offsets_of<3>(s, i, off);
    out[off[0]] = backends::ew::compare<C>(static_cast<backends::ew::Compare>(op),
                                           static_cast<C>(a[off[1]]), static_cast<C>(b[off[2]]));
  }
}

template <typename U>
__global__ void where_kernel(U* out, const bool* cond, const U* a, const U* b, Strided s,
                             std::int64_t n) {
  for (std::int64_t i = global_index(); i < n; i += global_stride()) {
    std::int64_t off[4];
    offsets_of<4>(s, i, off);
    out[off[0]] = cond[off[1]] ? a[off[2]] : b[off[3]];
  }
}

template <typename U>
__global__ void masked_fill_kernel(U* out, const bool* mask, U value, Strided s, std::int64_t n) {
  for (std::int64_t i = global_index(); i < n; i += global_stride()) {
    std::int64_t off[2];
    offsets_of<2>(s, i, off);
    if (mask[off[1]]) out[off[0]] = value;
  }
}

template <typename U>
__global__ void strided_copy_kernel(U* out, const U* in, Strided s, std::int64_t n) {
  for (std::int64_t i = global_index(); i < n; i += global_stride()) {
    std::int64_t off[2];
    offsets_of<2>(s, i, off);
    out[off[0]] = in[off[1]];
  }
}

// Conversions as the CPU's: through the compute type; to bool is "!= 0"; float to integer
// truncates (out-of-range values are undefined, as in C++).
template <typename D, typename S>
__device__ inline D convert_one(S v) {
  using CS = compute_t<S>;
  const CS c = static_cast<CS>(v);
  if constexpr (std::is_same_v<D, bool>) {
    return c != CS(0);
  } else {
    using CD = compute_t<D>;
    return D(static_cast<CD>(c));
  }
}

template <typename D, typename S>
__global__ void convert_kernel(D* out, const S* in, Strided s, std::int64_t n) {
  for (std::int64_t i = global_index(); i < n; i += global_stride()) {
    std::int64_t off[2];
    offsets_of<2>(s, i, off);
    out[off[0]] = convert_one<D>(in[off[1]]);
  }
}

template <typename T>
__global__ void mirror_kernel(T* c, std::int64_t n, std::int64_t ldc) {
  const std::int64_t total = n * n;
  for (std::int64_t i = global_index(); i < total; i += global_stride()) {
    const std::int64_t r = i / n;
    const std::int64_t col = i % n;
    if (col > r) c[r * ldc + col] = c[col * ldc + r];
  }
}

// The conversion pairs handled on the device.
template <typename F>
int dispatch_convertible(int st, F&& f) {
  switch (static_cast<ScalarType>(st)) {
    case ScalarType::Int64:
      return f(std::int64_t{});
    case ScalarType::Int32:
      return f(std::int32_t{});
    case ScalarType::UInt8:
      return f(std::uint8_t{});
    case ScalarType::Bool:
      return f(bool{});
    default:
      return dispatch_float(st, f);
  }
}

bool convertible(int st) {
  switch (static_cast<ScalarType>(st)) {
    case ScalarType::Int64:
    case ScalarType::Int32:
    case ScalarType::UInt8:
    case ScalarType::Bool:
    case ScalarType::Float32:
    case ScalarType::Float64:
    case ScalarType::Float16:
    case ScalarType::BFloat16:
      return true;
    default:
      return false;
  }
}

}  // namespace

int launch_fill(void* dst, std::int64_t n, int elem_size, const void* value) {
  if (n == 0) return 0;
  return dispatch_bits(elem_size, [&](auto tag) {
    using U = decltype(tag);
    TB_LAUNCH(blocks_for(n), kThreads, fill_kernel<U>)
    (static_cast<U*>(dst), n, from_host_bits<U>(value));
    return status();
  });
}

int launch_unary(int op, int st, void* out, const void* in, const Strided& s, std::int64_t n) {
  if (n == 0) return 0;
  return dispatch_float(st, [&](auto tag) {
    using T = decltype(tag);
    TB_LAUNCH(blocks_for(n), kThreads, unary_kernel<T, compute_t<T>>)
    (op, static_cast<T*>(out), static_cast<const T*>(in), s, n);
    return status();
  });
}

int launch_binary(int op, int st, void* out, const void* a, const void* b, double alpha,
                  const Strided& s, std::int64_t n) {
  if (n == 0) return 0;
  const auto type = static_cast<ScalarType>(st);
  if (type != ScalarType::Int64 && type != ScalarType::Int32 && !core::is_floating_point(type)) {
    return static_cast<int>(cudaErrorInvalidValue);
  }
  return dispatch_all(st, [&](auto tag) {
    using T = decltype(tag);
    using C = compute_t<T>;
    if constexpr (std::is_same_v<T, std::int64_t> || std::is_same_v<T, std::int32_t> ||
                  std::is_floating_point_v<C>) {
      TB_LAUNCH(blocks_for(n), kThreads, binary_kernel<T, C>)
      (op, static_cast<T*>(out), static_cast<const T*>(a), static_cast<const T*>(b),
       static_cast<C>(alpha), s, n);
      return status();
    } else {
      return static_cast<int>(cudaErrorInvalidValue);
    }
  });
}

int launch_compare(int op, int st, bool* out, const void* a, const void* b, const Strided& s,
                   std::int64_t n) {
  if (n == 0) return 0;
  return dispatch_all(st, [&](auto tag) {
    using T = decltype(tag);
    TB_LAUNCH(blocks_for(n), kThreads, compare_kernel<T, compute_t<T>>)
    (op, out, static_cast<const T*>(a), static_cast<const T*>(b), s, n);
    return status();
  });
}

int launch_where(int elem_size, void* out, const bool* cond, const void* a, const void* b,
                 const Strided& s, std::int64_t n) {
  if (n == 0) return 0;
  return dispatch_bits(elem_size, [&](auto tag) {
    using U = decltype(tag);
    TB_LAUNCH(blocks_for(n), kThreads, where_kernel<U>)
    (static_cast<U*>(out), cond, static_cast<const U*>(a), static_cast<const U*>(b), s, n);
    return status();
  });
}

int launch_masked_fill(int elem_size, void* out, const bool* mask, const void* value,
                       const Strided& s, std::int64_t n) {
  if (n == 0) return 0;
  return dispatch_bits(elem_size, [&](auto tag) {
    using U = decltype(tag);
    TB_LAUNCH(blocks_for(n), kThreads, masked_fill_kernel<U>)
    (static_cast<U*>(out), mask, from_host_bits<U>(value), s, n);
    return status();
  });
}

int launch_strided_copy(int elem_size, void* out, const void* in, const Strided& s,
                        std::int64_t n) {
  if (n == 0) return 0;
  return dispatch_bits(elem_size, [&](auto tag) {
    using U = decltype(tag);
    TB_LAUNCH(blocks_for(n), kThreads, strided_copy_kernel<U>)
    (static_cast<U*>(out), static_cast<const U*>(in), s, n);
    return status();
  });
}

bool can_convert_on_device(int dst_st, int src_st) {
  return convertible(dst_st) && convertible(src_st);
}

int launch_convert(int dst_st, void* dst, int src_st, const void* src, const Strided& s,
                   std::int64_t n) {
  if (n == 0) return 0;
  if (!can_convert_on_device(dst_st, src_st)) return static_cast<int>(cudaErrorInvalidValue);
  return dispatch_convertible(dst_st, [&](auto dtag) {
    using D = decltype(dtag);
    return dispatch_convertible(src_st, [&](auto stag) {
      using S = decltype(stag);
      TB_LAUNCH(blocks_for(n), kThreads, convert_kernel<D, S>)
      (static_cast<D*>(dst), static_cast<const S*>(src), s, n);
      return status();
    });
  });
}

int launch_mirror_lower(int st, void* c, std::int64_t n, std::int64_t ldc) {
  if (n == 0) return 0;
  return dispatch_float(st, [&](auto tag) {
    using T = decltype(tag);
    TB_LAUNCH(blocks_for(n * n), kThreads, mirror_kernel<T>)(static_cast<T*>(c), n, ldc);
    return status();
  });
}

}  // namespace tb::cuda
