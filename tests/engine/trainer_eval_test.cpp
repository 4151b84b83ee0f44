// eval.at_start: the initial model's evaluation is logged at step 0 (no training loss there), it
// changes no value the run computes after it, and a resumed run does not repeat it.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "engine/train/run_config.h"
#include "engine/train/trainer.h"
#include "tests/engine/run_test_util.h"
#include "tests/engine/test_util.h"

namespace {

namespace fs = std::filesystem;
namespace train = tb::train;

struct Steps final : train::MetricSink {
  std::vector<std::pair<std::int64_t, std::vector<std::string>>> logged;  // step, its keys
  std::vector<std::pair<std::int64_t, double>> losses, evals;
  void on_metrics(std::int64_t step, const train::Metrics& m) override {
    std::vector<std::string> keys;
    for (const auto& [k, v] : m) {
      keys.push_back(k);
      if (k == "loss") losses.emplace_back(step, v);
      if (k == "eval.loss") evals.emplace_back(step, v);
    }
    logged.emplace_back(step, keys);
  }
};

std::shared_ptr<Steps> run(const train::RunConfig& c, const fs::path& ckdir = {},
                           const fs::path& resume = {}) {
  return tb::test::run_recorded<Steps>(c, ckdir, resume);
}

TEST(EvalAtStart, TheInitialModelIsEvaluatedAtStepZeroAndNothingElseChanges) {
  train::RunConfig c = train::parse_run_config(tb::test::kBlobs);  // 20 steps, eval every 10
  c.model.fields["dropout"] = 0.2;  // the evaluation must not move the dropout stream
  const auto plain = run(c);
  c.eval.at_start = true;
  const fs::path dir = fs::temp_directory_path() / "tb_eval_at_start";
  fs::remove_all(dir);
  c.checkpoint.interval = 10;
  const auto with = run(c, dir);
  ASSERT_FALSE(with->logged.empty());
  EXPECT_EQ(with->logged.front().first, 0);
  const auto& keys = with->logged.front().second;
  EXPECT_NE(std::find(keys.begin(), keys.end(), "eval.accuracy"), keys.end());
  EXPECT_EQ(std::find(keys.begin(), keys.end(), "loss"), keys.end());  // nothing trained yet
  ASSERT_EQ(with->evals.size(), 3u);                                   // steps 0, 10, 20
  EXPECT_NEAR(with->evals[0].second, std::log(4.0), 0.5);  // 4 classes, a new model: ~ln 4
  EXPECT_EQ(with->losses, plain->losses);                  // bit for bit
  EXPECT_EQ(std::vector(with->evals.begin() + 1, with->evals.end()), plain->evals);
  // Resumed at step 10: no second step-0 evaluation.
  const auto resumed = run(c, {}, dir / "step-00000010");
  ASSERT_FALSE(resumed->logged.empty());
  EXPECT_EQ(resumed->logged.front().first, 11);
  fs::remove_all(dir);
}

}  // namespace
