// Tests of the SQLite run store (engine/store): schema, migrations and refusals, the writer
// thread, live reads, crash detection (including a real kill -9), status changes and export.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sqlite3.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "engine/store/database.h"
#include "engine/store/process_info.h"
#include "engine/store/run_store.h"
#include "engine/store/run_writer.h"
#include "engine/store/schema.h"
#include "engine/store/sweeps.h"
#include "engine/store/tensorboard.h"

namespace {

namespace fs = std::filesystem;
using namespace tb::store;  // NOLINT(google-build-using-namespace): test file

class StoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (fs::temp_directory_path() / "tb_store_test_XXXXXX").string();
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path db() const { return dir_ / "runs.sqlite"; }
  fs::path dir_;
};

std::string read_bytes(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream all;
  all << in.rdbuf();
  return all.str();
}

void write_bytes(const fs::path& p, const std::string& bytes) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out << bytes;
}

// A raw connection, independent of the code under test.
class RawDb {
 public:
  explicit RawDb(const fs::path& p) {
    EXPECT_EQ(sqlite3_open(p.string().c_str(), &db_), SQLITE_OK);
    sqlite3_busy_timeout(db_, 5000);
  }
  ~RawDb() { sqlite3_close(db_); }
  void exec(const std::string& sql) {
    char* err = nullptr;
    ASSERT_EQ(sqlite3_exec(db_, sql.c_str(), nullptr, nullptr, &err), SQLITE_OK)
        << sql << ": " << (err ? err : "");
  }
  std::string text(const std::string& sql) {
    sqlite3_stmt* st = nullptr;
    EXPECT_EQ(sqlite3_prepare_v2(db_, sql.c_str(), -1, &st, nullptr), SQLITE_OK) << sql;
    std::string out;
    if (sqlite3_step(st) == SQLITE_ROW && sqlite3_column_text(st, 0) != nullptr) {
      out = reinterpret_cast<const char*>(sqlite3_column_text(st, 0));
    }
    sqlite3_finalize(st);
    return out;
  }
  std::int64_t integer(const std::string& sql) { return std::stoll(text(sql)); }

 private:
  sqlite3* db_ = nullptr;
};

template <typename Fn>
std::string error_of(Fn&& fn) {
  try {
    fn();
  } catch (const tb::Error& e) {
    return e.what();
  }
  return "(no error)";
}

// ---------------------------------------------------------------------------------------------
// Schema, opening, refusal

TEST_F(StoreTest, CreatesSchemaInNewDirectoriesAndReopens) {
  const fs::path nested = dir_ / "a" / "b" / "runs.sqlite";
  std::int64_t id = 0;
  {
    auto store = RunStore::open(nested);
    id = store.create_run(
        {.name = "first", .tags = {"mlp", "adamw"}, .config = "[run]\n", .seed = 42});
  }
  {
    RawDb raw(nested);
    EXPECT_EQ(raw.integer("PRAGMA application_id"), kApplicationId);
    EXPECT_EQ(raw.integer("PRAGMA user_version"), kSchemaVersion);
    EXPECT_EQ(raw.text("PRAGMA journal_mode"), "wal");
    EXPECT_EQ(raw.integer("SELECT count(*) FROM sqlite_schema WHERE type = 'table' AND name IN "
                          "('runs', 'metrics', 'metric_keys', 'events', 'checkpoints')"),
              5);
  }
  auto store = RunStore::open(nested);
  const RunDetails d = store.get_run(id);
  EXPECT_EQ(d.summary.name, "first");
  EXPECT_EQ(d.summary.tags, (std::vector<std::string>{"mlp", "adamw"}));
  EXPECT_EQ(d.summary.status, RunStatus::kQueued);
  EXPECT_EQ(d.config, "[run]\n");
  EXPECT_EQ(d.seed, 42u);
  EXPECT_EQ(d.summary.host, host_name());
  EXPECT_FALSE(d.engine_version.empty());
  EXPECT_EQ(store.list_runs().size(), 1u);
}

TEST_F(StoreTest, ProcessesCreatingTheSameStoreAtOnceBothSucceed) {
  // Runs started together (trainbench-cli launch) open a store that does not exist yet. Switching
  // it to WAL needs an exclusive lock that SQLite refuses without waiting; before the retry one
  // of two launched runs failed with "database is locked". This in-process fork version did not
  // hit that window on the development machine (e2e.launch_binding did); it guards the outcome.
  for (int round = 0; round < 20; ++round) {
    const fs::path db = dir_ / ("race-" + std::to_string(round) + ".sqlite");
    std::vector<pid_t> kids;
    // A common start time a few ms ahead, so the children open the file together.
    const auto gate = std::chrono::system_clock::now() + std::chrono::milliseconds(30);
    for (int k = 0; k < 3; ++k) {
      const pid_t pid = fork();
      ASSERT_GE(pid, 0);
      if (pid == 0) {
        // Staggered by 0-3 ms: one child is creating the schema while another switches to WAL.
        const auto start = gate + std::chrono::microseconds((round * 7 + k * 1100) % 3000);
        while (std::chrono::system_clock::now() < start) {
        }
        int code = 0;
        try {
          auto store = RunStore::open(db);
          store.create_run({.name = "child"});
        } catch (const std::exception& e) {
          std::fprintf(stderr, "round %d child %d: %s\n", round, k, e.what());
          code = 1;
        }
        _exit(code);
      }
      kids.push_back(pid);
    }
    for (pid_t pid : kids) {
      int status = 0;
      ASSERT_EQ(waitpid(pid, &status, 0), pid);
      EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "round " << round;
    }
    ASSERT_EQ(RunStore::open(db).list_runs().size(), 3u) << "round " << round;
  }
}

TEST_F(StoreTest, DefaultPathFollowsXdg) {
  const char* old_xdg = std::getenv("XDG_DATA_HOME");
  const std::string saved = old_xdg ? old_xdg : "";
  setenv("XDG_DATA_HOME", dir_.c_str(), 1);
  EXPECT_EQ(default_database_path(), dir_ / "trainbench" / "runs.sqlite");
  setenv("XDG_DATA_HOME", "relative/dir", 1);  // ignored, as the XDG spec says
  EXPECT_EQ(default_database_path(),
            fs::path(std::getenv("HOME")) / ".local/share/trainbench/runs.sqlite");
  if (old_xdg) {
    setenv("XDG_DATA_HOME", saved.c_str(), 1);
  } else {
    unsetenv("XDG_DATA_HOME");
  }
}

TEST_F(StoreTest, EmptyFileIsInitialisedFromVersionZero) {
  write_bytes(db(), "");
  auto store = RunStore::open(db());
  RawDb raw(db());
  EXPECT_EQ(raw.integer("PRAGMA user_version"), kSchemaVersion);
  EXPECT_EQ(raw.integer("PRAGMA application_id"), kApplicationId);
}

TEST_F(StoreTest, MigrationLadderAddsAVersionInOneTransaction) {
  { auto store = RunStore::open(db()); }
  const auto current = detail::migrations();
  const int next = kSchemaVersion + 1;
  const std::string to_next = "migration to schema version " + std::to_string(next);
  // A rung that adds a table and a column, as a future schema change would.
  std::vector<detail::Migration> good(current.begin(), current.end());
  good.push_back(
      {next, "add notes", "ALTER TABLE runs ADD COLUMN notes TEXT; CREATE TABLE x (a);"});
  // A rung that fails half-way: the first statement must be rolled back.
  std::vector<detail::Migration> bad(current.begin(), current.end());
  bad.push_back({next, "broken", "CREATE TABLE y (a); THIS IS NOT SQL;"});
  detail::OpenOptions o;
  o.ladder = bad;
  const std::string msg = error_of([&] { detail::open_database(db(), o); });
  EXPECT_NE(msg.find(to_next + " (broken) failed"), std::string::npos) << msg;
  {
    RawDb raw(db());
    EXPECT_EQ(raw.integer("PRAGMA user_version"), kSchemaVersion);
    EXPECT_EQ(raw.integer("SELECT count(*) FROM sqlite_schema WHERE name = 'y'"), 0);
  }
  o.ladder = good;
  { detail::open_database(db(), o); }
  RawDb raw(db());
  EXPECT_EQ(raw.integer("PRAGMA user_version"), next);
  EXPECT_EQ(raw.integer("SELECT count(*) FROM pragma_table_info('runs') WHERE name = 'notes'"), 1);
}

