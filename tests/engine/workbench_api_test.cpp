// The GUI's facade (engine/api/workbench_api.h): config checks with the key path of the error,
// the default config, config fields with types, choices and help, the parameter split, the LR
// preview of a text, config diffs, runs started in-process (live metrics, cancel, pause, a
// failure after the run was created) and the live store reader (runs with their facts, series,
// edits, fingerprint).
#include "engine/api/workbench_api.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "engine/api/run_api.h"
#include "engine/api/schedule_api.h"
#include "engine/core/error.h"
#include "engine/data/fashion_mnist.h"
#include "engine/sched/lr_scheduler.h"
#include "engine/store/run_store.h"
#include "engine/store/run_writer.h"
#include "tests/engine/test_util.h"

namespace {

namespace fs = std::filesystem;
namespace api = tb::api;
namespace store = tb::store;

const std::string kConfigDir = std::string(TB_TEST_DATA_DIR) + "/../../resources/configs";

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << "cannot open " << path;
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

bool contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

// A fresh folder under the system temp folder, removed with everything in it at scope end.
struct TempDir : tb::test::TempDir {
  TempDir() : tb::test::TempDir("tb_workbench_test") {}
};

using tb::test::kBlobs;

const api::ConfigField* field(const std::vector<api::ConfigField>& fields, const std::string& key) {
  for (const auto& f : fields)
    if (f.key == key) return &f;
  return nullptr;
}

bool has(const std::vector<std::string>& v, const std::string& s) {
  return std::find(v.begin(), v.end(), s) != v.end();
}

// ---- config checks ------------------------------------------------------------------------------

TEST(WorkbenchConfig, ValidTextChecksWithItsEffectiveConfig) {
  const auto c = api::check_config_text(read_text(kConfigDir + "/fmnist-mlp-muon.toml"));
  ASSERT_TRUE(c.ok) << c.error;
  EXPECT_EQ(c.error, "");
  EXPECT_EQ(c.key_path, "");
  EXPECT_TRUE(contains(c.effective_toml, "[optimizer.muon]\nlr = 0.02\n")) << c.effective_toml;
  // Defaults are filled in: the file sets no [optimizer.adamw] beta1.
  EXPECT_TRUE(contains(c.effective_toml, "[optimizer.adamw]\nlr = 0.001\n")) << c.effective_toml;
}

TEST(WorkbenchConfig, ErrorsNameTheKeyPath) {
  // Unknown key, with the nearest valid one suggested.
  auto c = api::check_config_text("[optimizer]\nlr_max = 0.1\n", "run.toml");
  EXPECT_FALSE(c.ok);
  EXPECT_EQ(c.key_path, "optimizer.lr_max");
  EXPECT_TRUE(contains(c.error,
                       "[config] run.toml: unknown key 'optimizer.lr_max'; did you mean "
                       "'optimizer.lr'?"))
      << c.error;
  EXPECT_EQ(c.effective_toml, "");
  // Wrong type.
  c = api::check_config_text("[run]\nseed = \"x\"\n");
  EXPECT_FALSE(c.ok);
  EXPECT_EQ(c.key_path, "run.seed");
  EXPECT_TRUE(contains(c.error, "expected an integer >= 0, found string \"x\"")) << c.error;
  // Out of range.
  c = api::check_config_text("[data]\nbatch_size = 0\n");
  EXPECT_FALSE(c.ok);
  EXPECT_EQ(c.key_path, "data.batch_size");
  EXPECT_TRUE(contains(c.error, "data.batch_size: expected an integer >= 1, found 0")) << c.error;
  // Not one of the allowed values.
  c = api::check_config_text("[binding]\nmode = \"numa\"\n");
  EXPECT_EQ(c.key_path, "binding.mode");
  // Unknown section.
  c = api::check_config_text("[optimiser]\nlr = 1\n");
  EXPECT_EQ(c.key_path, "optimiser");
  EXPECT_TRUE(contains(c.error, "did you mean 'optimizer'")) << c.error;
  // A bad override names its key and says it came from --set.
  c = api::check_config_text("", "<editor>", {"optimizer.lr=fast"});
  EXPECT_FALSE(c.ok);
  EXPECT_EQ(c.key_path, "optimizer.lr");
  EXPECT_TRUE(contains(c.error, "(from --set optimizer.lr=fast)")) << c.error;
  // The model's own checks name the field.
  c = api::check_config_text(
      "[model]\nkind = \"qwen-tiny\"\nd_model = 130\n[data]\nkind = \"synthetic-text\"\n");
  EXPECT_FALSE(c.ok);
  EXPECT_EQ(c.key_path, "model.d_model") << c.error;
  // The scheduler's own checks name the field.
  c = api::check_config_text("[scheduler]\nkind = \"cosine\"\n");
  EXPECT_FALSE(c.ok);
  EXPECT_EQ(c.key_path, "scheduler.T_max") << c.error;
  // Malformed TOML names no key.
  c = api::check_config_text("[run\nseed = 1\n");
  EXPECT_FALSE(c.ok);
  EXPECT_EQ(c.key_path, "");
  EXPECT_TRUE(contains(c.error, "invalid TOML")) << c.error;
}

TEST(WorkbenchConfig, DefaultConfigRoundTrips) {
  const std::string d = api::default_config_toml();
  EXPECT_TRUE(contains(d, "[run]\nname = \"run\"\n")) << d;
  EXPECT_TRUE(contains(d, "[binding]\nmode = \"none\"\n")) << d;
  const auto c = api::check_config_text(d);
  ASSERT_TRUE(c.ok) << c.error;
  EXPECT_EQ(c.effective_toml, d);
  EXPECT_EQ(api::check_config_text("").effective_toml, d);
}

TEST(WorkbenchConfig, FieldsHaveTypesChoicesAndHelp) {
  const auto fields = api::config_fields(read_text(kConfigDir + "/fmnist-mlp-muon.toml"));
  ASSERT_FALSE(fields.empty());
  EXPECT_EQ(fields.front().key, "threads");
  EXPECT_EQ(fields.front().section, "");
  EXPECT_EQ(fields.front().type, "int");

  const auto* seed = field(fields, "run.seed");
  ASSERT_NE(seed, nullptr);
  EXPECT_EQ(seed->section, "run");
  EXPECT_EQ(seed->type, "int");
  EXPECT_EQ(seed->value_toml, "1");
  EXPECT_TRUE(seed->choices.empty());
  EXPECT_NE(seed->help, "");

  const auto* mlr = field(fields, "optimizer.muon.lr");
  ASSERT_NE(mlr, nullptr);
  EXPECT_EQ(mlr->section, "optimizer.muon");
  EXPECT_EQ(mlr->type, "float");
  EXPECT_EQ(mlr->value_toml, "0.02");
  EXPECT_EQ(mlr->help, field(fields, "optimizer.adamw.lr")->help);
  EXPECT_NE(mlr->help, "");

  const auto* mode = field(fields, "binding.mode");
  ASSERT_NE(mode, nullptr);
  EXPECT_EQ(mode->type, "string");
  EXPECT_EQ(mode->value_toml, "\"none\"");
  EXPECT_TRUE(has(mode->choices, "exclusive"));
  EXPECT_TRUE(has(mode->choices, "none"));

  const auto* device = field(fields, "run.device");
  ASSERT_NE(device, nullptr);
  EXPECT_TRUE(device->choices.empty());  // free text: cpu, cuda, cuda:N
  EXPECT_TRUE(has(field(fields, "optimizer.muon.ns_dtype")->choices, "fp64"));
  EXPECT_TRUE(has(field(fields, "scheduler.kind")->choices, "cosine"));
  EXPECT_TRUE(has(field(fields, "model.activation")->choices, "gelu"));
  EXPECT_EQ(field(fields, "model.hidden")->type, "array");
  EXPECT_EQ(field(fields, "model.hidden")->value_toml, "[256, 256]");
  EXPECT_EQ(field(fields, "run.tags")->type, "array");
  EXPECT_EQ(field(fields, "data.shuffle")->type, "bool");
  EXPECT_EQ(field(fields, "scheduler.T_max")->type, "int");
  EXPECT_EQ(field(fields, "scheduler.T_max")->section, "scheduler");
  // A scheduler's fields get their help from the scheduler registry, like every kind's.
  EXPECT_EQ(field(fields, "scheduler.T_max")->help, "steps of a half cosine (>= 1)");
  EXPECT_EQ(field(fields, "optimizer.adamw.momentum"), nullptr);  // not an AdamW key

  // In the effective config's order, each key once.
  auto index = [&](const std::string& key) {
    for (std::size_t i = 0; i < fields.size(); ++i)
      if (fields[i].key == key) return static_cast<std::ptrdiff_t>(i);
    return std::ptrdiff_t{-1};
  };
  EXPECT_LT(index("run.seed"), index("optimizer.muon.lr"));
  EXPECT_LT(index("optimizer.muon.lr"), index("optimizer.adamw.lr"));
  EXPECT_LT(index("optimizer.adamw.lr"), index("binding.mode"));
  std::vector<std::string> keys;
  for (const auto& f : fields)
    keys.push_back(f.key);
  std::sort(keys.begin(), keys.end());
  EXPECT_EQ(std::adjacent_find(keys.begin(), keys.end()), keys.end());

  EXPECT_THROW(api::config_fields("[run]\nsteps = -1\n"), tb::ValueError);
}

// The choice lists agree with the validator: every choice passes its enum check, a bogus value
// fails, and every string key the validator enumerates has choices.
// Keys the rest of the config makes idle carry the reason (the form greys them); the others none.
TEST(WorkbenchConfig, IdleKeysSayWhatMakesThemIdle) {
  const auto idle_of = [](const std::string& text) {
    std::map<std::string, std::string> out;
    for (const auto& f : api::config_fields(text))
      if (!f.idle.empty()) out[f.key] = f.idle;
    return out;
  };
  auto idle = idle_of(kBlobs);  // synthetic-blobs, no amp, no swa, one process, unbound
  EXPECT_EQ(idle["data.path"], "data.kind = \"synthetic-blobs\" does not read it");
  EXPECT_EQ(idle["data.context_length"], "data.kind = \"synthetic-blobs\" does not read it");
  EXPECT_EQ(idle["amp.dtype"], "amp.enabled is false");
  EXPECT_EQ(idle["amp.tf32"], "CUDA only: run.device is \"cpu\"");
  EXPECT_EQ(idle["swa.ema_decay"], "swa.kind is \"none\"");
  EXPECT_EQ(idle["eval.sample_tokens"], "eval.samples is 0");
  EXPECT_EQ(idle["binding.slots"], "binding.mode is \"none\"");
  EXPECT_EQ(idle["distributed.world_size"],
            "distributed.backend is \"none\" (trainbench-cli launch --ddp sets it)");
  for (const char* active : {"run.steps", "data.batch_size", "amp.enabled", "swa.kind",
                             "binding.mode", "binding.cpus", "distributed.backend", "data.shuffle"})
    EXPECT_EQ(idle.count(active), 0u) << active;
  // Turned on, they take effect; a text kind reads its window length, not images' normalisation.
  idle = idle_of(kBlobs +
                 "[amp]\nenabled = true\n[swa]\nkind = \"swa\"\n[binding]\nmode = \"node\"\n");
  EXPECT_EQ(idle.count("amp.dtype"), 0u);
  EXPECT_EQ(idle.count("binding.slots"), 0u);
  EXPECT_EQ(idle.count("swa.start_step"), 0u);
  EXPECT_EQ(idle["swa.ema_decay"], "swa.kind is \"swa\"");
  const std::string text = tb::test::kTinyLm;
  idle = idle_of(text);
  EXPECT_EQ(idle.count("data.context_length"), 0u);
  EXPECT_EQ(idle["data.normalize"], "data.kind = \"synthetic-text\" does not read it");
}

TEST(WorkbenchConfig, ChoicesMatchTheValidator) {
  const std::vector<std::string> bases = {
      read_text(kConfigDir + "/fmnist-mlp-muon.toml"), kBlobs,
      kBlobs + "\n[scheduler]\nkind = \"plateau\"\nmode = \"min\"\nthreshold_mode = \"rel\"\n",
      kBlobs +
          "\n[scheduler]\nkind = \"cyclic\"\nbase_lr = 0.001\nmax_lr = 0.01\nmode = "
          "\"triangular\"\n"};
  int enumerated = 0;
  for (const auto& base : bases) {
    ASSERT_TRUE(api::check_config_text(base).ok) << api::check_config_text(base).error;
    for (const auto& f : api::config_fields(base)) {
      if (f.type != "string") continue;
      const auto bogus = api::check_config_text(base, "<t>", {f.key + "=\"zzz-bogus\""});
      if (f.choices.empty()) {
        EXPECT_FALSE(bogus.error.find("expected one of") != std::string::npos &&
                     bogus.key_path == f.key)
            << f.key << " is enumerated by the validator but has no choices: " << bogus.error;
        continue;
      }
      ++enumerated;
      EXPECT_FALSE(bogus.ok) << f.key;
      for (const auto& choice : f.choices) {
        const auto c = api::check_config_text(base, "<t>", {f.key + "=\"" + choice + "\""});
        // Cross-key rules may still reject it (data.kind "text" with an mlp), never the enum.
        EXPECT_FALSE(contains(c.error, "expected one of"))
            << f.key << " = " << choice << ": " << c.error;
        EXPECT_FALSE(contains(c.error, "unknown kind"))
            << f.key << " = " << choice << ": " << c.error;
      }
    }
  }
  EXPECT_GE(enumerated, 10);
}

// ---- parameter split and LR preview -------------------------------------------------------------

TEST(WorkbenchConfig, ParameterSplitOfMuonAndAdamw) {
  const std::string muon = read_text(kConfigDir + "/fmnist-mlp-muon.toml");
  const auto rows = api::parameter_split(muon);
  ASSERT_EQ(rows.size(), 6u);
  std::int64_t total = 0;
  for (const auto& r : rows) {
    total += r.numel;
    if (r.name == "layers.0.weight" || r.name == "layers.2.weight") {
      EXPECT_EQ(r.optimizer, "muon") << r.name;
      EXPECT_EQ(r.reason, "2-D hidden matrix") << r.name;
    } else {
      EXPECT_EQ(r.optimizer, "adamw") << r.name;
    }
    if (r.name.size() > 5 && r.name.substr(r.name.size() - 5) == ".bias") {
      EXPECT_EQ(r.reason, "1-D") << r.name;
    }
  }
  EXPECT_EQ(rows[0].name, "layers.0.weight");
  EXPECT_EQ(rows[0].shape, "[256, 784]");
  EXPECT_EQ(rows[0].numel, 256 * 784);
  EXPECT_EQ(rows[5].name, "layers.4.bias");
  EXPECT_EQ(rows[4].reason, "output head");
  EXPECT_EQ(total, 784 * 256 + 256 + 256 * 256 + 256 + 256 * 10 + 10);

  // A split override moves a hidden matrix to AdamW.
  std::string overridden = muon;
  const auto at = overridden.find("split = []");
  ASSERT_NE(at, std::string::npos);
  overridden.replace(at, 10, "split = [[\"layers.2.*\", \"adamw\"]]");
  for (const auto& r : api::parameter_split(overridden))
    if (r.name == "layers.2.weight") {
      EXPECT_EQ(r.optimizer, "adamw");
      EXPECT_TRUE(contains(r.reason, "layers.2.*")) << r.reason;
    }

  // One optimizer: every parameter goes to it.
  const auto adamw = api::parameter_split(read_text(kConfigDir + "/fmnist-mlp-adamw.toml"));
  ASSERT_EQ(adamw.size(), 6u);
  for (const auto& r : adamw) {
    EXPECT_EQ(r.optimizer, "adamw") << r.name;
    EXPECT_EQ(r.reason, "all parameters") << r.name;
  }
  std::string sgd_text = kBlobs;
  sgd_text.replace(sgd_text.find("kind = \"adamw\""), 14, "kind = \"sgd\"");
  const auto sgd = api::parameter_split(sgd_text);
  ASSERT_EQ(sgd.size(), 4u);  // 16-32-4: two weights, two biases
  EXPECT_EQ(sgd[0].optimizer, "sgd");
  EXPECT_EQ(sgd[0].shape, "[32, 16]");
  EXPECT_EQ(sgd[0].numel, 512);
  EXPECT_THROW(api::parameter_split("[model]\nhidden = [0]\n"), tb::ValueError);
}

TEST(WorkbenchConfig, PreviewOfATextEqualsPreviewOfItsFile) {
  for (const char* name :
       {"fmnist-mlp-muon.toml", "qwen-tiny-fortunes-muon.toml", "fmnist-mlp-adamw.toml"}) {
    const std::string path = kConfigDir + "/" + name;
    for (int steps : {0, 30}) {
      std::vector<std::string> from_file, from_text;
      const auto a = api::preview_run_config(path, {}, steps, from_file);
      const auto b = api::preview_config_text(read_text(path), steps, from_text);
      EXPECT_EQ(from_text, from_file) << name;
      EXPECT_EQ(b.kind, a.kind) << name;
      EXPECT_EQ(b.config_json, a.config_json) << name;
      ASSERT_EQ(b.rows.size(), a.rows.size()) << name;
      for (std::size_t i = 0; i < a.rows.size(); ++i) {
        EXPECT_EQ(b.rows[i].lr, a.rows[i].lr) << name << " row " << i;
        EXPECT_EQ(b.rows[i].momentum, a.rows[i].momentum) << name << " row " << i;
      }
      if (steps == 30) {
        EXPECT_EQ(a.rows.size(), 31u);
      }
    }
  }
  std::vector<std::string> groups;
  const auto t = api::preview_config_text(kBlobs, 0, groups);
  EXPECT_EQ(t.rows.size(), 21u);  // run.steps = 20
  EXPECT_EQ(groups, std::vector<std::string>{"lr.adamw"});
  EXPECT_THROW(api::preview_config_text("[optimizer]\nlr = -1\n", 5, groups), tb::ValueError);
}

// With Muon the scheduler's learning rates are Muon's; AdamW's copy is scaled by adamw.lr /
// muon.lr (one_cycle's max_lr = 0.02 gave AdamW, configured at 0.001, a peak of 0.02), in a
// sequential's children too. Factor-only schedules are untouched.
TEST(WorkbenchConfig, MuonRunsScaleTheSchedulersLearningRatesForAdamW) {
  const auto preview = [&](const std::string& scheduler) {
    std::vector<std::string> groups;
    auto t = api::preview_run_config(kConfigDir + "/fmnist-mlp-muon.toml",
                                     {"scheduler={ " + scheduler + " }"}, 100, groups);
    EXPECT_EQ(groups, (std::vector<std::string>{"lr.muon", "lr.adamw"}));
    return t;
  };
  // fmnist-mlp-muon.toml: muon lr 0.02, adamw lr 0.001 (a ratio of 0.05).
  const auto cycle = preview("kind = \"one_cycle\", max_lr = 0.04, total_steps = 100");
  ASSERT_EQ(cycle.rows.size(), 101u);
  EXPECT_NEAR(cycle.rows[29].lr[0], 0.04, 1e-15);  // the peak: step pct_start x 100 - 1
  EXPECT_NEAR(cycle.rows[29].lr[1], 0.002, 1e-15);
  const auto seq = preview(
      "kind = \"sequential\", milestones = [10], schedulers = [{ kind = \"constant\", factor = "
      "0.5, total_iters = 10 }, { kind = \"cosine\", T_max = 90, eta_min = 0.004 }]");
  EXPECT_NEAR(seq.rows[5].lr[0], 0.01, 1e-15);
  EXPECT_NEAR(seq.rows[5].lr[1], 0.0005, 1e-15);
  EXPECT_NEAR(seq.rows[100].lr[0], 0.004, 1e-12);
  EXPECT_NEAR(seq.rows[100].lr[1], 0.0002, 1e-12);
  const auto swa = preview("kind = \"swa\", swa_lr = 0.01, anneal_epochs = 5");
  EXPECT_NEAR(swa.rows[50].lr[0], 0.01, 1e-15);
  EXPECT_NEAR(swa.rows[50].lr[1], 0.0005, 1e-15);
  // The scaling itself: only the kinds' learning-rate fields, lists element-wise.
  const nlohmann::json cyclic = {
      {"kind", "cyclic"}, {"base_lr", {0.1, 0.2}}, {"max_lr", 1.0}, {"step_size_up", 4}};
  const auto scaled = tb::sched::scale_lr_fields(cyclic, 0.5);
  EXPECT_EQ(scaled.at("base_lr"), nlohmann::json({0.05, 0.1}));
  EXPECT_EQ(scaled.at("max_lr"), 0.5);
  EXPECT_EQ(scaled.at("step_size_up"), 4);
}

// A run counted in epochs previews its whole length: epochs times the batches per epoch of its
// training data (the Fashion-MNIST example: 5 x ceil(60000/128) = 2345 steps, read from the
// label file's header), not 100 steps; data that cannot be read falls back to 100 with a note.
TEST(WorkbenchConfig, PreviewOfAnEpochRunCoversItsSteps) {
  std::vector<std::string> groups;
  std::string epochs = kBlobs;
  epochs.replace(epochs.find("steps = 20"), 10, "epochs = 3");
  // synthetic-blobs: 2048 training samples in batches of 32, 64 per epoch.
  EXPECT_EQ(api::preview_config_text(epochs, 0, groups).rows.size(), 3u * 64u + 1u);
  std::string ragged = epochs;
  ragged.replace(ragged.find("batch_size = 32"), 15, "batch_size = 30\ndrop_last = true");
  EXPECT_EQ(api::preview_config_text(ragged, 0, groups).rows.size(), 3u * 68u + 1u);
  ragged.replace(ragged.find("drop_last = true"), 16, "drop_last = false");
  EXPECT_EQ(api::preview_config_text(ragged, 0, groups).rows.size(), 3u * 69u + 1u);
  // Accumulating 4 batches a step: ceil(69 / 4) = 18 steps an epoch.
  std::string accumulated = ragged;
  accumulated.replace(accumulated.find("epochs = 3"), 10,
                      "epochs = 3\ngradient_accumulation_steps = 4");
  EXPECT_EQ(api::preview_config_text(accumulated, 0, groups).rows.size(), 3u * 18u + 1u);

  const std::string fmnist = kConfigDir + "/fmnist-mlp-adamw.toml";
  if (std::filesystem::exists(tb::data::FashionMnist::labels_file(
          tb::data::kFashionMnistDefaultDir, tb::data::FashionMnistSplit::kTrain))) {
    const auto t = api::preview_run_config(fmnist, {}, 0, groups);
    ASSERT_EQ(t.rows.size(), 2346u);
    EXPECT_TRUE(t.warnings.empty());
    // Cosine over the whole run: full LR at the start, near zero at the end.
    EXPECT_GT(t.rows[1].lr[0], 0.99e-3);
    EXPECT_LT(t.rows.back().lr[0], 1e-6);
  }
  const auto missing =
      api::preview_run_config(fmnist, {"data.path=/nonexistent/fmnist"}, 0, groups);
  EXPECT_EQ(missing.rows.size(), 101u);
  ASSERT_FALSE(missing.warnings.empty());
  EXPECT_NE(missing.warnings[0].find("the preview shows 100 steps"), std::string::npos);
  EXPECT_NE(missing.warnings[0].find("/nonexistent/fmnist"), std::string::npos)
      << missing.warnings[0];
}

TEST(WorkbenchConfig, ConfigDiffShowsExactlyTheDifferingKeys) {
  const std::string a = api::default_config_toml();
  const auto b = api::check_config_text(a, "<t>", {"optimizer.lr=0.003", "run.seed=7"});
  ASSERT_TRUE(b.ok) << b.error;
  const auto rows = api::config_diff({a, b.effective_toml});
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0].key, "optimizer.lr");
  EXPECT_EQ(rows[0].values, (std::vector<std::string>{"0.001", "0.003"}));
  EXPECT_EQ(rows[1].key, "run.seed");
  EXPECT_EQ(rows[1].values, (std::vector<std::string>{"0", "7"}));

  EXPECT_TRUE(api::config_diff({a, a}).empty());
  EXPECT_TRUE(api::config_diff({a, a, a}).empty());
  // Comments and spacing do not count.
  EXPECT_TRUE(api::config_diff({"[run]\nseed = 1  # the seed\n", "[run]\nseed=1\n"}).empty());

  // A key one config lacks shows "-".
  const auto muon = api::check_config_text("", "<t>", {"optimizer.kind=\"muon\""});
  ASSERT_TRUE(muon.ok) << muon.error;
  bool found = false;
  for (const auto& r : api::config_diff({a, muon.effective_toml}))
    if (r.key == "optimizer.muon.lr") {
      EXPECT_EQ(r.values, (std::vector<std::string>{"-", "0.001"}));
      found = true;
    }
  EXPECT_TRUE(found);
  found = false;
  for (const auto& r : api::config_diff({a, muon.effective_toml}))
    if (r.key == "optimizer.beta1") {
      EXPECT_EQ(r.values, (std::vector<std::string>{"0.9", "-"}));
      found = true;
    }
  EXPECT_TRUE(found);
}

