// Backend parity: every op with a kernel of its own on a non-CPU device (openreg always; CUDA
// when a GPU is present) runs against the CPU kernel on random inputs — several shapes, layouts
// and dtypes — with per-dtype tolerances. A kernel registered without a case here fails the test,
// so a new kernel cannot land untested.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "engine/backends/cuda/cuda_status.h"
#include "engine/core/allocator.h"
#include "engine/dispatch/dispatcher.h"
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
      {"gelu", ops::gelu, false}};
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
  for (const auto& name : disp.op_names()) {
    if (!disp.find(name).entry().has_kernel(key)) continue;
    const auto it = all.find(name);
    ASSERT_NE(it, all.end()) << "op '" << name << "' has a kernel for " << d
                             << " but no parity case: add one to cases()";
    SCOPED_TRACE(name + " on " + d.str());
    it->second(d);
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
