// The one run lifecycle: config -> store run -> trainer -> sinks -> final status, with resume and
// every failure path. trainbench-cli run (api::run_training), the GUI's in-process runs
// (api::start_training), the processes trainbench-cli launch starts (they are CLI runs) and the
// distributed ranks to come all run through execute_run(). Plain structs only.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace tb::api {

/// Cancel / pause / resume a run started through execute_run(), from any thread. Requests made
/// before the trainer exists take effect when it starts.
class RunControl {
 public:
  /// No request made yet.
  RunControl();
  /// Destroys the control (the request's shared_ptr keeps it alive while its run runs).
  ~RunControl();
  RunControl(const RunControl&) = delete;
  RunControl& operator=(const RunControl&) = delete;
  /// Asks the run to stop after the current step (status cancelled); also ends a pause.
  void cancel();
  /// Holds the run before its next step.
  void pause();
  /// Releases pause().
  void resume();
  /// Whether cancel() was called.
  bool cancelled() const;
  /// Whether the run is held by pause().
  bool paused() const;

  struct Impl;                  ///< (internal) the trainer binding
  std::unique_ptr<Impl> impl_;  ///< (internal)
};

/// Every metric of one logged step.
struct StepMetrics {
  std::int64_t run_id = 0;                             ///< the stored run
  std::int64_t step = 0;                               ///< optimizer steps done (1-based)
  std::int64_t total = 0;                              ///< steps in the run
  double wall_s = 0;                                   ///< seconds since the first logged step
  std::vector<std::pair<std::string, double>> values;  ///< name -> value ("loss", "lr.adamw.0")
};

/// The end of a run.
struct RunOutcomeInfo {
  std::int64_t run_id = 0;        ///< the stored run
  std::string status;             ///< finished, failed, diverged, cancelled
  std::string message;            ///< summary or reason
  std::string description;        ///< the parameter / split table, for display before the run
  bool resumed = false;           ///< it continued a stored run
  bool stopped_as_asked = false;  ///< cancelled at RunSpec::stop_at, as asked
  bool sweep_trial = false;       ///< the run is a sweep's trial (the sweep continues it)
  std::int64_t from_step = 0;     ///< resumed: the checkpoint's step
};

/// What to run.
struct RunSpec {
  /// The TOML config. With `resume` it may be empty: the stored run's own config is used.
  std::string config_text;
  std::string source = "<config>";      ///< names the text in messages (a file name)
  std::vector<std::string> overrides;   ///< "key.path=value", applied to the text
  std::string db_path;                  ///< "" = the default store
  std::optional<std::int64_t> resume;   ///< continue this stored run from a checkpoint
  std::string resume_checkpoint;        ///< with resume: this folder, not the run's newest
  std::shared_ptr<RunControl> control;  ///< optional: bound to the run while it trains
  /// A new run made for a sweep's trial: (sweep id, trial index); the run records both and the
  /// trial's point.
  std::optional<std::pair<std::int64_t, std::int64_t>> sweep_trial;
  /// Stop after this step with a checkpoint (status cancelled; 0 = run to the end): a sweep's
  /// early-stopping rung.
  std::int64_t stop_at = 0;
};

/// What the caller hears while the run runs (both optional; called on the calling thread, which
/// runs the trainer: queue, do not block).
struct RunObserver {
  /// The run id and the parameter table, before the first step (not called when the run fails
  /// before its trainer is built).
  std::function<void(std::int64_t, const std::string&)> on_start;
  /// Every logged step's metrics.
  std::function<void(const StepMetrics&)> on_metrics;
  /// Every warning the trainer emits, as it happens (the store gets every event; a failure is
  /// the returned outcome).
  std::function<void(const std::string& level, const std::string& text)> on_event;
};

/// Runs `spec` on the calling thread:
/// 1. parses the config (a bad one throws tb::ValueError; nothing is stored);
/// 2. creates the run in the store (status queued), or — resuming — finds the stored run and its
///    newest checkpoint on disk (none: tb::ValueError, nothing changed);
/// 3. builds the trainer, its checkpoints in a folder of this store and run
///    (<checkpoint.dir or the store's folder>/checkpoints/<store name>-<store id>/run-<id>), and
///    restores the checkpoint; a checkpoint of another store or run is refused;
/// 4. opens the run's writer (status running) and trains with the store and observer sinks;
/// 5. ends the run with its status (finished, failed, diverged, cancelled).
/// A new run that fails from step 2 on does not throw: it is marked failed and the status
/// "failed" is returned with the message. A resume that cannot restart (steps 2 and 3, or the
/// writer) throws, and the stored run keeps the status it had.
///
/// Distributed runs (distributed.backend != none, every rank started by mpirun or `trainbench-cli
/// launch --ddp`): rank 0 does all of the above; the other ranks build their trainer from rank
/// 0's effective config (and checkpoint), train with it and write nothing.
RunOutcomeInfo execute_run(const RunSpec& spec, const RunObserver& observer = {});

/// Whether this process was started as a rank of a distributed job (mpirun's or torchrun's
/// environment).
bool started_as_rank();
/// This process's rank in a distributed job (mpirun's or torchrun's environment); -1 when it was
/// not started as one.
int launch_rank();
/// For a rank's SIGTERM/SIGINT handler (async-signal-safe): the collective it waits in, or the
/// next, fails naming the signal, so the run ends failed and says why.
void notify_termination(int signal_number) noexcept;
/// The end of a process that may be a rank: MPI finalised; or, when `failed` and there are
/// other ranks, the whole job stopped (MPI_Abort) so that no rank waits for this one.
void end_distributed(bool failed) noexcept;

}  // namespace tb::api
