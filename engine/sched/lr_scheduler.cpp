// The LRScheduler base class (construction-time step, chainable and closed-form steps, LR
// writes, state_dict), PerGroup, and the schedulers with a formula of the epoch alone: LambdaLR,
// MultiplicativeLR, StepLR, MultiStepLR, ConstantLR, LinearLR, ExponentialLR, PolynomialLR,
// CosineAnnealingLR and CosineAnnealingWarmRestarts (torch/optim/lr_scheduler.py). CyclicLR,
// OneCycleLR and SWALR are in lr_scheduler_cyclic.cpp, SequentialLR and ChainedScheduler in
// lr_scheduler_composite.cpp, ReduceLROnPlateau in lr_scheduler_plateau.cpp.
#include "engine/sched/lr_scheduler.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numbers>

#include "engine/autograd/autograd.h"
#include "engine/core/error.h"
#include "engine/sched/lr_scheduler_internal.h"

namespace tb::sched {

using namespace internal;  // NOLINT(google-build-using-namespace): this folder's helpers

namespace {

const char* const kStepOrder =
    "Detected call of `lr_scheduler.step()` before `optimizer.step()`. In PyTorch 1.1.0 and "
    "later, you should call them in the opposite order: `optimizer.step()` before "
    "`lr_scheduler.step()`.  Failure to do this will result in PyTorch skipping the first value "
    "of the learning rate schedule. See more details at "
    "https://pytorch.org/docs/stable/optim.html#how-to-adjust-learning-rate";
const char* const kGetLrOutside =
    "To get the last learning rate computed by the scheduler, please use `get_last_lr()`.";

// Python's floor division and modulo for integers (results follow the divisor's sign).
std::int64_t py_floordiv(std::int64_t a, std::int64_t b) {
  std::int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}
std::int64_t py_mod(std::int64_t a, std::int64_t b) {
  return a - b * py_floordiv(a, b);
}

}  // namespace

// ---- PerGroup ------------------------------------------------------------------------------

std::vector<double> PerGroup::expand(const Optimizer& opt, const std::string& name,
                                     const std::string& who) const {
  const std::size_t n = opt.param_groups().size();
  if (scalar) return std::vector<double>(n, values.at(0));
  TB_CHECK(values.size() == n, "[", who, "] ", name,
           " must have the same length as optimizer.param_groups. ", name, " has ", values.size(),
           " values, param_groups has ", n, ".");
  return values;
}

// ---- LRScheduler ---------------------------------------------------------------------------

LRScheduler::LRScheduler(Optimizer& opt, std::string name, std::int64_t last_epoch)
    : opt_(&opt), name_(std::move(name)) {
  auto& groups = opt.param_groups();
  if (last_epoch == -1) {
    for (auto& g : groups) {
      // copy_value clones a tensor LR, so initial_lr never aliases lr.
      if (!g.has("initial_lr")) g.options.emplace("initial_lr", copy_value(g.get("lr")));
    }
  } else {
    for (std::size_t i = 0; i < groups.size(); ++i) {
      TB_CHECK(groups[i].has("initial_lr"), "[", name_,
               "] param 'initial_lr' is not specified in param_groups[", i,
               "] when resuming scheduler with last_epoch >= 0 (last_epoch = ", last_epoch,
               "). This typically happens when the optimizer state was not loaded before the "
               "scheduler was constructed, or when last_epoch >= 0 is used for a fresh run.");
    }
  }
  for (const auto& g : groups)
    base_lrs_.push_back(g.number("initial_lr"));
  last_epoch_ = last_epoch;
  opt_steps_at_ctor_ = opt.step_count();
}

LRScheduler::LRScheduler(Optimizer& opt, std::string name, BareTag)
    : opt_(&opt), name_(std::move(name)), last_epoch_(0) {
  opt_steps_at_ctor_ = opt.step_count();
}

void LRScheduler::initial_step() {
  step_count_ = 0;
  is_initial_ = true;
  try {
    step();
  } catch (...) {
    is_initial_ = false;
    throw;
  }
  is_initial_ = false;
}

void LRScheduler::step() {
  step_impl(std::nullopt);
}

void LRScheduler::step_epoch(double epoch) {
  TB_CHECK(std::isfinite(epoch) && std::floor(epoch) == epoch, "[", name_,
           "] epoch must be a whole number, got ", epoch);
  step_impl(static_cast<std::int64_t>(epoch));
}

void LRScheduler::step_impl(std::optional<std::int64_t> epoch) {
  // PyTorch wraps optimizer.step() to notice a scheduler stepped first; the optimizer's step
  // counter tells the same here.
  if (step_count_ == 1 && opt_->step_count() == opt_steps_at_ctor_) warn(kStepOrder);
  ++step_count_;
  if (epoch) warn(kEpochDeprecation);
  update_lr(epoch);
}

void LRScheduler::update_lr(std::optional<std::int64_t> epoch) {
  std::vector<double> values;
  within_step_ = true;
  try {
    if (!epoch) {
      ++last_epoch_;
      values = compute_lr();
    } else {
      last_epoch_ = *epoch;
      auto closed = closed_form_lr();
      values = closed ? std::move(*closed) : compute_lr();
    }
  } catch (...) {
    within_step_ = false;
    throw;
  }
  within_step_ = false;
  write_lrs(values);
  refresh_last_lr();
}

std::vector<double> LRScheduler::get_lr() {
  if (!within_step_) warn(kGetLrOutside);
  return compute_lr();
}

std::vector<double> LRScheduler::current_lrs() const {
  std::vector<double> out;
  for (const auto& g : opt_->param_groups())
    out.push_back(g.number("lr"));
  return out;
}

void LRScheduler::write_lrs(const std::vector<double>& lrs) {
  auto& groups = opt_->param_groups();
  const std::size_t n = std::min(groups.size(), lrs.size());  // zip(), as PyTorch
  for (std::size_t i = 0; i < n; ++i)
    groups[i].update_value("lr", lrs[i]);
}

void LRScheduler::refresh_last_lr() {
  last_lr_.clear();
  for (const auto& g : opt_->param_groups())
    last_lr_.push_back(copy_value(g.get("lr")));
}

std::vector<HyperValue> LRScheduler::get_last_lr() const {
  std::vector<HyperValue> out;
  for (const auto& v : last_lr_)
    out.push_back(copy_value(v));
  return out;
}

std::vector<double> LRScheduler::last_lrs() const {
  std::vector<double> out;
  for (const auto& v : last_lr_)
    out.push_back(number_of(v, "lr"));
  return out;
}

void LRScheduler::save_base(json& j) const {
  j["base_lrs"] = nums_json(base_lrs_);
  j["last_epoch"] = last_epoch_;
  j["_step_count"] = step_count_;
  j["_is_initial"] = is_initial_;
  j["_get_lr_called_within_step"] = within_step_;
  json lr = json::array();
  json is_t = json::array();
  for (const auto& v : last_lr_) {
    lr.push_back(num_json(number_of(v, "lr")));
    is_t.push_back(std::holds_alternative<Tensor>(v));
  }
  j["_last_lr"] = lr;
  j["_last_lr_is_tensor"] = is_t;
}

void LRScheduler::load_base(const json& j) {
  load_if(j, "base_lrs", base_lrs_, nums_from, name_);
  load_if(j, "last_epoch", last_epoch_, int_from, name_);
  load_if(j, "_step_count", step_count_, int_from, name_);
  load_if(j, "_is_initial", is_initial_, bool_from, name_);
  load_if(j, "_get_lr_called_within_step", within_step_, bool_from, name_);
  if (j.contains("_last_lr")) {
    const auto lrs = nums_from(j.at("_last_lr"), name_, "_last_lr");
    std::vector<bool> is_t(lrs.size(), false);
    if (j.contains("_last_lr_is_tensor")) {
      const auto& f = j.at("_last_lr_is_tensor");
      if (!f.is_array() || f.size() != lrs.size())
        bad_key(name_, "_last_lr_is_tensor", "a list of flags as long as _last_lr");
      for (std::size_t i = 0; i < lrs.size(); ++i)
        is_t[i] = bool_from(f[i], name_, "_last_lr_is_tensor");
    }
    const auto& groups = opt_->param_groups();
    last_lr_.clear();
    for (std::size_t i = 0; i < lrs.size(); ++i) {
      const Tensor* live = i < groups.size() && groups[i].has("lr")
                               ? std::get_if<Tensor>(&groups[i].get("lr"))
                               : nullptr;
      if (is_t[i] && live != nullptr) {
        autograd::NoGradGuard no_grad;
        Tensor t = live->clone();
        t.fill_(lrs[i]);
        last_lr_.emplace_back(t);
      } else {
        last_lr_.emplace_back(lrs[i]);
      }
    }
  }
}

json LRScheduler::state_dict() const {
  json j = json::object();
  save_own(j);
  save_base(j);
  return j;
}

void LRScheduler::load_state_dict(const json& sd) {
  TB_CHECK(sd.is_object(), "[", name_, "] load_state_dict expects a JSON object");
  load_own(sd);
  load_base(sd);
}

// ---- LambdaLR / MultiplicativeLR -----------------------------------------------------------

LambdaLR::LambdaLR(Optimizer& opt, std::vector<LrLambda> lr_lambdas, bool one,
                   std::int64_t last_epoch, std::string name)
    : LRScheduler(opt, std::move(name), last_epoch) {
  const std::size_t n = opt.param_groups().size();
  if (one) {
    lambdas_.assign(n, lr_lambdas.at(0));
  } else {
    TB_CHECK(lr_lambdas.size() == n, "[", name_, "] Expected ", n, " lr_lambdas, but got ",
             lr_lambdas.size());
    lambdas_ = std::move(lr_lambdas);
  }
}

LambdaLR::LambdaLR(Optimizer& opt, LrLambda lr_lambda, std::int64_t last_epoch)
    : LambdaLR(opt, std::vector<LrLambda>{std::move(lr_lambda)}, true, last_epoch, "LambdaLR") {
  initial_step();
}

LambdaLR::LambdaLR(Optimizer& opt, std::vector<LrLambda> lr_lambdas, std::int64_t last_epoch)
    : LambdaLR(opt, std::move(lr_lambdas), false, last_epoch, "LambdaLR") {
  initial_step();
}

std::vector<double> LambdaLR::compute_lr() {
  std::vector<double> out;
  for (std::size_t i = 0; i < base_lrs_.size(); ++i)
    out.push_back(base_lrs_[i] * lambdas_[i](static_cast<double>(last_epoch_)));
  return out;
}

void LambdaLR::save_own(json& j) const {
  json a = json::array();
  for (const auto& l : lambdas_)
    a.push_back(l.is_expression() ? json(l.expression()) : json(nullptr));
  j["lr_lambdas"] = a;
}

void LambdaLR::load_own(const json& j) {
  if (!j.contains("lr_lambdas")) return;
  const auto& a = j.at("lr_lambdas");
  if (!a.is_array() || a.size() != lambdas_.size())
    bad_key(name_, "lr_lambdas", "a list with one entry (expression or null) per group");
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (a[i].is_string()) {
      lambdas_[i] = LrLambda(a[i].get<std::string>());
    } else if (!a[i].is_null()) {
      bad_key(name_, "lr_lambdas", "a list of expressions or nulls");
    }
  }
}

