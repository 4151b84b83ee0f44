// The per-element arithmetic of the fused optimizer updates, written once for host and device
// code: the CPU's `adam_step_`, `sgd_step_`, `foreach_lerp_` and `muon_momentum_` loops and the
// CUDA multi-tensor kernels call these, so a CUDA update is the formula the CPU tests check
// against PyTorch's (torch/optim/adam.py, sgd.py, _muon.py's momentum, swa_utils.py's EMA/SWA) in
// every run.
#pragma once

#include <cmath>

#if defined(__CUDACC__)
#define TB_OPT_HD __host__ __device__
#else
#define TB_OPT_HD
#endif

namespace tb::backends::optim {

/// The per-parameter constants of one Adam/AdamW update (torch/optim/adam.py), in the
/// parameter's dtype.
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

/// One element of Adam/AdamW, in the order of operations of torch/optim/adam.py's
/// _single_tensor_adam. `vmax` is read and written only when Ams (amsgrad).
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

/// The per-parameter-group constants of one SGD update (torch/optim/sgd.py), in the parameter's
/// dtype.
template <typename T>
struct SgdScalars {
  T wd;              // weight_decay
  T mu;              // momentum
  T one_minus_damp;  // 1 - dampening
  T neg_lr;          // -lr
};

/// One element of SGD, in the order of operations of torch/optim/sgd.py's _single_tensor_sgd:
/// the gradient (negated with `maximize`), plus weight_decay·p with `decay`; with a momentum
/// buffer `buf`, the buffer (set to that gradient on its `first` step, else
/// momentum·buf + (1 − dampening)·d) and the Nesterov form; then p + (−lr)·d.
template <typename T>
TB_OPT_HD inline void sgd_element(T& p, T g, T* buf, bool first, bool maximize, bool decay,
                                  bool nesterov, const SgdScalars<T>& c) {
  T d = maximize ? -g : g;
  if (decay) d = d + c.wd * p;
  if (buf != nullptr) {
    *buf = first ? d : c.mu * *buf + c.one_minus_damp * d;
    d = nesterov ? d + c.mu * *buf : *buf;
  }
  p = p + c.neg_lr * d;
}

/// torch.lerp in its compute type C (float for the 16-bit dtypes): `start + w·(end − start)` for
/// |w| < 0.5, `end − (end − start)·(1 − w)` otherwise, so both ends are exact (w = 0 gives
/// start, w = 1 gives end). Muon's momentum (torch/optim/_muon.py) and EMA/SWA
/// (torch/optim/swa_utils.py) use it.
template <typename C>
TB_OPT_HD inline C lerp(C start, C end, C w) {
  const C diff = end - start;
  const C aw = w < C(0) ? -w : w;
  return aw < C(0.5) ? start + w * diff : end - diff * (C(1) - w);
}

}  // namespace tb::backends::optim
