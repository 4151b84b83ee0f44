// Sweeps: plan, record, run through the launcher with early stopping, read back (see
// sweep_api.h).
#include "engine/api/sweep_api.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <limits>
#include <map>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "engine/api/api_detail.h"
#include "engine/api/launch_api.h"
#include "engine/core/device.h"
#include "engine/core/error.h"
#include "engine/core/file_write.h"
#include "engine/numa/binding.h"
#include "engine/store/run_store.h"
#include "engine/store/sweeps.h"
#include "engine/train/run_config.h"
#include "engine/train/sweep.h"

namespace tb::api {
namespace {

// Early stopping compares the points at steps before the end of their runs: a rung at or past a
// trial's last step would rank finished runs and "stop" nothing. Checked against each trial's
// length where it can be known here (run.steps, or run.epochs over readable data).
void check_rungs(const train::SweepPlan& plan) {
  const auto& es = plan.spec.early_stopping;
  if (es.method == "none" || es.steps.empty()) return;
  for (const auto& t : plan.trials) {
    // Each trial's own length (run_steps remembers the data's size per [data] table and seed,
    // so trials that share them read it once): a sweep over the seed, the ranks or the
    // gradient accumulation has trials of other lengths.
    const train::RunConfig rc = train::parse_run_config(t.config, "trial", {});
    const std::optional<std::int64_t> steps = detail::run_steps(rc);
    if (!steps) continue;
    TB_CHECK(es.steps.back() < *steps, "[sweep] sweep.early_stopping.steps: step ", es.steps.back(),
             " is not before the end of trial ", t.index, "'s run (", *steps,
             " steps): the points would be compared after their runs finished. Give steps "
             "below ",
             *steps, ", or lengthen the runs");
  }
}

SweepPreview preview_of(const train::SweepPlan& plan) {
  check_rungs(plan);
  SweepPreview p;
  p.name = plan.spec.name;
  p.method = plan.spec.method;
  p.metric = plan.spec.metric;
  p.goal = plan.spec.goal;
  p.stopping = plan.spec.early_stopping.method;
  p.rungs = plan.spec.early_stopping.steps;
  p.reduction_factor = plan.spec.early_stopping.reduction_factor;
  for (const auto& param : plan.spec.parameters) {
    p.keys.push_back(param.key);
    p.parameters.push_back({param.key, param.distribution, param.values, param.min, param.max});
  }
  p.random_trials = plan.spec.trials;
  p.seeds = plan.spec.seeds;
  p.base_toml = plan.base_toml;
  for (const auto& t : plan.trials) {
    if (t.point == static_cast<std::int64_t>(p.points.size())) p.points.push_back(t.assignment);
    SweepTrialRow r;
    r.index = t.index;
    r.point = t.point;
    r.seed = t.seed;
    r.name = plan.spec.name + " p" + std::to_string(t.point) + " s" + std::to_string(t.seed);
    for (const auto& [k, v] : t.assignment)
      r.values += (r.values.empty() ? "" : ", ") + k + "=" + v;
    p.trials.push_back(std::move(r));
  }
  return p;
}

// The plan as stored with the sweep (the trials are stored as rows of their own).
nlohmann::json to_json(const SweepPreview& p) {
  return {{"format", "trainbench-sweep"},
          {"version", 2},
          {"name", p.name},
          {"method", p.method},
          {"metric", p.metric},
          {"goal", p.goal},
          {"early_stopping",
           {{"method", p.stopping}, {"steps", p.rungs}, {"reduction_factor", p.reduction_factor}}},
          {"keys", p.keys},
          {"points", p.points}};
}

SweepPreview preview_of(const store::SweepRecord& rec,
                        const std::vector<store::SweepTrialRecord>& trials) {
  const nlohmann::json j = nlohmann::json::parse(rec.plan, nullptr, false);
  TB_CHECK(j.is_object() && j.value("format", "") == "trainbench-sweep", "[sweep] sweep '",
           rec.name, "': its stored plan is not a sweep plan");
  SweepPreview p;
  p.name = rec.name;
  p.method = rec.method;
  p.metric = rec.metric;
  p.goal = rec.goal;
  if (const auto es = j.find("early_stopping"); es != j.end()) {
    p.stopping = es->value("method", std::string("none"));
    p.rungs = es->value("steps", std::vector<std::int64_t>{});
    p.reduction_factor = es->value("reduction_factor", 2.0);
  }
  p.keys = j.value("keys", std::vector<std::string>{});
  if (const auto pts = j.find("points"); pts != j.end() && pts->is_array())
    p.points = pts->get<std::vector<std::vector<std::pair<std::string, std::string>>>>();
  for (const auto& t : trials) {
    p.trials.push_back({t.trial, t.point, t.seed, t.name, t.assignment});
    if (j.contains("points") || t.point != static_cast<std::int64_t>(p.points.size())) continue;
    // A plan without its points' values (written before they were stored): read them back from
    // the trial's "key=value, key=value" text, a key being a dotted name before '='.
    auto& values = p.points.emplace_back();
    const std::string& a = t.assignment;
    std::size_t start = 0;
    while (start < a.size()) {
      const std::size_t eq = a.find('=', start);
      if (eq == std::string::npos) break;
      std::size_t end = a.size();
      for (std::size_t c = a.find(", ", eq); c != std::string::npos; c = a.find(", ", c + 1)) {
        const std::size_t next_eq = a.find('=', c + 2);
        if (next_eq != std::string::npos &&
            a.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.",
                                c + 2) == next_eq) {
          end = c;
          break;
        }
      }
      values.emplace_back(a.substr(start, eq - start), a.substr(eq + 1, end - eq - 1));
      if (std::find(p.keys.begin(), p.keys.end(), values.back().first) == p.keys.end())
        p.keys.push_back(values.back().first);
      start = end + 2;
    }
  }
  std::sort(p.keys.begin(), p.keys.end());
  return p;
}

// The last "error: ..." line a process wrote to its log from byte `from` on (the log gathers
// every invocation's output: an earlier one's error is not this one's), without the prefix (""
// without one).
std::string last_error(const std::string& log, std::uintmax_t from) {
  std::ifstream in(log);
  std::error_code ec;
  // (A log cut shorter meanwhile, by a rotation: read it all.)
  if (from <= std::filesystem::file_size(log, ec) && !ec)
    in.seekg(static_cast<std::streamoff>(from));
  std::string line, error;
  while (std::getline(in, line))
    if (line.rfind("error: ", 0) == 0) error = line.substr(7);
  constexpr std::size_t kMax = 400;
  if (error.size() > kMax) error = error.substr(0, kMax) + "...";
  return error;
}

// "see LOG", and why it is empty when its disk is full (a run does not stop for its output).
std::string see_log(const std::string& log) {
  std::error_code ec, full;
  const bool empty = std::filesystem::file_size(log, ec) == 0 && !ec;
  const auto room = std::filesystem::space(std::filesystem::path(log).parent_path(), full);
  return "see " + log +
         (empty && !full && room.available < (1u << 20) ? " (empty: its disk is full)" : "");
}

store::SweepRecord find_or_explain(store::RunStore& st, const std::string& name) {
  if (auto rec = store::find_sweep(st, name)) return *rec;
  std::string names;
  for (const auto& s : store::list_sweeps(st))
    names += (names.empty() ? "" : ", ") + s.name;
  throw ValueError("[sweep] " + st.path().string() + " has no sweep '" + name + "'" +
                   (names.empty() ? std::string(" (it has none)") : " (it has: " + names + ")"));
}

// The step of a run's newest checkpoint on disk, the one a resume starts from (nullopt without
// one).
std::optional<std::int64_t> checkpoint_step(store::RunStore& st, std::int64_t run) {
  if (st.checkpoints(run).empty()) return std::nullopt;
  try {
    return detail::newest_checkpoint(st, run, "[sweep]", "").step;
  } catch (const ValueError&) {  // every one gone from disk
    return std::nullopt;
  }
}

// Whether a trial's newest run has reached `target` (0: the end): nothing left to run for it.
bool reached(store::RunStore& st, const store::SweepTrialRecord& t, std::int64_t target) {
  if (!t.run_id || !t.run_status) return false;
  switch (*t.run_status) {
    case store::RunStatus::kFinished:
    case store::RunStatus::kFailed:
    case store::RunStatus::kDiverged:
      return true;  // results
    case store::RunStatus::kCancelled:
    case store::RunStatus::kCrashed: {
      const auto ck = checkpoint_step(st, *t.run_id);
      return target > 0 && ck && *ck >= target;
    }
    case store::RunStatus::kRunning:
      throw ValueError("[sweep] trial " + std::to_string(t.trial) + "'s run " +
                       std::to_string(*t.run_id) +
                       " is running in another process; let it end (or cancel it) first");
    case store::RunStatus::kQueued:
      return false;
  }
  return false;
}

// A trial to launch: a new run, or a stored run to continue from its newest checkpoint.
struct Job {
  std::size_t trial = 0;
  std::int64_t resume = 0;
};

// The metric of a run at `step`: its newest point at or before it (nullopt without one).
std::optional<double> value_at(store::RunStore& st, std::int64_t run, const std::string& metric,
                               std::int64_t step) {
  std::optional<double> v;
  for (const auto& p : st.series(run, metric)) {
    if (p.step > step) break;
    v = p.value;
  }
  return v;
}

std::string join(const std::vector<std::string>& parts, const std::string& sep) {
  std::string out;
  for (const auto& p : parts)
    out += (out.empty() ? "" : sep) + p;
  return out;
}

std::string number(double v) {
  std::ostringstream os;
  os << std::setprecision(4) << v;
  return os.str();
}

}  // namespace

