// RunStore: opening the run database (creating, migrating, refusing foreign files, marking runs
// of vanished processes as crashed), creating runs, changing their status and metadata, and the
// read API (runs list, details, series, events, checkpoints, export).
//
// Thread safety: a RunStore is one SQLite connection and must be used by one thread at a time
// (guard it or give each thread its own RunStore). Any number of RunStores and RunWriters, in
// this and other processes, may use the same file: SQLite WAL lets readers see every committed
// batch of a running run while its writer continues.
#pragma once

#include <cstdint>
#include <filesystem>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "engine/store/schema.h"
#include "engine/store/status.h"
#include "engine/store/store_error.h"
#include "engine/store/types.h"

namespace tb::store {

/// The default database: $XDG_DATA_HOME/trainbench/runs.sqlite, or
/// ~/.local/share/trainbench/runs.sqlite when XDG_DATA_HOME is unset, empty or relative (as the
/// XDG base directory spec says). Throws StoreError when neither XDG_DATA_HOME nor a home
/// directory is known.
std::filesystem::path default_database_path();

/// How RunStore::open opens a database.
struct StoreOptions {
  /// Never write: no create, no migration, no crash recovery (for inspection tools).
  bool read_only = false;
  /// On open, mark runs left `running` by a process that no longer exists as `crashed`.
  bool recover_crashed = true;
  /// Checks of an existing file before use (kQuick reads the whole file once).
  IntegrityCheck check = IntegrityCheck::kQuick;
  /// How long a statement waits for another connection's write lock, in milliseconds.
  int busy_timeout_ms = 5000;
};

/// `m` extended by `points`, later steps than any it holds: its count, final point, and the
/// extremes over the non-NaN values (the earliest step among equal extremes). RunStore::get_run's
/// summaries, and those a reader keeps up to date from a training run's new points.
void extend_summary(MetricSummary& m, const std::vector<SeriesPoint>& points);

/// A connection to a run database with the operations of the runs list, run details and export.
class RunStore {
 public:
  /// Opens (creating it and its directories if needed) the database at `path`; see
  /// detail::open_database for the checks. Throws DatabaseRejectedError for a file that is not a
  /// usable TrainBench database (left unchanged) and StoreError for I/O failures.
  static RunStore open(const std::filesystem::path& path, const StoreOptions& options = {});

  /// Takes over `other`'s connection.
  RunStore(RunStore&& other) noexcept;
  /// Closes this connection and takes over `other`'s.
  RunStore& operator=(RunStore&& other) noexcept;
  /// Closes the connection.
  ~RunStore();

  /// The database file.
  const std::filesystem::path& path() const noexcept { return path_; }

  /// Marks every `running` run whose writer was on this host and whose process is gone (no such
  /// pid, a zombie, or a different process start time) as `crashed`, keeping every committed
  /// step, and adds an error event saying so; likewise a `queued` run whose creating process is
  /// gone (killed while setting the run up). A `running` run written on another host, whose pid
  /// means nothing here, is crashed once its writer has been silent (no commit, no heartbeat)
  /// for kWriterSilenceLimit.
  /// Returns the ids changed. Called by open() unless options.recover_crashed is false.
  std::vector<std::int64_t> recover_crashed_runs();
  /// Marks run `run` `failed` with `message` when it is still `running` (or `queued`) with this
  /// process as its writer: for a process whose writer of that run has ended without closing it
  /// (its last writes failed: a full disk), which recovery never marks since the process lives on.
  /// The end is dated when the writer was last heard from. Returns whether it changed the run; the
  /// caller must know that no writer of the run is open in this process.
  bool close_own_run_left_running(std::int64_t run, const std::string& message);
  /// Why open() could not mark the crashed runs it found ("" when it could, or did not try): a
  /// full disk. Such a run still reads `running`; a refusal to resume it says this.
  const std::string& recovery_error() const noexcept { return recovery_error_; }

  // --- writing run metadata -------------------------------------------------------------------

