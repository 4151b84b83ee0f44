// LR schedulers (PyTorch's torch/optim/lr_scheduler.py; SWALR from torch/optim/swa_utils.py):
// the 16 PyTorch sequences of tests/data/schedulers.json (produced by PyTorch 1.13), LR tables
// hand-computed from those files' formulas, state_dict round trips, tensor-LR aliasing, resume,
// validation and the lr_lambda expression language.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <numbers>
#include <string>
#include <vector>

#include "engine/autograd/autograd.h"
#include "engine/core/error.h"
#include "engine/optim/optimizer.h"
#include "engine/sched/lr_lambda_expr.h"
#include "engine/sched/lr_scheduler.h"
#include "tests/engine/test_util.h"

namespace {

using nlohmann::json;
using tb::core::ScalarType;
using tb::core::Tensor;
using namespace tb::sched;  // NOLINT(google-build-using-namespace)
using tb::optim::Optimizer;
using tb::optim::ParamGroup;
using tb::test::error_of;

// An optimizer whose step does nothing but count.
class NoopOptimizer : public Optimizer {
 public:
  explicit NoopOptimizer(HyperMap defaults) : Optimizer("Noop", std::move(defaults)) {}
  void step() override { count_step(); }

 protected:
  void validate_group(const ParamGroup& /*group*/) const override {}
};

// SGD-like (momentum 0.9) or Adam-like (beta1/beta2) optimizer with one group per LR.
std::unique_ptr<NoopOptimizer> make_opt(const std::vector<HyperValue>& lrs, bool adam = false,
                                        bool momentum = true) {
  HyperMap d;
  d["lr"] = 0.5;
  if (adam) {
    d["beta1"] = 0.9;
    d["beta2"] = 0.999;
  } else if (momentum) {
    d["momentum"] = 0.9;
  }
  auto opt = std::make_unique<NoopOptimizer>(d);
  for (const auto& lr : lrs) {
    ParamGroup g;
    Tensor p = Tensor::empty({1}, ScalarType::Float64);
    p.fill_(0.0);
    g.params.push_back(p);
    g.options["lr"] = lr;
    opt->add_param_group(std::move(g));
  }
  return opt;
}
std::unique_ptr<NoopOptimizer> make_opt(double lr) {
  return make_opt(std::vector<HyperValue>{lr});
}

Tensor lr_tensor(double v) {
  Tensor t = Tensor::empty({1}, ScalarType::Float64);
  t.fill_(v);
  return t;
}

double lr0(const Optimizer& opt) {
  return opt.param_groups()[0].number("lr");
}

bool near(double a, double b, double rel) {
  return std::fabs(a - b) <= rel * std::fabs(b) + 1e-15;
}

// lr after construction, then after each of `n` steps (optimizer stepped first).
std::vector<double> run(Optimizer& opt, LRScheduler& s, int n) {
  std::vector<double> out{lr0(opt)};
  for (int i = 0; i < n; ++i) {
    opt.step();
    s.step();
    out.push_back(lr0(opt));
  }
  return out;
}

void expect_seq(const std::vector<double>& got, const std::vector<double>& want, double rel,
                const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (std::size_t i = 0; i < want.size(); ++i)
    EXPECT_TRUE(near(got[i], want[i], rel))
        << what << " [" << i << "]: got " << got[i] << ", want " << want[i];
}

json load_vectors() {
  std::ifstream f(std::string(TB_TEST_DATA_DIR) + "/schedulers.json");
  EXPECT_TRUE(f.good()) << "cannot open schedulers.json under " << TB_TEST_DATA_DIR;
  return json::parse(f);
}

using Factory = std::function<std::shared_ptr<LRScheduler>(Optimizer&)>;

// One factory per case name of schedulers.json.
std::map<std::string, Factory> torch_cases() {
  std::map<std::string, Factory> m;
  m["StepLR(step_size=2,gamma=0.3)"] = [](Optimizer& o) {
    return std::make_shared<StepLR>(o, 2, 0.3);
  };
  m["MultiStepLR(milestones=[3,4,9],gamma=0.5)"] = [](Optimizer& o) {
    return std::make_shared<MultiStepLR>(o, std::vector<std::int64_t>{3, 4, 9}, 0.5);
  };
  m["ConstantLR(factor=0.25,total_iters=5)"] = [](Optimizer& o) {
    return std::make_shared<ConstantLR>(o, 0.25, 5);
  };
  m["LinearLR(start_factor=0.2,end_factor=1.0,total_iters=6)"] = [](Optimizer& o) {
    return std::make_shared<LinearLR>(o, 0.2, 1.0, 6);
  };
  m["ExponentialLR(gamma=0.8)"] = [](Optimizer& o) {
    return std::make_shared<ExponentialLR>(o, 0.8);
  };
  m["PolynomialLR(total_iters=6,power=2.0)"] = [](Optimizer& o) {
    return std::make_shared<PolynomialLR>(o, 6, 2.0);
  };
  m["CosineAnnealingLR(T_max=5,eta_min=0.1)"] = [](Optimizer& o) {
    return std::make_shared<CosineAnnealingLR>(o, 5, 0.1);
  };
  m["CosineAnnealingWarmRestarts(T_0=4,T_mult=1,eta_min=0.0)"] = [](Optimizer& o) {
    return std::make_shared<CosineAnnealingWarmRestarts>(o, 4, 1, 0.0);
  };
  m["CosineAnnealingWarmRestarts(T_0=2,T_mult=3,eta_min=0.05)"] = [](Optimizer& o) {
    return std::make_shared<CosineAnnealingWarmRestarts>(o, 2, 3, 0.05);
  };
  m["CyclicLR(base_lr=0.01,max_lr=0.5,step_size_up=4,mode=triangular)"] = [](Optimizer& o) {
    CyclicLROptions c;
    c.step_size_up = 4;
    return std::make_shared<CyclicLR>(o, 0.01, 0.5, c);
  };
  m["CyclicLR(base_lr=0.01,max_lr=0.5,step_size_up=2,step_size_down=5,mode=exp_range,gamma=0."
    "95)"] = [](Optimizer& o) {
    CyclicLROptions c;
    c.step_size_up = 2;
    c.step_size_down = 5;
    c.mode = "exp_range";
    c.gamma = 0.95;
    return std::make_shared<CyclicLR>(o, 0.01, 0.5, c);
  };
  m["OneCycleLR(max_lr=0.5,total_steps=16)"] = [](Optimizer& o) {
    OneCycleLROptions c;
    c.total_steps = 16;
    return std::make_shared<OneCycleLR>(o, 0.5, c);
  };
  m["OneCycleLR(max_lr=0.5,total_steps=12,pct_start=0.25,anneal_strategy=linear,div_factor=10,"
    "final_div_factor=100)"] = [](Optimizer& o) {
    OneCycleLROptions c;
    c.total_steps = 12;
    c.pct_start = 0.25;
    c.anneal_strategy = "linear";
    c.div_factor = 10;
    c.final_div_factor = 100;
    return std::make_shared<OneCycleLR>(o, 0.5, c);
  };
  m["SequentialLR([ConstantLR(factor=0.5,total_iters=2),ExponentialLR(gamma=0.9)],milestones=["
    "2])"] = [](Optimizer& o) {
    auto a = std::make_shared<ConstantLR>(o, 0.5, 2);
    auto b = std::make_shared<ExponentialLR>(o, 0.9);
    return std::make_shared<SequentialLR>(o, std::vector<std::shared_ptr<LRScheduler>>{a, b},
                                          std::vector<std::int64_t>{2});
  };
  m["ChainedScheduler([LinearLR(start_factor=0.5,total_iters=3),ExponentialLR(gamma=0.9)])"] =
      [](Optimizer& o) {
        auto a = std::make_shared<LinearLR>(o, 0.5, 1.0, 3);
        auto b = std::make_shared<ExponentialLR>(o, 0.9);
        return std::make_shared<ChainedScheduler>(std::vector<std::shared_ptr<LRScheduler>>{a, b});
      };
  m["ReduceLROnPlateau(mode=min,factor=0.5,patience=1,threshold=0.01,cooldown=1,min_lr=0.05)"] =
      [](Optimizer& o) {
        ReduceLROnPlateauOptions c;
        c.factor = 0.5;
        c.patience = 1;
        c.threshold = 0.01;
        c.cooldown = 1;
        c.min_lr = 0.05;
        return std::make_shared<ReduceLROnPlateau>(o, c);
      };
  return m;
}

TEST(LRSchedulerTorchVectors, AllSixteenSequencesMatchPyTorch) {
  const json v = load_vectors();
  const auto cases = torch_cases();
  ASSERT_EQ(v.at("cases").size(), 16u);
  const auto metrics = v.at("plateau_metrics").get<std::vector<double>>();
  for (const auto& [name, expected] : v.at("cases").items()) {
    SCOPED_TRACE(name);
    ASSERT_TRUE(cases.count(name)) << "no factory for case " << name;
    auto opt = make_opt(v.at("base_lr").get<double>());
    auto s = cases.at(name)(*opt);
    const auto want_lr = expected.at("lr").get<std::vector<double>>();
    const auto want_m = expected.at("momentum").get<std::vector<double>>();
    auto* plateau = dynamic_cast<ReduceLROnPlateau*>(s.get());
    for (std::size_t i = 0; i < want_lr.size(); ++i) {
      if (i > 0) {
        opt->step();
        if (plateau != nullptr) {
          plateau->step(metrics[i - 1]);
        } else {
          s->step();
        }
      }
      const auto& g = opt->param_groups()[0];
      EXPECT_TRUE(near(g.number("lr"), want_lr[i], 1e-12))
          << "lr[" << i << "]: got " << g.number("lr") << ", want " << want_lr[i];
      EXPECT_TRUE(near(g.number("momentum"), want_m[i], 1e-12))
          << "momentum[" << i << "]: got " << g.number("momentum") << ", want " << want_m[i];
      EXPECT_TRUE(near(s->last_lrs()[0], want_lr[i], 1e-12)) << "get_last_lr[" << i << "]";
    }
  }
}

// ---- closed forms of lr_scheduler.py, base lr 1.0 (6 significant digits) --------------------

TEST(LRSchedulerSpecTable, Section33Rows) {
  struct Row {
    const char* name;
    Factory make;
    std::vector<double> want;
  };
  std::vector<Row> rows = {
      {"StepLR(2, 0.1)",
       [](Optimizer& o) { return std::make_shared<StepLR>(o, 2, 0.1); },
       {1, 1, 0.1, 0.1, 0.01, 0.01, 0.001}},
      {"MultiStepLR([2,4,4], 0.5)",
       [](Optimizer& o) {
         return std::make_shared<MultiStepLR>(o, std::vector<std::int64_t>{2, 4, 4}, 0.5);
       },
       {1, 1, 0.5, 0.5, 0.125, 0.125, 0.125}},
      {"ConstantLR(0.5, 3)",
       [](Optimizer& o) { return std::make_shared<ConstantLR>(o, 0.5, 3); },
       {0.5, 0.5, 0.5, 1, 1, 1, 1}},
      {"LinearLR(0.25, 1.0, 4)",
       [](Optimizer& o) { return std::make_shared<LinearLR>(o, 0.25, 1.0, 4); },
       {0.25, 0.4375, 0.625, 0.8125, 1, 1, 1}},
      {"ExponentialLR(0.9)",
       [](Optimizer& o) { return std::make_shared<ExponentialLR>(o, 0.9); },
       {1, 0.9, 0.81, 0.729, 0.6561, 0.59049, 0.531441}},
      {"PolynomialLR(4, 2.0)",
       [](Optimizer& o) { return std::make_shared<PolynomialLR>(o, 4, 2.0); },
       {1, 0.5625, 0.25, 0.0625, 0, 0, 0}},
      {"CosineAnnealingLR(4, 0)",
       [](Optimizer& o) { return std::make_shared<CosineAnnealingLR>(o, 4, 0.0); },
       {1, 0.853553, 0.5, 0.146447, 0, 0.146447, 0.5}},
      {"CosineAnnealingLR(4, 0.1)",
       [](Optimizer& o) { return std::make_shared<CosineAnnealingLR>(o, 4, 0.1); },
       {1, 0.868198, 0.55, 0.231802, 0.1, 0.231802, 0.55}},
      {"CosineAnnealingWarmRestarts(3, 2)",
       [](Optimizer& o) { return std::make_shared<CosineAnnealingWarmRestarts>(o, 3, 2); },
       {1, 0.75, 0.25, 1, 0.933013, 0.75, 0.5}},
      {"CyclicLR(0.1, 1.0, up=2)",
       [](Optimizer& o) {
         CyclicLROptions c;
         c.step_size_up = 2;
         return std::make_shared<CyclicLR>(o, 0.1, 1.0, c);
       },
       {0.1, 0.55, 1, 0.55, 0.1, 0.55, 1}},
      {"OneCycleLR(max 1.0, N=10)",
       [](Optimizer& o) {
         OneCycleLROptions c;
         c.total_steps = 10;
         return std::make_shared<OneCycleLR>(o, 1.0, c);
       },
       {0.04, 0.52, 1, 0.950485, 0.811746, 0.611262, 0.388742}},
  };
  for (const auto& r : rows) {
    auto opt = make_opt(1.0);
    auto s = r.make(*opt);
    expect_seq(run(*opt, *s, 6), r.want, 1e-5, r.name);
  }
}

// Recursive and closed forms agree for e = 0..10 (get_lr() and _get_closed_form_lr() of
// torch/optim/lr_scheduler.py).
TEST(LRSchedulerSpecTable, ClosedFormAgreesWithRecursive) {
  std::vector<std::pair<const char*, Factory>> rows = {
      {"step", [](Optimizer& o) { return std::make_shared<StepLR>(o, 2, 0.1); }},
      {"multistep",
       [](Optimizer& o) {
         return std::make_shared<MultiStepLR>(o, std::vector<std::int64_t>{2, 4, 4}, 0.5);
       }},
      {"constant", [](Optimizer& o) { return std::make_shared<ConstantLR>(o, 0.5, 3); }},
      {"linear", [](Optimizer& o) { return std::make_shared<LinearLR>(o, 0.25, 1.0, 4); }},
      {"exponential", [](Optimizer& o) { return std::make_shared<ExponentialLR>(o, 0.9); }},
      {"polynomial", [](Optimizer& o) { return std::make_shared<PolynomialLR>(o, 4, 2.0); }},
      {"cosine", [](Optimizer& o) { return std::make_shared<CosineAnnealingLR>(o, 4, 0.1); }},
  };
  for (const auto& [name, make] : rows) {
    auto a = make_opt(1.0);
    auto sa = make(*a);
    const auto rec = run(*a, *sa, 10);
    auto b = make_opt(1.0);
    auto sb = make(*b);
    for (int e = 0; e <= 10; ++e) {
      b->step();
      sb->step_epoch(e);
      EXPECT_TRUE(near(lr0(*b), rec[static_cast<std::size_t>(e)], 1e-12))
          << name << " e=" << e << ": closed " << lr0(*b) << " recursive " << rec[e];
    }
    EXPECT_FALSE(sb->warnings().empty());  // the epoch deprecation warning
  }
}

// ---- more sequences hand-computed from torch/optim/lr_scheduler.py ------------------------

TEST(LRSchedulerSpec113, LambdaAndMultiplicative) {
  auto o1 = make_opt(1.0);
  LambdaLR l(*o1, LrLambda([](double e) { return std::pow(0.5, e); }));
  expect_seq(run(*o1, l, 4), {1, 0.5, 0.25, 0.125, 0.0625}, 1e-12, "LambdaLR fn");
  auto o2 = make_opt(1.0);
  LambdaLR le(*o2, "0.5^epoch");
  expect_seq(run(*o2, le, 4), {1, 0.5, 0.25, 0.125, 0.0625}, 1e-12, "LambdaLR expr");
  auto o3 = make_opt(1.0);
  MultiplicativeLR m(*o3, "0.9");
  expect_seq(run(*o3, m, 3), {1, 0.9, 0.81, 0.729}, 1e-12, "MultiplicativeLR");
}

TEST(LRSchedulerSpec113, CosineAndWarmRestarts) {
  auto o1 = make_opt(1.0);
  CosineAnnealingLR c(*o1, 4, 0.0);
  expect_seq(run(*o1, c, 10),
             {1, 0.853553, 0.5, 0.146447, 0, 0.146447, 0.5, 0.853553, 1, 0.853553, 0.5}, 1e-5,
             "cosine");
  auto o2 = make_opt(1.0);
  CosineAnnealingWarmRestarts w(*o2, 3, 2);
  expect_seq(run(*o2, w, 10), {1, 0.75, 0.25, 1, 0.933013, 0.75, 0.5, 0.25, 0.0669873, 1, 0.982963},
             1e-5, "warm restarts T_mult 2");
  EXPECT_EQ(w.step_count(), 0);  // its own step never counts
  auto o3 = make_opt(1.0);
  CosineAnnealingWarmRestarts w1(*o3, 3, 1, 0.1);
  expect_seq(run(*o3, w1, 7), {1, 0.775, 0.325, 1, 0.775, 0.325, 1, 0.775}, 1e-12,
             "warm restarts eta_min");
}

TEST(LRSchedulerSpec113, WarmRestartsExplicitEpoch) {
  auto o = make_opt(1.0);
  CosineAnnealingWarmRestarts w(*o, 3, 2);
  w.step_epoch(4.5);  // n = int(log2(4.5/3 + 1)) = 1: T_cur = 1.5, T_i = 6
  EXPECT_DOUBLE_EQ(w.t_cur(), 1.5);
  EXPECT_EQ(w.t_i(), 6);
  EXPECT_EQ(w.last_epoch(), 4);
  EXPECT_NEAR(lr0(*o), (1 + std::cos(std::numbers::pi * 1.5 / 6)) / 2, 1e-15);
  w.step_epoch(1.25);
  EXPECT_EQ(w.t_i(), 3);
  EXPECT_DOUBLE_EQ(w.t_cur(), 1.25);
  EXPECT_NE(error_of([&] { w.step_epoch(-1); }).find("Expected non-negative epoch, but got -1"),
            std::string::npos);
}

TEST(LRSchedulerSpec113, CyclicModesAndMomentum) {
  auto o = make_opt(0.5);
  CyclicLROptions c;
  c.step_size_up = 2;
  CyclicLR s(*o, 0.1, 1.0, c);
  std::vector<double> mom{o->param_groups()[0].number("momentum")};
  std::vector<double> lrs{lr0(*o)};
  for (int i = 0; i < 8; ++i) {
    o->step();
    s.step();
    lrs.push_back(lr0(*o));
    mom.push_back(o->param_groups()[0].number("momentum"));
  }
  expect_seq(lrs, {0.1, 0.55, 1, 0.55, 0.1, 0.55, 1, 0.55, 0.1}, 1e-12, "triangular");
  expect_seq(mom, {0.9, 0.85, 0.8, 0.85, 0.9, 0.85, 0.8, 0.85, 0.9}, 1e-12, "momentum");

  auto o2 = make_opt(0.5);
  c.mode = "triangular2";
  CyclicLR t2(*o2, 0.1, 1.0, c);
  expect_seq(run(*o2, t2, 10), {0.1, 0.55, 1, 0.55, 0.1, 0.325, 0.55, 0.325, 0.1, 0.2125, 0.325},
             1e-12, "triangular2");

  auto o3 = make_opt(0.5);
  c.mode = "exp_range";
  c.gamma = 0.9;
  CyclicLR ex(*o3, 0.1, 1.0, c);
  expect_seq(run(*o3, ex, 8), {0.1, 0.505, 0.829, 0.42805, 0.1, 0.365721, 0.578297, 0.315234, 0.1},
             1e-5, "exp_range");
}

TEST(LRSchedulerSpec113, CyclicCustomScaleFnExpression) {
  auto a = make_opt(0.5);
  CyclicLROptions c;
  c.step_size_up = 2;
  c.scale_fn = LrLambda("1/2^(x-1)");  // == triangular2, scale_mode "cycle"
  CyclicLR s(*a, 0.1, 1.0, c);
  expect_seq(run(*a, s, 10), {0.1, 0.55, 1, 0.55, 0.1, 0.325, 0.55, 0.325, 0.1, 0.2125, 0.325},
             1e-12, "custom scale_fn");
  EXPECT_EQ(s.state_dict().at("_scale_fn_custom"), "1/2^(x-1)");
}

TEST(LRSchedulerSpec113, CyclicMomentumBeta1AndErrors) {
  auto adam = make_opt({HyperValue(0.5)}, /*adam=*/true);
  CyclicLROptions c;
  c.step_size_up = 2;
  CyclicLR s(*adam, 0.1, 1.0, c);
  EXPECT_DOUBLE_EQ(adam->param_groups()[0].number("beta1"), 0.9);
  adam->step();
  s.step();
  EXPECT_DOUBLE_EQ(adam->param_groups()[0].number("beta1"), 0.85);
  EXPECT_FALSE(adam->param_groups()[0].has("momentum"));

  auto plain = make_opt({HyperValue(0.5)}, false, /*momentum=*/false);
  EXPECT_EQ(error_of([&] { CyclicLR bad(*plain, 0.1, 1.0, c); }),
            "[CyclicLR] optimizer must support momentum or beta1 with `cycle_momentum` option "
            "enabled");
  c.cycle_momentum = false;
  EXPECT_EQ(error_of([&] { CyclicLR ok(*plain, 0.1, 1.0, c); }), "<no error>");
  c.mode = "zigzag";
  EXPECT_NE(error_of([&] {
              CyclicLR bad(*plain, 0.1, 1.0, c);
            }).find("mode is invalid and scale_fn is None"),
            std::string::npos);
  auto two = make_opt({HyperValue(0.5), HyperValue(0.5)});
  c.mode = "triangular";
  EXPECT_EQ(error_of([&] {
              CyclicLR bad(*two, std::vector<double>{0.1, 0.2, 0.3}, 1.0, c);
            }),
            "[CyclicLR] base_lr must have the same length as optimizer.param_groups. base_lr has "
            "3 values, param_groups has 2.");
}

TEST(LRSchedulerSpec113, OneCycle) {
  OneCycleLROptions c;
  c.total_steps = 10;
  auto o = make_opt(1.0);
  OneCycleLR s(*o, 1.0, c);
  std::vector<double> lrs{lr0(*o)};
  std::vector<double> mom{o->param_groups()[0].number("momentum")};
  for (int i = 0; i < 10; ++i) {
    o->step();
    s.step();
    lrs.push_back(lr0(*o));
    mom.push_back(o->param_groups()[0].number("momentum"));
  }
  expect_seq(lrs,
             {0.04, 0.52, 1, 0.950485, 0.811746, 0.611262, 0.388742, 0.188258, 0.0495194, 4e-06,
              0.0495194},
             1e-5, "OneCycle cos");
  mom.pop_back();
  expect_seq(mom,
             {0.95, 0.9, 0.85, 0.854952, 0.868826, 0.888874, 0.911126, 0.931174, 0.945048, 0.95},
             1e-5, "OneCycle momentum");
  o->step();
  EXPECT_EQ(error_of([&] { s.step(); }),
            "[OneCycleLR] Tried to step 11 times. The specified number of total steps is 10");

  c.anneal_strategy = "linear";
  auto o2 = make_opt(1.0);
  OneCycleLR lin(*o2, 1.0, c);
  expect_seq(run(*o2, lin, 9),
             {0.04, 0.52, 1, 0.857143, 0.714287, 0.57143, 0.428574, 0.285717, 0.142861, 4e-06},
             1e-5, "OneCycle linear");
  c.three_phase = true;
  auto o3 = make_opt(1.0);
  OneCycleLR three(*o3, 1.0, c);
  expect_seq(run(*o3, three, 9),
             {0.04, 0.52, 1, 0.52, 0.04, 0.0320008, 0.0240016, 0.0160024, 0.0080032, 4e-06}, 1e-5,
             "OneCycle three-phase");
}

TEST(LRSchedulerSpec113, OneCycleValidation) {
  auto o = make_opt(1.0);
  OneCycleLROptions c;
  EXPECT_EQ(error_of([&] { OneCycleLR s(*o, 1.0, c); }),
            "[OneCycleLR] You must define either total_steps OR (epochs AND steps_per_epoch)");
  c.total_steps = 0;
  EXPECT_EQ(error_of([&] { OneCycleLR s(*o, 1.0, c); }),
            "[OneCycleLR] Expected positive integer total_steps, but got 0");
  c.total_steps.reset();
  c.epochs = 2;
  c.steps_per_epoch = -1;
  EXPECT_EQ(error_of([&] { OneCycleLR s(*o, 1.0, c); }),
            "[OneCycleLR] Expected positive integer steps_per_epoch, but got -1");
  c.steps_per_epoch = 5;
  c.pct_start = 1.5;
  EXPECT_EQ(error_of([&] { OneCycleLR s(*o, 1.0, c); }),
            "[OneCycleLR] Expected float between 0 and 1 pct_start, but got 1.5");
  c.pct_start = 0.3;
  c.anneal_strategy = "step";
  EXPECT_EQ(error_of([&] { OneCycleLR s(*o, 1.0, c); }),
            "[OneCycleLR] anneal_strategy must be one of 'cos' or 'linear', instead got step");
  c.anneal_strategy = "cos";
  OneCycleLR ok(*o, 1.0, c);
  EXPECT_EQ(ok.total_steps(), 10);
}

TEST(LRSchedulerSpec113, SequentialAndChained) {
  auto o = make_opt(1.0);
  auto a = std::make_shared<ConstantLR>(*o, 0.1, 2);
  auto b = std::make_shared<ExponentialLR>(*o, 0.9);
  SequentialLR s(*o, {a, b}, {3});
  expect_seq(run(*o, s, 6), {0.1, 0.1, 1.0, 1.0, 0.9, 0.81, 0.729}, 1e-12, "SequentialLR");

  auto o2 = make_opt(1.0);
  auto c1 = std::make_shared<ConstantLR>(*o2, 0.1, 2);
  auto c2 = std::make_shared<ExponentialLR>(*o2, 0.9);
  ChainedScheduler ch({c1, c2});
  expect_seq(run(*o2, ch, 5), {0.1, 0.09, 0.81, 0.729, 0.6561, 0.59049}, 1e-12, "Chained");
}

TEST(LRSchedulerSpec113, ReduceLROnPlateau) {
  auto o = make_opt(1.0);
  ReduceLROnPlateauOptions c;
  c.factor = 0.5;
  c.patience = 1;
  c.cooldown = 1;
  c.min_lr = 0.2;
  ReduceLROnPlateau s(*o, c);
  const std::vector<double> metrics{10, 9, 9, 9, 9, 9, 9, 8, 8, 8, 8, 8};
  std::vector<double> got;
  for (double m : metrics) {
    o->step();
    s.step(m);
    got.push_back(lr0(*o));
  }
  expect_seq(got, {1, 1, 1, 0.5, 0.5, 0.5, 0.25, 0.25, 0.25, 0.2, 0.2, 0.2}, 1e-12, "plateau");
  EXPECT_NE(error_of([&] { s.step(); }).find("needs the metric"), std::string::npos);
}

TEST(LRSchedulerSpec113, ReduceLROnPlateauModes) {
  auto o = make_opt(1.0);
  ReduceLROnPlateauOptions c;
  c.mode = "max";
  c.threshold_mode = "abs";
  c.threshold = 0.5;
  c.patience = 0;
  ReduceLROnPlateau s(*o, c);
  s.step(1.0);  // better than -inf
  EXPECT_DOUBLE_EQ(lr0(*o), 1.0);
  s.step(1.4);  // not better than 1.0 + 0.5
  EXPECT_DOUBLE_EQ(lr0(*o), 0.1);
  EXPECT_DOUBLE_EQ(s.best(), 1.0);
  s.step(1.6);
  EXPECT_DOUBLE_EQ(lr0(*o), 0.1);
  EXPECT_DOUBLE_EQ(s.best(), 1.6);
  // eps: a reduction smaller than eps is skipped.
  auto o2 = make_opt(1e-9);
  ReduceLROnPlateauOptions e;
  e.patience = 0;
  ReduceLROnPlateau s2(*o2, e);
  s2.step(1.0);
  s2.step(1.0);
  EXPECT_DOUBLE_EQ(lr0(*o2), 1e-9);
  // per-group min_lr
  auto o3 = make_opt({HyperValue(1.0), HyperValue(1.0)});
  ReduceLROnPlateauOptions p;
  p.patience = 0;
  p.min_lr = std::vector<double>{0.5, 0.01};
  ReduceLROnPlateau s3(*o3, p);
  s3.step(1.0);
  s3.step(1.0);
  EXPECT_DOUBLE_EQ(o3->param_groups()[0].number("lr"), 0.5);
  EXPECT_DOUBLE_EQ(o3->param_groups()[1].number("lr"), 0.1);
}

TEST(LRSchedulerSWALR, Section114AndTorchVector) {
  auto o = make_opt(1.0);
  SWALR s(*o, 0.1, 3, "cos");
  expect_seq(run(*o, s, 5), {1.0, 0.775, 0.325, 0.1, 0.1, 0.1}, 1e-12, "SWALR cos");
  auto o2 = make_opt(1.0);
  SWALR l(*o2, 0.1, 4, "linear");
  expect_seq(run(*o2, l, 5), {1.0, 0.775, 0.55, 0.325, 0.1, 0.1}, 1e-12, "SWALR linear");
  auto o3 = make_opt(1.0);
  SWALR z(*o3, 0.1, 0, "cos");
  EXPECT_DOUBLE_EQ(lr0(*o3), 0.1);
  // tests/data/swa.json, "SWALR(swa_lr=0.05,anneal_epochs=4,cos), start lr 1.0"
  // (PyTorch 1.13).
  auto o4 = make_opt(1.0);
  SWALR t(*o4, 0.05, 4, "cos");
  expect_seq(run(*o4, t, 6), {1.0, 0.86087572106361, 0.525, 0.18912427893638994, 0.05, 0.05, 0.05},
             1e-12, "SWALR torch");
}

TEST(LRSchedulerSWALR, ValidationAndStateDictRestoresStrategy) {
  auto o = make_opt(1.0);
  EXPECT_EQ(error_of([&] { SWALR s(*o, 0.2, 3, "step"); }),
            "[SWALR] anneal_strategy must by one of 'cos' or 'linear', instead got step");
  EXPECT_DOUBLE_EQ(o->param_groups()[0].number("swa_lr"), 0.2);  // written before the check
  EXPECT_EQ(error_of([&] { SWALR s(*o, 0.2, -1, "cos"); }),
            "[SWALR] anneal_epochs must be equal or greater than 0, got -1");

  auto a = make_opt(1.0);
  SWALR lin(*a, 0.1, 4, "linear");
  a->step();
  lin.step();
  const json sd = lin.state_dict();
  EXPECT_EQ(sd.at("_anneal_strategy"), "linear");
  auto b = make_opt(1.0);
  SWALR cosine(*b, 0.1, 4, "cos");
  b->load_state_dict(a->state_dict());
  cosine.load_state_dict(sd);
  EXPECT_EQ(cosine.anneal_strategy(), "linear");
  for (int i = 0; i < 4; ++i) {
    a->step();
    lin.step();
    b->step();
    cosine.step();
    EXPECT_EQ(lr0(*a), lr0(*b)) << i;
  }
}

// ---- state_dict round trips -----------------------------------------------------------------

TEST(LRSchedulerStateDict, MidRunSaveAndLoadContinuesExactly) {
  const std::vector<json> configs = {
      {{"kind", "step"}, {"step_size", 2}, {"gamma", 0.3}},
      {{"kind", "multistep"}, {"milestones", {3, 4, 9}}, {"gamma", 0.5}},
      {{"kind", "constant"}, {"factor", 0.25}, {"total_iters", 5}},
      {{"kind", "linear"}, {"start_factor", 0.2}, {"total_iters", 6}},
      {{"kind", "exponential"}, {"gamma", 0.8}},
      {{"kind", "polynomial"}, {"total_iters", 6}, {"power", 2.0}},
      {{"kind", "cosine"}, {"T_max", 5}, {"eta_min", 0.1}},
      {{"kind", "cosine_warm_restarts"}, {"T_0", 2}, {"T_mult", 3}, {"eta_min", 0.05}},
      {{"kind", "cyclic"},
       {"base_lr", 0.01},
       {"max_lr", 0.5},
       {"step_size_up", 2},
       {"step_size_down", 5},
       {"mode", "exp_range"},
       {"gamma", 0.95}},
      {{"kind", "one_cycle"}, {"max_lr", 0.5}, {"total_steps", 16}},
      {{"kind", "lambda"}, {"lr_lambda", "warmup_linear(3) * 0.9^epoch"}},
      {{"kind", "multiplicative"}, {"lr_lambda", "0.95"}},
      {{"kind", "sequential"},
       {"schedulers",
        {{{"kind", "linear"}, {"start_factor", 0.5}, {"total_iters", 3}},
         {{"kind", "cosine"}, {"T_max", 6}}}},
       {"milestones", {3}}},
      {{"kind", "chained"},
       {"schedulers",
        {{{"kind", "linear"}, {"start_factor", 0.5}, {"total_iters", 3}},
         {{"kind", "exponential"}, {"gamma", 0.9}}}}},
      {{"kind", "plateau"},
       {"factor", 0.5},
       {"patience", 1},
       {"cooldown", 1},
       {"min_lr", 0.05},
       {"threshold", 0.01}},
      {{"kind", "swa"}, {"swa_lr", 0.05}, {"anneal_epochs", 4}},
  };
  const std::vector<double> metrics{5, 4, 4.5, 4.2, 4.1, 4.1, 4.1, 4.0, 3, 3, 3, 3, 3, 3, 3};
  for (const auto& cfg : configs) {
    SCOPED_TRACE(cfg.dump());
    for (int k : {0, 1, 4}) {
      auto step = [&](Optimizer& o, LRScheduler& s, int i) {
        o.step();
        if (auto* p = dynamic_cast<ReduceLROnPlateau*>(&s)) {
          p->step(metrics[static_cast<std::size_t>(i)]);
        } else {
          s.step();
        }
      };
      auto a = make_opt(0.5);
      auto sa = make_scheduler(*a, cfg);
      for (int i = 0; i < k; ++i)
        step(*a, *sa, i);
      // Through text, as a checkpoint file would be.
      const json sd = json::parse(sa->state_dict().dump());
      auto b = make_opt(0.5);
      auto sb = make_scheduler(*b, cfg);
      b->load_state_dict(a->state_dict());
      sb->load_state_dict(sd);
      EXPECT_EQ(sb->state_dict(), sa->state_dict()) << "k=" << k;
      for (int i = k; i < k + 8 && i < 15; ++i) {
        step(*a, *sa, i);
        step(*b, *sb, i);
        EXPECT_EQ(lr0(*a), lr0(*b)) << "k=" << k << " i=" << i;
        EXPECT_EQ(a->param_groups()[0].number("momentum"), b->param_groups()[0].number("momentum"));
        EXPECT_EQ(sa->last_lrs(), sb->last_lrs());
      }
    }
  }
}

TEST(LRSchedulerStateDict, KeysAndNonFiniteNumbers) {
  auto o = make_opt(0.5);
  StepLR s(*o, 2, 0.3);
  const json sd = s.state_dict();
  for (const char* k :
       {"step_size", "gamma", "base_lrs", "last_epoch", "_step_count", "_is_initial",
        "_get_lr_called_within_step", "_last_lr", "_last_lr_is_tensor"})
    EXPECT_TRUE(sd.contains(k)) << k;
  EXPECT_EQ(sd.at("last_epoch"), 0);
  EXPECT_EQ(sd.at("_step_count"), 1);
  EXPECT_EQ(sd.at("_is_initial"), false);

  auto p = make_opt(0.5);
  ReduceLROnPlateau r(*p);
  const json rsd = r.state_dict();
  EXPECT_EQ(rsd.at("best"), "inf");
  EXPECT_EQ(rsd.at("mode_worse"), "inf");
  EXPECT_TRUE(rsd.at("default_min_lr").is_number());
  ReduceLROnPlateau r2(*p);
  r2.step(3.0);
  r2.load_state_dict(json::parse(rsd.dump()));
  EXPECT_TRUE(std::isinf(r2.best()));
  EXPECT_NE(error_of([&] {
              r2.load_state_dict(json{{"patience", "ten"}});
            }).find("state_dict entry 'patience' must be an integer"),
            std::string::npos);
}

TEST(LRSchedulerStateDict, LambdaExpressionsAreSavedFunctionsAreNull) {
  auto o = make_opt({HyperValue(1.0), HyperValue(1.0)});
  LambdaLR s(*o, std::vector<LrLambda>{LrLambda("0.5^epoch"),
                                       LrLambda([](double e) { return 1.0 / (1.0 + e); })});
  const json sd = s.state_dict();
  EXPECT_EQ(sd.at("lr_lambdas")[0], "0.5^epoch");
  EXPECT_TRUE(sd.at("lr_lambdas")[1].is_null());
  auto o2 = make_opt({HyperValue(1.0), HyperValue(1.0)});
  LambdaLR t(*o2, std::vector<LrLambda>{LrLambda("1"), LrLambda("1")});
  t.load_state_dict(sd);
  o2->step();
  t.step();
  EXPECT_DOUBLE_EQ(o2->param_groups()[0].number("lr"), 0.5);  // expression restored
  EXPECT_DOUBLE_EQ(o2->param_groups()[1].number("lr"), 1.0);  // null keeps the current one
}

// ---- tensor LRs (aliasing cases of PyTorch issues 162359, 163103; PRs 163098, 163120) --------

TEST(LRSchedulerTensorLR, GetLastLrReturnsCopiesAndLrStaysTheSameTensor) {
  Tensor lr = lr_tensor(1.0);
  auto o = make_opt({HyperValue(lr)});
  ExponentialLR s(*o, 0.5);
  const auto& init = std::get<Tensor>(o->param_groups()[0].get("initial_lr"));
  EXPECT_NE(init.impl(), lr.impl());  // initial_lr is a clone
  o->step();
  s.step();
  const auto& live = std::get<Tensor>(o->param_groups()[0].get("lr"));
  EXPECT_EQ(live.impl(), lr.impl());  // filled in place
  EXPECT_DOUBLE_EQ(lr.item(), 0.5);
  auto last = s.get_last_lr();
  ASSERT_TRUE(std::holds_alternative<Tensor>(last[0]));
  Tensor copy = std::get<Tensor>(last[0]);
  EXPECT_NE(copy.impl(), lr.impl());
  copy.fill_(123.0);  // user mutation of the copy
  EXPECT_DOUBLE_EQ(lr.item(), 0.5);
  EXPECT_DOUBLE_EQ(s.last_lrs()[0], 0.5);
  EXPECT_DOUBLE_EQ(init.item(), 1.0);
  EXPECT_EQ(s.state_dict().at("_last_lr_is_tensor")[0], true);
}

TEST(LRSchedulerTensorLR, SequentialDoesNotAliasInitialLr) {
  // Issue 162359: LinearLR then cosine; with aliasing, LinearLR's in-place fill would rewrite
  // initial_lr and scale the cosine's base by start_factor.
  auto run_with = [](HyperValue lr) {
    auto o = make_opt({lr});
    auto a = std::make_shared<LinearLR>(*o, 0.5, 1.0, 2);
    auto b = std::make_shared<CosineAnnealingLR>(*o, 4);
    SequentialLR s(*o, {a, b}, {2});
    auto seq = run(*o, s, 6);
    EXPECT_DOUBLE_EQ(o->param_groups()[0].number("initial_lr"), 1.0);
    EXPECT_DOUBLE_EQ(b->base_lrs()[0], 1.0);
    return seq;
  };
  const auto plain = run_with(1.0);
  Tensor t = lr_tensor(1.0);
  const auto tensor = run_with(t);
  EXPECT_EQ(plain, tensor);
  expect_seq(plain, {0.5, 0.75, 1.0, 0.853553, 0.5, 0.146447, 0.0}, 1e-5, "linear then cosine");
}

TEST(LRSchedulerTensorLR, ReduceLROnPlateauKeepsTensorAndFillsInPlace) {
  Tensor lr = lr_tensor(1.0);
  auto o = make_opt({HyperValue(lr)});
  ReduceLROnPlateauOptions c;
  c.patience = 0;
  ReduceLROnPlateau s(*o, c);
  s.step(1.0);
  s.step(1.0);
  const auto& live = o->param_groups()[0].get("lr");
  ASSERT_TRUE(std::holds_alternative<Tensor>(live));
  EXPECT_EQ(std::get<Tensor>(live).impl(), lr.impl());
  EXPECT_DOUBLE_EQ(lr.item(), 0.1);
  EXPECT_EQ(lr.dtype(), ScalarType::Float64);
}

TEST(LRSchedulerTensorLR, LoadRebuildsTensorLastLr) {
  auto a = make_opt({HyperValue(lr_tensor(1.0))});
  StepLR sa(*a, 1, 0.5);
  a->step();
  sa.step();
  auto b = make_opt({HyperValue(lr_tensor(1.0))});
  StepLR sb(*b, 1, 0.5);
  sb.load_state_dict(sa.state_dict());
  auto last = sb.get_last_lr();
  ASSERT_TRUE(std::holds_alternative<Tensor>(last[0]));
  EXPECT_DOUBLE_EQ(std::get<Tensor>(last[0]).item(), 0.5);
}

// ---- resume and _is_initial -----------------------------------------------------------------

TEST(LRSchedulerResume, IsInitialKeepsTheLrOnResume) {
  std::vector<
      std::pair<const char*, std::function<std::shared_ptr<LRScheduler>(Optimizer&, std::int64_t)>>>
      rows = {
          {"exponential",
           [](Optimizer& o, std::int64_t le) {
             return std::make_shared<ExponentialLR>(o, 0.9, le);
           }},
          {"cosine",
           [](Optimizer& o, std::int64_t le) {
             return std::make_shared<CosineAnnealingLR>(o, 5, 0.1, le);
           }},
          {"polynomial",
           [](Optimizer& o, std::int64_t le) {
             return std::make_shared<PolynomialLR>(o, 6, 2.0, le);
           }},
          {"linear",
           [](Optimizer& o, std::int64_t le) {
             return std::make_shared<LinearLR>(o, 0.2, 1.0, 6, le);
           }},
          {"multiplicative",
           [](Optimizer& o, std::int64_t le) {
             return std::make_shared<MultiplicativeLR>(o, "0.9", le);
           }},
      };
  for (const auto& [name, make] : rows) {
    auto a = make_opt(1.0);
    auto sa = make(*a, -1);
    const auto full = run(*a, *sa, 8);
    // Resume after 3 steps: the group holds lr(3) and initial_lr; last_epoch = 2 makes the
    // construction step land on epoch 3 without changing the LR.
    auto b = make_opt(full[3]);
    b->param_groups()[0].options["initial_lr"] = 1.0;
    auto sb = make(*b, 2);
    EXPECT_EQ(lr0(*b), full[3]) << name;
    EXPECT_EQ(sb->last_epoch(), 3) << name;
    for (std::size_t e = 4; e <= 8; ++e) {
      b->step();
      sb->step();
      EXPECT_TRUE(near(lr0(*b), full[e], 1e-12)) << name << " e=" << e;
    }
  }
}

TEST(LRSchedulerResume, MissingInitialLrIsAnError) {
  auto o = make_opt(1.0);
  EXPECT_NE(error_of([&] { ExponentialLR s(*o, 0.9, 3); })
                .find("[ExponentialLR] param 'initial_lr' is not specified in param_groups[0] "
                      "when resuming scheduler with last_epoch >= 0"),
            std::string::npos);
}

TEST(LRSchedulerResume, SecondSchedulerSharesTheFirstsInitialLr) {
  auto o = make_opt(1.0);
  ExponentialLR a(*o, 0.5);
  o->step();
  a.step();
  StepLR b(*o, 2);
  EXPECT_DOUBLE_EQ(b.base_lrs()[0], 1.0);
  EXPECT_DOUBLE_EQ(lr0(*o), 0.5);
}

// ---- warnings -------------------------------------------------------------------------------

TEST(LRSchedulerWarnings, OrderEpochAndGetLr) {
  auto o = make_opt(1.0);
  ExponentialLR s(*o, 0.9);
  EXPECT_TRUE(s.warnings().empty());
  s.step();  // before optimizer.step()
  ASSERT_EQ(s.warnings().size(), 1u);
  EXPECT_NE(s.warnings()[0].find("Detected call of `lr_scheduler.step()` before "
                                 "`optimizer.step()`"),
            std::string::npos);
  s.clear_warnings();
  o->step();
  s.step();
  EXPECT_TRUE(s.warnings().empty());
  s.step_epoch(5);
  ASSERT_EQ(s.warnings().size(), 1u);
  EXPECT_NE(s.warnings()[0].find("The epoch parameter in `scheduler.step()`"), std::string::npos);
  EXPECT_NEAR(lr0(*o), std::pow(0.9, 5), 1e-15);  // closed form
  s.clear_warnings();
  s.get_lr();
  ASSERT_EQ(s.warnings().size(), 1u);
  EXPECT_NE(s.warnings()[0].find("please use `get_last_lr()`"), std::string::npos);
  EXPECT_NE(error_of([&] { s.step_epoch(1.5); }).find("epoch must be a whole number"),
            std::string::npos);
}

// ---- validation ------------------------------------------------------------------------------

TEST(LRSchedulerValidation, PyTorchMessages) {
  auto o = make_opt(1.0);
  EXPECT_EQ(error_of([&] { ConstantLR s(*o, 1.5); }),
            "[ConstantLR] Constant multiplicative factor expected to be between 0 and 1. (factor "
            "= 1.5)");
  EXPECT_EQ(error_of([&] { LinearLR s(*o, 0.0); }),
            "[LinearLR] Starting multiplicative factor expected to be greater than 0 and less or "
            "equal to 1. (start_factor = 0)");
  EXPECT_EQ(error_of([&] { LinearLR s(*o, 0.5, 1.5); }),
            "[LinearLR] Ending multiplicative factor expected to be between 0 and 1. (end_factor "
            "= 1.5)");
  EXPECT_EQ(error_of([&] { CosineAnnealingWarmRestarts s(*o, 0); }),
            "[CosineAnnealingWarmRestarts] Expected positive integer T_0, but got 0");
  EXPECT_EQ(error_of([&] { CosineAnnealingWarmRestarts s(*o, 2, 0); }),
            "[CosineAnnealingWarmRestarts] Expected integer T_mult >= 1, but got 0");
  EXPECT_EQ(error_of([&] { StepLR s(*o, 0); }),
            "[StepLR] step_size must be a positive integer, got 0");
  EXPECT_EQ(error_of([&] { CosineAnnealingLR s(*o, 0); }),
            "[CosineAnnealingLR] T_max must be a positive integer, got 0");
  auto two = make_opt({HyperValue(1.0), HyperValue(1.0)});
  EXPECT_EQ(error_of([&] {
              LambdaLR s(*two, std::vector<LrLambda>{LrLambda("1"), LrLambda("1"), LrLambda("1")});
            }),
            "[LambdaLR] Expected 2 lr_lambdas, but got 3");
  EXPECT_EQ(error_of([&] { MultiplicativeLR s(*two, std::vector<LrLambda>{LrLambda("1")}); }),
            "[MultiplicativeLR] Expected 2 lr_lambdas, but got 1");
  EXPECT_EQ(error_of([&] { LrLambda l{std::function<double(double)>()}; }),
            "[lr_lambda] lr_lambda should be a function, but got an empty function");

  ReduceLROnPlateauOptions r;
  r.factor = 1.0;
  EXPECT_EQ(error_of([&] { ReduceLROnPlateau s(*o, r); }),
            "[ReduceLROnPlateau] Factor should be < 1.0. (factor = 1)");
  r.factor = 0.1;
  r.mode = "avg";
  EXPECT_EQ(error_of([&] { ReduceLROnPlateau s(*o, r); }),
            "[ReduceLROnPlateau] mode avg is unknown!");
  r.mode = "min";
  r.threshold_mode = "pct";
  EXPECT_EQ(error_of([&] { ReduceLROnPlateau s(*o, r); }),
            "[ReduceLROnPlateau] threshold mode pct is unknown!");
  r.threshold_mode = "rel";
  r.min_lr = std::vector<double>{0.1, 0.2};
  EXPECT_EQ(error_of([&] { ReduceLROnPlateau s(*o, r); }),
            "[ReduceLROnPlateau] expected 1 min_lrs, got 2");
}

TEST(LRSchedulerValidation, SequentialAndChained) {
  auto o = make_opt(1.0);
  auto other = make_opt(1.0);
  auto a = std::make_shared<ExponentialLR>(*o, 0.9);
  auto b = std::make_shared<ExponentialLR>(*other, 0.9);
  auto p = std::make_shared<ReduceLROnPlateau>(*o);
  EXPECT_EQ(error_of([&] { SequentialLR s(*o, {}, {}); }),
            "[SequentialLR] SequentialLR expects at least one scheduler, but got no scheduler.");
  EXPECT_NE(error_of([&] {
              SequentialLR s(*o, {a, p}, {2});
            })
                .find("does not support `ReduceLROnPlateau` scheduler as it requires additional "
                      "kwargs to be specified when calling `step`, but got one at index 1"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              SequentialLR s(*o, {a, b}, {2});
            })
                .find("expects all schedulers to belong to the same optimizer, but got scheduler "
                      "ExponentialLR at index 1"),
            std::string::npos);
  EXPECT_EQ(error_of([&] {
              SequentialLR s(*o, {a, a}, {2, 3});
            }),
            "[SequentialLR] Sequential Schedulers expects number of schedulers provided to be one "
            "more than the number of milestone points, but got number of schedulers 2 and the "
            "number of milestones to be equal to 2");
  EXPECT_EQ(error_of([&] { ChainedScheduler s(std::vector<std::shared_ptr<LRScheduler>>{}); }),
            "[ChainedScheduler] ChainedScheduler expects at least one scheduler, but got no "
            "scheduler.");
  EXPECT_NE(error_of([&] {
              ChainedScheduler s({a, b});
            }).find("same optimizer"),
            std::string::npos);
  try {
    SequentialLR s(*o, {a, nullptr}, {2});
    FAIL() << "no error";
  } catch (const tb::TypeError&) {
  }
}

