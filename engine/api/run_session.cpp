// The run lifecycle (see run_session.h): the store run, the trainer with its sinks and control,
// resume, and the end status on every path.
#include "engine/api/run_session.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <mutex>

#include <nlohmann/json.hpp>

#include "engine/api/api_detail.h"
#include "engine/api/engine_api.h"
#include "engine/api/launch_api.h"
#include "engine/api/workbench_api.h"
#include "engine/core/device.h"
#include "engine/core/error.h"
#include "engine/dist/process_group.h"
#include "engine/store/run_store.h"
#include "engine/store/run_writer.h"
#include "engine/train/run_config.h"
#include "engine/train/trainer.h"

namespace tb::api {

// ---- RunControl ---------------------------------------------------------------------------------

/// The control state and, while a run runs, its trainer.
struct RunControl::Impl {
  std::mutex mutex;                   ///< guards the fields below
  bool cancelled = false;             ///< cancel() was called
  bool paused = false;                ///< held by pause()
  train::Trainer* trainer = nullptr;  ///< the running trainer, null before and after
};

RunControl::RunControl() : impl_(std::make_unique<Impl>()) {}
RunControl::~RunControl() = default;

void RunControl::cancel() {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  impl_->cancelled = true;
  impl_->paused = false;
  if (impl_->trainer) {
    impl_->trainer->cancel();
    // A paused trainer waits for resume(); wake it so that it sees the cancel.
    impl_->trainer->resume();
  }
}

void RunControl::pause() {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  if (impl_->cancelled) return;
  impl_->paused = true;
  if (impl_->trainer) impl_->trainer->pause();
}

void RunControl::resume() {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  impl_->paused = false;
  if (impl_->trainer) impl_->trainer->resume();
}

bool RunControl::cancelled() const {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  return impl_->cancelled;
}

bool RunControl::paused() const {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  return impl_->paused;
}

namespace {

// Binds a RunControl to a trainer for the binding's lifetime, applying earlier requests.
class ControlBinding {
 public:
  ControlBinding(RunControl* control, train::Trainer& trainer) : control_(control) {
    if (!control_) return;
    std::lock_guard<std::mutex> lock(control_->impl_->mutex);
    control_->impl_->trainer = &trainer;
    if (control_->impl_->cancelled) trainer.cancel();
    if (control_->impl_->paused) trainer.pause();
  }
  ~ControlBinding() {
    if (!control_) return;
    std::lock_guard<std::mutex> lock(control_->impl_->mutex);
    control_->impl_->trainer = nullptr;
  }
  ControlBinding(const ControlBinding&) = delete;
  ControlBinding& operator=(const ControlBinding&) = delete;

 private:
  RunControl* control_;
};

// Every logged step's metrics for the observer; wall_s counts from the first logged point (the
// store's origin too: live and stored points share the wall-time axis).
class ObserverSink final : public train::MetricSink {
 public:
  ObserverSink(std::int64_t run, std::int64_t total, std::function<void(const StepMetrics&)> cb,
               std::function<void(const std::string&, const std::string&)> on_event)
      : run_(run), total_(total), cb_(std::move(cb)), on_event_(std::move(on_event)) {}
  void on_event(const std::string& level, const std::string& text) override {
    // Warnings only: an error event is the run's failure, which is its outcome.
    if (on_event_ && level == "warning") on_event_(level, text);
  }
  // The outcome is execute_run's result, not an event for the observer.
  void on_outcome(const std::string&, const std::string&) override {}
  void on_metrics(std::int64_t step, const train::Metrics& m) override {
    if (!cb_) return;
    const auto now = std::chrono::steady_clock::now();
    if (!started_) {
      t0_ = now;
      started_ = true;
    }
    StepMetrics s;
    s.run_id = run_;
    s.step = step;
    s.total = total_;
    s.wall_s = std::chrono::duration<double>(now - t0_).count();
    s.values = m;
    cb_(s);
  }

