// SWA/EMA (torch/optim/swa_utils.py: hand-computed values and tests/data/swa.json, which PyTorch
// 1.13 produced), GradScaler (torch/amp/grad_scaler.py and the kernels of
// aten/src/ATen/native/cpu/AmpGradScalerKernels.cpp) and autocast.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <limits>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "engine/amp/autocast.h"
#include "engine/amp/grad_scaler.h"
#include "engine/autograd/autograd.h"
#include "engine/core/error.h"
#include "engine/nn/layers.h"
#include "engine/nn/module.h"
#include "engine/nn/running_stats.h"
#include "engine/ops/ops.h"
#include "engine/optim/optimizer.h"
#include "engine/rng/generator.h"
#include "engine/swa/swa_utils.h"
#include "tests/engine/test_util.h"

namespace {

using tb::core::Device;
using tb::core::DeviceType;
using tb::core::ScalarType;
using tb::core::Tensor;
namespace ag = tb::autograd;
namespace nn = tb::nn;
namespace ops = tb::ops;
namespace optim = tb::optim;
namespace swa = tb::swa;
namespace amp = tb::amp;
using tb::test::error_of;

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

// ---- helpers: a plain optimizer, tiny modules ---------------------------------------------------

// p -= lr * g for every parameter with a gradient.
class PlainSgd : public optim::Optimizer {
 public:
  PlainSgd(std::vector<Tensor> params, double lr) : Optimizer("PlainSgd", {{"lr", lr}}) {
    add_param_group(optim::ParamGroup{std::move(params), {}});
  }
  void step() override {
    ag::NoGradGuard no_grad;
    for (auto& group : param_groups()) {
      const double lr = group.number("lr");
      for (Tensor& p : group.params) {
        const Tensor g = ag::grad(p);
        if (!g.defined()) continue;
        p.copy_(ops::sub(p, ops::mul(g, lr)));
      }
    }
    ++steps_run;
    count_step();
  }
  int steps_run = 0;

