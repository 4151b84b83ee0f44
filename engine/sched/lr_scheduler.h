// Learning-rate schedulers: PyTorch's torch.optim.lr_scheduler (torch/optim/lr_scheduler.py;
// SWALR from torch/optim/swa_utils.py; see
// https://pytorch.org/docs/stable/optim.html#how-to-adjust-learning-rate), value for value.
// A scheduler is constructed on an Optimizer and writes each group's "lr" (and, for
// CyclicLR/OneCycleLR, "momentum" or "beta1").
//
// Semantics kept from PyTorch:
// * Construction performs one step (the "initial step", with is_initial() true while it runs):
//   a fresh scheduler ends construction with last_epoch() == 0 and the epoch-0 LR in the groups.
// * step() uses the recursive (chainable) form; step_epoch(e) sets last_epoch = e and uses the
//   closed form where the class has one (and records the deprecation warning).
// * A tensor LR is a mutable cell: schedulers fill it in place (ParamGroup::update_value) and
//   never alias it; get_last_lr() returns copies (tensors cloned).
//
// Warnings (PyTorch's UserWarnings) are not printed: each scheduler collects them, in order, in
// warnings() (clear with clear_warnings()).
//
// state_dict() is a JSON object with PyTorch's attribute names (base_lrs, last_epoch,
// _step_count, _is_initial, _get_lr_called_within_step, _last_lr, plus each class's own). Tensor
// values are stored as numbers; "_last_lr_is_tensor" (one flag per group) says which of
// _last_lr were tensors, and loading rebuilds those as clones of the group's live tensor holding
// the saved value. Non-finite numbers are stored as the strings "inf", "-inf" and "nan".
// load_state_dict() updates only the keys present (Python's __dict__.update) and never touches
// the optimizer's groups.
#pragma once

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "engine/optim/optimizer.h"
#include "engine/sched/lr_lambda_expr.h"

namespace tb::sched {

// Schedulers act on the optimizer's param groups (engine/optim).
using core::Tensor;
using optim::copy_value;
using optim::HyperMap;
using optim::HyperValue;
using optim::number_of;
using optim::Optimizer;
using optim::ParamGroup;

/// A hyper-parameter given once for every group (a number) or per group (a list whose length
/// must equal the number of groups; PyTorch's _format_param).
struct PerGroup {
  /// The same value for every group.
  PerGroup(double v) : values{v}, scalar(true) {}  // NOLINT(google-explicit-constructor)
  /// One value per group.
  PerGroup(std::vector<double> v)  // NOLINT(google-explicit-constructor)
      : values(std::move(v)), scalar(false) {}
  /// One value per group.
  PerGroup(std::initializer_list<double> v) : values(v), scalar(false) {}
  /// Values per group for `opt`; throws tb::ValueError "[who] {name} must have the same length
  /// as optimizer.param_groups. {name} has {n} values, param_groups has {m}."
  std::vector<double> expand(const Optimizer& opt, const std::string& name,
                             const std::string& who) const;

  std::vector<double> values;  ///< the value (scalar) or the values (per group)
  bool scalar;                 ///< true when one value serves every group
};

/// Base of every scheduler (PyTorch's LRScheduler).
class LRScheduler {
 public:
  virtual ~LRScheduler() = default;
  LRScheduler(const LRScheduler&) = delete;
  LRScheduler& operator=(const LRScheduler&) = delete;

  /// The class name, e.g. "StepLR" (used in messages and state_dict).
  const std::string& name() const { return name_; }
  /// The optimizer whose groups this scheduler writes.
  Optimizer& optimizer() const { return *opt_; }

  /// Advances one epoch with the recursive form and writes the new LRs.
  virtual void step();
  /// PyTorch's step(epoch): sets last_epoch = `epoch` and uses the closed form where the class
  /// has one (else the recursive form); records the deprecation warning. `epoch` must be a whole
  /// number except for CosineAnnealingWarmRestarts.
  virtual void step_epoch(double epoch);

