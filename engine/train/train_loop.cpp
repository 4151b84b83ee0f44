// Trainer::loop: the steps of a run, each through the phases of train_step.cpp (llm.c's
// forward, zero_grad, backward, update; forward and backward once per accumulated batch), with
// what a step may end in — a pause or cancel, a
// non-finite loss, a data-parallel exchange, an evaluation, a checkpoint, a --stop-at step.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "engine/autograd/autograd.h"
#include "engine/core/metric_names.h"
#include "engine/ops/ops.h"
#include "engine/train/data_parallel.h"
#include "engine/train/trainer.h"
#include "engine/train/trainer_state.h"

namespace tb::train {

using core::Tensor;
using Clock = std::chrono::steady_clock;

namespace {

double ms_since(Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

// scheduler.kind = "plateau": ReduceLROnPlateau.step(eval loss) after each evaluation, as
// PyTorch's examples call it once per validation (the per-step loop skips it).
void step_plateau_schedulers(Trainer::State& s) {
  const auto loss = std::find_if(s.last_eval.begin(), s.last_eval.end(), [](const auto& kv) {
    return kv.first == core::metric::kEvalLoss;
  });
  if (loss == s.last_eval.end()) return;
  for (auto& sc : s.scheds)
    if (auto* plateau = dynamic_cast<sched::ReduceLROnPlateau*>(sc.get()))
      plateau->step(loss->second);
}

}  // namespace

// What loop() keeps across its steps, and the step under way.
struct Trainer::Loop {
  TrainResult r;
  std::int64_t first_step = 0;  // > 0 after resume_from()
  std::int64_t eval_every = 0;
  std::vector<Tensor> all_params;
  // Data-parallel: the persistent buffers (BatchNorm statistics), and what check_replicas
  // compares — the parameters and those buffers.
  nn::NamedTensors buffers;
  std::vector<Tensor> replicated;
  // On a device with its own clock (CUDA, openreg) the forward/backward/optimizer times come
  // from events queued between the phases, read once per step; elsewhere from the host clock.
  std::unique_ptr<core::DeviceTimer> timer;
  // Data-parallel: the requests every rank learnt from the last exchange.
  bool ranks_cancel = false;
  bool ranks_pause = false;
  std::int64_t last_logged = 0;  // the newest step whose metrics went to the sinks
  // The step under way.
  Clock::time_point t0;
  // The step's batches: run.gradient_accumulation_steps, fewer at an epoch's end.
  std::int64_t micro = 1;
  std::int64_t step_rows = 0;  // the samples of the step, over every batch and rank
  data::Batch first;           // its first batch, whole (a data-parallel rank trains on a shard)
  detail::StepTimes times;
  double loss_value = 0.0;