MultiplicativeLR::MultiplicativeLR(Optimizer& opt, LrLambda lr_lambda, std::int64_t last_epoch)
    : LambdaLR(opt, std::vector<LrLambda>{std::move(lr_lambda)}, true, last_epoch,
               "MultiplicativeLR") {
  initial_step();
}

MultiplicativeLR::MultiplicativeLR(Optimizer& opt, std::vector<LrLambda> lr_lambdas,
                                   std::int64_t last_epoch)
    : LambdaLR(opt, std::move(lr_lambdas), false, last_epoch, "MultiplicativeLR") {
  initial_step();
}

std::vector<double> MultiplicativeLR::compute_lr() {
  auto cur = current_lrs();
  if (is_initial_) return cur;
  for (std::size_t i = 0; i < cur.size(); ++i)
    cur[i] = cur[i] * lambdas_[i](static_cast<double>(last_epoch_));
  return cur;
}

// ---- StepLR --------------------------------------------------------------------------------

namespace {
Optimizer& check_positive(Optimizer& opt, const char* who, const char* field, std::int64_t v) {
  TB_CHECK(v > 0, "[", who, "] ", field, " must be a positive integer, got ", v);
  return opt;
}
}  // namespace

StepLR::StepLR(Optimizer& opt, std::int64_t step_size, double gamma, std::int64_t last_epoch)
    : LRScheduler(check_positive(opt, "StepLR", "step_size", step_size), "StepLR", last_epoch),
      step_size_(step_size),
      gamma_(gamma) {
  initial_step();
}

