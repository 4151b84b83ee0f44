// GEMM / SYRK throughput: raw cblas_sgemm vs tb::cpu::gemm (OpenBLAS, oneDNN and reference
// backends), X·Xᵀ through syrk vs gemm, and every backend on the products the shipped workloads
// run (BM_workload_gemm / BM_workload_syrk: the table Auto's choice rests on), at 1 and 2 threads.
//
// Every benchmark reports GFLOP/s as the counter "flops" (Google Benchmark prints it scaled,
// e.g. "95.1G/s"). For X·Xᵀ both variants count the full GEMM's 2·r·r·c flops, so the counter
// ratio syrk/gemm is the speed-up of the symmetric product.
//
// Run: gemm_bench --benchmark_min_time=0.2 (compare figures as ratios within one run; add
// --benchmark_enable_random_interleaving=true --benchmark_repetitions=5 to interleave them).
#include <benchmark/benchmark.h>

#include <cstdint>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include "engine/backends/cpu/blas.h"
#include "engine/core/thread_pool.h"
#include "engine/ops/ops.h"

#ifdef TB_HAVE_OPENBLAS
#include <cblas.h>
#endif

namespace {

using tb::cpu::GemmBackend;

std::vector<float> random_vector(int64_t count, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> v(static_cast<size_t>(count));
  for (float& x : v)
    x = dist(rng);
  return v;
}

// Square operands for C[n×n] = A[n×n]·B[n×n].
struct SquareOperands {
  explicit SquareOperands(int64_t n)
      : a(random_vector(n * n, 1)), b(random_vector(n * n, 2)), c(static_cast<size_t>(n * n)) {}
  std::vector<float> a, b, c;
};

void set_flops(benchmark::State& state, double flops_per_iteration) {
  state.counters["flops"] =
      benchmark::Counter(flops_per_iteration, benchmark::Counter::kIsIterationInvariantRate);
}

// Args: {n, threads}.
void square_args(benchmark::internal::Benchmark* b, int64_t max_n) {
  for (int64_t n : {256, 512, 1024, 2048}) {
    if (n > max_n) continue;
    for (int64_t threads : {1, 2})
      b->Args({n, threads});
  }
  b->ArgNames({"n", "threads"})->Unit(benchmark::kMillisecond)->UseRealTime();
}

#ifdef TB_HAVE_OPENBLAS
void BM_cblas_sgemm(benchmark::State& state) {
  const int n = static_cast<int>(state.range(0));
  tb::core::ScopedNumThreads threads(static_cast<int>(state.range(1)));
  SquareOperands ops(n);
  for (auto _ : state) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, ops.a.data(), n,
                ops.b.data(), n, 0.0f, ops.c.data(), n);
    benchmark::DoNotOptimize(ops.c.data());
  }
  set_flops(state, 2.0 * n * n * n);
}
BENCHMARK(BM_cblas_sgemm)->Apply([](auto* b) { square_args(b, 2048); });
#endif

void run_tb_gemm(benchmark::State& state, GemmBackend backend) {
  const int64_t n = state.range(0);
  tb::core::ScopedNumThreads threads(static_cast<int>(state.range(1)));
  const GemmBackend previous = tb::cpu::requested_gemm_backend();
  tb::cpu::set_gemm_backend(backend);
  SquareOperands ops(n);
  for (auto _ : state) {
    tb::cpu::gemm(false, false, n, n, n, 1.0f, ops.a.data(), n, ops.b.data(), n, 0.0f, ops.c.data(),
                  n);
    benchmark::DoNotOptimize(ops.c.data());
  }
  tb::cpu::set_gemm_backend(previous);
  set_flops(state, 2.0 * n * n * n);
}

#ifdef TB_HAVE_OPENBLAS
void BM_tb_gemm_openblas(benchmark::State& state) {
  run_tb_gemm(state, GemmBackend::OpenBlas);
}
BENCHMARK(BM_tb_gemm_openblas)->Apply([](auto* b) { square_args(b, 2048); });
#endif

void BM_tb_gemm_reference(benchmark::State& state) {
  run_tb_gemm(state, GemmBackend::Reference);
}
BENCHMARK(BM_tb_gemm_reference)->Apply([](auto* b) { square_args(b, 1024); });

