// Behavioural tests of the CPU tensor ops (engine/ops/ops.h): elementwise ops with broadcasting
// and dtype promotion, copies and casts, reductions, linear algebra, softmax, indexing, random
// ops and views through data. References are computed here in float64 with plain loops.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <functional>
#include <limits>
#include <nlohmann/json.hpp>
#include <numbers>
#include <random>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include "engine/core/error.h"
#include "engine/core/tensor.h"
#include "engine/core/thread_pool.h"
#include "engine/ops/ops.h"
#include "engine/rng/cpu_generator.h"
#include "engine/rng/cpu_sampling.h"
#include "engine/rng/generator.h"

namespace tb::ops {
namespace {

using core::BFloat16;
using core::DeviceType;
using core::from_vector;
using core::Half;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

// ---- helpers ------------------------------------------------------------------------------------

// Runs fn, expecting exactly an `Exc` whose message contains every fragment.
template <typename Exc, typename Fn>
void expect_error(Fn&& fn, std::initializer_list<std::string_view> fragments) {
  try {
    fn();
  } catch (const Exc& e) {
    const std::string msg = e.what();
    for (std::string_view f : fragments) {
      EXPECT_NE(msg.find(f), std::string::npos) << "message: " << msg << "\nmissing: " << f;
    }
    return;
  } catch (const std::exception& e) {
    ADD_FAILURE() << "wrong exception type, message: " << e.what();
    return;
  }
  ADD_FAILURE() << "expected an exception";
}

#define EXPECT_ERROR(Exc, stmt, ...)                         \
  do {                                                       \
    SCOPED_TRACE(#stmt);                                     \
    expect_error<Exc>([&] { (void)(stmt); }, {__VA_ARGS__}); \
  } while (false)

std::vector<std::int64_t> shape_of(const Tensor& t) {
  return t.sizes().vec();
}

std::vector<double> vals(const Tensor& t) {
  return t.to_vector<double>();
}

// A float64 tensor of `v` with `shape`, converted to `dtype`.
Tensor make(const std::vector<double>& v, const std::vector<std::int64_t>& shape,
            ScalarType dtype = ScalarType::Float32) {
  return from_vector<double>(v, IntList(shape)).to(dtype);
}

std::vector<double> uniform_values(std::size_t n, std::uint32_t seed, double lo = -1.0,
                                   double hi = 1.0) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<double> dist(lo, hi);
  std::vector<double> v(n);
  for (auto& x : v)
    x = dist(gen);
  return v;
}

// Multiples of 1/32 in [-2, 2]: exact in float16 and bfloat16, and every product and partial sum
// of the matrix tests below is exact in float32, so results do not depend on summation order.
std::vector<double> dyadic_values(std::size_t n, std::uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_int_distribution<int> dist(-64, 64);
  std::vector<double> v(n);
  for (auto& x : v)
    x = dist(gen) / 32.0;
  return v;
}

std::size_t numel_of(const std::vector<std::int64_t>& shape) {
  std::size_t n = 1;
  for (auto s : shape)
    n *= static_cast<std::size_t>(s);
  return n;
}

// Value of a floating dtype closest to v (via float for the 16-bit types, as the kernels do).
double round_to(double v, ScalarType dt) {
  switch (dt) {
    case ScalarType::Float64:
      return v;
    case ScalarType::Float32:
      return static_cast<float>(v);
    case ScalarType::Float16:
      return static_cast<float>(Half(static_cast<float>(v)));
    case ScalarType::BFloat16:
      return static_cast<float>(BFloat16(static_cast<float>(v)));
    default:
      ADD_FAILURE() << "round_to: not a float dtype";
      return v;
  }
}

// |got - want| <= abs_tol + rel_tol * |want|, NaN matches NaN, infinities match exactly.
void expect_close(const std::vector<double>& got, const std::vector<double>& want, double rel_tol,
                  double abs_tol, const std::string& what = "") {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (std::size_t i = 0; i < got.size(); ++i) {
    if (std::isnan(want[i])) {
      EXPECT_TRUE(std::isnan(got[i])) << what << " at " << i << ": got " << got[i];
    } else if (std::isinf(want[i])) {
      EXPECT_EQ(got[i], want[i]) << what << " at " << i;
    } else {
      EXPECT_NEAR(got[i], want[i], abs_tol + rel_tol * std::abs(want[i]))
          << what << " at " << i << " (want " << want[i] << ")";
    }
  }
}

void expect_exact(const std::vector<double>& got, const std::vector<double>& want,
                  const std::string& what = "") {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (std::size_t i = 0; i < got.size(); ++i) {
    if (std::isnan(want[i])) {
      EXPECT_TRUE(std::isnan(got[i])) << what << " at " << i << ": got " << got[i];
    } else {
      EXPECT_EQ(got[i], want[i]) << what << " at " << i;
    }
  }
}

// ---- elementwise binary: broadcasting ----------------------------------------------------------

TEST(OpsBinary, BroadcastColumnPlusRow) {
  const Tensor a = make({1, 2, 3}, {3, 1});
  const Tensor b = make({10, 20, 30, 40}, {1, 4});
  const Tensor s = add(a, b);
  EXPECT_EQ(shape_of(s), (std::vector<std::int64_t>{3, 4}));
  EXPECT_EQ(s.dtype(), ScalarType::Float32);
  EXPECT_TRUE(s.is_contiguous());
  std::vector<double> want;
  for (int i = 1; i <= 3; ++i)
    for (int j = 1; j <= 4; ++j)
      want.push_back(i + 10.0 * j);
  expect_exact(vals(s), want);

  // alpha scales the second operand; sub subtracts alpha * b.
  std::vector<double> want_alpha;
  std::vector<double> want_sub;
  for (int i = 1; i <= 3; ++i) {
    for (int j = 1; j <= 4; ++j) {
      want_alpha.push_back(i + 2.5 * 10.0 * j);
      want_sub.push_back(i - 3.0 * 10.0 * j);
    }
  }
  expect_exact(vals(add(a, b, 2.5)), want_alpha);
  expect_exact(vals(sub(a, b, 3)), want_sub);

  // Both operand orders broadcast the same way.
  std::vector<double> want_mul;
  for (int i = 1; i <= 3; ++i)
    for (int j = 1; j <= 4; ++j)
      want_mul.push_back(i * 10.0 * j);
  expect_exact(vals(mul(b, a)), want_mul);
  EXPECT_EQ(shape_of(mul(b, a)), (std::vector<std::int64_t>{3, 4}));
}

TEST(OpsBinary, ZeroDimScalarWithMatrix) {
  const Tensor s = scalar_tensor(4.0, ScalarType::Float32);
  EXPECT_EQ(s.dim(), 0);
  const Tensor m = make({1, 2, 3, 4, 5, 6}, {2, 3});
  expect_exact(vals(sub(s, m)), {3, 2, 1, 0, -1, -2});
  expect_exact(vals(div(m, s)), {0.25, 0.5, 0.75, 1, 1.25, 1.5});
  EXPECT_EQ(shape_of(sub(s, m)), (std::vector<std::int64_t>{2, 3}));
  // 0-d with 0-d stays 0-d.
  const Tensor r = mul(s, scalar_tensor(2.5, ScalarType::Float32));
  EXPECT_EQ(r.dim(), 0);
  EXPECT_EQ(r.item(), 10.0);
}

TEST(OpsBinary, NonContiguousInputs) {
  // x = A^T (A: [4, 6]), y = every other column of B ([6, 8]), z = c ([4]) expanded to [6, 4].
  std::vector<double> av(24), bv(48), cv(4);
  for (int i = 0; i < 24; ++i)
    av[i] = i + 0.5;
  for (int i = 0; i < 48; ++i)
    bv[i] = 100.0 - 2 * i;
  for (int i = 0; i < 4; ++i)
    cv[i] = (i + 1) * 0.25;
  const Tensor A = make(av, {4, 6});
  const Tensor B = make(bv, {6, 8});
  const Tensor x = A.t();
  const Tensor y = B.slice(1, 0, 8, 2);
  const Tensor z = make(cv, {4}).expand({6, 4});
  ASSERT_FALSE(x.is_contiguous());
  ASSERT_FALSE(y.is_contiguous());
  ASSERT_EQ(z.stride(0), 0);
  std::vector<double> want_add, want_mul, want_sub;
  for (int i = 0; i < 6; ++i) {
    for (int j = 0; j < 4; ++j) {
      const double xv = av[j * 6 + i];
      const double yv = bv[i * 8 + 2 * j];
      want_add.push_back(xv + yv);
      want_mul.push_back(xv * cv[j]);
      want_sub.push_back(yv - xv);
    }
  }
  expect_exact(vals(add(x, y)), want_add, "x + y");
  expect_exact(vals(mul(x, z)), want_mul, "x * z");
  expect_exact(vals(sub(y, x)), want_sub, "y - x");
  const Tensor both = add(x, z);
  EXPECT_TRUE(both.is_contiguous());

  // A permuted 3-D tensor (no dims coalesce) plus a broadcast row.
  std::vector<double> pv(24);
  for (int i = 0; i < 24; ++i)
    pv[i] = i;
  const Tensor P = make(pv, {2, 3, 4}).permute({2, 0, 1});  // [4, 2, 3]
  const Tensor row = make({100, 200, 300}, {3});
  std::vector<double> want_p;
  for (int a = 0; a < 4; ++a)
    for (int b = 0; b < 2; ++b)
      for (int c = 0; c < 3; ++c)
        want_p.push_back(pv[b * 12 + c * 4 + a] + 100.0 * (c + 1));
  expect_exact(vals(add(P, row)), want_p, "permuted + row");

  // A narrowed view (non-zero storage offset).
  const Tensor n = A.narrow(0, 1, 2).narrow(1, 2, 3);  // rows 1..2, cols 2..4
  std::vector<double> want_n;
  for (int i = 1; i < 3; ++i)
    for (int j = 2; j < 5; ++j)
      want_n.push_back(av[i * 6 + j] * 2);
  expect_exact(vals(mul(n, scalar_tensor(2.0, ScalarType::Float32))), want_n, "narrow * 2");
}

TEST(OpsBinary, IncompatibleShapes) {
  EXPECT_ERROR(ValueError, add(zeros({2, 3}), zeros({3, 2})), "[add] shapes [2, 3] and [3, 2]",
               "cannot be broadcast");
  EXPECT_ERROR(ValueError, mul(zeros({4}), zeros({5})), "[mul]", "cannot be broadcast");
}

// ---- dtype promotion ----------------------------------------------------------------------------

TEST(OpsPromotion, TensorTensor) {
  const Tensor i64 = make({1, 2, 3}, {3}, ScalarType::Int64);
  const Tensor f32 = make({0.5, 0.25, 0.125}, {3}, ScalarType::Float32);
  const Tensor r1 = add(i64, f32);
  EXPECT_EQ(r1.dtype(), ScalarType::Float32);
  expect_exact(vals(r1), {1.5, 2.25, 3.125});

  // PyTorch: a 0-d tensor of a higher category decides the dtype (int32 + 0-d float64 -> float64).
  const Tensor i32 = make({1, 2, 3}, {3}, ScalarType::Int32);
  const Tensor d0 = scalar_tensor(0.1, ScalarType::Float64);
  const Tensor r2 = add(i32, d0);
  EXPECT_EQ(r2.dtype(), ScalarType::Float64);
  expect_exact(vals(r2), {1 + 0.1, 2 + 0.1, 3 + 0.1});
  // Same category: the dimensioned tensor wins.
  EXPECT_EQ(add(i32, scalar_tensor(5, ScalarType::Int64)).dtype(), ScalarType::Int32);
  EXPECT_EQ(add(f32, scalar_tensor(5.0, ScalarType::Float64)).dtype(), ScalarType::Float32);
  EXPECT_EQ(result_type(make({1}, {1}, ScalarType::UInt8), scalar_tensor(1, ScalarType::Int8)),
            ScalarType::UInt8);
  // Both 0-d: ordinary promotion.
  EXPECT_EQ(
      add(scalar_tensor(1, ScalarType::Int64), scalar_tensor(1.0, ScalarType::Float32)).dtype(),
      ScalarType::Float32);
  EXPECT_EQ(result_type(scalar_tensor(1, ScalarType::Int32), scalar_tensor(1, ScalarType::Int64)),
            ScalarType::Int64);

  // uint8 + int8 -> int16 (no wrap-around).
  const Tensor u8 = make({200, 255, 0}, {3}, ScalarType::UInt8);
  const Tensor s8 = make({-100, 1, -128}, {3}, ScalarType::Int8);
  const Tensor r3 = add(u8, s8);
  EXPECT_EQ(r3.dtype(), ScalarType::Int16);
  expect_exact(vals(r3), {100, 256, -128});

  // bool + bool stays bool (logical or); bool * bool is logical and.
  const Tensor b1 = make({1, 1, 0, 0}, {4}, ScalarType::Bool);
  const Tensor b2 = make({1, 0, 1, 0}, {4}, ScalarType::Bool);
  EXPECT_EQ(add(b1, b2).dtype(), ScalarType::Bool);
  expect_exact(vals(add(b1, b2)), {1, 1, 1, 0});
  expect_exact(vals(mul(b1, b2)), {1, 0, 0, 0});
  EXPECT_ERROR(TypeError, sub(b1, b2), "[sub] subtraction of bool tensors is not supported");
  // bool with an integer tensor gives the integer dtype.
  EXPECT_EQ(add(b1, make({1, 2, 3, 4}, {4}, ScalarType::Int32)).dtype(), ScalarType::Int32);

  // float16 + bfloat16 -> float32.
  const Tensor h = make({1.5, -2}, {2}, ScalarType::Float16);
  const Tensor bf = make({0.25, 3}, {2}, ScalarType::BFloat16);
  const Tensor r4 = add(h, bf);
  EXPECT_EQ(r4.dtype(), ScalarType::Float32);
  expect_exact(vals(r4), {1.75, 1});
  EXPECT_EQ(add(h, h).dtype(), ScalarType::Float16);
  EXPECT_EQ(mul(h, make({1, 2}, {2}, ScalarType::Int64)).dtype(), ScalarType::Float16);
  EXPECT_EQ(add(f32, make({1, 2, 3}, {3}, ScalarType::Float64)).dtype(), ScalarType::Float64);
}

TEST(OpsPromotion, TensorScalar) {
  const Tensor i64 = make({1, 2, 3}, {3}, ScalarType::Int64);
  const Tensor r1 = add(i64, 0.5);
  EXPECT_EQ(r1.dtype(), ScalarType::Float32);
  expect_exact(vals(r1), {1.5, 2.5, 3.5});
  const Tensor i32 = make({1, 2, 3}, {3}, ScalarType::Int32);
  EXPECT_EQ(mul(i32, 2.5).dtype(), ScalarType::Float32);
  expect_exact(vals(mul(i32, 2.5)), {2.5, 5, 7.5});
  // An int scalar keeps the tensor's integer dtype.
  EXPECT_EQ(add(i32, 7).dtype(), ScalarType::Int32);
  expect_exact(vals(add(i32, 7)), {8, 9, 10});
  EXPECT_EQ(result_type(make({1}, {1}, ScalarType::Int8), Scalar(1000)), ScalarType::Int8);

  // float16 tensor with a float scalar stays float16.
  const Tensor h = make({1, 2, -3}, {3}, ScalarType::Float16);
  const Tensor r2 = add(h, 0.5);
  EXPECT_EQ(r2.dtype(), ScalarType::Float16);
  expect_exact(vals(r2), {1.5, 2.5, -2.5});
  EXPECT_EQ(mul(make({1}, {1}, ScalarType::BFloat16), 3.0).dtype(), ScalarType::BFloat16);

  // bool tensor with an int scalar -> int64; with a bool scalar stays bool.
  const Tensor b = make({1, 0}, {2}, ScalarType::Bool);
  EXPECT_EQ(add(b, 3).dtype(), ScalarType::Int64);
  expect_exact(vals(add(b, 3)), {4, 3});
  EXPECT_EQ(result_type(b, Scalar(true)), ScalarType::Bool);
  EXPECT_EQ(result_type(b, Scalar(2.0)), ScalarType::Float32);

  // A float alpha is refused for integer inputs.
  EXPECT_ERROR(TypeError, add(i64, i64, 2.5), "[add] alpha 2.5 must be an integer");
  EXPECT_ERROR(TypeError, sub(i64, i64, 0.5), "[sub] alpha 0.5 must be an integer");
  expect_exact(vals(sub(i64, i64, 2)), {-1, -2, -3});
}

TEST(OpsBinary, DivisionOfIntegersIsTrueDivision) {
  const Tensor a = make({7, -7, 1, 0, 3}, {5}, ScalarType::Int64);
  const Tensor b = make({2, 2, 3, 5, 0}, {5}, ScalarType::Int64);
  const Tensor q = div(a, b);
  EXPECT_EQ(q.dtype(), ScalarType::Float32);
  expect_exact(vals(q), {3.5, -3.5, static_cast<float>(1.0 / 3.0), 0, kInf});
  const Tensor q2 = div(make({1, 2}, {2}, ScalarType::Int32), 4);
  EXPECT_EQ(q2.dtype(), ScalarType::Float32);
  expect_exact(vals(q2), {0.25, 0.5});
  EXPECT_EQ(div(make({1}, {1}, ScalarType::Float64), make({2}, {1}, ScalarType::Int32)).dtype(),
            ScalarType::Float64);
}

TEST(OpsBinary, Pow) {
  const Tensor base = make({2, 3, -2, 0, 5}, {5}, ScalarType::Int64);
  const Tensor ex = make({10, 3, 3, 0, 1}, {5}, ScalarType::Int64);
  const Tensor p = pow(base, ex);
  EXPECT_EQ(p.dtype(), ScalarType::Int64);
  expect_exact(vals(p), {1024, 27, -8, 1, 5});
  // 1 and -1 to negative powers are fine; anything else is an error.
  expect_exact(vals(pow(make({1, -1, -1}, {3}, ScalarType::Int32),
                        make({-5, -3, -2}, {3}, ScalarType::Int32))),
               {1, -1, 1});
  EXPECT_ERROR(ValueError,
               pow(make({2, 3}, {2}, ScalarType::Int64), make({-1, 2}, {2}, ScalarType::Int64)),
               "[pow] integers to negative integer powers are not allowed");
  EXPECT_ERROR(ValueError, pow(make({2, 3}, {2}, ScalarType::Int32), -2),
               "[pow] integers to negative integer powers are not allowed");
  // The error also surfaces from inside a parallel loop (512 rows that do not coalesce).
  {
    core::ScopedNumThreads threads(2);
    std::vector<double> big(1 << 17, 2.0);
    std::vector<double> exps(1 << 17, 1.0);
    exps[100000] = -1.0;
    EXPECT_ERROR(ValueError,
                 pow(make(big, {512, 256}, ScalarType::Int64),
                     make(exps, {256, 512}, ScalarType::Int64).t()),
                 "[pow] integers to negative integer powers");
  }
  // Integer tensor with a float exponent computes in float32.
  const Tensor r = pow(make({1, 2, 4}, {3}, ScalarType::Int32), 0.5);
  EXPECT_EQ(r.dtype(), ScalarType::Float32);
  expect_close(vals(r), {1, std::sqrt(2.0), 2}, 1e-7, 0);
  // Float pow vs std::pow.
  const std::vector<double> xb = {2, 9, 0.5, 10, -8, 0};
  const std::vector<double> xe = {3, 0.5, -2, -1.5, 1.0 / 3.0, 0};
  std::vector<double> want;
  const auto fb = vals(make(xb, {6}));
  const auto fe = vals(make(xe, {6}));
  for (std::size_t i = 0; i < xb.size(); ++i)
    want.push_back(std::pow(fb[i], fe[i]));
  expect_close(vals(pow(make(xb, {6}), make(xe, {6}))), want, 2e-7, 0, "float pow");
}

TEST(OpsBinary, MaximumMinimumPropagateNaN) {
  const Tensor a = make({1, kNaN, 3, -0.5, kNaN}, {5});
  const Tensor b = make({2, 0, kNaN, -1, kNaN}, {5});
  expect_exact(vals(maximum(a, b)), {2, kNaN, kNaN, -0.5, kNaN});
  expect_exact(vals(minimum(a, b)), {1, kNaN, kNaN, -1, kNaN});
  expect_exact(vals(maximum(b, a)), {2, kNaN, kNaN, -0.5, kNaN});
  const Tensor h =
      maximum(make({1, kNaN}, {2}, ScalarType::Float16), make({3, 1}, {2}, ScalarType::Float16));
  EXPECT_EQ(h.dtype(), ScalarType::Float16);
  expect_exact(vals(h), {3, kNaN});
  const Tensor i =
      maximum(make({1, 5, -3}, {3}, ScalarType::Int32), make({3, 2, -4}, {3}, ScalarType::Int32));
  EXPECT_EQ(i.dtype(), ScalarType::Int32);
  expect_exact(vals(i), {3, 5, -3});
  expect_exact(
      vals(minimum(make({1, 5, -3}, {3}, ScalarType::Int32), make({2}, {1}, ScalarType::Int32))),
      {1, 2, -3});
}

TEST(OpsBinary, ComparisonsGiveBool) {
  const Tensor i = make({1, 2, 3}, {3}, ScalarType::Int32);
  const Tensor f = make({1.5, 1.5, 3}, {3}, ScalarType::Float32);
  const Tensor lt_r = lt(i, f);
  EXPECT_EQ(lt_r.dtype(), ScalarType::Bool);
  expect_exact(vals(lt_r), {1, 0, 0});
  expect_exact(vals(le(i, f)), {1, 0, 1});
  expect_exact(vals(gt(i, f)), {0, 1, 0});
  expect_exact(vals(ge(i, f)), {0, 1, 1});
  expect_exact(vals(eq(i, f)), {0, 0, 1});
  expect_exact(vals(ne(i, f)), {1, 1, 0});
  // NaN: only ne is true.
  const Tensor n = make({kNaN}, {1});
  expect_exact(vals(eq(n, n)), {0});
  expect_exact(vals(ne(n, n)), {1});
  expect_exact(vals(lt(n, n)), {0});
  expect_exact(vals(ge(n, n)), {0});
  // Broadcast [3,1] vs [1,3].
  const Tensor c = ge(make({0, 1, 2}, {3, 1}, ScalarType::Int64), make({0, 1, 2}, {1, 3}));
  EXPECT_EQ(c.dtype(), ScalarType::Bool);
  EXPECT_EQ(shape_of(c), (std::vector<std::int64_t>{3, 3}));
  expect_exact(vals(c), {1, 0, 0, 1, 1, 0, 1, 1, 1});
  // Large int64 values compare exactly (no detour through float).
  const Tensor big = from_vector<std::int64_t>({(std::int64_t{1} << 53) + 1});
  const Tensor big2 = from_vector<std::int64_t>({std::int64_t{1} << 53});
  expect_exact(vals(gt(big, big2)), {1});
  expect_exact(vals(eq(big, big2)), {0});
}

// ---- unary ops ----------------------------------------------------------------------------------

struct UnaryCase {
  const char* name;
  Tensor (*op)(const Tensor&);
  double (*ref)(double);
  double lo;
  double hi;
};

double ref_sigmoid(double x) {
  return 1.0 / (1.0 + std::exp(-x));
}

const UnaryCase kUnaryCases[] = {
    {"exp", exp, [](double x) { return std::exp(x); }, -10, 10},
    {"log", log, [](double x) { return std::log(x); }, 0.001, 10},
    {"log1p", log1p, [](double x) { return std::log1p(x); }, -0.9, 10},
    {"expm1", expm1, [](double x) { return std::expm1(x); }, -3, 3},
    {"sqrt", sqrt, [](double x) { return std::sqrt(x); }, 0, 10},
    {"rsqrt", rsqrt, [](double x) { return 1.0 / std::sqrt(x); }, 0.01, 10},
    {"reciprocal", reciprocal, [](double x) { return 1.0 / x; }, 0.1, 5},
    {"sin", sin, [](double x) { return std::sin(x); }, -6, 6},
    {"cos", cos, [](double x) { return std::cos(x); }, -6, 6},
    {"tanh", tanh, [](double x) { return std::tanh(x); }, -5, 5},
    {"sigmoid", sigmoid, ref_sigmoid, -10, 10},
    {"erf", erf, [](double x) { return std::erf(x); }, -3, 3},
    {"silu", silu, [](double x) { return x * ref_sigmoid(x); }, -8, 8},
    {"gelu", gelu, [](double x) { return 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0))); }, -5, 5},
    // torch.nn.functional.gelu(x, approximate="tanh").
    {"gelu_tanh", gelu_tanh,
     [](double x) {
       return 0.5 * x *
              (1.0 + std::tanh(std::sqrt(2.0 / std::numbers::pi) * (x + 0.044715 * x * x * x)));
     },
     -5, 5},
};

