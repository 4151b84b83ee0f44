// Launchers of the CUDA kernels (defined in cuda_kernels.cu). Pointers are device pointers;
// `n` counts elements; every launcher runs on the current device's default stream and returns
// the launch status (cudaSuccess or an error code) without synchronising.
#pragma once

#include <cstdint>

namespace tb::cuda {

/// Fills n elements of `elem_size` bytes at `dst` with the bit pattern at `value` (host memory).
int launch_fill(void* dst, std::int64_t n, int elem_size, const void* value);

/// Most dimensions a strided launch handles.
inline constexpr int kMaxDims = 8;

/// Shape and element strides of up to three operands of one elementwise launch (operand 0 is the
/// output; inputs are already broadcast to its shape, with stride 0 where broadcast).
struct Strided {
  int ndim = 0;
  std::int64_t sizes[kMaxDims] = {};
  std::int64_t strides[3][kMaxDims] = {};
};

/// out = op(in) elementwise (op: an ew::Unary code; dtype: 0 float32, 1 float64, 2 float16,
/// 3 bfloat16 — the 16-bit types compute in float).
int launch_unary(int op, int dtype, void* out, const void* in, const Strided& s, std::int64_t n);

/// out = op(a, b, alpha) elementwise (op: an ew::Binary code; dtype codes as launch_unary's
/// plus 4 int64, 5 int32).
int launch_binary(int op, int dtype, void* out, const void* a, const void* b, double alpha,
                  const Strided& s, std::int64_t n);

/// Same-dtype copy between strided layouts (elements of `elem_size` bytes: 1, 2, 4 or 8).
int launch_strided_copy(int elem_size, void* out, const void* in, const Strided& s, std::int64_t n);

}  // namespace tb::cuda