std::vector<double> StepLR::compute_lr() {
  auto cur = current_lrs();
  if (last_epoch_ == 0 || py_mod(last_epoch_, step_size_) != 0) return cur;
  for (auto& v : cur)
    v = v * gamma_;
  return cur;
}

std::optional<std::vector<double>> StepLR::closed_form_lr() {
  std::vector<double> out;
  for (double b : base_lrs_)
    out.push_back(b * std::pow(gamma_, static_cast<double>(py_floordiv(last_epoch_, step_size_))));
  return out;
}

void StepLR::save_own(json& j) const {
  j["step_size"] = step_size_;
  j["gamma"] = num_json(gamma_);
}

void StepLR::load_own(const json& j) {
  load_if(j, "step_size", step_size_, int_from, name_);
  load_if(j, "gamma", gamma_, num_from, name_);
  TB_CHECK(step_size_ > 0, "[StepLR] state_dict entry 'step_size' must be positive");
}

// ---- MultiStepLR ---------------------------------------------------------------------------

MultiStepLR::MultiStepLR(Optimizer& opt, std::vector<std::int64_t> milestones, double gamma,
                         std::int64_t last_epoch)
    : LRScheduler(opt, "MultiStepLR", last_epoch),
      milestones_(std::move(milestones)),
      gamma_(gamma) {
  std::sort(milestones_.begin(), milestones_.end());
  initial_step();
}

