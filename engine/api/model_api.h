// Facade for building models from user settings (CLI `model`, later the GUI's model page).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tb::api {

/// A model described for display.
struct ModelSummary {
  std::string kind;             ///< "mlp" or "qwen-tiny"
  std::string config_json;      ///< the full config (every field, defaults filled in), pretty JSON
  std::string table;            ///< one line per parameter (name, shape, count) and the total
  std::int64_t parameters = 0;  ///< number of parameter elements (shared tensors once)
};

/// Builds the model `kind` with `settings` ("field=value"; values are JSON — numbers, true/false,
/// [256, 256] — or else taken as strings) applied over the defaults, and describes it. Throws
/// tb::ValueError naming the field for unknown fields, bad values or invalid combinations.
ModelSummary describe_model(const std::string& kind, const std::vector<std::string>& settings);

}  // namespace tb::api
