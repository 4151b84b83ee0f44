// The phases of one training step (Trainer::loop calls them in order): the batch, forward and
// loss under autocast, unscale + gradient norm + clip, the optimizer phase (scaler, step,
// zero_grad, schedulers) and the step's metrics.
#include <algorithm>
#include <cmath>

#include "engine/amp/autocast.h"
#include "engine/autograd/autograd.h"
#include "engine/core/error.h"
#include "engine/core/metric_names.h"
#include "engine/ops/ops.h"
#include "engine/train/data_parallel.h"
#include "engine/train/trainer_state.h"

namespace tb::train::detail {

using core::ScalarType;
using core::Tensor;

data::Batch next_batch(Trainer::State& s) {
  auto batch = s.loader->next();
  if (!batch) batch = s.loader->next();  // epoch boundary
  TB_CHECK(batch.has_value(), "[trainer] the data loader produced no batch");
  return std::move(*batch);
}

std::int64_t batches_of_step(const RunConfig& c, const Trainer::State& s) {
  const std::int64_t k = c.run.gradient_accumulation_steps;
  // A run counted in steps takes K batches every step, across epoch ends (random windows of a
  // token file have no natural epoch, and nanoGPT's steps are all alike).
  if (k <= 1 || c.run.steps > 0) return std::max<std::int64_t>(k, 1);
  const std::int64_t n = s.loader->num_batches();
  const std::int64_t taken = s.loader->next_batch_index();
  return std::min(k, taken >= n ? n : n - taken);
}

std::int64_t rows_of_step(const Trainer::State& s, std::int64_t batches) {
  const std::int64_t n = s.loader->num_batches();
  TB_CHECK(n > 0, "[trainer] the data loader has no batch (an empty training split)");
  std::int64_t b = s.loader->next_batch_index();
  if (b >= n) b = 0;  // the epoch is over: the next one's first batches
  std::int64_t rows = 0;
  for (std::int64_t j = 0; j < batches; ++j)
    rows += s.loader->batch_rows((b + j) % n);  // past the epoch's end: the next one's
  return rows;
}

Tensor forward_loss(const RunConfig& c, Trainer::State& s, const data::Batch& batch) {
  std::optional<amp::AutocastGuard> autocast;
  if (c.amp.enabled)
    autocast.emplace(s.device.type(),
                     c.amp.dtype == "fp16" ? ScalarType::Float16 : ScalarType::BFloat16);
  const Tensor input = batch.input.to(s.device);
  const Tensor target = batch.target.to(s.device);
  const Tensor logits = s.model->forward(input);
  return s.model->loss(logits, target);
}

void replay_random_draws(Trainer::State& s, const data::Batch& empty_shard) {
  autograd::NoGradGuard no_grad;
  // Only Dropout draws random numbers: it stays in training mode, everything else is put in
  // evaluation mode (BatchNorm would refuse 0 rows in training and update its statistics), and
  // every module's mode and buffer is restored after.
  std::vector<std::pair<nn::Module*, bool>> modes;
  for (auto& [path, m] : s.model->named_modules())
    modes.emplace_back(m, m->is_training());
  std::vector<std::pair<Tensor, Tensor>> saved;  // (buffer, its copy)
  for (auto& [name, t] : persistent_buffers(*s.model))
    saved.emplace_back(t, t.clone());
  s.model->eval();
  for (auto& [m, training] : modes)
    if (dynamic_cast<nn::Dropout*>(m) != nullptr) m->train(training);
  try {
    nn::ScopedBatchShard shard(s.ddp->shard());
    (void)s.model->forward(empty_shard.input.to(s.device));
  } catch (...) {
    for (auto& [m, training] : modes)
      m->train(training);
    throw;
  }
  for (auto& [m, training] : modes)
    m->train(training);
  for (auto& [buffer, copy] : saved)
    buffer.copy_(copy);
}

double unscale_and_clip(const RunConfig& c, Trainer::State& s, const std::vector<Tensor>& params) {
  autograd::NoGradGuard no_grad;
  if (s.scaler) {  // true gradients for the norm and the clip
    for (auto& o : s.opts)
      s.scaler->unscale_(*o);
  }
  // One fused pass over every gradient (float64 sum, fixed order) on the device, read once: one
  // synchronisation per step, not one per parameter.
  std::vector<Tensor> grads;
  grads.reserve(params.size());
  for (const auto& p : params)
    grads.push_back(autograd::grad(p));
  const Tensor sq_sum = ops::foreach_sum_sq(grads);
  const double norm = sq_sum.defined() ? std::sqrt(sq_sum.item()) : 0.0;
  if (c.run.grad_clip > 0 && norm > c.run.grad_clip) {
    const double scale = c.run.grad_clip / (norm + 1e-6);
    for (const auto& p : params) {
      Tensor g = autograd::grad(p);
      if (g.defined()) ops::mul_(g, scale);
    }
  }
  return norm;
}

void append_lr_metrics(const Trainer::State& s, Metrics& m) {
  for (std::size_t i = 0; i < s.opts.size(); ++i) {
    const auto& groups = s.opts[i]->param_groups();
    for (std::size_t g = 0; g < groups.size(); ++g)
      m.emplace_back(core::metric::kLrPrefix + s.opt_names[i] + "." + std::to_string(g),
                     groups[g].number("lr"));
  }
}

OptimizerStepResult optimizer_step(Trainer::State& s, bool with_metrics) {
  OptimizerStepResult r;
  if (s.scaler) {
    r.loss_scale = s.scaler->get_scale();
    for (auto& o : s.opts)
      r.stepped = s.scaler->step(*o) && r.stepped;
    s.scaler->update();
  } else {
    for (auto& o : s.opts)
      o->step();
  }
  if (with_metrics) {
    for (auto& o : s.opts) {
      Metrics part;
      o->append_step_metrics(part);
      for (const auto& [k, v] : part) {
        auto it = std::find_if(r.optimizer_metrics.begin(), r.optimizer_metrics.end(),
                               [&key = k](const auto& e) { return e.first == key; });
        if (it == r.optimizer_metrics.end()) {
          r.optimizer_metrics.emplace_back(k, v);
        } else {
          it->second += v;
        }
      }
    }
  }
  for (auto& o : s.opts)
    o->zero_grad();
  // ReduceLROnPlateau steps on the eval metric, after each evaluation (Trainer::run).
  for (auto& sc : s.scheds)
    if (dynamic_cast<sched::ReduceLROnPlateau*>(sc.get()) == nullptr) sc->step();
  return r;
}

void append_step_metrics(const Trainer::State& s, const StepTimes& t, double grad_norm,
                         const OptimizerStepResult& o, const data::Batch& batch,
                         std::int64_t step_rows, double step_ms, Metrics& m) {
  namespace metric = core::metric;
  m.emplace_back(metric::kGradNorm, grad_norm);
  m.emplace_back(metric::kDataMs, t.data_ms);
  m.emplace_back(metric::kForwardMs, t.forward_ms);
  m.emplace_back(metric::kBackwardMs, t.backward_ms);
  m.emplace_back(metric::kOptimizerMs, t.optimizer_ms);
  if (s.ddp) {
    m.emplace_back(metric::kCommMs, t.comm_ms);
    // Every rank's phases of this step, so that a straggler shows at the step it was slow.
    static constexpr const char* kNames[] = {metric::kDataMs, metric::kForwardMs,
                                             metric::kBackwardMs, metric::kCommMs,
                                             metric::kOptimizerMs};
    for (std::size_t r = 0; r < s.ddp_times.size(); ++r)
      for (std::size_t k = 0; k < s.ddp_times[r].size(); ++k)
        m.emplace_back(std::string(metric::kRankPrefix) + std::to_string(r) + "/" + kNames[k],
                       s.ddp_times[r][k]);
  }
  for (const auto& [k, v] : o.optimizer_metrics)
    if (v > 0.0) m.emplace_back(k, v);
  m.emplace_back(metric::kStepMs, step_ms);
  // The step's samples: every accumulated batch's, of every rank.
  const auto global_rows = static_cast<double>(step_rows);
  m.emplace_back(metric::kSamplesPerS, global_rows / (step_ms / 1000.0));
  if (s.language_model) {
    double per_row = 1.0;  // tokens per row
    for (std::int64_t d = 1; d < batch.input.dim(); ++d)
      per_row *= static_cast<double>(batch.input.size(d));
    m.emplace_back(metric::kTokensPerS, global_rows * per_row / (step_ms / 1000.0));
  }
  if (s.scaler) m.emplace_back(metric::kLossScale, o.loss_scale);
  if (s.skipped > 0) m.emplace_back(metric::kSkippedSteps, static_cast<double>(s.skipped));
  if (s.scaler_skipped > 0)
    m.emplace_back(metric::kScalerSkippedSteps, static_cast<double>(s.scaler_skipped));
}

}  // namespace tb::train::detail
