// RunConfig: the example configs, defaults, every kind of validation message, --set overrides
// and the to_toml round trip.
#include "engine/train/run_config.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "engine/api/engine_api.h"
#include "engine/core/error.h"
#include "engine/data/registry.h"
#include "tests/engine/test_util.h"

namespace tb::train {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

const std::string kConfigDir = std::string(TB_TEST_DATA_DIR) + "/../../resources/configs";

const std::vector<std::string> kExamples = {"fmnist-mlp-adamw.toml",
                                            "fmnist-mlp-muon.toml",
                                            "fmnist-cnn-adamw.toml",
                                            "fmnist-cnn-muon.toml",
                                            "qwen-tiny-fortunes-adamw.toml",
                                            "qwen-tiny-fortunes-muon.toml",
                                            "gpt-tokens-muon.toml",
                                            "gpt-tokens-adamw.toml",
                                            "qwen-tiny-fortunes-sentencepiece.toml"};

// The message of the tb::ValueError that parsing `text` (with `overrides`) throws.
std::string error_of(const std::string& text, const std::vector<std::string>& overrides = {}) {
  try {
    (void)parse_run_config(text, "run.toml", overrides);
  } catch (const ValueError& e) {
    return e.what();
  }
  ADD_FAILURE() << "no error for:\n" << text;
  return "";
}

TEST(RunConfigTest, ExamplesParse) {
  for (const auto& name : kExamples) {
    SCOPED_TRACE(name);
    const RunConfig c = load_run_config(kConfigDir + "/" + name);
    EXPECT_FALSE(c.run.name.empty());
    EXPECT_FALSE(c.scheduler.config.is_null());
  }
  // The README lists every example; nothing else lies there.
  std::size_t tomls = 0;
  for (const auto& e : std::filesystem::directory_iterator(kConfigDir))
    tomls += e.path().extension() == ".toml";
  EXPECT_EQ(tomls, kExamples.size());
}

TEST(RunConfigTest, ExamplePairsCompare) {
  const RunConfig a = load_run_config(kConfigDir + "/fmnist-mlp-adamw.toml");
  const RunConfig m = load_run_config(kConfigDir + "/fmnist-mlp-muon.toml");
  EXPECT_EQ(a.run.seed, m.run.seed);
  EXPECT_EQ(a.run.epochs, 5);
  EXPECT_EQ(m.run.epochs, 5);
  EXPECT_EQ(a.data.batch_size, 128);
  EXPECT_EQ(nn::to_json(a.model), nn::to_json(m.model));
  const auto mlp = nn::mlp_config(a.model);
  EXPECT_EQ(mlp.input, 784);
  EXPECT_EQ(mlp.hidden, (std::vector<std::int64_t>{256, 256}));
  EXPECT_EQ(mlp.classes, 10);
  EXPECT_EQ(a.optimizer.main.kind, "adamw");
  EXPECT_DOUBLE_EQ(a.optimizer.main.number("lr"), 1e-3);
  EXPECT_DOUBLE_EQ(a.optimizer.main.number("weight_decay"), 0.01);
  EXPECT_EQ(a.scheduler.config.at("kind"), "cosine");
  EXPECT_FALSE(a.optimizer.adamw.has_value());
  EXPECT_EQ(m.optimizer.main.kind, "muon");
  EXPECT_DOUBLE_EQ(m.optimizer.main.number("lr"), 0.02);
  EXPECT_DOUBLE_EQ(m.optimizer.main.number("momentum"), 0.95);
  ASSERT_TRUE(m.optimizer.adamw.has_value());
  EXPECT_EQ(m.optimizer.adamw->kind, "adamw");
  EXPECT_DOUBLE_EQ(m.optimizer.adamw->number("lr"), 1e-3);

  const RunConfig qa = load_run_config(kConfigDir + "/qwen-tiny-fortunes-adamw.toml");
  const RunConfig qm = load_run_config(kConfigDir + "/qwen-tiny-fortunes-muon.toml");
  EXPECT_EQ(nn::to_json(qa.model), nn::to_json(qm.model));
  EXPECT_EQ(qa.run.steps, qm.run.steps);
  EXPECT_EQ(qa.run.seed, qm.run.seed);
  EXPECT_EQ(qa.data.batch_size, qm.data.batch_size);
  EXPECT_EQ(qa.data.context_length, qm.data.context_length);
  EXPECT_EQ(qa.scheduler.config, qm.scheduler.config);
  EXPECT_EQ(qa.scheduler.config.at("kind"), "sequential");
  EXPECT_EQ(qm.optimizer.main.kind, "muon");
}

TEST(RunConfigTest, EmptyTextGivesDefaults) {
  const RunConfig c = parse_run_config("");
  const RunConfig d;
  EXPECT_EQ(c.run.name, d.run.name);
  EXPECT_EQ(c.run.epochs, 1);
  EXPECT_EQ(c.run.steps, 0);
  EXPECT_EQ(c.run.device, "cpu");
  EXPECT_EQ(nn::model_kind(c.model), "mlp");
  EXPECT_EQ(c.data.kind, "fashion-mnist");
  EXPECT_EQ(c.data.batch_size, 128);
  EXPECT_EQ(c.optimizer.main.kind, "adamw");
  EXPECT_DOUBLE_EQ(c.optimizer.main.number("lr"), 1e-3);
  EXPECT_TRUE(c.optimizer.split.empty());
  EXPECT_TRUE(c.scheduler.config.is_null());
  EXPECT_FALSE(c.amp.enabled);
  EXPECT_EQ(c.amp.dtype, "bf16");
  EXPECT_FALSE(c.amp.grad_scaler);
  EXPECT_EQ(c.swa.kind, "none");
  EXPECT_EQ(c.checkpoint.keep, 3);
  EXPECT_EQ(c.binding.mode, "none");
  EXPECT_EQ(c.threads, 0);
}

TEST(RunConfigTest, MuonDefaultsAndAdamwFilledIn) {
  const RunConfig c =
      parse_run_config("[optimizer]\nkind = \"muon\"\n[optimizer.muon]\nlr = 0.05\n");
  EXPECT_EQ(c.optimizer.main.kind, "muon");
  EXPECT_DOUBLE_EQ(c.optimizer.main.number("lr"), 0.05);
  EXPECT_DOUBLE_EQ(c.optimizer.main.number("momentum"), 0.95);
  EXPECT_TRUE(c.optimizer.main.values.at("nesterov").get<bool>());
  EXPECT_DOUBLE_EQ(c.optimizer.main.number("eps"), 1e-7);
  ASSERT_TRUE(c.optimizer.adamw.has_value());  // absent sub-table: AdamW defaults
  EXPECT_EQ(c.optimizer.adamw->kind, "adamw");
  EXPECT_DOUBLE_EQ(c.optimizer.adamw->number("lr"), 1e-3);
  EXPECT_DOUBLE_EQ(c.optimizer.adamw->number("eps"), 1e-8);
}

TEST(RunConfigTest, MuonSplit) {
  const RunConfig c = parse_run_config(
      "[optimizer]\nkind = \"muon\"\nsplit = [[\"*.mlp.*\", \"adamw\"], [\"layers.0.*\", "
      "\"muon\"]]\n");
  ASSERT_EQ(c.optimizer.split.size(), 2u);
  EXPECT_EQ(c.optimizer.split[0], (std::pair<std::string, std::string>{"*.mlp.*", "adamw"}));
  EXPECT_EQ(c.optimizer.split[1].second, "muon");
  EXPECT_THAT(error_of("[optimizer]\nkind = \"muon\"\nsplit = [[\"*\", \"sgd\"]]\n"),
              HasSubstr("optimizer.split[0]: expected \"muon\" or \"adamw\""));
  EXPECT_THAT(error_of("[optimizer]\nkind = \"muon\"\nsplit = [\"*\"]\n"),
              HasSubstr("optimizer.split[0]: expected an array of [glob,"));
  EXPECT_THAT(error_of("[optimizer]\nsplit = [[\"*\", \"adamw\"]]\n"),
              HasSubstr("optimizer.split: only read with optimizer.kind = \"muon\""));
  EXPECT_THAT(error_of("[optimizer]\nkind = \"muon\"\nlr = 0.1\n"),
              HasSubstr("unknown key 'optimizer.lr' with optimizer.kind = \"muon\"; did you mean "
                        "'optimizer.muon.lr'"));
}

TEST(RunConfigTest, AmpFp16DefaultsToGradScaler) {
  EXPECT_TRUE(parse_run_config("[amp]\nenabled = true\ndtype = \"fp16\"\n").amp.grad_scaler);
  EXPECT_FALSE(parse_run_config("[amp]\nenabled = true\ndtype = \"bf16\"\n").amp.grad_scaler);
  EXPECT_FALSE(parse_run_config("[amp]\ndtype = \"fp16\"\ngrad_scaler = false\n").amp.grad_scaler);
}

TEST(RunConfigTest, TypeErrors) {
  EXPECT_EQ(error_of("[optimizer]\nlr = \"fast\"\n"),
            "[config] run.toml: optimizer.lr: expected a number, found string \"fast\"");
  EXPECT_EQ(error_of("[data]\nbatch_size = 1.5\n"),
            "[config] run.toml: data.batch_size: expected an integer, found float 1.5");
  EXPECT_EQ(error_of("[data]\nshuffle = 1\n"),
            "[config] run.toml: data.shuffle: expected a boolean (true or false), found integer 1");
  EXPECT_THAT(error_of("[run]\ntags = \"a\"\n"),
              HasSubstr("run.tags: expected an array of strings, found string \"a\""));
  EXPECT_THAT(error_of("run = 3\n"), HasSubstr("run: expected a table, found integer 3"));
  EXPECT_THAT(error_of("[model]\nhidden = [1.5]\n"),
              HasSubstr("model.hidden: expected an array of integers"));
  EXPECT_THAT(error_of("[run]\nseed = -1\n"), HasSubstr("run.seed: expected an integer >= 0"));
  // Samples of a classifier: refused before training, not at the first evaluation.
  EXPECT_THAT(error_of("[eval]\nsamples = 2\n"),
              HasSubstr("eval.samples: a \"mlp\" model generates no text: eval.samples needs a "
                        "language model"));
}

// swa.use_buffers is new: an effective config an earlier build stored (every key but this one)
// goes on as its run did, copying the live buffers; a config a person writes gets the default.
TEST(RunConfigTest, SwaUseBuffersOfAConfigStoredBeforeTheKey) {
  const std::string swa = "[swa]\nkind = \"ema\"\n";
  EXPECT_TRUE(tb::train::parse_run_config(swa, "run.toml").swa.use_buffers);
  const std::string stored = std::string(tb::train::kEffectiveHeader) + "\n" + swa;
  EXPECT_FALSE(tb::train::parse_run_config(stored, "run 1's stored config").swa.use_buffers);
  EXPECT_TRUE(
      tb::train::parse_run_config(stored + "use_buffers = true\n", "stored").swa.use_buffers);
  EXPECT_TRUE(
      tb::train::parse_run_config(stored, "stored", {"swa.use_buffers=true"}).swa.use_buffers);
  // What this build stores keeps its value.
  auto c = tb::train::parse_run_config(swa, "run.toml");
  EXPECT_TRUE(tb::train::parse_run_config(tb::train::to_toml(c), "stored").swa.use_buffers);
}

TEST(RunConfigTest, WeightDecayParams) {
  EXPECT_EQ(tb::train::parse_run_config("", "run.toml").optimizer.weight_decay_params, "all");
  EXPECT_EQ(
      tb::train::parse_run_config("[optimizer]\nweight_decay_params = \"matrices\"\n", "run.toml")
          .optimizer.weight_decay_params,
      "matrices");
  // At [optimizer] level with Muon too (its matrices always decay; AdamW's rest is split).
  EXPECT_EQ(tb::train::parse_run_config(
                "[optimizer]\nkind = \"muon\"\nweight_decay_params = \"matrices\"\n", "run.toml")
                .optimizer.weight_decay_params,
            "matrices");
  EXPECT_THAT(error_of("[optimizer]\nweight_decay_params = \"bias\"\n"),
              HasSubstr("optimizer.weight_decay_params: expected one of \"all\", \"matrices\""));
}

TEST(RunConfigTest, RangeErrors) {
  EXPECT_EQ(error_of("[optimizer]\nlr = -0.1\n"),
            "[config] run.toml: optimizer.lr: expected a finite number >= 0.0, found -0.1");
  EXPECT_EQ(error_of("[data]\nbatch_size = 0\n"),
            "[config] run.toml: data.batch_size: expected an integer >= 1, found 0");
  EXPECT_EQ(error_of("[data]\nval_fraction = 1.0\n"),
            "[config] run.toml: data.val_fraction: expected a number in (0.0, 1.0), found 1.0");
  EXPECT_THAT(error_of("[optimizer]\nbeta2 = 1.0\n"),
              HasSubstr("optimizer.beta2: expected a number in [0.0, 1.0), found 1.0"));
  EXPECT_THAT(error_of("[optimizer]\nlr = inf\n"), HasSubstr("found inf"));
  EXPECT_THAT(error_of("[swa]\nevery = 0\n"), HasSubstr("swa.every: expected an integer >= 1"));
  EXPECT_THAT(error_of("threads = -2\n"), HasSubstr("threads: expected an integer >= 0"));
  EXPECT_EQ(error_of("", {"data.batch_size=99999999999999999999"}),
            "[config] run.toml: --set data.batch_size=99999999999999999999: 99999999999999999999 "
            "is larger than the largest integer (2^63 - 1)");
  EXPECT_EQ(error_of("", {"run.seed=-99999999999999999999"}),
            "[config] run.toml: --set run.seed=-99999999999999999999: -99999999999999999999 "
            "is smaller than the smallest integer (-2^63)");
  // 100000 loader threads failed the run with "Resource temporarily unavailable", naming nothing.
  EXPECT_THAT(error_of("[data]\nworkers = 100000\n"),
              HasSubstr("data.workers: expected an integer <= 256, found 100000"));
  EXPECT_THAT(error_of("threads = 99999\n"),
              HasSubstr("threads: expected an integer <= 1024, found 99999"));
  EXPECT_THAT(error_of("[run]\nepochs = 0\n"),
              HasSubstr("run.steps: expected run.steps > 0 or run.epochs > 0, found steps = 0 "
                        "and epochs = 0"));
  EXPECT_THAT(error_of("[optimizer]\nkind = \"sgd\"\nnesterov = true\n"),
              HasSubstr("optimizer.nesterov: expected false when momentum is 0"));
  // The model's own validation, prefixed with the section.
  EXPECT_THAT(error_of("[model]\ndropout = 1.5\n"),
              HasSubstr("[config] run.toml: model: mlp: dropout must be in [0, 1)"));
}

// Checks that need more than one field's bounds are made with the config too, so a mistake is a
// config error (exit code 1, no run created), not a run that fails when it starts.
TEST(RunConfigTest, KindChecksAndCpuListsFailWithTheConfig) {
  EXPECT_THAT(
      error_of("[optimizer]\nkind = \"muon\"\n[optimizer.muon]\nns_gram_restarts = [2, 0]\n"),
      HasSubstr("optimizer.muon.ns_gram_restarts: expected iterations >= 1 (iteration 0 "
                "starts from X itself), found 0"));
  EXPECT_THAT(error_of("[binding]\ncpus = \"abc\"\n"),
              HasSubstr("binding.cpus: expected a CPU list such as \"0-3,8\", found \"abc\" ("));
  EXPECT_THAT(error_of("[binding]\ncpus = \"3-1\"\n"), HasSubstr("runs backwards"));
  EXPECT_THAT(error_of("[binding]\ncpus = \" \"\n"), HasSubstr("binding.cpus"));
  EXPECT_EQ(parse_run_config("[binding]\ncpus = \"0-1,4\"\n", "run.toml").binding.cpus, "0-1,4");
  EXPECT_THAT(error_of("[amp]\ndtype = \"fp32\"\n"),
              HasSubstr("amp.dtype: expected \"bf16\" or \"fp16\", found \"fp32\"; for float32 "
                        "throughout, set amp.enabled = false"));
  // A kind without a default location needs data.path: said with the config, not as a failed
  // run once the loader finds "" missing.
  EXPECT_THAT(error_of("[data]\nkind = \"tokens\"\n[model]\nkind = \"gpt\"\n"),
              HasSubstr("data.path: is required for data.kind = \"tokens\": a token file"));
  EXPECT_THAT(error_of("[data]\nkind = \"cifar-10\"\n[model]\ninput = 3072\n"),
              HasSubstr("data.path: is required for data.kind = \"cifar-10\": the "
                        "cifar-10-batches-bin folder"));
  EXPECT_THAT(error_of("[data]\nkind = \"image-folder\"\n"),
              HasSubstr("data.path: is required for data.kind = \"image-folder\""));
  const std::string folder = "[data]\nkind = \"image-folder\"\npath = \"imgs\"\n";
  EXPECT_THAT(error_of(folder + "channels = 2\n"),
              HasSubstr("data.channels: expected 1 (grey) or 3 (RGB), found 2"));
  EXPECT_THAT(error_of(folder + "size = [8, 8, 8]\n"),
              HasSubstr("data.size: expected [height, width] or one number (a square), found "
                        "[8,8,8]"));
  EXPECT_THAT(error_of(folder + "size = [0, 8]\n"),
              HasSubstr("data.size: expected sides of 1 to 65536 pixels, found [0,8]"));
  EXPECT_THAT(error_of(folder + "size = \"big\"\n"), HasSubstr("data.size: expected"));
  // A folder that is not there is the config's mistake, said with its absolute path (the current
  // folder's) and the --set that gave it — not "[image-folder] imgs is not a folder".
  EXPECT_EQ(error_of(folder),
            "[config] run.toml: data.path: " + std::filesystem::absolute("imgs").string() +
                ": no such folder (image-folder takes a folder with one subfolder of images per "
                "class)");
  EXPECT_THAT(error_of("[data]\nkind = \"image-folder\"\npath = \"" +
                           std::filesystem::temp_directory_path().string() + "\"\n",
                       {"data.val_path=val-imgs"}),
              HasSubstr("data.val_path: " + std::filesystem::absolute("val-imgs").string() +
                        ": no such folder (image-folder takes a folder with one subfolder of "
                        "images per class) (from --set data.val_path=val-imgs)"));
  EXPECT_THAT(error_of("[data]\nkind = \"image-folder\"\n", {"data.path=imgs"}),
              HasSubstr(": no such folder (image-folder takes a folder with one subfolder of "
                        "images per class) (from --set data.path=imgs)"));
  // One number is a square, as documented (and [8] too).
  tb::test::TempDir dir("tb_run_config_test");
  // The classes are the subfolders, each with images (listed, not decoded, by the check).
  for (const char* c : {"cat", "dog"}) {
    std::filesystem::create_directories(dir.path() / c);
    std::ofstream(dir.path() / c / "1.png") << "not decoded here";
  }
  for (const std::string size : {"8", "[8]"}) {
    const RunConfig c =
        parse_run_config("[data]\nkind = \"image-folder\"\npath = \"" + dir.path().string() +
                             "\"\nsize = " + size + "\n[model]\ninput = 192\n",
                         "run.toml");
    const core::DataShape shape =
        data::dataset_registry().at("image-folder")->shape(data_settings(c.data));
    EXPECT_EQ(shape.features_note, "3x8x8 pixels") << size;
  }
}

// For a person (the CLI's "error:" line), a key of a file says where it is as compilers do;
// a --set value, which has no line, and other errors are left as they are.
TEST(RunConfigTest, ErrorTextGivesTheKeysLineAndColumn) {
  const auto text_of = [](const std::string& toml, const std::vector<std::string>& sets = {}) {
    try {
      (void)parse_run_config(toml, "run.toml", sets);
    } catch (const std::exception& e) {
      return tb::api::error_text(e);
    }
    return std::string("no error");
  };
  EXPECT_EQ(text_of("[run]\nsteps = 10\n\n[optimizer]\nlr = \"fast\"\n"),
            "[config] run.toml:5:6: optimizer.lr: expected a number, found string \"fast\"");
  EXPECT_EQ(text_of("", {"optimizer.lr=-1"}).rfind("[config] run.toml: optimizer.lr: ", 0), 0u);
  EXPECT_EQ(tb::api::error_text(tb::ValueError("[data] plain")), "[data] plain");
  // A TOML syntax error gives its place once (it said "run.toml:2:10: line 2, column 10: ..."),
  // and a string left open says so.
  EXPECT_EQ(text_of("[run]\nname = \"x\n"),
            "[config] run.toml:2:10: invalid TOML: Error while parsing string: unescaped control "
            "characters other than TAB (U+0009) are explicitly prohibited (is a string not closed "
            "with its quote before the end of the line?)");
}

TEST(RunConfigTest, EnumErrors) {
  EXPECT_EQ(error_of("[optimizer]\nkind = \"adamx\"\n"),
            "[config] run.toml: optimizer.kind: expected one of \"adamw\", \"adam\", \"sgd\", "
            "\"muon\", found \"adamx\"; did you mean \"adamw\"?");
  EXPECT_THAT(error_of("[amp]\ndtype = \"fp8\"\n"),
              HasSubstr("amp.dtype: expected one of \"bf16\", \"fp16\", found \"fp8\""));
  EXPECT_THAT(error_of("[binding]\nmode = \"numa\"\n"),
              HasSubstr("binding.mode: expected one of \"none\", \"node\", \"socket\""));
  EXPECT_THAT(error_of("[data]\nkind = \"mnist\"\n"), HasSubstr("data.kind: expected one of"));
  EXPECT_THAT(
      error_of("[model]\nkind = \"vit\"\n"),
      HasSubstr(
          "model.kind: expected one of \"mlp\", \"qwen-tiny\", \"cnn\", \"gpt\", found \"vit\""));
  EXPECT_THAT(
      error_of("[run]\ndevice = \"tpu\"\n"),
      HasSubstr("run.device: expected \"cpu\", \"cuda[:N]\" or \"openreg[:N]\", found \"tpu\""));
}

TEST(RunConfigTest, UnknownKeysSuggestTheNearest) {
  EXPECT_EQ(error_of("[optimizer]\nlr_max = 0.1\n"),
            "[config] run.toml: unknown key 'optimizer.lr_max'; did you mean 'optimizer.lr'?");
  EXPECT_EQ(error_of("[data]\nbatchsize = 64\n"),
            "[config] run.toml: unknown key 'data.batchsize'; did you mean 'data.batch_size'?");
  EXPECT_THAT(error_of("[model]\nhiden = [64]\n"),
              HasSubstr("unknown key 'model.hiden'; did you mean 'model.hidden'?"));
  EXPECT_THAT(error_of("[model]\nkind = \"qwen-tiny\"\nd_modle = 64\n[data]\nkind = \"text\"\n"),
              HasSubstr("unknown key 'model.d_modle'; did you mean 'model.d_model'?"));
  EXPECT_THAT(error_of("[optimizer]\nkind = \"muon\"\n[optimizer.muon]\nmomentun = 0.9\n"),
              HasSubstr("unknown key 'optimizer.muon.momentun'; did you mean "
                        "'optimizer.muon.momentum'?"));
  EXPECT_THAT(error_of("thread = 4\n"), HasSubstr("unknown key 'thread'; did you mean 'threads'?"));
  // A key written outside its section, run together with it or alone: the dotted key, not the
  // section ("did you mean 'run'?").
  EXPECT_EQ(error_of("runsteps = 3\n"),
            "[config] run.toml: unknown key 'runsteps'; did you mean 'run.steps'?");
  EXPECT_THAT(error_of("", {"run_steps=3"}),
              HasSubstr("unknown key 'run_steps'; did you mean 'run.steps'? (from --set "
                        "run_steps=3)"));
  EXPECT_THAT(error_of("batch_size = 32\n"),
              HasSubstr("unknown key 'batch_size'; did you mean 'data.batch_size'?"));
  EXPECT_THAT(error_of("steps = 3\n"), HasSubstr("did you mean 'run.steps'?"));
  EXPECT_THAT(error_of("lr = 0.1\n"), HasSubstr("did you mean 'optimizer.lr'?"));
  // Muon's own keys live under [optimizer.muon], not [optimizer].
  EXPECT_THAT(error_of("ns_steps = 3\n"), HasSubstr("did you mean 'optimizer.muon.ns_steps'?"));
  // A near spelling of a section stays that ("optimiser" is not 'optimizer.lr').
  EXPECT_THAT(error_of("optimiser = \"muon\"\n"), HasSubstr("did you mean 'optimizer'?"));
  // A name several sections have ("interval": eval and checkpoint): no one guess.
  EXPECT_THAT(error_of("interval = 5\n"), HasSubstr("unknown key 'interval'; known at the top:"));
  // Two letters swapped is one slip, not two edits.
  EXPECT_THAT(error_of("[run]\nsetps = 3\n"),
              HasSubstr("unknown key 'run.setps'; did you mean 'run.steps'?"));
  // A setting of another optimizer kind.
  EXPECT_THAT(error_of("[optimizer]\nmomentum = 0.9\n"),
              HasSubstr("unknown key 'optimizer.momentum' for optimizer kind \"adamw\""));
  // Nothing close: what the table takes, not a far-off guess ("did you mean 'model.hidden'?").
  EXPECT_EQ(error_of("[model]\nd_model = 64\n"),
            "[config] run.toml: unknown key 'model.d_model'; 'model' takes kind, input, hidden, "
            "classes, activation or dropout");
  // A sweep config given to run: said so, not "did you mean 'swa'?".
  EXPECT_EQ(error_of("[sweep]\nmetric = \"eval.loss\"\n"),
            "[config] run.toml: unknown section 'sweep': this is a sweep config; run it with "
            "trainbench-cli sweep FILE");
}

TEST(RunConfigTest, UnknownSection) {
  EXPECT_EQ(error_of("[optimiser]\nlr = 0.1\n"),
            "[config] run.toml: unknown section 'optimiser'; did you mean 'optimizer'?");
  EXPECT_THAT(error_of("[chekpoint]\nkeep = 1\n"),
              HasSubstr("unknown section 'chekpoint'; did you mean 'checkpoint'?"));
}

TEST(RunConfigTest, SchedulerIsValidatedAtLoad) {
  const RunConfig c = parse_run_config("[scheduler]\nkind = \"step\"\nstep_size = 10\n");
  EXPECT_EQ(c.scheduler.config, (nlohmann::json{{"kind", "step"}, {"step_size", 10}}));
  EXPECT_TRUE(parse_run_config("[scheduler]\nkind = \"none\"\n").scheduler.config.is_null());
  EXPECT_THAT(error_of("[scheduler]\nkind = \"cosine\"\n"),
              HasSubstr("[config] run.toml: scheduler: [lr_scheduler] cosine: field 'T_max' is "
                        "required"));
  EXPECT_THAT(error_of("[scheduler]\nkind = \"cosine\"\nT_max = 10\nt_min = 1\n"),
              HasSubstr("scheduler: [lr_scheduler] cosine: field 't_min' is not a field"));
  EXPECT_THAT(error_of("[scheduler]\nkind = \"cosine\"\nT_max = 10\nlr = 1.0\n"),
              HasSubstr("scheduler.lr: is a preview-only field"));
  EXPECT_THAT(error_of("[scheduler]\nT_max = 10\n"),
              HasSubstr("scheduler.kind: expected a string"));
  // --set scheduler.kind="none" turns the file's schedule off, its keys with it; a file that
  // says "none" itself with other keys, or such a key from --set, is still a mistake.
  const std::string cosine = "[scheduler]\nkind = \"cosine\"\nT_max = 10\n";
  EXPECT_TRUE(
      parse_run_config(cosine, "run.toml", {"scheduler.kind=\"none\""}).scheduler.config.is_null());
  EXPECT_THAT(error_of("[scheduler]\nkind = \"none\"\nT_max = 10\n"),
              HasSubstr("unknown key 'scheduler.T_max' with scheduler.kind = \"none\""));
  EXPECT_THAT(error_of(cosine, {"scheduler.kind=\"none\"", "scheduler.gamma=0.5"}),
              HasSubstr("unknown key 'scheduler.gamma' with scheduler.kind = \"none\""));
}

TEST(RunConfigTest, CrossSectionRules) {
  EXPECT_THAT(error_of("[model]\nkind = \"qwen-tiny\"\n"),
              HasSubstr("data.kind: expected \"text\", \"tokens\" or \"synthetic-text\" for "
                        "model.kind = \"qwen-tiny\", found \"fashion-mnist\""));
  EXPECT_THAT(error_of("[model]\ninput = 100\n"),
              HasSubstr("model.input: expected 784 for data.kind = \"fashion-mnist\""));
  EXPECT_THAT(error_of("[model]\nkind = \"qwen-tiny\"\ncontext_length = 32\n"
                       "[data]\nkind = \"text\"\ncontext_length = 64\n"),
              HasSubstr("data.context_length: expected at most model.context_length = 32"));
  EXPECT_THAT(error_of("[optimizer.muon]\nlr = 0.1\n"),
              HasSubstr("optimizer.muon: the [optimizer.muon] and [optimizer.adamw] sub-tables "
                        "are only read with optimizer.kind = \"muon\""));
}

TEST(RunConfigTest, MalformedTomlNamesLineAndColumn) {
  const std::string e = error_of("[run]\nname = \"x\"\nseed = = 3\n");
  EXPECT_THAT(e, HasSubstr("[config] run.toml: line 3, column 8: invalid TOML"));
  EXPECT_THAT(error_of("[run]\nname = \"x\"\nname = \"y\"\n"),
              HasSubstr("[config] run.toml: line 3, column 8: invalid TOML: Error while parsing "
                        "key-value pair: cannot redefine existing string 'name'"));
}

TEST(RunConfigTest, MissingFileIsNamed) {
  try {
    (void)load_run_config("no/such/config.toml");
    FAIL() << "no error";
  } catch (const ValueError& e) {
    EXPECT_THAT(std::string(e.what()), HasSubstr("[config] no/such/config.toml: cannot open"));
  }
}

TEST(RunConfigTest, Overrides) {
  const RunConfig c = parse_run_config(
      "[optimizer]\nlr = 0.1\n", "run.toml",
      {"optimizer.lr=0.003", "model.hidden=[512,512]", "run.name=foo", "run.tags=[\"a\", \"b\"]",
       "data.shuffle=false", "threads=4", "run.device=cuda:1", "amp.enabled = true",
       "scheduler.kind=cosine", "scheduler.T_max=100", "run.seed=7"});
  EXPECT_DOUBLE_EQ(c.optimizer.main.number("lr"), 0.003);
  EXPECT_EQ(nn::mlp_config(c.model).hidden, (std::vector<std::int64_t>{512, 512}));
  EXPECT_EQ(c.run.name, "foo");
  EXPECT_EQ(c.run.tags, (std::vector<std::string>{"a", "b"}));
  EXPECT_FALSE(c.data.shuffle);
  EXPECT_EQ(c.threads, 4);
  EXPECT_EQ(c.run.device, "cuda:1");
  EXPECT_TRUE(c.amp.enabled);
  EXPECT_EQ(c.scheduler.config.at("T_max"), 100);
  EXPECT_EQ(c.run.seed, 7u);
  // A bare value read as a string where a string is expected.
  EXPECT_EQ(parse_run_config("", "run.toml", {"run.name=2024"}).run.name, "2024");
  // Later overrides win.
  EXPECT_EQ(parse_run_config("", "x", {"data.workers=1", "data.workers=3"}).data.workers, 3);
  // Overrides into a Muon sub-table that the file does not have.
  const RunConfig m = parse_run_config("[optimizer]\nkind = \"muon\"\n", "x",
                                       {"optimizer.adamw.lr=0.005", "optimizer.muon.ns_steps=3"});
  EXPECT_DOUBLE_EQ(m.optimizer.adamw->number("lr"), 0.005);
  EXPECT_EQ(m.optimizer.main.values.at("ns_steps").get<std::int64_t>(), 3);
}

TEST(RunConfigTest, BadOverrides) {
  EXPECT_EQ(error_of("", {"optimizer.lr_max=0.1"}),
            "[config] run.toml: unknown key 'optimizer.lr_max'; did you mean 'optimizer.lr'? "
            "(from --set optimizer.lr_max=0.1)");
  EXPECT_EQ(error_of("", {"optimizer.lr=fast"}),
            "[config] run.toml: optimizer.lr: expected a number, found string \"fast\" (from "
            "--set optimizer.lr=fast)");
  EXPECT_THAT(error_of("", {"optimiser.lr=0.1"}),
              HasSubstr("unknown section 'optimiser'; did you mean 'optimizer'? (from --set "
                        "optimiser.lr=0.1)"));
  EXPECT_THAT(error_of("", {"optimizer.lr"}),
              HasSubstr("[config] run.toml: --set optimizer.lr: expected key.path=value"));
  EXPECT_THAT(error_of("", {"optimizer..lr=1"}), HasSubstr("non-empty key path"));
  EXPECT_THAT(error_of("threads = 0\n", {"threads.x=1"}),
              HasSubstr("--set threads.x=1: 'threads' is integer 0, not a table"));
  EXPECT_THAT(error_of("", {"data.batch_size=0"}),
              HasSubstr("data.batch_size: expected an integer >= 1, found 0 (from --set "
                        "data.batch_size=0)"));
  // A model's check of two fields points at the one it names first, and says which --set
  // changed the other: the file's d_model line alone read as if the file were wrong.
  const std::string qwen = "[model]\nkind = \"qwen-tiny\"\nd_model = 128\n";
  EXPECT_EQ(error_of(qwen, {"model.n_heads=3"}),
            "[config] run.toml: model: qwen-tiny: d_model 128 is not divisible by n_heads 3 (from "
            "--set model.n_heads=3)");
  EXPECT_EQ(error_of(qwen, {"model.n_heads=3", "model.d_model=128"}),
            "[config] run.toml: model: qwen-tiny: d_model 128 is not divisible by n_heads 3 (from "
            "--set model.d_model=128)");
  // An override of a field the message does not name is not blamed ("n_kv_heads" is not
  // "n_heads").
  EXPECT_THAT(error_of(qwen + "n_heads = 3\n", {"model.n_kv_heads=1"}),
              Not(HasSubstr("from --set")));
  // A field the file gave for the kind that --set replaced: the --set of another field is not
  // blamed; the kind's --set is named, and how to replace the table.
  const std::string cosine = "[scheduler]\nkind = \"cosine\"\nT_max = 100\n";
  const std::string changed = error_of(
      cosine, {"scheduler.kind=one_cycle", "scheduler.max_lr=0.1", "scheduler.total_steps=10"});
  EXPECT_THAT(changed, HasSubstr("one_cycle: field 'T_max' is not a field of this kind"));
  EXPECT_THAT(changed, Not(HasSubstr("from --set scheduler.total_steps")));
  EXPECT_THAT(changed, HasSubstr("(scheduler.kind = one_cycle is from --set; the file's other "
                                 "scheduler keys stay: to replace the whole table, --set "
                                 "'scheduler={ kind = ..., ... }')"));
  // Likewise a key of the file's table that the new kind does not take.
  EXPECT_THAT(
      error_of("[model]\nkind = \"mlp\"\nactivation = \"relu\"\n", {"model.kind=qwen-tiny"}),
      HasSubstr("unknown key 'model.activation'; 'model' takes kind, vocab"));
  EXPECT_THAT(
      error_of("[model]\nkind = \"mlp\"\nactivation = \"relu\"\n", {"model.kind=qwen-tiny"}),
      HasSubstr("(model.kind = qwen-tiny is from --set; the file's other model keys stay: "
                "to replace the whole table, --set 'model={ kind = ..., ... }')"));
  // And every other error about a key the file gave under the changed kind: a field of the
  // wrong type for the new kind, the old kind's sub-tables, a key only another kind reads.
  const std::string hint = "is from --set; the file's other ";
  EXPECT_THAT(error_of("[model]\nkind = \"cnn\"\ninput = [1, 28, 28]\n", {"model.kind=mlp"}),
              HasSubstr("model.input: expected an integer, found array [ 1, 28, 28 ] (model.kind "
                        "= mlp " +
                        hint + "model keys stay"));
  const std::string muon = "[optimizer]\nkind = \"muon\"\n[optimizer.muon]\nlr = 0.02\n";
  EXPECT_THAT(error_of(muon, {"optimizer.kind=adamw"}),
              HasSubstr("sub-tables are only read with optimizer.kind = \"muon\", found kind = "
                        "\"adamw\" (optimizer.kind = adamw " +
                        hint + "optimizer keys stay"));
  EXPECT_THAT(error_of("[optimizer]\nkind = \"adamw\"\nlr = 0.003\n", {"optimizer.kind=muon"}),
              HasSubstr("did you mean 'optimizer.muon.lr' (or 'optimizer.adamw.lr')? "
                        "(optimizer.kind = muon " +
                        hint + "optimizer keys stay"));
  EXPECT_THAT(error_of("[optimizer]\nkind = \"adamw\"\nbeta1 = 0.8\n", {"optimizer.kind=sgd"}),
              HasSubstr("unknown key 'optimizer.beta1' for optimizer kind \"sgd\" (its keys: lr, "
                        "weight_decay, momentum, nesterov) (optimizer.kind = sgd " +
                        hint + "optimizer keys stay"));
  // Not for a key the file does not have (left at the new kind's default: the file's keys are
  // not to blame), nor for a key --set gave itself, nor without a kind from --set.
  const std::string blobs_cnn = "[model]\nkind = \"cnn\"\n[data]\nkind = \"synthetic-blobs\"\n";
  EXPECT_THAT(error_of(blobs_cnn, {"model.kind=mlp"}),
              HasSubstr("model.input: expected 16 for data.kind"));
  EXPECT_THAT(error_of(blobs_cnn, {"model.kind=mlp"}), Not(HasSubstr(hint)));
  EXPECT_THAT(
      error_of("[optimizer]\nkind = \"adamw\"\n", {"optimizer.kind=muon", "optimizer.lr=1"}),
      Not(HasSubstr(hint)));
  EXPECT_THAT(error_of("[model]\nkind = \"mlp\"\ninput = [1, 28, 28]\n"), Not(HasSubstr(hint)));
  // Which works.
  EXPECT_EQ(parse_run_config(cosine, "run.toml",
                             {"scheduler={ kind = \"one_cycle\", max_lr = 0.1, total_steps = 10 }"})
                .scheduler.config.at("kind"),
            "one_cycle");
}

TEST(RunConfigTest, ToTomlRoundTripsTheExamples) {
  for (const auto& name : kExamples) {
    SCOPED_TRACE(name);
    const RunConfig c = load_run_config(kConfigDir + "/" + name);
    const std::string text = to_toml(c);
    const RunConfig back = parse_run_config(text, "effective.toml");
    EXPECT_EQ(to_toml(back), text);
    EXPECT_EQ(back.run.name, c.run.name);
    EXPECT_EQ(back.run.tags, c.run.tags);
    EXPECT_EQ(nn::to_json(back.model), nn::to_json(c.model));
    EXPECT_EQ(back.scheduler.config, c.scheduler.config);
    EXPECT_EQ(back.optimizer.main.number("lr"), c.optimizer.main.number("lr"));
    EXPECT_EQ(back.optimizer.adamw.has_value(), c.optimizer.adamw.has_value());
    EXPECT_EQ(back.optimizer.split, c.optimizer.split);
  }
}

TEST(RunConfigTest, ToTomlWritesEveryKeyExactly) {
  RunConfig c = parse_run_config(
      "threads = 3\n[run]\nname = \"a \\\"quoted\\\" name\\n\"\ntags = [\"x\"]\nseed = 12345\n"
      "steps = 10\ngrad_clip = 0.1\n[optimizer]\nkind = \"sgd\"\nlr = 0.30000000000000004\n"
      "momentum = 0.9\nnesterov = true\n[amp]\nenabled = true\ndtype = \"fp16\"\n"
      "[swa]\nkind = \"ema\"\nema_decay = 0.99\n[scheduler]\nkind = \"one_cycle\"\nmax_lr = 1.0\n"
      "total_steps = 10\npct_start = 0.5\n[checkpoint]\ndir = \"ck\"\n[binding]\nmode = "
      "\"node\"\n");
  const std::string text = to_toml(c);
  for (const char* key : {"threads = 3",
                          "[run]",
                          "name = \"a \\\"quoted\\\" name\\n\"",
                          "seed = 12345",
                          "log_interval = 1",
                          "max_nonfinite = 20",
                          "grad_clip = 0.1",
                          "[model]",
                          "kind = \"mlp\"",
                          "hidden = [256, 256]",
                          "dropout = 0.0",
                          "[data]",
                          "val_fraction = 0.1",
                          "normalize = true",
                          "[optimizer]",
                          "lr = 0.30000000000000004",
                          "nesterov = true",
                          "[scheduler]",
                          "pct_start = 0.5",
                          "[amp]",
                          "grad_scaler = true",
                          "[swa]",
                          "ema_decay = 0.99",
                          "[eval]",
                          "batches = 0",
                          "[checkpoint]",
                          "dir = \"ck\"",
                          "[binding]",
                          "mode = \"node\""})
    EXPECT_THAT(text, HasSubstr(key));
  const RunConfig back = parse_run_config(text);
  EXPECT_EQ(back.run.name, c.run.name);
  EXPECT_EQ(back.optimizer.main.number("lr"), c.optimizer.main.number("lr"));
  EXPECT_EQ(back.scheduler.config, c.scheduler.config);
  EXPECT_TRUE(back.scheduler.config.at("pct_start").is_number_float());
  EXPECT_EQ(to_toml(back), text);
  // No scheduler: written as kind = "none" and read back as null.
  const RunConfig plain = parse_run_config(to_toml(RunConfig{}));
  EXPECT_TRUE(plain.scheduler.config.is_null());
  EXPECT_EQ(to_toml(plain), to_toml(RunConfig{}));
}

}  // namespace
// A folder or a missing file given as the config is named, not read as an empty config (which
// would train with every default).
TEST(RunConfigTest, AFolderOrAMissingFileIsNotAConfig) {
  const std::string dir = std::filesystem::temp_directory_path().string();
  try {
    (void)load_run_config(dir);
    ADD_FAILURE() << "a folder was read as a config";
  } catch (const ConfigError& e) {
    EXPECT_EQ(std::string(e.what()),
              "[config] " + dir + ": is a folder, not a config file (give a .toml file)");
  }
  const std::string missing = dir + "/tb-no-such-config.toml";
  try {
    (void)read_config_file(missing, "sweep");
    ADD_FAILURE() << "a missing file was read";
  } catch (const ValueError& e) {
    EXPECT_EQ(std::string(e.what()), "[sweep] " + missing +
                                         ": cannot open the file for reading (No such file or "
                                         "directory)");
  }
}

}  // namespace tb::train

