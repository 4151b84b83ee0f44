// The one run lifecycle (engine/api/run_session.h): checkpoints belong to their store and run
// (two stores side by side, each with run 1, keep their own and resume from them), a cancelled
// run resumed from the store continues to the uninterrupted run's losses, resuming across stores
// is refused and leaves the run as it was, pruning never deletes another run's folder, and the
// CLI's and the GUI's entry points return the same outcome.
#include "engine/api/run_session.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <optional>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/api/api_detail.h"
#include "engine/api/launch_api.h"
#include "engine/api/run_api.h"
#include "engine/api/sweep_api.h"
#include "engine/api/workbench_api.h"
#include "engine/store/run_store.h"
#include "engine/store/run_writer.h"
#include "tests/engine/test_util.h"

namespace {

namespace fs = std::filesystem;
namespace api = tb::api;
namespace store = tb::store;

// 8 quick steps on 4 Gaussian blobs, a checkpoint every 2 steps, only the newest kept.
const std::string kConfig = R"(
[run]
name = "side-by-side"
seed = 9
steps = 8
[model]
kind = "mlp"
input = 16
hidden = [16]
classes = 4
[data]
kind = "synthetic-blobs"
batch_size = 32
workers = 0
[optimizer]
kind = "adamw"
lr = 0.01
[checkpoint]
interval = 2
keep = 1
)";

using Losses = std::map<std::int64_t, double>;

// Runs `spec`, recording the losses; cancels the run once it has logged step `cancel_at`.
api::RunOutcomeInfo run(api::RunSpec spec, Losses& losses, std::int64_t cancel_at = 0) {
  if (cancel_at > 0) spec.control = std::make_shared<api::RunControl>();
  api::RunObserver obs;
  obs.on_metrics = [&](const api::StepMetrics& m) {
    for (const auto& [k, v] : m.values)
      if (k == "loss") losses[m.step] = v;
    if (cancel_at > 0 && m.step == cancel_at) spec.control->cancel();
  };
  return api::execute_run(spec, obs);
}

api::RunSpec spec_for(const fs::path& db) {
  api::RunSpec s;
  s.config_text = kConfig;
  s.source = "side-by-side.toml";
  s.db_path = db.string();
  return s;
}

// Run 1 of kConfig in `db`, stopped at step 6 with its checkpoints of steps 2, 4 and 6 kept.
api::RunOutcomeInfo stopped_at_six(const fs::path& db) {
  api::RunSpec first = spec_for(db);
  first.overrides = {"checkpoint.keep=3"};
  first.stop_at = 6;
  return api::execute_run(first);
}

// Stores a run named `name` with the effective config of `toml` (for the compare tables).
void store_config_run(const std::string& db, const std::string& name, const std::string& toml) {
  store::NewRun nr;
  nr.name = name;
  nr.config = api::check_config_text(toml).effective_toml;
  store::RunStore::open(db).create_run(nr);
}

// A `launch --ddp` request of `config` on `nproc` ranks (0: not given) into `db`.
api::LaunchRequest ddp_request(const fs::path& config, int nproc, const std::string& db) {
  api::LaunchRequest req;
  req.program = "trainbench-cli";
  req.ddp = true;
  req.nproc = nproc;
  req.db_path = db;
  req.configs = {config.string()};
  return req;
}

std::vector<fs::path> step_dirs(const fs::path& run_dir) {
  std::vector<fs::path> out;
  for (const auto& e : fs::directory_iterator(run_dir))
    if (e.path().filename().string().rfind("step-", 0) == 0) out.push_back(e.path());
  return out;
}

TEST(RunLifecycle, StoresSideBySideKeepTheirOwnCheckpointsAndResumeFromThem) {
  tb::test::TempDir dir("tb_run_session_test");
  Losses uninterrupted;
  ASSERT_EQ(run(spec_for(dir.path() / "whole.sqlite"), uninterrupted).status, "finished");
  ASSERT_EQ(uninterrupted.size(), 8u);

  const std::vector<fs::path> dbs = {dir.path() / "a.sqlite", dir.path() / "b.sqlite"};
  std::vector<fs::path> newest;
  for (const auto& db : dbs) {
    Losses first;
    const auto out = run(spec_for(db), first, /*cancel_at=*/4);
    ASSERT_EQ(out.run_id, 1);  // both stores have a run 1
    EXPECT_EQ(out.status, "cancelled") << out.message;
    const auto cks = store::RunStore::open(db).checkpoints(1);
    ASSERT_FALSE(cks.empty());
    newest.push_back(cks.back().path);
    // The run's folder is this store's: <dir>/checkpoints/<stem>-<store id>/run-1.
    const std::string id = store::RunStore::open(db).store_id();
    EXPECT_EQ(fs::path(cks.back().path).parent_path(),
              dir.path() / "checkpoints" / (db.stem().string() + "-" + id) / "run-1");
  }
  ASSERT_NE(newest[0], newest[1]);
  for (std::size_t i = 0; i < dbs.size(); ++i) {
    // keep = 1: one checkpoint left per store, and the other store's run did not delete it.
    EXPECT_TRUE(fs::exists(newest[i] / "state.json")) << newest[i];
    EXPECT_EQ(step_dirs(newest[i].parent_path()).size(), 1u);
  }

  // A folder another run wrote, inside a's run folder: pruning must leave it alone.
  const fs::path foreign = newest[0].parent_path() / "step-00000001";
  fs::create_directories(foreign);
  std::ofstream(foreign / "state.json") << R"({"version": 1, "owner": {"key": "elsewhere/7"}})";

  for (std::size_t i = 0; i < dbs.size(); ++i) {
    // Resume from the store alone (its stored config): the uninterrupted run's losses.
    api::RunSpec resume;
    resume.db_path = dbs[i].string();
    resume.resume = 1;
    Losses rest;
    const auto out = run(resume, rest);
    ASSERT_EQ(out.status, "finished") << out.message;
    EXPECT_TRUE(out.resumed);
    EXPECT_EQ(out.from_step, 4);
    ASSERT_EQ(rest.size(), 4u);
    for (const auto& [step, loss] : rest)
      EXPECT_EQ(loss, uninterrupted.at(step)) << dbs[i] << " step " << step;  // bit for bit
    EXPECT_EQ(store::RunStore::open(dbs[i]).get_run(1).summary.status, store::RunStatus::kFinished);
  }
  EXPECT_TRUE(fs::exists(foreign / "state.json"));
  EXPECT_EQ(step_dirs(newest[0].parent_path()).size(), 2u);  // its own newest + the foreign one
}

TEST(RunLifecycle, ResumingFromAnotherStoresCheckpointIsRefused) {
  tb::test::TempDir dir("tb_run_session_test");
  const fs::path a = dir.path() / "a.sqlite";
  const fs::path b = dir.path() / "b.sqlite";
  Losses ignore;
  ASSERT_EQ(run(spec_for(a), ignore, 4).status, "cancelled");
  ASSERT_EQ(run(spec_for(b), ignore, 4).status, "cancelled");
  const std::string a_checkpoint = store::RunStore::open(a).checkpoints(1).back().path;
  const std::string a_id = store::RunStore::open(a).store_id();

  api::RunSpec cross;
  cross.db_path = b.string();
  cross.resume = 1;
  cross.resume_checkpoint = a_checkpoint;
  // Refused (an error, not an outcome of run 1: it did not run).
  const std::string error = tb::test::error_of([&] { api::execute_run(cross); });
  EXPECT_NE(error.find("belongs to run 1 of store a.sqlite (id " + a_id + ")"), std::string::npos)
      << error;
  EXPECT_NE(error.find("not to run 1 of store b.sqlite"), std::string::npos) << error;
  EXPECT_NE(error.find("; it continues that run only, from its own store"), std::string::npos)
      << error;
  // b's run is left as it was: cancelled at step 4, resumable from its own checkpoint.
  const auto run_b = store::RunStore::open(b).get_run(1).summary;
  EXPECT_EQ(run_b.status, store::RunStatus::kCancelled);
  EXPECT_EQ(run_b.last_step, 4);
  api::RunSpec own;
  own.db_path = b.string();
  own.resume = 1;
  EXPECT_EQ(api::execute_run(own).status, "finished");
}

// A resume that cannot go on says what to do instead: another run's checkpoint of the same store
// names that run to resume; a data folder that is not there is a config error naming data.path
// (it was the loader's "cannot open" once the data was read). Neither touches the run.
TEST(RunLifecycle, ARefusedResumeSaysWhatToDoInstead) {
  tb::test::TempDir dir("tb_run_session_test");
  const fs::path a = dir.path() / "a.sqlite";
  Losses ignore;
  ASSERT_EQ(run(spec_for(a), ignore, 4).status, "cancelled");
  ASSERT_EQ(run(spec_for(a), ignore, 4).status, "cancelled");
  api::RunSpec cross;
  cross.db_path = a.string();
  cross.resume = 2;
  cross.resume_checkpoint = store::RunStore::open(a).checkpoints(1).back().path;
  const std::string error = tb::test::error_of([&] { api::execute_run(cross); });
  EXPECT_NE(error.find("belongs to run 1 of store a.sqlite"), std::string::npos) << error;
  EXPECT_NE(error.find("not to run 2 of store a.sqlite"), std::string::npos) << error;
  EXPECT_NE(error.find("; it continues run 1 only (run --resume 1, if that run is not finished)"),
            std::string::npos)
      << error;

  api::RunSpec moved;
  moved.db_path = a.string();
  moved.resume = 1;
  const fs::path missing = dir.path() / "no-such-data";
  moved.overrides = {"data.path=" + missing.string()};
  EXPECT_EQ(tb::test::error_of([&] { api::execute_run(moved); }),
            "[config] run 1's stored config: data.path: " + missing.string() +
                ": no such file or folder (from --set data.path=" + missing.string() +
                "); if the data moved, name its new place: run --resume 1 --set data.path=... (or "
                "data.val_path, data.tokenizer_model)");
  for (const std::int64_t id : {1, 2})
    EXPECT_EQ(store::RunStore::open(a).get_run(id).summary.status, store::RunStatus::kCancelled);
}

