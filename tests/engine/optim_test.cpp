// Optimizers (torch/optim/optimizer.py, sgd.py, adam.py, _muon.py of pytorch/pytorch):
// hand-computed Newton–Schulz, Muon, Adam/AdamW and SGD values, PyTorch 1.13's trajectories
// (tests/data/optimizers.json), constructor validation
// messages, state_dict layout and round trips, tensor LRs, Newton–Schulz forms and schedules,
// the Muon/AdamW parameter split, and the multi-tensor ops the optimizers call (foreach_lerp_,
// muon_momentum_, sgd_step_, adam_step_: values, fused vs elementwise paths, errors).
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "engine/autograd/autograd.h"
#include "engine/core/error.h"
#include "engine/core/half.h"
#include "engine/core/thread_pool.h"
#include "engine/dispatch/dispatcher.h"
#include "engine/dispatch/op_signatures.h"
#include "engine/nn/cnn.h"
#include "engine/nn/models.h"
#include "engine/ops/ops.h"
#include "engine/optim/muon.h"
#include "engine/optim/optimizer.h"
#include "engine/optim/param_split.h"
#include "engine/optim/sgd_adam.h"
#include "engine/rng/cpu_generator.h"
#include "engine/rng/generator.h"
#include "tests/engine/test_util.h"

