// Which keys of a config take effect: a key the rest of the config makes idle (amp.dtype with
// amp.enabled = false, data.context_length for images, the distributed keys of a one-process
// run) is named with the reason, so that the workbench's form can grey it instead of offering
// a setting that changes nothing.
#pragma once

#include <string>

#include "engine/train/run_config.h"

namespace tb::train {

/// Why the dotted key `key` of the effective config has no effect on a run of `config`
/// ("amp.enabled is false"); "" when it has one, or when it is not a key this knows of.
std::string idle_reason(const RunConfig& config, const std::string& key);

}  // namespace tb::train