// The store names a checkpoint before older ones are pruned. Before, the record waited for the
// writer's next batch while the trainer deleted the folders it replaced: a process killed in
// between left a store naming only deleted folders, and `sweep --resume` failed with
// "state.json: cannot open" (tests/e2e/sweep_resume.sh, about one run in thirty).
// A checkpoint that cannot be written fails the run with "[checkpoint] cannot write DIR: why",
// not the standard library's "filesystem error: cannot create directories". Here the run's
// folder is made a file after step 1, so the save at step 2 cannot make its folder.
TEST(RunLifecycle, ACheckpointThatCannotBeWrittenIsNamed) {
  tb::test::TempDir dir("tb_run_session_test");
  const fs::path db = dir.path() / "runs.sqlite";
  api::RunSpec spec = spec_for(db);
  api::RunObserver obs;
  fs::path run_dir;
  obs.on_metrics = [&](const api::StepMetrics& m) {
    if (m.step != 1) return;
    const std::string id = store::RunStore::open(db).store_id();
    run_dir = dir.path() / "checkpoints" / (db.stem().string() + "-" + id) / "run-1";
    fs::remove_all(run_dir);
    fs::create_directories(run_dir.parent_path());
    std::ofstream(run_dir) << "not a folder";
  };
  const auto out = api::execute_run(spec, obs);
  EXPECT_EQ(out.status, "failed");
  EXPECT_NE(out.message.find("[checkpoint] cannot write " + (run_dir / "step-00000002").string() +
                             ": Not a directory"),
            std::string::npos)
      << out.message;
  EXPECT_EQ(out.message.find("filesystem error"), std::string::npos) << out.message;
}

TEST(RunLifecycle, ACheckpointIsInTheStoreBeforeOlderOnesArePruned) {
  tb::test::TempDir dir("tb_run_session_test");
  const fs::path db = dir.path() / "runs.sqlite";
  store::NewRun nr;
  nr.name = "lazy";
  const std::int64_t id = store::RunStore::open(db).create_run(nr);
  store::WriterOptions lazy;
  lazy.commit_interval = std::chrono::hours(1);  // nothing committed but by a flush
  store::RunWriter writer(db, id, lazy);
  api::detail::StoreSink sink(writer);
  sink.on_metrics(6, {{"loss", 0.5}});
  sink.on_checkpoint(6, (dir.path() / "step-00000006").string());
  // Read through another connection, as a resume in another process would.
  const auto cks = store::RunStore::open(db).checkpoints(id);
  ASSERT_EQ(cks.size(), 1u);
  EXPECT_EQ(cks[0].step, 6);
  EXPECT_EQ(store::RunStore::open(db).get_run(id).summary.last_step, 6);
  writer.set_status(store::RunStatus::kCancelled);
  writer.close();
}

// A resume starts from the newest checkpoint whose files are there; --stop-at must lie after it.
// Both refusals leave the run as it was.
TEST(RunLifecycle, ResumeSkipsCheckpointsGoneFromDiskAndRefusesAStopBehindIt) {
  tb::test::TempDir dir("tb_run_session_test");
  const fs::path db = dir.path() / "runs.sqlite";
  const auto cut = stopped_at_six(db);
  ASSERT_TRUE(cut.stopped_as_asked) << cut.message;
  const auto cks = store::RunStore::open(db).checkpoints(cut.run_id);
  ASSERT_EQ(cks.size(), 3u);  // steps 2, 4, 6
  auto unchanged = [&] {
    const auto now = store::RunStore::open(db).get_run(cut.run_id).summary;
    EXPECT_EQ(now.status, store::RunStatus::kCancelled);
    EXPECT_EQ(now.last_step, 6);
  };

  api::RunSpec behind;
  behind.db_path = db.string();
  behind.resume = cut.run_id;
  behind.stop_at = 6;
  EXPECT_EQ(tb::test::error_of([&] { api::execute_run(behind); }),
            "[run] --stop-at 6: run 1 resumes at step 6 (step-00000006); give a later step");
  unchanged();

  fs::remove_all(cks[2].path);  // the newest, deleted by hand
  api::RunSpec resume;
  resume.db_path = db.string();
  resume.resume = cut.run_id;
  resume.stop_at = 7;
  const auto out = api::execute_run(resume);
  EXPECT_TRUE(out.stopped_as_asked) << out.message;
  EXPECT_EQ(out.from_step, 4);

  for (const auto& c : store::RunStore::open(db).checkpoints(cut.run_id))
    fs::remove_all(c.path);
  resume.stop_at = 0;
  const std::string gone = tb::test::error_of([&] { api::execute_run(resume); });
  EXPECT_EQ(gone.rfind("[run] run 1's checkpoints are gone: the store lists ", 0), 0u) << gone;
  EXPECT_NE(gone.find(", none of them on disk (newest: "), std::string::npos) << gone;
  const auto now = store::RunStore::open(db).get_run(cut.run_id).summary;
  EXPECT_EQ(now.status, store::RunStatus::kCancelled);
  EXPECT_EQ(now.last_step, 7);
}

// A continuation killed after writing a checkpoint the store had not yet recorded (step 6 here),
// then resumed from the recorded one (step 4), abandons that folder: pruning by name would have
// kept it and deleted the checkpoint the resumed run had just written (keep = 1). The hidden
// leftovers of a killed save go too.
TEST(RunLifecycle, PruningDropsAnAbandonedContinuationNotTheNewCheckpoint) {
  tb::test::TempDir dir("tb_run_session_test");
  const fs::path db = dir.path() / "runs.sqlite";
  api::RunSpec first = spec_for(db);  // a checkpoint every 2 steps, keep = 1
  first.stop_at = 4;
  ASSERT_TRUE(api::execute_run(first).stopped_as_asked);
  const fs::path four = store::RunStore::open(db).checkpoints(1).back().path;
  const fs::path run_dir = four.parent_path();
  fs::copy(four, run_dir / "step-00000006");  // the unrecorded folder of the killed continuation
  fs::create_directories(run_dir / ".step-00000008.partial");
  fs::create_directories(run_dir / ".step-00000002.old");

  api::RunSpec resume;
  resume.db_path = db.string();
  resume.resume = 1;
  resume.stop_at = 5;
  const auto out = api::execute_run(resume);
  ASSERT_TRUE(out.stopped_as_asked) << out.message;
  EXPECT_EQ(out.from_step, 4);
  std::vector<std::string> left;
  for (const auto& e : fs::directory_iterator(run_dir))
    left.push_back(e.path().filename().string());
  EXPECT_EQ(left, std::vector<std::string>{"step-00000005"});

  // A re-save of step 5 killed between its renames left only the previous save, aside: it is
  // put back and resumed from.
  fs::rename(run_dir / "step-00000005", run_dir / ".step-00000005.old");
  resume.stop_at = 0;
  const auto rest = api::execute_run(resume);
  EXPECT_EQ(rest.status, "finished") << rest.message;
  EXPECT_EQ(rest.from_step, 5);
}

// Resumed from an earlier checkpoint, the run's later steps in the store are the abandoned
// continuation's: they are removed when the resume starts, so plots, `runs` and exports show one
// timeline, and its checkpoint records go with them (a crash before the next checkpoint resumes
// from the chosen one, not from the abandoned continuation's newest).
TEST(RunResume, AResumeFromAnEarlierCheckpointReplacesTheStepsAfterIt) {
  tb::test::TempDir dir("tb_run_session_test");
  const fs::path db = dir.path() / "runs.sqlite";
  ASSERT_TRUE(stopped_at_six(db).stopped_as_asked);
  auto st = store::RunStore::open(db);
  ASSERT_EQ(st.series(1, "loss").back().step, 6);
  const std::vector<store::Checkpoint> before = st.checkpoints(1);
  ASSERT_EQ(before.size(), 3u);  // steps 2, 4, 6
  ASSERT_EQ(before.front().step, 2);

  api::RunSpec back;
  back.db_path = db.string();
  back.resume = 1;
  back.resume_checkpoint = before.front().path;
  back.stop_at = 3;
  const auto out = api::execute_run(back);
  ASSERT_TRUE(out.stopped_as_asked) << out.message;
  EXPECT_EQ(out.from_step, 2);
  const std::vector<store::SeriesPoint> loss = st.series(1, "loss");
  ASSERT_EQ(loss.size(), 3u);
  EXPECT_EQ(loss.back().step, 3);
  EXPECT_EQ(st.get_run(1).summary.last_step, 3);
  std::vector<std::int64_t> steps;
  for (const auto& c : st.checkpoints(1))
    steps.push_back(c.step);
  EXPECT_EQ(steps, (std::vector<std::int64_t>{2, 3}));
  bool said = false;
  for (const auto& e : st.events(1))
    said = said || (e.text.find("at step 2; removed what the store held after that step") !=
                        std::string::npos &&
                    e.text.find(", 2 checkpoint records") != std::string::npos);
  EXPECT_TRUE(said) << "no event names what the resume removed";
}