// The store's identity keys its checkpoint folders: made once, kept across opens, different for
// two stores, and given to a version-1 store when it is migrated.
TEST_F(StoreTest, StoreIdIsMadeOnceKeptAndGivenToMigratedStores) {
  std::string id;
  {
    auto store = RunStore::open(db());
    id = store.store_id();
  }
  EXPECT_EQ(id.size(), 16u);
  EXPECT_EQ(id.find_first_not_of("0123456789abcdef"), std::string::npos) << id;
  EXPECT_EQ(RunStore::open(db()).store_id(), id);
  const fs::path other = db().parent_path() / "other.sqlite";
  EXPECT_NE(RunStore::open(other).store_id(), id);

  const fs::path old = db().parent_path() / "v1.sqlite";
  {
    const auto all = detail::migrations();
    const std::vector<detail::Migration> v1(all.begin(), all.begin() + 1);
    detail::OpenOptions o;
    o.ladder = v1;
    detail::open_database(old, o);
  }
  EXPECT_EQ(RawDb(old).integer("PRAGMA user_version"), 1);
  const std::string migrated = RunStore::open(old).store_id();
  EXPECT_EQ(migrated.size(), 16u);
  EXPECT_EQ(RawDb(old).integer("PRAGMA user_version"), kSchemaVersion);
  EXPECT_EQ(RunStore::open(old).store_id(), migrated);
}

// A sweep is a record of its own: its trials, the runs made for them (each knowing its sweep,
// trial and point), early stopping's decisions, its status; names are unique; a run cannot be
// made for a trial that was not planned; a store of the previous version gains the tables.
TEST_F(StoreTest, SweepsAreRecordsWithTrialsAndRunsThatKnowThem) {
  auto store = RunStore::open(db());
  NewSweep s;
  s.name = "lr";
  s.method = "grid";
  s.metric = "eval.loss";
  s.goal = "min";
  s.config = "[sweep]\n";
  s.plan = "{}";
  for (std::int64_t t = 0; t < 4; ++t)
    s.trials.push_back(
        {t, t / 2, 1 + t % 2, "lr p" + std::to_string(t / 2), "optimizer.lr=0.1", "[run]\n"});
  const std::int64_t id = create_sweep(store, s);
  try {
    create_sweep(store, s);
    ADD_FAILURE() << "a second sweep 'lr' was created";
  } catch (const tb::ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("already has a sweep 'lr' (id " + std::to_string(id) +
                                         "): continue it with --resume lr, or give this one "
                                         "another sweep.name"),
              std::string::npos)
        << e.what();
  }
  NewRun run;
  run.name = "lr p1";
  run.sweep_trial = std::make_pair(id, std::int64_t{3});
  const std::int64_t first = store.create_run(run);
  const std::int64_t again = store.create_run(run);  // restarted without a checkpoint
  run.sweep_trial = std::make_pair(id, std::int64_t{9});
  EXPECT_THROW(store.create_run(run), tb::ValueError);
  run.sweep_trial.reset();
  const std::int64_t plain = store.create_run(run);

  const auto runs = store.list_runs();
  ASSERT_EQ(runs.size(), 3u);
  EXPECT_EQ(runs[0].id, plain);
  EXPECT_FALSE(runs[0].sweep_id.has_value());
  EXPECT_EQ(runs[1].sweep_id, id);
  EXPECT_EQ(runs[1].sweep_trial, 3);
  EXPECT_EQ(runs[1].sweep_point, 1);
  EXPECT_EQ(store.get_run(first).summary.sweep_point, 1);

  stop_trial(store, id, 0, 10, "stopped at step 10");
  EXPECT_THROW(stop_trial(store, id, 7, 10, ""), tb::ValueError);
  const auto trials = sweep_trials(store, id);
  ASSERT_EQ(trials.size(), 4u);
  EXPECT_EQ(trials[0].stopped_step, 10);
  EXPECT_EQ(trials[0].note, "stopped at step 10");
  EXPECT_FALSE(trials[1].run_id.has_value());
  EXPECT_EQ(trials[3].run_id, again);  // the newest run of the trial
  EXPECT_EQ(trials[3].run_status, RunStatus::kQueued);

  auto rec = find_sweep(store, "lr");
  ASSERT_TRUE(rec.has_value());
  EXPECT_EQ(rec->status, "running");  // by this (live) process
  EXPECT_EQ(rec->trials, 4);
  EXPECT_EQ(rec->runs, 1);  // one trial has runs
  EXPECT_EQ(rec->stopped, 1);
  // The stopped trial's run says why it was stopped, once it has stopped (cancelled) — not
  // before, and not an older run of the trial.
  stop_trial(store, id, 3, 20, "stopped at step 20", "stopped early by sweep lr at step 20");
  EXPECT_EQ(store.get_run(again).summary.message, "");  // still queued
  store.set_status(first, RunStatus::kRunning);         // an older run of the trial, cancelled too
  store.set_status(first, RunStatus::kCancelled, "stopped at step 5 of 30 as asked");
  store.set_status(again, RunStatus::kRunning);
  store.set_status(again, RunStatus::kCancelled, "stopped at step 20 of 30 as asked");
  stop_trial(store, id, 3, 20, "stopped at step 20", "stopped early by sweep lr at step 20");
  EXPECT_EQ(store.get_run(again).summary.message, "stopped early by sweep lr at step 20");
  EXPECT_EQ(store.get_run(first).summary.message, "stopped at step 5 of 30 as asked");
  end_sweep(store, id, "finished", "done");
  EXPECT_EQ(list_sweeps(store).at(0).status, "finished");
  EXPECT_THROW(end_sweep(store, id, "paused", ""), tb::ValueError);
  EXPECT_FALSE(find_sweep(store, "other").has_value());

  // A sweep recorded as running by a process that is gone reads as interrupted.
  restart_sweep(store, id);
  RawDb(db()).exec("UPDATE sweeps SET writer_pid = 999999999");
  EXPECT_EQ(find_sweep(store, "lr")->status, "interrupted");

  const fs::path old = db().parent_path() / "v3.sqlite";
  {
    const auto all = detail::migrations();
    detail::OpenOptions o;
    o.ladder = std::span<const detail::Migration>(all.data(), 3);
    detail::open_database(old, o);
  }
  auto migrated = RunStore::open(old);
  EXPECT_TRUE(list_sweeps(migrated).empty());
  EXPECT_FALSE(migrated.get_run(migrated.create_run(run)).summary.sweep_id.has_value());
}

// Metric points are packed per metric and commit (metric_chunks); a later write of a step
// replaces the earlier one wherever it is, within a commit, across commits, or in the per-row
// table a version-2 store wrote (kept and read alongside after the migration).
TEST_F(StoreTest, PackedChunksMergeWithRowsOfVersionTwoAndLaterWritesWin) {
  const fs::path old = db().parent_path() / "v2.sqlite";
  {
    const auto all = detail::migrations();
    const std::vector<detail::Migration> v2(all.begin(), all.begin() + 2);  // o.ladder views it
    detail::OpenOptions o;
    o.ladder = v2;
    detail::open_database(old, o);
  }
  {
    RawDb raw(old);
    raw.exec(
        "INSERT INTO runs (id, name, status, created_at, last_step) VALUES (1, 'old', 'finished', "
        "1000, 4);"
        "INSERT INTO metric_keys (id, name) VALUES (1, 'loss'), (2, 'lr');"
        "INSERT INTO metrics (run_id, key_id, step, value, time) VALUES "
        "(1, 1, 0, 5.0, 1001), (1, 1, 1, 4.0, 1002), (1, 1, 2, NULL, 1003), (1, 1, 3, 3.0, 1004),"
        "(1, 1, 4, 2.5, 1005), (1, 2, 0, 0.1, 1001);");
  }
  auto store = RunStore::open(old);
  EXPECT_EQ(RawDb(old).integer("PRAGMA user_version"), kSchemaVersion);
  ASSERT_EQ(store.series(1, "loss").size(), 5u);
  EXPECT_TRUE(std::isnan(store.series(1, "loss")[2].value));
  EXPECT_EQ(*store.first_point_time(1), 1001.0);
  {
    RunWriter w(old, 1);  // resumed from step 3: steps 3 and 4 again, then new ones
    const auto loss = w.key("loss");
    for (std::int64_t step = 3; step < 8; ++step)
      w.log_metrics(step, std::array{KeyedValue{loss, 10.0 * static_cast<double>(step)}});
    w.log_metrics(6, std::array{KeyedValue{loss, -1.0}});  // the same step twice in one commit
    w.flush();
    w.log_metrics(7, std::array{KeyedValue{loss, 0.5}});  // and in a later commit
    w.set_status(RunStatus::kFinished);
  }
  const std::vector<SeriesPoint> s = store.series(1, "loss");
  std::vector<std::int64_t> steps;
  std::vector<double> values;
  for (const SeriesPoint& p : s) {
    steps.push_back(p.step);
    values.push_back(p.value);
  }
  EXPECT_EQ(steps, (std::vector<std::int64_t>{0, 1, 2, 3, 4, 5, 6, 7}));
  EXPECT_EQ(values[0], 5.0);
  EXPECT_EQ(values[3], 30.0);  // the chunk replaced the row
  EXPECT_EQ(values[6], -1.0);
  EXPECT_EQ(values[7], 0.5);
  const std::vector<SeriesPoint> tail = store.series(1, "loss", 6);
  ASSERT_EQ(tail.size(), 2u);
  EXPECT_EQ(tail[0].step, 6);
  EXPECT_EQ(tail[1].value, 0.5);
  EXPECT_EQ(store.metric_keys(1), (std::vector<std::string>{"loss", "lr"}));
  const RunDetails d = store.get_run(1);
  ASSERT_EQ(d.metrics.size(), 2u);
  EXPECT_EQ(d.metrics[0].key, "loss");
  EXPECT_EQ(d.metrics[0].count, 8);
  EXPECT_EQ(d.metrics[0].last_step, 7);
  EXPECT_EQ(d.metrics[0].last_value, 0.5);
  EXPECT_EQ(d.metrics[0].min_value, -1.0);
  EXPECT_EQ(d.metrics[0].min_step, 6);
  EXPECT_EQ(d.metrics[0].max_value, 50.0);
  EXPECT_EQ(d.metrics[0].max_step, 5);
  EXPECT_EQ(d.metrics[1].count, 1);
  EXPECT_EQ(d.summary.last_step, 7);
  store.delete_run(1);
  RawDb raw(old);
  EXPECT_EQ(raw.integer("SELECT COUNT(*) FROM metric_chunks"), 0);
  EXPECT_EQ(raw.integer("SELECT COUNT(*) FROM metrics"), 0);
}