detail::RungDecision detail::rung_decision(std::vector<std::pair<double, std::int64_t>> ranked,
                                           const std::set<std::int64_t>& lost_a_seed,
                                           const std::string& stopping, double reduction_factor,
                                           bool max) {
  std::stable_sort(ranked.begin(), ranked.end(), [&](const auto& a, const auto& b) {
    return max ? a.first > b.first : a.first < b.first;
  });
  RungDecision d;
  const std::size_t n = ranked.size();
  d.stop.insert(lost_a_seed.begin(), lost_a_seed.end());
  if (stopping == "successive_halving") {
    const auto keep = static_cast<std::size_t>(
        std::max(1.0, std::ceil(static_cast<double>(n) / reduction_factor)));
    for (std::size_t i = keep; i < n; ++i)
      d.stop.insert(ranked[i].second);
    d.rule = "keep the best " + std::to_string(keep) + " of " + std::to_string(n);
  } else if (n > 0) {  // median: worse than the median of the points' scores
    const double median =
        n % 2 == 1 ? ranked[n / 2].first : (ranked[n / 2 - 1].first + ranked[n / 2].first) / 2;
    for (const auto& [score, point] : ranked)
      if (max ? score < median : score > median) d.stop.insert(point);
    d.rule = "stop those worse than the median " + number(median);
  }
  if (!lost_a_seed.empty()) d.rule += "; a point that lost a seed is stopped";
  d.ranked = std::move(ranked);
  return d;
}