// relu's fused backward is PyTorch's threshold_backward at 0: the gradient where x > 0, 0 where
// x <= 0 (an infinite gradient included), the gradient where x is NaN; it broadcasts and keeps
// integer dtypes.
TEST(OpsBinary, ReluBackwardIsThresholdBackward) {
  const double inf = std::numeric_limits<double>::infinity();
  for (const ScalarType dt : {ScalarType::Float32, ScalarType::Float64}) {
    const Tensor out = relu_backward(make({1, 2, 3, 4, inf, -5}, {6}, dt),
                                     make({-1, 0, 2, kNaN, -3, 1e-30}, {6}, dt));
    EXPECT_EQ(out.dtype(), dt);
    const auto v = vals(out);
    EXPECT_EQ(v, (std::vector<double>{0, 0, 3, 4, 0, -5}));
  }
  const Tensor b = relu_backward(make({2}, {1}), make({-1, 1, 3}, {3}));
  EXPECT_EQ(vals(b), (std::vector<double>{0, 2, 2}));
  EXPECT_EQ(
      relu_backward(make({7, 7}, {2}, ScalarType::Int64), make({-1, 1}, {2}, ScalarType::Int64))
          .dtype(),
      ScalarType::Int64);
}

// A fused activation gradient fn(grad, x) against `want` at the points (g, x), in float64 and
// float32 with their tolerances; far out it is 0 (x ≪ 0) and the gradient itself (x ≫ 0), NaN
// propagates, and integers compute in float32.
void expect_activation_grad(const char* name, Tensor (*fn)(const Tensor&, const Tensor&),
                            const std::vector<double>& g, const std::vector<double>& x,
                            const std::vector<double>& want, double tol64) {
  const std::int64_t n = static_cast<std::int64_t>(x.size());
  for (const auto& [dt, tol] :
       {std::pair{ScalarType::Float64, tol64}, {ScalarType::Float32, 2e-6}}) {
    const Tensor out = fn(make(g, {n}, dt), make(x, {n}, dt));
    EXPECT_EQ(out.dtype(), dt);
    expect_close(vals(out), want, tol, tol,
                 std::string(name) + " " + std::string(core::scalar_type_name(dt)));
  }
  expect_close(vals(fn(make({2, 2, 2}, {3}), make({-200, 200, 0}, {3}))), {0, 2, 1}, 0, 1e-30,
               std::string(name) + " far out");
  EXPECT_TRUE(std::isnan(vals(fn(make({1}, {1}), make({kNaN}, {1})))[0])) << name;
  EXPECT_EQ(fn(make({1}, {1}, ScalarType::Int32), make({1}, {1}, ScalarType::Int32)).dtype(),
            ScalarType::Float32)
      << name;
}

// gelu_tanh's fused backward is d/dx of torch's formula, 0.5·(1 + t) + 0.5·x·(1 − t²)·k·(1 + 3c·x²)
// with t = tanh(k·(x + c·x³)), times the incoming gradient.
TEST(OpsBinary, GeluTanhBackwardIsTheDerivative) {
  const double k = std::sqrt(2.0 / std::numbers::pi), c = 0.044715;
  std::vector<double> x, g, want;
  for (int i = 0; i <= 240; ++i) {
    x.push_back(-6.0 + 12.0 * i / 240.0);
    g.push_back(0.5 + 0.01 * (i % 17));
    const double t = std::tanh(k * (x.back() + c * x.back() * x.back() * x.back()));
    want.push_back(g.back() * (0.5 * (1 + t) + 0.5 * x.back() * (1 - t * t) * k *
                                                   (1 + 3 * c * x.back() * x.back())));
  }
  expect_activation_grad("gelu_tanh_backward", gelu_tanh_backward, g, x, want, 1e-13);
}

// silu's fused backward is d/dx of x·σ(x) = σ(x)·(1 + x·(1 − σ(x))), times the incoming gradient,
// checked here against a central difference of silu in long double.
TEST(OpsBinary, SiluBackwardIsTheDerivative) {
  const auto silu = [](long double v) { return v / (1.0L + std::exp(-v)); };
  std::vector<double> x, g, want;
  for (int i = 0; i <= 240; ++i) {
    x.push_back(-12.0 + 24.0 * i / 240.0);
    g.push_back(0.5 + 0.01 * (i % 17));
    const long double h = 1e-6L;
    want.push_back(
        static_cast<double>(g.back() * (silu(x.back() + h) - silu(x.back() - h)) / (2.0L * h)));
  }
  expect_activation_grad("silu_backward", silu_backward, g, x, want, 1e-9);
  // Broadcasting as mul.
  expect_close(vals(silu_backward(make({1, 2}, {2, 1}), make({0}, {1}))), {0.5, 1}, 0, 1e-15,
               "silu_backward broadcast");
}

// The fused SwiGLU gate is the composite's bits in float32 and float64, forward and backward
// (the composite's gradients: mul's rule, then silu_backward), so fusing it changed no run.
TEST(OpsNn, SwigluIsTheCompositeBitForBit) {
  std::vector<double> g, u, gr;
  for (int i = 0; i < 301; ++i) {
    g.push_back(-9.0 + 0.06 * i);
    u.push_back(std::sin(0.37 * i) * 2.0);
    gr.push_back(std::cos(0.11 * i));
  }
  for (const ScalarType dt : {ScalarType::Float32, ScalarType::Float64}) {
    const Tensor gate = make(g, {7, 43}, dt), up = make(u, {7, 43}, dt),
                 grad = make(gr, {7, 43}, dt);
    const Tensor silu_gate = silu(gate);
    expect_exact(vals(swiglu(gate, up)), vals(mul(silu_gate, up)));
    const auto [dg, du] = swiglu_backward(grad, gate, up);
    expect_exact(vals(dg), vals(silu_backward(mul(grad, up), gate)));
    expect_exact(vals(du), vals(mul(grad, silu_gate)));
  }
  // bfloat16 rounds once: within one bfloat16 step of the float32 result.
  const Tensor gb = make(g, {301}, ScalarType::BFloat16), ub = make(u, {301}, ScalarType::BFloat16);
  const auto want = vals(swiglu(gb.to(ScalarType::Float32), ub.to(ScalarType::Float32)));
  const auto got = vals(swiglu(gb, ub));
  for (std::size_t i = 0; i < got.size(); ++i)
    EXPECT_NEAR(got[i], want[i], std::abs(want[i]) * 0.0079 + 1e-30) << i;
  EXPECT_ERROR(ValueError, swiglu(make({1, 2}, {2}), make({1, 2, 3}, {3})),
               "[swiglu] gate and up must have one shape, got [2] and [3]");
  EXPECT_ERROR(TypeError,
               swiglu(make({1}, {1}, ScalarType::Int32), make({1}, {1}, ScalarType::Int32)),
               "[swiglu] gate and up must have one floating-point dtype, got int32 and int32");
  EXPECT_ERROR(ValueError, swiglu_backward(make({1}, {1}), make({1, 2}, {2}), make({1, 2}, {2})),
               "[swiglu_backward] grad must have gate's shape [2], got [1]");
}

TEST(OpsUnary, FloatOpsMatchStdFunctions) {
  struct Precision {
    ScalarType dtype;
    double rel;
    double abs;
  };
  const Precision precisions[] = {
      {ScalarType::Float64, 1e-14, 1e-15},
      {ScalarType::Float32, 1e-6, 1e-6},
      {ScalarType::Float16, 1e-3, 1e-5},
      {ScalarType::BFloat16, 8e-3, 1e-5},
  };
  for (const auto& c : kUnaryCases) {
    std::vector<double> x;
    for (int i = 0; i <= 256; ++i)
      x.push_back(c.lo + (c.hi - c.lo) * i / 256.0);
    for (const auto& p : precisions) {
      const Tensor in = make(x, {257}, p.dtype);
      const Tensor out = c.op(in);
      EXPECT_EQ(out.dtype(), p.dtype) << c.name;
      const auto xin = vals(in);
      std::vector<double> want;
      for (double v : xin)
        want.push_back(c.ref(v));
      expect_close(vals(out), want, p.rel, p.abs,
                   std::string(c.name) + " " + std::string(core::scalar_type_name(p.dtype)));
    }
    // Integer inputs compute in float32.
    const Tensor ints = make({1, 2, 3}, {3}, ScalarType::Int32);
    const Tensor r = c.op(ints);
    EXPECT_EQ(r.dtype(), ScalarType::Float32) << c.name;
    expect_close(vals(r), {c.ref(1), c.ref(2), c.ref(3)}, 1e-6, 1e-7, c.name);
  }
}

// Float exp (and sigmoid/SiLU/softmax through it) is the engine's vectorisable exp_f32: within 2
// ulp of the exact value over the whole range, denormal results and the overflow edge included.
TEST(OpsUnary, FloatExpWithinTwoUlpOverTheRange) {
  std::vector<double> x;
  for (std::uint32_t bits = 0; bits < 0xFFFFFFFFu - 4093u; bits += 4093u) {
    float f;
    std::memcpy(&f, &bits, sizeof(f));
    if (f > -104.0f && f < 88.72f) x.push_back(f);
  }
  for (double edge : {88.7228f, -87.3365f, -103.97f, 0.0f, -0.0f, 1e-30f})
    x.push_back(edge);
  const auto got = vals(exp(make(x, {static_cast<std::int64_t>(x.size())}, ScalarType::Float32)));
  double worst = 0;
  double worst_x = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    const double want = std::exp(x[i]);
    const float wantf = static_cast<float>(want);
    const double ulp =
        std::nextafter(std::fabs(wantf), std::numeric_limits<float>::infinity()) - std::fabs(wantf);
    const double err = std::fabs(got[i] - want) / ulp;
    if (err > worst) {
      worst = err;
      worst_x = x[i];
    }
  }
  EXPECT_LE(worst, 2.0) << "at x = " << worst_x << " (" << x.size() << " values)";
}

TEST(OpsUnary, SpecialValues) {
  expect_exact(vals(log(make({0, -1, kInf}, {3}))), {-kInf, kNaN, kInf});
  expect_exact(vals(sqrt(make({-1, 0, 4}, {3}))), {kNaN, 0, 2});
  expect_exact(vals(exp(make({-kInf, kInf, kNaN}, {3}))), {0, kInf, kNaN});
  expect_exact(vals(sigmoid(make({-kInf, kInf, 0}, {3}))), {0, 1, 0.5});
  expect_exact(vals(tanh(make({-kInf, kInf}, {2}))), {-1, 1});
  expect_exact(vals(rsqrt(make({0, 4}, {2}))), {kInf, 0.5});
  expect_exact(vals(relu(make({-1, 0, 2, kNaN}, {4}))), {0, 0, 2, kNaN});
  expect_exact(vals(abs(make({-kInf, -0.0, 3}, {3}))), {kInf, 0, 3});
  EXPECT_FALSE(std::signbit(vals(abs(make({-0.0}, {1})))[0]));
  expect_exact(vals(sign(make({-2.5, 0, 7}, {3}))), {-1, 0, 1});
  expect_exact(vals(square(make({-3, 0.5}, {2}))), {9, 0.25});
}

