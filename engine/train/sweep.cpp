// Sweep planning (see sweep.h).
#include "engine/train/sweep.h"

#include <toml++/toml.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <set>
#include <sstream>

#include "engine/core/data_shape.h"
#include "engine/core/error.h"
#include "engine/core/fields.h"
#include "engine/core/metric_names.h"
#include "engine/nn/model_registry.h"
#include "engine/rng/cpu_generator.h"
#include "engine/rng/cpu_sampling.h"
#include "engine/train/run_config.h"

namespace tb::train {
namespace {

struct Where {
  std::string source;
  [[noreturn]] void fail(const std::string& key, const std::string& what) const {
    throw ValueError("[sweep] " + source + ": " + key + ": " + what);
  }
};

std::string number_text(double v) {
  char buf[32];
  const auto r = std::to_chars(buf, buf + sizeof(buf), v);
  std::string s(buf, r.ptr);
  if (s.find_first_of(".eEni") == std::string::npos) s += ".0";  // stays a TOML float
  return s;
}

std::string quoted(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out + "\"";
}

// A TOML value (scalar or array of them) as TOML text.
std::string value_text(const Where& w, const std::string& key, const toml::node& n) {
  if (const auto* s = n.as_string()) return quoted(s->get());
  if (const auto* i = n.as_integer()) return std::to_string(i->get());
  if (const auto* f = n.as_floating_point()) return number_text(f->get());
  if (const auto* b = n.as_boolean()) return b->get() ? "true" : "false";
  if (const auto* a = n.as_array()) {
    std::string out = "[";
    for (std::size_t i = 0; i < a->size(); ++i)
      out += (i ? ", " : "") + value_text(w, key, *a->get(i));
    return out + "]";
  }
  w.fail(key, "a value must be a string, number, boolean or array");
}

double number_of(const Where& w, const std::string& key, const toml::node* n) {
  if (n == nullptr) w.fail(key, "is required");
  if (const auto* i = n->as_integer()) return static_cast<double>(i->get());
  if (const auto* f = n->as_floating_point()) return f->get();
  w.fail(key, "expected a number");
}

SweepParameter parameter_of(const Where& w, const std::string& key, const toml::node& n) {
  const std::string at = "sweep.parameters.'" + key + "'";
  SweepParameter p;
  p.key = key;
  if (const auto* a = n.as_array()) {
    p.distribution = "values";
    for (const toml::node& v : *a)
      p.values.push_back(value_text(w, at, v));
    if (p.values.empty()) w.fail(at, "needs at least one value");
    return p;
  }
  const auto* t = n.as_table();
  if (t == nullptr)
    w.fail(at, "expected a list of values or a table { distribution, min, max } or { values }");
  for (const auto& [k, v] : *t) {
    const std::string name(k.str());
    if (name != "distribution" && name != "min" && name != "max" && name != "values")
      w.fail(at + "." + name, "unknown key (expected distribution, min, max or values)");
  }
  if (const auto* values = t->get("values")) return parameter_of(w, key, *values);
  const auto* d = t->get("distribution");
  if (d == nullptr || !d->is_string()) w.fail(at + ".distribution", "is required");
  p.distribution = d->as_string()->get();
  if (p.distribution != "uniform" && p.distribution != "log_uniform" &&
      p.distribution != "int_uniform")
    w.fail(at + ".distribution",
           "'" + p.distribution + "' is not uniform, log_uniform or int_uniform");
  p.min = number_of(w, at + ".min", t->get("min"));
  p.max = number_of(w, at + ".max", t->get("max"));
  if (std::isnan(p.min) || std::isnan(p.max)) w.fail(at, "min and max must be numbers, not nan");
  if (!(p.min <= p.max)) w.fail(at, "min must be <= max");
  if (p.distribution == "log_uniform" && !(p.min > 0))
    w.fail(at + ".min", "log_uniform needs min > 0");
  // Whole bounds: 8.2..8.7 holds no integer, and drew 8, below its min.
  if (p.distribution == "int_uniform" && (p.min != std::floor(p.min) || p.max != std::floor(p.max)))
    w.fail(at, "int_uniform needs whole numbers for min and max");
  return p;
}

EarlyStopping early_stopping_of(const Where& w, const toml::node& n) {
  const auto* t = n.as_table();
  if (t == nullptr) w.fail("sweep.early_stopping", "expected a table { method, steps }");
  EarlyStopping e;
  for (const auto& [k, v] : *t) {
    const std::string key(k.str());
    const std::string at = "sweep.early_stopping." + key;
    if (key == "method") {
      if (!v.is_string()) w.fail(at, "expected a string");
      e.method = v.as_string()->get();
    } else if (key == "steps") {
      const auto* a = v.as_array();
      if (a == nullptr) w.fail(at, "expected a list of steps");
      for (const toml::node& s : *a) {
        if (!s.is_integer() || s.as_integer()->get() <= 0)
          w.fail(at, "expected a list of steps >= 1");
        const std::int64_t step = s.as_integer()->get();
        if (!e.steps.empty() && step <= e.steps.back()) w.fail(at, "steps must increase");
        e.steps.push_back(step);
      }
    } else if (key == "reduction_factor") {
      e.reduction_factor = number_of(w, at, &v);
      if (!(e.reduction_factor > 1)) w.fail(at, "must be > 1");
    } else {
      w.fail(at, "unknown key (expected method, steps or reduction_factor)");
    }
  }
  if (e.method != "none" && e.method != "successive_halving" && e.method != "median")
    w.fail("sweep.early_stopping.method",
           "'" + e.method + "' is not none, successive_halving or median");
  if (e.method != "none" && e.steps.empty())
    w.fail("sweep.early_stopping.steps", "name the steps at which the points are compared");
  // Steps without a method (or with "none") would stop nothing, without a word.
  if (e.method == "none" && !e.steps.empty())
    w.fail("sweep.early_stopping.method",
           "is none (the default) but steps are given: set successive_halving or median");
  if (e.method != "successive_halving" && t->contains("reduction_factor"))
    w.fail("sweep.early_stopping.reduction_factor", "is for method = \"successive_halving\"");
  return e;
}

// The metrics a run logs that a sweep can rank by (engine/core/metric_names.h): the fixed names,
// and the evaluations of the model and of its SWA/EMA average. lr.* and rank<r>/* are also
// accepted (their names depend on the config).
std::vector<std::string> sweep_metric_names() {
  namespace m = core::metric;
  std::vector<std::string> names = {m::kLoss,      m::kGradNorm,       m::kDataMs,
                                    m::kForwardMs, m::kBackwardMs,     m::kOptimizerMs,
                                    m::kCommMs,    m::kNewtonSchulzMs, m::kStepMs,
                                    m::kEvalMs,    m::kSamplesPerS,    m::kTokensPerS,
                                    m::kLossScale, m::kSkippedSteps,   m::kScalerSkippedSteps};
  for (const char* prefix : {"eval.", "eval_swa.", "eval_ema."})
    for (const char* what : {"loss", "accuracy", "perplexity"})
      names.push_back(std::string(prefix) + what);
  return names;
}

void check_metric(const Where& w, const std::string& metric) {
  if (metric.rfind(core::metric::kLrPrefix, 0) == 0 ||
      metric.rfind(core::metric::kRankPrefix, 0) == 0)
    return;
  const std::vector<std::string> names = sweep_metric_names();
  if (std::find(names.begin(), names.end(), metric) != names.end()) return;
  w.fail("sweep.metric", "'" + metric + "' is not a metric a run logs; did you mean '" +
                             core::nearest_word(metric, names) + "'?");
}

// The metric is one the sweep's runs log: accuracy for a classifier, perplexity and tokens/s for a
// language model, eval_swa.* / eval_ema.* with that average (a sweep ranked by a metric no run
// logs ran every trial and ranked none). Skipped when the points change the model or average.
void check_metric_for(const Where& w, const SweepSpec& s, const RunConfig& base) {
  for (const auto& p : s.parameters)
    if (p.key == "model.kind" || p.key == "data.kind" || p.key == "swa.kind") return;
  const std::string& m = s.metric;
  const auto what = [&](const std::string& prefix) { return m.substr(prefix.size()); };
  const bool language =
      nn::model_registry().at(base.model.kind)->task == std::string(core::kTaskLanguageModel);
  for (const char* prefix : {"eval.", "eval_swa.", "eval_ema."}) {
    if (m.rfind(prefix, 0) != 0) continue;
    const std::string p(prefix);
    if (p != "eval." && base.swa.kind != p.substr(5, p.size() - 6))
      w.fail("sweep.metric", "'" + m + "' is logged only with swa.kind = \"" +
                                 p.substr(5, p.size() - 6) + "\"; the runs have \"" +
                                 base.swa.kind + "\"");
    if (what(p) == "accuracy" && language)
      w.fail("sweep.metric", "'" + m + "' is logged by classifiers; a " + base.model.kind +
                                 " model logs " + p + "loss and " + p + "perplexity");
    if (what(p) == "perplexity" && !language)
      w.fail("sweep.metric", "'" + m + "' is logged by language models; a " + base.model.kind +
                                 " model logs " + p + "loss and " + p + "accuracy");
  }
  if (m == core::metric::kTokensPerS && !language)
    w.fail("sweep.metric", "'" + m + "' is logged by language models; a " + base.model.kind +
                               " model logs samples_per_s");
}

SweepSpec spec_of(const Where& w, const toml::table& t) {
  SweepSpec s;
  s.name = "sweep";
  for (const auto& [k, v] : t) {
    const std::string key(k.str());
    const std::string at = "sweep." + key;
    if (key == "name" || key == "method" || key == "metric" || key == "goal") {
      if (!v.is_string()) w.fail(at, "expected a string");
      const std::string text = v.as_string()->get();
      (key == "name"     ? s.name
       : key == "method" ? s.method
       : key == "metric" ? s.metric
                         : s.goal) = text;
    } else if (key == "trials" || key == "sampler_seed") {
      if (!v.is_integer() || v.as_integer()->get() < 0) w.fail(at, "expected an integer >= 0");
      if (key == "trials") s.trials = v.as_integer()->get();
      if (key == "sampler_seed") s.sampler_seed = static_cast<std::uint64_t>(v.as_integer()->get());
    } else if (key == "seeds") {
      const auto* a = v.as_array();
      if (a == nullptr) w.fail(at, "expected a list of integers");
      for (const toml::node& e : *a) {
        if (!e.is_integer()) w.fail(at, "expected a list of integers");
        const std::int64_t seed = e.as_integer()->get();
        // A seed twice would train the same trial twice and count it twice in the mean.
        if (std::find(s.seeds.begin(), s.seeds.end(), seed) != s.seeds.end())
          w.fail(at, "seed " + std::to_string(seed) +
                         " is listed twice (each seed is one "
                         "replicate of every point)");
        s.seeds.push_back(seed);
      }
    } else if (key == "parameters") {
      const auto* p = v.as_table();
      if (p == nullptr) w.fail(at, "expected a table of key = values");
      for (const auto& [pk, pv] : *p)
        s.parameters.push_back(parameter_of(w, std::string(pk.str()), pv));
    } else if (key == "early_stopping") {
      s.early_stopping = early_stopping_of(w, v);
    } else {
      w.fail(at,
             "unknown key (expected name, method, trials, seeds, metric, goal, "
             "sampler_seed, parameters or early_stopping)");
    }
  }
  if (s.method != "grid" && s.method != "random")
    w.fail("sweep.method", "'" + s.method + "' is not grid or random");
  if (s.goal != "min" && s.goal != "max")
    w.fail("sweep.goal", "'" + s.goal + "' is not min or max");
  check_metric(w, s.metric);
  // The name names the store's sweep and its folder of trial configs and logs beside the store.
  if (s.name.empty()) w.fail("sweep.name", "is empty; give the sweep a name");
  for (const char ch : s.name)
    if (static_cast<unsigned char>(ch) < 0x20 || ch == 0x7f || ch == '/' || ch == '\\')
      w.fail("sweep.name", "'" + s.name +
                               "' holds a slash or a control character; a sweep's name is one "
                               "line that names a folder");
  if (s.name == "." || s.name == "..") w.fail("sweep.name", "'" + s.name + "' names no folder");
  if (s.parameters.empty()) w.fail("sweep.parameters", "name at least one key to sweep");
  // Keys the sweep sets itself for every trial: a swept value would be replaced without a word
  // (the table then showing values that never ran).
  for (const auto& p : s.parameters) {
    const std::string at = "sweep.parameters.'" + p.key + "'";
    if (p.key == "run.seed")
      w.fail(at,
             "each trial's seed comes from sweep.seeds (seeds = [1, 2, 3]: every point with "
             "each); sweep seeds there");
    if (p.key == "run.name" || p.key == "run.tags")
      w.fail(at, "the sweep names and tags each trial's run itself ('NAME pP sS', sweep:NAME)");
    if (p.key == "binding" || p.key.rfind("binding.", 0) == 0)
      w.fail(at, "where trials run is the sweep command's own --binding, not a swept value");
  }
  // Settings another method or no early stopping would ignore are mistakes, not silence.
  if (s.method == "grid" && t.contains("trials"))
    w.fail("sweep.trials", "is for method = \"random\"; a grid runs every combination");
  if (s.method == "grid" && t.contains("sampler_seed"))
    w.fail("sweep.sampler_seed", "is for method = \"random\"; a grid draws nothing");
  if (t.contains("seeds") && s.seeds.empty())
    w.fail("sweep.seeds", "is empty; give at least one seed, or leave it out for seed 1");
  if (s.method == "random" && s.trials <= 0) w.fail("sweep.trials", "random needs trials >= 1");
  if (s.method == "grid") {
    for (const auto& p : s.parameters)
      if (p.distribution != "values")
        w.fail("sweep.parameters.'" + p.key + "'",
               "a grid needs a list of values (" + p.distribution + " is for method = \"random\")");
  }
  std::sort(s.parameters.begin(), s.parameters.end(),
            [](const SweepParameter& a, const SweepParameter& b) { return a.key < b.key; });
  return s;
}

using Assignment = std::vector<std::pair<std::string, std::string>>;

std::vector<Assignment> points_of(const SweepSpec& s) {
  std::vector<Assignment> points;
  if (s.method == "grid") {
    points.emplace_back();
    for (const auto& p : s.parameters) {
      std::vector<Assignment> next;
      for (const auto& a : points)
        for (const auto& v : p.values) {
          Assignment b = a;
          b.emplace_back(p.key, v);
          next.push_back(std::move(b));
        }
      points = std::move(next);
    }
    return points;
  }
  rng::CpuGenerator gen(s.sampler_seed);
  for (std::int64_t i = 0; i < s.trials; ++i) {
    Assignment a;
    for (const auto& p : s.parameters) {
      const double u = rng::unlocked::uniform_double(gen, 0.0, 1.0);
      std::string v;
      if (p.distribution == "values") {
        const auto n = static_cast<double>(p.values.size());
        v = p.values[std::min(p.values.size() - 1, static_cast<std::size_t>(u * n))];
      } else if (p.distribution == "uniform") {
        v = number_text(p.min + u * (p.max - p.min));
      } else if (p.distribution == "log_uniform") {
        v = number_text(std::exp(std::log(p.min) + u * (std::log(p.max) - std::log(p.min))));
      } else {  // int_uniform
        const double lo = std::ceil(p.min), hi = std::floor(p.max);
        v = std::to_string(
            static_cast<std::int64_t>(std::min(hi, lo + std::floor(u * (hi - lo + 1.0)))));
      }
      a.emplace_back(p.key, v);
    }
    points.push_back(std::move(a));
  }
  return points;
}

// A config error about a point, in the sweep's terms: the point's values reach the config as
// settings, but nobody typed them ("(from --set k=v)" for a swept k=v is "(swept as k=v)"; a
// swept kind keeps the base config's other keys of its table, with no --set to replace them).
// What the user's own --set gave keeps its words.
std::string in_sweep_terms(std::string why, const Assignment& point) {
  for (const auto& [k, v] : point) {
    const std::string from_set = "(from --set " + k + "=" + v + ")";
    if (const auto at = why.find(from_set); at != std::string::npos)
      why.replace(at, 12, "(swept as ");
    if (k.size() < 5 || k.compare(k.size() - 5, 5, ".kind") != 0) continue;
    const std::string table = k.substr(0, k.size() - 5);
    const std::string set_kind =
        " (" + k + " = " + v + " is from --set; the file's other " + table + " keys stay";
    const auto at = why.find(set_kind);
    if (at == std::string::npos) continue;
    const std::string swept =
        " (" + k + " = " + v + " is swept; the config's other " + table + " keys stay";
    why.replace(at, set_kind.size(), swept);
    const auto advice = why.find(": to replace the whole table, --set '", at + swept.size());
    const auto close = advice == std::string::npos ? advice : why.find("}')", advice);
    if (close != std::string::npos) why.erase(advice, close + 2 - advice);
  }
  return why;
}

// Whether a config error says the key is not read in this config (an unknown key for the kind,
// a sub-table only read with another kind) rather than that its value is wrong.
bool not_applicable(const ConfigError& e) {
  const std::string& m = e.problem().message;
  return m.find("unknown key") != std::string::npos ||
         m.find("only read with") != std::string::npos ||
         std::string(e.what()).find("unknown key") != std::string::npos;
}

// Removes the dotted `path` from `t`; false when it is not there.
bool erase_path(toml::table& t, const std::string& path) {
  const auto dot = path.find('.');
  if (dot == std::string::npos) return t.erase(path) > 0;
  auto* sub = t.get(path.substr(0, dot));
  return sub != nullptr && sub->is_table() && erase_path(*sub->as_table(), path.substr(dot + 1));
}

std::string text_of(const toml::table& t) {
  std::ostringstream os;
  os << t;
  return os.str();
}

std::vector<std::string> sets_of(const Assignment& a) {
  std::vector<std::string> out;
  for (const auto& [k, v] : a)
    out.push_back(k + "=" + v);
  return out;
}

std::string describe(const Assignment& a) {
  std::string out;
  for (const auto& [k, v] : a)
    out += (out.empty() ? "" : ", ") + k + "=" + v;
  return out.empty() ? "no swept key" : out;
}

}  // namespace

SweepPlan plan_sweep(const std::string& toml_text, const std::string& source,
                     const std::vector<std::string>& overrides) {
  const Where w{source};
  // --set changes the runs' config; the [sweep] table itself is read from the file only (the
  // config reader would say "unknown section 'sweep'; did you mean 'swa'?").
  for (const std::string& o : overrides)
    if (o.rfind("sweep.", 0) == 0 || o.rfind("sweep=", 0) == 0)
      throw ValueError("[sweep] --set " + o +
                       ": --set changes the runs' config; the [sweep] "
                       "table (what is swept, the metric, early stopping) is read from " +
                       source + " only: edit it there");
  toml::table root;
  try {
    root = toml::parse(std::string_view(toml_text), std::string_view(source));
  } catch (const toml::parse_error& e) {
    const auto& b = e.source().begin;
    throw ValueError("[sweep] " + source + ": line " + std::to_string(b.line) + ", column " +
                     std::to_string(b.column) + ": invalid TOML: " + std::string(e.description()));
  }
  const auto* sweep = root.get("sweep");
  if (sweep == nullptr || !sweep->is_table())
    throw ValueError("[sweep] " + source + ": no [sweep] table (what to vary, see the user guide)");
  SweepPlan plan;
  plan.spec = spec_of(w, *sweep->as_table());
  root.erase("sweep");
  plan.base_toml = text_of(root);
  const RunConfig base = parse_run_config(plan.base_toml, source, overrides);
  check_metric_for(w, plan.spec, base);
  std::vector<std::int64_t> seeds = plan.spec.seeds;
  if (seeds.empty()) seeds.push_back(static_cast<std::int64_t>(base.run.seed));
  std::string tags = "[";
  for (const auto& t : base.run.tags)
    tags += quoted(t) + ", ";
  tags += quoted("sweep:" + plan.spec.name) + "]";

  // Each point keeps the keys its config reads; the others are dropped (and equal points merged).
  std::set<std::string> applied;
  std::vector<std::string> refusals;
  std::vector<Assignment> points;
  std::vector<std::string> point_bases;  // the config each point starts from
  std::set<Assignment> seen;
  for (Assignment a : points_of(plan.spec)) {
    const Assignment asked = a;
    toml::table point_root = root;
    while (true) {
      std::vector<std::string> sets = overrides;
      for (const auto& s : sets_of(a))
        sets.push_back(s);
      try {
        (void)parse_run_config(text_of(point_root), source, sets);
        break;
      } catch (const ConfigError& e) {
        const std::string& path = e.problem().key_path;
        if (!not_applicable(e) || path.empty())
          throw ValueError("[sweep] " + source + ": the point " + describe(asked) + ": " +
                           in_sweep_terms(e.what(), a));
        const auto drop = std::find_if(a.begin(), a.end(), [&](const auto& kv) {
          return kv.first == path || kv.first.rfind(path + ".", 0) == 0;
        });
        if (drop != a.end()) {  // a swept key this point does not read
          // The point's values reach the config as settings: say so in the sweep's terms.
          refusals.push_back(drop->first + ": " + in_sweep_terms(e.what(), a));
          a.erase(drop);
        } else if (!erase_path(point_root, path)) {  // nor a key of the config it makes moot
          throw ValueError("[sweep] " + source + ": the point " + describe(asked) + ": " +
                           in_sweep_terms(e.what(), a));
        }
      }
    }
    for (const auto& kv : a)
      applied.insert(kv.first);
    if (seen.insert(a).second) {
      points.push_back(std::move(a));
      point_bases.push_back(text_of(point_root));
    }
  }
  for (const auto& p : plan.spec.parameters) {
    if (applied.count(p.key)) continue;
    // Why, from a point's side; one that names the key meant ("did you mean 'optimizer.lr'?", an
    // AdamW point's for a misspelt key) before one that lists a table's keys (a Muon point's).
    std::string why;
    for (const auto& r : refusals) {
      if (r.rfind(p.key + ": ", 0) != 0) continue;
      const bool suggests = r.find("did you mean") != std::string::npos;
      if (why.empty() || (suggests && why.find("did you mean") == std::string::npos))
        why = r.substr(p.key.size() + 2);
    }
    w.fail("sweep.parameters.'" + p.key + "'", "applies to no point (" + why + ")");
  }
  for (std::size_t i = 0; i < points.size(); ++i) {
    for (std::int64_t seed : seeds) {
      SweepTrial t;
      t.index = static_cast<std::int64_t>(plan.trials.size());
      t.point = static_cast<std::int64_t>(i);
      t.seed = seed;
      t.assignment = points[i];
      t.overrides = overrides;
      for (const auto& s : sets_of(points[i]))
        t.overrides.push_back(s);
      t.overrides.push_back("run.seed=" + std::to_string(seed));
      t.overrides.push_back("run.name=" + quoted(plan.spec.name + " p" + std::to_string(i) + " s" +
                                                 std::to_string(seed)));
      t.overrides.push_back("run.tags=" + tags);
      // Paths absolute from the folder the sweep is planned in: a trial started after
      // `sweep --resume` from another folder reads the same files.
      RunConfig trial = parse_run_config(point_bases[i], source, t.overrides);
      make_paths_absolute(trial);
      t.config = to_toml(trial);
      plan.trials.push_back(std::move(t));
    }
  }
  return plan;
}

SweepPlan plan_sweep_file(const std::string& path, const std::vector<std::string>& overrides) {
  return plan_sweep(read_config_file(path, "sweep"), path, overrides);
}

}  // namespace tb::train
