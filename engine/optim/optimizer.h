// Optimizer base (torch.optim.Optimizer, https://pytorch.org/docs/stable/optim.html): param
// groups with per-group hyper-parameters, lazily created per-parameter state, step(),
// zero_grad(), state_dict()/load_state_dict() in PyTorch's layout.
//
// Hyper-parameters are HyperValues: a number, a flag, a text, or a device-resident scalar tensor
// (a "tensor LR"). Schedulers read values with copy_value() (a tensor is cloned, never aliased)
// and write with update_value() (a tensor is filled in place, a number is replaced) — the
// _param_groups_val_list / _update_param_group_val helpers of pytorch/pytorch
// torch/optim/lr_scheduler.py (PRs 163098 and 163120: a tensor LR is never aliased).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "engine/core/tensor.h"

namespace tb::optim {

using core::Tensor;

/// One hyper-parameter value: number, flag, text, or a 1-element tensor (tensor LR).
using HyperValue = std::variant<double, bool, std::string, Tensor>;
/// Hyper-parameters by name (ordered by name).
using HyperMap = std::map<std::string, HyperValue>;

/// A copy of `v`; a tensor is cloned (so the copy never aliases the live value).
HyperValue copy_value(const HyperValue& v);
/// The value as a number: a double, or the tensor's element (reads it; may synchronise a device).
/// Throws tb::TypeError for flags and texts, naming `key`.
double number_of(const HyperValue& v, const std::string& key);

/// A group of parameters sharing hyper-parameters.
struct ParamGroup {
  std::vector<Tensor> params;  ///< the parameters (leaf tensors that require grad)
  HyperMap options;            ///< lr, betas as beta1/beta2, weight_decay, ... and any extra key

  /// True when `key` is set.
  bool has(const std::string& key) const { return options.count(key) != 0; }
  /// The value of `key`; throws tb::ValueError "param group has no 'key'" when absent.
  const HyperValue& get(const std::string& key) const;
  /// number_of(get(key)).
  double number(const std::string& key) const;
  /// A flag; throws tb::TypeError when `key` holds something else.
  bool flag(const std::string& key) const;
  /// A text; throws tb::TypeError when `key` holds something else.
  const std::string& text(const std::string& key) const;
  /// `_update_param_group_val` of torch/optim/lr_scheduler.py: fills a tensor value in place,
  /// replaces anything else (an absent key is created as a number).
  void update_value(const std::string& key, double v);
};

/// One group holding `params` (helper for the optimizers' constructors).
std::vector<ParamGroup> single_group(std::vector<Tensor> params);

/// Per-parameter state, e.g. {"step", "exp_avg", "exp_avg_sq"} or {"momentum_buffer"}.
using ParamState = std::map<std::string, Tensor>;

/// PyTorch's optimizer state_dict: state by integer id (ids number the params in order of
/// appearance across groups, group 0 first; only params with state appear) and the groups'
/// hyper-parameters with their param ids. Tensors are references, not copies.
struct OptimizerStateDict {
  std::map<std::int64_t, ParamState> state;  ///< id -> state
  /// One group: its hyper-parameters and the ids of its params.
  struct Group {
    HyperMap options;                  ///< hyper-parameters
    std::vector<std::int64_t> params;  ///< param ids
  };
  std::vector<Group> param_groups;  ///< in group order
};

/// The base of every optimizer.
class Optimizer {
 public:
  /// `name` is used in messages ("AdamW"); `defaults` fill keys a group does not set.
  Optimizer(std::string name, HyperMap defaults);
  virtual ~Optimizer() = default;
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  /// The optimizer's name, e.g. "AdamW".
  const std::string& name() const { return name_; }
  /// Adds a group: missing keys come from the defaults, then validate_group() checks it. A
  /// parameter already in another group is a tb::ValueError ("some parameters appear in more
  /// than one parameter group").
  void add_param_group(ParamGroup group);
  /// The groups (schedulers change their values).
  std::vector<ParamGroup>& param_groups() { return groups_; }
  /// The groups.
  const std::vector<ParamGroup>& param_groups() const { return groups_; }
  /// The defaults given at construction.
  const HyperMap& defaults() const { return defaults_; }

  /// One update of every parameter that has a gradient (parameters without one are skipped
  /// entirely: no state, no decay). Runs under a no-grad guard.
  virtual void step() = 0;
  /// Appends named values the last step() measured to `out`, for the run's metrics (Muon: its
  /// Newton–Schulz time, core::metric::kNewtonSchulzMs). May read a device timer. Default: none.
  virtual void append_step_metrics(std::vector<std::pair<std::string, double>>& out) { (void)out; }
  /// Drops (set_to_none) or zeroes every parameter's gradient.
  void zero_grad(bool set_to_none = true);
  /// How many times step() ran (schedulers warn when they step before the optimizer).
  std::int64_t step_count() const { return step_count_; }

  /// State of `param` (created empty on first access).
  ParamState& state(const Tensor& param);
  /// True when `param` has state.
  bool has_state(const Tensor& param) const;

  /// torch.optim.Optimizer.state_dict()'s layout (state tensors are references).
  OptimizerStateDict state_dict() const;
  /// Checks the group count and sizes ("loaded state dict has a different number of parameter
  /// groups" / "loaded state dict contains a parameter group that doesn't match the size of
  /// optimizer's group"), then takes the loaded hyper-parameters (keeping this optimizer's
  /// params) and state; floating state tensors are cast to their param's dtype and device,
  /// except "step", which keeps its dtype. Nothing changes when a check fails.
  void load_state_dict(const OptimizerStateDict& sd);

 protected:
  /// Checks one group's hyper-parameters (PyTorch's constructor messages); throws tb::ValueError.
  virtual void validate_group(const ParamGroup& group) const = 0;
  /// Call at the end of each step().
  void count_step() { ++step_count_; }
  /// PyTorch's check shared by every optimizer: a tensor "lr" must hold exactly one element
  /// ("Tensor lr must be 1-element"). Returns the group's lr as a number.
  static double checked_lr(const ParamGroup& group);

 private:
  std::string name_;
  HyperMap defaults_;
  std::vector<ParamGroup> groups_;
  std::map<const core::TensorImpl*, ParamState> state_;
  std::int64_t step_count_ = 0;
};

}  // namespace tb::optim