  /// The LRs written by the last step, as copies (a tensor LR is cloned).
  std::vector<HyperValue> get_last_lr() const;
  /// The LRs written by the last step, as numbers.
  std::vector<double> last_lrs() const;
  /// The recursive form's values for the current epoch without writing them; warns (as PyTorch
  /// does) that get_last_lr() is the way to read the last LR.
  std::vector<double> get_lr();

  /// The epoch counter (0 after construction of a fresh scheduler).
  std::int64_t last_epoch() const { return last_epoch_; }
  /// The base LRs (each group's initial_lr at construction, or the class's own).
  const std::vector<double>& base_lrs() const { return base_lrs_; }
  /// How many times step() ran, the construction step included.
  std::int64_t step_count() const { return step_count_; }
  /// True only while the construction-time step runs (LRScheduler._is_initial, PR 149312).
  bool is_initial() const { return is_initial_; }

  /// The scheduler's state (see the header comment for the layout).
  virtual nlohmann::json state_dict() const;
  /// Restores the keys present in `sd`; throws tb::ValueError naming a key of the wrong type.
  virtual void load_state_dict(const nlohmann::json& sd);

  /// Warnings recorded so far (oldest first).
  const std::vector<std::string>& warnings() const { return warnings_; }
  /// Forgets the recorded warnings.
  void clear_warnings() { warnings_.clear(); }

 protected:
  /// Tag selecting the constructor that skips the base set-up (SequentialLR, ChainedScheduler,
  /// ReduceLROnPlateau).
  struct BareTag {};
  /// As LRScheduler.__init__ in torch/optim/lr_scheduler.py: initial_lr per group (set when
  /// last_epoch == -1, required otherwise), base_lrs, last_epoch. The subclass calls
  /// initial_step() at the end of its constructor.
  LRScheduler(Optimizer& opt, std::string name, std::int64_t last_epoch);
  /// No set-up: last_epoch 0, no base_lrs.
  LRScheduler(Optimizer& opt, std::string name, BareTag);

  /// The construction-time step: step_count = 0, is_initial, step().
  void initial_step();
  /// The recursive form for last_epoch_ (called within a step).
  virtual std::vector<double> compute_lr() = 0;
  /// The closed form, for classes that have one.
  virtual std::optional<std::vector<double>> closed_form_lr() { return std::nullopt; }
  /// PyTorch's _update_lr: advances (or sets) last_epoch, computes and writes the LRs.
  void update_lr(std::optional<std::int64_t> epoch);
  /// Decrements last_epoch (SequentialLR's recursive_undo; composites recurse).
  virtual void undo_epoch() { --last_epoch_; }
  /// The groups' current LRs as numbers.
  std::vector<double> current_lrs() const;
  /// Writes one value per group into "lr" (tensor LRs filled in place).
  void write_lrs(const std::vector<double>& lrs);
  /// _last_lr = copies of the groups' LRs.
  void refresh_last_lr();
  /// Records a warning.
  void warn(const std::string& msg) { warnings_.push_back("[" + name_ + "] " + msg); }
  /// Writes the class's own attributes into `j` (called by state_dict()).
  virtual void save_own(nlohmann::json& j) const { (void)j; }
  /// Reads the class's own attributes present in `j` (called by load_state_dict()).
  virtual void load_own(const nlohmann::json& j) { (void)j; }
  /// The base keys only (for composites that store a different set).
  void save_base(nlohmann::json& j) const;
  /// The base keys only.
  void load_base(const nlohmann::json& j);

