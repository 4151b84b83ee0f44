// Trainer: determinism (same seed -> same losses bit for bit, whatever the loader threads),
// checkpoint resume equal to an uninterrupted run, Muon/AdamW split runs with the Newton–Schulz
// share, bf16/fp16 autocast with loss scaling, SWA/EMA evaluation, divergence, cancel, a
// language-model run with perplexity, and configuration errors.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <string>
#include <vector>

#include "engine/core/thread_pool.h"
#ifdef TB_HAVE_OPENBLAS
#include <cblas.h>
#endif
#include "engine/core/error.h"
#include "engine/core/math_mode.h"
#include "engine/numa/affinity.h"
#include "engine/numa/binding.h"
#include "engine/numa/topology_hwloc.h"
#include "engine/train/run_config.h"
#include "engine/train/trainer.h"
#include "tests/engine/test_util.h"

namespace {

namespace fs = std::filesystem;
namespace train = tb::train;
using tb::test::error_of;

// Records every step's loss and every metric of the last step.
struct Recorder : train::MetricSink {
  std::mutex mu;
  std::vector<std::pair<std::int64_t, double>> losses;
  train::Metrics last;
  std::vector<std::string> events;
  std::function<void(std::int64_t)> on_step;
  void on_metrics(std::int64_t step, const train::Metrics& m) override {
    std::lock_guard<std::mutex> lock(mu);
    for (const auto& [k, v] : m)
      if (k == "loss") losses.emplace_back(step, v);
    last = m;
    if (on_step) on_step(step);
  }
  void on_event(const std::string& level, const std::string& text) override {
    std::lock_guard<std::mutex> lock(mu);
    events.push_back(level + ": " + text);
  }
  double metric(const std::string& key) {
    for (const auto& [k, v] : last)
      if (k == key) return v;
    return std::nan("");
  }
};

train::RunConfig blobs_config() {
  train::RunConfig c;
  c.run.seed = 5;
  c.run.steps = 30;
  c.data.kind = "synthetic-blobs";
  c.data.batch_size = 32;
  c.data.workers = 0;
  tb::nn::MlpConfig m;
  m.input = 16;
  m.hidden = {32};
  m.classes = 4;
  m.dropout = 0.1;  // the dropout generator's state must resume too
  c.model = m;
  c.optimizer.main = tb::train::OptimizerSettings("adamw");
  c.optimizer.main.set("lr", 1e-2);
  c.scheduler.config = {{"kind", "cosine"}, {"T_max", 30}};
  c.eval.interval = 10;
  return c;
}

// A CNN of one conv block on 4x4 synthetic blobs (4 classes): `channels` filters, without
// pooling; the tests add their own sections.
std::string tiny_cnn_toml(int steps, int seed, int channels, int batch_size) {
  return "[run]\nsteps = " + std::to_string(steps) + "\nseed = " + std::to_string(seed) +
         "\n[model]\nkind = \"cnn\"\ninput = [1, 4, 4]\nchannels = [" + std::to_string(channels) +
         "]\nconvs_per_block = 1\npool = \"none\"\nclasses = 4\n[data]\nkind = "
         "\"synthetic-blobs\"\nbatch_size = " +
         std::to_string(batch_size) + "\nworkers = 0\n";
}

std::vector<std::pair<std::int64_t, double>> run_losses(train::RunConfig c,
                                                        const fs::path& ckdir = {},
                                                        const fs::path& resume = {}) {
  train::Trainer t(std::move(c), ckdir);
  auto rec = std::make_shared<Recorder>();
  t.add_sink(rec);
  if (!resume.empty()) t.resume_from(resume);
  const auto r = t.run();
  EXPECT_EQ(r.outcome, train::RunOutcome::kFinished) << r.message;
  return rec->losses;
}

TEST(Trainer, DeterministicWhateverTheLoaderThreads) {
  const auto a = run_losses(blobs_config());
  const auto b = run_losses(blobs_config());
  auto c4 = blobs_config();
  c4.data.workers = 4;
  const auto c = run_losses(c4);
  ASSERT_EQ(a.size(), 30u);
  EXPECT_EQ(a, b);
  EXPECT_EQ(a, c);
  EXPECT_LT(a.back().second, a.front().second);
}

TEST(Trainer, ResumeEqualsAnUninterruptedRun) {
  const fs::path dir = fs::temp_directory_path() / "tb_trainer_resume";
  fs::remove_all(dir);
  auto cfg = blobs_config();
  cfg.checkpoint.interval = 12;
  cfg.checkpoint.keep = 5;
  const auto full = run_losses(cfg, dir);
  ASSERT_TRUE(fs::exists(dir / "step-00000012" / "model.safetensors"));
  ASSERT_TRUE(fs::exists(dir / "step-00000030" / "state.json"));
  const auto resumed = run_losses(cfg, {}, dir / "step-00000012");
  ASSERT_EQ(resumed.size(), 18u);
  using Losses = std::vector<std::pair<std::int64_t, double>>;
  EXPECT_EQ(resumed, Losses(full.begin() + 12, full.end()));
  // Placed elsewhere ([binding]: another slot and CPU list, as a launcher or a sweep resumes a
  // run wherever a slot is free) it is the same run, with the same losses.
  auto moved = cfg;
  moved.binding.slot = 1;
  moved.binding.slots = 2;
  moved.binding.cpus = "0";
  moved.binding.mode = "exclusive";
  EXPECT_EQ(run_losses(moved, {}, dir / "step-00000012"), resumed);
  // So is a run with other threads, loader workers, checkpointing, name, tags or logging (a run
  // of threads = 16 resumed on a smaller machine): none changes a value it computes.
  auto retuned = cfg;
  retuned.threads = 1;
  retuned.data.workers = 2;
  retuned.checkpoint.interval = 5;
  retuned.checkpoint.keep = 1;
  retuned.run.name = "renamed";
  retuned.run.tags = {"again"};
  EXPECT_EQ(run_losses(retuned, {}, dir / "step-00000012"), resumed);
  // Another config refuses the checkpoint, naming only the key that may not change: the threads
  // and log interval changed with it are allowed, and left out of the list.
  auto other = cfg;
  other.optimizer.main.set("lr", 0.5);
  other.threads = 1;
  other.run.log_interval = 7;
  train::Trainer t(other);
  const std::string refused = error_of([&] { t.resume_from(dir / "step-00000012"); });
  EXPECT_NE(refused.find("was written by a run with another config (optimizer.lr: "),
            std::string::npos)
      << refused;  // the key that differs is named, with both values
  EXPECT_NE(refused.find(" in the checkpoint, 0.5 now)"), std::string::npos) << refused;
  // Another optimizer kind is named first, before the keys that differ with it (in key order it
  // came after them, hidden among "and N more").
  auto sgd = cfg;
  sgd.optimizer.main = tb::train::OptimizerSettings("sgd");
  sgd.optimizer.main.set("lr", 0.1);
  sgd.optimizer.main.set("momentum", 0.5);
  train::Trainer u(sgd);
  const std::string kind = error_of([&] { u.resume_from(dir / "step-00000012"); });
  EXPECT_NE(kind.find("another config (optimizer.kind: \"adamw\" in the checkpoint, \"sgd\" now;"),
            std::string::npos)
      << kind;
  fs::remove_all(dir);
}

// A checkpoint says what computed its products (Trainer::set_numerics: the GEMM library, and
// OpenBLAS's threads); a resume under other numerics warns that it is not bit for bit (another
// --gemm-backend gave other values from the next step on, silently).
TEST(Trainer, AResumeUnderOtherNumericsSaysItIsNotBitForBit) {
  const tb::test::TempDir dir("tb_trainer_numerics");
  auto cfg = blobs_config();
  cfg.run.steps = 6;
  cfg.checkpoint.interval = 3;
  {
    train::Trainer t(cfg, dir.path());
    t.set_numerics([] { return std::string("GEMM openblas at 2 threads"); });
    ASSERT_EQ(t.run().outcome, train::RunOutcome::kFinished);
  }
  auto warnings = [&](const std::string& now) {
    train::Trainer t(cfg);
    auto rec = std::make_shared<Recorder>();
    t.add_sink(rec);
    t.set_numerics([now] { return now; });
    t.resume_from(dir.path() / "step-00000003");
    EXPECT_EQ(t.run().outcome, train::RunOutcome::kFinished);
    std::vector<std::string> out;
    for (const auto& e : rec->events)
      if (e.rfind("warning: ", 0) == 0) out.push_back(e);
    return out;
  };
  EXPECT_TRUE(warnings("GEMM openblas at 2 threads").empty());
  const auto other = warnings("GEMM onednn");
  ASSERT_EQ(other.size(), 1u);
  EXPECT_NE(other[0].find("the checkpoint was written computing with GEMM openblas at 2 threads, "
                          "this process computes with GEMM onednn: the continuation may differ"),
            std::string::npos)
      << other[0];
}

// A store moved to a machine that keeps the data elsewhere resumes with the new data.path (it was
// refused as another config), bit for bit, warning that this holds only for the same data; data
// of another size is refused by the loader's state.
TEST(Trainer, AResumeMayReadItsDataFromAnotherPath) {
  const tb::test::TempDir dir("tb_trainer_moved_data");
  std::string text;
  for (int i = 0; i < 200; ++i)
    text += "line " + std::to_string(i * 7919 % 1000) + " of the corpus\n";
  const fs::path a = dir.path() / "a.txt", b = dir.path() / "b.txt", c = dir.path() / "c.txt";
  std::ofstream(a) << text;
  std::ofstream(b) << text;
  std::ofstream(c) << text << text;
  auto config = [&](const fs::path& data) {
    return train::parse_run_config(
        "[run]\nsteps = 6\nlog_interval = 1\n[model]\nkind = \"qwen-tiny\"\nd_model = 16\n"
        "n_layers = 1\nn_heads = 2\ncontext_length = 16\n[data]\nkind = \"text\"\npath = \"" +
            data.string() +
            "\"\ncontext_length = 16\nbatch_size = 4\nworkers = 0\n[optimizer]\nkind = "
            "\"adamw\"\n[checkpoint]\ninterval = 3\n",
        "moved");
  };
  const fs::path ck = dir.path() / "ck";
  const auto full = run_losses(config(a), ck);
  ASSERT_EQ(full.size(), 6u);
  train::Trainer t(config(b));
  auto rec = std::make_shared<Recorder>();
  t.add_sink(rec);
  t.resume_from(ck / "step-00000003");
  ASSERT_EQ(t.run().outcome, train::RunOutcome::kFinished);
  EXPECT_EQ(rec->losses, decltype(full)(full.begin() + 3, full.end()));
  bool warned = false;
  for (const auto& e : rec->events)
    warned = warned || e.find("warning: data.path is " + b.string() +
                              " where the checkpoint's run read " + a.string()) == 0;
  EXPECT_TRUE(warned) << ::testing::PrintToString(rec->events);
  train::Trainer bigger(config(c));
  EXPECT_NE(error_of([&] { bigger.resume_from(ck / "step-00000003"); }).find("samples"),
            std::string::npos);
}

// A checkpoint appears under its name only when whole: written into a hidden ".partial" sibling,
// synced, renamed; re-saving a step replaces the folder as a whole (no stale file survives).
TEST(Trainer, CheckpointFoldersAppearWholeOrNotAtAll) {
  const tb::test::TempDir dir("tb_trainer_ckpt_atomic");
  auto cfg = blobs_config();
  cfg.run.steps = 4;
  train::Trainer t(cfg, dir.path());
  ASSERT_EQ(t.run().outcome, train::RunOutcome::kFinished);
  const fs::path ck = dir.path() / "step-00000004";
  ASSERT_TRUE(fs::exists(ck / "state.json"));
  // A save killed midway leaves only a hidden folder, which the next save clears; a stale file
  // in an existing checkpoint does not survive a re-save.
  fs::create_directories(dir.path() / ".step-00000004.partial");
  std::ofstream(dir.path() / ".step-00000004.partial" / "model.safetensors") << "half";
  std::ofstream(ck / "stale.txt") << "from an older save";
  t.save_checkpoint(ck);
  EXPECT_FALSE(fs::exists(ck / "stale.txt"));
  EXPECT_TRUE(fs::exists(ck / "model.safetensors"));
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir.path()))
    names.push_back(e.path().filename().string());
  EXPECT_EQ(names, std::vector<std::string>{"step-00000004"});
  train::Trainer again(cfg);
  EXPECT_NO_THROW(again.resume_from(ck));
}