// ---- expression language --------------------------------------------------------------------

TEST(LRLambdaExpr, Evaluates) {
  auto ev = [](const char* t, double x) { return LrExpression::parse(t).eval(x); };
  EXPECT_DOUBLE_EQ(ev("0.5^epoch", 3), 0.125);
  EXPECT_DOUBLE_EQ(ev("0.5**step", 2), 0.25);
  EXPECT_DOUBLE_EQ(ev("-2^2", 0), -4);      // as Python: -(2**2)
  EXPECT_DOUBLE_EQ(ev("2**3**2", 0), 512);  // right-associative
  EXPECT_DOUBLE_EQ(ev("2^-1", 0), 0.5);
  EXPECT_DOUBLE_EQ(ev("1 - 2 - 3", 0), -4);  // left-associative
  EXPECT_DOUBLE_EQ(ev("8 / 2 / 2", 0), 2);
  EXPECT_DOUBLE_EQ(ev("(1 + epoch) * 2", 3), 8);
  EXPECT_DOUBLE_EQ(ev("min(1, epoch / 10)", 5), 0.5);
  EXPECT_DOUBLE_EQ(ev("max(0.1, 1 - epoch/10, 0.05)", 20), 0.1);
  EXPECT_NEAR(ev("0.5 * (1 + cos(pi * epoch / 10))", 5), 0.5, 1e-15);
  EXPECT_DOUBLE_EQ(ev("exp(log(2))", 0), 2);
  EXPECT_DOUBLE_EQ(ev("sqrt(16) + floor(2.7) + ceil(0.2)", 0), 7);
  EXPECT_DOUBLE_EQ(ev("sin(0)", 0), 0);
  EXPECT_DOUBLE_EQ(ev("1e-2 * 2.5E1", 0), 0.25);
  EXPECT_DOUBLE_EQ(ev("constant", 7), 1);
  EXPECT_DOUBLE_EQ(ev("warmup_linear(4)", 0), 0);
  EXPECT_DOUBLE_EQ(ev("warmup_linear(4)", 2), 0.5);
  EXPECT_DOUBLE_EQ(ev("warmup_linear(4)", 9), 1);
  EXPECT_DOUBLE_EQ(ev("inverse_sqrt(4)", 2), 1);
  EXPECT_DOUBLE_EQ(ev("inverse_sqrt(4)", 16), 0.5);
  EXPECT_DOUBLE_EQ(ev("warmup_linear(10) * 0.5^(epoch/100)", 200), 0.25);
}

