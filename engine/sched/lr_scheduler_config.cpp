// make_scheduler (a scheduler from a JSON config) and preview (a schedule on a throwaway
// optimizer). The config format is documented in docs/config-reference.md, "LR schedulers".
#include <set>

#include "engine/core/error.h"
#include "engine/sched/lr_scheduler.h"

namespace tb::sched {

namespace {

using nlohmann::json;

// "is not a valid expression: parse error at ..." from the parser's message.
std::string expr_error(const ValueError& e) {
  std::string m = e.what();
  const std::string prefix = "[lr_lambda] ";
  if (m.rfind(prefix, 0) == 0) m = m.substr(prefix.size());
  return "is not a valid expression: " + m;
}

// Reads the fields of one config object, rejecting unknown ones; messages name kind and field.
class Fields {
 public:
  Fields(const json& j, std::string kind, std::set<std::string> known)
      : j_(j), kind_(std::move(kind)) {
    known.insert("kind");
    for (const auto& [key, value] : j.items()) {
      if (known.count(key) == 0) {
        std::string list;
        for (const auto& k : known)
          if (k != "kind") list += (list.empty() ? "" : ", ") + k;
        fail(key, "is not a field of this kind (fields: " + list + ")");
      }
    }
  }

  bool has(const char* k) const { return j_.contains(k) && !j_.at(k).is_null(); }

  double num(const char* k, std::optional<double> def = std::nullopt) const {
    if (!has(k)) return required(k, def);
    const auto& v = j_.at(k);
    if (!v.is_number()) fail(k, "must be a number, got " + v.dump());
    return v.get<double>();
  }
  std::int64_t integer(const char* k, std::optional<std::int64_t> def = std::nullopt) const {
    if (!has(k)) return required(k, def);
    const auto& v = j_.at(k);
    if (!v.is_number_integer()) fail(k, "must be an integer, got " + v.dump());
    return v.get<std::int64_t>();
  }
  bool flag(const char* k, bool def) const {
    if (!has(k)) return def;
    const auto& v = j_.at(k);
    if (!v.is_boolean()) fail(k, "must be true or false, got " + v.dump());
    return v.get<bool>();
  }
  std::string str(const char* k, std::optional<std::string> def = std::nullopt) const {
    if (!has(k)) return required(k, def);
    const auto& v = j_.at(k);
    if (!v.is_string()) fail(k, "must be a string, got " + v.dump());
    return v.get<std::string>();
  }
  PerGroup per_group(const char* k, std::optional<double> def = std::nullopt) const {
    if (!has(k)) return required(k, def);
    const auto& v = j_.at(k);
    if (v.is_number()) return v.get<double>();
    if (!v.is_array() || v.empty())
      fail(k, "must be a number or a list of numbers, got " + v.dump());
    std::vector<double> out;
    for (const auto& x : v) {
      if (!x.is_number()) fail(k, "must be a number or a list of numbers, got " + v.dump());
      out.push_back(x.get<double>());
    }
    return out;
  }
  std::vector<std::int64_t> ints(const char* k) const {
    if (!has(k)) fail(k, "is required");
    const auto& v = j_.at(k);
    if (!v.is_array()) fail(k, "must be a list of integers, got " + v.dump());
    std::vector<std::int64_t> out;
    for (const auto& x : v) {
      if (!x.is_number_integer()) fail(k, "must be a list of integers, got " + v.dump());
      out.push_back(x.get<std::int64_t>());
    }
    return out;
  }
  std::vector<LrLambda> lambdas(const char* k, bool& one) const {
    if (!has(k)) fail(k, "is required (an expression such as \"0.95^epoch\", or a list of them)");
    const auto& v = j_.at(k);
    std::vector<LrLambda> out;
    one = v.is_string() || v.is_number();
    auto parse = [&](const json& x) {
      if (x.is_number()) {  // a constant factor, e.g. lr_lambda=0.5 on the command line
        out.emplace_back(x.dump());
        return;
      }
      if (!x.is_string())
        fail(k, "must be an expression or a list of expressions, got " + v.dump());
      try {
        out.emplace_back(x.get<std::string>());
      } catch (const ValueError& e) {
        fail(k, expr_error(e));
      }
    };
    if (one) {
      parse(v);
    } else if (v.is_array()) {
      for (const auto& x : v)
        parse(x);
    } else {
      fail(k, "must be an expression or a list of expressions, got " + v.dump());
    }
    return out;
  }
  const json& at(const char* k) const { return j_.at(k); }
  [[noreturn]] void fail(const std::string& key, const std::string& why) const {
    throw ValueError("[lr_scheduler] " + kind_ + ": field '" + key + "' " + why);
  }