// A run's duration is the time it trained: the hour it spent cancelled before its resume (a
// sweep trial waiting at a rung, a run resumed the next day) is not part of it.
TEST_F(StoreTest, ADurationLeavesOutTheTimeARunSpentEndedBeforeItsResume) {
  auto store = RunStore::open(db());
  const std::int64_t run = store.create_run({.name = "resumed"});
  {
    RunWriter w(db(), run);
    w.set_status(RunStatus::kCancelled);
  }
  {
    // As if it had trained for an hour and ended an hour ago.
    RawDb raw(db());
    raw.exec(
        "UPDATE runs SET started_at = ended_at - 7200, ended_at = ended_at - 3600 WHERE id = " +
        std::to_string(run));
  }
  {
    RunWriter w(db(), run);
    w.set_status(RunStatus::kFinished);
  }
  const RunSummary s = store.get_run(run).summary;
  EXPECT_NEAR(s.paused_seconds, 3600.0, 5.0);
  EXPECT_NEAR(*s.ended_at - *s.started_at, 7200.0, 5.0);
  ASSERT_TRUE(s.duration_seconds(0));
  EXPECT_NEAR(*s.duration_seconds(0), 3600.0, 5.0);
  // A run that never ended before has nothing to leave out.
  const std::int64_t plain = store.create_run({.name = "plain"});
  {
    RunWriter w(db(), plain);
    w.set_status(RunStatus::kFinished);
  }
  EXPECT_EQ(store.get_run(plain).summary.paused_seconds, 0.0);
}

// A resume continues after its checkpoint's step: what the store holds past it (a continuation
// killed after its newest checkpoint, or one abandoned by resuming from an earlier checkpoint)
// is removed when the resumed writer takes the run, from both metric tables and the checkpoint
// records, while every point up to the step stays (and a chunk straddling it keeps its head).
TEST_F(StoreTest, AResumeRemovesWhatTheStoreHeldAfterItsStep) {
  auto store = RunStore::open(db());
  const std::int64_t run = store.create_run({.name = "rewound"});
  const auto log_range = [](RunWriter& w, std::int64_t from, std::int64_t to, double sign) {
    const auto loss = w.key("loss");
    for (std::int64_t step = from; step <= to; ++step)
      w.log_metrics(step, std::array{KeyedValue{loss, sign * static_cast<double>(step)}});
  };
  {
    RunWriter w(db(), run);
    log_range(w, 0, 1500, 1.0);
    w.flush();  // chunks end at 1500, 3000 and 9999: the resume at 2000 cuts the second
    log_range(w, 1501, 3000, 1.0);
    w.flush();
    log_range(w, 3001, 9999, 1.0);
    for (const std::int64_t step : {2000, 5000, 9000})
      w.add_checkpoint(step, "/ck/step-" + std::to_string(step));
    w.set_status(RunStatus::kCancelled);
  }
  {
    // Rows of the per-point table (stores of schema v1/v2) go too.
    RawDb raw(db());
    raw.exec("INSERT INTO metric_keys (name) VALUES ('old');");
    raw.exec(
        "INSERT INTO metrics (run_id, key_id, step, value, time) SELECT " + std::to_string(run) +
        ", id, s.step, 1.0, 1000 FROM metric_keys, (SELECT 1999 AS step UNION SELECT 2000 UNION "
        "SELECT 2001 UNION SELECT 2600) AS s WHERE name = 'old';");
  }
  {
    WriterOptions o;
    o.resume_after = 2000;
    RunWriter w(db(), run, o);
    EXPECT_EQ(w.stats().removed_points, 7999 + 2);  // loss 2001..9999, 'old' 2001 and 2600
    EXPECT_EQ(w.stats().removed_checkpoints, 2);
    EXPECT_EQ(store.get_run(run).summary.last_step, 2000);
    log_range(w, 2001, 2500, -1.0);
    w.add_checkpoint(2500, "/ck/step-2500");
    w.set_status(RunStatus::kCancelled);
  }
  {
    WriterOptions o;
    o.resume_after = 2300;  // back again, into the second writer's chunk
    RunWriter w(db(), run, o);
    EXPECT_EQ(w.stats().removed_points, 200);
    EXPECT_EQ(w.stats().removed_checkpoints, 1);
    w.set_status(RunStatus::kCancelled);
  }
  const std::vector<SeriesPoint> loss = store.series(run, "loss");
  ASSERT_EQ(loss.size(), 2301u);
  for (std::size_t i = 0; i < loss.size(); ++i) {
    ASSERT_EQ(loss[i].step, static_cast<std::int64_t>(i));
    ASSERT_EQ(loss[i].value, (i <= 2000 ? 1.0 : -1.0) * static_cast<double>(i)) << "step " << i;
  }
  const std::vector<SeriesPoint> old = store.series(run, "old");
  ASSERT_EQ(old.size(), 2u);
  EXPECT_EQ(old[1].step, 2000);
  const std::vector<Checkpoint> cks = store.checkpoints(run);
  ASSERT_EQ(cks.size(), 1u);
  EXPECT_EQ(cks[0].step, 2000);
  EXPECT_EQ(store.get_run(run).summary.last_step, 2300);
  EXPECT_EQ(store.get_run(run).metrics.front().count, 2301);
  // Chunks stay consistent with their blobs: first/last step and count as the points say.
  RawDb raw(db());
  EXPECT_EQ(raw.integer("SELECT COUNT(*) FROM metric_chunks WHERE length(points) != count * 24"),
            0);
  EXPECT_EQ(raw.integer("SELECT MAX(last_step) FROM metric_chunks"), 2300);
}

// A damaged chunk (its blob shorter than its count says) is an error naming the file, not a
// crash or a silently short series.
TEST_F(StoreTest, DamagedChunkIsReportedWithTheFile) {
  auto store = RunStore::open(db());
  const auto run = store.create_run({.name = "r"});
  {
    RunWriter w(db(), run);
    w.log_metrics(0, {{"loss", 1.0}});
    w.set_status(RunStatus::kFinished);
  }
  RawDb(db()).exec("UPDATE metric_chunks SET count = 2");
  try {
    (void)store.series(run, "loss");
    ADD_FAILURE() << "no error";
  } catch (const StoreError& e) {
    EXPECT_NE(std::string(e.what()).find(db().string()), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("holds 24 bytes for 2 points"), std::string::npos)
        << e.what();
  }
}

// A bind SQLite refuses is an error naming the file and the statement; it was ignored, leaving
// the parameter NULL. The statement's file name outlives a move of its connection.
TEST_F(StoreTest, AFailedBindIsAnErrorNamingTheStatement) {
  namespace d = tb::store::detail;
  d::Connection moved(db(), {.read_only = false, .create = true});
  d::Connection db_conn = std::move(moved);
  d::Statement st = db_conn.prepare("SELECT ?1");
  const std::string msg = error_of([&] { st.bind(2, std::int64_t{1}); });
  EXPECT_NE(msg.find("[store] " + db().string()), std::string::npos) << msg;
  EXPECT_NE(msg.find("cannot bind parameter 2 of 'SELECT ?1'"), std::string::npos) << msg;
  st.bind(1, std::int64_t{7});
  ASSERT_TRUE(st.step());
  EXPECT_EQ(st.int64(0), 7);
}

TEST_F(StoreTest, RefusesDatabaseFromNewerVersionUnchanged) {
  { auto store = RunStore::open(db()); }
  { RawDb(db()).exec("PRAGMA user_version = 7"); }
  const std::string before = read_bytes(db());
  const std::string msg = error_of([&] { RunStore::open(db()); });
  EXPECT_NE(msg.find("[store] " + db().string()), std::string::npos) << msg;
  EXPECT_NE(msg.find("newer TrainBench (schema version 7; this build reads versions up to " +
                     std::to_string(kSchemaVersion)),
            std::string::npos)
      << msg;
  EXPECT_THROW(RunStore::open(db()), DatabaseRejectedError);
  EXPECT_EQ(read_bytes(db()), before);
}

