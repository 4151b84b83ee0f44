// Forward+backward time of the two reference models, to compare with PyTorch at the same
// shapes and thread count (bench/torch_nn.py):
//   mlp:       784-256-256-10 (ReLU), batch 128, cross-entropy
//   qwen-tiny: d=128, 4 layers, 4 heads, T=64, B=16, vocab 256, cross-entropy
// One iteration = forward + loss + backward + zero_grad (no optimizer step). Also the CNN
// example's first-block kernels (batch norm, max pooling, ReLU's gradient) one at a time.
// Run: nn_bench --benchmark_min_time=2 (threads: the /N argument).
#include <benchmark/benchmark.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "engine/autograd/autograd.h"
#include "engine/core/thread_pool.h"
#include "engine/nn/models.h"
#include "engine/ops/ops.h"
#include "engine/rng/generator.h"

namespace {

using tb::core::ScalarType;
using tb::core::Tensor;
namespace nn = tb::nn;
namespace ops = tb::ops;

void run_steps(benchmark::State& state, nn::Model& model, const Tensor& input,
               const Tensor& target) {
  tb::core::set_num_threads(static_cast<int>(state.range(0)));
  for (int i = 0; i < 2; ++i) {  // warm-up: caches, allocator
    tb::autograd::backward(model.loss(model.forward(input), target));
    model.zero_grad();
  }
  for (auto _ : state) {
    const Tensor loss = model.loss(model.forward(input), target);
    tb::autograd::backward(loss);
    model.zero_grad();
    benchmark::DoNotOptimize(loss.data_ptr());
  }
  state.counters["threads"] = static_cast<double>(state.range(0));
}

void BM_mlp_fwd_bwd(benchmark::State& state) {
  auto gen = tb::rng::make_generator(tb::core::Device());
  gen->manual_seed(0);
  nn::MlpConfig cfg;  // 784-256-256-10
  nn::Mlp model(cfg, gen.get());
  const Tensor x = ops::randn({128, 784}, gen.get());
  std::vector<std::int64_t> labels(128);
  for (std::size_t i = 0; i < labels.size(); ++i)
    labels[i] = static_cast<std::int64_t>(i * 7 % 10);
  const Tensor target = tb::core::from_vector(labels);
  run_steps(state, model, x, target);
}

void BM_qwen_tiny_fwd_bwd(benchmark::State& state) {
  auto gen = tb::rng::make_generator(tb::core::Device());
  gen->manual_seed(0);
  nn::QwenTinyConfig cfg;  // d=128, 4 layers, 4 heads, context 64, vocab 256
  nn::QwenTiny model(cfg, gen.get());
  const Tensor u = ops::rand({16, 65}, gen.get());
  const Tensor tokens = ops::mul(u, 255.99).to(ScalarType::Int64);
  run_steps(state, model, tokens.narrow(1, 0, 64).contiguous(),
            tokens.narrow(1, 1, 64).contiguous());
}

// Causal attention alone, forward + backward, at qwen-tiny's head shape (B=16, H=4, D=32):
// range(0) 0 = the fused op, 1 = the matmul/masked_fill/softmax/matmul composition it replaced;
// range(1) = T; range(2) = threads.
void BM_attention_fwd_bwd(benchmark::State& state) {
  tb::core::set_num_threads(static_cast<int>(state.range(2)));
  const std::int64_t t = state.range(1);
  auto gen = tb::rng::make_generator(tb::core::Device());
  gen->manual_seed(0);
  namespace ag = tb::autograd;
  const Tensor q = ag::requires_grad_(ops::randn({16, 4, t, 32}, gen.get()));
  const Tensor k = ag::requires_grad_(ops::randn({16, 4, t, 32}, gen.get()));
  const Tensor v = ag::requires_grad_(ops::randn({16, 4, t, 32}, gen.get()));
  const Tensor pos = ops::arange(t);
  const Tensor future = ops::gt(pos.unsqueeze(0), pos.unsqueeze(1));
  for (auto _ : state) {
    Tensor out;
    if (state.range(0) == 0) {
      out = ops::scaled_dot_product_attention(q, k, v, true);
    } else {
      Tensor scores = ops::mul(ops::matmul(q, k.transpose(-2, -1)), 1.0 / std::sqrt(32.0));
      scores = ops::masked_fill(scores, future, -std::numeric_limits<double>::infinity());
      out = ops::matmul(ops::softmax(scores, -1), v);
    }
    ag::backward(ops::sum(out));
    for (const Tensor* p : {&q, &k, &v})
      ag::set_grad(*p, Tensor());
  }
  state.SetLabel(state.range(0) == 0 ? "fused" : "composed");
}

// RMSNorm forward + backward at qwen-tiny's activation shape ([16·64, 128]): range(0) 0 = the
// fused op, 1 = the square/mean/rsqrt/mul composition it replaced; range(1) = threads.
void BM_rms_norm_fwd_bwd(benchmark::State& state) {
  tb::core::set_num_threads(static_cast<int>(state.range(1)));
  namespace ag = tb::autograd;
  auto gen = tb::rng::make_generator(tb::core::Device());
  gen->manual_seed(0);
  const Tensor x = ag::requires_grad_(ops::randn({1024, 128}, gen.get()));
  const Tensor w = ag::requires_grad_(ops::ones({128}));
  for (auto _ : state) {
    Tensor y;
    if (state.range(0) == 0) {
      y = ops::rms_norm(x, w, 1e-6);
    } else {
      const Tensor ms = ops::mean(ops::square(x), {-1}, true);
      y = ops::mul(ops::mul(x, ops::rsqrt(ops::add(ms, 1e-6))), w);
    }
    ag::backward(ops::sum(y));
    ag::set_grad(x, Tensor());
    ag::set_grad(w, Tensor());
  }
  state.SetLabel(state.range(0) == 0 ? "fused" : "composed");
}

// The CNN example's first block at batch 128 ([128, 32, 28, 28]), one kernel at a time, one
// thread: arg 0 = batch norm forward, 1 = batch norm backward, 2 = max_pool2d 2x2 forward, 3 =
// its backward, 4 = ReLU backward, 5 = ReLU.
void BM_cnn_block_kernels(benchmark::State& state) {
  tb::core::set_num_threads(1);
  auto gen = tb::rng::make_generator(tb::core::Device());
  gen->manual_seed(0);
  const Tensor x = ops::randn({128, 32, 28, 28}, gen.get());
  const Tensor g = ops::randn({128, 32, 28, 28}, gen.get());
  const Tensor w = ops::ones({32}), b = ops::zeros({32});
  Tensor rm = ops::zeros({32}), rv = ops::ones({32});
  const Tensor mean = ops::mean(x, {0, 2, 3}), invstd = ops::ones({32});
  const auto [pooled, idx] = ops::max_pool2d_with_indices(x, {2}, {2}, {0});
  const Tensor gp = ops::randn({128, 32, 14, 14}, gen.get());
  const char* labels[] = {"batch_norm",          "batch_norm_backward", "max_pool2d",
                          "max_pool2d_backward", "relu_backward",       "relu"};
  for (auto _ : state) {
    switch (state.range(0)) {
      case 0:
        benchmark::DoNotOptimize(ops::batch_norm(x, rm, rv, w, b, true).data_ptr());
        break;
      case 1:
        benchmark::DoNotOptimize(
            std::get<0>(ops::batch_norm_backward(g, x, w, mean, invstd, true, true)).data_ptr());
        break;
      case 2:
        benchmark::DoNotOptimize(
            std::get<0>(ops::max_pool2d_with_indices(x, {2}, {2}, {0})).data_ptr());
        break;
      case 3:
        benchmark::DoNotOptimize(ops::max_pool2d_backward(gp, x, idx).data_ptr());
        break;
      case 4:
        benchmark::DoNotOptimize(ops::relu_backward(g, x).data_ptr());
        break;
      default:
        benchmark::DoNotOptimize(ops::relu(x).data_ptr());
    }
  }
  state.SetLabel(labels[state.range(0)]);
}

BENCHMARK(BM_mlp_fwd_bwd)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_qwen_tiny_fwd_bwd)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_rms_norm_fwd_bwd)
    ->ArgsProduct({{0, 1}, {1, 2}})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK(BM_cnn_block_kernels)->DenseRange(0, 5)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_attention_fwd_bwd)
    ->ArgsProduct({{0, 1}, {64, 256}, {1, 2}})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