 protected:
  void validate_group(const optim::ParamGroup&) const override {}
};

// One parameter "w" (float64 values given) and one buffer "b".
class ParamAndBuffer : public nn::Module {
 public:
  explicit ParamAndBuffer(std::vector<double> w, double b = 0.0) : Module("ParamAndBuffer") {
    w_ = register_parameter("w", tb::core::from_vector(w));
    b_ = register_buffer("b", ops::full({1}, b, ScalarType::Float64));
  }
  void set(std::vector<double> w, double b) {
    ag::NoGradGuard no_grad;
    w_.copy_(tb::core::from_vector(w));
    b_.fill_(b);
  }
  Tensor forward(const Tensor& x) override { return ops::add(ops::mul(x, w_), b_); }
  Tensor w_;
  Tensor b_;
};

// BatchNorm-like test module: running mean/var of its input's columns, momentum control.
class RunningStatsProbe : public nn::Module, public nn::RunningStatsMomentum {
 public:
  RunningStatsProbe() : Module("RunningStatsProbe") {
    mean_ = register_buffer("running_mean", ops::full({2}, 7.0));
    var_ = register_buffer("running_var", ops::full({2}, 7.0));
    count_ = register_buffer("num_batches_tracked", ops::full({}, 5, ScalarType::Int64));
  }
  Tensor forward(const Tensor& x) override {
    if (is_training()) {
      ag::NoGradGuard no_grad;
      count_.copy_(ops::add(count_, 1));
      const double f = momentum_ ? *momentum_ : 1.0 / count_.item();
      const Tensor m = ops::mean(x, {0});
      const Tensor v = ops::mean(ops::square(ops::sub(x, m)), {0});
      mean_.copy_(ops::add(ops::mul(mean_, 1.0 - f), ops::mul(m, f)));
      var_.copy_(ops::add(ops::mul(var_, 1.0 - f), ops::mul(v, f)));
    }
    return x;
  }
  std::optional<double> momentum() const override { return momentum_; }
  void set_momentum(std::optional<double> m) override { momentum_ = m; }
  Tensor mean_, var_, count_;
  std::optional<double> momentum_ = 0.1;
};

class ProbeNet : public nn::Module {
 public:
  ProbeNet() : Module("ProbeNet") {
    probe = register_module("bn", std::make_shared<RunningStatsProbe>());
  }
  Tensor forward(const Tensor& x) override { return (*probe)(x); }
  std::shared_ptr<RunningStatsProbe> probe;
};

std::vector<double> values(const Tensor& t) {
  return t.to_vector<double>();
}

// ---- the kernels (AmpGradScalerKernels.cpp) -----------------------------------------------------

TEST(Scaler, UpdateScaleTrajectorySpec11_5) {
  Tensor scale = ops::full({}, 65536.0);
  Tensor tracker = ops::zeros({}, ScalarType::Int32);
  const std::vector<int> found = {0, 0, 1, 0, 0, 0, 0, 1, 1};
  const std::vector<std::pair<double, int>> want = {{65536, 1}, {65536, 2}, {32768, 0},
                                                    {32768, 1}, {32768, 2}, {65536, 0},
                                                    {65536, 1}, {32768, 0}, {16384, 0}};
  for (std::size_t i = 0; i < found.size(); ++i) {
    const Tensor f = ops::full({}, static_cast<double>(found[i]));
    ops::amp_update_scale_(scale, tracker, f, 2.0, 0.5, 3);
    EXPECT_EQ(scale.item(), want[i].first) << "step " << i;
    EXPECT_EQ(tracker.item(), want[i].second) << "step " << i;
  }
}

TEST(Scaler, UpdateScaleNeverGrowsToInf) {
  Tensor scale = ops::full({}, std::ldexp(1.0, 127));
  Tensor tracker = ops::full({}, 1, ScalarType::Int32);
  ops::amp_update_scale_(scale, tracker, ops::zeros({}), 2.0, 0.5, 2);
  EXPECT_EQ(scale.item(), std::ldexp(1.0, 127));
  EXPECT_EQ(tracker.item(), 0);
}

TEST(Scaler, UpdateScaleChecksItsArguments) {
  Tensor scale = ops::full({}, 1.0);
  Tensor bad_tracker = ops::zeros({}, ScalarType::Int64);
  EXPECT_TRUE(contains(
      error_of([&] { ops::amp_update_scale_(scale, bad_tracker, ops::zeros({}), 2, 0.5, 3); }),
      "'growth_tracker' must be int32"));
}

TEST(Scaler, UnscaleKernelSpec11_5) {
  const double inf = std::numeric_limits<double>::infinity();
  Tensor g = tb::core::from_vector<float>({2.0f, static_cast<float>(inf), NAN});
  Tensor found = ops::zeros({});
  ops::amp_foreach_non_finite_check_and_unscale_({g}, found, ops::full({}, 0.5));
  const auto v = g.to_vector<float>();
  EXPECT_EQ(v[0], 1.0f);
  EXPECT_TRUE(std::isinf(v[1]) && v[1] > 0);
  EXPECT_TRUE(std::isnan(v[2]));
  EXPECT_EQ(found.item(), 1.0);
  // inv_scale exactly 1: values pass through untouched; a finite list leaves found_inf alone.
  Tensor h = tb::core::from_vector<float>({0.1f, -3.5f});
  Tensor clean = ops::zeros({});
  ops::amp_foreach_non_finite_check_and_unscale_({h}, clean, ops::full({}, 1.0));
  EXPECT_EQ(h.to_vector<float>(), (std::vector<float>{0.1f, -3.5f}));
  EXPECT_EQ(clean.item(), 0.0);
  // bf16 and a strided tensor; mixed dtypes in one call are rejected.
  Tensor b = ops::full({2, 3}, 4.0, ScalarType::BFloat16).t();
  ops::amp_foreach_non_finite_check_and_unscale_({b}, clean, ops::full({}, 0.25));
  EXPECT_EQ(values(b), std::vector<double>(6, 1.0));
  Tensor f64 = ops::ones({2}, ScalarType::Float64);
  EXPECT_TRUE(contains(
      error_of([&] {
        ops::amp_foreach_non_finite_check_and_unscale_({h, f64}, clean, ops::full({}, 1.0));
      }),
      "group the tensors by device and dtype"));
}

// ---- GradScaler (torch/amp/grad_scaler.py) ------------------------------------------------------

amp::GradScalerOptions opts(double init_scale, std::int64_t interval = 2000) {
  amp::GradScalerOptions o;
  o.init_scale = init_scale;
  o.growth_interval = interval;
  return o;
}

TEST(Scaler, InvScaleIsTheFloat32OfTheDoubleReciprocal) {
  Tensor p = ag::requires_grad_(ops::ones({1}));
  PlainSgd opt({p}, 1.0);
  amp::GradScaler s3(DeviceType::CPU, opts(3.0));
  (void)s3.scale(ops::ones({1}));
  ag::set_grad(p, ops::full({1}, 3.0));
  s3.unscale_(opt);
  EXPECT_EQ(ag::grad(p).item(), 1.0);  // 3 * float32(1/3) rounds to exactly 1 in float32
  ag::set_grad(p, ops::full({1}, 1.0));
  amp::GradScaler s16(DeviceType::CPU);
  (void)s16.scale(ops::ones({1}));
  s16.unscale_(opt);
  EXPECT_EQ(ag::grad(p).item(), 1.52587890625e-05);
}

TEST(Scaler, ScaleMultipliesAndInitialisesLazily) {
  amp::GradScaler s(DeviceType::CPU, opts(8.0));
  EXPECT_EQ(s.get_scale(), 8.0);  // before the first scale(): init_scale
  const Tensor y = s.scale(ops::full({2}, 1.5));
  EXPECT_EQ(values(y), (std::vector<double>{12.0, 12.0}));
  const auto ys = s.scale(std::vector<Tensor>{ops::ones({1}), ops::full({1}, 2.0)});
  EXPECT_EQ(values(ys[1]), (std::vector<double>{16.0}));
  EXPECT_EQ(s.growth_tracker(), 0);
}

TEST(Scaler, SkipsTheStepOnInfOrNanAndAdaptsTheScale) {
  Tensor p = ag::requires_grad_(ops::full({2}, 1.0));
  PlainSgd opt({p}, 0.5);
  amp::GradScaler scaler(DeviceType::CPU, opts(1024.0, 2));
  const double inf = std::numeric_limits<double>::infinity();
  // grads (already "scaled") per iteration, and whether each step should run.
  const std::vector<std::vector<double>> grads = {{1024, 2048}, {1024, 1024}, {inf, 1},  {512, 512},
                                                  {NAN, 0},     {256, 256},   {256, 256}};
  const std::vector<bool> runs = {true, true, false, true, false, true, true};
  const std::vector<double> scales = {1024, 2048, 1024, 1024, 512, 512, 1024};
  const std::vector<int> trackers = {1, 0, 0, 1, 0, 1, 0};
  std::vector<double> expect_p = {1.0, 1.0};
  for (std::size_t i = 0; i < grads.size(); ++i) {
    Tensor loss = ops::sum(ops::mul(p, ops::ones({2})));
    (void)scaler.scale(loss);
    ag::set_grad(p, tb::core::from_vector<float>(
                        {static_cast<float>(grads[i][0]), static_cast<float>(grads[i][1])}));
    const double s = scaler.get_scale();
    EXPECT_EQ(scaler.step(opt), runs[i]) << "iteration " << i;
    EXPECT_EQ(scaler.stage(opt), amp::OptState::Stepped);
    if (runs[i]) {
      for (int k = 0; k < 2; ++k)
        expect_p[static_cast<std::size_t>(k)] -= 0.5 * grads[i][static_cast<std::size_t>(k)] / s;
    }
    scaler.update();
    EXPECT_EQ(scaler.stage(opt), amp::OptState::Ready);
    EXPECT_EQ(scaler.get_scale(), scales[i]) << "iteration " << i;
    EXPECT_EQ(scaler.growth_tracker(), trackers[i]) << "iteration " << i;
    const auto pv = p.to_vector<double>();
    EXPECT_NEAR(pv[0], expect_p[0], 1e-6) << "iteration " << i;
    EXPECT_NEAR(pv[1], expect_p[1], 1e-6) << "iteration " << i;
  }
  EXPECT_EQ(opt.steps_run, 5);
}

TEST(Scaler, GroupsGradientsByDeviceAndDtype) {
  Tensor a = ag::requires_grad_(ops::ones({2}));
  Tensor b = ag::requires_grad_(ops::ones({2}, ScalarType::BFloat16));
  Tensor c = ag::requires_grad_(ops::ones({1}, ScalarType::Float64));
  Tensor no_grad = ag::requires_grad_(ops::ones({1}));
  PlainSgd opt({a, b, no_grad, c}, 1.0);
  amp::GradScaler scaler(DeviceType::CPU, opts(4.0));
  (void)scaler.scale(ops::ones({1}));
  ag::set_grad(a, ops::full({2}, 8.0));
  ag::set_grad(b, ops::full({2}, 8.0, ScalarType::BFloat16));
  ag::set_grad(c, ops::full({1}, 2.0, ScalarType::Float64));
  scaler.unscale_(opt);
  EXPECT_EQ(values(ag::grad(a)), (std::vector<double>{2, 2}));
  EXPECT_EQ(values(ag::grad(b)), (std::vector<double>{2, 2}));
  EXPECT_EQ(values(ag::grad(c)), (std::vector<double>{0.5}));
  EXPECT_FALSE(ag::grad(no_grad).defined());
  const auto found = scaler.found_inf_per_device(opt);
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0].first, Device());
  EXPECT_EQ(found[0].second.item(), 0.0);
}