TEST_F(StoreTest, RefusesForeignSqliteDatabasesUnchanged) {
  {
    RawDb raw(db());
    raw.exec("CREATE TABLE songs (title TEXT); INSERT INTO songs VALUES ('a');");
  }
  const std::string before = read_bytes(db());
  std::string msg = error_of([&] { RunStore::open(db()); });
  EXPECT_NE(msg.find("another application (tables songs; no TrainBench application_id)"),
            std::string::npos)
      << msg;
  EXPECT_NE(msg.find(db().string()), std::string::npos) << msg;
  EXPECT_EQ(read_bytes(db()), before);

  const fs::path other = dir_ / "other.sqlite";
  { RawDb(other).exec("PRAGMA application_id = 1234; CREATE TABLE runs (id);"); }
  const std::string other_before = read_bytes(other);
  msg = error_of([&] { RunStore::open(other); });
  EXPECT_NE(msg.find("another application's SQLite database (application_id 0x000004d2"),
            std::string::npos)
      << msg;
  EXPECT_EQ(read_bytes(other), other_before);
}

TEST_F(StoreTest, RefusesGarbageAndCorruptedFilesUnchanged) {
  std::string garbage(10000, '\0');
  std::mt19937 gen(5);
  for (char& c : garbage)
    c = static_cast<char>(gen());
  write_bytes(db(), garbage);
  std::string msg = error_of([&] { RunStore::open(db()); });
  EXPECT_NE(msg.find("not an SQLite file"), std::string::npos) << msg;
  EXPECT_NE(msg.find("left unchanged"), std::string::npos) << msg;
  EXPECT_EQ(read_bytes(db()), garbage);
  EXPECT_FALSE(fs::exists(dir_ / "runs.sqlite-wal"));

  // A real store whose pages were damaged afterwards.
  const fs::path damaged = dir_ / "damaged.sqlite";
  {
    auto store = RunStore::open(damaged);
    RunWriter w(damaged, store.create_run({.name = "r"}));
    for (int s = 0; s < 20000; ++s)
      w.log_metrics(s, {{"loss", 1.0 / (s + 1)}});
    w.set_status(RunStatus::kFinished);
    w.close();
  }
  std::string bytes = read_bytes(damaged);
  ASSERT_GT(bytes.size(), 6u * 4096);
  for (std::size_t i = 3 * 4096; i < 5 * 4096; ++i)
    bytes[i] = static_cast<char>(0xA5);
  write_bytes(damaged, bytes);
  msg = error_of([&] { RunStore::open(damaged); });
  EXPECT_NE(msg.find("[store] " + damaged.string()), std::string::npos) << msg;
  EXPECT_TRUE(msg.find("corrupted") != std::string::npos) << msg;
  EXPECT_EQ(read_bytes(damaged), bytes);

  // The same store cut short (a copy that stopped half-way): refused, its name said once, and
  // nothing left beside it (SQLite's -wal and -shm from reading it stayed behind).
  bytes.resize(5 * 4096 + 123);
  write_bytes(damaged, bytes);
  msg = error_of([&] { RunStore::open(damaged); });
  EXPECT_NE(msg.find("corrupted"), std::string::npos) << msg;
  EXPECT_EQ(msg.find("[store]", 1), std::string::npos) << msg;
  EXPECT_EQ(read_bytes(damaged), bytes);
  EXPECT_FALSE(fs::exists(damaged.string() + "-wal"));
  EXPECT_FALSE(fs::exists(damaged.string() + "-shm"));
  // Side files that were there before the open stay.
  write_bytes(damaged.string() + "-shm", "");
  msg = error_of([&] { RunStore::open(damaged); });
  EXPECT_TRUE(fs::exists(damaged.string() + "-shm"));
}

// ---------------------------------------------------------------------------------------------
// Writer thread and live reads

TEST_F(StoreTest, WriterCommitsHundredThousandRowsInOrder) {
  auto store = RunStore::open(db());
  const auto run = store.create_run({.name = "big"});
  RunWriter w(db(), run);
  const std::vector<std::string> keys = {"a", "b", "c", "d", "e", "f", "g", "h", "i", "j"};
  for (std::int64_t s = 0; s < 10000; ++s) {
    std::vector<MetricValue> v;
    for (std::size_t k = 0; k < keys.size(); ++k) {
      v.push_back({keys[k], static_cast<double>(s) + 0.1 * static_cast<double>(k)});
    }
    w.log_metrics(s, v);
  }
  w.flush();  // everything logged so far is committed and visible to another connection
  EXPECT_EQ(w.stats().rows_committed, 100000u);
  EXPECT_EQ(store.latest_step(run), 9999);
  for (std::size_t k = 0; k < keys.size(); ++k) {
    const auto pts = store.series(run, keys[k]);
    ASSERT_EQ(pts.size(), 10000u);
    for (std::int64_t s = 0; s < 10000; ++s) {
      ASSERT_EQ(pts[s].step, s);
      ASSERT_EQ(pts[s].value, static_cast<double>(s) + 0.1 * static_cast<double>(k));
    }
  }
  EXPECT_EQ(store.series(run, "c", 9990).size(), 10u);
  EXPECT_EQ(store.get_run(run).summary.status, RunStatus::kRunning);
  w.set_status(RunStatus::kFinished);
  w.close();
  EXPECT_EQ(store.get_run(run).summary.status, RunStatus::kFinished);
  EXPECT_THROW(w.log_metrics(1, {{"a", 1.0}}), tb::ValueError);
}

