#include "engine/api/run_api.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <ctime>
#include <iomanip>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <sstream>

#include "engine/api/api_detail.h"
#include "engine/core/error.h"
#include "engine/store/run_store.h"
#include "engine/store/run_writer.h"
#include "engine/train/run_config.h"
#include "engine/train/trainer.h"

namespace tb::api {

namespace {

// Progress for the CLI: loss, first LR, rate over the last few seconds.
class ProgressSink final : public train::MetricSink {
 public:
  ProgressSink(std::int64_t run, std::int64_t total, std::function<void(const RunProgressInfo&)> cb)
      : run_(run), total_(total), cb_(std::move(cb)), t0_(std::chrono::steady_clock::now()) {}
  void on_metrics(std::int64_t step, const train::Metrics& m) override {
    if (!cb_) return;
    RunProgressInfo p;
    p.run_id = run_;
    p.step = step;
    p.total = total_;
    bool lr_set = false;
    for (const auto& [k, v] : m) {
      if (k == "loss") p.loss = v;
      if (!lr_set && k.rfind("lr.", 0) == 0) {
        p.lr = v;
        lr_set = true;
      }
      if (k.rfind("eval.", 0) == 0) p.eval.emplace_back(k, v);
    }
    const double secs =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count();
    if (first_step_ < 0) first_step_ = step - 1;
    p.steps_per_s = secs > 0 ? static_cast<double>(step - first_step_) / secs : 0.0;
    cb_(p);
  }