TEST(OpsUnary, IntegerOpsKeepDtype) {
  const Tensor i32 = make({-3, 0, 5, -7}, {4}, ScalarType::Int32);
  struct Case {
    const char* name;
    Tensor (*op)(const Tensor&);
    std::vector<double> want;
  };
  const Case cases[] = {
      {"relu", relu, {0, 0, 5, 0}},       {"abs", abs, {3, 0, 5, 7}},
      {"sign", sign, {-1, 0, 1, -1}},     {"neg", neg, {3, 0, -5, 7}},
      {"square", square, {9, 0, 25, 49}},
  };
  for (const auto& c : cases) {
    for (ScalarType dt :
         {ScalarType::Int8, ScalarType::Int16, ScalarType::Int32, ScalarType::Int64}) {
      const Tensor r = c.op(i32.to(dt));
      EXPECT_EQ(r.dtype(), dt) << c.name;
      expect_exact(vals(r), c.want, c.name);
    }
  }
  const Tensor u8 = make({0, 5, 255}, {3}, ScalarType::UInt8);
  expect_exact(vals(abs(u8)), {0, 5, 255});
  expect_exact(vals(sign(u8)), {0, 1, 1});
  expect_exact(vals(relu(u8)), {0, 5, 255});
  EXPECT_EQ(neg(u8).dtype(), ScalarType::UInt8);
  expect_exact(vals(neg(u8)), {0, 251, 1});
  EXPECT_ERROR(TypeError, abs(make({1, 0}, {2}, ScalarType::Bool)),
               "[abs] is not supported for bool tensors");
  EXPECT_ERROR(TypeError, neg(make({1, 0}, {2}, ScalarType::Bool)), "[neg]");
}

TEST(OpsUnary, NonContiguousInput) {
  std::vector<double> v(12);
  for (int i = 0; i < 12; ++i)
    v[i] = i * 0.25 - 1.0;
  const Tensor x = make(v, {3, 4}).t();
  std::vector<double> want;
  for (int j = 0; j < 4; ++j)
    for (int i = 0; i < 3; ++i)
      want.push_back(std::exp(static_cast<double>(static_cast<float>(v[i * 4 + j]))));
  expect_close(vals(exp(x)), want, 1e-6, 0);
  expect_exact(vals(neg(make(v, {3, 4}).slice(1, 1, 4, 2))),
               {0.75, 0.25, -0.25, -0.75, -1.25, -1.75});
}

// ---- in-place ops -------------------------------------------------------------------------------

TEST(OpsInplace, AddWithAlphaAndBroadcast) {
  Tensor a = make({1, 2, 3, 4, 5, 6}, {2, 3});
  const auto v0 = a.impl()->version;
  Tensor& r = add_(a, make({10, 20, 30}, {3}), 0.5);
  EXPECT_TRUE(r.is_same(a));
  EXPECT_EQ(a.impl()->version, v0 + 1);
  expect_exact(vals(a), {6, 12, 18, 9, 15, 21});
  add_(a, scalar_tensor(1.0, ScalarType::Float32));
  expect_exact(vals(a), {7, 13, 19, 10, 16, 22});
  // Integer self with an integer alpha; float self takes an integer other.
  Tensor i = make({1, 2}, {2}, ScalarType::Int64);
  add_(i, make({3, 4}, {2}, ScalarType::Int64), 3);
  expect_exact(vals(i), {10, 14});
  Tensor f = make({0.5, 0.5}, {2});
  add_(f, make({1, 2}, {2}, ScalarType::Int32), 2);
  EXPECT_EQ(f.dtype(), ScalarType::Float32);
  expect_exact(vals(f), {2.5, 4.5});
  // Half self keeps its dtype.
  Tensor h = make({1, 2}, {2}, ScalarType::Float16);
  add_(h, make({0.25, 0.5}, {2}), -2);
  EXPECT_EQ(h.dtype(), ScalarType::Float16);
  expect_exact(vals(h), {0.5, 1});
}

TEST(OpsInplace, AddIntoNonContiguousView) {
  Tensor base = zeros({3, 4});
  Tensor v = base.t();  // [4, 3]
  add_(v, make({1, 2, 3}, {3}), 2);
  // v[i][j] += 2 * (j + 1)  ->  base[j][i] = 2 * (j + 1)
  expect_exact(vals(base), {2, 2, 2, 2, 4, 4, 4, 4, 6, 6, 6, 6});
  Tensor col = base.select(1, 1);
  mul_(col, make({10, 100, 1000}, {3}));
  expect_exact(vals(base), {2, 20, 2, 2, 4, 400, 4, 4, 6, 6000, 6, 6});
}

TEST(OpsInplace, MulAndErrors) {
  Tensor a = make({1, 2, 3, 4}, {2, 2});
  mul_(a, make({2, 3}, {1, 2}));
  expect_exact(vals(a), {2, 6, 6, 12});
  mul_(a, 0.5);
  expect_exact(vals(a), {1, 3, 3, 6});
  Tensor i = make({1, 2, 3}, {3}, ScalarType::Int32);
  mul_(i, 3);
  EXPECT_EQ(i.dtype(), ScalarType::Int32);
  expect_exact(vals(i), {3, 6, 9});

  Tensor small = zeros({3});
  EXPECT_ERROR(ValueError, add_(small, zeros({2, 3})),
               "[add_] other of shape [2, 3] cannot be broadcast to self's shape [3] in place");
  EXPECT_ERROR(ValueError, mul_(small, zeros({2, 3})),
               "[mul_] other of shape [2, 3] cannot be broadcast to self's shape [3] in place");
  EXPECT_ERROR(ValueError, add_(small, zeros({4})), "[add_] shapes [3] and [4]",
               "cannot be broadcast");
  // Float results cannot be stored into an integer tensor in place, and a float alpha is refused
  // for integer tensors (as in add).
  Tensor j = make({1, 2}, {2}, ScalarType::Int64);
  EXPECT_ERROR(TypeError, add_(j, make({0.5, 0.5}, {2})),
               "[add_] result type float32 cannot be cast to self's dtype int64 in place");
  EXPECT_ERROR(TypeError, mul_(j, make({0.5, 0.5}, {2})),
               "[mul_] result type float32 cannot be cast to self's dtype int64 in place");
  EXPECT_ERROR(TypeError, mul_(j, 2.5), "[mul_] result type float32",
               "cannot be cast to self's dtype int64");
  EXPECT_ERROR(TypeError, add_(j, make({1, 1}, {2}, ScalarType::Int64), 2.5),
               "[add_] alpha 2.5 must be an integer");
  expect_exact(vals(j), {1, 2});  // untouched by the failed calls
}

// ---- copies, casts, fills, factories ------------------------------------------------------------

TEST(OpsCopy, FloatToHalfRounding) {
  const std::vector<float> src = {1.0f,
                                  0.1f,
                                  65504.0f,
                                  65519.0f,
                                  65520.0f,
                                  2049.0f,
                                  2051.0f,
                                  1e-8f,
                                  -1e-8f,
                                  5.9604644775390625e-08f,
                                  8.940696716308594e-08f,
                                  -0.0f,
                                  -std::numeric_limits<float>::infinity(),
                                  1e6f};
  const std::vector<std::uint16_t> bits = {0x3C00, 0x2E66, 0x7BFF, 0x7BFF, 0x7C00, 0x6800, 0x6802,
                                           0x0000, 0x8000, 0x0001, 0x0002, 0x8000, 0xFC00, 0x7C00};
  const Tensor h = from_vector<float>(src).to(ScalarType::Float16);
  EXPECT_EQ(h.dtype(), ScalarType::Float16);
  const auto got = h.to_vector<Half>();
  ASSERT_EQ(got.size(), bits.size());
  for (std::size_t i = 0; i < bits.size(); ++i)
    EXPECT_EQ(got[i].bits, bits[i]) << "element " << i << " = " << src[i];
  // NaN stays NaN; half -> float is exact.
  EXPECT_TRUE(std::isnan(vals(make({kNaN}, {1}, ScalarType::Float16))[0]));
  const auto hf = vals(h.to(ScalarType::Float32));
  EXPECT_EQ(hf[0], 1.0);
  EXPECT_EQ(hf[1], 0.0999755859375);
  EXPECT_EQ(hf[5], 2048.0);
  EXPECT_EQ(hf[9], 5.9604644775390625e-08);

  // bfloat16: round to nearest even on the upper 16 bits.
  const Tensor b =
      from_vector<float>({1.00390625f, 1.01171875f, 3.0f, -0.0f}).to(ScalarType::BFloat16);
  const auto bb = b.to_vector<BFloat16>();
  EXPECT_EQ(bb[0].bits, 0x3F80);
  EXPECT_EQ(bb[1].bits, 0x3F82);
  EXPECT_EQ(bb[2].bits, 0x4040);
  EXPECT_EQ(bb[3].bits, 0x8000);
  // half <-> bfloat16 goes through float.
  expect_exact(vals(make({1.5, -2.25}, {2}, ScalarType::Float16).to(ScalarType::BFloat16)),
               {1.5, -2.25});
  // double -> float rounds to nearest.
  expect_exact(vals(make({0.1}, {1}, ScalarType::Float64).to(ScalarType::Float32)),
               {static_cast<double>(0.1f)});
}

TEST(OpsCopy, IntegerAndBoolConversions) {
  // float -> int truncates toward zero.
  expect_exact(vals(make({2.7, -2.7, 0.5, 100.9}, {4}).to(ScalarType::Int32)), {2, -2, 0, 100});
  expect_exact(vals(make({3.7, 254.9}, {2}).to(ScalarType::UInt8)), {3, 254});
  // int64 -> int8 wraps modulo 256.
  expect_exact(vals(from_vector<std::int64_t>({300, -129, 127}).to(ScalarType::Int8)),
               {44, 127, 127});
  // Any non-zero (including NaN and -0.0 == 0) -> bool.
  const Tensor fb = make({0, -0.0, 0.5, -2, kNaN, kInf}, {6}).to(ScalarType::Bool);
  EXPECT_EQ(fb.dtype(), ScalarType::Bool);
  expect_exact(vals(fb), {0, 0, 1, 1, 1, 1});
  expect_exact(vals(make({0, 3, -1}, {3}, ScalarType::Int64).to(ScalarType::Bool)), {0, 1, 1});
  expect_exact(vals(make({0.0001, 0}, {2}, ScalarType::Float16).to(ScalarType::Bool)), {1, 0});
  const Tensor bt = make({1, 0, 1}, {3}, ScalarType::Bool);
  expect_exact(vals(bt.to(ScalarType::Float32)), {1, 0, 1});
  expect_exact(vals(bt.to(ScalarType::Int64)), {1, 0, 1});
  expect_exact(vals(bt.to(ScalarType::BFloat16)), {1, 0, 1});
  const auto bools = bt.to_vector<bool>();
  EXPECT_EQ(bools, (std::vector<bool>{true, false, true}));
  // int64 -> float64 rounds above 2^53.
  const Tensor big = from_vector<std::int64_t>({(std::int64_t{1} << 53) + 1});
  EXPECT_EQ(big.to(ScalarType::Float64).to_vector<double>()[0], 9007199254740992.0);
  // to() with the same dtype returns the same tensor unless a copy is asked for.
  EXPECT_TRUE(bt.to(ScalarType::Bool).is_same(bt));
  EXPECT_FALSE(bt.to(ScalarType::Bool, true).is_same(bt));
  EXPECT_NE(bt.to(ScalarType::Bool, true).data_ptr(), bt.data_ptr());
}

TEST(OpsCopy, CopyBroadcastNonContiguousAndErrors) {
  Tensor dst = zeros({2, 3}, ScalarType::Int32);
  copy_(dst, make({1.9, -2.9, 3}, {1, 3}));
  expect_exact(vals(dst), {1, -2, 3, 1, -2, 3});
  // Into a transposed view: base[j][i] = src[i][j].
  Tensor base = zeros({3, 4});
  Tensor view = base.t();
  std::vector<double> sv(12);
  for (int i = 0; i < 12; ++i)
    sv[i] = i;
  copy_(view, make(sv, {4, 3}));
  std::vector<double> want(12);
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 3; ++j)
      want[j * 4 + i] = sv[i * 3 + j];
  expect_exact(vals(base), want);
  // Into every other column, from a half tensor.
  Tensor wide = zeros({2, 4}, ScalarType::Float64);
  Tensor cols = wide.slice(1, 0, 4, 2);
  copy_(cols, make({0.5, 1.5, 2.5, 3.5}, {2, 2}, ScalarType::Float16));
  expect_exact(vals(wide), {0.5, 0, 1.5, 0, 2.5, 0, 3.5, 0});

  // src broadcasts with dst but to a larger shape; src incompatible with dst.
  EXPECT_ERROR(
      ValueError, copy_(dst, zeros({2, 1, 3})),
      "[copy_] src of shape [2, 1, 3] cannot be broadcast to the destination's shape [2, 3]");
  EXPECT_ERROR(ValueError, copy_(dst, zeros({4, 3})), "[copy_] shapes [2, 3] and [4, 3]",
               "cannot be broadcast together");
}

TEST(OpsCopy, CloneAndContiguousOfViews) {
  std::vector<double> v(12);
  for (int i = 0; i < 12; ++i)
    v[i] = i;
  Tensor base = make(v, {3, 4});
  EXPECT_TRUE(base.contiguous().is_same(base));
  const Tensor t = base.t();
  const Tensor c = t.contiguous();
  EXPECT_FALSE(c.is_same(t));
  EXPECT_TRUE(c.is_contiguous());
  expect_exact(vals(c), {0, 4, 8, 1, 5, 9, 2, 6, 10, 3, 7, 11});
  Tensor cl = base.slice(1, 1, 4, 2).clone();  // columns 1 and 3
  EXPECT_TRUE(cl.is_contiguous());
  EXPECT_EQ(shape_of(cl), (std::vector<std::int64_t>{3, 2}));
  expect_exact(vals(cl), {1, 3, 5, 7, 9, 11});
  // The clone owns its memory.
  cl.fill_(-1.0);
  expect_exact(vals(base), v);
  // clone of a contiguous tensor is a copy too.
  Tensor b2 = base.clone();
  EXPECT_NE(b2.data_ptr(), base.data_ptr());
  expect_exact(vals(b2), v);
  // Expand then clone materialises the broadcast.
  const Tensor e = make({1, 2, 3}, {3}).expand({2, 3});
  EXPECT_EQ(e.stride(0), 0);
  Tensor ec = e.clone();
  EXPECT_EQ(ec.stride(0), 3);
  expect_exact(vals(ec), {1, 2, 3, 1, 2, 3});
  ec.select(0, 0).fill_(9.0);
  expect_exact(vals(ec), {9, 9, 9, 1, 2, 3});
  expect_exact(vals(e), {1, 2, 3, 1, 2, 3});
}

TEST(OpsCopy, FillAndFactories) {
  Tensor base = zeros({3, 4});
  base.select(1, 2).fill_(7.0);
  expect_exact(vals(base), {0, 0, 7, 0, 0, 0, 7, 0, 0, 0, 7, 0});
  base.slice(0, 0, 3, 2).fill_(1.0);
  expect_exact(vals(base), {1, 1, 1, 1, 0, 0, 7, 0, 1, 1, 1, 1});
  Tensor i = zeros({3}, ScalarType::Int32);
  fill_(i, 2.9);
  expect_exact(vals(i), {2, 2, 2});
  Tensor h = empty({2}, ScalarType::Float16);
  h.fill_(0.1);
  EXPECT_EQ(h.to_vector<Half>()[1].bits, 0x2E66);
  Tensor b = zeros({2}, ScalarType::Bool);
  b.fill_(2);
  expect_exact(vals(b), {1, 1});
  Tensor e = empty({0, 3});
  e.fill_(1.0);  // nothing to fill, no crash
  EXPECT_EQ(e.numel(), 0);
  Tensor z = ones({2, 2});
  z.zero_();
  expect_exact(vals(z), {0, 0, 0, 0});

  const Tensor zs = zeros({2, 3}, ScalarType::Int64);
  EXPECT_EQ(zs.dtype(), ScalarType::Int64);
  EXPECT_EQ(shape_of(zs), (std::vector<std::int64_t>{2, 3}));
  expect_exact(vals(zs), std::vector<double>(6, 0));
  expect_exact(vals(ones({4}, ScalarType::BFloat16)), {1, 1, 1, 1});
  const Tensor f = full({2, 2}, 3.5, ScalarType::Float64);
  EXPECT_EQ(f.dtype(), ScalarType::Float64);
  expect_exact(vals(f), {3.5, 3.5, 3.5, 3.5});
  expect_exact(vals(full({3}, -7, ScalarType::Int16)), {-7, -7, -7});
  const Tensor s = full({}, 2.0);
  EXPECT_EQ(s.dim(), 0);
  EXPECT_EQ(s.item(), 2.0);
  expect_exact(vals(zeros_like(make({1, 2}, {2}, ScalarType::Float16))), {0, 0});
  EXPECT_EQ(zeros_like(make({1, 2}, {2}, ScalarType::Float16)).dtype(), ScalarType::Float16);

  const Tensor a = arange(5);
  EXPECT_EQ(a.dtype(), ScalarType::Int64);
  expect_exact(vals(a), {0, 1, 2, 3, 4});
  const Tensor af = arange(4, ScalarType::Float32);
  EXPECT_EQ(af.dtype(), ScalarType::Float32);
  expect_exact(vals(af), {0, 1, 2, 3});
  EXPECT_EQ(arange(0).numel(), 0);
  EXPECT_ERROR(ValueError, arange(-1), "[arange] n must be >= 0, got -1");
  EXPECT_ERROR(ValueError, zeros({2, -1}), "negative size -1");
}

