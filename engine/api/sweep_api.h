// Sweeps from the outside: plan a config's [sweep] (engine/train/sweep.h), record it in the store
// (engine/store/sweeps.h), run its trials as processes bound to CPU slots through the launcher —
// pausing them at early-stopping rungs and continuing only the kept points — and read the sweep's
// table back from the store (each trial's best metric, points averaged over their seeds).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <utility>
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

/// One swept key as the [sweep.parameters] table gives it.
struct SweepParameterSpec {
  std::string key;                  ///< dotted config key
  std::string distribution;         ///< values, uniform, log_uniform or int_uniform
  std::vector<std::string> values;  ///< values: each as TOML text ("0.01", "\"muon\"")
  double min = 0;                   ///< the distributions' lower end
  double max = 0;                   ///< and upper end
};

/// A planned sweep.
struct SweepPreview {
  std::string name;                   ///< sweep name (runs are tagged "sweep:NAME")
  std::string method;                 ///< grid or random
  std::string metric;                 ///< compared metric
  std::string goal;                   ///< min or max
  std::string stopping = "none";      ///< early stopping: none, successive_halving or median
  std::vector<std::int64_t> rungs;    ///< the steps where points are compared
  double reduction_factor = 2;        ///< successive_halving: keep the best 1/factor
  std::vector<SweepTrialRow> trials;  ///< every run
  std::vector<std::string> keys;      ///< the swept keys, sorted
  /// Each point's values: (key, TOML value text), only the keys that apply to it.
  std::vector<std::vector<std::pair<std::string, std::string>>> points;
  // As the config says them (planned from a config, not from the store): what a sweep editor
  // opens.
  std::vector<SweepParameterSpec> parameters;  ///< in key order
  std::int64_t random_trials = 0;              ///< random: points drawn
  std::vector<std::int64_t> seeds;             ///< replicates; empty: the config's seed
  std::string base_toml;                       ///< the run config without [sweep]
};

/// Plans the sweep of CONFIG (with --set `overrides` on its run config); errors name the key.
SweepPreview preview_sweep(const std::string& config_path,
                           const std::vector<std::string>& overrides = {});

/// preview_sweep of a config text (`source` names it in messages): what a sweep editor checks.
SweepPreview preview_sweep_text(const std::string& toml, const std::string& source = "<sweep>");

/// What run_sweep does.
struct SweepRequest {
  std::string program;                       ///< the trainbench-cli executable
  std::string config_path;                   ///< the config with its [sweep] table
  std::vector<std::string> overrides;        ///< --set on the run config
  std::string db_path;                       ///< the store ("" = default)
  std::vector<std::string> program_options;  ///< options each trial's process gets (launch's)
  int parallel = 1;                          ///< trials at a time, each in its own slot
  std::string binding = "none";              ///< none, node, socket, exclusive, core-complex
  bool fallback = true;                      ///< an unsatisfiable binding runs unbound (warning)
  /// Continue stored sweep NAME (config_path and overrides unused): its plan and trials are read
  /// back from the store; finished runs are kept, crashed or cancelled ones resume from their
  /// newest checkpoint (or start again without one), trials never started start, and early
  /// stopping's decisions are taken again from the stored metrics (the same ones).
  std::string resume;
  /// Asked before each group of trials starts and after it ends: once true (Ctrl-C; the caller
  /// passes the signal on to the trials running, which stop after their step with a checkpoint),
  /// no further trial starts, and run_sweep returns status "interrupted" when the running ones
  /// have ended, leaving the sweep to `resume`. Unset: never.
  std::function<bool()> stop_requested;
  /// A trial's process has ended and is not yet reaped (LaunchRequest::on_exited): a signal
  /// handler that passes signals on to the trials forgets its pid here.
  std::function<void(int pid)> on_exited;
};

/// One process of a sweep starting or ending.
struct SweepTrialEvent {
  SweepTrialRow trial;           ///< its trial
  std::int64_t resumed_run = 0;  ///< the stored run it continues (0: a new run)
  std::int64_t stop_at = 0;      ///< the rung it stops at (0: runs to the end)
  int pid = 0;                   ///< process id
  std::string cpus;              ///< its slot's CPUs ("" = unbound)
  std::string warning;           ///< why its slot runs unbound (a binding that cannot be met)
  std::optional<int> exit_code;  ///< set when it ended
  std::string log;               ///< its output (STORE_FOLDER/sweeps/NAME/trial-INDEX.log)
  std::int64_t run = 0;          ///< when it ended: its stored run (0: none was made)
  std::string run_status;        ///< when it ended: that run's status ("diverged", ...)
  std::string run_message;       ///< when it ended: why that run ended, or ""
  /// When it ended with exit code 1 (a config or file error: the run was not started or not
  /// continued): the error its log ends with, or "".
  std::string error;
  /// The ended trial in one line: "finished", "at step N", its run's status and message with
  /// the exit code and log ("run 12 diverged (...), exit code 2, see LOG"), or its error ("[config]
  /// ...: ..., run 12 stays cancelled, exit code 1, see LOG").
  std::string outcome() const;
};

