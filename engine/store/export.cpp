// RunStore::export_csv and export_json.
#include <charconv>
#include <cmath>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "engine/store/run_store.h"

namespace tb::store {
namespace {

// Shortest text that reads back as the same double; nan, inf, -inf for the rest.
void append_number(std::string& out, double v) {
  if (std::isnan(v)) {
    out += "nan";
  } else if (std::isinf(v)) {
    out += v > 0 ? "inf" : "-inf";
  } else {
    char buf[32];
    const auto res = std::to_chars(buf, buf + sizeof(buf), v);
    out.append(buf, res.ptr);
  }
}

// RFC 4180 quoting for a header cell (metric names may contain commas or quotes).
std::string csv_cell(const std::string& s) {
  if (s.find_first_of(",\"\r\n") == std::string::npos) return s;
  std::string q = "\"";
  for (char c : s) {
    if (c == '"') q += '"';
    q += c;
  }
  return q + "\"";
}

nlohmann::json finite_or_null(double v) {
  return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(nullptr);
}

// The step of a min or max: none when every value was NaN (min_value is then NaN too).
nlohmann::json step_or_null(double value, std::int64_t step) {
  return std::isnan(value) ? nlohmann::json(nullptr) : nlohmann::json(step);
}

template <typename T>
nlohmann::json opt(const std::optional<T>& v) {
  return v ? nlohmann::json(*v) : nlohmann::json(nullptr);
}

}  // namespace

std::string RunStore::export_csv(std::int64_t run) const {
  require_run(run);
  const std::vector<std::string> keys = metric_keys(run);
  std::vector<std::vector<SeriesPoint>> columns;
  columns.reserve(keys.size());
  for (const std::string& k : keys)
    columns.push_back(series(run, k));

  std::string out = "step,time";
  for (const std::string& k : keys) {
    out += ',';  // not "," + cell: GCC 12 -O3 reports a false -Wrestrict on that (PR 105329)
    out += csv_cell(k);
  }
  out += "\n";
  // Merge the per-key series (each sorted by step) into rows of increasing step.
  std::vector<std::size_t> pos(columns.size(), 0);
  for (;;) {
    bool any = false;
    std::int64_t step = 0;
    for (std::size_t c = 0; c < columns.size(); ++c) {
      if (pos[c] < columns[c].size() && (!any || columns[c][pos[c]].step < step)) {
        step = columns[c][pos[c]].step;
        any = true;
      }
    }
    if (!any) break;
    std::string cells;
    double time = 0;
    bool have_time = false;
    for (std::size_t c = 0; c < columns.size(); ++c) {
      cells += ',';
      if (pos[c] < columns[c].size() && columns[c][pos[c]].step == step) {
        const SeriesPoint& p = columns[c][pos[c]++];
        if (!have_time || p.time < time) time = p.time;
        have_time = true;
        append_number(cells, p.value);
      }
    }
    out += std::to_string(step);
    out += ',';
    append_number(out, time);
    out += cells;
    out += '\n';
  }
  return out;
}

std::string RunStore::export_json(std::int64_t run) const {
  const RunDetails d = get_run(run);
  const RunSummary& s = d.summary;
  nlohmann::json metrics_summary = nlohmann::json::array();
  for (const MetricSummary& m : d.metrics) {
    metrics_summary.push_back({{"key", m.key},
                               {"count", m.count},
                               {"last_step", m.last_step},
                               {"last_value", finite_or_null(m.last_value)},
                               {"min_value", finite_or_null(m.min_value)},
                               {"min_step", step_or_null(m.min_value, m.min_step)},
                               {"max_value", finite_or_null(m.max_value)},
                               {"max_step", step_or_null(m.max_value, m.max_step)}});
  }
  nlohmann::json run_json = {
      {"id", s.id},
      {"name", s.name},
      {"tags", s.tags},
      {"status", std::string(to_string(s.status))},
      {"message", s.message},
      {"created_at", s.created_at},
      {"started_at", opt(s.started_at)},
      {"ended_at", opt(s.ended_at)},
      {"paused_seconds", s.paused_seconds},
      {"duration_seconds", opt(s.ended_at ? s.duration_seconds(*s.ended_at) : std::nullopt)},
      {"last_step", opt(s.last_step)},
      {"host", s.host},
      {"config", d.config},
      {"config_format", d.config_format},
      {"seed", opt(d.seed)},
      {"cpu_info", d.cpu_info},
      {"gpu_info", d.gpu_info},
      {"engine_version", d.engine_version},
      {"metrics_summary", metrics_summary},
  };
  nlohmann::json metrics = nlohmann::json::object();
  for (const MetricSummary& m : d.metrics) {
    nlohmann::json steps = nlohmann::json::array();
    nlohmann::json values = nlohmann::json::array();
    nlohmann::json times = nlohmann::json::array();
    for (const SeriesPoint& p : series(run, m.key)) {
      steps.push_back(p.step);
      values.push_back(finite_or_null(p.value));
      times.push_back(p.time);
    }
    metrics[m.key] = {
        {"step", std::move(steps)}, {"value", std::move(values)}, {"time", std::move(times)}};
  }
  nlohmann::json events = nlohmann::json::array();
  for (const Event& e : this->events(run)) {
    events.push_back({{"id", e.id},
                      {"time", e.time},
                      {"level", std::string(to_string(e.level))},
                      {"text", e.text}});
  }
  nlohmann::json checkpoints = nlohmann::json::array();
  for (const Checkpoint& c : this->checkpoints(run)) {
    nlohmann::json meta = nlohmann::json::parse(c.metadata, nullptr, /*allow_exceptions=*/false);
    checkpoints.push_back({{"step", c.step},
                           {"path", c.path},
                           {"created_at", c.created_at},
                           {"metadata", meta.is_discarded() ? nlohmann::json(c.metadata) : meta}});
  }
  const nlohmann::json doc = {
      {"format", "trainbench-run"},  {"version", 1},
      {"run", std::move(run_json)},  {"metrics", std::move(metrics)},
      {"events", std::move(events)}, {"checkpoints", std::move(checkpoints)}};
  // Stored text need not be UTF-8 (an older run's byte-model samples, a tag typed in another
  // encoding): such bytes become U+FFFD instead of failing the whole export.
  return doc.dump(2, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace tb::store