 private:
  template <typename T>
  T required(const char* k, const std::optional<T>& def) const {
    if (!def) fail(k, "is required");
    return *def;
  }
  const json& j_;
  std::string kind_;
};

const char* const kKinds =
    "step, multistep, constant, linear, exponential, polynomial, cosine, cosine_warm_restarts, "
    "cyclic, one_cycle, lambda, multiplicative, sequential, chained, plateau, swa";

std::vector<std::shared_ptr<LRScheduler>> children(Optimizer& opt, const Fields& f) {
  if (!f.has("schedulers")) f.fail("schedulers", "is required (a list of scheduler configs)");
  const auto& a = f.at("schedulers");
  if (!a.is_array()) f.fail("schedulers", "must be a list of scheduler configs");
  std::vector<std::shared_ptr<LRScheduler>> out;
  for (const auto& c : a)
    out.push_back(make_scheduler(opt, c));
  return out;
}

}  // namespace

std::shared_ptr<LRScheduler> make_scheduler(Optimizer& opt, const json& config) {
  TB_CHECK(config.is_object(), "[lr_scheduler] a scheduler config must be a JSON object, got ",
           config.dump());
  TB_CHECK(config.contains("kind") && config.at("kind").is_string(),
           "[lr_scheduler] field 'kind' is required: one of ", kKinds);
  const std::string kind = config.at("kind").get<std::string>();
  if (kind == "step") {
    Fields f(config, kind, {"step_size", "gamma", "last_epoch"});
    return std::make_shared<StepLR>(opt, f.integer("step_size"), f.num("gamma", 0.1),
                                    f.integer("last_epoch", -1));
  }
  if (kind == "multistep") {
    Fields f(config, kind, {"milestones", "gamma", "last_epoch"});
    return std::make_shared<MultiStepLR>(opt, f.ints("milestones"), f.num("gamma", 0.1),
                                         f.integer("last_epoch", -1));
  }
  if (kind == "constant") {
    Fields f(config, kind, {"factor", "total_iters", "last_epoch"});
    return std::make_shared<ConstantLR>(opt, f.num("factor", 1.0 / 3.0),
                                        f.integer("total_iters", 5), f.integer("last_epoch", -1));
  }
  if (kind == "linear") {
    Fields f(config, kind, {"start_factor", "end_factor", "total_iters", "last_epoch"});
    return std::make_shared<LinearLR>(opt, f.num("start_factor", 1.0 / 3.0),
                                      f.num("end_factor", 1.0), f.integer("total_iters", 5),
                                      f.integer("last_epoch", -1));
  }
  if (kind == "exponential") {
    Fields f(config, kind, {"gamma", "last_epoch"});
    return std::make_shared<ExponentialLR>(opt, f.num("gamma"), f.integer("last_epoch", -1));
  }
  if (kind == "polynomial") {
    Fields f(config, kind, {"total_iters", "power", "last_epoch"});
    return std::make_shared<PolynomialLR>(opt, f.integer("total_iters", 5), f.num("power", 1.0),
                                          f.integer("last_epoch", -1));
  }
  if (kind == "cosine") {
    Fields f(config, kind, {"T_max", "eta_min", "last_epoch"});
    return std::make_shared<CosineAnnealingLR>(opt, f.integer("T_max"), f.num("eta_min", 0.0),
                                               f.integer("last_epoch", -1));
  }
  if (kind == "cosine_warm_restarts") {
    Fields f(config, kind, {"T_0", "T_mult", "eta_min", "last_epoch"});
    if (f.has("eta_min") && !config.at("eta_min").is_number()) {
      f.fail("eta_min", "Expected float or int eta_min, but got " + config.at("eta_min").dump() +
                            " of type " + config.at("eta_min").type_name());
    }
    return std::make_shared<CosineAnnealingWarmRestarts>(
        opt, f.integer("T_0"), f.integer("T_mult", 1), f.num("eta_min", 0.0),
        f.integer("last_epoch", -1));
  }
  if (kind == "cyclic") {
    Fields f(config, kind,
             {"base_lr", "max_lr", "step_size_up", "step_size_down", "mode", "gamma", "scale_fn",
              "scale_mode", "cycle_momentum", "base_momentum", "max_momentum", "last_epoch"});
    CyclicLROptions o;
    o.step_size_up = f.num("step_size_up", 2000);
    if (f.has("step_size_down")) o.step_size_down = f.num("step_size_down");
    o.mode = f.str("mode", "triangular");
    o.gamma = f.num("gamma", 1.0);
    if (f.has("scale_fn")) {
      try {
        o.scale_fn = LrLambda(f.str("scale_fn"));
      } catch (const ValueError& e) {
        f.fail("scale_fn", expr_error(e));
      }
    }
    o.scale_mode = f.str("scale_mode", "cycle");
    o.cycle_momentum = f.flag("cycle_momentum", true);
    o.base_momentum = f.per_group("base_momentum", 0.8);
    o.max_momentum = f.per_group("max_momentum", 0.9);
    o.last_epoch = f.integer("last_epoch", -1);
    return std::make_shared<CyclicLR>(opt, f.per_group("base_lr"), f.per_group("max_lr"), o);
  }
  if (kind == "one_cycle") {
    Fields f(config, kind,
             {"max_lr", "total_steps", "epochs", "steps_per_epoch", "pct_start", "anneal_strategy",
              "cycle_momentum", "base_momentum", "max_momentum", "div_factor", "final_div_factor",
              "three_phase", "last_epoch"});
    OneCycleLROptions o;
    if (f.has("total_steps")) o.total_steps = f.integer("total_steps");
    if (f.has("epochs")) o.epochs = f.integer("epochs");
    if (f.has("steps_per_epoch")) o.steps_per_epoch = f.integer("steps_per_epoch");
    if (f.has("pct_start")) {
      // PyTorch requires a float: the integers 0 and 1 are rejected too.
      const auto& v = config.at("pct_start");
      if (!v.is_number_float()) {
        f.fail("pct_start", "Expected float between 0 and 1 pct_start, but got " + v.dump());
      }
      o.pct_start = v.get<double>();
    }
    o.anneal_strategy = f.str("anneal_strategy", "cos");
    o.cycle_momentum = f.flag("cycle_momentum", true);
    o.base_momentum = f.per_group("base_momentum", 0.85);
    o.max_momentum = f.per_group("max_momentum", 0.95);
    o.div_factor = f.num("div_factor", 25.0);
    o.final_div_factor = f.num("final_div_factor", 1e4);
    o.three_phase = f.flag("three_phase", false);
    o.last_epoch = f.integer("last_epoch", -1);
    return std::make_shared<OneCycleLR>(opt, f.per_group("max_lr"), o);
  }
  if (kind == "lambda" || kind == "multiplicative") {
    Fields f(config, kind, {"lr_lambda", "last_epoch"});
    bool one = false;
    auto l = f.lambdas("lr_lambda", one);
    const auto le = f.integer("last_epoch", -1);
    if (kind == "lambda") {
      return one ? std::make_shared<LambdaLR>(opt, l[0], le)
                 : std::make_shared<LambdaLR>(opt, std::move(l), le);
    }
    return one ? std::make_shared<MultiplicativeLR>(opt, l[0], le)
               : std::make_shared<MultiplicativeLR>(opt, std::move(l), le);
  }
  if (kind == "sequential") {
    Fields f(config, kind, {"schedulers", "milestones", "last_epoch"});
    auto ms = f.ints("milestones");
    const auto le = f.integer("last_epoch", -1);
    return std::make_shared<SequentialLR>(opt, children(opt, f), std::move(ms), le);
  }
  if (kind == "chained") {
    Fields f(config, kind, {"schedulers"});
    return std::make_shared<ChainedScheduler>(children(opt, f), &opt);
  }
  if (kind == "plateau") {
    Fields f(
        config, kind,
        {"mode", "factor", "patience", "threshold", "threshold_mode", "cooldown", "min_lr", "eps"});
    ReduceLROnPlateauOptions o;
    o.mode = f.str("mode", "min");
    o.factor = f.num("factor", 0.1);
    o.patience = f.integer("patience", 10);
    o.threshold = f.num("threshold", 1e-4);
    o.threshold_mode = f.str("threshold_mode", "rel");
    o.cooldown = f.integer("cooldown", 0);
    o.min_lr = f.per_group("min_lr", 0.0);
    o.eps = f.num("eps", 1e-8);
    return std::make_shared<ReduceLROnPlateau>(opt, o);
  }
  if (kind == "swa") {
    Fields f(config, kind, {"swa_lr", "anneal_epochs", "anneal_strategy", "last_epoch"});
    return std::make_shared<SWALR>(opt, f.per_group("swa_lr"), f.integer("anneal_epochs", 10),
                                   f.str("anneal_strategy", "cos"), f.integer("last_epoch", -1));
  }
  throw ValueError("[lr_scheduler] unknown kind '" + kind + "' (one of " + kKinds + ")");
}

namespace {

// The throwaway optimizer of preview(): no-op step, no checks.
class PreviewOptimizer : public Optimizer {
 public:
  explicit PreviewOptimizer(HyperMap defaults) : Optimizer("preview", std::move(defaults)) {}
  void step() override { count_step(); }