TEST(Trainer, MuonSplitRunLearnsAndReportsMetrics) {
  auto cfg = blobs_config();
  cfg.optimizer.main = tb::train::OptimizerSettings("muon");
  cfg.optimizer.main.set("lr", 0.02);
  cfg.optimizer.main.set("momentum", 0.95);
  cfg.optimizer.main.set("nesterov", true);
  cfg.optimizer.main.set("weight_decay", 0.0);
  cfg.optimizer.adamw = train::OptimizerSettings{};
  cfg.optimizer.adamw->set("lr", 1e-2);
  train::Trainer t(cfg);
  EXPECT_NE(t.describe().find("layers.0.weight"), std::string::npos);
  EXPECT_NE(t.describe().find("muon"), std::string::npos);
  auto rec = std::make_shared<Recorder>();
  t.add_sink(rec);
  const auto r = t.run();
  ASSERT_EQ(r.outcome, train::RunOutcome::kFinished) << r.message;
  EXPECT_LT(rec->losses.back().second, 0.5 * rec->losses.front().second);
  EXPECT_GT(rec->metric("eval.accuracy"), 0.8);
  EXPECT_FALSE(std::isnan(rec->metric("lr.muon.0")));
  EXPECT_FALSE(std::isnan(rec->metric("lr.adamw.0")));
  EXPECT_GT(rec->metric("time.step_ms"), 0.0);
  EXPECT_GT(rec->metric("grad_norm"), 0.0);
  // The Newton–Schulz share is part of the optimizer time.
  EXPECT_GT(rec->metric("time.newton_schulz_ms"), 0.0);
  EXPECT_LT(rec->metric("time.newton_schulz_ms"), rec->metric("time.optimizer_ms"));
}