std::vector<double> MultiStepLR::compute_lr() {
  auto cur = current_lrs();
  const auto count = std::count(milestones_.begin(), milestones_.end(), last_epoch_);
  if (count == 0) return cur;
  for (auto& v : cur)
    v = v * std::pow(gamma_, static_cast<double>(count));
  return cur;
}

std::optional<std::vector<double>> MultiStepLR::closed_form_lr() {
  const auto k =
      std::upper_bound(milestones_.begin(), milestones_.end(), last_epoch_) - milestones_.begin();
  std::vector<double> out;
  for (double b : base_lrs_)
    out.push_back(b * std::pow(gamma_, static_cast<double>(k)));
  return out;
}

void MultiStepLR::save_own(json& j) const {
  j["milestones"] = milestones_;  // sorted, with multiplicity (PyTorch: a Counter)
  j["gamma"] = num_json(gamma_);
}

void MultiStepLR::load_own(const json& j) {
  if (j.contains("milestones")) {
    milestones_ = ints_from(j.at("milestones"), name_, "milestones");
    std::sort(milestones_.begin(), milestones_.end());
  }
  load_if(j, "gamma", gamma_, num_from, name_);
}

// ---- ConstantLR ----------------------------------------------------------------------------

namespace {
Optimizer& check_constant(Optimizer& opt, double factor) {
  TB_CHECK(!(factor > 1.0 || factor < 0.0),
           "[ConstantLR] Constant multiplicative factor expected to be between 0 and 1. (factor "
           "= ",
           factor, ")");
  return opt;
}
}  // namespace

ConstantLR::ConstantLR(Optimizer& opt, double factor, std::int64_t total_iters,
                       std::int64_t last_epoch)
    : LRScheduler(check_constant(opt, factor), "ConstantLR", last_epoch),
      factor_(factor),
      total_iters_(total_iters) {
  initial_step();
}

