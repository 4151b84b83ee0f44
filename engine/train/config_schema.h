// The run config's schema: the fixed sections' keys ([run], [data]'s shared loader keys, [amp],
// [swa], [eval], [checkpoint], [binding], top-level `threads`) as field specs, and the lookup of
// any key of an effective config — fixed keys here, a kind's own keys through its registry
// (models, data sets, optimizers, schedulers). The GUI form, the CLI and the config reference
// take types, defaults, choices and help from it.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "engine/core/fields.h"

namespace tb::train {

/// One section of fixed keys ("" = the top level).
struct SectionSchema {
  std::string name;                     ///< "run", "data", ... ("" for `threads`)
  std::vector<core::FieldSpec> fields;  ///< in the effective config's order
};

/// The fixed sections, in the effective config's order. parse_run_config("") yields these
/// defaults (a test holds them equal).
const std::vector<SectionSchema>& fixed_sections();

/// Every dotted key ("run.steps", "optimizer.lr") of the fixed sections and of every registered
/// kind, each once: what a key written at the top level ("steps", "runsteps") may have meant.
std::vector<std::string> dotted_config_keys();

/// The spec of the key at dotted path `key` ("optimizer.muon.lr", "scheduler.T_max") of a
/// config whose kinds are given (model.kind, data.kind, optimizer.kind, scheduler.kind — "none"
/// for no scheduler); nullopt for a key no spec describes.
std::optional<core::FieldSpec> describe_key(const std::string& key, const std::string& model_kind,
                                            const std::string& data_kind,
                                            const std::string& optimizer_kind,
                                            const std::string& scheduler_kind);

}  // namespace tb::train