// The scheduler's learning rates are Muon's; AdamW's optimizer gets them scaled by its own lr
// (both used to anneal to the same swa_lr).
TEST(Trainer, MuonRunsScaleTheSchedulersLearningRatesForAdamW) {
  auto cfg = blobs_config();
  cfg.optimizer.main = tb::train::OptimizerSettings("muon");
  cfg.optimizer.main.set("lr", 0.02);
  cfg.optimizer.adamw = train::OptimizerSettings{};
  cfg.optimizer.adamw->set("lr", 1e-2);
  cfg.scheduler.config = {{"kind", "swa"}, {"swa_lr", 0.004}, {"anneal_epochs", 5}};
  train::Trainer t(cfg);
  auto rec = std::make_shared<Recorder>();
  t.add_sink(rec);
  ASSERT_EQ(t.run().outcome, train::RunOutcome::kFinished);
  EXPECT_NEAR(rec->metric("lr.muon.0"), 0.004, 1e-15);
  EXPECT_NEAR(rec->metric("lr.adamw.0"), 0.002, 1e-15);
}

TEST(Trainer, Bf16AutocastChangesTheNumbersButStillLearnsDeterministically) {
  auto cfg = blobs_config();
  const auto fp32 = run_losses(cfg);
  cfg.amp.enabled = true;
  cfg.amp.dtype = "bf16";
  const auto a = run_losses(cfg);
  const auto b = run_losses(cfg);
  ASSERT_EQ(a.size(), 30u);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, fp32);  // the matmuls really ran in bfloat16
  // ... yet close to the float32 run (bf16 keeps ~3 significant digits).
  EXPECT_NEAR(a.front().second, fp32.front().second, 2e-2 * std::abs(fp32.front().second));
  EXPECT_LT(a.back().second, 0.5 * a.front().second);
}

TEST(Trainer, Fp16WithGradScalerReportsTheLossScaleAndResumesBitForBit) {
  const fs::path dir = fs::temp_directory_path() / "tb_trainer_amp_resume";
  fs::remove_all(dir);
  auto cfg = blobs_config();
  cfg.amp.enabled = true;
  cfg.amp.dtype = "fp16";
  cfg.amp.grad_scaler = true;
  cfg.checkpoint.interval = 10;
  train::Trainer t(cfg, dir);
  auto rec = std::make_shared<Recorder>();
  t.add_sink(rec);
  const auto r = t.run();
  ASSERT_EQ(r.outcome, train::RunOutcome::kFinished) << r.message;
  const double scale = rec->metric("loss_scale");
  ASSERT_FALSE(std::isnan(scale));
  EXPECT_LE(scale, 65536.0);
  EXPECT_EQ(scale, std::exp2(std::round(std::log2(scale))));  // halvings of 2^16 only
  EXPECT_LT(rec->losses.back().second, 0.5 * rec->losses.front().second);
  const auto resumed = run_losses(cfg, {}, dir / "step-00000010");
  using Losses = std::vector<std::pair<std::int64_t, double>>;
  EXPECT_EQ(resumed, Losses(rec->losses.begin() + 10, rec->losses.end()));
  fs::remove_all(dir);
}

