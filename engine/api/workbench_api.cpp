// The GUI's facade: config text checks and views, in-process runs with live metrics and control,
// and a live reader of the run store. See workbench_api.h.
#include "engine/api/workbench_api.h"

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstring>
#include <map>
#include <mutex>
#include <set>
#include <sstream>

#include "engine/api/api_detail.h"
#include "engine/core/device.h"
#include "engine/core/error.h"
#include "engine/core/metric_names.h"
#include "engine/nn/init.h"
#include "engine/nn/model_registry.h"
#include "engine/optim/param_split.h"
#include "engine/optim/registry.h"
#include "engine/rng/cpu_generator.h"
#include "engine/store/database.h"
#include "engine/store/run_store.h"
#include "engine/store/run_writer.h"
#include "engine/store/sweeps.h"
#include "engine/train/config_effect.h"
#include "engine/train/config_schema.h"
#include "engine/train/run_config.h"
#include "engine/train/trainer.h"

namespace tb::api {

namespace {

// ---- config text helpers ------------------------------------------------------------------------

// "bool", "int", "float", "string", "array" or "table" of a value as to_toml() writes it.
std::string toml_type(const std::string& v) {
  if (v == "true" || v == "false") return "bool";
  if (v.empty()) return "string";
  const char c = v.front();
  if (c == '"' || c == '\'') return "string";
  if (c == '[') return "array";
  if (c == '{') return "table";
  if (v.find_first_of(".eE") != std::string::npos || v.find("inf") != std::string::npos ||
      v.find("nan") != std::string::npos)
    return "float";
  return "int";
}

// The text of a one-line TOML string value ("\"mlp\"" -> "mlp"); other values as they are.
std::string unquote(const std::string& v) {
  if (v.size() >= 2 && v.front() == '\'' && v.back() == '\'') return v.substr(1, v.size() - 2);
  if (v.size() < 2 || v.front() != '"' || v.back() != '"') return v;
  std::string out;
  for (std::size_t i = 1; i + 1 < v.size(); ++i) {
    char ch = v[i];
    if (ch == '\\' && i + 2 < v.size()) {
      ch = v[++i];
      switch (ch) {
        case 'n':
          ch = '\n';
          break;
        case 't':
          ch = '\t';
          break;
        case 'r':
          ch = '\r';
          break;
        case 'b':
          ch = '\b';
          break;
        case 'f':
          ch = '\f';
          break;
        default:
          break;  // \" and \\ (and \uXXXX kept as the letter u: a display value only)
      }
    }
    out += ch;
  }
  return out;
}

std::string shape_text(core::IntList sizes) {
  std::string s = "[";
  for (std::size_t i = 0; i < sizes.size(); ++i)
    s += (i ? ", " : "") + std::to_string(sizes[i]);
  return s + "]";
}

std::int64_t numel_of(core::IntList sizes) {
  std::int64_t n = 1;
  for (auto d : sizes)
    n *= d;
  return n;
}

// ---- runs ---------------------------------------------------------------------------------------

}  // namespace

// ---- run configs as text ------------------------------------------------------------------------

/// The parsed config of a ParsedConfig.
struct ParsedConfig::Impl {
  train::RunConfig config;  ///< as parsed
};

ParsedConfig::ParsedConfig() = default;
ParsedConfig::~ParsedConfig() = default;
ParsedConfig::ParsedConfig(const ParsedConfig&) = default;
ParsedConfig& ParsedConfig::operator=(const ParsedConfig&) = default;

ParsedConfig parse_config(const std::string& toml_text, const std::string& source,
                          const std::vector<std::string>& overrides) {
  ParsedConfig out;
  ConfigCheck& check = out.check_;
  try {
    auto impl = std::make_shared<ParsedConfig::Impl>();
    impl->config = train::parse_run_config(toml_text, source, overrides);
    // Valid text naming a device this machine cannot use (no GPU, openreg:7) fails here too,
    // with the backend's reason, so the editor marks run.device before a run is started.
    const std::string& device = impl->config.run.device;
    const std::string why = core::device_unavailable_reason(core::Device::parse(device));
    if (!why.empty()) {
      const std::string message = "'" + device + "' cannot be used here: " + why;
      throw ConfigError(ConfigProblem{source, "run.device", 0, 0, message},
                        "[config] " + source + ": run.device: " + message);
    }
    check.effective_toml = train::to_toml(impl->config);
    check.ok = true;
    out.impl_ = std::move(impl);
  } catch (const ConfigError& e) {
    check.error = e.what();
    check.key_path = e.problem().key_path;
    check.line = e.problem().line;
    check.column = e.problem().column;
    check.message = e.problem().message;
  } catch (const std::exception& e) {
    check.error = e.what();
    check.message = e.what();
  }
  return out;
}

ConfigCheck check_config_text(const std::string& toml_text, const std::string& source,
                              const std::vector<std::string>& overrides) {
  return parse_config(toml_text, source, overrides).check();
}

std::string default_config_toml() {
  return train::to_toml(train::parse_run_config("", "<defaults>"));
}

namespace {

const train::RunConfig& parsed(const ParsedConfig& p) {
  if (!p.ok()) throw ValueError(p.check().error.empty() ? "[config] not parsed" : p.check().error);
  return p.impl_->config;
}

}  // namespace

std::vector<ConfigField> config_fields(const ParsedConfig& config) {
  const train::RunConfig& c = parsed(config);
  const auto rows = detail::flatten_toml_ordered(config.check().effective_toml);
  const std::string scheduler_kind =
      c.scheduler.config.is_object() ? c.scheduler.config.value("kind", "none") : "none";
  std::vector<ConfigField> out;
  out.reserve(rows.size());
  for (const auto& [key, value] : rows) {
    ConfigField f;
    f.key = key;
    const auto dot = key.rfind('.');
    f.section = dot == std::string::npos ? "" : key.substr(0, dot);
    f.type = toml_type(value);
    f.value_toml = value;
    if (const auto spec = train::describe_key(key, c.model.kind, c.data.kind, c.optimizer.main.kind,
                                              scheduler_kind)) {
      if (f.type == "string") f.choices = spec->choices;
      f.help = spec->help;
    }
    f.idle = train::idle_reason(c, key);
    out.push_back(std::move(f));
  }
  return out;
}

std::vector<ConfigField> config_fields(const std::string& toml_text) {
  return config_fields(parse_config(toml_text));
}

std::vector<SplitRow> parameter_split(const ParsedConfig& config) {
  const train::RunConfig& c = parsed(config);
  rng::CpuGenerator gen;  // a private generator: the default one's state is left alone
  gen.manual_seed(c.run.seed);
  nn::init::SkipInitGuard shapes_only;  // the names and shapes are all that is shown
  const auto model = nn::build_model(c.model, &gen);
  std::vector<SplitRow> out;
  if (!optim::optimizer_registry().at(c.optimizer.main.kind)->rest_kind.empty()) {
    const auto split =
        optim::split_params(*model, c.optimizer.split, c.optimizer.flattens_conv_filters());
    for (const auto& r : split.table) {
      const core::IntList shape(r.shape);
      out.push_back({r.name, shape_text(shape), numel_of(shape), r.optimizer, r.reason});
    }
  } else {
    for (const auto& [name, t] : model->named_parameters())
      out.push_back(
          {name, shape_text(t.sizes()), t.numel(), c.optimizer.main.kind, "all parameters"});
  }
  return out;
}

std::vector<SplitRow> parameter_split(const std::string& toml_text) {
  return parameter_split(parse_config(toml_text));
}

ScheduleTable preview_config(const ParsedConfig& config, int steps,
                             std::vector<std::string>& group_names) {
  return detail::preview_config(parsed(config), steps, group_names);
}

ScheduleTable preview_config_text(const std::string& toml_text, int steps,
                                  std::vector<std::string>& group_names) {
  return preview_config(parse_config(toml_text), steps, group_names);
}

// ---- runs started in-process --------------------------------------------------------------------

RunOutcomeInfo start_training(const TrainRequest& request,
                              const std::function<void(std::int64_t, const std::string&)>& on_start,
                              const std::function<void(const StepMetrics&)>& on_metrics) {
  RunSpec spec;
  spec.config_text = request.config_text;
  spec.source = request.source;
  spec.overrides = request.overrides;
  spec.db_path = request.db_path;
  spec.control = request.control;
  spec.resume = request.resume;
  // A distributed run: its ranks are other processes (trainbench-cli launch --ddp), followed here.
  if (!started_as_rank()) {
    std::optional<train::RunConfig> config;
    if (!spec.config_text.empty()) {
      config = train::parse_run_config(spec.config_text, spec.source, spec.overrides);
    } else if (spec.resume) {
      StoreReader store(spec.db_path);
      config = train::parse_run_config(store.config_text(*spec.resume),
                                       "run " + std::to_string(*spec.resume) + "'s stored config",
                                       spec.overrides);
    }
    if (config && config->distributed.backend != "none" && config->distributed.world_size >= 2)
      return detail::follow_distributed_run(spec, {on_start, on_metrics, {}}, *config);
  }
  RunObserver observer{on_start, on_metrics, {}};
  if (request.on_warning)
    observer.on_event = [&request](const std::string&, const std::string& text) {
      request.on_warning(text);
    };
  return execute_run(spec, observer);
}

// ---- the store ----------------------------------------------------------------------------------

std::vector<ConfigDiffRow> config_diff(const std::vector<std::string>& toml_texts) {
  std::vector<std::map<std::string, std::string>> configs;
  std::set<std::string> keys;
  for (const auto& text : toml_texts) {
    configs.push_back(detail::flatten_toml(text));
    for (const auto& [k, v] : configs.back())
      keys.insert(k);
  }
  std::vector<ConfigDiffRow> out;
  for (const auto& k : keys) {
    ConfigDiffRow row;
    row.key = k;
    for (const auto& c : configs) {
      auto it = c.find(k);
      row.values.push_back(it == c.end() ? "-" : it->second);
    }
    if (std::all_of(row.values.begin(), row.values.end(),
                    [&](const std::string& v) { return v == row.values.front(); }))
      continue;
    row.only_some = detail::only_some(row.values);
    out.push_back(std::move(row));
  }
  return out;
}

namespace {

// What runs() reads per run besides the summary: from the config and four metrics.
struct RunFacts {
  store::RunStatus status = store::RunStatus::kQueued;
  std::optional<std::int64_t> last_step;
  double created_at = 0;
  std::string model, optimizer, scheduler, dataset;
  int world_size = 1;
  std::string dist_backend;
  std::optional<double> final_loss, best_eval_loss, best_accuracy, best_perplexity;
  // The table's metrics up to last_step, kept up to date from the points after it while the
  // run trains (reading every point of every metric once a second grew with the run).
  std::map<std::string, store::MetricSummary> tracked;
};

constexpr const char* kTableMetrics[] = {core::metric::kLoss, core::metric::kEvalLoss,
                                         core::metric::kEvalAccuracy,
                                         core::metric::kEvalPerplexity};

std::optional<double> finite(double v) {
  return std::isnan(v) ? std::nullopt : std::optional<double>(v);
}

void derive_metrics(RunFacts& f) {
  const auto value = [&](const char* key, double store::MetricSummary::*field) {
    const auto it = f.tracked.find(key);
    return it == f.tracked.end() || it->second.count == 0 ? std::nullopt
                                                          : finite(it->second.*field);
  };
  f.final_loss = value(core::metric::kLoss, &store::MetricSummary::last_value);
  f.best_eval_loss = value(core::metric::kEvalLoss, &store::MetricSummary::min_value);
  f.best_accuracy = value(core::metric::kEvalAccuracy, &store::MetricSummary::max_value);
  f.best_perplexity = value(core::metric::kEvalPerplexity, &store::MetricSummary::min_value);
}

RunFacts read_facts(const store::RunStore& st, std::int64_t run) {
  const store::RunDetails d = st.get_run(run, store::RunStore::Metrics::kNone);
  RunFacts f;
  f.status = d.summary.status;
  f.last_step = d.summary.last_step;
  f.created_at = d.summary.created_at;
  const auto flat = detail::flatten_toml(d.config);
  auto get = [&](const char* key, const char* fallback) {
    auto it = flat.find(key);
    return it == flat.end() ? std::string(fallback) : unquote(it->second);
  };
  f.model = get("model.kind", "");
  f.optimizer = get("optimizer.kind", "");
  f.scheduler = get("scheduler.kind", "none");
  f.dataset = get("data.kind", "");
  // A data-parallel run stores its resolved world size (the launcher sets it for every rank).
  // Ranks started from a torchrun-style environment store world_size = 0 (taken from the
  // environment); their per-rank metrics (rank<r>/...) say how many there were.
  const std::string backend = get("distributed.backend", "none");
  if (backend != "none") {
    f.dist_backend = backend;
    try {
      f.world_size = std::max(1, std::stoi(get("distributed.world_size", "1")));
    } catch (const std::exception&) {  // hand-edited config: the run is still listed
      f.world_size = 1;
    }
  }
  if (!f.dist_backend.empty())
    f.world_size = std::max(f.world_size, detail::ranks_in_metrics(st.metric_keys(run)));
  for (const char* key : kTableMetrics) {
    store::MetricSummary& m = f.tracked[key];
    m.key = key;
    store::extend_summary(m, st.series(run, key));
  }
  derive_metrics(f);
  return f;
}

// A run that was training and still is only appended points since `f` was read: the points
// after its last step. (A resume rewinds a run that had ended: read again in full.)
bool follow_facts(const store::RunStore& st, const store::RunSummary& s, RunFacts& f) {
  if (f.status != store::RunStatus::kRunning || s.status != store::RunStatus::kRunning ||
      f.created_at != s.created_at || !f.last_step || !s.last_step || *s.last_step < *f.last_step)
    return false;
  for (const char* key : kTableMetrics)
    store::extend_summary(f.tracked[key], st.series(s.id, key, *f.last_step + 1));
  f.last_step = s.last_step;
  derive_metrics(f);
  return true;
}

// FNV-1a, 64 bits.
std::uint64_t fnv1a(const std::string& s) {
  std::uint64_t h = 1469598103934665603ULL;
  for (unsigned char c : s) {
    h ^= c;
    h *= 1099511628211ULL;
  }
  return h;
}

}  // namespace

/// The store connection and the per-run facts already read (refreshed when a run's status or
/// newest step changes).
struct StoreReader::Impl {
  store::RunStore store;                   ///< the connection
  std::map<std::int64_t, RunFacts> facts;  ///< by run id
};

StoreReader::StoreReader(const std::string& db_path)
    : impl_(std::make_unique<Impl>(Impl{store::RunStore::open(detail::store_path(db_path)), {}})) {}
StoreReader::StoreReader(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
StoreReader StoreReader::existing(const std::string& db_path) {
  return StoreReader(std::make_unique<Impl>(Impl{detail::existing_store(db_path), {}}));
}
StoreReader::~StoreReader() = default;
StoreReader::StoreReader(StoreReader&&) noexcept = default;
StoreReader& StoreReader::operator=(StoreReader&&) noexcept = default;

std::string StoreReader::path() const {
  return impl_->store.path().string();
}

std::vector<RunInfo> StoreReader::runs() const {
  const auto summaries = impl_->store.list_runs();
  std::map<std::int64_t, std::string> sweep_names;
  for (const auto& sw : store::list_sweeps(impl_->store))
    sweep_names[sw.id] = sw.name;
  std::map<std::int64_t, RunFacts> fresh;
  std::vector<RunInfo> out;
  out.reserve(summaries.size());
  for (const auto& s : summaries) {
    auto it = impl_->facts.find(s.id);
    if (it != impl_->facts.end() && it->second.status == s.status &&
        it->second.last_step == s.last_step && it->second.created_at == s.created_at) {
      fresh.emplace(s.id, std::move(it->second));
    } else if (it != impl_->facts.end() && follow_facts(impl_->store, s, it->second)) {
      fresh.emplace(s.id, std::move(it->second));
    } else {
      try {
        fresh.emplace(s.id, read_facts(impl_->store, s.id));
      } catch (const ValueError&) {  // deleted by another connection since list_runs()
        continue;
      }
    }
    const RunFacts& f = fresh.at(s.id);
    RunInfo r;
    r.id = s.id;
    r.name = s.name;
    r.tags = s.tags;
    r.status = std::string(store::to_string(s.status));
    r.created_at = s.created_at;
    r.started_at = s.started_at;
    r.ended_at = s.ended_at;
    r.paused_seconds = s.paused_seconds;
    r.last_step = s.last_step;
    r.message = s.message;
    r.model = f.model;
    r.optimizer = f.optimizer;
    r.scheduler = f.scheduler;
    r.dataset = f.dataset;
    r.world_size = f.world_size;
    r.dist_backend = f.dist_backend;
    r.final_loss = f.final_loss;
    r.best_eval_loss = f.best_eval_loss;
    r.best_accuracy = f.best_accuracy;
    r.best_perplexity = f.best_perplexity;
    if (s.sweep_id) r.sweep = sweep_names[*s.sweep_id];
    r.sweep_point = s.sweep_point;
    out.push_back(std::move(r));
  }
  impl_->facts = std::move(fresh);
  return out;
}

std::vector<SweepRow> StoreReader::sweeps() const {
  return detail::list_sweeps(impl_->store);
}

SweepResult StoreReader::sweep(const std::string& name) const {
  return detail::sweep_table(impl_->store, name);
}

std::string StoreReader::fingerprint() const {
  // One query of the runs table: every field runs() shows from it.
  std::ostringstream os;
  os.precision(17);
  const auto summaries = impl_->store.list_runs();
  for (const auto& s : summaries) {
    os << s.id << '\x1f' << store::to_string(s.status) << '\x1f'
       << (s.last_step ? std::to_string(*s.last_step) : "-") << '\x1f' << s.name << '\x1f';
    for (const auto& t : s.tags)
      os << t << '\x1e';
    os << '\x1f' << s.created_at << '\x1f' << (s.ended_at ? *s.ended_at : -1.0) << '\x1f'
       << s.message << '\x1d';
  }
  std::ostringstream fp;
  fp << summaries.size() << ':' << std::hex << fnv1a(os.str());
  return fp.str();
}

std::vector<std::string> StoreReader::metric_keys(std::int64_t run) const {
  return impl_->store.metric_keys(run);
}

double StoreReader::trained_seconds(std::int64_t run, double when) const {
  const store::RunSummary s = impl_->store.get_run(run, store::RunStore::Metrics::kNone).summary;
  if (!s.started_at) return 0;
  double paused = 0;
  double ended = -1;  // the end a resume follows (-1: none)
  for (const auto& e : impl_->store.events(run)) {
    if (e.text.rfind("status ", 0) != 0) continue;
    if (e.time >= when) break;
    if (e.text.rfind("status running -> ", 0) == 0) {
      ended = e.time;
    } else if (e.text.find(" -> running") != std::string::npos && ended >= 0) {
      paused += e.time - ended;
      ended = -1;
    }
  }
  return std::max(0.0, when - *s.started_at - paused);
}

Series StoreReader::series(std::int64_t run, const std::string& key, std::int64_t from_step) const {
  Series out;
  const auto points = impl_->store.series(run, key, from_step);
  if (points.empty()) return out;
  // The run's first point: the earliest first point over its metric keys (one index seek per
  // key), so that every series of a run, and every poll of one, share the origin.
  double origin = points.front().time;
  if (const auto first = impl_->store.first_point_time(run)) origin = std::min(origin, *first);
  out.origin = origin;
  out.step.reserve(points.size());
  out.wall_s.reserve(points.size());
  out.value.reserve(points.size());
  for (const auto& p : points) {
    out.step.push_back(static_cast<double>(p.step));
    out.wall_s.push_back(p.time - origin);
    out.value.push_back(p.value);
  }
  return out;
}

std::string StoreReader::config_text(std::int64_t run) const {
  store::detail::Statement st =
      impl_->store.connection().prepare("SELECT config FROM runs WHERE id = ?");
  st.bind(1, run);
  if (!st.step())
    throw ValueError("[store] " + impl_->store.path().string() + ": no run " + std::to_string(run));
  return st.text(0);
}

std::vector<std::string> StoreReader::events(std::int64_t run) const {
  std::vector<std::string> out;
  for (const auto& e : impl_->store.events(run))
    out.push_back(std::string(store::to_string(e.level)) + ": " + e.text);
  return out;
}

void StoreReader::rename_run(std::int64_t run, const std::string& name) {
  TB_CHECK(!name.empty(), "[store] ", impl_->store.path().string(), ": run ", run,
           ": a run name must not be empty");
  impl_->store.rename_run(run, name);
}

bool StoreReader::close_own_run_left_running(std::int64_t run, const std::string& message) {
  const bool changed = impl_->store.close_own_run_left_running(run, message);
  if (changed) impl_->facts.erase(run);
  return changed;
}

void StoreReader::set_tags(std::int64_t run, const std::vector<std::string>& tags) {
  impl_->store.set_tags(run, tags);
}

void StoreReader::delete_run(std::int64_t run) {
  impl_->store.delete_run(run);
  impl_->facts.erase(run);
}

}  // namespace tb::api