 protected:
  void validate_group(const ParamGroup& /*group*/) const override {}
};

void collect_warnings(const LRScheduler& s, std::vector<std::string>& out) {
  out.insert(out.end(), s.warnings().begin(), s.warnings().end());
  const std::vector<std::shared_ptr<LRScheduler>>* kids = nullptr;
  if (const auto* q = dynamic_cast<const SequentialLR*>(&s)) kids = &q->schedulers();
  if (const auto* c = dynamic_cast<const ChainedScheduler*>(&s)) kids = &c->schedulers();
  if (kids != nullptr)
    for (const auto& k : *kids)
      collect_warnings(*k, out);
}

}  // namespace

SchedulePreview preview(const json& config, int steps) {
  TB_CHECK(config.is_object(), "[schedule] the config must be a JSON object, got ", config.dump());
  TB_CHECK(steps >= 0, "[schedule] steps must be >= 0, got ", steps);
  json sc = config;
  std::vector<double> lrs = {0.1};
  if (sc.contains("lr")) {
    const auto& v = sc.at("lr");
    if (v.is_number()) {
      lrs = {v.get<double>()};
    } else {
      TB_CHECK(v.is_array() && !v.empty(),
               "[schedule] field 'lr' must be a number or a non-empty list of numbers, got ",
               v.dump());
      lrs.clear();
      for (const auto& x : v) {
        TB_CHECK(x.is_number(),
                 "[schedule] field 'lr' must be a number or a non-empty list of numbers, got ",
                 v.dump());
        lrs.push_back(x.get<double>());
      }
    }
    sc.erase("lr");
  }
  std::string opt_kind = "sgd";
  if (sc.contains("optimizer")) {
    TB_CHECK(sc.at("optimizer").is_string(),
             "[schedule] field 'optimizer' must be \"sgd\" or \"adam\", got ",
             sc.at("optimizer").dump());
    opt_kind = sc.at("optimizer").get<std::string>();
    sc.erase("optimizer");
  }
  std::vector<double> metrics = {1.0};
  if (sc.contains("metrics")) {
    const auto& v = sc.at("metrics");
    TB_CHECK(v.is_array() && !v.empty(),
             "[schedule] field 'metrics' must be a non-empty list of numbers, got ", v.dump());
    metrics.clear();
    for (const auto& x : v) {
      TB_CHECK(x.is_number(),
               "[schedule] field 'metrics' must be a non-empty list of numbers, got ", v.dump());
      metrics.push_back(x.get<double>());
    }
    sc.erase("metrics");
  }
  HyperMap defaults;
  defaults["lr"] = lrs[0];
  std::string mkey;
  if (opt_kind == "sgd") {
    defaults["momentum"] = 0.9;
    mkey = "momentum";
  } else if (opt_kind == "adam") {
    defaults["beta1"] = 0.9;
    defaults["beta2"] = 0.999;
    mkey = "beta1";
  } else {
    throw ValueError("[schedule] field 'optimizer' must be \"sgd\" or \"adam\", got \"" + opt_kind +
                     "\"");
  }
  PreviewOptimizer opt(defaults);
  for (double lr : lrs) {
    ParamGroup g;
    Tensor p = Tensor::empty({1}, core::ScalarType::Float64);
    p.fill_(0.0);
    g.params.push_back(p);
    g.options["lr"] = lr;
    opt.add_param_group(std::move(g));
  }
  auto sched = make_scheduler(opt, sc);
  auto* plateau = dynamic_cast<ReduceLROnPlateau*>(sched.get());
  SchedulePreview out;
  out.momentum_key = mkey;
  auto record = [&] {
    std::vector<double> l;
    std::vector<double> m;
    for (const auto& g : opt.param_groups()) {
      l.push_back(g.number("lr"));
      m.push_back(g.number(mkey));
    }
    out.lr.push_back(std::move(l));
    out.momentum.push_back(std::move(m));
  };
  record();
  for (int i = 0; i < steps; ++i) {
    opt.step();
    if (plateau != nullptr) {
      plateau->step(metrics[static_cast<std::size_t>(i) % metrics.size()]);
    } else {
      sched->step();
    }
    record();
  }
  collect_warnings(*sched, out.warnings);
  return out;
}

}  // namespace tb::sched
