// The model registry: one entry per model kind (the run config's model.kind) with its task, its
// fields, its own checks, its fit against the data and its factory. The config reader and writer,
// the trainer, the GUI form and the config reference walk it (see docs/extending.md).
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/core/data_shape.h"
#include "engine/core/fields.h"
#include "engine/core/registry.h"
#include "engine/nn/models.h"

namespace tb::nn {

/// One model kind.
struct ModelKind {
  std::string name;                     ///< model.kind ("mlp")
  std::string help;                     ///< one line for the GUI and the reference
  std::string task;                     ///< core::kTaskClassification or kTaskLanguageModel
  std::vector<core::FieldSpec> fields;  ///< its fields, in the effective config's order
  /// Checks complete fields; throws tb::ValueError "<kind>: <field> ..." on a bad value.
  std::function<void(const nlohmann::json&)> validate;
  /// Checks the model against the data it will see (same task already checked); the problem's
  /// key is a full key path ("model.input", "data.context_length"). May be empty.
  std::function<std::optional<core::FieldProblem>(const nlohmann::json&, const core::DataShape&)>
      fit;
  /// The model from complete, validated fields, initialised from `gen` (null = default).
  std::function<std::shared_ptr<Model>(const nlohmann::json&, rng::Generator*)> make;
};

/// The registry of model kinds, with the built-in ones (mlp, qwen-tiny, cnn, gpt) added on first
/// use.
core::Registry<ModelKind>& model_registry();

/// The built-in kinds' entries (beside their implementations in models.cpp).
ModelKind mlp_kind();
ModelKind qwen_tiny_kind();

/// The fit of a language model with `context_length` positions and `vocab` tokens to a data set:
/// the data's windows must fit the context (a problem at data.context_length) and its tokens
/// the vocabulary (at model.vocab). Shared by the decoder kinds.
std::optional<core::FieldProblem> language_model_fit(std::int64_t context_length,
                                                     std::int64_t vocab, const core::DataShape& d);

}  // namespace tb::nn