// ---- runs started in-process --------------------------------------------------------------------

double value_of(const api::StepMetrics& m, const std::string& key) {
  for (const auto& [k, v] : m.values)
    if (k == key) return v;
  return std::nan("");
}

TEST(WorkbenchRun, TrainsIntoTheStoreWithLiveMetrics) {
  TempDir dir;
  api::TrainRequest req;
  req.config_text = kBlobs;
  req.db_path = dir.db();
  std::int64_t started = 0;
  std::string table;
  std::vector<api::StepMetrics> seen;
  const auto out = api::start_training(
      req,
      [&](std::int64_t id, const std::string& t) {
        started = id;
        table = t;
      },
      [&](const api::StepMetrics& m) { seen.push_back(m); });
  EXPECT_EQ(out.status, "finished") << out.message;
  EXPECT_EQ(out.run_id, started);
  EXPECT_TRUE(contains(table, "layers.0.weight")) << table;
  EXPECT_EQ(out.description, table);
  ASSERT_EQ(seen.size(), 20u);
  for (std::size_t i = 0; i < seen.size(); ++i) {
    EXPECT_EQ(seen[i].step, static_cast<std::int64_t>(i) + 1);
    EXPECT_EQ(seen[i].total, 20);
    EXPECT_EQ(seen[i].run_id, out.run_id);
    EXPECT_TRUE(std::isfinite(value_of(seen[i], "loss"))) << "step " << i + 1;
    if (i > 0) {
      EXPECT_GE(seen[i].wall_s, seen[i - 1].wall_s);
    }
  }
  EXPECT_EQ(seen.front().wall_s, 0.0);
  EXPECT_TRUE(std::isfinite(value_of(seen[9], "eval.accuracy")));  // eval.interval = 10

  api::StoreReader reader(req.db_path);
  EXPECT_EQ(reader.path(), req.db_path);
  const auto runs = reader.runs();
  ASSERT_EQ(runs.size(), 1u);
  const auto& r = runs[0];
  EXPECT_EQ(r.id, out.run_id);
  EXPECT_EQ(r.name, "blobs");
  EXPECT_EQ(r.status, "finished");
  EXPECT_EQ(r.last_step, 20);
  EXPECT_TRUE(r.started_at.has_value());
  EXPECT_TRUE(r.ended_at.has_value());
  EXPECT_EQ(r.model, "mlp");
  EXPECT_EQ(r.optimizer, "adamw");
  EXPECT_EQ(r.scheduler, "none");
  EXPECT_EQ(r.dataset, "synthetic-blobs");
  ASSERT_TRUE(r.final_loss.has_value());
  EXPECT_EQ(*r.final_loss, value_of(seen.back(), "loss"));
  ASSERT_TRUE(r.best_accuracy.has_value());
  EXPECT_EQ(*r.best_accuracy,
            std::max(value_of(seen[9], "eval.accuracy"), value_of(seen[19], "eval.accuracy")));
  ASSERT_TRUE(r.best_eval_loss.has_value());
  EXPECT_EQ(*r.best_eval_loss,
            std::min(value_of(seen[9], "eval.loss"), value_of(seen[19], "eval.loss")));
  EXPECT_FALSE(r.best_perplexity.has_value());  // a classifier

  const auto keys = reader.metric_keys(out.run_id);
  EXPECT_FALSE(keys.empty());
  EXPECT_TRUE(has(keys, "loss"));
  EXPECT_TRUE(std::is_sorted(keys.begin(), keys.end()));

  const auto loss = reader.series(out.run_id, "loss");
  ASSERT_EQ(loss.step.size(), 20u);
  ASSERT_EQ(loss.value.size(), 20u);
  ASSERT_EQ(loss.wall_s.size(), 20u);
  for (std::size_t i = 0; i < 20; ++i) {
    EXPECT_EQ(loss.step[i], static_cast<double>(i + 1));
    EXPECT_EQ(loss.value[i], value_of(seen[i], "loss"));
    if (i > 0) {
      EXPECT_GE(loss.wall_s[i], loss.wall_s[i - 1]);
    }
  }
  EXPECT_EQ(loss.wall_s[0], 0.0);
  // A later poll shares the origin.
  const auto tail = reader.series(out.run_id, "loss", 15);
  ASSERT_EQ(tail.step.size(), 6u);
  EXPECT_EQ(tail.step[0], 15.0);
  EXPECT_EQ(tail.wall_s[0], loss.wall_s[14]);
  EXPECT_TRUE(reader.series(out.run_id, "no.such.metric").step.empty());

  EXPECT_EQ(reader.config_text(out.run_id), api::check_config_text(kBlobs).effective_toml);
  EXPECT_THROW(reader.config_text(out.run_id + 100), tb::ValueError);
  const auto events = reader.events(out.run_id);
  EXPECT_TRUE(std::any_of(events.begin(), events.end(), [](const std::string& e) {
    return contains(e, "status running -> finished");
  }));
}

