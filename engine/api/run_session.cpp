// The run lifecycle (see run_session.h): the store run, the trainer with its sinks and control,
// resume, and the end status on every path.
#include "engine/api/run_session.h"

#include <chrono>
#include <filesystem>
#include <mutex>

#include "engine/api/api_detail.h"
#include "engine/core/error.h"
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

// Every logged step's metrics for the observer; wall_s counts from the first logged step.
class ObserverSink final : public train::MetricSink {
 public:
  ObserverSink(std::int64_t run, std::int64_t total, std::function<void(const StepMetrics&)> cb)
      : run_(run), total_(total), cb_(std::move(cb)) {}
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
  bool started_ = false;
  std::chrono::steady_clock::time_point t0_;
};

// Where the run starts from: a new run's config, or a stored run and the checkpoint it resumes.
struct Start {
  train::RunConfig config;
  std::int64_t run_id = 0;
  std::filesystem::path checkpoint;  // resume only
  std::string store_id;
  std::string store_name;  // the file name, for folder names and messages
};

Start prepare(const RunSpec& spec, const std::filesystem::path& db) {
  Start s;
  auto st = store::RunStore::open(db);
  s.store_id = st.store_id();
  s.store_name = db.filename().string();
  if (!spec.resume) {
    s.config = train::parse_run_config(spec.config_text, spec.source, spec.overrides);
    store::NewRun nr;
    nr.name = s.config.run.name;
    nr.tags = s.config.run.tags;
    nr.config = train::to_toml(s.config);
    nr.seed = s.config.run.seed;
    s.run_id = st.create_run(nr);
    return s;
  }
  s.run_id = *spec.resume;
  TB_CHECK(st.has_run(s.run_id), "[run] ", db.string(), " has no run ", s.run_id);
  const std::string text =
      spec.config_text.empty() ? st.get_run(s.run_id).config : spec.config_text;
  const std::string source = spec.config_text.empty()
                                 ? "run " + std::to_string(s.run_id) + "'s stored config"
                                 : spec.source;
  s.config = train::parse_run_config(text, source, spec.overrides);
  if (!spec.resume_checkpoint.empty()) {
    s.checkpoint = spec.resume_checkpoint;
  } else {
    const auto cks = st.checkpoints(s.run_id);
    TB_CHECK(!cks.empty(), "[run] run ", s.run_id, " has no checkpoint to resume from");
    s.checkpoint = cks.back().path;
  }
  return s;
}

}  // namespace

RunOutcomeInfo execute_run(const RunSpec& spec, const RunObserver& observer) {
  const auto db = detail::store_path(spec.db_path);
  const Start start = prepare(spec, db);
  const bool resuming = spec.resume.has_value();
  RunOutcomeInfo out;
  out.run_id = start.run_id;
  out.resumed = resuming;
  auto fail = [&](const std::string& message) {
    out.status = "failed";
    out.message = message;
    if (!resuming) detail::mark_failed(db, start.run_id, message);
    return out;
  };
  // From here on every failure ends the run failed (a created run is never left queued).
  std::unique_ptr<train::Trainer> trainer;
  try {
    trainer = std::make_unique<train::Trainer>(
        start.config,
        detail::checkpoint_dir(start.config, db, start.store_name, start.store_id, start.run_id));
    trainer->set_checkpoint_owner(start.store_id + "/" + std::to_string(start.run_id),
                                  "run " + std::to_string(start.run_id) + " of store " +
                                      start.store_name + " (id " + start.store_id + ")");
    if (resuming) {
      trainer->resume_from(start.checkpoint);
      out.from_step = trainer->steps_done();
    }
  } catch (const std::exception& e) {
    return fail(e.what());
  }
  std::unique_ptr<store::RunWriter> writer;
  try {
    writer = std::make_unique<store::RunWriter>(db, start.run_id);
  } catch (const std::exception& e) {
    return fail(e.what());
  }
  auto store_sink = std::make_shared<detail::StoreSink>(*writer);
  trainer->add_sink(store_sink);
  trainer->add_sink(
      std::make_shared<ObserverSink>(start.run_id, trainer->total_steps(), observer.on_metrics));
  out.description = trainer->describe();
  train::TrainResult r;
  {
    ControlBinding binding(spec.control.get(), *trainer);
    try {
      if (resuming)
        store_sink->on_event("info", "resumed from " + start.checkpoint.string() + " at step " +
                                         std::to_string(out.from_step));
      if (observer.on_start) observer.on_start(start.run_id, out.description);
      r = trainer->run();
    } catch (const std::exception& e) {
      r.outcome = train::RunOutcome::kFailed;
      r.message = e.what();
    }
  }
  out.status = train::outcome_name(r.outcome);
  out.message = r.message;
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

}  // namespace tb::api
