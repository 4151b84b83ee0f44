// Sweep planning (engine/train/sweep.h): grids, random draws, seeds, keys that do not apply to a
// point, and errors that name the key.
#include <gtest/gtest.h>

#include <cmath>
#include <set>
#include <string>

#include "engine/api/sweep_api.h"
#include "engine/core/error.h"
#include "engine/train/run_config.h"
#include "engine/train/sweep.h"
#include "tests/engine/test_util.h"

namespace {

using tb::train::plan_sweep;

#define EXPECT_CONTAINS(haystack, needle) \
  EXPECT_NE(std::string(haystack).find(needle), std::string::npos) << (haystack)

// The shared 20-step blobs config (seed 5) that every sweep here varies.
const std::string& kBase = tb::test::kBlobs;

std::string error_of(const std::string& sweep) {
  try {
    (void)plan_sweep(kBase + sweep, "s.toml");
  } catch (const tb::ValueError& e) {
    return e.what();
  }
  return "";
}

// The issue's 2 x 2 x 2: optimizer x learning rate x seed. The Muon points take
// optimizer.muon.lr, the AdamW points optimizer.lr; each point's other key is left out.
TEST(Sweep, OptimizerTimesLrTimesSeedIsEightRuns) {
  const auto plan = plan_sweep(kBase + R"(
[sweep]
name = "opt-lr"
seeds = [1, 2]
metric = "eval.accuracy"
goal = "max"
[sweep.parameters]
"optimizer.kind" = ["muon", "adamw"]
"optimizer.muon.lr" = [0.01, 0.02]
"optimizer.lr" = [1e-3, 3e-3]
)",
                               "s.toml", {"run.tags=[\"demo\"]"});  // kept beside the sweep's tag
  ASSERT_EQ(plan.trials.size(), 8u);
  EXPECT_EQ(plan.spec.metric, "eval.accuracy");
  EXPECT_EQ(plan.spec.goal, "max");
  std::set<std::string> points;
  for (const auto& t : plan.trials) {
    std::string text;
    for (const auto& [k, v] : t.assignment)
      text += k + "=" + v + ";";
    points.insert(text);
    const bool muon = text.find("\"muon\"") != std::string::npos;
    EXPECT_EQ(text.find(muon ? "optimizer.lr=" : "optimizer.muon.lr="), std::string::npos) << text;
    // Every trial is a run config: its seed, name and tags as asked.
    const auto cfg = tb::train::parse_run_config(t.config, "trial");
    EXPECT_EQ(static_cast<std::int64_t>(cfg.run.seed), t.seed);
    EXPECT_EQ(cfg.run.name, "opt-lr p" + std::to_string(t.point) + " s" + std::to_string(t.seed));
    EXPECT_EQ(cfg.run.tags, (std::vector<std::string>{"demo", "sweep:opt-lr"}));
    EXPECT_EQ(cfg.optimizer.main.kind, muon ? "muon" : "adamw");
  }
  EXPECT_EQ(points.size(), 4u);
  EXPECT_EQ(plan.base_toml.find("[sweep"), std::string::npos);
}

TEST(Sweep, RandomDrawsAreReproducibleAndInRange) {
  const std::string sweep = R"(
[sweep]
method = "random"
trials = 12
sampler_seed = 7
[sweep.parameters]
"optimizer.lr" = { distribution = "log_uniform", min = 1e-4, max = 1e-2 }
"optimizer.weight_decay" = { distribution = "uniform", min = 0.0, max = 0.1 }
"data.batch_size" = { distribution = "int_uniform", min = 8, max = 12 }
"optimizer.beta1" = [0.9, 0.95]
)";
  const auto a = plan_sweep(kBase + sweep, "s.toml");
  const auto b = plan_sweep(kBase + sweep, "s.toml");
  ASSERT_EQ(a.trials.size(), 12u);  // one seed: the config's
  std::set<std::string> lrs;
  for (std::size_t i = 0; i < a.trials.size(); ++i) {
    EXPECT_EQ(a.trials[i].assignment, b.trials[i].assignment);
    EXPECT_EQ(a.trials[i].seed, 5);
    const auto cfg = tb::train::parse_run_config(a.trials[i].config, "trial");
    const double lr = cfg.optimizer.main.number("lr");
    EXPECT_GE(lr, 1e-4);
    EXPECT_LE(lr, 1e-2);
    EXPECT_GE(cfg.data.batch_size, 8);
    EXPECT_LE(cfg.data.batch_size, 12);
    lrs.insert(std::to_string(lr));
  }
  EXPECT_GT(lrs.size(), 8u);  // drawn, not repeated
}