// A checkpoint changed after its save (by hand, or a file cut short) is refused, naming the file
// and what is wrong, and the run stays as it was: a state.json whose step was lowered had resumed
// at that step and dropped every later step from the store, a raised one had skipped training;
// a folder that cannot be read had been taken as deleted and an older checkpoint used instead.
TEST(RunResume, ACheckpointChangedAfterItsSaveIsRefusedAndTheRunStaysAsItWas) {
  tb::test::TempDir dir("tb_run_session_test");
  const fs::path db = dir.path() / "runs.sqlite";
  ASSERT_TRUE(stopped_at_six(db).stopped_as_asked);
  const fs::path six = store::RunStore::open(db).checkpoints(1).back().path;
  ASSERT_EQ(six.filename(), "step-00000006");
  const fs::path state = six / "state.json";
  const fs::path model = six / "model.safetensors";
  const std::string state_text = tb::test::read_bytes(state);
  const std::string model_bytes = tb::test::read_bytes(model);
  auto unchanged = [&] {
    auto st = store::RunStore::open(db);
    EXPECT_EQ(st.get_run(1).summary.status, store::RunStatus::kCancelled);
    EXPECT_EQ(st.series(1, "loss").size(), 6u);
    EXPECT_EQ(st.checkpoints(1).size(), 3u);
    EXPECT_TRUE(fs::exists(state));
  };
  api::RunSpec resume;
  resume.db_path = db.string();
  resume.resume = 1;
  auto refused = [&](const std::function<void()>& change) {
    change();
    const std::string error = tb::test::error_of([&] { api::execute_run(resume); });
    tb::test::write_bytes(state, state_text);
    tb::test::write_bytes(model, model_bytes);
    unchanged();
    return error;
  };
  auto edit_state = [&](const std::function<void(nlohmann::json&)>& edit) {
    return [&, edit] {
      nlohmann::json j = nlohmann::json::parse(state_text);
      edit(j);
      tb::test::write_bytes(state, j.dump());
    };
  };
  const std::string in_state = "[checkpoint] " + state.string() + ": ";
  for (const int step : {-5, 4, 25})
    EXPECT_EQ(refused(edit_state([step](nlohmann::json& j) { j["step"] = step; })),
              in_state + "step " + std::to_string(step) +
                  " is not this checkpoint's (the folder is step 6): the file was changed "
                  "after it was saved; resume from another checkpoint (run --resume N "
                  "--from-checkpoint DIR)");
  EXPECT_EQ(refused(edit_state([](nlohmann::json& j) {
              j["optimizers"][0]["param_groups"][0]["options"]["lr"] = "fast";
            })),
            "[checkpoint] " + six.string() + ": hyper-parameter 'lr' is \"fast\", not a number");
  EXPECT_EQ(refused(edit_state([](nlohmann::json& j) { j["version"] = 99; })),
            in_state + "checkpoint format version 99; this build reads version 1");
  EXPECT_EQ(refused([&] { tb::test::write_bytes(state, state_text.substr(0, 100)); }),
            in_state + "not JSON (cut short, or changed after the save)");
  const std::string nan = refused([&] {
    std::string bytes = model_bytes;  // the first weight of the first tensor made NaN
    std::uint64_t header = 0;
    std::memcpy(&header, bytes.data(), sizeof header);
    const float not_a_number = std::numeric_limits<float>::quiet_NaN();
    std::memcpy(bytes.data() + 8 + header, &not_a_number, sizeof not_a_number);
    tb::test::write_bytes(model, bytes);
  });
  EXPECT_EQ(nan.rfind("[checkpoint] " + model.string() + ": ", 0), 0u) << nan;
  EXPECT_NE(nan.find(" holds NaN or infinite values"), std::string::npos) << nan;
  // A folder that is there but cannot be read (its permissions, here a link to itself) is named,
  // not skipped for step 4's.
  const fs::path aside = dir.path() / "aside";
  fs::rename(six, aside);
  fs::create_directory_symlink(six.filename(), six);
  const std::string unreadable = tb::test::error_of([&] { api::execute_run(resume); });
  EXPECT_EQ(unreadable.rfind("[run] run 1's checkpoint " + six.string() + " cannot be read (", 0),
            0u)
      << unreadable;
  EXPECT_NE(unreadable.find("); make it readable, or resume from an older one with run --resume 1 "
                            "--from-checkpoint DIR"),
            std::string::npos)
      << unreadable;
  fs::remove(six);
  fs::rename(aside, six);
  unchanged();
  resume.stop_at = 7;  // and the checkpoint, whole again, resumes
  const auto out = api::execute_run(resume);
  EXPECT_TRUE(out.stopped_as_asked) << out.message;
  EXPECT_EQ(out.from_step, 6);
}

TEST(RunLifecycle, ResumeWithoutACheckpointOrRunSaysSoAndChangesNothing) {
  tb::test::TempDir dir("tb_run_session_test");
  const fs::path db = dir.path() / "runs.sqlite";
  api::RunSpec none;
  none.db_path = db.string();
  none.resume = 3;
  // No store there: named, and not created.
  EXPECT_EQ(tb::test::error_of([&] { api::execute_run(none); }),
            "[store] " + db.string() + ": no run store there (a run creates one; is --db right?)");
  EXPECT_FALSE(fs::exists(db));
  // A run that failed before its first checkpoint.
  api::RunSpec bad = spec_for(db);
  bad.overrides = {"data.kind=fashion-mnist", "data.path=" + dir.path().string(), "model.input=784",
                   "model.classes=10"};
  const auto failed = api::execute_run(bad);
  ASSERT_EQ(failed.status, "failed");
  // A store without that run.
  EXPECT_EQ(tb::test::error_of([&] { api::execute_run(none); }),
            "[store] " + db.string() + ": no run 3 (trainbench-cli runs lists them)");
  none.resume = failed.run_id;
  EXPECT_EQ(tb::test::error_of([&] { api::execute_run(none); }),
            "[run] run " + std::to_string(failed.run_id) + " has no checkpoint to resume from");
  // Without checkpoints on the way (the shipped configs' checkpoint.interval = 0), the key to
  // set is named.
  bad.overrides.push_back("checkpoint.interval=0");
  none.resume = api::execute_run(bad).run_id;
  EXPECT_EQ(tb::test::error_of([&] { api::execute_run(none); }),
            "[run] run " + std::to_string(*none.resume) +
                " has no checkpoint to resume from (checkpoint.interval = 0 saves one only at the "
                "end; set checkpoint.interval = N to save every N steps, so that a run cut short "
                "can continue)");
}

TEST(RunLifecycle, CliAndGuiEntryPointsShareTheLifecycle) {
  tb::test::TempDir dir("tb_run_session_test");
  const fs::path db = dir.path() / "runs.sqlite";
  const fs::path file = dir.path() / "run.toml";
  std::ofstream(file) << kConfig;
  const auto cli = api::run_training(
      api::RunRequest{file.string(), {}, db.string(), std::nullopt, ""}, nullptr, nullptr);
  api::TrainRequest gui;
  gui.config_text = kConfig;
  gui.db_path = db.string();
  std::vector<std::string> warnings;
  gui.on_warning = [&](const std::string& w) { warnings.push_back(w); };
  const auto in_process = api::start_training(gui, nullptr, nullptr);
  EXPECT_TRUE(warnings.empty());
  EXPECT_EQ(cli.status, "finished");
  EXPECT_EQ(in_process.status, cli.status);
  EXPECT_EQ(in_process.description, cli.description);
  // The same config and seed: the same last loss in both runs.
  const auto st = store::RunStore::open(db);
  EXPECT_EQ(st.series(cli.run_id, "loss").back().value,
            st.series(in_process.run_id, "loss").back().value);
  // A finished run has nothing to resume: refused, and its stored summary is left as it was.
  const store::RunSummary before = st.get_run(cli.run_id).summary;
  EXPECT_EQ(
      tb::test::error_of([&] {
        api::run_training(api::RunRequest{"", {}, db.string(), cli.run_id, ""}, nullptr, nullptr);
      }),
      "[run] run " + std::to_string(cli.run_id) +
          " has finished: there is nothing to resume (a new run can start from its "
          "weights: trainbench-cli weights " +
          std::to_string(cli.run_id) +
          " -o FILE.safetensors, then run.init_from = FILE.safetensors)");
  const store::RunSummary after = store::RunStore::open(db).get_run(cli.run_id).summary;
  EXPECT_EQ(after.status, before.status);
  EXPECT_EQ(after.message, before.message);
  EXPECT_EQ(after.ended_at, before.ended_at);
  // The workbench hears a run's warnings as they happen (here a cosine half of the run's length).
  gui.overrides = {"scheduler.kind=\"cosine\"", "scheduler.T_max=4"};
  const auto warned = api::start_training(gui, nullptr, nullptr);
  EXPECT_EQ(warned.status, "finished");
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_EQ(warnings[0].rfind("scheduler.T_max = 4 is shorter than the 8 steps it is stepped", 0),
            0u)
      << warnings[0];
  // The CLI resumes a run stopped part-way, from the stored config when no file is given.
  api::RunRequest part{file.string(), {}, db.string(), std::nullopt, ""};
  part.stop_at = 4;
  const auto cut = api::run_training(part, nullptr, nullptr);
  EXPECT_TRUE(cut.stopped_as_asked);
  const auto again =
      api::run_training(api::RunRequest{"", {}, db.string(), cut.run_id, ""}, nullptr, nullptr);
  EXPECT_TRUE(again.resumed);
  EXPECT_EQ(again.from_step, 4);
  EXPECT_EQ(again.status, "finished");
}

