// RunWriter: the producer side of a run (metrics, events, checkpoints, status) and the writer
// thread that commits what was logged to the run database in batches.
//
// log_metrics() only appends to an in-memory queue under a mutex (no disk, no SQLite); the writer
// thread, with its own connection, commits everything queued in one transaction at least every
// commit_interval (200 ms by default), so readers in other processes see the run live and a
// crash loses at most that interval. A log call is never split across transactions: after a
// crash the committed steps are exactly those of the calls up to the last commit.
//
// Memory is bounded without dropping data: when max_queued_rows rows are waiting (the disk has
// fallen behind by far more than a batch), log_metrics blocks until the writer has taken them;
// stats().producer_waits counts those waits. Nothing is ever dropped.
//
// Thread safety: every public method may be called from any thread; calls are ordered by the
// internal mutex. The writer thread owns its SQLite connection.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <filesystem>
#include <initializer_list>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <variant>
#include <vector>

#include "engine/store/database.h"
#include "engine/store/process_info.h"
#include "engine/store/status.h"
#include "engine/store/store_error.h"
#include "engine/store/types.h"

namespace tb::store {

/// Settings of a RunWriter.
struct WriterOptions {
  /// Longest time between a log call and the commit that contains it (while the writer keeps
  /// up). Must be > 0.
  std::chrono::milliseconds commit_interval{200};
  /// Queued metric rows above which log_metrics waits for the writer (32 bytes per row: the
  /// default bounds the queue to about 32 MiB). Must be >= 1.
  std::size_t max_queued_rows = std::size_t{1} << 20;
  /// SQLite busy timeout of the writer's connection, in milliseconds.
  int busy_timeout_ms = 5000;
  /// While nothing is logged (a paused run, a long evaluation), the writer still stamps the
  /// run's heartbeat this often, so that a reader on another host can tell it is alive
  /// (RunStore::recover_crashed_runs). Must be > 0.
  std::chrono::milliseconds heartbeat_interval{10000};
  /// For a resumed run, the step it continues after (its checkpoint's). The metric points and
  /// checkpoint records of later steps, left by the continuation the resume replaces (one killed
  /// after its newest checkpoint, or abandoned by a resume from an earlier one), are removed when
  /// the writer takes the run, in the same transaction, as TensorBoard's
  /// `SummaryWriter(purge_step=...)` hides a crashed run's events from the restart step on. The
  /// run's last step becomes at most this. Empty for a new run.
  std::optional<std::int64_t> resume_after;
  /// A resumed run's config when the resume changed it (its name, tags, threads, checkpointing,
  /// where its data is), and its name and tags when those changed: stored when the writer takes
  /// the run, in the same transaction, so that the stored config goes on describing what runs. A
  /// name or tags given otherwise (RunStore::rename_run, the GUI) are kept unless the resume
  /// changed them. The name is checked as RunStore::rename_run checks it.
  struct Relabel {
    std::optional<std::string> name;               ///< the run's name, if the resume changed it
    std::optional<std::vector<std::string>> tags;  ///< its tags, if changed
    std::string config;                            ///< its effective config (TOML)
  };
  std::optional<Relabel> relabel;  ///< empty: the stored ones stay
};

/// How long a run's writer on another host may stay silent (no commit, no heartbeat) before
/// RunStore::recover_crashed_runs takes its run as crashed: many heartbeat intervals, and room
/// for the hosts' clocks to differ.
inline constexpr std::chrono::seconds kWriterSilenceLimit{120};

/// A metric value named by string (interned on first use).
struct MetricValue {
  std::string_view key;  ///< metric name, e.g. "train/loss"
  double value;          ///< value; NaN and infinities are kept
};

/// Handle of an interned metric name (RunWriter::key), for the cheapest log calls.
using MetricKeyId = std::uint32_t;

/// A metric value named by an interned key handle.
struct KeyedValue {
  MetricKeyId key;  ///< from RunWriter::key
  double value;     ///< value
};

/// Counters of a RunWriter (for benchmarks and diagnostics).
struct WriterStats {
  std::uint64_t rows_logged = 0;     ///< metric rows accepted by log_metrics
  std::uint64_t rows_committed = 0;  ///< metric rows committed
  std::uint64_t batches = 0;         ///< transactions committed
  std::uint64_t producer_waits = 0;  ///< log calls that waited because the queue was full
  std::size_t largest_batch = 0;     ///< most metric rows in one transaction
  double slowest_commit_s = 0;       ///< longest transaction, seconds
  /// Metric points removed by resume_after (a step stored both as a v1/v2 row and in a chunk
  /// counts twice).
  std::int64_t removed_points = 0;
  std::int64_t removed_checkpoints = 0;  ///< checkpoint records removed by resume_after
};

/// Writes one run: opens its own connection, marks the run `running` with this process's
/// identity (pid, host, start time), and commits what is logged from a background thread.
class RunWriter {
 public:
  /// Starts writing run `run` of the database at `db` (created with RunStore::create_run). The
  /// run must be queued or ended (resume); throws ValueError naming it otherwise (e.g. another
  /// writer has it running), StoreError/DatabaseRejectedError when the file cannot be used.
  RunWriter(const std::filesystem::path& db, std::int64_t run, WriterOptions options = {});
  /// close(), ignoring its errors (call close() to see them).
  ~RunWriter();
  RunWriter(const RunWriter&) = delete;
  RunWriter& operator=(const RunWriter&) = delete;