 private:
  std::int64_t run_;
  std::int64_t total_;
  std::function<void(const StepMetrics&)> cb_;
  std::function<void(const std::string&, const std::string&)> on_event_;
  bool started_ = false;
  std::chrono::steady_clock::time_point t0_;
};

// Where the run starts from: a new run's config, or a stored run and the checkpoint it resumes.
struct Start {
  train::RunConfig config;
  std::int64_t run_id = 0;
  std::filesystem::path checkpoint;  // resume only
  // A resume: the stored config as this build writes it (one from an older build may lack keys
  // added since: not a change), the effective one it runs with (init_from still set), and
  // whether its name and tags differ from the stored config's.
  std::string stored_config, resumed_config;
  bool renamed = false, retagged = false;
  std::string store_id;
  std::string store_name;    // the file name, for folder names and messages
  bool sweep_trial = false;  // the run is a sweep's trial (new or resumed)
};

Start prepare(const RunSpec& spec, const std::filesystem::path& db) {
  Start s;
  // A new run creates its store; a resumed one names a store that is not there (a mistyped --db
  // would otherwise leave an empty store behind before "no run N").
  auto st = spec.resume ? detail::existing_store(db.string()) : store::RunStore::open(db);
  s.store_id = st.store_id();
  s.store_name = db.filename().string();
  if (!spec.resume) {
    s.config = train::parse_run_config(spec.config_text, spec.source, spec.overrides);
    train::make_paths_absolute(s.config);
    detail::check_new_run(s.config, spec.source, spec.overrides);
    store::NewRun nr;
    nr.name = s.config.run.name;
    nr.tags = s.config.run.tags;
    nr.config = train::to_toml(s.config);
    nr.seed = s.config.run.seed;
    nr.sweep_trial = spec.sweep_trial;
    s.run_id = st.create_run(nr);
    return s;
  }
  s.run_id = *spec.resume;
  detail::require_run(st, s.run_id);
  const store::RunDetails stored = st.get_run(s.run_id, store::RunStore::Metrics::kNone);
  s.sweep_trial = stored.summary.sweep_id.has_value();
  detail::require_resumable(stored, s.run_id, "[run]", st.recovery_error());
  const std::string text = spec.config_text.empty() ? stored.config : spec.config_text;
  const std::string source = spec.config_text.empty()
                                 ? "run " + std::to_string(s.run_id) + "'s stored config"
                                 : spec.source;
  s.config = train::parse_run_config(text, source, spec.overrides);
  // A data-parallel run goes on over its ranks; one process alone would be refused by the
  // trainer ("needs a process group") without the command that does it.
  if (s.config.distributed.backend != "none" && !started_as_rank()) {
    std::int64_t ranks = s.config.distributed.world_size;
    if (ranks == 0) ranks = detail::ranks_in_metrics(st.metric_keys(s.run_id));
    throw ValueError(tb::detail::str_cat(
        "[run] run ", s.run_id, " is a data-parallel run (distributed.backend '",
        s.config.distributed.backend, "'",
        ranks > 0 ? tb::detail::str_cat(", ", ranks, " ranks") : std::string(),
        "): continue it over its ranks with trainbench-cli launch --ddp --resume ", s.run_id));
  }
  // As a new run's (a stored one's are already absolute; a config file's relative paths are
  // read from this folder, as they always were).
  train::make_paths_absolute(s.config);
  s.resumed_config = train::to_toml(s.config);
  try {
    train::RunConfig was = train::parse_run_config(stored.config, source);
    train::make_paths_absolute(was);
    s.stored_config = train::to_toml(was);
    s.renamed = was.run.name != s.config.run.name;
    s.retagged = was.run.tags != s.config.run.tags;
  } catch (const std::exception&) {  // unreadable: the resume's own parse said why, or will
    s.stored_config = stored.config;
  }
  // A new name is one line, as a new run's (checked here, before other ranks are told to
  // start; a stored one from before the rule is left alone).
  if (s.renamed)
    for (const char ch : s.config.run.name)
      TB_CHECK(static_cast<unsigned char>(ch) >= 0x20 && ch != 0x7f, "[config] ", source,
               ": run.name: a run name is one line of text, without control characters (a "
               "newline, a tab)",
               detail::from_set(spec.overrides, "run.name"));
  // The checkpoint replaces the weights init_from would load: not read again (it may be gone).
  s.config.run.init_from.clear();
  // A data.path (or tokenizer model) that is not there is a config error naming the key, as for
  // a new run, not the loader's "cannot open" once the data is read.
  try {
    detail::check_run_files(s.config, source, spec.overrides);
  } catch (const ValueError& e) {
    // Data that moved (a store copied to another machine) may be named anew on resume.
    throw ValueError(std::string(e.what()) +
                     "; if the data moved, name its new place: run --resume " +
                     std::to_string(s.run_id) + " --set data.path=... (or data.val_path, " +
                     "data.tokenizer_model)");
  }
  if (!spec.resume_checkpoint.empty()) {
    s.checkpoint = spec.resume_checkpoint;
  } else {
    // Without checkpoints on the way (checkpoint.interval = 0, the shipped configs' setting: one
    // at the end only) a crashed or killed run has nothing to continue from: say which key.
    std::string none = "has no checkpoint to resume from";
    if (s.config.checkpoint.interval <= 0)
      none +=
          " (checkpoint.interval = 0 saves one only at the end; set checkpoint.interval = N "
          "to save every N steps, so that a run cut short can continue)";
    s.checkpoint = detail::newest_checkpoint(st, s.run_id, "[run]", none).path;
  }
  // A stop at or before the checkpoint's step would never be met (the run would train to its
  // end). Checked here, before a distributed run's other ranks are told to start.
  if (spec.stop_at > 0) {
    std::ifstream in(s.checkpoint / "state.json");
    const nlohmann::json state = nlohmann::json::parse(in, nullptr, false);
    const std::int64_t at =
        state.is_object() && state.contains("step") && state["step"].is_number_integer()
            ? state["step"].get<std::int64_t>()
            : -1;  // unreadable: resume_from() says why
    TB_CHECK(at < 0 || spec.stop_at > at, "[run] --stop-at ", spec.stop_at, ": run ", s.run_id,
             " resumes at step ", at, " (", s.checkpoint.filename().string(),
             "); give a later step");
  }
  return s;
}

}  // namespace

namespace {

// A distributed rank's CPU slot: its rank on its host, among the ranks there.
void place_rank(train::RunConfig& c, const std::shared_ptr<dist::ProcessGroup>& group) {
  if (!group || group->size() == 1 || c.binding.mode == "none" || !c.binding.cpus.empty()) return;
  const dist::LaunchEnv env = dist::detect_launch_env();
  c.binding.slot = env.local_rank;
  c.binding.slots = env.local_size;
}

// The process group when this process is a rank of a distributed run (the config's
// distributed.backend; with a stored config, the launcher's environment), else null.
std::shared_ptr<dist::ProcessGroup> make_group(const RunSpec& spec) {
  const dist::LaunchEnv env = dist::detect_launch_env();
  dist::GroupOptions o;
  o.backend = "none";
  std::int64_t world_size = 0;
  if (!spec.config_text.empty()) {
    const auto c = train::parse_run_config(spec.config_text, spec.source, spec.overrides);
    o.backend = c.distributed.backend;
    o.timeout_s = c.distributed.timeout_s;
    if (o.backend == "nccl") o.device_index = core::Device::parse(c.run.device).index();
    world_size = c.distributed.world_size;
  } else if (!env.launcher.empty()) {
    o.backend = "mpi";
  }
  if (o.backend != "none" && env.launcher.empty()) {
    // Not started as a rank (the GUI, a plain `trainbench-cli run`): one rank, in process —
    // through NCCL itself when asked (a communicator of one), else the single-process group.
    TB_CHECK(world_size <= 1, "[run] distributed.world_size = ", world_size,
             ": start the ranks with trainbench-cli launch CONFIG --ddp --nproc ", world_size,
             " (a process started on its own is one rank)");
    if (o.backend != "nccl") o.backend = "single";
  }
  if (o.backend == "none") {
    TB_CHECK(env.size <= 1, "[run] this process is rank ", env.rank, " of ", env.size,
             " (started by ", env.launcher, ") but distributed.backend is none: set ",
             "distributed.backend = \"mpi\" (trainbench-cli launch --ddp does)");
    return nullptr;
  }
  return dist::make_process_group(o);
}

// What decides a CPU run's float32 products beyond its config (Trainer::set_numerics): the GEMM
// library, and OpenBLAS's thread count (its blocking, so its sums, follow it; oneDNN's and the
// reference kernels' are the same at every count). None off the CPU. A data-parallel run's
// checkpoint holds rank 0's, which each rank compares with its own.
std::function<std::string()> numerics_of(const train::RunConfig& c) {
  if (core::Device::parse(c.run.device).type() != core::DeviceType::CPU) return {};
  return [] {
    const std::string gemm = current_gemm_backend();
    if (gemm != "openblas") return "GEMM " + gemm;  // oneDNN's and our own sums ignore threads
    const int threads = num_threads();  // as the run's threads or binding sized the pool
    return "GEMM " + gemm + " at " + std::to_string(threads) +
           (threads == 1 ? " thread" : " threads");
  };
}

// A rank other than 0: no store; the config, checkpoint and owner come from rank 0.
RunOutcomeInfo execute_rank(const RunSpec& spec, const std::shared_ptr<dist::ProcessGroup>& group) {
  RunOutcomeInfo out;
  const nlohmann::json start =
      nlohmann::json::parse(group->broadcast_string("", 0, "the run's start"));
  out.run_id = start.value("run_id", std::int64_t{0});
  if (!start.value("ok", false)) {
    out.status = "failed";
    out.message = "rank 0 could not start the run: " + start.value("error", std::string());
    return out;
  }
  std::unique_ptr<train::Trainer> trainer;
  std::int64_t stop_at = 0;
  try {
    train::RunConfig config =
        train::parse_run_config(start.at("config").get<std::string>(), "rank 0's effective config");
    place_rank(config, group);
    trainer = std::make_unique<train::Trainer>(config, std::filesystem::path(), group);
    trainer->set_checkpoint_owner(start.at("owner_key").get<std::string>(),
                                  start.at("owner").get<std::string>());
    // Rank 0's --stop-at, so that every rank ends after the same step: a rank that went on
    // alone waited in the next step's gradient exchange for one that had left it.
    stop_at = start.value("stop_at", std::int64_t{0});
    trainer->set_stop_at(stop_at);
    trainer->set_numerics(numerics_of(config));
    const std::string checkpoint = start.value("checkpoint", std::string());
    if (!checkpoint.empty()) {
      trainer->resume_from(checkpoint);
      out.resumed = true;
      out.from_step = trainer->steps_done();
    }
  } catch (const std::exception& e) {
    out.status = "failed";
    out.message = e.what();
    return out;
  }
  out.description = trainer->describe();
  train::TrainResult r;
  {
    ControlBinding binding(spec.control.get(), *trainer);
    r = trainer->run();
  }
  out.status = train::outcome_name(r.outcome);
  out.message = r.message;
  out.stopped_as_asked =
      r.outcome == train::RunOutcome::kCancelled && stop_at > 0 && r.steps == stop_at;
  return out;
}

}  // namespace

RunOutcomeInfo execute_run(const RunSpec& spec, const RunObserver& observer) {
  const std::shared_ptr<dist::ProcessGroup> group = make_group(spec);
  if (group && group->rank() != 0) return execute_rank(spec, group);
  const auto db = detail::store_path(spec.db_path);
  Start start;
  try {
    start = prepare(spec, db);
  } catch (const std::exception& e) {
    if (group) {  // the other ranks wait for the start: tell them why there is none
      nlohmann::json j = {{"ok", false}, {"error", e.what()}};
      group->broadcast_string(j.dump(), 0, "the run's start");
    }
    throw;
  }
  const std::string owner_key = start.store_id + "/" + std::to_string(start.run_id);
  const std::string owner = "run " + std::to_string(start.run_id) + " of store " +
                            start.store_name + " (id " + start.store_id + ")";
  const bool resuming = spec.resume.has_value();
  RunOutcomeInfo out;
  out.run_id = start.run_id;
  out.resumed = resuming;
  out.sweep_trial = start.sweep_trial || spec.sweep_trial.has_value();
  // A new run that cannot start ends failed in the store. A resume that cannot start is refused
  // (an error, as for a finished run or one without a checkpoint): the stored run stays as it was.
  auto fail = [&](const std::exception& e) {
    if (resuming) throw;
    out.status = "failed";
    out.message = e.what();
    detail::mark_failed(db, start.run_id, out.message);
    return out;
  };
  // From here on every failure ends the run failed (a created run is never left queued).
  std::unique_ptr<train::Trainer> trainer;
  try {
    train::RunConfig config = start.config;
    if (group) {
      // Every other rank builds its trainer from this: the effective config, the owner of the
      // checkpoints and the checkpoint to resume.
      const nlohmann::json j = {{"ok", true},
                                {"run_id", start.run_id},
                                {"config", train::to_toml(start.config)},
                                {"owner_key", owner_key},
                                {"owner", owner},
                                {"checkpoint", start.checkpoint.string()},
                                {"stop_at", spec.stop_at}};
      group->broadcast_string(j.dump(), 0, "the run's start");
      place_rank(config, group);
    }
    trainer = std::make_unique<train::Trainer>(
        config,
        detail::checkpoint_dir(start.config, db, start.store_name, start.store_id, start.run_id),
        group);
    trainer->set_checkpoint_owner(owner_key, owner);
    trainer->set_stop_at(spec.stop_at);
    trainer->set_numerics(numerics_of(config));
    if (resuming) {
      trainer->resume_from(start.checkpoint);
      out.from_step = trainer->steps_done();
    }
  } catch (const std::exception& e) {
    return fail(e);
  }
  // What this resume changes in the stored config: "key: old -> new" each.
  std::vector<std::string> changed;
  if (resuming)
    for (const ConfigDiffRow& row : api::config_diff({start.stored_config, start.resumed_config}))
      changed.push_back(row.key + ": " + row.values[0] + " -> " + row.values[1]);
  std::unique_ptr<store::RunWriter> writer;
  try {
    store::WriterOptions wo;
    // What the store holds past the checkpoint is a timeline this resume replaces.
    if (resuming) wo.resume_after = out.from_step;
    // The keys a resume may change (name, tags, threads, checkpointing, where the data is; the
    // trainer refused the others) are stored with it: the stored config describes what runs,
    // and a later resume without --set continues with them. A name or tags set in the GUI since
    // stay unless the resume changed them.
    if (resuming && !changed.empty()) {
      store::WriterOptions::Relabel relabel;
      relabel.config = start.resumed_config;
      if (start.renamed) relabel.name = start.config.run.name;
      if (start.retagged) relabel.tags = start.config.run.tags;
      wo.relabel = std::move(relabel);
    }
    writer = std::make_unique<store::RunWriter>(db, start.run_id, wo);
  } catch (const std::exception& e) {
    return fail(e);
  }
  auto store_sink = std::make_shared<detail::StoreSink>(*writer);
  trainer->add_sink(store_sink);
  trainer->add_sink(std::make_shared<ObserverSink>(start.run_id, trainer->total_steps(),
                                                   observer.on_metrics, observer.on_event));
  out.description = trainer->describe();
  train::TrainResult r;
  {
    ControlBinding binding(spec.control.get(), *trainer);
    try {
      // A job of `launch --ddp` (or the GUI) names itself in the ranks' environment: recorded
      // with the run, it tells that launcher which run is its own once the job has ended.
      // (Committed at once: rank 0 killed in its first steps still leaves the mark.)
      if (const char* job = std::getenv(kLaunchJobVariable);
          group && job != nullptr && *job && started_as_rank()) {
        store_sink->on_event("info", std::string(kLaunchJobEvent) + job);
        writer->flush();
      }
      if (resuming) {
        const store::WriterStats ws = writer->stats();
        std::string text = "resumed from " + start.checkpoint.string() + " at step " +
                           std::to_string(out.from_step);
        if (ws.removed_points > 0 || ws.removed_checkpoints > 0)
          text +=
              "; removed what the store held after that step, from the continuation this "
              "resume replaces: " +
              std::to_string(ws.removed_points) + " metric points, " +
              std::to_string(ws.removed_checkpoints) + " checkpoint records";
        if (!changed.empty()) {
          text += "; with changed settings, now stored with the run: ";
          for (std::size_t i = 0; i < changed.size(); ++i)
            text += (i ? ", " : "") + changed[i];
        }
        store_sink->on_event("info", text);
      }
      // A resume says where it goes on from before the table (the event above says it too).
      if (observer.on_start)
        observer.on_start(start.run_id,
                          resuming ? "continuing from step " + std::to_string(out.from_step) +
                                         " (" + start.checkpoint.string() + ")\n" + out.description
                                   : out.description);
      r = trainer->run();
    } catch (const std::exception& e) {
      r.outcome = train::RunOutcome::kFailed;
      r.message = e.what();
    }
  }
  out.status = train::outcome_name(r.outcome);
  out.message = r.message;
  out.stopped_as_asked =
      r.outcome == train::RunOutcome::kCancelled && spec.stop_at > 0 && r.steps == spec.stop_at;
  try {
    writer->set_status(store::run_status_from_string(out.status), r.message);
    writer->close();
  } catch (const std::exception& e) {
    // The store could not take the end of the run: report it (the writer's close marks the run
    // failed if it can).
    out.status = "failed";
    out.message = std::string("the run store failed: ") + e.what();
  }
  return out;
}

bool started_as_rank() {
  return !dist::detect_launch_env().launcher.empty();
}

int launch_rank() {
  const auto env = dist::detect_launch_env();
  return env.launcher.empty() ? -1 : env.rank;
}

void notify_termination(int signal_number) noexcept {
  dist::notify_termination(signal_number);
}

void end_distributed(bool failed) noexcept {
  if (failed) {
    dist::abort_world(2);
  } else {
    try {
      dist::finalize();
    } catch (...) {  // nothing left to report to
    }
  }
}

}  // namespace tb::api