// The shipped example: 3 Muon and 3 AdamW points over two seeds.
TEST(Sweep, ShippedExamplePlansTwelveRuns) {
  const auto plan = tb::train::plan_sweep_file(
      std::string(TB_TEST_DATA_DIR) + "/../../resources/configs/sweeps/fmnist-mlp-sweep.toml");
  EXPECT_EQ(plan.trials.size(), 12u);
  EXPECT_EQ(plan.spec.name, "fmnist-muon-vs-adamw");
}

TEST(Sweep, ErrorsNameTheKey) {
  EXPECT_CONTAINS(error_of(""), "[sweep] s.toml: no [sweep] table");
  EXPECT_CONTAINS(
      error_of("[sweep]\nmethod = \"bayes\"\n[sweep.parameters]\n\"run.steps\" = [1]\n"),
      "sweep.method: 'bayes' is not grid or random");
  EXPECT_CONTAINS(error_of("[sweep]\nmetod = \"grid\"\n"), "sweep.metod: unknown key");
  // A metric no run logs would rank nothing (every point's value missing): refused with the
  // nearest name.
  EXPECT_CONTAINS(
      error_of("[sweep]\nmetric = \"eval.acc\"\n[sweep.parameters]\n\"run.steps\" = [1]\n"),
      "sweep.metric: 'eval.acc' is not a metric a run logs; did you mean 'eval.accuracy'?");
  // ... and so is one these runs do not log (a classifier's perplexity, an average the runs do
  // not keep): every trial ran and none was ranked.
  EXPECT_CONTAINS(
      error_of("[sweep]\nmetric = \"eval.perplexity\"\n[sweep.parameters]\n\"run.steps\" = [1]\n"),
      "[sweep] s.toml: sweep.metric: 'eval.perplexity' is logged by language models; a mlp model "
      "logs eval.loss and eval.accuracy");
  EXPECT_CONTAINS(
      error_of("[sweep]\nmetric = \"eval_ema.loss\"\n[sweep.parameters]\n\"run.steps\" = [1]\n"),
      "sweep.metric: 'eval_ema.loss' is logged only with swa.kind = \"ema\"; the runs have "
      "\"none\"");
  EXPECT_CONTAINS(error_of("[sweep]\n"), "sweep.parameters: name at least one key to sweep");
  EXPECT_CONTAINS(error_of("[sweep]\nseeds = [1, 2, 1]\n[sweep.parameters]\n\"run.steps\" = [1]\n"),
                  "sweep.seeds: seed 1 is listed twice");
  EXPECT_CONTAINS(
      error_of("[sweep]\n[sweep.parameters]\n\"optimizer.lr\" = { distribution = \"uniform\", "
               "min = 0.1, max = 0.2 }\n"),
      "sweep.parameters.'optimizer.lr': a grid needs a list of values");
  EXPECT_CONTAINS(
      error_of("[sweep]\nmethod = \"random\"\ntrials = 2\n[sweep.parameters]\n\"optimizer.lr\" = "
               "{ distribution = \"log_uniform\", min = 0.0, max = 0.2 }\n"),
      "sweep.parameters.'optimizer.lr'.min: log_uniform needs min > 0");
  EXPECT_CONTAINS(
      error_of("[sweep]\nmethod = \"random\"\ntrials = 2\n[sweep.parameters]\n\"data.batch_size\" "
               "= { distribution = \"int_uniform\", min = 8.2, max = 8.7 }\n"),
      "sweep.parameters.'data.batch_size': int_uniform needs whole numbers for min and max");
  // Keys the sweep sets for every trial itself: a swept value was replaced without a word, the
  // table showing seeds and bindings that never ran.
  EXPECT_CONTAINS(error_of("[sweep]\n[sweep.parameters]\n\"run.seed\" = [5, 6]\n"),
                  "sweep.parameters.'run.seed': each trial's seed comes from sweep.seeds");
  EXPECT_CONTAINS(error_of("[sweep]\n[sweep.parameters]\n\"binding.mode\" = [\"none\"]\n"),
                  "sweep.parameters.'binding.mode': where trials run is the sweep command's own "
                  "--binding");
  EXPECT_CONTAINS(error_of("[sweep]\n[sweep.parameters]\n\"run.name\" = [\"a\"]\n"),
                  "sweep.parameters.'run.name': the sweep names and tags each trial's run itself");
  // A name that is a folder beside the store: no slash, no control character, not empty.
  EXPECT_CONTAINS(error_of("[sweep]\nname = \"../../evil\"\n[sweep.parameters]\n\"run.steps\" = "
                           "[1]\n"),
                  "sweep.name: '../../evil' holds a slash or a control character");
  EXPECT_CONTAINS(error_of("[sweep]\nname = \"\"\n[sweep.parameters]\n\"run.steps\" = [1]\n"),
                  "sweep.name: is empty");
  // Settings the method would ignore.
  EXPECT_CONTAINS(error_of("[sweep]\ntrials = 5\n[sweep.parameters]\n\"run.steps\" = [1]\n"),
                  "sweep.trials: is for method = \"random\"");
  EXPECT_CONTAINS(error_of("[sweep]\nseeds = []\n[sweep.parameters]\n\"run.steps\" = [1]\n"),
                  "sweep.seeds: is empty");
  // A key no point reads: named, with the config reader's reason.
  const std::string lrr = error_of("[sweep]\n[sweep.parameters]\n\"optimizer.lrr\" = [0.1]\n");
  EXPECT_CONTAINS(lrr, "sweep.parameters.'optimizer.lrr': applies to no point");
  EXPECT_CONTAINS(lrr, "(swept as optimizer.lrr=0.1)");  // not "--set", which nobody typed
  // A swept kind keeps the base config's other keys of its table: said in the sweep's terms (no
  // --set was typed, and none would replace the table).
  const std::string kinds =
      error_of("[sweep]\n[sweep.parameters]\n\"model.kind\" = [\"mlp\", \"cnn\"]\n");
  EXPECT_CONTAINS(kinds, "(model.kind = \"cnn\" is swept; the config's other model keys stay)");
  EXPECT_EQ(kinds.find("--set"), std::string::npos) << kinds;
  // What the user's own --set gave keeps its words beside a point's: a Muon point reads no
  // optimizer.amsgrad, which the user typed.
  const auto with_sets = [](const std::string& sweep, const std::vector<std::string>& sets) {
    try {
      (void)plan_sweep(kBase + sweep, "s.toml", sets);
    } catch (const tb::ValueError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  const std::string own =
      with_sets("[sweep]\n[sweep.parameters]\n\"optimizer.kind\" = [\"adamw\", \"muon\"]\n",
                {"optimizer.amsgrad=true"});
  EXPECT_CONTAINS(own, "the point optimizer.kind=\"muon\"");
  EXPECT_CONTAINS(own, "(from --set optimizer.amsgrad=true)");
  EXPECT_EQ(own.find("swept as"), std::string::npos) << own;
  // With Muon and AdamW points, the reason that names the key meant (an AdamW point's), not the
  // list of [optimizer]'s keys (a Muon point's, which comes first).
  EXPECT_CONTAINS(error_of("[sweep]\n[sweep.parameters]\n\"optimizer.kind\" = [\"muon\", "
                           "\"adamw\"]\n\"optimizer.lrr\" = [0.1]\n"),
                  "unknown key 'optimizer.lrr'; did you mean 'optimizer.lr'?");
  // A value a point's config refuses: the point and the config's message.
  EXPECT_CONTAINS(error_of("[sweep]\n[sweep.parameters]\n\"optimizer.lr\" = [0.1, -1.0]\n"),
                  "the point optimizer.lr=-1.0");
  // --set is for the runs' config; the sweep's own table is not reached through it.
  try {
    (void)plan_sweep(kBase + "[sweep]\n[sweep.parameters]\n\"run.steps\" = [1]\n", "s.toml",
                     {"sweep.metric=\"loss\""});
    ADD_FAILURE() << "--set sweep.metric was taken";
  } catch (const tb::ValueError& e) {
    EXPECT_CONTAINS(std::string(e.what()),
                    "[sweep] --set sweep.metric=\"loss\": --set changes the runs' config");
  }
}

// [sweep.early_stopping]: read with its defaults, and errors naming the key.
TEST(Sweep, EarlyStoppingIsReadAndCheckedKeyByKey) {
  const std::string grid = "[sweep]\n[sweep.parameters]\n\"optimizer.lr\" = [0.1, 0.2]\n";
  EXPECT_EQ(plan_sweep(kBase + grid, "s.toml").spec.early_stopping.method, "none");
  const auto plan = plan_sweep(kBase + grid +
                                   "[sweep.early_stopping]\nmethod = \"successive_halving\"\n"
                                   "steps = [5, 10]\nreduction_factor = 3\n",
                               "s.toml");
  EXPECT_EQ(plan.spec.early_stopping.method, "successive_halving");
  EXPECT_EQ(plan.spec.early_stopping.steps, (std::vector<std::int64_t>{5, 10}));
  EXPECT_EQ(plan.spec.early_stopping.reduction_factor, 3.0);
  EXPECT_EQ(plan_sweep(kBase + grid + "[sweep.early_stopping]\nmethod = \"median\"\nsteps = [5]\n")
                .spec.early_stopping.reduction_factor,
            2.0);
  const std::string es = grid + "[sweep.early_stopping]\n";
  EXPECT_CONTAINS(error_of(es + "method = \"asha\"\nsteps = [5]\n"),
                  "sweep.early_stopping.method: 'asha' is not none, successive_halving or median");
  EXPECT_CONTAINS(error_of(es + "method = \"median\"\n"),
                  "sweep.early_stopping.steps: name the steps");
  EXPECT_CONTAINS(error_of(es + "method = \"median\"\nsteps = [10, 5]\n"),
                  "sweep.early_stopping.steps: steps must increase");
  EXPECT_CONTAINS(error_of(es + "method = \"median\"\nsteps = [0]\n"),
                  "sweep.early_stopping.steps: expected a list of steps >= 1");
  EXPECT_CONTAINS(
      error_of(es + "method = \"successive_halving\"\nsteps = [5]\nreduction_factor = 1\n"),
      "sweep.early_stopping.reduction_factor: must be > 1");
  EXPECT_CONTAINS(error_of(es + "method = \"median\"\nsteps = [5]\nrungs = 2\n"),
                  "sweep.early_stopping.rungs: unknown key");
  // Settings that would stop nothing, or that the method ignores.
  EXPECT_CONTAINS(error_of(es + "steps = [5]\n"),
                  "sweep.early_stopping.method: is none (the default) but steps are given");
  EXPECT_CONTAINS(error_of(es + "method = \"median\"\nsteps = [5]\nreduction_factor = 3\n"),
                  "sweep.early_stopping.reduction_factor: is for method = \"successive_halving\"");
}

// A rung must come before the end of the runs (20 steps here): at or after it the points would be
// ranked on finished runs and "stopped" runs would already be done. The run's length comes from
// run.steps, or from run.epochs and the data's size.
TEST(Sweep, EarlyStoppingStepsComeBeforeTheEndOfTheRuns) {
  const std::string grid =
      "[sweep]\n[sweep.parameters]\n\"optimizer.lr\" = [0.1, 0.2]\n"
      "[sweep.early_stopping]\nmethod = \"median\"\n";
  EXPECT_EQ(tb::api::preview_sweep_text(kBase + grid + "steps = [10, 19]\n", "s.toml").rungs,
            (std::vector<std::int64_t>{10, 19}));
  std::string message;
  try {
    (void)tb::api::preview_sweep_text(kBase + grid + "steps = [10, 20]\n", "s.toml");
  } catch (const tb::ValueError& e) {
    message = e.what();
  }
  EXPECT_CONTAINS(message,
                  "sweep.early_stopping.steps: step 20 is not before the end of trial 0's "
                  "run (20 steps)");
  // Each trial's own length, whatever order the values come in: 2 epochs of the 2,048 blobs in
  // batches of 32 are 128 steps, 16 with 8 batches a step (a rung at 20 is past that trial).
  std::string epochs = kBase;
  epochs.replace(epochs.find("steps = 20"), 10, "epochs = 2");
  for (const char* values : {"[1, 8]", "[8, 1]"}) {
    std::string m;
    try {
      (void)tb::api::preview_sweep_text(epochs +
                                            "[sweep]\n[sweep.parameters]\n"
                                            "\"run.gradient_accumulation_steps\" = " +
                                            values +
                                            "\n[sweep.early_stopping]\nmethod = \"median\"\n"
                                            "steps = [20]\n",
                                        "s.toml");
    } catch (const tb::ValueError& e) {
      m = e.what();
    }
    EXPECT_CONTAINS(m, "run (16 steps)");
  }
}

}  // namespace
