// Trainer: the step loop of a run — data -> forward (autocast when amp.enabled) -> backward (of
// the scaled loss with amp.grad_scaler) -> (unscale, clip) -> optimizer -> scheduler -> SWA/EMA
// average -> metrics — built from a RunConfig, on the calling thread (run()) or its own
// (start()/wait()), with cancel/pause/resume from other threads, evaluation at an interval,
// non-finite-loss handling, metric sinks, and checkpoints that resume bit for bit.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "engine/train/run_config.h"

namespace tb::dist {
class ProcessGroup;
}  // namespace tb::dist

namespace tb::train {

/// Named values of one step, e.g. {"loss", 0.41}, {"lr.adamw.0", 1e-3}, {"time.step_ms", 3.2}.
using Metrics = std::vector<std::pair<std::string, double>>;

/// Receives what a run produces. Called on the run thread: implementations must return quickly
/// (queue the work); a sink that throws ends the run as failed with its message.
class MetricSink {
 public:
  virtual ~MetricSink() = default;
  /// The metrics of step `step` (1-based: the number of optimizer steps done).
  virtual void on_metrics(std::int64_t step, const Metrics& metrics) = 0;
  /// A message: level "info", "warning" or "error".
  virtual void on_event(const std::string& level, const std::string& text) {
    (void)level;
    (void)text;
  }
  /// The run's outcome ("info" when it finished, else "warning"), the last call. Also returned
  /// by Trainer::run(); by default an event like any other.
  virtual void on_outcome(const std::string& level, const std::string& text) {
    on_event(level, text);
  }
  /// A checkpoint of step `step` was written to folder `path`.
  virtual void on_checkpoint(std::int64_t step, const std::string& path) {
    (void)step;
    (void)path;
  }
};

/// How a run ended.
enum class RunOutcome { kFinished, kFailed, kDiverged, kCancelled };
/// "finished", "failed", "diverged", "cancelled" (the run store's status names).
const char* outcome_name(RunOutcome outcome);

/// The scheduler of `config` against the `steps` a run takes (`run_length` says how they were
/// counted, "run.steps = 200"), every nested scheduler against the steps it is stepped: a
/// one-cycle schedule shorter than those throws tb::ValueError (OneCycleLR would fail at its end,
/// as PyTorch's raises "Tried to step ..."); a cosine whose T_max is shorter is returned as a
/// warning (CosineAnnealingLR is periodic: the LR climbs back after T_max).
std::vector<std::string> check_schedule_length(const RunConfig& config, std::int64_t steps,
                                               const std::string& run_length);

/// The [scheduler] table as the optimizer `kind` of a run gets it. A matrix kind's run (Muon)
/// has two optimizers; the table's learning rates (eta_min, max_lr, swa_lr, ...) are the matrix
/// kind's, and the other optimizer's copy has them scaled by its lr / the matrix kind's lr, so
/// each keeps its own scale (one_cycle's max_lr = 0.02 gave AdamW 20x its lr = 0.001). With a
/// matrix lr of 0 the values are taken as written. Null when the run has no scheduler.
nlohmann::json scheduler_for(const RunConfig& config, const std::string& kind);

/// The CPU binding of `config` planned on this machine as the trainer plans it (binding.cpus
/// allowed here; binding.mode's slot found, unless binding.fallback): tb::ValueError as the
/// trainer would throw it, said before a run is stored.
void check_binding(const RunConfig& config);

/// The end of a run.
struct TrainResult {
  RunOutcome outcome = RunOutcome::kFinished;  ///< how it ended
  std::string message;                         ///< why (failed/diverged), or a summary
  std::int64_t steps = 0;                      ///< optimizer steps done (incl. resumed ones)
  double last_loss = 0.0;                      ///< loss of the last step
  Metrics last_eval;                           ///< the last evaluation's metrics
  std::string last_checkpoint;                 ///< folder of the last checkpoint ("" = none)
};

/// One training run. Construction builds everything (data, model, optimizers, scheduler) and
/// throws tb::ValueError naming the problem before any step runs.
class Trainer {
 public:
  /// A run of `config`. Checkpoints go to `checkpoint_dir` ("" = none are written). With
  /// distributed.backend != none, `group` is the process group of the ranks (every rank builds
  /// its Trainer; rank 0's weights are broadcast here, so construction is collective).
  explicit Trainer(RunConfig config, std::filesystem::path checkpoint_dir = {},
                   std::shared_ptr<dist::ProcessGroup> group = nullptr);
  /// Cancels a running loop and joins its thread.
  ~Trainer();
  Trainer(const Trainer&) = delete;
  Trainer& operator=(const Trainer&) = delete;

