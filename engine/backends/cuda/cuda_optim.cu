// CUDA multi-tensor kernels: the fused Adam/AdamW and SGD updates, foreach_lerp_ (EMA/SWA) and
// Muon's momentum (the per-element arithmetic of engine/backends/common/optim_math.h, shared with
// the CPU kernels) and GradScaler's unscale and scale update. Tensor lists travel as kernel
// arguments (pointers, sizes and a block -> (tensor, chunk) map, under the 4 KiB parameter limit),
// so a step is a few launches and never waits for the device.
#include <cmath>

#include "engine/backends/common/optim_math.h"
#include "engine/backends/cuda/cuda_device.cuh"

namespace tb::cuda {

namespace {

using namespace dev;  // NOLINT(google-build-using-namespace): kernel-file helpers

constexpr int kMaxTensors = 32;
constexpr int kMaxBlocks = 320;
constexpr std::int64_t kChunk = 65536;

struct BlockMap {
  std::uint8_t tensor[kMaxBlocks];
  std::int32_t chunk[kMaxBlocks];
};

// Packs `count` tensors (skipping empty ones) into launches of at most kMaxTensors tensors and
// kMaxBlocks chunks: add(meta_slot, tensor) fills a slot, launch(blocks) runs one launch.
template <typename Add, typename Launch>
int multi_tensor_apply(int count, const std::int64_t* numels, BlockMap& map, Add add,
                       Launch launch) {
  int slot = 0;
  int blocks = 0;
  for (int t = 0; t < count; ++t) {
    const std::int64_t n = numels[t];
    if (n == 0) continue;
    add(slot, t);
    const std::int64_t chunks = (n + kChunk - 1) / kChunk;
    for (std::int64_t c = 0; c < chunks; ++c) {
      map.tensor[blocks] = static_cast<std::uint8_t>(slot);
      map.chunk[blocks] = static_cast<std::int32_t>(c);
      ++blocks;
      if (blocks == kMaxBlocks) {
        if (const int err = launch(blocks); err != 0) return err;
        blocks = 0;
        if (c + 1 < chunks) {
          // The rest of this tensor goes on in the next launch, from slot 0.
          slot = 0;
          add(slot, t);
        } else {
          slot = -1;  // the next tensor takes slot 0
        }
      }
    }
    ++slot;
    if (slot == kMaxTensors) {
      if (blocks > 0) {
        if (const int err = launch(blocks); err != 0) return err;
      }
      blocks = 0;
      slot = 0;
    }
  }
  if (blocks > 0) return launch(blocks);
  return 0;
}

// multi_tensor_apply for a float dtype st: launch(T{}, blocks) enqueues one launch of the
// kernel instantiated for T; returns the first failing status.
template <typename Add, typename Launch>
int apply_float_lists(int st, int count, const std::int64_t* numels, BlockMap& map, Add add,
                      Launch launch) {
  return dispatch_float(st, [&](auto tag) {
    return multi_tensor_apply(count, numels, map, add, [&](int blocks) {
      launch(tag, blocks);
      return status();
    });
  });
}

struct AdamMeta {
  void* p[kMaxTensors];
  const void* g[kMaxTensors];
  void* m[kMaxTensors];
  void* v[kMaxTensors];
  void* vmax[kMaxTensors];
  std::int64_t n[kMaxTensors];
  double step_size[kMaxTensors];
  double bc2_sqrt[kMaxTensors];
  BlockMap map;
};

struct AdamConsts {
  double lr, beta1, beta2, eps, wd;
};

template <typename T, bool Maximize, bool Decoupled, bool L2, bool Ams>
__global__ void adam_kernel(AdamMeta meta, AdamConsts k) {
  const int t = meta.map.tensor[blockIdx.x];
  const std::int64_t begin = static_cast<std::int64_t>(meta.map.chunk[blockIdx.x]) * kChunk;
  const std::int64_t end = begin + kChunk < meta.n[t] ? begin + kChunk : meta.n[t];
  backends::optim::AdamScalars<T> c;
  c.decay = static_cast<T>(1.0 - k.lr * k.wd);
  c.wd = static_cast<T>(k.wd);
  c.b2 = static_cast<T>(k.beta2);
  c.one_minus_b1 = static_cast<T>(1.0 - k.beta1);
  c.one_minus_b2 = static_cast<T>(1.0 - k.beta2);
  c.bc2_sqrt = static_cast<T>(meta.bc2_sqrt[t]);
  c.eps = static_cast<T>(k.eps);
  c.neg_step = static_cast<T>(-meta.step_size[t]);
  T* p = static_cast<T*>(meta.p[t]);
  const T* g = static_cast<const T*>(meta.g[t]);
  T* m = static_cast<T*>(meta.m[t]);
  T* v = static_cast<T*>(meta.v[t]);
  T* vmax = static_cast<T*>(meta.vmax[t]);
  for (std::int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
    T pi = p[i];
    T mi = m[i];
    T vi = v[i];
    backends::optim::adam_element<T, Maximize, Decoupled, L2, Ams>(pi, g[i], mi, vi,
                                                                   Ams ? vmax + i : nullptr, c);
    p[i] = pi;
    m[i] = mi;
    v[i] = vi;
  }
}

template <typename T, int K>
void adam_launch_case(int blocks, const AdamMeta& meta, const AdamConsts& k) {
  TB_LAUNCH(blocks, kThreads,
            adam_kernel<T, (K & 8) != 0, (K & 4) != 0, (K & 2) != 0, (K & 1) != 0>)
  (meta, k);
}

template <typename T, int... K>
void adam_launch(int key, int blocks, const AdamMeta& meta, const AdamConsts& k,
                 std::integer_sequence<int, K...>) {
  ((key == K ? adam_launch_case<T, K>(blocks, meta, k) : void()), ...);
}

struct SgdMeta {
  void* p[kMaxTensors];
  const void* g[kMaxTensors];
  void* buf[kMaxTensors];
  std::int64_t n[kMaxTensors];
  std::uint8_t first[kMaxTensors];
  BlockMap map;
};

struct SgdConsts {
  double lr, momentum, dampening, wd;
  bool nesterov, maximize;
};

template <typename T>
__global__ void sgd_kernel(SgdMeta meta, SgdConsts k) {
  const int t = meta.map.tensor[blockIdx.x];
  const std::int64_t begin = static_cast<std::int64_t>(meta.map.chunk[blockIdx.x]) * kChunk;
  const std::int64_t end = begin + kChunk < meta.n[t] ? begin + kChunk : meta.n[t];
  backends::optim::SgdScalars<T> c;
  c.wd = static_cast<T>(k.wd);
  c.mu = static_cast<T>(k.momentum);
  c.one_minus_damp = static_cast<T>(1.0 - k.dampening);
  c.neg_lr = static_cast<T>(-k.lr);
  const bool decay = k.wd != 0.0;
  const bool first = meta.first[t] != 0;
  T* p = static_cast<T*>(meta.p[t]);
  const T* g = static_cast<const T*>(meta.g[t]);
  T* buf = static_cast<T*>(meta.buf[t]);
  for (std::int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
    T pi = p[i];
    if (buf != nullptr) {
      T bi = buf[i];
      backends::optim::sgd_element<T>(pi, g[i], &bi, first, k.maximize, decay, k.nesterov, c);
      buf[i] = bi;
    } else {
      backends::optim::sgd_element<T>(pi, g[i], nullptr, false, k.maximize, decay, k.nesterov, c);
    }
    p[i] = pi;
  }
}

struct UnscaleMeta {
  void* data[kMaxTensors];
  std::int64_t n[kMaxTensors];
  BlockMap map;
};

template <typename T>
__global__ void unscale_kernel(UnscaleMeta meta, float* found_inf, const float* inv_scale) {
  using C = compute_t<T>;
  const int t = meta.map.tensor[blockIdx.x];
  const std::int64_t begin = static_cast<std::int64_t>(meta.map.chunk[blockIdx.x]) * kChunk;
  const std::int64_t end = begin + kChunk < meta.n[t] ? begin + kChunk : meta.n[t];
  const float inv_f = *inv_scale;
  const C inv = static_cast<C>(inv_f);
  const bool scale = inv_f != 1.0f;
  T* x = static_cast<T*>(meta.data[t]);
  bool found = false;
  for (std::int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
    const C v = static_cast<C>(x[i]);
    if (!isfinite(v)) found = true;
    if (scale) x[i] = T(v * inv);
  }
  if (found) *found_inf = 1.0f;  // only ever set (the caller pre-zeroes it)
}

struct LerpMeta {
  void* self[kMaxTensors];
  const void* end[kMaxTensors];
  void* out[kMaxTensors];
  std::int64_t n[kMaxTensors];
  BlockMap map;
};

// The lerp weight: the device scalar when given (SWA's 1/(n+1)), else the host value.
template <typename C>
__device__ C lerp_weight(const void* weight, int weight_st, double w) {
  if (weight == nullptr) return static_cast<C>(w);
  if (static_cast<ScalarType>(weight_st) == ScalarType::Float64) {
    return static_cast<C>(*static_cast<const double*>(weight));
  }
  return static_cast<C>(*static_cast<const float*>(weight));
}

template <typename T>
__global__ void lerp_kernel(LerpMeta meta, const void* weight, int weight_st, double w) {
  using C = compute_t<T>;
  const int t = meta.map.tensor[blockIdx.x];
  const std::int64_t begin = static_cast<std::int64_t>(meta.map.chunk[blockIdx.x]) * kChunk;
  const std::int64_t end = begin + kChunk < meta.n[t] ? begin + kChunk : meta.n[t];
  const C wc = lerp_weight<C>(weight, weight_st, w);
  T* s = static_cast<T*>(meta.self[t]);
  const T* e = static_cast<const T*>(meta.end[t]);
  for (std::int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
    s[i] = T(backends::optim::lerp<C>(static_cast<C>(s[i]), static_cast<C>(e[i]), wc));
  }
}

template <typename T, bool Nesterov>
__global__ void muon_momentum_kernel(LerpMeta meta, double momentum) {
  using C = compute_t<T>;
  const int t = meta.map.tensor[blockIdx.x];
  const std::int64_t begin = static_cast<std::int64_t>(meta.map.chunk[blockIdx.x]) * kChunk;
  const std::int64_t end = begin + kChunk < meta.n[t] ? begin + kChunk : meta.n[t];
  const auto mu = static_cast<C>(momentum);
  const auto one_minus_mu = static_cast<C>(1.0 - momentum);
  T* m = static_cast<T*>(meta.self[t]);
  const T* g = static_cast<const T*>(meta.end[t]);
  T* u = static_cast<T*>(meta.out[t]);
  for (std::int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
    const auto gi = static_cast<C>(g[i]);
    // The buffer is rounded to T before the Nesterov lerp reads it (as the CPU kernel, torch).
    const T mi = T(backends::optim::lerp<C>(static_cast<C>(m[i]), gi, one_minus_mu));
    m[i] = mi;
    if constexpr (Nesterov) u[i] = T(backends::optim::lerp<C>(gi, static_cast<C>(mi), mu));
  }
}

__global__ void update_scale_kernel(float* scale, std::int32_t* tracker, const float* found_inf,
                                    double growth, double backoff, std::int64_t interval) {
  if (*found_inf != 0.0f) {
    *scale = static_cast<float>(static_cast<double>(*scale) * backoff);
    *tracker = 0;
    return;
  }
  const std::int64_t successful = static_cast<std::int64_t>(*tracker) + 1;
  if (successful == interval) {
    const auto grown = static_cast<float>(static_cast<double>(*scale) * growth);
    if (isfinite(grown)) *scale = grown;  // never grow to inf
    *tracker = 0;
  } else {
    *tracker = static_cast<std::int32_t>(successful);
  }
}

}  // namespace

int launch_adam(const AdamArgs& a) {
  const auto type = static_cast<ScalarType>(a.st);
  if (type != ScalarType::Float32 && type != ScalarType::Float64) {
    return static_cast<int>(cudaErrorInvalidValue);
  }
  const bool ams = a.max_exp_avg_sqs != nullptr;
  const bool decoupled = a.weight_decay != 0.0 && a.decoupled;
  const bool l2 = a.weight_decay != 0.0 && !a.decoupled;
  const int key = (a.maximize ? 8 : 0) | (decoupled ? 4 : 0) | (l2 ? 2 : 0) | (ams ? 1 : 0);
  const AdamConsts k{a.lr, a.beta1, a.beta2, a.eps, a.weight_decay};
  AdamMeta meta{};
  return multi_tensor_apply(
      a.count, a.numels, meta.map,
      [&](int slot, int t) {
        meta.p[slot] = a.params[t];
        meta.g[slot] = a.grads[t];
        meta.m[slot] = a.exp_avgs[t];
        meta.v[slot] = a.exp_avg_sqs[t];
        meta.vmax[slot] = ams ? a.max_exp_avg_sqs[t] : nullptr;
        meta.n[slot] = a.numels[t];
        meta.step_size[slot] = a.step_sizes[t];
        meta.bc2_sqrt[slot] = a.bc2_sqrts[t];
      },
      [&](int blocks) {
        if (type == ScalarType::Float64) {
          adam_launch<double>(key, blocks, meta, k, std::make_integer_sequence<int, 16>{});
        } else {
          adam_launch<float>(key, blocks, meta, k, std::make_integer_sequence<int, 16>{});
        }
        return status();
      });
}

int launch_sgd(const SgdArgs& a) {
  const auto type = static_cast<ScalarType>(a.st);
  if (type != ScalarType::Float32 && type != ScalarType::Float64) {
    return static_cast<int>(cudaErrorInvalidValue);
  }
  const bool momentum = a.momentum_buffers != nullptr;
  const SgdConsts k{a.lr, a.momentum, a.dampening, a.weight_decay, a.nesterov, a.maximize};
  SgdMeta meta{};
  return multi_tensor_apply(
      a.count, a.numels, meta.map,
      [&](int slot, int t) {
        meta.p[slot] = a.params[t];
        meta.g[slot] = a.grads[t];
        meta.buf[slot] = momentum ? a.momentum_buffers[t] : nullptr;
        meta.first[slot] = momentum && a.first_steps[t] != 0 ? 1 : 0;
        meta.n[slot] = a.numels[t];
      },
      [&](int blocks) {
        if (type == ScalarType::Float64) {
          TB_LAUNCH(blocks, kThreads, sgd_kernel<double>)(meta, k);
        } else {
          TB_LAUNCH(blocks, kThreads, sgd_kernel<float>)(meta, k);
        }
        return status();
      });
}

int launch_amp_unscale(int st, int count, void* const* data, const std::int64_t* numels,
                       float* found_inf, const float* inv_scale) {
  UnscaleMeta meta{};
  return apply_float_lists(
      st, count, numels, meta.map,
      [&](int slot, int t) {
        meta.data[slot] = data[t];
        meta.n[slot] = numels[t];
      },
      [&](auto tag, int blocks) {
        TB_LAUNCH(blocks, kThreads, unscale_kernel<decltype(tag)>)(meta, found_inf, inv_scale);
      });
}

int launch_amp_update_scale(float* scale, std::int32_t* growth_tracker, const float* found_inf,
                            double growth, double backoff, std::int64_t interval) {
  TB_LAUNCH(1, 1, update_scale_kernel)(scale, growth_tracker, found_inf, growth, backoff, interval);
  return status();
}

int launch_foreach_lerp(int st, int count, void* const* selfs, const void* const* ends,
                        const std::int64_t* numels, const void* weight, int weight_st, double w) {
  LerpMeta meta{};
  return apply_float_lists(
      st, count, numels, meta.map,
      [&](int slot, int t) {
        meta.self[slot] = selfs[t];
        meta.end[slot] = ends[t];
        meta.n[slot] = numels[t];
      },
      [&](auto tag, int blocks) {
        TB_LAUNCH(blocks, kThreads, lerp_kernel<decltype(tag)>)(meta, weight, weight_st, w);
      });
}

int launch_muon_momentum(int st, int count, void* const* bufs, const void* const* grads,
                         void* const* outs, const std::int64_t* numels, double momentum) {
  LerpMeta meta{};
  return apply_float_lists(
      st, count, numels, meta.map,
      [&](int slot, int t) {
        meta.self[slot] = bufs[t];
        meta.end[slot] = grads[t];
        meta.out[slot] = outs != nullptr ? outs[t] : nullptr;
        meta.n[slot] = numels[t];
      },
      [&](auto tag, int blocks) {
        using T = decltype(tag);
        if (outs != nullptr) {
          TB_LAUNCH(blocks, kThreads, muon_momentum_kernel<T, true>)(meta, momentum);
        } else {
          TB_LAUNCH(blocks, kThreads, muon_momentum_kernel<T, false>)(meta, momentum);
        }
      });
}

static_assert(sizeof(LerpMeta) <= 4000, "kernel parameters over 4 KiB");
static_assert(sizeof(AdamMeta) + sizeof(AdamConsts) <= 4000, "kernel parameters over 4 KiB");
static_assert(sizeof(SgdMeta) + sizeof(SgdConsts) <= 4000, "kernel parameters over 4 KiB");

}  // namespace tb::cuda
