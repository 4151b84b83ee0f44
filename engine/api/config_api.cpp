// The config schema as plain structs, from the registries and train/config_schema.
#include "engine/api/config_api.h"

#include "engine/core/error.h"
#include "engine/data/registry.h"
#include "engine/nn/model_registry.h"
#include "engine/optim/registry.h"
#include "engine/sched/scheduler_registry.h"
#include "engine/train/config_schema.h"

namespace tb::api {

namespace {

FieldInfo info_of(const core::FieldSpec& f) {
  FieldInfo i;
  i.key = f.key;
  i.type = f.type_doc();
  i.default_toml = f.default_toml();
  i.required = f.required();
  i.allowed = f.allowed();
  i.choices = f.choices;
  i.help = f.help;
  return i;
}

std::vector<FieldInfo> infos_of(const std::vector<core::FieldSpec>& fields) {
  std::vector<FieldInfo> out;
  out.reserve(fields.size());
  for (const auto& f : fields)
    out.push_back(info_of(f));
  return out;
}

template <typename Entry, typename Detail>
std::vector<KindInfo> kinds_of(const core::Registry<Entry>& r, Detail&& detail) {
  std::vector<KindInfo> out;
  for (const auto& e : r.entries())
    out.push_back({e->name, e->help, detail(*e), infos_of(e->fields)});
  return out;
}

}  // namespace

std::vector<std::string> config_families() {
  return {"model", "data", "optimizer", "scheduler"};
}

std::vector<KindInfo> list_kinds(const std::string& family) {
  if (family == "model")
    return kinds_of(nn::model_registry(), [](const nn::ModelKind& k) { return k.task; });
  if (family == "data")
    return kinds_of(data::dataset_registry(), [](const data::DatasetKind& k) { return k.task; });
  if (family == "optimizer")
    return kinds_of(optim::optimizer_registry(),
                    [](const optim::OptimizerKind& k) { return k.rest_kind; });
  if (family == "scheduler")
    return kinds_of(sched::scheduler_registry(),
                    [](const sched::SchedulerKind& k) { return k.torch_class; });
  throw ValueError("[config] unknown family '" + family +
                   "' (one of model, data, optimizer, scheduler)");
}

std::vector<SectionInfo> config_sections() {
  std::vector<SectionInfo> out;
  for (const auto& s : train::fixed_sections())
    out.push_back({s.name, infos_of(s.fields)});
  return out;
}

SectionInfo optimizer_section() {
  std::vector<core::FieldSpec> fields;
  for (const char* key : {"kind", "weight_decay_params", "split"})
    if (auto f = train::describe_key(std::string("optimizer.") + key, "mlp", "fashion-mnist",
                                     "adamw", "none"))
      fields.push_back(*f);
  return {"optimizer", infos_of(fields)};
}

}  // namespace tb::api
