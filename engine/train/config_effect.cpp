#include "engine/train/config_effect.h"

#include <algorithm>

#include "engine/data/registry.h"

namespace tb::train {

namespace {

std::string quoted(const std::string& s) {
  return "\"" + s + "\"";
}

// [data]'s shared keys a kind may not read (the loader's own are read by every kind).
std::string data_reason(const RunConfig& c, const std::string& name) {
  if (name != "path" && name != "context_length" && name != "val_fraction" && name != "normalize")
    return "";
  const auto kind = data::dataset_registry().find(c.data.kind);
  if (kind == nullptr) return "";
  if (std::find(kind->reads.begin(), kind->reads.end(), name) == kind->reads.end())
    return "data.kind = " + quoted(c.data.kind) + " does not read it";
  if (name == "val_fraction" && c.data.extra.is_object() &&
      !c.data.extra.value("val_path", std::string()).empty())
    return "data.val_path is set: the validation data is that file";
  return "";
}

}  // namespace

std::string idle_reason(const RunConfig& c, const std::string& key) {
  const auto dot = key.find('.');
  if (dot == std::string::npos) return "";
  const std::string section = key.substr(0, dot);
  const std::string name = key.substr(dot + 1);
  if (section == "data") return data_reason(c, name);
  if (section == "amp") {
    if ((name == "dtype" || name == "grad_scaler") && !c.amp.enabled) return "amp.enabled is false";
    if (name == "tf32" && c.run.device.rfind("cuda", 0) != 0)
      return "CUDA only: run.device is " + quoted(c.run.device);
    return "";
  }
  if (section == "swa") {
    if (name == "kind") return "";
    if (c.swa.kind == "none") return "swa.kind is \"none\"";
    if (name == "ema_decay" && c.swa.kind != "ema") return "swa.kind is " + quoted(c.swa.kind);
    return "";
  }
  if (section == "eval") {
    if (name == "sample_tokens" && c.eval.samples == 0) return "eval.samples is 0";
    return "";
  }
  if (section == "binding") {
    if (name == "mode" || name == "cpus") return "";
    if (!c.binding.cpus.empty() && name != "slot") return "binding.cpus is set";
    if (c.binding.mode == "none" && c.binding.cpus.empty()) return "binding.mode is \"none\"";
    return "";
  }
  if (section == "distributed") {
    if (name != "backend" && c.distributed.backend == "none")
      return "distributed.backend is \"none\" (trainbench-cli launch --ddp sets it)";
    return "";
  }
  return "";
}

}  // namespace tb::train
