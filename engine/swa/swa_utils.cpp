// SWA/EMA: averaging functions, AveragedModel, update_bn (PyTorch's torch/optim/swa_utils.py).
#include "engine/swa/swa_utils.h"

#include <algorithm>
#include <map>
#include <set>
#include <sstream>
#include <utility>

#include "engine/autograd/autograd.h"
#include "engine/nn/running_stats.h"
#include "engine/ops/ops.h"

namespace tb::swa {

using core::Device;
using core::ScalarType;

namespace {

void check_decay(double decay) {
  TB_CHECK(decay >= 0.0 && decay <= 1.0, "[swa_utils] Invalid decay value ", decay,
           " provided. Please provide a value in [0,1] range.");
}

void check_lists(const char* fn, const std::vector<Tensor>& a, const std::vector<Tensor>& b) {
  TB_CHECK(a.size() == b.size(), "[", fn, "] 'averaged' has ", a.size(),
           " tensors but 'current' has ", b.size());
}

// The dtype the floating averages compute in: float32 for 16-bit floats, the dtype otherwise.
ScalarType compute_dtype(ScalarType dt) {
  return dt == ScalarType::Float64 ? ScalarType::Float64 : ScalarType::Float32;
}

}  // namespace

// ---- averaging functions ------------------------------------------------------------------------

MultiAvgFn get_ema_multi_avg_fn(double decay) {
  check_decay(decay);
  return [decay](const std::vector<Tensor>& ema, const std::vector<Tensor>& cur, const Tensor&) {
    check_lists("ema_update", ema, cur);
    if (ema.empty()) return;
    autograd::NoGradGuard no_grad;
    if (core::is_floating_point(ema[0].dtype())) {
      // One fused pass per (device, dtype) group; float32 arithmetic for 16-bit averages.
      ops::foreach_lerp_(ema, cur, 1.0 - decay);
    } else {
      for (std::size_t i = 0; i < ema.size(); ++i) {
        Tensor dst = ema[i];
        ops::copy_(dst, ops::add(ops::mul(ema[i], decay), ops::mul(cur[i], 1.0 - decay)));
      }
    }
  };
}

MultiAvgFn get_swa_multi_avg_fn() {
  return [](const std::vector<Tensor>& avg, const std::vector<Tensor>& cur, const Tensor& n) {
    check_lists("swa_update", avg, cur);
    if (avg.empty()) return;
    autograd::NoGradGuard no_grad;
    const ScalarType dt = avg[0].dtype();
    if (core::is_floating_point(dt)) {
      // One weight for the whole list, computed on the device: 1 / (n + 1).
      const Tensor w = ops::reciprocal(ops::add(n.to(avg[0].device(), compute_dtype(dt)), 1.0));
      ops::foreach_lerp_(avg, cur, w);
    } else {
      const Tensor n1 = ops::add(n.to(avg[0].device(), ScalarType::Float64), 1.0);
      for (std::size_t i = 0; i < avg.size(); ++i) {
        Tensor dst = avg[i];
        ops::copy_(dst, ops::add(avg[i], ops::div(ops::sub(cur[i], avg[i]), n1)));
      }
    }
  };
}

AvgFn get_ema_avg_fn(double decay) {
  check_decay(decay);
  return [decay](const Tensor& ema, const Tensor& cur, const Tensor&) {
    autograd::NoGradGuard no_grad;
    return ops::add(ops::mul(ema, decay), ops::mul(cur, 1.0 - decay));
  };
}

AvgFn get_swa_avg_fn() {
  return [](const Tensor& avg, const Tensor& cur, const Tensor& n) {
    autograd::NoGradGuard no_grad;
    const Tensor n1 = ops::add(n.to(avg.device(), ScalarType::Float64), 1.0);
    return ops::add(avg, ops::div(ops::sub(cur, avg), n1));
  };
}

// ---- AveragedModel ------------------------------------------------------------------------------

AveragedModel::AveragedModel(const nn::Module& model, std::optional<Device> device, AvgFn avg_fn,
                             MultiAvgFn multi_avg_fn, bool use_buffers)
    : avg_fn_(std::move(avg_fn)),
      multi_avg_fn_(std::move(multi_avg_fn)),
      use_buffers_(use_buffers) {
  TB_CHECK(!(avg_fn_ && multi_avg_fn_),
           "[AveragedModel] Only one of avg_fn and multi_avg_fn should be provided");
  autograd::NoGradGuard no_grad;
  // Deep copy; a tensor shared under two names (tied weights) is copied once.
  std::map<const core::TensorImpl*, Tensor> copies;
  auto copy_of = [&](const Tensor& t, std::vector<Tensor>& unique) {
    auto it = copies.find(t.impl());
    if (it != copies.end()) return it->second;
    Tensor c = autograd::detach(t).to(device.value_or(t.device()), t.dtype(), true);
    copies.emplace(t.impl(), c);
    unique.push_back(c);
    return c;
  };
  for (const auto& [name, t] : model.named_parameters())
    params_.push_back({name, copy_of(t, unique_params_)});
  for (const auto& [name, t] : model.named_buffers())
    buffers_.push_back({name, copy_of(t, unique_buffers_)});
  for (const auto& [name, t] : model.state_dict())
    state_keys_.push_back(name);
  n_averaged_ = ops::zeros({}, ScalarType::Int64, device.value_or(Device()));
}

namespace {

// The model's tensors of one kind, deduplicated in order (what PyTorch's parameters()/buffers()
// yield).
std::vector<Tensor> unique_tensors(const nn::NamedTensors& named) {
  std::set<const core::TensorImpl*> seen;
  std::vector<Tensor> out;
  for (const auto& [name, t] : named) {
    if (seen.insert(t.impl()).second) out.push_back(t);
  }
  return out;
}

}  // namespace

void AveragedModel::update_parameters(const nn::Module& model) {
  autograd::NoGradGuard no_grad;
  std::vector<Tensor> avg = unique_params_;
  std::vector<Tensor> cur = unique_tensors(model.named_parameters());
  if (use_buffers_) {
    avg.insert(avg.end(), unique_buffers_.begin(), unique_buffers_.end());
    const std::vector<Tensor> b = unique_tensors(model.named_buffers());
    cur.insert(cur.end(), b.begin(), b.end());
  }
  const std::size_t n = std::min(avg.size(), cur.size());  // zip: truncates silently
  avg.resize(n);
  for (std::size_t i = 0; i < n; ++i)
    cur[i] = autograd::detach(cur[i]).to(avg[i].device(), avg[i].dtype());
  cur.resize(n);
  if (!has_averaged_) {
    // Copy on first use: the first model is the average.
    for (std::size_t i = 0; i < n; ++i) {
      Tensor dst = avg[i];
      ops::copy_(dst, cur[i]);
    }
  } else if (multi_avg_fn_ || !avg_fn_) {
    // Group the pairs by (device, dtype), in order of first appearance.
    struct Group {
      Device device;
      ScalarType dtype;
      std::vector<Tensor> avg;
      std::vector<Tensor> cur;
    };
    std::vector<Group> groups;
    for (std::size_t i = 0; i < n; ++i) {
      Group* g = nullptr;
      for (auto& x : groups) {
        if (x.device == avg[i].device() && x.dtype == avg[i].dtype()) g = &x;
      }
      if (g == nullptr) g = &groups.emplace_back(Group{avg[i].device(), avg[i].dtype(), {}, {}});
      g->avg.push_back(avg[i]);
      g->cur.push_back(cur[i]);
    }
    const MultiAvgFn fn = multi_avg_fn_ ? multi_avg_fn_ : get_swa_multi_avg_fn();
    for (const Group& g : groups)
      fn(g.avg, g.cur, n_averaged_.to(g.device));
  } else {
    for (std::size_t i = 0; i < n; ++i) {
      Tensor dst = avg[i];
      ops::copy_(dst, avg_fn_(avg[i], cur[i], n_averaged_.to(avg[i].device())));
    }
  }
  if (!use_buffers_) {
    // Keep the buffers (e.g. running statistics) in sync with the model.
    const std::vector<Tensor> b = unique_tensors(model.named_buffers());
    for (std::size_t i = 0; i < std::min(b.size(), unique_buffers_.size()); ++i) {
      Tensor dst = unique_buffers_[i];
      ops::copy_(dst, autograd::detach(b[i]));
    }
  }
  ops::copy_(n_averaged_, ops::add(n_averaged_, 1));
  has_averaged_ = true;
}

nn::NamedTensors AveragedModel::averaged_parameters() const {
  nn::NamedTensors out;
  for (const auto& e : params_)
    out.emplace_back(e.name, e.tensor);
  return out;
}

nn::NamedTensors AveragedModel::averaged_buffers() const {
  nn::NamedTensors out;
  for (const auto& e : buffers_)
    out.emplace_back(e.name, e.tensor);
  return out;
}

nn::NamedTensors AveragedModel::averaged_state() const {
  nn::NamedTensors out = averaged_parameters();
  for (auto& nt : averaged_buffers())
    out.push_back(std::move(nt));
  return out;
}

namespace {

std::string shape_text(const Tensor& t) {
  std::ostringstream os;
  os << core::DimVector(t.sizes());
  return os.str();
}

}  // namespace

void AveragedModel::copy_to(nn::Module& target) const {
  std::map<std::string, Tensor> mine;
  for (const auto& [name, t] : averaged_state())
    mine.emplace(name, t);
  nn::NamedTensors dst = target.named_parameters();
  for (auto& nt : target.named_buffers())
    dst.push_back(std::move(nt));
  std::string problems;
  for (const auto& [name, t] : dst) {
    auto it = mine.find(name);
    if (it == mine.end()) {
      problems += "\n\t'" + name + "' is not in the averaged model";
    } else if (core::DimVector(it->second.sizes()) != core::DimVector(t.sizes())) {
      problems += "\n\t'" + name + "' has shape " + shape_text(it->second) +
                  " in the averaged model but " + shape_text(t) + " in the target";
    }
  }
  TB_CHECK(problems.empty(), "[AveragedModel] copy_to: cannot load the average into ",
           target.describe(), ":", problems);
  autograd::NoGradGuard no_grad;
  for (const auto& [name, t] : dst) {
    Tensor d = t;
    ops::copy_(d, mine.at(name));
  }
}

nn::NamedTensors AveragedModel::state_dict() const {
  std::map<std::string, Tensor> mine;
  for (const auto& [name, t] : averaged_state())
    mine.emplace(name, t);
  nn::NamedTensors out{{"n_averaged", n_averaged_}};
  for (const auto& key : state_keys_)
    out.emplace_back("module." + key, mine.at(key));
  return out;
}

void AveragedModel::load_state_dict(const nn::NamedTensors& state, bool strict) {
  std::map<std::string, Tensor> own{{"n_averaged", n_averaged_}};
  for (const auto& [name, t] : state_dict())
    own.emplace(name, t);
  std::map<std::string, Tensor> given;
  std::string problems;
  for (const auto& [name, t] : state) {
    if (!given.emplace(name, t).second) problems += "\n\tduplicate key '" + name + "'";
  }
  for (const auto& [name, t] : own) {
    auto it = given.find(name);
    if (it == given.end()) {
      if (strict) problems += "\n\tmissing key '" + name + "'";
    } else if (!it->second.defined()) {
      problems += "\n\tvalue for '" + name + "' is an undefined tensor";
    } else if (core::DimVector(it->second.sizes()) != core::DimVector(t.sizes())) {
      problems += "\n\tsize mismatch for '" + name + "': " + shape_text(it->second) +
                  " in the state dict, " + shape_text(t) + " here";
    }
  }
  if (strict) {
    for (const auto& [name, t] : given) {
      if (!own.count(name)) problems += "\n\tunexpected key '" + name + "'";
    }
  }
  TB_CHECK(problems.empty(), "[AveragedModel] error(s) in loading state_dict:", problems);
  autograd::NoGradGuard no_grad;
  for (const auto& [name, t] : own) {
    auto it = given.find(name);
    if (it == given.end()) continue;
    Tensor dst = t;
    ops::copy_(dst, it->second);
  }
  has_averaged_ = n_averaged_.item() > 0;  // the one device read: on load, never per update
}

// ---- update_bn ----------------------------------------------------------------------------------

namespace {

// The own buffer `name` of `m`, or an undefined tensor.
Tensor own_buffer(const nn::Module& m, const std::string& name) {
  for (const auto& [n, t] : m.named_buffers(false)) {
    if (n == name) return t;
  }
  return Tensor();
}

}  // namespace

void update_bn(const std::function<std::optional<Tensor>()>& next_input, nn::Module& model,
               std::optional<Device> device) {
  struct Stats {
    nn::Module* module;
    nn::RunningStatsMomentum* momentum_control;
    std::optional<double> momentum;
  };
  std::vector<Stats> found;
  autograd::NoGradGuard no_grad;
  for (const auto& [path, m] : model.named_modules()) {
    Tensor mean = own_buffer(*m, "running_mean");
    Tensor var = own_buffer(*m, "running_var");
    if (!mean.defined() || !var.defined()) continue;
    // reset_running_stats(): mean 0, var 1, count 0.
    mean.zero_();
    var.fill_(1.0);
    Tensor count = own_buffer(*m, "num_batches_tracked");
    if (count.defined()) count.zero_();
    auto* control = dynamic_cast<nn::RunningStatsMomentum*>(m);
    found.push_back({m, control, control ? control->momentum() : std::nullopt});
  }
  if (found.empty()) return;
  const bool was_training = model.is_training();
  model.train();
  for (auto& s : found) {
    if (s.momentum_control != nullptr) s.momentum_control->set_momentum(std::nullopt);
  }
  // Restore momenta and the training flag even when the model or the source throws.
  struct Restore {
    std::vector<Stats>& found;
    nn::Module& model;
    bool was_training;
    ~Restore() {
      for (auto& s : found) {
        if (s.momentum_control != nullptr) s.momentum_control->set_momentum(s.momentum);
      }
      model.train(was_training);
    }
  } restore{found, model, was_training};
  while (std::optional<Tensor> x = next_input()) {
    Tensor input = device ? x->to(*device) : *x;
    (void)model(input);
  }
}

void update_bn(const std::vector<Tensor>& inputs, nn::Module& model, std::optional<Device> device) {
  std::size_t i = 0;
  update_bn(
      [&]() -> std::optional<Tensor> {
        if (i >= inputs.size()) return std::nullopt;
        return inputs[i++];
      },
      model, device);
}

}  // namespace tb::swa
