#include "engine/api/schedule_api.h"

#include <nlohmann/json.hpp>

#include "engine/api/api_detail.h"
#include "engine/core/error.h"
#include "engine/core/metric_names.h"
#include "engine/optim/registry.h"
#include "engine/sched/lr_scheduler.h"
#include "engine/train/run_config.h"

namespace tb::api {

namespace {

ScheduleTable run(const nlohmann::json& config, int steps) {
  const auto p = sched::preview(config, steps);
  ScheduleTable out;
  out.kind = config.value("kind", "");
  out.config_json = config.dump();
  out.momentum_key = p.momentum_key;
  for (std::size_t i = 0; i < p.lr.size(); ++i)
    out.rows.push_back(ScheduleRow{static_cast<int>(i), p.lr[i], p.momentum[i]});
  out.warnings = p.warnings;
  return out;
}

}  // namespace

ScheduleTable preview_schedule(const std::string& kind, const std::vector<std::string>& settings,
                               const std::vector<double>& lrs, int steps) {
  nlohmann::json j;
  j["kind"] = kind;
  for (const auto& s : settings) {
    const auto eq = s.find('=');
    TB_CHECK(eq != std::string::npos && eq > 0, "[schedule] setting '", s,
             "' must look like field=value");
    const std::string key = s.substr(0, eq);
    const std::string value = s.substr(eq + 1);
    // JSON when it parses (numbers, booleans, lists, objects), else the text itself.
    nlohmann::json v = nlohmann::json::parse(value, nullptr, false);
    j[key] = v.is_discarded() ? nlohmann::json(value) : v;
  }
  if (!lrs.empty()) {
    TB_CHECK(!j.contains("lr"), "[schedule] give the base LR either with --lr or with --set lr=");
    j["lr"] = lrs.size() == 1 ? nlohmann::json(lrs[0]) : nlohmann::json(lrs);
  }
  return run(j, steps);
}

ScheduleTable preview_schedule_json(const std::string& config_json, int steps) {
  nlohmann::json j = nlohmann::json::parse(config_json, nullptr, false);
  TB_CHECK(!j.is_discarded(), "[schedule] the config is not valid JSON: ", config_json);
  return run(j, steps);
}

ScheduleTable preview_run_config(const std::string& toml_path,
                                 const std::vector<std::string>& overrides, int steps,
                                 std::vector<std::string>& group_names) {
  return detail::preview_config(train::load_run_config(toml_path, overrides), steps, group_names);
}

ScheduleTable detail::preview_config(const train::RunConfig& rc, int steps,
                                     std::vector<std::string>& group_names) {
  nlohmann::json cfg =
      rc.scheduler.config.is_null()
          ? nlohmann::json{{"kind", "constant"}, {"factor", 1.0}, {"total_iters", 0}}
          : rc.scheduler.config;
  std::vector<double> lrs;
  group_names.clear();
  const std::string rest = optim::optimizer_registry().at(rc.optimizer.main.kind)->rest_kind;
  lrs = {rc.optimizer.main.number("lr")};
  group_names = {core::metric::kLrPrefix + rc.optimizer.main.kind};
  if (!rest.empty()) {
    lrs.push_back(rc.optimizer.adamw.value_or(train::OptimizerSettings(rest)).number("lr"));
    group_names.push_back(core::metric::kLrPrefix + rest);
  }
  cfg["lr"] = lrs;
  if (steps <= 0) steps = static_cast<int>(rc.run.steps > 0 ? rc.run.steps : 100);
  return preview_schedule_json(cfg.dump(), steps);
}

}  // namespace tb::api
