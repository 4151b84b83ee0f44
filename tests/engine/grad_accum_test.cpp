// Gradient accumulation (run.gradient_accumulation_steps): a step of K batches of b samples is
// the step of one batch of their K x b samples — losses, gradient norm (clipped) and evaluation
// over whole epochs, whose last step takes the batches that are left —, a resume between
// accumulated steps equals the uninterrupted run, and a non-finite loss in one of a step's
// batches skips the whole step, as it skips the one big batch holding the same sample.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "engine/core/error.h"
#include "engine/data/dataset.h"
#include "engine/data/registry.h"
#include "engine/train/run_config.h"
#include "engine/train/trainer.h"
#include "tests/engine/run_test_util.h"
#include "tests/engine/test_util.h"

namespace {

namespace fs = std::filesystem;
namespace train = tb::train;

struct Recorder final : train::MetricSink {
  std::vector<std::pair<std::int64_t, double>> losses;
  std::vector<double> grad_norms;
  std::vector<double> eval_losses;
  std::vector<std::string> events;
  void on_metrics(std::int64_t step, const train::Metrics& m) override {
    for (const auto& [k, v] : m) {
      if (k == "loss") losses.emplace_back(step, v);
      if (k == "grad_norm") grad_norms.push_back(v);
      if (k == "eval.loss") eval_losses.push_back(v);
    }
  }
  void on_event(const std::string& level, const std::string& text) override {
    events.push_back(level + ": " + text);
  }
};

// Two epochs of the 2,048 training blobs, AdamW, gradient norm clipped to 0.5 (the clip sees the
// whole step's gradient), no dropout (its masks are drawn per batch), an evaluation per epoch.
train::RunConfig accum_config(std::int64_t batch_size, std::int64_t accumulate) {
  // The shared blobs config (MLP 16-32-4, AdamW lr 0.01, no dropout, loader in the run thread).
  train::RunConfig c = train::parse_run_config(tb::test::kBlobs);
  c.run.seed = 11;
  c.run.steps = 0;
  c.run.epochs = 2;
  c.run.grad_clip = 0.5;
  c.run.gradient_accumulation_steps = accumulate;
  c.data.batch_size = batch_size;
  c.eval.interval = 0;
  return c;
}

std::shared_ptr<Recorder> run(const train::RunConfig& c, const fs::path& ckdir = {},
                              const fs::path& resume = {}) {
  return tb::test::run_recorded<Recorder>(c, ckdir, resume);
}

void expect_close(const std::vector<double>& a, const std::vector<double>& b, double rtol,
                  const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  for (std::size_t i = 0; i < a.size(); ++i)
    EXPECT_NEAR(a[i], b[i], rtol * std::abs(b[i])) << what << " " << i;
}

std::vector<double> values(const std::vector<std::pair<std::int64_t, double>>& losses) {
  std::vector<double> v;
  for (const auto& [step, loss] : losses)
    v.push_back(loss);
  return v;
}

TEST(GradientAccumulation, AStepOfThreeBatchesIsTheStepOfOneBatchOfTheirSamples) {
  // 2,048 samples: 32 batches of 64 an epoch, 3 a step -> 11 steps (the last of 2 batches, 128
  // samples); the same groups as 11 batches of 192 (the last of 128).
  const auto accumulated = run(accum_config(64, 3));
  const auto big = run(accum_config(192, 1));
  ASSERT_EQ(accumulated->losses.size(), 22u);
  ASSERT_EQ(big->losses.size(), 22u);
  EXPECT_EQ(accumulated->losses.back().first, 22);
  EXPECT_NEAR(accumulated->losses[0].second, big->losses[0].second, 1e-6 * big->losses[0].second);
  expect_close(values(accumulated->losses), values(big->losses), 1e-4, "loss");
  expect_close(accumulated->grad_norms, big->grad_norms, 1e-4, "grad_norm");
  ASSERT_EQ(accumulated->eval_losses.size(), 2u);  // after each epoch: steps 11 and 22
  expect_close(accumulated->eval_losses, big->eval_losses, 1e-4, "eval_loss");
  // It learnt: the clip was active (norms above 0.5 were scaled) and the loss fell.
  EXPECT_LT(accumulated->losses.back().second, 0.5 * accumulated->losses.front().second);
  // Batches of unequal size weigh their samples, not themselves: 22 batches of 96 (the last of
  // 32), 2 a step, are again the 11 batches of 192 (the last step: 96 + 32 samples).
  const auto uneven = run(accum_config(96, 2));
  expect_close(values(uneven->losses), values(big->losses), 1e-4, "loss (uneven)");
  expect_close(uneven->eval_losses, big->eval_losses, 1e-4, "eval_loss (uneven)");
}

TEST(GradientAccumulation, AResumeBetweenAccumulatedStepsEqualsTheUninterruptedRun) {
  const fs::path dir = fs::temp_directory_path() / "tb_grad_accum_resume";
  fs::remove_all(dir);
  auto c = accum_config(64, 3);
  c.checkpoint.interval = 10;  // step 10: 30 of the epoch's 32 batches taken
  c.checkpoint.keep = 3;
  const auto full = run(c, dir);
  const auto resumed = run(c, {}, dir / "step-00000010");
  ASSERT_EQ(resumed->losses.size(), 12u);
  using Losses = std::vector<std::pair<std::int64_t, double>>;
  EXPECT_EQ(resumed->losses, Losses(full->losses.begin() + 10, full->losses.end()));
  // Another accumulation is another run: the checkpoint is refused, naming the key.
  auto other = c;
  other.run.gradient_accumulation_steps = 2;
  train::Trainer t(other);
  const std::string refused = tb::test::error_of([&] { t.resume_from(dir / "step-00000010"); });
  EXPECT_NE(refused.find("run.gradient_accumulation_steps: 3 in the checkpoint, 2 now"),
            std::string::npos)
      << refused;
  fs::remove_all(dir);
}

// A run counted in steps takes K batches every step, across epoch ends (nanoGPT's steps; an
// epoch of random text windows is only a count): 32 batches of 64 an epoch, 3 a step, 12 steps
// read 36 batches — step 11 the epoch's last two and the next one's first — each step 192
// samples; and a resume from inside that stretch goes on alike.
TEST(GradientAccumulation, ARunCountedInStepsTakesKBatchesAcrossEpochEnds) {
  struct Samples final : train::MetricSink {
    std::vector<double> per_step;
    double rate = 0, ms = 0;
    void on_metrics(std::int64_t, const train::Metrics& m) override {
      for (const auto& [k, v] : m) {
        if (k == "samples_per_s") rate = v;
        if (k == "time.step_ms") ms = v;
      }
      per_step.push_back(rate * ms / 1000.0);
    }
  };
  const fs::path dir = fs::temp_directory_path() / "tb_grad_accum_steps";
  fs::remove_all(dir);
  auto c = accum_config(64, 3);
  c.run.epochs = 0;
  c.run.steps = 12;
  c.checkpoint.interval = 10;
  train::Trainer t(c, dir);
  auto samples = std::make_shared<Samples>();
  auto rec = std::make_shared<Recorder>();
  t.add_sink(samples);
  t.add_sink(rec);
  ASSERT_EQ(t.run().outcome, train::RunOutcome::kFinished);
  ASSERT_EQ(samples->per_step.size(), 12u);
  for (double n : samples->per_step)
    EXPECT_NEAR(n, 192.0, 1e-6);
  EXPECT_EQ(rec->eval_losses.size(), 2u);  // eval.interval = 0: every ceil(32 / 3) = 11 steps
  const auto resumed = run(c, {}, dir / "step-00000010");
  using Losses = std::vector<std::pair<std::int64_t, double>>;
  EXPECT_EQ(resumed->losses, Losses(rec->losses.begin() + 10, rec->losses.end()));
  fs::remove_all(dir);
}

// synthetic-blobs whose training sample 60 has NaN features (tests only).
void register_nan_blobs() {
  tb::test::register_derived_data_kind(
      "synthetic-blobs", "test-accum-nan-blobs",
      "synthetic-blobs with NaN features in training sample 60 (tests only)",
      [](tb::data::DataSplits& s) {
        auto* train_set = dynamic_cast<tb::data::TensorDataset*>(s.train.get());
        tb::core::Tensor input = train_set->input().clone();
        for (int f = 0; f < 16; ++f)
          input.data_ptr<float>()[60 * 16 + f] = NAN;
        s.train = std::make_shared<tb::data::TensorDataset>(input, train_set->target());
      });
}

TEST(GradientAccumulation, ANonFiniteLossInOneBatchSkipsTheWholeStep) {
  register_nan_blobs();
  // No shuffle: sample 60 is in batch 3 of 16 samples (48..63), the second of step 2 (batches 2
  // and 3), and in batch 1 of 32 (32..63) of the run without accumulation: both skip that step,
  // the first batch's gradients, already computed, dropped with it.
  auto base = accum_config(16, 2);
  base.data.kind = "test-accum-nan-blobs";
  base.data.shuffle = false;
  base.run.epochs = 0;
  base.run.steps = 8;
  base.eval.interval = 4;
  const auto accumulated = run(base);
  auto big = base;
  big.data.batch_size = 32;
  big.run.gradient_accumulation_steps = 1;
  const auto one = run(big);
  const auto skipped = [](const Recorder& r) {
    int n = 0;
    for (const auto& e : r.events)
      if (e.find("non-finite loss (nan)") != std::string::npos) ++n;
    return n;
  };
  EXPECT_EQ(skipped(*accumulated), 1) << ::testing::PrintToString(accumulated->events);
  EXPECT_EQ(skipped(*one), 1);
  // The finite batch of the skipped step left nothing behind: the runs go on alike.
  ASSERT_EQ(accumulated->losses.size(), 8u);
  expect_close(values(accumulated->losses), values(one->losses), 1e-5, "loss");
  expect_close(accumulated->eval_losses, one->eval_losses, 1e-5, "eval_loss");
}

TEST(GradientAccumulation, TheConfigKeyIsCheckedAndKept) {
  const std::string base = "[run]\nsteps = 4\n";
  EXPECT_EQ(train::parse_run_config(base).run.gradient_accumulation_steps, 1);
  const auto c = train::parse_run_config(base + "gradient_accumulation_steps = 4\n");
  EXPECT_EQ(c.run.gradient_accumulation_steps, 4);
  EXPECT_EQ(train::parse_run_config(train::to_toml(c)).run.gradient_accumulation_steps, 4);
  const std::string zero = tb::test::error_of(
      [&] { (void)train::parse_run_config(base + "gradient_accumulation_steps = 0\n"); });
  EXPECT_NE(zero.find("run.gradient_accumulation_steps"), std::string::npos) << zero;
  EXPECT_NE(zero.find(">= 1"), std::string::npos) << zero;
  // An epoch's steps: ceil(batches / K).
  EXPECT_EQ(train::steps_per_epoch(c, 32), 8);
  EXPECT_EQ(train::steps_per_epoch(c, 33), 9);
  EXPECT_EQ(train::steps_per_epoch(c, 3), 1);
}

}  // namespace
