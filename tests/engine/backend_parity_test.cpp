// Backend parity: every op with a kernel of its own on a non-CPU device (openreg always; CUDA
// when a GPU is present) runs against the CPU kernel on random inputs — several shapes, layouts
// and dtypes — with per-dtype tolerances. A kernel registered without a case here fails the test,
// so a new kernel cannot land untested.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "engine/amp/grad_scaler.h"
#include "engine/backends/cuda/cuda_status.h"
#include "engine/backends/openreg/backend.h"
#include "engine/core/allocator.h"
#include "engine/dispatch/dispatcher.h"
#include "engine/dispatch/op_signatures.h"
#include "engine/ops/ops.h"
#include "engine/rng/cpu_generator.h"
#include "engine/rng/generator.h"

namespace {

using tb::core::Device;
using tb::core::DeviceType;
using tb::core::ScalarType;
using tb::core::Tensor;
namespace ops = tb::ops;
using Shape = std::vector<std::int64_t>;

// Absolute + relative tolerance of one dtype (scaled by the reduction length for products).
struct Tol {
  double atol;
  double rtol;
};
Tol tol_of(ScalarType t) {
  switch (t) {
    case ScalarType::Float64:
      return {1e-12, 1e-12};
    case ScalarType::Float32:
      return {1e-5, 1e-5};
    case ScalarType::Float16:
      return {1e-3, 1e-3};
    case ScalarType::BFloat16:
      return {1e-2, 1e-2};
    default:
      return {0.0, 0.0};  // integers and bool: exact
  }
}

Tensor rand_input(const Shape& shape, ScalarType dtype, std::uint64_t seed) {
  tb::rng::CpuGenerator g(seed);
  const Tensor x = ops::randn(tb::core::IntList(shape), &g);
  if (tb::core::is_floating_point(dtype)) return x.to(dtype);
  return ops::mul(x, 5.0).to(dtype);  // small integers
}

void expect_close(const Tensor& got, const Tensor& want, Tol tol, const std::string& what) {
  ASSERT_EQ(got.dtype(), want.dtype()) << what;
  ASSERT_EQ(tb::core::DimVector(got.sizes()), tb::core::DimVector(want.sizes())) << what;
  const auto g = got.to(Device()).to_vector<double>();
  const auto w = want.to_vector<double>();
  for (std::size_t i = 0; i < w.size(); ++i) {
    if (std::isnan(w[i]) || std::isinf(w[i])) {
      EXPECT_TRUE(std::isnan(w[i]) ? std::isnan(g[i]) : g[i] == w[i])
          << what << " element " << i << ": device " << g[i] << ", cpu " << w[i];
      continue;
    }
    ASSERT_LE(std::abs(g[i] - w[i]), tol.atol + tol.rtol * std::abs(w[i]))
        << what << " element " << i << ": device " << g[i] << ", cpu " << w[i];
  }
}

std::string label(const std::string& op, ScalarType dt, const Shape& a, const Shape& b = {}) {
  std::string s = op + " " + std::string(tb::core::scalar_type_name(dt)) + " [";
  for (auto v : a)
    s += std::to_string(v) + ",";
  s += "] [";
  for (auto v : b)
    s += std::to_string(v) + ",";
  return s + "]";
}

const std::vector<ScalarType> kFloats = {ScalarType::Float32, ScalarType::Float64,
                                         ScalarType::Float16, ScalarType::BFloat16};
const std::vector<std::pair<Shape, Shape>> kBinaryShapes = {
    {{}, {}}, {{7}, {7}}, {{3, 5}, {3, 5}}, {{3, 1}, {1, 4}}, {{2, 3, 4}, {4}}, {{4, 3}, {}}};

using Case = std::function<void(const Device&)>;

void binary_case(const std::string& op, const Device& d,
                 const std::function<Tensor(const Tensor&, const Tensor&)>& f) {
  std::uint64_t seed = 1;
  for (ScalarType dt : {ScalarType::Float32, ScalarType::Float64, ScalarType::Float16,
                        ScalarType::BFloat16, ScalarType::Int64}) {
    for (const auto& [sa, sb] : kBinaryShapes) {
      const Tensor a = rand_input(sa, dt, seed++);
      const Tensor b = rand_input(sb, dt, seed++);
      expect_close(f(a.to(d), b.to(d)), f(a, b), tol_of(dt), label(op, dt, sa, sb));
    }
    // Non-contiguous operands.
    const Tensor a = rand_input({5, 3}, dt, seed++).t();
    const Tensor b = rand_input({3, 5}, dt, seed++);
    expect_close(f(a.to(d), b.to(d)), f(a, b), tol_of(dt), label(op + " (transposed)", dt, {3, 5}));
  }
}

void inplace_case(const std::string& op, const Device& d,
                  const std::function<void(Tensor&, const Tensor&)>& f) {
  std::uint64_t seed = 100;
  for (ScalarType dt :
       {ScalarType::Float32, ScalarType::Float64, ScalarType::BFloat16, ScalarType::Int64}) {
    for (const auto& [sa, sb] :
         std::vector<std::pair<Shape, Shape>>{{{7}, {7}}, {{3, 4}, {1, 4}}, {{2, 3, 4}, {}}}) {
      Tensor a = rand_input(sa, dt, seed++);
      const Tensor b = rand_input(sb, dt, seed++);
      Tensor ad = a.to(d);
      f(ad, b.to(d));
      f(a, b);
      expect_close(ad, a, tol_of(dt), label(op, dt, sa, sb));
    }
    // Into a strided view: only the view's elements change.
    Tensor base = rand_input({4, 6}, dt, seed++);
    Tensor based = base.to(d);
    const Tensor b = rand_input({6, 2}, dt, seed++);
    Tensor view = based.t().narrow(1, 1, 2);
    f(view, b.to(d));
    Tensor hview = base.t().narrow(1, 1, 2);
    f(hview, b);
    expect_close(based, base, tol_of(dt), label(op + " (strided self)", dt, {4, 6}));
  }
}

std::map<std::string, Case> cases() {
  std::map<std::string, Case> c;
  c["copy_"] = [](const Device& d) {
    std::uint64_t seed = 200;
    for (ScalarType dt : {ScalarType::Float32, ScalarType::Float16, ScalarType::Int64,
                          ScalarType::Bool, ScalarType::UInt8}) {
      for (const Shape& s : std::vector<Shape>{{}, {1}, {13}, {4, 5}, {2, 3, 4}}) {
        const Tensor h = rand_input(s, dt, seed++);
        expect_close(h.to(d), h, tol_of(dt), label("copy_ host->device", dt, s));
        Tensor back = ops::zeros(tb::core::IntList(s), ScalarType::Float64);
        back.copy_(h.to(d));  // device -> host with conversion
        expect_close(back, h.to(ScalarType::Float64), {0, 0}, label("copy_ device->host", dt, s));
      }
      const Tensor h = rand_input({4, 5}, dt, seed++);
      expect_close(h.to(d).t().contiguous(), h.t().contiguous(), {0, 0},
                   label("copy_ device strided->contiguous", dt, {4, 5}));
    }
  };
  c["fill_"] = [](const Device& d) {
    for (ScalarType dt : {ScalarType::Float32, ScalarType::Float64, ScalarType::BFloat16,
                          ScalarType::Int32, ScalarType::Bool}) {
      for (const Shape& s : std::vector<Shape>{{}, {9}, {3, 4}}) {
        Tensor a = ops::zeros(tb::core::IntList(s), dt, d);
        Tensor h = ops::zeros(tb::core::IntList(s), dt);
        a.fill_(1.75);
        h.fill_(1.75);
        expect_close(a, h, {0, 0}, label("fill_", dt, s));
      }
      Tensor a = ops::zeros({3, 4}, dt, d);
      Tensor h = ops::zeros({3, 4}, dt);
      a.t().select(0, 2).fill_(3);
      h.t().select(0, 2).fill_(3);
      expect_close(a, h, {0, 0}, label("fill_ strided", dt, {3, 4}));
    }
  };
  c["add"] = [](const Device& d) {
    binary_case("add", d, [](const Tensor& a, const Tensor& b) { return ops::add(a, b, 2); });
  };
  c["sub"] = [](const Device& d) {
    binary_case("sub", d, [](const Tensor& a, const Tensor& b) { return ops::sub(a, b); });
  };
  c["mul"] = [](const Device& d) {
    binary_case("mul", d, [](const Tensor& a, const Tensor& b) { return ops::mul(a, b); });
  };
  c["div"] = [](const Device& d) {
    binary_case("div", d, [](const Tensor& a, const Tensor& b) { return ops::div(a, b); });
  };
  // The fused activation gradients: float dtypes (integers are promoted).
  using GradFn = Tensor (*)(const Tensor&, const Tensor&);
  for (const auto& [name, fn, first_seed] :
       {std::tuple<const char*, GradFn, std::uint64_t>{"gelu_tanh_backward",
                                                       ops::gelu_tanh_backward, 700},
        {"silu_backward", ops::silu_backward, 750}}) {
    c[name] = [name, fn, first_seed](const Device& d) {
      std::uint64_t seed = first_seed;
      for (ScalarType dt : kFloats) {
        for (const auto& [sa, sb] : kBinaryShapes) {
          const Tensor g = rand_input(sa, dt, seed++), x = rand_input(sb, dt, seed++);
          expect_close(fn(g.to(d), x.to(d)), fn(g, x), tol_of(dt), label(name, dt, sa, sb));
        }
        const Tensor g = rand_input({5, 3}, dt, seed++).t(), x = rand_input({3, 5}, dt, seed++);
        expect_close(fn(g.to(d), x.to(d)), fn(g, x), tol_of(dt),
                     label(std::string(name) + " (transposed)", dt, {3, 5}));
      }
    };
  }
  c["relu_backward"] = [](const Device& d) {
    binary_case("relu_backward", d,
                [](const Tensor& a, const Tensor& b) { return ops::relu_backward(a, b); });
  };
  c["maximum"] = [](const Device& d) {
    binary_case("maximum", d, [](const Tensor& a, const Tensor& b) { return ops::maximum(a, b); });
  };
  c["minimum"] = [](const Device& d) {
    binary_case("minimum", d, [](const Tensor& a, const Tensor& b) { return ops::minimum(a, b); });
  };
  // Unary float ops; inputs moved into each op's domain.
  using UnaryFn = Tensor (*)(const Tensor&);
  const std::vector<std::tuple<const char*, UnaryFn, bool>> unary = {
      {"neg", ops::neg, false},       {"abs", ops::abs, false},
      {"square", ops::square, false}, {"exp", ops::exp, false},
      {"log", ops::log, true},        {"log1p", ops::log1p, true},
      {"expm1", ops::expm1, false},   {"sqrt", ops::sqrt, true},
      {"rsqrt", ops::rsqrt, true},    {"reciprocal", ops::reciprocal, true},
      {"sin", ops::sin, false},       {"cos", ops::cos, false},
      {"tanh", ops::tanh, false},     {"sigmoid", ops::sigmoid, false},
      {"erf", ops::erf, false},       {"silu", ops::silu, false},
      {"gelu", ops::gelu, false},     {"gelu_tanh", ops::gelu_tanh, false}};
  for (const auto& [name, fn, positive] : unary) {
    c[name] = [name = std::string(name), fn = fn, positive = positive](const Device& d) {
      std::uint64_t seed = 500;
      for (ScalarType dt : kFloats) {
        for (const Shape& s : std::vector<Shape>{{}, {17}, {3, 5}, {2, 3, 4}}) {
          Tensor h = rand_input(s, dt, seed++);
          if (positive) h = ops::add(ops::abs(h), 0.5).to(dt);
          expect_close(fn(h.to(d)), fn(h), tol_of(dt), label(name, dt, s));
        }
        Tensor h = rand_input({5, 3}, dt, seed++);
        if (positive) h = ops::add(ops::abs(h), 0.5).to(dt);
        expect_close(fn(h.to(d).t()), fn(h.t()), tol_of(dt), label(name + " strided", dt, {3, 5}));
      }
    };
  }
  c["add_"] = [](const Device& d) {
    inplace_case("add_", d, [](Tensor& a, const Tensor& b) { ops::add_(a, b, 3); });
  };
  c["mul_"] = [](const Device& d) {
    inplace_case("mul_", d, [](Tensor& a, const Tensor& b) { ops::mul_(a, b); });
  };
  c["relu"] = [](const Device& d) {
    std::uint64_t seed = 300;
    for (ScalarType dt : kFloats) {
      for (const Shape& s : std::vector<Shape>{{}, {17}, {3, 5}}) {
        const Tensor h = rand_input(s, dt, seed++);
        expect_close(ops::relu(h.to(d)), ops::relu(h), tol_of(dt), label("relu", dt, s));
      }
      const Tensor h = rand_input({5, 3}, dt, seed++).t();
      expect_close(ops::relu(h.to(d)), ops::relu(h), tol_of(dt), label("relu strided", dt, {3}));
    }
    const Tensor nan = ops::full({2}, NAN);
    EXPECT_TRUE(std::isnan(ops::relu(nan.to(d)).to_vector<float>()[0]));
  };
  c["mm"] = [](const Device& d) {
    std::uint64_t seed = 400;
    for (ScalarType dt : kFloats) {
      for (const auto& [m, k, n] : std::vector<std::tuple<int, int, int>>{
               {1, 1, 1}, {4, 7, 3}, {33, 65, 17}, {8, 0, 5}, {0, 4, 2}}) {
        const Tensor a = rand_input({m, k}, dt, seed++);
        const Tensor b = rand_input({k, n}, dt, seed++);
        Tol t = tol_of(dt);
        t.atol *= std::max(1, k);
        t.rtol *= std::max(1, k);
        expect_close(ops::mm(a.to(d), b.to(d)), ops::mm(a, b), t, label("mm", dt, {m, k}, {k, n}));
      }
      const Tensor a = rand_input({6, 5}, dt, seed++).t();  // transposed operand
      const Tensor b = rand_input({6, 4}, dt, seed++);
      Tol t = tol_of(dt);
      t.atol *= 6;
      t.rtol *= 6;
      expect_close(ops::mm(a.to(d), b.to(d)), ops::mm(a, b), t, label("mm transposed", dt, {5, 6}));
    }
  };
  // Random ops: the device draws from its own generator, so the values differ from the CPU's;
  // parity here is the distribution (range and moments against the CPU kernel's) and the dtype.
  auto moments = [](const std::string& op, const Device& d,
                    const std::function<void(Tensor&)>& fill, bool bounded) {
    for (ScalarType dt : kFloats) {
      Tensor a = Tensor::empty({20000}, dt, d);
      Tensor h = Tensor::empty({20000}, dt);
      fill(a);
      fill(h);
      const auto da = a.to(Device()).to(ScalarType::Float64);
      const auto dh = h.to(ScalarType::Float64);
      const std::string what = label(op, dt, {20000});
      EXPECT_NEAR(ops::mean(da).item(), ops::mean(dh).item(), 0.05) << what;
      if (bounded) {  // the extremes of a normal sample are too noisy to compare
        EXPECT_NEAR(ops::min(da).item(), ops::min(dh).item(), 0.01) << what;
        EXPECT_NEAR(ops::max(da).item(), ops::max(dh).item(), 0.01) << what;
      }
      const double va = ops::mean(ops::square(da)).item();
      const double vh = ops::mean(ops::square(dh)).item();
      EXPECT_NEAR(va, vh, 0.1 * vh + 0.01) << what;
    }
  };
  c["uniform_"] = [moments](const Device& d) {
    moments(
        "uniform_", d, [](Tensor& t) { ops::uniform_(t, -1.0, 3.0); }, true);
  };
  c["normal_"] = [moments](const Device& d) {
    moments(
        "normal_", d, [](Tensor& t) { ops::normal_(t, 0.5, 1.5); }, false);
  };
  c["bernoulli_"] = [moments](const Device& d) {
    moments(
        "bernoulli_", d, [](Tensor& t) { ops::bernoulli_(t, 0.3); }, true);
  };
  c["pow"] = [](const Device& d) {
    std::uint64_t seed = 600;
    for (ScalarType dt : kFloats) {
      for (const auto& [sa, sb] : kBinaryShapes) {
        const Tensor a = ops::add(ops::abs(rand_input(sa, dt, seed++)), 0.25).to(dt);
        const Tensor b = rand_input(sb, dt, seed++);
        expect_close(ops::pow(a.to(d), b.to(d)), ops::pow(a, b), tol_of(dt),
                     label("pow", dt, sa, sb));
      }
    }
  };
  // Comparisons: every dtype, equal elements included (a compared with a shuffled copy of itself).
  using CmpFn = Tensor (*)(const Tensor&, const Tensor&);
  const std::vector<std::pair<const char*, CmpFn>> compares = {{"eq", ops::eq}, {"ne", ops::ne},
                                                               {"lt", ops::lt}, {"le", ops::le},
                                                               {"gt", ops::gt}, {"ge", ops::ge}};
  for (const auto& [name, fn] : compares) {
    c[name] = [name = std::string(name), fn = fn](const Device& d) {
      std::uint64_t seed = 700;
      for (ScalarType dt : {ScalarType::Float32, ScalarType::Float64, ScalarType::BFloat16,
                            ScalarType::Int64, ScalarType::Int32}) {
        for (const auto& [sa, sb] : kBinaryShapes) {
          const Tensor a = rand_input(sa, dt, seed++);
          const Tensor b = rand_input(sb, dt, seed++);
          expect_close(fn(a.to(d), b.to(d)), fn(a, b), {0, 0}, label(name, dt, sa, sb));
        }
        const Tensor a = rand_input({4, 3}, dt, seed++);
        expect_close(fn(a.to(d), a.to(d).t().contiguous().t()), fn(a, a), {0, 0},
                     label(name + " (equal)", dt, {4, 3}));
      }
      const Tensor nan = ops::full({3}, NAN);
      expect_close(fn(nan.to(d), nan.to(d)), fn(nan, nan), {0, 0}, name + " NaN");
    };
  }
  c["where"] = [](const Device& d) {
    std::uint64_t seed = 800;
    for (ScalarType dt : {ScalarType::Float32, ScalarType::BFloat16, ScalarType::Int64}) {
      const Tensor cond = ops::gt(rand_input({3, 4}, ScalarType::Float32, seed++), ops::zeros({}));
      const Tensor a = rand_input({3, 1}, dt, seed++);
      const Tensor b = rand_input({4}, dt, seed++);
      expect_close(ops::where(cond.to(d), a.to(d), b.to(d)), ops::where(cond, a, b), {0, 0},
                   label("where", dt, {3, 4}));
      expect_close(ops::where(cond.to(d).t(), a.to(d).t(), b.to(d).reshape({4, 1})),
                   ops::where(cond.t(), a.t(), b.reshape({4, 1})), {0, 0},
                   label("where strided", dt, {4, 3}));
    }
  };
  c["masked_fill"] = [](const Device& d) {
    std::uint64_t seed = 900;
    for (ScalarType dt : {ScalarType::Float32, ScalarType::Float16, ScalarType::Int32}) {
      const Tensor t = rand_input({3, 5}, dt, seed++);
      const Tensor mask = ops::gt(rand_input({1, 5}, ScalarType::Float32, seed++), ops::zeros({}));
      const tb::core::Scalar v = tb::core::is_floating_point(dt)
                                     ? tb::core::Scalar(-1e4)
                                     : tb::core::Scalar(std::int64_t{-7});
      expect_close(ops::masked_fill(t.to(d), mask.to(d), v), ops::masked_fill(t, mask, v), {0, 0},
                   label("masked_fill", dt, {3, 5}));
      expect_close(ops::masked_fill(t.to(d).t(), mask.to(d).t(), v),
                   ops::masked_fill(t.t(), mask.t(), v), {0, 0},
                   label("masked_fill strided", dt, {5, 3}));
    }
  };
  // Reductions: tolerances grow with the reduction length (float accumulation on the device).
  auto reduce_tol = [](ScalarType dt, std::int64_t n) {
    Tol t = tol_of(dt);
    const double f = std::sqrt(static_cast<double>(std::max<std::int64_t>(n, 1)));
    return Tol{t.atol * f, t.rtol * f};
  };
  struct RShape {
    Shape shape;
    std::vector<std::int64_t> dims;
  };
  const std::vector<RShape> rshapes = {{{}, {}},          {{7}, {0}},          {{3, 5}, {1}},
                                       {{3, 5}, {0}},     {{2, 3, 4}, {0, 2}}, {{2, 3, 4}, {}},
                                       {{4, 70000}, {1}}, {{300000}, {0}},     {{5, 0}, {1}}};
  auto reduction = [rshapes, reduce_tol](
                       const std::string& op, const std::vector<ScalarType>& dtypes,
                       const std::function<Tensor(const Tensor&, tb::core::IntList, bool)>& f) {
    return [=](const Device& d) {
      std::uint64_t seed = 1000;
      for (ScalarType dt : dtypes) {
        for (const auto& [shape, dims] : rshapes) {
          const Tensor h = rand_input(shape, dt, seed++);
          std::int64_t n = 1;
          for (auto dim : dims)
            n *= shape[static_cast<std::size_t>(dim)];
          if (dims.empty()) n = h.numel();
          for (bool keep : {false, true}) {
            expect_close(f(h.to(d), tb::core::IntList(dims), keep),
                         f(h, tb::core::IntList(dims), keep), reduce_tol(dt, n),
                         label(op + (keep ? " keepdim" : ""), dt, shape));
          }
        }
        const Tensor h = rand_input({6, 5}, dt, seed++).t();
        expect_close(f(h.to(d), tb::core::IntList({1}), false), f(h, tb::core::IntList({1}), false),
                     reduce_tol(dt, 6), label(op + " strided", dt, {5, 6}));
      }
    };
  };
  c["sum"] = reduction(
      "sum",
      {ScalarType::Float32, ScalarType::Float64, ScalarType::Float16, ScalarType::BFloat16,
       ScalarType::Int64, ScalarType::Int32},
      [](const Tensor& t, tb::core::IntList dims, bool keep) { return ops::sum(t, dims, keep); });
  c["mean"] = reduction("mean", kFloats, [](const Tensor& t, tb::core::IntList dims, bool keep) {
    return ops::mean(t, dims, keep);
  });
  c["norm"] = [reduction](const Device& d) {
    for (double p : {1.0, 2.0, 3.0, static_cast<double>(INFINITY)}) {
      reduction("norm p=" + std::to_string(p), kFloats,
                [p](const Tensor& t, tb::core::IntList dims, bool keep) {
                  return ops::norm(t, p, dims, keep);
                })(d);
    }
  };
  // max/min/argmax: exact; ties and NaN checked explicitly.
  auto extreme =
      [](const std::string& op, const Device& d,
         const std::function<void(const Tensor&, const Tensor&, const std::string&)>& check) {
        std::uint64_t seed = 1100;
        for (ScalarType dt : {ScalarType::Float32, ScalarType::Float64, ScalarType::BFloat16,
                              ScalarType::Int64, ScalarType::Int32}) {
          for (const Shape& s : std::vector<Shape>{{}, {9}, {3, 5}, {2, 3, 4}, {2, 100000}}) {
            const Tensor h = rand_input(s, dt, seed++);
            check(h.to(d), h, label(op, dt, s));
          }
          const Tensor ties = ops::zeros({3, 4}, dt);
          check(ties.to(d), ties, label(op + " ties", dt, {3, 4}));
        }
        Tensor nan = ops::arange(12).to(ScalarType::Float32).reshape({3, 4});
        nan.select(0, 1).select(0, 2).fill_(NAN);
        nan.select(0, 2).select(0, 3).fill_(NAN);
        check(nan.to(d), nan, op + " NaN");
      };
  c["max"] = [extreme](const Device& d) {
    extreme("max", d, [](const Tensor& g, const Tensor& h, const std::string& w) {
      expect_close(ops::max(g), ops::max(h), {0, 0}, w);
    });
  };
  c["min"] = [extreme](const Device& d) {
    extreme("min", d, [](const Tensor& g, const Tensor& h, const std::string& w) {
      expect_close(ops::min(g), ops::min(h), {0, 0}, w);
    });
  };
  for (const bool greater : {true, false}) {
    c[greater ? "max.dim" : "min.dim"] = [extreme, greater](const Device& d) {
      extreme(greater ? "max.dim" : "min.dim", d,
              [greater](const Tensor& g, const Tensor& h, const std::string& w) {
                for (std::int64_t dim = 0; dim < std::max<std::int64_t>(h.dim(), 1); ++dim) {
                  for (bool keep : {false, true}) {
                    auto [gv, gi] = greater ? ops::max(g, dim, keep) : ops::min(g, dim, keep);
                    auto [hv, hi] = greater ? ops::max(h, dim, keep) : ops::min(h, dim, keep);
                    expect_close(gv, hv, {0, 0}, w + " values dim " + std::to_string(dim));
                    expect_close(gi, hi, {0, 0}, w + " indices dim " + std::to_string(dim));
                  }
                }
              });
    };
  }
  c["argmax"] = [extreme](const Device& d) {
    extreme("argmax", d, [](const Tensor& g, const Tensor& h, const std::string& w) {
      expect_close(ops::argmax(g), ops::argmax(h), {0, 0}, w);
      expect_close(ops::argmax(g, {}, true), ops::argmax(h, {}, true), {0, 0}, w + " keepdim");
      if (h.dim() > 0) {
        expect_close(ops::argmax(g, h.dim() - 1), ops::argmax(h, h.dim() - 1), {0, 0},
                     w + " last dim");
      }
    });
  };
  // Products beyond mm.
  auto product_tol = [](ScalarType dt, std::int64_t k) {
    Tol t = tol_of(dt);
    return Tol{t.atol * static_cast<double>(std::max<std::int64_t>(k, 1)),
               t.rtol * static_cast<double>(std::max<std::int64_t>(k, 1))};
  };
  c["addmm"] = [product_tol](const Device& d) {
    std::uint64_t seed = 1200;
    for (ScalarType dt : kFloats) {
      const Tensor a = rand_input({5, 7}, dt, seed++);
      const Tensor b = rand_input({7, 3}, dt, seed++);
      for (const Shape& bs : std::vector<Shape>{{3}, {5, 3}, {1, 3}, {}}) {
        const Tensor bias = rand_input(bs, dt, seed++);
        for (const auto& [beta, alpha] :
             std::vector<std::pair<double, double>>{{1, 1}, {0.5, 2}, {0, 1}}) {
          expect_close(ops::addmm(bias.to(d), a.to(d), b.to(d), beta, alpha),
                       ops::addmm(bias, a, b, beta, alpha), product_tol(dt, 7),
                       label("addmm", dt, {5, 7}, bs));
        }
      }
      expect_close(ops::addmm(rand_input({4}, dt, 1).to(d), a.to(d).t().contiguous().t(),
                              rand_input({7, 4}, dt, 2).to(d).t().contiguous().t()),
                   ops::addmm(rand_input({4}, dt, 1), a, rand_input({7, 4}, dt, 2)),
                   product_tol(dt, 7), label("addmm transposed operands", dt, {5, 7}));
    }
  };
  c["bmm"] = [product_tol](const Device& d) {
    std::uint64_t seed = 1300;
    for (ScalarType dt : kFloats) {
      const Tensor a = rand_input({3, 4, 6}, dt, seed++);
      const Tensor b = rand_input({3, 6, 5}, dt, seed++);
      expect_close(ops::bmm(a.to(d), b.to(d)), ops::bmm(a, b), product_tol(dt, 6),
                   label("bmm", dt, {3, 4, 6}));
      const Tensor bt = rand_input({3, 5, 6}, dt, seed++).transpose(1, 2);
      expect_close(ops::bmm(a.to(d), bt.to(d)), ops::bmm(a, bt), product_tol(dt, 6),
                   label("bmm transposed", dt, {3, 4, 6}));
      const Tensor e = rand_input({0, 4, 6}, dt, seed++);
      expect_close(ops::bmm(e.to(d), b.narrow(0, 0, 0).to(d)), ops::bmm(e, b.narrow(0, 0, 0)),
                   {0, 0}, label("bmm empty batch", dt, {0, 4, 6}));
    }
  };
  c["baddbmm"] = [product_tol](const Device& d) {
    std::uint64_t seed = 1400;
    for (ScalarType dt : kFloats) {
      const Tensor a = rand_input({2, 4, 6}, dt, seed++);
      const Tensor b = rand_input({2, 6, 5}, dt, seed++);
      const Tensor c0 = rand_input({1, 4, 5}, dt, seed++);
      expect_close(ops::baddbmm(c0.to(d), a.to(d), b.to(d), 0.5, -1.5),
                   ops::baddbmm(c0, a, b, 0.5, -1.5), product_tol(dt, 6),
                   label("baddbmm", dt, {2, 4, 6}));
    }
  };
  c["syrk"] = [product_tol](const Device& d) {
    std::uint64_t seed = 1500;
    for (ScalarType dt : kFloats) {
      for (const auto& [n, k] :
           std::vector<std::pair<int, int>>{{1, 1}, {5, 9}, {33, 17}, {4, 0}}) {
        const Tensor x = rand_input({n, k}, dt, seed++);
        expect_close(ops::syrk(x.to(d), 0.5), ops::syrk(x, 0.5), product_tol(dt, k),
                     label("syrk", dt, {n, k}));
      }
      const Tensor xt = rand_input({9, 5}, dt, seed++).t();
      expect_close(ops::syrk(xt.to(d)), ops::syrk(xt), product_tol(dt, 9),
                   label("syrk transposed", dt, {5, 9}));
    }
  };
  for (const bool log : {false, true}) {
    c[log ? "log_softmax" : "softmax"] = [log](const Device& d) {
      std::uint64_t seed = 1600;
      auto f = [log](const Tensor& t, std::int64_t dim) {
        return log ? ops::log_softmax(t, dim) : ops::softmax(t, dim);
      };
      for (ScalarType dt : kFloats) {
        for (const Shape& s : std::vector<Shape>{{}, {7}, {3, 10}, {2, 3, 5}, {4, 5000}}) {
          const Tensor h = ops::mul(rand_input(s, dt, seed++), 3.0).to(dt);
          for (std::int64_t dim = 0; dim < std::max<std::int64_t>(h.dim(), 1); ++dim) {
            expect_close(f(h.to(d), dim), f(h, dim), tol_of(dt),
                         label(log ? "log_softmax" : "softmax", dt, s));
          }
        }
      }
      Tensor inf = ops::zeros({2, 4});
      inf.select(0, 0).fill_(-INFINITY);
      inf.select(0, 1).select(0, 2).fill_(-INFINITY);
      expect_close(f(inf.to(d), 1), f(inf, 1), tol_of(ScalarType::Float32), "softmax -inf rows");
    };
  }
  c["index_select"] = [](const Device& d) {
    std::uint64_t seed = 1700;
    for (ScalarType dt : {ScalarType::Float32, ScalarType::BFloat16, ScalarType::Int64}) {
      const Tensor t = rand_input({6, 4, 3}, dt, seed++);
      for (std::int64_t dim = 0; dim < 3; ++dim) {
        std::vector<std::int64_t> iv;
        for (std::int64_t x : {5, 0, -1, 2, 2})
          iv.push_back(x >= 0 ? x % t.size(dim) : x);
        const Tensor i = tb::core::from_vector<std::int64_t>(iv, {5});
        expect_close(ops::index_select(t.to(d), dim, i.to(d)), ops::index_select(t, dim, i), {0, 0},
                     label("index_select dim " + std::to_string(dim), dt, {6, 4, 3}));
      }
    }
    const Tensor t = ops::zeros({3, 2}).to(d);
    const Tensor bad = tb::core::from_vector<std::int64_t>({0, 3}, {2}).to(d);
    try {
      (void)ops::index_select(t, 0, bad).to(Device());
      ADD_FAILURE() << "index_select accepted index 3 for size 3";
    } catch (const tb::IndexError& e) {
      EXPECT_THAT(e.what(),
                  testing::HasSubstr("index 3 is out of range for dimension 0 with size 3"));
    }
  };
  c["gather"] = [](const Device& d) {
    std::uint64_t seed = 1800;
    for (ScalarType dt : {ScalarType::Float32, ScalarType::Float64, ScalarType::Int32}) {
      const Tensor t = rand_input({4, 5}, dt, seed++);
      const Tensor i0 = tb::core::from_vector<std::int64_t>({3, 0, 1, -1, 2, 2}, {2, 3});
      expect_close(ops::gather(t.to(d), 0, i0.to(d)), ops::gather(t, 0, i0), {0, 0},
                   label("gather dim 0", dt, {4, 5}));
      const Tensor i1 = tb::core::from_vector<std::int64_t>({4, 0, 3, 1, 1, 2, 0, 0}, {4, 2});
      expect_close(ops::gather(t.to(d), 1, i1.to(d)), ops::gather(t, 1, i1), {0, 0},
                   label("gather dim 1", dt, {4, 5}));
      expect_close(ops::gather(t.to(d).t(), 0, i1.to(d)), ops::gather(t.t(), 0, i1), {0, 0},
                   label("gather strided", dt, {5, 4}));
    }
  };
  c["scatter_add"] = [](const Device& d) {
    std::uint64_t seed = 1900;
    for (ScalarType dt :
         {ScalarType::Float32, ScalarType::Float64, ScalarType::BFloat16, ScalarType::Int64}) {
      const Tensor t = rand_input({4, 3}, dt, seed++);
      const Tensor src = rand_input({5, 3}, dt, seed++);
      // Duplicated indices accumulate (in any order on a GPU: float sums within tolerance).
      const Tensor idx = tb::core::from_vector<std::int64_t>(
          {0, 1, 2, 3, 3, 3, 0, 0, 1, 2, 1, 0, -1, 2, 3}, {5, 3});
      expect_close(ops::scatter_add(t.to(d), 0, idx.to(d), src.to(d)),
                   ops::scatter_add(t, 0, idx, src), tol_of(dt), label("scatter_add", dt, {4, 3}));
    }
  };
  c["rope"] = [](const Device& d) {
    std::uint64_t seed = 2000;
    for (ScalarType dt : kFloats) {
      const Tensor x = rand_input({2, 3, 5, 8}, dt, seed++);
      const Tensor cs = rand_input({5, 4}, ScalarType::Float32, seed++);
      const Tensor sn = rand_input({5, 4}, ScalarType::Float32, seed++);
      expect_close(ops::rope(x.to(d), cs.to(d), sn.to(d)), ops::rope(x, cs, sn), tol_of(dt),
                   label("rope", dt, {2, 3, 5, 8}));
    }
  };
  c["swiglu"] = [](const Device& d) {
    std::uint64_t seed = 2050;
    for (ScalarType dt : kFloats) {
      const Tensor g = ops::mul(rand_input({3, 7, 5}, dt, seed++), 4.0).to(dt);
      const Tensor u = rand_input({3, 7, 5}, dt, seed++);
      expect_close(ops::swiglu(g.to(d), u.to(d)), ops::swiglu(g, u), tol_of(dt),
                   label("swiglu", dt, {3, 7, 5}));
      // Non-contiguous operands.
      expect_close(ops::swiglu(g.to(d).transpose(0, 2), u.to(d).transpose(0, 2)),
                   ops::swiglu(g.transpose(0, 2), u.transpose(0, 2)), tol_of(dt),
                   label("swiglu (transposed)", dt, {5, 7, 3}));
    }
  };
  c["swiglu_backward"] = [](const Device& d) {
    std::uint64_t seed = 2070;
    for (ScalarType dt : kFloats) {
      const Tensor gr = rand_input({4, 9}, dt, seed++);
      const Tensor g = ops::mul(rand_input({4, 9}, dt, seed++), 4.0).to(dt);
      const Tensor u = rand_input({4, 9}, dt, seed++);
      const auto [dg_d, du_d] = ops::swiglu_backward(gr.to(d), g.to(d), u.to(d));
      const auto [dg, du] = ops::swiglu_backward(gr, g, u);
      expect_close(dg_d, dg, tol_of(dt), label("swiglu_backward gate", dt, {4, 9}));
      expect_close(du_d, du, tol_of(dt), label("swiglu_backward up", dt, {4, 9}));
    }
  };
  c["cross_entropy"] = [](const Device& d) {
    std::uint64_t seed = 2100;
    for (ScalarType dt : kFloats) {
      for (const auto& [n, classes] :
           std::vector<std::pair<int, int>>{{1, 3}, {6, 10}, {3, 5000}}) {
        const Tensor logits = ops::mul(rand_input({n, classes}, dt, seed++), 4.0).to(dt);
        std::vector<std::int64_t> tv;
        for (int r = 0; r < n; ++r)
          tv.push_back(r == 1 ? -100 : (r * 7 + 3) % classes);
        const Tensor target = tb::core::from_vector<std::int64_t>(tv, {n});
        for (double sm : {0.0, 0.1}) {
          expect_close(ops::cross_entropy(logits.to(d), target.to(d), -100, sm),
                       ops::cross_entropy(logits, target, -100, sm), tol_of(dt),
                       label("cross_entropy", dt, {n, classes}));
        }
      }
    }
    const Tensor bad = tb::core::from_vector<std::int64_t>({1, 7}, {2});
    try {
      (void)ops::cross_entropy(ops::zeros({2, 3}).to(d), bad.to(d)).to(Device());
      ADD_FAILURE() << "cross_entropy accepted target 7 for 3 classes";
    } catch (const tb::IndexError& e) {
      EXPECT_THAT(e.what(), testing::HasSubstr("target 7 of row 1 is out of range for 3 classes"));
    }
  };
  c["cross_entropy_backward"] = [](const Device& d) {
    std::uint64_t seed = 2200;
    for (ScalarType dt : kFloats) {
      const Tensor logits = rand_input({5, 7}, dt, seed++);
      const Tensor target = tb::core::from_vector<std::int64_t>({0, 6, -100, 3, 3}, {5});
      const Tensor grad = ops::full({}, 1.5).to(dt);
      for (double sm : {0.0, 0.2}) {
        expect_close(ops::cross_entropy_backward(grad.to(d), logits.to(d), target.to(d), -100, sm),
                     ops::cross_entropy_backward(grad, logits, target, -100, sm), tol_of(dt),
                     label("cross_entropy_backward", dt, {5, 7}));
      }
    }
  };
  c["bernoulli"] = [](const Device& d) {
    const Tensor p = ops::full({20000}, 0.3);
    const double m = ops::mean(ops::bernoulli(p.to(d)).to(Device())).item();
    EXPECT_NEAR(m, 0.3, 0.02);
    const Tensor edge = tb::core::from_vector<float>({0.0f, 1.0f}, {2});
    expect_close(ops::bernoulli(edge.to(d)), edge, {0, 0}, "bernoulli p in {0, 1}");
    EXPECT_THROW((void)ops::bernoulli(ops::full({2}, 1.5).to(d)), tb::Error);
  };
  c["amp_foreach_non_finite_check_and_unscale_"] = [](const Device& d) {
    for (ScalarType dt : kFloats) {
      std::vector<Tensor> host = {rand_input({5}, dt, 1), rand_input({3, 4}, dt, 2).t(),
                                  rand_input({200000}, dt, 3)};
      std::vector<Tensor> dev;
      for (const auto& h : host)
        dev.push_back(h.to(d));
      for (bool poison : {false, true}) {
        if (poison) {
          host[1].select(0, 1).select(0, 2).fill_(INFINITY);
          dev[1].select(0, 1).select(0, 2).fill_(INFINITY);
        }
        Tensor fh = ops::zeros({1});
        Tensor fd = ops::zeros({1}).to(d);
        ops::amp_foreach_non_finite_check_and_unscale_(host, fh, ops::full({1}, 0.25));
        ops::amp_foreach_non_finite_check_and_unscale_(dev, fd, ops::full({1}, 0.25).to(d));
        expect_close(fd, fh, {0, 0}, label("unscale found_inf", dt, {}));
        for (std::size_t i = 0; i < host.size(); ++i)
          expect_close(dev[i], host[i], tol_of(dt), label("unscale", dt, {}));
      }
    }
  };
  c["amp_update_scale_"] = [](const Device& d) {
    Tensor sh = ops::full({1}, 1024.0);
    Tensor th = ops::zeros({1}, ScalarType::Int32);
    Tensor sd = sh.to(d);
    Tensor td = th.to(d);
    for (float inf : {0.0f, 0.0f, 1.0f, 0.0f, 0.0f, 0.0f}) {
      const Tensor f = ops::full({1}, inf);
      ops::amp_update_scale_(sh, th, f, 2.0, 0.5, 2);
      ops::amp_update_scale_(sd, td, f.to(d), 2.0, 0.5, 2);
      expect_close(sd, sh, {0, 0}, "scale");
      expect_close(td, th, {0, 0}, "growth tracker");
    }
  };
  c["adam_step_"] = [](const Device& d) {
    static const auto op =
        tb::dispatch::Dispatcher::singleton().typed<tb::ops::sig::AdamStep>("adam_step_");
    for (ScalarType dt : {ScalarType::Float32, ScalarType::Float64}) {
      for (int flags = 0; flags < 8; ++flags) {
        const bool ams = (flags & 1) != 0;
        const bool decoupled = (flags & 2) != 0;
        const bool maximize = (flags & 4) != 0;
        // Sizes crossing the kernel's chunk (65536) and launch limits.
        const std::vector<Shape> shapes = {{7}, {70000}, {3, 5}, {0}, {131073}};
        std::vector<std::vector<Tensor>> h(5);
        std::vector<std::vector<Tensor>> g(5);
        std::uint64_t seed = 2300;
        for (const Shape& s : shapes) {
          for (int l = 0; l < 5; ++l) {
            Tensor x = rand_input(s, dt, seed++);
            if (l == 3 || l == 4) x = ops::abs(x).to(dt);  // second moments are >= 0
            h[static_cast<std::size_t>(l)].push_back(x);
            g[static_cast<std::size_t>(l)].push_back(x.to(d));
          }
        }
        const Tensor steps = tb::core::from_vector<double>({0.1, 0.2, 0.3, 0.4, 0.5}, {5});
        const Tensor bc2 = tb::core::from_vector<double>({0.9, 0.8, 0.7, 0.6, 0.5}, {5});
        const std::vector<Tensor> none;
        op.call(h[0], h[1], h[2], h[3], ams ? h[4] : none, steps, bc2, 1e-3, 0.9, 0.999, 1e-8, 0.01,
                maximize, decoupled);
        // The step tensors are host tensors: the CPU key is skipped (as the optimizer does).
        op.call_skipping(tb::dispatch::DispatchKeySet(tb::dispatch::DispatchKey::CPU), g[0], g[1],
                         g[2], g[3], ams ? g[4] : none, steps, bc2, 1e-3, 0.9, 0.999, 1e-8, 0.01,
                         maximize, decoupled);
        for (int l : {0, 2, 3, 4}) {
          for (std::size_t i = 0; i < shapes.size(); ++i) {
            expect_close(g[static_cast<std::size_t>(l)][i], h[static_cast<std::size_t>(l)][i],
                         tol_of(dt), label("adam_step_ list " + std::to_string(l), dt, shapes[i]));
          }
        }
      }
    }
  };
  c["sgd_step_"] = [](const Device& d) {
    // Every flag combination, first and later momentum steps in one list, sizes crossing the
    // kernel's chunk (65536) and list (32 tensors) limits, an empty tensor.
    std::vector<Shape> shapes = {{7}, {70000}, {3, 5}, {0}, {131073}};
    for (int i = 0; i < 34; ++i)
      shapes.push_back({(i % 5) + 1, 2});
    for (ScalarType dt : {ScalarType::Float32, ScalarType::Float64}) {
      for (int flags = 0; flags < 16; ++flags) {
        const double momentum = (flags & 1) != 0 ? 0.9 : 0.0;
        const bool nesterov = (flags & 2) != 0 && momentum != 0.0;
        const double wd = (flags & 4) != 0 ? 0.01 : 0.0;
        const bool maximize = (flags & 8) != 0;
        std::vector<std::vector<Tensor>> h(3);
        std::vector<std::vector<Tensor>> g(3);
        std::vector<bool> first;
        std::uint64_t seed = 2400;
        for (std::size_t i = 0; i < shapes.size(); ++i) {
          for (std::size_t l = 0; l < 3; ++l) {
            if (l == 2 && momentum == 0.0) continue;
            h[l].push_back(rand_input(shapes[i], dt, seed++));
            g[l].push_back(h[l].back().to(d));
          }
          if (momentum != 0.0) first.push_back(i % 3 == 0);
        }
        const double damp = nesterov ? 0.0 : 0.1;
        ops::sgd_step_(h[0], h[1], h[2], first, 0.05, momentum, damp, wd, nesterov, maximize);
        ops::sgd_step_(g[0], g[1], g[2], first, 0.05, momentum, damp, wd, nesterov, maximize);
        for (std::size_t l : {0, 2}) {
          for (std::size_t i = 0; i < h[l].size(); ++i) {
            expect_close(
                g[l][i], h[l][i], tol_of(dt),
                label("sgd_step_ flags " + std::to_string(flags) + " list " + std::to_string(l), dt,
                      shapes[i]));
          }
        }
      }
    }
  };
  // Row norms: rows below and over the gradient chunks (32 on the CPU, 64 on CUDA), rows longer
  // than a warp, a one-element row, with and without weight/bias, every float dtype.
  struct NormCase {
    Shape shape;
    bool weight, bias;
  };
  static const NormCase kNormCases[] = {{{3, 5, 7}, true, true},  {{70, 9}, true, false},
                                        {{150, 100}, true, true}, {{4, 1}, false, false},
                                        {{2, 300}, false, true},  {{0, 8}, true, true}};
  for (const bool rms : {true, false}) {
    const std::string fwd = rms ? "rms_norm" : "layer_norm";
    c[fwd] = [rms, fwd](const Device& d) {
      std::uint64_t seed = 3100;
      for (ScalarType dt : kFloats) {
        for (const NormCase& nc : kNormCases) {
          const std::int64_t n = nc.shape.back();
          const Tensor x = rand_input(nc.shape, dt, seed++);
          const Tensor w = nc.weight ? rand_input({n}, dt, seed++) : Tensor();
          const Tensor b = nc.bias && !rms ? rand_input({n}, dt, seed++) : Tensor();
          const auto to_d = [&](const Tensor& t) { return t.defined() ? t.to(d) : Tensor(); };
          const Tensor yh = rms ? ops::rms_norm(x, w, 1e-5) : ops::layer_norm(x, w, b, 1e-5);
          const Tensor yd = rms ? ops::rms_norm(x.to(d), to_d(w), 1e-5)
                                : ops::layer_norm(x.to(d), to_d(w), to_d(b), 1e-5);
          expect_close(yd, yh, tol_of(dt), label(fwd, dt, nc.shape));
        }
      }
    };
    c[fwd + "_backward"] = [rms, fwd](const Device& d) {
      static const auto fwd_rms =
          tb::dispatch::Dispatcher::singleton().typed<tb::ops::sig::RowNorm>("rms_norm");
      static const auto fwd_ln =
          tb::dispatch::Dispatcher::singleton().typed<tb::ops::sig::RowNorm>("layer_norm");
      std::uint64_t seed = 3200;
      for (ScalarType dt : kFloats) {
        for (const NormCase& nc : kNormCases) {
          const std::int64_t n = nc.shape.back();
          const Tensor x = rand_input(nc.shape, dt, seed++);
          const Tensor w = nc.weight ? rand_input({n}, dt, seed++) : Tensor();
          const Tensor g = rand_input(nc.shape, dt, seed++);
          const bool with_bias = nc.bias && !rms;
          // The forward's statistics from the CPU, so only the backward is compared.
          const Tensor stats = std::get<1>((rms ? fwd_rms : fwd_ln).call(x, w, Tensor(), 1e-5));
          const auto [dxh, dwh, dbh] = ops::row_norm_backward(rms, g, x, w, stats, with_bias);
          const auto [dxd, dwd, dbd] = ops::row_norm_backward(
              rms, g.to(d), x.to(d), w.defined() ? w.to(d) : Tensor(), stats.to(d), with_bias);
          const Tol t{tol_of(dt).atol * 10, tol_of(dt).rtol * 10};
          const std::string what = label(fwd + "_backward", dt, nc.shape);
          expect_close(dxd, dxh, t, what + " dx");
          // Summed over every row.
          const Tol tw{t.atol * 10, t.rtol * 10};
          if (dwh.defined()) expect_close(dwd, dwh, tw, what + " dweight");
          if (dbh.defined()) expect_close(dbd, dbh, tw, what + " dbias");
          EXPECT_EQ(dwd.defined(), dwh.defined()) << what;
          EXPECT_EQ(dbd.defined(), dbh.defined()) << what;
        }
      }
    };
  }
  // Convolutional-network ops: strides, padding, dilation, groups (depthwise too), 1×1, a batch
  // over the CUDA kernels' 128-sample chunk, with and without bias; float16 through the public
  // op's conversion.
  struct ConvCase {
    Shape x, w;
    Shape stride, padding, dilation;
    std::int64_t groups;
    bool bias;
  };
  static const ConvCase kConvCases[] = {{{2, 3, 7, 6}, {4, 3, 3, 3}, {1}, {1}, {1}, 1, true},
                                        {{3, 4, 9, 8}, {6, 2, 3, 2}, {2}, {1, 0}, {1, 2}, 2, false},
                                        {{2, 4, 5, 5}, {8, 4, 1, 1}, {1}, {0}, {1}, 1, true},
                                        {{1, 2, 4, 4}, {2, 1, 3, 3}, {2, 1}, {2}, {2}, 2, true},
                                        {{130, 1, 3, 3}, {2, 1, 2, 2}, {1}, {0}, {1}, 1, true}};
  const std::vector<ScalarType> kConvDtypes = {ScalarType::Float32, ScalarType::Float64,
                                               ScalarType::Float16};
  const auto to_dev = [](const Tensor& t, const Device& d) {
    return t.defined() ? t.to(d) : Tensor();
  };
  const auto shape_of = [](const Tensor& t) { return Shape(t.sizes().begin(), t.sizes().end()); };
  c["conv2d"] = [=](const Device& d) {
    std::uint64_t seed = 4100;
    for (ScalarType dt : kConvDtypes) {
      for (const ConvCase& cc : kConvCases) {
        const Tensor x = rand_input(cc.x, dt, seed++);
        const Tensor w = rand_input(cc.w, dt, seed++);
        const Tensor b = cc.bias ? rand_input({cc.w[0]}, dt, seed++) : Tensor();
        const Tensor yh = ops::conv2d(x, w, b, cc.stride, cc.padding, cc.dilation, cc.groups);
        const Tensor yd = ops::conv2d(x.to(d), w.to(d), to_dev(b, d), cc.stride, cc.padding,
                                      cc.dilation, cc.groups);
        const Tol t{tol_of(dt).atol * 10, tol_of(dt).rtol * 10};
        expect_close(yd, yh, t, label("conv2d", dt, cc.x, cc.w));
      }
    }
  };
  c["conv2d_backward"] = [=](const Device& d) {
    std::uint64_t seed = 4200;
    for (ScalarType dt : kConvDtypes) {
      for (const ConvCase& cc : kConvCases) {
        const Tensor x = rand_input(cc.x, dt, seed++);
        const Tensor w = rand_input(cc.w, dt, seed++);
        const Tensor y = ops::conv2d(x, w, Tensor(), cc.stride, cc.padding, cc.dilation, cc.groups);
        const Tensor g = rand_input(shape_of(y), dt, seed++);
        const auto [dxh, dwh, dbh] =
            ops::conv2d_backward(g, x, w, cc.stride, cc.padding, cc.dilation, cc.groups, cc.bias);
        const auto [dxd, dwd, dbd] = ops::conv2d_backward(
            g.to(d), x.to(d), w.to(d), cc.stride, cc.padding, cc.dilation, cc.groups, cc.bias);
        // Sums over the batch and the output positions.
        const Tol t{tol_of(dt).atol * 10, tol_of(dt).rtol * 10};
        const std::string what = label("conv2d_backward", dt, cc.x, cc.w);
        expect_close(dxd, dxh, t, what + " dx");
        // Without the input's gradient: dx undefined, the others unchanged.
        const auto [nxd, nwd, nbd] =
            ops::conv2d_backward(g.to(d), x.to(d), w.to(d), cc.stride, cc.padding, cc.dilation,
                                 cc.groups, cc.bias, false);
        EXPECT_FALSE(nxd.defined()) << what;
        expect_close(nwd, dwh, t, what + " dweight without dx");
        expect_close(dwd, dwh, t, what + " dweight");
        ASSERT_EQ(dbd.defined(), dbh.defined()) << what;
        if (dbh.defined()) expect_close(dbd, dbh, t, what + " dbias");
      }
    }
  };
  // Pooling windows: 2×2/2 (the CPU's fast path), overlapping with padding, rectangular, and
  // a plane holding NaN and −inf (NaN wins, indices exact).
  struct PoolCase {
    Shape x, kernel, stride, padding;
  };
  static const PoolCase kPoolCases[] = {{{2, 3, 8, 8}, {2}, {2}, {0}},
                                        {{2, 2, 7, 8}, {3}, {2}, {1}},
                                        {{1, 3, 6, 5}, {3, 2}, {1, 2}, {1, 0}},
                                        {{3, 1, 5, 5}, {5}, {1}, {2}}};
  const auto pool_input = [](const PoolCase& pc, ScalarType dt, std::uint64_t seed) {
    Tensor x = rand_input(pc.x, dt, seed);
    if (pc.x[2] == 5) {  // special values in the last case's planes
      auto v = x.to(ScalarType::Float64).to_vector<double>();
      v[3] = std::nan("");
      v[27] = -INFINITY;
      v[28] = -INFINITY;
      x = tb::core::from_vector(v, tb::core::IntList(pc.x)).to(dt);
    }
    return x;
  };
  c["max_pool2d"] = [=](const Device& d) {
    std::uint64_t seed = 4300;
    for (ScalarType dt : kConvDtypes) {
      for (const PoolCase& pc : kPoolCases) {
        const Tensor x = pool_input(pc, dt, seed++);
        const auto [yh, ih] = ops::max_pool2d_with_indices(x, pc.kernel, pc.stride, pc.padding);
        const auto [yd, id] =
            ops::max_pool2d_with_indices(x.to(d), pc.kernel, pc.stride, pc.padding);
        expect_close(yd, yh, {0.0, 0.0}, label("max_pool2d", dt, pc.x, pc.kernel));
        expect_close(id, ih, {0.0, 0.0}, label("max_pool2d indices", dt, pc.x, pc.kernel));
      }
    }
  };
  c["max_pool2d_backward"] = [=](const Device& d) {
    std::uint64_t seed = 4400;
    for (ScalarType dt : kConvDtypes) {
      for (const PoolCase& pc : kPoolCases) {
        const Tensor x = rand_input(pc.x, dt, seed++);
        const auto [y, idx] = ops::max_pool2d_with_indices(x, pc.kernel, pc.stride, pc.padding);
        const Tensor g = rand_input(shape_of(y), dt, seed++);
        expect_close(ops::max_pool2d_backward(g.to(d), x.to(d), idx.to(d)),
                     ops::max_pool2d_backward(g, x, idx), tol_of(dt),
                     label("max_pool2d_backward", dt, pc.x, pc.kernel));
      }
    }
  };
  c["avg_pool2d"] = [=](const Device& d) {
    std::uint64_t seed = 4500;
    for (ScalarType dt : kConvDtypes) {
      for (const PoolCase& pc : kPoolCases) {
        for (const bool include_pad : {true, false}) {
          const Tensor x = rand_input(pc.x, dt, seed++);
          expect_close(ops::avg_pool2d(x.to(d), pc.kernel, pc.stride, pc.padding, include_pad),
                       ops::avg_pool2d(x, pc.kernel, pc.stride, pc.padding, include_pad),
                       tol_of(dt), label("avg_pool2d", dt, pc.x, pc.kernel));
        }
      }
    }
  };
  c["avg_pool2d_backward"] = [=](const Device& d) {
    std::uint64_t seed = 4600;
    for (ScalarType dt : kConvDtypes) {
      for (const PoolCase& pc : kPoolCases) {
        for (const bool include_pad : {true, false}) {
          const Tensor x = rand_input(pc.x, dt, seed++);
          const Tensor y = ops::avg_pool2d(x, pc.kernel, pc.stride, pc.padding, include_pad);
          const Tensor g = rand_input(shape_of(y), dt, seed++);
          expect_close(
              ops::avg_pool2d_backward(g.to(d), x.to(d), pc.kernel, pc.stride, pc.padding,
                                       include_pad),
              ops::avg_pool2d_backward(g, x, pc.kernel, pc.stride, pc.padding, include_pad),
              tol_of(dt), label("avg_pool2d_backward", dt, pc.x, pc.kernel));
        }
      }
    }
  };
  // Adaptive windows: dividing and not dividing the input, global, identity and larger than the
  // input (overlapping windows).
  static const std::pair<Shape, Shape> kAdaptiveCases[] = {{{2, 3, 8, 6}, {4, 3}},
                                                           {{2, 3, 7, 5}, {3, 2}},
                                                           {{1, 4, 5, 5}, {1, 1}},
                                                           {{1, 2, 4, 3}, {4, 3}},
                                                           {{1, 2, 4, 3}, {9, 7}}};
  c["adaptive_avg_pool2d"] = [=](const Device& d) {
    std::uint64_t seed = 4700;
    for (ScalarType dt : kConvDtypes) {
      for (const auto& [xs, out] : kAdaptiveCases) {
        const Tensor x = rand_input(xs, dt, seed++);
        expect_close(ops::adaptive_avg_pool2d(x.to(d), out), ops::adaptive_avg_pool2d(x, out),
                     tol_of(dt), label("adaptive_avg_pool2d", dt, xs, out));
      }
    }
  };
  c["adaptive_avg_pool2d_backward"] = [=](const Device& d) {
    std::uint64_t seed = 4800;
    for (ScalarType dt : kConvDtypes) {
      for (const auto& [xs, out] : kAdaptiveCases) {
        const Tensor x = rand_input(xs, dt, seed++);
        const Tensor g = rand_input({xs[0], xs[1], out[0], out[1]}, dt, seed++);
        expect_close(ops::adaptive_avg_pool2d_backward(g.to(d), x.to(d)),
                     ops::adaptive_avg_pool2d_backward(g, x), tol_of(dt),
                     label("adaptive_avg_pool2d_backward", dt, xs, out));
      }
    }
  };
  // Batch norm: 4-D, 2-D and 3-D inputs; training with running statistics (updated in place on
  // both), training without them, evaluation; with and without weight and bias.
  static const Shape kBnShapes[] = {{4, 3, 5, 6}, {5, 4}, {2, 3, 7}};
  c["batch_norm"] = [=](const Device& d) {
    std::uint64_t seed = 4900;
    for (ScalarType dt : kConvDtypes) {
      for (const Shape& xs : kBnShapes) {
        for (int mode = 0; mode < 3; ++mode) {  // 0 training, 1 training without stats, 2 eval
          const std::int64_t ch = xs[1];
          const Tensor x = rand_input(xs, dt, seed++);
          const Tensor w = mode == 1 ? Tensor() : rand_input({ch}, dt, seed++);
          const Tensor b = mode == 1 ? Tensor() : rand_input({ch}, dt, seed++);
          Tensor rmh = mode == 1 ? Tensor() : rand_input({ch}, ScalarType::Float32, seed++);
          Tensor rvh = mode == 1
                           ? Tensor()
                           : ops::add(ops::abs(rand_input({ch}, ScalarType::Float32, seed++)), 0.5);
          Tensor rmd = to_dev(rmh, d);
          Tensor rvd = to_dev(rvh, d);
          const bool training = mode != 2;
          const Tensor yh = ops::batch_norm(x, rmh, rvh, w, b, training, 0.1, 1e-5);
          const Tensor yd =
              ops::batch_norm(x.to(d), rmd, rvd, to_dev(w, d), to_dev(b, d), training, 0.1, 1e-5);
          const std::string what = label("batch_norm mode " + std::to_string(mode), dt, xs);
          const Tol t{tol_of(dt).atol * 10, tol_of(dt).rtol * 10};
          expect_close(yd, yh, t, what);
          if (rmh.defined()) {
            expect_close(rmd, rmh, tol_of(ScalarType::Float32), what + " running_mean");
            expect_close(rvd, rvh, tol_of(ScalarType::Float32), what + " running_var");
          }
        }
      }
    }
  };
  c["batch_norm_backward"] = [=](const Device& d) {
    static const auto fwd =
        tb::dispatch::Dispatcher::singleton().typed<tb::ops::sig::BatchNorm>("batch_norm");
    std::uint64_t seed = 5000;
    for (ScalarType dt : {ScalarType::Float32, ScalarType::Float64}) {
      for (const Shape& xs : kBnShapes) {
        for (const bool training : {true, false}) {
          for (const bool with_wb : {true, false}) {
            const std::int64_t ch = xs[1];
            const Tensor x = rand_input(xs, dt, seed++);
            const Tensor w = with_wb ? rand_input({ch}, dt, seed++) : Tensor();
            const Tensor g = rand_input(xs, dt, seed++);
            // The CPU forward's statistics, so only the backward is compared.
            const auto [y, mean, invstd] =
                fwd.call(x, w, Tensor(), Tensor(), Tensor(), true, 0.1, 1e-5);
            const auto [dxh, dwh, dbh] =
                ops::batch_norm_backward(g, x, w, mean, invstd, training, with_wb);
            const auto [dxd, dwd, dbd] = ops::batch_norm_backward(
                g.to(d), x.to(d), to_dev(w, d), mean.to(d), invstd.to(d), training, with_wb);
            const Tol t{tol_of(dt).atol * 10, tol_of(dt).rtol * 10};
            const std::string what = label("batch_norm_backward", dt, xs);
            expect_close(dxd, dxh, t, what + " dx");
            ASSERT_EQ(dwd.defined(), dwh.defined()) << what;
            if (dwh.defined()) {
              expect_close(dwd, dwh, t, what + " dweight");
              expect_close(dbd, dbh, t, what + " dbias");
            }
          }
        }
      }
    }
  };
  // Attention shapes: grouped-query heads, T != S, more rows than a block's warps and a tile's
  // keys, both head-size configurations of the CUDA kernels (<= 64, <= 128), D != E, no keys.
  struct AttnShape {
    std::int64_t b, h, hkv, t, s, dh, e;
    bool causal;
  };
  static const AttnShape kAttnShapes[] = {
      {2, 4, 2, 5, 5, 8, 8, true},       {1, 2, 2, 37, 70, 16, 24, false},
      {1, 3, 1, 70, 45, 32, 32, true},   {1, 2, 1, 9, 9, 100, 72, true},
      {2, 2, 2, 33, 33, 64, 128, false}, {1, 1, 1, 3, 0, 4, 4, false},
      {1, 2, 1, 5, 40, 16, 16, true},    {1, 2, 2, 0, 6, 8, 8, true},
      {1, 1, 1, 7, 7, 65, 65, true}};
  // Runs f(q, k, v, g, scale, causal, label) on host inputs for every dtype and shape; q as the
  // transformer passes it ([B, T, H, D] memory seen as [B, H, T, D]).
  using AttnCheck = std::function<void(const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                                       double, bool, const std::string&, ScalarType)>;
  // With `nan`, one query element of one shape is NaN (forward: its row is NaN everywhere; the
  // backward's 0·NaN spread is left unspecified).
  const auto for_attention_inputs = [](const AttnCheck& f, bool nan) {
    std::uint64_t seed = 2900;
    for (ScalarType dt : kFloats) {
      for (const AttnShape& sh : kAttnShapes) {
        Tensor q = rand_input({sh.b, sh.t, sh.h, sh.dh}, dt, seed++).transpose(1, 2);
        // k and v strided as the transformer passes them for every other shape.
        const bool strided = (seed % 2) == 0;
        const Tensor k = strided
                             ? rand_input({sh.b, sh.s, sh.hkv, sh.dh}, dt, seed++).transpose(1, 2)
                             : rand_input({sh.b, sh.hkv, sh.s, sh.dh}, dt, seed++);
        const Tensor v = strided
                             ? rand_input({sh.b, sh.s, sh.hkv, sh.e}, dt, seed++).transpose(1, 2)
                             : rand_input({sh.b, sh.hkv, sh.s, sh.e}, dt, seed++);
        if (nan && sh.t == 9) {
          // A NaN in one query element: its row's outputs are NaN on every device.
          const Tensor first = ops::eq(ops::arange(q.numel()).reshape(tb::core::IntList(q.sizes())),
                                       ops::scalar_tensor(0, ScalarType::Int64));
          q = ops::masked_fill(q, first, std::nan(""));
        }
        const Tensor g = rand_input({sh.b, sh.h, sh.t, sh.e}, dt, seed++);
        f(q, k, v, g, 1.0 / std::sqrt(static_cast<double>(sh.dh)), sh.causal,
          label(std::string("attention") + (sh.causal ? " causal" : ""), dt,
                {sh.b, sh.h, sh.t, sh.dh}, {sh.hkv, sh.s, sh.e}),
          dt);
      }
    }
  };
  c["scaled_dot_product_attention"] = [for_attention_inputs](const Device& d) {
    for_attention_inputs(
        [&](const Tensor& q, const Tensor& k, const Tensor& v, const Tensor&, double scale,
            bool causal, const std::string& what, ScalarType dt) {
          const auto [oh, lh] = ops::scaled_dot_product_attention_forward(q, k, v, scale, causal);
          const auto [od, ld] =
              ops::scaled_dot_product_attention_forward(q.to(d), k.to(d), v.to(d), scale, causal);
          expect_close(od, oh, tol_of(dt), what + " out");
          expect_close(ld, lh, tol_of(lh.dtype()), what + " logsumexp");
        },
        true);
  };
  c["scaled_dot_product_attention_backward"] = [for_attention_inputs](const Device& d) {
    for_attention_inputs(
        [&](const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g, double scale,
            bool causal, const std::string& what, ScalarType dt) {
          // The forward's out and log-sum-exp from the CPU, so only the backward is compared.
          const auto [o, l] = ops::scaled_dot_product_attention_forward(q, k, v, scale, causal);
          const auto [dqh, dkh, dvh] =
              ops::scaled_dot_product_attention_backward(g, q, k, v, o, l, scale, causal);
          const auto [dqd, dkd, dvd] = ops::scaled_dot_product_attention_backward(
              g.to(d), q.to(d), k.to(d), v.to(d), o.to(d), l.to(d), scale, causal);
          // Gradients sum over up to S (dq) or T·H/Hkv (dk, dv) products.
          const Tol tol{tol_of(dt).atol * 20, tol_of(dt).rtol * 20};
          expect_close(dqd, dqh, tol, what + " dq");
          expect_close(dkd, dkh, tol, what + " dk");
          expect_close(dvd, dvh, tol, what + " dv");
        },
        false);
  };
  // Shapes crossing the multi-tensor kernels' chunk (65536), list (32 tensors) and, on CUDA,
  // launch (320 chunks) limits, plus empty tensors. (openreg guards its whole device memory on
  // every op, so the 21M-element tensor stays off it.)
  const auto lerp_shapes = [](const Device& d) {
    std::vector<Shape> shapes = {{7}, {70000}, {3, 5}, {0}, {131073}};
    for (int i = 0; i < 40; ++i)
      shapes.push_back({(i % 7) + 1, 3});
    if (d.type() == DeviceType::CUDA) shapes.push_back({21000000});
    return shapes;
  };
  c["foreach_lerp_"] = [lerp_shapes](const Device& d) {
    std::uint64_t seed = 2600;
    for (ScalarType dt : kFloats) {
      // Small and large weights take the two sides of the formula; a tensor weight (SWA's
      // 1/(n+1)) on the device and on the host.
      for (int variant = 0; variant < 4; ++variant) {
        std::vector<Tensor> hs, he, ds, de;
        for (const Shape& s : lerp_shapes(d)) {
          if (s[0] > 1000000 && (dt != ScalarType::Float32 || variant > 0)) continue;
          hs.push_back(rand_input(s, dt, seed++));
          he.push_back(rand_input(s, dt, seed++));
          ds.push_back(hs.back().to(d));
          de.push_back(he.back().to(d));
        }
        const ScalarType wt = dt == ScalarType::Float64 ? dt : ScalarType::Float32;
        if (variant == 0) {
          ops::foreach_lerp_(hs, he, 0.001);
          ops::foreach_lerp_(ds, de, 0.001);
        } else if (variant == 1) {
          ops::foreach_lerp_(hs, he, 0.95);
          ops::foreach_lerp_(ds, de, 0.95);
        } else {
          const Tensor w = ops::scalar_tensor(variant == 2 ? 0.25 : 0.5, wt);
          ops::foreach_lerp_(hs, he, w);
          ops::foreach_lerp_(ds, de, variant == 2 ? w.to(d) : w);
        }
        for (std::size_t i = 0; i < hs.size(); ++i) {
          expect_close(ds[i], hs[i], tol_of(dt),
                       label("foreach_lerp_ variant " + std::to_string(variant), dt,
                             Shape(hs[i].sizes().begin(), hs[i].sizes().end())));
        }
      }
    }
  };
  c["muon_momentum_"] = [lerp_shapes](const Device& d) {
    std::uint64_t seed = 2700;
    for (ScalarType dt : kFloats) {
      for (const bool nesterov : {false, true}) {
        std::vector<Tensor> hb, hg, db, dg;
        for (const Shape& s : lerp_shapes(d)) {
          if (s[0] > 1000000) continue;
          hb.push_back(rand_input(s, dt, seed++));
          hg.push_back(rand_input(s, dt, seed++));
          db.push_back(hb.back().to(d));
          dg.push_back(hg.back().to(d));
        }
        const auto hu = ops::muon_momentum_(hb, hg, 0.95, nesterov);
        const auto du = ops::muon_momentum_(db, dg, 0.95, nesterov);
        for (std::size_t i = 0; i < hb.size(); ++i) {
          const Shape s(hb[i].sizes().begin(), hb[i].sizes().end());
          expect_close(db[i], hb[i], tol_of(dt), label("muon_momentum_ buffer", dt, s));
          expect_close(du[i], hu[i], tol_of(dt), label("muon_momentum_ update", dt, s));
        }
      }
    }
  };
  return c;
}

class BackendParity : public testing::TestWithParam<std::string> {};

TEST_P(BackendParity, EveryRegisteredOpMatchesTheCpuKernel) {
  tb::core::load_backends();
  const Device d = Device::parse(GetParam());
  const std::string why = tb::core::device_unavailable_reason(d);
  if (!why.empty()) GTEST_SKIP() << GetParam() << " is not usable here: " << why;
  const auto key = tb::dispatch::backend_key(d.type());
  const auto all = cases();
  int ran = 0;
  auto& disp = tb::dispatch::Dispatcher::singleton();
  // openreg also runs the cases of the ops it reaches through its CPU fallback (all but the
  // deny-list's): every case runs in every test run, not only where a GPU is present.
  std::set<std::string> denied;
  if (d.type() == DeviceType::PrivateUse1) {
    for (const auto& n : tb::openreg::fallback_deny_list())
      denied.insert(n);
  }
  for (const auto& name : disp.op_names()) {
    const bool native = disp.find(name).entry().has_kernel(key);
    const auto it = all.find(name);
    if (native) {
      ASSERT_NE(it, all.end()) << "op '" << name << "' has a kernel for " << d
                               << " but no parity case: add one to cases()";
    } else if (d.type() != DeviceType::PrivateUse1 || it == all.end() || denied.count(name) > 0) {
      continue;
    }
    SCOPED_TRACE(name + " on " + d.str() + (native ? "" : " (CPU fallback)"));
    const auto t0 = std::chrono::steady_clock::now();
    it->second(d);
    const double secs =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (secs > 2.0) std::printf("[ slow case ] %s took %.1f s\n", name.c_str(), secs);
    ++ran;
  }
  EXPECT_GE(ran, 2) << "copy_ and fill_ at least";
}

INSTANTIATE_TEST_SUITE_P(Devices, BackendParity, testing::Values("openreg:0", "cuda:0"),
                         [](const testing::TestParamInfo<std::string>& i) {
                           return i.param == "openreg:0" ? std::string("openreg")
                                                         : std::string("cuda");
                         });

}  // namespace