TEST_F(StoreTest, ReaderSeesRunningRunLiveWithinCommitInterval) {
  {
    auto creator = RunStore::open(db());
    creator.create_run({.name = "live"});
  }
  RunWriter w(db(), 1);  // default commit interval: 200 ms
  auto reader = RunStore::open(db());
  w.log_metrics(0, {{"loss", 2.5}, {"lr", 0.1}});
  w.log_event(EventLevel::kWarning, "hello");
  const auto t0 = std::chrono::steady_clock::now();
  while (reader.series(1, "loss").empty() &&
         std::chrono::steady_clock::now() - t0 < std::chrono::seconds(5)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  const auto waited = std::chrono::steady_clock::now() - t0;
  ASSERT_EQ(reader.series(1, "loss").size(), 1u);  // no flush: the timer committed it
  EXPECT_LT(waited, std::chrono::milliseconds(1000));
  EXPECT_EQ(reader.get_run(1).summary.status, RunStatus::kRunning);
  EXPECT_EQ(reader.events(1).back().text, "hello");
  // Poll for new points only.
  w.log_metrics(1, {{"loss", 2.0}});
  w.log_metrics(2, {{"loss", 1.5}});
  w.flush();
  const auto fresh = reader.series(1, "loss", 1);
  ASSERT_EQ(fresh.size(), 2u);
  EXPECT_EQ(fresh[1].value, 1.5);
  const auto progress = reader.progress();
  ASSERT_EQ(progress.size(), 1u);
  EXPECT_EQ(progress[0].last_step, 2);
  w.set_status(RunStatus::kCancelled, "stopped by the user");
  w.close();
  const auto d = reader.get_run(1);
  EXPECT_EQ(d.summary.status, RunStatus::kCancelled);
  EXPECT_EQ(d.summary.message, "stopped by the user");
  EXPECT_TRUE(d.summary.ended_at.has_value());
}

TEST_F(StoreTest, QueueCapBlocksProducerInsteadOfDropping) {
  auto store = RunStore::open(db());
  const auto run = store.create_run({.name = "cap"});
  WriterOptions o;
  o.max_queued_rows = 64;
  o.commit_interval = std::chrono::milliseconds(1000);
  RunWriter w(db(), run, o);
  for (int s = 0; s < 5000; ++s)
    w.log_metrics(s, {{"x", 1.0}, {"y", 2.0}});
  w.set_status(RunStatus::kFinished);
  w.close();
  EXPECT_GT(w.stats().producer_waits, 0u);
  EXPECT_EQ(store.series(run, "y").size(), 5000u);
}

// ---------------------------------------------------------------------------------------------
// Status, crash detection

TEST_F(StoreTest, StatusTransitions) {
  auto store = RunStore::open(db());
  const auto a = store.create_run({.name = "a"});
  std::string msg = error_of([&] { store.set_status(a, RunStatus::kFinished); });
  EXPECT_NE(msg.find("run 1 cannot go from 'queued' to 'finished'"), std::string::npos) << msg;
  EXPECT_EQ(to_string(RunStatus::kDiverged), "diverged");
  for (auto s : {RunStatus::kQueued, RunStatus::kRunning, RunStatus::kFinished, RunStatus::kFailed,
                 RunStatus::kDiverged, RunStatus::kCancelled, RunStatus::kCrashed}) {
    EXPECT_EQ(run_status_from_string(to_string(s)), s);
  }
  EXPECT_THROW(run_status_from_string("done"), tb::ValueError);

  {
    RunWriter w(db(), a);
    EXPECT_THROW(RunWriter(db(), a), tb::ValueError);  // one writer per run
    w.set_status(RunStatus::kDiverged, "loss was non-finite for 5 steps");
    EXPECT_THROW(w.set_status(RunStatus::kFinished), tb::ValueError);
  }
  EXPECT_EQ(store.get_run(a).summary.status, RunStatus::kDiverged);
  {
    RunWriter resumed(db(), a);  // resume an ended run
    EXPECT_EQ(store.get_run(a).summary.status, RunStatus::kRunning);
  }  // closed without a final status
  const auto d = store.get_run(a);
  EXPECT_EQ(d.summary.status, RunStatus::kFailed);
  EXPECT_NE(d.summary.message.find("closed while the run was still running"), std::string::npos);
  EXPECT_THROW(store.delete_run(999), tb::ValueError);
  store.delete_run(a);
  EXPECT_FALSE(store.has_run(a));

  const auto b = store.create_run({.name = "b"});
  // A name is one line of text, when created and when renamed.
  for (const std::string bad : {"two\nlines", "tab\there"}) {
    const std::string e = error_of([&] { store.create_run({.name = bad}); });
    EXPECT_NE(e.find("a run name is one line of text; "), std::string::npos) << e;
    EXPECT_NE(error_of([&] { store.rename_run(b, bad); }).find("holds the control character 0x"),
              std::string::npos);
  }
  EXPECT_NE(error_of([&] { store.rename_run(b, "x\ny"); })
                .find("'x...' holds the control "
                      "character 0x0a at byte 1"),
            std::string::npos);
  store.rename_run(b, "b2");
  store.set_tags(b, {"x"});
  store.set_status(b, RunStatus::kCancelled);
  EXPECT_EQ(store.list_runs().at(0).name, "b2");
  EXPECT_EQ(store.list_runs().at(0).tags, std::vector<std::string>{"x"});
}

pid_t dead_pid() {
  const pid_t child = fork();
  if (child == 0) _exit(0);
  waitpid(child, nullptr, 0);
  return child;
}

TEST_F(StoreTest, RunOfVanishedProcessBecomesCrashedOnOpen) {
  const ProcessIdentity me = current_process();
  {
    auto store = RunStore::open(db());
    for (int i = 0; i < 4; ++i)
      store.create_run({.name = "r" + std::to_string(i)});
    RunWriter w(db(), 1);
    w.log_metrics(0, {{"loss", 1.0}});
    w.log_metrics(1, {{"loss", 0.5}});
    w.flush();
  }
  // Fake the writers: 1 a dead pid, 2 our pid with another start time (pid reused),
  // 3 this very process, 4 a process on another host.
  {
    RawDb raw(db());
    auto set = [&](int id, std::int64_t pid, const std::string& host, std::int64_t start) {
      raw.exec("UPDATE runs SET status = 'running', writer_pid = " + std::to_string(pid) +
               ", writer_host = '" + host + "', writer_start_time = " + std::to_string(start) +
               " WHERE id = " + std::to_string(id));
    };
    set(1, dead_pid(), me.host, 12345);
    set(2, me.pid, me.host, me.start_time + 1);
    set(3, me.pid, me.host, me.start_time);
    set(4, 1, "some-other-host", 1);
    // Run 1's writer was last heard from an hour ago.
    raw.exec("UPDATE runs SET heartbeat_at = " + std::to_string(unix_now() - 3600) +
             " WHERE id = 1");
  }
  const double heard = std::stod(RawDb(db()).text("SELECT heartbeat_at FROM runs WHERE id = 1"));
  auto store = RunStore::open(db());
  EXPECT_EQ(store.get_run(1).summary.status, RunStatus::kCrashed);
  EXPECT_EQ(store.get_run(2).summary.status, RunStatus::kCrashed);
  EXPECT_EQ(store.get_run(3).summary.status, RunStatus::kRunning);
  EXPECT_EQ(store.get_run(4).summary.status, RunStatus::kRunning);
  EXPECT_EQ(store.series(1, "loss").size(), 2u);  // committed steps kept
  const auto ev = store.events(1);
  ASSERT_FALSE(ev.empty());
  EXPECT_EQ(ev.back().level, EventLevel::kError);
  EXPECT_NE(ev.back().text.find("running -> crashed: the writing process (pid"), std::string::npos)
      << ev.back().text;
  EXPECT_NE(ev.back().text.find("last step 1"), std::string::npos) << ev.back().text;
  EXPECT_NE(store.get_run(1).summary.message.find("ended without closing"), std::string::npos);
  // It ended when last heard from, not when found: its duration is not inflated by the hour.
  ASSERT_TRUE(store.get_run(1).summary.ended_at.has_value());
  EXPECT_NEAR(*store.get_run(1).summary.ended_at, heard, 1e-3);
  EXPECT_NEAR(ev.back().time, heard, 1e-3);  // and so is its status event, which durations read
}

// A writer of this process ended without closing its run (its last writes failed: a full disk).
// The process lives on (the workbench), so recovery never marks the run, and every resume
// refuses a running run; close_own_run_left_running marks it failed, once, and only a run this
// process writes.
TEST_F(StoreTest, ARunLeftRunningByThisProcessIsClosedOnRequest) {
  const ProcessIdentity me = current_process();
  {
    auto store = RunStore::open(db());
    store.create_run({.name = "mine"});
    store.create_run({.name = "another's"});
  }
  const auto parent = static_cast<std::int64_t>(getppid());
  {
    RawDb raw(db());
    auto set = [&](int id, std::int64_t pid, std::int64_t start) {
      raw.exec(
          "UPDATE runs SET status = 'running', started_at = " + std::to_string(unix_now() - 7200) +
          ", heartbeat_at = " + std::to_string(unix_now() - 3600) +
          ", writer_pid = " + std::to_string(pid) + ", writer_host = '" + me.host +
          "', writer_start_time = " + std::to_string(start) + " WHERE id = " + std::to_string(id));
    };
    set(1, me.pid, me.start_time);
    set(2, parent, process_start_time(parent).value_or(0));  // alive, not this process
  }
  auto store = RunStore::open(db());
  ASSERT_EQ(store.get_run(1).summary.status, RunStatus::kRunning);  // its writer's process lives
  ASSERT_EQ(store.get_run(2).summary.status, RunStatus::kRunning);
  EXPECT_TRUE(store.close_own_run_left_running(1, "the run store failed: the disk is full"));
  const RunSummary closed = store.get_run(1).summary;
  EXPECT_EQ(closed.status, RunStatus::kFailed);
  EXPECT_EQ(closed.message, "the run store failed: the disk is full");
  ASSERT_TRUE(closed.ended_at.has_value());
  EXPECT_NEAR(*closed.ended_at, unix_now() - 3600, 5.0);  // when it was last heard from
  EXPECT_FALSE(store.close_own_run_left_running(1, "again"));
  EXPECT_FALSE(store.close_own_run_left_running(2, "not this process's"));
  EXPECT_EQ(store.get_run(2).summary.status, RunStatus::kRunning);
  // Queued by this process, whose writer's first commit failed: closed as well.
  const std::int64_t queued = store.create_run({.name = "never started"});
  EXPECT_TRUE(store.close_own_run_left_running(queued, "the run store failed: no room"));
  EXPECT_EQ(store.get_run(queued).summary.status, RunStatus::kFailed);
}

// A run left running by a writer on another host (a container restarted under a new host
// name) cannot be checked by pid: it is crashed once its writer has been silent for
// kWriterSilenceLimit, and left alone while its heartbeat is fresh. A writer stamps its heartbeat
// even when nothing is logged.
TEST_F(StoreTest, AnotherHostsSilentWriterIsTakenAsCrashed) {
  {
    auto store = RunStore::open(db());
    store.create_run({.name = "silent"});
    store.create_run({.name = "alive"});
  }
  {
    WriterOptions o;
    o.heartbeat_interval = std::chrono::milliseconds(20);
    RunWriter w(db(), 2, o);
    const double first = std::stod(RawDb(db()).text("SELECT heartbeat_at FROM runs WHERE id = 2"));
    std::this_thread::sleep_for(std::chrono::milliseconds(200));  // nothing logged
    EXPECT_GT(std::stod(RawDb(db()).text("SELECT heartbeat_at FROM runs WHERE id = 2")), first);
    // A second writer is refused, told whose the run is.
    const std::string busy = error_of([&] { RunWriter again(db(), 2); });
    EXPECT_NE(busy.find("run 2 is already running (its writer is pid " +
                        std::to_string(current_process().pid) + " on "),
              std::string::npos)
        << busy;
    EXPECT_NE(busy.find("s ago); a writer on another host is taken as crashed once silent for "
                        "120 s"),
              std::string::npos)
        << busy;
    w.set_status(RunStatus::kCancelled);
    w.close();
  }
  const double now = unix_now();
  {
    RawDb raw(db());
    auto set = [&](int id, double heard) {
      raw.exec(
          "UPDATE runs SET status = 'running', writer_pid = 1, writer_host = 'old-container', "
          "writer_start_time = 1, heartbeat_at = " +
          std::to_string(heard) + " WHERE id = " + std::to_string(id));
    };
    set(1, now - 300);
    set(2, now - 10);
  }
  auto store = RunStore::open(db());
  EXPECT_EQ(store.get_run(1).summary.status, RunStatus::kCrashed);
  EXPECT_NE(store.get_run(1).summary.message.find(
                "its writer (pid 1 on old-container, another host) has not been heard from for "),
            std::string::npos)
      << store.get_run(1).summary.message;
  EXPECT_EQ(store.get_run(2).summary.status, RunStatus::kRunning);
}

// A process killed while it sets its new run up (loading data, building the model) never opens a
// writer: the run, queued by that process, is found crashed rather than left queued for ever.
TEST_F(StoreTest, QueuedRunOfVanishedCreatorBecomesCrashedOnOpen) {
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    try {
      RunStore::open(db()).create_run({.name = "set-up killed"});
    } catch (...) {
      _exit(3);
    }
    _exit(0);
  }
  int status = 0;
  waitpid(child, &status, 0);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  auto store = RunStore::open(db());
  const auto mine = store.create_run({.name = "mine"});  // this process is alive: stays queued
  const auto again = RunStore::open(db());
  EXPECT_EQ(again.get_run(1).summary.status, RunStatus::kCrashed);
  EXPECT_EQ(again.get_run(1).summary.message,
            "the process that created it (pid " + std::to_string(child) + " on " +
                current_process().host +
                ") ended before the run's start was stored (killed while setting it up, or its "
                "first writes failed: a full disk); nothing of it was stored");
  EXPECT_EQ(again.get_run(mine).summary.status, RunStatus::kQueued);
}