void detail::settle_rung_stops(RungDecision& decision,
                               const std::vector<store::SweepTrialRecord>& trials,
                               std::int64_t step, const std::set<std::int64_t>& ended) {
  // Per point: its trials that go on from this rung (not ended, not stopped at an earlier one),
  // whether all of those have gone past it (or finished), and whether all were stopped here.
  struct Going {
    int count = 0;
    bool all_past = true;
    bool all_stopped_here = true;
  };
  std::map<std::int64_t, Going> going;
  for (const auto& t : trials) {
    if (ended.count(t.trial) || (t.stopped_step && *t.stopped_step < step)) continue;
    Going& g = going[t.point];
    ++g.count;
    g.all_past = g.all_past && (t.run_status == store::RunStatus::kFinished ||
                                (t.last_step && *t.last_step > step));
    g.all_stopped_here = g.all_stopped_here && t.stopped_step && *t.stopped_step == step;
  }
  for (const auto& [point, g] : going) {
    if (g.count == 0) continue;
    if (g.all_stopped_here)
      decision.stop.insert(point);
    else if (g.all_past)
      decision.stop.erase(point);
  }
}

namespace {

// Early stopping at rung `step`: ranks the points that reached it (those not stopped at an earlier
// rung, so that taking the decision again after a resume gives the same one) by their seeds' mean
// metric there (a missing or NaN value ranks last), and records the worse points' trials as
// stopped. `errors`: trials whose process ended with an error before the rung, without a result
// (a resume refused: trial -> "exit code 1"); they have ended as failed runs have. Returns a line
// saying what was kept and stopped.
std::string decide(store::RunStore& st, std::int64_t sweep_id, const SweepPreview& plan,
                   std::int64_t step, const std::map<std::int64_t, std::string>& errors) {
  const bool max = plan.goal == "max";
  const double worst =
      max ? -std::numeric_limits<double>::infinity() : std::numeric_limits<double>::infinity();
  const auto trials = store::sweep_trials(st, sweep_id);
  // A trial whose run failed or diverged has ended: it ranks last (as a missing value does), so
  // it takes a place among the points that stop, but it is not recorded as stopped. One failed
  // seed of a point whose others go on makes the point's mean the worst: an unstable setting is
  // stopped.
  auto ended = [&](const store::SweepTrialRecord& t) {
    return t.run_status == store::RunStatus::kFailed ||
           t.run_status == store::RunStatus::kDiverged || errors.count(t.trial) > 0;
  };
  std::map<std::int64_t, std::vector<double>> values;  // point -> its trials' values
  std::map<std::int64_t, std::string> why_worst;       // point -> a trial's end that ranks it last
  std::set<std::int64_t> live;                         // points with a trial that goes on
  for (const auto& t : trials) {
    if (t.stopped_step && *t.stopped_step < step) continue;
    if (!ended(t)) live.insert(t.point);
    // Only a run that got to the rung (or ended before it, finished) has its value there: an
    // earlier point of a run that failed on the way is not it.
    std::optional<double> v;
    const bool there =
        t.run_status == store::RunStatus::kFinished || (t.last_step && *t.last_step >= step);
    if (t.run_id && there) v = value_at(st, *t.run_id, plan.metric, step);
    if (ended(t) && !(v && !std::isnan(*v))) {
      const auto error = errors.find(t.trial);
      why_worst[t.point] = "trial " + std::to_string(t.trial) + " " +
                           (error != errors.end() ? "error, " + error->second
                                                  : std::string(store::to_string(*t.run_status)));
    }
    values[t.point].push_back(v && !std::isnan(*v) ? *v : worst);
  }
  // A point whose trials all ended ranks last (it takes one of the places that stop; the note
  // lists it as ended). One that lost a seed among live ones is stopped whatever the rule says:
  // an unstable setting (its live seeds went on to diverge too).
  std::vector<std::pair<double, std::int64_t>> ranked;  // (score, point), best first
  std::set<std::int64_t> lost_a_seed;
  for (const auto& t : trials)
    if (ended(t) && live.count(t.point) && !(t.stopped_step && *t.stopped_step < step))
      lost_a_seed.insert(t.point);
  for (const auto& [point, vs] : values) {
    double sum = 0;
    for (double v : vs)
      sum += v;
    ranked.emplace_back(sum / static_cast<double>(vs.size()), point);
  }
  auto score_text = [&](double score, std::int64_t point) {
    if (std::isfinite(score)) return number(score);
    const auto why = why_worst.find(point);
    return why != why_worst.end() ? why->second : std::string("no value");
  };
  detail::RungDecision decision = detail::rung_decision(std::move(ranked), lost_a_seed,
                                                        plan.stopping, plan.reduction_factor, max);
  std::set<std::int64_t> ended_trials;
  for (const auto& t : trials)
    if (ended(t)) ended_trials.insert(t.trial);
  detail::settle_rung_stops(decision, trials, step, ended_trials);
  ranked = decision.ranked;
  const std::set<std::int64_t>& stop = decision.stop;
  const std::string& rule = decision.rule;
  std::string kept_text, stopped_text, ended_text;
  std::map<std::int64_t, double> score_of;
  for (const auto& [score, point] : ranked) {
    std::string& text = !live.count(point)  ? ended_text
                        : stop.count(point) ? stopped_text
                                            : kept_text;
    text += (text.empty() ? "p" : ", p") + std::to_string(point) +
            (live.count(point) ? " " + score_text(score, point)
                               : " (" + score_text(score, point) + ")");
    score_of[point] = score;
  }
  for (const auto& t : trials) {
    // (One stopped here before keeps the reason it was given then.)
    if (!stop.count(t.point) || ended(t) || t.stopped_step) continue;
    const std::string why =
        "mean " + plan.metric + " " + score_text(score_of[t.point], t.point) + " (" + rule + ")";
    store::stop_trial(st, sweep_id, t.trial, step,
                      "stopped at step " + std::to_string(step) + ": " + why,
                      "stopped early by sweep " + plan.name + " at step " + std::to_string(step) +
                          ": " + why + "; a checkpoint is kept");
  }
  return "step " + std::to_string(step) + " (" + plan.metric + ", " + rule + "): kept " +
         (kept_text.empty() ? "none" : kept_text) + "; stopped " +
         (stopped_text.empty() ? "none" : stopped_text) +
         (ended_text.empty() ? "" : "; ended " + ended_text);
}

}  // namespace

