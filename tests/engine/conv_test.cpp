// Convolutional networks: conv2d, pooling and batch norm against PyTorch's float64 values and
// gradients (tests/data/gen_conv_torch_ref.py), gradcheck of every op, argument errors,
// determinism of the weight gradient across thread counts, nn.Conv2d's initialisation, and the
// `cnn` model kind against the same network built in PyTorch.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "engine/autograd/autograd.h"
#include "engine/autograd/gradcheck.h"
#include "engine/core/error.h"
#include "engine/core/thread_pool.h"
#include "engine/nn/cnn.h"
#include "engine/nn/layers.h"
#include "engine/nn/models.h"
#include "engine/ops/ops.h"
#include "engine/rng/generator.h"
#include "tests/engine/test_util.h"

namespace {

using tb::core::Device;
using tb::core::ScalarType;
using tb::core::Tensor;
namespace ag = tb::autograd;
namespace nn = tb::nn;
namespace ops = tb::ops;
using tb::test::error_of;

const nlohmann::json& ref() {
  static const nlohmann::json j = [] {
    std::ifstream f(std::string(TB_TEST_DATA_DIR) + "/conv_torch_ref.json");
    EXPECT_TRUE(f.good()) << "cannot open conv_torch_ref.json under " << TB_TEST_DATA_DIR;
    return nlohmann::json::parse(f);
  }();
  return j;
}

std::vector<std::int64_t> ints(const nlohmann::json& j) {
  return j.get<std::vector<std::int64_t>>();
}

// Input i of a reference case as a tensor of `dt` (undefined for a null input).
Tensor input(const nlohmann::json& c, std::size_t i, ScalarType dt = ScalarType::Float64) {
  const auto& in = c["inputs"][i];
  if (in.is_null()) return Tensor();
  return tb::core::from_vector(in["values"].get<std::vector<double>>(), ints(in["shape"])).to(dt);
}

Tensor values(const nlohmann::json& c, const char* key, const std::vector<std::int64_t>& shape) {
  return tb::core::from_vector(c[key].get<std::vector<double>>(), shape);
}

void expect_near(const Tensor& got, const std::vector<double>& want, double tol,
                 const std::string& what) {
  const auto g = got.to(ScalarType::Float64).to_vector<double>();
  ASSERT_EQ(g.size(), want.size()) << what;
  for (std::size_t i = 0; i < g.size(); ++i)
    ASSERT_NEAR(g[i], want[i], tol * (1.0 + std::abs(want[i]))) << what << " element " << i;
}

// Runs `fn` on a case's inputs (as leaves requiring grad) in dtype `dt`, checks the output and
// the gradients of sum(out * grad_out) against PyTorch.
void check_case(const char* name, const std::function<Tensor(const std::vector<Tensor>&)>& fn,
                ScalarType dt, double tol) {
  const auto& c = ref()[name];
  std::vector<Tensor> in;
  for (std::size_t i = 0; i < c["inputs"].size(); ++i) {
    Tensor t = input(c, i, dt);
    if (t.defined()) ag::requires_grad_(t);
    in.push_back(t);
  }
  const Tensor out = fn(in);
  const std::string what =
      std::string(name) + (dt == ScalarType::Float64 ? " (float64)" : " (float32)");
  ASSERT_EQ(tb::core::DimVector(out.sizes()), tb::core::DimVector(ints(c["out_shape"]))) << what;
  expect_near(out, c["out"].get<std::vector<double>>(), tol, what + " output");
  const Tensor g = values(c, "grad_out", ints(c["out_shape"])).to(dt);
  ag::backward(ops::sum(ops::mul(out, g)));
  for (std::size_t i = 0; i < in.size(); ++i) {
    if (!in[i].defined()) continue;
    expect_near(ag::grad(in[i]), c["grads"][i].get<std::vector<double>>(), tol,
                what + " gradient of input " + std::to_string(i));
  }
}

std::function<Tensor(const std::vector<Tensor>&)> conv_fn(const char* name) {
  const auto& c = ref()[name];
  const auto stride = ints(c["stride"]), padding = ints(c["padding"]),
             dilation = ints(c["dilation"]);
  const std::int64_t groups = c["groups"].get<std::int64_t>();
  return [=](const std::vector<Tensor>& in) {
    return ops::conv2d(in[0], in[1], in.size() > 2 ? in[2] : Tensor(), stride, padding, dilation,
                       groups);
  };
}

TEST(Conv2d, MatchesPyTorchValuesAndGradients) {
  for (const char* name : {"conv_groups", "conv_plain", "conv_pointwise"}) {
    check_case(name, conv_fn(name), ScalarType::Float64, 1e-10);
    check_case(name, conv_fn(name), ScalarType::Float32, 1e-5);
  }
}

TEST(Pool2d, MatchesPyTorchValuesAndGradients) {
  for (const ScalarType dt : {ScalarType::Float64, ScalarType::Float32}) {
    const double tol = dt == ScalarType::Float64 ? 1e-12 : 1e-5;
    const auto& mp = ref()["max_pool"];
    check_case(
        "max_pool",
        [&](const std::vector<Tensor>& in) {
          return ops::max_pool2d(in[0], ints(mp["kernel"]), ints(mp["stride"]),
                                 ints(mp["padding"]));
        },
        dt, tol);
    for (const char* name : {"avg_pool_pad", "avg_pool_nopad"}) {
      const auto& c = ref()[name];
      check_case(
          name,
          [&](const std::vector<Tensor>& in) {
            return ops::avg_pool2d(in[0], ints(c["kernel"]), ints(c["stride"]), ints(c["padding"]),
                                   c["count_include_pad"].get<bool>());
          },
          dt, tol);
    }
    check_case(
        "adaptive_avg_pool",
        [&](const std::vector<Tensor>& in) {
          return ops::adaptive_avg_pool2d(in[0], ints(ref()["adaptive_avg_pool"]["output_size"]));
        },
        dt, tol);
  }
  // The maxima's positions are PyTorch's.
  const auto& mp = ref()["max_pool"];
  const auto [y, idx] = ops::max_pool2d_with_indices(input(mp, 0), ints(mp["kernel"]),
                                                     ints(mp["stride"]), ints(mp["padding"]));
  EXPECT_EQ(idx.to_vector<std::int64_t>(), ints(mp["indices"]));
}

TEST(BatchNorm, TrainingAndEvalMatchPyTorch) {
  for (const ScalarType dt : {ScalarType::Float64, ScalarType::Float32}) {
    const double tol = dt == ScalarType::Float64 ? 1e-10 : 1e-5;
    for (const bool training : {true, false}) {
      const auto& c = ref()[training ? "batch_norm_train" : "batch_norm_eval"];
      Tensor rm = values(c, "running_mean_in", {3}).to(dt);
      Tensor rv = values(c, "running_var_in", {3}).to(dt);
      check_case(
          training ? "batch_norm_train" : "batch_norm_eval",
          [&](const std::vector<Tensor>& in) {
            return ops::batch_norm(in[0], rm, rv, in[1], in[2], training,
                                   c["momentum"].get<double>(), c["eps"].get<double>());
          },
          dt, tol);
      if (training) {
        expect_near(rm, c["running_mean_out"].get<std::vector<double>>(), tol, "running_mean");
        expect_near(rv, c["running_var_out"].get<std::vector<double>>(), tol, "running_var");
      }
    }
  }
}

TEST(ConvOps, Gradcheck) {
  auto g = tb::rng::make_generator(Device());
  g->manual_seed(3);
  auto rnd = [&](std::vector<std::int64_t> shape) {
    Tensor t = ops::randn(shape, g.get()).to(ScalarType::Float64);
    return ag::requires_grad_(t);
  };
  struct ConvCase {
    std::vector<std::int64_t> x, w, stride, padding, dilation;
    std::int64_t groups;
  };
  for (const ConvCase& cc : {ConvCase{{2, 2, 5, 4}, {3, 2, 3, 2}, {1}, {1}, {1}, 1},
                             ConvCase{{1, 4, 6, 5}, {4, 2, 2, 3}, {2, 1}, {0, 2}, {2, 1}, 2},
                             ConvCase{{2, 3, 3, 3}, {2, 3, 1, 1}, {1}, {0}, {1}, 1}}) {
    const auto r = ag::gradcheck(
        [&](const std::vector<Tensor>& in) {
          return ops::conv2d(in[0], in[1], in[2], cc.stride, cc.padding, cc.dilation, cc.groups);
        },
        {rnd(cc.x), rnd(cc.w), rnd({cc.w[0]})});
    EXPECT_TRUE(r.ok) << "conv2d: " << r.message;
  }
  const Tensor x = rnd({2, 3, 5, 6});
  auto check = [&](const char* what, const std::function<Tensor(const std::vector<Tensor>&)>& f,
                   std::vector<Tensor> in) {
    const auto r = ag::gradcheck(f, in);
    EXPECT_TRUE(r.ok) << what << ": " << r.message;
  };
  check("max_pool2d", [](const auto& in) { return ops::max_pool2d(in[0], {3, 2}, {2}, {1}); }, {x});
  check("avg_pool2d",
        [](const auto& in) {
          return ops::avg_pool2d(in[0], {3}, {2, 1}, {1}, true);
        },
        {x});
  check("avg_pool2d no pad",
        [](const auto& in) { return ops::avg_pool2d(in[0], {3}, {2}, {1}, false); }, {x});
  check("adaptive_avg_pool2d",
        [](const auto& in) {
          return ops::adaptive_avg_pool2d(in[0], {4, 4});
        },
        {x});
  for (const bool training : {true, false}) {
    const Tensor rm = ops::zeros({3}, ScalarType::Float64);
    const Tensor rv = ops::ones({3}, ScalarType::Float64);
    check(training ? "batch_norm (training)" : "batch_norm (eval)",
          [&](const auto& in) {
            return ops::batch_norm(in[0], rm, rv, in[1], in[2], training, 0.1, 1e-5);
          },
          {x, rnd({3}), rnd({3})});
  }
}

TEST(ConvOps, ErrorsNameTheArgument) {
  const Tensor x = ops::zeros({2, 3, 8, 8});
  EXPECT_EQ(error_of([&] {
              ops::conv2d(x, ops::zeros({4, 2, 3, 3}));
            }),
            "[conv2d] given groups=1, weight of shape [4, 2, 3, 3] expects an input with 2 "
            "channels, got input of shape [2, 3, 8, 8]");
  EXPECT_EQ(error_of([&] {
              ops::conv2d(x, ops::zeros({4, 3, 9, 9}));
            }),
            "[conv2d] the padded input (8 x 8 plus padding (0, 0)) is smaller than the dilated "
            "kernel (9 x 9)");
  EXPECT_EQ(error_of([&] {
              ops::conv2d(x, ops::zeros({4, 3, 3, 3}), ops::zeros({3}));
            }),
            "[conv2d] bias must have shape [4] (out_channels), got [3]");
  EXPECT_EQ(error_of([&] {
              ops::conv2d(x, ops::zeros({4, 3, 3, 3}), Tensor(), {0});
            }),
            "[conv2d] stride must be positive, got (0, 0)");
  EXPECT_EQ(error_of([&] {
              ops::conv2d(ops::zeros({8, 8}), ops::zeros({4, 3, 3, 3}));
            }),
            "[conv2d] expects a 3-D [C, H, W] or 4-D [N, C, H, W] input, got shape [8, 8]");
  EXPECT_EQ(error_of([&] { ops::max_pool2d(x, {2}, {2}, {2}); }),
            "[max_pool2d] padding must be >= 0 and at most half the kernel size, got padding "
            "(2, 2) for kernel_size (2, 2)");
  EXPECT_EQ(error_of([&] {
              ops::batch_norm(ops::zeros({1, 3}), Tensor(), Tensor(), Tensor(), Tensor(), true);
            }),
            "[batch_norm] expected more than 1 value per channel when training, got input of "
            "shape [1, 3]");
  EXPECT_EQ(error_of([&] {
              ops::batch_norm(x, ops::zeros({4}), ops::ones({4}), Tensor(), Tensor(), false);
            }),
            "[batch_norm] running_mean must have shape [3] (the input's channels), got [4]");
}

TEST(ConvOps, UnbatchedAndSixteenBitInputs) {
  auto g = tb::rng::make_generator(Device());
  g->manual_seed(9);
  const Tensor x = ops::randn({3, 6, 6}, g.get());
  const Tensor w = ops::randn({4, 3, 3, 3}, g.get());
  const Tensor y = ops::conv2d(x, w, Tensor(), {1}, {1});
  ASSERT_EQ(tb::core::DimVector(y.sizes()), tb::core::DimVector({4, 6, 6}));
  const Tensor yb = ops::conv2d(x.unsqueeze(0), w, Tensor(), {1}, {1}).squeeze(0);
  EXPECT_EQ(y.to_vector<float>(), yb.to_vector<float>());
  const Tensor yh =
      ops::conv2d(x.to(ScalarType::BFloat16), w.to(ScalarType::BFloat16), Tensor(), {1}, {1});
  EXPECT_EQ(yh.dtype(), ScalarType::BFloat16);
  const auto a = yh.to(ScalarType::Float32).to_vector<float>();
  const auto b = y.to_vector<float>();
  for (std::size_t i = 0; i < a.size(); ++i)
    ASSERT_NEAR(a[i], b[i], 0.1 + 0.02 * std::abs(b[i])) << i;
}

TEST(ConvOps, WeightGradientDoesNotDependOnTheThreadCount) {
  auto g = tb::rng::make_generator(Device());
  g->manual_seed(11);
  const Tensor x = ops::randn({37, 8, 12, 12}, g.get());
  const Tensor w = ops::randn({16, 8, 3, 3}, g.get());
  const Tensor dy = ops::randn({37, 16, 12, 12}, g.get());
  std::vector<std::vector<float>> dws, dxs;
  for (const int threads : {1, 2, 3}) {
    tb::core::ScopedNumThreads scope(threads);
    const auto [dx, dw, db] = ops::conv2d_backward(dy, x, w, {1}, {1}, {1}, 1, true);
    dws.push_back(dw.to_vector<float>());
    dxs.push_back(dx.to_vector<float>());
  }
  EXPECT_EQ(dws[0], dws[1]);
  EXPECT_EQ(dws[0], dws[2]);
  EXPECT_EQ(dxs[0], dxs[1]);
  // Without the input's gradient (autograd asks so for a first layer): no dx, the same dw.
  const auto [dx, dw, db] = ops::conv2d_backward(dy, x, w, {1}, {1}, {1}, 1, true, false);
  EXPECT_FALSE(dx.defined());
  EXPECT_EQ(dw.to_vector<float>(), dws[0]);
  EXPECT_TRUE(db.defined());
}

TEST(ConvLayers, Conv2dInitialisationIsPyTorchs) {
  auto g = tb::rng::make_generator(Device());
  g->manual_seed(0);
  nn::Conv2d conv(3, 4, 3, 1, 0, true, g.get());
  expect_near(conv.weight(), ref()["conv2d_init"]["weight"].get<std::vector<double>>(), 1e-7,
              "weight");
  expect_near(conv.bias(), ref()["conv2d_init"]["bias"].get<std::vector<double>>(), 1e-7, "bias");
}

nn::CnnConfig small_cnn() {
  nn::CnnConfig c;
  c.input = {1, 8, 8};
  c.channels = {4, 6};
  c.convs_per_block = 2;
  c.residual = true;
  c.hidden = {5};
  c.classes = 3;
  return c;
}

TEST(CnnModel, MatchesTheSameNetworkInPyTorch) {
  auto g = tb::rng::make_generator(Device());
  g->manual_seed(5);
  nn::Cnn model(small_cnn(), g.get());
  const Tensor x = ops::sin(ops::arange(128, ScalarType::Float32).reshape({2, 64}));
  const Tensor logits = model.forward(x);
  const auto& r = ref()["cnn_model"];
  expect_near(logits, r["logits"].get<std::vector<double>>(), 1e-5, "logits");
  const Tensor loss = model.loss(logits, tb::core::from_vector(std::vector<std::int64_t>{2, 0}));
  EXPECT_NEAR(loss.item(), r["loss"].get<double>(), 1e-5);
  ag::backward(loss);
  std::size_t checked = 0;
  for (const auto& [name, p] : model.named_parameters()) {
    ASSERT_TRUE(r["grads"].contains(name)) << "PyTorch has no parameter " << name;
    expect_near(ag::grad(p), r["grads"][name].get<std::vector<double>>(), 1e-4, "grad " + name);
    ++checked;
  }
  EXPECT_EQ(checked, r["grads"].size());
  for (const auto& [name, b] : model.named_buffers()) {
    if (r["running_mean"].contains(name))
      expect_near(b, r["running_mean"][name].get<std::vector<double>>(), 1e-5, name);
  }
}

// A data-parallel rank whose share of a short last batch is empty replays the forward pass on
// 0 rows so that Dropout draws the global mask (train_step.cpp: BatchNorm in evaluation mode,
// Dropout in training): the CNN must take an empty batch that way.
TEST(CnnModel, ForwardTakesAnEmptyShard) {
  const auto cfg =
      nn::model_config_from_json({{"kind", "cnn"}, {"channels", {8, 16}}, {"dropout", 0.25}});
  const auto model = nn::build_model(cfg);
  model->eval();
  for (auto& [path, m] : model->named_modules())
    if (dynamic_cast<nn::Dropout*>(m) != nullptr) m->train(true);
  const nn::ScopedBatchShard shard(nn::BatchShard{0, 0, 3});
  const Tensor out = model->forward(Tensor::empty({0, 1, 28, 28}));
  EXPECT_EQ(out.dim(), 2);
  EXPECT_EQ(out.size(0), 0);
}

TEST(CnnModel, ConfigErrorsNameTheField) {
  auto problem = [](const nlohmann::json& fields) {
    return error_of([&] { nn::model_config_from_json(fields); });
  };
  EXPECT_EQ(problem({{"kind", "cnn"}, {"kernel", 4}}),
            "cnn: kernel must be a positive odd size (padding kernel/2 keeps the image size), got "
            "4");
  EXPECT_EQ(problem({{"kind", "cnn"}, {"channels", {8, 8, 8, 8, 8, 8}}}),
            "cnn: block 4 gets a 1x1 image: too small for another 2x2 pooling (6 blocks on a "
            "28x28 input)");
  EXPECT_EQ(problem({{"kind", "cnn"}, {"pool", "min"}}),
            "cnn: pool 'min' is not one of max, avg, none");
  const auto cfg = nn::model_config_from_json({{"kind", "cnn"}, {"channels", {8, 16}}});
  const auto model = nn::build_model(cfg);
  EXPECT_EQ(nn::to_json(model->config())["channels"], nlohmann::json({8, 16}));
  // BatchNorm's buffers are in the state (as in PyTorch's).
  const auto state = model->state_dict();
  bool has_tracked = false;
  for (const auto& [name, t] : state)
    has_tracked |= name == "blocks.0.convs.0.1.num_batches_tracked";
  EXPECT_TRUE(has_tracked);
}

}  // namespace

