// Device-side helpers shared by the CUDA kernel files: dtype dispatch, grid-stride loops,
// strided offsets and warp/block reductions. Included by .cu files only.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstring>

#include "engine/backends/cuda/cuda_kernels.h"
#include "engine/core/half.h"
#include "engine/core/scalar_type.h"

/// Kernel launch: TB_LAUNCH(grid, block, kernel)(args...). Under the CPU emulation of the test
/// build (tests/cuda_emu, TB_CUDA_EMULATION) the same kernels run on host threads.
#if defined(TB_CUDA_EMULATION)
#define TB_LAUNCH(grid, block, ...) ::tb_emu::launch(grid, block, __VA_ARGS__)
#else
#define TB_LAUNCH(grid, block, ...) __VA_ARGS__<<<grid, block>>>
#endif

namespace tb::cuda::dev {

using core::ScalarType;

inline constexpr int kThreads = 256;
inline constexpr int kWarp = 32;

/// Blocks for a grid-stride loop over n elements (capped: the loop covers the rest).
inline int blocks_for(std::int64_t n, int threads = kThreads) {
  const std::int64_t b = (n + threads - 1) / threads;
  return static_cast<int>(b < 65535 * 16 ? (b < 1 ? 1 : b) : 65535 * 16);
}

inline int status() {
  return static_cast<int>(cudaGetLastError());
}

/// The compute type of a storage type: float for the 16-bit floats, the type itself otherwise.
template <typename T>
struct Compute {
  using type = T;
};
template <>
struct Compute<core::Half> {
  using type = float;
};
template <>
struct Compute<core::BFloat16> {
  using type = float;
};
template <typename T>
using compute_t = typename Compute<T>::type;

/// Calls f(T{}) for float32 or float64 only (kernels whose public ops convert other dtypes
/// first); cudaErrorInvalidValue for another dtype.
template <typename F>
int dispatch_float_double(int st, F&& f) {
  switch (static_cast<ScalarType>(st)) {
    case ScalarType::Float32:
      return f(float{});
    case ScalarType::Float64:
      return f(double{});
    default:
      return static_cast<int>(cudaErrorInvalidValue);
  }
}

/// Calls f(T{}) for a float dtype (float32/64, float16, bfloat16); returns f's status, or
/// cudaErrorInvalidValue for another dtype.
template <typename F>
int dispatch_float(int st, F&& f) {
  switch (static_cast<ScalarType>(st)) {
    case ScalarType::Float16:
      return f(core::Half{});
    case ScalarType::BFloat16:
      return f(core::BFloat16{});
    default:
      return dispatch_float_double(st, f);
  }
}

/// As dispatch_float, plus int64, int32, int16, int8, uint8 and bool.
template <typename F>
int dispatch_all(int st, F&& f) {
  switch (static_cast<ScalarType>(st)) {
    case ScalarType::Int64:
      return f(std::int64_t{});
    case ScalarType::Int32:
      return f(std::int32_t{});
    case ScalarType::Int16:
      return f(std::int16_t{});
    case ScalarType::Int8:
      return f(std::int8_t{});
    case ScalarType::UInt8:
      return f(std::uint8_t{});
    case ScalarType::Bool:
      return f(bool{});
    default:
      return dispatch_float(st, f);
  }
}

/// Calls f(U{}) with an unsigned integer type of `elem_size` bytes (bit copies).
template <typename F>
int dispatch_bits(int elem_size, F&& f) {
  switch (elem_size) {
    case 1:
      return f(std::uint8_t{});
    case 2:
      return f(std::uint16_t{});
    case 4:
      return f(std::uint32_t{});
    case 8:
      return f(std::uint64_t{});
    default:
      return static_cast<int>(cudaErrorInvalidValue);
  }
}

template <typename T>
T from_host_bits(const void* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

/// Element offsets of linear index i in each of the first N operands of s.
template <int N>
__device__ inline void offsets_of(const Strided& s, std::int64_t i, std::int64_t (&off)[N]) {
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

/// First index of the grid-stride loop and its step.
__device__ inline std::int64_t global_index() {
  return blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
}
__device__ inline std::int64_t global_stride() {
  return static_cast<std::int64_t>(gridDim.x) * blockDim.x;
}

template <typename A>
__device__ inline A warp_sum(A v) {
  for (int o = kWarp / 2; o > 0; o /= 2)
    v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

/// NaN-propagating max (a NaN anywhere gives NaN).
template <typename A>
__device__ inline A nan_max(A a, A b) {
  return (a != a || b != b) ? (a != a ? a : b) : (a > b ? a : b);
}

template <typename A>
__device__ inline A warp_max(A v) {
  for (int o = kWarp / 2; o > 0; o /= 2)
    v = nan_max(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

/// Sum over the block (blockDim.x a multiple of 32, at most 1024); every thread gets the result.
template <typename A>
__device__ inline A block_sum(A v) {
  __shared__ A partial[32];
  const int lane = threadIdx.x % kWarp;
  const int warp = threadIdx.x / kWarp;
  v = warp_sum(v);
  __syncthreads();  // partial may still be read by a previous call
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  const int warps = blockDim.x / kWarp;
  A total = lane < warps ? partial[lane] : A(0);
  return warp_sum(total);
}

/// NaN-propagating max over the block; every thread gets the result.
template <typename A>
__device__ inline A block_max(A v, A lowest) {
  __shared__ A partial[32];
  const int lane = threadIdx.x % kWarp;
  const int warp = threadIdx.x / kWarp;
  v = warp_max(v);
  __syncthreads();
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  const int warps = blockDim.x / kWarp;
  A m = lane < warps ? partial[lane] : lowest;
  return warp_max(m);
}

}  // namespace tb::cuda::dev
