// The checked entry points of GradScaler's two dispatcher ops (engine/amp/grad_scaler.h):
// amp_foreach_non_finite_check_and_unscale_ and amp_update_scale_. The checks are here; the
// kernels (engine/backends/cpu/amp_kernels.cpp, the CUDA backend's) only compute.
#include "engine/core/error.h"
#include "engine/dispatch/dispatcher.h"
#include "engine/dispatch/grad_mode.h"
#include "engine/dispatch/op_signatures.h"
#include "engine/ops/ops.h"

namespace tb::ops {

using dispatch::Dispatcher;

namespace {

void check_flag_tensor(const char* op, const Tensor& t, const char* arg, ScalarType dtype) {
  TB_CHECK(t.defined(), "[", op, "] argument '", arg, "' is an undefined tensor");
  TB_CHECK(t.numel() == 1, "[", op, "] '", arg, "' must be a 1-element tensor, got ", t.numel(),
           " elements");
  TB_CHECK_T(TypeError, t.dtype() == dtype, "[", op, "] '", arg, "' must be ", dtype, ", got ",
             t.dtype());
}

}  // namespace

void amp_foreach_non_finite_check_and_unscale_(const std::vector<Tensor>& grads, Tensor& found_inf,
                                               const Tensor& inv_scale) {
  constexpr const char* name = "amp_foreach_non_finite_check_and_unscale_";
  static const auto op = Dispatcher::singleton().typed<sig::AmpUnscale>(name);
  if (grads.empty()) return;
  check_flag_tensor(name, found_inf, "found_inf", ScalarType::Float32);
  check_flag_tensor(name, inv_scale, "inv_scale", ScalarType::Float32);
  const Tensor& first = grads[0];
  TB_CHECK(first.defined(), "[", name, "] grads[0] is an undefined tensor");
  for (std::size_t i = 0; i < grads.size(); ++i) {
    const Tensor& g = grads[i];
    TB_CHECK(g.defined(), "[", name, "] grads[", i, "] is an undefined tensor");
    TB_CHECK_T(TypeError, g.device() == first.device(), "[", name, "] grads[", i, "] is on ",
               g.device(), " but grads[0] is on ", first.device(),
               " (group the tensors by device and dtype)");
    TB_CHECK_T(TypeError, g.dtype() == first.dtype(), "[", name, "] grads[", i, "] is ", g.dtype(),
               " but grads[0] is ", first.dtype(), " (group the tensors by device and dtype)");
    TB_CHECK_T(TypeError, core::is_floating_point(g.dtype()), "[", name, "] grads[", i,
               "] must be floating point, got ", g.dtype());
  }
  TB_CHECK_T(TypeError, found_inf.device() == first.device(), "[", name,
             "] found_inf must be on the grads' device ", first.device(), ", got ",
             found_inf.device());
  TB_CHECK_T(TypeError, inv_scale.device() == first.device(), "[", name,
             "] inv_scale must be on the grads' device ", first.device(), ", got ",
             inv_scale.device());
  dispatch::NoGradGuard no_grad;
  op.call(grads, found_inf, inv_scale);
  found_inf.impl()->version++;
  for (const Tensor& g : grads)
    g.impl()->version++;
}

void amp_update_scale_(Tensor& scale, Tensor& growth_tracker, const Tensor& found_inf,
                       double growth_factor, double backoff_factor, std::int64_t growth_interval) {
  constexpr const char* name = "amp_update_scale_";
  static const auto op = Dispatcher::singleton().typed<sig::AmpUpdateScale>(name);
  check_flag_tensor(name, scale, "scale", ScalarType::Float32);
  check_flag_tensor(name, growth_tracker, "growth_tracker", ScalarType::Int32);
  check_flag_tensor(name, found_inf, "found_inf", ScalarType::Float32);
  TB_CHECK_T(TypeError,
             growth_tracker.device().type() == scale.device().type() &&
                 found_inf.device().type() == scale.device().type(),
             "[", name, "] scale, growth_tracker and found_inf must be on one device type, got ",
             scale.device(), ", ", growth_tracker.device(), " and ", found_inf.device());
  dispatch::NoGradGuard no_grad;
  op.call(scale, growth_tracker, found_inf, growth_factor, backoff_factor, growth_interval);
  scale.impl()->version++;
  growth_tracker.impl()->version++;
}

}  // namespace tb::ops
