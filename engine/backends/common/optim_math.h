// The per-element arithmetic of the fused optimizer updates, written once for host and device
// code: the CPU's `adam_step_` loop and the CUDA multi-tensor kernel call these, so a CUDA
// update is the formula the CPU tests check against spec §2.2 in every run.
#pragma once

#include <cmath>

#if defined(__CUDACC__)
#define TB_OPT_HD __host__ __device__
#else
#define TB_OPT_HD
#endif

namespace tb::backends::optim {

/// The per-parameter constants of one Adam/AdamW update (spec §2.2), in the parameter's dtype.
template <typename T>
struct AdamScalars {
  T decay;         // 1 - lr * weight_decay (decoupled weight decay)
  T wd;            // weight_decay (L2 form)
  T b2;            // beta2
  T one_minus_b1;  // 1 - beta1
  T one_minus_b2;  // 1 - beta2
  T bc2_sqrt;      // sqrt(1 - beta2^step)
  T eps;
  T neg_step;  // -lr / (1 - beta1^step)
};

/// One element of Adam/AdamW, in spec §2.2's order of operations. `vmax` is read and written
/// only when Ams (amsgrad).
template <typename T, bool Maximize, bool Decoupled, bool L2, bool Ams>
TB_OPT_HD inline void adam_element(T& p, T g, T& m, T& v, T* vmax, const AdamScalars<T>& c) {
  T d = Maximize ? -g : g;
  if constexpr (Decoupled) p = p * c.decay;
  if constexpr (L2) d = d + c.wd * p;
  const T mk = m + c.one_minus_b1 * (d - m);  // lerp(m, d, 1 - b1)
  const T vk = v * c.b2 + c.one_minus_b2 * d * d;
  m = mk;
  v = vk;
  T second = vk;
  if constexpr (Ams) {
    second = *vmax < vk ? vk : *vmax;
    *vmax = second;
  }
#if defined(__CUDA_ARCH__)
  const T denom = ::sqrt(second) / c.bc2_sqrt + c.eps;
#else
  const T denom = std::sqrt(second) / c.bc2_sqrt + c.eps;
#endif
  p = p + c.neg_step * (mk / denom);
}

}  // namespace tb::backends::optim
