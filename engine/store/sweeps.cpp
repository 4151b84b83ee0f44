// Sweeps in the run store (see sweeps.h).
#include "engine/store/sweeps.h"

#include <algorithm>

#include <sqlite3.h>

#include "engine/core/error.h"
#include "engine/store/process_info.h"

namespace tb::store {
namespace {

using ::tb::detail::str_cat;

constexpr const char* kSweepColumns =
    "s.id, s.name, s.status, s.created_at, s.ended_at, s.method, s.metric, s.goal, s.config, "
    "s.plan, s.message, s.writer_pid, s.writer_host, s.writer_start_time, "
    "(SELECT COUNT(*) FROM sweep_trials t WHERE t.sweep_id = s.id), "
    "(SELECT COUNT(DISTINCT r.sweep_trial) FROM runs r WHERE r.sweep_id = s.id), "
    "(SELECT COUNT(DISTINCT r.sweep_trial) FROM runs r WHERE r.sweep_id = s.id AND "
    "r.status = 'finished'), "
    "(SELECT COUNT(*) FROM sweep_trials t WHERE t.sweep_id = s.id AND t.stopped_step IS NOT "
    "NULL), "
    "(SELECT COUNT(*) FROM sweep_trials t WHERE t.sweep_id = s.id AND (SELECT r.status FROM runs "
    "r WHERE r.sweep_id = s.id AND r.sweep_trial = t.trial ORDER BY r.id DESC LIMIT 1) IN "
    "('failed', 'diverged'))";

SweepRecord read_sweep(const detail::Statement& st) {
  SweepRecord r;
  r.id = st.int64(0);
  r.name = st.text(1);
  r.status = st.text(2);
  r.created_at = st.real(3);
  r.ended_at = st.opt_real(4);
  r.method = st.text(5);
  r.metric = st.text(6);
  r.goal = st.text(7);
  r.config = st.text(8);
  r.plan = st.text(9);
  r.message = st.text(10);
  const ProcessIdentity who{st.opt_int64(11).value_or(0), st.text(12),
                            st.opt_int64(13).value_or(0)};
  if (r.status == "running" && who.host == host_name() && !process_alive(who))
    r.status = "interrupted";
  r.trials = st.int64(14);
  r.runs = st.int64(15);
  r.finished = st.int64(16);
  r.stopped = st.int64(17);
  r.failed = st.int64(18);
  // A finished sweep's every trial finished, was stopped early or failed — also one whose process
  // ended with an error before its run started or continued (its newest run, if any, is still
  // cancelled or crashed).
  if (r.status == "finished") r.failed = std::max(r.failed, r.trials - r.finished - r.stopped);
  return r;
}

void require_sweep(RunStore& store, std::int64_t id) {
  detail::Statement st = store.connection().prepare("SELECT 1 FROM sweeps WHERE id = ?");
  st.bind(1, id);
  if (!st.step()) throw ValueError(str_cat("[store] ", store.path().string(), ": no sweep ", id));
}

void set_writer(detail::Connection& db, std::int64_t id) {
  const ProcessIdentity me = current_process();
  detail::Statement st = db.prepare(
      "UPDATE sweeps SET status = 'running', ended_at = NULL, message = '', writer_pid = ?, "
      "writer_host = ?, writer_start_time = ? WHERE id = ?");
  st.bind(1, me.pid).bind(2, me.host).bind(3, me.start_time).bind(4, id);
  st.run();
}

}  // namespace

std::int64_t create_sweep(RunStore& store, const NewSweep& s) {
  auto& db = store.connection();
  if (s.name.empty())
    throw ValueError(str_cat("[store] ", store.path().string(), ": a sweep needs a name"));
  detail::Transaction tx(db);
  {
    detail::Statement q = db.prepare("SELECT id, status FROM sweeps WHERE name = ?");
    q.bind(1, s.name);
    if (q.step()) {
      // A finished one has nothing to continue: --resume would only print its table again.
      const bool finished = q.text(1) == "finished";
      throw ValueError(str_cat("[sweep] ", store.path().string(), " already has a sweep '", s.name,
                               "' (id ", q.int64(0), finished ? ", finished" : "",
                               finished ? "): sweep --show " : "): continue it with --resume ",
                               s.name, finished ? " prints its table" : "",
                               ", or give this one another sweep.name"));
    }
  }
  detail::Statement st = db.prepare(
      "INSERT INTO sweeps (name, status, created_at, method, metric, goal, config, plan) "
      "VALUES (?, 'running', ?, ?, ?, ?, ?, ?)");
  st.bind(1, s.name).bind(2, unix_now()).bind(3, s.method).bind(4, s.metric).bind(5, s.goal);
  st.bind(6, s.config).bind(7, s.plan);
  st.run();
  const std::int64_t id = db.query_int("SELECT last_insert_rowid()");
  set_writer(db, id);
  detail::Statement t = db.prepare(
      "INSERT INTO sweep_trials (sweep_id, trial, point, seed, name, assignment, config) "
      "VALUES (?, ?, ?, ?, ?, ?, ?)");
  for (const NewSweepTrial& trial : s.trials) {
    t.bind(1, id).bind(2, trial.trial).bind(3, trial.point).bind(4, trial.seed);
    t.bind(5, trial.name).bind(6, trial.assignment).bind(7, trial.config);
    t.run();
  }
  tx.commit();
  return id;
}

std::optional<SweepRecord> find_sweep(RunStore& store, std::string_view name) {
  detail::Statement st = store.connection().prepare(
      str_cat("SELECT ", kSweepColumns, " FROM sweeps s WHERE name = ?"));
  st.bind(1, name);
  if (!st.step()) return std::nullopt;
  return read_sweep(st);
}

std::vector<SweepRecord> list_sweeps(RunStore& store) {
  detail::Statement st = store.connection().prepare(
      str_cat("SELECT ", kSweepColumns, " FROM sweeps s ORDER BY id DESC"));
  std::vector<SweepRecord> out;
  while (st.step())
    out.push_back(read_sweep(st));
  return out;
}

std::vector<SweepTrialRecord> sweep_trials(RunStore& store, std::int64_t id) {
  require_sweep(store, id);
  // The newest run of each trial (a trial restarted without a checkpoint has several).
  detail::Statement st = store.connection().prepare(
      "SELECT t.trial, t.point, t.seed, t.name, t.assignment, t.config, t.stopped_step, t.note, "
      "r.id, r.status, r.last_step FROM sweep_trials t LEFT JOIN runs r ON r.id = (SELECT "
      "MAX(id) FROM runs WHERE sweep_id = t.sweep_id AND sweep_trial = t.trial) "
      "WHERE t.sweep_id = ? ORDER BY t.trial");
  st.bind(1, id);
  std::vector<SweepTrialRecord> out;
  while (st.step()) {
    SweepTrialRecord r;
    r.trial = st.int64(0);
    r.point = st.int64(1);
    r.seed = st.int64(2);
    r.name = st.text(3);
    r.assignment = st.text(4);
    r.config = st.text(5);
    r.stopped_step = st.opt_int64(6);
    r.note = st.text(7);
    r.run_id = st.opt_int64(8);
    if (r.run_id) r.run_status = run_status_from_string(st.text(9));
    r.last_step = st.opt_int64(10);
    out.push_back(std::move(r));
  }
  return out;
}

void restart_sweep(RunStore& store, std::int64_t id) {
  require_sweep(store, id);
  set_writer(store.connection(), id);
}

void end_sweep(RunStore& store, std::int64_t id, std::string_view status,
               std::string_view message) {
  require_sweep(store, id);
  if (status != "finished" && status != "failed") {
    throw ValueError(str_cat("[store] sweep ", id, ": cannot end with status '", status,
                             "' (finished or failed)"));
  }
  detail::Statement st = store.connection().prepare(
      "UPDATE sweeps SET status = ?, ended_at = ?, message = ? WHERE id = ?");
  st.bind(1, status).bind(2, unix_now()).bind(3, message).bind(4, id);
  st.run();
}

void stop_trial(RunStore& store, std::int64_t id, std::int64_t trial, std::int64_t step,
                std::string_view note, std::string_view run_message) {
  detail::Transaction tx(store.connection());
  detail::Statement st = store.connection().prepare(
      "UPDATE sweep_trials SET stopped_step = ?, note = ? WHERE sweep_id = ? AND trial = ?");
  st.bind(1, step).bind(2, note).bind(3, id).bind(4, trial);
  st.run();
  if (sqlite3_changes(store.connection().handle()) == 0) {
    throw ValueError(
        str_cat("[store] ", store.path().string(), ": sweep ", id, " has no trial ", trial));
  }
  if (!run_message.empty()) {
    detail::Statement msg = store.connection().prepare(
        "UPDATE runs SET message = ? WHERE status = 'cancelled' AND id = (SELECT MAX(id) FROM "
        "runs WHERE sweep_id = ? AND sweep_trial = ?)");
    msg.bind(1, run_message).bind(2, id).bind(3, trial);
    msg.run();
  }
  tx.commit();
}

}  // namespace tb::store
