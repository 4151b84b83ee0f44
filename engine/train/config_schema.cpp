// The fixed sections' field specs and the key lookup over them and the kind registries.
#include "engine/train/config_schema.h"

#include <algorithm>

#include "engine/core/thread_pool.h"
#include "engine/data/registry.h"
#include "engine/nn/model_registry.h"
#include "engine/optim/registry.h"
#include "engine/sched/scheduler_registry.h"

namespace tb::train {

namespace {

using core::FieldSpec;
using core::FieldType;
using nlohmann::json;

std::vector<SectionSchema> make_fixed_sections() {
  std::vector<SectionSchema> out;
  out.push_back({"",
                 {FieldSpec("threads", FieldType::kInt, 0,
                            "kernel/BLAS threads (0 = the default: TB_NUM_THREADS or the CPUs "
                            "available)")
                      .at_least(0)
                      .at_most(core::kMaxNumThreads)}});
  out.push_back(
      {"run",
       {FieldSpec("name", FieldType::kString, "run", "shown in the runs list")
            .documented_as("", "non-empty, one line"),
        FieldSpec("tags", FieldType::kStringList, json::array(), "free-form labels"),
        FieldSpec("seed", FieldType::kInt, 0, "seeds initialisation, data order, dropout")
            .at_least(0),
        FieldSpec("device", FieldType::kString, "cpu",
                  "where the run computes: cpu, cuda[:N], openreg[:N] (the reference backend); it "
                  "must be usable here (trainbench-cli devices)")
            .documented_as("", "`cpu`, `cuda[:N]`, `openreg[:N]`"),
        FieldSpec("steps", FieldType::kInt, 0, "optimizer steps; 0 = train for run.epochs")
            .at_least(0),
        FieldSpec("epochs", FieldType::kInt, 1, "passes over the training data when run.steps is 0")
            .at_least(0),
        FieldSpec("log_interval", FieldType::kInt, 1, "metrics every N steps").at_least(1),
        FieldSpec("max_nonfinite", FieldType::kInt, 20,
                  "consecutive non-finite losses before the run ends as diverged")
            .at_least(1),
        FieldSpec("grad_clip", FieldType::kFloat, 0.0,
                  "clip the global gradient norm to this (0 = off)")
            .at_least(0),
        FieldSpec("gradient_accumulation_steps", FieldType::kInt, 1,
                  "batches of data.batch_size whose gradients make one optimizer step; per rank: "
                  "a step is K x batch_size x ranks samples (with run.epochs a step ends early at "
                  "an epoch's end)")
            .at_least(1)
            .at_most(1 << 20),
        FieldSpec("init_from", FieldType::kString, "",
                  "safetensors weights to start from (\"\" = random init); a gpt model also "
                  "takes GPT-2's from Hugging Face (model.safetensors) or nanoGPT (its "
                  "state_dict saved as safetensors)")}});
  out.push_back(
      {"data",
       {FieldSpec("path", FieldType::kString, "",
                  "folder, file or (tokens) file pattern; \"\" = the kind's default location "
                  "(Debian's dataset-fashion-mnist, fortunes; cifar-10, cifar-100, image-folder "
                  "and tokens have none and need it)"),
        FieldSpec("batch_size", FieldType::kInt, 128, "samples per step").at_least(1),
        FieldSpec("workers", FieldType::kInt, 1, "loader threads (0 = in the run thread)")
            .at_least(0)
            .at_most(256),
        FieldSpec("shuffle", FieldType::kBool, true, "new order every epoch"),
        FieldSpec("drop_last", FieldType::kBool, false, "drop a last partial batch"),
        FieldSpec("context_length", FieldType::kInt, 64, "text, tokens: tokens per sample")
            .at_least(1),
        FieldSpec("val_fraction", FieldType::kFloat, 0.1,
                  "text, tokens, image-folder: share held out for evaluation (text, tokens: "
                  "the corpus's end; image-folder: each class's last files by name; when "
                  "data.val_path is empty)")
            .above(0)
            .below(1),
        FieldSpec("normalize", FieldType::kBool, true,
                  "images: (x/255 - mean)/std per channel instead of x/255")}});
  out.push_back(
      {"amp",
       {FieldSpec("enabled", FieldType::kBool, false,
                  "autocast the forward pass and the loss (parameters stay float32)"),
        FieldSpec("dtype", FieldType::kString, "bf16", "autocast dtype").one_of({"bf16", "fp16"}),
        FieldSpec("grad_scaler", FieldType::kBool, false,
                  "dynamic loss scaling (fp16 needs it in practice; the default is true with fp16)")
            .documented_as("", "default true with `fp16`"),
        FieldSpec("tf32", FieldType::kBool, false,
                  "CUDA: float32 matrix products on TF32 tensor cores (inputs rounded to 10 "
                  "mantissa bits); this run only")}});
  out.push_back(
      {"swa",
       {FieldSpec("kind", FieldType::kString, "none",
                  "keep an averaged copy of the weights (running mean or EMA), evaluated beside "
                  "the model")
            .one_of({"none", "swa", "ema"}),
        FieldSpec("ema_decay", FieldType::kFloat, 0.999, "EMA decay").at_least(0).at_most(1),
        FieldSpec("start_step", FieldType::kInt, 0, "first step that updates the average")
            .at_least(0),
        FieldSpec("every", FieldType::kInt, 1, "update interval in steps").at_least(1),
        FieldSpec("use_buffers", FieldType::kBool, true,
                  "average the buffers (BatchNorm statistics) with the weights; false copies the "
                  "live model's and recomputes BatchNorm statistics over the training split "
                  "before each evaluation of the average (torch.optim.swa_utils.update_bn)")}});
  out.push_back(
      {"eval",
       {FieldSpec("interval", FieldType::kInt, 0,
                  "steps between evaluations (0 = at the end of each epoch)")
            .at_least(0),
        FieldSpec("batches", FieldType::kInt, 0,
                  "batches per evaluation (0 = the whole eval split)")
            .at_least(0),
        FieldSpec("samples", FieldType::kInt, 0,
                  "language models: texts generated at each evaluation from the start "
                  "of the eval split, stored with the run (temperature 0.8, top-k 40)")
            .at_least(0),
        FieldSpec("sample_tokens", FieldType::kInt, 64, "tokens per generated text").at_least(1),
        FieldSpec("at_start", FieldType::kBool, false,
                  "also evaluate the initial model, logged at step 0 (not on a resume; it counts "
                  "in the run's best values)")}});
  out.push_back(
      {"checkpoint",
       {FieldSpec("interval", FieldType::kInt, 0, "steps between checkpoints (0 = only at the end)")
            .at_least(0),
        FieldSpec("keep", FieldType::kInt, 3, "newest checkpoints of this run kept").at_least(1),
        FieldSpec("dir", FieldType::kString, "",
                  "checkpoint folder; \"\" = next to the run database, per store and run")}});
  out.push_back(
      {"binding",
       {FieldSpec("mode", FieldType::kString, "none",
                  "CPU binding of the run (as trainbench-cli topo --binding)")
            .one_of({"none", "node", "socket", "exclusive", "core-complex"}),
        FieldSpec("slot", FieldType::kInt, 0, "this run's CPU worker slot")
            .documented_as("", "0 <= slot < slots"),
        FieldSpec("slots", FieldType::kInt, 1, "how many runs share the machine").at_least(1),
        FieldSpec("fallback", FieldType::kBool, false,
                  "when the binding cannot be satisfied: run unbound with a warning"),
        FieldSpec("cpus", FieldType::kString, "",
                  "bind to exactly these CPUs (\"0-3,8\") instead of planning the slot")}});
  out.push_back(
      {"distributed",
       {FieldSpec("backend", FieldType::kString, "none",
                  "data-parallel training over ranks started by mpirun (trainbench-cli launch "
                  "--ddp) or a torchrun-style environment: mpi = Open MPI (CPU tensors; a CUDA "
                  "model's gradients staged through the host); nccl = NCCL on each rank's GPU "
                  "(cuda:LOCAL_RANK), bootstrapped over Open MPI; none = one process")
            .one_of({"none", "mpi", "nccl"}),
        FieldSpec("world_size", FieldType::kInt, 0,
                  "ranks expected; 0 = as many as the launcher started (a mismatch is an error)")
            .at_least(0),
        FieldSpec("timeout_s", FieldType::kFloat, 300.0,
                  "deadline of every collective: a rank later than this fails the job, naming it")
            .above(0),
        FieldSpec("bucket_mb", FieldType::kFloat, 25.0,
                  "gradients are all-reduced in buckets of this many MiB")
            .above(0),
        FieldSpec("check_replicas", FieldType::kBool, false,
                  "compare the ranks' parameters and buffers bit for bit at every logged step (a "
                  "mismatch fails the run)"),
        FieldSpec("broadcast_buffers", FieldType::kBool, true,
                  "copy rank 0's buffers (BatchNorm running statistics) to every rank after each "
                  "step, as PyTorch DDP's broadcast_buffers; false: each rank keeps its own"),
        FieldSpec("muon", FieldType::kString, "distributed",
                  "Muon over ranks: distributed = each rank orthogonalises a share of the "
                  "matrices (by Newton-Schulz cost) and the updated matrices are gathered; "
                  "replicated = every rank does all of them")
            .one_of({"distributed", "replicated"})}});
  return out;
}

template <typename Entry>
FieldSpec kind_field(const core::Registry<Entry>& r, const std::string& def, std::string help,
                     std::vector<std::string> extra_first = {}) {
  std::vector<std::string> names = std::move(extra_first);
  for (const auto& n : r.names())
    names.push_back(n);
  return FieldSpec("kind", FieldType::kString, def, std::move(help)).one_of(std::move(names));
}

std::optional<FieldSpec> in(const std::vector<FieldSpec>& fields, const std::string& key) {
  if (const FieldSpec* f = core::find_field(fields, key)) return *f;
  return std::nullopt;
}

}  // namespace

const std::vector<SectionSchema>& fixed_sections() {
  static const std::vector<SectionSchema> sections = make_fixed_sections();
  return sections;
}

std::vector<std::string> dotted_config_keys() {
  std::vector<std::string> out;
  auto add = [&](const std::string& section, const std::vector<core::FieldSpec>& fields) {
    for (const auto& f : fields) {
      std::string d = section + "." + f.key;
      if (std::find(out.begin(), out.end(), d) == out.end()) out.push_back(std::move(d));
    }
  };
  for (const auto& s : fixed_sections())
    if (!s.name.empty()) add(s.name, s.fields);
  for (const char* section : {"model", "data", "optimizer", "scheduler"})
    out.push_back(std::string(section) + ".kind");
  for (const auto& e : nn::model_registry().entries())
    add("model", e->fields);
  for (const auto& e : data::dataset_registry().entries())
    add("data", e->fields);
  // A kind that hands the rest to another (Muon) reads its own keys under [optimizer.<kind>]
  // and the other's under [optimizer.<rest>]; the others read theirs under [optimizer].
  for (const auto& e : optim::optimizer_registry().entries())
    if (e->rest_kind.empty()) add("optimizer", e->fields);
  for (const auto& e : optim::optimizer_registry().entries()) {
    if (e->rest_kind.empty()) continue;
    add("optimizer." + e->name, e->fields);
    if (auto rest = optim::optimizer_registry().find(e->rest_kind))
      add("optimizer." + e->rest_kind, rest->fields);
  }
  for (const auto& e : sched::scheduler_registry().entries())
    add("scheduler", e->fields);
  return out;
}

std::optional<FieldSpec> describe_key(const std::string& key, const std::string& model_kind,
                                      const std::string& data_kind,
                                      const std::string& optimizer_kind,
                                      const std::string& scheduler_kind) {
  const auto dot = key.rfind('.');
  const std::string section = dot == std::string::npos ? "" : key.substr(0, dot);
  const std::string leaf = dot == std::string::npos ? key : key.substr(dot + 1);
  if (section == "model") {
    if (leaf == "kind")
      return kind_field(nn::model_registry(), "mlp", "the model (see the Models section)");
    if (auto e = nn::model_registry().find(model_kind)) return in(e->fields, leaf);
    return std::nullopt;
  }
  if (section == "data" && leaf == "kind")
    return kind_field(data::dataset_registry(), "fashion-mnist", "the data set");
  if (section == "data") {
    if (auto e = data::dataset_registry().find(data_kind))
      if (auto f = in(e->fields, leaf)) return f;
  }
  if (section == "optimizer" && leaf == "kind")
    return kind_field(optim::optimizer_registry(), "adamw",
                      "the optimizer; muon = Muon for 2-D hidden matrices, AdamW for the rest");
  if (section == "optimizer" && leaf == "weight_decay_params")
    return FieldSpec("weight_decay_params", FieldType::kString, "all",
                     "parameters weight decay applies to: all, or matrices (2+ dimensions; "
                     "biases and norm weights train without it, as nanoGPT)")
        .one_of({"all", "matrices"});
  if (section == "optimizer" && leaf == "split")
    return FieldSpec("split", FieldType::kAny, json::array(),
                     "muon: [glob, \"muon\" | \"adamw\"] pairs overriding the default split "
                     "(later pairs win)")
        .documented_as("array of [glob, kind] pairs");
  if (section.rfind("optimizer", 0) == 0) {
    std::string kind = optimizer_kind;
    if (section != "optimizer") kind = section.substr(std::string("optimizer.").size());
    if (auto e = optim::optimizer_registry().find(kind)) return in(e->fields, leaf);
    return std::nullopt;
  }
  if (section == "scheduler") {
    if (leaf == "kind")
      return kind_field(sched::scheduler_registry(), "none",
                        "the LR scheduler (PyTorch's lr_scheduler kinds); none = constant LR",
                        {"none"});
    if (auto e = sched::scheduler_registry().find(scheduler_kind)) return in(e->fields, leaf);
    return std::nullopt;
  }
  for (const auto& s : fixed_sections())
    if (s.name == section) return in(s.fields, leaf);
  return std::nullopt;
}

}  // namespace tb::train