SweepPreview preview_sweep(const std::string& config_path,
                           const std::vector<std::string>& overrides) {
  return preview_of(train::plan_sweep_file(config_path, overrides));
}

SweepPreview preview_sweep_text(const std::string& toml, const std::string& source) {
  return preview_of(train::plan_sweep(toml, source));
}

void check_sweep_request(const SweepRequest& request) {
  TB_CHECK(request.parallel >= 1, "[sweep] --parallel must be >= 1, got ", request.parallel);
  (void)numa::parse_binding_mode(request.binding);  // "[binding] unknown binding mode ..."
}

std::string SweepTrialEvent::outcome() const {
  if (exit_code && *exit_code == 0)
    return stop_at > 0 ? "at step " + std::to_string(stop_at) : std::string("finished");
  std::string out;
  if (!error.empty()) {
    // The process refused to start or continue the run: its status and message are from before.
    out = error + ", ";
    if (run > 0 && (run_status == "cancelled" || run_status == "crashed"))
      out += "run " + std::to_string(run) + " stays " + run_status + ", ";
  } else if (run > 0) {
    out = "run " + std::to_string(run) + " " + run_status;
    // The message often starts with the status ("diverged: ..."): say it once.
    std::string why = run_message;
    if (why.rfind(run_status + ": ", 0) == 0) why.erase(0, run_status.size() + 2);
    if (!why.empty()) out += " (" + why + ")";
    out += ", ";
  }
  return out + "exit code " + (exit_code ? std::to_string(*exit_code) : std::string("?")) + ", " +
         see_log(log);
}

