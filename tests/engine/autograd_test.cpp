// Autograd: gradcheck (float64 finite differences) for every differentiable op and every view,
// derivative-rule coverage, and the semantics of backward (accumulation, retain_graph, no-grad,
// detach, errors).
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "engine/autograd/autograd.h"
#include "engine/autograd/derivatives.h"
#include "engine/autograd/gradcheck.h"
#include "engine/core/error.h"
#include "engine/dispatch/dispatcher.h"
#include "engine/ops/ops.h"
#include "engine/rng/generator.h"

namespace {

using tb::core::Device;
using tb::core::ScalarType;
using tb::core::Tensor;
namespace ag = tb::autograd;
namespace ops = tb::ops;
using Fn = std::function<Tensor(const std::vector<Tensor>&)>;

// A float64 leaf requiring grad with values in [lo, hi), from a fixed seed.
Tensor leaf(std::vector<std::int64_t> shape, double lo = -1.0, double hi = 1.0,
            std::uint64_t seed = 1) {
  auto g = tb::rng::make_generator(Device());
  g->manual_seed(seed);
  Tensor t = ops::rand(shape, g.get(), ScalarType::Float64);
  t = ops::add(ops::mul(t, hi - lo), lo);
  return ag::requires_grad_(t);
}

void expect_gradcheck(const std::string& what, const Fn& f, const std::vector<Tensor>& inputs,
                      double eps = 1e-6, double atol = 1e-5, double rtol = 1e-3) {
  const auto r = ag::gradcheck(f, inputs, eps, atol, rtol);
  EXPECT_TRUE(r.ok) << what << ": " << r.message << " (max error " << r.max_abs_error << ")";
}

TEST(Autograd, EveryDifferentiableOpHasARule) {
  auto& d = tb::dispatch::Dispatcher::singleton();
  for (const auto& name : d.op_names()) {
    // Ops other suites define for their own tests ("test.*") are not the engine's.
    if (name.rfind("test.", 0) == 0 || !d.find(name).schema().differentiable) continue;
    EXPECT_NE(ag::find_derivative(name), nullptr)
        << "differentiable op '" << name << "' has no derivative rule";
  }
  // And no rule names an op that does not exist.
  for (const auto& name : ag::ops_with_derivatives())
    EXPECT_TRUE(d.exists(name)) << name;
}

TEST(Gradcheck, UnaryOps) {
  const std::vector<std::pair<std::string, Tensor (*)(const Tensor&)>> fns = {
      {"neg", ops::neg},     {"abs", ops::abs},   {"square", ops::square},
      {"relu", ops::relu},   {"exp", ops::exp},   {"sin", ops::sin},
      {"cos", ops::cos},     {"tanh", ops::tanh}, {"sigmoid", ops::sigmoid},
      {"erf", ops::erf},     {"silu", ops::silu}, {"gelu", ops::gelu},
      {"expm1", ops::expm1}, {"sign", ops::sign}, {"gelu_tanh", ops::gelu_tanh}};
  for (const auto& [name, fn] : fns) {
    // Keep away from the kinks of abs/relu at 0.
    Tensor x = leaf({3, 4}, 0.1, 1.0);
    Tensor xs = ag::requires_grad_(ops::sub(ag::detach(x), 0.55));
    expect_gradcheck(name, [fn = fn](const std::vector<Tensor>& in) { return fn(in[0]); }, {xs});
  }
  // Positive-domain functions.
  const std::vector<std::pair<std::string, Tensor (*)(const Tensor&)>> pos = {
      {"log", ops::log},
      {"log1p", ops::log1p},
      {"sqrt", ops::sqrt},
      {"rsqrt", ops::rsqrt},
      {"reciprocal", ops::reciprocal}};
  for (const auto& [name, fn] : pos) {
    expect_gradcheck(name, [fn = fn](const std::vector<Tensor>& in) { return fn(in[0]); },
                     {leaf({2, 5}, 0.5, 2.0)});
  }
}

TEST(Gradcheck, BinaryOpsWithBroadcasting) {
  const Tensor a = leaf({3, 1}, 0.5, 1.5, 1);
  const Tensor b = leaf({1, 4}, 0.5, 1.5, 2);
  expect_gradcheck("add", [](const auto& in) { return ops::add(in[0], in[1], 2.5); }, {a, b});
  expect_gradcheck("sub", [](const auto& in) { return ops::sub(in[0], in[1], 0.5); }, {a, b});
  expect_gradcheck("mul", [](const auto& in) { return ops::mul(in[0], in[1]); }, {a, b});
  expect_gradcheck("div", [](const auto& in) { return ops::div(in[0], in[1]); }, {a, b});
  expect_gradcheck("pow", [](const auto& in) { return ops::pow(in[0], in[1]); }, {a, b});
  const Tensor c = leaf({3, 4}, -1, 1, 3);
  const Tensor e = leaf({3, 4}, -1, 1, 4);
  expect_gradcheck("maximum", [](const auto& in) { return ops::maximum(in[0], in[1]); }, {c, e});
  const Tensor gate = leaf({3, 4}, -3, 3, 5);
  const Tensor up = leaf({3, 4}, -2, 2, 6);
  expect_gradcheck("swiglu", [](const auto& in) { return ops::swiglu(in[0], in[1]); }, {gate, up});
  expect_gradcheck("minimum", [](const auto& in) { return ops::minimum(in[0], in[1]); }, {c, e});
  expect_gradcheck("scalar mul", [](const auto& in) { return ops::mul(in[0], 3.0); }, {c});
  const Tensor cond = ops::gt(ag::detach(c), ag::detach(e));
  expect_gradcheck("where", [cond](const auto& in) { return ops::where(cond, in[0], in[1]); },
                   {c, e});
  expect_gradcheck("masked_fill",
                   [cond](const auto& in) { return ops::masked_fill(in[0], cond, 2.0); }, {c});
}

TEST(Gradcheck, Reductions) {
  const Tensor x = leaf({2, 3, 4}, -1, 1, 5);
  expect_gradcheck("sum all", [](const auto& in) { return ops::sum(in[0]); }, {x});
  expect_gradcheck("sum dims", [](const auto& in) { return ops::sum(in[0], {0, 2}); }, {x});
  expect_gradcheck("sum keepdim", [](const auto& in) { return ops::sum(in[0], {1}, true); }, {x});
  expect_gradcheck("mean", [](const auto& in) { return ops::mean(in[0], {-1}); }, {x});
  expect_gradcheck("max all", [](const auto& in) { return ops::max(in[0]); }, {x});
  expect_gradcheck("min all", [](const auto& in) { return ops::min(in[0]); }, {x});
  expect_gradcheck("max dim", [](const auto& in) { return std::get<0>(ops::max(in[0], 1)); }, {x});
  expect_gradcheck("min dim keep",
                   [](const auto& in) { return std::get<0>(ops::min(in[0], 2, true)); }, {x});
  for (double p : {1.0, 2.0, 3.0, std::numeric_limits<double>::infinity()}) {
    expect_gradcheck("norm p=" + std::to_string(p),
                     [p](const auto& in) { return ops::norm(in[0], p, {2}); }, {x});
  }
}

TEST(Gradcheck, LinearAlgebra) {
  const Tensor a = leaf({3, 4}, -1, 1, 6);
  const Tensor b = leaf({4, 2}, -1, 1, 7);
  const Tensor bias = leaf({2}, -1, 1, 8);
  expect_gradcheck("mm", [](const auto& in) { return ops::mm(in[0], in[1]); }, {a, b});
  expect_gradcheck("addmm",
                   [](const auto& in) { return ops::addmm(in[2], in[0], in[1], 0.5, 2.0); },
                   {a, b, bias});
  const Tensor p = leaf({2, 3, 4}, -1, 1, 9);
  const Tensor q = leaf({2, 4, 5}, -1, 1, 10);
  const Tensor r = leaf({2, 3, 5}, -1, 1, 11);
  expect_gradcheck("bmm", [](const auto& in) { return ops::bmm(in[0], in[1]); }, {p, q});
  expect_gradcheck("baddbmm",
                   [](const auto& in) { return ops::baddbmm(in[2], in[0], in[1], 0.3, 1.5); },
                   {p, q, r});
  expect_gradcheck("syrk", [](const auto& in) { return ops::syrk(in[0], 0.7); }, {a});
  expect_gradcheck("matmul batched", [](const auto& in) { return ops::matmul(in[0], in[1]); },
                   {leaf({2, 1, 3, 4}, -1, 1, 12), leaf({5, 4, 2}, -1, 1, 13)});
  expect_gradcheck("matmul vec", [](const auto& in) { return ops::matmul(in[0], in[1]); },
                   {leaf({4}, -1, 1, 14), leaf({4, 3}, -1, 1, 15)});
}

TEST(Gradcheck, SoftmaxAndIndexing) {
  const Tensor x = leaf({3, 5}, -2, 2, 16);
  expect_gradcheck("softmax", [](const auto& in) { return ops::softmax(in[0], 1); }, {x});
  expect_gradcheck("softmax dim0", [](const auto& in) { return ops::softmax(in[0], 0); }, {x});
  expect_gradcheck("log_softmax", [](const auto& in) { return ops::log_softmax(in[0], -1); }, {x});
  const Tensor idx = tb::core::from_vector(std::vector<std::int64_t>{4, 0, 4, 2});
  expect_gradcheck("index_select",
                   [idx](const auto& in) { return ops::index_select(in[0], 1, idx); }, {x});
  expect_gradcheck("index_select dim0",
                   [idx](const auto& in) {
                     return ops::index_select(
                         in[0], 0, tb::core::from_vector(std::vector<std::int64_t>{2, 2, 0}));
                   },
                   {x});
  const Tensor gi = tb::core::from_vector(std::vector<std::int64_t>{0, 2, 1, 1, 4, 4}, {3, 2});
  expect_gradcheck("gather", [gi](const auto& in) { return ops::gather(in[0], 1, gi); }, {x});
  const Tensor src = leaf({3, 2}, -1, 1, 17);
  expect_gradcheck("scatter_add",
                   [gi](const auto& in) { return ops::scatter_add(in[0], 1, gi, in[1]); },
                   {x, src});
}

TEST(Gradcheck, ViewsAndCopies) {
  const Tensor x = leaf({2, 3, 4}, -1, 1, 18);
  expect_gradcheck("view", [](const auto& in) { return ops::mul(in[0].view({6, 4}), 2.0); }, {x});
  expect_gradcheck("transpose",
                   [](const auto& in) { return ops::mul(in[0].transpose(0, 2), 1.0).contiguous(); },
                   {x});
  expect_gradcheck("permute",
                   [](const auto& in) {
                     return in[0].permute({2, 0, 1}).contiguous();
                   },
                   {x});
  expect_gradcheck("slice", [](const auto& in) { return ops::square(in[0].slice(2, 1, 4, 2)); },
                   {x});
  expect_gradcheck("select", [](const auto& in) { return ops::square(in[0].select(1, -1)); }, {x});
  expect_gradcheck("narrow+unsqueeze",
                   [](const auto& in) { return in[0].narrow(0, 1, 1).unsqueeze(0).contiguous(); },
                   {x});
  expect_gradcheck("expand",
                   [](const auto& in) {
                     return ops::mul(in[0].select(2, 0).unsqueeze(0).expand({3, 2, 3}), 1.0);
                   },
                   {x});
  expect_gradcheck("reshape copy",
                   [](const auto& in) { return in[0].transpose(1, 2).reshape({-1}); }, {x});
  expect_gradcheck("as_strided windows",
                   [](const auto& in) {
                     return ops::square(in[0].reshape({-1}).as_strided({5, 4}, {4, 1}, 2));
                   },
                   {x});
  // Through float32 the finite differences themselves are only float32-accurate.
  expect_gradcheck(
      "to float32 and back",
      [](const auto& in) { return in[0].to(ScalarType::Float32).to(ScalarType::Float64); }, {x},
      1e-2, 1e-3, 1e-3);
}

TEST(Gradcheck, DetectsAWrongGradient) {
  // x * detach(x) has derivative 2x, but autograd only sees the first factor: gradcheck must fail.
  const auto r = ag::gradcheck([](const auto& in) { return ops::mul(in[0], ag::detach(in[0])); },
                               {leaf({3}, 0.5, 1.0, 21)});
  EXPECT_FALSE(r.ok);
  EXPECT_NE(r.message.find("analytic"), std::string::npos);
  EXPECT_GT(r.max_abs_error, 0.4);
}

TEST(Backward, AccumulatesIntoLeavesAcrossCalls) {
  Tensor x = ag::requires_grad_(tb::core::from_vector(std::vector<double>{1, 2, 3}));
  Tensor y = ops::sum(ops::mul(x, x));  // d/dx = 2x
  ag::backward(y);
  EXPECT_EQ(ag::grad(x).to_vector<double>(), (std::vector<double>{2, 4, 6}));
  ag::backward(ops::sum(x));
  EXPECT_EQ(ag::grad(x).to_vector<double>(), (std::vector<double>{3, 5, 7}));
  ag::zero_grad(x);
  EXPECT_FALSE(ag::grad(x).defined());
  // A tensor used twice gets both contributions.
  ag::backward(ops::sum(ops::add(x, x)));
  EXPECT_EQ(ag::grad(x).to_vector<double>(), (std::vector<double>{2, 2, 2}));
  EXPECT_TRUE(ag::is_leaf(x));
  EXPECT_FALSE(ag::is_leaf(y));
  EXPECT_EQ(ag::grad_fn_name(y), "SumBackward");
}

TEST(Backward, GraphIsFreedUnlessRetained) {
  Tensor x = ag::requires_grad_(ops::ones({2}, ScalarType::Float64));
  Tensor y = ops::sum(ops::exp(x));
  ag::backward(y, Tensor(), /*retain_graph=*/true);
  ag::backward(y);  // allowed: the first one retained the graph
  try {
    ag::backward(y);
    FAIL() << "third backward through a freed graph succeeded";
  } catch (const tb::Error& e) {
    EXPECT_NE(std::string(e.what()).find("a second time"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("retain_graph=true"), std::string::npos);
  }
}

TEST(Backward, NoGradDetachAndErrors) {
  Tensor x = ag::requires_grad_(ops::ones({3}, ScalarType::Float32));
  {
    ag::NoGradGuard no_grad;
    EXPECT_FALSE(ag::is_grad_enabled());
    Tensor y = ops::mul(x, 2.0);
    EXPECT_FALSE(y.requires_grad());
    EXPECT_FALSE(x.transpose(0, 0).requires_grad());
  }
  EXPECT_TRUE(ag::is_grad_enabled());
  Tensor d = ag::detach(ops::mul(x, 2.0));
  EXPECT_FALSE(d.requires_grad());
  EXPECT_TRUE(ag::is_leaf(d));
  // Non-scalar outputs need an explicit gradient.
  Tensor v = ops::mul(x, 2.0);
  EXPECT_THROW(ag::backward(v), tb::ValueError);
  ag::backward(v, ops::full({3}, 0.5));
  EXPECT_EQ(ag::grad(x).to_vector<float>(), (std::vector<float>{1, 1, 1}));
  // Integer tensors cannot require grad; non-leaves cannot be changed.
  Tensor i = ops::ones({2}, ScalarType::Int64);
  EXPECT_THROW(ag::requires_grad_(i), tb::TypeError);
  EXPECT_THROW(ag::requires_grad_(v, false), tb::ValueError);
  // In-place ops on tensors that require grad are refused with a clear message.
  try {
    ops::add_(x, ops::ones({3}));
    FAIL();
  } catch (const tb::NotImplementedError& e) {
    EXPECT_NE(std::string(e.what()).find("in-place op 'add_' on a tensor that requires grad"),
              std::string::npos);
  }
  // ...and allowed under no-grad (how optimizers update parameters).
  {
    ag::NoGradGuard no_grad;
    ops::add_(x, ops::ones({3}));
  }
  EXPECT_EQ(x.to_vector<float>(), (std::vector<float>{2, 2, 2}));
  // Nothing to differentiate.
  EXPECT_THROW(ag::backward(ops::ones({})), tb::ValueError);
}

TEST(Backward, IntegerOutputsCarryNoGradient) {
  Tensor x = leaf({4, 3}, -1, 1, 20);
  auto [values, indices] = ops::max(x, 1);
  EXPECT_TRUE(values.requires_grad());
  EXPECT_FALSE(indices.requires_grad());
  EXPECT_FALSE(ops::argmax(x).requires_grad());
  EXPECT_FALSE(ops::gt(x, x).requires_grad());
}

TEST(Backward, LeastSquaresStepsReduceTheLoss) {
  // A small end-to-end use: fit w in y = X w with the plain update w -= lr * grad.
  auto g = tb::rng::make_generator(Device());
  g->manual_seed(3);
  const Tensor xm = ops::randn({64, 4}, g.get());
  const Tensor w_true = ops::randn({4, 1}, g.get());
  const Tensor y = ops::mm(xm, w_true);
  Tensor w = ag::requires_grad_(ops::zeros({4, 1}));
  double first = 0;
  double last = 0;
  for (int step = 0; step < 50; ++step) {
    const Tensor loss = ops::mean(ops::square(ops::sub(ops::mm(xm, w), y)));
    if (step == 0) first = loss.item();
    last = loss.item();
    ag::zero_grad(w);
    ag::backward(loss);
    ag::NoGradGuard no_grad;
    ops::add_(w, ag::grad(w), -0.1);
  }
  EXPECT_LT(last, first * 1e-2);
}

}  // namespace