// A process killed while it creates a store (its first transaction, in rollback mode, before
// the store turns to WAL) leaves a hot journal, and a file that may not start with SQLite's
// header yet. Before, every command then failed ("not an SQLite file", or SQLite code 776 read
// as "read-only"); now the journal is rolled back, as SQLite does, and the store is made.
TEST_F(StoreTest, AStoreWhoseCreationWasKilledIsRolledBackAndCreated) {
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    sqlite3* raw = nullptr;
    if (sqlite3_open(db().string().c_str(), &raw) != SQLITE_OK) _exit(3);
    // A cache of one page spills the transaction's pages to the file before its commit.
    if (sqlite3_exec(
            raw,
            "PRAGMA cache_size = 1; BEGIN; CREATE TABLE runs (x BLOB); "
            "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 200) "
            "INSERT INTO runs SELECT randomblob(4000) FROM n;",
            nullptr, nullptr, nullptr) != SQLITE_OK)
      _exit(4);
    _exit(0);  // killed mid-transaction: no rollback, no commit
  }
  int status = 0;
  waitpid(child, &status, 0);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  ASSERT_TRUE(fs::exists(db().string() + "-journal"));
  ASSERT_GT(fs::file_size(db()), 0u);
  auto store = RunStore::open(db());
  EXPECT_EQ(store.create_run({.name = "after"}), 1);
  EXPECT_FALSE(fs::exists(db().string() + "-journal"));
}

TEST_F(StoreTest, KillDashNineKeepsConsistentPrefixAndMarksCrashed) {
  {
    auto store = RunStore::open(db());
    store.create_run({.name = "victim"});
  }
  std::random_device rd;
  std::mt19937 gen(rd());
  const std::int64_t threshold = std::uniform_int_distribution<std::int64_t>(200, 3000)(gen);
  const int extra_ms = std::uniform_int_distribution<int>(0, 300)(gen);

  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    try {
      WriterOptions o;
      o.commit_interval = std::chrono::milliseconds(20);
      RunWriter w(db(), 1, o);
      for (std::int64_t s = 0;; ++s) {
        w.log_metrics(s, {{"loss", 1.0 / static_cast<double>(s + 1)}, {"lr", 0.01}, {"gn", 2.0}});
        if (s % 16 == 0) std::this_thread::sleep_for(std::chrono::microseconds(200));
      }
    } catch (...) {
      _exit(3);
    }
  }
  {
    StoreOptions ro;
    ro.recover_crashed = false;
    ro.check = IntegrityCheck::kNone;
    auto watcher = RunStore::open(db(), ro);
    const auto t0 = std::chrono::steady_clock::now();
    while (watcher.latest_step(1).value_or(-1) < threshold &&
           std::chrono::steady_clock::now() - t0 < std::chrono::seconds(30)) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    ASSERT_GE(watcher.latest_step(1).value_or(-1), threshold) << "the child did not write";
    EXPECT_EQ(watcher.get_run(1).summary.status, RunStatus::kRunning);
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(extra_ms));
  ASSERT_EQ(kill(child, SIGKILL), 0);
  int wstatus = 0;
  ASSERT_EQ(waitpid(child, &wstatus, 0), child);
  ASSERT_TRUE(WIFSIGNALED(wstatus));

  std::int64_t k = -1;
  {
    RawDb raw(db());
    EXPECT_EQ(raw.text("PRAGMA integrity_check"), "ok");
    EXPECT_EQ(raw.text("SELECT status FROM runs WHERE id = 1"), "running");
    // Per key: steps 0..k without gaps, and the same k for every key (calls are never split).
    k = raw.integer("SELECT MAX(last_step) FROM metric_chunks WHERE run_id = 1");
    EXPECT_GE(k, threshold);
    EXPECT_EQ(raw.integer("SELECT COUNT(DISTINCT key_id) FROM metric_chunks"), 3);
    EXPECT_EQ(raw.integer("SELECT COUNT(*) FROM (SELECT key_id FROM metric_chunks GROUP BY "
                          "key_id HAVING SUM(count) = " +
                          std::to_string(k + 1) + " AND MIN(first_step) = 0 AND MAX(last_step) = " +
                          std::to_string(k) + ")"),
              3);
  }
  auto store = RunStore::open(db());
  const auto d = store.get_run(1);
  EXPECT_EQ(d.summary.status, RunStatus::kCrashed);
  EXPECT_EQ(d.summary.last_step, k);
  EXPECT_EQ(store.series(1, "loss").size(), static_cast<std::size_t>(k + 1));
  EXPECT_NE(store.events(1).back().text.find("crashed"), std::string::npos);
}

// Checks the store after a fault: integrity, and for every key the steps 0..k without gaps (k the
// same for every key: a log call is never split). Returns k (-1 when nothing was committed).
std::int64_t expect_consistent_prefix(const fs::path& db, int keys) {
  RawDb raw(db);
  EXPECT_EQ(raw.text("PRAGMA integrity_check"), "ok");
  const std::string max = raw.text("SELECT MAX(last_step) FROM metric_chunks WHERE run_id = 1");
  if (max.empty()) return -1;
  const std::int64_t k = std::stoll(max);
  EXPECT_EQ(raw.integer("SELECT COUNT(*) FROM (SELECT key_id FROM metric_chunks GROUP BY key_id "
                        "HAVING SUM(count) = " +
                        std::to_string(k + 1) +
                        " AND MIN(first_step) = 0 AND MAX(last_step) = " + std::to_string(k) + ")"),
            keys);
  return k;
}

// Runs `body` in a child process and returns what it threw ("(no error)" if nothing). `body`
// calls limit_file_size() where its writes start to count: a full disk, as RLIMIT_FSIZE makes
// every write past `bytes` fail (SIGXFSZ ignored, so with EFBIG rather than a kill). The soft
// limit is lifted again to write the message back.
void limit_file_size(rlim_t bytes) {
  signal(SIGXFSZ, SIG_IGN);
  const rlimit lim{bytes, RLIM_INFINITY};
  setrlimit(RLIMIT_FSIZE, &lim);
}

std::string error_in_child(const fs::path& msg_file, const std::function<void()>& body) {
  const pid_t child = fork();
  if (child < 0) return "(fork failed)";
  if (child == 0) {
    std::string message = "(no error)";
    try {
      body();
    } catch (const std::exception& e) {
      message = e.what();
    }
    limit_file_size(RLIM_INFINITY);
    std::ofstream(msg_file) << message;
    _exit(0);
  }
  int wstatus = 0;
  if (waitpid(child, &wstatus, 0) != child || !WIFEXITED(wstatus)) return "(the child died)";
  return read_bytes(msg_file);
}