// optimizer.weight_decay_params = "matrices": biases and norm weights train in a second group
// without weight decay (nanoGPT's configure_optimizers); nothing else changes.
TEST(Trainer, WeightDecayOnMatricesOnlyPutsTheRestInAGroupWithoutIt) {
  auto cfg = blobs_config();
  cfg.model.fields["dropout"] = 0.0;
  cfg.optimizer.main.set("weight_decay", 0.0);
  const auto plain = run_losses(cfg);
  cfg.optimizer.weight_decay_params = "matrices";
  EXPECT_EQ(run_losses(cfg), plain);  // without decay the two groups train as one
  cfg.optimizer.main.set("weight_decay", 0.5);
  train::Trainer t(cfg);
  auto rec = std::make_shared<Recorder>();
  t.add_sink(rec);
  ASSERT_EQ(t.run().outcome, train::RunOutcome::kFinished);
  // The second group is a group of its own, at the same learning rate.
  EXPECT_EQ(rec->metric("lr.adamw.1"), rec->metric("lr.adamw.0"));
  bool noted = false;
  for (const auto& e : rec->events)
    noted |= e.find(
                 "adamw: 2 tensors of fewer than 2 dimensions (36 values: biases, norm "
                 "weights) train without weight decay") != std::string::npos;
  EXPECT_TRUE(noted);
  cfg.optimizer.weight_decay_params = "all";
  EXPECT_NE(run_losses(cfg), rec->losses);  // the biases were decayed before
}

// threads = N holds while the run lives, and the process's count is as before afterwards: a GUI
// run with threads = 2 left the whole workbench at 2 threads.
TEST(Trainer, ARunsThreadCountEndsWithTheRun) {
  const tb::core::ScopedNumThreads outer(1);
  {
    auto cfg = blobs_config();
    cfg.threads = 2;
    cfg.run.steps = 2;
    train::Trainer t(cfg);
    EXPECT_EQ(tb::core::num_threads(), 2);
    ASSERT_EQ(t.run().outcome, train::RunOutcome::kFinished);
  }
  EXPECT_EQ(tb::core::num_threads(), 1);
}

TEST(Trainer, EmaWithDecayZeroEvaluatesTheModelItself) {
  auto cfg = blobs_config();
  cfg.swa.kind = "ema";
  cfg.swa.ema_decay = 0.0;  // the average is the latest weights
  train::Trainer t(cfg);
  auto rec = std::make_shared<Recorder>();
  t.add_sink(rec);
  ASSERT_EQ(t.run().outcome, train::RunOutcome::kFinished);
  EXPECT_EQ(rec->metric("eval_ema.loss"), rec->metric("eval.loss"));
  EXPECT_EQ(rec->metric("eval_ema.accuracy"), rec->metric("eval.accuracy"));
}

// A BatchNorm model's averaged weights are evaluated with statistics that fit them: averaged
// with the weights (swa.use_buffers, the default), or recomputed over the training split
// (update_bn). They were the live model's, so eval_swa/eval_ema said averaging hurt when it
// helped.
TEST(Trainer, AveragedWeightsOfABatchNormModelGetTheirOwnStatistics) {
  const std::string toml = tiny_cnn_toml(20, 3, 4, 16) + R"(
[eval]
interval = 20
[swa]
kind = "swa"
start_step = 20
)";
  // The average of one model (the last step's) is that model: with its buffers averaged too it
  // evaluates as the model; with the live statistics replaced by ones recomputed over the
  // training split (one pass, cumulative), it does not.
  const auto eval_of = [&](bool use_buffers) {
    auto cfg = train::parse_run_config(toml, "cnn.toml");
    cfg.swa.use_buffers = use_buffers;
    train::Trainer t(cfg);
    auto rec = std::make_shared<Recorder>();
    t.add_sink(rec);
    const auto r = t.run();
    EXPECT_EQ(r.outcome, train::RunOutcome::kFinished) << r.message;
    return std::make_pair(rec->metric("eval.loss"), rec->metric("eval_swa.loss"));
  };
  const auto [model_loss, averaged_loss] = eval_of(true);
  EXPECT_FALSE(std::isnan(averaged_loss));
  EXPECT_EQ(averaged_loss, model_loss);
  const auto [model_loss2, recomputed_loss] = eval_of(false);
  EXPECT_EQ(model_loss2, model_loss);  // the averaging does not touch the run
  EXPECT_FALSE(std::isnan(recomputed_loss));
  EXPECT_NE(recomputed_loss, model_loss);
  // Without BatchNorm there is nothing to recompute: the setting changes nothing.
  auto mlp = blobs_config();
  mlp.swa.kind = "ema";
  mlp.swa.ema_decay = 0.0;
  mlp.swa.use_buffers = false;
  train::Trainer t(mlp);
  auto rec = std::make_shared<Recorder>();
  t.add_sink(rec);
  ASSERT_EQ(t.run().outcome, train::RunOutcome::kFinished);
  EXPECT_EQ(rec->metric("eval_ema.loss"), rec->metric("eval.loss"));
}

