// CUDA kernels: fill and the strided elementwise family (unary, binary with
// broadcasting, strided copy) whose arithmetic is shared with openreg
// (engine/backends/common/elementwise_math.h). 16-bit types compute in float. Buffers are flat
// [n] for fill; strided launches address each operand through a Strided descriptor.
#include <cuda_runtime.h>

#include <cstring>

#include "engine/backends/common/elementwise_math.h"
#include "engine/backends/cuda/cuda_kernels.h"
#include "engine/core/half.h"

namespace tb::cuda {

namespace {

constexpr int kThreads = 256;

int blocks_for(std::int64_t n) {
  const std::int64_t b = (n + kThreads - 1) / kThreads;
  return static_cast<int>(b < 65535 * 16 ? b : 65535 * 16);
}

template <typename T>
__global__ void fill_kernel(T* dst, std::int64_t n, T value) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    dst[i] = value;
  }
}

template <typename T>
int fill_as(void* dst, std::int64_t n, const void* value) {
  T v;
  std::memcpy(&v, value, sizeof(T));
  fill_kernel<T><<<blocks_for(n), kThreads>>>(static_cast<T*>(dst), n, v);
  return static_cast<int>(cudaGetLastError());
}

// Element offsets of linear index i in each of the first N operands.
template <int N>
__device__ void offsets_of(const Strided& s, std::int64_t i, std::int64_t (&off)[N]) {
  for (int k = 0; k < N; ++k)
    off[k] = 0;
  for (int d = s.ndim - 1; d >= 0; --d) {
    const std::int64_t size = s.sizes[d];
    const std::int64_t idx = i % size;
    i /= size;
    for (int k = 0; k < N; ++k)
      off[k] += idx * s.strides[k][d];
  }
}

template <typename T, typename C>
__global__ void unary_kernel(int op, T* out, const T* in, Strided s, std::int64_t n) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    std::int64_t off[2];
    offsets_of<2>(s, i, off);
    out[off[0]] =
        T(backends::ew::apply<C>(static_cast<backends::ew::Unary>(op), static_cast<C>(in[off[1]])));
  }
}

template <typename T, typename C>
__global__ void binary_kernel(int op, T* out, const T* a, const T* b, C alpha, Strided s,
                              std::int64_t n) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    std::int64_t off[3];
    offsets_of<3>(s, i, off);
    out[off[0]] =
        T(backends::ew::apply<C>(static_cast<backends::ew::Binary>(op), static_cast<C>(a[off[1]]),
                                 static_cast<C>(b[off[2]]), alpha));
  }
}

template <typename T>
__global__ void strided_copy_kernel(T* out, const T* in, Strided s, std::int64_t n) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    std::int64_t off[2];
    offsets_of<2>(s, i, off);
    out[off[0]] = in[off[1]];
  }
}

template <typename T, typename C>
int unary_as(int op, void* out, const void* in, const Strided& s, std::int64_t n) {
  unary_kernel<T, C>
      <<<blocks_for(n), kThreads>>>(op, static_cast<T*>(out), static_cast<const T*>(in), s, n);
  return static_cast<int>(cudaGetLastError());
}

template <typename T, typename C>
int binary_as(int op, void* out, const void* a, const void* b, double alpha, const Strided& s,
              std::int64_t n) {
  binary_kernel<T, C>
      <<<blocks_for(n), kThreads>>>(op, static_cast<T*>(out), static_cast<const T*>(a),
                                    static_cast<const T*>(b), static_cast<C>(alpha), s, n);
  return static_cast<int>(cudaGetLastError());
}

template <typename T>
int copy_as(void* out, const void* in, const Strided& s, std::int64_t n) {
  strided_copy_kernel<T>
      <<<blocks_for(n), kThreads>>>(static_cast<T*>(out), static_cast<const T*>(in), s, n);
  return static_cast<int>(cudaGetLastError());
}

}  // namespace

int launch_unary(int op, int dtype, void* out, const void* in, const Strided& s, std::int64_t n) {
  if (n == 0) return 0;
  switch (dtype) {
    case 0:
      return unary_as<float, float>(op, out, in, s, n);
    case 1:
      return unary_as<double, double>(op, out, in, s, n);
    case 2:
      return unary_as<core::Half, float>(op, out, in, s, n);
    case 3:
      return unary_as<core::BFloat16, float>(op, out, in, s, n);
    default:
      return static_cast<int>(cudaErrorInvalidValue);
  }
}

int launch_binary(int op, int dtype, void* out, const void* a, const void* b, double alpha,
                  const Strided& s, std::int64_t n) {
  if (n == 0) return 0;
  switch (dtype) {
    case 0:
      return binary_as<float, float>(op, out, a, b, alpha, s, n);
    case 1:
      return binary_as<double, double>(op, out, a, b, alpha, s, n);
    case 2:
      return binary_as<core::Half, float>(op, out, a, b, alpha, s, n);
    case 3:
      return binary_as<core::BFloat16, float>(op, out, a, b, alpha, s, n);
    case 4:
      return binary_as<std::int64_t, std::int64_t>(op, out, a, b, alpha, s, n);
    case 5:
      return binary_as<std::int32_t, std::int32_t>(op, out, a, b, alpha, s, n);
    default:
      return static_cast<int>(cudaErrorInvalidValue);
  }
}

int launch_strided_copy(int elem_size, void* out, const void* in, const Strided& s,
                        std::int64_t n) {
  if (n == 0) return 0;
  switch (elem_size) {
    case 1:
      return copy_as<std::uint8_t>(out, in, s, n);
    case 2:
      return copy_as<std::uint16_t>(out, in, s, n);
    case 4:
      return copy_as<std::uint32_t>(out, in, s, n);
    case 8:
      return copy_as<std::uint64_t>(out, in, s, n);
    default:
      return static_cast<int>(cudaErrorInvalidValue);
  }
}

int launch_fill(void* dst, std::int64_t n, int elem_size, const void* value) {
  if (n == 0) return 0;
  switch (elem_size) {
    case 1:
      return fill_as<std::uint8_t>(dst, n, value);
    case 2:
      return fill_as<std::uint16_t>(dst, n, value);
    case 4:
      return fill_as<std::uint32_t>(dst, n, value);
    case 8:
      return fill_as<std::uint64_t>(dst, n, value);
    default:
      return static_cast<int>(cudaErrorInvalidValue);
  }
}

}  // namespace tb::cuda
