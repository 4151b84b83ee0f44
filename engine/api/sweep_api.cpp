// Sweeps: plan, run through the launcher, read back (see sweep_api.h).
#include "engine/api/sweep_api.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>

#include "engine/api/api_detail.h"
#include "engine/api/launch_api.h"
#include "engine/api/workbench_api.h"
#include "engine/core/error.h"
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

SweepResult run_sweep(
    const SweepRequest& request,
    const std::function<void(const SweepTrialRow& trial, int pid, const std::string& cpus,
                             std::optional<int> exit_code)>& on_trial) {
  TB_CHECK(request.parallel >= 1, "[sweep] --parallel must be >= 1, got ", request.parallel);
  const train::SweepPlan plan = train::plan_sweep_file(request.config_path, request.overrides);
  const SweepPreview preview = preview_of(plan);
  const std::filesystem::path dir =
      detail::store_path(request.db_path).parent_path() / "sweeps" / plan.spec.name;
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  TB_CHECK(!ec, "[sweep] cannot create ", dir.string(), ": ", ec.message());
  std::vector<std::string> files;
  for (const auto& t : plan.trials) {
    const auto file = dir / ("trial-" + std::to_string(t.index) + ".toml");
    std::ofstream f(file, std::ios::binary | std::ios::trunc);
    f << t.config;
    f.close();
    TB_CHECK(static_cast<bool>(f), "[sweep] cannot write ", file.string());
    files.push_back(file.string());
  }
  int failed = 0;
  const auto n = static_cast<std::int64_t>(files.size());
  for (std::int64_t first = 0; first < n; first += request.parallel) {
    const std::int64_t count = std::min<std::int64_t>(request.parallel, n - first);
    LaunchRequest lr;
    lr.program = request.program;
    lr.configs.assign(files.begin() + first, files.begin() + first + count);
    lr.nproc = static_cast<int>(count);
    lr.binding = request.binding;
    lr.fallback = request.fallback;
    lr.db_path = request.db_path;
    const auto procs = launch_runs(lr, [&](const LaunchedProcess& p) {
      if (on_trial)
        on_trial(preview.trials[static_cast<std::size_t>(first + p.slot)], p.pid, p.cpus,
                 std::nullopt);
    });
    for (const auto& p : procs) {
      failed += p.exit_code != 0 ? 1 : 0;
      if (on_trial)
        on_trial(preview.trials[static_cast<std::size_t>(first + p.slot)], p.pid, p.cpus,
                 p.exit_code);
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