namespace {

using tb::core::ScalarType;
using tb::core::Tensor;
namespace ag = tb::autograd;
namespace ops = tb::ops;
namespace optim = tb::optim;
using tb::test::error_of;

Tensor param(const std::vector<double>& v, std::vector<std::int64_t> shape) {
  return ag::requires_grad_(
      tb::core::from_vector(v, tb::core::IntList(shape.data(), shape.size())));
}

void set_grad(const Tensor& p, const std::vector<double>& g) {
  ag::set_grad(p, tb::core::from_vector(g, p.sizes()));
}

// ---- scalar trajectories, hand-computed from torch/optim/adam.py and sgd.py --------------------

std::vector<double> run_scalar(optim::Optimizer& opt, const Tensor& p,
                               const std::vector<double>& grads) {
  std::vector<double> out;
  for (double g : grads) {
    set_grad(p, {g});
    opt.step();
    out.push_back(p.item());
  }
  return out;
}

void expect_traj(const std::vector<double>& got, const std::vector<double>& want, double tol,
                 const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (std::size_t i = 0; i < got.size(); ++i)
    EXPECT_NEAR(got[i], want[i], tol) << what << " step " << i + 1;
}

TEST(OptimVectors, AdamFamilyScalar) {
  {
    Tensor p = param({1.0}, {1});
    optim::AdamOptions o;
    o.lr = 0.1;
    o.weight_decay = 0.01;
    optim::AdamW opt({p}, o);
    expect_traj(run_scalar(opt, p, {0.5, 0.5, 0.5}), {0.899000002, 0.798101004, 0.697302905}, 1e-9,
                "11.2.1 AdamW");
    const auto& st = opt.state(p);
    EXPECT_NEAR(st.at("exp_avg").item(), 0.1355, 1e-12);
    EXPECT_NEAR(st.at("exp_avg_sq").item(), 7.4925025e-4, 1e-15);
    EXPECT_EQ(st.at("step").dtype(), ScalarType::Float32);
    EXPECT_EQ(st.at("step").item(), 3.0);
  }
  {
    Tensor p = param({1.0}, {1});
    optim::AdamOptions o;
    o.lr = 0.1;
    o.weight_decay = 0.01;
    optim::Adam opt({p}, o);
    expect_traj(run_scalar(opt, p, {0.5, 0.5, 0.5}), {0.900000002, 0.800005168, 0.700018941}, 1e-9,
                "11.2.2 Adam L2");
  }
  {
    Tensor p = param({1.0}, {1});
    optim::AdamOptions o;
    o.lr = 0.1;
    o.amsgrad = true;
    optim::Adam opt({p}, o);
    expect_traj(run_scalar(opt, p, {1, 0, 0}), {0.900000001, 0.833027688, 0.781283787}, 1e-9,
                "11.2.3 AMSGrad (code, not docstring)");
  }
  for (bool ams : {false, true}) {
    Tensor p = param({1.0}, {1});
    optim::AdamOptions o;
    o.lr = 0.1;
    o.amsgrad = ams;
    optim::Adam opt({p}, o);
    expect_traj(run_scalar(opt, p, {0.5, 0.1, 0.2}), {0.900000002, 0.819695906, 0.738568499}, 1e-9,
                "11.2.4 Adam");
  }
}

TEST(OptimVectors, SgdScalar) {
  auto run = [](optim::SgdOptions o) {
    Tensor p = param({1.0}, {1});
    optim::SGD opt({p}, o);
    auto traj = run_scalar(opt, p, {1, 1, 1});
    traj.push_back(opt.state(p).at("momentum_buffer").item());
    return traj;
  };
  optim::SgdOptions a;
  a.lr = 0.1;
  a.momentum = 0.9;
  a.dampening = 0.1;
  expect_traj(run(a), {0.9, 0.72, 0.468, 2.52}, 1e-12, "momentum+dampening");
  optim::SgdOptions b;
  b.lr = 0.1;
  b.momentum = 0.9;
  b.nesterov = true;
  expect_traj(run(b), {0.81, 0.539, 0.1951, 2.71}, 1e-12, "nesterov");
  optim::SgdOptions c;
  c.lr = 0.1;
  c.momentum = 0.9;
  c.weight_decay = 0.1;
  expect_traj(run(c), {0.89, 0.6821, 0.388169, 2.93931}, 1e-12, "weight decay");
  // momentum 0: no state at all.
  Tensor p = param({1.0}, {1});
  optim::SGD plain({p});
  set_grad(p, {1});
  plain.step();
  EXPECT_FALSE(plain.has_state(p));
}

// ---- PyTorch 1.13 trajectories: 3x4 float64, 5 gradients ---------------------------------------

TEST(OptimVectors, PyTorchTrajectories) {
  std::ifstream f(std::string(TB_TEST_DATA_DIR) + "/optimizers.json");
  ASSERT_TRUE(f.good());
  const auto j = nlohmann::json::parse(f);
  const auto p0 = j["param0"].get<std::vector<double>>();
  const auto grads = j["grads"].get<std::vector<std::vector<double>>>();
  int cases = 0;
  for (const auto& [name, c] : j["cases"].items()) {
    Tensor p = param(p0, {3, 4});
    const auto& kw = c["kwargs"];
    std::unique_ptr<optim::Optimizer> opt;
    const std::string kind = c["optimizer"];
    if (kind == "SGD") {
      optim::SgdOptions o;
      o.lr = kw.value("lr", o.lr);
      o.momentum = kw.value("momentum", 0.0);
      o.dampening = kw.value("dampening", 0.0);
      o.weight_decay = kw.value("weight_decay", 0.0);
      o.nesterov = kw.value("nesterov", false);
      o.maximize = kw.value("maximize", false);
      opt = std::make_unique<optim::SGD>(std::vector<Tensor>{p}, o);
    } else {
      optim::AdamOptions o =
          kind == "AdamW" ? optim::AdamW::default_options() : optim::AdamOptions{};
      o.lr = kw.value("lr", o.lr);
      if (kw.contains("betas")) {
        o.beta1 = kw["betas"][0];
        o.beta2 = kw["betas"][1];
      }
      o.eps = kw.value("eps", o.eps);
      o.weight_decay = kw.value("weight_decay", o.weight_decay);
      o.amsgrad = kw.value("amsgrad", false);
      o.maximize = kw.value("maximize", false);
      opt = kind == "AdamW" ? std::make_unique<optim::AdamW>(std::vector<Tensor>{p}, o)
                            : std::make_unique<optim::Adam>(std::vector<Tensor>{p}, o);
    }
    const auto& want = c["params_after_each_step"];
    ASSERT_EQ(want.size(), grads.size()) << name;
    for (std::size_t s = 0; s < grads.size(); ++s) {
      set_grad(p, grads[s]);
      opt->step();
      const auto got = p.to_vector<double>();
      const auto w = want[s].get<std::vector<double>>();
      for (std::size_t k = 0; k < w.size(); ++k)
        ASSERT_NEAR(got[k], w[k], 1e-12 * std::max(1.0, std::abs(w[k])))
            << name << " step " << s + 1 << " element " << k;
    }
    ++cases;
  }
  EXPECT_EQ(cases, 9);
}

// ---- Newton–Schulz and Muon, hand-computed from torch/optim/_muon.py ---------------------------

optim::NewtonSchulzOptions ns64(int steps = 5, bool symmetric = true) {
  optim::NewtonSchulzOptions o;
  o.dtype = ScalarType::Float64;
  o.steps = steps;
  o.symmetric = symmetric;
  return o;
}

void expect_matrix(const Tensor& got, const std::vector<double>& want, double tol,
                   const std::string& what) {
  const auto g = got.to_vector<double>();
  ASSERT_EQ(g.size(), want.size()) << what;
  for (std::size_t i = 0; i < g.size(); ++i)
    EXPECT_NEAR(g[i], want[i], tol) << what << "[" << i << "]";
}

TEST(NewtonSchulz, SpecVectors) {
  for (bool sym : {true, false}) {
    const std::string form = sym ? " (symmetric)" : " (plain GEMM)";
    expect_matrix(
        optim::newton_schulz(tb::core::from_vector(std::vector<double>{5.0}, {1, 1}), ns64(5, sym)),
        {0.6964364}, 1e-7, "11.1.1" + form);
    const Tensor g = tb::core::from_vector(std::vector<double>{1, 2, 3, 4}, {2, 2});
    expect_matrix(optim::newton_schulz(g, ns64(5, sym)), {-0.680661, 0.825540, 0.741295, 0.259440},
                  1e-6, "11.1.2" + form);
    const Tensor tall = tb::core::from_vector(std::vector<double>{1, 0, 0, 2, 0, 0}, {3, 2});
    expect_matrix(optim::newton_schulz(tall, ns64(5, sym)), {1.114164, 0, 0, 0.688763, 0, 0}, 1e-6,
                  "11.1.3" + form);
    expect_matrix(optim::newton_schulz(g, ns64(0, sym)), {0.182574, 0.365148, 0.547723, 0.730297},
                  1e-6, "11.1.4" + form);
    expect_matrix(optim::newton_schulz(ops::zeros({3, 2}, ScalarType::Float64), ns64(5, sym)),
                  std::vector<double>(6, 0.0), 0.0, "11.1.4 zero" + form);
  }
  // bf16 (the reference's precision): ~1e-2 from the bf16-emulated values.
  optim::NewtonSchulzOptions bf;
  bf.dtype = ScalarType::BFloat16;
  const Tensor g = tb::core::from_vector(std::vector<double>{1, 2, 3, 4}, {2, 2});
  const Tensor o = optim::newton_schulz(g, bf);
  EXPECT_EQ(o.dtype(), ScalarType::BFloat16);
  expect_matrix(o, {-0.683594, 0.816406, 0.734375, 0.247070}, 2e-2, "11.1.2 bf16");
  EXPECT_EQ(error_of([] { optim::newton_schulz(ops::zeros({4})); }),
            "Input tensor gradient must be a 2D matrix");
  EXPECT_EQ(error_of([&] { optim::newton_schulz(g, ns64(100)); }),
            "Number of steps must be less than 100 for computational efficiency");
}

TEST(NewtonSchulz, SymmetricAndPlainFormsAgreeAndPolarExpressConverges) {
  auto gen = tb::rng::make_generator(tb::core::Device());
  gen->manual_seed(4);
  const Tensor g = ops::randn({24, 40}, gen.get(), ScalarType::Float64);
  const auto a = optim::newton_schulz(g, ns64(5, true)).to_vector<double>();
  const auto b = optim::newton_schulz(g, ns64(5, false)).to_vector<double>();
  for (std::size_t i = 0; i < a.size(); ++i)
    ASSERT_NEAR(a[i], b[i], 1e-12);
  auto off_orthogonal = [&](const std::string& schedule) {
    auto o = ns64(5);
    o.schedule = schedule;
    const Tensor x = optim::newton_schulz(g, o);
    const Tensor d = ops::sub(ops::mm(x, x.t()), ops::full({24, 24}, 0.0, ScalarType::Float64));
    double worst = 0;
    const auto v = d.to_vector<double>();
    for (int i = 0; i < 24; ++i)  // singular values² on the diagonal of X·Xᵀ when orthogonal
      worst = std::max(worst, std::abs(v[static_cast<std::size_t>(i * 25)] - 1.0));
    return worst;
  };
  EXPECT_LT(off_orthogonal("polar_express"), off_orthogonal("default"));
  EXPECT_NE(error_of([] {
              optim::ns_coefficients("fastest", 0, {1, 2, 3});
            }).find("unknown Newton-Schulz coefficient schedule 'fastest'"),
            std::string::npos);
  const auto c0 = optim::ns_coefficients("polar_express", 0, {});
  EXPECT_NEAR(c0[0], 8.28721201814563 / 1.01, 1e-15);
  EXPECT_EQ(optim::ns_coefficients("polar_express", 20, {})[0], 1.875);
}

// Gram Newton–Schulz (NewtonSchulzOptions::variant = "gram") is the standard iteration
// reassociated: in float64 the two agree to rounding; in float32, on a Muon-sized update
// (256×784, the MLP's first layer), their distance from orthogonality is the same to 1e-4.
TEST(NewtonSchulz, GramVariantIsTheStandardIterationReassociated) {
  auto gen = tb::rng::make_generator(tb::core::Device());
  gen->manual_seed(11);
  for (const std::vector<std::int64_t>& shape :
       {std::vector<std::int64_t>{24, 40}, std::vector<std::int64_t>{40, 24}}) {
    const Tensor g = ops::randn(shape, gen.get(), ScalarType::Float64);
    const auto want = optim::newton_schulz(g, ns64(5)).to_vector<double>();
    for (const std::vector<int>& restarts :
         {std::vector<int>{2}, std::vector<int>{}, std::vector<int>{1, 3}, std::vector<int>{9}}) {
      for (const char* schedule : {"default", "polar_express"}) {
        auto o = ns64(5);
        o.schedule = schedule;
        auto gram = o;
        gram.variant = "gram";
        gram.gram_restarts = restarts;
        const auto want_s = optim::newton_schulz(g, o).to_vector<double>();
        const auto got = optim::newton_schulz(g, gram).to_vector<double>();
        ASSERT_EQ(got.size(), want_s.size());
        for (std::size_t i = 0; i < got.size(); ++i)
          ASSERT_NEAR(got[i], want_s[i], 1e-10) << schedule << " restarts " << restarts.size();
      }
    }
    (void)want;
  }
  // The spec's tall vector through the Gram form (3×2: iterates on the 2×2 Gram matrix).
  auto gram64 = ns64(5);
  gram64.variant = "gram";
  const Tensor tall = tb::core::from_vector(std::vector<double>{1, 0, 0, 2, 0, 0}, {3, 2});
  expect_matrix(optim::newton_schulz(tall, gram64), {1.114164, 0, 0, 0.688763, 0, 0}, 1e-6,
                "11.1.3 gram");
  // A square matrix runs the standard form: the same bits.
  const Tensor sq = ops::randn({16, 16}, gen.get(), ScalarType::Float64);
  EXPECT_EQ(optim::newton_schulz(sq, gram64).to_vector<double>(),
            optim::newton_schulz(sq, ns64(5)).to_vector<double>());

  // float32 at the MLP's shape: max |σ² − 1| over the rows of X·Xᵀ, standard vs Gram.
  const Tensor u = ops::randn({256, 784}, gen.get(), ScalarType::Float32);
  optim::NewtonSchulzOptions f32;
  f32.dtype = ScalarType::Float32;
  auto f32_gram = f32;
  f32_gram.variant = "gram";
  auto off_orthogonal = [](const Tensor& x) {
    const auto v = ops::mm(x, x.t()).to(ScalarType::Float64).to_vector<double>();
    const std::int64_t n = x.size(0);
    double worst = 0;
    for (std::int64_t i = 0; i < n; ++i)
      worst = std::max(worst, std::abs(v[static_cast<std::size_t>(i * (n + 1))] - 1.0));
    return worst;
  };
  const Tensor xs = optim::newton_schulz(u, f32);
  const Tensor xg = optim::newton_schulz(u, f32_gram);
  EXPECT_NEAR(off_orthogonal(xg), off_orthogonal(xs), 1e-4);
  const auto a = xs.to_vector<float>();
  const auto b = xg.to_vector<float>();
  double diff = 0;
  for (std::size_t i = 0; i < a.size(); ++i)
    diff = std::max(diff, static_cast<double>(std::abs(a[i] - b[i])));
  EXPECT_LT(diff, 1e-4);
  auto bad = f32;
  bad.variant = "fast";
  EXPECT_EQ(error_of([&] { optim::newton_schulz(u, bad); }),
            "[muon] unknown Newton-Schulz variant 'fast' (choose standard or gram)");
}

TEST(MuonVectors, FullStepsAndAdjustedLr) {
  Tensor p = param({1, 2, 3, 4}, {2, 2});
  optim::MuonOptions o;
  o.lr = 0.1;
  o.weight_decay = 0.1;
  o.ns.dtype = ScalarType::Float64;
  optim::Muon opt({p}, o);
  set_grad(p, {0.1, 0.2, 0.3, 0.4});
  opt.step();
  expect_matrix(opt.state(p).at("momentum_buffer"), {0.005, 0.01, 0.015, 0.02}, 1e-15, "buf 1");
  expect_matrix(p, {1.058066, 1.897446, 2.895870, 3.934056}, 1e-6, "11.1.5 step 1");
  set_grad(p, {0.1, 0.2, 0.3, 0.4});
  opt.step();
  expect_matrix(p, {1.115552, 1.795918, 2.792782, 3.868771}, 1e-6, "11.1.5 step 2");
  EXPECT_NEAR(optim::muon_adjusted_lr(0.02, "original", 4, 2), 0.0282843, 1e-7);
  EXPECT_NEAR(optim::muon_adjusted_lr(0.02, "match_rms_adamw", 4, 2), 0.008, 1e-12);
  EXPECT_NEAR(optim::muon_adjusted_lr(0.02, "original", 2, 4), 0.02, 1e-15);
  EXPECT_NEAR(optim::muon_adjusted_lr(0.02, "match_rms_adamw", 2, 4), 0.008, 1e-12);
  EXPECT_NEAR(optim::muon_adjusted_lr(0.02, "match_rms_adamw", 768, 3072), 0.2217025, 1e-7);
  EXPECT_NEAR(optim::muon_adjusted_lr(0.02, "match_rms_adamw", 1024, 1024), 0.128, 1e-12);
}

// ---- validation messages -----------------------------------------------------------------------

TEST(OptimValidation, PyTorchMessages) {
  Tensor p = param({1, 2, 3, 4}, {2, 2});
  auto adam = [&](optim::AdamOptions o) { optim::Adam a({p}, o); };
  optim::AdamOptions o;
  o.lr = -1;
  EXPECT_EQ(error_of([&] { adam(o); }), "Invalid learning rate: -1");
  o = {};
  o.beta1 = 1.0;
  EXPECT_EQ(error_of([&] { adam(o); }), "Invalid beta parameter at index 0: 1");
  o = {};
  o.beta2 = -0.1;
  EXPECT_EQ(error_of([&] { adam(o); }), "Invalid beta parameter at index 1: -0.1");
  o = {};
  o.eps = -1e-8;
  EXPECT_EQ(error_of([&] { adam(o); }), "Invalid epsilon value: -1e-08");
  o = {};
  o.weight_decay = -0.5;
  EXPECT_EQ(error_of([&] { adam(o); }), "Invalid weight_decay value: -0.5");
  optim::SgdOptions s;
  s.nesterov = true;
  EXPECT_EQ(error_of([&] { optim::SGD x({p}, s); }),
            "Nesterov momentum requires a momentum and zero dampening");
  s = {};
  s.momentum = -0.1;
  EXPECT_EQ(error_of([&] { optim::SGD x({p}, s); }), "Invalid momentum value: -0.1");
  optim::MuonOptions m;
  m.lr = -0.5;
  EXPECT_EQ(error_of([&] { optim::Muon x({p}, m); }), "Learning rate should be >= 0 but is: -0.5");
  m = {};
  m.momentum = -1;
  EXPECT_EQ(error_of([&] { optim::Muon x({p}, m); }), "momentum should be >= 0 but is: -1");
  m = {};
  m.weight_decay = -1;
  EXPECT_EQ(error_of([&] { optim::Muon x({p}, m); }), "weight decay should be >= 0 but is: -1");
  m = {};
  m.adjust_lr_fn = "fast";
  EXPECT_EQ(error_of([&] { optim::Muon x({p}, m); }),
            "Adjust learning rate function fast is not supported");
  Tensor v = param({1, 2, 3}, {3});
  EXPECT_EQ(error_of([&] { optim::Muon x({v}); }),
            "Muon only supports 2D parameters whereas we found a parameter with size: [3]");
  EXPECT_EQ(error_of([&] {
              optim::SGD x({p, p});
            }),
            "[SGD] some parameters appear in more than one parameter group");
}

// ---- state_dict ---------------------------------------------------------------------------------

// Runs `steps` steps of an optimizer made by make() on a fresh 3x4 parameter; when split_at >= 0
// the optimizer is rebuilt there from a state_dict (as a resumed run would).
template <typename Make>
std::vector<double> run_with_resume(Make make, int steps, int split_at) {
  auto gen = tb::rng::make_generator(tb::core::Device());
  gen->manual_seed(11);
  Tensor p = ag::requires_grad_(ops::randn({3, 4}, gen.get(), ScalarType::Float64));
  auto opt = make(p);
  for (int s = 0; s < steps; ++s) {
    if (s == split_at) {
      const auto sd = opt->state_dict();
      // Deep copy of the state (a checkpoint would serialise it).
      optim::OptimizerStateDict copy = sd;
      for (auto& [id, st] : copy.state)
        for (auto& [k, t] : st)
          t = t.clone();
      opt = make(p);
      opt->load_state_dict(copy);
    }
    {
      // As backward() would: a gradient without a graph. (Computed with grad mode on, it would
      // hold a node that saves p, and p would hold it: a reference cycle that LeakSanitizer
      // reported — as it would be in PyTorch.)
      ag::NoGradGuard no_grad;
      ag::set_grad(p, ops::sin(ops::mul(p, static_cast<double>(s + 1))));
    }
    opt->step();
  }
  return p.to_vector<double>();
}

TEST(OptimStateDict, ResumeEqualsUninterrupted) {
  auto adamw = [](const Tensor& p) {
    optim::AdamOptions o = optim::AdamW::default_options();
    o.amsgrad = true;
    return std::unique_ptr<optim::Optimizer>(new optim::AdamW({p}, o));
  };
  auto sgd = [](const Tensor& p) {
    optim::SgdOptions o;
    o.lr = 0.1;
    o.momentum = 0.9;
    o.nesterov = true;
    return std::unique_ptr<optim::Optimizer>(new optim::SGD({p}, o));
  };
  auto muon = [](const Tensor& p) {
    optim::MuonOptions o;
    o.lr = 0.05;
    o.ns.dtype = ScalarType::Float64;
    return std::unique_ptr<optim::Optimizer>(new optim::Muon({p}, o));
  };
  EXPECT_EQ(run_with_resume(adamw, 6, 3), run_with_resume(adamw, 6, -1));
  EXPECT_EQ(run_with_resume(sgd, 6, 2), run_with_resume(sgd, 6, -1));
  EXPECT_EQ(run_with_resume(muon, 6, 4), run_with_resume(muon, 6, -1));
}

TEST(OptimStateDict, LayoutAndErrors) {
  Tensor a = param({1, 2}, {2});
  Tensor b = param({3}, {1});
  Tensor c = param({4, 5}, {2});
  optim::ParamGroup g0, g1;
  g0.params = {a, b};
  g1.params = {c};
  g1.options["lr"] = 0.5;
  optim::SGD opt(std::vector<optim::ParamGroup>{g0, g1}, optim::SgdOptions{0.1, 0.9});
  set_grad(a, {1, 1});
  set_grad(c, {1, 1});  // b has no grad: skipped, no state
  opt.step();
  const auto sd = opt.state_dict();
  ASSERT_EQ(sd.param_groups.size(), 2u);
  EXPECT_EQ(sd.param_groups[0].params, (std::vector<std::int64_t>{0, 1}));
  EXPECT_EQ(sd.param_groups[1].params, (std::vector<std::int64_t>{2}));
  EXPECT_EQ(std::get<double>(sd.param_groups[1].options.at("lr")), 0.5);
  EXPECT_EQ(std::get<double>(sd.param_groups[0].options.at("lr")), 0.1);
  EXPECT_EQ(sd.state.size(), 2u);  // ids 0 and 2
  EXPECT_TRUE(sd.state.count(0) && sd.state.count(2));
  EXPECT_TRUE(sd.state.at(0).at("momentum_buffer").is_same(opt.state(a).at("momentum_buffer")));
  optim::SGD one({a});
  EXPECT_EQ(error_of([&] { one.load_state_dict(sd); }),
            "[SGD] loaded state dict has a different number of parameter groups (2 vs 1)");
  optim::ParamGroup h0, h1;
  h0.params = {a};
  h1.params = {c};
  optim::SGD other(std::vector<optim::ParamGroup>{h0, h1});
  EXPECT_EQ(error_of([&] { other.load_state_dict(sd); }),
            "[SGD] loaded state dict contains a parameter group that doesn't match the size of "
            "optimizer's group (group 0: 2 vs 1)");
  EXPECT_FALSE(other.has_state(a));  // nothing changed
}

TEST(OptimTensorLr, FilledInPlaceAndCopiedOnRead) {
  Tensor p = param({1.0}, {1});
  optim::ParamGroup g;
  g.params = {p};
  const Tensor lr = ops::full({}, 0.1, ScalarType::Float64);
  g.options["lr"] = lr;
  optim::SGD opt(std::vector<optim::ParamGroup>{g});
  auto& group = opt.param_groups()[0];
  EXPECT_TRUE(std::get<Tensor>(group.get("lr")).is_same(lr));
  const auto copy = optim::copy_value(group.get("lr"));
  EXPECT_FALSE(std::get<Tensor>(copy).is_same(lr));  // a copy, not an alias
  group.update_value("lr", 0.5);
  EXPECT_TRUE(std::get<Tensor>(group.get("lr")).is_same(lr));  // same cell, new value
  EXPECT_EQ(lr.item(), 0.5);
  EXPECT_EQ(std::get<Tensor>(copy).item(), 0.1);
  set_grad(p, {1.0});
  opt.step();
  EXPECT_DOUBLE_EQ(p.item(), 0.5);
  Tensor q = param({1.0}, {1});
  optim::ParamGroup bad;
  bad.params = {q};
  bad.options["lr"] = ops::zeros({2}, ScalarType::Float64);
  EXPECT_EQ(error_of([&] { optim::SGD x(std::vector<optim::ParamGroup>{bad}); }),
            "Tensor lr must be 1-element");
}

// ---- the parameter split ------------------------------------------------------------------------

TEST(ParamSplit, QwenTinyTableAndOverrides) {
  tb::nn::QwenTinyConfig cfg;
  cfg.n_layers = 1;
  cfg.d_model = 32;
  cfg.n_heads = 2;
  tb::nn::QwenTiny model(cfg);
  const auto split = optim::split_params(model);
  auto row = [&](const std::string& name) {
    for (const auto& r : split.table)
      if (r.name == name) return r;
    ADD_FAILURE() << "no row " << name;
    return optim::SplitRow{};
  };
  EXPECT_EQ(row("embed_tokens.weight").optimizer, "adamw");
  EXPECT_EQ(row("embed_tokens.weight").reason, "embedding");
  EXPECT_EQ(row("layers.0.attn.q_proj.weight").optimizer, "muon");
  EXPECT_EQ(row("layers.0.attn.q_proj.bias").optimizer, "adamw");
  EXPECT_EQ(row("layers.0.mlp.down_proj.weight").optimizer, "muon");
  EXPECT_EQ(row("layers.0.attn_norm.weight").optimizer, "adamw");
  EXPECT_EQ(row("norm.weight").reason, "1-D");
  EXPECT_EQ(split.muon.size(), 7u);  // q, k, v, o, gate, up, down
  EXPECT_EQ(split.muon.size() + split.adamw.size(), model.named_parameters().size());
  EXPECT_NE(split.str().find("muon: 7 tensors"), std::string::npos) << split.str();
  cfg.tie_embeddings = false;
  tb::nn::QwenTiny untied(cfg);
  const auto s2 = optim::split_params(untied, {{"*.mlp.*", "adamw"}});
  for (const auto& r : s2.table) {
    if (r.name == "lm_head.weight") {
      EXPECT_EQ(r.reason, "output head");
    }
    if (r.name.find(".mlp.") != std::string::npos) {
      EXPECT_EQ(r.optimizer, "adamw") << r.name;
    }
  }
  EXPECT_EQ(s2.muon.size(), 4u);
  EXPECT_NE(error_of([&] {
              optim::split_params(model, {{"norm.*", "muon"}});
            }).find("sends 'norm.weight' to muon, but Muon only supports 2-D parameters"),
            std::string::npos);
  EXPECT_TRUE(optim::glob_match("layers.*.attn.?_proj.weight", "layers.12.attn.q_proj.weight"));
  EXPECT_FALSE(optim::glob_match("layers.*.bias", "layers.0.attn.q_proj.weight"));
}

// The MLP's output layer is its last 2-D parameter: AdamW.
TEST(ParamSplit, MlpHeadGoesToAdamW) {
  tb::nn::Mlp mlp(tb::nn::MlpConfig{});
  const auto split = optim::split_params(mlp);
  EXPECT_EQ(split.table.back().name, "layers.4.bias");
  EXPECT_EQ(split.table[4].name, "layers.4.weight");
  EXPECT_EQ(split.table[4].reason, "output head");
  EXPECT_EQ(split.muon.size(), 2u);
}

// A CNN's conv filters are 4-D: AdamW by default (torch.optim.Muon takes 2-D parameters
// only); with flatten_conv they go to Muon, and the table says how they are seen.
TEST(ParamSplit, ConvFiltersGoToMuonOnlyWhenFlattened) {
  tb::nn::CnnConfig cfg;
  cfg.channels = {4, 8};
  cfg.convs_per_block = 1;
  cfg.hidden = {16};
  cfg.head = "flatten";
  tb::nn::Cnn cnn(cfg);
  auto row = [](const optim::ParamSplit& split, const std::string& name) {
    for (const auto& r : split.table)
      if (r.name == name) return r;
    ADD_FAILURE() << "no row " << name;
    return optim::SplitRow{};
  };
  const auto plain = optim::split_params(cnn);
  EXPECT_EQ(row(plain, "blocks.0.convs.0.0.weight").optimizer, "adamw");
  EXPECT_EQ(row(plain, "blocks.0.convs.0.0.weight").reason, "4-D");
  EXPECT_EQ(plain.muon.size(), 1u) << plain.str();  // the hidden Linear only
  EXPECT_NE(error_of([&] {
              optim::split_params(cnn, {{"blocks.*.weight", "muon"}});
            }).find("conv_filters = \"flatten\" orthogonalises filters as [out, in*kh*kw]"),
            std::string::npos);
  const auto flat = optim::split_params(cnn, {}, /*flatten_conv=*/true);
  const auto conv = row(flat, "blocks.1.convs.0.0.weight");
  EXPECT_EQ(conv.optimizer, "muon");
  EXPECT_EQ(conv.reason, "conv filter as [out, in*kh*kw]");
  EXPECT_EQ(conv.shape, (std::vector<std::int64_t>{8, 4, 3, 3}));
  EXPECT_EQ(row(flat, "blocks.1.convs.0.1.weight").optimizer, "adamw");  // batch norm: 1-D
  EXPECT_EQ(row(flat, "blocks.1.convs.0.1.bias").optimizer, "adamw");    // batch norm's shift
  EXPECT_EQ(flat.muon.size(), 3u) << flat.str();  // two filters and the hidden Linear
  EXPECT_EQ(flat.table.size(), plain.table.size());
}

// flatten_conv: a filter [out, in, kh, kw] steps exactly as the matrix [out, in·kh·kw] with the
// same gradients (KellerJordan/Muon's view(len(g), -1)), LR adjustment included; the momentum
// buffer keeps the filter's shape. Without the option a 4-D parameter is refused with a hint.
TEST(Muon, FlattenedConvFiltersStepAsTheirMatrices) {
  for (const std::vector<std::int64_t>& shape :
       {std::vector<std::int64_t>{6, 2, 3, 3}, std::vector<std::int64_t>{24, 1, 3, 3}}) {
    const std::int64_t rows = shape[0], cols = shape[1] * shape[2] * shape[3];
    std::vector<double> init(static_cast<std::size_t>(rows * cols));
    for (std::size_t k = 0; k < init.size(); ++k)
      init[k] = 0.1 * std::sin(0.7 * static_cast<double>(k));
    Tensor filter = ag::requires_grad_(tb::core::from_vector(init, shape).to(ScalarType::Float32));
    Tensor matrix =
        ag::requires_grad_(tb::core::from_vector(init, {rows, cols}).to(ScalarType::Float32));
    optim::MuonOptions o;
    o.lr = 0.02;
    o.flatten_conv = true;
    optim::Muon conv_muon({filter}, o);
    o.flatten_conv = false;
    optim::Muon matrix_muon({matrix}, o);
    for (int step = 0; step < 3; ++step) {
      std::vector<double> g(init.size());
      for (std::size_t k = 0; k < g.size(); ++k)
        g[k] = std::cos(0.13 * static_cast<double>(k) + step);
      set_grad(filter, g);
      set_grad(matrix, g);
      conv_muon.step();
      matrix_muon.step();
    }
    EXPECT_EQ(filter.sizes().vec(), shape);
    EXPECT_EQ(filter.to_vector<double>(), matrix.to_vector<double>());
    EXPECT_EQ(conv_muon.state(filter).at("momentum_buffer").sizes().vec(), shape);
    EXPECT_NE(filter.to_vector<double>(), init);
  }
  Tensor filter = ag::requires_grad_(ops::zeros({4, 2, 3, 3}));
  EXPECT_NE(error_of([&] { optim::Muon refused({filter}, optim::MuonOptions{}); })
                .find("Muon only supports 2D parameters whereas we found a parameter with size: "
                      "[4, 2, 3, 3] (set optimizer.muon.conv_filters = \"flatten\""),
            std::string::npos);
}

// With several threads and many matrices, Muon orthogonalises the matrices side by side (each
// on one thread); the parameters come out bit-identical to the one-thread run.
TEST(Muon, ManyMatricesGiveTheSameStepsAtEveryThreadCount) {
  auto run = [](int threads) {
    const tb::core::ScopedNumThreads scope(threads);
    std::vector<Tensor> params;
    for (int i = 0; i < 9; ++i) {
      const std::int64_t rows = 12 + 4 * (i % 3);
      std::vector<double> init(static_cast<std::size_t>(rows * 20));
      for (std::size_t k = 0; k < init.size(); ++k)
        init[k] = std::sin(0.37 * static_cast<double>(k) + i);
      params.push_back(
          ag::requires_grad_(tb::core::from_vector(init, {rows, 20}).to(ScalarType::Float32)));
    }
    optim::Muon muon(params, optim::MuonOptions{});
    std::vector<double> out;
    for (int step = 0; step < 3; ++step) {
      for (std::size_t i = 0; i < params.size(); ++i) {
        std::vector<double> g(static_cast<std::size_t>(params[i].numel()));
        for (std::size_t k = 0; k < g.size(); ++k)
          g[k] = std::cos(0.11 * static_cast<double>(k * (i + 1)) + step);
        set_grad(params[i], g);
      }
      muon.step();
    }
    for (const Tensor& p : params)
      for (double v : p.to_vector<double>())
        out.push_back(v);
    return out;
  };
  const std::vector<double> one = run(1);
  EXPECT_EQ(run(2), one);
  EXPECT_EQ(run(3), one);
}

}  // namespace