namespace {

tb::ConfigProblem problem_of(const std::string& toml,
                             const std::vector<std::string>& overrides = {}) {
  try {
    (void)tb::train::parse_run_config(toml, "run.toml", overrides);
  } catch (const tb::ConfigError& e) {
    return e.problem();
  }
  ADD_FAILURE() << "no ConfigError for:\n" << toml;
  return {};
}

}  // namespace

// Config errors are data: every reader raises tb::ConfigError with the key path, the line and
// column in the source (0 when the value came from --set) and the problem alone.
TEST(RunConfigErrors, CarryKeyPathLineAndColumn) {
  auto p = problem_of("[run]\nseed = 1\n\n[optimizer]\nlr = \"fast\"\n");
  EXPECT_EQ(p.source, "run.toml");
  EXPECT_EQ(p.key_path, "optimizer.lr");
  EXPECT_EQ(p.line, 5);
  EXPECT_EQ(p.column, 6);
  EXPECT_EQ(p.message, "expected a number, found string \"fast\"");
  // An unknown key: its own line.
  p = problem_of("[data]\nbatch_size = 4\nbatch_sise = 8\n");
  EXPECT_EQ(p.key_path, "data.batch_sise");
  EXPECT_EQ(p.line, 3);
  EXPECT_EQ(p.message, "unknown key 'data.batch_sise'; did you mean 'data.batch_size'?");
  // An override: no line, and the message says where it came from.
  p = problem_of("", {"data.batch_size=0"});
  EXPECT_EQ(p.key_path, "data.batch_size");
  EXPECT_EQ(p.line, 0);
  EXPECT_EQ(p.message, "expected an integer >= 1, found 0 (from --set data.batch_size=0)");
  // The model's own check names its field.
  p = problem_of(
      "[model]\nkind = \"qwen-tiny\"\nd_model = 130\n[data]\nkind = \"synthetic-text\"\n");
  EXPECT_EQ(p.key_path, "model.d_model");
  EXPECT_EQ(p.line, 3);
  // The scheduler's: a missing field points at its table.
  p = problem_of("[run]\nsteps = 5\n[scheduler]\nkind = \"cosine\"\n");
  EXPECT_EQ(p.key_path, "scheduler.T_max");
  EXPECT_EQ(p.line, 3);
  // Malformed TOML: no key, the parser's line and column.
  p = problem_of("[run]\nseed = = 1\n");
  EXPECT_EQ(p.key_path, "");
  EXPECT_EQ(p.line, 2);
  EXPECT_GT(p.column, 0);
  EXPECT_EQ(p.message.rfind("invalid TOML: ", 0), 0u) << p.message;
  // A rule across sections names the key it blames.
  p = problem_of("[model]\nkind = \"qwen-tiny\"\n[data]\nkind = \"fashion-mnist\"\n");
  EXPECT_EQ(p.key_path, "data.kind");
  EXPECT_EQ(p.line, 4);
}