TEST(WorkbenchConfig, ADeviceThisMachineCannotUseIsMarked) {
  const auto ok = api::check_config_text(kBlobs, "<editor>", {"run.device=openreg:1"});
  EXPECT_TRUE(ok.ok) << ok.error;
  const auto bad = api::check_config_text(kBlobs, "<editor>", {"run.device=openreg:7"});
  EXPECT_FALSE(bad.ok);
  EXPECT_EQ(bad.key_path, "run.device");
  EXPECT_NE(bad.error.find("'openreg:7' cannot be used here: [openreg] no device openreg:7"),
            std::string::npos)
      << bad.error;
}

TEST(WorkbenchRun, CancelFromTheMetricsCallback) {
  TempDir dir;
  auto control = std::make_shared<api::RunControl>();
  api::TrainRequest req;
  req.config_text = kBlobs;
  req.db_path = dir.db();
  req.control = control;
  std::int64_t last = 0;
  const auto out = api::start_training(req, nullptr, [&](const api::StepMetrics& m) {
    last = m.step;
    if (m.step == 5) control->cancel();
  });
  EXPECT_EQ(out.status, "cancelled") << out.message;
  EXPECT_EQ(last, 5);
  EXPECT_TRUE(control->cancelled());
  EXPECT_FALSE(control->paused());
  api::StoreReader reader(req.db_path);
  const auto runs = reader.runs();
  ASSERT_EQ(runs.size(), 1u);
  EXPECT_EQ(runs[0].status, "cancelled");
  EXPECT_EQ(runs[0].last_step, 5);
}