// A run.device this machine cannot use: every trial would be refused before its run exists, the
// reason only in the trials' logs. Said once, before the sweep is stored.
void check_devices(const train::SweepPlan& plan) {
  std::set<std::string> seen;
  for (const auto& t : plan.trials) {
    const std::string device = train::parse_run_config(t.config, "trial", {}).run.device;
    if (!seen.insert(device).second) continue;
    const std::string why = core::device_unavailable_reason(core::Device::parse(device));
    TB_CHECK(why.empty(), "[sweep] run.device: '", device, "' (trial ", t.index,
             ") cannot be used here: ", why);
  }
}

SweepResult run_sweep(const SweepRequest& request,
                      const std::function<void(const SweepTrialEvent&)>& on_trial,
                      const std::function<void(const std::string&)>& on_note) {
  // Before the sweep is stored: a bad option must not use up its name.
  check_sweep_request(request);
  const std::filesystem::path db = detail::store_path(request.db_path);
  // A config with a mistake creates no store.
  std::optional<train::SweepPlan> planned;
  if (request.resume.empty())
    planned = train::plan_sweep_file(request.config_path, request.overrides);
  if (planned) check_devices(*planned);
  // A resumed sweep's store must be there (not created empty by a mistyped --db).
  auto st =
      request.resume.empty() ? store::RunStore::open(db) : detail::existing_store(request.db_path);
  SweepPreview preview;
  std::int64_t sweep_id = 0;
  if (planned) {
    const train::SweepPlan& plan = *planned;
    preview = preview_of(plan);
    store::NewSweep ns;
    ns.name = preview.name;
    ns.method = preview.method;
    ns.metric = preview.metric;
    ns.goal = preview.goal;
    ns.config = train::read_config_file(request.config_path, "sweep");
    ns.plan = to_json(preview).dump();
    for (std::size_t i = 0; i < plan.trials.size(); ++i) {
      const auto& t = plan.trials[i];
      ns.trials.push_back(
          {t.index, t.point, t.seed, preview.trials[i].name, preview.trials[i].values, t.config});
    }
    sweep_id = store::create_sweep(st, ns);
  } else {
    const store::SweepRecord rec = find_or_explain(st, request.resume);
    TB_CHECK(rec.status != "running", "[sweep] sweep '", rec.name,
             "' is being run by another process; let it end first");
    sweep_id = rec.id;
    preview = preview_of(rec, store::sweep_trials(st, sweep_id));
    store::restart_sweep(st, sweep_id);
  }
  const std::filesystem::path dir = db.parent_path() / "sweeps" / preview.name;
  SweepResult result;
  try {
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    TB_CHECK(!ec, "[sweep] cannot create ", dir.string(), ": ", ec.message());
    const auto stored = store::sweep_trials(st, sweep_id);
    auto file_of = [&](std::int64_t trial) {
      return (dir / ("trial-" + std::to_string(trial) + ".toml")).string();
    };
    auto log_of = [&](std::int64_t trial) {
      return (dir / ("trial-" + std::to_string(trial) + ".log")).string();
    };
    for (const auto& t : stored)
      core::write_whole(file_of(t.trial), t.config, "sweep");  // no empty trial config

    // Trials whose process ended with an error and no result (a resume refused, a data file gone:
    // exit code 1) in this invocation: they fail, as a failed run does — ranked last at a rung,
    // not recorded as stopped there, and not started again (it would end the same way) until the
    // sweep is resumed.
    std::map<std::int64_t, std::string> errors;
    // A stop asked for (Ctrl-C): the trials running were told to stop after their step; once they
    // have ended, the sweep ends as it stands, to be resumed — no decision is taken on them.
    auto stop_requested = [&] { return request.stop_requested && request.stop_requested(); };
    auto interrupted = [&] {
      SweepResult r = sweep_table(preview.name, request.db_path);
      r.status = "interrupted";
      r.trial_dir = dir.string();
      return r;
    };
    // Stages: to each rung (early stopping), then to the end.
    std::vector<std::int64_t> targets;
    if (preview.stopping != "none") targets = preview.rungs;
    targets.push_back(0);
    for (std::size_t stage = 0; stage < targets.size(); ++stage) {
      const std::int64_t target = targets[stage];
      std::vector<std::string> unfinished;
      const auto trials = store::sweep_trials(st, sweep_id);
      std::vector<Job> jobs;
      for (std::size_t i = 0; i < trials.size(); ++i) {
        const auto& t = trials[i];
        if (t.stopped_step || errors.count(t.trial) || reached(st, t, target)) continue;
        const bool can_resume = t.run_id && t.run_status &&
                                (*t.run_status == store::RunStatus::kCancelled ||
                                 *t.run_status == store::RunStatus::kCrashed) &&
                                checkpoint_step(st, *t.run_id).has_value();
        jobs.push_back({i, can_resume ? *t.run_id : 0});
      }
      const auto n = static_cast<std::int64_t>(jobs.size());
      for (std::int64_t first = 0; first < n; first += request.parallel) {
        if (stop_requested()) return interrupted();
        const std::int64_t count = std::min<std::int64_t>(request.parallel, n - first);
        LaunchRequest lr;
        lr.program = request.program;
        lr.nproc = static_cast<int>(count);
        lr.binding = request.binding;
        lr.fallback = request.fallback;
        lr.db_path = request.db_path;
        lr.program_options = request.program_options;
        lr.stop_requested = request.stop_requested;
        lr.on_exited = request.on_exited;
        for (std::int64_t k = 0; k < count; ++k) {
          const Job& job = jobs[static_cast<std::size_t>(first + k)];
          const auto& t = trials[job.trial];
          lr.configs.push_back(file_of(t.trial));
          lr.log_files.push_back(log_of(t.trial));
          lr.resume_runs.push_back(job.resume);
          std::vector<std::string> args;
          if (job.resume == 0)
            args = {"--sweep-trial", std::to_string(sweep_id) + ":" + std::to_string(t.trial)};
          if (target > 0) args.insert(args.end(), {"--stop-at", std::to_string(target)});
          lr.run_args.push_back(std::move(args));
        }
        std::map<std::int64_t, std::uintmax_t> log_start;  // trial -> its log's size before
        for (std::int64_t k = 0; k < count; ++k) {
          const std::int64_t trial = trials[jobs[static_cast<std::size_t>(first + k)].trial].trial;
          std::error_code missing;
          const auto size = std::filesystem::file_size(log_of(trial), missing);
          log_start[trial] = missing ? 0 : size;
        }
        auto event_of = [&](int slot, const LaunchedProcess& p) {
          const Job& job = jobs[static_cast<std::size_t>(first + slot)];
          SweepTrialEvent e;
          e.trial = preview.trials[job.trial];
          e.resumed_run = job.resume;
          e.stop_at = target;
          e.pid = p.pid;
          e.cpus = p.cpus;
          e.warning = p.warning;
          e.log = log_of(e.trial.index);
          return e;
        };
        const auto procs = launch_runs(lr, [&](const LaunchedProcess& p) {
          if (on_trial) on_trial(event_of(p.slot, p));
        });
        // A trial process killed on the way left its run "running" (or "queued", killed while
        // setting up): its process is gone, so it is crashed, and can be resumed.
        st.recover_crashed_runs();
        const auto after = store::sweep_trials(st, sweep_id);
        for (const auto& p : procs) {
          SweepTrialEvent e = event_of(p.slot, p);
          e.exit_code = p.exit_code;
          if (p.exit_code == 1) e.error = last_error(e.log, log_start[e.trial.index]);
          // A process that stopped at its rung as asked exits non-zero (cancelled); what counts
          // is whether its trial got there, or ended with a result (finished, failed, diverged).
          const auto& t = after[jobs[static_cast<std::size_t>(first + p.slot)].trial];
          if (t.run_id) {
            const store::RunSummary run =
                st.get_run(*t.run_id, store::RunStore::Metrics::kNone).summary;
            e.run = run.id;
            e.run_status = std::string(store::to_string(run.status));
            e.run_message = run.message;
          }
          if (on_trial) on_trial(e);
          // Without a result: killed by a signal (the OOM killer, kill -9: 128 + signal), or its
          // run cancelled (exit code 2) before the target. Another try may give one. A process
          // that ended on its own otherwise (a config or file error: exit code 1) fails the
          // trial, as a failed or diverged run does; it would fail again.
          const bool killed = p.exit_code < 0 || p.exit_code >= 128;
          const bool cancelled = p.exit_code == 2 && t.run_status == store::RunStatus::kCancelled;
          if (reached(st, t, target)) continue;
          if (killed || cancelled)
            unfinished.push_back("trial " + std::to_string(t.trial) + " (" + e.trial.name +
                                 (killed ? ", killed: exit code " : ", cancelled: exit code ") +
                                 std::to_string(p.exit_code) + ", " + see_log(e.log) + ")");
          else
            errors[t.trial] = "exit code " + std::to_string(p.exit_code);
        }
        // Stopped: unless this was the last group and each of its trials started and got where
        // it was going (then the sweep ends as it would have).
        if (stop_requested() &&
            (!unfinished.empty() || procs.size() < static_cast<std::size_t>(count) ||
             first + request.parallel < n || stage + 1 < targets.size()))
          return interrupted();
      }
      // A trial without a result is not the worst of its rung: no decision (and no table) is
      // taken on it. The sweep stops here; --resume runs those trials again.
      TB_CHECK(unfinished.empty(), "[sweep] ", unfinished.size(), " trial(s) ended before ",
               target > 0 ? "step " + std::to_string(target) : std::string("the end"),
               " without a result: ", join(unfinished, "; "), "; trainbench-cli sweep --resume ",
               preview.name, " runs them again");
      if (target > 0) {
        const std::string note = decide(st, sweep_id, preview, target, errors);
        if (on_note) on_note(note);
      }
    }
    // Failed trials, this time or before a resume: each trial has now finished, been stopped at
    // a rung, or failed (its run failed or diverged, or its process ended with an error).
    int failed = 0;
    for (const auto& t : store::sweep_trials(st, sweep_id))
      failed += t.run_status != store::RunStatus::kFinished && !t.stopped_step;
    result = sweep_table(preview.name, request.db_path);
    result.failed = failed;
    result.trial_dir = dir.string();
    std::string end = std::to_string(preview.trials.size()) + " trials";
    if (failed > 0) end += ", " + std::to_string(failed) + " failed";
    if (!result.points.empty() && result.points.front().mean)
      end += "; best p" + std::to_string(result.points.front().point) + " (" +
             result.points.front().values + ")";
    store::end_sweep(st, sweep_id, "finished", end);
    result.status = "finished";
  } catch (const std::exception& e) {
    try {
      store::end_sweep(st, sweep_id, "failed", e.what());
    } catch (...) {  // best effort: the caller reports the original error
    }
    throw;
  }
  return result;
}

