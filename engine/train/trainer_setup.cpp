// Building a run from its config: device, CPU binding plan, data, model, optimizers and
// schedulers, GradScaler and SWA/EMA — each a named step the Trainer's constructor calls in
// order. Every kind comes from its registry; every error is raised here, before any step.
#include <algorithm>
#include <new>
#include <string>
#include <string_view>

#include "engine/core/error.h"
#include "engine/data/registry.h"
#include "engine/nn/model_registry.h"
#include "engine/numa/topology_hwloc.h"
#include "engine/optim/muon.h"
#include "engine/optim/param_split.h"
#include "engine/optim/registry.h"
#include "engine/train/trainer_state.h"
#include "engine/train/weights_io.h"

namespace tb::train::detail {

namespace {

std::unique_ptr<optim::Optimizer> make_optimizer(const OptimizerSettings& s,
                                                 std::vector<core::Tensor> params) {
  // The kind's defaults under the given values: a settings object built in code may set only
  // some keys.
  const auto kind = optim::optimizer_registry().at(s.kind);
  nlohmann::json values = core::default_values(kind->fields);
  for (const auto& f : kind->fields)
    if (s.values.contains(f.key)) values[f.key] = s.values.at(f.key);
  return kind->make(std::move(params), values);
}

// make_optimizer for a run: with optimizer.weight_decay_params = "matrices" the parameters of
// fewer than 2 dimensions (biases, norm weights) go to a second group with weight_decay 0, as
// nanoGPT's configure_optimizers builds its AdamW.
std::unique_ptr<optim::Optimizer> make_run_optimizer(const RunConfig& c, const OptimizerSettings& s,
                                                     std::vector<core::Tensor> params,
                                                     Trainer::State& st) {
  if (c.optimizer.weight_decay_params != "matrices") return make_optimizer(s, std::move(params));
  std::vector<core::Tensor> decay, plain;
  std::int64_t plain_values = 0;
  for (auto& p : params) {
    if (p.dim() >= 2) {
      decay.push_back(std::move(p));
    } else {
      plain_values += p.numel();
      plain.push_back(std::move(p));
    }
  }
  if (!plain.empty())
    st.setup_notes.push_back(s.kind + ": " + std::to_string(plain.size()) +
                             " tensors of fewer than 2 dimensions (" +
                             std::to_string(plain_values) +
                             " values: biases, norm weights) train without weight decay "
                             "(optimizer.weight_decay_params = \"matrices\")");
  if (decay.empty()) {
    OptimizerSettings none = s;
    none.set("weight_decay", 0.0);
    return make_optimizer(none, std::move(plain));
  }
  auto opt = make_optimizer(s, std::move(decay));
  if (!plain.empty()) {
    optim::ParamGroup g;
    g.params = std::move(plain);
    for (const auto& [k, v] : opt->param_groups().front().options)
      g.options[k] = optim::copy_value(v);
    g.options["weight_decay"] = 0.0;
    opt->add_param_group(std::move(g));
  }
  return opt;
}

std::vector<core::Tensor> tensors_of(const nn::NamedTensors& named) {
  std::vector<core::Tensor> out;
  for (const auto& [n, t] : named)
    out.push_back(t);
  return out;
}

// An explicit CPU list (from a launcher that already planned the slots): bind to exactly it.
void bind_to_cpu_list(const RunConfig& c, Trainer::State& s) {
  const numa::Topology topo = numa::load_machine_topology();
  numa::CpuSet cpus;
  try {
    cpus = numa::CpuSet::parse(c.binding.cpus);
  } catch (const ValueError& e) {
    throw ValueError(std::string("[trainer] binding.cpus '") + c.binding.cpus + "': " + e.what());
  }
  const numa::CpuSet outside = cpus - topo.allowed_cpus();
  TB_CHECK(!cpus.empty() && outside.empty(), "[trainer] binding.cpus '", c.binding.cpus, "': ",
           cpus.empty()
               ? std::string("empty")
               : "CPUs " + outside.to_string() + " are not allowed for this process (allowed: " +
                     topo.allowed_cpus().to_string() + ")");
  s.binding.bound = true;
  s.binding.cpus = cpus;
  s.binding.slot = static_cast<int>(c.binding.slot);
  s.binding.mode = numa::parse_binding_mode(c.binding.mode);
  s.binding_nodes = numa::nodes_of_cpus(topo, cpus);
  s.binding.node = s.binding_nodes.empty() ? -1 : s.binding_nodes.front();
}

}  // namespace

core::Device setup_device(const RunConfig& c) {
  const core::Device device = core::Device::parse(c.run.device);
  const std::string why = core::device_unavailable_reason(device);
  TB_CHECK(why.empty(), "[trainer] run.device '", c.run.device, "': ", why);
  return device;
}

void plan_binding(const RunConfig& c, Trainer::State& s) {
  if (!c.binding.cpus.empty()) {
    bind_to_cpu_list(c, s);
    return;
  }
  if (c.binding.mode == "none") return;
  numa::BindingOptions bo;
  bo.mode = numa::parse_binding_mode(c.binding.mode);
  bo.fallback = c.binding.fallback;
  const numa::Topology topo = numa::load_machine_topology();
  try {
    s.binding =
        numa::bind_slot(topo, bo, numa::SlotKind::kCpuWorker, static_cast<int>(c.binding.slot),
                        static_cast<int>(c.binding.slots));
  } catch (const ValueError& e) {
    throw ValueError(std::string("[trainer] binding.mode '") + c.binding.mode + "' (slot " +
                     std::to_string(c.binding.slot) + " of " + std::to_string(c.binding.slots) +
                     "): " + e.what() + " (set binding.fallback = true to run unbound instead)");
  }
  if (s.binding.bound)
    s.binding_nodes = numa::nodes_of_cpus(topo, s.binding.cpus);
  else
    s.binding_warning = s.binding.warning;
}

void setup_data(const RunConfig& c, Trainer::State& s) {
  const DataSection& d = c.data;
  const auto kind = data::dataset_registry().at(d.kind);
  data::DataSplits splits = kind->make(data_settings(d), c.run.seed);
  for (auto& n : splits.notes)
    s.setup_notes.push_back(std::move(n));
  for (auto& w : splits.warnings)
    s.setup_warnings.push_back(std::move(w));
  s.train_set = std::move(splits.train);
  s.eval_set = std::move(splits.eval);
  // More evaluation batches than the split holds: each evaluation reads the split once, said
  // (an eval.batches chosen for another data set silently measured less than asked).
  if (c.eval.batches > 0 && s.eval_set != nullptr) {
    const std::int64_t per = d.batch_size * (s.ddp ? s.ddp->world() : 1);
    const std::int64_t held = (s.eval_set->size() + per - 1) / per;
    if (held > 0 && c.eval.batches > held)
      s.setup_warnings.push_back("eval.batches = " + std::to_string(c.eval.batches) +
                                 " is more than the evaluation split's " + std::to_string(held) +
                                 " batches of " + std::to_string(per) +
                                 ": each evaluation reads those " + std::to_string(held));
  }
  s.language_model = kind->task == core::kTaskLanguageModel;
  s.tokenizer = data::tokenizer_of(*kind, data_settings(d));
  data::DataLoaderOptions lo;
  // Data-parallel: every rank draws the same global batches (data.batch_size per rank) and
  // keeps its rows, so the union of the ranks' k-th batches is the one-process k-th batch.
  lo.batch_size = d.batch_size * (s.ddp ? s.ddp->world() : 1);
  lo.shuffle = d.shuffle;
  lo.drop_last = d.drop_last;
  lo.num_workers = static_cast<int>(d.workers);
  lo.seed = c.run.seed + 1;  // the data order has its own stream, derived from the run's seed
  // ... and builds only this rank's rows of each (DataParallel::take_shard keeps them as they are).
  if (s.ddp) {
    lo.shard_rank = s.ddp->rank();
    lo.shard_count = s.ddp->world();
  }
  // A batch larger than the training split with drop_last leaves no batch at all: said with the
  // keys, not as "the data loader produced no batch" at the first step.
  TB_CHECK(s.train_set->size() >= lo.batch_size || !d.drop_last,
           "[data] data.batch_size = ", d.batch_size,
           s.ddp ? " per rank (" + std::to_string(lo.batch_size) + " a global batch)" : "",
           " with data.drop_last = true leaves no batch of the ", s.train_set->size(),
           " training samples: lower data.batch_size, or set data.drop_last = false");
  s.loader = std::make_unique<data::DataLoader>(s.train_set, lo);
}

void setup_model(const RunConfig& c, Trainer::State& s) {
  const auto model_kind = nn::model_registry().at(c.model.kind);
  const auto data_kind = data::dataset_registry().at(c.data.kind);
  TB_CHECK(model_kind->task == data_kind->task, "[trainer] model.kind '", c.model.kind, "' (",
           model_kind->task, ") does not fit data.kind '", c.data.kind, "' (", data_kind->task,
           ")");
  s.gen.manual_seed(c.run.seed);
  // A model larger than the memory ("hidden = [100000, 100000]": 40 GB; a context_length of 2e9)
  // is said with the section that sizes it, not as std::bad_alloc.
  const auto too_big = [&c](const std::string& what) {
    return ValueError("[model] model.kind = \"" + c.model.kind +
                      "\" with these sizes needs more memory than there is (" + what +
                      "): make the [model] smaller");
  };
  try {
    s.model = nn::build_model(c.model, &s.gen);
  } catch (const std::bad_alloc&) {
    throw too_big("std::bad_alloc");
  } catch (const Error& e) {
    if (std::string_view(e.what()).rfind("[allocator] out of memory", 0) != 0) throw;
    throw too_big(e.what());
  }
  // Pretrained weights replace the initialisation (the generator has drawn it all the same, so
  // the data order and dropout do not depend on whether weights are loaded).
  if (!c.run.init_from.empty()) {
    WeightsLoad loaded = load_weights(*s.model, c.run.init_from);
    // Said with the run: which file, read how, and what of it was left out.
    std::string note = "run.init_from: " + std::to_string(loaded.tensors) + " tensors from " +
                       c.run.init_from + " (" + loaded.layout + ")";
    if (!loaded.ignored.empty()) {
      note += "; not used: ";
      for (std::size_t i = 0; i < loaded.ignored.size() && i < 4; ++i)
        note += (i ? ", " : "") + loaded.ignored[i];
      if (loaded.ignored.size() > 4)
        note += " and " + std::to_string(loaded.ignored.size() - 4) + " more";
    }
    s.setup_notes.push_back(std::move(note));
    for (auto& w : loaded.warnings)
      s.setup_warnings.push_back("run.init_from: " + std::move(w));
  }
  // Data-parallel: every rank initialises from the same seed; rank 0's weights are broadcast
  // anyway, so the replicas start equal whatever the initialisation did.
  if (s.ddp) s.ddp->broadcast_model(*s.model);
  // Initialised on the CPU from the run's CPU generator (so every device starts from the same
  // weights), then moved; parameters keep their identity.
  if (!s.device.is_cpu()) s.model->to(s.device);
}

void setup_optimizers(const RunConfig& c, Trainer::State& s) {
  const OptimizerSection& os = c.optimizer;
  const std::string rest_kind = optim::optimizer_registry().at(os.main.kind)->rest_kind;
  if (!rest_kind.empty()) {
    const auto split = optim::split_params(*s.model, os.split, os.flattens_conv_filters());
    s.split_table = split.str();
    if (split.muon.empty())
      s.setup_warnings.push_back(
          "optimizer.kind = \"" + os.main.kind +
          "\" takes the 2-D hidden matrices, and this model has none (optimizer.split and "
          "the model's layers decide): " +
          rest_kind + " trains every parameter");
    if (!split.muon.empty()) {
      s.opts.push_back(make_run_optimizer(c, os.main, tensors_of(split.muon), s));
      s.opt_names.push_back(os.main.kind);
    }
    if (!split.adamw.empty()) {
      OptimizerSettings rest = os.adamw.value_or(OptimizerSettings(rest_kind));
      if (rest.kind != rest_kind) rest = OptimizerSettings(rest_kind);
      s.opts.push_back(make_run_optimizer(c, rest, tensors_of(split.adamw), s));
      s.opt_names.push_back(rest_kind);
    }
  } else {
    s.opts.push_back(make_run_optimizer(c, os.main, s.model->parameters(), s));
    s.opt_names.push_back(os.main.kind);
    s.split_table = nn::parameter_table(*s.model);
  }
  // Data-parallel Muon: each rank orthogonalises its share of the matrices.
  if (s.ddp && c.distributed.muon == "distributed")
    for (auto& o : s.opts)
      if (auto* m = dynamic_cast<optim::Muon*>(o.get())) s.ddp->partition_muon(*m);
  if (c.scheduler.config.is_null()) return;
  for (std::size_t i = 0; i < s.opts.size(); ++i) {
    try {
      s.scheds.push_back(sched::make_scheduler(*s.opts[i], scheduler_for(c, s.opt_names[i])));
    } catch (const Error& e) {
      // A per-group list of the wrong length (PyTorch's message names param_groups): say which
      // groups the run made, which the config does not show.
      const std::string what = e.what();
      if (what.find("param_groups") == std::string::npos) throw;
      const std::size_t n = s.opts[i]->param_groups().size();
      throw ValueError(
          "[scheduler] " + what + " A list gives one value per parameter group, in order; " +
          s.opt_names[i] + " has " + std::to_string(n) +
          (n == 1 ? " group (every parameter it trains)"
                  : " groups: the tensors of 2 or more dimensions with weight decay, then the "
                    "rest without (optimizer.weight_decay_params = \"matrices\")") +
          (s.opts.size() > 1 ? "; each optimizer of the split takes the same list" : "") + ".");
    }
  }
}

namespace {

std::int64_t int_field(const nlohmann::json& j, const char* key) {
  const auto it = j.find(key);
  return it != j.end() && it->is_number_integer() ? it->get<std::int64_t>() : 0;
}

// `sc` is stepped `stepped` times (its last_epoch reaches that) from the run's step `offset`;
// `where` is its key path. Messages name the run's steps.
void check_stepped(const nlohmann::json& sc, std::int64_t stepped, std::int64_t offset,
                   const std::string& where, const std::string& run_length,
                   std::vector<std::string>& warnings) {
  if (!sc.is_object() || stepped <= 0) return;
  const std::string kind = sc.value("kind", std::string());
  if (sc.contains("last_epoch") && int_field(sc, "last_epoch") >= 0) return;  // resumes mid-way
  if (kind == "one_cycle") {
    const bool by_total = sc.contains("total_steps") && !sc["total_steps"].is_null();
    const std::int64_t total = by_total
                                   ? int_field(sc, "total_steps")
                                   : int_field(sc, "epochs") * int_field(sc, "steps_per_epoch");
    TB_CHECK(total <= 0 || total >= stepped, "[scheduler] ", where,
             by_total ? ".total_steps = " : ".epochs x steps_per_epoch = ", total,
             " is shorter than the ", stepped, " steps it is stepped (", run_length,
             "): OneCycleLR would fail at step ", offset + total + 1, "; give it ", stepped,
             " steps");
  } else if (kind == "cosine") {
    const std::int64_t t_max = int_field(sc, "T_max");
    if (t_max > 0 && t_max < stepped)
      warnings.push_back(where + ".T_max = " + std::to_string(t_max) + " is shorter than the " +
                         std::to_string(stepped) + " steps it is stepped (" + run_length +
                         "): after step " + std::to_string(offset + t_max) +
                         " the LR climbs back towards the base LR (CosineAnnealingLR is "
                         "periodic); T_max = " +
                         std::to_string(stepped) + " anneals once");
  } else if (kind == "chained" && sc.contains("schedulers") && sc["schedulers"].is_array()) {
    for (std::size_t i = 0; i < sc["schedulers"].size(); ++i)
      check_stepped(sc["schedulers"][i], stepped, offset,
                    where + ".schedulers[" + std::to_string(i) + "]", run_length, warnings);
  } else if (kind == "sequential" && sc.contains("schedulers") && sc["schedulers"].is_array() &&
             sc.contains("milestones") && sc["milestones"].is_array()) {
    // SequentialLR: the first is stepped until the first milestone; each later one is reset to
    // 0 at its milestone and stepped until the next (the last until the end).
    const auto& children = sc["schedulers"];
    const auto& ms = sc["milestones"];
    for (std::size_t i = 0; i < children.size(); ++i) {
      const std::int64_t start =
          i == 0 ? 0 : (i - 1 < ms.size() ? ms[i - 1].get<std::int64_t>() : stepped);
      std::int64_t end = i < ms.size() ? ms[i].get<std::int64_t>() - 1 : stepped;
      end = std::min(end, stepped);
      check_stepped(children[i], end - start, offset + start,
                    where + ".schedulers[" + std::to_string(i) + "]", run_length, warnings);
    }
  }
}

}  // namespace

void check_schedule_length(const RunConfig& c, std::int64_t steps, Trainer::State& s) {
  const std::string run_length =
      c.run.steps > 0
          ? "run.steps = " + std::to_string(steps)
          : "run.epochs = " + std::to_string(c.run.epochs) + " x " +
                std::to_string(steps_per_epoch(c, s.loader->num_batches())) + " steps per epoch";
  for (auto& w : train::check_schedule_length(c, steps, run_length))
    s.setup_warnings.push_back(std::move(w));
  // An average that starts after the run's last step averages nothing.
  if (c.swa.kind != "none" && c.swa.start_step > steps)
    s.setup_warnings.push_back("swa.start_step = " + std::to_string(c.swa.start_step) +
                               " is after the run's last step (" + run_length + "): no " +
                               c.swa.kind + " average is taken and no eval_" + c.swa.kind +
                               " metrics are written");
  // A plateau steps after each evaluation but the last: with none before it, the LR never moves.
  const auto& sc = c.scheduler.config;
  if (sc.is_object() && sc.value("kind", std::string()) == "plateau") {
    const std::int64_t every =
        c.eval.interval > 0 ? c.eval.interval : steps_per_epoch(c, s.loader->num_batches());
    if (every >= steps)
      s.setup_warnings.push_back(
          "scheduler.kind = \"plateau\" steps on eval.loss after each evaluation, and the first "
          "is at step " +
          std::to_string(std::min(every, steps)) + " of " + std::to_string(steps) + " (" +
          (c.eval.interval > 0 ? "eval.interval" : "eval.interval = 0: once per epoch") +
          "): the LR never changes; evaluate more often");
  }
}

void setup_scaler_and_average(const RunConfig& c, Trainer::State& s) {
  // Mixed precision: autocast in the forward pass, loss scaling when asked.
  if (c.amp.grad_scaler && !c.amp.enabled)
    s.setup_warnings.push_back(
        "amp.grad_scaler = true does nothing with amp.enabled = false (nothing is computed in "
        "reduced precision, so no loss is scaled)");
  if (c.amp.grad_scaler) {
    amp::GradScalerOptions so;
    so.enabled = c.amp.enabled;
    s.scaler = std::make_unique<amp::GradScaler>(s.device.type(), so);
  }
  // SWA / EMA: an averaged copy of the weights, evaluated beside the model.
  if (c.swa.kind == "none") return;
  TB_CHECK(c.swa.kind == "swa" || c.swa.kind == "ema", "[trainer] swa.kind '", c.swa.kind,
           "' is not one of none, swa, ema");
  swa::MultiAvgFn fn = c.swa.kind == "ema" ? swa::get_ema_multi_avg_fn(c.swa.ema_decay)
                                           : swa::get_swa_multi_avg_fn();
  // With use_buffers the BatchNorm statistics are averaged like the weights (torchvision's EMA
  // does so); without, the live model's are copied at each update (PyTorch's default) and
  // Trainer::evaluate recomputes them for the averaged weights, as PyTorch's SWA recipe does
  // with update_bn: the live model's statistics do not fit the averaged weights.
  s.average = std::make_unique<swa::AveragedModel>(*s.model, std::nullopt, swa::AvgFn{},
                                                   std::move(fn), c.swa.use_buffers);
  // Its own generator: the copy's init is overwritten, and the run's stream stays untouched.
  s.average_model = nn::build_model(c.model, &s.average_gen);
  if (!s.device.is_cpu()) s.average_model->to(s.device);
}

}  // namespace tb::train::detail

namespace tb::train {

nlohmann::json scheduler_for(const RunConfig& c, const std::string& kind) {
  const OptimizerSection& os = c.optimizer;
  const std::string rest_kind = optim::optimizer_registry().at(os.main.kind)->rest_kind;
  if (c.scheduler.config.is_null() || rest_kind.empty() || kind != rest_kind)
    return c.scheduler.config;
  const double main_lr = os.main.number("lr");
  if (main_lr == 0.0) return c.scheduler.config;
  const OptimizerSettings rest =
      os.adamw && os.adamw->kind == rest_kind ? *os.adamw : OptimizerSettings(rest_kind);
  return sched::scale_lr_fields(c.scheduler.config, rest.number("lr") / main_lr);
}

std::vector<std::string> check_schedule_length(const RunConfig& config, std::int64_t steps,
                                               const std::string& run_length) {
  std::vector<std::string> warnings;
  detail::check_stepped(config.scheduler.config, steps, 0, "scheduler", run_length, warnings);
  return warnings;
}

void check_binding(const RunConfig& config) {
  Trainer::State scratch;
  detail::plan_binding(config, scratch);
}

}  // namespace tb::train