TEST(LRLambdaExpr, ParseErrorsNamePositionAndToken) {
  auto err = [](const char* t) { return error_of([&] { LrExpression::parse(t); }); };
  EXPECT_EQ(err("epoch +"),
            "[lr_lambda] parse error at position 8 (token '<end>'): unexpected end of expression "
            "in 'epoch +'");
  EXPECT_EQ(err("epoch $ 2"),
            "[lr_lambda] parse error at position 7 (token '$'): unexpected character in 'epoch $ "
            "2'");
  EXPECT_EQ(err("foo(1)"),
            "[lr_lambda] parse error at position 1 (token 'foo'): unknown function in 'foo(1)'");
  EXPECT_NE(err("epochs * 2").find("position 1 (token 'epochs'): unknown name"), std::string::npos);
  EXPECT_EQ(err("1 2"),
            "[lr_lambda] parse error at position 3 (token '2'): expected an operator or the end "
            "in '1 2'");
  EXPECT_EQ(err("(1 + 2"),
            "[lr_lambda] parse error at position 7 (token '<end>'): expected ')' in '(1 + 2'");
  EXPECT_NE(err("cos(1, 2)").find("cos() takes 1 argument(s), got 2"), std::string::npos);
  EXPECT_NE(err("1.2.3").find("position 1 (token '1.2.3'): malformed number"), std::string::npos);
  EXPECT_NE(err("").find("unexpected end of expression"), std::string::npos);
  EXPECT_NE(err("2 * * 3").find("position 5 (token '*')"), std::string::npos);
}