// `launch --ddp` without --nproc runs the config's distributed.world_size ranks, else one rank and
// says so (it started a one-rank job without a word); and the config is checked as `run` checks
// it before mpirun starts (each rank refused "nccl" on a CPU under mpirun's abort banner).
TEST(DdpLaunchPlan, RanksWithoutNprocAndTheConfigCheckedFirst) {
  tb::test::TempDir dir;
  const fs::path config = dir.path() / "mlp.toml";
  std::ofstream(config) << "[model]\nkind = \"mlp\"\ninput = 16\nhidden = [8]\nclasses = 4\n"
                           "[data]\nkind = \"synthetic-blobs\"\n";
  api::LaunchRequest req = ddp_request(config, 0, dir.db());
  auto ranks = [&](const std::string& note) {
    const api::DdpLaunch plan = api::plan_ddp_launch(req);
    EXPECT_NE(std::find(plan.notes.begin(), plan.notes.end(), note), plan.notes.end())
        << "no note: " << note;
    return plan.argv.at(1) == "-np" ? plan.argv.at(2) : "?";
  };
  EXPECT_EQ(ranks("--nproc not given and no distributed.world_size in the config: 1 rank (give "
                  "--nproc N for N ranks)"),
            "1");
  req.overrides = {"distributed.world_size=3"};
  EXPECT_EQ(ranks("--nproc not given: 3 ranks, the config's distributed.world_size"), "3");
  api::check_ddp_start(req);  // a config `run` takes
  req.overrides = {"distributed.backend=\"nccl\""};
  EXPECT_EQ(tb::test::error_of([&] { api::check_ddp_start(req); }),
            "[config] " + config.string() +
                ": distributed.backend: \"nccl\" trains on CUDA devices, and run.device is "
                "\"cpu\": use distributed.backend = \"mpi\" on CPUs, or run.device = \"cuda\" "
                "(from --set distributed.backend=\"nccl\")");
  req.overrides = {"data.path=\"" + (dir.path() / "nowhere").string() + "\""};
  EXPECT_NE(tb::test::error_of([&] { api::check_ddp_start(req); }).find("data.path"),
            std::string::npos);
  // Ranks on other hosts: their GPUs, files and CPUs are not this machine's; the config alone is
  // checked (a login node without a GPU starts ranks on GPU hosts).
  req.overrides = {"run.device=\"cuda\"", "distributed.backend=\"nccl\"",
                   "binding.mode=\"exclusive\"", "binding.slots=5000", "binding.slot=4999"};
  req.hosts = {"gpu1", "gpu2"};
  api::check_ddp_start(req);
  req.overrides.push_back("optimizer.lr=-1");
  EXPECT_NE(tb::test::error_of([&] { api::check_ddp_start(req); }).find("optimizer.lr"),
            std::string::npos);
}

// `launch --ddp` sets each rank's backend: the config's "nccl" is kept (from the config file,
// or the stored config of a run resumed without one); anything else runs over "mpi".
TEST(DdpLaunchPlan, KeepsTheConfigsNcclBackend) {
  tb::test::TempDir dir;
  auto backend_of = [](const api::DdpLaunch& plan) {
    for (std::size_t i = 0; i + 1 < plan.argv.size(); ++i)
      if (plan.argv[i] == "--set" && plan.argv[i + 1].rfind("distributed.backend=", 0) == 0)
        return plan.argv[i + 1];
    return std::string("none");
  };
  const std::string base =
      "[model]\nkind = \"mlp\"\ninput = 16\nhidden = [8]\nclasses = 4\n"
      "[data]\nkind = \"synthetic-blobs\"\n";
  const fs::path cpu = dir.path() / "cpu.toml";
  const fs::path gpu = dir.path() / "gpu.toml";
  std::ofstream(cpu) << base;
  const std::string gpu_text =
      base + "[run]\ndevice = \"cuda\"\n[distributed]\nbackend = \"nccl\"\n";
  std::ofstream(gpu) << gpu_text;
  api::LaunchRequest req = ddp_request(cpu, 2, dir.db());
  EXPECT_EQ(backend_of(api::plan_ddp_launch(req)), "distributed.backend=\"mpi\"");
  // The launching command's own options reach every rank, before its command.
  req.program_options = {"--threads", "3", "--gemm-backend", "openblas"};
  {
    const auto argv = api::plan_ddp_launch(req).argv;
    const auto at = std::find(argv.begin(), argv.end(), "trainbench-cli");
    ASSERT_NE(at, argv.end());
    EXPECT_EQ(std::vector<std::string>(at + 1, at + 7),
              (std::vector<std::string>{"--threads", "3", "--gemm-backend", "openblas", "--db",
                                        dir.db()}));
  }
  req.program_options.clear();
  // Each launch names its job in the ranks' environment (rank 0 records it with the run): a new
  // name every time, and passed on with -x to the ranks of other hosts.
  {
    const api::DdpLaunch a = api::plan_ddp_launch(req);
    const api::DdpLaunch b = api::plan_ddp_launch(req);
    EXPECT_NE(a.job, b.job);
    EXPECT_EQ(std::count(a.job.begin(), a.job.end(), ':'), 3) << a.job;
    EXPECT_NE(std::find(a.env.begin(), a.env.end(), "TB_LAUNCH_JOB=" + a.job), a.env.end());
    EXPECT_EQ(std::find(a.argv.begin(), a.argv.end(), "-x"), a.argv.end());
    api::LaunchRequest two_hosts = req;
    two_hosts.hosts = {"node1", "node2"};
    const api::DdpLaunch remote = api::plan_ddp_launch(two_hosts);
    const auto& argv = remote.argv;
    const auto x = std::find(argv.begin(), argv.end(), "-x");
    ASSERT_NE(x, argv.end());
    EXPECT_EQ(*(x + 1), "TB_LAUNCH_JOB");
    // ssh cannot prompt from mpirun's process group: it fails instead of waiting unseen, unless
    // the user chose the agent or its arguments (in the environment or a parameter file, whose
    // value an environment variable would override).
    const std::string batch = "OMPI_MCA_plm_rsh_args=-o BatchMode=yes -o ConnectTimeout=20";
    const auto has_batch = [&](const api::DdpLaunch& plan) {
      return std::find(plan.env.begin(), plan.env.end(), batch) != plan.env.end();
    };
    EXPECT_FALSE(has_batch(a)) << "one machine: no ssh";
    std::map<std::string, std::optional<std::string>> saved;
    for (const char* name : {"HOME", "OMPI_MCA_mca_base_param_files", "OMPI_MCA_plm_rsh_agent",
                             "OMPI_MCA_plm_rsh_args"}) {
      const char* v = std::getenv(name);
      saved[name] = v ? std::optional<std::string>(v) : std::nullopt;
      unsetenv(name);
    }
    setenv("HOME", dir.path().c_str(), 1);  // no ~/.openmpi/mca-params.conf
    EXPECT_TRUE(has_batch(api::plan_ddp_launch(two_hosts)));
    const fs::path params = dir.path() / "mca-params.conf";
    std::ofstream(params) << "# ours\n  plm_rsh_args = -p 2222\n";
    setenv("OMPI_MCA_mca_base_param_files", params.c_str(), 1);
    EXPECT_FALSE(has_batch(api::plan_ddp_launch(two_hosts))) << "a port of the user's kept";
    unsetenv("OMPI_MCA_mca_base_param_files");
    setenv("OMPI_MCA_plm_rsh_agent", "rsh", 1);
    EXPECT_FALSE(has_batch(api::plan_ddp_launch(two_hosts)));
    for (const auto& [name, value] : saved) {
      if (value)
        setenv(name.c_str(), value->c_str(), 1);
      else
        unsetenv(name.c_str());
    }
  }
  req.configs = {gpu.string()};
  EXPECT_EQ(backend_of(api::plan_ddp_launch(req)), "distributed.backend=\"nccl\"");
  // Resumed without a config file: the stored run's config decides.
  store::NewRun nr;
  nr.name = "gpu";
  nr.config = gpu_text + "world_size = 2\n";
  const std::int64_t id = store::RunStore::open(dir.db()).create_run(nr);
  req.configs.clear();
  req.resume = id;
  EXPECT_EQ(backend_of(api::plan_ddp_launch(req)), "distributed.backend=\"nccl\"");
  // A resume continues on as many ranks, and only a data-parallel run: refused before mpirun
  // starts (every rank refused it under mpirun's abort banner).
  req.nproc = 4;
  EXPECT_EQ(tb::test::error_of([&] { (void)api::plan_ddp_launch(req); }),
            "[launch] run " + std::to_string(id) +
                " ran on 2 ranks, and --ddp --resume continues it on as many: --nproc 2 (got 4)");
  // Without --nproc (0): the run's own ranks.
  req.nproc = 0;
  {
    const auto argv = api::plan_ddp_launch(req).argv;
    ASSERT_GE(argv.size(), 3u);
    EXPECT_EQ(argv[1], "-np");
    EXPECT_EQ(argv[2], "2");
  }
  // Ranks started from a torchrun-style environment store world_size = 0: their per-rank
  // metrics say how many there were (it is a data-parallel run all the same).
  nr.name = "env";
  nr.config = base + "[distributed]\nbackend = \"mpi\"\nworld_size = 0\n";
  const std::int64_t env = store::RunStore::open(dir.db()).create_run(nr);
  {
    store::RunWriter w(dir.db(), env);
    w.log_metrics(1, {{"loss", 1.0}, {"rank2/time.data_ms", 0.1}});
    w.close();
  }
  req.resume = env;
  {
    const auto argv = api::plan_ddp_launch(req).argv;
    ASSERT_GE(argv.size(), 3u);
    EXPECT_EQ(argv[2], "3");
    // Its world_size stays 0 (the ranks take it from mpirun's environment): a resume that set 3
    // changed its config, and every rank refused the checkpoint.
    EXPECT_NE(std::find(argv.begin(), argv.end(), "distributed.world_size=0"), argv.end());
  }
  nr.name = "alone";
  nr.config = base;
  req.resume = store::RunStore::open(dir.db()).create_run(nr);
  req.nproc = 2;
  EXPECT_EQ(tb::test::error_of([&] { (void)api::plan_ddp_launch(req); }),
            "[launch] run " + std::to_string(req.resume) +
                " is not a data-parallel run (it ran as one process): continue it with "
                "trainbench-cli run --resume " +
                std::to_string(req.resume));
  req.resume = 99;
  EXPECT_NE(tb::test::error_of([&] {
              (void)api::plan_ddp_launch(req);
            }).find("no run 99 (trainbench-cli runs lists them)"),
            std::string::npos);
}

}  // namespace

