// make_scheduler (a scheduler from a JSON config) and preview (a schedule on a throwaway
// optimizer). The config format is documented in docs/config-reference.md, "LR schedulers".
#include <cmath>
#include <set>
#include <utility>

#include "engine/core/error.h"
#include "engine/sched/lr_scheduler.h"
#include "engine/sched/scheduler_registry.h"

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

const char* const kRequiredList = "is required (a list of scheduler configs)";

}  // namespace

// ---- SchedulerFields ----------------------------------------------------------------------------

SchedulerFields::SchedulerFields(const json& j, std::string kind,
                                 const std::vector<core::FieldSpec>& specs)
    : j_(j), kind_(std::move(kind)), specs_(specs) {
  std::set<std::string> known;
  for (const auto& f : specs_)
    known.insert(f.key);
  for (const auto& [key, value] : j.items()) {
    if (key == "kind" || known.count(key) != 0) continue;
    std::string list;
    for (const auto& k : known)
      list += (list.empty() ? "" : ", ") + k;
    const std::string close =
        core::close_word(key, std::vector<std::string>(known.begin(), known.end()));
    fail(key, "is not a field of this kind (fields: " + list + ")" +
                  (close.empty() ? "" : "; did you mean '" + close + "'?"));
  }
}

bool SchedulerFields::has(const char* k) const {
  return j_.contains(k) && !j_.at(k).is_null();
}

const json* SchedulerFields::default_of(const char* k) const {
  const core::FieldSpec* f = core::find_field(specs_, k);
  return f != nullptr && !f->default_value.is_null() ? &f->default_value : nullptr;
}

const json& SchedulerFields::value(const char* k) const {
  if (has(k)) return j_.at(k);
  if (const json* d = default_of(k)) return *d;
  fail(k, "is required");
}

double SchedulerFields::num(const char* k) const {
  const auto& v = value(k);
  if (!v.is_number()) fail(k, "must be a number, got " + v.dump());
  // The field's own bounds (every float field of a kind is finite: a NaN gamma is refused here).
  if (const core::FieldSpec* f = core::find_field(specs_, k))
    if (const auto problem = f->check(v)) fail(k, *problem);
  return v.get<double>();
}

std::int64_t SchedulerFields::integer(const char* k) const {
  const auto& v = value(k);
  if (!v.is_number_integer()) fail(k, "must be an integer, got " + v.dump());
  return v.get<std::int64_t>();
}

bool SchedulerFields::flag(const char* k) const {
  const auto& v = value(k);
  if (!v.is_boolean()) fail(k, "must be true or false, got " + v.dump());
  return v.get<bool>();
}

std::string SchedulerFields::str(const char* k) const {
  const auto& v = value(k);
  if (!v.is_string()) fail(k, "must be a string, got " + v.dump());
  return v.get<std::string>();
}

PerGroup SchedulerFields::per_group(const char* k) const {
  const auto& v = value(k);
  // An LR, momentum or bound of a group: finite (a NaN max_lr makes every LR NaN).
  const auto number = [&](const json& x) {
    if (x.is_number() && !std::isfinite(x.get<double>()))
      fail(k, "expected finite numbers, found " + core::format_double(x.get<double>()));
    return x.get<double>();
  };
  if (v.is_number()) return number(v);
  if (!v.is_array() || v.empty()) fail(k, "must be a number or a list of numbers, got " + v.dump());
  std::vector<double> out;
  for (const auto& x : v) {
    if (!x.is_number()) fail(k, "must be a number or a list of numbers, got " + v.dump());
    out.push_back(number(x));
  }
  return out;
}

std::vector<std::int64_t> SchedulerFields::ints(const char* k) const {
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

std::vector<LrLambda> SchedulerFields::lambdas(const char* k, bool& one) const {
  if (!has(k)) fail(k, "is required (an expression such as \"0.95^epoch\", or a list of them)");
  const auto& v = j_.at(k);
  std::vector<LrLambda> out;
  one = v.is_string() || v.is_number();
  auto parse = [&](const json& x) {
    if (x.is_number()) {  // a constant factor, e.g. lr_lambda=0.5 on the command line
      out.emplace_back(x.dump());
      return;
    }
    if (!x.is_string()) fail(k, "must be an expression or a list of expressions, got " + v.dump());
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

std::vector<std::shared_ptr<LRScheduler>> SchedulerFields::children(Optimizer& opt) const {
  if (!has("schedulers")) fail("schedulers", kRequiredList);
  const auto& a = j_.at("schedulers");
  if (!a.is_array()) fail("schedulers", "must be a list of scheduler configs");
  std::vector<std::shared_ptr<LRScheduler>> out;
  for (const auto& c : a)
    out.push_back(make_scheduler(opt, c));
  return out;
}

const json& SchedulerFields::at(const char* k) const {
  return j_.at(k);
}

void SchedulerFields::fail(const std::string& key, const std::string& why) const {
  throw FieldError(key, "[lr_scheduler] " + kind_ + ": field '" + key + "' " + why);
}

// ---- make_scheduler -----------------------------------------------------------------------------

std::shared_ptr<LRScheduler> make_scheduler(Optimizer& opt, const json& config) {
  const auto names = scheduler_registry().names();
  std::string kinds;
  for (const auto& n : names)
    kinds += (kinds.empty() ? "" : ", ") + n;
  TB_CHECK(config.is_object(), "[lr_scheduler] a scheduler config must be a JSON object, got ",
           config.dump());
  TB_CHECK(config.contains("kind") && config.at("kind").is_string(),
           "[lr_scheduler] field 'kind' is required: one of ", kinds);
  const std::string kind = config.at("kind").get<std::string>();
  const auto entry = scheduler_registry().find(kind);
  if (!entry) {
    const std::string close = core::close_word(kind, names);
    throw ValueError("[lr_scheduler] unknown kind '" + kind + "' (one of " + kinds + ")" +
                     (close.empty() ? "" : "; did you mean '" + close + "'?"));
  }
  const SchedulerFields f(config, kind, entry->fields);
  return entry->make(opt, f);
}

nlohmann::json scale_lr_fields(const nlohmann::json& config, double factor) {
  nlohmann::json out = config;
  if (!out.is_object() || !out.contains("kind") || !out.at("kind").is_string()) return out;
  if (const auto entry = scheduler_registry().find(out.at("kind").get<std::string>())) {
    for (const auto& key : entry->lr_fields) {
      if (!out.contains(key)) continue;
      nlohmann::json& v = out[key];
      if (v.is_number()) {
        v = v.get<double>() * factor;
      } else if (v.is_array()) {
        for (auto& x : v)
          if (x.is_number()) x = x.get<double>() * factor;
      }
    }
  }
  if (out.contains("schedulers") && out.at("schedulers").is_array())
    for (auto& child : out["schedulers"])
      child = scale_lr_fields(child, factor);
  return out;
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