TEST(Trainer, SwaAveragesFromItsStartStepAndResumes) {
  const fs::path dir = fs::temp_directory_path() / "tb_trainer_swa_resume";
  fs::remove_all(dir);
  auto cfg = blobs_config();
  cfg.swa.kind = "swa";
  cfg.swa.start_step = 15;
  cfg.swa.every = 5;
  cfg.checkpoint.interval = 20;
  train::Trainer t(cfg, dir);
  std::vector<train::Metrics> evals;
  struct EvalRecorder : train::MetricSink {
    std::vector<train::Metrics>* out;
    void on_metrics(std::int64_t, const train::Metrics& m) override {
      for (const auto& [k, v] : m)
        if (k == "eval.loss") out->push_back(m);
    }
  };
  auto er = std::make_shared<EvalRecorder>();
  er->out = &evals;
  t.add_sink(er);
  ASSERT_EQ(t.run().outcome, train::RunOutcome::kFinished);
  ASSERT_EQ(evals.size(), 3u);  // steps 10, 20, 30
  auto value = [](const train::Metrics& m, const std::string& key) {
    for (const auto& [k, v] : m)
      if (k == key) return v;
    return std::nan("");
  };
  EXPECT_TRUE(std::isnan(value(evals[0], "eval_swa.loss")));  // nothing averaged before step 15
  EXPECT_FALSE(std::isnan(value(evals[1], "eval_swa.loss")));
  // The average of the weights at steps 15, 20, 25, 30 differs from the final weights.
  EXPECT_NE(value(evals[2], "eval_swa.loss"), value(evals[2], "eval.loss"));
  ASSERT_TRUE(fs::exists(dir / "step-00000020" / "average.safetensors"));
  train::Trainer resumed(cfg);
  std::vector<train::Metrics> evals2;
  auto er2 = std::make_shared<EvalRecorder>();
  er2->out = &evals2;
  resumed.add_sink(er2);
  resumed.resume_from(dir / "step-00000020");
  ASSERT_EQ(resumed.run().outcome, train::RunOutcome::kFinished);
  ASSERT_EQ(evals2.size(), 1u);
  EXPECT_EQ(value(evals2[0], "eval_swa.loss"), value(evals[2], "eval_swa.loss"));
  fs::remove_all(dir);
}

TEST(Trainer, Tf32IsTheRunsOwnSettingOnItsThread) {
  // amp.tf32 holds for the run's steps (its thread) and not after; the process-wide setting
  // stays off throughout. The setting lives in core, so this holds with or without CUDA.
  auto c = blobs_config();
  c.run.steps = 3;
  c.amp.tf32 = true;
  train::Trainer t(c);
  auto rec = std::make_shared<Recorder>();
  std::vector<bool> seen;
  rec->on_step = [&](std::int64_t) { seen.push_back(tb::core::allow_tf32()); };
  t.add_sink(rec);
  ASSERT_EQ(t.run().outcome, train::RunOutcome::kFinished);
  EXPECT_EQ(seen, std::vector<bool>(3, true));
  EXPECT_FALSE(tb::core::allow_tf32());
  EXPECT_TRUE(train::parse_run_config(train::to_toml(c)).amp.tf32);  // stored with the run
}

TEST(Trainer, NonFiniteLossesEndTheRunAsDiverged) {
  auto cfg = blobs_config();
  cfg.optimizer.main = tb::train::OptimizerSettings("sgd");
  cfg.optimizer.main.set("lr", 1e30);
  cfg.optimizer.main.set("weight_decay", 0.0);
  cfg.run.max_nonfinite = 20;
  cfg.run.log_interval = 10;
  cfg.scheduler.config = nullptr;
  train::Trainer t(cfg);
  auto rec = std::make_shared<Recorder>();
  t.add_sink(rec);
  const auto r = t.run();
  EXPECT_EQ(r.outcome, train::RunOutcome::kDiverged) << r.message;
  EXPECT_NE(r.message.find("20 non-finite losses in a row"), std::string::npos) << r.message;
  // The skips are reported at the 1st, 2nd, 4th, 8th and 16th in a row, not 20 times alike.
  std::vector<std::string> skips;
  for (const auto& e : rec->events)
    if (e.find("step skipped") != std::string::npos) skips.push_back(e);
  ASSERT_EQ(skips.size(), 5u) << ::testing::PrintToString(rec->events);
  EXPECT_EQ(skips[0].find(" in a row"), std::string::npos) << skips[0];
  EXPECT_NE(skips[4].find("step skipped (16 in a row; the run stops at 20, run.max_nonfinite); "
                          "the next batch tries step "),
            std::string::npos)
      << skips[4];
  // NaN as "nan" (printf's "-nan" for a NaN with its sign bit set read as a number).
  EXPECT_NE(skips[0].find("non-finite loss (nan)"), std::string::npos) << skips[0];
  // It diverged before its first logged step (10): the last step it completed is logged, so the
  // run keeps a loss to look at.
  ASSERT_GT(r.steps, 0);
  ASSERT_LT(r.steps, 10);
  ASSERT_EQ(rec->losses.size(), 1u);
  EXPECT_EQ(rec->losses[0].first, r.steps);
  EXPECT_TRUE(std::isfinite(rec->losses[0].second));
}

// 20 steps, an evaluation every 5, and a plateau with patience 0 and an absolute threshold no
// improvement meets: every evaluation after the first halves the LR.
train::RunConfig plateau_config() {
  auto cfg = blobs_config();
  cfg.run.steps = 20;
  cfg.eval.interval = 5;
  cfg.scheduler.config = {{"kind", "plateau"},
                          {"patience", 0},
                          {"factor", 0.5},
                          {"threshold", 100.0},
                          {"threshold_mode", "abs"}};
  return cfg;
}

// scheduler.kind = "plateau" steps on eval.loss after each evaluation (it failed every run at its
// first step: ReduceLROnPlateau.step() needs the metric).
TEST(Trainer, APlateauSchedulerStepsOnTheEvalLoss) {
  train::Trainer t(plateau_config());
  struct Lrs : train::MetricSink {
    std::vector<std::pair<std::int64_t, double>> lr;
    void on_metrics(std::int64_t step, const train::Metrics& m) override {
      for (const auto& [k, v] : m)
        if (k == "lr.adamw.0") lr.emplace_back(step, v);
    }
  };
  auto lrs = std::make_shared<Lrs>();
  t.add_sink(lrs);
  const auto r = t.run();
  ASSERT_EQ(r.outcome, train::RunOutcome::kFinished) << r.message;
  ASSERT_EQ(lrs->lr.size(), 20u);
  for (const auto& [step, lr] : lrs->lr) {
    const double want = step <= 10 ? 1e-2 : step <= 15 ? 5e-3 : 2.5e-3;
    EXPECT_DOUBLE_EQ(lr, want) << "step " << step;
  }
}