// ---- config factory and preview ---------------------------------------------------------------

TEST(LRSchedulerConfig, FactoryErrorsNameTheField) {
  auto o = make_opt(1.0);
  EXPECT_EQ(error_of([&] {
              make_scheduler(*o, json{{"kind", "cosine"}});
            }),
            "[lr_scheduler] cosine: field 'T_max' is required");
  EXPECT_NE(error_of([&] {
              make_scheduler(*o, json{{"kind", "cosine"}, {"T_max", 3}, {"tmax", 3}});
            }).find("[lr_scheduler] cosine: field 'tmax' is not a field of this kind"),
            std::string::npos);
  // The nearest field, letters compared without case ("tmax" is one slip from "T_max").
  EXPECT_NE(error_of([&] {
              make_scheduler(*o, json{{"kind", "cosine"}, {"T_max", 3}, {"tmax", 3}});
            }).find("(fields: T_max, eta_min, last_epoch); did you mean 'T_max'?"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              make_scheduler(*o, json{{"kind", "cosin"}});
            }).find("; did you mean 'cosine'?"),
            std::string::npos);
  EXPECT_EQ(error_of([&] {
              make_scheduler(*o, json{{"kind", "step"}, {"step_size", 2.5}});
            }),
            "[lr_scheduler] step: field 'step_size' must be an integer, got 2.5");
  EXPECT_NE(error_of([&] {
              make_scheduler(*o, json{{"kind", "warp"}});
            }).find("[lr_scheduler] unknown kind 'warp'"),
            std::string::npos);
  EXPECT_EQ(
      error_of([&] {
        make_scheduler(
            *o,
            json{{"kind", "one_cycle"}, {"max_lr", 1.0}, {"total_steps", 10}, {"pct_start", 1}});
      }),
      "[lr_scheduler] one_cycle: field 'pct_start' Expected float between 0 and 1 "
      "pct_start, but got 1");
  EXPECT_NE(error_of([&] {
              make_scheduler(*o, json{{"kind", "lambda"}, {"lr_lambda", "0.5^"}});
            }).find("field 'lr_lambda' is not a valid expression: parse error at position 5"),
            std::string::npos);
  EXPECT_NE(
      error_of([&] {
        make_scheduler(*o, json{{"kind", "cosine_warm_restarts"}, {"T_0", 2}, {"eta_min", "low"}});
      }).find("Expected float or int eta_min, but got \"low\" of type string"),
      std::string::npos);
}