  /// Creates a run in status `queued` and returns its id. Throws ValueError for an empty name or
  /// one with a control character (a name is one line of text).
  std::int64_t create_run(const NewRun& run);
  /// Changes the status of `run` if is_allowed_transition(current, status), setting ended_at for
  /// a terminal status and the message (why it ended), and adds an event. Throws ValueError
  /// naming the run and both statuses otherwise. A run being written should change status
  /// through its RunWriter instead (so that the change is ordered after its metrics).
  void set_status(std::int64_t run, RunStatus status, std::string_view message = "");
  /// Renames a run. Throws ValueError for an unknown run, an empty name or one with a control
  /// character.
  void rename_run(std::int64_t run, std::string_view name);
  /// Replaces the tags of a run.
  void set_tags(std::int64_t run, const std::vector<std::string>& tags);
  /// Deletes a run with its metrics, events and checkpoint rows (not the checkpoint files).
  /// Throws ValueError for a running run (cancel it first) or an unknown run.
  void delete_run(std::int64_t run);

  // --- reading --------------------------------------------------------------------------------

  /// All runs, newest first.
  std::vector<RunSummary> list_runs() const;
  /// Whether a run with this id exists.
  bool has_run(std::int64_t run) const;
  /// The store's identity: 16 hex digits made once when the store was created (or migrated to
  /// schema version 2); a copy of the file keeps it. Checkpoint folders are keyed by it.
  std::string store_id() const;
  /// What get_run() reads of a run's metrics.
  enum class Metrics {
    kSummaries,  ///< every metric's count, final point and extremes (reads every point)
    kNone,       ///< none: RunDetails::metrics stays empty (summary, config and hardware only)
  };
  /// One run with config, hardware and (with kSummaries) per-metric final/min/max. Throws
  /// ValueError naming the run when it does not exist.
  RunDetails get_run(std::int64_t run, Metrics metrics = Metrics::kSummaries) const;
  /// Names of the metrics a run has points for, sorted.
  std::vector<std::string> metric_keys(std::int64_t run) const;
  /// The points of metric `key` of `run` with step >= from_step, by increasing step (empty for
  /// an unknown key). Poll with from_step = last seen step + 1 for live updates.
  std::vector<SeriesPoint> series(
      std::int64_t run, std::string_view key,
      std::int64_t from_step = std::numeric_limits<std::int64_t>::min()) const;
  /// The wall time (Unix seconds) of the run's earliest metric point, over all its metrics
  /// (nullopt without points): the common origin of its series' time axes.
  std::optional<double> first_point_time(std::int64_t run) const;
  /// The largest committed step of `run` (nullopt when it has no metrics yet).
  std::optional<std::int64_t> latest_step(std::int64_t run) const;
  /// Status and largest committed step of every run: one cheap query to poll for live updates.
  std::vector<RunProgress> progress() const;
  /// Events of `run` with id > after_id, oldest first.
  std::vector<Event> events(std::int64_t run, std::int64_t after_id = 0) const;
  /// Checkpoints of `run` by step.
  std::vector<Checkpoint> checkpoints(std::int64_t run) const;

  /// The run's metrics as CSV, one row per step: "step,time,<key>,<key>..." with keys sorted;
  /// time is the wall time (Unix seconds) of the step's first point; a missing point is an empty
  /// cell, NaN and infinities are written nan, inf, -inf; numbers round-trip exactly.
  std::string export_csv(std::int64_t run) const;
  /// The whole run as a JSON document: {"format": "trainbench-run", "version": 1, "run": {...
  /// details ...}, "metrics": {key: {"step": [...], "value": [...], "time": [...]}}, "events":
  /// [...], "checkpoints": [...]}. NaN and infinities become null (JSON has no such numbers).
  std::string export_json(std::int64_t run) const;

  /// The underlying connection (for the writer and tests in this module).
  detail::Connection& connection() noexcept { return *db_; }

 private:
  RunStore(std::filesystem::path path, detail::Connection db);
  RunStatus status_of(std::int64_t run) const;
  void require_run(std::int64_t run) const;

  std::string recovery_error_;
  std::filesystem::path path_;
  std::unique_ptr<detail::Connection> db_;
};

/// Current wall time in Unix seconds.
double unix_now();

}  // namespace tb::store