// Tensor-level matmul through the dispatcher (checks, output allocation, kernel): the same
// {n, threads} arguments and "flops" counter as BM_cblas_sgemm, so the two read side by side
// (target: >= 95% of cblas_sgemm).
void BM_tensor_matmul(benchmark::State& state) {
  const int64_t n = state.range(0);
  tb::core::ScopedNumThreads threads(static_cast<int>(state.range(1)));
  const tb::core::Tensor a = tb::core::from_vector(random_vector(n * n, 1), {n, n});
  const tb::core::Tensor b = tb::core::from_vector(random_vector(n * n, 2), {n, n});
  for (auto _ : state) {
    tb::core::Tensor c = tb::ops::matmul(a, b);
    benchmark::DoNotOptimize(c.data_ptr());
  }
  set_flops(state, 2.0 * n * n * n);
}
BENCHMARK(BM_tensor_matmul)->Apply([](auto* b) { square_args(b, 2048); });

// X·Xᵀ for X[r×c]. Args: {r, c, threads}.
void xxt_args(benchmark::internal::Benchmark* b) {
  const int64_t shapes[][2] = {{256, 784}, {768, 768}, {768, 3072}, {1024, 4096}, {2048, 2048}};
  for (const auto& s : shapes) {
    for (int64_t threads : {1, 2})
      b->Args({s[0], s[1], threads});
  }
  b->ArgNames({"rows", "cols", "threads"})->Unit(benchmark::kMillisecond)->UseRealTime();
}

struct XxtOperands {
  XxtOperands(int64_t r, int64_t c) : x(random_vector(r * c, 3)), out(static_cast<size_t>(r * r)) {}
  std::vector<float> x, out;
};

void BM_xxt_syrk(benchmark::State& state) {
  const int64_t r = state.range(0), c = state.range(1);
  tb::core::ScopedNumThreads threads(static_cast<int>(state.range(2)));
  XxtOperands ops(r, c);
  for (auto _ : state) {
    tb::cpu::syrk(false, r, c, 1.0f, ops.x.data(), c, 0.0f, ops.out.data(), r);
    benchmark::DoNotOptimize(ops.out.data());
  }
  set_flops(state, 2.0 * r * r * c);
}
BENCHMARK(BM_xxt_syrk)->Apply(xxt_args);

void BM_xxt_gemm(benchmark::State& state) {
  const int64_t r = state.range(0), c = state.range(1);
  tb::core::ScopedNumThreads threads(static_cast<int>(state.range(2)));
  XxtOperands ops(r, c);
  for (auto _ : state) {
    tb::cpu::gemm(false, true, r, r, c, 1.0f, ops.x.data(), c, ops.x.data(), c, 0.0f,
                  ops.out.data(), r);
    benchmark::DoNotOptimize(ops.out.data());
  }
  set_flops(state, 2.0 * r * r * c);
}
BENCHMARK(BM_xxt_gemm)->Apply(xxt_args);

// The float products of the shipped workloads (resources/configs): the Fashion-MNIST MLP at batch
// 128 (784-256-256-10: forward x·Wᵀ, weight gradients gᵀ·x, input gradients g·W), Muon's
// Newton–Schulz on its 256×784 and 256×256 matrices, qwen-tiny (d 128, 16×64 tokens, MLP
// 512) projections and their weight gradients, and the `gpt` model at GPT-2 small's shape (d 768,
// 4×64 tokens, the 50304-row tied head): projections, input and weight gradients.
struct WorkloadShape {
  const char* name;
  bool trans_a, trans_b;
  int64_t m, n, k;
};
constexpr WorkloadShape kWorkloadShapes[] = {
    {"mlp.fc1", false, true, 128, 256, 784},         {"mlp.fc2", false, true, 128, 256, 256},
    {"mlp.fc1.dW", true, false, 256, 784, 128},      {"mlp.fc2.dW", true, false, 256, 256, 128},
    {"mlp.fc2.dX", false, false, 128, 256, 256},     {"ns.X.Xt", false, true, 256, 256, 784},
    {"ns.B.X", false, false, 256, 784, 256},         {"ns.256^3", false, false, 256, 256, 256},
    {"qwen.qkv", false, true, 1024, 128, 128},       {"qwen.up", false, true, 1024, 512, 128},
    {"qwen.down", false, true, 1024, 128, 512},      {"qwen.dW", true, false, 128, 128, 1024},
    {"qwen.up.dW", true, false, 512, 128, 1024},     {"qwen.head", false, true, 1024, 256, 128},
    {"gpt2.c_attn", false, true, 256, 2304, 768},    {"gpt2.c_fc", false, true, 256, 3072, 768},
    {"gpt2.c_proj", false, true, 256, 768, 3072},    {"gpt2.c_fc.dX", false, false, 256, 768, 3072},
    {"gpt2.c_fc.dW", true, false, 3072, 768, 256},   {"gpt2.head", false, true, 256, 50304, 768},
    {"gpt2.head.dX", false, false, 256, 768, 50304}, {"gpt2.head.dW", true, false, 50304, 768, 256},
};
constexpr GemmBackend kCompared[] = {GemmBackend::OpenBlas, GemmBackend::OneDnn,
                                     GemmBackend::Reference};