TEST(Scaler, MisuseErrors) {
  Tensor p = ag::requires_grad_(ops::ones({1}));
  PlainSgd opt({p}, 1.0);
  ag::set_grad(p, ops::ones({1}));
  amp::GradScaler scaler(DeviceType::CPU);
  EXPECT_TRUE(contains(error_of([&] { scaler.unscale_(opt); }),
                       "Attempted unscale_ but _scale is None.  This may indicate your script did "
                       "not use scaler.scale(loss or outputs) earlier in the iteration."));
  EXPECT_TRUE(contains(error_of([&] { scaler.update(); }), "Attempted update but _scale is None."));
  (void)scaler.scale(ops::ones({1}));
  EXPECT_TRUE(
      contains(error_of([&] { scaler.update(); }), "No inf checks were recorded prior to update."));
  scaler.unscale_(opt);
  EXPECT_EQ(scaler.stage(opt), amp::OptState::Unscaled);
  EXPECT_TRUE(contains(error_of([&] { scaler.unscale_(opt); }),
                       "unscale_() has already been called on this optimizer since the last "
                       "update()."));
  EXPECT_TRUE(scaler.step(opt));  // uses the recorded unscale, does not unscale again
  EXPECT_TRUE(contains(error_of([&] { scaler.unscale_(opt); }),
                       "unscale_() is being called after step()."));
  EXPECT_TRUE(contains(error_of([&] { scaler.step(opt); }),
                       "step() has already been called since the last update()."));
  scaler.update();
  // FP16 gradients cannot be unscaled.
  Tensor h = ag::requires_grad_(ops::ones({1}, ScalarType::Float16));
  PlainSgd opt16({h}, 1.0);
  ag::set_grad(h, ops::ones({1}, ScalarType::Float16));
  EXPECT_TRUE(
      contains(error_of([&] { scaler.unscale_(opt16); }), "Attempting to unscale FP16 gradients."));
  // The error type for a state problem is tb::Error, for a bad value tb::ValueError.
  EXPECT_THROW(scaler.unscale_(opt16), tb::ValueError);
}

