// Facade over the run config's schema for help and documentation: every kind of every family
// (models, data sets, optimizers, LR schedulers) with its fields, and the fixed sections' keys —
// as plain structs walked from the registries. `trainbench-cli reference` formats them into the
// tables of docs/config-reference.md; `trainbench-cli model/schedule` list the kinds from them.
#pragma once

#include <string>
#include <vector>

namespace tb::api {

/// One configurable key.
struct FieldInfo {
  std::string key;                   ///< "lr"
  std::string type;                  ///< as the reference names it: "number", "integer", ...
  std::string default_toml;          ///< the default as TOML ("" = required or none)
  bool required = false;             ///< must be given
  std::string allowed;               ///< ">= 0", "in [0, 1)", "`a`, `b`" ("" = anything)
  std::vector<std::string> choices;  ///< the allowed strings of an enumerated key
  std::string help;                  ///< one line
};

/// One kind of a family.
struct KindInfo {
  std::string name;               ///< the config's `kind`
  std::string help;               ///< one line
  std::string detail;             ///< task (models, data sets), PyTorch class (schedulers), the
                                  ///< companion kind (Muon: "adamw")
  std::vector<FieldInfo> fields;  ///< its own keys, in the effective config's order
};

/// The families: "model", "data", "optimizer", "scheduler".
std::vector<std::string> config_families();

/// The kinds of `family` in registration order; an unknown family is a tb::ValueError.
std::vector<KindInfo> list_kinds(const std::string& family);

/// A fixed section of the run config.
struct SectionInfo {
  std::string name;               ///< "run", "data", ... ("" for the top level)
  std::vector<FieldInfo> fields;  ///< in the effective config's order
};

/// The fixed sections ([run], [data]'s shared keys, [amp], [swa], [eval], [checkpoint],
/// [binding], top-level `threads`).
std::vector<SectionInfo> config_sections();

/// [optimizer]'s own keys, beside its kind's settings: kind, weight_decay_params, split.
SectionInfo optimizer_section();

}  // namespace tb::api