// Stopped at a step between evaluations and resumed, a plateau run is the uninterrupted one bit
// for bit: the extra evaluation of the stop step does not step the plateau.
TEST(Trainer, APlateauRunStoppedAndResumedEqualsAnUninterruptedOne) {
  const tb::test::TempDir dir("tb_trainer_plateau_resume");
  // Each evaluation after the first halves the LR: one more (the stop step's) would halve it
  // from step 8 on.
  const auto cfg = plateau_config();
  const auto full = run_losses(cfg);
  {
    train::Trainer t(cfg, dir.path());
    t.set_stop_at(7);
    const auto r = t.run();
    ASSERT_EQ(r.outcome, train::RunOutcome::kCancelled) << r.message;
  }
  const auto resumed = run_losses(cfg, {}, dir.path() / "step-00000007");
  using Losses = std::vector<std::pair<std::int64_t, double>>;
  EXPECT_EQ(resumed, Losses(full.begin() + 7, full.end()));
}

// A stop past the run's last step is never met: the run trains to its end, and says so.
TEST(Trainer, AStopPastTheLastStepIsSaid) {
  auto cfg = blobs_config();
  cfg.run.steps = 10;
  train::Trainer t(cfg);
  t.set_stop_at(50);
  auto rec = std::make_shared<Recorder>();
  t.add_sink(rec);
  const auto r = t.run();
  EXPECT_EQ(r.outcome, train::RunOutcome::kFinished) << r.message;
  EXPECT_EQ(r.steps, 10);
  EXPECT_NE(std::find(rec->events.begin(), rec->events.end(),
                      "warning: the stop at step 50 is past the run's last step, 10: it trains "
                      "to its end"),
            rec->events.end())
      << ::testing::PrintToString(rec->events);
}

TEST(Trainer, CancelFromAnotherThread) {
  train::Trainer t(blobs_config());
  auto rec = std::make_shared<Recorder>();
  rec->on_step = [&](std::int64_t step) {
    if (step == 5) t.cancel();
  };
  t.add_sink(rec);
  t.start();
  const auto r = t.wait();
  EXPECT_EQ(r.outcome, train::RunOutcome::kCancelled);
  EXPECT_EQ(r.steps, 5);
}

TEST(Trainer, LanguageModelReportsPerplexity) {
  train::RunConfig c;
  c.run.steps = 8;
  c.data.kind = "synthetic-text";
  c.data.batch_size = 4;
  c.data.context_length = 16;
  c.data.workers = 0;
  tb::nn::QwenTinyConfig q;
  q.d_model = 32;
  q.n_layers = 1;
  q.n_heads = 2;
  q.context_length = 16;
  c.model = q;
  c.optimizer.main.set("lr", 3e-3);
  c.eval.batches = 2;
  train::Trainer t(c);
  auto rec = std::make_shared<Recorder>();
  t.add_sink(rec);
  const auto r = t.run();
  ASSERT_EQ(r.outcome, train::RunOutcome::kFinished) << r.message;
  EXPECT_GT(rec->metric("tokens_per_s"), 0.0);
  EXPECT_NEAR(rec->metric("eval.perplexity"), std::exp(rec->metric("eval.loss")), 1e-9);
}

// A `gpt` on an llm.c token file (uint16 tokens above 255, a padded table) with Muon: the
// config path a user takes, and the loss falls on a learnable sequence.
TEST(Trainer, GptLearnsFromAnLlmcTokenFile) {
  tb::test::TempDir tmp("tb_trainer_gpt");
  const fs::path file = tmp.path() / "train.bin";
  {
    std::vector<std::int32_t> header(256, 0);
    header[0] = 20240520;
    header[1] = 1;
    header[2] = 6000;
    std::ofstream out(file, std::ios::binary);
    out.write(reinterpret_cast<const char*>(header.data()), 1024);
    for (int i = 0; i < 6000; ++i) {
      const auto t = static_cast<std::uint16_t>(250 + (i * 7) % 45);  // a cycle of 45 tokens
      out.write(reinterpret_cast<const char*>(&t), 2);
    }
  }
  const std::string toml = R"(
[run]
steps = 60
seed = 3
[model]
kind = "gpt"
vocab = 300
padded_vocab = 320
context_length = 16
n_layers = 1
n_heads = 2
d_model = 32
[data]
kind = "tokens"
path = ")" + file.string() +
                           R"("
context_length = 16
vocab = 300
batch_size = 8
workers = 0
[optimizer]
kind = "muon"
[optimizer.muon]
lr = 0.02
[optimizer.adamw]
lr = 0.003
[eval]
interval = 60
batches = 2
)";
  train::Trainer t(train::parse_run_config(toml, "gpt.toml"));
  auto rec = std::make_shared<Recorder>();
  t.add_sink(rec);
  const auto r = t.run();
  ASSERT_EQ(r.outcome, train::RunOutcome::kFinished) << r.message;
  ASSERT_FALSE(rec->losses.empty());
  EXPECT_NEAR(rec->losses.front().second, std::log(300.0), 0.5);  // starts near uniform
  EXPECT_LT(rec->losses.back().second, 1.0);                      // the cycle is learnt
  EXPECT_LT(rec->metric("eval.loss"), 1.0);
}