TEST(Scaler, ConstructorValidation) {
  amp::GradScalerOptions o;
  o.growth_factor = 1.0;
  EXPECT_TRUE(contains(error_of([&] { amp::GradScaler s(DeviceType::CPU, o); }),
                       "The growth factor must be > 1.0."));
  o.growth_factor = 2.0;
  o.backoff_factor = 1.0;
  EXPECT_TRUE(contains(error_of([&] { amp::GradScaler s(DeviceType::CPU, o); }),
                       "The backoff factor must be < 1.0."));
  o.enabled = false;  // not validated when disabled
  EXPECT_EQ(error_of([&] { amp::GradScaler s(DeviceType::CPU, o); }), "<no error>");
}

TEST(Scaler, DisabledIsAPassThrough) {
  amp::GradScalerOptions o;
  o.enabled = false;
  amp::GradScaler scaler(DeviceType::CPU, o);
  Tensor p = ag::requires_grad_(ops::ones({1}));
  PlainSgd opt({p}, 1.0);
  const Tensor x = ops::full({1}, 3.0);
  EXPECT_TRUE(scaler.scale(x).is_same(x));
  ag::set_grad(p, ops::full({1}, std::numeric_limits<double>::infinity()));
  scaler.unscale_(opt);  // no-op
  EXPECT_TRUE(scaler.step(opt));
  EXPECT_EQ(opt.steps_run, 1);
  scaler.update();
  EXPECT_EQ(scaler.get_scale(), 1.0);
  EXPECT_FALSE(scaler.state_dict().has_value());
  scaler.load_state_dict(std::nullopt);  // no-op when disabled
  EXPECT_FALSE(scaler.is_enabled());
}

TEST(Scaler, CudaWithoutADeviceDisablesItself) {
  amp::GradScaler scaler;  // PyTorch's default device, "cuda"
  if (scaler.is_enabled()) GTEST_SKIP() << "a CUDA device is usable here";
  EXPECT_TRUE(contains(scaler.warning(), "CUDA is not available. Disabling."));
}

TEST(Scaler, UpdateWithANewScale) {
  Tensor p = ag::requires_grad_(ops::ones({1}));
  PlainSgd opt({p}, 1.0);
  amp::GradScaler scaler(DeviceType::CPU);
  (void)scaler.scale(ops::ones({1}));
  scaler.update(128.0);
  EXPECT_EQ(scaler.get_scale(), 128.0);
  scaler.update(ops::full({1}, 32.0));
  EXPECT_EQ(scaler.get_scale(), 32.0);
  EXPECT_TRUE(contains(error_of([&] { scaler.update(ops::full({2}, 32.0)); }),
                       "new_scale should be a float or a 1-element"));
  Tensor needs_grad = ag::requires_grad_(ops::full({1}, 2.0));
  EXPECT_TRUE(contains(error_of([&] { scaler.update(needs_grad); }), "requires grad"));
}

TEST(Scaler, StateDictRoundTrip) {
  amp::GradScaler a(DeviceType::CPU, opts(64.0, 3));
  Tensor p = ag::requires_grad_(ops::ones({1}));
  PlainSgd opt({p}, 1.0);
  for (int i = 0; i < 2; ++i) {
    (void)a.scale(ops::ones({1}));
    ag::set_grad(p, ops::ones({1}));
    a.step(opt);
    a.update();
  }
  const auto sd = a.state_dict();
  ASSERT_TRUE(sd.has_value());
  EXPECT_EQ(sd->scale, 64.0);
  EXPECT_EQ(sd->growth_tracker, 2);
  EXPECT_EQ(sd->growth_interval, 3);
  amp::GradScaler b(DeviceType::CPU);
  b.load_state_dict(sd);
  EXPECT_EQ(b.get_scale(), 64.0);
  EXPECT_EQ(b.growth_tracker(), 2);
  // One more clean step grows both the same way.
  for (amp::GradScaler* s : {&a, &b}) {
    (void)s->scale(ops::ones({1}));
    ag::set_grad(p, ops::ones({1}));
    s->step(opt);
    s->update();
  }
  EXPECT_EQ(a.get_scale(), 128.0);
  EXPECT_EQ(b.get_scale(), 128.0);
  EXPECT_EQ(b.growth_tracker(), 0);
  EXPECT_TRUE(contains(error_of([&] { b.load_state_dict(std::nullopt); }),
                       "The source state dict is empty"));
}