  /// Names whose checkpoints this run writes: `key` identifies the owner (the run lifecycle
  /// passes "<store id>/<run id>"), `description` names it in messages ("run 1 of store
  /// a.sqlite (id ...)"). Checkpoints record it; pruning (checkpoint.keep) deletes only folders
  /// of the same owner, and resume_from() refuses a checkpoint of another owner. Default: "".
  void set_checkpoint_owner(std::string key, std::string description);
  /// Adds a sink (before start()/run()).
  void add_sink(std::shared_ptr<MetricSink> sink);
  /// Restores model, optimizer, scheduler, loader and generator state from a checkpoint folder
  /// written by this trainer's config (checked); the run continues at the step after it. What is
  /// wrong with the folder (a file changed after the save, another model's) is a tb::ValueError
  /// naming it.
  void resume_from(const std::filesystem::path& checkpoint);

  /// Runs the loop on the calling thread until done, cancelled, diverged or failed. Never throws
  /// for training errors: they end the run as failed with the message.
  TrainResult run();
  /// run() on the trainer's own thread.
  void start();
  /// Waits for start()'s thread and returns its result.
  TrainResult wait();
  /// Asks the loop to stop after the current step (status cancelled). Thread-safe.
  void cancel();
  /// Stops the run after optimizer step `step` (0 = no such stop), evaluated, logged and
  /// checkpointed there, with status cancelled and a message saying so: how a sweep pauses its
  /// trials at an early-stopping rung (`trainbench-cli run --stop-at`). A step at or after the
  /// last one changes nothing. Call before run().
  void set_stop_at(std::int64_t step) { stop_at_ = step; }
  /// What decides this process's float32 products beyond the config (the GEMM library, and its
  /// thread count where that changes the bits: "GEMM onednn", "GEMM openblas at 2 threads"),
  /// asked when a checkpoint is written (into it) and when run() starts (after the binding sized
  /// the kernel pool): a run resumed from a checkpoint that says otherwise warns that its
  /// continuation is not bit for bit. Call before run().
  void set_numerics(std::function<std::string()> numerics) { numerics_ = std::move(numerics); }
  /// Holds the loop before its next step until resume(). Thread-safe.
  void pause();
  /// Releases pause(). Thread-safe.
  void resume();

  /// Optimizer steps done so far (after resume_from(): the checkpoint's step).
  std::int64_t steps_done() const;
  /// Data-parallel: this process's rank (0 without).
  int rank() const;
  /// Data-parallel: the number of ranks (1 without).
  int world_size() const;
  /// Steps the run will do in total.
  std::int64_t total_steps() const { return total_steps_; }
  /// The parameter split table (Muon runs) or the parameter table.
  std::string describe() const;
  /// The effective config.
  const RunConfig& config() const { return config_; }
  /// Evaluates the model now (eval split) and returns eval.* metrics.
  Metrics evaluate();
  /// Writes a checkpoint of the current state to `dir` and returns it. The files are written into
  /// a hidden sibling folder (".<name>.partial"), synced, and the folder renamed to `dir`: a save
  /// killed midway never leaves a partial checkpoint under `dir` nor touches older ones. A save
  /// that fails (a full disk, a folder that cannot be written) removes its hidden folder and
  /// throws a tb::ValueError naming the checkpoint and the reason.
  std::filesystem::path save_checkpoint(const std::filesystem::path& dir);