// Muon with conv_filters = "flatten" trains a CNN's filters (the table says so).
TEST(Trainer, MuonFlattensConvFiltersWhenAsked) {
  const std::string toml = tiny_cnn_toml(25, 2, 8, 32) + R"(
[optimizer]
kind = "muon"
[optimizer.muon]
lr = 0.02
conv_filters = "flatten"
)";
  train::Trainer t(train::parse_run_config(toml, "cnn.toml"));
  auto rec = std::make_shared<Recorder>();
  t.add_sink(rec);
  const auto r = t.run();
  ASSERT_EQ(r.outcome, train::RunOutcome::kFinished) << r.message;
  EXPECT_LT(rec->losses.back().second, rec->losses.front().second);
  const std::string table = t.describe();
  const auto at = table.find("blocks.0.convs.0.0.weight");
  ASSERT_NE(at, std::string::npos) << table;
  const std::string line = table.substr(at, table.find('\n', at) - at);
  EXPECT_NE(line.find("[8, 1, 3, 3]"), std::string::npos) << line;
  EXPECT_NE(line.find("muon   conv filter as [out, in*kh*kw]"), std::string::npos) << line;
}

TEST(Trainer, ConfigurationErrorsBeforeAnyStep) {
  auto cfg = blobs_config();
  // A batch larger than the data with drop_last: no batch at all ("the data loader produced no
  // batch" at the first step, naming no key).
  cfg.data.drop_last = true;
  cfg.data.batch_size = 100000;
  EXPECT_NE(error_of([&] { train::Trainer t(cfg); })
                .find("[data] data.batch_size = 100000 with data.drop_last = true leaves no batch "
                      "of the "),
            std::string::npos);
  // A model larger than any memory is said with its section (it was "std::bad_alloc").
  cfg = blobs_config();
  cfg.model.fields["hidden"] = {3000000, 3000000};  // 9e12 weights
  EXPECT_NE(error_of([&] { train::Trainer t(cfg); })
                .find("[model] model.kind = \"mlp\" with these sizes needs more memory than there "
                      "is ("),
            std::string::npos);
  cfg = blobs_config();
  cfg.data.kind = "synthetic-text";
  EXPECT_NE(error_of([&] { train::Trainer t(cfg); }).find("does not fit data.kind"),
            std::string::npos);
  cfg = blobs_config();
  cfg.run.device = "cuda";
  EXPECT_NE(error_of([&] { train::Trainer t(cfg); }).find("run.device 'cuda'"), std::string::npos);
  cfg = blobs_config();
  cfg.binding.mode = "exclusive";
  cfg.binding.slots = 4096;  // more slots than any machine's cores
  cfg.binding.slot = 7;
  const std::string e = error_of([&] { train::Trainer t(cfg); });
  EXPECT_NE(e.find("binding.mode 'exclusive' (slot 7 of 4096)"), std::string::npos) << e;
  EXPECT_NE(e.find("binding.fallback = true"), std::string::npos) << e;
  // A scheduler's per-group list against groups the config does not show: they are named.
  cfg = blobs_config();
  cfg.optimizer.weight_decay_params = "matrices";
  cfg.scheduler.config = {{"kind", "cyclic"}, {"base_lr", {0.001}}, {"max_lr", {0.01}}};
  const std::string groups = error_of([&] { train::Trainer t(cfg); });
  EXPECT_NE(groups.find("base_lr has 1 values, param_groups has 2. A list gives one value per "
                        "parameter group, in order; adamw has 2 groups: the tensors of 2 or more "
                        "dimensions with weight decay, then the rest without"),
            std::string::npos)
      << groups;
}

// The warnings a run of `c` gives ("warning: ..." events), after it finished.
std::vector<std::string> warnings_of(const train::RunConfig& c) {
  train::Trainer t(c);
  auto rec = std::make_shared<Recorder>();
  t.add_sink(rec);
  EXPECT_EQ(t.run().outcome, train::RunOutcome::kFinished);
  std::vector<std::string> out;
  for (const auto& ev : rec->events)
    if (ev.rfind("warning: ", 0) == 0) out.push_back(ev);
  return out;
}

// Settings that would do nothing are said once, at set-up: a matrix optimizer with no matrix, an
// average that starts after the last step, a loss scaler without mixed precision.
TEST(Trainer, SettingsThatDoNothingAreWarnedAbout) {
  EXPECT_TRUE(warnings_of(blobs_config()).empty());
  auto cfg = blobs_config();  // 30 steps
  cfg.model.fields["hidden"] = nlohmann::json::array();
  cfg.optimizer.main = train::OptimizerSettings("muon");
  EXPECT_EQ(warnings_of(cfg),
            std::vector<std::string>{
                "warning: optimizer.kind = \"muon\" takes the 2-D hidden matrices, and this model "
                "has none (optimizer.split and the model's layers decide): adamw trains every "
                "parameter"});
  cfg = blobs_config();
  cfg.swa.kind = "swa";
  cfg.swa.start_step = 31;
  EXPECT_EQ(warnings_of(cfg),
            std::vector<std::string>{
                "warning: swa.start_step = 31 is after the run's last step (run.steps = 30): no "
                "swa average is taken and no eval_swa metrics are written"});
  cfg.swa.start_step = 30;  // the last step updates the average: one is taken
  EXPECT_TRUE(warnings_of(cfg).empty());
  cfg = blobs_config();
  cfg.eval.batches = 50;  // 512 held-out blobs in batches of 32: 16
  EXPECT_EQ(warnings_of(cfg), std::vector<std::string>{
                                  "warning: eval.batches = 50 is more than the evaluation split's "
                                  "16 batches of 32: each evaluation reads those 16"});
  cfg.eval.batches = 16;
  EXPECT_TRUE(warnings_of(cfg).empty());
  cfg = blobs_config();
  cfg.amp.grad_scaler = true;
  EXPECT_EQ(warnings_of(cfg), std::vector<std::string>{
                                  "warning: amp.grad_scaler = true does nothing with amp.enabled = "
                                  "false (nothing is computed in reduced precision, so no loss is "
                                  "scaled)"});
}

