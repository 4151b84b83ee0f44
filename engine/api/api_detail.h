// Internals shared by the engine/api facades (run_api, schedule_api, workbench_api); not part of
// the API: the store path, the store sink of a run, marking a run failed, the per-run checkpoint
// folder, TOML flattening for config comparisons, and the LR preview of a parsed config.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "engine/api/run_session.h"
#include "engine/api/schedule_api.h"
#include "engine/api/sweep_api.h"
#include "engine/store/run_store.h"
#include "engine/store/run_writer.h"
#include "engine/store/sweeps.h"
#include "engine/train/run_config.h"
#include "engine/train/trainer.h"

namespace tb::api::detail {

/// `db`, or the default store path when `db` is empty.
std::filesystem::path store_path(const std::string& db);

/// The store at `db` (as store_path) for a command that only reads it: a store that is not there
/// is a tb::ValueError naming the path — it is not created (a mistyped --db would otherwise look
/// like an empty store, and leave a new file and folders behind).
store::RunStore existing_store(const std::string& db);

/// A tb::ValueError "[store] PATH: no run N (...)" unless `st` holds run `id`: the one wording of
/// every command that names a run.
void require_run(const store::RunStore& st, std::int64_t id);

/// A tb::ValueError (tagged `tag`, "[run]" or "[launch]") unless stored run `id` may be resumed:
/// one another process trains (running, queued) must end first, and a finished one has nothing
/// left (its weights can start a new run). The one wording of `run --resume` and
/// `launch --ddp --resume`.
void require_resumable(const store::RunDetails& stored, std::int64_t id, const char* tag,
                       const std::string& recovery_error = "");

/// Whether the store at `db` (as store_path) is there; list commands show nothing when the
/// default store is not made yet.
bool store_exists(const std::string& db);

/// Unix seconds as "YYYY-MM-DD HH:MM:SS" (UTC).
std::string iso_time(double unix_seconds);

/// The table of sweep `name` read through an open store (sweep_table, StoreReader::sweep).
SweepResult sweep_table(store::RunStore& st, const std::string& name);
/// The sweeps of an open store, newest first (list_sweeps, StoreReader::sweeps).
std::vector<SweepRow> list_sweeps(store::RunStore& st);

/// Where a run's checkpoints go: <checkpoint.dir, or the database's folder + "checkpoints">/
/// <store file stem>-<store id>/run-N — a folder of this store and run only, so stores side by
/// side (a.sqlite, b.sqlite) never write into each other's.
std::filesystem::path checkpoint_dir(const train::RunConfig& config,
                                     const std::filesystem::path& db, const std::string& store_name,
                                     const std::string& store_id, std::int64_t run_id);

/// The newest of run `run`'s stored checkpoints whose files are still there: one deleted by hand
/// (or pruned by a version that recorded checkpoints lazily) is skipped. None stored: a
/// tb::ValueError "`prefix` run N `none`"; none left on disk: one saying so, with the newest path.
store::Checkpoint newest_checkpoint(store::RunStore& st, std::int64_t run,
                                    const std::string& prefix, const std::string& none);

/// Marks a created (queued) run failed with `message`, best effort: a run that cannot be
/// changed (store gone, run deleted, already ended) is left alone. Never throws.
void mark_failed(const std::filesystem::path& db, std::int64_t run_id,
                 const std::string& message) noexcept;

/// Metrics, events and checkpoints of a run into the store. Interns each metric name once so a
/// step costs a queue append (the writer thread does the SQL).
class StoreSink final : public train::MetricSink {
 public:
  /// Writes through `writer` (which must outlive the sink's use).
  explicit StoreSink(store::RunWriter& writer) : writer_(writer) {}
  void on_metrics(std::int64_t step, const train::Metrics& m) override;
  void on_event(const std::string& level, const std::string& text) override;
  void on_checkpoint(std::int64_t step, const std::string& path) override;

