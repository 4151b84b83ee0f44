// GPU matrix products: our tensor `mm` on cuda:0 (allocation + cuBLAS or cuBLASLt) in fp32,
// TF32, bf16, fp16 and fp64 against a raw cublasGemmEx (fp32 or bf16) on the same shapes; and
// causal attention forward + backward, the fused kernels against the bmm/softmax composition.
// Reports TFLOP/s ("flops" counter); each iteration is synchronised so the time is the
// kernel's, not the launch's.
// Run (GPU machine): cuda_bench --benchmark_min_time=0.5
#include <benchmark/benchmark.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cmath>
#include <limits>
#include <string>

#include "engine/api/engine_api.h"
#include "engine/autograd/autograd.h"
#include "engine/backends/cuda/cuda_status.h"
#include "engine/core/math_mode.h"
#include "engine/ops/ops.h"

namespace {

using tb::core::Device;
using tb::core::DeviceType;
using tb::core::ScalarType;
using tb::core::Tensor;

bool have_gpu(benchmark::State& state) {
  const auto st = tb::backends::cuda_status();
  if (st.device_count == 0) state.SkipWithError(("no GPU: " + st.reason).c_str());
  return st.device_count > 0;
}

void set_flops(benchmark::State& state, double n) {
  state.counters["flops"] =
      benchmark::Counter(2.0 * n * n * n, benchmark::Counter::kIsIterationInvariantRate);
}

// Arg 1: 0 = cuBLAS, 1 = cuBLASLt, 2 = cuBLAS with TF32.
template <ScalarType DT>
void BM_tensor_mm_cuda(benchmark::State& state) {
  if (!have_gpu(state)) return;
  const std::int64_t n = state.range(0);
  const std::int64_t mode = state.range(1);
  tb::api::set_gemm_backend(mode == 1 ? "cublaslt" : "cublas");
  tb::core::set_allow_tf32(mode == 2);
  const Device gpu(DeviceType::CUDA, 0);
  const Tensor a = tb::ops::randn({n, n}, nullptr, DT).to(gpu);
  const Tensor b = tb::ops::randn({n, n}, nullptr, DT).to(gpu);
  for (auto _ : state) {
    Tensor c = tb::ops::mm(a, b);
    cudaDeviceSynchronize();
    benchmark::DoNotOptimize(c.data_ptr());
  }
  tb::core::set_allow_tf32(false);
  tb::api::set_gemm_backend("auto");
  set_flops(state, static_cast<double>(n));
}

// Raw cublasGemmEx on the same shapes: the ceiling for our mm. Arg 1: 0 = fp32 (as
// cublasSgemm), 1 = bf16 with fp32 accumulation.
void BM_raw_cublas(benchmark::State& state) {
  if (!have_gpu(state)) return;
  const int n = static_cast<int>(state.range(0));
  const bool bf16 = state.range(1) == 1;
  const cudaDataType type = bf16 ? CUDA_R_16BF : CUDA_R_32F;
  void *a = nullptr, *b = nullptr, *c = nullptr;
  const std::size_t bytes = (bf16 ? 2 : 4) * static_cast<std::size_t>(n) * n;
  cudaMalloc(&a, bytes);
  cudaMalloc(&b, bytes);
  cudaMalloc(&c, bytes);
  cudaMemset(a, 0, bytes);
  cudaMemset(b, 0, bytes);
  cublasHandle_t h;
  cublasCreate(&h);
  const float one = 1.0f, zero = 0.0f;
  for (auto _ : state) {
    cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &one, b, type, n, a, type, n, &zero, c, type,
                 n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    cudaDeviceSynchronize();
  }
  cublasDestroy(h);
  cudaFree(a);
  cudaFree(b);
  cudaFree(c);
  set_flops(state, n);
}

// Causal attention forward + backward at qwen-tiny's head shape (B=16, H=4, D=32): arg 0 =
// T, arg 1: 0 = the fused kernels, 1 = the matmul/masked_fill/softmax/matmul composition;
// arg 2: 0 = fp32, 1 = bf16. Tells where the fused kernel pays (short rows: launches; long rows:
// the composition's tensor-core products).
void BM_attention_cuda(benchmark::State& state) {
  if (!have_gpu(state)) return;
  namespace ag = tb::autograd;
  const std::int64_t t = state.range(0);
  const ScalarType dt = state.range(2) == 1 ? ScalarType::BFloat16 : ScalarType::Float32;
  const Device gpu(DeviceType::CUDA, 0);
  auto leaf = [&] {
    return ag::requires_grad_(tb::ops::randn({16, 4, t, 32}, nullptr, dt).to(gpu));
  };
  const Tensor q = leaf();
  const Tensor k = leaf();
  const Tensor v = leaf();
  const Tensor pos = tb::ops::arange(t, ScalarType::Int64, gpu);
  const Tensor future = tb::ops::gt(pos.unsqueeze(0), pos.unsqueeze(1));
  for (auto _ : state) {
    Tensor out;
    if (state.range(1) == 0) {
      out = tb::ops::scaled_dot_product_attention(q, k, v, true);
    } else {
      Tensor s = tb::ops::mul(tb::ops::matmul(q, k.transpose(-2, -1)), 1.0 / std::sqrt(32.0));
      s = tb::ops::masked_fill(s, future, -std::numeric_limits<double>::infinity());
      out = tb::ops::matmul(tb::ops::softmax(s, -1), v);
    }
    ag::backward(tb::ops::sum(out));
    for (const Tensor* p : {&q, &k, &v})
      ag::set_grad(*p, Tensor());
    cudaDeviceSynchronize();
  }
  state.SetLabel(std::string(state.range(1) == 0 ? "fused" : "composed") +
                 (dt == ScalarType::BFloat16 ? " bf16" : " fp32"));
}

BENCHMARK(BM_tensor_mm_cuda<ScalarType::Float32>)
    ->ArgsProduct({{1024, 4096, 8192}, {0, 1, 2}})
    ->UseRealTime();
BENCHMARK(BM_raw_cublas)->ArgsProduct({{1024, 4096, 8192}, {0}})->UseRealTime();
BENCHMARK(BM_tensor_mm_cuda<ScalarType::BFloat16>)
    ->ArgsProduct({{4096, 8192}, {0, 1}})
    ->UseRealTime();
BENCHMARK(BM_tensor_mm_cuda<ScalarType::Float16>)->ArgsProduct({{4096, 8192}, {0}})->UseRealTime();
BENCHMARK(BM_raw_cublas)->ArgsProduct({{4096, 8192}, {1}})->UseRealTime();
BENCHMARK(BM_tensor_mm_cuda<ScalarType::Float64>)->ArgsProduct({{4096}, {0}})->UseRealTime();
BENCHMARK(BM_attention_cuda)
    ->ArgsProduct({{64, 256, 1024}, {0, 1}, {0, 1}})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