/// One point's result over its seeds.
struct SweepPointRow {
  std::int64_t point = 0;               ///< 0-based point
  std::string values;                   ///< its values
  int runs = 0;                         ///< its trials
  int finished = 0;                     ///< of them finished
  std::optional<double> mean;           ///< mean over finished trials of each one's best metric
  std::optional<double> stddev;         ///< their sample standard deviation (2+ trials)
  std::vector<std::int64_t> run_ids;    ///< the stored runs
  std::optional<std::int64_t> stopped;  ///< early stopping stopped it at this step
  std::optional<double> stopped_value;  ///< its seeds' mean metric there
};

/// One trial's result.
struct SweepTrialResult {
  SweepTrialRow trial;                  ///< the planned trial
  std::optional<std::int64_t> run;      ///< its newest run
  std::string status;                   ///< that run's status ("" = never started)
  std::optional<double> best;           ///< finished: its best metric value
  std::optional<std::int64_t> steps;    ///< its newest committed step
  std::optional<std::int64_t> stopped;  ///< early stopping stopped it at this step
  std::string config;                   ///< its effective run config (TOML)
};

/// A sweep's table.
struct SweepResult {
  std::int64_t sweep_id = 0;             ///< the stored sweep
  std::string status;                    ///< running, finished, failed or interrupted
  SweepPreview plan;                     ///< what was run
  std::vector<SweepPointRow> points;     ///< best point first (by mean, per the goal), then stopped
  std::vector<SweepTrialResult> trials;  ///< every trial, in plan order
  int failed = 0;                        ///< trials whose run failed or never ran
  std::string trial_dir;                 ///< where the trials' config files are
};

/// The request's own settings, checked before anything is planned or stored (run_sweep does it
/// first; a dry run too): --parallel >= 1 and a binding mode launch knows. A tb::ValueError
/// names the option.
void check_sweep_request(const SweepRequest& request);

/// Runs the sweep: records it in the store (a name already there is an error; `resume` it), writes
/// each trial's effective config to STORE_FOLDER/sweeps/NAME/trial-INDEX.toml (its output goes to
/// trial-INDEX.log beside it), and runs the trials
/// `parallel` at a time as bound processes (the launcher of `trainbench-cli launch`), each run
/// recording its sweep, trial and point. With early stopping, every live trial first runs to the
/// next rung and stops there with a checkpoint; the points are ranked by their seeds' mean metric
/// at that step, the worse ones are recorded as stopped, and the others continue. `on_trial` hears
/// each process start and end; `on_note` each rung's decision. Returns the table.
SweepResult run_sweep(const SweepRequest& request,
                      const std::function<void(const SweepTrialEvent&)>& on_trial,
                      const std::function<void(const std::string&)>& on_note = {});

/// The table of stored sweep `name` (an unknown name is an error listing the store's sweeps).
SweepResult sweep_table(const std::string& name, const std::string& db_path);

/// Orders a sweep's points as its table lists them: those whose every trial finished by mean
/// (best first for `max` or min), then those that lost a seed (failed or diverged) by the mean of
/// the seeds left, then points stopped early (later stops first, then by their value there), the
/// rest last.
void rank_sweep_points(std::vector<SweepPointRow>& points, bool max);

/// One line of the sweeps list.
struct SweepRow {
  std::int64_t id = 0;        ///< sweep id
  std::string name;           ///< name
  std::string status;         ///< running, finished, failed, interrupted
  std::string created;        ///< "YYYY-MM-DD HH:MM:SS" UTC
  std::string method;         ///< grid or random
  std::string metric;         ///< compared metric and goal ("eval.loss min")
  std::int64_t trials = 0;    ///< planned trials
  std::int64_t finished = 0;  ///< trials finished
  std::int64_t stopped = 0;   ///< trials stopped early
  std::int64_t failed = 0;    ///< trials whose newest run failed or diverged
};
/// Every sweep of the store, newest first.
std::vector<SweepRow> list_sweeps(const std::string& db_path);

}  // namespace tb::api
