// The argument rules of the fused `adam_step_` operator, checked the same way by every backend's
// kernel (host code): one entry per parameter in every list and step tensor, one float32 or
// float64 dtype, contiguous tensors, all on `device`.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "engine/core/error.h"
#include "engine/core/tensor.h"

namespace tb::backends {

/// Throws naming the first offending list and entry; returns the parameters' dtype (nothing to
/// check and Float32 when the list is empty).
inline core::ScalarType check_adam_step_args(
    const std::vector<core::Tensor>& ps, const std::vector<core::Tensor>& gs,
    const std::vector<core::Tensor>& ms, const std::vector<core::Tensor>& vs,
    const std::vector<core::Tensor>& vmaxs, const core::Tensor& step_sizes,
    const core::Tensor& bc2_sqrts, const core::Device& device) {
  using core::ScalarType;
  const std::size_t n = ps.size();
  const bool amsgrad = !vmaxs.empty();
  TB_CHECK(gs.size() == n && ms.size() == n && vs.size() == n && (!amsgrad || vmaxs.size() == n) &&
               step_sizes.numel() == static_cast<std::int64_t>(n) &&
               bc2_sqrts.numel() == static_cast<std::int64_t>(n),
           "[adam_step_] the tensor lists and the step tensors must have one entry per parameter");
  if (n == 0) return ScalarType::Float32;
  const ScalarType dt = ps[0].dtype();
  TB_CHECK_T(TypeError, dt == ScalarType::Float32 || dt == ScalarType::Float64,
             "[adam_step_] the fused update takes float32 or float64 parameters, got ", dt);
  const char* names[] = {"params", "grads", "exp_avgs", "exp_avg_sqs", "max_exp_avg_sqs"};
  int li = 0;
  for (const auto* list : {&ps, &gs, &ms, &vs, &vmaxs}) {
    for (std::size_t i = 0; i < list->size(); ++i) {
      const core::Tensor& t = (*list)[i];
      TB_CHECK_T(TypeError, t.dtype() == dt && t.is_contiguous() && t.device() == device,
                 "[adam_step_] every tensor must be a contiguous ", dt, " tensor on ", device, "; ",
                 names[li], "[", i, "] is a ", t.is_contiguous() ? "contiguous " : "strided ",
                 t.dtype(), " tensor on ", t.device());
    }
    ++li;
  }
  return dt;
}

}  // namespace tb::backends