// A store moved to another folder with its checkpoints folder resumes there: the checkpoint the
// store lists under the old folder is found beside the store (it failed: "checkpoints are
// gone"). And a resume may change where and how the run is placed (threads), not what it trains.
TEST(RunResume, AStoreMovedWithItsCheckpointsResumesAndThreadsMayChange) {
  tb::test::TempDir dir("tb_run_session_test");
  const fs::path first = dir.path() / "first";
  fs::create_directories(first);
  api::RunRequest part{"", {}, (first / "runs.sqlite").string(), std::nullopt, ""};
  const fs::path file = dir.path() / "run.toml";
  std::ofstream(file) << kConfig;
  part.config_path = file.string();
  part.stop_at = 4;
  const auto cut = api::run_training(part, nullptr, nullptr);
  ASSERT_TRUE(cut.stopped_as_asked) << cut.message;
  const fs::path second = dir.path() / "second";
  fs::rename(first, second);
  api::RunRequest again{"", {"threads=1"}, (second / "runs.sqlite").string(), cut.run_id, ""};
  const auto resumed = api::run_training(again, nullptr, nullptr);
  EXPECT_EQ(resumed.status, "finished") << resumed.message;
  EXPECT_EQ(resumed.from_step, 4);
  // Its new checkpoints are listed under the store's new folder.
  const auto cks = store::RunStore::open(second / "runs.sqlite").checkpoints(cut.run_id);
  ASSERT_FALSE(cks.empty());
  EXPECT_EQ(cks.back().path.rfind(second.string(), 0), 0u) << cks.back().path;
}

// The keys a resume may change (name, tags, checkpointing) are stored with the run: `show` then
// describes what ran, and a later resume without --set keeps them. They were used for the rest
// of the run but the store kept the old ones, so the next resume silently went back.
TEST(RunResume, TheSettingsAResumeChangesAreStoredWithTheRun) {
  tb::test::TempDir dir("tb_run_session_test");
  const fs::path db = dir.path() / "runs.sqlite";
  api::RunSpec first = spec_for(db);
  first.stop_at = 2;
  const auto cut = api::execute_run(first);
  ASSERT_TRUE(cut.stopped_as_asked) << cut.message;
  const std::string before = store::RunStore::open(db).get_run(cut.run_id).config;

  // A resume that changes nothing rewrites nothing.
  api::RunSpec same = spec_for(db);
  same.config_text.clear();
  same.resume = cut.run_id;
  same.stop_at = 4;
  ASSERT_TRUE(api::execute_run(same).stopped_as_asked);
  EXPECT_EQ(store::RunStore::open(db).get_run(cut.run_id).config, before);

  api::RunSpec renamed = same;
  renamed.overrides = {"run.name=renamed", "run.tags=[\"x\"]", "checkpoint.keep=3"};
  renamed.stop_at = 6;
  ASSERT_TRUE(api::execute_run(renamed).stopped_as_asked);
  {
    auto st = store::RunStore::open(db);
    const store::RunDetails d = st.get_run(cut.run_id);
    EXPECT_EQ(d.summary.name, "renamed");
    EXPECT_EQ(d.summary.tags, std::vector<std::string>{"x"});
    EXPECT_NE(d.config.find("keep = 3"), std::string::npos) << d.config;
    EXPECT_NE(d.config.find("name = \"renamed\""), std::string::npos) << d.config;
    bool said = false;
    for (const auto& e : st.events(cut.run_id))
      said = said || (e.text.find("with changed settings") != std::string::npos &&
                      e.text.find("checkpoint.keep: 1 -> 3") != std::string::npos);
    EXPECT_TRUE(said) << "no event lists the changed settings";
  }
  // A name given in the GUI since (the runs table's rename) stays through a resume that changes
  // another key; a new name with a control character is refused before anything starts.
  store::RunStore::open(db).rename_run(cut.run_id, "from the GUI");
  api::RunSpec threads = same;
  threads.overrides = {"threads=1"};
  threads.stop_at = 7;
  ASSERT_TRUE(api::execute_run(threads).stopped_as_asked);
  EXPECT_EQ(store::RunStore::open(db).get_run(cut.run_id).summary.name, "from the GUI");
  api::RunSpec tab = same;
  tab.overrides = {"run.name=\"a\\tb\""};
  EXPECT_NE(tb::test::error_of([&] { (void)api::execute_run(tab); })
                .find("run.name: a run name is one line of text, without control characters (a "
                      "newline, a tab) (from --set run.name="),
            std::string::npos);
  EXPECT_EQ(store::RunStore::open(db).get_run(cut.run_id).summary.name, "from the GUI");
  // A resume without --set goes on with them: three checkpoint folders kept, not one (the store
  // lists the pruned ones too).
  api::RunSpec rest = same;
  rest.stop_at = 0;
  const auto done = api::execute_run(rest);
  EXPECT_EQ(done.status, "finished") << done.message;
  auto st = store::RunStore::open(db);
  EXPECT_EQ(st.get_run(cut.run_id).summary.name, "from the GUI");
  std::string kept;
  for (const auto& c : st.checkpoints(cut.run_id))
    if (fs::exists(c.path)) kept += std::to_string(c.step) + " ";
  EXPECT_EQ(kept, "6 7 8 ");
}

// A resume given the config file again, with a relative path in it, is the same run (the stored
// config holds the path absolute; the file's is read from this folder as a new run's was).
TEST(RunResume, TheSameConfigFileWithARelativePathResumes) {
  tb::test::TempDir dir("tb_run_session_test");
  const fs::path ck = fs::relative(dir.path() / "ck", fs::current_path());
  ASSERT_TRUE(ck.is_relative());
  const fs::path file = dir.path() / "run.toml";
  std::ofstream(file) << kConfig;
  const std::vector<std::string> sets = {"checkpoint.dir=\"" + ck.string() + "\""};
  api::RunRequest part{file.string(), sets, dir.db(), std::nullopt, ""};
  part.stop_at = 4;
  const auto cut = api::run_training(part, nullptr, nullptr);
  ASSERT_TRUE(cut.stopped_as_asked) << cut.message;
  EXPECT_TRUE(fs::exists(dir.path() / "ck"));
  const auto resumed = api::run_training(
      api::RunRequest{file.string(), sets, dir.db(), cut.run_id, ""}, nullptr, nullptr);
  EXPECT_EQ(resumed.status, "finished") << resumed.message;
  EXPECT_EQ(resumed.from_step, 4);
}