// A schedule measured against the steps it is stepped: a one-cycle schedule that would fail at
// its end (OneCycleLR raises "Tried to step ...", as PyTorch's does) is refused before any step;
// a cosine that would climb back up after T_max (CosineAnnealingLR is periodic) is a warning,
// for a scheduler nested in SequentialLR against its own part of the run.
TEST(Trainer, ASchedulerShorterThanTheRunIsRefusedOrWarnedAbout) {
  auto cfg = blobs_config();  // 30 steps
  cfg.scheduler.config = {{"kind", "one_cycle"}, {"max_lr", 0.1}, {"total_steps", 20}};
  EXPECT_EQ(error_of([&] { train::Trainer t(cfg); }),
            "[scheduler] scheduler.total_steps = 20 is shorter than the 30 steps it is stepped "
            "(run.steps = 30): OneCycleLR would fail at step 21; give it 30 steps");
  cfg.scheduler.config["total_steps"] = 30;
  EXPECT_NO_THROW(train::Trainer t(cfg));

  cfg.scheduler.config = {{"kind", "cosine"}, {"T_max", 30}};
  EXPECT_TRUE(warnings_of(cfg).empty());
  // Linear warm-up for 10 steps, then the cosine is stepped 20 times; T_max = 15 is short.
  cfg.scheduler.config = {{"kind", "sequential"},
                          {"milestones", {10}},
                          {"schedulers",
                           {{{"kind", "linear"}, {"start_factor", 0.1}, {"total_iters", 10}},
                            {{"kind", "cosine"}, {"T_max", 15}}}}};
  EXPECT_EQ(warnings_of(cfg),
            std::vector<std::string>{
                "warning: scheduler.schedulers[1].T_max = 15 is shorter than the 20 steps it is "
                "stepped (run.steps = 30): after step 25 the LR climbs back towards the base LR "
                "(CosineAnnealingLR is periodic); T_max = 20 anneals once"});
  cfg.scheduler.config["schedulers"][1]["T_max"] = 20;
  EXPECT_TRUE(warnings_of(cfg).empty());
  // The first of a sequence is stepped until just before the first milestone.
  cfg.scheduler.config = {{"kind", "sequential"},
                          {"milestones", {10}},
                          {"schedulers",
                           {{{"kind", "one_cycle"}, {"max_lr", 0.1}, {"total_steps", 8}},
                            {{"kind", "constant"}, {"factor", 1.0}}}}};
  EXPECT_EQ(error_of([&] { train::Trainer t(cfg); }),
            "[scheduler] scheduler.schedulers[0].total_steps = 8 is shorter than the 9 steps it "
            "is stepped (run.steps = 30): OneCycleLR would fail at step 9; give it 9 steps");
  cfg.scheduler.config["schedulers"][0]["total_steps"] = 9;
  EXPECT_TRUE(warnings_of(cfg).empty());
}

TEST(Trainer, BindingThatCannotBeSatisfiedFallsBackWithAWarning) {
  auto cfg = blobs_config();
  cfg.run.steps = 3;
  cfg.binding.mode = "exclusive";
  cfg.binding.slots = 4096;
  cfg.binding.fallback = true;
  train::Trainer t(cfg);
  auto rec = std::make_shared<Recorder>();
  t.add_sink(rec);
  ASSERT_EQ(t.run().outcome, train::RunOutcome::kFinished);
  bool warned = false;
  for (const auto& ev : rec->events)
    warned |= ev.find("warning: binding failed, running unbound") != std::string::npos;
  EXPECT_TRUE(warned);
}

TEST(Trainer, BoundRunPinsItsThreadsSizesThePoolAndRestoresEverything) {
  const tb::numa::Topology topo = tb::numa::load_machine_topology();
  if (topo.allowed_cpus().size() < 2) GTEST_SKIP() << "needs 2 CPUs for two exclusive slots";
  tb::numa::BindingOptions bo;
  bo.mode = tb::numa::BindingMode::kExclusive;
  const auto expected = tb::numa::bind_slot(topo, bo, tb::numa::SlotKind::kCpuWorker, 1, 2);
  ASSERT_TRUE(expected.bound);
  auto cfg = blobs_config();
  cfg.run.steps = 12;
  cfg.data.workers = 2;
  cfg.binding.mode = "exclusive";
  cfg.binding.slots = 2;
  cfg.binding.slot = 1;
  const tb::numa::CpuSet before = tb::numa::current_thread_affinity();
  const int threads_before = tb::core::num_threads();
  train::Trainer t(cfg);
  auto rec = std::make_shared<Recorder>();
  tb::numa::CpuSet during;
  int threads_during = 0;
  std::vector<std::vector<int>> workers_during;
  int blas_threads_during = 0;
  rec->on_step = [&](std::int64_t step) {
    if (step != 5) return;
    during = tb::numa::current_thread_affinity();
    threads_during = tb::core::num_threads();
    workers_during = tb::core::worker_affinities();
#ifdef TB_HAVE_OPENBLAS
    blas_threads_during = openblas_get_num_threads();
#else
    blas_threads_during = threads_during;
#endif
  };
  t.add_sink(rec);
  const auto r = t.run();
  ASSERT_EQ(r.outcome, train::RunOutcome::kFinished) << r.message;
  EXPECT_EQ(during, expected.cpus);                                   // the run thread
  EXPECT_EQ(threads_during, static_cast<int>(expected.cpus.size()));  // pool sized to the slot
  EXPECT_EQ(blas_threads_during, threads_during);                     // and OpenBLAS with it
  for (const auto& w : workers_during)
    EXPECT_EQ(w, expected.cpus.cpus());  // every kernel-pool worker
  bool announced = false;
  for (const auto& ev : rec->events)
    announced |= ev.find("info: bound to CPUs " + expected.cpus.to_string()) != std::string::npos;
  EXPECT_TRUE(announced);
  // Everything is restored for whatever runs next on this thread.
  EXPECT_EQ(tb::numa::current_thread_affinity(), before);
  EXPECT_EQ(tb::core::num_threads(), threads_before);
  EXPECT_TRUE(tb::core::pinned_workers().empty());
}

}  // namespace
