#include "engine/api/model_api.h"

#include <nlohmann/json.hpp>

#include "engine/core/error.h"
#include "engine/core/fields.h"
#include "engine/nn/init.h"
#include "engine/nn/models.h"
#include "engine/optim/param_split.h"
#include "engine/optim/registry.h"
#include "engine/rng/cpu_generator.h"
#include "engine/train/run_config.h"

namespace tb::api {
namespace {

// A model's config as a run config writes it: "[model]", its kind, then its fields by name, as
// given (ready to paste: a 0 that means "derived" stays 0, so it follows a changed d_model),
// with what a derived value is for this model as a comment ("ffn_hidden = 0  # 352 here").
std::string model_toml(const nlohmann::json& given, const nlohmann::json& resolved) {
  std::string out = "[model]\n";
  if (given.contains("kind")) out += "kind = " + core::json_to_toml(given.at("kind")) + "\n";
  for (const auto& [key, value] : given.items()) {
    if (key == "kind") continue;
    out += key + " = " + core::json_to_toml(value);
    if (resolved.contains(key) && resolved.at(key) != value)
      out += "  # " + core::json_to_toml(resolved.at(key)) + " here";
    out += "\n";
  }
  return out;
}

}  // namespace

ModelSummary describe_model(const std::string& kind, const std::vector<std::string>& settings) {
  const nlohmann::json j = train::settings_object(kind, settings, "model");
  const nn::ModelConfig cfg = nn::model_config_from_json(j);
  nn::init::SkipInitGuard shapes_only;  // the names and shapes are all that is shown
  const auto model = nn::build_model(cfg);
  ModelSummary out;
  out.kind = nn::model_kind(cfg);
  out.config_json = nn::to_json(model->config()).dump(2);
  out.config_toml = model_toml(nn::to_json(cfg), nn::to_json(model->config()));
  out.table = nn::parameter_table(*model);
  out.parameters = model->num_parameters();
  return out;
}

ModelSummary describe_config_model(const std::string& toml_path,
                                   const std::vector<std::string>& overrides) {
  const train::RunConfig c = train::load_run_config(toml_path, overrides);
  rng::CpuGenerator gen;  // a private generator: the default one's state is left alone
  gen.manual_seed(c.run.seed);
  nn::init::SkipInitGuard shapes_only;  // the names and shapes are all that is shown
  const auto model = nn::build_model(c.model, &gen);
  ModelSummary out;
  out.kind = nn::model_kind(c.model);
  out.config_json = nn::to_json(model->config()).dump(2);
  out.config_toml = model_toml(nn::to_json(c.model), nn::to_json(model->config()));
  out.parameters = model->num_parameters();
  if (!optim::optimizer_registry().at(c.optimizer.main.kind)->rest_kind.empty())
    out.table =
        optim::split_params(*model, c.optimizer.split, c.optimizer.flattens_conv_filters()).str() +
        "total " + std::to_string(out.parameters) + " parameters\n";
  else
    out.table = nn::parameter_table(*model);
  return out;
}

}  // namespace tb::api
