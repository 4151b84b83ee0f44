// The scheduler registry: PyTorch's torch.optim.lr_scheduler set, one entry per kind with its
// argument names, defaults and help, and the factory that reads them (SchedulerFields).
// Reference: https://pytorch.org/docs/stable/optim.html#how-to-adjust-learning-rate
#include "engine/core/error.h"
#include "engine/sched/scheduler_registry.h"

namespace tb::sched {

namespace {

using core::FieldSpec;
using core::FieldType;
using nlohmann::json;
using Fields = SchedulerFields;

FieldSpec last_epoch() {
  return FieldSpec("last_epoch", FieldType::kInt, -1,
                   "index of the last epoch; >= 0 resumes (needs initial_lr in every group)");
}

FieldSpec required(const char* key, FieldType type, const char* help) {
  return FieldSpec(key, type, nullptr, help);
}

FieldSpec per_group(const char* key, json def, const char* help) {
  return FieldSpec(key, FieldType::kAny, std::move(def), help)
      .documented_as("number or list (one per group)");
}

FieldSpec momentum_fields_cycle() {
  return FieldSpec("cycle_momentum", FieldType::kBool, true,
                   "cycle beta1 (Adam) or momentum (SGD, Muon) inversely to the LR");
}

std::string expr_message(const ValueError& e) {
  std::string m = e.what();
  const std::string prefix = "[lr_lambda] ";
  if (m.rfind(prefix, 0) == 0) m = m.substr(prefix.size());
  return "is not a valid expression: " + m;
}

SchedulerKind kind(const char* name, const char* cls, const char* help,
                   std::vector<FieldSpec> fields,
                   std::function<std::shared_ptr<LRScheduler>(Optimizer&, const Fields&)> make) {
  SchedulerKind k;
  k.name = name;
  k.torch_class = cls;
  k.help = help;
  k.fields = std::move(fields);
  // A NaN or infinite factor, gamma or bound makes every LR after it NaN: refused by key (PyTorch
  // takes it and the run diverges).
  for (FieldSpec& f : k.fields)
    if (f.type == FieldType::kFloat) f.finite_only();
  k.make = std::move(make);
  return k;
}

// `k` with `fields` marked as learning rates.
SchedulerKind lrs(SchedulerKind k, std::vector<std::string> fields) {
  k.lr_fields = std::move(fields);
  return k;
}

void add_builtins(core::Registry<SchedulerKind>& r) {
  r.add(kind("step", "StepLR", "decay by gamma every step_size steps",
             {required("step_size", FieldType::kInt, "steps between decays (>= 1)"),
              FieldSpec("gamma", FieldType::kFloat, 0.1, "decay factor"), last_epoch()},
             [](Optimizer& o, const Fields& f) {
               return std::make_shared<StepLR>(o, f.integer("step_size"), f.num("gamma"),
                                               f.integer("last_epoch"));
             }));
  r.add(kind("multistep", "MultiStepLR", "decay by gamma at each milestone",
             {required("milestones", FieldType::kIntList, "steps at which to decay"),
              FieldSpec("gamma", FieldType::kFloat, 0.1, "decay factor"), last_epoch()},
             [](Optimizer& o, const Fields& f) {
               return std::make_shared<MultiStepLR>(o, f.ints("milestones"), f.num("gamma"),
                                                    f.integer("last_epoch"));
             }));
  r.add(
      kind("constant", "ConstantLR", "scale by factor until total_iters",
           {FieldSpec("factor", FieldType::kFloat, 1.0 / 3.0, "LR multiplier, in [0, 1]"),
            FieldSpec("total_iters", FieldType::kInt, 5, "steps the factor applies"), last_epoch()},
           [](Optimizer& o, const Fields& f) {
             return std::make_shared<ConstantLR>(o, f.num("factor"), f.integer("total_iters"),
                                                 f.integer("last_epoch"));
           }));
  r.add(
      kind("linear", "LinearLR", "scale linearly from start_factor to end_factor",
           {FieldSpec("start_factor", FieldType::kFloat, 1.0 / 3.0, "first multiplier, in (0, 1]"),
            FieldSpec("end_factor", FieldType::kFloat, 1.0, "last multiplier, in [0, 1]"),
            FieldSpec("total_iters", FieldType::kInt, 5, "steps of the ramp"), last_epoch()},
           [](Optimizer& o, const Fields& f) {
             return std::make_shared<LinearLR>(o, f.num("start_factor"), f.num("end_factor"),
                                               f.integer("total_iters"), f.integer("last_epoch"));
           }));
  r.add(kind("exponential", "ExponentialLR", "decay by gamma every step",
             {required("gamma", FieldType::kFloat, "decay factor"), last_epoch()},
             [](Optimizer& o, const Fields& f) {
               return std::make_shared<ExponentialLR>(o, f.num("gamma"), f.integer("last_epoch"));
             }));
  r.add(kind("polynomial", "PolynomialLR", "decay polynomially to 0 over total_iters",
             {FieldSpec("total_iters", FieldType::kInt, 5, "steps of the decay (>= 1)"),
              FieldSpec("power", FieldType::kFloat, 1.0, "polynomial power"), last_epoch()},
             [](Optimizer& o, const Fields& f) {
               return std::make_shared<PolynomialLR>(o, f.integer("total_iters"), f.num("power"),
                                                     f.integer("last_epoch"));
             }));
  r.add(
      lrs(kind("cosine", "CosineAnnealingLR", "cosine from the base LR to eta_min over T_max steps",
               {required("T_max", FieldType::kInt, "steps of a half cosine (>= 1)"),
                FieldSpec("eta_min", FieldType::kFloat, 0.0, "the lowest LR"), last_epoch()},
               [](Optimizer& o, const Fields& f) {
                 return std::make_shared<CosineAnnealingLR>(o, f.integer("T_max"), f.num("eta_min"),
                                                            f.integer("last_epoch"));
               }),
          {"eta_min"}));
  r.add(lrs(kind("cosine_warm_restarts", "CosineAnnealingWarmRestarts",
                 "cosine annealing restarted every T_0 (x T_mult) steps",
                 {required("T_0", FieldType::kInt, "steps of the first cycle (>= 1)"),
                  FieldSpec("T_mult", FieldType::kInt, 1, "cycle length multiplier (>= 1)"),
                  FieldSpec("eta_min", FieldType::kFloat, 0.0, "the lowest LR"), last_epoch()},
                 [](Optimizer& o, const Fields& f) {
                   if (f.has("eta_min") && !f.at("eta_min").is_number()) {
                     f.fail("eta_min", "Expected float or int eta_min, but got " +
                                           f.at("eta_min").dump() + " of type " +
                                           f.at("eta_min").type_name());
                   }
                   return std::make_shared<CosineAnnealingWarmRestarts>(
                       o, f.integer("T_0"), f.integer("T_mult"), f.num("eta_min"),
                       f.integer("last_epoch"));
                 }),
            {"eta_min"}));
  r.add(lrs(
      kind("cyclic", "CyclicLR", "cycle the LR between base_lr and max_lr",
           {per_group("base_lr", nullptr, "lower LR of the cycle"),
            per_group("max_lr", nullptr, "upper LR of the cycle"),
            FieldSpec("step_size_up", FieldType::kFloat, 2000, "steps of the rising half"),
            FieldSpec("step_size_down", FieldType::kFloat, nullptr,
                      "steps of the falling half (absent: step_size_up)")
                .may_be_absent(),
            FieldSpec("mode", FieldType::kString, "triangular", "amplitude policy")
                .one_of({"triangular", "triangular2", "exp_range"}),
            FieldSpec("gamma", FieldType::kFloat, 1.0, "exp_range: decay per step"),
            FieldSpec("scale_fn", FieldType::kString, nullptr,
                      "an expression over x replacing mode's amplitude")
                .may_be_absent(),
            FieldSpec("scale_mode", FieldType::kString, "cycle", "what scale_fn's x counts")
                .one_of({"cycle", "iterations"}),
            momentum_fields_cycle(), per_group("base_momentum", 0.8, "momentum at the LR's peak"),
            per_group("max_momentum", 0.9, "momentum at the LR's base"), last_epoch()},
           [](Optimizer& o, const Fields& f) {
             CyclicLROptions c;
             c.step_size_up = f.num("step_size_up");
             if (f.has("step_size_down")) c.step_size_down = f.num("step_size_down");
             c.mode = f.str("mode");
             c.gamma = f.num("gamma");
             if (f.has("scale_fn")) {
               try {
                 c.scale_fn = LrLambda(f.str("scale_fn"));
               } catch (const ValueError& e) {
                 f.fail("scale_fn", expr_message(e));
               }
             }
             c.scale_mode = f.str("scale_mode");
             c.cycle_momentum = f.flag("cycle_momentum");
             c.base_momentum = f.per_group("base_momentum");
             c.max_momentum = f.per_group("max_momentum");
             c.last_epoch = f.integer("last_epoch");
             return std::make_shared<CyclicLR>(o, f.per_group("base_lr"), f.per_group("max_lr"), c);
           }),
      {"base_lr", "max_lr"}));
  r.add(lrs(
      kind("one_cycle", "OneCycleLR", "the 1cycle policy: warm up to max_lr, then anneal",
           {per_group("max_lr", nullptr, "the peak LR"),
            FieldSpec("total_steps", FieldType::kInt, nullptr,
                      "steps of the cycle (or epochs x ...)")
                .may_be_absent(),
            FieldSpec("epochs", FieldType::kInt, nullptr,
                      "with steps_per_epoch, instead of total_steps")
                .may_be_absent(),
            FieldSpec("steps_per_epoch", FieldType::kInt, nullptr, "with epochs").may_be_absent(),
            FieldSpec("pct_start", FieldType::kFloat, 0.3, "share of the cycle rising (a float)"),
            FieldSpec("anneal_strategy", FieldType::kString, "cos", "annealing shape")
                .one_of({"cos", "linear"}),
            momentum_fields_cycle(), per_group("base_momentum", 0.85, "momentum at the LR's peak"),
            per_group("max_momentum", 0.95, "momentum at the LR's base"),
            FieldSpec("div_factor", FieldType::kFloat, 25.0, "initial LR = max_lr / div_factor"),
            FieldSpec("final_div_factor", FieldType::kFloat, 1e4,
                      "final LR = initial LR / final_div_factor"),
            FieldSpec("three_phase", FieldType::kBool, false, "anneal back before the final decay"),
            last_epoch()},
           [](Optimizer& o, const Fields& f) {
             OneCycleLROptions c;
             if (f.has("total_steps")) c.total_steps = f.integer("total_steps");
             if (f.has("epochs")) c.epochs = f.integer("epochs");
             if (f.has("steps_per_epoch")) c.steps_per_epoch = f.integer("steps_per_epoch");
             if (f.has("pct_start")) {
               // PyTorch requires a float: the integers 0 and 1 are rejected too.
               const auto& v = f.at("pct_start");
               if (!v.is_number_float())
                 f.fail("pct_start",
                        "Expected float between 0 and 1 pct_start, but got " + v.dump());
               c.pct_start = v.get<double>();
             }
             c.anneal_strategy = f.str("anneal_strategy");
             c.cycle_momentum = f.flag("cycle_momentum");
             c.base_momentum = f.per_group("base_momentum");
             c.max_momentum = f.per_group("max_momentum");
             c.div_factor = f.num("div_factor");
             c.final_div_factor = f.num("final_div_factor");
             c.three_phase = f.flag("three_phase");
             c.last_epoch = f.integer("last_epoch");
             return std::make_shared<OneCycleLR>(o, f.per_group("max_lr"), c);
           }),
      {"max_lr"}));
  const auto lambda_field = [] {
    return FieldSpec("lr_lambda", FieldType::kAny, nullptr,
                     "an expression over epoch, or a list with one per group")
        .documented_as("expression or list");
  };
  r.add(kind("lambda", "LambdaLR", "lr = initial lr x lr_lambda(epoch)",
             {lambda_field(), last_epoch()},
             [](Optimizer& o, const Fields& f) -> std::shared_ptr<LRScheduler> {
               bool one = false;
               auto l = f.lambdas("lr_lambda", one);
               const auto le = f.integer("last_epoch");
               return one ? std::make_shared<LambdaLR>(o, l[0], le)
                          : std::make_shared<LambdaLR>(o, std::move(l), le);
             }));
  r.add(kind("multiplicative", "MultiplicativeLR",
             "lr = current lr x lr_lambda(epoch), from step 1", {lambda_field(), last_epoch()},
             [](Optimizer& o, const Fields& f) -> std::shared_ptr<LRScheduler> {
               bool one = false;
               auto l = f.lambdas("lr_lambda", one);
               const auto le = f.integer("last_epoch");
               return one ? std::make_shared<MultiplicativeLR>(o, l[0], le)
                          : std::make_shared<MultiplicativeLR>(o, std::move(l), le);
             }));
  const auto schedulers_field = [] {
    return FieldSpec("schedulers", FieldType::kAny, nullptr, "the scheduler configs (no plateau)")
        .documented_as("array of tables");
  };
  r.add(
      kind("sequential", "SequentialLR", "one scheduler after another, switching at milestones",
           {schedulers_field(),
            required("milestones", FieldType::kIntList, "switch steps, one fewer than schedulers"),
            last_epoch()},
           [](Optimizer& o, const Fields& f) {
             auto ms = f.ints("milestones");
             const auto le = f.integer("last_epoch");
             return std::make_shared<SequentialLR>(o, f.children(o), std::move(ms), le);
           }));
  r.add(kind("chained", "ChainedScheduler", "every scheduler's factor applied each step",
             {schedulers_field()}, [](Optimizer& o, const Fields& f) {
               return std::make_shared<ChainedScheduler>(f.children(o), &o);
             }));
  r.add(lrs(
      kind("plateau", "ReduceLROnPlateau",
           "reduce the LR when eval.loss stops improving (stepped after each evaluation)",
           {FieldSpec("mode", FieldType::kString, "min", "whether lower or higher is better")
                .one_of({"min", "max"}),
            FieldSpec("factor", FieldType::kFloat, 0.1, "LR multiplier on a plateau (< 1)"),
            FieldSpec("patience", FieldType::kInt, 10, "epochs without improvement tolerated"),
            FieldSpec("threshold", FieldType::kFloat, 1e-4, "what counts as an improvement"),
            FieldSpec("threshold_mode", FieldType::kString, "rel", "relative or absolute threshold")
                .one_of({"rel", "abs"}),
            FieldSpec("cooldown", FieldType::kInt, 0, "epochs to wait after a reduction"),
            per_group("min_lr", 0.0, "the lowest LR"),
            FieldSpec("eps", FieldType::kFloat, 1e-8, "smaller LR changes are ignored")},
           [](Optimizer& o, const Fields& f) {
             ReduceLROnPlateauOptions c;
             c.mode = f.str("mode");
             c.factor = f.num("factor");
             c.patience = f.integer("patience");
             c.threshold = f.num("threshold");
             c.threshold_mode = f.str("threshold_mode");
             c.cooldown = f.integer("cooldown");
             c.min_lr = f.per_group("min_lr");
             c.eps = f.num("eps");
             return std::make_shared<ReduceLROnPlateau>(o, c);
           }),
      {"min_lr"}));
  r.add(lrs(kind("swa", "SWALR", "anneal to a constant swa_lr (stochastic weight averaging)",
                 {per_group("swa_lr", nullptr, "the LR after annealing"),
                  FieldSpec("anneal_epochs", FieldType::kInt, 10, "steps of the annealing (>= 0)"),
                  FieldSpec("anneal_strategy", FieldType::kString, "cos", "annealing shape")
                      .one_of({"cos", "linear"}),
                  last_epoch()},
                 [](Optimizer& o, const Fields& f) {
                   return std::make_shared<SWALR>(
                       o, f.per_group("swa_lr"), f.integer("anneal_epochs"),
                       f.str("anneal_strategy"), f.integer("last_epoch"));
                 }),
            {"swa_lr"}));
}

}  // namespace

core::Registry<SchedulerKind>& scheduler_registry() {
  static core::Registry<SchedulerKind>* registry = [] {
    auto* r = new core::Registry<SchedulerKind>("lr_scheduler");
    add_builtins(*r);
    return r;
  }();
  return *registry;
}

}  // namespace tb::sched
