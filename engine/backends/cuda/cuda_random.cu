// CUDA random kernels: one thread per Philox block, the arithmetic of
// engine/backends/common/random_math.h (shared with openreg, whose tests check it against
// PhiloxState in every run). 16-bit tensors draw in float32 and round as they store.
#include "engine/backends/common/random_math.h"
#include "engine/backends/cuda/cuda_device.cuh"

namespace tb::cuda {

namespace {

using namespace dev;  // NOLINT(google-build-using-namespace): kernel-file helpers
namespace rnd = backends::rnd;

template <typename T>
constexpr rnd::Target target_of() {
  if constexpr (std::is_same_v<T, core::Half>) {
    return rnd::Target::f16;
  } else if constexpr (std::is_same_v<T, core::BFloat16>) {
    return rnd::Target::bf16;
  } else {
    return rnd::Target::f32;
  }
}

// Kind 0: uniform(a = from, b = to); 1: normal(a = mean, b = std); 2: bernoulli (a = p, or
// p_tensor[i]).
template <typename T, int Kind>
__global__ void random_kernel(T* out, std::int64_t n, std::uint64_t seed, std::uint64_t offset,
                              double a, double b, const float* p_tensor) {
  constexpr bool kDouble = std::is_same_v<T, double>;
  constexpr int kPer = kDouble ? 2 : 4;
  const std::int64_t blocks = (n + kPer - 1) / kPer;
  for (std::int64_t blk = global_index(); blk < blocks; blk += global_stride()) {
    const rng::Philox4 w = rnd::block_words(seed, offset, static_cast<std::uint64_t>(blk));
    for (int j = 0; j < kPer; ++j) {
      const std::int64_t i = blk * kPer + j;
      if (i >= n) break;
      if constexpr (kDouble) {
        if constexpr (Kind == 1) {
          out[i] = rnd::normal_f64(w, j, a, b);
        } else if constexpr (Kind == 0) {
          out[i] = rnd::uniform_f64(w, j, a, b);
        } else {
          const double p = p_tensor != nullptr ? static_cast<double>(p_tensor[i]) : a;
          out[i] = rnd::uniform_f64(w, j, 0.0, 1.0) < p ? 1.0 : 0.0;
        }
      } else {
        float v = 0.0f;
        if constexpr (Kind == 1) {
          v = rnd::normal_f32(w, j, static_cast<float>(a), static_cast<float>(b));
        } else if constexpr (Kind == 0) {
          v = rnd::uniform_f32(w, j, static_cast<float>(a), static_cast<float>(b), target_of<T>());
        } else {
          const double p = p_tensor != nullptr ? static_cast<double>(p_tensor[i]) : a;
          // The draw is compared, never stored: no rounding to the storage dtype (as openreg,
          // PyTorch).
          const float u = rnd::uniform_f32(w, j, 0.0f, 1.0f, rnd::Target::f32);
          v = static_cast<double>(u) < p ? 1.0f : 0.0f;
        }
        out[i] = T(v);
      }
    }
  }
}

template <int Kind>
int launch_random(int st, void* out, std::int64_t n, std::uint64_t seed, std::uint64_t offset,
                  double a, double b, const float* p_tensor) {
  if (n == 0) return 0;
  return dispatch_float(st, [&](auto tag) {
    using T = decltype(tag);
    constexpr int kPer = std::is_same_v<T, double> ? 2 : 4;
    TB_LAUNCH(blocks_for((n + kPer - 1) / kPer), kThreads, random_kernel<T, Kind>)
    (static_cast<T*>(out), n, seed, offset, a, b, p_tensor);
    return status();
  });
}

}  // namespace

int launch_uniform(int st, void* out, std::int64_t n, std::uint64_t seed, std::uint64_t offset,
                   double from, double to) {
  return launch_random<0>(st, out, n, seed, offset, from, to, nullptr);
}

int launch_normal(int st, void* out, std::int64_t n, std::uint64_t seed, std::uint64_t offset,
                  double mean, double stdv) {
  return launch_random<1>(st, out, n, seed, offset, mean, stdv, nullptr);
}

int launch_bernoulli(int st, void* out, std::int64_t n, std::uint64_t seed, std::uint64_t offset,
                     double p, const float* p_tensor) {
  return launch_random<2>(st, out, n, seed, offset, p, 0.0, p_tensor);
}

}  // namespace tb::cuda