  Optimizer* opt_;                      ///< the optimizer (not owned)
  std::string name_;                    ///< class name
  std::vector<double> base_lrs_;        ///< base LRs
  std::int64_t last_epoch_ = -1;        ///< epoch counter
  std::int64_t step_count_ = 0;         ///< steps taken, construction included
  bool is_initial_ = false;             ///< within the construction step
  bool within_step_ = false;            ///< _get_lr_called_within_step
  std::vector<HyperValue> last_lr_;     ///< copies of the LRs after the last step
  std::int64_t opt_steps_at_ctor_ = 0;  ///< optimizer step_count() when constructed
  std::vector<std::string> warnings_;   ///< recorded warnings

  friend class SequentialLR;
  friend class ChainedScheduler;

 private:
  void step_impl(std::optional<std::int64_t> epoch);
};

/// LR = base * f(epoch); one function for every group or one per group.
class LambdaLR : public LRScheduler {
 public:
  /// One function (or expression) for every group.
  LambdaLR(Optimizer& opt, LrLambda lr_lambda, std::int64_t last_epoch = -1);
  /// One per group; throws tb::ValueError "Expected {n} lr_lambdas, but got {m}".
  LambdaLR(Optimizer& opt, std::vector<LrLambda> lr_lambdas, std::int64_t last_epoch = -1);

 protected:
  /// Shared by MultiplicativeLR.
  LambdaLR(Optimizer& opt, std::vector<LrLambda> lr_lambdas, bool one, std::int64_t last_epoch,
           std::string name);
  std::vector<double> compute_lr() override;
  void save_own(nlohmann::json& j) const override;
  void load_own(const nlohmann::json& j) override;

  std::vector<LrLambda> lambdas_;  ///< one per group
};

/// LR = current * f(epoch) (unchanged at construction).
class MultiplicativeLR : public LambdaLR {
 public:
  /// One function (or expression) for every group.
  MultiplicativeLR(Optimizer& opt, LrLambda lr_lambda, std::int64_t last_epoch = -1);
  /// One per group; throws tb::ValueError "Expected {n} lr_lambdas, but got {m}".
  MultiplicativeLR(Optimizer& opt, std::vector<LrLambda> lr_lambdas, std::int64_t last_epoch = -1);

 protected:
  std::vector<double> compute_lr() override;
};

/// Decays by gamma every step_size epochs.
class StepLR : public LRScheduler {
 public:
  /// step_size must be positive (tb::ValueError).
  StepLR(Optimizer& opt, std::int64_t step_size, double gamma = 0.1, std::int64_t last_epoch = -1);

 protected:
  std::vector<double> compute_lr() override;
  std::optional<std::vector<double>> closed_form_lr() override;
  void save_own(nlohmann::json& j) const override;
  void load_own(const nlohmann::json& j) override;

 private:
  std::int64_t step_size_;
  double gamma_;
};

/// Decays by gamma at each milestone (a repeated milestone decays once per repetition).
class MultiStepLR : public LRScheduler {
 public:
  /// `milestones` in any order, repetitions allowed.
  MultiStepLR(Optimizer& opt, std::vector<std::int64_t> milestones, double gamma = 0.1,
              std::int64_t last_epoch = -1);

 protected:
  std::vector<double> compute_lr() override;
  std::optional<std::vector<double>> closed_form_lr() override;
  void save_own(nlohmann::json& j) const override;
  void load_own(const nlohmann::json& j) override;

 private:
  std::vector<std::int64_t> milestones_;  // sorted, with multiplicity
  double gamma_;
};

/// Multiplies by factor until total_iters, then restores the base LR.
class ConstantLR : public LRScheduler {
 public:
  /// factor in [0, 1] ("Constant multiplicative factor expected to be between 0 and 1.").
  ConstantLR(Optimizer& opt, double factor = 1.0 / 3.0, std::int64_t total_iters = 5,
             std::int64_t last_epoch = -1);

 protected:
  std::vector<double> compute_lr() override;
  std::optional<std::vector<double>> closed_form_lr() override;
  void save_own(nlohmann::json& j) const override;
  void load_own(const nlohmann::json& j) override;