SweepResult sweep_table(const std::string& name, const std::string& db_path) {
  auto st = detail::existing_store(db_path);
  return detail::sweep_table(st, name);
}

SweepResult detail::sweep_table(store::RunStore& st, const std::string& name) {
  const store::SweepRecord rec = find_or_explain(st, name);
  const auto trials = store::sweep_trials(st, rec.id);
  SweepResult out;
  out.sweep_id = rec.id;
  out.status = rec.status;
  out.plan = preview_of(rec, trials);
  const bool max = out.plan.goal == "max";
  std::map<std::int64_t, SweepPointRow> points;
  std::map<std::int64_t, std::vector<double>> bests, at_stop;
  for (const auto& t : trials) {
    SweepPointRow& p = points[t.point];
    p.point = t.point;
    p.values = t.assignment;
    ++p.runs;
    if (t.stopped_step) p.stopped = t.stopped_step;
    SweepTrialResult& tr = out.trials.emplace_back();
    tr.trial = {t.trial, t.point, t.seed, t.name, t.assignment};
    tr.run = t.run_id;
    if (t.run_status) tr.status = std::string(store::to_string(*t.run_status));
    tr.steps = t.last_step;
    tr.stopped = t.stopped_step;
    tr.config = t.config;
    if (!t.run_id) continue;
    p.run_ids.push_back(*t.run_id);
    if (t.stopped_step) {
      if (const auto v = value_at(st, *t.run_id, out.plan.metric, *t.stopped_step))
        at_stop[t.point].push_back(*v);
    }
    if (t.run_status != store::RunStatus::kFinished) continue;
    ++p.finished;
    std::optional<double> best;
    for (const auto& pt : st.series(*t.run_id, out.plan.metric)) {
      if (std::isnan(pt.value)) continue;
      if (!best || (max ? pt.value > *best : pt.value < *best)) best = pt.value;
    }
    if (best) bests[t.point].push_back(*best);
    tr.best = best;
  }
  auto mean_of = [](const std::vector<double>& v) {
    double sum = 0;
    for (double x : v)
      sum += x;
    return sum / static_cast<double>(v.size());
  };
  for (auto& [point, row] : points) {
    const auto& b = bests[point];
    if (!b.empty()) {
      row.mean = mean_of(b);
      if (b.size() >= 2) {
        double ss = 0;
        for (double v : b)
          ss += (v - *row.mean) * (v - *row.mean);
        row.stddev = std::sqrt(ss / static_cast<double>(b.size() - 1));
      }
    }
    if (row.stopped && !at_stop[point].empty()) row.stopped_value = mean_of(at_stop[point]);
    out.points.push_back(row);
  }
  rank_sweep_points(out.points, max);
  out.trial_dir = (st.path().parent_path() / "sweeps" / out.plan.name).string();
  return out;
}