TEST(WorkbenchRun, CancelBeforeTheRunStarts) {
  TempDir dir;
  auto control = std::make_shared<api::RunControl>();
  control->cancel();
  api::TrainRequest req;
  req.config_text = kBlobs;
  req.db_path = dir.db();
  req.control = control;
  int calls = 0;
  const auto out = api::start_training(req, nullptr, [&](const api::StepMetrics&) { ++calls; });
  EXPECT_EQ(out.status, "cancelled") << out.message;
  EXPECT_EQ(calls, 0);
  // No step ran: no empty checkpoint folder is left for the run.
  const std::filesystem::path ckpts = dir.path() / "checkpoints";
  if (std::filesystem::exists(ckpts)) {
    for (const auto& e : std::filesystem::recursive_directory_iterator(ckpts)) {
      EXPECT_NE(e.path().filename(), "run-" + std::to_string(out.run_id)) << e.path();
    }
  }
}

TEST(WorkbenchRun, PauseHoldsTheRunUntilResumeOrCancel) {
  for (const bool cancel : {false, true}) {
    TempDir dir;
    auto control = std::make_shared<api::RunControl>();
    api::TrainRequest req;
    req.config_text = kBlobs;
    req.db_path = dir.db();
    req.control = control;
    std::atomic<std::int64_t> last{0};
    std::atomic<std::int64_t> seen_while_paused{-1};
    std::thread releaser;
    const auto out = api::start_training(req, nullptr, [&](const api::StepMetrics& m) {
      last = m.step;
      if (m.step != 3) return;
      control->pause();
      releaser = std::thread([&] {
        std::this_thread::sleep_for(std::chrono::milliseconds(150));
        EXPECT_TRUE(control->paused());
        seen_while_paused = last.load();
        if (cancel) {
          control->cancel();
        } else {
          control->resume();
        }
      });
    });
    releaser.join();
    EXPECT_EQ(seen_while_paused.load(), 3) << "the run went on while paused";
    EXPECT_FALSE(control->paused());
    if (cancel) {
      EXPECT_EQ(out.status, "cancelled") << out.message;
      EXPECT_EQ(last.load(), 3);
    } else {
      EXPECT_EQ(out.status, "finished") << out.message;
      EXPECT_EQ(last.load(), 20);
    }
    // The pause is kept with the run's events (its status stayed running meanwhile).
    const std::vector<std::string> texts = api::StoreReader(req.db_path).events(out.run_id);
    EXPECT_TRUE(std::any_of(texts.begin(), texts.end(), [](const std::string& t) {
      return t.find("info: paused after step 3") != std::string::npos;
    })) << ::testing::PrintToString(texts);
    const bool resumed = std::any_of(texts.begin(), texts.end(), [](const std::string& t) {
      return t.find("info: resumed after ") != std::string::npos &&
             t.find(" s paused") != std::string::npos;
    });
    EXPECT_EQ(resumed, !cancel) << ::testing::PrintToString(texts);
  }
}