 private:
  double factor_;
  std::int64_t total_iters_;
};

/// Moves the factor linearly from start_factor to end_factor over total_iters.
class LinearLR : public LRScheduler {
 public:
  /// start_factor in (0, 1], end_factor in [0, 1] (PyTorch's messages).
  LinearLR(Optimizer& opt, double start_factor = 1.0 / 3.0, double end_factor = 1.0,
           std::int64_t total_iters = 5, std::int64_t last_epoch = -1);

 protected:
  std::vector<double> compute_lr() override;
  std::optional<std::vector<double>> closed_form_lr() override;
  void save_own(nlohmann::json& j) const override;
  void load_own(const nlohmann::json& j) override;

 private:
  double start_factor_;
  double end_factor_;
  std::int64_t total_iters_;
};

/// LR = base * gamma^epoch.
class ExponentialLR : public LRScheduler {
 public:
  /// Any gamma.
  ExponentialLR(Optimizer& opt, double gamma, std::int64_t last_epoch = -1);

 protected:
  std::vector<double> compute_lr() override;
  std::optional<std::vector<double>> closed_form_lr() override;
  void save_own(nlohmann::json& j) const override;
  void load_own(const nlohmann::json& j) override;

 private:
  double gamma_;
};

/// LR = base * (1 - min(T, e)/T)^power.
class PolynomialLR : public LRScheduler {
 public:
  /// total_iters must be positive (tb::ValueError).
  PolynomialLR(Optimizer& opt, std::int64_t total_iters = 5, double power = 1.0,
               std::int64_t last_epoch = -1);

 protected:
  std::vector<double> compute_lr() override;
  std::optional<std::vector<double>> closed_form_lr() override;
  void save_own(nlohmann::json& j) const override;
  void load_own(const nlohmann::json& j) override;

 private:
  std::int64_t total_iters_;
  double power_;
};

/// Cosine from base to eta_min over T_max epochs, periodic with period 2*T_max.
class CosineAnnealingLR : public LRScheduler {
 public:
  /// T_max must be positive (tb::ValueError).
  CosineAnnealingLR(Optimizer& opt, std::int64_t T_max, double eta_min = 0.0,  // NOLINT
                    std::int64_t last_epoch = -1);

 protected:
  std::vector<double> compute_lr() override;
  std::optional<std::vector<double>> closed_form_lr() override;
  void save_own(nlohmann::json& j) const override;
  void load_own(const nlohmann::json& j) override;

 private:
  std::int64_t t_max_;
  double eta_min_;
};

/// SGDR: cosine over T_i epochs, restarting with T_i *= T_mult.
class CosineAnnealingWarmRestarts : public LRScheduler {
 public:
  /// PyTorch's messages for T_0 <= 0 and T_mult < 1.
  CosineAnnealingWarmRestarts(Optimizer& opt, std::int64_t T_0, std::int64_t T_mult = 1,  // NOLINT
                              double eta_min = 0.0, std::int64_t last_epoch = -1);
  /// Its own step (no warnings, step_count() unchanged).
  void step() override;
  /// Explicit, possibly fractional epoch >= 0 ("Expected non-negative epoch, but got {e}").
  void step_epoch(double epoch) override;
  /// Epochs since the last restart (may be fractional after step_epoch).
  double t_cur() const { return t_cur_; }
  /// The current period.
  std::int64_t t_i() const { return t_i_; }

 protected:
  std::vector<double> compute_lr() override;
  void save_own(nlohmann::json& j) const override;
  void load_own(const nlohmann::json& j) override;

