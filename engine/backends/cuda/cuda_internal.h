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

/// True for the float dtypes (float32/64, float16, bfloat16).
inline bool is_float(core::ScalarType t) {
  return core::is_floating_point(t);
}

/// Throws tb::NotImplementedError naming the op unless t has a float dtype.
inline void require_float(const core::Tensor& t, const char* op) {
  TB_CHECK_T(NotImplementedError, is_float(t.dtype()), "[", op,
             "] the CUDA backend computes float32, float64, float16 and bfloat16 tensors here, "
             "got ",
             t.dtype());
}

/// Throws tb::TypeError naming the op and both devices unless a and b are on one device.
inline void same_device(const char* op, const core::Tensor& a, const core::Tensor& b) {
  TB_CHECK_T(TypeError, a.device() == b.device(), "[", op,
             "] expected all tensors on the same device, got ", a.device(), " and ", b.device());
}

/// Kernel registration of the CUDA backend, by family (cuda_ops.cpp, cuda_optim_ops.cpp,
/// cuda_nn_ops.cpp, cuda_conv_ops.cpp, cuda_blas.cpp).
void register_cuda_ops(dispatch::Dispatcher& d);
void register_cuda_optim_ops(dispatch::Dispatcher& d);
void register_cuda_nn_ops(dispatch::Dispatcher& d);
void register_cuda_conv_ops(dispatch::Dispatcher& d);
void register_cuda_blas(dispatch::Dispatcher& d);

}  // namespace tb::backends::cuda_detail