// A resume of a run another process is training is refused before its checkpoints are read (that
// process may be pruning them): it failed with whichever checkpoint file had just gone.
TEST(RunResume, ARunningRunIsRefusedBeforeItsCheckpointsAreRead) {
  tb::test::TempDir dir("tb_run_session_test");
  std::int64_t id = 0;
  {
    store::NewRun nr;
    nr.name = "live";
    nr.config = "";
    id = store::RunStore::open(dir.db()).create_run(nr);
  }
  store::RunWriter live(dir.db(), id);  // this process is its writer: running, alive
  const std::string e = tb::test::error_of([&] {
    (void)api::run_training(api::RunRequest{"", {}, dir.db(), id, ""}, nullptr, nullptr);
  });
  EXPECT_EQ(e, "[run] run " + std::to_string(id) +
                   " is running in another process: let it end (or cancel it) before resuming it");
  live.set_status(store::RunStatus::kCancelled);
}

// Commands that only read a store do not create one: a mistyped --db is named, and no file or
// folder is left behind.
TEST(RunStoreReaders, AStoreThatIsNotThereIsNamedNotCreated) {
  tb::test::TempDir dir("tb_run_session_test");
  const fs::path db = dir.path() / "typo" / "runs.sqlite";
  const std::string why =
      "[store] " + db.string() + ": no run store there (a run creates one; is --db right?)";
  EXPECT_EQ(tb::test::error_of([&] { (void)api::list_runs(db.string()); }), why);
  EXPECT_EQ(tb::test::error_of([&] { (void)api::show_run(db.string(), 1); }), why);
  EXPECT_EQ(tb::test::error_of([&] { (void)api::export_run(db.string(), 1, "csv"); }), why);
  EXPECT_EQ(tb::test::error_of([&] { (void)api::list_sweeps(db.string()); }), why);
  EXPECT_FALSE(fs::exists(dir.path() / "typo"));
}

// The error of a sweep of kConfig plus `sweep` (with `overrides`) into DIR/new/runs.sqlite.
std::string refused_sweep(const fs::path& dir, const std::string& sweep,
                          const std::vector<std::string>& overrides = {}) {
  const fs::path config = dir / "sweep.toml";
  std::ofstream(config) << kConfig << sweep;
  api::SweepRequest req;
  req.config_path = config.string();
  req.overrides = overrides;
  req.db_path = (dir / "new" / "runs.sqlite").string();
  return tb::test::error_of([&] { (void)api::run_sweep(req, {}, {}); });
}

// A sweep whose config has a mistake is refused before its store is opened: no empty store is
// left where the sweep would have gone.
TEST(RunStoreReaders, ASweepWithABadConfigCreatesNoStore) {
  tb::test::TempDir dir("tb_run_session_test");
  const std::string error =
      refused_sweep(dir.path(),
                    "[sweep]\nname = \"bad\"\nmetric = \"eval.loss\"\n[sweep.parameters]\n"
                    "\"optimizer.lr\" = []\n");
  EXPECT_NE(error.find("optimizer.lr"), std::string::npos) << error;
  EXPECT_FALSE(fs::exists(dir.path() / "new"));
}

// A device this machine cannot use is a config error before the run is created, as the config
// editor reports it, not a failed run left in the store.
TEST(RunLifecycle, ADeviceThisMachineCannotUseCreatesNoRun) {
  tb::test::TempDir dir("tb_run_session_test");
  const fs::path db = dir.path() / "runs.sqlite";
  api::RunSpec spec = spec_for(db);
  spec.overrides = {"run.device=\"openreg:7\""};
  const std::string error = tb::test::error_of([&] { (void)api::execute_run(spec); });
  EXPECT_NE(error.find("[config] side-by-side.toml: run.device: 'openreg:7' cannot be used here: "
                       "[openreg] no device "
                       "openreg:7"),
            std::string::npos)
      << error;
  // Set by --set, it says so, as the config reader's messages do; so do the files it names.
  EXPECT_NE(error.find("(from --set run.device=\"openreg:7\")"), std::string::npos) << error;
  spec.overrides = {"data.path=" + (dir.path() / "nowhere").string()};
  const std::string path = tb::test::error_of([&] { (void)api::execute_run(spec); });
  EXPECT_NE(path.find("nowhere: no such file or folder (from --set data.path="), std::string::npos)
      << path;
  spec.overrides = {"run.init_from=" + dir.path().string()};
  const std::string folder = tb::test::error_of([&] { (void)api::execute_run(spec); });
  EXPECT_NE(folder.find("is a folder; name a file (from --set run.init_from="), std::string::npos)
      << folder;
  // A token pattern that matches nothing, and a validation path that is not there, likewise
  // (they failed the run once it was created).
  spec.overrides = {"data.kind=tokens", "model.kind=gpt", "model={ kind = \"gpt\" }",
                    "data.path=" + (dir.path() / "shard_*.bin").string()};
  const std::string none = tb::test::error_of([&] { (void)api::execute_run(spec); });
  EXPECT_NE(none.find("data.path: no file in " + dir.path().string() + " matches shard_*.bin"),
            std::string::npos)
      << none;
  std::ofstream(dir.path() / "shard_0.bin") << "x";
  spec.overrides.push_back("data.val_path=" + (dir.path() / "val.bin").string());
  const std::string val = tb::test::error_of([&] { (void)api::execute_run(spec); });
  EXPECT_NE(val.find("data.val_path: " + (dir.path() / "val.bin").string() +
                     ": no such file or folder (from --set data.val_path="),
            std::string::npos)
      << val;
  EXPECT_TRUE(store::RunStore::open(db).list_runs().empty());
}

// A one-cycle schedule shorter than run.steps would fail once set up, after the run was stored:
// refused before, naming the config. In epochs the length is known once the data is read, so the
// trainer checks it then (tests/engine/trainer_test.cpp).
TEST(RunLifecycle, AOneCycleShorterThanTheRunCreatesNoRun) {
  tb::test::TempDir dir("tb_run_session_test");
  const fs::path db = dir.path() / "runs.sqlite";
  api::RunSpec spec = spec_for(db);
  spec.overrides = {"scheduler.kind=\"one_cycle\"", "scheduler.max_lr=0.1",
                    "scheduler.total_steps=6"};
  EXPECT_EQ(tb::test::error_of([&] { (void)api::execute_run(spec); }),
            "[config] side-by-side.toml: scheduler.total_steps = 6 is shorter than the 8 steps it "
            "is stepped (run.steps = 8): OneCycleLR would fail at step 7; give it 8 steps");
  EXPECT_TRUE(store::RunStore::open(db).list_runs().empty());
  // As long as the run, it trains.
  spec.overrides.back() = "scheduler.total_steps=8";
  EXPECT_EQ(api::execute_run(spec).status, "finished");
}

// The error of a new run of kConfig in `db` with `overrides`, which must leave no run stored.
std::string refused_new_run(const fs::path& db, std::vector<std::string> overrides) {
  api::RunSpec spec = spec_for(db);
  spec.overrides = std::move(overrides);
  const std::string error = tb::test::error_of([&] { (void)api::execute_run(spec); });
  EXPECT_TRUE(store::RunStore::open(db).list_runs().empty()) << error;
  return error;
}

// A tag is one line, as a name is (a NUL or newline in a tag was stored and split the table).
TEST(RunLifecycle, ATagWithAControlCharacterCreatesNoRun) {
  tb::test::TempDir dir("tb_run_session_test");
  EXPECT_EQ(refused_new_run(dir.path() / "runs.sqlite", {"run.tags=[\"ok\", \"a\\nb\"]"}),
            "[config] side-by-side.toml: run.tags: a tag is one line of text, without control "
            "characters (a newline, a tab, a NUL) (from --set run.tags=[\"ok\", \"a\\nb\"])");
}

// A checkpoint.dir that cannot be made is refused before a run is stored (the run failed at
// its set-up): here a file's name, a folder under a file.
TEST(RunLifecycle, ACheckpointFolderThatCannotBeMadeCreatesNoRun) {
  tb::test::TempDir dir("tb_run_session_test");
  const fs::path file = dir.path() / "a-file";
  std::ofstream(file) << "x";
  const std::string set = "checkpoint.dir=\"" + (file / "checkpoints").string() + "\"";
  EXPECT_EQ(refused_new_run(dir.path() / "runs.sqlite", {set}),
            "[config] side-by-side.toml: checkpoint.dir: " + (file / "checkpoints").string() +
                ": cannot make this folder (Not a directory) (from --set " + set + ")");
}

// A binding this machine cannot give is refused before a run is stored (the run was created and
// failed at set-up, exit 2): CPUs this process may not use, more exclusive slots than cores.
TEST(RunLifecycle, ABindingThisMachineCannotGiveCreatesNoRun) {
  tb::test::TempDir dir("tb_run_session_test");
  const fs::path db = dir.path() / "runs.sqlite";
  const std::string cpus = refused_new_run(db, {"binding.cpus=\"0-4095\""});
  EXPECT_EQ(cpus.rfind("[config] side-by-side.toml: binding.cpus '0-4095': CPUs ", 0), 0u) << cpus;
  EXPECT_NE(cpus.find(" are not allowed for this process (allowed: "), std::string::npos) << cpus;
  const std::string slots = refused_new_run(
      db, {"binding.mode=\"exclusive\"", "binding.slots=5000", "binding.slot=4999"});
  EXPECT_EQ(
      slots.rfind("[config] side-by-side.toml: binding.mode 'exclusive' (slot 4999 of 5000): ", 0),
      0u)
      << slots;
  EXPECT_NE(slots.find("(set binding.fallback = true to run unbound instead)"), std::string::npos)
      << slots;
}