  struct State;  ///< (internal) everything a run owns: engine/train/trainer_state.h

 private:
  void load_checkpoint(const std::filesystem::path& dir);  // resume_from without its wording
  /// save_checkpoint's files, written into `partial` and renamed to `final_dir`.
  void write_checkpoint(const std::filesystem::path& final_dir,
                        const std::filesystem::path& partial);
  void emit_event(const std::string& level, const std::string& text);
  void emit_samples();  // eval.samples texts as "sample at step N: ..." events
  Metrics evaluate_model(nn::Model& model, const std::string& prefix);
  void recompute_batch_norm(nn::Model& model);  // update_bn over the training split
  void report_placement();
  void report_ranks();
  // The step loop (train_loop.cpp) and its parts; a Loop holds what it keeps across steps.
  struct Loop;
  enum class StepEnd { kNext, kStop };  // kStop: the run ends (diverged, --stop-at)
  TrainResult loop();
  StepEnd train_step(Loop& l);                     // batch, forward, backward, exchange, update
  bool exchange_with_ranks(Loop& l, bool finite);  // data-parallel; false: skip the step
  StepEnd end_nonfinite_step(Loop& l);             // skipped, or diverged after too many in a row
  StepEnd update_and_log(Loop& l);                 // optimizer, metrics, evaluation, checkpoint
  void evaluate_into(Loop& l, Metrics& m);
  void evaluate_at_start();
  void end_cancelled(Loop& l);  // a cancelled run's checkpoint and message
  void log_last_loss(Loop& l);  // the loss of a step between logged ones the run ended after
  // Step phases of loop() that need the trainer (the others are in train_step.cpp).
  bool wait_while_paused();  // false when cancelled
  bool hold_with_ranks();    // data-parallel pause; false when cancelled
  bool skip_nonfinite_step(double loss_value, TrainResult& r);  // true: diverged, stop
  void after_optimizer_step();                                  // step count, placement, average
  // `now`: write one whatever the interval (a cancelled run keeps where it stopped).
  void checkpoint_if_due(TrainResult& r, bool now = false);
  void release_unowned_state();  // distributed Muon: momentum of others' matrices
  void finish(TrainResult& r, std::int64_t steps_run);

  RunConfig config_;
  std::filesystem::path checkpoint_dir_;
  std::string owner_key_;
  std::string owner_description_;
  std::unique_ptr<State> s_;
  std::vector<std::shared_ptr<MetricSink>> sinks_;
  std::int64_t total_steps_ = 0;
  std::int64_t stop_at_ = 0;               // set_stop_at
  std::function<std::string()> numerics_;  // set_numerics
  std::string resumed_numerics_;           // the checkpoint's, after resume_from()
  std::atomic<bool> cancel_{false};
  std::mutex pause_mutex_;
  std::condition_variable pause_cv_;
  bool paused_ = false;
  std::thread thread_;
  TrainResult thread_result_;
};

/// The effective config a checkpoint folder's run was written under (its state.json); a
/// tb::ValueError when the folder holds no TrainBench checkpoint state.
std::string checkpoint_config(const std::filesystem::path& checkpoint);

/// Whether `config` may continue from `checkpoint`, written under `checkpoint_config_toml`: the
/// same run except where it is placed and how it is logged and saved (binding, threads,
/// data.workers, checkpoint interval and keep, name, tags, log interval, init_from, where the
/// data is). A tb::ValueError naming the folder and the keys that differ otherwise; returns a
/// warning per data path that moved. Trainer::resume_from checks it; a launcher checks it before
/// it starts the ranks.
std::vector<std::string> check_resume_config(const std::filesystem::path& checkpoint,
                                             const std::string& checkpoint_config_toml,
                                             const RunConfig& config);

}  // namespace tb::train
