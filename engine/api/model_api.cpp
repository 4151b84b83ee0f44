#include "engine/api/model_api.h"

#include <nlohmann/json.hpp>

#include "engine/core/error.h"
#include "engine/nn/models.h"
#include "engine/optim/param_split.h"
#include "engine/optim/registry.h"
#include "engine/rng/cpu_generator.h"
#include "engine/train/run_config.h"

namespace tb::api {

ModelSummary describe_model(const std::string& kind, const std::vector<std::string>& settings) {
  const nlohmann::json j = train::settings_object(kind, settings, "model");
  const nn::ModelConfig cfg = nn::model_config_from_json(j);
  const auto model = nn::build_model(cfg);
  ModelSummary out;
  out.kind = nn::model_kind(cfg);
  out.config_json = nn::to_json(model->config()).dump(2);
  out.table = nn::parameter_table(*model);
  out.parameters = model->num_parameters();
  return out;
}

ModelSummary describe_config_model(const std::string& toml_path,
                                   const std::vector<std::string>& overrides) {
  const train::RunConfig c = train::load_run_config(toml_path, overrides);
  rng::CpuGenerator gen;  // a private generator: the default one's state is left alone
  gen.manual_seed(c.run.seed);
  const auto model = nn::build_model(c.model, &gen);
  ModelSummary out;
  out.kind = nn::model_kind(c.model);
  out.config_json = nn::to_json(model->config()).dump(2);
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