// A schedule whose learning rate is no LR is refused before a run is stored, naming the key where
// one is at fault (PyTorch takes a NaN gamma and the run diverges), else the first step whose LR is
// NaN, infinite or negative.
TEST(RunLifecycle, AScheduleWithoutAUsableLrCreatesNoRun) {
  tb::test::TempDir dir("tb_run_session_test");
  const std::string at = "[config] side-by-side.toml: scheduler: ";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"{kind=\"cosine\", T_max=4, eta_min=nan}",
       "[lr_scheduler] cosine: field 'eta_min' expected a finite number, found nan"},
      {"{kind=\"exponential\", gamma=inf}",
       "[lr_scheduler] exponential: field 'gamma' expected a finite number, found inf"},
      {"{kind=\"one_cycle\", max_lr=nan, total_steps=8}",
       "[lr_scheduler] one_cycle: field 'max_lr' expected finite numbers, found nan"},
      {"{kind=\"lambda\", lr_lambda=\"1/epoch\"}",
       "kind = \"lambda\" gives lr.adamw = inf at step 0 (a learning rate must be a finite "
       "number >= 0); trainbench-cli schedule CONFIG shows the whole schedule"},
      {"{kind=\"step\", step_size=2, gamma=-1}",
       "kind = \"step\" gives lr.adamw = -0.01 at step 2 (a learning rate must be a finite "
       "number >= 0); trainbench-cli schedule CONFIG shows the whole schedule"}};
  for (const auto& [scheduler, error] : cases)
    EXPECT_EQ(refused_new_run(dir.path() / "runs.sqlite", {"scheduler=" + scheduler}), at + error)
        << scheduler;
}

// `launch` checks every config before it starts a process: a mistake in the last one does not
// surface after the others have started training.
TEST(Launch, EveryConfigIsCheckedBeforeAProcessStarts) {
  tb::test::TempDir dir("tb_run_session_test");
  const fs::path good = dir.path() / "good.toml";
  const fs::path bad = dir.path() / "bad.toml";
  std::ofstream(good) << kConfig;
  std::ofstream(bad) << kConfig << "[eval]\nintervl = 2\n";
  api::LaunchRequest req;
  req.program = "/bin/true";  // what would be started: nothing may be
  req.configs = {good.string(), bad.string()};
  req.nproc = 2;
  req.db_path = (dir.path() / "runs.sqlite").string();
  int started = 0;
  const std::string error = tb::test::error_of(
      [&] { (void)api::launch_runs(req, [&](const api::LaunchedProcess&) { ++started; }); });
  EXPECT_NE(error.find(bad.string() + ": unknown key 'eval.intervl'"), std::string::npos) << error;
  EXPECT_EQ(started, 0);
  req.configs = {good.string(), (dir.path() / "missing.toml").string()};
  const auto count = [&](const api::LaunchedProcess&) { ++started; };
  EXPECT_NE(tb::test::error_of([&] { (void)api::launch_runs(req, count); }).find("missing.toml"),
            std::string::npos);
  EXPECT_EQ(started, 0);
  // ... and so is what `run` checks before it creates a run: the files a config names.
  const fs::path gone = dir.path() / "gone.toml";
  std::ofstream(gone) << R"([run]
steps = 2
[data]
kind = "fashion-mnist"
path = "no-such-folder"
)";
  req.configs = {good.string(), gone.string()};
  const std::string missing = tb::test::error_of([&] { (void)api::launch_runs(req, count); });
  EXPECT_NE(missing.find("[config] " + gone.string() + ": data.path: "), std::string::npos)
      << missing;
  EXPECT_NE(missing.find("no-such-folder: no such file or folder"), std::string::npos) << missing;
  EXPECT_EQ(started, 0);
  req.configs = {good.string()};
  EXPECT_EQ(api::launch_runs(req, {}).size(), 2u);  // both processes run the good config
  // A stop asked for while the processes start (a sweep's Ctrl-C): the ones started are waited
  // for, no further one starts.
  req.nproc = 3;
  started = 0;
  req.stop_requested = [&] { return started >= 1; };
  const auto stopped = api::launch_runs(req, count);
  ASSERT_EQ(stopped.size(), 1u);
  EXPECT_EQ(stopped[0].slot, 0);
  EXPECT_EQ(stopped[0].exit_code, 0);
  EXPECT_EQ(started, 1);
}

// A process that has ended is announced while it is a zombie, before its pid is freed: the
// CLI's signal handlers forget it there, and never signal a stranger that was given the pid.
TEST(Launch, AnEndedProcessIsAnnouncedBeforeItsPidIsFreed) {
  tb::test::TempDir dir("tb_run_session_test");
  const fs::path good = dir.path() / "good.toml";
  std::ofstream(good) << kConfig;
  // A process that lives a while: heard of too early (before it ended), it would be "S".
  const fs::path program = dir.path() / "lives-a-while.sh";
  std::ofstream(program) << "#!/bin/sh\nsleep 0.3\n";
  fs::permissions(program, fs::perms::owner_all);
  api::LaunchRequest req;
  req.program = program.string();
  req.configs = {good.string()};
  req.nproc = 2;
  req.db_path = (dir.path() / "runs.sqlite").string();
  std::map<int, std::string> state;  // pid -> its state when announced ("Z": not reaped yet)
  req.on_exited = [&](int pid) {
    std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
    std::string line;
    std::getline(stat, line);
    const auto close = line.rfind(')');
    state[pid] = close == std::string::npos ? "gone" : line.substr(close + 2, 1);
  };
  const auto procs = api::launch_runs(req, {});
  ASSERT_EQ(procs.size(), 2u);
  ASSERT_EQ(state.size(), 2u);
  for (const auto& p : procs) {
    EXPECT_EQ(state[p.pid], "Z") << "pid " << p.pid;
    EXPECT_EQ(p.exit_code, 0);
    // ... and reaped after it.
    EXPECT_FALSE(fs::exists("/proc/" + std::to_string(p.pid)));
  }
}

// A sweep whose runs name a device this machine cannot use says so once, before it is stored
// (each trial would be refused, with the reason only in its log).
TEST(RunStoreReaders, ASweepOnADeviceThisMachineCannotUseCreatesNoStore) {
  tb::test::TempDir dir("tb_run_session_test");
  const std::string error = refused_sweep(
      dir.path(), "[sweep]\nname = \"dev\"\n[sweep.parameters]\n\"optimizer.lr\" = [0.01, 0.02]\n",
      {"run.device=\"openreg:7\""});
  EXPECT_NE(error.find("[sweep] run.device: 'openreg:7' (trial 0) cannot be used here"),
            std::string::npos)
      << error;
  EXPECT_FALSE(fs::exists(dir.path() / "new"));
}

// Text tables count terminal cells, not bytes: a name with "ü" or "名" kept its row's columns
// shifted by its extra bytes (std::setw counts bytes).
TEST(TextTables, WidthsAreTerminalCells) {
  EXPECT_EQ(api::display_width("abc"), 3u);
  EXPECT_EQ(api::display_width("m\xc3\xbc"
                               "on"),
            4u);                                                  // "müon": ü is 2 bytes, 1 cell
  EXPECT_EQ(api::display_width("e\xcc\x81"), 1u);                 // e + combining acute
  EXPECT_EQ(api::display_width("\xe5\x90\x8d\xe5\x89\x8d"), 4u);  // "名前": 2 wide characters
  EXPECT_EQ(api::display_width("\xf0\x9f\x9a\x80"), 2u);          // an emoji
  EXPECT_EQ(api::display_width("\xff"
                               "a"),
            2u);  // not UTF-8: a cell per byte
  EXPECT_EQ(api::pad_right("\xe5\x90\x8d", 4), "\xe5\x90\x8d  ");
  EXPECT_EQ(api::pad_left("\xc3\xbc", 3), "  \xc3\xbc");
  EXPECT_EQ(api::pad_right("toolong", 3), "toolong");
  EXPECT_EQ(api::fit_width("\xce\xb1\xce\xb2\xce\xb3\xce\xb4\xce\xb5\xce\xb6", 5),
            "\xce\xb1\xce\xb2...");  // αβγδεζ -> αβ...
  EXPECT_EQ(api::fit_width("\xe5\x90\x8d\xe5\x89\x8d\xe5\x90\x8d", 5), "\xe5\x90\x8d...");
  EXPECT_EQ(api::fit_width("\xe5\x90\x8d\xe5\x89\x8d\xe5\x90\x8d", 6),
            "\xe5\x90\x8d\xe5\x89\x8d\xe5\x90\x8d");  // 6 cells: fits
  EXPECT_EQ(api::fit_width("short", 5), "short");
}