// ---- SWA and EMA (torch/optim/swa_utils.py) ---------------------------------------------------

TEST(Swa, AveragedModelSpec11_4) {
  ParamAndBuffer model({2.0});
  swa::AveragedModel swa(model);
  EXPECT_FALSE(swa.has_averaged());
  const std::vector<double> in = {2, 4, 9};
  const std::vector<double> want = {2, 3, 5};
  for (std::size_t i = 0; i < in.size(); ++i) {
    model.set({in[i]}, 0.0);
    swa.update_parameters(model);
    EXPECT_DOUBLE_EQ(values(swa.averaged_parameters()[0].second)[0], want[i]);
  }
  EXPECT_EQ(swa.n_averaged().item(), 3);
  EXPECT_EQ(swa.n_averaged().dtype(), ScalarType::Int64);

  ParamAndBuffer m2({2.0});
  swa::AveragedModel ema(m2, {}, {}, swa::get_ema_multi_avg_fn(0.9));
  ema.update_parameters(m2);
  EXPECT_DOUBLE_EQ(values(ema.averaged_parameters()[0].second)[0], 2.0);  // copy
  m2.set({4.0}, 0.0);
  ema.update_parameters(m2);
  EXPECT_NEAR(values(ema.averaged_parameters()[0].second)[0], 2.2, 1e-15);
}

// Linear(2,1) float64, weight [1,2], bias 0.5; each update: weight *= 1.5, bias += 1.
void run_torch_reference(const std::string& key, const swa::AvgFn& avg_fn,
                         const swa::MultiAvgFn& multi) {
  std::ifstream f(std::string(TB_TEST_DATA_DIR) + "/swa.json");
  ASSERT_TRUE(f.good()) << "cannot open swa.json under " << TB_TEST_DATA_DIR;
  const auto ref = nlohmann::json::parse(f);
  auto gen = tb::rng::make_generator(Device());  // (not the default generator)
  nn::Linear lin(2, 1, true, gen.get());
  lin.to(ScalarType::Float64);
  {
    ag::NoGradGuard no_grad;
    Tensor w = lin.weight();
    w.copy_(tb::core::from_vector<double>({1.0, 2.0}, {1, 2}));
    Tensor b = lin.bias();
    b.fill_(0.5);
  }
  swa::AveragedModel avg(lin, {}, avg_fn, multi);
  for (const auto& u : ref["updates"]) {
    {
      ag::NoGradGuard no_grad;
      Tensor w = lin.weight();
      w.copy_(ops::mul(w, 1.5));
      Tensor b = lin.bias();
      b.copy_(ops::add(b, 1.0));
    }
    avg.update_parameters(lin);
    const auto got_w = values(avg.averaged_parameters()[0].second);
    const auto got_b = values(avg.averaged_parameters()[1].second);
    const std::vector<double> want = u[key].get<std::vector<double>>();
    EXPECT_NEAR(got_w[0], want[0], 1e-12 * std::abs(want[0])) << key;
    EXPECT_NEAR(got_w[1], want[1], 1e-12 * std::abs(want[1])) << key;
    EXPECT_NEAR(got_b[0], want[2], 1e-12 * std::abs(want[2])) << key;
    const std::vector<double> model = u["model"].get<std::vector<double>>();
    EXPECT_EQ(values(lin.weight())[1], model[1]);
  }
}

TEST(Swa, TorchReferenceSwaAndEma) {
  run_torch_reference("swa", {}, {});                                  // default: SWA, grouped
  run_torch_reference("swa", swa::get_swa_avg_fn(), {});               // per-tensor path
  run_torch_reference("ema_0.9", {}, swa::get_ema_multi_avg_fn(0.9));  // multi-tensor EMA
  run_torch_reference("ema_0.9", swa::get_ema_avg_fn(0.9), {});        // per-tensor EMA
}

TEST(Swa, FactoryAndConstructorErrors) {
  EXPECT_TRUE(contains(error_of([] { (void)swa::get_ema_multi_avg_fn(1.5); }),
                       "Invalid decay value 1.5 provided. Please provide a value in [0,1] range."));
  EXPECT_TRUE(contains(error_of([] { (void)swa::get_ema_avg_fn(-0.1); }), "Invalid decay value"));
  ParamAndBuffer model({1.0});
  EXPECT_TRUE(contains(error_of([&] {
                         swa::AveragedModel m(model, {}, swa::get_swa_avg_fn(),
                                              swa::get_swa_multi_avg_fn());
                       }),
                       "Only one of avg_fn and multi_avg_fn should be provided"));
}

