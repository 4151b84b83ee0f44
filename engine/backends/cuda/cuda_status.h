// What the CUDA backend can offer in this build and on this machine (compiled in or not,
// driver and device count), with the reason when it cannot be used.
#pragma once

#include <optional>
#include <string>

namespace tb::backends {

struct CudaStatus {
  bool compiled = false;  ///< the backend was built (TB_CUDA found nvcc)
  int device_count = 0;   ///< usable devices (0 when none or no driver)
  std::string reason;     ///< why no device can be used ("" when device_count > 0)
  std::string runtime;    ///< runtime/driver versions when known
};

/// Queries the CUDA runtime once (cached). Never throws; never crashes without a driver.
CudaStatus cuda_status();

/// Why CUDA GEMMs cannot use cuBLAS (lt = false) or cuBLASLt (lt = true) here, "" when they can:
/// no usable device, or the library does not load (this loads it: ~0.5 s the first time).
std::string cuda_blas_unavailable_reason(bool lt);

}  // namespace tb::backends
