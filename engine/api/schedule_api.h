// Facade for previewing learning-rate schedules (CLI `schedule`, later the GUI's schedule plot).
#pragma once

#include <string>
#include <vector>

namespace tb::api {

/// The learning rates (and momentum) after construction (step 0) or after a step.
struct ScheduleRow {
  int step = 0;                  ///< 0 = after construction, i = after the i-th step
  std::vector<double> lr;        ///< one per param group
  std::vector<double> momentum;  ///< one per group: "momentum" (sgd) or "beta1" (adam)
};

/// A previewed schedule.
struct ScheduleTable {
  std::string kind;                   ///< the scheduler kind, e.g. "cosine"
  std::string config_json;            ///< the config that was run (compact JSON)
  std::string momentum_key;           ///< "momentum" or "beta1"
  std::vector<ScheduleRow> rows;      ///< steps + 1 rows
  std::vector<std::string> warnings;  ///< the scheduler's warnings (PyTorch's UserWarnings)
};

/// Previews the schedule `kind` with `settings` ("field=value"; values are TOML — numbers,
/// true/false, strings, arrays, inline tables —, else JSON, else taken as strings) for `steps`
/// steps on a throwaway optimizer with one group per entry of `lrs` (default {0.1}). The fields are
/// those of docs/config-reference.md, "LR schedulers" (plus "optimizer" and, for plateau,
/// "metrics"). Throws tb::ValueError naming the field for unknown fields, missing fields and bad
/// values.
ScheduleTable preview_schedule(const std::string& kind, const std::vector<std::string>& settings,
                               const std::vector<double>& lrs, int steps);

/// The schedule of a run config (TOML file, with "key.path=value" overrides): its [scheduler]
/// on one group per optimizer ("lr.adamw", or "lr.muon" and "lr.adamw" for a Muon run) with
/// the configured learning rates, for `steps` steps (0 = the run's length: run.steps, or
/// run.epochs times the steps per epoch of its training data (batches over
/// run.gradient_accumulation_steps), read from the data's header
/// where the kind can; 100 with a warning when the data cannot be read here). `group_names`
/// receives the column names. Throws the config's errors.
ScheduleTable preview_run_config(const std::string& toml_path,
                                 const std::vector<std::string>& overrides, int steps,
                                 std::vector<std::string>& group_names);

/// Same, from a complete JSON config text ({"kind": ..., ...}).
ScheduleTable preview_schedule_json(const std::string& config_json, int steps);

}  // namespace tb::api