  /// The run being written.
  std::int64_t run_id() const noexcept { return run_; }

  /// Interns a metric name and returns its handle (same name, same handle).
  MetricKeyId key(std::string_view name);

  /// Queues the values of one step, stamped with the current wall time; never touches the disk.
  /// A later value for the same (key, step) replaces the earlier one. Throws StoreError when the
  /// writer thread has failed (with its error) and ValueError after close().
  void log_metrics(std::int64_t step, std::span<const MetricValue> values);
  /// As above, from an initializer list: log_metrics(7, {{"train/loss", 0.5}, {"lr", 1e-3}}).
  void log_metrics(std::int64_t step, std::initializer_list<MetricValue> values) {
    log_metrics(step, std::span<const MetricValue>(values.begin(), values.size()));
  }
  /// As above with interned keys (no hashing).
  void log_metrics(std::int64_t step, std::span<const KeyedValue> values);

  /// Queues an event (a log line of the run).
  void log_event(EventLevel level, std::string_view text);
  /// Queues a checkpoint record (`metadata` is JSON object text, stored as is).
  void add_checkpoint(std::int64_t step, std::string_view path, std::string_view metadata = "{}");
  /// Queues a status change, applied after everything logged before it. Throws ValueError now
  /// when the transition from the writer's current status is not allowed.
  void set_status(RunStatus status, std::string_view message = "");

  /// Blocks until everything logged before the call is committed. Throws the writer's error.
  void flush();
  /// Commits everything and stops the writer thread. If no terminal status was set, the run
  /// ends `failed` with a message saying the writer closed while it was running. Throws the
  /// writer's error, if any; later calls do nothing.
  void close();

  /// Counters so far.
  WriterStats stats() const;

 private:
  struct MetricRow {
    std::int64_t step;
    double value;
    double time;
    MetricKeyId key;
  };
  struct EventOp {
    double time;
    EventLevel level;
    std::string text;
  };
  struct CheckpointOp {
    double time;
    std::int64_t step;
    std::string path;
    std::string metadata;
  };
  struct StatusOp {
    double time;
    RunStatus status;
    std::string message;
  };
  using Op = std::variant<EventOp, CheckpointOp, StatusOp>;
  struct Batch {
    std::vector<MetricRow> rows;
    std::vector<Op> ops;
    std::vector<std::string> new_keys;  // names interned since the previous batch, in id order
  };
  struct StringHash {
    using is_transparent = void;
    std::size_t operator()(std::string_view s) const noexcept {
      return std::hash<std::string_view>{}(s);
    }
  };

  MetricKeyId intern_locked(std::string_view name);
  void admit_locked(std::unique_lock<std::mutex>& lock, std::size_t rows);
  void enqueue_op_locked(Op op);
  void check_open_locked() const;
  void run_thread();
  void commit(Batch& batch);
  // Sets the run's heartbeat_at to now, inside the caller's transaction.
  void stamp_heartbeat();

  const std::int64_t run_;
  const WriterOptions options_;
  const ProcessIdentity me_;
  detail::Connection db_;  // used by the writer thread only (and the constructor before it)

  mutable std::mutex mu_;
  std::condition_variable work_cv_;   // writer waits for work / deadline / flush / stop
  std::condition_variable space_cv_;  // producers wait for queue space
  std::condition_variable done_cv_;   // flush waits for commits
  Batch pending_;
  std::unordered_map<std::string, MetricKeyId, StringHash, std::equal_to<>> key_ids_;
  std::vector<std::string> key_names_;
  std::size_t keys_sent_ = 0;  // key_names_ already handed to the writer
  std::chrono::steady_clock::time_point first_pending_{};
  std::uint64_t logged_seq_ = 0;
  std::uint64_t committed_seq_ = 0;
  bool flush_requested_ = false;
  bool stop_ = false;
  bool closed_ = false;
  RunStatus status_ = RunStatus::kRunning;  // as of the last queued status change
  std::exception_ptr error_;
  WriterStats stats_;

  std::vector<std::int64_t> db_key_ids_;  // writer thread: MetricKeyId -> metric_keys.id
  std::vector<SeriesPoint> points_;       // writer thread: one key's points of a commit
  std::thread thread_;
};

}  // namespace tb::store