TEST(WorkbenchRun, AFailureAfterTheRunWasCreatedMarksItFailed) {
  TempDir dir;
  // A folder that exists (checked before the run is created) but holds no Fashion-MNIST (found
  // when the data set is read, after).
  const std::string folder = dir.path().string();
  api::TrainRequest req;
  req.config_text =
      "[run]\nname = \"no-data\"\nsteps = 5\n[data]\nkind = \"fashion-mnist\"\npath = \"" + folder +
      "\"\nworkers = 0\n";
  req.db_path = dir.db();
  bool started = false;
  const auto out = api::start_training(
      req, [&](std::int64_t, const std::string&) { started = true; }, nullptr);
  EXPECT_EQ(out.status, "failed");
  EXPECT_TRUE(contains(out.message, folder + "/train-images")) << out.message;
  EXPECT_FALSE(started);
  api::StoreReader reader(req.db_path);
  const auto runs = reader.runs();
  ASSERT_EQ(runs.size(), 1u);
  EXPECT_EQ(runs[0].id, out.run_id);
  EXPECT_EQ(runs[0].status, "failed");  // not left queued
  EXPECT_EQ(runs[0].message, out.message);
  EXPECT_EQ(runs[0].dataset, "fashion-mnist");

  // run_training (the CLI's) goes through the same lifecycle: the same status and message.
  const std::string path = (dir.path() / "no-data.toml").string();
  std::ofstream(path) << req.config_text;
  const auto cli =
      api::run_training(api::RunRequest{path, {}, req.db_path, std::nullopt, ""}, nullptr, nullptr);
  EXPECT_EQ(cli.status, "failed");
  EXPECT_TRUE(contains(cli.message, folder + "/train-images")) << cli.message;
  const auto after = reader.runs();
  ASSERT_EQ(after.size(), 2u);
  EXPECT_EQ(after[0].status, "failed");
  EXPECT_TRUE(contains(after[0].message, folder + "/train-images")) << after[0].message;
}