// Disk full (the file-size limit of the process, RLIMIT_FSIZE, makes every write past 1 MiB
// fail as a full disk would): the writer reports a clear error to the producer, and what was
// committed before stays, consistent; the run reads as crashed once its process is gone.
TEST_F(StoreTest, DiskFullIsReportedAndCommittedStepsSurvive) {
  {
    auto store = RunStore::open(db());
    store.create_run({.name = "disk-full"});
  }
  const std::string message = error_in_child(dir_ / "message.txt", [&] {
    limit_file_size(1 << 20);
    WriterOptions o;
    o.commit_interval = std::chrono::milliseconds(10);
    RunWriter w(db(), 1, o);
    for (std::int64_t s = 0; s < 10'000'000; ++s) {
      w.log_metrics(s, {{"loss", 1.0 / static_cast<double>(s + 1)}, {"lr", 0.01}});
      if (s % 50 == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  });
  EXPECT_NE(message.find("full"), std::string::npos) << message;
  EXPECT_NE(message.find("run 1"), std::string::npos) << message;
  const std::int64_t k = expect_consistent_prefix(db(), 2);
  EXPECT_GT(k, 100) << "some steps were committed before the disk filled";
  auto store = RunStore::open(db());
  EXPECT_EQ(store.series(1, "loss").size(), static_cast<std::size_t>(k + 1));
}

// A full disk when the store is opened (SQLite cannot make its -shm file; here every write is
// past the file-size limit): said as such, not "corrupted? ... move this file away", which could
// lose a good store; the store opens again once there is room.
TEST_F(StoreTest, AStoreOnAFullDiskIsNotCalledCorrupted) {
  {
    auto store = RunStore::open(db());
    store.create_run({.name = "kept"});
  }
  const std::string message = error_in_child(dir_ / "message.txt", [&] {
    limit_file_size(0);
    (void)RunStore::open(db()).list_runs();
  });
  EXPECT_NE(message.find("runs.sqlite: cannot be opened: "), std::string::npos) << message;
  EXPECT_NE(message.find("free space on that disk and try again. The file was left unchanged"),
            std::string::npos)
      << message;
  EXPECT_EQ(message.find("corrupted"), std::string::npos) << message;
  EXPECT_EQ(RunStore::open(db()).list_runs().size(), 1u);
}

// Another process holds the database's write lock: a short hold is waited out (nothing lost), a
// hold longer than the busy timeout ends the writer with an error naming the lock, and the steps
// committed before stay.
TEST_F(StoreTest, AWriteLockHeldByAnotherProcessIsWaitedOutThenReported) {
  {
    auto store = RunStore::open(db());
    store.create_run({.name = "locked"});
  }
  WriterOptions o;
  o.commit_interval = std::chrono::milliseconds(10);
  o.busy_timeout_ms = 300;
  RunWriter w(db(), 1, o);
  std::int64_t step = 0;
  auto log_some = [&](int n) {
    for (int i = 0; i < n; ++i, ++step)
      w.log_metrics(step, {{"loss", 1.0}, {"lr", 0.5}});
  };
  log_some(100);
  w.flush();
  {
    RawDb other(db());
    other.exec("BEGIN EXCLUSIVE");
    log_some(100);
    std::this_thread::sleep_for(std::chrono::milliseconds(100));  // < busy timeout
    other.exec("COMMIT");
  }
  w.flush();
  EXPECT_EQ(expect_consistent_prefix(db(), 2), 199);
  std::string message;
  {
    RawDb other(db());
    other.exec("BEGIN EXCLUSIVE");
    const auto t0 = std::chrono::steady_clock::now();
    try {
      while (std::chrono::steady_clock::now() - t0 < std::chrono::seconds(10)) {
        log_some(10);
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
      }
    } catch (const StoreError& e) {
      message = e.what();
    }
    other.exec("COMMIT");
  }
  EXPECT_NE(message.find("locked"), std::string::npos) << message;
  EXPECT_GE(expect_consistent_prefix(db(), 2), 199);
}

// A database directory the process may not write to: opening for writing fails with a message
// naming the file, and the existing data is untouched.
TEST_F(StoreTest, ReadOnlyDirectoryIsReportedAndNothingIsLost) {
  if (geteuid() == 0) GTEST_SKIP() << "running as root: file permissions are not enforced";
  {
    auto store = RunStore::open(db());
    store.create_run({.name = "kept"});
    RunWriter w(db(), 1);
    w.log_metrics(0, {{"loss", 2.0}});
    w.close();
  }
  fs::permissions(dir_, fs::perms::owner_read | fs::perms::owner_exec);
  fs::permissions(db(), fs::perms::owner_read);
  std::string message;
  try {
    RunStore::open(db()).create_run({.name = "new"});
  } catch (const std::exception& e) {
    message = e.what();
  }
  fs::permissions(dir_, fs::perms::owner_all);
  fs::permissions(db(), fs::perms::owner_read | fs::perms::owner_write);
  EXPECT_NE(message.find("runs.sqlite"), std::string::npos) << message;
  auto store = RunStore::open(db());
  EXPECT_EQ(store.series(1, "loss").size(), 1u);
}

// --db naming a folder: said so, with the file name it could have been.
TEST_F(StoreTest, AFolderGivenAsTheDatabaseIsNamedAsAFolder) {
  std::string message;
  try {
    (void)RunStore::open(dir_);
  } catch (const std::exception& e) {
    message = e.what();
  }
  EXPECT_EQ(message, "[store] " + dir_.string() +
                         " is a folder; --db names the database file in it (for example " +
                         (dir_ / "runs.sqlite").string() + ")");
}

// A new store in a folder this user may not write: the folder is named, not SQLite's errno of a
// probe ("No such file or directory").
TEST_F(StoreTest, ANewStoreInAFolderThatIsNotWritableNamesTheFolder) {
  if (geteuid() == 0) GTEST_SKIP() << "running as root: file permissions are not enforced";
  const fs::path locked = dir_ / "locked";
  fs::create_directories(locked);
  fs::permissions(locked, fs::perms::owner_read | fs::perms::owner_exec);
  std::string message;
  try {
    (void)RunStore::open(locked / "new.sqlite");
  } catch (const std::exception& e) {
    message = e.what();
  }
  fs::permissions(locked, fs::perms::owner_all);
  EXPECT_EQ(message.rfind("[store] " + (locked / "new.sqlite").string() +
                              ": cannot create the run database: the folder " + locked.string() +
                              " is not writable by this user (Permission denied)",
                          0),
            0u)
      << message;
}

// ---------------------------------------------------------------------------------------------
// Read API and export

TEST_F(StoreTest, DetailsAndExportCsvJson) {
  auto store = RunStore::open(db());
  const auto run = store.create_run(
      {.name = "exp, \"quoted\"", .config = "{\"lr\": 0.1}", .config_format = "json", .seed = 7});
  {
    RunWriter w(db(), run);
    w.log_metrics(0, {{"loss", 2.0}, {"acc", 0.1}});
    w.log_metrics(1, {{"loss", 0.1 + 0.2}});
    w.log_metrics(2, {{"loss", std::nan("")}, {"acc", 0.9}});
    w.log_metrics(3, {{"loss", 1.0}, {"odd,key", INFINITY}});
    w.add_checkpoint(2, "ckpt/step-2", "{\"bytes\": 10}");
    w.log_event(EventLevel::kInfo, "eval done");
    w.log_event(EventLevel::kInfo, "sample: \x98 not UTF-8");  // a byte model's raw draw
    w.set_status(RunStatus::kFinished);
  }
  const RunDetails d = store.get_run(run);
  ASSERT_EQ(d.metrics.size(), 3u);
  const MetricSummary& loss = d.metrics[1];
  EXPECT_EQ(loss.key, "loss");
  EXPECT_EQ(loss.count, 4);
  EXPECT_EQ(loss.last_step, 3);
  EXPECT_EQ(loss.last_value, 1.0);
  EXPECT_EQ(loss.min_value, 0.1 + 0.2);
  EXPECT_EQ(loss.min_step, 1);
  EXPECT_EQ(loss.max_value, 2.0);
  EXPECT_EQ(loss.max_step, 0);
  EXPECT_TRUE(std::isnan(store.series(run, "loss")[2].value));
  ASSERT_EQ(store.checkpoints(run).size(), 1u);
  EXPECT_EQ(store.checkpoints(run)[0].path, "ckpt/step-2");

  const std::string csv = store.export_csv(run);
  std::istringstream lines(csv);
  std::vector<std::string> rows;
  for (std::string line; std::getline(lines, line);) {
    // Drop the time column (wall clock) for the comparison.
    const auto a = line.find(',');
    const auto b = line.find(',', a + 1);
    rows.push_back(line.substr(0, a) + line.substr(b));
  }
  const std::vector<std::string> expected = {"step,acc,loss,\"odd,key\"", "0,0.1,2,",
                                             "1,,0.30000000000000004,", "2,0.9,nan,", "3,,1,inf"};
  EXPECT_EQ(rows, expected) << csv;

  const auto j = nlohmann::json::parse(store.export_json(run));
  EXPECT_EQ(j["format"], "trainbench-run");
  EXPECT_EQ(j["run"]["name"], "exp, \"quoted\"");
  EXPECT_EQ(j["run"]["status"], "finished");
  EXPECT_EQ(j["run"]["seed"], 7);
  EXPECT_EQ(j["run"]["paused_seconds"], 0.0);
  EXPECT_EQ(j["run"]["duration_seconds"].get<double>(),
            j["run"]["ended_at"].get<double>() - j["run"]["started_at"].get<double>());
  EXPECT_EQ(j["run"]["config"], "{\"lr\": 0.1}");
  EXPECT_EQ(j["metrics"]["loss"]["step"], nlohmann::json({0, 1, 2, 3}));
  EXPECT_EQ(j["metrics"]["loss"]["value"][1], 0.1 + 0.2);
  EXPECT_TRUE(j["metrics"]["loss"]["value"][2].is_null());
  EXPECT_EQ(j["checkpoints"][0]["metadata"]["bytes"], 10);
  bool saw_event = false;
  bool saw_replaced = false;
  for (const auto& e : j["events"]) {
    saw_event = saw_event || e["text"] == "eval done";
    saw_replaced = saw_replaced || e["text"] == "sample: \xEF\xBF\xBD not UTF-8";  // U+FFFD
  }
  EXPECT_TRUE(saw_event);
  EXPECT_TRUE(saw_replaced);  // bytes that are not UTF-8 do not fail the export
  EXPECT_EQ(j["run"]["metrics_summary"][1]["min_step"], 1);  // loss
  // A series of NaN only has no min or max, nor their steps (step 0 would be a claim).
  const auto nans = store.create_run({.name = "nans"});
  {
    RunWriter w(db(), nans);
    w.log_metrics(4, {{"loss", std::nan("")}});
    w.log_metrics(5, {{"loss", std::nan("")}});
    w.set_status(RunStatus::kDiverged);
  }
  const auto n = nlohmann::json::parse(store.export_json(nans))["run"]["metrics_summary"][0];
  EXPECT_EQ(n["count"], 2);
  EXPECT_EQ(n["last_step"], 5);
  for (const char* key : {"min_value", "min_step", "max_value", "max_step", "last_value"})
    EXPECT_TRUE(n[key].is_null()) << key << ": " << n.dump();
  EXPECT_THROW(store.export_csv(42), tb::ValueError);
}

// The TFRecord framing of TensorBoard event files: CRC-32C's check value, the mask, and the
// record layout (length, masked CRC of the length, data, masked CRC of the data).
TEST(TensorBoard, Crc32cAndRecordFraming) {
  EXPECT_EQ(tb::store::crc32c("123456789"), 0xE3069283u);  // the CRC catalogue's check value
  EXPECT_EQ(tb::store::crc32c(""), 0u);
  const std::uint32_t c = tb::store::crc32c("abc");
  EXPECT_EQ(tb::store::masked_crc32c("abc"), ((c >> 15) | (c << 17)) + 0xa282ead8u);
  const std::string rec = tb::store::tfrecord("hello");
  ASSERT_EQ(rec.size(), 8u + 4u + 5u + 4u);
  EXPECT_EQ(static_cast<unsigned char>(rec[0]), 5u);
  for (int i = 1; i < 8; ++i)
    EXPECT_EQ(rec[static_cast<std::size_t>(i)], 0);
  EXPECT_EQ(rec.substr(12, 5), "hello");
  auto u32 = [&](std::size_t at) {
    std::uint32_t v = 0;
    for (int i = 3; i >= 0; --i)
      v = (v << 8) | static_cast<unsigned char>(rec[at + static_cast<std::size_t>(i)]);
    return v;
  };
  EXPECT_EQ(u32(8), tb::store::masked_crc32c(rec.substr(0, 8)));
  EXPECT_EQ(u32(17), tb::store::masked_crc32c("hello"));
}

TEST_F(StoreTest, TensorBoardExportWritesOneFileAndRefusesUnknownRuns) {
  auto store = RunStore::open(db());
  const auto run = store.create_run({.name = "tb", .config = "[run]\nsteps = 2\n"});
  {
    RunWriter w(db(), run);
    w.log_metrics(1, {{"loss", 2.0}, {"lr.adamw.0", 0.1}});
    w.log_metrics(2, {{"loss", 1.0}});
    w.set_status(RunStatus::kFinished);
  }
  const auto dir = db().parent_path() / "tb";
  const auto file = tb::store::write_tensorboard(store, run, dir);
  EXPECT_EQ(file.parent_path(), dir);
  EXPECT_EQ(file.filename().string().rfind("events.out.tfevents.", 0), 0u);
  EXPECT_EQ(std::filesystem::file_size(file), tb::store::tensorboard_events(store, run).size());
  const std::string bytes = tb::store::tensorboard_events(store, run);
  EXPECT_NE(bytes.find("brain.Event:2"), std::string::npos);
  EXPECT_NE(bytes.find("lr.adamw.0"), std::string::npos);
  EXPECT_THROW(tb::store::write_tensorboard(store, run + 99, dir), tb::ValueError);
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir), {}), 1);  // nothing else
}