 private:
  void step_to(std::optional<double> epoch);
  std::int64_t t_0_;
  std::int64_t t_i_;
  std::int64_t t_mult_;
  double eta_min_;
  double t_cur_;
};

/// Options of CyclicLR besides base_lr and max_lr (PyTorch's defaults).
struct CyclicLROptions {
  double step_size_up = 2000;            ///< iterations in the increasing half
  std::optional<double> step_size_down;  ///< iterations in the decreasing half (default: up)
  std::string mode = "triangular";       ///< triangular, triangular2 or exp_range
  double gamma = 1.0;                    ///< exp_range's base
  std::optional<LrLambda> scale_fn;      ///< custom scale function (then mode is ignored)
  std::string scale_mode = "cycle";      ///< with scale_fn: "cycle" or "iterations"
  bool cycle_momentum = true;            ///< cycle momentum (or beta1) inversely to the LR
  PerGroup base_momentum = 0.8;          ///< lower momentum bound
  PerGroup max_momentum = 0.9;           ///< upper momentum bound
  std::int64_t last_epoch = -1;          ///< resume point
};

/// Cyclical learning rate (Smith 2017) with optional momentum cycling.
class CyclicLR : public LRScheduler {
 public:
  /// Sets each group's lr to base_lr first (fresh start). With cycle_momentum, the optimizer's
  /// defaults must have "momentum" or "beta1" (tb::ValueError "optimizer must support momentum
  /// or beta1 with `cycle_momentum` option enabled"); groups with beta1 cycle beta1.
  CyclicLR(Optimizer& opt, PerGroup base_lr, PerGroup max_lr, CyclicLROptions options = {});

 protected:
  std::vector<double> compute_lr() override;
  void save_own(nlohmann::json& j) const override;
  void load_own(const nlohmann::json& j) override;

 private:
  double scale(double x) const;
  std::vector<double> max_lrs_;
  double total_size_;
  double step_ratio_;
  std::string mode_;
  double gamma_;
  std::optional<LrLambda> scale_fn_custom_;
  std::string scale_mode_;
  bool cycle_momentum_;
  bool use_beta1_ = false;
  std::vector<double> base_momentums_;
  std::vector<double> max_momentums_;
};

/// Options of OneCycleLR besides max_lr (PyTorch's defaults).
struct OneCycleLROptions {
  std::optional<std::int64_t> total_steps;      ///< total steps, or epochs * steps_per_epoch
  std::optional<std::int64_t> epochs;           ///< with steps_per_epoch
  std::optional<std::int64_t> steps_per_epoch;  ///< with epochs
  double pct_start = 0.3;                       ///< fraction of the cycle spent increasing
  std::string anneal_strategy = "cos";          ///< "cos" or "linear"
  bool cycle_momentum = true;                   ///< cycle momentum (or beta1)
  PerGroup base_momentum = 0.85;                ///< lower momentum bound
  PerGroup max_momentum = 0.95;                 ///< upper momentum bound
  double div_factor = 25.0;                     ///< initial_lr = max_lr / div_factor
  double final_div_factor = 1e4;                ///< min_lr = initial_lr / final_div_factor
  bool three_phase = false;                     ///< annihilation phase as in fastai
  std::int64_t last_epoch = -1;                 ///< resume point
};

/// The 1cycle policy. Writes initial_lr, max_lr, min_lr (and momentum bounds) into the groups.
class OneCycleLR : public LRScheduler {
 public:
  /// PyTorch's validation messages (total_steps, epochs, steps_per_epoch, pct_start,
  /// anneal_strategy, momentum support).
  OneCycleLR(Optimizer& opt, PerGroup max_lr, OneCycleLROptions options = {});
  /// The total number of steps.
  std::int64_t total_steps() const { return total_steps_; }

 protected:
  std::vector<double> compute_lr() override;
  void save_own(nlohmann::json& j) const override;
  void load_own(const nlohmann::json& j) override;