TEST(OpsWhere, BroadcastAndPromotion) {
  const Tensor cond = make({1, 0, 1}, {3, 1}, ScalarType::Bool);
  const Tensor a = make({0, 1, 2, 3}, {1, 4});
  const Tensor b = scalar_tensor(-1.0, ScalarType::Float32);
  const Tensor w = where(cond, a, b);
  EXPECT_EQ(shape_of(w), (std::vector<std::int64_t>{3, 4}));
  EXPECT_EQ(w.dtype(), ScalarType::Float32);
  expect_exact(vals(w), {0, 1, 2, 3, -1, -1, -1, -1, 0, 1, 2, 3});
  // int with float promotes; the condition can be non-contiguous.
  const Tensor c2 = make({1, 0, 0, 1}, {2, 2}, ScalarType::Bool).t();  // [[1,0],[0,1]]^T
  const Tensor w2 = where(c2, make({1, 2, 3, 4}, {2, 2}, ScalarType::Int32),
                          make({0.5, 0.5, 0.5, 0.5}, {2, 2}, ScalarType::Float64));
  EXPECT_EQ(w2.dtype(), ScalarType::Float64);
  expect_exact(vals(w2), {1, 0.5, 0.5, 4});
  EXPECT_ERROR(TypeError, where(make({1}, {1}, ScalarType::Int64), a, b),
               "[where] condition must be bool, got int64");
  EXPECT_ERROR(ValueError, where(make({1, 0}, {2}, ScalarType::Bool), a, b), "[where] shapes",
               "cannot be broadcast");
}

TEST(OpsWhere, MaskedFill) {
  const Tensor t = make({1, 2, 3, 4, 5, 6}, {2, 3});
  const Tensor mask = make({0, 1, 0}, {3}, ScalarType::Bool);
  const Tensor r = masked_fill(t, mask, -1.5);
  EXPECT_EQ(r.dtype(), ScalarType::Float32);
  expect_exact(vals(r), {1, -1.5, 3, 4, -1.5, 6});
  expect_exact(vals(t), {1, 2, 3, 4, 5, 6});  // not in place
  expect_exact(vals(masked_fill(t, make({1, 0}, {2, 1}, ScalarType::Bool), -kInf)),
               {-kInf, -kInf, -kInf, 4, 5, 6});
  const Tensor ti = make({1, 2, 3}, {3}, ScalarType::Int32);
  expect_exact(vals(masked_fill(ti, make({1, 1, 0}, {3}, ScalarType::Bool), 9)), {9, 9, 3});
  // A non-contiguous input.
  expect_exact(vals(masked_fill(t.t(), make({1, 0}, {2}, ScalarType::Bool), 0.0)),
               {0, 4, 0, 5, 0, 6});
  EXPECT_ERROR(TypeError, masked_fill(t, make({0, 1, 0}, {3}, ScalarType::UInt8), 1.0),
               "[masked_fill] mask must be bool, got uint8");
  EXPECT_ERROR(ValueError, masked_fill(t, zeros({2, 2, 3}, ScalarType::Bool), 1.0),
               "[masked_fill] mask of shape [2, 2, 3] does not broadcast to self's shape [2, 3]");
  EXPECT_ERROR(ValueError, masked_fill(t, zeros({4}, ScalarType::Bool), 1.0),
               "[masked_fill] shapes");
  EXPECT_ERROR(TypeError, masked_fill(ti, make({1, 1, 0}, {3}, ScalarType::Bool), 1.5),
               "[masked_fill] cannot fill a int32 tensor with the float value 1.5");
}

// ---- reductions ---------------------------------------------------------------------------------

// Reduces row-major `v` of `shape` over `dims` (wrapped; empty = all) by folding each group of
// reduced elements with `fold`; returns the kept elements in row-major order.
std::vector<double> ref_reduce(const std::vector<double>& v, const std::vector<std::int64_t>& shape,
                               std::vector<std::int64_t> dims,
                               const std::function<double(const std::vector<double>&)>& fold) {
  const std::size_t nd = shape.size();
  std::vector<bool> red(nd, dims.empty());
  for (auto d : dims)
    red[static_cast<std::size_t>(d)] = true;
  std::vector<std::int64_t> out_stride(nd, 0);
  std::int64_t s = 1;
  for (std::size_t d = nd; d-- > 0;) {
    if (!red[d]) {
      out_stride[d] = s;
      s *= shape[d];
    }
  }
  std::vector<std::vector<double>> groups(static_cast<std::size_t>(s));
  std::vector<std::int64_t> idx(nd, 0);
  for (std::size_t i = 0; i < v.size(); ++i) {
    std::int64_t o = 0;
    for (std::size_t d = 0; d < nd; ++d)
      o += idx[d] * out_stride[d];
    groups[static_cast<std::size_t>(o)].push_back(v[i]);
    for (std::size_t d = nd; d-- > 0;) {
      if (++idx[d] < shape[d]) break;
      idx[d] = 0;
    }
  }
  std::vector<double> out;
  for (const auto& g : groups)
    out.push_back(fold(g));
  return out;
}

double fold_sum(const std::vector<double>& g) {
  double s = 0;
  for (double x : g)
    s += x;
  return s;
}
double fold_mean(const std::vector<double>& g) {
  return fold_sum(g) / static_cast<double>(g.size());
}

std::function<double(const std::vector<double>&)> fold_norm(double p) {
  return [p](const std::vector<double>& g) {
    if (std::isinf(p)) {
      double m = 0;
      for (double x : g)
        m = std::max(m, std::abs(x));
      return m;
    }
    double s = 0;
    for (double x : g)
      s += std::pow(std::abs(x), p);
    return std::pow(s, 1.0 / p);
  };
}

std::vector<std::int64_t> reduced_shape(const std::vector<std::int64_t>& shape,
                                        const std::vector<std::int64_t>& dims, bool keepdim) {
  std::vector<std::int64_t> out;
  for (std::size_t d = 0; d < shape.size(); ++d) {
    const bool red = dims.empty() || std::find(dims.begin(), dims.end(),
                                               static_cast<std::int64_t>(d)) != dims.end();
    if (!red) {
      out.push_back(shape[d]);
    } else if (keepdim) {
      out.push_back(1);
    }
  }
  return out;
}

TEST(OpsReduce, SumMeanNormOverDimLists) {
  const std::vector<std::int64_t> shape = {2, 3, 4};
  const Tensor x = make(uniform_values(24, 1, -2, 2), shape);
  const auto xv = vals(x);
  struct DimCase {
    std::vector<std::int64_t> dims;  // as passed
    std::vector<std::int64_t> wrapped;
  };
  const DimCase cases[] = {
      {{}, {}},          {{0}, {0}},
      {{1}, {1}},        {{2}, {2}},
      {{-1}, {2}},       {{0, 2}, {0, 2}},
      {{2, 0}, {0, 2}},  {{-1, -3}, {0, 2}},
      {{1, 2}, {1, 2}},  {{0, 1, 2}, {0, 1, 2}},
      {{-2, 0}, {0, 1}},
  };
  for (const auto& c : cases) {
    for (bool keepdim : {false, true}) {
      const std::string what =
          "dims " + ::testing::PrintToString(c.dims) + " keepdim " + std::to_string(keepdim);
      const auto want_shape = reduced_shape(shape, c.wrapped, keepdim);
      const Tensor s = sum(x, c.dims, keepdim);
      EXPECT_EQ(shape_of(s), want_shape) << what;
      EXPECT_EQ(s.dtype(), ScalarType::Float32);
      expect_close(vals(s), ref_reduce(xv, shape, c.wrapped, fold_sum), 1e-6, 1e-6, "sum " + what);
      const Tensor m = mean(x, c.dims, keepdim);
      EXPECT_EQ(shape_of(m), want_shape) << what;
      expect_close(vals(m), ref_reduce(xv, shape, c.wrapped, fold_mean), 1e-6, 1e-7,
                   "mean " + what);
      for (double p : {1.0, 2.0, kInf, 3.0, 0.5}) {
        const Tensor n = norm(x, p, c.dims, keepdim);
        EXPECT_EQ(shape_of(n), want_shape) << what;
        expect_close(vals(n), ref_reduce(xv, shape, c.wrapped, fold_norm(p)), 2e-6, 1e-7,
                     "norm p=" + std::to_string(p) + " " + what);
      }
    }
  }
}

TEST(OpsReduce, NonContiguousAndOtherDtypes) {
  const std::vector<std::int64_t> shape = {3, 4, 5};
  const Tensor base = make(uniform_values(60, 2), shape);
  const Tensor x = base.permute({2, 0, 1});  // [5, 3, 4], not contiguous
  ASSERT_FALSE(x.is_contiguous());
  const auto xv = vals(x.contiguous());
  const std::vector<std::int64_t> xs = {5, 3, 4};
  expect_close(vals(sum(x, {0})), ref_reduce(xv, xs, {0}, fold_sum), 1e-6, 1e-6, "sum dim 0");
  expect_close(vals(sum(x, {1, 2}, true)), ref_reduce(xv, xs, {1, 2}, fold_sum), 1e-6, 1e-6);
  expect_close(vals(norm(x, 2.0, {-1})), ref_reduce(xv, xs, {2}, fold_norm(2)), 1e-6, 1e-7);
  const Tensor sl = base.slice(2, 0, 5, 2);  // [3, 4, 3]
  expect_close(vals(mean(sl, {2})), ref_reduce(vals(sl.contiguous()), {3, 4, 3}, {2}, fold_mean),
               1e-6, 1e-7);
  // float64 accumulates exactly enough for 1e-14.
  const Tensor d = make(uniform_values(60, 3), shape, ScalarType::Float64);
  expect_close(vals(sum(d, {1})), ref_reduce(vals(d), shape, {1}, fold_sum), 1e-14, 1e-14);
  // float16 keeps its dtype; the result is the rounded float64 sum.
  const Tensor h = make(uniform_values(60, 4), shape, ScalarType::Float16);
  const Tensor hs = sum(h, {0, 1});
  EXPECT_EQ(hs.dtype(), ScalarType::Float16);
  auto want = ref_reduce(vals(h), shape, {0, 1}, fold_sum);
  for (auto& w : want)
    w = round_to(w, ScalarType::Float16);
  expect_exact(vals(hs), want);
  const Tensor bn = norm(make(uniform_values(60, 5), shape, ScalarType::BFloat16), 2.0, {2});
  EXPECT_EQ(bn.dtype(), ScalarType::BFloat16);
}

TEST(OpsReduce, IntegerSumsAndErrors) {
  const Tensor i = make({1, 2, 3, 4}, {2, 2}, ScalarType::Int32);
  const Tensor s = sum(i, {1});
  EXPECT_EQ(s.dtype(), ScalarType::Int64);
  expect_exact(vals(s), {3, 7});
  EXPECT_EQ(sum(i).dtype(), ScalarType::Int64);
  EXPECT_EQ(sum(i).item(), 10);
  const Tensor b = make({1, 0, 1, 1}, {4}, ScalarType::Bool);
  EXPECT_EQ(sum(b).dtype(), ScalarType::Int64);
  EXPECT_EQ(sum(b).item(), 3);
  EXPECT_EQ(sum(make(std::vector<double>(10, 200), {10}, ScalarType::UInt8)).item(), 2000);
  EXPECT_EQ(sum(from_vector<std::int64_t>({std::int64_t{1} << 60, std::int64_t{1} << 60}))
                .to_vector<std::int64_t>()[0],
            std::int64_t{1} << 61);

  EXPECT_ERROR(TypeError, mean(make({1, 2}, {2}, ScalarType::Int64)),
               "[mean] expects a floating-point tensor, got int64", "convert it first");
  EXPECT_ERROR(TypeError, norm(i), "[norm] expects a floating-point tensor, got int32");
  EXPECT_ERROR(ValueError, norm(make({1}, {1}), 0.0), "[norm] p must be > 0");
  EXPECT_ERROR(ValueError, norm(make({1}, {1}), -1.0), "[norm] p must be > 0");
  EXPECT_ERROR(ValueError, norm(make({1}, {1}), -kInf), "[norm] p must be > 0");
  const Tensor x = zeros({2, 3, 4});
  EXPECT_ERROR(ValueError, sum(x, {1, -2}), "[sum] dimension -2 appears more than once in [1, -2]");
  EXPECT_ERROR(ValueError, mean(x, {0, 0}), "[mean] dimension 0 appears more than once");
  EXPECT_ERROR(IndexError, sum(x, {3}), "[sum] dimension 3 out of range for a tensor of rank 3");
  EXPECT_ERROR(IndexError, norm(x, 2.0, {-4}), "[norm] dimension -4 out of range");
}

TEST(OpsReduce, EmptyAndZeroDim) {
  // Sums over an empty dim are 0, means NaN (as in PyTorch).
  const Tensor e = zeros({2, 0});
  expect_exact(vals(sum(e, {1})), {0, 0});
  EXPECT_EQ(shape_of(sum(e, {0})), (std::vector<std::int64_t>{0}));
  EXPECT_TRUE(std::isnan(mean(zeros({0})).item()));
  EXPECT_EQ(sum(zeros({0})).item(), 0.0);
  EXPECT_ERROR(ValueError, max(zeros({0})),
               "[max] cannot take the max of an empty tensor (shape [0])");
  EXPECT_ERROR(ValueError, min(zeros({3, 0})),
               "[min] cannot take the min of an empty tensor (shape [3, 0])");
  EXPECT_ERROR(ValueError, argmax(zeros({0})),
               "[argmax] cannot take the argmax of an empty tensor");
  EXPECT_ERROR(IndexError, max(e, 1),
               "[max] cannot reduce over dimension 1 of size 0 (shape [2, 0])");
  EXPECT_ERROR(IndexError, argmax(e, -1), "[argmax] cannot reduce over dimension 1 of size 0");
  // Reducing a non-empty dim of an empty tensor is fine.
  auto [v, ix] = max(zeros({0, 3}), 1);
  EXPECT_EQ(shape_of(v), (std::vector<std::int64_t>{0}));
  EXPECT_EQ(shape_of(ix), (std::vector<std::int64_t>{0}));
  // 0-d tensors: dim 0 / -1 are accepted and the result is the value itself.
  const Tensor s = scalar_tensor(2.5, ScalarType::Float32);
  EXPECT_EQ(sum(s).item(), 2.5);
  EXPECT_EQ(sum(s, {0}).dim(), 0);
  EXPECT_EQ(mean(s, {-1}).item(), 2.5);
  auto [sv, si] = max(s, 0);
  EXPECT_EQ(sv.item(), 2.5);
  EXPECT_EQ(si.item(), 0);
  EXPECT_EQ(argmax(s).item(), 0);
}

TEST(OpsReduce, MaxMinAllAndAlongDim) {
  EXPECT_EQ(max(make({3, -1, 5, 2}, {2, 2})).item(), 5);
  EXPECT_EQ(min(make({3, -1, 5, 2}, {2, 2})).item(), -1);
  EXPECT_EQ(max(make({3, -1, 5, 2}, {4})).dim(), 0);
  EXPECT_TRUE(std::isnan(max(make({1, kNaN, 5}, {3})).item()));
  EXPECT_TRUE(std::isnan(min(make({1, 5, kNaN}, {3})).item()));
  const Tensor mi = max(make({-5, 7, 2}, {3}, ScalarType::Int64));
  EXPECT_EQ(mi.dtype(), ScalarType::Int64);
  EXPECT_EQ(mi.item(), 7);
  EXPECT_EQ(min(make({1.5, -2.5}, {2}, ScalarType::Float16)).dtype(), ScalarType::Float16);
  EXPECT_EQ(max(make({1, 2, 3, 4, 5, 6}, {2, 3}).t()).item(), 6);

  const Tensor x = make({1, 3, 3, 2, 2, 1, kNaN, 5, kNaN, 0, 4, 4}, {4, 3});
  {
    auto [v, i] = max(x, 1);
    EXPECT_EQ(v.dtype(), ScalarType::Float32);
    EXPECT_EQ(i.dtype(), ScalarType::Int64);
    EXPECT_EQ(shape_of(v), (std::vector<std::int64_t>{4}));
    expect_exact(vals(v), {3, 2, kNaN, 4});
    expect_exact(vals(i), {1, 0, 0, 1});  // ties: first index; NaN: first NaN
  }
  {
    auto [v, i] = min(x, -1, true);
    EXPECT_EQ(shape_of(v), (std::vector<std::int64_t>{4, 1}));
    EXPECT_EQ(shape_of(i), (std::vector<std::int64_t>{4, 1}));
    expect_exact(vals(v), {1, 1, kNaN, 0});
    expect_exact(vals(i), {0, 2, 0, 0});
  }
  {
    auto [v, i] = max(x, 0);
    expect_exact(vals(v), {kNaN, 5, kNaN});
    expect_exact(vals(i), {2, 2, 2});
  }
  {
    // Transposed input gives the same answer along the matching dim.
    auto [v, i] = max(x.t(), 0);
    expect_exact(vals(v), {3, 2, kNaN, 4});
    expect_exact(vals(i), {1, 0, 0, 1});
  }
  {
    auto [v, i] = min(make({4, 1, 1, 0, 0}, {5}, ScalarType::Int32), 0);
    EXPECT_EQ(v.dtype(), ScalarType::Int32);
    EXPECT_EQ(v.item(), 0);
    EXPECT_EQ(i.item(), 3);
  }
  // A NaN after a larger value still wins.
  auto [nv, ni] = max(make({9, 1, kNaN, kNaN}, {4}), 0);
  EXPECT_TRUE(std::isnan(nv.item()));
  EXPECT_EQ(ni.item(), 2);
  // Random values along each dim of a 3-D tensor vs a loop.
  const std::vector<std::int64_t> shape = {3, 5, 4};
  const Tensor r = make(uniform_values(60, 7), shape);
  const auto rv = vals(r);
  for (std::int64_t d = 0; d < 3; ++d) {
    auto [v, i] = max(r, d);
    const auto want_v = ref_reduce(rv, shape, {d}, [](const std::vector<double>& g) {
      return *std::max_element(g.begin(), g.end());
    });
    const auto want_i = ref_reduce(rv, shape, {d}, [](const std::vector<double>& g) {
      return static_cast<double>(std::max_element(g.begin(), g.end()) - g.begin());
    });
    expect_exact(vals(v), want_v, "max values dim " + std::to_string(d));
    expect_exact(vals(i), want_i, "max indices dim " + std::to_string(d));
  }
}