 private:
  std::int64_t run_;
  std::int64_t total_;
  std::function<void(const RunProgressInfo&)> cb_;
  std::chrono::steady_clock::time_point t0_;
  std::int64_t first_step_ = -1;
};

std::string iso_time(double unix_seconds) {
  const auto t = static_cast<std::time_t>(unix_seconds);
  std::tm tm{};
  gmtime_r(&t, &tm);
  std::ostringstream os;
  os << std::put_time(&tm, "%Y-%m-%d %H:%M:%S");
  return os.str();
}

}  // namespace

std::string default_store_path() {
  return store::default_database_path().string();
}

RunOutcomeInfo run_training(const RunRequest& req,
                            const std::function<void(std::int64_t, const std::string&)>& on_start,
                            const std::function<void(const RunProgressInfo&)>& on_progress) {
  const train::RunConfig config = train::load_run_config(req.config_path, req.overrides);
  const auto db = detail::store_path(req.db_path);
  std::int64_t run_id = 0;
  std::filesystem::path resume_dir;
  {
    auto st = store::RunStore::open(db);
    if (req.resume) {
      run_id = *req.resume;
      const auto cks = st.checkpoints(run_id);
      TB_CHECK(!cks.empty(), "[run] run ", run_id, " has no checkpoint to resume from");
      resume_dir = cks.back().path;
    } else {
      store::NewRun nr;
      nr.name = config.run.name;
      nr.tags = config.run.tags;
      nr.config = train::to_toml(config);
      nr.seed = config.run.seed;
      run_id = st.create_run(nr);
    }
  }
  // From here on a failure must not leave a created run queued: it ends failed with the message
  // (a resumed run keeps the status it ended with), and the error propagates.
  std::unique_ptr<train::Trainer> trainer_ptr;
  std::unique_ptr<store::RunWriter> writer_ptr;
  try {
    trainer_ptr =
        std::make_unique<train::Trainer>(config, detail::checkpoint_dir(config, db, run_id));
    writer_ptr = std::make_unique<store::RunWriter>(db, run_id);
  } catch (const std::exception& e) {
    if (!req.resume) detail::mark_failed(db, run_id, e.what());
    throw;
  }
  train::Trainer& trainer = *trainer_ptr;
  store::RunWriter& writer = *writer_ptr;
  trainer.add_sink(std::make_shared<detail::StoreSink>(writer));
  trainer.add_sink(std::make_shared<ProgressSink>(run_id, trainer.total_steps(), on_progress));
  RunOutcomeInfo out;
  out.run_id = run_id;
  out.description = trainer.describe();
  if (on_start) on_start(run_id, out.description);
  train::TrainResult r;
  try {
    if (!resume_dir.empty()) trainer.resume_from(resume_dir);
    r = trainer.run();
  } catch (const std::exception& e) {
    r.outcome = train::RunOutcome::kFailed;
    r.message = e.what();
  }
  out.status = train::outcome_name(r.outcome);
  out.message = r.message;
  writer.set_status(store::run_status_from_string(out.status), r.message);
  writer.close();
  return out;
}

std::vector<RunRow> list_runs(const std::string& db_path) {
  auto st = store::RunStore::open(detail::store_path(db_path));
  std::vector<RunRow> rows;
  for (const auto& r : st.list_runs()) {
    RunRow row;
    row.id = r.id;
    row.name = r.name;
    row.status = std::string(store::to_string(r.status));
    row.created = iso_time(r.created_at);
    row.last_step = r.last_step;
    row.message = r.message;
    rows.push_back(std::move(row));
  }
  return rows;
}

std::string show_run(const std::string& db_path, std::int64_t run_id) {
  auto st = store::RunStore::open(detail::store_path(db_path));
  const auto d = st.get_run(run_id);
  std::ostringstream os;
  os << "run " << d.summary.id << " '" << d.summary.name
     << "': " << store::to_string(d.summary.status) << "\n  created "
     << iso_time(d.summary.created_at);
  if (d.summary.ended_at) os << ", ended " << iso_time(*d.summary.ended_at);
  os << "\n";
  if (!d.summary.message.empty()) os << "  " << d.summary.message << "\n";
  if (d.seed) os << "  seed " << *d.seed << "\n";
  os << "\nmetrics (last / min / max):\n";
  for (const auto& m : d.metrics) {
    os << "  " << std::left << std::setw(24) << m.key << std::right << std::setw(14) << m.last_value
       << " @" << m.last_step << std::setw(14) << m.min_value << std::setw(14) << m.max_value
       << "\n";
  }
  // Events: binding, memory placement, warnings, how it ended (the newest 30).
  const auto events = st.events(run_id);
  if (!events.empty()) {
    os << "\nevents:\n";
    const std::size_t first = events.size() > 30 ? events.size() - 30 : 0;
    if (first > 0) os << "  (" << first << " older events not shown)\n";
    for (std::size_t i = first; i < events.size(); ++i)
      os << "  " << iso_time(events[i].time) << " " << store::to_string(events[i].level) << ": "
         << events[i].text << "\n";
  }
  os << "\nconfig:\n" << d.config;
  return os.str();
}

std::string compare_runs(const std::string& db_path, const std::vector<std::int64_t>& ids) {
  TB_CHECK(ids.size() >= 2, "[compare] give at least two run ids, got ", ids.size());
  auto st = store::RunStore::open(detail::store_path(db_path));
  std::vector<store::RunDetails> runs;
  std::vector<std::map<std::string, std::string>> configs;
  for (auto id : ids) {
    TB_CHECK(st.has_run(id), "[compare] run ", id, " is not in ", st.path().string());
    runs.push_back(st.get_run(id));
    configs.push_back(detail::flatten_toml(runs.back().config));
  }
  std::set<std::string> keys;
  for (const auto& c : configs)
    for (const auto& [k, v] : c)
      keys.insert(k);
  // Column widths from the content: keys, and values up to 30 characters.
  std::size_t kw = 26;
  for (const auto& k : keys)
    kw = std::max(kw, k.size() + 2);
  std::size_t vw = 12;
  for (const auto& k : keys) {
    std::set<std::string> distinct;
    for (const auto& c : configs)
      distinct.insert(c.count(k) ? c.at(k) : "-");
    if (distinct.size() < 2) continue;  // only differing keys are shown
    for (const auto& v : distinct)
      vw = std::max(vw, std::min<std::size_t>(v.size(), 30));
  }
  for (const auto& r : runs)
    vw = std::max(vw, std::min<std::size_t>(r.summary.name.size(), 30));
  const int w = static_cast<int>(vw) + 2;
  const int lw = static_cast<int>(kw);
  std::ostringstream os;
  os << std::left << std::setw(lw + 2) << "" << std::right;
  for (const auto& r : runs)
    os << std::setw(w) << ("run " + std::to_string(r.summary.id));
  os << "\n" << std::left << std::setw(lw + 2) << "name" << std::right;
  for (const auto& r : runs)
    os << std::setw(w) << r.summary.name.substr(0, vw);
  os << "\n\nconfig differences:\n";
  int differing = 0;
  for (const auto& k : keys) {
    std::vector<std::string> vals;
    for (const auto& c : configs) {
      auto it = c.find(k);
      vals.push_back(it == c.end() ? "-" : it->second);
    }
    if (std::all_of(vals.begin(), vals.end(), [&](const auto& v) { return v == vals[0]; }))
      continue;
    ++differing;
    os << "  " << std::left << std::setw(lw) << k << std::right;
    for (const auto& v : vals)
      os << std::setw(w) << v.substr(0, vw);
    os << "\n";
  }
  if (differing == 0) os << "  (none: the configs are equal)\n";
  os << "\nsummary:\n";
  auto row = [&](const std::string& label, auto&& cell) {
    os << "  " << std::left << std::setw(lw) << label << std::right;
    for (const auto& r : runs)
      os << std::setw(w) << cell(r);
    os << "\n";
  };
  row("status",
      [](const store::RunDetails& r) { return std::string(store::to_string(r.summary.status)); });
  row("steps", [](const store::RunDetails& r) {
    return r.summary.last_step ? std::to_string(*r.summary.last_step) : std::string("-");
  });
  row("duration (s)", [](const store::RunDetails& r) {
    if (!r.summary.started_at || !r.summary.ended_at) return std::string("-");
    std::ostringstream v;
    v << std::fixed << std::setprecision(1) << (*r.summary.ended_at - *r.summary.started_at);
    return v.str();
  });
  for (const char* key :
       {"loss", "eval.loss", "eval.accuracy", "eval.perplexity", "time.step_ms"}) {
    bool any = false;
    for (const auto& r : runs)
      for (const auto& m : r.metrics)
        any |= m.key == key;
    if (!any) continue;
    row(std::string("last ") + key, [&](const store::RunDetails& r) {
      for (const auto& m : r.metrics) {
        if (m.key != key) continue;
        std::ostringstream v;
        v << std::setprecision(5) << m.last_value;
        return v.str();
      }
      return std::string("-");
    });
  }
  return os.str();
}

std::string export_run(const std::string& db_path, std::int64_t run_id, const std::string& format) {
  auto st = store::RunStore::open(detail::store_path(db_path));
  if (format == "csv") return st.export_csv(run_id);
  if (format == "json") return st.export_json(run_id);
  throw ValueError("[export] unknown format '" + format + "' (choose csv or json)");
}

}  // namespace tb::api
