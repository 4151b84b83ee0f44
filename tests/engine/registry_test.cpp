// The registries are the one place a kind is named: a toy optimizer, a toy LR scheduler and a
// toy model registered here — and nowhere else — read from TOML, train, come back in the
// effective config, show in the GUI's form fields and in the config reference's kind lists.
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "engine/api/config_api.h"
#include "engine/api/workbench_api.h"
#include "engine/autograd/autograd.h"
#include "engine/nn/layers.h"
#include "engine/nn/model_registry.h"
#include "engine/ops/ops.h"
#include "engine/optim/registry.h"
#include "engine/sched/scheduler_registry.h"
#include "engine/train/run_config.h"
#include "engine/train/trainer.h"

namespace {

using tb::core::FieldSpec;
using tb::core::FieldType;
using tb::core::Tensor;
namespace train = tb::train;

// Plain gradient descent with a step scaled by `shrink`: p -= lr * shrink * g.
class ToyDescent final : public tb::optim::Optimizer {
 public:
  ToyDescent(std::vector<Tensor> params, double lr, double shrink)
      : Optimizer("ToyDescent", {{"lr", lr}, {"shrink", shrink}}) {
    tb::optim::ParamGroup g;
    g.params = std::move(params);
    add_param_group(std::move(g));
  }
  void step() override {
    tb::autograd::NoGradGuard no_grad;
    for (auto& group : param_groups()) {
      const double scale = -group.number("lr") * group.number("shrink");
      for (auto& p : group.params) {
        const Tensor g = tb::autograd::grad(p);
        if (g.defined()) tb::ops::add_(p, g, scale);
      }
    }
    count_step();
  }
  void append_step_metrics(std::vector<std::pair<std::string, double>>& out) override {
    out.emplace_back("toy.steps", static_cast<double>(step_count()));
  }

 protected:
  void validate_group(const tb::optim::ParamGroup& g) const override {
    TB_CHECK(g.number("lr") >= 0, "toy: lr must be >= 0");
  }
};

// One linear layer from `input` features to `classes` logits.
class ToyLinear final : public tb::nn::Model {
 public:
  ToyLinear(const nlohmann::json& f, tb::rng::Generator* gen) : Model("ToyLinear"), fields_(f) {
    linear_ = register_module(
        "linear", std::make_shared<tb::nn::Linear>(f.at("input").get<std::int64_t>(),
                                                   f.at("classes").get<std::int64_t>(), true, gen));
  }
  Tensor forward(const Tensor& x) override { return linear_->forward(x); }
  tb::nn::ModelConfig config() const override { return {"toy-linear", fields_}; }

