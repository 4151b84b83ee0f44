// SGD, Adam and AdamW (torch/optim/sgd.py, adam.py): constructor checks, state, and a step that
// gathers each param group's tensors and hands them to one multi-tensor op (ops::sgd_step_,
// ops::adam_step_, which check them and pick the fused kernel or elementwise ops); and their
// registry entries.
#include "engine/optim/sgd_adam.h"

#include <cmath>
#include <utility>

#include "engine/autograd/autograd.h"
#include "engine/core/error.h"
#include "engine/ops/ops.h"
#include "engine/optim/registry.h"

namespace tb::optim {

using core::ScalarType;

namespace {

// Gradient of p, converted to p's dtype when it differs.
Tensor grad_of(const Tensor& p) {
  Tensor g = autograd::grad(p);
  if (g.defined() && g.dtype() != p.dtype()) g = g.to(p.dtype());
  return g;
}

}  // namespace

// ---- SGD ----------------------------------------------------------------------------------------

namespace {
HyperMap sgd_defaults(const SgdOptions& o) {
  return {{"lr", o.lr},
          {"momentum", o.momentum},
          {"dampening", o.dampening},
          {"weight_decay", o.weight_decay},
          {"nesterov", o.nesterov},
          {"maximize", o.maximize}};
}
}  // namespace

SGD::SGD(std::vector<Tensor> params, const SgdOptions& options)
    : SGD(single_group(std::move(params)), options) {}

SGD::SGD(std::vector<ParamGroup> groups, const SgdOptions& options)
    : Optimizer("SGD", sgd_defaults(options)) {
  for (auto& g : groups)
    add_param_group(std::move(g));
}

void SGD::validate_group(const ParamGroup& g) const {
  const double lr = checked_lr(g);
  TB_CHECK(lr >= 0.0, "Invalid learning rate: ", lr);
  TB_CHECK(g.number("momentum") >= 0.0, "Invalid momentum value: ", g.number("momentum"));
  TB_CHECK(g.number("weight_decay") >= 0.0,
           "Invalid weight_decay value: ", g.number("weight_decay"));
  TB_CHECK(!g.flag("nesterov") || (g.number("momentum") > 0 && g.number("dampening") == 0),
           "Nesterov momentum requires a momentum and zero dampening");
}

void SGD::step() {
  autograd::NoGradGuard no_grad;
  for (auto& group : param_groups()) {
    const double lr = group.number("lr");
    const double mu = group.number("momentum");
    const double damp = group.number("dampening");
    const double wd = group.number("weight_decay");
    const bool nesterov = group.flag("nesterov");
    const bool maximize = group.flag("maximize");
    std::vector<Tensor> ps, gs, bufs;
    std::vector<bool> fresh;
    for (const auto& p : group.params) {
      Tensor g = grad_of(p);
      if (!g.defined()) continue;
      ps.push_back(p);
      gs.push_back(g.contiguous());
      if (mu != 0.0) {
        ParamState& st = state(p);
        auto it = st.find("momentum_buffer");
        fresh.push_back(it == st.end());
        if (it == st.end()) it = st.emplace("momentum_buffer", ops::empty_like(p)).first;
        bufs.push_back(it->second);
      }
    }
    ops::sgd_step_(ps, gs, bufs, fresh, lr, mu, damp, wd, nesterov, maximize);
  }
  count_step();
}

// ---- Adam / AdamW -------------------------------------------------------------------------------

namespace {
HyperMap adam_defaults(const AdamOptions& o, bool decoupled) {
  return {{"lr", o.lr},
          {"beta1", o.beta1},
          {"beta2", o.beta2},
          {"eps", o.eps},
          {"weight_decay", o.weight_decay},
          {"amsgrad", o.amsgrad},
          {"maximize", o.maximize},
          {"decoupled_weight_decay", decoupled}};
}
}  // namespace

Adam::Adam(std::vector<Tensor> params, const AdamOptions& options, bool decoupled)
    : Adam(decoupled ? "AdamW" : "Adam", single_group(std::move(params)), options, decoupled) {}

Adam::Adam(std::vector<ParamGroup> groups, const AdamOptions& options, bool decoupled)
    : Adam(decoupled ? "AdamW" : "Adam", std::move(groups), options, decoupled) {}

Adam::Adam(std::string name, std::vector<ParamGroup> groups, const AdamOptions& options,
           bool decoupled)
    : Optimizer(std::move(name), adam_defaults(options, decoupled)) {
  for (auto& g : groups)
    add_param_group(std::move(g));
}

void Adam::validate_group(const ParamGroup& g) const {
  const double lr = checked_lr(g);
  TB_CHECK(lr >= 0.0, "Invalid learning rate: ", lr);
  TB_CHECK(g.number("eps") >= 0.0, "Invalid epsilon value: ", g.number("eps"));
  const double b1 = g.number("beta1");
  const double b2 = g.number("beta2");
  TB_CHECK(b1 >= 0.0 && b1 < 1.0, "Invalid beta parameter at index 0: ", b1);
  TB_CHECK(b2 >= 0.0 && b2 < 1.0, "Invalid beta parameter at index 1: ", b2);
  TB_CHECK(g.number("weight_decay") >= 0.0,
           "Invalid weight_decay value: ", g.number("weight_decay"));
}

void Adam::step() {
  autograd::NoGradGuard no_grad;
  for (auto& group : param_groups()) {
    const double lr = group.number("lr");
    const double b1 = group.number("beta1");
    const double b2 = group.number("beta2");
    const double eps = group.number("eps");
    const double wd = group.number("weight_decay");
    const bool amsgrad = group.flag("amsgrad");
    const bool maximize = group.flag("maximize");
    const bool decoupled = group.flag("decoupled_weight_decay");
    std::vector<Tensor> ps, gs, ms, vs, vmaxs;
    std::vector<double> step_size, bc2_sqrt;
    for (const auto& p : group.params) {
      Tensor g = grad_of(p);
      if (!g.defined()) continue;
      ParamState& st = state(p);
      if (st.empty()) {
        st.emplace("step", ops::zeros({}, ScalarType::Float32));
        st.emplace("exp_avg", ops::zeros_like(p));
        st.emplace("exp_avg_sq", ops::zeros_like(p));
        if (amsgrad) st.emplace("max_exp_avg_sq", ops::zeros_like(p));
      }
      if (amsgrad && !st.count("max_exp_avg_sq")) st.emplace("max_exp_avg_sq", ops::zeros_like(p));
      Tensor& step_t = st.at("step");
      const double t = step_t.item() + 1.0;
      step_t.fill_(t);  // a host scalar: no device synchronisation
      ps.push_back(p);
      gs.push_back(g.contiguous());
      ms.push_back(st.at("exp_avg"));
      vs.push_back(st.at("exp_avg_sq"));
      if (amsgrad) vmaxs.push_back(st.at("max_exp_avg_sq"));
      step_size.push_back(lr / (1.0 - std::pow(b1, t)));
      bc2_sqrt.push_back(std::sqrt(1.0 - std::pow(b2, t)));
    }
    ops::adam_step_(ps, gs, ms, vs, vmaxs, step_size, bc2_sqrt, lr, b1, b2, eps, wd, maximize,
                    decoupled);
  }
  count_step();
}

AdamOptions AdamW::default_options() {
  AdamOptions o;
  o.weight_decay = 1e-2;
  return o;
}

AdamW::AdamW(std::vector<Tensor> params, const AdamOptions& options)
    : Adam("AdamW", single_group(std::move(params)), options, true) {}

AdamW::AdamW(std::vector<ParamGroup> groups, const AdamOptions& options)
    : Adam("AdamW", std::move(groups), options, true) {}

// ---- registry entries ---------------------------------------------------------------------------

namespace {

using core::FieldSpec;
using core::FieldType;

FieldSpec lr_field() {
  return FieldSpec("lr", FieldType::kFloat, 1e-3, "learning rate (the schedule's base)")
      .at_least(0);
}

// The config's defaults are the classes' (PyTorch's): Adam's weight_decay 0, AdamW's 1e-2.
std::vector<FieldSpec> adam_fields(const AdamOptions& d, const char* decay_help) {
  return {lr_field(),
          FieldSpec("weight_decay", FieldType::kFloat, d.weight_decay, decay_help).at_least(0),
          FieldSpec("beta1", FieldType::kFloat, d.beta1, "first moment decay rate")
              .at_least(0)
              .below(1),
          FieldSpec("beta2", FieldType::kFloat, d.beta2, "second moment decay rate")
              .at_least(0)
              .below(1),
          FieldSpec("eps", FieldType::kFloat, d.eps, "added to the denominator").at_least(0),
          FieldSpec("amsgrad", FieldType::kBool, d.amsgrad, "AMSGrad variant")};
}

AdamOptions adam_options(const nlohmann::json& s) {
  AdamOptions o;
  o.lr = s.at("lr").get<double>();
  o.beta1 = s.at("beta1").get<double>();
  o.beta2 = s.at("beta2").get<double>();
  o.eps = s.at("eps").get<double>();
  o.weight_decay = s.at("weight_decay").get<double>();
  o.amsgrad = s.at("amsgrad").get<bool>();
  return o;
}

}  // namespace

OptimizerKind adamw_kind() {
  OptimizerKind k;
  k.name = "adamw";
  k.help = "AdamW (decoupled weight decay; torch.optim.AdamW)";
  k.fields = adam_fields(AdamW::default_options(), "decoupled weight decay");
  k.make = [](std::vector<Tensor> params, const nlohmann::json& s) -> std::unique_ptr<Optimizer> {
    return std::make_unique<AdamW>(std::move(params), adam_options(s));
  };
  return k;
}

OptimizerKind adam_kind() {
  OptimizerKind k;
  k.name = "adam";
  k.help = "Adam (L2 weight decay; torch.optim.Adam)";
  k.fields = adam_fields(AdamOptions{}, "L2 penalty added to the gradient");
  k.make = [](std::vector<Tensor> params, const nlohmann::json& s) -> std::unique_ptr<Optimizer> {
    return std::make_unique<Adam>(std::move(params), adam_options(s));
  };
  return k;
}

OptimizerKind sgd_kind() {
  OptimizerKind k;
  k.name = "sgd";
  k.help = "SGD with optional (Nesterov) momentum (torch.optim.SGD)";
  k.fields = {
      lr_field(),
      FieldSpec("weight_decay", FieldType::kFloat, SgdOptions{}.weight_decay,
                "L2 penalty added to the gradient")
          .at_least(0),
      FieldSpec("momentum", FieldType::kFloat, SgdOptions{}.momentum, "momentum factor")
          .at_least(0),
      FieldSpec("nesterov", FieldType::kBool, false, "Nesterov momentum (needs momentum > 0)")};
  k.validate = [](const nlohmann::json& s) -> std::optional<core::FieldProblem> {
    if (s.at("nesterov").get<bool>() && s.at("momentum").get<double>() <= 0)
      return core::FieldProblem{"nesterov",
                                "expected false when momentum is 0 (Nesterov momentum needs "
                                "momentum > 0), found true"};
    return std::nullopt;
  };
  k.make = [](std::vector<Tensor> params, const nlohmann::json& s) -> std::unique_ptr<Optimizer> {
    SgdOptions o;
    o.lr = s.at("lr").get<double>();
    o.momentum = s.at("momentum").get<double>();
    o.weight_decay = s.at("weight_decay").get<double>();
    o.nesterov = s.at("nesterov").get<bool>();
    return std::make_unique<SGD>(std::move(params), o);
  };
  return k;
}

}  // namespace tb::optim
