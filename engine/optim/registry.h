// The optimizer registry: one entry per optimizer kind (the run config's optimizer.kind) with its
// fields, its own checks and its factory. The config reader and writer, the trainer, the GUI form
// and the config reference walk it; a kind is added with one entry (see docs/extending.md).
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/core/fields.h"
#include "engine/core/registry.h"
#include "engine/optim/optimizer.h"

namespace tb::optim {

/// One optimizer kind.
struct OptimizerKind {
  std::string name;                     ///< optimizer.kind ("adamw")
  std::string help;                     ///< one line for the GUI and the reference
  std::vector<core::FieldSpec> fields;  ///< its settings, in the effective config's order
  /// Checks across fields of complete settings (every field present); nullopt = fine.
  std::function<std::optional<core::FieldProblem>(const nlohmann::json&)> validate;
  /// The optimizer over `params` from complete, checked settings.
  std::function<std::unique_ptr<Optimizer>(std::vector<Tensor>, const nlohmann::json&)> make;
  /// Non-empty: this kind takes only the 2-D hidden weight matrices (optim::split_params), its
  /// settings live in the sub-table [optimizer.NAME], and the other parameters go to an optimizer
  /// of kind `rest_kind` set in [optimizer.REST_KIND] (Muon: "adamw").
  std::string rest_kind;
};

/// The registry of optimizer kinds, with the built-in ones (adamw, adam, sgd, muon) added on
/// first use.
core::Registry<OptimizerKind>& optimizer_registry();

/// The built-in kinds' entries (defined beside each implementation).
OptimizerKind adamw_kind();
OptimizerKind adam_kind();
OptimizerKind sgd_kind();
OptimizerKind muon_kind();

}  // namespace tb::optim
