// RunStore: open + crash recovery, run metadata, and the read API.
#include "engine/store/run_store.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>
#include <utility>

#include "engine/store/metric_chunks.h"
#include "engine/store/process_info.h"
#include "engine/store/run_ops.h"
#include "engine/store/run_writer.h"

#ifndef TB_VERSION_STRING
#define TB_VERSION_STRING "unknown"
#endif

namespace tb::store {

using ::tb::detail::str_cat;

double unix_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::filesystem::path default_database_path() {
  const char* xdg = std::getenv("XDG_DATA_HOME");
  if (xdg != nullptr && xdg[0] == '/') {
    return std::filesystem::path(xdg) / "trainbench" / "runs.sqlite";
  }
  const char* home = std::getenv("HOME");
  if (home == nullptr || home[0] == '\0') {
    throw StoreError(
        "[store] cannot find the default run database: neither XDG_DATA_HOME nor HOME is set; "
        "pass a database path (--db PATH)");
  }
  return std::filesystem::path(home) / ".local" / "share" / "trainbench" / "runs.sqlite";
}

namespace detail {

RunStatus read_status(const Connection& db, std::int64_t run) {
  Statement st = db.prepare("SELECT status FROM runs WHERE id = ?");
  st.bind(1, run);
  if (!st.step()) throw ValueError(str_cat("[store] ", db.file(), ": no run ", run));
  return run_status_from_string(st.text(0));
}

void insert_event(Connection& db, std::int64_t run, double time, EventLevel level,
                  std::string_view text) {
  Statement st = db.prepare("INSERT INTO events (run_id, time, level, text) VALUES (?, ?, ?, ?)");
  st.bind(1, run).bind(2, time).bind(3, to_string(level)).bind(4, text);
  st.run();
}

void change_status(Connection& db, std::int64_t run, RunStatus to, std::string_view message,
                   double time, const ProcessIdentity* writer) {
  const RunStatus from = read_status(db, run);
  if (!is_allowed_transition(from, to)) {
    throw ValueError(str_cat("[store] ", db.file(), ": run ", run, " cannot go from '",
                             to_string(from), "' to '", to_string(to), "'"));
  }
  if (to == RunStatus::kRunning) {
    Statement st = db.prepare(
        "UPDATE runs SET status = 'running', started_at = COALESCE(started_at, ?), "
        "paused_seconds = paused_seconds + CASE WHEN started_at IS NULL THEN 0 "
        "ELSE MAX(0, COALESCE(? - ended_at, 0)) END, "
        "ended_at = NULL, message = '', writer_pid = ?, writer_host = ?, writer_start_time = ?, "
        "heartbeat_at = ? WHERE id = ?");
    st.bind(1, time);
    st.bind(2, time);  // a resume: the time since it ended is not part of its duration
    st.bind(6, time);
    if (writer != nullptr) {
      st.bind(3, writer->pid).bind(4, writer->host).bind(5, writer->start_time);
    } else {
      st.bind_null(3).bind_null(4).bind_null(5);
    }
    st.bind(7, run);
    st.run();
  } else {
    Statement st = db.prepare("UPDATE runs SET status = ?, ended_at = ?, message = ? WHERE id = ?");
    st.bind(1, to_string(to));
    if (is_terminal(to)) {
      st.bind(2, time);
    } else {
      st.bind_null(2);
    }
    st.bind(3, message).bind(4, run);
    st.run();
  }
  std::string text = str_cat("status ", to_string(from), " -> ", to_string(to));
  if (to == RunStatus::kRunning && writer != nullptr) {
    text += str_cat(" (pid ", writer->pid, " on ", writer->host, ")");
  }
  if (!message.empty()) text += str_cat(": ", message);
  const EventLevel level =
      (to == RunStatus::kFailed || to == RunStatus::kCrashed || to == RunStatus::kDiverged)
          ? EventLevel::kError
          : EventLevel::kInfo;
  insert_event(db, run, time, level, text);
}

}  // namespace detail

namespace detail {

std::string tags_to_json(const std::vector<std::string>& tags) {
  return nlohmann::json(tags).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

// A name is one line of text: a newline or tab in it would break the runs table, the CSV and the
// report around it.
void check_run_name(const std::filesystem::path& db, std::string_view name) {
  for (std::size_t i = 0; i < name.size(); ++i) {
    const auto c = static_cast<unsigned char>(name[i]);
    if (c < 0x20 || c == 0x7f) {
      char hex[8];
      std::snprintf(hex, sizeof hex, "0x%02x", c);
      throw ValueError(str_cat("[store] ", db.string(), ": a run name is one line of text; '",
                               name.substr(0, i), "...' holds the control character ", hex,
                               " at byte ", i));
    }
  }
}

}  // namespace detail

namespace {

std::vector<std::string> tags_from_json(const std::string& text) {
  try {
    return nlohmann::json::parse(text).get<std::vector<std::string>>();
  } catch (const std::exception&) {
    return {};  // a hand-edited tags column; show no tags rather than fail the list
  }
}

constexpr const char* kSummaryColumns =
    "id, name, tags, status, created_at, started_at, ended_at, last_step, host, message, "
    "sweep_id, sweep_trial, sweep_point, paused_seconds";
constexpr int kSummaryCount = 14;  // columns of kSummaryColumns

RunSummary read_summary(const detail::Statement& st) {
  RunSummary s;
  s.id = st.int64(0);
  s.name = st.text(1);
  s.tags = tags_from_json(st.text(2));
  s.status = run_status_from_string(st.text(3));
  s.created_at = st.real(4);
  s.started_at = st.opt_real(5);
  s.ended_at = st.opt_real(6);
  s.last_step = st.opt_int64(7);
  s.host = st.text(8);
  s.message = st.text(9);
  s.sweep_id = st.opt_int64(10);
  s.sweep_trial = st.opt_int64(11);
  s.sweep_point = st.opt_int64(12);
  s.paused_seconds = st.real(13);
  return s;
}

}  // namespace

RunStore::RunStore(std::filesystem::path path, detail::Connection db)
    : path_(std::move(path)), db_(std::make_unique<detail::Connection>(std::move(db))) {}

RunStore::RunStore(RunStore&&) noexcept = default;
RunStore& RunStore::operator=(RunStore&&) noexcept = default;
RunStore::~RunStore() = default;

RunStore RunStore::open(const std::filesystem::path& path, const StoreOptions& options) {
  detail::OpenOptions o;
  o.read_only = options.read_only;
  o.check = options.check;
  o.busy_timeout_ms = options.busy_timeout_ms;
  RunStore store(path, detail::open_database(path, o));
  if (!options.read_only && options.recover_crashed) {
    try {
      store.recover_crashed_runs();
    } catch (const StoreError& e) {
      // A full disk (SQLITE_FULL) or an I/O error while marking a dead writer's run crashed:
      // the store still reads (`runs`, `show`, `export` must work to free space wisely), and a
      // later open with room marks it. Writing commands meet the same error when they write.
      const int primary = e.sqlite_code() & 0xff;
      if (primary != 13 && primary != 10) throw;
      store.recovery_error_ = e.what();
    }
  }
  return store;
}

std::vector<std::int64_t> RunStore::recover_crashed_runs() {
  const std::string here = host_name();
  struct Candidate {
    std::int64_t id;
    ProcessIdentity who;
    std::optional<double> silent_s;  // another host's writer: how long it has been silent
  };
  std::vector<Candidate> dead;
  {
    detail::Statement st = db_->prepare(
        "SELECT id, writer_pid, writer_host, writer_start_time, heartbeat_at, status FROM runs "
        "WHERE status IN ('running', 'queued') AND writer_pid IS NOT NULL");
    const double now = unix_now();
    while (st.step()) {
      ProcessIdentity who{st.opt_int64(1).value_or(0), st.text(2), st.opt_int64(3).value_or(0)};
      const auto heard = st.opt_real(4);
      if (who.host == here) {
        if (!process_alive(who)) dead.push_back({st.int64(0), who, std::nullopt});
      } else if (st.text(5) == "running" && heard &&
                 now - *heard > static_cast<double>(kWriterSilenceLimit.count())) {
        // Its pid means nothing here: silence is the only sign (a writer stamps its heartbeat
        // every few seconds even when idle).
        dead.push_back({st.int64(0), who, now - *heard});
      }
    }
  }
  std::vector<std::int64_t> changed;
  if (dead.empty()) return changed;
  detail::Transaction tx(*db_);
  for (const Candidate& c : dead) {
    // Re-check under the write lock: another process may have recovered or resumed it.
    const RunStatus now = detail::read_status(*db_, c.id);
    if (now != RunStatus::kRunning && now != RunStatus::kQueued) continue;
    detail::Statement w = db_->prepare(
        "SELECT writer_pid, writer_start_time, last_step, heartbeat_at, "
        "COALESCE(heartbeat_at, started_at, created_at) FROM runs WHERE id = ?");
    w.bind(1, c.id);
    w.step();
    if (w.opt_int64(0).value_or(0) != c.who.pid || w.opt_int64(1).value_or(0) != c.who.start_time) {
      continue;
    }
    if (c.silent_s &&
        unix_now() - w.opt_real(3).value_or(0) <= static_cast<double>(kWriterSilenceLimit.count()))
      continue;  // heard from meanwhile
    const auto last = w.opt_int64(2);
    const std::string why =
        c.silent_s ? str_cat("its writer (pid ", c.who.pid, " on ", c.who.host,
                             ", another host) has not "
                             "been heard from for ",
                             static_cast<std::int64_t>(*c.silent_s), " s; taken as crashed; ",
                             last ? str_cat("every committed step is kept (last step ", *last, ")")
                                  : std::string("no metrics had been committed"))
        : now == RunStatus::kQueued
            ? str_cat("the process that created it (pid ", c.who.pid, " on ", c.who.host,
                      ") ended before the run's start was stored (killed while setting it up, or "
                      "its first writes failed: a full disk); nothing of it was stored")
            : str_cat("the writing process (pid ", c.who.pid, " on ", c.who.host,
                      ") ended without closing the run; ",
                      last ? str_cat("every committed step is kept (last step ", *last, ")")
                           : std::string("no metrics had been committed"));
    // The run ended when its writer was last heard from (a commit, or the idle heartbeat every
    // WriterOptions::heartbeat_interval), not when the crash is found: a run found days later
    // would otherwise show days of duration in compare and the GUI, and, since the time to a
    // target reads the status events, days of training after a resume. Its status event is
    // dated then too.
    const double found = unix_now();
    detail::change_status(*db_, c.id, RunStatus::kCrashed, why,
                          std::min(found, w.opt_real(4).value_or(found)));
    changed.push_back(c.id);
  }
  tx.commit();
  return changed;
}

bool RunStore::close_own_run_left_running(std::int64_t run, const std::string& message) {
  const ProcessIdentity me = current_process();
  detail::Transaction tx(*db_);
  // Queued too: a writer whose first commit failed never marked it running.
  const RunStatus now = detail::read_status(*db_, run);
  if (now != RunStatus::kRunning && now != RunStatus::kQueued) return false;
  detail::Statement w = db_->prepare(
      "SELECT writer_pid, writer_host, writer_start_time, COALESCE(heartbeat_at, started_at, "
      "created_at) FROM runs WHERE id = ?");
  w.bind(1, run);
  if (!w.step() || w.opt_int64(0).value_or(0) != me.pid || w.text(1) != me.host ||
      w.opt_int64(2).value_or(0) != me.start_time)
    return false;  // another process writes it
  const double found = unix_now();
  detail::change_status(*db_, run, RunStatus::kFailed, message,
                        std::min(found, w.opt_real(3).value_or(found)));
  tx.commit();
  return true;
}

std::int64_t RunStore::create_run(const NewRun& run) {
  if (run.name.empty()) {
    throw ValueError(str_cat("[store] ", path_.string(), ": a run needs a non-empty name"));
  }
  detail::check_run_name(path_, run.name);
  detail::Statement st = db_->prepare(
      "INSERT INTO runs (name, tags, status, created_at, config, config_format, seed, host, "
      "cpu_info, gpu_info, engine_version, sweep_id, sweep_trial, sweep_point, writer_pid, "
      "writer_host, writer_start_time) "
      "VALUES (?, ?, 'queued', ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)");
  st.bind(1, run.name).bind(2, detail::tags_to_json(run.tags)).bind(3, unix_now());
  st.bind(4, run.config).bind(5, run.config_format);
  if (run.seed) {
    st.bind(6, static_cast<std::int64_t>(*run.seed));
  } else {
    st.bind_null(6);
  }
  st.bind(7, run.host.empty() ? host_name() : run.host);
  st.bind(8, run.cpu_info.empty() ? cpu_description() : run.cpu_info);
  st.bind(9, run.gpu_info);
  st.bind(10, run.engine_version.empty() ? std::string(TB_VERSION_STRING) : run.engine_version);
  detail::Transaction tx(*db_);
  if (run.sweep_trial) {
    const auto [sweep, trial] = *run.sweep_trial;
    detail::Statement q =
        db_->prepare("SELECT point FROM sweep_trials WHERE sweep_id = ? AND trial = ?");
    q.bind(1, sweep).bind(2, trial);
    if (!q.step()) {
      throw ValueError(str_cat("[store] ", path_.string(), ": sweep ", sweep, " has no trial ",
                               trial, " (a run can only be made for a planned trial)"));
    }
    st.bind(11, sweep).bind(12, trial).bind(13, q.int64(0));
  } else {
    st.bind_null(11).bind_null(12).bind_null(13);
  }
  // The creating process, until a writer takes the run: a queued run whose creator is gone (killed
  // while setting the run up) is found crashed rather than left queued for ever.
  const ProcessIdentity me = current_process();
  st.bind(14, me.pid).bind(15, me.host).bind(16, me.start_time);
  st.run();
  const std::int64_t id = db_->query_int("SELECT last_insert_rowid()");
  detail::insert_event(*db_, id, unix_now(), EventLevel::kInfo, "created (queued)");
  tx.commit();
  return id;
}

RunStatus RunStore::status_of(std::int64_t run) const {
  return detail::read_status(*db_, run);
}

void RunStore::require_run(std::int64_t run) const {
  if (!has_run(run)) throw ValueError(str_cat("[store] ", path_.string(), ": no run ", run));
}

void RunStore::set_status(std::int64_t run, RunStatus status, std::string_view message) {
  // A run set running here is run by this process: record it, so crash recovery can tell.
  const ProcessIdentity me = current_process();
  detail::Transaction tx(*db_);
  detail::change_status(*db_, run, status, message, unix_now(), &me);
  tx.commit();
}

void RunStore::rename_run(std::int64_t run, std::string_view name) {
  if (name.empty()) {
    throw ValueError(str_cat("[store] ", path_.string(), ": run ", run, ": empty name"));
  }
  detail::check_run_name(path_, name);
  require_run(run);
  detail::Statement st = db_->prepare("UPDATE runs SET name = ? WHERE id = ?");
  st.bind(1, name).bind(2, run);
  st.run();
}

void RunStore::set_tags(std::int64_t run, const std::vector<std::string>& tags) {
  require_run(run);
  detail::Statement st = db_->prepare("UPDATE runs SET tags = ? WHERE id = ?");
  st.bind(1, detail::tags_to_json(tags)).bind(2, run);
  st.run();
}

void RunStore::delete_run(std::int64_t run) {
  detail::Transaction tx(*db_);
  if (status_of(run) == RunStatus::kRunning) {
    throw ValueError(str_cat("[store] ", path_.string(), ": run ", run,
                             " is running; cancel it before deleting it"));
  }
  for (const char* sql :
       {"DELETE FROM metrics WHERE run_id = ?", "DELETE FROM metric_chunks WHERE run_id = ?",
        "DELETE FROM events WHERE run_id = ?", "DELETE FROM checkpoints WHERE run_id = ?",
        "DELETE FROM runs WHERE id = ?"}) {
    detail::Statement st = db_->prepare(sql);
    st.bind(1, run);
    st.run();
  }
  tx.commit();
}

std::vector<RunSummary> RunStore::list_runs() const {
  detail::Statement st =
      db_->prepare(str_cat("SELECT ", kSummaryColumns, " FROM runs ORDER BY id DESC"));
  std::vector<RunSummary> out;
  while (st.step())
    out.push_back(read_summary(st));
  return out;
}

bool RunStore::has_run(std::int64_t run) const {
  detail::Statement st = db_->prepare("SELECT 1 FROM runs WHERE id = ?");
  st.bind(1, run);
  return st.step();
}

std::string RunStore::store_id() const {
  detail::Statement st = db_->prepare("SELECT value FROM store_info WHERE key = 'store_id'");
  if (!st.step()) throw StoreError(str_cat("[store] ", path().string(), ": no store_id"));
  return st.text(0);
}

void extend_summary(MetricSummary& m, const std::vector<SeriesPoint>& points) {
  for (const SeriesPoint& p : points) {
    if (m.count++ == 0) m.min_value = m.max_value = std::numeric_limits<double>::quiet_NaN();
    m.last_step = p.step;
    m.last_value = p.value;
    if (std::isnan(p.value)) continue;
    if (std::isnan(m.min_value) || p.value < m.min_value) {
      m.min_value = p.value;
      m.min_step = p.step;
    }
    if (std::isnan(m.max_value) || p.value > m.max_value) {
      m.max_value = p.value;
      m.max_step = p.step;
    }
  }
}

RunDetails RunStore::get_run(std::int64_t run, Metrics metrics) const {
  detail::Statement st = db_->prepare(
      str_cat("SELECT ", kSummaryColumns,
              ", config, config_format, seed, cpu_info, gpu_info, engine_version, writer_pid, "
              "writer_host, writer_start_time FROM runs WHERE id = ?"));
  st.bind(1, run);
  if (!st.step()) throw ValueError(str_cat("[store] ", path_.string(), ": no run ", run));
  RunDetails d;
  d.summary = read_summary(st);
  constexpr int c = kSummaryCount;
  d.config = st.text(c);
  d.config_format = st.text(c + 1);
  if (const auto seed = st.opt_int64(c + 2)) d.seed = static_cast<std::uint64_t>(*seed);
  d.cpu_info = st.text(c + 3);
  d.gpu_info = st.text(c + 4);
  d.engine_version = st.text(c + 5);
  d.writer_pid = st.opt_int64(c + 6);
  d.writer_host = st.text(c + 7);
  d.writer_start_time = st.opt_int64(c + 8);
  if (metrics == Metrics::kNone) return d;

  // Per key: the whole series (both metric tables, later writes winning), then count, final
  // point and extremes (the earliest step among equal extremes; NaN points are skipped).
  for (const auto& [key_id, name] : detail::run_metric_keys(*db_, run)) {
    const std::vector<SeriesPoint> points =
        detail::read_series(*db_, run, key_id, std::numeric_limits<std::int64_t>::min());
    if (points.empty()) continue;
    MetricSummary m;
    m.key = name;
    extend_summary(m, points);
    d.metrics.push_back(std::move(m));
  }
  return d;
}

std::vector<std::string> RunStore::metric_keys(std::int64_t run) const {
  std::vector<std::string> out;
  for (auto& [id, name] : detail::run_metric_keys(*db_, run))
    out.push_back(std::move(name));
  return out;
}

std::vector<SeriesPoint> RunStore::series(std::int64_t run, std::string_view key,
                                          std::int64_t from_step) const {
  detail::Statement id = db_->prepare("SELECT id FROM metric_keys WHERE name = ?");
  id.bind(1, key);
  if (!id.step()) return {};
  return detail::read_series(*db_, run, id.int64(0), from_step);
}

std::optional<double> RunStore::first_point_time(std::int64_t run) const {
  return detail::first_point_time(*db_, run);
}

std::optional<std::int64_t> RunStore::latest_step(std::int64_t run) const {
  detail::Statement st = db_->prepare("SELECT last_step FROM runs WHERE id = ?");
  st.bind(1, run);
  if (!st.step()) throw ValueError(str_cat("[store] ", path_.string(), ": no run ", run));
  return st.opt_int64(0);
}

std::vector<RunProgress> RunStore::progress() const {
  detail::Statement st = db_->prepare("SELECT id, status, last_step FROM runs ORDER BY id DESC");
  std::vector<RunProgress> out;
  while (st.step()) {
    out.push_back({st.int64(0), run_status_from_string(st.text(1)), st.opt_int64(2)});
  }
  return out;
}

std::vector<Event> RunStore::events(std::int64_t run, std::int64_t after_id) const {
  detail::Statement st = db_->prepare(
      "SELECT id, time, level, text FROM events WHERE run_id = ? AND id > ? ORDER BY id");
  st.bind(1, run).bind(2, after_id);
  std::vector<Event> out;
  while (st.step()) {
    out.push_back({st.int64(0), st.real(1), event_level_from_string(st.text(2)), st.text(3)});
  }
  return out;
}

std::vector<Checkpoint> RunStore::checkpoints(std::int64_t run) const {
  detail::Statement st = db_->prepare(
      "SELECT id, step, path, created_at, metadata FROM checkpoints WHERE run_id = ? "
      "ORDER BY step, id");
  st.bind(1, run);
  std::vector<Checkpoint> out;
  while (st.step()) {
    out.push_back({st.int64(0), st.int64(1), st.text(2), st.real(3), st.text(4)});
  }
  return out;
}

}  // namespace tb::store
