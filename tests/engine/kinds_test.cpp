// One entry per kind drives every generic check, as PyTorch's optim_db does for its optimizers
// (torch/testing/_internal/common_optimizers.py): each registered optimizer and model kind is
// built from its defaults, and optimizers step, skip parameters without gradients and resume
// from a state_dict and from a checkpoint on disk bit for bit; every field's default passes its own
// check; every kind's config round-trips through the effective config.
#include <gtest/gtest.h>

#include <filesystem>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "engine/autograd/autograd.h"
#include "engine/data/registry.h"
#include "engine/nn/model_registry.h"
#include "engine/ops/ops.h"
#include "engine/optim/registry.h"
#include "engine/rng/cpu_generator.h"
#include "engine/rng/generator.h"
#include "engine/sched/scheduler_registry.h"
#include "engine/train/config_schema.h"
#include "engine/train/run_config.h"
#include "engine/train/trainer.h"
#include "tests/engine/test_util.h"

namespace {

using tb::core::ScalarType;
using tb::core::Tensor;
namespace ag = tb::autograd;
namespace ops = tb::ops;

void expect_defaults_pass(const std::vector<tb::core::FieldSpec>& fields, const std::string& who) {
  for (const auto& f : fields) {
    if (f.default_value.is_null()) continue;
    EXPECT_EQ(f.check(f.default_value), std::nullopt) << who << "." << f.key;
    EXPECT_FALSE(f.help.empty()) << who << "." << f.key << " has no help";
  }
}

class OptimizerKinds : public ::testing::TestWithParam<std::string> {};

// Steps `steps` times with a gradient that depends on the step; the optimizer is rebuilt from a
// deep copy of its state_dict at `split_at` (as a resumed run rebuilds it).
std::vector<double> run_kind(const std::string& kind, int steps, int split_at) {
  const auto entry = tb::optim::optimizer_registry().at(kind);
  const auto settings = tb::core::default_values(entry->fields);
  auto gen = tb::rng::make_generator(tb::core::Device());
  gen->manual_seed(3);
  Tensor w = ag::requires_grad_(ops::randn({6, 4}, gen.get(), ScalarType::Float64));
  auto opt = entry->make({w}, settings);
  for (int s = 0; s < steps; ++s) {
    if (s == split_at) {
      auto sd = opt->state_dict();
      for (auto& [id, st] : sd.state)
        for (auto& [k, t] : st)
          t = t.clone();
      opt = entry->make({w}, settings);
      opt->load_state_dict(sd);
    }
    {
      ag::NoGradGuard no_grad;
      ag::set_grad(w, ops::sin(ops::mul(w, static_cast<double>(s + 1))));
    }
    opt->step();
  }
  return w.to_vector<double>();
}

TEST_P(OptimizerKinds, StepsSkipsParametersWithoutGradientsAndResumes) {
  const auto entry = tb::optim::optimizer_registry().at(GetParam());
  expect_defaults_pass(entry->fields, "optimizer " + GetParam());
  const auto settings = tb::core::default_values(entry->fields);
  auto gen = tb::rng::make_generator(tb::core::Device());
  gen->manual_seed(1);
  Tensor w = ag::requires_grad_(ops::randn({5, 3}, gen.get(), ScalarType::Float32));
  Tensor idle = ag::requires_grad_(ops::randn({3, 2}, gen.get(), ScalarType::Float32));
  const auto w0 = w.to_vector<float>();
  const auto idle0 = idle.to_vector<float>();
  auto opt = entry->make({w, idle}, settings);
  {
    ag::NoGradGuard no_grad;
    ag::set_grad(w, ops::add(ops::mul(w, 0.0), 1.0));
  }
  opt->step();
  EXPECT_NE(w.to_vector<float>(), w0) << "a parameter with a gradient must change";
  EXPECT_EQ(idle.to_vector<float>(), idle0) << "a parameter without one must not";
  EXPECT_FALSE(opt->has_state(idle));
  EXPECT_EQ(opt->step_count(), 1);
  // Resuming from a state_dict equals the uninterrupted run, bit for bit.
  EXPECT_EQ(run_kind(GetParam(), 6, 3), run_kind(GetParam(), 6, -1));
}

// Each step's loss of a short run of the kind's defaults on blobs, from `resume` if given.
struct LossSink : tb::train::MetricSink {
  std::mutex mu;
  std::vector<std::pair<std::int64_t, double>> losses;
  void on_metrics(std::int64_t step, const tb::train::Metrics& m) override {
    std::lock_guard<std::mutex> lock(mu);
    for (const auto& [k, v] : m)
      if (k == "loss") losses.emplace_back(step, v);
  }
};

std::vector<std::pair<std::int64_t, double>> trained(const std::string& kind,
                                                     const std::filesystem::path& checkpoints,
                                                     const std::filesystem::path& resume) {
  auto c = tb::train::parse_run_config(
      "[run]\nsteps = 6\nseed = 2\nlog_interval = 1\n[model]\nkind = \"mlp\"\ninput = 16\nhidden = "
      "[8]\n"
      "classes = 4\n[data]\nkind = \"synthetic-blobs\"\nbatch_size = 16\nworkers = 0\n"
      "[optimizer]\nkind = \"" +
          kind + "\"\n[checkpoint]\ninterval = 3\n",
      "kinds");
  tb::train::Trainer t(c, checkpoints);
  auto sink = std::make_shared<LossSink>();
  t.add_sink(sink);
  if (!resume.empty()) t.resume_from(resume);
  const auto r = t.run();
  EXPECT_EQ(r.outcome, tb::train::RunOutcome::kFinished) << kind << ": " << r.message;
  return sink->losses;
}

// Through the files a checkpoint writes: SGD without momentum (no state) wrote an optimizer file
// no reader took, and its runs never resumed.
TEST_P(OptimizerKinds, ResumesFromACheckpointOnDiskBitForBit) {
  tb::test::TempDir dir("tb_kinds_" + GetParam());
  const auto full = trained(GetParam(), dir.path(), {});
  ASSERT_EQ(full.size(), 6u);
  const auto rest = trained(GetParam(), {}, dir.path() / "step-00000003");
  EXPECT_EQ(rest, decltype(full)(full.begin() + 3, full.end())) << GetParam();
}

TEST_P(OptimizerKinds, ConfigRoundTripsThroughTheEffectiveConfig) {
  const auto entry = tb::optim::optimizer_registry().at(GetParam());
  const std::string toml = "[optimizer]\nkind = \"" + GetParam() + "\"\n";
  const auto c = tb::train::parse_run_config(toml, "kinds");
  const std::string eff = tb::train::to_toml(c);
  for (const auto& f : entry->fields)
    EXPECT_NE(eff.find("\n" + f.key + " = "), std::string::npos) << GetParam() << "." << f.key;
  EXPECT_EQ(tb::train::to_toml(tb::train::parse_run_config(eff, "effective")), eff);
}

INSTANTIATE_TEST_SUITE_P(Registry, OptimizerKinds,
                         ::testing::ValuesIn(tb::optim::optimizer_registry().names()),
                         [](const auto& p) {
                           std::string n = p.param;
                           for (char& ch : n)
                             if (ch == '-') ch = '_';
                           return n;
                         });

class ModelKinds : public ::testing::TestWithParam<std::string> {};

TEST_P(ModelKinds, BuildsFromItsDefaultsAndItsConfigRoundTrips) {
  const auto entry = tb::nn::model_registry().at(GetParam());
  expect_defaults_pass(entry->fields, "model " + GetParam());
  const tb::nn::ModelConfig cfg(GetParam(), tb::core::default_values(entry->fields));
  tb::nn::validate(cfg);
  tb::rng::CpuGenerator gen;
  gen.manual_seed(0);
  const auto model = tb::nn::build_model(cfg, &gen);
  EXPECT_GT(model->num_parameters(), 0);
  // The built model's config (automatic sizes resolved) builds the same architecture.
  EXPECT_EQ(model->config().kind, GetParam());
  EXPECT_EQ(tb::nn::build_model(model->config(), &gen)->num_parameters(), model->num_parameters());
  EXPECT_EQ(tb::nn::to_json(tb::nn::model_config_from_json(tb::nn::to_json(cfg))),
            tb::nn::to_json(cfg));
  // Some registered data set poses its task.
  bool served = false;
  for (const auto& d : tb::data::dataset_registry().entries())
    served |= d->task == entry->task;
  EXPECT_TRUE(served) << GetParam() << " (" << entry->task << ") has no data set";
}

INSTANTIATE_TEST_SUITE_P(Registry, ModelKinds,
                         ::testing::ValuesIn(tb::nn::model_registry().names()), [](const auto& p) {
                           std::string n = p.param;
                           for (char& ch : n)
                             if (ch == '-') ch = '_';
                           return n;
                         });

TEST(SchedulerKinds, EveryFieldHasHelpAndValidDefaults) {
  for (const auto& k : tb::sched::scheduler_registry().entries()) {
    EXPECT_FALSE(k->help.empty()) << k->name;
    EXPECT_FALSE(k->torch_class.empty()) << k->name;
    expect_defaults_pass(k->fields, "scheduler " + k->name);
  }
}

TEST(ConfigSchema, FixedSectionsMatchTheReadersDefaults) {
  // The effective config of an empty TOML holds each fixed key at its spec's default.
  const std::string eff = tb::train::to_toml(tb::train::parse_run_config("", "defaults"));
  for (const auto& s : tb::train::fixed_sections()) {
    expect_defaults_pass(s.fields, s.name.empty() ? "top" : s.name);
    const std::string header = s.name.empty() ? "" : "[" + s.name + "]\n";
    const auto at = header.empty() ? 0 : eff.find(header);
    ASSERT_NE(at, std::string::npos) << s.name;
    for (const auto& f : s.fields) {
      const std::string line = f.key + " = " + f.default_toml() + "\n";
      const auto pos = eff.find("\n" + line, at == 0 ? 0 : at - 1);
      EXPECT_NE(pos, std::string::npos) << (s.name.empty() ? "" : s.name + ".") << line;
    }
  }
}

}  // namespace
