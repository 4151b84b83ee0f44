// RunConfig: everything a training run needs, read from TOML (sections run, model, data,
// optimizer, scheduler, amp, swa, eval, checkpoint, binding, threads), validated before anything
// runs, with `--set key.path=value` overrides. The effective config (defaults filled in) is
// stored with the run, as TOML text.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/nn/models.h"

namespace tb::train {

/// [run]
struct RunSection {
  std::string name = "run";         ///< shown in the runs list
  std::vector<std::string> tags;    ///< free-form labels
  std::uint64_t seed = 0;           ///< seeds init, data order, dropout
  std::string device = "cpu";       ///< "cpu", "cuda", "cuda:1", "openreg:0", ...
  std::int64_t steps = 0;           ///< optimizer steps; 0 = use epochs
  std::int64_t epochs = 1;          ///< passes over the training data when steps == 0
  std::int64_t log_interval = 1;    ///< metrics every N steps
  std::int64_t max_nonfinite = 20;  ///< consecutive non-finite losses before status diverged
  double grad_clip = 0.0;           ///< clip the global gradient norm to this (0 = off)
  /// Batches whose gradients make one optimizer step (1 = none accumulated); every sample of a
  /// step weighs the same in its gradient and loss. In a run counted in epochs a step ends early
  /// at an epoch's end; one counted in steps takes this many every step, across epoch ends.
  std::int64_t gradient_accumulation_steps = 1;
  /// A safetensors file the model starts from instead of its random initialisation ("" =
  /// none): TrainBench's names, or GPT-2's for a gpt model (train::load_weights).
  std::string init_from;
};

/// [data]: the loader keys every kind shares, and the kind's own fields (`extra`).
struct DataSection {
  std::string kind = "fashion-mnist";  ///< a name in data::dataset_registry()
  std::string path;                    ///< folder or file; "" = the kind's default location
  std::int64_t batch_size = 128;       ///< samples per batch
  std::int64_t workers = 1;            ///< loader threads (0 = in the run thread)
  bool shuffle = true;                 ///< shuffle every epoch
  bool drop_last = false;              ///< drop a last partial batch
  std::int64_t context_length = 64;    ///< text: tokens per sample
  double val_fraction = 0.1;           ///< text: held-out share
  bool normalize = true;               ///< fashion-mnist: (x/255 − mean)/std
  nlohmann::json extra = nlohmann::json::object();  ///< the kind's own fields
};

/// The [data] table as JSON (shared keys and the kind's own): what a data kind's factory reads.
nlohmann::json data_settings(const DataSection& data);

/// The value of a command-line `field=value` setting: what TOML reads in `v = <raw>` when that
/// is one value (numbers, booleans, strings, arrays — of inline tables too — and inline tables),
/// else JSON when `raw` parses as JSON, else `raw` itself as a string.
nlohmann::json setting_value(const std::string& raw);

/// {"kind": kind} with each of `settings` ("field=value", values as setting_value) added;
/// a setting without '=' is a tb::ValueError naming `what` ("[schedule] setting 'x' must look
/// like field=value").
nlohmann::json settings_object(const std::string& kind, const std::vector<std::string>& settings,
                               const std::string& what);

/// One optimizer's settings ([optimizer], or [optimizer.muon] / [optimizer.adamw]): its kind (a
/// name in optim::optimizer_registry()) and a value for every field of that kind.
struct OptimizerSettings {
  std::string kind = "adamw";  ///< optimizer.kind
  nlohmann::json values;       ///< field -> value (every field of the kind)
  /// AdamW with its defaults.
  OptimizerSettings();
  /// `kind` with its defaults (an unknown kind is a tb::ValueError listing the known ones).
  explicit OptimizerSettings(const std::string& kind);
  /// A number field ("lr").
  double number(const std::string& key) const;
  /// Sets a field (a key the kind does not have is a tb::ValueError).
  OptimizerSettings& set(const std::string& key, nlohmann::json value);
};

/// [optimizer]: one optimizer for everything, or — with a kind that takes only the 2-D hidden
/// matrices (Muon) — that kind's settings in [optimizer.KIND] and its companion's (AdamW) for
/// the rest in [optimizer.COMPANION]; `split` overrides map name globs to either.
struct OptimizerSection {
  OptimizerSettings main;                  ///< the only optimizer, or Muon's settings
  std::optional<OptimizerSettings> adamw;  ///< the companion for the rest (Muon runs)
  std::vector<std::pair<std::string, std::string>> split;  ///< glob -> "muon" | "adamw"
  /// Which parameters weight decay applies to: "all" (PyTorch's one group), or "matrices": those
  /// of 2 or more dimensions, biases and norm weights in a second group without it (nanoGPT's
  /// configure_optimizers).
  std::string weight_decay_params = "all";
  /// True when the matrix optimizer takes convolution filters too, flattened to
  /// [out, in·kh·kw] (optimizer.muon.conv_filters = "flatten"): optim::split_params's
  /// `flatten_conv`.
  bool flattens_conv_filters() const;
};

/// [scheduler]: a scheduler config as sched::make_scheduler reads it ({"kind": ..., fields}),
/// or null for a constant LR. Steps once per optimizer step.
struct SchedulerSection {
  nlohmann::json config;  ///< null = none
};

/// [amp]
struct AmpSection {
  bool enabled = false;        ///< autocast the forward pass
  std::string dtype = "bf16";  ///< "bf16" or "fp16"
  bool grad_scaler = false;    ///< dynamic loss scaling (fp16)
  bool tf32 = false;           ///< float32 products on CUDA may use TF32 tensor cores
};

/// The first line of an effective config (to_toml): a text that starts with it was written by a
/// TrainBench build, with every key that build knew.
inline constexpr const char* kEffectiveHeader =
    "# TrainBench run configuration (effective: every key, defaults filled in)";

/// [swa]
struct SwaSection {
  std::string kind = "none";    ///< "none", "swa", "ema"
  double ema_decay = 0.999;     ///< EMA decay
  std::int64_t start_step = 0;  ///< first step that updates the average
  std::int64_t every = 1;       ///< update interval in steps
  /// Average the buffers (BatchNorm statistics) with the weights; false copies the live model's
  /// and recomputes BatchNorm statistics before the average is evaluated (update_bn).
  bool use_buffers = true;
};

/// [eval]
struct EvalSection {
  std::int64_t interval = 0;        ///< steps between evaluations (0 = at the end of each epoch)
  std::int64_t batches = 0;         ///< batches per evaluation (0 = the whole eval split)
  std::int64_t samples = 0;         ///< language models: texts generated at each evaluation
  std::int64_t sample_tokens = 64;  ///< tokens per generated text
  /// Also evaluate the initial model, logged at step 0 (nanoGPT's step-0 estimate: a new model's
  /// loss should be about ln(vocab)); not on a resume.
  bool at_start = false;
};

/// [checkpoint]
struct CheckpointSection {
  std::int64_t interval = 0;  ///< steps between checkpoints (0 = only at the end)
  std::int64_t keep = 3;      ///< newest checkpoints kept
  std::string dir;            ///< "" = next to the run database, per run
};

/// [binding]: which CPUs the run uses (the modes of PyTorch's torch/numa/binding.py, as
/// `trainbench-cli topo --binding`). The run is
/// CPU worker slot `slot` of `slots` (slots go to NUMA nodes round-robin); its thread, loader
/// threads and kernel pool are pinned to the slot's CPUs, the pool is sized to them, and memory
/// is preferred on the slot's node(s).
struct BindingSection {
  std::string mode = "none";  ///< none, node, socket, exclusive, core-complex
  std::int64_t slot = 0;      ///< this run's slot, 0 <= slot < slots
  std::int64_t slots = 1;     ///< how many runs share the machine
  bool fallback = false;      ///< when binding fails: warn and run unbound instead of failing
  std::string cpus;           ///< explicit CPU list ("0-3,8"): skip planning, bind to these
                              ///< (what `trainbench-cli launch` passes to its children)
};

/// [distributed]: data-parallel training over several processes ("ranks"), each training on its
/// slice of every global batch (data.batch_size is per rank, as in PyTorch), gradients averaged
/// every step. Ranks are started by `trainbench-cli launch --ddp` (mpirun) or by mpirun directly.
struct DistributedSection {
  std::string backend = "none";  ///< none (one process), mpi (CPU tensors)
  std::int64_t world_size = 0;   ///< ranks expected (0 = as many as the launcher started)
  double timeout_s = 300;       ///< deadline of every collective; a rank late by more fails the job
  double bucket_mb = 25;        ///< gradients are all-reduced in buckets of this size
  bool check_replicas = false;  ///< compare every rank's parameters at each logged step
  /// Copy rank 0's buffers (BatchNorm running statistics) to every rank after each step, as
  /// PyTorch's DistributedDataParallel(broadcast_buffers=True) does.
  bool broadcast_buffers = true;
  std::string muon =
      "distributed";  ///< distributed (each rank a share of the matrices) or replicated
};

/// The whole run configuration.
struct RunConfig {
  RunSection run;                  ///< [run]
  nn::ModelConfig model;           ///< [model] (kind = "mlp" | "qwen-tiny" and its fields)
  DataSection data;                ///< [data]
  OptimizerSection optimizer;      ///< [optimizer]
  SchedulerSection scheduler;      ///< [scheduler]
  AmpSection amp;                  ///< [amp]
  SwaSection swa;                  ///< [swa]
  EvalSection eval;                ///< [eval]
  CheckpointSection checkpoint;    ///< [checkpoint]
  BindingSection binding;          ///< [binding]
  DistributedSection distributed;  ///< [distributed]
  std::int64_t threads = 0;        ///< top-level `threads`: kernel/BLAS threads (0 = default)
};

/// Parses TOML text (`source` names the file in messages), applies `overrides` ("key.path=value",
/// value in TOML syntax or a bare string), fills defaults and validates. Errors are tb::ValueError
/// naming the source, the key path, what was expected and what was found; an unknown key
/// suggests the nearest valid one ("[config] run.toml: unknown key 'optimizer.lr_max'; did you
/// mean 'optimizer.lr'?").
RunConfig parse_run_config(const std::string& toml_text, const std::string& source = "<config>",
                           const std::vector<std::string>& overrides = {});
/// The text of the config file `path`; a missing, unreadable file or a folder is a tb::ValueError
/// "[<what>] PATH: ..." naming it (ConfigError for the run configs' "[config]").
std::string read_config_file(const std::string& path, const std::string& what = "config");
/// Reads `path` and parses it (a missing or unreadable file names the path).
RunConfig load_run_config(const std::string& path, const std::vector<std::string>& overrides = {});
/// The config's file paths made absolute from the current folder (data.path, data.val_path,
/// data.tokenizer_model, run.init_from, checkpoint.dir; "" stays ""). A new run's config is
/// stored so, and so it still names the same files when resumed from another folder.
void make_paths_absolute(RunConfig& config);

/// The effective config as TOML (every key, defaults filled in); parse_run_config of it gives
/// an equal config.
std::string to_toml(const RunConfig& config);

/// The optimizer steps of one epoch of `batches` batches:
/// ceil(batches / run.gradient_accumulation_steps) (in a run counted in epochs, an epoch's last
/// step takes what is left; in one counted in steps, the evaluations of eval.interval = 0).
std::int64_t steps_per_epoch(const RunConfig& config, std::int64_t batches);

}  // namespace tb::train