TEST(LRSchedulerPreview, CosineGroupsPlateauAndAdam) {
  const auto p = preview(json{{"kind", "cosine"}, {"T_max", 4}, {"lr", 1.0}}, 4);
  ASSERT_EQ(p.lr.size(), 5u);
  expect_seq({p.lr[0][0], p.lr[1][0], p.lr[2][0], p.lr[3][0], p.lr[4][0]},
             {1, 0.853553, 0.5, 0.146447, 0}, 1e-5, "preview cosine");
  EXPECT_TRUE(p.warnings.empty());  // the optimizer is stepped first

  const auto g = preview(json{{"kind", "step"}, {"step_size", 1}, {"lr", {1.0, 0.1}}}, 2);
  ASSERT_EQ(g.lr[2].size(), 2u);
  EXPECT_NEAR(g.lr[2][0], 0.01, 1e-15);
  EXPECT_NEAR(g.lr[2][1], 0.001, 1e-15);

  const auto r =
      preview(json{{"kind", "plateau"}, {"patience", 0}, {"lr", 1.0}, {"metrics", {3, 2, 2}}}, 3);
  expect_seq({r.lr[0][0], r.lr[1][0], r.lr[2][0], r.lr[3][0]}, {1, 1, 1, 0.1}, 1e-12,
             "preview plateau");

  const auto a = preview(
      json{{"kind", "one_cycle"}, {"max_lr", 1.0}, {"total_steps", 10}, {"optimizer", "adam"}}, 2);
  EXPECT_EQ(a.momentum_key, "beta1");
  EXPECT_NEAR(a.momentum[2][0], 0.85, 1e-12);

  const auto seq = preview(json::parse(R"({"kind": "sequential", "lr": 1.0, "milestones": [3],
                      "schedulers": [{"kind": "constant", "factor": 0.1, "total_iters": 2},
                                     {"kind": "exponential", "gamma": 0.9}]})"),
                           6);
  std::vector<double> got;
  for (const auto& row : seq.lr)
    got.push_back(row[0]);
  expect_seq(got, {0.1, 0.1, 1.0, 1.0, 0.9, 0.81, 0.729}, 1e-12, "preview sequential");

  EXPECT_NE(error_of([] {
              preview(json{{"kind", "step"}, {"step_size", 1}, {"optimizer", "rms"}}, 1);
            }).find("field 'optimizer'"),
            std::string::npos);
}

}  // namespace
