#include "engine/train/trainer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <fstream>
#include <iomanip>
#include <limits>
#include <map>
#include <optional>
#include <sstream>

#include "engine/amp/autocast.h"
#include "engine/amp/grad_scaler.h"
#include "engine/autograd/autograd.h"
#include "engine/backends/cpu/thread_pool.h"
#include "engine/backends/cuda/cuda_status.h"
#include "engine/core/allocator.h"
#include "engine/core/error.h"
#include "engine/data/dataloader.h"
#include "engine/data/registry.h"
#include "engine/nn/model_registry.h"
#include "engine/numa/affinity.h"
#include "engine/numa/binding.h"
#include "engine/numa/memory.h"
#include "engine/numa/topology_hwloc.h"
#include "engine/ops/ops.h"
#include "engine/optim/param_split.h"
#include "engine/optim/registry.h"
#include "engine/rng/cpu_generator.h"
#include "engine/sched/lr_scheduler.h"
#include "engine/swa/swa_utils.h"
#include "engine/train/safetensors.h"

namespace tb::train {

using core::ScalarType;
using core::Tensor;
using Clock = std::chrono::steady_clock;

const char* outcome_name(RunOutcome o) {
  switch (o) {
    case RunOutcome::kFinished:
      return "finished";
    case RunOutcome::kFailed:
      return "failed";
    case RunOutcome::kDiverged:
      return "diverged";
    case RunOutcome::kCancelled:
      return "cancelled";
  }
  return "failed";
}

namespace {

double ms_since(Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

std::string hex(const std::vector<std::uint8_t>& bytes) {
  static const char* d = "0123456789abcdef";
  std::string s;
  s.reserve(bytes.size() * 2);
  for (auto b : bytes) {
    s.push_back(d[b >> 4]);
    s.push_back(d[b & 15]);
  }
  return s;
}

std::vector<std::uint8_t> unhex(const std::string& s) {
  TB_CHECK(s.size() % 2 == 0, "[checkpoint] malformed generator state");
  std::vector<std::uint8_t> out(s.size() / 2);
  auto val = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    throw ValueError("[checkpoint] malformed generator state");
  };
  for (std::size_t i = 0; i < out.size(); ++i)
    out[i] = static_cast<std::uint8_t>(val(s[2 * i]) * 16 + val(s[2 * i + 1]));
  return out;
}

// The owner key a checkpoint folder records ("" for one written without an owner, or before
// owners were recorded); nullopt when its state cannot be read.
std::optional<std::string> checkpoint_owner_key(const std::filesystem::path& dir) {
  std::ifstream in(dir / "state.json");
  if (!in) return std::nullopt;
  const nlohmann::json state = nlohmann::json::parse(in, nullptr, false);
  if (state.is_discarded() || !state.is_object()) return std::nullopt;
  if (!state.contains("owner") || !state.at("owner").is_object()) return std::string();
  const auto key = state.at("owner").find("key");
  if (key == state.at("owner").end() || !key->is_string()) return std::nullopt;
  return key->get<std::string>();
}

nlohmann::json hyper_to_json(const optim::HyperValue& v) {
  if (const auto* d = std::get_if<double>(&v)) return *d;
  if (const auto* b = std::get_if<bool>(&v)) return *b;
  if (const auto* s = std::get_if<std::string>(&v)) return *s;
  return {{"tensor", std::get<Tensor>(v).item()}};
}

optim::HyperValue hyper_from_json(const nlohmann::json& j, const optim::HyperValue& current) {
  if (j.is_boolean()) return j.get<bool>();
  if (j.is_string()) return j.get<std::string>();
  if (j.is_object()) {
    // A tensor LR: filled into the live tensor, never replaced (as in PyTorch PR 163098).
    if (const auto* t = std::get_if<Tensor>(&current)) {
      Tensor live = *t;
      live.fill_(j.at("tensor").get<double>());
      return live;
    }
    return j.at("tensor").get<double>();
  }
  return j.get<double>();
}

std::unique_ptr<optim::Optimizer> make_optimizer(const OptimizerSettings& s,
                                                 std::vector<Tensor> params) {
  // The kind's defaults under the given values: a settings object built in code may set only
  // some keys.
  const auto kind = optim::optimizer_registry().at(s.kind);
  nlohmann::json values = core::default_values(kind->fields);
  for (const auto& f : kind->fields)
    if (s.values.contains(f.key)) values[f.key] = s.values.at(f.key);
  return kind->make(std::move(params), values);
}

std::vector<Tensor> tensors_of(const nn::NamedTensors& named) {
  std::vector<Tensor> out;
  for (const auto& [n, t] : named)
    out.push_back(t);
  return out;
}

}  // namespace

// Everything a run owns. Declaration order = construction order (the generator outlives the
// model whose Dropout layers draw from it; optimizers and schedulers outlive nothing).
struct Trainer::State {
  rng::CpuGenerator gen;  // model init and dropout
  std::shared_ptr<data::Dataset> train_set;
  std::shared_ptr<data::Dataset> eval_set;
  std::unique_ptr<data::DataLoader> loader;
  std::shared_ptr<nn::Model> model;
  bool language_model = false;
  std::vector<std::string> opt_names;  // "adamw", "muon", ...
  std::vector<std::unique_ptr<optim::Optimizer>> opts;
  std::vector<std::shared_ptr<sched::LRScheduler>> scheds;
  std::string split_table;
  std::unique_ptr<amp::GradScaler> scaler;      // amp.grad_scaler
  std::unique_ptr<swa::AveragedModel> average;  // swa.kind != none
  std::shared_ptr<nn::Model> average_model;     // evaluates the average (same architecture)
  numa::SlotBinding binding;                    // binding.mode != none: the slot's CPUs, node
  std::vector<int> binding_nodes;               // NUMA nodes of the bound CPUs
  std::string binding_warning;                  // a failed binding that fell back to unbound
  bool placement_reported = false;              // the memory placement event was emitted
  core::Device device;                          // run.device
  std::int64_t step = 0;                        // optimizer steps done
  std::int64_t scaler_skipped = 0;              // steps the scaler skipped for inf/NaN gradients
  std::int64_t nonfinite_in_row = 0;
  std::int64_t skipped = 0;
  Metrics last_eval;
};

Trainer::Trainer(RunConfig config, std::filesystem::path checkpoint_dir)
    : config_(std::move(config)), checkpoint_dir_(std::move(checkpoint_dir)) {
  s_ = std::make_unique<State>();
  const RunSection& run = config_.run;
  if (config_.threads > 0) cpu::set_num_threads(static_cast<int>(config_.threads));
  // The device: parsed (the config check did that already) and usable here.
  s_->device = core::Device::parse(config_.run.device);
  {
    const std::string why = core::device_unavailable_reason(s_->device);
    TB_CHECK(why.empty(), "[trainer] run.device '", config_.run.device, "': ", why);
  }
  // CPU binding: planned here (errors before any step), applied by run() on the run thread.
  if (!config_.binding.cpus.empty()) {
    // An explicit CPU list (from a launcher that already planned the slots): bind to exactly it.
    const numa::Topology topo = numa::load_machine_topology();
    numa::CpuSet cpus;
    try {
      cpus = numa::CpuSet::parse(config_.binding.cpus);
    } catch (const ValueError& e) {
      throw ValueError(std::string("[trainer] binding.cpus '") + config_.binding.cpus +
                       "': " + e.what());
    }
    const numa::CpuSet outside = cpus - topo.allowed_cpus();
    TB_CHECK(!cpus.empty() && outside.empty(), "[trainer] binding.cpus '", config_.binding.cpus,
             "': ",
             cpus.empty()
                 ? std::string("empty")
                 : "CPUs " + outside.to_string() + " are not allowed for this process (allowed: " +
                       topo.allowed_cpus().to_string() + ")");
    s_->binding.bound = true;
    s_->binding.cpus = cpus;
    s_->binding.slot = static_cast<int>(config_.binding.slot);
    s_->binding.mode = numa::parse_binding_mode(config_.binding.mode);
    s_->binding_nodes = numa::nodes_of_cpus(topo, cpus);
    s_->binding.node = s_->binding_nodes.empty() ? -1 : s_->binding_nodes.front();
  } else if (config_.binding.mode != "none") {
    numa::BindingOptions bo;
    bo.mode = numa::parse_binding_mode(config_.binding.mode);
    bo.fallback = config_.binding.fallback;
    const numa::Topology topo = numa::load_machine_topology();
    try {
      s_->binding = numa::bind_slot(topo, bo, numa::SlotKind::kCpuWorker,
                                    static_cast<int>(config_.binding.slot),
                                    static_cast<int>(config_.binding.slots));
    } catch (const ValueError& e) {
      throw ValueError(std::string("[trainer] binding.mode '") + config_.binding.mode + "' (slot " +
                       std::to_string(config_.binding.slot) + " of " +
                       std::to_string(config_.binding.slots) + "): " + e.what() +
                       " (set binding.fallback = true to run unbound instead)");
    }
    if (s_->binding.bound)
      s_->binding_nodes = numa::nodes_of_cpus(topo, s_->binding.cpus);
    else
      s_->binding_warning = s_->binding.warning;
  }
  // Data.
  const DataSection& d = config_.data;
  const auto data_kind = data::dataset_registry().at(d.kind);
  {
    data::DataSplits splits = data_kind->make(data_settings(d), run.seed);
    s_->train_set = std::move(splits.train);
    s_->eval_set = std::move(splits.eval);
  }
  s_->language_model = data_kind->task == core::kTaskLanguageModel;
  data::DataLoaderOptions lo;
  lo.batch_size = d.batch_size;
  lo.shuffle = d.shuffle;
  lo.drop_last = d.drop_last;
  lo.num_workers = static_cast<int>(d.workers);
  lo.seed = run.seed + 1;  // the data order has its own stream, derived from the run's seed
  s_->loader = std::make_unique<data::DataLoader>(s_->train_set, lo);
  // Model.
  s_->gen.manual_seed(run.seed);
  s_->model = nn::build_model(config_.model, &s_->gen);
  // Initialised on the CPU from the run's CPU generator (so every device starts from the same
  // weights), then moved; parameters keep their identity.
  if (!s_->device.is_cpu()) s_->model->to(s_->device);
  const auto model_kind = nn::model_registry().at(config_.model.kind);
  TB_CHECK(model_kind->task == data_kind->task, "[trainer] model.kind '", config_.model.kind, "' (",
           model_kind->task, ") does not fit data.kind '", d.kind, "' (", data_kind->task, ")");
  // Optimizers: one, or Muon for the 2-D hidden matrices + AdamW for the rest.
  const OptimizerSection& os = config_.optimizer;
  const std::string rest_kind = optim::optimizer_registry().at(os.main.kind)->rest_kind;
  if (!rest_kind.empty()) {
    const auto split = optim::split_params(*s_->model, os.split);
    s_->split_table = split.str();
    if (!split.muon.empty()) {
      s_->opts.push_back(make_optimizer(os.main, tensors_of(split.muon)));
      s_->opt_names.push_back(os.main.kind);
    }
    if (!split.adamw.empty()) {
      OptimizerSettings rest = os.adamw.value_or(OptimizerSettings(rest_kind));
      if (rest.kind != rest_kind) rest = OptimizerSettings(rest_kind);
      s_->opts.push_back(make_optimizer(rest, tensors_of(split.adamw)));
      s_->opt_names.push_back(rest_kind);
    }
  } else {
    s_->opts.push_back(make_optimizer(os.main, s_->model->parameters()));
    s_->opt_names.push_back(os.main.kind);
    s_->split_table = nn::parameter_table(*s_->model);
  }
  for (auto& o : s_->opts) {
    if (!config_.scheduler.config.is_null())
      s_->scheds.push_back(sched::make_scheduler(*o, config_.scheduler.config));
  }
  // Mixed precision: autocast in the forward pass (loop()), loss scaling when asked.
  if (config_.amp.grad_scaler) {
    amp::GradScalerOptions so;
    so.enabled = config_.amp.enabled;
    s_->scaler = std::make_unique<amp::GradScaler>(s_->device.type(), so);
  }
  // SWA / EMA: an averaged copy of the weights, evaluated beside the model.
  if (config_.swa.kind != "none") {
    TB_CHECK(config_.swa.kind == "swa" || config_.swa.kind == "ema", "[trainer] swa.kind '",
             config_.swa.kind, "' is not one of none, swa, ema");
    swa::MultiAvgFn fn = config_.swa.kind == "ema"
                             ? swa::get_ema_multi_avg_fn(config_.swa.ema_decay)
                             : swa::get_swa_multi_avg_fn();
    s_->average = std::make_unique<swa::AveragedModel>(*s_->model, std::nullopt, swa::AvgFn{},
                                                       std::move(fn), /*use_buffers=*/false);
    rng::CpuGenerator scratch;  // the copy's init is overwritten; the run's stream is untouched
    s_->average_model = nn::build_model(config_.model, &scratch);
    if (!s_->device.is_cpu()) s_->average_model->to(s_->device);
  }
  const std::int64_t per_epoch = s_->loader->num_batches();
  total_steps_ = run.steps > 0 ? run.steps : run.epochs * per_epoch;
  TB_CHECK(total_steps_ > 0, "[trainer] the run has no steps (run.steps = ", run.steps,
           ", run.epochs = ", run.epochs, ", ", per_epoch, " batches per epoch)");
}

Trainer::~Trainer() {
  cancel();
  resume();
  if (thread_.joinable()) thread_.join();
}

void Trainer::set_checkpoint_owner(std::string key, std::string description) {
  owner_key_ = std::move(key);
  owner_description_ = std::move(description);
}

std::int64_t Trainer::steps_done() const {
  return s_->step;
}

void Trainer::add_sink(std::shared_ptr<MetricSink> sink) {
  sinks_.push_back(std::move(sink));
}

std::string Trainer::describe() const {
  return s_->split_table;
}

void Trainer::report_placement() {
  // Where the pages of the parameters and the optimizer state landed, per NUMA node.
  if (!numa::numa_supported()) return;
  std::map<int, std::size_t> pages;
  std::size_t total = 0, absent = 0;
  auto add = [&](const Tensor& t) {
    if (!t.defined() || t.numel() == 0 || t.device().type() != core::DeviceType::CPU) return;
    try {
      const numa::PagePlacement p = numa::page_placement(t.data_ptr(), t.nbytes());
      total += p.pages;
      absent += p.not_present + p.unknown;
      for (const auto& n : p.nodes)
        pages[n.node] += n.pages;
    } catch (const ValueError&) {  // a failed query leaves the tensor out of the report
    }
  };
  for (const auto& p : s_->model->parameters())
    add(p);
  for (const auto& o : s_->opts)
    for (const auto& [id, st] : o->state_dict().state)
      for (const auto& [k, t] : st)
        add(t);
  if (total == 0) return;
  std::ostringstream os;
  os << "memory placement after step 1 (parameters and optimizer state, " << total << " pages):";
  for (const auto& [node, n] : pages)
    os << " node " << node << " " << std::fixed << std::setprecision(1)
       << 100.0 * static_cast<double>(n) / static_cast<double>(total) << "%";
  if (absent > 0) os << ", not resident " << absent;
  emit_event("info", os.str());
}

void Trainer::emit_event(const std::string& level, const std::string& text) {
  for (auto& s : sinks_)
    s->on_event(level, text);
}

void Trainer::cancel() {
  {
    std::lock_guard<std::mutex> lock(pause_mutex_);  // a paused loop must see it
    cancel_ = true;
  }
  pause_cv_.notify_all();
}

void Trainer::pause() {
  std::lock_guard<std::mutex> lock(pause_mutex_);
  paused_ = true;
}

void Trainer::resume() {
  {
    std::lock_guard<std::mutex> lock(pause_mutex_);
    paused_ = false;
  }
  pause_cv_.notify_all();
}

void Trainer::start() {
  TB_CHECK(!thread_.joinable(), "[trainer] the run was already started");
  thread_ = std::thread([this] { thread_result_ = run(); });
}

TrainResult Trainer::wait() {
  if (thread_.joinable()) thread_.join();
  return thread_result_;
}

Metrics Trainer::evaluate() {
  Metrics m = evaluate_model(*s_->model, "eval.");
  if (s_->average && s_->average->n_averaged().item() > 0) {
    s_->average->copy_to(*s_->average_model);
    const Metrics avg = evaluate_model(*s_->average_model, "eval_" + config_.swa.kind + ".");
    m.insert(m.end(), avg.begin(), avg.end());
  }
  return m;
}

Metrics Trainer::evaluate_model(nn::Model& model, const std::string& prefix) {
  autograd::NoGradGuard no_grad;
  model.eval();
  data::DataLoaderOptions lo;
  lo.batch_size = config_.data.batch_size;
  lo.seed = config_.run.seed + 2;
  data::DataLoader loader(s_->eval_set, lo);
  const std::int64_t limit =
      config_.eval.batches > 0 ? config_.eval.batches : std::numeric_limits<std::int64_t>::max();
  double loss_sum = 0.0;
  std::int64_t items = 0;
  std::int64_t correct = 0;
  std::int64_t batches = 0;
  while (batches < limit) {
    auto b = loader.next();
    if (!b) break;
    const Tensor input = b->input.to(s_->device);
    const Tensor target = b->target.to(s_->device);
    const Tensor logits = model.forward(input);
    const double loss = model.loss(logits, target).item();
    const std::int64_t n = b->target.numel();
    loss_sum += loss * static_cast<double>(n);
    items += n;
    if (!s_->language_model) {
      const auto pred = ops::argmax(logits, 1).to_vector<std::int64_t>();
      const auto tgt = b->target.to_vector<std::int64_t>();
      for (std::size_t i = 0; i < pred.size(); ++i)
        correct += pred[i] == tgt[i] ? 1 : 0;
    }
    ++batches;
  }
  model.train();
  Metrics m;
  if (items == 0) return m;
  const double mean = loss_sum / static_cast<double>(items);
  m.emplace_back(prefix + "loss", mean);
  if (s_->language_model) {
    m.emplace_back(prefix + "perplexity", std::exp(mean));
  } else {
    m.emplace_back(prefix + "accuracy", static_cast<double>(correct) / static_cast<double>(items));
  }
  return m;
}

namespace {

// Applies a slot binding to the calling (run) thread, the kernel pool and the loader threads for
// its lifetime, and undoes it in reverse order (also when the run throws).
class AppliedBinding {
 public:
  AppliedBinding(const numa::SlotBinding& b, const std::vector<int>& nodes,
                 data::DataLoader& loader, std::vector<std::string>& notes)
      : loader_(loader) {
    const std::vector<int>& cpus = b.cpus.cpus();
    affinity_.emplace(b.cpus);
    threads_.emplace(static_cast<int>(cpus.size()));  // no oversubscription
    previous_pin_ = cpu::pin_workers(cpus);
    pinned_ = true;
    loader_.pin_workers(cpus);
    std::string memory = "memory: default policy";
    if (numa::numa_supported() && !nodes.empty()) {
      try {
        memory_.emplace(nodes, numa::MemoryPolicy::kPreferred);
        std::string list;
        for (int n : nodes)
          list += (list.empty() ? "" : ",") + std::to_string(n);
        memory = "memory preferred on node " + list;
      } catch (const ValueError& e) {
        notes.push_back(std::string("warning: binding: ") + e.what() + "; memory policy unchanged");
      }
    }
    notes.push_back("info: bound to CPUs " + b.cpus.to_string() + " (slot " +
                    std::to_string(b.slot) + ", node " + std::to_string(b.node) + ", mode " +
                    std::string(numa::binding_mode_name(b.mode)) + "); kernel pool " +
                    std::to_string(cpus.size()) + " threads; " + memory);
  }
  ~AppliedBinding() {
    memory_.reset();
    threads_.reset();
    try {
      if (pinned_) cpu::pin_workers(previous_pin_);
    } catch (...) {  // restoring cannot be reported from a destructor
    }
    affinity_.reset();  // the run thread's own mask first: unpinning the loader reads it
    try {
      loader_.pin_workers({});
    } catch (...) {
    }
  }
  AppliedBinding(const AppliedBinding&) = delete;
  AppliedBinding& operator=(const AppliedBinding&) = delete;