// ---- multi-tensor lerps (EMA/SWA, Muon's momentum) ----------------------------------------------

namespace foreach_test {

// torch.lerp's formula in double, for float64 expectations.
double lerp_ref(double a, double b, double w) {
  return std::abs(w) < 0.5 ? a + w * (b - a) : b - (b - a) * (1.0 - w);
}

TEST(ForeachLerp, TwoSidedFormulaExactAtBothEnds) {
  // w = 1 gives `end` exactly even where start + (end - start) would round (1e8 + 1 - 1e8).
  Tensor s = tb::core::from_vector<float>({1e8f, 3.0f, -2.0f}, {3});
  const Tensor e = tb::core::from_vector<float>({1.0f, 7.0f, 5.0f}, {3});
  ops::foreach_lerp_({s}, {e}, 1.0);
  EXPECT_EQ(s.to_vector<float>(), (std::vector<float>{1.0f, 7.0f, 5.0f}));
  Tensor s0 = tb::core::from_vector<float>({1e8f, 3.0f}, {2});
  ops::foreach_lerp_({s0}, {tb::core::from_vector<float>({1.0f, 7.0f}, {2})}, 0.0);
  EXPECT_EQ(s0.to_vector<float>(), (std::vector<float>{1e8f, 3.0f}));
  // Both sides in float64, against the formula.
  for (const double w : {0.001, 0.25, 0.5, 0.95, -0.3, 1.7}) {
    Tensor a = tb::core::from_vector<double>({0.1, -3.5, 1e10, 2.0}, {2, 2});
    const Tensor b = tb::core::from_vector<double>({0.7, 4.25, -1.0, 2.0}, {2, 2});
    const auto av = a.to_vector<double>();
    const auto bv = b.to_vector<double>();
    ops::foreach_lerp_({a}, {b}, w);
    const auto got = a.to_vector<double>();
    for (std::size_t i = 0; i < got.size(); ++i)
      EXPECT_EQ(got[i], lerp_ref(av[i], bv[i], w)) << "w " << w << " element " << i;
  }
}

TEST(ForeachLerp, SixteenBitComputesInFloat32AndRoundsOnce) {
  // bf16: 1 and its successor 1 + 2^-7 at w = 0.75 (the `end` side of the formula): 1.005859375
  // in float32, rounded once to bf16 (1.0078125).
  Tensor s = tb::core::from_vector<double>({1.0, -4.0}, {2}).to(ScalarType::BFloat16);
  const Tensor e = tb::core::from_vector<double>({1.0078125, 8.0}, {2}).to(ScalarType::BFloat16);
  ops::foreach_lerp_({s}, {e}, 0.75);
  const auto sv = s.to(ScalarType::Float32).to_vector<float>();
  EXPECT_EQ(sv[0], 1.0078125f);
  EXPECT_EQ(sv[1], static_cast<float>(tb::core::BFloat16(8.0f - 12.0f * 0.25f)));
  // EMA-like weights on float16.
  Tensor h = tb::core::from_vector<double>({0.5, -2.0, 100.0}, {3}).to(ScalarType::Float16);
  const Tensor he = tb::core::from_vector<double>({0.75, 2.0, 90.0}, {3}).to(ScalarType::Float16);
  ops::foreach_lerp_({h}, {he}, 0.001);
  const auto hv = h.to(ScalarType::Float32).to_vector<float>();
  const float in[3][2] = {{0.5f, 0.75f}, {-2.0f, 2.0f}, {100.0f, 90.0f}};
  for (int i = 0; i < 3; ++i) {
    const float f = in[i][0] + 0.001f * (in[i][1] - in[i][0]);
    EXPECT_EQ(hv[static_cast<std::size_t>(i)], static_cast<float>(tb::core::Half(f))) << i;
  }
}

TEST(ForeachLerp, MixedListsStridesTensorWeightsAndEmptyTensors) {
  // float32 and float64 pairs in one call (two fused groups), a transposed pair (the elementwise
  // path), an empty pair, and a 0-d tensor weight: all match the float64 formula per element.
  tb::rng::CpuGenerator gen(7);
  std::vector<Tensor> selfs = {ops::randn({4, 3}, &gen), ops::randn({5}, &gen, ScalarType::Float64),
                               ops::randn({3, 4}, &gen).t(), ops::randn({0, 2}, &gen)};
  std::vector<Tensor> ends = {ops::randn({4, 3}, &gen), ops::randn({5}, &gen, ScalarType::Float64),
                              ops::randn({4, 3}, &gen), ops::randn({0, 2}, &gen)};
  for (const Tensor& w : {ops::scalar_tensor(0.25, ScalarType::Float32),
                          ops::scalar_tensor(0.75, ScalarType::Float64)}) {
    std::vector<std::vector<double>> before;
    for (const Tensor& t : selfs)
      before.push_back(t.to(ScalarType::Float64).contiguous().to_vector<double>());
    ops::foreach_lerp_(selfs, ends, w);
    const double wv = w.item();
    for (std::size_t i = 0; i < selfs.size(); ++i) {
      const auto got = selfs[i].to(ScalarType::Float64).contiguous().to_vector<double>();
      const auto ev = ends[i].to(ScalarType::Float64).contiguous().to_vector<double>();
      ASSERT_EQ(got.size(), before[i].size());
      for (std::size_t k = 0; k < got.size(); ++k) {
        const double want = lerp_ref(before[i][k], ev[k], wv);
        if (selfs[i].dtype() == ScalarType::Float64) {
          EXPECT_EQ(got[k], want) << i << "," << k;
        } else {
          EXPECT_NEAR(got[k], want, 1e-6 * (1 + std::abs(want))) << i << "," << k;
        }
      }
    }
  }
  EXPECT_TRUE(selfs[2].is_contiguous() == false);  // updated through the view, in place
}

TEST(ForeachLerp, ErrorsNameTheListIndexAndField) {
  Tensor a = ops::zeros({2, 3});
  Tensor b = ops::zeros({2, 3});
  EXPECT_EQ(error_of([&] {
              ops::foreach_lerp_({a, b}, {a}, 0.5);
            }),
            "[foreach_lerp_] selfs has 2 tensors but ends has 1");
  EXPECT_EQ(error_of([&] {
              ops::foreach_lerp_({a, b}, {a, ops::zeros({3, 2})}, 0.5);
            }),
            "[foreach_lerp_] ends[1] has shape [3, 2] but selfs[1] has shape [2, 3]");
  EXPECT_EQ(error_of([&] {
              ops::foreach_lerp_({a}, {ops::zeros({2, 3}, ScalarType::Float64)}, 0.5);
            }),
            "[foreach_lerp_] ends[0] is float64 but selfs[0] is float32");
  EXPECT_EQ(error_of([&] {
              ops::foreach_lerp_({ops::zeros({2}, ScalarType::Int64)},
                                 {ops::zeros({2}, ScalarType::Int64)}, 0.5);
            }),
            "[foreach_lerp_] selfs[0] must be floating point, got int64");
  EXPECT_EQ(error_of([&] { ops::foreach_lerp_({a}, {b}, ops::zeros({2})); }),
            "[foreach_lerp_] the weight must be a one-element floating tensor, got a float32 "
            "tensor of shape [2]");
  EXPECT_EQ(error_of([&] { ops::foreach_lerp_({a}, {Tensor()}, 0.5); }),
            "[foreach_lerp_] ends[0] is an undefined tensor");
  // Nothing was written by the failed calls.
  EXPECT_EQ(a.to_vector<float>(), std::vector<float>(6, 0.0f));
  EXPECT_EQ(error_of([&] {
              ops::muon_momentum_({a}, {b, b}, 0.9, true);
            }),
            "[muon_momentum_] bufs has 1 tensors but grads has 2");
}

TEST(MuonMomentum, BufferAndNesterovInputFollowSpec3) {
  tb::rng::CpuGenerator gen(11);
  for (const ScalarType dt : {ScalarType::Float64, ScalarType::Float32, ScalarType::BFloat16}) {
    for (const bool nesterov : {false, true}) {
      Tensor buf = ops::randn({6, 4}, &gen).to(dt);
      const Tensor g = ops::randn({6, 4}, &gen).to(dt);
      const auto b0 = buf.to(ScalarType::Float64).to_vector<double>();
      const auto gv = g.to(ScalarType::Float64).to_vector<double>();
      const auto us = ops::muon_momentum_({buf}, {g}, 0.95, nesterov);
      ASSERT_EQ(us.size(), 1u);
      EXPECT_EQ(us[0].is_same(buf), !nesterov);
      const auto b1 = buf.to(ScalarType::Float64).to_vector<double>();
      const auto u = us[0].to(ScalarType::Float64).to_vector<double>();
      const double tol = dt == ScalarType::Float64 ? 0.0 : dt == ScalarType::Float32 ? 1e-6 : 1e-2;
      for (std::size_t k = 0; k < b1.size(); ++k) {
        // buf = 0.95·buf + 0.05·g; u = 0.05·g + 0.95·buf (with the new buffer, as stored).
        EXPECT_NEAR(b1[k], lerp_ref(b0[k], gv[k], 1.0 - 0.95), tol * (1 + std::abs(b1[k])));
        if (nesterov) {
          EXPECT_NEAR(u[k], lerp_ref(gv[k], b1[k], 0.95), tol * (1 + std::abs(u[k])));
        }
      }
    }
  }
}

TEST(MuonMomentum, StridedGradientsTakeTheElementwisePathWithTheSameResult) {
  tb::rng::CpuGenerator gen(12);
  Tensor buf = ops::randn({4, 6}, &gen);
  Tensor buf2 = buf.clone();
  const Tensor g = ops::randn({6, 4}, &gen).t();  // strided
  const auto u = ops::muon_momentum_({buf}, {g}, 0.9, true);
  const auto u2 = ops::muon_momentum_({buf2}, {g.contiguous()}, 0.9, true);
  const auto b1 = buf.to_vector<float>();
  const auto b2 = buf2.to_vector<float>();
  const auto v1 = u[0].contiguous().to_vector<float>();
  const auto v2 = u2[0].to_vector<float>();
  for (std::size_t k = 0; k < b1.size(); ++k) {
    EXPECT_NEAR(b1[k], b2[k], 1e-6) << k;
    EXPECT_NEAR(v1[k], v2[k], 1e-6) << k;
  }
}

}  // namespace foreach_test

