// Autocast (automatic mixed precision for the forward pass): while an AutocastGuard is alive on a
// thread, every op on tensors of the guard's device type passes through one boxed fallback at the
// Autocast dispatch key, which casts the op's floating-point inputs by a per-op policy and then
// runs the op below the Autocast layer:
//
//   * LowerPrecision (matmul-like: mm, addmm, bmm, baddbmm, syrk — matmul is made of mm/bmm):
//     float32 (and the other 16-bit type) inputs are cast to the guard's dtype (bf16 or fp16);
//   * Float32 (reductions, softmax/log_softmax, norm, exp/log-type ops, losses): 16-bit inputs
//     are cast up to float32;
//   * Promote (every other op): floating inputs are cast to the widest floating input dtype.
//
// Ops that write into an argument (in-place, out=) are never cast, nor are non-floating inputs
// (indices, targets). An op with a float64 input is left alone. The casts go through copy_, which
// autograd records, so gradients flow back to the float32 leaves in their own dtype. The policy
// table is kAutocastPolicy in autocast.cpp (one place).
//
// Call backward() outside the guard, as in PyTorch (the backward ops then run in the dtypes the
// forward saved). Casts of the same weight are not cached between ops (PyTorch caches them).
#pragma once

#include <string_view>

#include "engine/core/device.h"
#include "engine/core/scalar_type.h"
#include "engine/dispatch/dispatch_key.h"

namespace tb::dispatch {
class Dispatcher;
}

namespace tb::amp {

/// How the autocast fallback treats an op's floating-point inputs.
enum class AutocastCategory {
  LowerPrecision,  ///< cast to the autocast dtype (bf16/fp16)
  Float32,         ///< cast 16-bit inputs up to float32
  Promote,         ///< cast to the widest floating input dtype
};

/// The category of the op named `op` (Promote for every op not in the table).
AutocastCategory autocast_category(std::string_view op);

/// True while autocast is enabled on this thread for `device_type`.
bool is_autocast_enabled(core::DeviceType device_type);
/// The lower-precision dtype autocast uses for `device_type` on this thread (bf16 by default).
core::ScalarType autocast_dtype(core::DeviceType device_type);

/// RAII: enables (or, with enabled = false, disables) autocast for `device_type` on this thread
/// while it lives; nests, restoring the previous state on destruction. `dtype` must be BFloat16
/// or Float16 (else tb::TypeError naming 'dtype').
class AutocastGuard {
 public:
  /// Sets this thread's autocast state for `device_type`.
  explicit AutocastGuard(core::DeviceType device_type,
                         core::ScalarType dtype = core::ScalarType::BFloat16, bool enabled = true);
  /// Restores the state in effect at construction.
  ~AutocastGuard();
  AutocastGuard(const AutocastGuard&) = delete;
  AutocastGuard& operator=(const AutocastGuard&) = delete;

 private:
  core::DeviceType device_type_;
  bool previous_enabled_;
  core::ScalarType previous_dtype_;
  dispatch::IncludeKeysGuard include_;
};

/// Registers the autocast fallback at the Autocast key (called once by register_all).
void register_autocast(dispatch::Dispatcher& d);

}  // namespace tb::amp
