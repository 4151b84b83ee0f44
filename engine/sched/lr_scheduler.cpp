#include "engine/sched/lr_scheduler.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numbers>

#include "engine/autograd/autograd.h"
#include "engine/core/error.h"

namespace tb::sched {

namespace {

using nlohmann::json;

constexpr double kPi = std::numbers::pi;

const char* const kEpochDeprecation =
    "The epoch parameter in `scheduler.step()` was not necessary and is being deprecated where "
    "possible. Please use `scheduler.step()` to step the scheduler. During the deprecation, if "
    "epoch is different from None, the closed form is used instead of the new chainable form, "
    "where available. Please open an issue if you are unable to replicate your use case: "
    "https://github.com/pytorch/pytorch/issues/new/choose.";
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

// Numbers in JSON; non-finite values as strings (JSON has no inf/nan).
json num_json(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  return v;
}
json nums_json(const std::vector<double>& v) {
  json a = json::array();
  for (double x : v)
    a.push_back(num_json(x));
  return a;
}

[[noreturn]] void bad_key(const std::string& who, const std::string& key, const char* what) {
  throw ValueError(detail::str_cat("[", who, "] state_dict entry '", key, "' must be ", what));
}

double num_from(const json& v, const std::string& who, const std::string& key) {
  if (v.is_number()) return v.get<double>();
  if (v.is_string()) {
    const auto s = v.get<std::string>();
    if (s == "inf") return std::numeric_limits<double>::infinity();
    if (s == "-inf") return -std::numeric_limits<double>::infinity();
    if (s == "nan") return std::numeric_limits<double>::quiet_NaN();
  }
  bad_key(who, key, "a number");
}
std::int64_t int_from(const json& v, const std::string& who, const std::string& key) {
  if (!v.is_number_integer()) bad_key(who, key, "an integer");
  return v.get<std::int64_t>();
}
bool bool_from(const json& v, const std::string& who, const std::string& key) {
  if (!v.is_boolean()) bad_key(who, key, "true or false");
  return v.get<bool>();
}
std::string str_from(const json& v, const std::string& who, const std::string& key) {
  if (!v.is_string()) bad_key(who, key, "a string");
  return v.get<std::string>();
}
std::vector<double> nums_from(const json& v, const std::string& who, const std::string& key) {
  if (!v.is_array()) bad_key(who, key, "a list of numbers");
  std::vector<double> out;
  for (const auto& x : v)
    out.push_back(num_from(x, who, key));
  return out;
}
std::vector<std::int64_t> ints_from(const json& v, const std::string& who, const std::string& key) {
  if (!v.is_array()) bad_key(who, key, "a list of integers");
  std::vector<std::int64_t> out;
  for (const auto& x : v)
    out.push_back(int_from(x, who, key));
  return out;
}

// Loads `key` into `dst` when present.
template <typename T, typename F>
void load_if(const json& j, const std::string& key, T& dst, F conv, const std::string& who) {
  auto it = j.find(key);
  if (it != j.end()) dst = conv(*it, who, key);
}

bool defaults_have(const Optimizer& opt, const char* key) {
  return opt.defaults().count(key) != 0;
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
  if (o.cycle_momentum) {
    TB_CHECK(defaults_have(opt, "momentum") || defaults_have(opt, "beta1"), "[CyclicLR] ",
             kNoMomentum);
    const auto basem = o.base_momentum.expand(opt, "base_momentum", "CyclicLR");
    const auto maxm = o.max_momentum.expand(opt, "max_momentum", "CyclicLR");
    if (o.last_epoch == -1) set_momentum_bounds(opt, maxm, basem);
  }
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
  if (o.cycle_momentum) {
    TB_CHECK(defaults_have(opt, "momentum") || defaults_have(opt, "beta1"), "[OneCycleLR] ",
             kNoMomentum);
    const auto maxm = o.max_momentum.expand(opt, "max_momentum", "OneCycleLR");
    const auto basem = o.base_momentum.expand(opt, "base_momentum", "OneCycleLR");
    if (o.last_epoch == -1) set_momentum_bounds(opt, maxm, basem);
  }
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

// ---- SequentialLR / ChainedScheduler -------------------------------------------------------

namespace {
void check_children(const std::string& who, const Optimizer& opt,
                    const std::vector<std::shared_ptr<LRScheduler>>& s) {
  TB_CHECK(!s.empty(), "[", who, "] ", who,
           " expects at least one scheduler, but got no scheduler.");
  for (std::size_t i = 0; i < s.size(); ++i) {
    TB_CHECK_T(TypeError, s[i] != nullptr, "[", who, "] ", who, " at index ", i,
               " should have `optimizer` as its attribute (got a null scheduler).");
    TB_CHECK(dynamic_cast<const ReduceLROnPlateau*>(s[i].get()) == nullptr, "[", who, "] ", who,
             " does not support `ReduceLROnPlateau` scheduler as it requires additional kwargs "
             "to be specified when calling `step`, but got one at index ",
             i, " in the given schedulers sequence.");
    TB_CHECK(&s[i]->optimizer() == &opt, "[", who, "] ", who,
             " expects all schedulers to belong to the same optimizer, but got scheduler ",
             s[i]->name(), " at index ", i, " has ", s[i]->optimizer().name(),
             ", which is different from ", opt.name(), ".");
  }
}

json children_state(const std::vector<std::shared_ptr<LRScheduler>>& s) {
  json a = json::array();
  for (const auto& c : s)
    a.push_back(c->state_dict());
  return a;
}

void load_children(const std::string& who, const json& sd,
                   const std::vector<std::shared_ptr<LRScheduler>>& s) {
  if (!sd.contains("_schedulers")) return;
  const auto& a = sd.at("_schedulers");
  TB_CHECK(a.is_array() && a.size() == s.size(), "[", who,
           "] state_dict entry '_schedulers' must be a list of ", s.size(), " scheduler states");
  for (std::size_t i = 0; i < s.size(); ++i)
    s[i]->load_state_dict(a[i]);
}
}  // namespace

SequentialLR::SequentialLR(Optimizer& opt, std::vector<std::shared_ptr<LRScheduler>> schedulers,
                           std::vector<std::int64_t> milestones, std::int64_t last_epoch)
    : LRScheduler(opt, "SequentialLR", BareTag{}),
      schedulers_(std::move(schedulers)),
      milestones_(std::move(milestones)) {
  check_children(name_, opt, schedulers_);
  TB_CHECK(milestones_.size() + 1 == schedulers_.size(),
           "[SequentialLR] Sequential Schedulers expects number of schedulers provided to be one "
           "more than the number of milestone points, but got number of schedulers ",
           schedulers_.size(), " and the number of milestones to be equal to ", milestones_.size());
  last_epoch_ = last_epoch + 1;
  // Reset to initial_lr without aliasing it (a tensor LR is filled in place, issue 162359).
  for (auto& g : opt.param_groups())
    g.update_value("lr", g.number("initial_lr"));
  undo_epoch();
  schedulers_[0]->initial_step();
  last_lr_ = schedulers_[0]->get_last_lr();
}

void SequentialLR::undo_epoch() {
  for (auto& s : schedulers_)
    s->undo_epoch();
}

void SequentialLR::step() {
  ++last_epoch_;
  const auto idx = static_cast<std::size_t>(
      std::upper_bound(milestones_.begin(), milestones_.end(), last_epoch_) - milestones_.begin());
  LRScheduler& s = *schedulers_[idx];
  if (idx > 0 && milestones_[idx - 1] == last_epoch_) {
    s.update_lr(0);
  } else {
    s.step();
  }
  last_lr_ = s.get_last_lr();
}

void SequentialLR::step_epoch(double epoch) {
  throw ValueError(detail::str_cat("[SequentialLR] step() takes no epoch (got ", epoch, ")"));
}

json SequentialLR::state_dict() const {
  json j = json::object();
  json full = json::object();
  save_base(full);
  j["_milestones"] = milestones_;
  j["last_epoch"] = last_epoch_;
  j["_last_lr"] = full["_last_lr"];
  j["_last_lr_is_tensor"] = full["_last_lr_is_tensor"];
  j["_schedulers"] = children_state(schedulers_);
  return j;
}

void SequentialLR::load_state_dict(const json& sd) {
  TB_CHECK(sd.is_object(), "[", name_, "] load_state_dict expects a JSON object");
  load_if(sd, "_milestones", milestones_, ints_from, name_);
  load_base(sd);
  load_children(name_, sd, schedulers_);
}

Optimizer& ChainedScheduler::pick(const std::vector<std::shared_ptr<LRScheduler>>& s,
                                  Optimizer* opt) {
  if (opt != nullptr) return *opt;
  TB_CHECK(!s.empty(),
           "[ChainedScheduler] ChainedScheduler expects at least one scheduler, but got no "
           "scheduler.");
  TB_CHECK_T(TypeError, s[0] != nullptr,
             "[ChainedScheduler] ChainedScheduler at index 0 should have `optimizer` as its "
             "attribute (got a null scheduler).");
  return s[0]->optimizer();
}

ChainedScheduler::ChainedScheduler(std::vector<std::shared_ptr<LRScheduler>> schedulers,
                                   Optimizer* opt)
    : LRScheduler(pick(schedulers, opt), "ChainedScheduler", BareTag{}),
      schedulers_(std::move(schedulers)) {
  check_children(name_, *opt_, schedulers_);
  refresh_last_lr();
}

void ChainedScheduler::undo_epoch() {
  for (auto& s : schedulers_)
    s->undo_epoch();
}

void ChainedScheduler::step() {
  for (auto& s : schedulers_)
    s->step();
  refresh_last_lr();
}

void ChainedScheduler::step_epoch(double epoch) {
  throw ValueError(detail::str_cat("[ChainedScheduler] step() takes no epoch (got ", epoch, ")"));
}

json ChainedScheduler::state_dict() const {
  json j = json::object();
  json full = json::object();
  save_base(full);
  j["_last_lr"] = full["_last_lr"];
  j["_last_lr_is_tensor"] = full["_last_lr_is_tensor"];
  j["_schedulers"] = children_state(schedulers_);
  return j;
}

void ChainedScheduler::load_state_dict(const json& sd) {
  TB_CHECK(sd.is_object(), "[", name_, "] load_state_dict expects a JSON object");
  load_base(sd);
  load_children(name_, sd, schedulers_);
}

// ---- ReduceLROnPlateau ---------------------------------------------------------------------

ReduceLROnPlateau::ReduceLROnPlateau(Optimizer& opt, ReduceLROnPlateauOptions o)
    : LRScheduler(opt, "ReduceLROnPlateau", BareTag{}) {
  TB_CHECK(o.factor < 1.0, "[ReduceLROnPlateau] Factor should be < 1.0. (factor = ", o.factor, ")");
  factor_ = o.factor;
  const std::size_t n = opt.param_groups().size();
  if (!o.min_lr.scalar) {
    TB_CHECK(o.min_lr.values.size() == n, "[ReduceLROnPlateau] expected ", n, " min_lrs, got ",
             o.min_lr.values.size());
    default_min_lr_.reset();
    min_lrs_ = o.min_lr.values;
  } else {
    default_min_lr_ = o.min_lr.values.at(0);
    min_lrs_.assign(n, *default_min_lr_);
  }
  patience_ = o.patience;
  cooldown_ = o.cooldown;
  eps_ = o.eps;
  last_epoch_ = 0;
  refresh_last_lr();
  init_is_better(o.mode, o.threshold, o.threshold_mode);
  best_ = mode_worse_;
  cooldown_counter_ = 0;
  num_bad_epochs_ = 0;
}

void ReduceLROnPlateau::init_is_better(const std::string& mode, double threshold,
                                       const std::string& tmode) {
  TB_CHECK(mode == "min" || mode == "max", "[ReduceLROnPlateau] mode ", mode, " is unknown!");
  TB_CHECK(tmode == "rel" || tmode == "abs", "[ReduceLROnPlateau] threshold mode ", tmode,
           " is unknown!");
  const double inf = std::numeric_limits<double>::infinity();
  mode_worse_ = mode == "min" ? inf : -inf;
  mode_ = mode;
  threshold_ = threshold;
  threshold_mode_ = tmode;
}

bool ReduceLROnPlateau::is_better(double a, double best) const {
  if (mode_ == "min" && threshold_mode_ == "rel") return a < best * (1.0 - threshold_);
  if (mode_ == "min") return a < best - threshold_;
  if (threshold_mode_ == "rel") return a > best * (threshold_ + 1.0);
  return a > best + threshold_;
}

void ReduceLROnPlateau::step() {
  throw ValueError("[ReduceLROnPlateau] step() needs the metric: call step(metrics)");
}

void ReduceLROnPlateau::step_epoch(double epoch) {
  throw ValueError(detail::str_cat(
      "[ReduceLROnPlateau] step() needs the metric: call step(metrics, epoch) (epoch ", epoch,
      ")"));
}

void ReduceLROnPlateau::step(double metrics) {
  step_metric(metrics, std::nullopt);
}

void ReduceLROnPlateau::step(double metrics, std::int64_t epoch) {
  step_metric(metrics, epoch);
}

void ReduceLROnPlateau::step_metric(double metrics, std::optional<std::int64_t> epoch) {
  const double current = metrics;
  if (!epoch) {
    epoch = last_epoch_ + 1;
  } else {
    warn(kEpochDeprecation);
  }
  last_epoch_ = *epoch;
  if (is_better(current, best_)) {
    best_ = current;
    num_bad_epochs_ = 0;
  } else {
    ++num_bad_epochs_;
  }
  if (cooldown_counter_ > 0) {
    --cooldown_counter_;
    num_bad_epochs_ = 0;
  }
  if (num_bad_epochs_ > patience_) {
    reduce_lr();
    cooldown_counter_ = cooldown_;
    num_bad_epochs_ = 0;
  }
  refresh_last_lr();
}

void ReduceLROnPlateau::reduce_lr() {
  auto& groups = opt_->param_groups();
  if (min_lrs_.size() != groups.size()) {
    TB_CHECK(default_min_lr_.has_value(),
             "[ReduceLROnPlateau] The number of param groups in the "
             "`optimizer` (",
             groups.size(),
             ") differs from when `ReduceLROnPlateau` was "
             "initialized (",
             min_lrs_.size(),
             "), usually due to a new param group being added "
             "to the optimizer. Please modify the `min_lrs` field to match the length of the "
             "`optimizer` param groups.");
    min_lrs_.assign(groups.size(), *default_min_lr_);
  }
  for (std::size_t i = 0; i < groups.size(); ++i) {
    const double old_lr = groups[i].number("lr");
    const double new_lr = std::max(old_lr * factor_, min_lrs_[i]);
    // A tensor LR stays a tensor and is filled in place (issue 163093).
    if (old_lr - new_lr > eps_) groups[i].update_value("lr", new_lr);
  }
}

json ReduceLROnPlateau::state_dict() const {
  json full = json::object();
  save_base(full);
  json j = json::object();
  j["factor"] = num_json(factor_);
  j["default_min_lr"] = default_min_lr_ ? num_json(*default_min_lr_) : json(nullptr);
  j["min_lrs"] = nums_json(min_lrs_);
  j["patience"] = patience_;
  j["cooldown"] = cooldown_;
  j["eps"] = num_json(eps_);
  j["last_epoch"] = last_epoch_;
  j["_last_lr"] = full["_last_lr"];
  j["_last_lr_is_tensor"] = full["_last_lr_is_tensor"];
  j["mode_worse"] = num_json(mode_worse_);
  j["mode"] = mode_;
  j["threshold"] = num_json(threshold_);
  j["threshold_mode"] = threshold_mode_;
  j["best"] = num_json(best_);
  j["cooldown_counter"] = cooldown_counter_;
  j["num_bad_epochs"] = num_bad_epochs_;
  return j;
}

void ReduceLROnPlateau::load_state_dict(const json& sd) {
  TB_CHECK(sd.is_object(), "[", name_, "] load_state_dict expects a JSON object");
  load_if(sd, "factor", factor_, num_from, name_);
  if (sd.contains("default_min_lr")) {
    if (sd.at("default_min_lr").is_null()) {
      default_min_lr_.reset();
    } else {
      default_min_lr_ = num_from(sd.at("default_min_lr"), name_, "default_min_lr");
    }
  }
  load_if(sd, "min_lrs", min_lrs_, nums_from, name_);
  load_if(sd, "patience", patience_, int_from, name_);
  load_if(sd, "cooldown", cooldown_, int_from, name_);
  load_if(sd, "eps", eps_, num_from, name_);
  load_if(sd, "mode", mode_, str_from, name_);
  load_if(sd, "threshold", threshold_, num_from, name_);
  load_if(sd, "threshold_mode", threshold_mode_, str_from, name_);
  load_if(sd, "best", best_, num_from, name_);
  load_if(sd, "cooldown_counter", cooldown_counter_, int_from, name_);
  load_if(sd, "num_bad_epochs", num_bad_epochs_, int_from, name_);
  load_base(sd);
  init_is_better(mode_, threshold_, threshold_mode_);
}

}  // namespace tb::sched