TEST(OpsReduce, Argmax) {
  const Tensor x = make({1, 9, 9, 10, 0, 10}, {2, 3});
  const Tensor a = argmax(x);
  EXPECT_EQ(a.dtype(), ScalarType::Int64);
  EXPECT_EQ(a.dim(), 0);
  EXPECT_EQ(a.item(), 3);
  const Tensor ak = argmax(x, std::nullopt, true);
  EXPECT_EQ(shape_of(ak), (std::vector<std::int64_t>{1, 1}));
  EXPECT_EQ(ak.item(), 3);
  expect_exact(vals(argmax(x, 1)), {1, 0});
  expect_exact(vals(argmax(x, 0)), {1, 0, 1});
  EXPECT_EQ(shape_of(argmax(x, 1, true)), (std::vector<std::int64_t>{2, 1}));
  EXPECT_EQ(argmax(x.t()).item(), 1);  // flattened row-major over the transposed view: 1,10,9,...
  EXPECT_EQ(argmax(make({1, kNaN, 3}, {3})).item(), 1);
  EXPECT_EQ(argmax(make({3, 7, 7}, {3}, ScalarType::Int8)).item(), 1);
  EXPECT_ERROR(IndexError, argmax(x, 2), "[argmax] dimension 2 out of range");
}

TEST(OpsReduce, LargeFullSumIsThreadCountIndependent) {
  const std::int64_t n = std::int64_t{1} << 20;
  const auto v = uniform_values(static_cast<std::size_t>(n), 11);
  const Tensor x = make(v, {n});
  const auto xv = vals(x);
  double ref = 0;
  for (double e : xv)
    ref += e;
  float s1, s2, s3, m1, m2;
  {
    core::ScopedNumThreads t(1);
    s1 = sum(x).to_vector<float>()[0];
    m1 = mean(x).to_vector<float>()[0];
  }
  {
    core::ScopedNumThreads t(2);
    s2 = sum(x).to_vector<float>()[0];
    m2 = mean(x).to_vector<float>()[0];
  }
  {
    core::ScopedNumThreads t(3);
    s3 = sum(x).to_vector<float>()[0];
  }
  EXPECT_EQ(std::memcmp(&s1, &s2, sizeof s1), 0) << s1 << " vs " << s2;
  EXPECT_EQ(std::memcmp(&s1, &s3, sizeof s1), 0) << s1 << " vs " << s3;
  EXPECT_EQ(std::memcmp(&m1, &m2, sizeof m1), 0) << m1 << " vs " << m2;
  EXPECT_NEAR(s1, ref, 1e-4 * std::max(1.0, std::abs(ref)));
  EXPECT_NEAR(m1, ref / static_cast<double>(n), 1e-9);
  // Row reductions of long rows are thread-count independent too.
  const Tensor rows = x.view({4, n / 4});
  std::vector<double> r1, r2;
  {
    core::ScopedNumThreads t(1);
    r1 = vals(norm(rows, 2.0, {1}));
  }
  {
    core::ScopedNumThreads t(2);
    r2 = vals(norm(rows, 2.0, {1}));
  }
  expect_exact(r2, r1);
}

TEST(OpsReduce, ForeachSumSqIsTheGlobalSquaredNormInFloat64) {
  // Sizes across the kernel's block (32768) and the empty case; float32 and float64 together.
  const std::vector<std::int64_t> sizes = {7, 70000, 0, 256, 32768, 131073};
  std::vector<Tensor> ts;
  long double ref = 0;
  std::uint32_t seed = 40;
  for (std::int64_t n : sizes) {
    const ScalarType dt = n % 2 == 0 ? ScalarType::Float32 : ScalarType::Float64;
    ts.push_back(make(uniform_values(static_cast<std::size_t>(n), seed++, -3, 3), {n}, dt));
    for (double e : vals(ts.back()))  // the stored values, converted exactly
      ref += static_cast<long double>(e) * e;
  }
  ts.insert(ts.begin() + 2, Tensor());  // an undefined gradient is skipped
  std::vector<double> by_threads;
  for (int threads : {1, 2, 3}) {
    core::ScopedNumThreads t(threads);
    const Tensor s = foreach_sum_sq(ts);
    EXPECT_EQ(s.dtype(), ScalarType::Float64);
    EXPECT_EQ(s.dim(), 0);
    by_threads.push_back(s.item());
  }
  expect_exact(by_threads, std::vector<double>(3, by_threads[0]));
  EXPECT_NEAR(by_threads[0], static_cast<double>(ref), 1e-12 * static_cast<double>(ref));

  // Strided and 16-bit tensors take the per-tensor path: the same value within rounding.
  const Tensor m = make(uniform_values(12, 50), {3, 4});
  const Tensor h = make(uniform_values(9, 51), {9}, ScalarType::Float16);
  double mixed_ref = 0;
  for (const Tensor& t : {m, h})
    for (double e : vals(t))
      mixed_ref += e * e;
  EXPECT_NEAR(foreach_sum_sq({m.t(), h}).item(), mixed_ref, 1e-12 * mixed_ref);

  EXPECT_FALSE(foreach_sum_sq({}).defined());
  EXPECT_FALSE(foreach_sum_sq({Tensor(), Tensor()}).defined());
  EXPECT_ERROR(TypeError, foreach_sum_sq({m, make({1, 2}, {2}, ScalarType::Int64)}),
               "[foreach_sum_sq] tensors[1] must be floating point, got int64");
}

// ---- linear algebra -----------------------------------------------------------------------------

// C[m,n] = A[m,k] B[k,n] in float64, row-major.
std::vector<double> ref_mm(const std::vector<double>& a, const std::vector<double>& b,
                           std::int64_t m, std::int64_t k, std::int64_t n) {
  std::vector<double> c(static_cast<std::size_t>(m * n), 0.0);
  for (std::int64_t i = 0; i < m; ++i)
    for (std::int64_t j = 0; j < n; ++j) {
      double s = 0;
      for (std::int64_t p = 0; p < k; ++p)
        s += a[static_cast<std::size_t>(i * k + p)] * b[static_cast<std::size_t>(p * n + j)];
      c[static_cast<std::size_t>(i * n + j)] = s;
    }
  return c;
}

enum class Layout { Contiguous, Transposed, RowStep, ColStep, Offset };
const Layout kLayouts[] = {Layout::Contiguous, Layout::Transposed, Layout::RowStep, Layout::ColStep,
                           Layout::Offset};

const char* layout_name(Layout l) {
  switch (l) {
    case Layout::Contiguous:
      return "contiguous";
    case Layout::Transposed:
      return "transposed";
    case Layout::RowStep:
      return "row-step";
    case Layout::ColStep:
      return "col-step";
    case Layout::Offset:
      return "offset";
  }
  return "?";
}

// A rows x cols matrix with logical values `v` (row-major) stored in the given layout. Storage the
// view does not cover is NaN, so reading it by mistake shows in the result.
Tensor make_matrix(const std::vector<double>& v, std::int64_t rows, std::int64_t cols,
                   Layout layout, ScalarType dt) {
  const auto at = [&](std::int64_t i, std::int64_t j) {
    return v[static_cast<std::size_t>(i * cols + j)];
  };
  switch (layout) {
    case Layout::Contiguous:
      return make(v, {rows, cols}, dt);
    case Layout::Transposed: {
      std::vector<double> w(v.size());
      for (std::int64_t i = 0; i < rows; ++i)
        for (std::int64_t j = 0; j < cols; ++j)
          w[static_cast<std::size_t>(j * rows + i)] = at(i, j);
      return make(w, {cols, rows}, dt).t();
    }
    case Layout::RowStep: {
      std::vector<double> w(static_cast<std::size_t>(2 * rows * cols), kNaN);
      for (std::int64_t i = 0; i < rows; ++i)
        for (std::int64_t j = 0; j < cols; ++j)
          w[static_cast<std::size_t>(2 * i * cols + j)] = at(i, j);
      return make(w, {2 * rows, cols}, dt).slice(0, 0, 2 * rows, 2);
    }
    case Layout::ColStep: {
      std::vector<double> w(static_cast<std::size_t>(2 * rows * cols), kNaN);
      for (std::int64_t i = 0; i < rows; ++i)
        for (std::int64_t j = 0; j < cols; ++j)
          w[static_cast<std::size_t>(i * 2 * cols + 2 * j)] = at(i, j);
      return make(w, {rows, 2 * cols}, dt).slice(1, 0, 2 * cols, 2);
    }
    case Layout::Offset: {
      std::vector<double> w(static_cast<std::size_t>((rows + 1) * (cols + 2)), kNaN);
      for (std::int64_t i = 0; i < rows; ++i)
        for (std::int64_t j = 0; j < cols; ++j)
          w[static_cast<std::size_t>((i + 1) * (cols + 2) + j + 1)] = at(i, j);
      return make(w, {rows + 1, cols + 2}, dt).narrow(0, 1, rows).narrow(1, 1, cols);
    }
  }
  return {};
}

struct MnK {
  std::int64_t m, k, n;
};
const MnK kMatmulSizes[] = {{1, 1, 1}, {1, 7, 1}, {5, 1, 3},    {2, 3, 4},
                            {7, 5, 3}, {1, 9, 6}, {13, 17, 11}, {33, 64, 65}};

TEST(OpsLinalg, MmAllLayoutsExactOnDyadicValues) {
  std::uint32_t seed = 100;
  for (const auto& s : kMatmulSizes) {
    const auto av = dyadic_values(static_cast<std::size_t>(s.m * s.k), seed++);
    const auto bv = dyadic_values(static_cast<std::size_t>(s.k * s.n), seed++);
    const auto want = ref_mm(av, bv, s.m, s.k, s.n);
    for (Layout la : kLayouts) {
      for (Layout lb : kLayouts) {
        const Tensor a = make_matrix(av, s.m, s.k, la, ScalarType::Float32);
        const Tensor b = make_matrix(bv, s.k, s.n, lb, ScalarType::Float32);
        const Tensor c = mm(a, b);
        const std::string what = std::to_string(s.m) + "x" + std::to_string(s.k) + "x" +
                                 std::to_string(s.n) + " " + layout_name(la) + "/" +
                                 layout_name(lb);
        EXPECT_EQ(shape_of(c), (std::vector<std::int64_t>{s.m, s.n})) << what;
        EXPECT_EQ(c.dtype(), ScalarType::Float32);
        expect_exact(vals(c), want, what);
      }
    }
  }
}

TEST(OpsLinalg, MmRandomValuesFloat32AndFloat64) {
  std::uint32_t seed = 200;
  for (const auto& s : kMatmulSizes) {
    const auto av = uniform_values(static_cast<std::size_t>(s.m * s.k), seed++);
    const auto bv = uniform_values(static_cast<std::size_t>(s.k * s.n), seed++);
    for (Layout la : {Layout::Contiguous, Layout::Transposed, Layout::ColStep}) {
      for (Layout lb : {Layout::Contiguous, Layout::Transposed, Layout::Offset}) {
        const Tensor a = make_matrix(av, s.m, s.k, la, ScalarType::Float32);
        const Tensor b = make_matrix(bv, s.k, s.n, lb, ScalarType::Float32);
        const auto want = ref_mm(vals(a.contiguous()), vals(b.contiguous()), s.m, s.k, s.n);
        expect_close(vals(mm(a, b)), want, 1e-6, 2e-7 * static_cast<double>(s.k), "f32");
        const Tensor ad = make_matrix(av, s.m, s.k, la, ScalarType::Float64);
        const Tensor bd = make_matrix(bv, s.k, s.n, lb, ScalarType::Float64);
        const Tensor cd = mm(ad, bd);
        EXPECT_EQ(cd.dtype(), ScalarType::Float64);
        expect_close(vals(cd), ref_mm(av, bv, s.m, s.k, s.n), 1e-14,
                     1e-15 * static_cast<double>(s.k), "f64");
      }
    }
  }
  // Mixed float32 x float64 promotes to float64.
  EXPECT_EQ(mm(zeros({2, 2}), zeros({2, 2}, ScalarType::Float64)).dtype(), ScalarType::Float64);
}

TEST(OpsLinalg, MmHalfAndBFloat16) {
  for (ScalarType dt : {ScalarType::Float16, ScalarType::BFloat16}) {
    // Dyadic values: the float32 product is exact, so the result is exactly its rounding.
    const auto av = dyadic_values(13 * 40, 300);
    const auto bv = dyadic_values(40 * 9, 301);
    auto want = ref_mm(av, bv, 13, 40, 9);
    for (auto& w : want)
      w = round_to(w, dt);
    for (Layout la : {Layout::Contiguous, Layout::Transposed, Layout::ColStep}) {
      const Tensor c =
          mm(make_matrix(av, 13, 40, la, dt), make_matrix(bv, 40, 9, Layout::Transposed, dt));
      EXPECT_EQ(c.dtype(), dt);
      expect_exact(vals(c), want, std::string(core::scalar_type_name(dt)) + " " + layout_name(la));
    }
    // Random values: within the output rounding of the dtype.
    const Tensor a = make(uniform_values(8 * 64, 302), {8, 64}, dt);
    const Tensor b = make(uniform_values(64 * 5, 303), {64, 5}, dt);
    const auto want_r = ref_mm(vals(a), vals(b), 8, 64, 5);
    const double rel = dt == ScalarType::Float16 ? 1e-3 : 8e-3;
    expect_close(vals(matmul(a, b)), want_r, rel, 1e-4, "random 16-bit");
  }
}

TEST(OpsLinalg, MmZeroSizes) {
  const Tensor c = mm(empty({3, 0}), empty({0, 4}));
  EXPECT_EQ(shape_of(c), (std::vector<std::int64_t>{3, 4}));
  expect_exact(vals(c), std::vector<double>(12, 0.0));
  const Tensor c64 = mm(empty({2, 0}, ScalarType::Float64), empty({0, 2}, ScalarType::Float64));
  expect_exact(vals(c64), std::vector<double>(4, 0.0));
  const Tensor ch = mm(empty({2, 0}, ScalarType::Float16), empty({0, 3}, ScalarType::Float16));
  expect_exact(vals(ch), std::vector<double>(6, 0.0));
  EXPECT_EQ(shape_of(mm(zeros({0, 3}), zeros({3, 4}))), (std::vector<std::int64_t>{0, 4}));
  EXPECT_EQ(shape_of(mm(zeros({2, 3}), zeros({3, 0}))), (std::vector<std::int64_t>{2, 0}));
  // k = 0 with a bias: beta * bias.
  const Tensor r = addmm(make({1, 2}, {2}), empty({2, 0}), empty({0, 2}), 0.5, 3.0);
  expect_exact(vals(r), {0.5, 1, 0.5, 1});
}

TEST(OpsLinalg, MmErrors) {
  EXPECT_ERROR(ValueError, mm(zeros({2, 3}), zeros({4, 5})),
               "[mm] shapes [2, 3] and [4, 5] cannot be multiplied (3 != 4)");
  EXPECT_ERROR(ValueError, mm(zeros({2, 3, 4}), zeros({4, 5})), "[mm] expects 2-D tensors");
  EXPECT_ERROR(TypeError, mm(zeros({2, 2}, ScalarType::Int64), zeros({2, 2}, ScalarType::Int64)),
               "[mm] expects floating-point inputs, got int64 and int64");
  EXPECT_ERROR(ValueError, addmm(zeros({3}), zeros({2, 3}), zeros({2, 3})),
               "[addmm] shapes [2, 3] and [2, 3] cannot be multiplied (3 != 2)");
  EXPECT_ERROR(ValueError, addmm(zeros({2, 1, 4}), zeros({3, 2}), zeros({2, 4})),
               "[addmm] input of shape [2, 1, 4] does not broadcast to the product's shape [3, 4]");
  EXPECT_ERROR(ValueError, bmm(zeros({2, 3, 4}), zeros({3, 4, 5})),
               "[bmm] batch sizes differ: 2 vs 3");
  EXPECT_ERROR(ValueError, bmm(zeros({2, 3, 4}), zeros({2, 5, 6})),
               "[bmm] shapes [2, 3, 4] and [2, 5, 6] cannot be multiplied (4 != 5)");
  EXPECT_ERROR(ValueError, bmm(zeros({3, 4}), zeros({4, 5})), "[bmm] expects 3-D tensors");
  EXPECT_ERROR(ValueError, baddbmm(zeros({2, 3, 5}), zeros({2, 3, 4}), zeros({2, 5, 5})),
               "[baddbmm] shapes [2, 3, 4] and [2, 5, 5] cannot be batch-multiplied");
  EXPECT_ERROR(ValueError, matmul(zeros({3}), zeros({4})),
               "[matmul] 1-D tensors of sizes 3 and 4 cannot be multiplied");
  EXPECT_ERROR(ValueError, matmul(zeros({2, 3}), zeros({4})), "cannot be multiplied (3 != 4)");
  EXPECT_ERROR(ValueError, matmul(zeros({2, 3, 4}), zeros({5, 6})),
               "[matmul] shapes [2, 3, 4] and [5, 6] cannot be multiplied (4 != 5)");
  EXPECT_ERROR(ValueError, matmul(zeros({2, 3, 4}), zeros({3, 4, 5})),
               "[matmul] shapes [2] and [3]", "cannot be broadcast");
  EXPECT_ERROR(ValueError, matmul(scalar_tensor(1.0, ScalarType::Float32), zeros({2})),
               "[matmul] both arguments need at least 1 dimension");
  EXPECT_ERROR(ValueError, syrk(zeros({3})), "[syrk] expects a 2-D matrix, got shape [3]");
  EXPECT_ERROR(TypeError, syrk(zeros({3, 3}, ScalarType::Int64)),
               "[syrk] expects a floating-point tensor, got int64");
}

