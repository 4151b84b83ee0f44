// Internals of the Trainer shared by its files (trainer.cpp: the run and its loop;
// trainer_setup.cpp: building a run from its config; train_step.cpp: the step phases;
// checkpoint_io.cpp: checkpoint files; applied_binding.cpp: the CPU binding while a run runs).
// Not part of the engine's API.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/amp/grad_scaler.h"
#include "engine/core/device.h"
#include "engine/core/thread_pool.h"
#include "engine/data/dataloader.h"
#include "engine/data/tokenizer.h"
#include "engine/nn/models.h"
#include "engine/numa/binding.h"
#include "engine/optim/optimizer.h"
#include "engine/rng/cpu_generator.h"
#include "engine/sched/lr_scheduler.h"
#include "engine/swa/swa_utils.h"
#include "engine/train/data_parallel.h"
#include "engine/train/trainer.h"

namespace tb::train {

/// Everything a run owns. Declaration order = construction order (the generator outlives the
/// model whose Dropout layers draw from it; optimizers and schedulers outlive nothing).
struct Trainer::State {
  /// config.threads > 0: the process's kernel thread count while this trainer lives, the one
  /// before it again afterwards (a GUI run with threads = 2 left the whole workbench at 2, and a
  /// later run with threads = 0, "the default", got 2). First, so that it is restored last.
  std::optional<core::ScopedNumThreads> threads;
  rng::CpuGenerator gen;                                ///< model init and dropout
  std::shared_ptr<data::Dataset> train_set;             ///< what the loader draws from
  std::shared_ptr<data::Dataset> eval_set;              ///< what evaluation reads
  std::unique_ptr<data::DataLoader> loader;             ///< the training batches
  std::shared_ptr<nn::Model> model;                     ///< the model trained
  bool language_model = false;                          ///< the data set is a language-model task
  std::shared_ptr<const data::Tokenizer> tokenizer;     ///< the data's text form (null: ids)
  std::vector<std::string> opt_names;                   ///< "adamw", "muon", ...
  std::vector<std::unique_ptr<optim::Optimizer>> opts;  ///< one, or matrix kind + rest
  std::vector<std::shared_ptr<sched::LRScheduler>> scheds;  ///< one per optimizer, or none
  std::string split_table;                      ///< the parameter (split) table, for display
  std::unique_ptr<amp::GradScaler> scaler;      ///< amp.grad_scaler
  std::unique_ptr<swa::AveragedModel> average;  ///< swa.kind != none
  /// The average's model's generator: its dropout draws from it while update_bn runs it in
  /// training mode (swa.use_buffers = false), reseeded before each such pass. A member: the model
  /// keeps a pointer to it (a local of the setup was gone by then).
  rng::CpuGenerator average_gen;
  std::shared_ptr<nn::Model> average_model;   ///< evaluates the average (same architecture)
  numa::SlotBinding binding;                  ///< binding.mode != none: the slot's CPUs, node
  std::vector<int> binding_nodes;             ///< NUMA nodes of the bound CPUs
  std::string binding_warning;                ///< a failed binding that fell back to unbound
  std::vector<std::string> setup_warnings;    ///< emitted when the run starts
  std::vector<std::string> setup_notes;       ///< what the data read, info when it starts
  bool placement_reported = false;            ///< the memory placement event was emitted
  core::Device device;                        ///< run.device
  std::int64_t step = 0;                      ///< optimizer steps done
  std::int64_t scaler_skipped = 0;            ///< steps the scaler skipped for inf/NaN gradients
  std::int64_t nonfinite_in_row = 0;          ///< consecutive non-finite losses
  std::int64_t skipped = 0;                   ///< steps skipped for a non-finite loss
  Metrics last_eval;                          ///< the last evaluation
  std::unique_ptr<detail::DataParallel> ddp;  ///< distributed.backend != none
  double last_comm_ms = 0;                    ///< data-parallel: the previous step's exchange
  double last_optimizer_ms = 0;               ///< data-parallel: the previous optimizer phase
  std::vector<detail::RankTimes> ddp_times;   ///< data-parallel: every rank's, last exchange
};

namespace detail {

// ---- setup (trainer_setup.cpp), in the order the constructor calls them -------------------------

/// run.device parsed and usable here.
core::Device setup_device(const RunConfig& c);
/// The CPU binding planned (errors now, before any step); applied by run() on the run thread.
void plan_binding(const RunConfig& c, Trainer::State& s);
/// The data set's splits and the training loader.
void setup_data(const RunConfig& c, Trainer::State& s);
/// The model, initialised on the CPU from the run's generator, then moved to the device.
void setup_model(const RunConfig& c, Trainer::State& s);
/// One optimizer, or a matrix kind (Muon) for the 2-D hidden matrices and its companion for the
/// rest; a scheduler per optimizer.
void setup_optimizers(const RunConfig& c, Trainer::State& s);
/// The GradScaler (amp.grad_scaler) and the SWA/EMA average (swa.kind).
void setup_scaler_and_average(const RunConfig& c, Trainer::State& s);
/// The scheduler against the run's `steps`, every nested scheduler against the steps it is
/// stepped: a one-cycle schedule shorter than those throws tb::ValueError (OneCycleLR would fail
/// at its end, as PyTorch's raises "Tried to step ..."); a cosine whose T_max is shorter adds a
/// warning to s.setup_warnings (CosineAnnealingLR is periodic: the LR climbs back after T_max).
void check_schedule_length(const RunConfig& c, std::int64_t steps, Trainer::State& s);

// ---- step phases (train_step.cpp) --------------------------------------------------------------

/// Host-clock (or device-event) times of one step's phases, in milliseconds.
struct StepTimes {
  double data_ms = 0;
  double forward_ms = 0;
  double backward_ms = 0;
  double optimizer_ms = 0;
  double comm_ms = 0;  ///< data-parallel: the gradient exchange
};

/// The next training batch (across an epoch boundary).
data::Batch next_batch(Trainer::State& s);
/// The batches the next step accumulates: run.gradient_accumulation_steps; in a run counted in
/// epochs, what is left of the epoch when fewer (the loader at an epoch's end: a whole one).
std::int64_t batches_of_step(const RunConfig& c, const Trainer::State& s);
/// The samples of the next `batches` batches (of every rank), from the loader's batch sizes.
std::int64_t rows_of_step(const Trainer::State& s, std::int64_t batches);
/// The forward pass and the loss, under autocast when amp.enabled.
core::Tensor forward_loss(const RunConfig& c, Trainer::State& s, const data::Batch& batch);
/// Data-parallel, a rank whose share of a short last batch is empty: runs the model's forward
/// pass on the empty shard (no gradients; its buffers — BatchNorm's statistics — restored after),
/// so that Dropout draws the global batch's mask from its generator as the other ranks do and the
/// ranks' random streams stay equal.
void replay_random_draws(Trainer::State& s, const data::Batch& empty_shard);
/// With a scaler, unscales the gradients; returns the global gradient L2 norm (accumulated on
/// the device in float64, parameter order, read once) and clips to run.grad_clip when set.
double unscale_and_clip(const RunConfig& c, Trainer::State& s,
                        const std::vector<core::Tensor>& params);
/// "lr.<optimizer>.<group>" of every group: the learning rates this step uses.
void append_lr_metrics(const Trainer::State& s, Metrics& m);

/// What the optimizer phase did.
struct OptimizerStepResult {
  bool stepped = true;        ///< false: the scaler skipped it for inf/NaN gradients
  double loss_scale = 1.0;    ///< the scale this step used (with a scaler)
  Metrics optimizer_metrics;  ///< the optimizers' own (Muon's Newton-Schulz time), summed by name
};
/// The optimizers' steps (through the scaler when there is one), their zero_grad, the
/// schedulers' steps; with `with_metrics` (a logged step) also the optimizers' own metrics.
OptimizerStepResult optimizer_step(Trainer::State& s, bool with_metrics);
/// The step's metrics after the optimizer phase, in their logging order.
void append_step_metrics(const Trainer::State& s, const StepTimes& t, double grad_norm,
                         const OptimizerStepResult& o, const data::Batch& batch,
                         std::int64_t step_rows, double step_ms, Metrics& m);

// ---- checkpoints (checkpoint_io.cpp) -----------------------------------------------------------

/// "step-00000042".
std::string checkpoint_name(std::int64_t step);
/// Deletes, among the step-* folders of `dir` recorded as written by `owner_key`, those past
/// `current_step` (a continuation abandoned by a resume from an earlier checkpoint), then the
/// oldest until `keep` remain; and the hidden leftovers of killed saves (.step-N.partial,
/// .step-N.old). Folders of another owner, or whose state cannot be read, are never deleted.
void prune_checkpoints(const std::filesystem::path& dir, std::int64_t keep,
                       const std::string& owner_key, std::int64_t current_step);
/// The owner key ("STORE_ID/RUN_ID") a checkpoint folder records: "" for one written without an
/// owner, nullopt when its state cannot be read.
std::optional<std::string> checkpoint_owner(const std::filesystem::path& dir);

}  // namespace detail
}  // namespace tb::train