// A disk that fills up mid-export (a 4 KiB file-size limit, in a child process): an error naming
// the file, and no partial event file for TensorBoard to read as the whole run.
TEST_F(StoreTest, TensorBoardExportOnAFullDiskLeavesNoPartialFile) {
  std::int64_t run = 0;
  {
    auto store = RunStore::open(db());
    run = store.create_run({.name = "tb-full"});
    RunWriter w(db(), run);
    for (std::int64_t s = 1; s <= 500; ++s)
      w.log_metrics(s, {{"loss", 1.0 / static_cast<double>(s)}, {"lr", 0.01}});
    w.set_status(RunStatus::kFinished);
  }
  const auto dir = db().parent_path() / "tb-full";
  fs::create_directories(dir);
  const std::string message = error_in_child(dir_ / "message.txt", [&] {
    auto store = RunStore::open(db());
    limit_file_size(4 << 10);
    tb::store::write_tensorboard(store, run, dir);
  });
  EXPECT_EQ(message.rfind("[export] cannot write " + dir.string() + "/events.out.tfevents.", 0), 0u)
      << message;
  EXPECT_EQ(std::distance(fs::directory_iterator(dir), {}), 0) << "a partial file was left";
}

// Opening the store again in a process that writes to it (the GUI's reader and an in-process
// run's writer; a run that records a checkpoint) must keep that process's SQLite locks. Reading the
// file's header with a descriptor of our own and closing it dropped them (POSIX locks are per
// process): another process closing the store then took itself for the last connection,
// checkpointed and deleted the WAL the writer was still appending to, and every later commit of
// the run was lost (a GUI run's metrics stopped at the first `trainbench-cli runs`).
TEST_F(StoreTest, OpeningTheStoreAgainKeepsTheWritersLocks) {
  // As the GUI: its reader stays open; a run started in-process opens the store again (its header
  // inspected) and writes through a connection of its own.
  auto reader = RunStore::open(db());
  std::int64_t run = 0;
  {
    auto store = RunStore::open(db());
    run = store.create_run({.name = "locks"});
  }
  RunWriter w(db(), run);
  for (std::int64_t s = 1; s <= 100; ++s)
    w.log_metrics(s, {{"loss", 1.0 / static_cast<double>(s)}});
  w.flush();
  (void)RunStore::open(db());  // and once more while it writes (a checkpoint recorded)
  // This process still holds SQLite's shared lock on the file (bytes from 2^30 + 2; see
  // https://sqlite.org/lockingv3.html): another process asking for a write lock there is told so.
  {
    const pid_t probe = fork();
    ASSERT_GE(probe, 0);
    if (probe == 0) {
      const int fd = ::open(db().c_str(), O_RDONLY);
      struct flock want = {};
      want.l_type = F_WRLCK;
      want.l_whence = SEEK_SET;
      want.l_start = (1LL << 30) + 2;
      want.l_len = 510;
      const bool held = fd >= 0 && ::fcntl(fd, F_GETLK, &want) == 0 && want.l_type != F_UNLCK;
      _exit(held ? 0 : 1);
    }
    int probed = 0;
    ASSERT_EQ(waitpid(probe, &probed, 0), probe);
    EXPECT_TRUE(WIFEXITED(probed) && WEXITSTATUS(probed) == 0)
        << "this process lost its shared lock on the store";
  }
  // Another process opens and closes it.
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {  // as `trainbench-cli runs` does
    int rc = 0;
    try {
      auto other = RunStore::open(db());
      rc = other.list_runs().empty() ? 1 : 0;
    } catch (const std::exception&) {
      rc = 2;
    }
    _exit(rc);
  }
  int wstatus = 0;
  ASSERT_EQ(waitpid(child, &wstatus, 0), child);
  ASSERT_TRUE(WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == 0);
  EXPECT_TRUE(fs::exists(db().string() + "-wal")) << "the other process deleted the writer's WAL";
  for (std::int64_t s = 101; s <= 200; ++s)
    w.log_metrics(s, {{"loss", 1.0 / static_cast<double>(s)}});
  w.close();
  EXPECT_EQ(RunStore::open(db()).series(run, "loss").size(), 200u) << "commits were lost";
}

TEST_F(StoreTest, ProcessStartTimeIdentifiesThisProcess) {
  const ProcessIdentity me = current_process();
  EXPECT_GT(me.start_time, 0);
  EXPECT_TRUE(process_alive(me));
  EXPECT_FALSE(process_alive({me.pid, me.host, me.start_time + 1}));
  EXPECT_FALSE(process_start_time(dead_pid()).has_value());
}

}  // namespace
