// Sweeps from the outside: plan a config's [sweep] (engine/train/sweep.h), run its trials as
// processes bound to CPU slots through the launcher, and read the sweep's table back from the
// store (each trial's best metric, points averaged over their seeds).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace tb::api {

/// One trial of a sweep.
struct SweepTrialRow {
  std::int64_t index = 0;  ///< 0-based, plan order
  std::int64_t point = 0;  ///< 0-based point
  std::int64_t seed = 0;   ///< run.seed
  std::string name;        ///< its run's name ("SWEEP pPOINT sSEED")
  std::string values;      ///< "optimizer.kind="muon", optimizer.muon.lr=0.02"
};

/// A planned sweep.
struct SweepPreview {
  std::string name;                   ///< sweep name (runs are tagged "sweep:NAME")
  std::string method;                 ///< grid or random
  std::string metric;                 ///< compared metric
  std::string goal;                   ///< min or max
  std::vector<SweepTrialRow> trials;  ///< every run
};

/// Plans the sweep of CONFIG (with --set `overrides` on its run config); errors name the key.
SweepPreview preview_sweep(const std::string& config_path,
                           const std::vector<std::string>& overrides = {});

/// What run_sweep does.
struct SweepRequest {
  std::string program;                 ///< the trainbench-cli executable
  std::string config_path;             ///< the config with its [sweep] table
  std::vector<std::string> overrides;  ///< --set on the run config
  std::string db_path;                 ///< the store ("" = default)
  int parallel = 1;                    ///< trials at a time, each in its own slot
  std::string binding = "none";        ///< none, node, socket, exclusive, core-complex
  bool fallback = true;                ///< an unsatisfiable binding runs unbound (warning)
  /// Continue sweep NAME (config_path and overrides unused): its plan and trial configs are
  /// read back from STORE_FOLDER/sweeps/NAME; finished runs are kept, crashed or cancelled
  /// ones resume from their newest checkpoint (or start again without one), trials never
  /// started start.
  std::string resume;
};

/// One point's result over its seeds.
struct SweepPointRow {
  std::int64_t point = 0;             ///< 0-based point
  std::string values;                 ///< its values
  int runs = 0;                       ///< its trials
  int finished = 0;                   ///< of them finished
  std::optional<double> mean;         ///< mean over finished trials of each one's best metric
  std::optional<double> stddev;       ///< their sample standard deviation (2+ trials)
  std::vector<std::int64_t> run_ids;  ///< the stored runs
};

/// A sweep's table.
struct SweepResult {
  SweepPreview plan;                  ///< what was run
  std::vector<SweepPointRow> points;  ///< best point first (by mean, per the goal)
  int failed = 0;                     ///< trials whose process did not exit 0
  std::string trial_dir;              ///< where the trials' config files are
};

/// Runs every trial of the sweep, `parallel` at a time as bound processes (the launcher of
/// `trainbench-cli launch`), writing each trial's effective config to
/// STORE_FOLDER/sweeps/NAME/trial-INDEX.toml and the plan to plan.json beside them (what
/// `resume` reads); `on_trial` hears each process start (the trial, the run it resumes or 0, pid,
/// CPUs) and end (with its exit code). Then reads the table back from the store.
SweepResult run_sweep(
    const SweepRequest& request,
    const std::function<void(const SweepTrialRow& trial, std::int64_t resumed_run, int pid,
                             const std::string& cpus, std::optional<int> exit_code)>& on_trial);

/// The table of sweep `name` from the store: its runs are those tagged "sweep:NAME" whose
/// names match the plan's trials (the newest run of each name).
SweepResult sweep_table(const SweepPreview& plan, const std::string& db_path);

}  // namespace tb::api
