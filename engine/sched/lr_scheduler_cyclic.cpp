// The schedulers that anneal between LRs given as options: CyclicLR and OneCycleLR (with momentum
// or beta1 cycling) of torch/optim/lr_scheduler.py, and SWALR (torch/optim/swa_utils.py).
#include "engine/sched/lr_scheduler.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "engine/core/error.h"
#include "engine/sched/lr_scheduler_internal.h"

namespace tb::sched {

using namespace internal;  // NOLINT(google-build-using-namespace): this folder's helpers

// ---- CyclicLR ------------------------------------------------------------------------------

namespace {

const char* const kNoMomentum =
    "optimizer must support momentum or beta1 with `cycle_momentum` option enabled";

// Momentum key of an optimizer: "beta1" when its defaults have one (Adam-like), else "momentum".
std::string momentum_key(const Optimizer& opt) {
  return defaults_have(opt, "beta1") ? "beta1" : "momentum";
}

void set_momentum_bounds(Optimizer& opt, const std::vector<double>& maxm,
                         const std::vector<double>& basem) {
  const std::string key = momentum_key(opt);
  auto& groups = opt.param_groups();
  for (std::size_t i = 0; i < groups.size(); ++i) {
    groups[i].options[key] = maxm[i];
    groups[i].options["max_momentum"] = maxm[i];
    groups[i].options["base_momentum"] = basem[i];
  }
}

// cycle_momentum (CyclicLR and OneCycleLR, torch/optim/lr_scheduler.py): the optimizer must have
// a momentum or beta1; a fresh scheduler starts each group at max_momentum and records both
// bounds in it.
void setup_cycled_momentum(Optimizer& opt, const PerGroup& base_momentum,
                           const PerGroup& max_momentum, std::int64_t last_epoch,
                           const char* scheduler) {
  TB_CHECK(defaults_have(opt, "momentum") || defaults_have(opt, "beta1"), "[", scheduler, "] ",
           kNoMomentum);
  const auto basem = base_momentum.expand(opt, "base_momentum", scheduler);
  const auto maxm = max_momentum.expand(opt, "max_momentum", scheduler);
  if (last_epoch == -1) set_momentum_bounds(opt, maxm, basem);
}

Optimizer& prepare_cyclic(Optimizer& opt, const PerGroup& base_lr, const PerGroup& max_lr,
                          const CyclicLROptions& o) {
  const auto base = base_lr.expand(opt, "base_lr", "CyclicLR");
  if (o.last_epoch == -1) {
    auto& groups = opt.param_groups();
    for (std::size_t i = 0; i < groups.size(); ++i)
      groups[i].update_value("lr", base[i]);
  }
  max_lr.expand(opt, "max_lr", "CyclicLR");
  TB_CHECK(o.step_size_up > 0, "[CyclicLR] step_size_up must be positive, got ", o.step_size_up);
  TB_CHECK(!o.step_size_down || *o.step_size_down >= 0,
           "[CyclicLR] step_size_down must be >= 0, got ", o.step_size_down.value_or(0));
  const bool known = o.mode == "triangular" || o.mode == "triangular2" || o.mode == "exp_range";
  TB_CHECK(known || o.scale_fn.has_value(),
           "[CyclicLR] mode is invalid and scale_fn is None (mode '", o.mode,
           "'; use triangular, triangular2 or exp_range)");
  if (o.scale_fn) {
    TB_CHECK(o.scale_mode == "cycle" || o.scale_mode == "iterations",
             "[CyclicLR] scale_mode must be 'cycle' or 'iterations', got '", o.scale_mode, "'");
  }
  if (o.cycle_momentum)
    setup_cycled_momentum(opt, o.base_momentum, o.max_momentum, o.last_epoch, "CyclicLR");
  return opt;
}

}  // namespace

CyclicLR::CyclicLR(Optimizer& opt, PerGroup base_lr, PerGroup max_lr, CyclicLROptions o)
    : LRScheduler(prepare_cyclic(opt, base_lr, max_lr, o), "CyclicLR", o.last_epoch) {
  max_lrs_ = max_lr.expand(opt, "max_lr", name_);
  const double up = o.step_size_up;
  const double down = o.step_size_down.value_or(up);
  total_size_ = up + down;
  step_ratio_ = up / total_size_;
  mode_ = o.mode;
  gamma_ = o.gamma;
  scale_fn_custom_ = o.scale_fn;
  if (scale_fn_custom_) {
    scale_mode_ = o.scale_mode;
  } else {
    scale_mode_ = mode_ == "exp_range" ? "iterations" : "cycle";
  }
  cycle_momentum_ = o.cycle_momentum;
  if (cycle_momentum_) {
    use_beta1_ = defaults_have(opt, "beta1");
    base_momentums_ = o.base_momentum.expand(opt, "base_momentum", name_);
    max_momentums_ = o.max_momentum.expand(opt, "max_momentum", name_);
  }
  initial_step();
  base_lrs_ = base_lr.expand(opt, "base_lr", name_);
}

double CyclicLR::scale(double x) const {
  if (scale_fn_custom_) return (*scale_fn_custom_)(x);
  if (mode_ == "triangular") return 1.0;
  if (mode_ == "triangular2") return 1 / std::pow(2.0, x - 1);
  return std::pow(gamma_, x);  // exp_range
}

std::vector<double> CyclicLR::compute_lr() {
  const double e = static_cast<double>(last_epoch_);
  const double cycle = std::floor(1 + e / total_size_);
  const double x = 1.0 + e / total_size_ - cycle;
  const double sf = x <= step_ratio_ ? x / step_ratio_ : (x - 1) / (step_ratio_ - 1);
  const double s = scale(scale_mode_ == "cycle" ? cycle : e);
  std::vector<double> lrs;
  for (std::size_t i = 0; i < base_lrs_.size() && i < max_lrs_.size(); ++i) {
    const double h = (max_lrs_[i] - base_lrs_[i]) * sf;
    lrs.push_back(base_lrs_[i] + h * s);
  }
  if (cycle_momentum_) {
    const std::string key = use_beta1_ ? "beta1" : "momentum";
    auto& groups = opt_->param_groups();
    for (std::size_t i = 0; i < groups.size() && i < max_momentums_.size(); ++i) {
      const double h = (max_momentums_[i] - base_momentums_[i]) * sf;
      groups[i].options[key] = max_momentums_[i] - h * s;
    }
  }
  return lrs;
}

void CyclicLR::save_own(json& j) const {
  j["max_lrs"] = nums_json(max_lrs_);
  j["total_size"] = num_json(total_size_);
  j["step_ratio"] = num_json(step_ratio_);
  j["mode"] = mode_;
  j["gamma"] = num_json(gamma_);
  j["_scale_fn_custom"] = scale_fn_custom_ && scale_fn_custom_->is_expression()
                              ? json(scale_fn_custom_->expression())
                              : json(nullptr);
  j["scale_mode"] = scale_mode_;
  j["cycle_momentum"] = cycle_momentum_;
  if (cycle_momentum_) {
    j["use_beta1"] = use_beta1_;
    j["base_momentums"] = nums_json(base_momentums_);
    j["max_momentums"] = nums_json(max_momentums_);
  }
}

void CyclicLR::load_own(const json& j) {
  load_if(j, "max_lrs", max_lrs_, nums_from, name_);
  load_if(j, "total_size", total_size_, num_from, name_);
  load_if(j, "step_ratio", step_ratio_, num_from, name_);
  load_if(j, "mode", mode_, str_from, name_);
  load_if(j, "gamma", gamma_, num_from, name_);
  if (j.contains("_scale_fn_custom") && j.at("_scale_fn_custom").is_string())
    scale_fn_custom_ = LrLambda(j.at("_scale_fn_custom").get<std::string>());
  load_if(j, "scale_mode", scale_mode_, str_from, name_);
  load_if(j, "cycle_momentum", cycle_momentum_, bool_from, name_);
  load_if(j, "use_beta1", use_beta1_, bool_from, name_);
  load_if(j, "base_momentums", base_momentums_, nums_from, name_);
  load_if(j, "max_momentums", max_momentums_, nums_from, name_);
}

// ---- OneCycleLR ----------------------------------------------------------------------------

namespace {

std::int64_t one_cycle_total(const OneCycleLROptions& o) {
  if (o.total_steps) {
    TB_CHECK(*o.total_steps > 0, "[OneCycleLR] Expected positive integer total_steps, but got ",
             *o.total_steps);
    return *o.total_steps;
  }
  if (o.epochs && o.steps_per_epoch) {
    TB_CHECK(*o.epochs > 0, "[OneCycleLR] Expected positive integer epochs, but got ", *o.epochs);
    TB_CHECK(*o.steps_per_epoch > 0,
             "[OneCycleLR] Expected positive integer steps_per_epoch, but got ",
             *o.steps_per_epoch);
    return *o.epochs * *o.steps_per_epoch;
  }
  throw ValueError(
      "[OneCycleLR] You must define either total_steps OR (epochs AND steps_per_epoch)");
}

Optimizer& prepare_one_cycle(Optimizer& opt, const PerGroup& max_lr, const OneCycleLROptions& o) {
  one_cycle_total(o);
  TB_CHECK(!(o.pct_start < 0 || o.pct_start > 1 || std::isnan(o.pct_start)),
           "[OneCycleLR] Expected float between 0 and 1 pct_start, but got ", o.pct_start);
  TB_CHECK(o.anneal_strategy == "cos" || o.anneal_strategy == "linear",
           "[OneCycleLR] anneal_strategy must be one of 'cos' or 'linear', instead got ",
           o.anneal_strategy);
  const auto max_lrs = max_lr.expand(opt, "max_lr", "OneCycleLR");
  auto& groups = opt.param_groups();
  if (o.last_epoch == -1) {
    for (std::size_t i = 0; i < groups.size(); ++i) {
      const double initial = max_lrs[i] / o.div_factor;
      groups[i].options["initial_lr"] = initial;
      groups[i].options["max_lr"] = max_lrs[i];
      groups[i].options["min_lr"] = initial / o.final_div_factor;
    }
  }
  if (o.cycle_momentum)
    setup_cycled_momentum(opt, o.base_momentum, o.max_momentum, o.last_epoch, "OneCycleLR");
  return opt;
}

}  // namespace

OneCycleLR::OneCycleLR(Optimizer& opt, PerGroup max_lr, OneCycleLROptions o)
    : LRScheduler(prepare_one_cycle(opt, max_lr, o), "OneCycleLR", o.last_epoch),
      total_steps_(one_cycle_total(o)),
      pct_start_(o.pct_start),
      three_phase_(o.three_phase),
      anneal_strategy_(o.anneal_strategy),
      cycle_momentum_(o.cycle_momentum) {
  if (cycle_momentum_) use_beta1_ = defaults_have(opt, "beta1");
  initial_step();
}

std::vector<OneCycleLR::Phase> OneCycleLR::phases() const {
  const double n = static_cast<double>(total_steps_);
  if (three_phase_) {
    return {{pct_start_ * n - 1, "initial_lr", "max_lr", "max_momentum", "base_momentum"},
            {2 * pct_start_ * n - 2, "max_lr", "initial_lr", "base_momentum", "max_momentum"},
            {n - 1, "initial_lr", "min_lr", "max_momentum", "max_momentum"}};
  }
  return {{pct_start_ * n - 1, "initial_lr", "max_lr", "max_momentum", "base_momentum"},
          {n - 1, "max_lr", "min_lr", "base_momentum", "max_momentum"}};
}

double OneCycleLR::anneal(double start, double end, double pct) const {
  if (anneal_strategy_ == "cos") {
    const double cos_out = std::cos(kPi * pct) + 1;
    return end + (start - end) / 2.0 * cos_out;
  }
  return (end - start) * pct + start;
}

std::vector<double> OneCycleLR::compute_lr() {
  const std::int64_t step_num = last_epoch_;
  TB_CHECK(step_num <= total_steps_, "[OneCycleLR] Tried to step ", step_num,
           " times. The specified number of total steps is ", total_steps_);
  const auto ph = phases();
  const std::string key = use_beta1_ ? "beta1" : "momentum";
  std::vector<double> lrs;
  for (auto& g : opt_->param_groups()) {
    double start = 0.0;
    double lr = 0.0;
    double mom = 0.0;
    const double s = static_cast<double>(step_num);
    for (std::size_t i = 0; i < ph.size(); ++i) {
      const double end = ph[i].end_step;
      if (s <= end || i == ph.size() - 1) {
        const double pct = (s - start) / (end - start);
        lr = anneal(g.number(ph[i].start_lr), g.number(ph[i].end_lr), pct);
        if (cycle_momentum_)
          mom = anneal(g.number(ph[i].start_momentum), g.number(ph[i].end_momentum), pct);
        break;
      }
      start = end;
    }
    lrs.push_back(lr);
    if (cycle_momentum_) g.options[key] = mom;
  }
  return lrs;
}

void OneCycleLR::save_own(json& j) const {
  j["total_steps"] = total_steps_;
  j["pct_start"] = num_json(pct_start_);
  j["three_phase"] = three_phase_;
  j["_anneal_strategy"] = anneal_strategy_;
  j["cycle_momentum"] = cycle_momentum_;
  if (cycle_momentum_) j["use_beta1"] = use_beta1_;
}

void OneCycleLR::load_own(const json& j) {
  load_if(j, "total_steps", total_steps_, int_from, name_);
  load_if(j, "pct_start", pct_start_, num_from, name_);
  load_if(j, "three_phase", three_phase_, bool_from, name_);
  load_if(j, "_anneal_strategy", anneal_strategy_, str_from, name_);
  TB_CHECK(anneal_strategy_ == "cos" || anneal_strategy_ == "linear",
           "[OneCycleLR] state_dict entry '_anneal_strategy' must be 'cos' or 'linear', got '",
           anneal_strategy_, "'");
  load_if(j, "cycle_momentum", cycle_momentum_, bool_from, name_);
  load_if(j, "use_beta1", use_beta1_, bool_from, name_);
}

// ---- SWALR ---------------------------------------------------------------------------------

namespace {
Optimizer& prepare_swalr(Optimizer& opt, const PerGroup& swa_lr, std::int64_t anneal_epochs,
                         const std::string& strategy) {
  const auto v = swa_lr.expand(opt, "swa_lr", "SWALR");
  auto& groups = opt.param_groups();
  for (std::size_t i = 0; i < groups.size(); ++i)
    groups[i].options["swa_lr"] = v[i];  // before the checks, as PyTorch (survives an error)
  TB_CHECK(strategy == "cos" || strategy == "linear",
           "[SWALR] anneal_strategy must by one of 'cos' or 'linear', instead got ", strategy);
  TB_CHECK(anneal_epochs >= 0, "[SWALR] anneal_epochs must be equal or greater than 0, got ",
           anneal_epochs);
  return opt;
}
}  // namespace

SWALR::SWALR(Optimizer& opt, PerGroup swa_lr, std::int64_t anneal_epochs,
             std::string anneal_strategy, std::int64_t last_epoch)
    : LRScheduler(prepare_swalr(opt, swa_lr, anneal_epochs, anneal_strategy), "SWALR", last_epoch),
      anneal_epochs_(anneal_epochs),
      anneal_strategy_(std::move(anneal_strategy)) {
  initial_step();
}

double SWALR::anneal(double t) const {
  if (anneal_strategy_ == "cos") return (1 - std::cos(kPi * t)) / 2;
  return t;
}

std::vector<double> SWALR::compute_lr() {
  std::int64_t step = step_count_ - 1;
  if (anneal_epochs_ == 0) step = std::max<std::int64_t>(1, step);
  const double e = static_cast<double>(std::max<std::int64_t>(1, anneal_epochs_));
  const double prev_t = std::max(0.0, std::min(1.0, static_cast<double>(step - 1) / e));
  const double prev_alpha = anneal(prev_t);
  const double t = std::max(0.0, std::min(1.0, static_cast<double>(step) / e));
  const double alpha = anneal(t);
  std::vector<double> out;
  for (const auto& g : opt_->param_groups()) {
    const double swa = g.number("swa_lr");
    const double lr = g.number("lr");
    const double prev = prev_alpha == 1 ? swa : (lr - prev_alpha * swa) / (1 - prev_alpha);
    out.push_back(swa * alpha + prev * (1 - alpha));
  }
  return out;
}

void SWALR::save_own(json& j) const {
  j["anneal_epochs"] = anneal_epochs_;
  j["_anneal_strategy"] = anneal_strategy_;
}

void SWALR::load_own(const json& j) {
  load_if(j, "anneal_epochs", anneal_epochs_, int_from, name_);
  // PR 163122: the anneal function is rebuilt from the saved strategy.
  load_if(j, "_anneal_strategy", anneal_strategy_, str_from, name_);
  TB_CHECK(anneal_strategy_ == "cos" || anneal_strategy_ == "linear",
           "[SWALR] state_dict entry '_anneal_strategy' must be 'cos' or 'linear', got '",
           anneal_strategy_, "'");
}

}  // namespace tb::sched
