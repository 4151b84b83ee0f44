// Sweeps in the run store: a sweep's record (its [sweep] config, plan and status, and who runs
// it), its planned trials with early stopping's decisions, and the runs made for them (each run
// row knows its sweep, trial and point; see NewRun::sweep_trial).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "engine/store/run_store.h"

namespace tb::store {

/// One planned trial of a new sweep.
struct NewSweepTrial {
  std::int64_t trial = 0;  ///< 0-based index, unique in the sweep
  std::int64_t point = 0;  ///< its point
  std::int64_t seed = 0;   ///< its run.seed
  std::string name;        ///< its run's name
  std::string assignment;  ///< the point's values ("optimizer.kind=\"muon\", optimizer.lr=0.02")
  std::string config;      ///< the trial's effective run config (TOML)
};

/// What a sweep is created with (create_sweep).
struct NewSweep {
  std::string name;                   ///< unique in the store
  std::string method;                 ///< grid or random
  std::string metric;                 ///< compared metric
  std::string goal;                   ///< min or max
  std::string config;                 ///< the config with its [sweep] table, as given
  std::string plan;                   ///< the plan as JSON text (opaque to the store)
  std::vector<NewSweepTrial> trials;  ///< every trial
};

/// A stored sweep.
struct SweepRecord {
  std::int64_t id = 0;  ///< sweep id
  std::string name;     ///< name
  /// running, finished, failed — or interrupted: recorded running, but its process (on this
  /// host) is gone; `trainbench-cli sweep --resume NAME` continues it.
  std::string status;
  double created_at = 0;           ///< Unix seconds
  std::optional<double> ended_at;  ///< when it finished or failed
  std::string method;              ///< grid or random
  std::string metric;              ///< compared metric
  std::string goal;                ///< min or max
  std::string config;              ///< the config as given
  std::string plan;                ///< the plan (JSON text)
  std::string message;             ///< how it ended
  std::int64_t trials = 0;         ///< planned trials
  std::int64_t runs = 0;           ///< runs made for them (resumed runs count once)
  std::int64_t finished = 0;       ///< of those, finished
  std::int64_t stopped = 0;        ///< trials stopped early
  /// Trials whose newest run failed or diverged; in a finished sweep also those whose process
  /// ended with an error before their run started or continued.
  std::int64_t failed = 0;
};

/// A stored trial with its newest run.
struct SweepTrialRecord {
  std::int64_t trial = 0;                    ///< index
  std::int64_t point = 0;                    ///< point
  std::int64_t seed = 0;                     ///< run.seed
  std::string name;                          ///< its run's name
  std::string assignment;                    ///< the point's values
  std::string config;                        ///< effective run config
  std::optional<std::int64_t> run_id;        ///< newest run made for it
  std::optional<RunStatus> run_status;       ///< that run's status
  std::optional<std::int64_t> last_step;     ///< that run's newest committed step
  std::optional<std::int64_t> stopped_step;  ///< early stopping stopped it at this step
  std::string note;                          ///< why (early stopping's comparison)
};

/// Creates sweep `s` with its trials in one transaction, recorded as running by this process.
/// A name already in the store is a ValueError naming it (resume that sweep, or rename).
std::int64_t create_sweep(RunStore& store, const NewSweep& s);
/// The sweep called `name`, if any.
std::optional<SweepRecord> find_sweep(RunStore& store, std::string_view name);
/// Every sweep, newest first.
std::vector<SweepRecord> list_sweeps(RunStore& store);
/// The trials of sweep `id` by index, each with its newest run.
std::vector<SweepTrialRecord> sweep_trials(RunStore& store, std::int64_t id);
/// Records this process as running sweep `id` again (on resume): status running, no end time.
void restart_sweep(RunStore& store, std::int64_t id);
/// Ends sweep `id`: status "finished" or "failed", with a message.
void end_sweep(RunStore& store, std::int64_t id, std::string_view status, std::string_view message);
/// Records early stopping's decision: trial `trial` of sweep `id` stops at `step`, and why.
/// A non-empty `run_message` replaces the message of the trial's newest run when it is cancelled
/// (it stopped at the rung as asked; its own message cannot say why it was asked).
void stop_trial(RunStore& store, std::int64_t id, std::int64_t trial, std::int64_t step,
                std::string_view note, std::string_view run_message = {});

}  // namespace tb::store
