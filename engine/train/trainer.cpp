// The Trainer: a run built from its config (trainer_setup.cpp), run on the calling thread or
// its own (its step loop is in train_loop.cpp), evaluation, cancel/pause, events.
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

#include "engine/autograd/autograd.h"
#include "engine/core/allocator.h"
#include "engine/core/error.h"
#include "engine/core/math_mode.h"
#include "engine/core/metric_names.h"
#include "engine/core/thread_pool.h"
#include "engine/dist/process_group.h"
#include "engine/numa/memory.h"
#include "engine/ops/ops.h"
#include "engine/optim/muon.h"
#include "engine/train/applied_binding.h"
#include "engine/train/sample.h"
#include "engine/train/trainer_state.h"

namespace tb::train {

using core::ScalarType;
using core::Tensor;

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

Trainer::Trainer(RunConfig config, std::filesystem::path checkpoint_dir,
                 std::shared_ptr<dist::ProcessGroup> group)
    : config_(std::move(config)), checkpoint_dir_(std::move(checkpoint_dir)) {
  s_ = std::make_unique<State>();
  if (config_.distributed.backend != "none") {
    s_->ddp = std::make_unique<detail::DataParallel>(std::move(group), config_);
  } else {
    TB_CHECK(group == nullptr, "[trainer] a process group was given but distributed.backend is ",
             "none");
  }
  if (config_.threads > 0) s_->threads.emplace(static_cast<int>(config_.threads));
  s_->device = detail::setup_device(config_);
  // NCCL: each rank trains on its own GPU (cuda:LOCAL_RANK mod the host's GPUs).
  if (s_->ddp && !s_->ddp->group().device().is_cpu()) s_->device = s_->ddp->group().device();
  detail::plan_binding(config_, *s_);
  detail::setup_data(config_, *s_);
  detail::setup_model(config_, *s_);
  detail::setup_optimizers(config_, *s_);
  detail::setup_scaler_and_average(config_, *s_);
  const RunSection& run = config_.run;
  const std::int64_t per_epoch = steps_per_epoch(config_, s_->loader->num_batches());
  total_steps_ = run.steps > 0 ? run.steps : run.epochs * per_epoch;
  TB_CHECK(total_steps_ > 0, "[trainer] the run has no steps (run.steps = ", run.steps,
           ", run.epochs = ", run.epochs, ", ", per_epoch, " steps per epoch)");
  detail::check_schedule_length(config_, total_steps_, *s_);
  // The checkpoint folder is made once the run is set up, so that one that cannot be made fails the
  // run before its first step rather than after all of them.
  if (!checkpoint_dir_.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(checkpoint_dir_, ec);
    TB_CHECK(!ec, "[checkpoint] cannot create the checkpoint folder ", checkpoint_dir_.string(),
             " (checkpoint.dir",
             config_.checkpoint.dir.empty() ? " unset: beside the run store" : "",
             "): ", ec.message());
  }
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

int Trainer::rank() const {
  return s_->ddp ? s_->ddp->rank() : 0;
}

int Trainer::world_size() const {
  return s_->ddp ? s_->ddp->world() : 1;
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

void Trainer::report_ranks() {
  // Every rank's host, pid and CPUs, recorded with the run (rank 0's sinks).
  dist::ProcessGroup& g = s_->ddp->group();
  const std::string mine = s_->binding.bound ? "CPUs " + s_->binding.cpus.to_string() : "unbound";
  const std::vector<std::string> all = g.all_gather_strings(mine, "every rank's binding");
  std::ostringstream os;
  os << "data-parallel: " << g.size() << (g.size() == 1 ? " rank over " : " ranks over ")
     << g.backend() << ", ";
  const std::int64_t k = config_.run.gradient_accumulation_steps;
  if (k > 1)
    os << k << " batches of " << config_.data.batch_size << " samples per rank and step ("
       << k * config_.data.batch_size * g.size() << " global)";
  else
    os << config_.data.batch_size << " samples per rank and step ("
       << config_.data.batch_size * g.size() << " global)";
  for (int r = 0; r < g.size(); ++r)
    os << "; " << g.describe_rank(r) << " " << all[static_cast<std::size_t>(r)];
  for (const auto& o : s_->opts) {
    const auto* m = dynamic_cast<const optim::Muon*>(o.get());
    if (m == nullptr) continue;
    if (m->partition().owner.empty()) {
      os << "; Muon replicated (every rank orthogonalises every matrix)";
      continue;
    }
    std::vector<int> owned(static_cast<std::size_t>(g.size()), 0);
    for (int owner : m->partition().owner)
      ++owned[static_cast<std::size_t>(owner)];
    os << "; Muon distributed, matrices per rank:";
    for (int n : owned)
      os << " " << n;
  }
  emit_event("info", os.str());
}

void Trainer::emit_event(const std::string& level, const std::string& text) {
  for (auto& s : sinks_)
    s->on_event(level, text);
}

void Trainer::emit_samples() {
  // Prompts: the first tokens of the eval split's first samples (the same at every evaluation);
  // draws seeded from run.seed and the step, so a rerun writes the same texts.
  const auto [vocab, context] = language_model_shape(*s_->model);
  std::vector<std::int64_t> first;
  for (std::int64_t i = 0; i < config_.eval.samples && i < s_->eval_set->size(); ++i)
    first.push_back(i);
  if (first.empty()) return;
  const data::Batch b = s_->eval_set->get_batch(first, data::BatchContext{});
  const core::Tensor prompts = b.input.to(core::ScalarType::Int64).contiguous();
  const std::int64_t plen = std::max<std::int64_t>(1, std::min<std::int64_t>(8, context / 2));
  for (std::int64_t i = 0; i < static_cast<std::int64_t>(first.size()); ++i) {
    const std::int64_t* row = prompts.data_ptr<std::int64_t>() + i * prompts.size(1);
    SampleOptions o;
    o.tokens = config_.eval.sample_tokens;
    o.temperature = 0.8;
    o.top_k = 40;
    if (s_->tokenizer != nullptr) o.vocab_limit = s_->tokenizer->vocab();
    o.seed = config_.run.seed * 1000003ull + static_cast<std::uint64_t>(s_->step) * 31ull +
             static_cast<std::uint64_t>(i);
    const auto out = sample_tokens(
        *s_->model, std::vector<std::int64_t>(row, row + std::min(plen, prompts.size(1))), o);
    std::string text;
    if (s_->tokenizer != nullptr) {
      // Valid UTF-8 on one line: the store, the GUI and the JSON export take it as text.
      text = data::printable_line(s_->tokenizer->decode(out));
    } else {
      for (std::size_t k = 0; k < out.size(); ++k)
        text += (k ? "," : "") + std::to_string(out[k]);
    }
    emit_event("info", "sample at step " + std::to_string(s_->step) + ": " + text);
  }
  s_->model->train();
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
    if (!config_.swa.use_buffers) recompute_batch_norm(*s_->average_model);
    const Metrics avg = evaluate_model(*s_->average_model, "eval_" + config_.swa.kind + ".");
    m.insert(m.end(), avg.begin(), avg.end());
  }
  return m;
}

void Trainer::recompute_batch_norm(nn::Model& model) {
  // torch.optim.swa_utils.update_bn over one pass of the training split, in order (no-op, and
  // no batch drawn, for a model without BatchNorm). Every data-parallel rank reads the whole
  // split, so that their averaged models keep the same statistics.
  data::DataLoaderOptions lo;
  lo.batch_size = config_.data.batch_size;
  lo.seed = config_.run.seed + 3;
  data::DataLoader loader(s_->train_set, lo);
  // Its dropout's masks the same at every evaluation, and after a resume.
  s_->average_gen.manual_seed(config_.run.seed + 3);
  swa::update_bn(
      [&]() -> std::optional<Tensor> {
        auto b = loader.next();
        if (!b) return std::nullopt;
        return b->input;
      },
      model, s_->device);
}

Metrics Trainer::evaluate_model(nn::Model& model, const std::string& prefix) {
  autograd::NoGradGuard no_grad;
  model.eval();
  data::DataLoaderOptions lo;
  // Data-parallel: the one-process evaluation's batches, each rank computing its rows.
  lo.batch_size = config_.data.batch_size * world_size();
  lo.seed = config_.run.seed + 2;
  if (s_->ddp) {
    lo.shard_rank = s_->ddp->rank();
    lo.shard_count = s_->ddp->world();
  }
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
    if (s_->ddp) {
      b = s_->ddp->take_shard(*b);
      if (b->input.size(0) == 0) {
        ++batches;
        continue;
      }
    }
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
  if (s_->ddp) {
    double n = static_cast<double>(items);
    double hits = static_cast<double>(correct);
    s_->ddp->reduce_eval(loss_sum, n, hits);
    items = static_cast<std::int64_t>(n);
    correct = static_cast<std::int64_t>(hits);
  }
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

TrainResult Trainer::run() {
  TrainResult r;
  std::optional<detail::AppliedBinding> binding;
  // amp.tf32 for this run's float32 CUDA products, on this thread only (runs side by side keep
  // their own); the process-wide setting again afterwards.
  const core::ScopedThreadAllowTf32 tf32(config_.amp.tf32);
  try {
    for (const auto& n : s_->setup_notes)
      emit_event("info", n);
    for (const auto& w : s_->setup_warnings)
      emit_event("warning", w);
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
    // Another GEMM library (or OpenBLAS at another thread count) rounds products differently:
    // the resumed run goes on correctly, but not bit for bit as the user guide promises.
    if (numerics_ && !resumed_numerics_.empty()) {
      const std::string now = numerics_();
      if (now != resumed_numerics_)
        emit_event("warning", "the checkpoint was written computing with " + resumed_numerics_ +
                                  ", this process computes with " + now +
                                  ": the continuation may differ from an uninterrupted run in "
                                  "the last bits (resume with the same --gemm-backend, and with "
                                  "OpenBLAS the same threads, for bit for bit)");
    }
    if (s_->ddp) report_ranks();
    r = loop();
  } catch (const std::exception& e) {
    r.outcome = RunOutcome::kFailed;
    r.message = e.what();
    const auto* lost = dynamic_cast<const dist::DistError*>(&e);
    if (lost != nullptr && lost->missing_rank() >= 0 && s_->ddp)
      r.message = s_->ddp->group().describe_rank(lost->missing_rank()) + " lost at step " +
                  std::to_string(s_->step + 1) + ": " + e.what();
    r.steps = s_->step;
    // Failed before its first checkpoint (a token id outside the vocabulary at the first batch):
    // no empty checkpoint folder is left behind (remove() takes only an empty folder).
    if (!checkpoint_dir_.empty() && s_->step == 0) {
      std::error_code ec;
      std::filesystem::remove(checkpoint_dir_, ec);
    }
    try {
      emit_event("error", r.message);
    } catch (...) {  // a failing sink must not hide the original error
    }
  }
  return r;
}

bool Trainer::wait_while_paused() {
  bool held = false;
  {
    std::lock_guard<std::mutex> lock(pause_mutex_);
    held = paused_ && !cancel_.load();
  }
  // A pause is an event of the run (kept with it, shown by `show` and the GUI's events): the
  // run's status stays running meanwhile, and its steps stop.
  const auto since = std::chrono::steady_clock::now();
  if (held) emit_event("info", "paused after step " + std::to_string(s_->step));
  {
    std::unique_lock<std::mutex> lock(pause_mutex_);
    pause_cv_.wait(lock, [&] { return !paused_ || cancel_.load(); });
  }
  if (held && !cancel_.load()) {
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - since).count();
    std::ostringstream text;
    text << "resumed after " << std::fixed << std::setprecision(1) << seconds << " s paused";
    emit_event("info", text.str());
  }
  return !cancel_;
}

bool Trainer::skip_nonfinite_step(double loss_value, TrainResult& r) {
  State& s = *s_;
  ++s.nonfinite_in_row;
  ++s.skipped;
  // The 1st, 2nd, 4th, 8th, ... skip in a row are reported: a run that has diverged for good
  // says so in a few lines, not in run.max_nonfinite identical ones.
  const std::int64_t k = s.nonfinite_in_row;
  // The step does not count: its number stays, and the next batch (or batches) tries it again.
  if ((k & (k - 1)) == 0) {
    const std::string value = std::isnan(loss_value) ? "nan" : loss_value > 0 ? "inf" : "-inf";
    emit_event("warning",
               "step " + std::to_string(s.step + 1) + ": non-finite loss (" + value +
                   "), step skipped" +
                   (k > 1 ? " (" + std::to_string(k) + " in a row; the run stops at " +
                                std::to_string(config_.run.max_nonfinite) + ", run.max_nonfinite)"
                          : std::string()) +
                   (config_.run.gradient_accumulation_steps > 1 ? "; the next batches try step "
                                                                : "; the next batch tries step ") +
                   std::to_string(s.step + 1) + " again");
  }
  if (s.nonfinite_in_row < config_.run.max_nonfinite) return false;
  r.outcome = RunOutcome::kDiverged;
  r.message = "diverged: " + std::to_string(s.nonfinite_in_row) +
              " non-finite losses in a row (run.max_nonfinite) at step " +
              std::to_string(s.step + 1);
  return true;
}

void Trainer::after_optimizer_step() {
  State& s = *s_;
  ++s.step;
  if (s.binding.bound && !s.placement_reported) {
    s.placement_reported = true;
    report_placement();
  }
  if (s.average && s.step >= config_.swa.start_step &&
      (s.step - config_.swa.start_step) % config_.swa.every == 0)
    s.average->update_parameters(*s.model);
}

void Trainer::checkpoint_if_due(TrainResult& r, bool now) {
  State& s = *s_;
  const bool due = now ||
                   (config_.checkpoint.interval > 0 && s.step % config_.checkpoint.interval == 0) ||
                   s.step == total_steps_ || s.step == stop_at_;
  // Data-parallel: only rank 0 writes, but distributed Muon's momentum comes from every rank —
  // a collective, so every rank decides alike (whether or not it writes).
  const bool gather = s.ddp && due;
  if (gather)
    for (auto& o : s.opts)
      if (auto* m = dynamic_cast<optim::Muon*>(o.get()); m && !m->partition().owner.empty())
        s.ddp->gather_muon_state(*m);
  if (due && !checkpoint_dir_.empty()) {
    const auto dir = save_checkpoint(checkpoint_dir_ / detail::checkpoint_name(s.step));
    r.last_checkpoint = dir.string();
    for (auto& sink : sinks_)
      sink->on_checkpoint(s.step, dir.string());
    detail::prune_checkpoints(checkpoint_dir_, config_.checkpoint.keep, owner_key_, s.step);
  }
  if (gather) release_unowned_state();
}

void Trainer::release_unowned_state() {
  for (auto& o : s_->opts)
    if (auto* m = dynamic_cast<optim::Muon*>(o.get()); m && !m->partition().owner.empty())
      s_->ddp->release_muon_state(*m);
}

bool Trainer::hold_with_ranks() {
  // Data-parallel pause: every rank holds until no rank asks for it any longer, exchanging the
  // requests a few times a second so that no rank's collective deadline runs out meanwhile.
  emit_event("info", "paused after step " + std::to_string(s_->step) + " (every rank holds)");
  const auto since = std::chrono::steady_clock::now();
  auto resumed = [&] {
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - since).count();
    std::ostringstream text;
    text << "resumed after " << std::fixed << std::setprecision(1) << seconds << " s paused";
    emit_event("info", text.str());
    return true;
  };
  for (;;) {
    bool pause = false;
    bool cancel = false;
    {
      std::unique_lock<std::mutex> lock(pause_mutex_);
      pause_cv_.wait_for(lock, std::chrono::milliseconds(200),
                         [&] { return !paused_ || cancel_.load(); });
      pause = paused_;
      cancel = cancel_.load();
    }
    const auto [any_pause, any_cancel] = s_->ddp->pause_round(pause && !cancel, cancel);
    if (any_cancel) return false;
    if (!any_pause) return resumed();
  }
}

}  // namespace tb::train
