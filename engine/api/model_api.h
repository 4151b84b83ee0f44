// Facade for building models from user settings (CLI `model`, later the GUI's model page).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tb::api {

/// A model described for display.
struct ModelSummary {
  std::string kind;             ///< "mlp", "qwen-tiny", "cnn" or "gpt"
  std::string config_json;      ///< the full config (every field, defaults filled in), pretty JSON
  std::string config_toml;      ///< the same as a run config's [model] table (kind first)
  std::string table;            ///< one line per parameter (name, shape, count) and the total
  std::int64_t parameters = 0;  ///< number of parameter elements (shared tensors once)
};

/// Builds the model `kind` with `settings` ("field=value"; values are JSON — numbers, true/false,
/// [256, 256] — or else taken as strings) applied over the defaults, and describes it. Throws
/// tb::ValueError naming the field for unknown fields, bad values or invalid combinations.
ModelSummary describe_model(const std::string& kind, const std::vector<std::string>& settings);

/// The model of the run config file `toml_path` with `overrides` ("key.path=value", as `run
/// --set`), built as the run builds it (its seed). With an optimizer that hands the rest to
/// another (Muon), the table says which optimizer takes each parameter and why, with the
/// counts per optimizer. Throws tb::ValueError as `run` would for a bad config.
ModelSummary describe_config_model(const std::string& toml_path,
                                   const std::vector<std::string>& overrides);

}  // namespace tb::api