 private:
  store::RunWriter& writer_;
  std::unordered_map<std::string, store::MetricKeyId> keys_;
  std::vector<store::KeyedValue> values_;
};

/// ("section.key", value text) of a TOML text in file order, one per `key = value` line: tables
/// as [a.b] headers, values on one line (as to_toml() writes them); comments are dropped.
std::vector<std::pair<std::string, std::string>> flatten_toml_ordered(const std::string& text);

/// flatten_toml_ordered() as a map (a later duplicate key wins). `compare` and `config_diff`
/// both flatten with it.
std::map<std::string, std::string> flatten_toml(const std::string& text);

/// Of a differing key's values ("-" where a config lacks it): some configs lack it and those that
/// have it agree (another kind's own setting, folded by compare views).
bool only_some(const std::vector<std::string>& values);

/// A data-parallel run's ranks as its metrics tell them (rank 0 logs each rank's as rank<r>/...):
/// the largest r + 1, 0 without such metrics. Ranks started from a torchrun-style environment
/// store world_size = 0; this is how many there were.
int ranks_in_metrics(const std::vector<std::string>& metric_keys);

/// The steps a run of `config` takes: run.steps, else run.epochs times the steps per epoch of its
/// data (read to count its samples; remembered per [data] table); nullopt when that cannot be
/// known here (no epochs, the data unreadable, no full batch).
std::optional<std::int64_t> run_steps(const train::RunConfig& config);

/// A new run's name, the files its config names and its device, checked before the run is
/// created (`source` names the config in messages): a mistyped path is a config error (exit
/// code 1) and leaves no failed run in the store. What is in the files is checked when they are
/// read. A pattern (the tokens kind's "fineweb_train_*.bin") is checked by its folder; the
/// tokenizer file only when the tokenizer reads one.
/// A key set by one of `overrides` ("key.path=value", as given to --set) gets the reader's
/// "(from --set key=value)" after its message.
/// Where the run will start, for what can be checked from here.
struct NewRunPlace {
  bool here = true;         ///< on this machine (false: ranks on other hosts; only the config)
  bool own_binding = true;  ///< the config's [binding] places it (false: a launcher does)
};
void check_new_run(const train::RunConfig& c, const std::string& source,
                   const std::vector<std::string>& overrides = {}, NewRunPlace place = {});

/// The files check_new_run checks (data.path, run.init_from, the tokenizer model), alone: a
/// resumed run's, before its data is read.
void check_run_files(const train::RunConfig& c, const std::string& source,
                     const std::vector<std::string>& overrides = {});

/// An early-stopping rung's decision (sweeps): the points ranked best first, those to stop, and
/// the rule as the note says it.
struct RungDecision {
  std::vector<std::pair<double, std::int64_t>> ranked;  ///< (mean at the rung, point)
  std::set<std::int64_t> stop;                          ///< points whose trials stop here
  std::string rule;                                     ///< "keep the best 2 of 3", ...
};
/// Ranks `ranked` ((score, point): a trial without a value counts as the worst) for goal
/// max or min and applies `stopping` ("successive_halving": keep the best
/// ceil(n / reduction_factor) of the n points; "median": stop those worse than the median);
/// the points of `lost_a_seed` (a seed failed while others go on) are stopped whatever the rule.
RungDecision rung_decision(std::vector<std::pair<double, std::int64_t>> ranked,
                           const std::set<std::int64_t>& lost_a_seed, const std::string& stopping,
                           double reduction_factor, bool max);

/// Makes a rung's decision, taken again on a resume with other inputs (a trial that failed at
/// the rung last time ran to it this time), true to what has happened: a point whose live trials
/// (those not in `ended`, trial indices, and not stopped at an earlier rung) have all gone past
/// `step` or finished is not stopped there (a finished run cannot have stopped early), and one
/// whose live trials were all stopped at `step` before stays stopped, whatever the rule says now.
void settle_rung_stops(RungDecision& decision, const std::vector<store::SweepTrialRecord>& trials,
                       std::int64_t step, const std::set<std::int64_t>& ended);

/// Whether `p` is a regular file this process may execute.
bool executable(const std::filesystem::path& p);

/// The first executable `program` in the PATH's folders (empty entries skipped), or "".
std::string find_on_path(const std::string& program);

/// " (from --set K=V)" for the last of `overrides` that set `key` or a table holding it, else "".
std::string from_set(const std::vector<std::string>& overrides, const std::string& key);

/// The schedule of a parsed run config (see preview_run_config()).
ScheduleTable preview_config(const train::RunConfig& config, int steps,
                             std::vector<std::string>& group_names);

/// A distributed run (distributed.world_size >= 2) started by a process that is not a rank (the
/// workbench): `trainbench-cli launch --ddp` in a child process, the run followed through rank
/// 0's output (its id) and the store (its metrics) and reported to `observer` like an in-process
/// run; spec.control's cancel becomes SIGUSR1 to mpirun. A launch that never creates its run is
/// a tb::ValueError with the launcher's last lines (ddp_follow.cpp).
RunOutcomeInfo follow_distributed_run(const RunSpec& spec, const RunObserver& observer,
                                      const train::RunConfig& config);

}  // namespace tb::api::detail