 private:
  nlohmann::json fields_;
  std::shared_ptr<tb::nn::Linear> linear_;
};

// Registers the three toys for the test's lifetime.
class ToyKinds {
 public:
  ToyKinds() {
    tb::optim::OptimizerKind o;
    o.name = "toy-descent";
    o.help = "a toy: gradient descent with a shrunk step";
    o.fields = {FieldSpec("lr", FieldType::kFloat, 0.1, "learning rate").at_least(0),
                FieldSpec("shrink", FieldType::kFloat, 0.5, "step multiplier").above(0).at_most(1)};
    o.make = [](std::vector<Tensor> params, const nlohmann::json& s) {
      return std::make_unique<ToyDescent>(std::move(params), s.at("lr").get<double>(),
                                          s.at("shrink").get<double>());
    };
    tb::optim::optimizer_registry().add(o);

    tb::sched::SchedulerKind s;
    s.name = "toy-halving";
    s.torch_class = "-";
    s.help = "a toy: halve the LR every `every` steps";
    s.fields = {FieldSpec("every", FieldType::kInt, nullptr, "steps between halvings")};
    s.make = [](tb::optim::Optimizer& opt, const tb::sched::SchedulerFields& f) {
      return std::make_shared<tb::sched::StepLR>(opt, f.integer("every"), 0.5);
    };
    tb::sched::scheduler_registry().add(s);

    tb::nn::ModelKind m;
    m.name = "toy-linear";
    m.help = "a toy: one linear layer";
    m.task = tb::core::kTaskClassification;
    m.fields = {FieldSpec("input", FieldType::kInt, 16, "input features"),
                FieldSpec("classes", FieldType::kInt, 4, "logits")};
    m.fit = [](const nlohmann::json& f,
               const tb::core::DataShape& d) -> std::optional<tb::core::FieldProblem> {
      if (d.features > 0 && f.at("input").get<std::int64_t>() != d.features)
        return tb::core::FieldProblem{"model.input",
                                      "expected " + std::to_string(d.features) + " features"};
      return std::nullopt;
    };
    m.make = [](const nlohmann::json& f,
                tb::rng::Generator* gen) -> std::shared_ptr<tb::nn::Model> {
      return std::make_shared<ToyLinear>(f, gen);
    };
    tb::nn::model_registry().add(m);
  }
  ~ToyKinds() {
    tb::optim::optimizer_registry().remove("toy-descent");
    tb::sched::scheduler_registry().remove("toy-halving");
    tb::nn::model_registry().remove("toy-linear");
  }
  ToyKinds(const ToyKinds&) = delete;
  ToyKinds& operator=(const ToyKinds&) = delete;
};

class Recorder final : public train::MetricSink {
 public:
  void on_metrics(std::int64_t step, const train::Metrics& m) override {
    for (const auto& [k, v] : m) {
      if (k == "loss") losses.push_back(v);
      if (k == "lr.toy-descent.0") lrs.push_back(v);
      if (k == "toy.steps") toy_steps.push_back(v);
    }
    (void)step;
  }
  std::vector<double> losses, lrs, toy_steps;
};

const char* kToyConfig = R"(
[run]
steps = 8
seed = 3
[model]
kind = "toy-linear"
classes = 4
[data]
kind = "synthetic-blobs"
batch_size = 64
workers = 0
[optimizer]
kind = "toy-descent"
lr = 0.2
shrink = 0.75
[scheduler]
kind = "toy-halving"
every = 4
)";

const tb::api::ConfigField* field(const std::vector<tb::api::ConfigField>& fs,
                                  const std::string& key) {
  for (const auto& f : fs)
    if (f.key == key) return &f;
  return nullptr;
}

bool has(const std::vector<std::string>& v, const std::string& s) {
  return std::find(v.begin(), v.end(), s) != v.end();
}

