#include "engine/api/schedule_api.h"

#include <algorithm>
#include <cmath>
#include <exception>
#include <map>
#include <mutex>
#include <string>

#include <nlohmann/json.hpp>

#include "engine/api/api_detail.h"
#include "engine/core/error.h"
#include "engine/core/metric_names.h"
#include "engine/data/registry.h"
#include "engine/optim/registry.h"
#include "engine/sched/lr_scheduler.h"
#include "engine/train/run_config.h"
#include "engine/train/trainer.h"

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

// Steps per epoch of the run's data (batches of data.batch_size per rank, as the trainer's
// loader cuts them, run.gradient_accumulation_steps of them a step), the data's size remembered
// per [data] table and seed: the GUI previews on every edit.
std::int64_t steps_per_epoch(const train::RunConfig& rc) {
  static std::mutex mu;
  static std::map<std::string, std::int64_t> samples_of;
  const nlohmann::json settings = train::data_settings(rc.data);
  const std::string key = rc.data.kind + "|" + std::to_string(rc.run.seed) + "|" + settings.dump();
  std::int64_t n = -1;
  {
    std::lock_guard<std::mutex> lock(mu);
    if (auto it = samples_of.find(key); it != samples_of.end()) n = it->second;
  }
  if (n < 0) {
    n = data::train_samples(*data::dataset_registry().at(rc.data.kind), settings, rc.run.seed);
    std::lock_guard<std::mutex> lock(mu);
    samples_of[key] = n;
  }
  const std::int64_t world = rc.distributed.backend != "none" && rc.distributed.world_size > 0
                                 ? rc.distributed.world_size
                                 : 1;
  const std::int64_t batch = std::max<std::int64_t>(1, rc.data.batch_size * world);
  return train::steps_per_epoch(rc, rc.data.drop_last ? n / batch : (n + batch - 1) / batch);
}

}  // namespace

std::optional<std::int64_t> detail::run_steps(const train::RunConfig& rc) {
  if (rc.run.steps > 0) return rc.run.steps;
  if (rc.run.epochs <= 0) return std::nullopt;
  try {
    const std::int64_t steps = rc.run.epochs * steps_per_epoch(rc);
    if (steps > 0) return steps;
  } catch (const std::exception&) {
  }
  return std::nullopt;
}

namespace {

// The steps a run of `rc` takes: run.steps, else run.epochs times the steps per epoch of its
// data; 100 (and a note saying why) when the data cannot be read here.
int run_length(const train::RunConfig& rc, std::string& note) {
  if (rc.run.steps > 0) return static_cast<int>(rc.run.steps);
  if (rc.run.epochs <= 0) return 100;
  try {
    const std::int64_t steps = rc.run.epochs * steps_per_epoch(rc);
    if (steps > 0) return static_cast<int>(std::min<std::int64_t>(steps, 10'000'000));
    note = "the preview shows 100 steps: the training data has no full batch";
  } catch (const std::exception& e) {
    note = std::string("the preview shows 100 steps: the steps per epoch need the data (") +
           e.what() + ")";
  }
  return 100;
}

}  // namespace

ScheduleTable preview_schedule(const std::string& kind, const std::vector<std::string>& settings,
                               const std::vector<double>& lrs, int steps) {
  nlohmann::json j = train::settings_object(kind, settings, "schedule");
  if (!lrs.empty()) {
    TB_CHECK(!j.contains("lr"), "[schedule] give the base LR either with --lr or with --set lr=");
    // As every optimizer's lr (PyTorch: "Invalid learning rate"): a preview of a negative or
    // non-finite one shows a schedule no run can have.
    for (const double lr : lrs)
      TB_CHECK(std::isfinite(lr) && lr >= 0,
               "[schedule] --lr: expected a finite number >= 0, found ", lr);
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
  const nlohmann::json flat = {{"kind", "constant"}, {"factor", 1.0}, {"total_iters", 0}};
  group_names.clear();
  // One optimizer per column, each with the scheduler as the run builds it for that optimizer
  // (with Muon, AdamW's learning-rate fields scaled to its own lr).
  const std::string rest = optim::optimizer_registry().at(rc.optimizer.main.kind)->rest_kind;
  std::vector<std::pair<std::string, double>> optimizers = {
      {rc.optimizer.main.kind, rc.optimizer.main.number("lr")}};
  if (!rest.empty())
    optimizers.emplace_back(
        rest, rc.optimizer.adamw.value_or(train::OptimizerSettings(rest)).number("lr"));
  // A run's plateau moves only with its eval.loss, unknown before the run: shown flat, and said so
  // (stepped on a made-up metric it fell by `factor` every patience + 1 steps).
  const bool plateau =
      !rc.scheduler.config.is_null() && rc.scheduler.config.value("kind", "") == "plateau";
  std::string note;
  if (steps <= 0) steps = run_length(rc, note);
  ScheduleTable t;
  for (const auto& [kind, lr] : optimizers) {
    nlohmann::json cfg =
        rc.scheduler.config.is_null() || plateau ? flat : train::scheduler_for(rc, kind);
    cfg["lr"] = std::vector<double>{lr};
    group_names.push_back(core::metric::kLrPrefix + kind);
    ScheduleTable one = preview_schedule_json(cfg.dump(), steps);
    if (t.rows.empty()) {
      t = std::move(one);
      continue;
    }
    for (std::size_t i = 0; i < t.rows.size() && i < one.rows.size(); ++i) {
      t.rows[i].lr.push_back(one.rows[i].lr.at(0));
      t.rows[i].momentum.push_back(one.rows[i].momentum.at(0));
    }
    for (const auto& w : one.warnings)
      if (std::find(t.warnings.begin(), t.warnings.end(), w) == t.warnings.end())
        t.warnings.push_back(w);
  }
  if (!note.empty()) t.warnings.insert(t.warnings.begin(), note);
  if (plateau)
    t.warnings.insert(t.warnings.begin(),
                      "scheduler.kind = \"plateau\" lowers the LR when eval.loss stops improving, "
                      "after each evaluation of the run: the preview shows the starting LR only");
  return t;
}

}  // namespace tb::api