TEST(Averaged, BuffersAveragedOrCopied) {
  ParamAndBuffer model({0.0}, 10.0);
  swa::AveragedModel with(model, {}, {}, {}, /*use_buffers=*/true);
  swa::AveragedModel without(model, {}, {}, {}, /*use_buffers=*/false);
  for (double v : {10.0, 20.0, 60.0}) {
    model.set({v}, v);
    with.update_parameters(model);
    without.update_parameters(model);
  }
  EXPECT_DOUBLE_EQ(values(with.averaged_buffers()[0].second)[0], 30.0);     // mean of 10, 20, 60
  EXPECT_DOUBLE_EQ(values(without.averaged_buffers()[0].second)[0], 60.0);  // the latest
  EXPECT_DOUBLE_EQ(values(with.averaged_parameters()[0].second)[0], 30.0);
  EXPECT_DOUBLE_EQ(values(without.averaged_parameters()[0].second)[0], 30.0);
  // The copies are the average's own: the model's tensors are not aliased.
  EXPECT_FALSE(with.averaged_parameters()[0].second.is_same(model.w_));
  EXPECT_FALSE(with.averaged_parameters()[0].second.requires_grad());
}

TEST(Averaged, AveragesAModelOfAnotherDtype) {
  // The average keeps its own dtype (float64 here) when the model it follows is float32.
  ParamAndBuffer m0({0.0, 0.0});
  swa::AveragedModel avg(m0);
  ParamAndBuffer m1({2.0, 4.0});
  m1.to(ScalarType::Float32);
  ParamAndBuffer m2({6.0, 8.0});
  m2.to(ScalarType::Float32);
  avg.update_parameters(m1);  // the first model is the average
  avg.update_parameters(m2);
  const Tensor w = avg.averaged_parameters()[0].second;
  EXPECT_EQ(w.dtype(), ScalarType::Float64);
  EXPECT_EQ(values(w), (std::vector<double>{4.0, 6.0}));
}

TEST(Averaged, StateDictRoundTripContinuesTheAverage) {
  ParamAndBuffer model({1.0}, 1.0);
  swa::AveragedModel a(model, {}, {}, {}, true);
  for (double v : {1.0, 3.0}) {
    model.set({v}, v);
    a.update_parameters(model);
  }
  const nn::NamedTensors sd = a.state_dict();
  ASSERT_EQ(sd.size(), 3u);
  EXPECT_EQ(sd[0].first, "n_averaged");
  EXPECT_EQ(sd[1].first, "module.w");
  EXPECT_EQ(sd[2].first, "module.b");
  nn::NamedTensors saved;
  for (const auto& [k, t] : sd)
    saved.emplace_back(k, t.clone());

  ParamAndBuffer other({100.0}, 100.0);
  swa::AveragedModel b(other, {}, {}, {}, true);
  EXPECT_FALSE(b.has_averaged());
  b.load_state_dict(saved);
  EXPECT_TRUE(b.has_averaged());  // refreshed from the loaded n_averaged
  model.set({8.0}, 8.0);
  a.update_parameters(model);
  b.update_parameters(model);  // averages (4 = (1+3+8)/3), does not copy
  EXPECT_DOUBLE_EQ(values(a.averaged_parameters()[0].second)[0], 4.0);
  EXPECT_EQ(values(b.averaged_parameters()[0].second), values(a.averaged_parameters()[0].second));
  EXPECT_EQ(values(b.averaged_buffers()[0].second), values(a.averaged_buffers()[0].second));
  EXPECT_EQ(b.n_averaged().item(), 3);
  // A checkpoint with n_averaged == 0 restarts with a copy.
  saved[0].second.zero_();
  b.load_state_dict(saved);
  EXPECT_FALSE(b.has_averaged());
  // Errors name the keys and leave the average untouched.
  nn::NamedTensors bad = {{"n_averaged", ops::zeros({}, ScalarType::Int64)},
                          {"module.w", ops::zeros({3}, ScalarType::Float64)}};
  const std::string err = error_of([&] { a.load_state_dict(bad); });
  EXPECT_TRUE(contains(err, "size mismatch for 'module.w'")) << err;
  EXPECT_TRUE(contains(err, "missing key 'module.b'")) << err;
  EXPECT_EQ(a.n_averaged().item(), 3);
}

TEST(Averaged, CopyToEvaluatesTheAverage) {
  ParamAndBuffer model({1.0, 2.0}, 0.5);
  swa::AveragedModel avg(model);
  avg.update_parameters(model);
  model.set({3.0, 6.0}, 1.5);
  avg.update_parameters(model);
  ParamAndBuffer eval({0.0, 0.0});
  const Tensor before = eval.w_;
  avg.copy_to(eval);
  EXPECT_TRUE(eval.w_.is_same(before));  // identity kept
  EXPECT_TRUE(eval.w_.requires_grad());
  EXPECT_EQ(values(eval.w_), (std::vector<double>{2.0, 4.0}));
  EXPECT_EQ(values(eval.b_), (std::vector<double>{1.5}));  // buffers follow the model
  EXPECT_EQ(values(eval(ops::ones({2}, ScalarType::Float64))), (std::vector<double>{3.5, 5.5}));
  ParamAndBuffer wrong({0.0, 0.0, 0.0});
  EXPECT_TRUE(contains(error_of([&] { avg.copy_to(wrong); }), "'w' has shape [2]"));
}

