// The CUDA backend's multi-tensor optimizer and mixed-precision kernels (host side): GradScaler's
// unscale and scale update, the fused Adam/AdamW and SGD steps, foreach_lerp_ (EMA/SWA) and
// Muon's momentum — argument checks shared with the CPU (../common/adam_args.h), pointer lists,
// and the launches of cuda_optim.cu, registered at the CUDA dispatch key.
#include <utility>
#include <vector>

#include "engine/backends/common/adam_args.h"
#include "engine/backends/cuda/cuda_internal.h"
#include "engine/backends/cuda/cuda_kernels.h"
#include "engine/core/error.h"
#include "engine/core/tensor.h"
#include "engine/dispatch/op_signatures.h"

namespace tb::backends::cuda_detail {

namespace {

using core::Device;
using core::ScalarType;
using core::Tensor;
namespace kern = tb::cuda;

// ---- GradScaler, fused Adam and SGD -------------------------------------------------------------

// Device pointers and element counts of a tensor list.
std::vector<void*> pointers(const std::vector<Tensor>& ts) {
  std::vector<void*> out(ts.size());
  for (std::size_t i = 0; i < ts.size(); ++i)
    out[i] = ts[i].data_ptr();
  return out;
}

std::vector<std::int64_t> numels(const std::vector<Tensor>& ts) {
  std::vector<std::int64_t> out(ts.size());
  for (std::size_t i = 0; i < ts.size(); ++i)
    out[i] = ts[i].numel();
  return out;
}

void amp_unscale_kernel(const std::vector<Tensor>& grads, Tensor& found_inf,
                        const Tensor& inv_scale) {
  // Tensors grouped by dtype, one multi-tensor launch sequence per group; strided gradients are
  // processed through contiguous copies written back afterwards.
  for (const ScalarType dt :
       {ScalarType::Float32, ScalarType::Float16, ScalarType::BFloat16, ScalarType::Float64}) {
    std::vector<void*> ptrs;
    std::vector<std::int64_t> sizes;
    std::vector<std::pair<Tensor, Tensor>> write_back;
    int device = -1;
    for (const Tensor& g : grads) {
      if (g.dtype() != dt || g.numel() == 0) continue;
      same_device("amp_foreach_non_finite_check_and_unscale_", g, found_inf);
      Tensor work = g.is_contiguous() ? g : g.contiguous();
      if (!work.is_same(g)) write_back.emplace_back(g, work);
      ptrs.push_back(work.data_ptr());
      sizes.push_back(work.numel());
      device = static_cast<int>(g.device().index());
    }
    if (ptrs.empty()) continue;
    DeviceGuard guard(device);
    check_launch(
        kern::launch_amp_unscale(static_cast<int>(dt), static_cast<int>(ptrs.size()), ptrs.data(),
                                 sizes.data(), static_cast<float*>(found_inf.data_ptr()),
                                 static_cast<const float*>(inv_scale.data_ptr())),
        "amp_foreach_non_finite_check_and_unscale_");
    for (auto& [dst, work] : write_back) {
      Tensor d = dst;
      d.copy_(work);
    }
  }
  for (const Tensor& g : grads) {
    TB_CHECK_T(NotImplementedError, g.numel() == 0 || is_float(g.dtype()),
               "[amp_foreach_non_finite_check_and_unscale_] gradients must be floating point, "
               "got ",
               g.dtype());
  }
}

void amp_update_scale_kernel(Tensor& scale, Tensor& growth_tracker, const Tensor& found_inf,
                             double growth, double backoff, std::int64_t interval) {
  DeviceGuard guard(scale.device().index());
  check_launch(kern::launch_amp_update_scale(static_cast<float*>(scale.data_ptr()),
                                             static_cast<std::int32_t*>(growth_tracker.data_ptr()),
                                             static_cast<const float*>(found_inf.data_ptr()),
                                             growth, backoff, interval),
               "amp_update_scale_");
}

void adam_step_kernel(const std::vector<Tensor>& ps, const std::vector<Tensor>& gs,
                      const std::vector<Tensor>& ms, const std::vector<Tensor>& vs,
                      const std::vector<Tensor>& vmaxs, const Tensor& step_sizes,
                      const Tensor& bc2_sqrts, double lr, double b1, double b2, double eps,
                      double wd, bool maximize, bool decoupled) {
  const std::size_t n = ps.size();
  const bool amsgrad = !vmaxs.empty();
  const Device device = ps.empty() ? Device() : ps[0].device();
  const ScalarType dt = check_adam_step_args(ps, gs, ms, vs, vmaxs, step_sizes, bc2_sqrts, device);
  if (n == 0) return;
  // The per-parameter scalars are host values (the optimizer computes them on the host).
  const Tensor ss = step_sizes.to(Device(), ScalarType::Float64).contiguous();
  const Tensor bc = bc2_sqrts.to(Device(), ScalarType::Float64).contiguous();
  const std::vector<void*> p = pointers(ps);
  const std::vector<void*> g = pointers(gs);
  const std::vector<void*> m = pointers(ms);
  const std::vector<void*> v = pointers(vs);
  const std::vector<void*> vmax = pointers(vmaxs);  // empty without amsgrad
  const std::vector<std::int64_t> sizes = numels(ps);
  kern::AdamArgs a;
  a.st = static_cast<int>(dt);
  a.count = static_cast<int>(n);
  a.params = p.data();
  a.grads = g.data();
  a.exp_avgs = m.data();
  a.exp_avg_sqs = v.data();
  a.max_exp_avg_sqs = amsgrad ? vmax.data() : nullptr;
  a.numels = sizes.data();
  a.step_sizes = ss.data_ptr<double>();
  a.bc2_sqrts = bc.data_ptr<double>();
  a.lr = lr;
  a.beta1 = b1;
  a.beta2 = b2;
  a.eps = eps;
  a.weight_decay = wd;
  a.maximize = maximize;
  a.decoupled = decoupled;
  DeviceGuard guard(device.index());
  check_launch(kern::launch_adam(a), "adam_step_");
}

void sgd_step_kernel(const std::vector<Tensor>& ps, const std::vector<Tensor>& gs,
                     const std::vector<Tensor>& bufs, core::IntList first_steps, double lr,
                     double momentum, double dampening, double wd, bool nesterov, bool maximize) {
  const Device device = ps.empty() ? Device() : ps[0].device();
  const ScalarType dt = check_sgd_step_args(ps, gs, bufs, first_steps, momentum, device);
  if (ps.empty()) return;
  const std::vector<void*> p = pointers(ps);
  const std::vector<void*> g = pointers(gs);
  const std::vector<void*> b = pointers(bufs);
  const std::vector<std::int64_t> n = numels(ps);
  const std::vector<std::int64_t> first(first_steps.begin(), first_steps.end());
  kern::SgdArgs a;
  a.st = static_cast<int>(dt);
  a.count = static_cast<int>(ps.size());
  a.params = p.data();
  a.grads = g.data();
  a.momentum_buffers = bufs.empty() ? nullptr : b.data();
  a.first_steps = bufs.empty() ? nullptr : first.data();
  a.numels = n.data();
  a.lr = lr;
  a.momentum = momentum;
  a.dampening = dampening;
  a.weight_decay = wd;
  a.nesterov = nesterov;
  a.maximize = maximize;
  DeviceGuard guard(device.index());
  check_launch(kern::launch_sgd(a), "sgd_step_");
}

void foreach_lerp_kernel(const std::vector<Tensor>& selfs, const std::vector<Tensor>& ends,
                         const Tensor& weight, double w) {
  const Device device = selfs.empty() ? Device() : selfs[0].device();
  const ScalarType dt = backends::check_lerp_args(
      "foreach_lerp_", {{"selfs", &selfs}, {"ends", &ends}}, &weight, device);
  if (selfs.empty()) return;
  // A host weight is passed by value; a device weight is read by the kernel (no sync).
  const void* wptr = nullptr;
  int wst = 0;
  Tensor wdev;
  if (weight.defined()) {
    if (weight.device().is_cpu()) {
      w = weight.item();
    } else {
      wdev = weight.dtype() == ScalarType::Float64 ? weight.contiguous()
                                                   : weight.to(ScalarType::Float32).contiguous();
      wptr = wdev.data_ptr();
      wst = static_cast<int>(wdev.dtype());
    }
  }
  const std::vector<void*> s = pointers(selfs);
  const std::vector<void*> e = pointers(ends);
  const std::vector<std::int64_t> n = numels(selfs);
  DeviceGuard guard(device.index());
  check_launch(kern::launch_foreach_lerp(static_cast<int>(dt), static_cast<int>(s.size()), s.data(),
                                         e.data(), n.data(), wptr, wst, w),
               "foreach_lerp_");
}

void muon_momentum_kernel(const std::vector<Tensor>& bufs, const std::vector<Tensor>& grads,
                          const std::vector<Tensor>& outs, double momentum) {
  const Device device = bufs.empty() ? Device() : bufs[0].device();
  const ScalarType dt = backends::check_lerp_args(
      "muon_momentum_", {{"bufs", &bufs}, {"grads", &grads}, {"outs", &outs, true}}, nullptr,
      device);
  if (bufs.empty()) return;
  const std::vector<void*> b = pointers(bufs);
  const std::vector<void*> g = pointers(grads);
  const std::vector<void*> u = pointers(outs);
  const std::vector<std::int64_t> n = numels(bufs);
  DeviceGuard guard(device.index());
  check_launch(
      kern::launch_muon_momentum(static_cast<int>(dt), static_cast<int>(b.size()), b.data(),
                                 g.data(), outs.empty() ? nullptr : u.data(), n.data(), momentum),
      "muon_momentum_");
}

}  // namespace

void register_cuda_optim_ops(dispatch::Dispatcher& d) {
  namespace sig = ops::sig;
  const auto key = dispatch::DispatchKey::CUDA;
  d.impl<sig::AmpUnscale>("amp_foreach_non_finite_check_and_unscale_", key, amp_unscale_kernel)
      .detach();
  d.impl<sig::AmpUpdateScale>("amp_update_scale_", key, amp_update_scale_kernel).detach();
  d.impl<ops::sig::AdamStep>("adam_step_", key, adam_step_kernel).detach();
  d.impl<ops::sig::SgdStep>("sgd_step_", key, sgd_step_kernel).detach();
  d.impl<ops::sig::ForeachLerp>("foreach_lerp_", key, foreach_lerp_kernel).detach();
  d.impl<ops::sig::MuonMomentum>("muon_momentum_", key, muon_momentum_kernel).detach();
}

}  // namespace tb::backends::cuda_detail