TEST(WorkbenchRun, ABadConfigThrowsAndStoresNothing) {
  TempDir dir;
  api::TrainRequest req;
  req.config_text = "[optimizer]\nlr_max = 1\n";
  req.db_path = dir.db();
  EXPECT_THROW(api::start_training(req, nullptr, nullptr), tb::ValueError);
  EXPECT_TRUE(api::StoreReader(req.db_path).runs().empty());
  // So is a file the config names that is not there: a config error before the run is created.
  const std::vector<std::pair<std::string, std::string>> missing = {
      {"[data]\nkind = \"fashion-mnist\"\npath = \"/nonexistent/fmnist\"\n",
       "[config] <editor>: data.path: /nonexistent/fmnist: no such file or folder"},
      {"[run]\ninit_from = \"/nonexistent.safetensors\"\n",
       "[config] <editor>: run.init_from: /nonexistent.safetensors: no such file or folder (a "
       "safetensors file: GPT-2's weights are the model.safetensors of "
       "huggingface.co/openai-community/gpt2 and its -medium, -large, -xl; a run of this store "
       "continues with `trainbench-cli run --resume RUN`)"},
      {"[model]\nkind = \"qwen-tiny\"\n[data]\nkind = \"text\"\ntokenizer = \"sentencepiece\"\n"
       "tokenizer_model = \"/nonexistent.model\"\n",
       "[config] <editor>: data.tokenizer_model: /nonexistent.model: no such file or folder"}};
  for (const auto& [toml, message] : missing) {
    req.config_text = toml;
    EXPECT_EQ(tb::test::error_of([&] { api::start_training(req, nullptr, nullptr); }), message);
  }
  // A name is one line: a newline in it split its row of the runs table.
  req.config_text = "[run]\nname = \"two\\nlines\"\n";
  EXPECT_EQ(
      tb::test::error_of([&] { api::start_training(req, nullptr, nullptr); }),
      "[config] <editor>: run.name: a run name is one line of text, without control characters (a "
      "newline, a tab)");
  // A key that names one file refuses a folder (reading it failed later with a vaguer error).
  req.config_text = "[run]\ninit_from = \"" + dir.path().string() + "\"\n";
  EXPECT_EQ(
      tb::test::error_of([&] { api::start_training(req, nullptr, nullptr); }),
      "[config] <editor>: run.init_from: " + dir.path().string() + " is a folder; name a file");
  EXPECT_TRUE(api::StoreReader(req.db_path).runs().empty());
  // A tokenizer file the tokenizer does not read is refused (it would be ignored), and one it
  // reads is required.
  const std::string tokens =
      "[model]\nkind = \"qwen-tiny\"\nvocab = 50257\n[data]\nkind = \"tokens\"\npath = \"" +
      (dir.path() / "shard_*.bin").string() + "\"\n";
  req.config_text = tokens + "tokenizer_model = \"/nonexistent/vocab.json\"\n";
  EXPECT_EQ(tb::test::error_of([&] { api::start_training(req, nullptr, nullptr); }),
            "[config] <editor>: data.tokenizer_model: is only read with data.tokenizer = \"gpt2\", "
            "found tokenizer = \"ids\"; set data.tokenizer = \"gpt2\" to use "
            "/nonexistent/vocab.json, or remove the key");
  req.config_text = tokens + "tokenizer = \"gpt2\"\n";
  EXPECT_TRUE(contains(tb::test::error_of([&] { api::start_training(req, nullptr, nullptr); }),
                       "data.tokenizer_model: is required with data.tokenizer = \"gpt2\": the "
                       "path of GPT-2's vocab.json"));
  req.config_text = "[model]\nkind = \"qwen-tiny\"\n[data]\nkind = \"text\"\n";
  req.overrides = {"data.tokenizer=sentencepiece"};
  EXPECT_EQ(tb::test::error_of([&] { api::start_training(req, nullptr, nullptr); }),
            "[config] <editor>: data.tokenizer_model: is required with data.tokenizer = "
            "\"sentencepiece\": the path of a SentencePiece .model file (trainbench-cli tokenizer "
            "train makes one)");
  req.overrides.clear();
  EXPECT_TRUE(api::StoreReader(req.db_path).runs().empty());
  // A pattern of token shards must match a file (what is in it is checked when it is read: a
  // bad one fails the created run).
  req.config_text = tokens;
  EXPECT_EQ(
      tb::test::error_of([&] { api::start_training(req, nullptr, nullptr); }),
      "[config] <editor>: data.path: no file in " + dir.path().string() + " matches shard_*.bin");
  EXPECT_TRUE(api::StoreReader(req.db_path).runs().empty());
  std::ofstream(dir.path() / "shard_0.bin") << "not tokens";
  const auto shards = api::start_training(req, nullptr, nullptr);
  EXPECT_EQ(shards.status, "failed");
  EXPECT_FALSE(contains(shards.message, "[config]")) << shards.message;
}

// ---- the store reader ---------------------------------------------------------------------------

