// The schedulers made of other schedulers: SequentialLR (one child after another at given
// milestones) and ChainedScheduler (every child each step), with their children's state_dicts
// (torch/optim/lr_scheduler.py).
#include "engine/sched/lr_scheduler.h"

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "engine/core/error.h"
#include "engine/sched/lr_scheduler_internal.h"

namespace tb::sched {

using namespace internal;  // NOLINT(google-build-using-namespace): this folder's helpers

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

}  // namespace tb::sched