 private:
  data::DataLoader& loader_;
  std::optional<numa::ScopedAffinity> affinity_;
  std::optional<cpu::ScopedNumThreads> threads_;
  std::optional<numa::ScopedMemoryPolicy> memory_;
  std::vector<int> previous_pin_;
  bool pinned_ = false;
};

}  // namespace

TrainResult Trainer::run() {
  TrainResult r;
  std::optional<AppliedBinding> binding;
  // amp.tf32 for this run's float32 CUDA products, on this thread only (runs side by side keep
  // their own); the process-wide setting again afterwards.
  struct Tf32Scope {
    explicit Tf32Scope(bool on) { backends::set_thread_cuda_allow_tf32(on); }
    ~Tf32Scope() { backends::set_thread_cuda_allow_tf32(std::nullopt); }
    Tf32Scope(const Tf32Scope&) = delete;
    Tf32Scope& operator=(const Tf32Scope&) = delete;
  } tf32(config_.amp.tf32);
  try {
    if (!s_->binding_warning.empty())
      emit_event("warning",
                 "binding failed, running unbound (binding.fallback): " + s_->binding_warning);
    if (s_->binding.bound) {
      std::vector<std::string> notes;
      binding.emplace(s_->binding, s_->binding_nodes, *s_->loader, notes);
      for (const auto& n : notes) {
        const auto colon = n.find(": ");
        emit_event(n.substr(0, colon), n.substr(colon + 2));
      }
    }
    r = loop();
  } catch (const std::exception& e) {
    r.outcome = RunOutcome::kFailed;
    r.message = e.what();
    r.steps = s_->step;
    try {
      emit_event("error", r.message);
    } catch (...) {  // a failing sink must not hide the original error
    }
  }
  return r;
}

TrainResult Trainer::loop() {
  TrainResult r;
  State& s = *s_;
  s.model->train();
  const bool lm = s.language_model;
  const std::int64_t eval_every =
      config_.eval.interval > 0 ? config_.eval.interval : s.loader->num_batches();
  auto all_params = s.model->parameters();
  const ScalarType amp_dtype =
      config_.amp.dtype == "fp16" ? ScalarType::Float16 : ScalarType::BFloat16;
  // On a device with its own clock (CUDA, openreg) the forward/backward/optimizer times come
  // from events queued between the phases, read once per step; elsewhere from the host clock.
  const std::unique_ptr<core::DeviceTimer> timer = core::make_device_timer(s.device);
  while (s.step < total_steps_) {
    {
      std::unique_lock<std::mutex> lock(pause_mutex_);
      pause_cv_.wait(lock, [&] { return !paused_ || cancel_.load(); });
    }
    if (cancel_) {
      r.outcome = RunOutcome::kCancelled;
      r.message = "cancelled at step " + std::to_string(s.step);
      break;
    }
    const auto t0 = Clock::now();
    auto batch = s.loader->next();
    if (!batch) batch = s.loader->next();  // epoch boundary
    TB_CHECK(batch.has_value(), "[trainer] the data loader produced no batch");
    const double data_ms = ms_since(t0);
    const auto t1 = Clock::now();
    if (timer) timer->mark();
    Tensor loss;
    {
      std::optional<amp::AutocastGuard> autocast;
      if (config_.amp.enabled) autocast.emplace(s.device.type(), amp_dtype);
      const Tensor input = batch->input.to(s.device);
      const Tensor target = batch->target.to(s.device);
      const Tensor logits = s.model->forward(input);
      loss = s.model->loss(logits, target);
    }
    if (timer) timer->mark();
    const double loss_value = loss.item();
    double fwd_ms = ms_since(t1);
    if (!std::isfinite(loss_value)) {
      ++s.nonfinite_in_row;
      ++s.skipped;
      emit_event("warning", "step " + std::to_string(s.step + 1) + ": non-finite loss (" +
                                std::to_string(loss_value) + "), step skipped");
      if (timer) (void)timer->elapsed_ms();  // forget this step's marks
      if (s.nonfinite_in_row >= config_.run.max_nonfinite) {
        r.outcome = RunOutcome::kDiverged;
        r.message = "diverged: " + std::to_string(s.nonfinite_in_row) +
                    " non-finite losses in a row (run.max_nonfinite) at step " +
                    std::to_string(s.step + 1);
        break;
      }
      continue;
    }
    s.nonfinite_in_row = 0;
    const auto t2 = Clock::now();
    autograd::backward(s.scaler ? s.scaler->scale(loss) : loss);
    if (timer) timer->mark();
    double bwd_ms = ms_since(t2);
    const auto t3 = Clock::now();
    double sq = 0.0;
    {
      autograd::NoGradGuard no_grad;
      if (s.scaler) {  // true gradients for the norm and the clip
        for (auto& o : s.opts)
          s.scaler->unscale_(*o);
      }
      // The squared norm accumulates on the device (in float64, parameter order) and is read
      // once: one synchronisation per step, not one per parameter.
      Tensor sq_sum;
      for (const auto& p : all_params) {
        const Tensor g = autograd::grad(p);
        if (!g.defined()) continue;
        const Tensor part = ops::sum(ops::square(g.to(ScalarType::Float64)));
        sq_sum = sq_sum.defined() ? ops::add(sq_sum, part) : part;
      }
      if (sq_sum.defined()) sq = sq_sum.item();
      const double norm = std::sqrt(sq);
      if (config_.run.grad_clip > 0 && norm > config_.run.grad_clip) {
        const double scale = config_.run.grad_clip / (norm + 1e-6);
        for (const auto& p : all_params) {
          Tensor g = autograd::grad(p);
          if (g.defined()) ops::mul_(g, scale);
        }
      }
    }
    Metrics m;
    m.emplace_back("loss", loss_value);
    for (std::size_t i = 0; i < s.opts.size(); ++i) {
      const auto& groups = s.opts[i]->param_groups();
      for (std::size_t g = 0; g < groups.size(); ++g)
        m.emplace_back("lr." + s.opt_names[i] + "." + std::to_string(g), groups[g].number("lr"));
    }
    double loss_scale = 1.0;
    if (s.scaler) {
      loss_scale = s.scaler->get_scale();
      bool stepped = true;
      for (auto& o : s.opts)
        stepped = s.scaler->step(*o) && stepped;
      s.scaler->update();
      if (!stepped) {
        ++s.scaler_skipped;
        emit_event("warning", "step " + std::to_string(s.step + 1) +
                                  ": inf/NaN gradients at loss scale " +
                                  std::to_string(loss_scale) + ", optimizer step skipped");
      }
    } else {
      for (auto& o : s.opts)
        o->step();
    }
    Metrics opt_metrics;  // the optimizers' own (Muon's Newton-Schulz time), summed by name
    for (auto& o : s.opts) {
      Metrics part;
      o->append_step_metrics(part);
      for (const auto& [k, v] : part) {
        auto it = std::find_if(opt_metrics.begin(), opt_metrics.end(),
                               [&](const auto& e) { return e.first == k; });
        if (it == opt_metrics.end()) {
          opt_metrics.emplace_back(k, v);
        } else {
          it->second += v;
        }
      }
    }
    for (auto& o : s.opts)
      o->zero_grad();
    for (auto& sc : s.scheds)
      sc->step();
    double opt_ms = ms_since(t3);
    if (timer) {
      timer->mark();
      const std::vector<double> d = timer->elapsed_ms();  // forward, backward, optimizer
      if (d.size() == 3) {
        fwd_ms = d[0];
        bwd_ms = d[1];
        opt_ms = d[2];
      }
    }
    ++s.step;
    if (s.binding.bound && !s.placement_reported) {
      s.placement_reported = true;
      report_placement();
    }
    if (s.average && s.step >= config_.swa.start_step &&
        (s.step - config_.swa.start_step) % config_.swa.every == 0)
      s.average->update_parameters(*s.model);
    const double step_ms = ms_since(t0);
    const auto samples = static_cast<double>(batch->input.size(0));
    m.emplace_back("grad_norm", std::sqrt(sq));
    m.emplace_back("time.data_ms", data_ms);
    m.emplace_back("time.forward_ms", fwd_ms);
    m.emplace_back("time.backward_ms", bwd_ms);
    m.emplace_back("time.optimizer_ms", opt_ms);
    for (const auto& [k, v] : opt_metrics)
      if (v > 0.0) m.emplace_back(k, v);
    m.emplace_back("time.step_ms", step_ms);
    m.emplace_back("samples_per_s", samples / (step_ms / 1000.0));
    if (lm) {
      m.emplace_back("tokens_per_s",
                     static_cast<double>(batch->input.numel()) / (step_ms / 1000.0));
    }
    if (s.scaler) m.emplace_back("loss_scale", loss_scale);
    if (s.skipped > 0) m.emplace_back("skipped_steps", static_cast<double>(s.skipped));
    if (s.scaler_skipped > 0)
      m.emplace_back("scaler_skipped_steps", static_cast<double>(s.scaler_skipped));
    const bool eval_now = s.step % eval_every == 0 || s.step == total_steps_;
    if (eval_now) {
      const auto te = Clock::now();
      s.last_eval = evaluate();
      m.insert(m.end(), s.last_eval.begin(), s.last_eval.end());
      m.emplace_back("time.eval_ms", ms_since(te));
    }
    r.last_loss = loss_value;
    if (s.step % config_.run.log_interval == 0 || eval_now) {
      for (auto& sink : sinks_)
        sink->on_metrics(s.step, m);
    }
    const bool ckpt_now =
        !checkpoint_dir_.empty() &&
        ((config_.checkpoint.interval > 0 && s.step % config_.checkpoint.interval == 0) ||
         s.step == total_steps_);
    if (ckpt_now) {
      std::ostringstream name;
      name << "step-" << std::setw(8) << std::setfill('0') << s.step;
      const auto dir = save_checkpoint(checkpoint_dir_ / name.str());
      r.last_checkpoint = dir.string();
      for (auto& sink : sinks_)
        sink->on_checkpoint(s.step, dir.string());
      // Keep the newest `keep` checkpoints of this owner; a folder another run wrote (or one
      // whose state cannot be read) is never deleted.
      if (config_.checkpoint.keep > 0) {
        std::vector<std::filesystem::path> dirs;
        for (const auto& e : std::filesystem::directory_iterator(checkpoint_dir_))
          if (e.is_directory() && e.path().filename().string().rfind("step-", 0) == 0 &&
              checkpoint_owner_key(e.path()) == std::optional<std::string>(owner_key_))
            dirs.push_back(e.path());
        std::sort(dirs.begin(), dirs.end());
        while (static_cast<std::int64_t>(dirs.size()) > config_.checkpoint.keep) {
          std::filesystem::remove_all(dirs.front());
          dirs.erase(dirs.begin());
        }
      }
    }
  }
  r.steps = s.step;
  r.last_eval = s.last_eval;
  if (r.outcome == RunOutcome::kFinished) {
    std::ostringstream os;
    os << "finished " << s.step << " steps, last loss " << r.last_loss;
    for (const auto& [k, v] : s.last_eval)
      os << ", " << k << " " << v;
    r.message = os.str();
  }
  emit_event(r.outcome == RunOutcome::kFinished ? "info" : "warning", r.message);
  return r;
}

// ---- checkpoints --------------------------------------------------------------------------------
// <dir>/model.safetensors   the model's state_dict
// <dir>/optimizer.safetensors  optimizer state tensors, named "<optimizer index>.<id>.<key>"
// <dir>/state.json          step, counters, optimizer hyper-parameters, scheduler state_dicts,
//                           loader position, the model generator's state, the config (TOML)

std::filesystem::path Trainer::save_checkpoint(const std::filesystem::path& final_dir) {
  State& s = *s_;
  // Written into a hidden sibling folder, synced, then renamed into place: a save killed midway
  // leaves only the hidden folder (cleared by the next save), never a half checkpoint under the
  // real name, and never touches the previous checkpoint.
  const std::filesystem::path parent =
      final_dir.has_parent_path() ? final_dir.parent_path() : std::filesystem::path(".");
  const std::string leaf = final_dir.filename().string();
  const std::filesystem::path dir = parent / ("." + leaf + ".partial");
  std::filesystem::create_directories(parent);
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  save_safetensors(dir / "model.safetensors", s.model->state_dict(),
                   {{"format", "pt"}, {"step", std::to_string(s.step)}});
  TensorList opt_tensors;
  nlohmann::json state;
  state["version"] = 1;
  state["step"] = s.step;
  state["skipped"] = s.skipped;
  state["nonfinite_in_row"] = s.nonfinite_in_row;
  state["config"] = to_toml(config_);
  state["owner"] = {{"key", owner_key_}, {"description", owner_description_}};
  nlohmann::json opts = nlohmann::json::array();
  for (std::size_t i = 0; i < s.opts.size(); ++i) {
    const auto sd = s.opts[i]->state_dict();
    nlohmann::json o;
    o["name"] = s.opt_names[i];
    o["param_groups"] = nlohmann::json::array();
    for (const auto& g : sd.param_groups) {
      nlohmann::json gj;
      for (const auto& [k, v] : g.options)
        gj["options"][k] = hyper_to_json(v);
      gj["params"] = g.params;
      o["param_groups"].push_back(gj);
    }
    o["state_ids"] = nlohmann::json::array();
    for (const auto& [id, st] : sd.state) {
      nlohmann::json keys = nlohmann::json::array();
      for (const auto& [k, t] : st) {
        opt_tensors.emplace_back(std::to_string(i) + "." + std::to_string(id) + "." + k, t);
        keys.push_back(k);
      }
      o["state_ids"].push_back({{"id", id}, {"keys", keys}});
    }
    o["scheduler"] = i < s.scheds.size() ? s.scheds[i]->state_dict() : nlohmann::json();
    opts.push_back(o);
  }
  state["optimizers"] = opts;
  save_safetensors(dir / "optimizer.safetensors", opt_tensors);
  state["scaler_skipped"] = s.scaler_skipped;
  if (s.scaler) {
    if (const auto ss = s.scaler->state_dict()) {
      state["scaler"] = {{"scale", ss->scale},
                         {"growth_factor", ss->growth_factor},
                         {"backoff_factor", ss->backoff_factor},
                         {"growth_interval", ss->growth_interval},
                         {"growth_tracker", ss->growth_tracker}};
    }
  }
  if (s.average) {
    nn::NamedTensors avg = s.average->state_dict();
    save_safetensors(dir / "average.safetensors", TensorList(avg.begin(), avg.end()),
                     {{"kind", config_.swa.kind}});
  }
  state["loader"] = s.loader->state();
  state["generator"] = hex(s.gen.get_state());
  {
    std::ofstream out(dir / "state.json");
    out << state.dump(1);
    out.flush();
    TB_CHECK(out.good(), "[checkpoint] writing ", (dir / "state.json").string(),
             " failed (disk full?)");
  }
  sync_to_disk(dir / "state.json");
  sync_to_disk(dir);
  if (std::filesystem::exists(final_dir)) {
    // Re-saving a step (after a resume): the old folder steps aside until the new one is in.
    const std::filesystem::path old = parent / ("." + leaf + ".old");
    std::filesystem::remove_all(old);
    std::filesystem::rename(final_dir, old);
    std::filesystem::rename(dir, final_dir);
    std::filesystem::remove_all(old);
  } else {
    std::filesystem::rename(dir, final_dir);
  }
  sync_to_disk(parent);
  return final_dir;
}

void Trainer::resume_from(const std::filesystem::path& dir) {
  State& s = *s_;
  std::ifstream in(dir / "state.json");
  TB_CHECK(in.good(), "[checkpoint] ", (dir / "state.json").string(), ": cannot open");
  nlohmann::json state = nlohmann::json::parse(in, nullptr, false);
  TB_CHECK(!state.is_discarded() && state.is_object() && state.contains("version") &&
               state.at("version") == 1 && state.contains("config") &&
               state.at("config").is_string(),
           "[checkpoint] ", (dir / "state.json").string(), ": not a TrainBench checkpoint state");
  if (state.contains("owner") && state.at("owner").is_object()) {
    const std::string key = state.at("owner").value("key", std::string());
    TB_CHECK(key.empty() || owner_key_.empty() || key == owner_key_, "[checkpoint] ", dir.string(),
             " belongs to ", state.at("owner").value("description", key), ", not to ",
             owner_description_.empty() ? owner_key_ : owner_description_,
             "; resume that run from its own store");
  }
  TB_CHECK(state.at("config") == to_toml(config_), "[checkpoint] ", dir.string(),
           " was written by a run with another config; resume with that config");
  const auto model_file = load_safetensors(dir / "model.safetensors");
  s.model->load_state_dict(nn::NamedTensors(model_file.tensors.begin(), model_file.tensors.end()));
  const auto opt_file = load_safetensors(dir / "optimizer.safetensors");
  std::map<std::string, Tensor> opt_tensors(opt_file.tensors.begin(), opt_file.tensors.end());
  const auto& opts = state.at("optimizers");
  TB_CHECK(opts.size() == s.opts.size(), "[checkpoint] ", dir.string(), ": ", opts.size(),
           " optimizers saved, this run has ", s.opts.size());
  for (std::size_t i = 0; i < s.opts.size(); ++i) {
    optim::OptimizerStateDict sd;
    const auto current = s.opts[i]->state_dict();
    std::size_t gi = 0;
    for (const auto& gj : opts[i].at("param_groups")) {
      optim::OptimizerStateDict::Group g;
      for (auto it = gj.at("options").begin(); it != gj.at("options").end(); ++it) {
        const auto& cur = current.param_groups.at(gi).options;
        auto c = cur.find(it.key());
        g.options[it.key()] =
            hyper_from_json(it.value(), c == cur.end() ? optim::HyperValue(0.0) : c->second);
      }
      g.params = gj.at("params").get<std::vector<std::int64_t>>();
      sd.param_groups.push_back(std::move(g));
      ++gi;
    }
    for (const auto& e : opts[i].at("state_ids")) {
      const auto id = e.at("id").get<std::int64_t>();
      for (const auto& k : e.at("keys")) {
        const std::string name =
            std::to_string(i) + "." + std::to_string(id) + "." + k.get<std::string>();
        auto it = opt_tensors.find(name);
        TB_CHECK(it != opt_tensors.end(), "[checkpoint] ", dir.string(),
                 ": optimizer.safetensors lacks ", name);
        sd.state[id][k.get<std::string>()] = it->second;
      }
    }
    s.opts[i]->load_state_dict(sd);
    if (i < s.scheds.size()) s.scheds[i]->load_state_dict(opts[i].at("scheduler"));
  }
  if (s.scaler && state.contains("scaler")) {
    const auto& sj = state.at("scaler");
    amp::GradScalerState ss;
    ss.scale = sj.at("scale").get<double>();
    ss.growth_factor = sj.at("growth_factor").get<double>();
    ss.backoff_factor = sj.at("backoff_factor").get<double>();
    ss.growth_interval = sj.at("growth_interval").get<std::int64_t>();
    ss.growth_tracker = sj.at("growth_tracker").get<std::int64_t>();
    s.scaler->load_state_dict(ss);
  }
  if (s.average) {
    const auto avg_file = load_safetensors(dir / "average.safetensors");
    s.average->load_state_dict(nn::NamedTensors(avg_file.tensors.begin(), avg_file.tensors.end()));
  }
  s.scaler_skipped =
      state.contains("scaler_skipped") ? state.at("scaler_skipped").get<std::int64_t>() : 0;
  s.loader->load_state(state.at("loader").get<data::DataLoaderState>());
  s.gen.set_state(unhex(state.at("generator").get<std::string>()));
  s.step = state.at("step").get<std::int64_t>();
  s.skipped = state.at("skipped").get<std::int64_t>();
  s.nonfinite_in_row = state.at("nonfinite_in_row").get<std::int64_t>();
  emit_event("info", "resumed from " + dir.string() + " at step " + std::to_string(s.step));
}

}  // namespace tb::train