TEST(OpsLinalg, Addmm) {
  const std::int64_t m = 5, k = 7, n = 4;
  const auto av = dyadic_values(m * k, 400);
  const auto bv = dyadic_values(k * n, 401);
  const auto prod = ref_mm(av, bv, m, k, n);
  const auto biasv = dyadic_values(m * n, 402);
  struct BiasCase {
    std::vector<std::int64_t> shape;
    std::function<double(std::int64_t, std::int64_t)> at;
  };
  const BiasCase biases[] = {
      {{n}, [&](std::int64_t, std::int64_t j) { return biasv[j]; }},
      {{1, n}, [&](std::int64_t, std::int64_t j) { return biasv[j]; }},
      {{m, 1}, [&](std::int64_t i, std::int64_t) { return biasv[i]; }},
      {{}, [&](std::int64_t, std::int64_t) { return biasv[0]; }},
      {{m, n}, [&](std::int64_t i, std::int64_t j) { return biasv[i * n + j]; }},
  };
  for (const auto& bc : biases) {
    const Tensor bias = make(
        std::vector<double>(biasv.begin(), biasv.begin() + static_cast<long>(numel_of(bc.shape))),
        bc.shape);
    for (double beta : {1.0, 0.5, -2.0}) {
      for (double alpha : {1.0, 2.0, -0.5}) {
        for (Layout la : {Layout::Contiguous, Layout::Transposed}) {
          const Tensor r =
              addmm(bias, make_matrix(av, m, k, la, ScalarType::Float32),
                    make_matrix(bv, k, n, Layout::Transposed, ScalarType::Float32), beta, alpha);
          EXPECT_EQ(shape_of(r), (std::vector<std::int64_t>{m, n}));
          std::vector<double> want;
          for (std::int64_t i = 0; i < m; ++i)
            for (std::int64_t j = 0; j < n; ++j)
              want.push_back(beta * bc.at(i, j) +
                             alpha * prod[static_cast<std::size_t>(i * n + j)]);
          expect_exact(vals(r), want,
                       "bias " + ::testing::PrintToString(bc.shape) + " beta " +
                           std::to_string(beta) + " alpha " + std::to_string(alpha));
        }
      }
    }
  }
  // beta == 0 ignores the bias entirely, even NaN and inf.
  const Tensor nan_bias = make({kNaN, kInf, -kInf, kNaN}, {n});
  const Tensor r0 = addmm(nan_bias, make(av, {m, k}), make(bv, {k, n}), 0.0, 2.0);
  std::vector<double> want0;
  for (double p : prod)
    want0.push_back(2.0 * p);
  expect_exact(vals(r0), want0, "beta 0");
  // ... but with beta != 0 a NaN bias propagates.
  EXPECT_TRUE(std::isnan(vals(addmm(nan_bias, make(av, {m, k}), make(bv, {k, n})))[0]));
  // The operands decide the dtype; the bias is converted to it.
  EXPECT_EQ(
      addmm(zeros({2}), zeros({2, 2}, ScalarType::Float16), zeros({2, 2}, ScalarType::Float16))
          .dtype(),
      ScalarType::Float16);
}

TEST(OpsLinalg, BmmAndBaddbmm) {
  const std::int64_t B = 3, m = 4, k = 5, n = 3;
  const auto av = dyadic_values(B * m * k, 500);
  const auto bv = dyadic_values(B * k * n, 501);
  std::vector<double> want;
  for (std::int64_t b = 0; b < B; ++b) {
    const std::vector<double> ab(av.begin() + b * m * k, av.begin() + (b + 1) * m * k);
    const std::vector<double> bb(bv.begin() + b * k * n, bv.begin() + (b + 1) * k * n);
    const auto c = ref_mm(ab, bb, m, k, n);
    want.insert(want.end(), c.begin(), c.end());
  }
  const Tensor a = make(av, {B, m, k});
  const Tensor b = make(bv, {B, k, n});
  // Transposed within each batch: stored [B, k, m], viewed [B, m, k].
  std::vector<double> at(av.size()), bt(bv.size());
  for (std::int64_t x = 0; x < B; ++x) {
    for (std::int64_t i = 0; i < m; ++i)
      for (std::int64_t p = 0; p < k; ++p)
        at[static_cast<std::size_t>(x * m * k + p * m + i)] =
            av[static_cast<std::size_t>(x * m * k + i * k + p)];
    for (std::int64_t p = 0; p < k; ++p)
      for (std::int64_t j = 0; j < n; ++j)
        bt[static_cast<std::size_t>(x * k * n + j * k + p)] =
            bv[static_cast<std::size_t>(x * k * n + p * n + j)];
  }
  const Tensor a_t = make(at, {B, k, m}).transpose(1, 2);
  const Tensor b_t = make(bt, {B, n, k}).transpose(1, 2);
  // Batch not outermost in memory: stored [m, B, k].
  const Tensor a_p = a.permute({1, 0, 2}).contiguous().permute({1, 0, 2});
  ASSERT_FALSE(a_p.is_contiguous());
  for (const Tensor* x : {&a, &a_t, &a_p}) {
    for (const Tensor* y : {&b, &b_t}) {
      const Tensor c = bmm(*x, *y);
      EXPECT_EQ(shape_of(c), (std::vector<std::int64_t>{B, m, n}));
      expect_exact(vals(c), want, "bmm");
    }
  }
  // A broadcast batch (stride 0).
  const Tensor a0 =
      make(std::vector<double>(av.begin(), av.begin() + m * k), {1, m, k}).expand({B, m, k});
  std::vector<double> want0;
  for (std::int64_t x = 0; x < B; ++x) {
    const std::vector<double> bb(bv.begin() + x * k * n, bv.begin() + (x + 1) * k * n);
    const auto c = ref_mm(std::vector<double>(av.begin(), av.begin() + m * k), bb, m, k, n);
    want0.insert(want0.end(), c.begin(), c.end());
  }
  expect_exact(vals(bmm(a0, b)), want0, "broadcast batch");

  // baddbmm: c broadcast from [n] and from [1, m, n]; beta 0 ignores NaN.
  const auto cv = dyadic_values(m * n, 502);
  const Tensor c_row = make(std::vector<double>(cv.begin(), cv.begin() + n), {n});
  const Tensor c_mat = make(cv, {1, m, n});
  std::vector<double> want_row, want_mat, want_b0;
  for (std::int64_t x = 0; x < B; ++x)
    for (std::int64_t i = 0; i < m; ++i)
      for (std::int64_t j = 0; j < n; ++j) {
        const double p = want[static_cast<std::size_t>((x * m + i) * n + j)];
        want_row.push_back(0.5 * cv[static_cast<std::size_t>(j)] + 2.0 * p);
        want_mat.push_back(-1.0 * cv[static_cast<std::size_t>(i * n + j)] + p);
        want_b0.push_back(-0.5 * p);
      }
  expect_exact(vals(baddbmm(c_row, a, b_t, 0.5, 2.0)), want_row, "baddbmm row");
  expect_exact(vals(baddbmm(c_mat, a_t, b, -1.0, 1.0)), want_mat, "baddbmm mat");
  expect_exact(vals(baddbmm(full({B, m, n}, kNaN), a, b, 0.0, -0.5)), want_b0, "baddbmm beta 0");
  // float64 and float16 batches.
  expect_exact(vals(bmm(a.to(ScalarType::Float64), b.to(ScalarType::Float64))), want, "bmm f64");
  auto want_h = want;
  for (auto& w : want_h)
    w = round_to(w, ScalarType::Float16);
  const Tensor ch = bmm(a.to(ScalarType::Float16), b_t.to(ScalarType::Float16));
  EXPECT_EQ(ch.dtype(), ScalarType::Float16);
  expect_exact(vals(ch), want_h, "bmm f16");
}

TEST(OpsLinalg, MatmulShapes) {
  // 1-D . 1-D -> 0-d (also with a strided vector).
  const auto v4 = dyadic_values(8, 600);
  const Tensor a1 = make(v4, {8}).slice(0, 0, 8, 2);
  const Tensor b1 = make({1, 2, 3, 4}, {4});
  const Tensor d = matmul(a1, b1);
  EXPECT_EQ(d.dim(), 0);
  EXPECT_EQ(d.item(), v4[0] * 1 + v4[2] * 2 + v4[4] * 3 + v4[6] * 4);
  // 1-D . 2-D -> [n]; 2-D . 1-D -> [m].
  const auto mv = dyadic_values(12, 601);
  const Tensor M = make(mv, {4, 3});
  const Tensor vm = matmul(b1, M);
  EXPECT_EQ(shape_of(vm), (std::vector<std::int64_t>{3}));
  expect_exact(vals(vm), ref_mm({1, 2, 3, 4}, mv, 1, 4, 3));
  const Tensor mvp = matmul(M.t(), b1);
  EXPECT_EQ(shape_of(mvp), (std::vector<std::int64_t>{3}));
  expect_exact(vals(mvp), ref_mm({1, 2, 3, 4}, mv, 1, 4, 3));
  const Tensor mv2 = matmul(M, a1.slice(0, 0, 3));
  EXPECT_EQ(shape_of(mv2), (std::vector<std::int64_t>{4}));
  expect_exact(vals(mv2), ref_mm(mv, {v4[0], v4[2], v4[4]}, 4, 3, 1));
  // 2-D . 2-D is mm.
  expect_exact(vals(matmul(M.t(), M)), ref_mm(vals(M.t().contiguous()), mv, 3, 4, 3));

  // Batched with broadcast: [2,1,3,4] x [5,4,2] -> [2,5,3,2].
  const auto av = dyadic_values(2 * 3 * 4, 602);
  const auto bv = dyadic_values(5 * 4 * 2, 603);
  const Tensor A = make(av, {2, 1, 3, 4});
  const Tensor Bm = make(bv, {5, 4, 2});
  const Tensor C = matmul(A, Bm);
  EXPECT_EQ(shape_of(C), (std::vector<std::int64_t>{2, 5, 3, 2}));
  std::vector<double> want;
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 5; ++j) {
      const auto c =
          ref_mm(std::vector<double>(av.begin() + i * 12, av.begin() + (i + 1) * 12),
                 std::vector<double>(bv.begin() + j * 8, bv.begin() + (j + 1) * 8), 3, 4, 2);
      want.insert(want.end(), c.begin(), c.end());
    }
  expect_exact(vals(C), want, "batched broadcast");
  // [3,4] x [2,4,5] -> [2,3,5].
  const auto bv2 = dyadic_values(2 * 4 * 5, 604);
  const Tensor C2 = matmul(make(mv, {3, 4}), make(bv2, {2, 4, 5}));
  EXPECT_EQ(shape_of(C2), (std::vector<std::int64_t>{2, 3, 5}));
  std::vector<double> want2;
  for (int j = 0; j < 2; ++j) {
    const auto c =
        ref_mm(mv, std::vector<double>(bv2.begin() + j * 20, bv2.begin() + (j + 1) * 20), 3, 4, 5);
    want2.insert(want2.end(), c.begin(), c.end());
  }
  expect_exact(vals(C2), want2, "2-D x 3-D");
  // [4] x [2,4,5] -> [2,5]; [2,3,4] x [4] -> [2,3].
  const Tensor C3 = matmul(b1, make(bv2, {2, 4, 5}));
  EXPECT_EQ(shape_of(C3), (std::vector<std::int64_t>{2, 5}));
  std::vector<double> want3;
  for (int j = 0; j < 2; ++j) {
    const auto c =
        ref_mm({1, 2, 3, 4}, std::vector<double>(bv2.begin() + j * 20, bv2.begin() + (j + 1) * 20),
               1, 4, 5);
    want3.insert(want3.end(), c.begin(), c.end());
  }
  expect_exact(vals(C3), want3, "1-D x 3-D");
  const Tensor C4 = matmul(make(av, {2, 3, 4}), b1);
  EXPECT_EQ(shape_of(C4), (std::vector<std::int64_t>{2, 3}));
  expect_exact(vals(C4), ref_mm(av, {1, 2, 3, 4}, 6, 4, 1), "3-D x 1-D");
  // float64 matmul.
  const Tensor Cd = matmul(A.to(ScalarType::Float64), Bm.to(ScalarType::Float64));
  EXPECT_EQ(Cd.dtype(), ScalarType::Float64);
  expect_exact(vals(Cd), want, "batched f64");
}

TEST(OpsLinalg, Syrk) {
  struct Case {
    std::int64_t n, k;
  };
  const Case cases[] = {{1, 1}, {5, 3}, {17, 33}, {64, 7}, {3, 0}, {40, 70}};
  std::uint32_t seed = 700;
  for (const auto& c : cases) {
    const auto xv = dyadic_values(static_cast<std::size_t>(c.n * c.k), seed++);
    std::vector<double> xtv(xv.size());
    for (std::int64_t i = 0; i < c.n; ++i)
      for (std::int64_t p = 0; p < c.k; ++p)
        xtv[static_cast<std::size_t>(p * c.n + i)] = xv[static_cast<std::size_t>(i * c.k + p)];
    const auto want = ref_mm(xv, xtv, c.n, c.k, c.n);
    for (Layout l : {Layout::Contiguous, Layout::Transposed, Layout::ColStep, Layout::Offset}) {
      const Tensor x = make_matrix(xv, c.n, c.k, l, ScalarType::Float32);
      const Tensor s = syrk(x);
      const std::string what =
          std::to_string(c.n) + "x" + std::to_string(c.k) + " " + layout_name(l);
      EXPECT_EQ(shape_of(s), (std::vector<std::int64_t>{c.n, c.n})) << what;
      expect_exact(vals(s), want, what);
      expect_exact(vals(s), vals(mm(x, x.t())), what + " vs mm");
      std::vector<double> half_want;
      for (double w : want)
        half_want.push_back(0.5 * w);
      expect_exact(vals(syrk(x, 0.5)), half_want, what + " alpha");
    }
  }
  // Random float32 values: close to mm(x, x^T) and exactly symmetric.
  for (std::int64_t n : {9, 50, 130}) {
    const Tensor x = make(uniform_values(static_cast<std::size_t>(n * 37), 800 + n), {n, 37});
    const auto s = vals(syrk(x));
    const auto ref = ref_mm(vals(x), vals(x.t().contiguous()), n, 37, n);
    expect_close(s, ref, 1e-6, 1e-5, "syrk random");
    expect_close(s, vals(mm(x, x.t())), 1e-6, 1e-5, "syrk vs mm");
    for (std::int64_t i = 0; i < n; ++i)
      for (std::int64_t j = 0; j < i; ++j)
        ASSERT_EQ(s[static_cast<std::size_t>(i * n + j)], s[static_cast<std::size_t>(j * n + i)])
            << "not symmetric at " << i << "," << j;
  }
  // float64 and float16.
  const auto xv = dyadic_values(6 * 10, 900);
  const Tensor xd = make(xv, {6, 10}, ScalarType::Float64);
  EXPECT_EQ(syrk(xd).dtype(), ScalarType::Float64);
  expect_exact(vals(syrk(xd)), vals(mm(xd, xd.t())));
  const Tensor xh = make(xv, {6, 10}, ScalarType::Float16);
  const Tensor sh = syrk(xh);
  EXPECT_EQ(sh.dtype(), ScalarType::Float16);
  expect_exact(vals(sh), vals(mm(xh, xh.t())));
}

// ---- softmax ------------------------------------------------------------------------------------

// softmax / log_softmax of row-major `v` of `shape` along `dim`, in float64.
std::vector<double> ref_softmax(const std::vector<double>& v,
                                const std::vector<std::int64_t>& shape, std::int64_t dim,
                                bool log) {
  std::int64_t outer = 1, inner = 1;
  for (std::int64_t d = 0; d < dim; ++d)
    outer *= shape[static_cast<std::size_t>(d)];
  for (std::size_t d = static_cast<std::size_t>(dim) + 1; d < shape.size(); ++d)
    inner *= shape[d];
  const std::int64_t n = shape[static_cast<std::size_t>(dim)];
  std::vector<double> out(v.size());
  for (std::int64_t o = 0; o < outer; ++o)
    for (std::int64_t i = 0; i < inner; ++i) {
      const auto at = [&](std::int64_t j) {
        return static_cast<std::size_t>((o * n + j) * inner + i);
      };
      double m = -kInf;
      for (std::int64_t j = 0; j < n; ++j)
        m = std::max(m, v[at(j)]);
      double s = 0;
      for (std::int64_t j = 0; j < n; ++j)
        s += std::exp(v[at(j)] - m);
      for (std::int64_t j = 0; j < n; ++j)
        out[at(j)] = log ? (v[at(j)] - m) - std::log(s) : std::exp(v[at(j)] - m) / s;
    }
  return out;
}