TEST(WorkbenchStore, RunFactsFromStoredMetrics) {
  TempDir dir;
  std::int64_t id = 0;
  {
    auto st = store::RunStore::open(dir.db());
    store::NewRun nr;
    nr.name = "logged";
    nr.config = api::check_config_text(read_text(kConfigDir + "/qwen-tiny-fortunes-muon.toml"))
                    .effective_toml;
    id = st.create_run(nr);
  }
  api::StoreReader reader(dir.db());
  {
    store::RunWriter w(dir.db(), id);
    w.log_metrics(1, {{"loss", 3.0}});
    w.log_metrics(2, {{"loss", 2.5}, {"eval.loss", 2.7}, {"eval.perplexity", 14.9}});
    w.flush();
    const auto live = reader.runs();
    ASSERT_EQ(live.size(), 1u);
    EXPECT_EQ(live[0].status, "running");
    EXPECT_EQ(live[0].last_step, 2);
    EXPECT_EQ(live[0].final_loss, 2.5);
    const std::string fp = reader.fingerprint();
    w.log_metrics(4, {{"loss", 2.0}, {"eval.loss", 2.4}, {"eval.perplexity", 11.0}});
    w.log_metrics(5, {{"loss", 2.2}, {"eval.loss", 2.6}, {"eval.perplexity", 13.5}});
    w.flush();
    EXPECT_NE(reader.fingerprint(), fp);  // a new step
    // Still running: the facts follow from the points after step 2 (not every point again),
    // and come out as a whole read would.
    const auto followed = reader.runs();
    ASSERT_EQ(followed.size(), 1u);
    EXPECT_EQ(followed[0].last_step, 5);
    EXPECT_EQ(followed[0].final_loss, 2.2);
    EXPECT_EQ(followed[0].best_eval_loss, 2.4);
    EXPECT_EQ(followed[0].best_perplexity, 11.0);
    w.log_metrics(6, {{"loss", std::nan("")}, {"eval.loss", 2.3}});
    w.flush();
    const auto nan_last = reader.runs();
    EXPECT_FALSE(nan_last[0].final_loss.has_value());  // the last loss is NaN
    EXPECT_EQ(nan_last[0].best_eval_loss, 2.3);
    w.log_metrics(7, {{"loss", 2.2}});
    w.flush();
    EXPECT_EQ(reader.runs()[0].final_loss, 2.2);
    w.set_status(store::RunStatus::kFinished, "done");
    w.close();
  }
  const auto runs = reader.runs();
  ASSERT_EQ(runs.size(), 1u);
  const auto& r = runs[0];
  EXPECT_EQ(r.status, "finished");
  EXPECT_EQ(r.message, "done");
  EXPECT_EQ(r.model, "qwen-tiny");
  EXPECT_EQ(r.optimizer, "muon");
  EXPECT_EQ(r.scheduler, "sequential");  // warm-up, then cosine
  EXPECT_EQ(r.dataset, "text");
  EXPECT_EQ(r.final_loss, 2.2);
  EXPECT_EQ(r.best_eval_loss, 2.3);
  EXPECT_EQ(r.best_perplexity, 11.0);
  EXPECT_FALSE(r.best_accuracy.has_value());
  const auto s = reader.series(id, "eval.loss", 4);
  EXPECT_EQ(s.step, (std::vector<double>{4, 5, 6}));
  EXPECT_EQ(s.value, (std::vector<double>{2.4, 2.6, 2.3}));
  EXPECT_GE(s.wall_s[0], 0.0);
}

// Time to a target counts the time a run trained: the time it spent cancelled before its resume
// (a sweep trial waiting at a rung) is left out, as its duration leaves it out.
TEST(WorkbenchStore, TrainedSecondsLeaveOutTheTimeARunSpentEndedBeforeItsResume) {
  TempDir dir;
  const std::int64_t id = store::RunStore::open(dir.db()).create_run({.name = "paused"});
  {
    store::RunWriter w(dir.db(), id);
    w.set_status(store::RunStatus::kCancelled);
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(1200));
  {
    store::RunWriter w(dir.db(), id);
    w.set_status(store::RunStatus::kFinished);
  }
  api::StoreReader reader(dir.db());
  const store::RunSummary s = store::RunStore::open(dir.db()).get_run(id).summary;
  const double end = *s.ended_at;
  EXPECT_GT(end - *s.started_at, 1.1);
  EXPECT_LT(reader.trained_seconds(id, end), 0.5);  // the 1.2 s cancelled left out
  EXPECT_NEAR(reader.trained_seconds(id, end), *s.duration_seconds(0), 0.01);
  EXPECT_EQ(reader.trained_seconds(id, *s.started_at), 0.0);
}

// A crash found later (the store opened a while after its writer died) and then resumed: the time
// to a target leaves out the time from the writer's end to the resume, not only from the finding.
TEST(WorkbenchStore, TrainedSecondsLeaveOutTheTimeACrashedRunWaitedToBeFound) {
  TempDir dir;
  const std::int64_t id = store::RunStore::open(dir.db()).create_run({.name = "crashed"});
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {  // the writer dies without closing the run
    try {
      store::RunWriter w(dir.db(), id);
      w.log_metrics(0, {{"loss", 1.0}});
      w.flush();
      _exit(0);  // the writer is never closed
    } catch (...) {
      _exit(3);
    }
  }
  int status = 0;
  waitpid(child, &status, 0);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(1200));  // nobody looks
  (void)store::RunStore::open(dir.db());  // opening the store finds the crash
  {
    store::RunWriter w(dir.db(), id);  // a resume
    w.set_status(store::RunStatus::kFinished);
  }
  auto reopened = store::RunStore::open(dir.db());
  bool crashed = false;
  for (const auto& e : reopened.events(id))
    crashed |= e.text.rfind("status running -> crashed", 0) == 0;
  ASSERT_TRUE(crashed) << "the writer's end was not taken as a crash";
  const store::RunSummary s = reopened.get_run(id).summary;
  ASSERT_EQ(s.status, store::RunStatus::kFinished);
  const double end = *s.ended_at;
  EXPECT_GT(end - *s.started_at, 1.1);
  api::StoreReader reader(dir.db());
  EXPECT_LT(reader.trained_seconds(id, end), 0.5);  // the 1.2 s unseen crashed left out
  EXPECT_NEAR(reader.trained_seconds(id, end), *s.duration_seconds(0), 0.01);
}

TEST(WorkbenchStore, DataParallelRunsShowTheirRanks) {
  TempDir dir;
  auto st = store::RunStore::open(dir.db());
  store::NewRun nr;
  nr.name = "one process";
  nr.config = api::default_config_toml();
  const std::int64_t plain = st.create_run(nr);
  nr.name = "launched";  // trainbench-cli launch --ddp --nproc 2 stores the resolved size
  nr.config = "[model]\nkind = \"mlp\"\n[distributed]\nbackend = \"mpi\"\nworld_size = 2\n";
  const std::int64_t launched = st.create_run(nr);
  nr.name = "torchrun";  // world_size from the environment: the ranks' metrics tell
  nr.config = "[model]\nkind = \"mlp\"\n[distributed]\nbackend = \"mpi\"\nworld_size = 0\n";
  const std::int64_t env = st.create_run(nr);
  {
    store::RunWriter w(dir.db(), env);
    w.log_metrics(1, {{"loss", 1.0}, {"rank0/time.data_ms", 0.1}, {"rank2/time.data_ms", 0.1}});
    w.close();
  }
  api::StoreReader reader(dir.db());
  std::map<std::int64_t, api::RunInfo> by_id;
  for (const auto& r : reader.runs())
    by_id[r.id] = r;
  EXPECT_EQ(by_id.at(plain).world_size, 1);
  EXPECT_EQ(by_id.at(plain).dist_backend, "");
  EXPECT_EQ(by_id.at(launched).world_size, 2);
  EXPECT_EQ(by_id.at(launched).dist_backend, "mpi");
  EXPECT_EQ(by_id.at(env).world_size, 3);
  EXPECT_EQ(by_id.at(env).dist_backend, "mpi");
}