TEST(Averaged, UpdateBnRecomputesRunningStatistics) {
  ProbeNet net;
  net.eval();
  const std::vector<Tensor> batches = {
      tb::core::from_vector<float>({1, 2, 3, 4}, {2, 2}),   // column means 2, 3
      tb::core::from_vector<float>({5, 6, 7, 8}, {2, 2}),   // 6, 7
      tb::core::from_vector<float>({0, 0, 3, 3}, {2, 2})};  // 1.5, 1.5
  swa::update_bn(batches, net);
  // Cumulative average of the batch statistics (momentum None), from a reset.
  const auto mean = net.probe->mean_.to_vector<float>();
  EXPECT_NEAR(mean[0], (2.0 + 6.0 + 1.5) / 3, 1e-6);
  EXPECT_NEAR(mean[1], (3.0 + 7.0 + 1.5) / 3, 1e-6);
  const auto var = net.probe->var_.to_vector<float>();
  EXPECT_NEAR(var[0], (1.0 + 1.0 + 2.25) / 3, 1e-6);
  EXPECT_EQ(net.probe->count_.item(), 3);
  EXPECT_EQ(net.probe->momentum(), std::optional<double>(0.1));  // restored
  EXPECT_FALSE(net.is_training());                               // restored

  // Without running statistics: a no-op that draws no input.
  ParamAndBuffer plain({1.0});
  int drawn = 0;
  swa::update_bn(
      [&]() -> std::optional<Tensor> {
        ++drawn;
        return std::nullopt;
      },
      plain);
  EXPECT_EQ(drawn, 0);
}

// nn::BatchNorm2d (the cnn's) takes update_bn's unset momentum: its statistics become the
// cumulative average of the batches' (PyTorch's momentum=None), not a momentum-0.1 blend that
// kept 0.9^k of the reset values.
TEST(UpdateBn, BatchNorm2dAveragesTheBatchesStatistics) {
  tb::nn::BatchNorm2d bn(2);
  // [N = 2, C = 2, 1, 1]: channel means 2 and 3, then 6 and 7, then 1.5 and 1.5.
  const std::vector<Tensor> batches = {tb::core::from_vector<float>({1, 2, 3, 4}, {2, 2, 1, 1}),
                                       tb::core::from_vector<float>({5, 6, 7, 8}, {2, 2, 1, 1}),
                                       tb::core::from_vector<float>({0, 0, 3, 3}, {2, 2, 1, 1})};
  bn.eval();
  swa::update_bn(batches, bn);
  Tensor mean, var;
  for (const auto& [name, t] : bn.state_dict()) {
    if (name == "running_mean") mean = t;
    if (name == "running_var") var = t;
  }
  ASSERT_TRUE(mean.defined() && var.defined());
  const auto m = mean.to_vector<float>();
  EXPECT_NEAR(m[0], (2.0 + 6.0 + 1.5) / 3, 1e-6);
  EXPECT_NEAR(m[1], (3.0 + 7.0 + 1.5) / 3, 1e-6);
  // Unbiased batch variances of channel 0: 2, 2 and 4.5.
  EXPECT_NEAR(var.to_vector<float>()[0], (2.0 + 2.0 + 4.5) / 3, 1e-5);
  EXPECT_EQ(bn.momentum(), std::optional<double>(0.1));  // restored
  EXPECT_FALSE(bn.is_training());
}

// ---- autocast -----------------------------------------------------------------------------------

