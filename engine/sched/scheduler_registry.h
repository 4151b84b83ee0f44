// The LR-scheduler registry: one entry per scheduler kind (the run config's scheduler.kind and
// `trainbench-cli schedule KIND`) with its fields (PyTorch's argument names) and its factory.
// make_scheduler(), the config reader, the GUI form and the config reference walk it.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/core/fields.h"
#include "engine/core/registry.h"
#include "engine/sched/lr_scheduler.h"

namespace tb::sched {

/// Reads the fields of one scheduler config against its kind's specs: an unknown field is an
/// error listing the known ones; an absent field takes the spec's default (a field without one
/// is required). Messages: "[lr_scheduler] KIND: field 'F' ...".
class SchedulerFields {
 public:
  /// Checks that `j` has no field the kind does not know.
  SchedulerFields(const nlohmann::json& j, std::string kind,
                  const std::vector<core::FieldSpec>& specs);

  bool has(const char* k) const;                        ///< present and not null
  double num(const char* k) const;                      ///< a number
  std::int64_t integer(const char* k) const;            ///< an integer
  bool flag(const char* k) const;                       ///< true / false
  std::string str(const char* k) const;                 ///< a string
  PerGroup per_group(const char* k) const;              ///< a number or one per group
  std::vector<std::int64_t> ints(const char* k) const;  ///< a list of integers
  /// An expression or a list of them (`one`: a single one was given).
  std::vector<LrLambda> lambdas(const char* k, bool& one) const;
  /// The child schedulers of `schedulers` built on `opt`.
  std::vector<std::shared_ptr<LRScheduler>> children(Optimizer& opt) const;
  const nlohmann::json& at(const char* k) const;  ///< the raw value
  /// Throws "[lr_scheduler] KIND: field 'KEY' WHY".
  [[noreturn]] void fail(const std::string& key, const std::string& why) const;

 private:
  const nlohmann::json* default_of(const char* k) const;  // null when required / optional
  const nlohmann::json& value(const char* k) const;       // present value or default (or fails)
  const nlohmann::json& j_;
  std::string kind_;
  const std::vector<core::FieldSpec>& specs_;
};

/// One scheduler kind.
struct SchedulerKind {
  std::string name;                     ///< scheduler.kind ("cosine")
  std::string torch_class;              ///< PyTorch's class ("CosineAnnealingLR")
  std::string help;                     ///< one line for the GUI and the reference
  std::vector<core::FieldSpec> fields;  ///< PyTorch's argument names, with defaults
  /// The fields that hold learning rates rather than factors (eta_min, max_lr, swa_lr, ...):
  /// what scale_lr_fields() scales for a second optimizer.
  std::vector<std::string> lr_fields;
  /// The scheduler on `opt` from a config's fields (read through `f`).
  std::function<std::shared_ptr<LRScheduler>(Optimizer&, const SchedulerFields&)> make;
};

/// The registry of scheduler kinds with PyTorch's set (step ... swa) added on first use.
core::Registry<SchedulerKind>& scheduler_registry();

}  // namespace tb::sched
