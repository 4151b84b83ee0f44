// Per-op overhead through the dispatcher: a 1-element add on the full user path (ops::add:
// checks, promotion, dispatch, output allocation, kernel), the typed dispatcher call alone, and
// dispatch to a kernel that does nothing (the dispatcher's own cost).
//
// Run: dispatch_bench --benchmark_min_time=0.5 --benchmark_repetitions=5
//      --benchmark_report_aggregates_only=true   (PyTorch side by side: bench/torch_dispatch.py)
#include <benchmark/benchmark.h>

#include "engine/dispatch/dispatcher.h"
#include "engine/dispatch/op_signatures.h"
#include "engine/ops/ops.h"

namespace {

using tb::core::Tensor;
namespace ops = tb::ops;

void BM_add_1elem_ops(benchmark::State& state) {
  const Tensor a = ops::full({1}, 1.5);
  const Tensor b = ops::full({1}, 2.5);
  for (auto _ : state) {
    Tensor c = ops::add(a, b);
    benchmark::DoNotOptimize(c.data_ptr());
  }
}
BENCHMARK(BM_add_1elem_ops);

void BM_add_1elem_typed_call(benchmark::State& state) {
  const auto op = tb::dispatch::Dispatcher::singleton().typed<tb::ops::sig::BinaryAlpha>("add");
  const Tensor a = ops::full({1}, 1.5);
  const Tensor b = ops::full({1}, 2.5);
  const tb::core::Scalar one(1);
  for (auto _ : state) {
    Tensor c = op.call(a, b, one);
    benchmark::DoNotOptimize(c.data_ptr());
  }
}
BENCHMARK(BM_add_1elem_typed_call);

void BM_mul_scalar_1elem_ops(benchmark::State& state) {
  const Tensor a = ops::full({1}, 1.5);
  for (auto _ : state) {
    Tensor c = ops::mul(a, 2.0);  // PyTorch's reference point is `x * 2`
    benchmark::DoNotOptimize(c.data_ptr());
  }
}
BENCHMARK(BM_mul_scalar_1elem_ops);

void BM_dispatch_noop_kernel(benchmark::State& state) {
  using Sig = Tensor(const Tensor&);
  auto& d = tb::dispatch::Dispatcher::singleton();
  if (!d.exists("bench.noop")) d.define<Sig>("bench.noop");
  auto reg =
      d.impl<Sig>("bench.noop", tb::dispatch::DispatchKey::CPU, [](const Tensor& x) { return x; });
  const auto op = d.typed<Sig>("bench.noop");
  const Tensor a = ops::full({1}, 1.5);
  for (auto _ : state) {
    Tensor c = op.call(a);
    benchmark::DoNotOptimize(c.impl());
  }
}
BENCHMARK(BM_dispatch_noop_kernel);

void BM_empty_1elem(benchmark::State& state) {
  for (auto _ : state) {
    Tensor c = Tensor::empty({1});
    benchmark::DoNotOptimize(c.data_ptr());
  }
}
BENCHMARK(BM_empty_1elem);

}  // namespace

BENCHMARK_MAIN();