TEST(OpsSoftmax, AlongEachDimMatchesReference) {
  const std::vector<std::int64_t> shape = {3, 4, 5};
  const Tensor x = make(uniform_values(60, 1000, -6, 6), shape);
  const auto xv = vals(x);
  for (std::int64_t dim : {0, 1, 2, -1, -2, -3}) {
    const std::int64_t wd = dim < 0 ? dim + 3 : dim;
    const Tensor s = softmax(x, dim);
    EXPECT_EQ(shape_of(s), shape);
    EXPECT_EQ(s.dtype(), ScalarType::Float32);
    expect_close(vals(s), ref_softmax(xv, shape, wd, false), 1e-6, 1e-7,
                 "softmax dim " + std::to_string(dim));
    expect_close(vals(sum(s, {dim})), std::vector<double>(60 / shape[wd], 1.0), 0, 1e-6,
                 "row sums dim " + std::to_string(dim));
    expect_close(vals(log_softmax(x, dim)), ref_softmax(xv, shape, wd, true), 1e-6, 1e-6,
                 "log_softmax dim " + std::to_string(dim));
  }
  // Non-contiguous input.
  const Tensor xt = x.transpose(0, 2);  // [5, 4, 3]
  const auto xtv = vals(xt.contiguous());
  expect_close(vals(softmax(xt, 1)), ref_softmax(xtv, {5, 4, 3}, 1, false), 1e-6, 1e-7,
               "transposed");
  expect_close(vals(log_softmax(xt, 0)), ref_softmax(xtv, {5, 4, 3}, 0, true), 1e-6, 1e-6,
               "transposed log");
  // float64, float16, bfloat16.
  const Tensor xd = make(uniform_values(60, 1001, -6, 6), shape, ScalarType::Float64);
  expect_close(vals(softmax(xd, 1)), ref_softmax(vals(xd), shape, 1, false), 1e-14, 1e-16, "f64");
  expect_close(vals(log_softmax(xd, 2)), ref_softmax(vals(xd), shape, 2, true), 1e-14, 1e-14,
               "f64 log");
  for (ScalarType dt : {ScalarType::Float16, ScalarType::BFloat16}) {
    const Tensor xh = make(uniform_values(60, 1002, -6, 6), shape, dt);
    const double rel = dt == ScalarType::Float16 ? 1e-3 : 8e-3;
    const Tensor sh = softmax(xh, 2);
    EXPECT_EQ(sh.dtype(), dt);
    expect_close(vals(sh), ref_softmax(vals(xh), shape, 2, false), rel, 1e-6, "16-bit softmax");
    expect_close(vals(log_softmax(xh, 0)), ref_softmax(vals(xh), shape, 0, true), rel, 1e-3,
                 "16-bit log_softmax");
  }
  // 0-d: softmax 1, log_softmax 0.
  EXPECT_EQ(softmax(scalar_tensor(3.0, ScalarType::Float32), 0).item(), 1.0);
  EXPECT_EQ(log_softmax(scalar_tensor(3.0, ScalarType::Float32), -1).item(), 0.0);
}

TEST(OpsSoftmax, LargeLogitsAreStable) {
  const Tensor x = make({1e4, 0, -1e4, 1e4 - 1, -1e4, -1e4 + 2, -1e4 + 1, -1e4}, {2, 4});
  const auto want = ref_softmax(vals(x), {2, 4}, 1, false);
  const auto want_log = ref_softmax(vals(x), {2, 4}, 1, true);
  const auto s = vals(softmax(x, 1));
  const auto ls = vals(log_softmax(x, 1));
  for (std::size_t i = 0; i < s.size(); ++i) {
    EXPECT_TRUE(std::isfinite(s[i])) << i;
    EXPECT_TRUE(std::isfinite(ls[i])) << i;
  }
  expect_close(s, want, 1e-6, 1e-7, "softmax large");
  // log_softmax must be accurate relative to its own magnitude, not to the logits'.
  expect_close(ls, want_log, 1e-6, 1e-6, "log_softmax large");
  EXPECT_NEAR(ls[0], -0.3132616875182228, 1e-6);
  EXPECT_NEAR(ls[3], -1.3132616875182228, 1e-6);
  // float16 logits near its max.
  const Tensor h = make({60000, 59999, -60000}, {3}, ScalarType::Float16);
  const auto sh = vals(softmax(h, 0));
  for (double v : sh)
    EXPECT_TRUE(std::isfinite(v));
  expect_close(sh, ref_softmax(vals(h), {3}, 0, false), 1e-3, 1e-6, "f16 large");
}

TEST(OpsSoftmax, InfiniteEntries) {
  // One -inf entry: probability 0, log-probability -inf; the rest is a normal softmax.
  const Tensor x = make({-kInf, 0, 1, 0, 1, 2}, {2, 3});
  const auto s = vals(softmax(x, 1));
  EXPECT_EQ(s[0], 0.0);
  expect_close(s, ref_softmax({-kInf, 0, 1, 0, 1, 2}, {2, 3}, 1, false), 1e-6, 1e-7);
  const auto ls = vals(log_softmax(x, 1));
  EXPECT_EQ(ls[0], -kInf);
  expect_close(ls, ref_softmax({-kInf, 0, 1, 0, 1, 2}, {2, 3}, 1, true), 1e-6, 1e-6);
  // A row that is entirely -inf has no defined softmax; only check it does not disturb the
  // other rows (the observed values are reported, not asserted).
  const Tensor y = make({-kInf, -kInf, -kInf, 0, 1, 2}, {2, 3});
  const auto sy = vals(softmax(y, 1));
  const auto ly = vals(log_softmax(y, 1));
  expect_close(std::vector<double>(sy.begin() + 3, sy.end()), ref_softmax({0, 1, 2}, {3}, 0, false),
               1e-6, 1e-7, "row 2 softmax");
  expect_close(std::vector<double>(ly.begin() + 3, ly.end()), ref_softmax({0, 1, 2}, {3}, 0, true),
               1e-6, 1e-6, "row 2 log_softmax");
  RecordProperty("all_neg_inf_softmax",
                 ::testing::PrintToString(std::vector<double>(sy.begin(), sy.begin() + 3)));
  RecordProperty("all_neg_inf_log_softmax",
                 ::testing::PrintToString(std::vector<double>(ly.begin(), ly.begin() + 3)));
}

TEST(OpsSoftmax, Errors) {
  EXPECT_ERROR(TypeError, softmax(make({1, 2}, {2}, ScalarType::Int64), 0),
               "[softmax] expects a floating-point tensor, got int64");
  EXPECT_ERROR(TypeError, log_softmax(make({1, 2}, {2}, ScalarType::Int32), 0),
               "[log_softmax] expects a floating-point tensor, got int32");
  EXPECT_ERROR(IndexError, softmax(zeros({2, 3, 4}), 3),
               "[softmax] dimension 3 out of range for a tensor of rank 3");
  EXPECT_ERROR(IndexError, log_softmax(zeros({2, 3}), -3),
               "[log_softmax] dimension -3 out of range");
}

// ---- indexing -----------------------------------------------------------------------------------

TEST(OpsIndex, IndexSelect) {
  std::vector<double> v(15);
  for (int i = 0; i < 15; ++i)
    v[i] = i;
  const Tensor t = make(v, {5, 3});
  // dim 0 on a contiguous tensor (the row-copy fast path), with repeats and negative indices.
  const Tensor idx = from_vector<std::int64_t>({4, 0, -1, 2, 4});
  const Tensor r = index_select(t, 0, idx);
  EXPECT_EQ(shape_of(r), (std::vector<std::int64_t>{5, 3}));
  expect_exact(vals(r), {12, 13, 14, 0, 1, 2, 12, 13, 14, 6, 7, 8, 12, 13, 14});
  // int32 indices; other dtypes.
  const Tensor idx32 = from_vector<std::int32_t>({1, 3});
  expect_exact(vals(index_select(t.to(ScalarType::Float16), 0, idx32)), {3, 4, 5, 9, 10, 11});
  expect_exact(vals(index_select(t.to(ScalarType::Int64), -2, idx32)), {3, 4, 5, 9, 10, 11});
  // dim 0 of a non-contiguous tensor (t^T is [3, 5]).
  expect_exact(vals(index_select(t.t(), 0, from_vector<std::int64_t>({2, 0}))),
               {2, 5, 8, 11, 14, 0, 3, 6, 9, 12});
  // dim 1 and dim -1.
  const Tensor c = index_select(t, 1, from_vector<std::int64_t>({2, 2, 0}));
  EXPECT_EQ(shape_of(c), (std::vector<std::int64_t>{5, 3}));
  expect_exact(vals(c), {2, 2, 0, 5, 5, 3, 8, 8, 6, 11, 11, 9, 14, 14, 12});
  expect_exact(vals(index_select(t, -1, from_vector<std::int64_t>({-1}))), {2, 5, 8, 11, 14});
  // 3-D, middle dim.
  std::vector<double> w(24);
  for (int i = 0; i < 24; ++i)
    w[i] = i;
  expect_exact(vals(index_select(make(w, {2, 3, 4}), 1, from_vector<std::int64_t>({2, 0}))),
               {8, 9, 10, 11, 0, 1, 2, 3, 20, 21, 22, 23, 12, 13, 14, 15});
  // Empty index.
  EXPECT_EQ(shape_of(index_select(t, 0, from_vector<std::int64_t>({}))),
            (std::vector<std::int64_t>{0, 3}));

  EXPECT_ERROR(IndexError, index_select(t, 0, from_vector<std::int64_t>({1, 7})),
               "[index_select] index 7 is out of range for dimension 0 with size 5");
  EXPECT_ERROR(IndexError, index_select(t, 0, from_vector<std::int64_t>({-6})),
               "[index_select] index -6 is out of range for dimension 0 with size 5");
  EXPECT_ERROR(IndexError, index_select(t, 1, from_vector<std::int32_t>({3})),
               "[index_select] index 3 is out of range for dimension 1 with size 3");
  EXPECT_ERROR(TypeError, index_select(t, 0, make({1}, {1})),
               "[index_select] index must be int64 or int32, got float32");
  EXPECT_ERROR(ValueError, index_select(t, 0, zeros({2, 2}, ScalarType::Int64)),
               "[index_select] index must be 1-D, got shape [2, 2]");
  EXPECT_ERROR(IndexError, index_select(t, 2, from_vector<std::int64_t>({0})),
               "[index_select] dimension 2 out of range");
}

TEST(OpsIndex, Gather) {
  std::vector<double> v(12);
  for (int i = 0; i < 12; ++i)
    v[i] = 10 * i;
  const Tensor t = make(v, {3, 4});
  // dim 0: out[i][j] = t[index[i][j]][j].
  const Tensor i0 = from_vector<std::int64_t>({2, 0, 1, 2, 0, 0, -1, 1}, {2, 4});
  const Tensor g0 = gather(t, 0, i0);
  EXPECT_EQ(shape_of(g0), (std::vector<std::int64_t>{2, 4}));
  expect_exact(vals(g0), {80, 10, 60, 110, 0, 10, 100, 70});
  // dim 1 with a smaller index: out[i][j] = t[i][index[i][j]].
  const Tensor i1 = from_vector<std::int32_t>({3, 3, 0, 1, 2, 0}, {3, 2});
  expect_exact(vals(gather(t, 1, i1)), {30, 30, 40, 50, 100, 80});
  expect_exact(vals(gather(t, -1, i1)), {30, 30, 40, 50, 100, 80});
  // Non-contiguous input and index.
  const Tensor tt = t.t();  // [4, 3]: tt[i][j] = t[j][i]
  const Tensor it = from_vector<std::int64_t>({0, 1, 2, 2, 0, 1}, {2, 3}).t();  // [3, 2]
  // it = [[0,2],[1,0],[2,1]]; out[i][j] = tt[i][it[i][j]] = t[it[i][j]][i]
  expect_exact(vals(gather(tt, 1, it)), {0, 80, 50, 10, 100, 60});
  EXPECT_EQ(gather(t.to(ScalarType::Int16), 0, i0).dtype(), ScalarType::Int16);

  EXPECT_ERROR(IndexError, gather(t, 1, from_vector<std::int64_t>({4}, {1, 1})),
               "[gather] index 4 is out of range for dimension 1 with size 4");
  EXPECT_ERROR(ValueError, gather(t, 0, from_vector<std::int64_t>({0, 1})),
               "[gather] index must have the input's rank (2), got shape [2]");
  EXPECT_ERROR(TypeError, gather(t, 0, zeros({1, 1}, ScalarType::Int16)),
               "[gather] index must be int64 or int32, got int16");
  EXPECT_ERROR(ValueError, gather(t, 0, zeros({1, 5}, ScalarType::Int64)),
               "[gather] index size 5 exceeds the input's size 4 at dimension 1");
}

TEST(OpsIndex, ScatterAddAccumulatesDuplicates) {
  const Tensor t = zeros({3, 4});
  // dim 0 with duplicate targets in the same column.
  const Tensor idx = from_vector<std::int64_t>({0, 1, 2, 0, 0, 1, 2, 0}, {2, 4});
  const Tensor src = make({1, 2, 3, 4, 10, 20, 30, 40}, {2, 4});
  const Tensor r = scatter_add(t, 0, idx, src);
  EXPECT_EQ(shape_of(r), (std::vector<std::int64_t>{3, 4}));
  // column 0: rows 0,0 get 1+10; col1: rows 1,1: 2+20; col2: rows 2,2: 3+30; col3: rows 0,0: 4+40.
  expect_exact(vals(r), {11, 0, 0, 44, 0, 22, 0, 0, 0, 0, 33, 0});
  expect_exact(vals(t), std::vector<double>(12, 0));  // not in place
  // dim 1, counts via ones; negative indices; a smaller index than src.
  const Tensor base = make({1, 1, 1, 1, 1, 1}, {2, 3}, ScalarType::Int64);
  const Tensor idx1 = from_vector<std::int64_t>({2, 2, -1, 0, 1, 0}, {2, 3});
  const Tensor ones_src = ones({2, 4}, ScalarType::Int64);
  const Tensor c = scatter_add(base, 1, idx1, ones_src);
  EXPECT_EQ(c.dtype(), ScalarType::Int64);
  expect_exact(vals(c), {1, 1, 4, 3, 2, 1});
  // src is converted to self's dtype; a non-contiguous src.
  const Tensor srcd =
      make({0.5, 1.5, 2.5, 3.5}, {2, 2}, ScalarType::Float64).t();  // [[.5,2.5],[1.5,3.5]]
  const Tensor r2 =
      scatter_add(zeros({2, 2}), 1, from_vector<std::int64_t>({1, 1, 0, 0}, {2, 2}), srcd);
  EXPECT_EQ(r2.dtype(), ScalarType::Float32);
  expect_exact(vals(r2), {0, 3, 5, 0});

  EXPECT_ERROR(ValueError, scatter_add(t, 0, from_vector<std::int64_t>({0}), src),
               "[scatter_add] self, index and src must have the same rank");
  EXPECT_ERROR(TypeError, scatter_add(t, 0, make({0, 0}, {1, 2}), src),
               "[scatter_add] index must be int64 or int32, got float32");
  EXPECT_ERROR(IndexError, scatter_add(t, 0, from_vector<std::int64_t>({3}, {1, 1}), src),
               "[scatter_add] index 3 is out of range for dimension 0 with size 3");
  EXPECT_ERROR(ValueError, scatter_add(t, 0, zeros({1, 5}, ScalarType::Int64), src),
               "[scatter_add] index shape [1, 5] exceeds src shape [2, 4]");
  // Contiguous index and src of the output's shape off `dim` take a blocked loop: bounds are
  // still checked there.
  EXPECT_ERROR(IndexError,
               scatter_add(t, 0, from_vector<std::int64_t>({0, 1, 2, -4}, {1, 4}),
                           make({1, 2, 3, 4}, {1, 4})),
               "[scatter_add] index -4 is out of range for dimension 0 with size 3");
}

// The blocked loop (contiguous index and src, index_select's backward) adds in the same order as
// the general walk, so both give the same bits: here along the middle dimension of a 3-D tensor,
// with repeated and negative indices, against the same values in a non-contiguous src.
TEST(OpsIndex, ScatterAddBlockedLoopEqualsTheGeneralWalk) {
  std::vector<std::int64_t> iv;
  std::vector<double> sv;
  for (int i = 0; i < 2 * 5 * 3; ++i) {
    iv.push_back((i * 7) % 4 - (i % 3 == 0 ? 4 : 0));  // in [-4, 3]
    sv.push_back(0.1 * i + 1e-3 * (i % 7));
  }
  const Tensor idx = from_vector<std::int64_t>(iv, {2, 5, 3});
  const Tensor src = make(sv, {2, 5, 3});
  const Tensor strided = src.transpose(0, 2).contiguous().transpose(0, 2);
  ASSERT_FALSE(strided.is_contiguous());
  const Tensor base = make(std::vector<double>(2 * 4 * 3, 0.25), {2, 4, 3});
  const Tensor blocked = scatter_add(base, 1, idx, src);
  const Tensor walked = scatter_add(base, 1, idx, strided);
  expect_exact(vals(blocked), vals(walked));
  double total = 0;
  for (double v : vals(blocked))
    total += v;
  double want = 0.25 * 24;
  for (double v : sv)
    want += static_cast<float>(v);
  EXPECT_NEAR(total, want, 1e-4);
}

// ---- random ops ---------------------------------------------------------------------------------

nlohmann::json load_rng_streams() {
  std::ifstream in(std::string(TB_TEST_DATA_DIR) + "/rng_cpu.json");
  EXPECT_TRUE(in.good()) << "cannot open rng_cpu.json";
  return nlohmann::json::parse(in);
}

// Draws the file's streams in its order from `gen` (null: the default CPU generator) and checks
// them bit for bit.
void check_streams(const nlohmann::json& s, rng::Generator* gen) {
  const auto rf = rand({8}, gen).to_vector<float>();
  const auto rd = rand({4}, gen, ScalarType::Float64).to_vector<double>();
  const auto n8 = randn({8}, gen).to_vector<float>();
  const auto n16 = randn({16}, gen).to_vector<float>();
  const auto pm = randperm(10, gen).to_vector<std::int64_t>();
  for (int i = 0; i < 8; ++i)
    EXPECT_EQ(rf[i], static_cast<float>(s["rand_f32_8"][i].get<double>())) << "rand_f32 " << i;
  for (int i = 0; i < 4; ++i)
    EXPECT_EQ(rd[i], s["rand_f64_4"][i].get<double>()) << "rand_f64 " << i;
  for (int i = 0; i < 8; ++i)
    EXPECT_EQ(n8[i], static_cast<float>(s["randn_f32_8"][i].get<double>())) << "randn8 " << i;
  for (int i = 0; i < 16; ++i)
    EXPECT_EQ(n16[i], static_cast<float>(s["randn_f32_16"][i].get<double>())) << "randn16 " << i;
  for (int i = 0; i < 10; ++i)
    EXPECT_EQ(pm[i], s["randperm_10"][i].get<std::int64_t>()) << "randperm " << i;
}

