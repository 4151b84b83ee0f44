// GradScaler (PyTorch's torch.amp.GradScaler, torch/amp/grad_scaler.py); its two kernels are
// reached through their checked ops (ops::amp_foreach_non_finite_check_and_unscale_,
// ops::amp_update_scale_ in engine/ops/amp_ops.cpp).
#include "engine/amp/grad_scaler.h"

#include <exception>

#include "engine/autograd/autograd.h"
#include "engine/ops/ops.h"

namespace tb::amp {

using core::Device;
using core::ScalarType;

namespace {

constexpr const char* kScaleFix =
    "This may indicate your script did not use scaler.scale(loss or outputs) earlier in the "
    "iteration.";

// True when a tensor can be allocated on devices of `type` in this process.
bool device_usable(core::DeviceType type, std::string& why) {
  if (type == core::DeviceType::CPU) return true;
  try {
    (void)Tensor::empty({1}, ScalarType::Float32, Device(type));
    return true;
  } catch (const std::exception& e) {
    why = e.what();
    return false;
  }
}

}  // namespace

// ---- GradScaler ---------------------------------------------------------------------------------

GradScaler::GradScaler(core::DeviceType device, GradScalerOptions options)
    : device_(device),
      enabled_(options.enabled),
      init_scale_(options.init_scale),
      growth_factor_(options.growth_factor),
      backoff_factor_(options.backoff_factor),
      growth_interval_(options.growth_interval) {
  std::string why;
  if (enabled_ && device_ == core::DeviceType::CUDA && !device_usable(device_, why)) {
    warning_ =
        "[GradScaler] torch.amp.GradScaler is enabled, but CUDA is not available. Disabling. (" +
        why + ")";
    enabled_ = false;
  }
  if (enabled_) {
    TB_CHECK(growth_factor_ > 1.0,
             "[GradScaler] The growth factor must be > 1.0. (growth_factor=", growth_factor_, ")");
    TB_CHECK(backoff_factor_ < 1.0,
             "[GradScaler] The backoff factor must be < 1.0. (backoff_factor=", backoff_factor_,
             ")");
  }
}

void GradScaler::check_scale(const char* funcname) const {
  TB_CHECK(scale_.defined(), "[GradScaler] Attempted ", funcname, " but _scale is None.  ",
           kScaleFix);
  TB_CHECK(growth_tracker_.defined(), "[GradScaler] Attempted ", funcname,
           " but _growth_tracker is None.  ", kScaleFix);
}

void GradScaler::lazy_init(const Tensor& like) {
  TB_INTERNAL_ASSERT(!growth_tracker_.defined(), "growth tracker initialised before the scale");
  scale_ = ops::full({}, init_scale_, ScalarType::Float32, like.device());
  growth_tracker_ =
      ops::full({}, static_cast<double>(init_growth_tracker_), ScalarType::Int32, like.device());
}

Tensor GradScaler::scale(const Tensor& outputs) {
  if (!enabled_) return outputs;
  TB_CHECK(outputs.defined(), "[GradScaler] scale: 'outputs' is an undefined tensor");
  if (!scale_.defined()) lazy_init(outputs);
  return ops::mul(outputs, scale_.to(outputs.device()));
}

std::vector<Tensor> GradScaler::scale(const std::vector<Tensor>& outputs) {
  if (!enabled_) return outputs;
  std::vector<std::pair<Device, Tensor>> per_device;  // one copy of the scale per device
  std::vector<Tensor> out;
  out.reserve(outputs.size());
  for (std::size_t i = 0; i < outputs.size(); ++i) {
    const Tensor& t = outputs[i];
    TB_CHECK(t.defined(), "[GradScaler] scale: outputs[", i, "] is an undefined tensor");
    if (!scale_.defined()) lazy_init(t);
    Tensor s;
    for (const auto& [d, copy] : per_device) {
      if (d == t.device()) s = copy;
    }
    if (!s.defined()) {
      s = scale_.to(t.device());
      per_device.emplace_back(t.device(), s);
    }
    out.push_back(ops::mul(t, s));
  }
  return out;
}

GradScaler::PerOptimizer& GradScaler::per_optimizer(const Optimizer& optimizer) {
  return per_optimizer_[&optimizer];
}

OptState GradScaler::stage(const Optimizer& optimizer) const {
  auto it = per_optimizer_.find(&optimizer);
  return it == per_optimizer_.end() ? OptState::Ready : it->second.stage;
}

std::vector<std::pair<Device, Tensor>> GradScaler::found_inf_per_device(
    const Optimizer& optimizer) const {
  auto it = per_optimizer_.find(&optimizer);
  return it == per_optimizer_.end() ? std::vector<std::pair<Device, Tensor>>{}
                                    : it->second.found_inf_per_device;
}

std::vector<std::pair<Device, Tensor>> GradScaler::unscale_grads(Optimizer& optimizer,
                                                                 const Tensor& inv_scale,
                                                                 const Tensor& found_inf,
                                                                 bool allow_fp16) {
  // Buckets by device, then dtype, in order of first appearance.
  struct Bucket {
    Device device;
    std::vector<std::pair<ScalarType, std::vector<Tensor>>> by_dtype;
  };
  std::vector<Bucket> buckets;
  for (const ParamGroup& group : optimizer.param_groups()) {
    for (const Tensor& p : group.params) {
      const Tensor g = autograd::grad(p);
      if (!g.defined()) continue;
      TB_CHECK(allow_fp16 || g.dtype() != ScalarType::Float16,
               "[GradScaler] Attempting to unscale FP16 gradients.");
      Bucket* b = nullptr;
      for (auto& x : buckets) {
        if (x.device == g.device()) b = &x;
      }
      if (b == nullptr) b = &buckets.emplace_back(Bucket{g.device(), {}});
      std::vector<Tensor>* list = nullptr;
      for (auto& [dt, ts] : b->by_dtype) {
        if (dt == g.dtype()) list = &ts;
      }
      if (list == nullptr)
        list = &b->by_dtype.emplace_back(g.dtype(), std::vector<Tensor>{}).second;
      list->push_back(g);
    }
  }
  std::vector<std::pair<Device, Tensor>> per_device;
  for (const Bucket& b : buckets) {
    // Per-device copies of inv_scale and found_inf (the originals when already there).
    const Tensor inv = inv_scale.to(b.device);
    Tensor found = found_inf.device() == b.device ? found_inf : found_inf.to(b.device, true);
    for (const auto& [dt, grads] : b.by_dtype)
      ops::amp_foreach_non_finite_check_and_unscale_(grads, found, inv);
    per_device.emplace_back(b.device, found);
  }
  return per_device;
}

void GradScaler::unscale_(Optimizer& optimizer) {
  if (!enabled_) return;
  check_scale("unscale_");
  PerOptimizer& st = per_optimizer(optimizer);
  if (st.stage == OptState::Unscaled) {
    throw Error(
        "[GradScaler] unscale_() has already been called on this optimizer since the last "
        "update().");
  }
  if (st.stage == OptState::Stepped) {
    throw Error("[GradScaler] unscale_() is being called after step().");
  }
  // float32(1 / float64(scale)), computed on the scale's device without a host read.
  const Tensor inv_scale = ops::reciprocal(scale_.to(ScalarType::Float64)).to(ScalarType::Float32);
  const Tensor found_inf = ops::full({}, 0.0, ScalarType::Float32, scale_.device());
  st.found_inf_per_device = unscale_grads(optimizer, inv_scale, found_inf, false);
  st.stage = OptState::Unscaled;
}

bool GradScaler::step(Optimizer& optimizer) {
  if (!enabled_) {
    optimizer.step();
    return true;
  }
  check_scale("step");
  {
    const PerOptimizer& st = per_optimizer(optimizer);
    if (st.stage == OptState::Stepped) {
      throw Error("[GradScaler] step() has already been called since the last update().");
    }
    if (st.stage == OptState::Ready) unscale_(optimizer);
  }
  PerOptimizer& st = per_optimizer(optimizer);
  TB_CHECK(!st.found_inf_per_device.empty(),
           "[GradScaler] No inf checks were recorded for this optimizer.");
  double found = 0.0;
  for (const auto& [d, f] : st.found_inf_per_device)
    found += f.item();  // the one host synchronisation of an iteration
  const bool run = found == 0.0;
  if (run) optimizer.step();
  st.stage = OptState::Stepped;
  return run;
}

void GradScaler::update() {
  if (!enabled_) return;
  check_scale("update");
  std::vector<Tensor> found_infs;
  for (const auto& [opt, st] : per_optimizer_) {
    for (const auto& [d, f] : st.found_inf_per_device)
      found_infs.push_back(f.to(scale_.device()));
  }
  TB_CHECK(!found_infs.empty(), "[GradScaler] No inf checks were recorded prior to update.");
  Tensor combined = found_infs[0];
  for (std::size_t i = 1; i < found_infs.size(); ++i)
    combined = ops::add(combined, found_infs[i]);
  ops::amp_update_scale_(scale_, growth_tracker_, combined, growth_factor_, backoff_factor_,
                         growth_interval_);
  per_optimizer_.clear();
}

void GradScaler::update(double new_scale) {
  if (!enabled_) return;
  check_scale("update");
  scale_.fill_(new_scale);
  per_optimizer_.clear();
}

void GradScaler::update(const Tensor& new_scale) {
  if (!enabled_) return;
  check_scale("update");
  constexpr const char* reason =
      "new_scale should be a float or a 1-element torch.cuda.FloatTensor or torch.FloatTensor "
      "with requires_grad=False.";
  TB_CHECK(new_scale.defined(), "[GradScaler] update: 'new_scale' is an undefined tensor");
  TB_CHECK(new_scale.device().type() == device_, "[GradScaler] ", reason, " (new_scale is on ",
           new_scale.device(), ")");
  TB_CHECK(new_scale.numel() == 1, "[GradScaler] ", reason, " (new_scale has ", new_scale.numel(),
           " elements)");
  TB_CHECK(!new_scale.requires_grad(), "[GradScaler] ", reason, " (new_scale requires grad)");
  autograd::NoGradGuard no_grad;
  scale_.copy_(new_scale.reshape({}));
  per_optimizer_.clear();
}

double GradScaler::get_scale() const {
  if (!enabled_) return 1.0;
  return scale_.defined() ? scale_.item() : init_scale_;
}

std::int64_t GradScaler::growth_tracker() const {
  return growth_tracker_.defined() ? static_cast<std::int64_t>(growth_tracker_.item())
                                   : init_growth_tracker_;
}

std::optional<GradScalerState> GradScaler::state_dict() const {
  if (!enabled_) return std::nullopt;
  GradScalerState s;
  s.scale = get_scale();
  s.growth_factor = growth_factor_;
  s.backoff_factor = backoff_factor_;
  s.growth_interval = growth_interval_;
  s.growth_tracker = growth_tracker();
  return s;
}

void GradScaler::load_state_dict(const std::optional<GradScalerState>& state) {
  if (!enabled_) return;
  if (!state) {
    throw Error(
        "[GradScaler] The source state dict is empty, possibly because it was saved from a "
        "disabled instance of GradScaler.");
  }
  init_scale_ = state->scale;
  if (scale_.defined()) scale_.fill_(state->scale);
  growth_factor_ = state->growth_factor;
  backoff_factor_ = state->backoff_factor;
  growth_interval_ = state->growth_interval;
  init_growth_tracker_ = state->growth_tracker;
  if (growth_tracker_.defined()) growth_tracker_.fill_(static_cast<double>(state->growth_tracker));
}

}  // namespace tb::amp