TEST(WorkbenchStore, RenameTagsDeleteAndFingerprint) {
  TempDir dir;
  std::int64_t a = 0;
  std::int64_t b = 0;
  {
    auto st = store::RunStore::open(dir.db());
    store::NewRun nr;
    nr.name = "first";
    nr.config = api::default_config_toml();
    a = st.create_run(nr);
    nr.name = "second";
    b = st.create_run(nr);
  }
  api::StoreReader reader(dir.db());
  const std::string fp0 = reader.fingerprint();
  EXPECT_EQ(reader.fingerprint(), fp0);  // nothing changed
  auto runs = reader.runs();
  ASSERT_EQ(runs.size(), 2u);
  EXPECT_EQ(runs[0].id, b);  // newest first
  EXPECT_EQ(runs[1].id, a);
  EXPECT_EQ(runs[1].status, "queued");
  EXPECT_EQ(runs[1].model, "mlp");
  EXPECT_EQ(runs[1].scheduler, "none");
  EXPECT_FALSE(runs[1].final_loss.has_value());

  reader.rename_run(a, "renamed");
  const std::string fp1 = reader.fingerprint();
  EXPECT_NE(fp1, fp0);
  EXPECT_EQ(reader.runs()[1].name, "renamed");
  EXPECT_THROW(reader.rename_run(a, ""), tb::ValueError);
  EXPECT_EQ(reader.fingerprint(), fp1);

  reader.set_tags(a, {"x", "y"});
  const std::string fp2 = reader.fingerprint();
  EXPECT_NE(fp2, fp1);
  EXPECT_EQ(reader.runs()[1].tags, (std::vector<std::string>{"x", "y"}));

  // A change by another connection shows too.
  store::RunStore::open(dir.db()).set_status(b, store::RunStatus::kCancelled, "by hand");
  const std::string fp3 = reader.fingerprint();
  EXPECT_NE(fp3, fp2);
  EXPECT_EQ(reader.runs()[0].status, "cancelled");

  reader.delete_run(a);
  EXPECT_NE(reader.fingerprint(), fp3);
  runs = reader.runs();
  ASSERT_EQ(runs.size(), 1u);
  EXPECT_EQ(runs[0].id, b);
  EXPECT_THROW(reader.delete_run(a), tb::ValueError);

  // Moves keep the connection.
  api::StoreReader moved(std::move(reader));
  EXPECT_EQ(moved.runs().size(), 1u);
}

TEST(WorkbenchStore, AForeignFileIsRefusedAndKept) {
  TempDir dir;
  { std::ofstream(dir.db()) << "not a database, but somebody's notes\n"; }
  try {
    api::StoreReader reader(dir.db());
    ADD_FAILURE() << "a foreign file was opened";
  } catch (const tb::Error& e) {
    EXPECT_TRUE(contains(e.what(), dir.db())) << e.what();
  }
  EXPECT_EQ(read_text(dir.db()), "not a database, but somebody's notes\n");
}

// Start / pause / resume / cancel 100 times in quick succession from another thread, as the GUI
// does (issue 10): every run ends finished or cancelled with its status stored, no call blocks
// for long, and no thread is left behind. (Under the tsan preset this is also the data-race
// check of the run controls.)
std::size_t thread_count() {
  std::size_t n = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator("/proc/self/task"))
    ++n;
  return n;
}

TEST(WorkbenchRun, HundredRapidStartStopCyclesLeaveNothingBehind) {
  TempDir dir;
  std::mt19937 rng(7);
  auto cycle = [&](int i) {
    auto control = std::make_shared<api::RunControl>();
    api::TrainRequest req;
    req.config_text = kBlobs;
    req.db_path = dir.db();
    req.control = control;
    api::RunOutcomeInfo out;
    std::thread runner([&] { out = api::start_training(req, nullptr, nullptr); });
    // The "GUI thread": a few random control calls, a few hundred microseconds apart.
    const int actions = static_cast<int>(rng() % 5);
    for (int a = 0; a < actions; ++a) {
      std::this_thread::sleep_for(std::chrono::microseconds(rng() % 3000));
      switch (rng() % 3) {
        case 0:
          control->pause();
          break;
        case 1:
          control->resume();
          break;
        default:
          control->cancel();
      }
    }
    if (control->paused() && !control->cancelled()) control->resume();
    if (i % 2 == 0) control->cancel();
    runner.join();
    EXPECT_TRUE(out.status == "finished" || out.status == "cancelled")
        << "cycle " << i << ": " << out.status << " " << out.message;
    return out.status;
  };
  cycle(-1);  // warm-up: the kernel pool and the store's first open
  const std::size_t threads_before = thread_count();
  int cancelled = 0;
  for (int i = 0; i < 100; ++i)
    cancelled += cycle(i) == "cancelled" ? 1 : 0;
  EXPECT_GE(cancelled, 50);  // every even cycle cancels (if the run had not finished yet)
  EXPECT_LE(thread_count(), threads_before) << "threads left behind";
  api::StoreReader reader(dir.db());
  const auto runs = reader.runs();
  ASSERT_EQ(runs.size(), 101u);
  for (const auto& r : runs)
    EXPECT_TRUE(r.status == "finished" || r.status == "cancelled") << r.id << " " << r.status;
}

}  // namespace

// A distributed run started from the workbench: its 2 ranks run in other processes (trainbench-cli
// launch --ddp), this process follows the run rank 0 writes, and cancel reaches every rank.
TEST(WorkbenchRun, DistributedRunIsFollowedLikeAnInProcessOne) {
#ifndef TB_CLI_PATH
  GTEST_SKIP() << "this build has no MPI";
#else
  setenv("TB_CLI", TB_CLI_PATH, 1);
  TempDir dir;
  api::TrainRequest req;
  req.config_text = kBlobs + "\n[distributed]\nbackend = \"mpi\"\nworld_size = 2\n";
  req.db_path = dir.db();
  req.overrides = {"threads=1", "eval.at_start=true"};
  std::int64_t started = 0;
  std::vector<api::StepMetrics> seen;
  auto out = api::start_training(
      req, [&](std::int64_t id, const std::string&) { started = id; },
      [&](const api::StepMetrics& m) { seen.push_back(m); });
  EXPECT_EQ(out.status, "finished") << out.message;
  EXPECT_EQ(started, out.run_id);
  ASSERT_EQ(seen.size(), 21u);  // the initial evaluation (step 0), then steps 1..20
  EXPECT_EQ(seen.front().step, 0);
  EXPECT_EQ(seen.back().step, 20);
  bool rank1 = false;
  for (const auto& [k, v] : seen.back().values)
    rank1 = rank1 || k == "rank1/time.forward_ms";
  EXPECT_TRUE(rank1) << "rank 1's phase times are logged";

  // Pause once it trains (the ranks hold: no new step for a while), resume, then cancel: every
  // rank stops after the same step, the run is cancelled.
  auto control = std::make_shared<api::RunControl>();
  req.control = control;
  req.overrides = {"threads=1", "run.steps=100000000", "eval.interval=0"};
  std::atomic<std::int64_t> last{0};
  std::int64_t held_at = 0;
  std::int64_t at_1s = -1;
  std::int64_t at_2s = -2;
  std::thread driver;
  out = api::start_training(req, nullptr, [&](const api::StepMetrics& m) {
    last = m.step;
    if (held_at != 0) return;
    held_at = m.step;
    control->pause();
    driver = std::thread([&] {
      // Steps under way when the pause arrives still log; then nothing until the resume.
      std::this_thread::sleep_for(std::chrono::seconds(1));
      at_1s = last.load();
      std::this_thread::sleep_for(std::chrono::seconds(1));
      at_2s = last.load();
      control->resume();
      std::this_thread::sleep_for(std::chrono::milliseconds(600));
      control->cancel();
    });
  });
  if (driver.joinable()) driver.join();
  EXPECT_EQ(out.status, "cancelled") << out.message;
  EXPECT_EQ(at_1s, at_2s) << "the ranks did not hold while paused";
  EXPECT_GT(last.load(), at_2s) << "the ranks did not resume";
  unsetenv("TB_CLI");
#endif
}