TEST(OpsRandom, SpecValues) {
  auto g = rng::make_generator(Device());
  g->manual_seed(0);
  const auto r = rand({5}, g.get()).to_vector<float>();
  const double want0[] = {0.49625659, 0.76822180, 0.08847743, 0.13203049, 0.30742282};
  for (int i = 0; i < 5; ++i)
    EXPECT_NEAR(r[i], want0[i], 5e-9) << i;
  g->manual_seed(42);
  const Tensor r42 = rand({3}, g.get());
  EXPECT_EQ(r42.dtype(), ScalarType::Float32);
  const auto v42 = r42.to_vector<float>();
  const double want42[] = {0.88226926, 0.91500396, 0.38286376};
  for (int i = 0; i < 3; ++i)
    EXPECT_NEAR(v42[i], want42[i], 5e-9) << i;
}

TEST(OpsRandom, StreamsMatchRecordedFile) {
  const auto j = load_rng_streams();
  auto g = rng::make_generator(Device());
  for (const auto& [key, streams] : j["seeds"].items()) {
    SCOPED_TRACE("seed " + key);
    g->manual_seed(std::stoull(key));
    check_streams(streams, g.get());
  }
  // The default generator, seeded globally, gives the same streams.
  for (const auto& [key, streams] : j["seeds"].items()) {
    SCOPED_TRACE("default generator, seed " + key);
    rng::manual_seed(std::stoull(key));
    check_streams(streams, nullptr);
  }
}

class FakeGenerator : public rng::Generator {
 public:
  Device device() const override { return Device(DeviceType::PrivateUse1, 0); }

 protected:
  void set_current_seed_unlocked(std::uint64_t) override {}
  std::uint64_t current_seed_unlocked() const override { return 0; }
  std::vector<std::uint8_t> get_state_unlocked() const override { return {}; }
  void set_state_unlocked(std::span<const std::uint8_t>) override {}
  void set_offset_unlocked(std::uint64_t) override {}
  std::uint64_t get_offset_unlocked() const override { return 0; }
  std::unique_ptr<Generator> clone_unlocked() const override {
    return std::make_unique<FakeGenerator>();
  }
};

TEST(OpsRandom, GeneratorDeviceMismatch) {
  FakeGenerator fake;
  EXPECT_ERROR(TypeError, rand({3}, &fake), "[uniform_] the generator is for ",
               "but the tensor is on cpu");
  EXPECT_ERROR(TypeError, randn({3}, &fake), "[normal_] the generator is for ");
  Tensor t = zeros({4});
  EXPECT_ERROR(TypeError, bernoulli_(t, 0.5, &fake), "[bernoulli_] the generator is for ");
  EXPECT_ERROR(TypeError, bernoulli(t, &fake), "[bernoulli] the generator is for ");
  EXPECT_ERROR(TypeError, randperm(5, &fake), "[randperm] the generator is for ",
               "but the output is on cpu");
}

TEST(OpsRandom, BernoulliUniformNormal) {
  auto g = rng::make_generator(Device());
  g->manual_seed(123);
  const std::int64_t n = 200000;
  Tensor t = empty({n});
  bernoulli_(t, 0.3, g.get());
  const auto bv = vals(t);
  double ones_count = 0;
  for (double v : bv) {
    ASSERT_TRUE(v == 0.0 || v == 1.0) << v;
    ones_count += v;
  }
  EXPECT_NEAR(ones_count / n, 0.3, 0.005);  // 5 sigma
  Tensor ti = empty({1000}, ScalarType::Int64);
  bernoulli_(ti, 1.0, g.get());
  expect_exact(vals(ti), std::vector<double>(1000, 1.0));
  bernoulli_(ti, 0.0, g.get());
  expect_exact(vals(ti), std::vector<double>(1000, 0.0));
  EXPECT_ERROR(ValueError, bernoulli_(t, 1.5, g.get()),
               "[bernoulli_] expects 0 <= p <= 1, got 1.5");
  // bernoulli(p): p = 0 and 1 are deterministic.
  const Tensor p = make({0, 1, 0, 1}, {2, 2});
  const Tensor bp = bernoulli(p, g.get());
  EXPECT_EQ(bp.dtype(), ScalarType::Float32);
  EXPECT_EQ(shape_of(bp), (std::vector<std::int64_t>{2, 2}));
  expect_exact(vals(bp), {0, 1, 0, 1});
  EXPECT_ERROR(ValueError, bernoulli(make({0.5, 1.5}, {2}), g.get()),
               "[bernoulli] probabilities must be in [0, 1], got 1.5");

  // uniform_: within [from, to] for every float dtype, mean close to the middle.
  for (ScalarType dt :
       {ScalarType::Float32, ScalarType::Float64, ScalarType::Float16, ScalarType::BFloat16}) {
    Tensor u = empty({n}, dt);
    uniform_(u, -2.0, 3.0, g.get());
    const auto uv = vals(u);
    double s = 0;
    for (double v : uv) {
      ASSERT_GE(v, -2.0);
      ASSERT_LE(v, 3.0);
      s += v;
    }
    EXPECT_NEAR(s / n, 0.5, 0.02) << core::scalar_type_name(dt);
  }
  Tensor u64 = empty({n}, ScalarType::Float64);
  uniform_(u64, 1.0, 1.5, g.get());
  for (double v : vals(u64)) {
    ASSERT_GE(v, 1.0);
    ASSERT_LT(v, 1.5);
  }
  // A non-contiguous target is filled only where the view points.
  Tensor base = zeros({4, 6});
  Tensor view = base.slice(1, 0, 6, 2);
  uniform_(view, 5.0, 6.0, g.get());
  const auto basev = vals(base);
  for (int i = 0; i < 24; ++i) {
    if (i % 2 == 0) {
      EXPECT_GE(basev[i], 5.0);
    } else {
      EXPECT_EQ(basev[i], 0.0);
    }
  }
  EXPECT_ERROR(ValueError, uniform_(u64, 3.0, 1.0, g.get()),
               "[uniform_] expects from <= to, got from=3 to=1");
  Tensor iu = zeros({2}, ScalarType::Int64);
  EXPECT_ERROR(TypeError, uniform_(iu, 0.0, 1.0, g.get()),
               "[uniform_] expects a floating-point tensor, got int64");

  // normal_: sample mean and std; std < 0 is an error.
  Tensor nt = empty({n});
  normal_(nt, 2.0, 3.0, g.get());
  const auto nv = vals(nt);
  double s = 0, s2 = 0;
  for (double v : nv) {
    s += v;
    s2 += v * v;
  }
  const double mu = s / n;
  EXPECT_NEAR(mu, 2.0, 0.04);
  EXPECT_NEAR(std::sqrt(s2 / n - mu * mu), 3.0, 0.04);
  EXPECT_ERROR(ValueError, normal_(nt, 0.0, -1.0, g.get()), "[normal_] expects std >= 0.0, got -1");
  EXPECT_ERROR(TypeError, randn({2}, g.get(), ScalarType::Int32),
               "[normal_] expects a floating-point tensor");
  Tensor zero_std = empty({20});
  normal_(zero_std, 1.25, 0.0, g.get());
  expect_exact(vals(zero_std), std::vector<double>(20, 1.25));
}

// float32 normal_ runs the CPU level's Box-Muller block (AVX2 + FMA intrinsics at the avx2 and
// avx512 levels, as PyTorch's kernel); it must give the portable block's bits, which the
// PyTorch reference vectors pin down (rng_test). ctest runs this at every level (cpu_level.*).
TEST(OpsRandom, NormalGivesThePortableBlocksBitsAtThisCpuLevel) {
  for (const auto& [seed, n, mean, std] : {std::tuple{7, std::int64_t{3'000'011}, 0.0, 1.0},
                                           std::tuple{8, std::int64_t{4096}, -2.5, 0.02},
                                           std::tuple{9, std::int64_t{17}, 1e3, 1e-3}}) {
    auto g = rng::make_generator(Device());
    g->manual_seed(static_cast<std::uint64_t>(seed));
    Tensor t = empty({n});
    normal_(t, mean, std, g.get());
    rng::CpuGenerator ref;
    ref.manual_seed(static_cast<std::uint64_t>(seed));
    std::vector<float> want(static_cast<std::size_t>(n));
    rng::normal_fill(ref, want.data(), n, mean, std);
    const float* got = static_cast<const float*>(t.data_ptr());
    std::int64_t differ = 0;
    for (std::int64_t i = 0; i < n; ++i)
      differ += std::memcmp(&got[i], &want[static_cast<std::size_t>(i)], sizeof(float)) != 0;
    EXPECT_EQ(differ, 0) << "seed " << seed << ": " << differ << " of " << n << " draws differ";
    EXPECT_EQ(g->get_state(), ref.get_state()) << "seed " << seed;
  }
}

TEST(OpsRandom, RandpermAndDtypes) {
  auto g = rng::make_generator(Device());
  g->manual_seed(5);
  for (std::int64_t n : {0, 1, 2, 10, 1000}) {
    auto p = randperm(n, g.get()).to_vector<std::int64_t>();
    EXPECT_EQ(static_cast<std::int64_t>(p.size()), n);
    std::sort(p.begin(), p.end());
    for (std::int64_t i = 0; i < n; ++i)
      EXPECT_EQ(p[static_cast<std::size_t>(i)], i);
  }
  const Tensor p32 = randperm(50, g.get(), ScalarType::Int32);
  EXPECT_EQ(p32.dtype(), ScalarType::Int32);
  auto pv = p32.to_vector<std::int32_t>();
  std::sort(pv.begin(), pv.end());
  for (int i = 0; i < 50; ++i)
    EXPECT_EQ(pv[i], i);
  EXPECT_ERROR(ValueError, randperm(-1, g.get()), "[randperm] n must be non-negative, got -1");
  EXPECT_ERROR(ValueError, randperm(300, g.get(), ScalarType::Int8),
               "[randperm] n=300 is too large for dtype int8");
  EXPECT_ERROR(TypeError, randperm(3, g.get(), ScalarType::Bool),
               "[randperm] dtype bool is not supported");
  // Half rand stays in [0, 1].
  const auto rh = vals(rand({1000}, g.get(), ScalarType::Float16));
  for (double v : rh) {
    ASSERT_GE(v, 0.0);
    ASSERT_LE(v, 1.0);
  }
  // Two generators with the same seed agree; different seeds differ.
  auto g1 = rng::make_generator(Device());
  auto g2 = rng::make_generator(Device());
  g1->manual_seed(77);
  g2->manual_seed(77);
  expect_exact(vals(randn({33}, g1.get())), vals(randn({33}, g2.get())));
  g2->manual_seed(78);
  EXPECT_NE(vals(rand({4}, g1.get())), vals(rand({4}, g2.get())));
}

// ---- edge cases across families -----------------------------------------------------------------

TEST(OpsEdgeCases, EmptyNaNAndZeroDim) {
  EXPECT_EQ(shape_of(softmax(zeros({2, 0}), 1)), (std::vector<std::int64_t>{2, 0}));
  EXPECT_EQ(shape_of(log_softmax(zeros({0, 3}), 0)), (std::vector<std::int64_t>{0, 3}));
  for (double p : {1.0, 2.0, 3.0, kInf})
    EXPECT_TRUE(std::isnan(norm(make({1, kNaN, 2}, {3}), p).item())) << "p=" << p;
  // A 0-d index selects one slice and keeps the dim.
  const Tensor r = index_select(arange(6, ScalarType::Float32).view({2, 3}), 1,
                                scalar_tensor(2, ScalarType::Int64));
  EXPECT_EQ(shape_of(r), (std::vector<std::int64_t>{2, 1}));
  expect_exact(vals(r), {2, 5});
  // int32 tensor + 0-d float16 tensor -> float16 (the 0-d float decides the category).
  const Tensor h = add(arange(3, ScalarType::Int32), scalar_tensor(0.5, ScalarType::Float16));
  EXPECT_EQ(h.dtype(), ScalarType::Float16);
  expect_exact(vals(h), {0.5, 1.5, 2.5});
  EXPECT_EQ(shape_of(sum(ones({2, 3}), {}, true)), (std::vector<std::int64_t>{1, 1}));
  EXPECT_EQ(mean(ones({4}, ScalarType::Float16)).dtype(), ScalarType::Float16);
  EXPECT_EQ(max(make({0, 1, 0}, {3}, ScalarType::Bool)).item(), 1.0);
  const Tensor sh =
      scatter_add(zeros({3}, ScalarType::Float16), 0, from_vector<std::int64_t>({0, 0, 2}),
                  ones({3}, ScalarType::Float16));
  EXPECT_EQ(sh.dtype(), ScalarType::Float16);
  expect_exact(vals(sh), {2, 0, 1});
  const Tensor w =
      where(scalar_tensor(true, ScalarType::Bool), scalar_tensor(1.0, ScalarType::Float32),
            scalar_tensor(2, ScalarType::Int64));
  EXPECT_EQ(w.dim(), 0);
  EXPECT_EQ(w.dtype(), ScalarType::Float32);
  EXPECT_EQ(w.item(), 1.0);
}

// ---- views through data -------------------------------------------------------------------------

TEST(OpsViews, TransposeSelectNarrowSlice) {
  const Tensor x = arange(24, ScalarType::Float32).view({2, 3, 4});
  const Tensor t = x.transpose(0, 2);  // [4, 3, 2]
  EXPECT_FALSE(t.is_contiguous());
  std::vector<double> want;
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 3; ++j)
      for (int k = 0; k < 2; ++k)
        want.push_back(k * 12 + j * 4 + i);
  expect_exact(vals(t.contiguous()), want);
  expect_exact(vals(x.select(1, 2)), {8, 9, 10, 11, 20, 21, 22, 23});
  expect_exact(vals(x.select(-1, -1)), {3, 7, 11, 15, 19, 23});
  expect_exact(vals(x.narrow(2, 1, 2)), {1, 2, 5, 6, 9, 10, 13, 14, 17, 18, 21, 22});
  expect_exact(vals(x.slice(2, 0, 4, 2)), {0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22});
  expect_exact(vals(x.slice(2, 1, 4, 3)), {1, 5, 9, 13, 17, 21});
  expect_exact(vals(x.slice(1, -2, 100)),
               {4, 5, 6, 7, 8, 9, 10, 11, 16, 17, 18, 19, 20, 21, 22, 23});
  EXPECT_EQ(x.slice(1, 2, 1).size(1), 0);
  // Views of views.
  expect_exact(vals(x.transpose(0, 1).select(0, 1).slice(1, 1, 4, 2)), {5, 7, 17, 19});
  // Writes through a view reach the base.
  Tensor b = zeros({3, 4});
  b.narrow(1, 1, 2).select(0, 2).fill_(5.0);
  expect_exact(vals(b), {0, 0, 0, 0, 0, 0, 0, 0, 0, 5, 5, 0});
}

TEST(OpsViews, ViewAndReshape) {
  const Tensor x = arange(12, ScalarType::Float32).view({3, 4});
  const Tensor v = x.view({4, 3});
  EXPECT_EQ(v.data_ptr(), x.data_ptr());
  expect_exact(vals(v), vals(x));
  EXPECT_EQ(shape_of(x.view({-1})), (std::vector<std::int64_t>{12}));
  EXPECT_ERROR(ValueError, x.t().view({12}), "[view] cannot view a tensor of shape [4, 3]",
               "use reshape()");
  // reshape copies when it must, shares when it can.
  const Tensor r = x.t().reshape({12});
  EXPECT_NE(r.data_ptr(), x.data_ptr());
  expect_exact(vals(r), {0, 4, 8, 1, 5, 9, 2, 6, 10, 3, 7, 11});
  const Tensor r2 = x.reshape({2, 6});
  EXPECT_EQ(r2.data_ptr(), x.data_ptr());
  expect_exact(vals(r2), vals(x));
  const Tensor r3 = x.slice(1, 0, 4, 2).reshape({-1});
  expect_exact(vals(r3), {0, 2, 4, 6, 8, 10});
  // A view of a transposed tensor that keeps the split dims compatible is allowed.
  const Tensor y = arange(24, ScalarType::Float32).view({2, 3, 4}).transpose(0, 1);  // [3, 2, 4]
  expect_exact(vals(y.view({3, 2, 2, 2})), vals(y.contiguous()));
  EXPECT_ERROR(ValueError, x.view({5, 3}), "[view] shape [5, 3]");
}

TEST(OpsCopy, OverlappingSourceAndDestination) {
  // x.copy_(x.t()) must behave as if the source were read before anything is written.
  Tensor x = from_vector(std::vector<float>{1, 2, 3, 4, 5, 6, 7, 8, 9}, {3, 3});
  x.copy_(x.t());
  EXPECT_EQ(x.to_vector<float>(), (std::vector<float>{1, 4, 7, 2, 5, 8, 3, 6, 9}));
  // Shifted views of one buffer.
  Tensor y = from_vector(std::vector<float>{0, 1, 2, 3, 4, 5});
  Tensor dst = y.slice(0, 1, 6);
  dst.copy_(y.slice(0, 0, 5));
  EXPECT_EQ(y.to_vector<float>(), (std::vector<float>{0, 0, 1, 2, 3, 4}));
}

}  // namespace
}  // namespace tb::ops