// Args: {shape, backend (index into kCompared), threads}; backends this build lacks are left out.
void workload_args(benchmark::internal::Benchmark* b, int64_t shapes) {
  for (int64_t s = 0; s < shapes; ++s) {
    for (int64_t bi = 0; bi < 3; ++bi) {
      if (!tb::cpu::gemm_backend_available_on_cpu(kCompared[bi])) continue;
      for (int64_t threads : {1, 2})
        b->Args({s, bi, threads});
    }
  }
  b->ArgNames({"shape", "backend", "threads"})->Unit(benchmark::kMicrosecond)->UseRealTime();
}

void BM_workload_gemm(benchmark::State& state) {
  const WorkloadShape& sh = kWorkloadShapes[state.range(0)];
  const GemmBackend backend = kCompared[state.range(1)];
  tb::core::ScopedNumThreads threads(static_cast<int>(state.range(2)));
  const GemmBackend previous = tb::cpu::requested_gemm_backend();
  tb::cpu::set_gemm_backend(backend);
  const std::vector<float> a = random_vector(sh.m * sh.k, 4), b = random_vector(sh.k * sh.n, 5);
  std::vector<float> c(static_cast<size_t>(sh.m * sh.n));
  for (auto _ : state) {
    tb::cpu::gemm(sh.trans_a, sh.trans_b, sh.m, sh.n, sh.k, 1.0f, a.data(),
                  sh.trans_a ? sh.m : sh.k, b.data(), sh.trans_b ? sh.k : sh.n, 0.0f, c.data(),
                  sh.n);
    benchmark::DoNotOptimize(c.data());
  }
  tb::cpu::set_gemm_backend(previous);
  state.SetLabel(std::string(sh.name) + " " + std::string(tb::cpu::gemm_backend_name(backend)));
  set_flops(state, 2.0 * sh.m * sh.n * sh.k);
}
BENCHMARK(BM_workload_gemm)->Apply([](auto* b) {
  workload_args(b, static_cast<int64_t>(std::size(kWorkloadShapes)));
});

// Newton–Schulz's symmetric products X·Xᵀ (X 256×784 and 256×256, qwen-tiny's 128×512) through
// syrk on each backend; flops counted as SYRK's n·n·k.
constexpr int64_t kSyrkShapes[][2] = {{256, 784}, {256, 256}, {128, 512}};

void BM_workload_syrk(benchmark::State& state) {
  const int64_t r = kSyrkShapes[state.range(0)][0], c = kSyrkShapes[state.range(0)][1];
  const GemmBackend backend = kCompared[state.range(1)];
  tb::core::ScopedNumThreads threads(static_cast<int>(state.range(2)));
  const GemmBackend previous = tb::cpu::requested_gemm_backend();
  tb::cpu::set_gemm_backend(backend);
  XxtOperands ops(r, c);
  for (auto _ : state) {
    tb::cpu::syrk(false, r, c, 1.0f, ops.x.data(), c, 0.0f, ops.out.data(), r);
    benchmark::DoNotOptimize(ops.out.data());
  }
  tb::cpu::set_gemm_backend(previous);
  state.SetLabel(std::to_string(r) + "x" + std::to_string(c) + " " +
                 std::string(tb::cpu::gemm_backend_name(backend)));
  set_flops(state, 1.0 * r * r * c);
}
BENCHMARK(BM_workload_syrk)->Apply([](auto* b) {
  workload_args(b, static_cast<int64_t>(std::size(kSyrkShapes)));
});

}  // namespace

BENCHMARK_MAIN();
