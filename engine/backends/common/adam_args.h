// The argument rules of the fused optimizer operators (`adam_step_`, `sgd_step_`, and the lerps
// `foreach_lerp_` / `muon_momentum_`), checked the same way by every backend's kernel (host
// code): one entry per parameter in every list and step tensor, one float dtype (float32 or
// float64 for the Adam and SGD steps), contiguous tensors, all on `device`.
#pragma once

#include <cstdint>
#include <vector>

#include "engine/backends/common/tensor_lists.h"

namespace tb::backends {

/// Throws naming the first offending list and entry; returns the parameters' dtype (nothing to
/// check and Float32 when the list is empty).
inline core::ScalarType check_adam_step_args(
    const std::vector<core::Tensor>& ps, const std::vector<core::Tensor>& gs,
    const std::vector<core::Tensor>& ms, const std::vector<core::Tensor>& vs,
    const std::vector<core::Tensor>& vmaxs, const core::Tensor& step_sizes,
    const core::Tensor& bc2_sqrts, const core::Device& device) {
  using core::ScalarType;
  const auto n = static_cast<std::int64_t>(ps.size());
  TB_CHECK(step_sizes.numel() == n && bc2_sqrts.numel() == n,
           "[adam_step_] the step tensors must have one entry per parameter (", n,
           "), got step_sizes ", step_sizes.numel(), " and bc2_sqrts ", bc2_sqrts.numel());
  const ScalarType dt = check_tensor_lists("adam_step_",
                                           {{"params", &ps},
                                            {"grads", &gs},
                                            {"exp_avgs", &ms},
                                            {"exp_avg_sqs", &vs},
                                            {"max_exp_avg_sqs", &vmaxs, true}},
                                           device);
  TB_CHECK_T(TypeError, dt == ScalarType::Float32 || dt == ScalarType::Float64,
             "[adam_step_] the fused update takes float32 or float64 parameters, got ", dt);
  return dt;
}

/// The rules of the fused `sgd_step_` operator: params, grads and (when momentum is not 0)
/// momentum_buffers as check_tensor_lists, one first_steps entry (0 or 1) per buffer, and
/// float32 or float64. Throws naming the first offending list and entry; returns the dtype.
inline core::ScalarType check_sgd_step_args(const std::vector<core::Tensor>& ps,
                                            const std::vector<core::Tensor>& gs,
                                            const std::vector<core::Tensor>& bufs,
                                            core::IntList first_steps, double momentum,
                                            const core::Device& device) {
  using core::ScalarType;
  TB_CHECK(momentum == 0.0 || bufs.size() == ps.size(), "[sgd_step_] momentum ", momentum,
           " needs one momentum buffer per parameter (", ps.size(), "), got ", bufs.size());
  TB_CHECK(momentum != 0.0 || bufs.empty(),
           "[sgd_step_] momentum 0 takes no momentum buffers, got ", bufs.size());
  TB_CHECK(first_steps.size() == bufs.size(), "[sgd_step_] first_steps has ", first_steps.size(),
           " entries but momentum_buffers has ", bufs.size());
  const ScalarType dt = check_tensor_lists(
      "sgd_step_", {{"params", &ps}, {"grads", &gs}, {"momentum_buffers", &bufs, true}}, device);
  TB_CHECK_T(TypeError, dt == ScalarType::Float32 || dt == ScalarType::Float64,
             "[sgd_step_] the fused update takes float32 or float64 parameters, got ", dt);
  return dt;
}

/// The rules of `foreach_lerp_` (selfs, ends, weight) and `muon_momentum_` (bufs, grads, outs):
/// the lists as check_tensor_lists, a floating dtype, and a weight (when defined) that is a
/// one-element floating tensor on `device` or the CPU. Returns the dtype.
inline core::ScalarType check_lerp_args(const char* op, std::initializer_list<NamedList> lists,
                                        const core::Tensor* weight, const core::Device& device) {
  const core::ScalarType dt = check_tensor_lists(op, lists, device);
  TB_CHECK_T(TypeError, core::is_floating_point(dt), "[", op,
             "] takes floating-point tensors, got ", dt);
  if (weight != nullptr && weight->defined()) {
    TB_CHECK(weight->numel() == 1 && core::is_floating_point(weight->dtype()) &&
                 (weight->device() == device || weight->device().is_cpu()),
             "[", op, "] the weight must be a one-element floating tensor on ", device,
             " or the CPU, got a ", weight->dtype(), " tensor of ", weight->numel(),
             " elements on ", weight->device());
  }
  return dt;
}

}  // namespace tb::backends
