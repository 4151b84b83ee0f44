// Sweeps: plan, run through the launcher, read back (see sweep_api.h).
#include "engine/api/sweep_api.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>

#include <nlohmann/json.hpp>

#include "engine/api/api_detail.h"
#include "engine/api/launch_api.h"
#include "engine/api/workbench_api.h"
#include "engine/core/error.h"
#include "engine/store/run_store.h"
#include "engine/train/sweep.h"

namespace tb::api {
namespace {

SweepPreview preview_of(const train::SweepPlan& plan) {
  SweepPreview p;
  p.name = plan.spec.name;
  p.method = plan.spec.method;
  p.metric = plan.spec.metric;
  p.goal = plan.spec.goal;
  for (const auto& t : plan.trials) {
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

}  // namespace

SweepPreview preview_sweep(const std::string& config_path,
                           const std::vector<std::string>& overrides) {
  return preview_of(train::plan_sweep_file(config_path, overrides));
}

namespace {

nlohmann::json to_json(const SweepPreview& p) {
  nlohmann::json trials = nlohmann::json::array();
  for (const auto& t : p.trials)
    trials.push_back({{"index", t.index},
                      {"point", t.point},
                      {"seed", t.seed},
                      {"name", t.name},
                      {"values", t.values}});
  return {{"format", "trainbench-sweep"}, {"version", 1},   {"name", p.name},  {"method", p.method},
          {"metric", p.metric},           {"goal", p.goal}, {"trials", trials}};
}

SweepPreview preview_from_json(const nlohmann::json& j, const std::string& file) {
  TB_CHECK(j.is_object() && j.value("format", "") == "trainbench-sweep", "[sweep] ", file,
           " is not a sweep plan written by trainbench-cli sweep");
  SweepPreview p;
  p.name = j.at("name").get<std::string>();
  p.method = j.at("method").get<std::string>();
  p.metric = j.at("metric").get<std::string>();
  p.goal = j.at("goal").get<std::string>();
  for (const auto& t : j.at("trials")) {
    SweepTrialRow r;
    r.index = t.at("index").get<std::int64_t>();
    r.point = t.at("point").get<std::int64_t>();
    r.seed = t.at("seed").get<std::int64_t>();
    r.name = t.at("name").get<std::string>();
    r.values = t.at("values").get<std::string>();
    p.trials.push_back(std::move(r));
  }
  return p;
}

void write_file(const std::filesystem::path& file, const std::string& text) {
  std::ofstream f(file, std::ios::binary | std::ios::trunc);
  f << text;
  f.close();
  TB_CHECK(static_cast<bool>(f), "[sweep] cannot write ", file.string());
}

// A trial to launch: a fresh run of its config, or a stored run to resume.
struct Job {
  std::size_t trial = 0;
  std::int64_t resume = 0;
};

// What is left of a sweep in the store: trials without a run, and runs that were interrupted
// (crashed, cancelled) — resumed from their newest checkpoint, or started again without one.
// Finished, failed and diverged runs are results; a run still running elsewhere is left alone.
std::vector<Job> jobs_left(const SweepPreview& plan, const std::string& db_path) {
  auto store = store::RunStore::open(detail::store_path(db_path));
  const std::string tag = "sweep:" + plan.name;
  std::map<std::string, store::RunSummary> newest;
  for (const auto& r : store.list_runs()) {
    if (std::find(r.tags.begin(), r.tags.end(), tag) == r.tags.end()) continue;
    auto it = newest.find(r.name);
    if (it == newest.end() || r.id > it->second.id) newest[r.name] = r;
  }
  std::vector<Job> jobs;
  for (std::size_t i = 0; i < plan.trials.size(); ++i) {
    const auto it = newest.find(plan.trials[i].name);
    if (it == newest.end()) {
      jobs.push_back({i, 0});
      continue;
    }
    const auto status = it->second.status;
    if (status != store::RunStatus::kCrashed && status != store::RunStatus::kCancelled) continue;
    jobs.push_back({i, store.checkpoints(it->second.id).empty() ? 0 : it->second.id});
  }
  return jobs;
}

}  // namespace

SweepResult run_sweep(
    const SweepRequest& request,
    const std::function<void(const SweepTrialRow& trial, std::int64_t resumed_run, int pid,
                             const std::string& cpus, std::optional<int> exit_code)>& on_trial) {
  TB_CHECK(request.parallel >= 1, "[sweep] --parallel must be >= 1, got ", request.parallel);
  const std::filesystem::path sweeps = detail::store_path(request.db_path).parent_path() / "sweeps";
  SweepPreview preview;
  std::filesystem::path dir;
  if (request.resume.empty()) {
    const train::SweepPlan plan = train::plan_sweep_file(request.config_path, request.overrides);
    preview = preview_of(plan);
    dir = sweeps / plan.spec.name;
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    TB_CHECK(!ec, "[sweep] cannot create ", dir.string(), ": ", ec.message());
    for (const auto& t : plan.trials)
      write_file(dir / ("trial-" + std::to_string(t.index) + ".toml"), t.config);
    write_file(dir / "plan.json", to_json(preview).dump(2) + "\n");
  } else {
    dir = sweeps / request.resume;
    const auto file = dir / "plan.json";
    std::ifstream f(file);
    TB_CHECK(static_cast<bool>(f), "[sweep] no sweep '", request.resume,
             "' to resume: ", file.string(), " cannot be read (sweeps of this store are in ",
             sweeps.string(), ")");
    const nlohmann::json j = nlohmann::json::parse(f, nullptr, false);
    TB_CHECK(!j.is_discarded(), "[sweep] ", file.string(), " is not valid JSON");
    preview = preview_from_json(j, file.string());
  }
  auto file_of = [&](const SweepTrialRow& t) {
    return (dir / ("trial-" + std::to_string(t.index) + ".toml")).string();
  };
  const std::vector<Job> jobs = request.resume.empty()
                                    ? [&] {
                                        std::vector<Job> all;
                                        for (std::size_t i = 0; i < preview.trials.size(); ++i)
                                          all.push_back({i, 0});
                                        return all;
                                      }()
                                    : jobs_left(preview, request.db_path);
  int failed = 0;
  const auto n = static_cast<std::int64_t>(jobs.size());
  for (std::int64_t first = 0; first < n; first += request.parallel) {
    const std::int64_t count = std::min<std::int64_t>(request.parallel, n - first);
    LaunchRequest lr;
    lr.program = request.program;
    lr.nproc = static_cast<int>(count);
    lr.binding = request.binding;
    lr.fallback = request.fallback;
    lr.db_path = request.db_path;
    for (std::int64_t k = 0; k < count; ++k) {
      const Job& job = jobs[static_cast<std::size_t>(first + k)];
      lr.configs.push_back(file_of(preview.trials[job.trial]));
      lr.resume_runs.push_back(job.resume);
    }
    auto job_of = [&](int slot) -> const Job& {
      return jobs[static_cast<std::size_t>(first + slot)];
    };
    const auto procs = launch_runs(lr, [&](const LaunchedProcess& p) {
      const Job& job = job_of(p.slot);
      if (on_trial) on_trial(preview.trials[job.trial], job.resume, p.pid, p.cpus, std::nullopt);
    });
    for (const auto& p : procs) {
      failed += p.exit_code != 0 ? 1 : 0;
      const Job& job = job_of(p.slot);
      if (on_trial) on_trial(preview.trials[job.trial], job.resume, p.pid, p.cpus, p.exit_code);
    }
  }
  SweepResult r = sweep_table(preview, request.db_path);
  r.failed = failed;
  r.trial_dir = dir.string();
  return r;
}

SweepResult sweep_table(const SweepPreview& plan, const std::string& db_path) {
  StoreReader store(db_path);
  const std::string tag = "sweep:" + plan.name;
  std::map<std::string, const RunInfo*> newest;  // by name, among the sweep's runs
  const std::vector<RunInfo> runs = store.runs();
  for (const auto& r : runs) {
    if (std::find(r.tags.begin(), r.tags.end(), tag) == r.tags.end()) continue;
    auto& slot = newest[r.name];
    if (slot == nullptr || r.id > slot->id) slot = &r;
  }
  const bool max = plan.goal == "max";
  std::map<std::int64_t, SweepPointRow> points;
  std::map<std::int64_t, std::vector<double>> bests;
  for (const auto& t : plan.trials) {
    SweepPointRow& p = points[t.point];
    p.point = t.point;
    p.values = t.values;
    ++p.runs;
    const auto it = newest.find(t.name);
    if (it == newest.end()) continue;
    p.run_ids.push_back(it->second->id);
    if (it->second->status != "finished") continue;
    ++p.finished;
    std::optional<double> best;
    for (double v : store.series(it->second->id, plan.metric).value) {
      if (std::isnan(v)) continue;
      if (!best || (max ? v > *best : v < *best)) best = v;
    }
    if (best) bests[t.point].push_back(*best);
  }
  SweepResult out;
  out.plan = plan;
  for (auto& [point, row] : points) {
    const auto& b = bests[point];
    if (!b.empty()) {
      double sum = 0;
      for (double v : b)
        sum += v;
      row.mean = sum / static_cast<double>(b.size());
      if (b.size() >= 2) {
        double ss = 0;
        for (double v : b)
          ss += (v - *row.mean) * (v - *row.mean);
        row.stddev = std::sqrt(ss / static_cast<double>(b.size() - 1));
      }
    }
    out.points.push_back(row);
  }
  std::stable_sort(out.points.begin(), out.points.end(),
                   [&](const SweepPointRow& a, const SweepPointRow& b) {
                     if (a.mean.has_value() != b.mean.has_value()) return a.mean.has_value();
                     if (!a.mean) return false;
                     return max ? *a.mean > *b.mean : *a.mean < *b.mean;
                   });
  return out;
}

}  // namespace tb::api