void rank_sweep_points(std::vector<SweepPointRow>& points, bool max) {
  // Points whose every trial finished by mean, then those that lost a seed (failed or diverged:
  // their mean is of the seeds left, and an unstable setting is not the best one), then stopped
  // ones (the later the stop, the better; then by their value there), the rest last.
  auto rank = [](const SweepPointRow& r) {
    return r.mean ? (r.finished == r.runs ? 0 : 1) : r.stopped ? 2 : 3;
  };
  std::stable_sort(
      points.begin(), points.end(), [&](const SweepPointRow& a, const SweepPointRow& b) {
        if (rank(a) != rank(b)) return rank(a) < rank(b);
        if (a.mean && b.mean) return max ? *a.mean > *b.mean : *a.mean < *b.mean;
        if (a.stopped && b.stopped && *a.stopped != *b.stopped) return *a.stopped > *b.stopped;
        if (a.stopped_value.has_value() != b.stopped_value.has_value())
          return a.stopped_value.has_value();
        if (a.stopped_value && b.stopped_value)
          return max ? *a.stopped_value > *b.stopped_value : *a.stopped_value < *b.stopped_value;
        return false;
      });
}

std::vector<SweepRow> list_sweeps(const std::string& db_path) {
  if (db_path.empty() && !detail::store_exists(db_path)) return {};
  auto st = detail::existing_store(db_path);
  return detail::list_sweeps(st);
}

std::vector<SweepRow> detail::list_sweeps(store::RunStore& st) {
  std::vector<SweepRow> rows;
  for (const auto& s : store::list_sweeps(st)) {
    SweepRow r;
    r.id = s.id;
    r.name = s.name;
    r.status = s.status;
    r.created = detail::iso_time(s.created_at);
    r.method = s.method;
    r.metric = s.metric + " " + s.goal;
    r.trials = s.trials;
    r.finished = s.finished;
    r.stopped = s.stopped;
    r.failed = s.failed;
    rows.push_back(std::move(r));
  }
  return rows;
}

}  // namespace tb::api