  void mark() {
    if (timer) timer->mark();
  }
  void forget_marks() {  // a skipped step's
    if (timer) (void)timer->elapsed_ms();
  }
};

TrainResult Trainer::loop() {
  State& s = *s_;
  Loop l;
  l.first_step = s.step;
  l.last_logged = s.step;
  // A stop past the last step is never met: said, not silently ignored (the total is known only
  // now, once the data is read, when the run counts epochs).
  if (stop_at_ > total_steps_)
    emit_event("warning", "the stop at step " + std::to_string(stop_at_) +
                              " is past the run's last step, " + std::to_string(total_steps_) +
                              ": it trains to its end");
  s.model->train();
  l.eval_every = config_.eval.interval > 0 ? config_.eval.interval
                                           : steps_per_epoch(config_, s.loader->num_batches());
  l.all_params = s.model->parameters();
  if (s.ddp) l.buffers = detail::persistent_buffers(*s.model);
  l.replicated = l.all_params;
  for (const auto& [name, t] : l.buffers)
    l.replicated.push_back(t);
  l.timer = core::make_device_timer(s.device);
  if (config_.eval.at_start && s.step == 0) evaluate_at_start();
  while (s.step < total_steps_) {
    const bool go_on =
        !s.ddp ? wait_while_paused() : !l.ranks_cancel && (!l.ranks_pause || hold_with_ranks());
    if (!go_on) {
      end_cancelled(l);
      break;
    }
    if (train_step(l) == StepEnd::kStop) break;
  }
  finish(l.r, s.step - l.first_step);
  return l.r;
}

void Trainer::log_last_loss(Loop& l) {
  // The loss of the step a cancelled or diverged run ended after, when that step was between
  // two logged ones: the plots and the runs list then end where the run did (a run that
  // diverged at step 3 with run.log_interval 10 kept no metric at all).
  const State& s = *s_;
  if (s.step > l.first_step && s.step != l.last_logged && !std::isnan(l.r.last_loss)) {
    const Metrics last = {{core::metric::kLoss, l.r.last_loss}};
    for (auto& sink : sinks_)
      sink->on_metrics(s.step, last);
  }
}

void Trainer::end_cancelled(Loop& l) {
  State& s = *s_;
  l.r.outcome = RunOutcome::kCancelled;
  l.r.message = "cancelled at step " + std::to_string(s.step);
  // The run can be resumed where it stopped, as after --stop-at: a checkpoint of this step
  // unless the last step wrote one (or none ran since the one resumed from). Every rank of a
  // data-parallel run gets here at the same step (the cancel is agreed in the exchange).
  bool saved = s.step == l.first_step ||
               (config_.checkpoint.interval > 0 && s.step % config_.checkpoint.interval == 0);
  if (!saved) {
    // A checkpoint that cannot be written (a full disk) leaves the run cancelled, with a
    // warning, rather than failed.
    try {
      checkpoint_if_due(l.r, true);
      saved = true;
    } catch (const std::exception& e) {
      emit_event("warning", std::string("cancelled without a checkpoint of step ") +
                                std::to_string(s.step) + ": " + e.what());
    }
  }
  if (saved && !checkpoint_dir_.empty() && s.step > 0)
    l.r.message += ", with a checkpoint to continue from";
  log_last_loss(l);
  // Cancelled before its first step (Ctrl-C while the data loaded): no checkpoint folder is left
  // behind empty (remove() takes only an empty folder).
  if (s.step == 0 && !checkpoint_dir_.empty()) {
    std::error_code ec;
    std::filesystem::remove(checkpoint_dir_, ec);
  }
}

Trainer::StepEnd Trainer::train_step(Loop& l) {
  State& s = *s_;
  l.ranks_pause = false;
  if (s.ddp) s.ddp->group().set_context("step " + std::to_string(s.step + 1));
  l.times = {};
  l.t0 = Clock::now();
  l.micro = detail::batches_of_step(config_, s);
  l.step_rows = detail::rows_of_step(s, l.micro);
  const bool accumulate = l.micro > 1;
  // One batch: its loss read after the forward (a non-finite one skips the backward). Several:
  // each loss weighted by its batch's share of the step's samples, so that the summed gradient
  // and loss are those of one batch of all of them (as for a loss averaged over samples; a
  // token-weighted loss with ignored targets would weigh by targets instead), summed on the
  // device and read once after the last backward, without a synchronisation per batch.
  Tensor loss_sum;
  std::int64_t rows_seen = 0;
  for (std::int64_t j = 0; j < l.micro; ++j) {
    const auto td = Clock::now();
    data::Batch global = detail::next_batch(s);
    rows_seen += global.global_rows > 0 ? global.global_rows : global.input.size(0);
    const data::Batch batch = s.ddp ? s.ddp->take_shard(global) : global;
    if (j == 0) l.first = std::move(global);
    l.times.data_ms += ms_since(td);
    const auto tf = Clock::now();
    l.mark();
    // A rank whose share of a short last batch is empty computes nothing and adds zeros.
    const bool has_rows = batch.input.size(0) > 0;
    Tensor loss;
    if (has_rows) {
      std::optional<nn::ScopedBatchShard> shard;
      if (s.ddp) shard.emplace(s.ddp->shard());
      loss = detail::forward_loss(config_, s, batch);
    } else if (s.ddp) {
      detail::replay_random_draws(s, batch);
    }
    l.mark();
    if (!accumulate) l.loss_value = has_rows ? loss.item() : 0.0;
    l.times.forward_ms += ms_since(tf);
    if (!accumulate && !s.ddp && !std::isfinite(l.loss_value)) {
      l.forget_marks();
      return end_nonfinite_step(l);
    }
    const auto tb = Clock::now();
    if (has_rows && (accumulate || std::isfinite(l.loss_value))) {
      Tensor weighted = loss;
      if (accumulate) {
        weighted = ops::mul(loss, core::Scalar(static_cast<double>(batch.input.size(0)) /
                                               static_cast<double>(l.step_rows)));
        autograd::NoGradGuard no_grad;
        loss_sum = loss_sum.defined() ? ops::add(loss_sum, weighted) : weighted.clone();
      }
      autograd::backward(s.scaler ? s.scaler->scale(weighted) : weighted);
    }
    l.mark();
    l.times.backward_ms += ms_since(tb);
  }
  TB_CHECK(rows_seen == l.step_rows, "[trainer] step ", s.step + 1, " read ", rows_seen,
           " samples where the loader's batches hold ", l.step_rows);
  if (accumulate) l.loss_value = loss_sum.defined() ? loss_sum.item() : 0.0;
  const bool finite = std::isfinite(l.loss_value);
  if (!s.ddp && !finite) {  // several batches: their gradients are dropped with the step
    l.forget_marks();
    for (auto& o : s.opts)
      o->zero_grad();
    return end_nonfinite_step(l);
  }
  if (s.ddp && !exchange_with_ranks(l, finite)) return end_nonfinite_step(l);
  s.nonfinite_in_row = 0;
  return update_and_log(l);
}

Trainer::StepEnd Trainer::end_nonfinite_step(Loop& l) {
  if (!skip_nonfinite_step(l.loss_value, l.r)) return StepEnd::kNext;
  log_last_loss(l);
  return StepEnd::kStop;  // diverged
}

bool Trainer::exchange_with_ranks(Loop& l, bool finite) {
  State& s = *s_;
  // One exchange: the averaged gradients and every rank's loss, flags and times.
  bool pause_requested = false;
  {
    std::lock_guard<std::mutex> lock(pause_mutex_);
    pause_requested = paused_;
  }
  const detail::RankTimes mine = {l.times.data_ms, l.times.forward_ms, l.times.backward_ms,
                                  s.last_comm_ms, s.last_optimizer_ms};
  const detail::StepExchange ex =
      s.ddp->exchange(l.all_params, l.loss_value, finite, cancel_.load(), pause_requested, mine,
                      l.micro == 1 ? std::nullopt : std::optional<double>(1.0));
  l.ranks_cancel = ex.cancel;
  l.ranks_pause = ex.pause;
  l.times.comm_ms = ex.comm_ms;
  s.last_comm_ms = ex.comm_ms;
  l.loss_value = ex.loss;
  s.ddp_times = ex.times;
  if (!ex.nonfinite) return true;
  // Some rank's loss was not finite: every rank skips the step.
  l.forget_marks();
  for (auto& o : s.opts)
    o->zero_grad();
  return false;
}

Trainer::StepEnd Trainer::update_and_log(Loop& l) {
  State& s = *s_;
  const auto t3 = Clock::now();
  const double grad_norm = detail::unscale_and_clip(config_, s, l.all_params);
  // Metrics are assembled only for a step that is logged (or evaluated): the others cost
  // nothing beyond their timers.
  const std::int64_t next = s.step + 1;
  const bool eval_now = next % l.eval_every == 0 || next == total_steps_ || next == stop_at_;
  const bool log_now = next % config_.run.log_interval == 0 || eval_now;
  Metrics m;
  if (log_now) {
    m.emplace_back(core::metric::kLoss, l.loss_value);
    detail::append_lr_metrics(s, m);  // the rates this step uses, before the schedulers move
  }
  const detail::OptimizerStepResult opt = detail::optimizer_step(s, log_now);
  if (!opt.stepped) {
    ++s.scaler_skipped;
    // Routine for dynamic loss scaling (the scale is then lowered), as PyTorch's GradScaler
    // treats it: a note in the run's events, not a warning.
    emit_event("info", "step " + std::to_string(s.step + 1) + ": inf/NaN gradients at loss scale " +
                           std::to_string(opt.loss_scale) + ", optimizer step skipped");
  }
  l.times.optimizer_ms = ms_since(t3);
  s.last_optimizer_ms = l.times.optimizer_ms;
  if (l.timer) {
    l.mark();
    // Per batch: forward, backward, then the time to the next batch's forward (its loading) or,
    // after the last, the exchange and optimizer.
    const std::vector<double> d = l.timer->elapsed_ms();
    if (d.size() == 3 * static_cast<std::size_t>(l.micro)) {
      l.times.forward_ms = 0;
      l.times.backward_ms = 0;
      for (std::size_t j = 0; j < d.size(); j += 3) {
        l.times.forward_ms += d[j];
        l.times.backward_ms += d[j + 1];
      }
      l.times.optimizer_ms = d.back();
    }
  }
  after_optimizer_step();
  // Rank 0's running statistics for every rank, before anything reads them (evaluation, a
  // checkpoint, the replica check).
  if (s.ddp && config_.distributed.broadcast_buffers && !l.buffers.empty())
    s.ddp->broadcast_buffers(*s.model);
  if (s.ddp && config_.distributed.check_replicas && log_now)
    s.ddp->check_replicas(l.replicated, s.step);
  if (s.ddp && log_now) s.ddp->share_late_times(s.ddp_times, l.times.comm_ms, l.times.optimizer_ms);
  if (log_now)
    detail::append_step_metrics(s, l.times, grad_norm, opt, l.first, l.step_rows, ms_since(l.t0),
                                m);
  if (eval_now) evaluate_into(l, m);
  l.r.last_loss = l.loss_value;
  if (log_now) {
    for (auto& sink : sinks_)
      sink->on_metrics(s.step, m);
    l.last_logged = s.step;
  }
  checkpoint_if_due(l.r);
  if (s.step == stop_at_ && s.step < total_steps_) {
    l.r.outcome = RunOutcome::kCancelled;
    l.r.message = "stopped at step " + std::to_string(s.step) + " of " +
                  std::to_string(total_steps_) + " as asked, with a checkpoint to continue from";
    return StepEnd::kStop;
  }
  return StepEnd::kNext;
}

void Trainer::evaluate_at_start() {
  // The initial model's evaluation, at step 0: no scheduler steps on it (a plateau's first
  // comparison is with the first trained evaluation), no checkpoint is written.
  State& s = *s_;
  const auto te = Clock::now();
  Metrics m = evaluate();
  s.model->train();
  s.last_eval = m;  // what a run cancelled before its first trained evaluation ends with
  m.emplace_back(core::metric::kEvalMs, ms_since(te));
  for (auto& sink : sinks_)
    sink->on_metrics(0, m);
  if (config_.eval.samples > 0 && rank() == 0) emit_samples();
}

void Trainer::evaluate_into(Loop& l, Metrics& m) {
  State& s = *s_;
  const auto te = Clock::now();
  s.last_eval = evaluate();
  // Not on the extra evaluation of a --stop-at step: the run resumed from there must step its
  // plateau as the uninterrupted one does.
  if (s.step % l.eval_every == 0 || s.step == total_steps_) step_plateau_schedulers(s);
  m.insert(m.end(), s.last_eval.begin(), s.last_eval.end());
  m.emplace_back(core::metric::kEvalMs, ms_since(te));
  if (config_.eval.samples > 0 && rank() == 0) emit_samples();
}

void Trainer::finish(TrainResult& r, std::int64_t steps_run) {
  r.steps = s_->step;
  r.last_eval = s_->last_eval;
  const std::string steps = std::to_string(s_->step) + (s_->step == 1 ? " step" : " steps");
  if (r.outcome == RunOutcome::kFinished && steps_run == 0) {
    r.message = "finished " + steps + " (nothing was left to run after the checkpoint)";
  } else if (r.outcome == RunOutcome::kFinished) {
    std::ostringstream os;
    os << "finished " << steps << ", last loss " << r.last_loss;
    for (const auto& [k, v] : s_->last_eval)
      os << ", " << k << " " << v;
    r.message = os.str();
  }
  // A stop at --stop-at's step is what was asked for (a sweep's rung): not a warning.
  const bool as_asked = r.outcome == RunOutcome::kCancelled && stop_at_ > 0 &&
                        s_->step == stop_at_ && stop_at_ < total_steps_;
  for (auto& sink : sinks_)
    sink->on_outcome(r.outcome == RunOutcome::kFinished || as_asked ? "info" : "warning",
                     r.message);
}

}  // namespace tb::train
