// Launchers of the CUDA kernels (defined in cuda_kernels.cu). Pointers are device pointers;
// `n` counts elements; every launcher runs on the current device's default stream and returns
// the launch status (cudaSuccess or an error code) without synchronising.
#pragma once

#include <cstdint>

namespace tb::cuda {

/// Fills n elements of `elem_size` bytes at `dst` with the bit pattern at `value` (host memory).
int launch_fill(void* dst, std::int64_t n, int elem_size, const void* value);

/// out[i] = a[i] + alpha * b[i] for n contiguous elements of the given dtype code
/// (0 float32, 1 float64, 2 float16, 3 bfloat16).
int launch_add(void* out, const void* a, const void* b, double alpha, std::int64_t n, int dtype);

}  // namespace tb::cuda