namespace {

// max_pool2d against a plain scan (PyTorch's rule: the first maximum in row-major window order,
// a NaN wins), on data full of ties, signed zeros, infinities and NaNs: the 2x2 / stride-2 fast
// path and the general one, float32 and float64, values and indices exact.
TEST(ConvOps, MaxPoolMatchesAPlainScanOnTiesZerosInfinitiesAndNaNs) {
  // Mostly signed zeros, so that windows tie at a maximum of 0 and the winner's sign shows
  // which corner was taken.
  const double specials[] = {-0.0, -0.0, -0.0, -0.0, -0.0, 0.0,       0.0,      0.0,
                             0.0,  0.0,  -1.0, 1.0,  1.0,  -INFINITY, INFINITY, std::nan("")};
  const std::int64_t n = 2, c = 3, h = 9, w = 70;  // 35 outputs a row: a block and a tail
  std::vector<double> v(static_cast<std::size_t>(n * c * h * w));
  std::uint32_t r = 7;
  for (auto& e : v) {
    r = r * 1664525u + 1013904223u;
    e = specials[(r >> 24) % 16];
  }
  // The first plane without NaN (the fast path's vector loop without its fallback).
  for (std::int64_t i = 0; i < h * w; ++i)
    if (std::isnan(v[static_cast<std::size_t>(i)])) v[static_cast<std::size_t>(i)] = 2.0;
  struct Geometry {
    std::int64_t k, s, p;
  };
  for (const Geometry geo : {Geometry{2, 2, 0}, Geometry{3, 2, 1}}) {
    const std::int64_t oh = (h + 2 * geo.p - geo.k) / geo.s + 1;
    const std::int64_t ow = (w + 2 * geo.p - geo.k) / geo.s + 1;
    std::vector<double> want;
    std::vector<std::int64_t> want_at;
    for (std::int64_t plane = 0; plane < n * c; ++plane) {
      for (std::int64_t oy = 0; oy < oh; ++oy) {
        for (std::int64_t ox = 0; ox < ow; ++ox) {
          double best = -INFINITY;
          std::int64_t at = -1;
          for (std::int64_t iy = oy * geo.s - geo.p; iy < oy * geo.s - geo.p + geo.k; ++iy) {
            for (std::int64_t ix = ox * geo.s - geo.p; ix < ox * geo.s - geo.p + geo.k; ++ix) {
              if (iy < 0 || iy >= h || ix < 0 || ix >= w) continue;
              const double e = v[static_cast<std::size_t>((plane * h + iy) * w + ix)];
              if (at < 0 || (!std::isnan(best) && (e > best || std::isnan(e)))) {
                best = e;
                at = iy * w + ix;
              }
            }
          }
          want.push_back(best);
          want_at.push_back(at);
        }
      }
    }
    for (const ScalarType dt : {ScalarType::Float32, ScalarType::Float64}) {
      const Tensor x = tb::core::from_vector(v, {n, c, h, w}).to(dt);
      const auto [y, idx] = ops::max_pool2d_with_indices(x, {geo.k}, {geo.s}, {geo.p});
      const auto got = y.to(ScalarType::Float64).to_vector<double>();
      const auto got_at = idx.to_vector<std::int64_t>();
      ASSERT_EQ(got.size(), want.size());
      for (std::size_t i = 0; i < want.size(); ++i) {
        SCOPED_TRACE("kernel " + std::to_string(geo.k) + " output " + std::to_string(i));
        EXPECT_EQ(got_at[i], want_at[i]);
        if (std::isnan(want[i])) {
          EXPECT_TRUE(std::isnan(got[i]));
        } else {
          EXPECT_EQ(got[i], want[i]);
          EXPECT_EQ(std::signbit(got[i]), std::signbit(want[i]));
        }
      }
    }
  }
}

}  // namespace