// ---- the fused steps as ops: ops::sgd_step_, ops::adam_step_ ----------------------------------

namespace step_ops_test {

// A copy of t with t's values in a transposed (strided) layout: the ops take the elementwise path
// for it.
Tensor strided_copy(const Tensor& t) {
  return t.t().contiguous().t();
}

std::vector<double> values_of(const Tensor& t) {
  return t.to(ScalarType::Float64).contiguous().to_vector<double>();
}

TEST(SgdStep, FusedPassMatchesTheFormulaAndTheElementwiseOpsBitForBit) {
  tb::rng::CpuGenerator gen(21);
  for (const ScalarType dt : {ScalarType::Float64, ScalarType::Float32}) {
    for (int flags = 0; flags < 16; ++flags) {
      const double momentum = (flags & 1) != 0 ? 0.9 : 0.0;
      const bool nesterov = (flags & 2) != 0 && momentum != 0.0;
      const double wd = (flags & 4) != 0 ? 0.1 : 0.0;
      const bool maximize = (flags & 8) != 0;
      const double damp = nesterov ? 0.0 : 0.25;
      const double lr = 0.05;
      // Two parameters: a buffer on its first step and one on a later step.
      std::vector<Tensor> ps, gs, bs, sps, sgs, sbs;
      for (int i = 0; i < 2; ++i) {
        ps.push_back(ops::randn({4, 3}, &gen).to(dt));
        gs.push_back(ops::randn({4, 3}, &gen).to(dt));
        if (momentum != 0.0) bs.push_back(ops::randn({4, 3}, &gen).to(dt));
      }
      for (std::size_t i = 0; i < ps.size(); ++i) {
        sps.push_back(strided_copy(ps[i]));
        sgs.push_back(strided_copy(gs[i]));
        if (momentum != 0.0) sbs.push_back(strided_copy(bs[i]));
      }
      const std::vector<bool> first =
          momentum != 0.0 ? std::vector<bool>{true, false} : std::vector<bool>{};
      std::vector<std::vector<double>> p0, g0, b0;
      for (std::size_t i = 0; i < ps.size(); ++i) {
        p0.push_back(values_of(ps[i]));
        g0.push_back(values_of(gs[i]));
        if (momentum != 0.0) b0.push_back(values_of(bs[i]));
      }
      ops::sgd_step_(ps, gs, bs, first, lr, momentum, damp, wd, nesterov, maximize);
      ops::sgd_step_(sps, sgs, sbs, first, lr, momentum, damp, wd, nesterov, maximize);
      const std::string what =
          std::string(tb::core::scalar_type_name(dt)) + " flags " + std::to_string(flags);
      for (std::size_t i = 0; i < ps.size(); ++i) {
        EXPECT_FALSE(sps[i].is_contiguous()) << what;  // updated in place through the view
        EXPECT_EQ(values_of(sps[i]), values_of(ps[i])) << what << " param " << i;
        if (momentum != 0.0) {
          EXPECT_EQ(values_of(sbs[i]), values_of(bs[i])) << what;
        }
        if (dt != ScalarType::Float64) continue;
        // float64: torch/optim/sgd.py's formula, in its order, exactly.
        const auto got_p = values_of(ps[i]);
        for (std::size_t k = 0; k < got_p.size(); ++k) {
          double d = maximize ? -g0[i][k] : g0[i][k];
          if (wd != 0.0) d = d + wd * p0[i][k];
          if (momentum != 0.0) {
            const double b = first[i] ? d : momentum * b0[i][k] + (1.0 - damp) * d;
            EXPECT_EQ(values_of(bs[i])[k], b) << what;
            d = nesterov ? d + momentum * b : b;
          }
          EXPECT_EQ(got_p[k], p0[i][k] + -lr * d) << what << " element " << k;
        }
      }
    }
  }
}

TEST(SgdStep, MixedDtypesAndEmptyListsAndNoMomentumState) {
  // A float32 and a float64 parameter in one call take the elementwise path, with the values of
  // one fused call per dtype.
  tb::rng::CpuGenerator gen(22);
  const Tensor a = ops::randn({5}, &gen);
  const Tensor b = ops::randn({2, 2}, &gen, ScalarType::Float64);
  const Tensor ga = ops::randn({5}, &gen);
  const Tensor gb = ops::randn({2, 2}, &gen, ScalarType::Float64);
  Tensor a1 = a.clone(), b1 = b.clone(), a2 = a.clone(), b2 = b.clone();
  Tensor ma1 = ops::zeros({5}), mb1 = ops::zeros({2, 2}, ScalarType::Float64);
  Tensor ma2 = ops::zeros({5}), mb2 = ops::zeros({2, 2}, ScalarType::Float64);
  ops::sgd_step_({a1, b1}, {ga, gb}, {ma1, mb1}, {false, false}, 0.1, 0.9, 0.0, 0.01, true, false);
  ops::sgd_step_({a2}, {ga}, {ma2}, {false}, 0.1, 0.9, 0.0, 0.01, true, false);
  ops::sgd_step_({b2}, {gb}, {mb2}, {false}, 0.1, 0.9, 0.0, 0.01, true, false);
  EXPECT_EQ(a1.to_vector<float>(), a2.to_vector<float>());
  EXPECT_EQ(b1.to_vector<double>(), b2.to_vector<double>());
  EXPECT_EQ(ma1.to_vector<float>(), ma2.to_vector<float>());
  EXPECT_EQ(mb1.to_vector<double>(), mb2.to_vector<double>());
  ops::sgd_step_({}, {}, {}, {}, 0.1, 0.9, 0.0, 0.0, false, false);  // nothing to do
}

TEST(SgdStep, ErrorsNameTheOpTheListAndTheIndex) {
  Tensor p = ops::zeros({2});
  const Tensor g = ops::ones({2});
  EXPECT_EQ(error_of([&] {
              ops::sgd_step_({p, p}, {g}, {}, {}, 0.1, 0.0, 0.0, 0.0, false, false);
            }),
            "[sgd_step_] params has 2 tensors but grads has 1");
  EXPECT_EQ(error_of([&] { ops::sgd_step_({p}, {g}, {}, {}, 0.1, 0.9, 0.0, 0.0, false, false); }),
            "[sgd_step_] params has 1 tensors but momentum_buffers has 0");
  EXPECT_EQ(error_of([&] {
              ops::sgd_step_({p}, {g}, {ops::zeros({2})}, {true}, 0.1, 0.0, 0.0, 0.0, false, false);
            }),
            "[sgd_step_] momentum 0 takes no momentum buffers, got 1");
  EXPECT_EQ(error_of([&] {
              ops::sgd_step_({p}, {g}, {ops::zeros({2})}, {}, 0.1, 0.9, 0.0, 0.0, false, false);
            }),
            "[sgd_step_] momentum_buffers has 1 tensors but first_steps has 0");
  EXPECT_EQ(error_of([&] {
              ops::sgd_step_({p}, {ops::ones({2}, ScalarType::Float64)}, {}, {}, 0.1, 0.0, 0.0, 0.0,
                             false, false);
            }),
            "[sgd_step_] grads[0] is float64 but params[0] is float32");
  EXPECT_EQ(error_of([&] {
              ops::sgd_step_({p}, {g}, {ops::zeros({3})}, {false}, 0.1, 0.9, 0.0, 0.0, false,
                             false);
            }),
            "[sgd_step_] momentum_buffers[0] has shape [3] but params[0] has shape [2]");
  EXPECT_EQ(error_of([&] {
              ops::sgd_step_({ops::zeros({2}, ScalarType::Int64)},
                             {ops::ones({2}, ScalarType::Int64)}, {}, {}, 0.1, 0.0, 0.0, 0.0, false,
                             false);
            }),
            "[sgd_step_] params[0] must be floating point, got int64");
  EXPECT_EQ(
      error_of([&] { ops::sgd_step_({p}, {Tensor()}, {}, {}, 0.1, 0.0, 0.0, 0.0, false, false); }),
      "[sgd_step_] grads[0] is an undefined tensor");
  EXPECT_EQ(p.to_vector<float>(), std::vector<float>(2, 0.0f));  // nothing written
  // The kernel's own checks (what a direct dispatcher call gets).
  static const auto kernel =
      tb::dispatch::Dispatcher::singleton().typed<tb::ops::sig::SgdStep>("sgd_step_");
  const std::vector<Tensor> ps = {p};
  const std::vector<Tensor> gs = {g};
  const std::vector<Tensor> bufs = {ops::zeros({2})};
  const std::vector<Tensor> none;
  const std::vector<std::int64_t> one = {1};
  const std::vector<std::int64_t> zero_entries;
  EXPECT_EQ(
      error_of([&] { kernel.call(ps, gs, bufs, zero_entries, 0.1, 0.9, 0.0, 0.0, false, false); }),
      "[sgd_step_] first_steps has 0 entries but momentum_buffers has 1");
  EXPECT_EQ(
      error_of([&] { kernel.call(ps, gs, none, zero_entries, 0.1, 0.9, 0.0, 0.0, false, false); }),
      "[sgd_step_] momentum 0.9 needs one momentum buffer per parameter (1), got 0");
  EXPECT_EQ(error_of([&] { kernel.call(ps, gs, bufs, one, 0.1, 0.0, 0.0, 0.0, false, false); }),
            "[sgd_step_] momentum 0 takes no momentum buffers, got 1");
  const std::vector<Tensor> strided = {ops::zeros({2, 2}).t()};
  EXPECT_EQ(error_of([&] {
              kernel.call(strided, strided, none, zero_entries, 0.1, 0.0, 0.0, 0.0, false, false);
            }),
            "[sgd_step_] every tensor must be a contiguous float32 tensor on cpu; params[0] is a "
            "strided float32 tensor on cpu");
}

TEST(AdamStep, FusedPassMatchesTheElementwiseOpsBitForBit) {
  tb::rng::CpuGenerator gen(23);
  for (const ScalarType dt : {ScalarType::Float64, ScalarType::Float32}) {
    for (int flags = 0; flags < 16; ++flags) {
      const bool ams = (flags & 1) != 0;
      const bool decoupled = (flags & 2) != 0;
      const bool maximize = (flags & 4) != 0;
      const double wd = (flags & 8) != 0 ? 0.01 : 0.0;
      std::vector<std::vector<Tensor>> fused(5), composed(5);
      for (int i = 0; i < 2; ++i) {
        for (std::size_t l = 0; l < 5; ++l) {
          Tensor x = ops::randn({3, 4}, &gen).to(dt);
          if (l >= 3) x = ops::abs(x).to(dt);  // second moments are >= 0
          fused[l].push_back(x);
          composed[l].push_back(strided_copy(x));
        }
      }
      const std::vector<double> steps = {0.1, 0.2};
      const std::vector<double> bc2 = {0.9, 0.7};
      const std::vector<Tensor> none;
      for (auto* ls : {&fused, &composed}) {
        auto& l = *ls;
        ops::adam_step_(l[0], l[1], l[2], l[3], ams ? l[4] : none, steps, bc2, 1e-3, 0.9, 0.999,
                        1e-8, wd, maximize, decoupled);
      }
      for (std::size_t l : {0, 2, 3, 4}) {
        for (std::size_t i = 0; i < 2; ++i) {
          EXPECT_EQ(values_of(composed[l][i]), values_of(fused[l][i]))
              << tb::core::scalar_type_name(dt) << " flags " << flags << " list " << l;
        }
      }
    }
  }
}

TEST(AdamStep, ErrorsNameTheOpTheListAndTheIndex) {
  Tensor p = ops::zeros({2});
  const Tensor g = ops::ones({2});
  const Tensor m = ops::zeros({2});
  const Tensor v = ops::zeros({2});
  const std::vector<Tensor> none;
  auto step = [&](const std::vector<Tensor>& ps, const std::vector<Tensor>& gs,
                  const std::vector<Tensor>& ms, const std::vector<Tensor>& vs,
                  const std::vector<Tensor>& vmaxs, const std::vector<double>& ss) {
    ops::adam_step_(ps, gs, ms, vs, vmaxs, ss, ss, 1e-3, 0.9, 0.999, 1e-8, 0.0, false, true);
  };
  EXPECT_EQ(error_of([&] {
              step({p}, {g}, {m, m}, {v}, none, {0.1});
            }),
            "[adam_step_] params has 1 tensors but exp_avgs has 2");
  EXPECT_EQ(error_of([&] {
              step({p}, {g}, {m}, {v}, {v, v}, {0.1});
            }),
            "[adam_step_] params has 1 tensors but max_exp_avg_sqs has 2");
  EXPECT_EQ(error_of([&] {
              step({p}, {g}, {m}, {v}, none, {0.1, 0.2});
            }),
            "[adam_step_] the step scalars must have one entry per parameter (1), got step_sizes "
            "2 and bc2_sqrts 2");
  EXPECT_EQ(
      error_of([&] { step({p}, {g}, {m}, {ops::zeros({2}, ScalarType::Float64)}, none, {0.1}); }),
      "[adam_step_] exp_avg_sqs[0] is float64 but params[0] is float32");
  EXPECT_EQ(error_of([&] {
              step({p}, {g}, {m}, {v}, {ops::zeros({1, 2})}, {0.1});
            }),
            "[adam_step_] max_exp_avg_sqs[0] has shape [1, 2] but params[0] has shape [2]");
  EXPECT_EQ(error_of([&] { step({p}, {g}, {Tensor()}, {v}, none, {0.1}); }),
            "[adam_step_] exp_avgs[0] is an undefined tensor");
  EXPECT_EQ(p.to_vector<float>(), std::vector<float>(2, 0.0f));  // nothing written
}

}  // namespace step_ops_test
