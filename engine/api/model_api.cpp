#include "engine/api/model_api.h"

#include <nlohmann/json.hpp>

#include "engine/core/error.h"
#include "engine/nn/models.h"
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

}  // namespace tb::api
