// Optimizer benchmarks (issue 4):
//  - Newton–Schulz, 5 steps, fp32, symmetric/fused form (SYRK, beta folding) vs plain GEMMs, at
//    256x784, 768x768, 768x3072, 1024x4096, 1 and 2 threads. Target: symmetric >= 1.4x on one
//    thread, never slower at small sizes.
//  - One optimizer step of AdamW and of Muon+AdamW (the parameter split) over the MLP
//    784-256-256-10 and qwen-tiny parameters; and a training step (forward+backward+step) of the
//    MLP at batch 128 with each, whose ratio is the "Muon epoch <= 1.5x AdamW epoch" target.
//  - AdamW update bandwidth vs memcpy of the same bytes (16M float32 parameters: AdamW reads p,
//    g, m, v and writes p, m, v = 28 bytes per element).
//  - One SGD step (momentum, weight decay) on 16M float32 parameters (reads p, g, buf and writes
//    p, buf = 20 bytes per element) and over qwen-tiny's parameters (many small tensors).
// Run: optim_bench --benchmark_min_time=1
#include <benchmark/benchmark.h>

#include <cstring>
#include <memory>
#include <vector>

#include "engine/autograd/autograd.h"
#include "engine/core/thread_pool.h"
#include "engine/nn/models.h"
#include "engine/ops/ops.h"
#include "engine/optim/muon.h"
#include "engine/optim/param_split.h"
#include "engine/optim/sgd_adam.h"
#include "engine/rng/generator.h"

