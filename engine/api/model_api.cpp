#include "engine/api/model_api.h"

#include <nlohmann/json.hpp>

#include "engine/core/error.h"
#include "engine/nn/models.h"

namespace tb::api {

ModelSummary describe_model(const std::string& kind, const std::vector<std::string>& settings) {
  nlohmann::json j;
  j["kind"] = kind;
  for (const auto& s : settings) {
    const auto eq = s.find('=');
    TB_CHECK(eq != std::string::npos && eq > 0, "model setting '", s,
             "' must look like field=value");
    const std::string key = s.substr(0, eq);
    const std::string value = s.substr(eq + 1);
    // JSON when it parses (numbers, booleans, lists), else the text itself.
    nlohmann::json v = nlohmann::json::parse(value, nullptr, false);
    j[key] = v.is_discarded() ? nlohmann::json(value) : v;
  }
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