std::vector<double> ConstantLR::compute_lr() {
  auto cur = current_lrs();
  if (last_epoch_ == 0) {
    for (auto& v : cur)
      v = v * factor_;
    return cur;
  }
  if (last_epoch_ != total_iters_) return cur;
  for (auto& v : cur)
    v = v * (1.0 / factor_);
  return cur;
}

std::optional<std::vector<double>> ConstantLR::closed_form_lr() {
  std::vector<double> out;
  const double past = last_epoch_ >= total_iters_ ? 1.0 : 0.0;
  for (double b : base_lrs_)
    out.push_back(b * (factor_ + past * (1 - factor_)));
  return out;
}

void ConstantLR::save_own(json& j) const {
  j["factor"] = num_json(factor_);
  j["total_iters"] = total_iters_;
}

void ConstantLR::load_own(const json& j) {
  load_if(j, "factor", factor_, num_from, name_);
  load_if(j, "total_iters", total_iters_, int_from, name_);
}

// ---- LinearLR ------------------------------------------------------------------------------

namespace {
Optimizer& check_linear(Optimizer& opt, double start, double end) {
  TB_CHECK(!(start > 1.0 || start <= 0.0),
           "[LinearLR] Starting multiplicative factor expected to be greater than 0 and less or "
           "equal to 1. (start_factor = ",
           start, ")");
  TB_CHECK(!(end > 1.0 || end < 0.0),
           "[LinearLR] Ending multiplicative factor expected to be between 0 and 1. (end_factor "
           "= ",
           end, ")");
  return opt;
}
}  // namespace

LinearLR::LinearLR(Optimizer& opt, double start_factor, double end_factor, std::int64_t total_iters,
                   std::int64_t last_epoch)
    : LRScheduler(check_linear(opt, start_factor, end_factor), "LinearLR", last_epoch),
      start_factor_(start_factor),
      end_factor_(end_factor),
      total_iters_(total_iters) {
  TB_CHECK(total_iters >= 0, "[LinearLR] total_iters must be >= 0, got ", total_iters);
  initial_step();
}

std::vector<double> LinearLR::compute_lr() {
  auto cur = current_lrs();
  if (last_epoch_ == 0) {
    for (auto& v : cur)
      v = v * start_factor_;
    return cur;
  }
  if (is_initial_ || last_epoch_ > total_iters_) return cur;
  const double d = end_factor_ - start_factor_;
  const double f = 1.0 + d / (static_cast<double>(total_iters_) * start_factor_ +
                              static_cast<double>(last_epoch_ - 1) * d);
  for (auto& v : cur)
    v = v * f;
  return cur;
}

std::optional<std::vector<double>> LinearLR::closed_form_lr() {
  TB_CHECK(total_iters_ > 0,
           "[LinearLR] the closed form (step with an epoch) divides by total_iters, which is 0");
  std::vector<double> out;
  const double m = static_cast<double>(std::min(total_iters_, last_epoch_));
  for (double b : base_lrs_)
    out.push_back(b * (start_factor_ +
                       (end_factor_ - start_factor_) * m / static_cast<double>(total_iters_)));
  return out;
}

void LinearLR::save_own(json& j) const {
  j["start_factor"] = num_json(start_factor_);
  j["end_factor"] = num_json(end_factor_);
  j["total_iters"] = total_iters_;
}

void LinearLR::load_own(const json& j) {
  load_if(j, "start_factor", start_factor_, num_from, name_);
  load_if(j, "end_factor", end_factor_, num_from, name_);
  load_if(j, "total_iters", total_iters_, int_from, name_);
}

// ---- ExponentialLR -------------------------------------------------------------------------

ExponentialLR::ExponentialLR(Optimizer& opt, double gamma, std::int64_t last_epoch)
    : LRScheduler(opt, "ExponentialLR", last_epoch), gamma_(gamma) {
  initial_step();
}

std::vector<double> ExponentialLR::compute_lr() {
  auto cur = current_lrs();
  if (is_initial_) return cur;
  for (auto& v : cur)
    v = v * gamma_;
  return cur;
}