TEST(Autocast, MatmulRunsInTheLowDtypeReductionsInFloat32) {
  const Tensor a = ops::ones({2, 3});
  const Tensor b = ops::ones({3, 4});
  {
    amp::AutocastGuard guard(DeviceType::CPU, ScalarType::BFloat16);
    const Tensor y = ops::mm(a, b);
    EXPECT_EQ(y.dtype(), ScalarType::BFloat16);
    EXPECT_EQ(ops::matmul(a, b).dtype(), ScalarType::BFloat16);
    EXPECT_EQ(ops::addmm(ops::zeros({4}), a, b).dtype(), ScalarType::BFloat16);
    EXPECT_EQ(values(y), std::vector<double>(8, 3.0));
    EXPECT_EQ(ops::sum(y).dtype(), ScalarType::Float32);
    EXPECT_EQ(ops::softmax(y, 1).dtype(), ScalarType::Float32);
    EXPECT_EQ(ops::log_softmax(y, 1).dtype(), ScalarType::Float32);
    EXPECT_EQ(ops::exp(y).dtype(), ScalarType::Float32);
    const Tensor target = tb::core::from_vector<std::int64_t>({0, 3});
    const Tensor ce = ops::cross_entropy(y, target);
    EXPECT_EQ(ce.dtype(), ScalarType::Float32);
    EXPECT_NEAR(ce.item(), std::log(4.0), 1e-6);
    // Promote: the widest floating input.
    EXPECT_EQ(ops::relu(y).dtype(), ScalarType::BFloat16);
    EXPECT_EQ(ops::add(y, ops::ones({2, 4})).dtype(), ScalarType::Float32);
    // float64 work is left alone.
    EXPECT_EQ(ops::mm(a.to(ScalarType::Float64), b.to(ScalarType::Float64)).dtype(),
              ScalarType::Float64);
    // fp16 nested; then disabled nested.
    {
      amp::AutocastGuard half(DeviceType::CPU, ScalarType::Float16);
      EXPECT_EQ(ops::mm(a, b).dtype(), ScalarType::Float16);
      amp::AutocastGuard off(DeviceType::CPU, ScalarType::Float16, false);
      EXPECT_FALSE(amp::is_autocast_enabled(DeviceType::CPU));
      EXPECT_EQ(ops::mm(a, b).dtype(), ScalarType::Float32);
    }
    EXPECT_EQ(ops::mm(a, b).dtype(), ScalarType::BFloat16);
  }
  // Outside the guard nothing changes.
  EXPECT_FALSE(amp::is_autocast_enabled(DeviceType::CPU));
  EXPECT_EQ(ops::mm(a, b).dtype(), ScalarType::Float32);
  const Tensor low = ops::ones({4}, ScalarType::BFloat16);
  EXPECT_EQ(ops::sum(low).dtype(), ScalarType::BFloat16);
  // Autocast for another device type leaves CPU ops alone.
  amp::AutocastGuard cuda(DeviceType::CUDA);
  EXPECT_EQ(ops::mm(a, b).dtype(), ScalarType::Float32);
}

TEST(Autocast, GradientsFlowBackToFloat32Leaves) {
  Tensor x = ag::requires_grad_(tb::core::from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3}));
  Tensor w =
      ag::requires_grad_(tb::core::from_vector<float>({0.5f, -1, 2, 0.25f, 1, -0.5f}, {3, 2}));
  Tensor loss;
  {
    amp::AutocastGuard guard(DeviceType::CPU);
    const Tensor y = ops::mm(x, w);  // bf16
    EXPECT_EQ(y.dtype(), ScalarType::BFloat16);
    EXPECT_TRUE(y.requires_grad());
    loss = ops::sum(ops::square(y));  // square promotes (bf16), sum in float32
    EXPECT_EQ(loss.dtype(), ScalarType::Float32);
  }
  ag::backward(loss);
  const Tensor gw = ag::grad(w);
  const Tensor gx = ag::grad(x);
  ASSERT_TRUE(gw.defined());
  ASSERT_TRUE(gx.defined());
  EXPECT_EQ(gw.dtype(), ScalarType::Float32);
  EXPECT_EQ(gx.dtype(), ScalarType::Float32);
  // Reference in float32: d/dW sum((xW)^2) = 2 x^T (x W) (values are exact in bf16).
  const Tensor y32 = ops::mm(ag::detach(x), ag::detach(w));
  const Tensor ref = ops::mul(ops::mm(ag::detach(x).t(), y32), 2.0);
  const auto got = values(gw);
  const auto want = values(ref);
  for (std::size_t i = 0; i < got.size(); ++i)
    EXPECT_NEAR(got[i], want[i], 1e-2 * std::abs(want[i]) + 1e-3) << i;
}

TEST(Autocast, PolicyTableAndGuardValidation) {
  EXPECT_EQ(amp::autocast_category("mm"), amp::AutocastCategory::LowerPrecision);
  EXPECT_EQ(amp::autocast_category("baddbmm"), amp::AutocastCategory::LowerPrecision);
  EXPECT_EQ(amp::autocast_category("cross_entropy"), amp::AutocastCategory::Float32);
  EXPECT_EQ(amp::autocast_category("norm"), amp::AutocastCategory::Float32);
  EXPECT_EQ(amp::autocast_category("add"), amp::AutocastCategory::Promote);
  EXPECT_TRUE(contains(error_of([] { amp::AutocastGuard g(DeviceType::CPU, ScalarType::Float32); }),
                       "'dtype' must be bfloat16 or float16"));
  EXPECT_FALSE(amp::is_autocast_enabled(DeviceType::CPU));
  // In-place ops are never cast.
  amp::AutocastGuard guard(DeviceType::CPU);
  Tensor t = ops::ones({2});
  t.copy_(ops::full({2}, 3.0));
  EXPECT_EQ(t.dtype(), ScalarType::Float32);
  EXPECT_EQ(values(t), (std::vector<double>{3.0, 3.0}));
}

}  // namespace
