// Host-side helpers of the CUDA backend's C++ files (not a public header): error checks, the
// device guard, launch descriptors and scratch buffers.
#pragma once

#include <cuda_runtime.h>

#include <initializer_list>
#include <string>

#include "engine/backends/cuda/cuda_kernels.h"
#include "engine/core/error.h"
#include "engine/core/tensor.h"
#include "engine/dispatch/dispatcher.h"

namespace tb::backends::cuda_detail {

/// Throws tb::Error "[cuda] <what> failed: <CUDA's message> (<name>)" unless err is cudaSuccess.
void check_cuda(cudaError_t err, const char* what);

/// check_cuda for a launcher's int status, naming the op.
inline void check_launch(int status, const char* op) {
  if (status != 0) {
    const auto err = static_cast<cudaError_t>(status);
    throw Error(tb::detail::str_cat("[", op, "] CUDA kernel launch failed: ",
                                    cudaGetErrorString(err), " (", cudaGetErrorName(err), ")"));
  }
}

/// Makes `index` the current device for the guard's lifetime.
class DeviceGuard {
 public:
  explicit DeviceGuard(int index);
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = 0;
};

/// Shapes and strides of an elementwise launch: `out` and the inputs broadcast to its shape.
tb::cuda::Strided strided_of(const core::Tensor& out, std::initializer_list<core::Tensor> inputs,
                             const char* op);

/// A device buffer of `bytes` bytes on `device` (through the caching allocator).
core::Tensor scratch(std::int64_t bytes, const core::Device& device);

/// The scalar type as the launchers take it.
inline int st(const core::Tensor& t) {
  return static_cast<int>(t.dtype());
}

/// Kernel registration of the CUDA backend, by family (cuda_ops.cpp, cuda_blas.cpp).
void register_cuda_ops(dispatch::Dispatcher& d);
void register_cuda_blas(dispatch::Dispatcher& d);

}  // namespace tb::backends::cuda_detail