 private:
  struct Phase {
    double end_step;
    const char* start_lr;
    const char* end_lr;
    const char* start_momentum;
    const char* end_momentum;
  };
  std::vector<Phase> phases() const;
  double anneal(double start, double end, double pct) const;
  std::int64_t total_steps_;
  double pct_start_;
  bool three_phase_;
  std::string anneal_strategy_;
  bool cycle_momentum_;
  bool use_beta1_ = false;
};

/// SWALR (torch.optim.swa_utils.SWALR): anneals each group's LR to swa_lr over anneal_epochs,
/// then holds it.
class SWALR : public LRScheduler {
 public:
  /// Writes group "swa_lr" first; then checks anneal_strategy ("must by one of 'cos' or
  /// 'linear'", sic) and anneal_epochs >= 0.
  SWALR(Optimizer& opt, PerGroup swa_lr, std::int64_t anneal_epochs = 10,
        std::string anneal_strategy = "cos", std::int64_t last_epoch = -1);
  /// "cos" or "linear".
  const std::string& anneal_strategy() const { return anneal_strategy_; }

 protected:
  std::vector<double> compute_lr() override;
  void save_own(nlohmann::json& j) const override;
  void load_own(const nlohmann::json& j) override;

 private:
  double anneal(double t) const;
  std::int64_t anneal_epochs_;
  std::string anneal_strategy_;
};

/// Runs schedulers one after another, switching at the milestones.
class SequentialLR : public LRScheduler {
 public:
  /// All on `opt`; none a ReduceLROnPlateau; milestones.size() == schedulers.size() - 1.
  SequentialLR(Optimizer& opt, std::vector<std::shared_ptr<LRScheduler>> schedulers,
               std::vector<std::int64_t> milestones, std::int64_t last_epoch = -1);
  void step() override;
  /// Not supported: throws tb::ValueError.
  void step_epoch(double epoch) override;
  /// The child schedulers.
  const std::vector<std::shared_ptr<LRScheduler>>& schedulers() const { return schedulers_; }
  nlohmann::json state_dict() const override;
  void load_state_dict(const nlohmann::json& sd) override;

 protected:
  std::vector<double> compute_lr() override { return current_lrs(); }
  void undo_epoch() override;

 private:
  std::vector<std::shared_ptr<LRScheduler>> schedulers_;
  std::vector<std::int64_t> milestones_;
};

/// Steps every child scheduler each step (their effects compose).
class ChainedScheduler : public LRScheduler {
 public:
  /// `opt` defaults to the first child's optimizer; the same checks as SequentialLR.
  explicit ChainedScheduler(std::vector<std::shared_ptr<LRScheduler>> schedulers,
                            Optimizer* opt = nullptr);
  void step() override;
  /// Not supported: throws tb::ValueError.
  void step_epoch(double epoch) override;
  /// The child schedulers.
  const std::vector<std::shared_ptr<LRScheduler>>& schedulers() const { return schedulers_; }
  nlohmann::json state_dict() const override;
  void load_state_dict(const nlohmann::json& sd) override;

 protected:
  std::vector<double> compute_lr() override { return current_lrs(); }
  void undo_epoch() override;

 private:
  static Optimizer& pick(const std::vector<std::shared_ptr<LRScheduler>>& s, Optimizer* opt);
  std::vector<std::shared_ptr<LRScheduler>> schedulers_;
};

/// Options of ReduceLROnPlateau (PyTorch's defaults).
struct ReduceLROnPlateauOptions {
  std::string mode = "min";            ///< "min" or "max"
  double factor = 0.1;                 ///< new lr = lr * factor (< 1)
  std::int64_t patience = 10;          ///< bad epochs tolerated before reducing
  double threshold = 1e-4;             ///< significance threshold
  std::string threshold_mode = "rel";  ///< "rel" or "abs"
  std::int64_t cooldown = 0;           ///< epochs to wait after a reduction
  PerGroup min_lr = 0.0;               ///< lower bound, one or per group
  double eps = 1e-8;                   ///< reductions smaller than this are skipped
};

/// Reduces the LR when a metric stops improving. step() needs the metric: use step(metric).
class ReduceLROnPlateau : public LRScheduler {
 public:
  /// PyTorch's messages ("Factor should be < 1.0.", "expected {n} min_lrs, got {m}", "mode {m}
  /// is unknown!", "threshold mode {m} is unknown!").
  explicit ReduceLROnPlateau(Optimizer& opt, ReduceLROnPlateauOptions options = {});
  /// Throws tb::ValueError: the metric is required.
  void step() override;
  /// Throws tb::ValueError: the metric is required.
  void step_epoch(double epoch) override;
  /// One epoch with `metrics`.
  void step(double metrics);
  /// One epoch with `metrics`, setting last_epoch to `epoch` (deprecated; warns).
  void step(double metrics, std::int64_t epoch);
  /// The best metric so far.
  double best() const { return best_; }
  /// Epochs without improvement.
  std::int64_t num_bad_epochs() const { return num_bad_epochs_; }
  /// Remaining cooldown epochs.
  std::int64_t cooldown_counter() const { return cooldown_counter_; }
  nlohmann::json state_dict() const override;
  void load_state_dict(const nlohmann::json& sd) override;

