#include "engine/optim/optimizer.h"

#include <set>

#include "engine/autograd/autograd.h"
#include "engine/core/error.h"
#include "engine/ops/ops.h"

namespace tb::optim {

HyperValue copy_value(const HyperValue& v) {
  if (const auto* t = std::get_if<Tensor>(&v)) return t->clone();
  return v;
}

double number_of(const HyperValue& v, const std::string& key) {
  if (const auto* d = std::get_if<double>(&v)) return *d;
  if (const auto* t = std::get_if<Tensor>(&v)) {
    TB_CHECK(t->defined() && t->numel() == 1, "hyper-parameter '", key,
             "' is a tensor that does not hold exactly one element");
    return t->item();
  }
  throw TypeError("hyper-parameter '" + key + "' is not a number");
}

const HyperValue& ParamGroup::get(const std::string& key) const {
  auto it = options.find(key);
  TB_CHECK(it != options.end(), "param group has no '", key, "'");
  return it->second;
}

double ParamGroup::number(const std::string& key) const {
  return number_of(get(key), key);
}

bool ParamGroup::flag(const std::string& key) const {
  const auto* b = std::get_if<bool>(&get(key));
  TB_CHECK_T(TypeError, b != nullptr, "hyper-parameter '", key, "' is not a flag");
  return *b;
}

const std::string& ParamGroup::text(const std::string& key) const {
  const auto* s = std::get_if<std::string>(&get(key));
  TB_CHECK_T(TypeError, s != nullptr, "hyper-parameter '", key, "' is not a text");
  return *s;
}

void ParamGroup::update_value(const std::string& key, double v) {
  auto it = options.find(key);
  if (it != options.end()) {
    if (auto* t = std::get_if<Tensor>(&it->second)) {
      autograd::NoGradGuard no_grad;
      t->fill_(v);  // in place: identity, shape and dtype kept
      return;
    }
    it->second = v;
    return;
  }
  options.emplace(key, v);
}

std::vector<ParamGroup> single_group(std::vector<Tensor> params) {
  ParamGroup g;
  g.params = std::move(params);
  return {std::move(g)};
}

Optimizer::Optimizer(std::string name, HyperMap defaults)
    : name_(std::move(name)), defaults_(std::move(defaults)) {}

void Optimizer::add_param_group(ParamGroup group) {
  TB_CHECK(!group.params.empty(), "[", name_, "] optimizer got an empty parameter list");
  std::set<const core::TensorImpl*> seen;
  for (const auto& g : groups_)
    for (const auto& p : g.params)
      seen.insert(p.impl());
  for (const auto& p : group.params) {
    TB_CHECK(p.defined(), "[", name_, "] a parameter is an undefined tensor");
    TB_CHECK(autograd::is_leaf(p), "[", name_, "] can't optimize a non-leaf Tensor");
    TB_CHECK(seen.insert(p.impl()).second, "[", name_,
             "] some parameters appear in more than one parameter group");
  }
  for (const auto& [k, v] : defaults_)
    group.options.try_emplace(k, copy_value(v));
  validate_group(group);
  groups_.push_back(std::move(group));
}

double Optimizer::checked_lr(const ParamGroup& group) {
  if (const auto* t = std::get_if<Tensor>(&group.get("lr"))) {
    TB_CHECK(t->numel() == 1, "Tensor lr must be 1-element");
  }
  return group.number("lr");
}

void Optimizer::zero_grad(bool set_to_none) {
  for (const auto& g : groups_)
    for (const auto& p : g.params)
      autograd::zero_grad(p, set_to_none);
}

ParamState& Optimizer::state(const Tensor& param) {
  return state_[param.impl()];
}

bool Optimizer::has_state(const Tensor& param) const {
  return state_.count(param.impl()) != 0;
}

OptimizerStateDict Optimizer::state_dict() const {
  OptimizerStateDict sd;
  std::int64_t id = 0;
  for (const auto& g : groups_) {
    OptimizerStateDict::Group out;
    out.options = g.options;
    for (const auto& p : g.params) {
      auto it = state_.find(p.impl());
      if (it != state_.end()) sd.state.emplace(id, it->second);
      out.params.push_back(id++);
    }
    sd.param_groups.push_back(std::move(out));
  }
  return sd;
}

void Optimizer::load_state_dict(const OptimizerStateDict& sd) {
  TB_CHECK(sd.param_groups.size() == groups_.size(), "[", name_,
           "] loaded state dict has a different number of parameter groups (",
           sd.param_groups.size(), " vs ", groups_.size(), ")");
  std::map<std::int64_t, Tensor> by_id;
  for (std::size_t i = 0; i < groups_.size(); ++i) {
    TB_CHECK(sd.param_groups[i].params.size() == groups_[i].params.size(), "[", name_,
             "] loaded state dict contains a parameter group that doesn't match the size of "
             "optimizer's group (group ",
             i, ": ", sd.param_groups[i].params.size(), " vs ", groups_[i].params.size(), ")");
    for (std::size_t k = 0; k < groups_[i].params.size(); ++k)
      by_id.emplace(sd.param_groups[i].params[k], groups_[i].params[k]);
  }
  for (const auto& [id, st] : sd.state) {
    TB_CHECK(by_id.count(id) != 0, "[", name_, "] loaded state dict has state for parameter id ",
             id, ", which no group lists");
  }
  // Everything checked: now change things.
  autograd::NoGradGuard no_grad;
  std::map<const core::TensorImpl*, ParamState> next;
  for (const auto& [id, st] : sd.state) {
    const Tensor& p = by_id.at(id);
    ParamState converted;
    for (const auto& [key, t] : st) {
      if (key == "step" || !t.defined() || !core::is_floating_point(t.dtype())) {
        converted.emplace(key, t);
      } else {
        converted.emplace(key, t.to(p.device(), p.dtype()));
      }
    }
    next.emplace(p.impl(), std::move(converted));
  }
  state_ = std::move(next);
  for (std::size_t i = 0; i < groups_.size(); ++i) {
    HyperMap options;
    for (const auto& [k, v] : sd.param_groups[i].options)
      options.emplace(k, copy_value(v));
    groups_[i].options = std::move(options);
  }
}

}  // namespace tb::optim