namespace {

using tb::core::ScalarType;
using tb::core::Tensor;
namespace ag = tb::autograd;
namespace nn = tb::nn;
namespace ops = tb::ops;
namespace optim = tb::optim;

std::unique_ptr<tb::rng::Generator> seeded(std::uint64_t s) {
  auto g = tb::rng::make_generator(tb::core::Device());
  g->manual_seed(s);
  return g;
}

// args: rows, cols, threads, symmetric
void BM_newton_schulz(benchmark::State& state) {
  tb::core::set_num_threads(static_cast<int>(state.range(2)));
  auto g = seeded(0);
  const Tensor x = ops::randn({state.range(0), state.range(1)}, g.get());
  optim::NewtonSchulzOptions o;
  o.dtype = ScalarType::Float32;
  o.symmetric = state.range(3) != 0;
  for (auto _ : state) {
    Tensor y = optim::newton_schulz(x, o);
    benchmark::DoNotOptimize(y.data_ptr());
  }
  state.SetLabel(o.symmetric ? "symmetric" : "plain");
}

void ns_args(benchmark::internal::Benchmark* b) {
  for (auto [r, c] : {std::pair<int, int>{256, 784}, {768, 768}, {768, 3072}, {1024, 4096}})
    for (int t : {1, 2})
      for (int sym : {0, 1})
        b->Args({r, c, t, sym});
}

// A model with gradients set, and the two optimizer set-ups over it.
struct Setup {
  std::shared_ptr<nn::Model> model;
  std::unique_ptr<optim::AdamW> adamw_all;
  std::unique_ptr<optim::Muon> muon;
  std::unique_ptr<optim::AdamW> adamw_rest;
};

std::vector<Tensor> tensors_of(const nn::NamedTensors& named) {
  std::vector<Tensor> out;
  for (const auto& [n, t] : named)
    out.push_back(t);
  return out;
}

Setup make_setup(const nn::ModelConfig& cfg) {
  Setup s;
  auto g = seeded(1);
  s.model = nn::build_model(cfg, g.get());
  for (const auto& p : s.model->parameters())
    ag::set_grad(p, ops::mul(ops::randn(p.sizes(), g.get()), 1e-2));
  s.adamw_all = std::make_unique<optim::AdamW>(s.model->parameters());
  const auto split = optim::split_params(*s.model);
  optim::MuonOptions mo;
  mo.lr = 0.02;
  s.muon = std::make_unique<optim::Muon>(tensors_of(split.muon), mo);
  s.adamw_rest = std::make_unique<optim::AdamW>(tensors_of(split.adamw));
  return s;
}

nn::ModelConfig model_arg(std::int64_t which) {
  if (which == 0) return nn::MlpConfig{};
  return nn::QwenTinyConfig{};
}

// args: model (0 mlp, 1 qwen-tiny), optimizer (0 AdamW, 1 Muon+AdamW), threads
void BM_optimizer_step(benchmark::State& state) {
  tb::core::set_num_threads(static_cast<int>(state.range(2)));
  Setup s = make_setup(model_arg(state.range(0)));
  for (auto _ : state) {
    if (state.range(1) == 0) {
      s.adamw_all->step();
    } else {
      s.muon->step();
      s.adamw_rest->step();
    }
  }
  state.SetLabel(std::string(state.range(0) == 0 ? "mlp " : "qwen-tiny ") +
                 (state.range(1) == 0 ? "AdamW" : "Muon+AdamW"));
}

// A full MLP training step at batch 128: forward, loss, backward, optimizer step, zero_grad.
// args: optimizer (0 AdamW, 1 Muon+AdamW), threads
void BM_mlp_train_step(benchmark::State& state) {
  tb::core::set_num_threads(static_cast<int>(state.range(1)));
  Setup s = make_setup(nn::MlpConfig{});
  auto g = seeded(2);
  const Tensor x = ops::randn({128, 784}, g.get());
  std::vector<std::int64_t> labels(128);
  for (std::size_t i = 0; i < labels.size(); ++i)
    labels[i] = static_cast<std::int64_t>(i * 7 % 10);
  const Tensor y = tb::core::from_vector(labels);
  for (auto _ : state) {
    const Tensor loss = s.model->loss(s.model->forward(x), y);
    ag::backward(loss);
    if (state.range(0) == 0) {
      s.adamw_all->step();
    } else {
      s.muon->step();
      s.adamw_rest->step();
    }
    s.model->zero_grad();
  }
  state.SetLabel(state.range(0) == 0 ? "AdamW" : "Muon+AdamW");
}

constexpr std::int64_t kBandwidthElems = 1 << 24;

void BM_adamw_bandwidth(benchmark::State& state) {
  tb::core::set_num_threads(static_cast<int>(state.range(0)));
  Tensor p = ag::requires_grad_(ops::zeros({kBandwidthElems}));
  ag::set_grad(p, ops::full({kBandwidthElems}, 1e-3));
  optim::AdamW opt({p});
  opt.step();  // state allocated
  for (auto _ : state)
    opt.step();
  state.SetBytesProcessed(state.iterations() * kBandwidthElems * 28);
}

// args: parameters (0 one tensor of 16M float32 elements, 1 qwen-tiny's), threads
void BM_sgd_step(benchmark::State& state) {
  tb::core::set_num_threads(static_cast<int>(state.range(1)));
  std::vector<Tensor> params;
  std::shared_ptr<nn::Model> model;
  if (state.range(0) == 0) {
    params.push_back(ag::requires_grad_(ops::zeros({kBandwidthElems})));
    ag::set_grad(params[0], ops::full({kBandwidthElems}, 1e-3));
  } else {
    auto g = seeded(3);
    model = nn::build_model(nn::QwenTinyConfig{}, g.get());
    params = model->parameters();
    for (const auto& p : params)
      ag::set_grad(p, ops::mul(ops::randn(p.sizes(), g.get()), 1e-2));
  }
  optim::SgdOptions o;
  o.lr = 1e-3;
  o.momentum = 0.9;
  o.weight_decay = 1e-4;
  optim::SGD opt(params, o);
  opt.step();  // momentum buffers allocated
  std::int64_t elems = 0;
  for (const auto& p : params)
    elems += p.numel();
  for (auto _ : state)
    opt.step();
  state.SetBytesProcessed(state.iterations() * elems * 20);
  state.SetLabel(state.range(0) == 0 ? "16M float32" : "qwen-tiny");
}

// EMA's update (foreach_lerp_, 12 bytes per element: read both, write one) and Muon's momentum
// with Nesterov (muon_momentum_, 16 bytes: read buffer and gradient, write buffer and update) on
// 16M float32 elements: range(0) 0 = the fused kernels, 1 = the elementwise ops they replaced;
// range(1) = threads.
void BM_ema_update(benchmark::State& state) {
  tb::core::set_num_threads(static_cast<int>(state.range(1)));
  const std::vector<Tensor> avg = {ops::zeros({kBandwidthElems})};
  const std::vector<Tensor> cur = {ops::full({kBandwidthElems}, 1.0)};
  for (auto _ : state) {
    if (state.range(0) == 0) {
      ops::foreach_lerp_(avg, cur, 0.001);
    } else {
      Tensor dst = avg[0];
      ops::copy_(dst, ops::add(avg[0], ops::mul(ops::sub(cur[0], avg[0]), 0.001)));
    }
  }
  state.SetBytesProcessed(state.iterations() * kBandwidthElems * 12);
  state.SetLabel(state.range(0) == 0 ? "foreach_lerp_" : "elementwise ops");
}

void BM_muon_momentum(benchmark::State& state) {
  tb::core::set_num_threads(static_cast<int>(state.range(1)));
  const std::vector<Tensor> buf = {ops::zeros({kBandwidthElems})};
  const std::vector<Tensor> g = {ops::full({kBandwidthElems}, 1e-3)};
  for (auto _ : state) {
    if (state.range(0) == 0) {
      benchmark::DoNotOptimize(ops::muon_momentum_(buf, g, 0.95, true));
    } else {
      Tensor b = buf[0];
      ops::copy_(b, ops::add(b, ops::sub(g[0], b), 0.05));
      benchmark::DoNotOptimize(ops::add(buf[0], ops::sub(buf[0], g[0]), -0.05));
    }
  }
  state.SetBytesProcessed(state.iterations() * kBandwidthElems * 16);
  state.SetLabel(state.range(0) == 0 ? "muon_momentum_" : "elementwise ops");
}

void BM_memcpy_same_bytes(benchmark::State& state) {
  // 28 bytes per element moved: memcpy 14 bytes per element (each byte copied is read + written).
  const std::size_t n = static_cast<std::size_t>(kBandwidthElems) * 14;
  std::vector<char> a(n, 1), b(n, 0);
  for (auto _ : state) {
    std::memcpy(b.data(), a.data(), n);
    benchmark::DoNotOptimize(b.data());
  }
  state.SetBytesProcessed(state.iterations() * kBandwidthElems * 28);
}

BENCHMARK(BM_newton_schulz)->Apply(ns_args)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_optimizer_step)
    ->ArgsProduct({{0, 1}, {0, 1}, {1, 2}})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK(BM_mlp_train_step)
    ->ArgsProduct({{0, 1}, {1, 2}})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK(BM_adamw_bandwidth)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_sgd_step)->ArgsProduct({{0, 1}, {1, 2}})->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_ema_update)
    ->ArgsProduct({{0, 1}, {1, 2}})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK(BM_muon_momentum)
    ->ArgsProduct({{0, 1}, {1, 2}})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK(BM_memcpy_same_bytes)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