 protected:
  std::vector<double> compute_lr() override { return current_lrs(); }

 private:
  void step_metric(double metrics, std::optional<std::int64_t> epoch);
  bool is_better(double a, double best) const;
  void init_is_better(const std::string& mode, double threshold, const std::string& tmode);
  void reduce_lr();
  double factor_;
  std::optional<double> default_min_lr_;
  std::vector<double> min_lrs_;
  std::int64_t patience_;
  std::int64_t cooldown_;
  double eps_;
  double mode_worse_ = 0;
  std::string mode_;
  double threshold_ = 0;
  std::string threshold_mode_;
  double best_ = 0;
  std::int64_t cooldown_counter_ = 0;
  std::int64_t num_bad_epochs_ = 0;
};

/// Builds a scheduler on `opt` from a config object: {"kind": "step" | "multistep" |
/// "constant" | "linear" | "exponential" | "polynomial" | "cosine" | "cosine_warm_restarts" |
/// "cyclic" | "one_cycle" | "lambda" | "multiplicative" | "sequential" | "chained" | "plateau" |
/// "swa", ...PyTorch's argument names} (docs/config-reference.md, "LR schedulers"). Throws
/// tb::ValueError naming the field for unknown fields, missing required fields and bad values.
std::shared_ptr<LRScheduler> make_scheduler(Optimizer& opt, const nlohmann::json& config);

/// `config` with every learning rate it gives (a kind's lr_fields: eta_min, min_lr, base_lr,
/// max_lr, swa_lr; also inside sequential/chained children) multiplied by `factor`. Factors,
/// steps and the rest stay. With Muon the run's scheduler is written for the Muon optimizer; the
/// AdamW optimizer's copy is scaled by adamw.lr / muon.lr, so both keep the ratio of their LRs.
nlohmann::json scale_lr_fields(const nlohmann::json& config, double factor);

/// What preview() returns: row 0 is after construction, row i after the i-th step.
struct SchedulePreview {
  std::vector<std::vector<double>> lr;        ///< [row][group] learning rates
  std::string momentum_key;                   ///< "momentum" or "beta1"
  std::vector<std::vector<double>> momentum;  ///< [row][group] momentum_key's values
  std::vector<std::string> warnings;          ///< the scheduler's warnings
};

/// Runs the schedule of `config` for `steps` steps on a throwaway optimizer and returns the LRs.
/// Besides make_scheduler's fields, config may hold "lr" (a number, or a list: one group per
/// value; default 0.1), "optimizer" ("sgd": momentum 0.9, the default; "adam": beta1 0.9,
/// beta2 0.999) and, for "plateau", "metrics" (a list fed in turn, repeating; default: 1.0 every
/// step). Each step calls the optimizer's (no-op) step, then the scheduler's.
SchedulePreview preview(const nlohmann::json& config, int steps);

}  // namespace tb::sched
