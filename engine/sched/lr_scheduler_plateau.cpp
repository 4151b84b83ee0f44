// ReduceLROnPlateau (torch/optim/lr_scheduler.py): reduces the LRs when a metric stops improving
// (mode, threshold, patience, cooldown, min_lr, eps), and its state_dict.
#include "engine/sched/lr_scheduler.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "engine/core/error.h"
#include "engine/sched/lr_scheduler_internal.h"

namespace tb::sched {

using namespace internal;  // NOLINT(google-build-using-namespace): this folder's helpers

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
