// CUDA backend stub, compiled when the build has no CUDA toolkit (TB_CUDA=OFF or no nvcc):
// registers nothing and reports why, so `cuda` devices fail validation with a clear reason.
#include "engine/backends/cuda/cuda_status.h"
#include "engine/core/device.h"
#include "engine/dispatch/dispatcher.h"

namespace tb::backends {

CudaStatus cuda_status() {
  CudaStatus s;
  s.reason =
      "this build of TrainBench has no CUDA backend (configured with TB_CUDA=OFF or without nvcc)";
  return s;
}

std::string cuda_blas_unavailable_reason(bool) {
  return cuda_status().reason;
}

void register_cuda_backend(dispatch::Dispatcher&) {
  core::register_device_probe(core::DeviceType::CUDA,
                              [](core::DeviceIndex) { return cuda_status().reason; });
}

}  // namespace tb::backends