std::optional<std::vector<double>> ExponentialLR::closed_form_lr() {
  std::vector<double> out;
  for (double b : base_lrs_)
    out.push_back(b * std::pow(gamma_, static_cast<double>(last_epoch_)));
  return out;
}

void ExponentialLR::save_own(json& j) const {
  j["gamma"] = num_json(gamma_);
}

void ExponentialLR::load_own(const json& j) {
  load_if(j, "gamma", gamma_, num_from, name_);
}

// ---- PolynomialLR --------------------------------------------------------------------------

PolynomialLR::PolynomialLR(Optimizer& opt, std::int64_t total_iters, double power,
                           std::int64_t last_epoch)
    : LRScheduler(check_positive(opt, "PolynomialLR", "total_iters", total_iters), "PolynomialLR",
                  last_epoch),
      total_iters_(total_iters),
      power_(power) {
  initial_step();
}

std::vector<double> PolynomialLR::compute_lr() {
  auto cur = current_lrs();
  if (is_initial_ || last_epoch_ > total_iters_) return cur;
  const double t = static_cast<double>(total_iters_);
  const double e = static_cast<double>(last_epoch_);
  const double f = std::pow((1.0 - e / t) / (1.0 - (e - 1) / t), power_);
  for (auto& v : cur)
    v = v * f;
  return cur;
}

std::optional<std::vector<double>> PolynomialLR::closed_form_lr() {
  std::vector<double> out;
  const double t = static_cast<double>(total_iters_);
  const double m = static_cast<double>(std::min(total_iters_, last_epoch_));
  for (double b : base_lrs_)
    out.push_back(b * std::pow(1.0 - m / t, power_));
  return out;
}

void PolynomialLR::save_own(json& j) const {
  j["total_iters"] = total_iters_;
  j["power"] = num_json(power_);
}

void PolynomialLR::load_own(const json& j) {
  load_if(j, "total_iters", total_iters_, int_from, name_);
  load_if(j, "power", power_, num_from, name_);
}

// ---- CosineAnnealingLR ---------------------------------------------------------------------

CosineAnnealingLR::CosineAnnealingLR(Optimizer& opt, std::int64_t T_max, double eta_min,
                                     std::int64_t last_epoch)
    : LRScheduler(check_positive(opt, "CosineAnnealingLR", "T_max", T_max), "CosineAnnealingLR",
                  last_epoch),
      t_max_(T_max),
      eta_min_(eta_min) {
  initial_step();
}

std::vector<double> CosineAnnealingLR::compute_lr() {
  auto cur = current_lrs();
  if (is_initial_) return cur;
  const double e = static_cast<double>(last_epoch_);
  const double tm = static_cast<double>(t_max_);
  if (step_count_ == 1 && last_epoch_ > 0) {
    for (std::size_t i = 0; i < cur.size(); ++i)
      cur[i] = eta_min_ + (base_lrs_[i] - eta_min_) * (1 + std::cos(e * kPi / tm)) / 2;
    return cur;
  }
  if (py_mod(last_epoch_ - 1 - t_max_, 2 * t_max_) == 0) {
    for (std::size_t i = 0; i < cur.size(); ++i)
      cur[i] = cur[i] + (base_lrs_[i] - eta_min_) * (1 - std::cos(kPi / tm)) / 2;
    return cur;
  }
  const double ratio = (1 + std::cos(kPi * e / tm)) / (1 + std::cos(kPi * (e - 1) / tm));
  for (auto& v : cur)
    v = ratio * (v - eta_min_) + eta_min_;
  return cur;
}

std::optional<std::vector<double>> CosineAnnealingLR::closed_form_lr() {
  std::vector<double> out;
  const double e = static_cast<double>(last_epoch_);
  for (double b : base_lrs_)
    out.push_back(eta_min_ +
                  (b - eta_min_) * (1 + std::cos(kPi * e / static_cast<double>(t_max_))) / 2);
  return out;
}

void CosineAnnealingLR::save_own(json& j) const {
  j["T_max"] = t_max_;
  j["eta_min"] = num_json(eta_min_);
}

void CosineAnnealingLR::load_own(const json& j) {
  load_if(j, "T_max", t_max_, int_from, name_);
  load_if(j, "eta_min", eta_min_, num_from, name_);
}