TEST(Registries, ToyKindsRunFromTomlThroughTrainerEffectiveConfigAndForm) {
  ToyKinds toys;
  const train::RunConfig c = train::parse_run_config(kToyConfig, "toy.toml");
  EXPECT_EQ(c.model.kind, "toy-linear");
  EXPECT_EQ(c.optimizer.main.kind, "toy-descent");
  EXPECT_DOUBLE_EQ(c.optimizer.main.number("shrink"), 0.75);

  // The trainer builds all three from the registries and trains.
  train::Trainer t(c);
  auto rec = std::make_shared<Recorder>();
  t.add_sink(rec);
  const auto r = t.run();
  ASSERT_EQ(r.outcome, train::RunOutcome::kFinished) << r.message;
  ASSERT_EQ(rec->losses.size(), 8u);
  EXPECT_LT(rec->losses.back(), rec->losses.front());
  // The toy scheduler halved the LR after 4 steps (the logged LR is the one the step used).
  ASSERT_EQ(rec->lrs.size(), 8u);
  EXPECT_DOUBLE_EQ(rec->lrs[0], 0.2);
  EXPECT_DOUBLE_EQ(rec->lrs[4], 0.1);
  // The optimizer's own per-step metric reached the sinks through the virtual.
  ASSERT_EQ(rec->toy_steps.size(), 8u);
  EXPECT_DOUBLE_EQ(rec->toy_steps.back(), 8.0);

  // The effective config writes every field of each toy and reads back equal.
  const std::string eff = train::to_toml(c);
  EXPECT_NE(eff.find("[model]\nkind = \"toy-linear\"\nclasses = 4\ninput = 16\n"),
            std::string::npos)
      << eff;
  EXPECT_NE(eff.find("[optimizer]\nkind = \"toy-descent\"\nweight_decay_params = \"all\"\nlr = "
                     "0.2\nshrink = 0.75\n"),
            std::string::npos)
      << eff;
  EXPECT_NE(eff.find("kind = \"toy-halving\"\nevery = 4\n"), std::string::npos) << eff;
  EXPECT_EQ(train::to_toml(train::parse_run_config(eff, "effective")), eff);

  // The GUI's form: types, defaults, choices and help from the toys' field specs.
  const auto fields = tb::api::config_fields(kToyConfig);
  ASSERT_NE(field(fields, "optimizer.shrink"), nullptr);
  EXPECT_EQ(field(fields, "optimizer.shrink")->type, "float");
  EXPECT_EQ(field(fields, "optimizer.shrink")->help, "step multiplier");
  EXPECT_EQ(field(fields, "scheduler.every")->help, "steps between halvings");
  EXPECT_EQ(field(fields, "model.input")->help, "input features");
  EXPECT_TRUE(has(field(fields, "optimizer.kind")->choices, "toy-descent"));
  EXPECT_TRUE(has(field(fields, "model.kind")->choices, "toy-linear"));
  EXPECT_TRUE(has(field(fields, "scheduler.kind")->choices, "toy-halving"));

  // The config reference lists them with their fields.
  bool listed = false;
  for (const auto& k : tb::api::list_kinds("optimizer"))
    listed |= k.name == "toy-descent" && k.fields.size() == 2 && k.fields[1].allowed == "in (0, 1]";
  EXPECT_TRUE(listed);
}

TEST(Registries, ToyKindsGetTheReadersChecksAndMessages) {
  ToyKinds toys;
  auto error_of = [](const std::string& toml) {
    try {
      (void)train::parse_run_config(toml, "toy.toml");
    } catch (const std::exception& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  const std::string base = kToyConfig;
  // Range from the field spec.
  EXPECT_EQ(
      error_of(std::string(kToyConfig).replace(base.find("shrink = 0.75"), 13, "shrink = 2.0")),
      "[config] toy.toml: optimizer.shrink: expected a number in (0.0, 1.0], found 2.0");
  // A key of another kind names the toy's keys.
  EXPECT_EQ(
      error_of(std::string(kToyConfig).replace(base.find("shrink = 0.75"), 13, "beta1 = 0.9")),
      "[config] toy.toml: unknown key 'optimizer.beta1' for optimizer kind \"toy-descent\" (its "
      "keys: lr, shrink)");
  // The model's fit against the data set.
  EXPECT_EQ(error_of(base), "no error");
  EXPECT_EQ(error_of(std::string(kToyConfig).replace(base.find("classes = 4"), 11, "input = 3")),
            "[config] toy.toml: model.input: expected 16 features");
  // A required scheduler field.
  EXPECT_EQ(error_of(std::string(kToyConfig).replace(base.find("every = 4"), 9, "")),
            "[config] toy.toml: scheduler: [lr_scheduler] toy-halving: field 'every' is required");
  // Registering a name twice is refused.
  tb::optim::OptimizerKind again;
  again.name = "toy-descent";
  EXPECT_THROW(tb::optim::optimizer_registry().add(again), tb::ValueError);
}

TEST(Registries, UnknownKindListsTheRegisteredOnes) {
  try {
    (void)tb::optim::optimizer_registry().at("adamx");
    FAIL() << "no error";
  } catch (const tb::ValueError& e) {
    EXPECT_EQ(std::string(e.what()),
              "[optimizer] unknown kind 'adamx' (one of adamw, adam, sgd, muon); did you mean "
              "'adamw'?");
  }
}

}  // namespace