TEST(TextTables, CompareLinesUpNamesThatAreNotAscii) {
  tb::test::TempDir dir("tb_run_session_test");
  const std::string db = (dir.path() / "runs.sqlite").string();
  for (const std::string name : {"m\xc3\xbc"
                                 "on-\xc3\xb1",
                                 "\xe5\x90\x8d\xe5\x89\x8d"})
    store_config_run(db, name, "[run]\nname = \"" + name + "\"\n");
  const std::string out = api::compare_runs(db, {1, 2});
  std::vector<std::string> lines;
  std::istringstream in(out);
  for (std::string line; std::getline(in, line);)
    lines.push_back(line);
  ASSERT_GT(lines.size(), 4u) << out;
  EXPECT_EQ(lines[1].rfind("name", 0), 0u) << out;
  EXPECT_EQ(api::display_width(lines[1]), api::display_width(lines[0])) << out;  // "run 1  run 2"
  for (const auto& line : lines) {
    if (line.rfind("  run.name", 0) == 0) {
      EXPECT_EQ(api::display_width(line), api::display_width(lines[0])) << out;
    }
  }
}

// Values that first differ past the column's width are cut in front, where they differ: cut at
// the end, both read ["fashion-mnist", "mlp", "m... on a row that says they differ.
TEST(TextTables, CompareShowsWhereLongValuesDiffer) {
  tb::test::TempDir dir("tb_run_session_test");
  const std::string db = (dir.path() / "runs.sqlite").string();
  for (const std::string last : {"alpha", "omega"})
    store_config_run(db, last,
                     "[run]\ntags = [\"fashion-mnist\", \"mlp\", \"muon\", \"" + last + "\"]\n");
  const std::string table = api::compare_runs(db, {1, 2});
  EXPECT_TRUE(std::regex_search(
      table,
      std::regex("\n  run\\.tags +\\.\\.\\.[^\n]*\"alpha\"\\] +\\.\\.\\.[^\n]*\"omega\"\\]\n")))
      << table;
  EXPECT_NE(table.find("(... : cut to the column"), std::string::npos) << table;
  // With a third run that differs early, the two that differ late are still told apart.
  store_config_run(db, "other", "[run]\ntags = [\"cifar\"]\n");
  const std::string three = api::compare_runs(db, {1, 2, 3});
  EXPECT_TRUE(std::regex_search(
      three, std::regex("\n  run\\.tags +\\.\\.\\.[^\n]*\"alpha\"\\] +\\.\\.\\.[^\n]*"
                        "\"omega\"\\] +\\[\"cifar\"\\]\n")))
      << three;
}

// Muon against AdamW: the keys only one run's config has (each optimizer's own table) are
// counted per section — listed with --all — so that the keys both have stand out.
TEST(TextTables, CompareCountsTheKeysOnlySomeRunsHave) {
  tb::test::TempDir dir("tb_run_session_test");
  const std::string db = (dir.path() / "runs.sqlite").string();
  for (const std::string kind : {"adamw", "muon"})
    store_config_run(db, kind, "[optimizer]\nkind = \"" + kind + "\"\n");
  // Run 3: AdamW at another learning rate.
  store_config_run(db, "adamw-fast", "[optimizer]\nkind = \"adamw\"\nlr = 0.003\n");
  const std::string folded = api::compare_runs(db, {1, 2});
  const auto has = [](const std::string& text, const std::string& pattern) {
    return std::regex_search(text, std::regex(pattern));
  };
  EXPECT_TRUE(has(folded, "\n  optimizer\\.kind ")) << folded;
  EXPECT_TRUE(has(folded, "\n  optimizer\\.\\* only in some +[0-9]+ keys +[0-9]+ keys\n"))
      << folded;
  EXPECT_TRUE(has(folded, "compare --all lists them")) << folded;
  EXPECT_FALSE(has(folded, "optimizer\\.muon\\.lr")) << folded;
  const std::string all = api::compare_runs(db, {1, 2}, /*all_keys=*/true);
  EXPECT_TRUE(has(all, "\n  optimizer\\.muon\\.lr +- +[0-9.e-]+\n")) << all;
  EXPECT_FALSE(has(all, "only in some")) << all;
  // Three runs: the two AdamW learning rates differ, so optimizer.lr is listed (with "-" for the
  // Muon run), not folded away.
  const std::string three = api::compare_runs(db, {1, 2, 3});
  EXPECT_TRUE(has(three, "\n  optimizer\\.lr +0\\.001 +- +0\\.003\n")) << three;
  EXPECT_TRUE(has(three, "optimizer\\.\\* only in some")) << three;
}

namespace {

// A rung's decision on hand-made scores: 4 points, one of which lost a seed (ranks where its
// mean puts it, but stops whatever the rule says) and one whose trials all ended (the worst
// score: it takes one of the places that stop).
TEST(SweepRungs, APointThatLostASeedStopsAndAnEndedOneTakesALosingPlace) {
  const double inf = std::numeric_limits<double>::infinity();
  const std::vector<std::pair<double, std::int64_t>> scores = {
      {0.30, 0}, {0.10, 1}, {0.20, 2}, {inf, 3}};
  // Successive halving, factor 2: keep 2 of 4; p1 lost a seed (its live seed's 0.10 leads).
  auto sh = api::detail::rung_decision(scores, {1}, "successive_halving", 2.0, /*max=*/false);
  EXPECT_EQ(sh.rule, "keep the best 2 of 4; a point that lost a seed is stopped");
  EXPECT_EQ(sh.ranked.front().second, 1);
  EXPECT_EQ(sh.stop, (std::set<std::int64_t>{0, 1, 3}));  // p2 alone goes on
  // Without the lost seed: the best two go on, the ended point is among those stopped.
  auto plain = api::detail::rung_decision(scores, {}, "successive_halving", 2.0, false);
  EXPECT_EQ(plain.stop, (std::set<std::int64_t>{0, 3}));
  // Median of the four (0.25): worse ones stop, and a point that lost a seed stops too.
  auto median = api::detail::rung_decision(scores, {2}, "median", 2.0, false);
  EXPECT_EQ(median.stop, (std::set<std::int64_t>{0, 2, 3}));
  // Goal max: the order turns around.
  auto up = api::detail::rung_decision({{0.9, 0}, {0.8, 1}}, {}, "successive_halving", 2.0, true);
  EXPECT_EQ(up.stop, (std::set<std::int64_t>{1}));
}

// A rung's decision taken again on `sweep --resume` (a trial that failed at the rung last time
// has run to it now) says what happened, whatever the rule says now: a point that went on past
// the rung, or finished, was not stopped there; one stopped there before stays stopped.
TEST(SweepRungs, ADecisionTakenAgainKeepsToWhatHappened) {
  auto trial = [](std::int64_t index, std::int64_t point, store::RunStatus status,
                  std::int64_t last, std::optional<std::int64_t> stopped = std::nullopt) {
    store::SweepTrialRecord t;
    t.trial = index;
    t.point = point;
    t.run_id = index + 1;
    t.run_status = status;
    t.last_step = last;
    t.stopped_step = stopped;
    return t;
  };
  using S = store::RunStatus;
  const std::vector<store::SweepTrialRecord> trials = {
      trial(0, 0, S::kCancelled, 100),        // failed at the rung last time, there now
      trial(1, 1, S::kFinished, 400),         // kept last time, finished since
      trial(2, 2, S::kCancelled, 100, 100),   // stopped at the rung last time
      trial(3, 3, S::kCancelled, 300),        // kept last time, went on (interrupted since)
      trial(4, 4, S::kCancelled, 50, 50),     // stopped at an earlier rung
      trial(5, 5, S::kFailed, 80),            // ended: not this function's business
      trial(6, 2, S::kCancelled, 100, 100)};  // p2's other seed, stopped with it
  // Now the rule keeps p0 and p2 and stops p1, p3 and p5.
  api::detail::RungDecision d;
  d.stop = {1, 3, 5};
  api::detail::settle_rung_stops(d, trials, 100, /*ended=*/{5});
  EXPECT_EQ(d.stop, (std::set<std::int64_t>{2, 5}));
  // A point with one seed stopped here and one going on is the rule's to decide.
  auto mixed = trials;
  mixed[6].stopped_step.reset();
  api::detail::RungDecision again;
  api::detail::settle_rung_stops(again, mixed, 100, {5});
  EXPECT_TRUE(again.stop.empty());
}

// The table's best point is one whose every seed finished: a point whose other seed diverged
// (its mean of the seed left looked best) follows the whole ones, then the stopped ones.
TEST(SweepRungs, AWholePointOutranksOneThatLostASeed) {
  std::vector<api::SweepPointRow> points(4);
  points[0].point = 0;  // both seeds finished, 1.6
  points[0].runs = 2;
  points[0].finished = 2;
  points[0].mean = 1.6;
  points[1].point = 1;  // one seed diverged; the other's 0.9 looked best
  points[1].runs = 2;
  points[1].finished = 1;
  points[1].mean = 0.9;
  points[2].point = 2;  // stopped early
  points[2].runs = 2;
  points[2].stopped = 10;
  points[2].stopped_value = 0.5;
  points[3].point = 3;  // both finished, 2.0
  points[3].runs = 2;
  points[3].finished = 2;
  points[3].mean = 2.0;
  api::rank_sweep_points(points, /*max=*/false);
  std::vector<std::int64_t> order;
  for (const auto& p : points)
    order.push_back(p.point);
  EXPECT_EQ(order, (std::vector<std::int64_t>{0, 3, 1, 2}));
}

}  // namespace