// ---- CosineAnnealingWarmRestarts -----------------------------------------------------------

namespace {
Optimizer& check_warm_restarts(Optimizer& opt, std::int64_t t0, std::int64_t tmult) {
  TB_CHECK(t0 > 0, "[CosineAnnealingWarmRestarts] Expected positive integer T_0, but got ", t0);
  TB_CHECK(tmult >= 1, "[CosineAnnealingWarmRestarts] Expected integer T_mult >= 1, but got ",
           tmult);
  return opt;
}
}  // namespace

CosineAnnealingWarmRestarts::CosineAnnealingWarmRestarts(Optimizer& opt, std::int64_t T_0,
                                                         std::int64_t T_mult, double eta_min,
                                                         std::int64_t last_epoch)
    : LRScheduler(check_warm_restarts(opt, T_0, T_mult), "CosineAnnealingWarmRestarts", last_epoch),
      t_0_(T_0),
      t_i_(T_0),
      t_mult_(T_mult),
      eta_min_(eta_min),
      t_cur_(static_cast<double>(last_epoch)) {
  initial_step();
}

void CosineAnnealingWarmRestarts::step() {
  step_to(std::nullopt);
}

void CosineAnnealingWarmRestarts::step_epoch(double epoch) {
  step_to(epoch);
}

void CosineAnnealingWarmRestarts::step_to(std::optional<double> epoch) {
  if (!epoch && last_epoch_ < 0) epoch = 0.0;
  double e = 0.0;
  if (!epoch) {
    e = static_cast<double>(last_epoch_ + 1);
    t_cur_ = t_cur_ + 1;
    if (t_cur_ >= static_cast<double>(t_i_)) {
      t_cur_ = std::fmod(t_cur_, static_cast<double>(t_i_));
      t_i_ = t_i_ * t_mult_;
    }
  } else {
    e = *epoch;
    TB_CHECK(e >= 0, "[", name_, "] Expected non-negative epoch, but got ", e);
    const double t0 = static_cast<double>(t_0_);
    if (e >= t0) {
      if (t_mult_ == 1) {
        t_cur_ = std::fmod(e, t0);
      } else {
        const double tm = static_cast<double>(t_mult_);
        const auto n = static_cast<std::int64_t>(std::log(e / t0 * (tm - 1) + 1) / std::log(tm));
        const double pw = std::pow(tm, static_cast<double>(n));
        t_cur_ = e - t0 * (pw - 1) / (tm - 1);
        t_i_ = t_0_ * static_cast<std::int64_t>(pw);
      }
    } else {
      t_i_ = t_0_;
      t_cur_ = e;
    }
  }
  last_epoch_ = static_cast<std::int64_t>(std::floor(e));
  std::vector<double> values;
  within_step_ = true;
  try {
    values = compute_lr();
  } catch (...) {
    within_step_ = false;
    throw;
  }
  within_step_ = false;
  write_lrs(values);
  refresh_last_lr();
}

std::vector<double> CosineAnnealingWarmRestarts::compute_lr() {
  std::vector<double> out;
  for (double b : base_lrs_)
    out.push_back(eta_min_ +
                  (b - eta_min_) * (1 + std::cos(kPi * t_cur_ / static_cast<double>(t_i_))) / 2);
  return out;
}

void CosineAnnealingWarmRestarts::save_own(json& j) const {
  j["T_0"] = t_0_;
  j["T_i"] = t_i_;
  j["T_mult"] = t_mult_;
  j["eta_min"] = num_json(eta_min_);
  j["T_cur"] = num_json(t_cur_);
}

void CosineAnnealingWarmRestarts::load_own(const json& j) {
  load_if(j, "T_0", t_0_, int_from, name_);
  load_if(j, "T_i", t_i_, int_from, name_);
  load_if(j, "T_mult", t_mult_, int_from, name_);
  load_if(j, "eta_min", eta_min_, num_from, name_);
  load_if(j, "T_cur", t_cur_, num_from, name_);
}

}  // namespace tb::sched
