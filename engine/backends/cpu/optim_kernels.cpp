// The fused multi-tensor optimizer updates on the CPU: `adam_step_` (Adam/AdamW over a list of
// parameters in one parallel pass), `sgd_step_` (SGD likewise), `foreach_lerp_` (EMA/SWA
// averages) and `muon_momentum_` (Muon's momentum and Nesterov input). Each is an operator so that
// every device gets the same update through the dispatcher: a backend registers its own fused
// kernel (CUDA: one launch per dtype group), and one without (openreg) reaches this kernel through
// its CPU fallback, bit for bit.
#include <algorithm>
#include <array>
#include <cmath>
#include <utility>

#include "engine/backends/common/adam_args.h"
#include "engine/backends/common/optim_math.h"
#include "engine/backends/cpu/capability_kernels.h"
#include "engine/backends/cpu/loops.h"
#include "engine/core/error.h"
#include "engine/core/thread_pool.h"
#include "engine/dispatch/op_signatures.h"

namespace tb::cpu::TB_CPU_CAPABILITY {

namespace {

using core::ScalarType;
using core::Tensor;

// One contiguous run of Adam's update. The flags are template parameters so the loop has no
// branches and vectorises; the per-element arithmetic (torch/optim/adam.py's, in its order) is
// shared with the CUDA kernel (engine/backends/common/optim_math.h).
template <typename T>
struct AdamChunk {
  T* __restrict p;
  const T* __restrict g;
  T* __restrict m;
  T* __restrict v;
  T* __restrict vmax;
  std::int64_t n;
  backends::optim::AdamScalars<T> c;
};

template <typename T, bool Maximize, bool Decoupled, bool L2, bool Ams>
void adam_chunk(const AdamChunk<T>& c) {
  T* __restrict p = c.p;
  const T* __restrict g = c.g;
  T* __restrict m = c.m;
  T* __restrict v = c.v;
  T* __restrict vmax = c.vmax;
  const backends::optim::AdamScalars<T> s = c.c;
  for (std::int64_t k = 0; k < c.n; ++k) {
    backends::optim::adam_element<T, Maximize, Decoupled, L2, Ams>(p[k], g[k], m[k], v[k],
                                                                   Ams ? vmax + k : nullptr, s);
  }
}

template <typename T, int K>
void adam_case(const AdamChunk<T>& c) {
  adam_chunk<T, (K & 8) != 0, (K & 4) != 0, (K & 2) != 0, (K & 1) != 0>(c);
}

template <typename T, int... K>
constexpr std::array<void (*)(const AdamChunk<T>&), sizeof...(K)> adam_table(
    std::integer_sequence<int, K...>) {
  return {&adam_case<T, K>...};
}

// Picks the instantiation for the run-time flags: one table lookup per chunk.
template <typename T>
void adam_dispatch(const AdamChunk<T>& c, bool maximize, bool decoupled, bool l2, bool ams) {
  static constexpr auto kTable = adam_table<T>(std::make_integer_sequence<int, 16>{});
  const int key = (maximize ? 8 : 0) | (decoupled ? 4 : 0) | (l2 ? 2 : 0) | (ams ? 1 : 0);
  kTable[static_cast<std::size_t>(key)](c);
}

void adam_step_kernel(const std::vector<Tensor>& ps, const std::vector<Tensor>& gs,
                      const std::vector<Tensor>& ms, const std::vector<Tensor>& vs,
                      const std::vector<Tensor>& vmaxs, const Tensor& step_sizes,
                      const Tensor& bc2_sqrts, double lr, double b1, double b2, double eps,
                      double wd, bool maximize, bool decoupled) {
  const std::size_t n = ps.size();
  const bool amsgrad = !vmaxs.empty();
  const ScalarType dt =
      backends::check_adam_step_args(ps, gs, ms, vs, vmaxs, step_sizes, bc2_sqrts, core::Device());
  if (n == 0) return;
  const auto ss = step_sizes.to(core::Device(), ScalarType::Float64).contiguous();
  const auto bc = bc2_sqrts.to(core::Device(), ScalarType::Float64).contiguous();
  const double* step_size = ss.data_ptr<double>();
  const double* bc2_sqrt = bc.data_ptr<double>();
  std::vector<std::int64_t> sizes;
  for (const auto& p : ps)
    sizes.push_back(p.numel());
  auto run = [&](auto zero) {
    using T = decltype(zero);
    core::for_each_element(sizes, [&](std::size_t i, std::int64_t b, std::int64_t e) {
      AdamChunk<T> c;
      c.p = ps[i].data_ptr<T>() + b;
      c.g = gs[i].data_ptr<T>() + b;
      c.m = ms[i].data_ptr<T>() + b;
      c.v = vs[i].data_ptr<T>() + b;
      c.vmax = amsgrad ? vmaxs[i].data_ptr<T>() + b : nullptr;
      c.n = e - b;
      c.c.decay = static_cast<T>(1.0 - lr * wd);
      c.c.wd = static_cast<T>(wd);
      c.c.b2 = static_cast<T>(b2);
      c.c.one_minus_b1 = static_cast<T>(1.0 - b1);
      c.c.one_minus_b2 = static_cast<T>(1.0 - b2);
      c.c.bc2_sqrt = static_cast<T>(bc2_sqrt[i]);
      c.c.eps = static_cast<T>(eps);
      c.c.neg_step = static_cast<T>(-step_size[i]);
      adam_dispatch(c, maximize, wd != 0.0 && decoupled, wd != 0.0 && !decoupled, amsgrad);
    });
  };
  if (dt == ScalarType::Float64) {
    run(0.0);
  } else {
    run(0.0f);
  }
}

// SGD over every element of every parameter in one parallel pass (the loop SGD::step ran itself
// before the op existed; the arithmetic of optim_math.h's sgd_element, in its order).
void sgd_step_kernel(const std::vector<Tensor>& ps, const std::vector<Tensor>& gs,
                     const std::vector<Tensor>& bufs, core::IntList first_steps, double lr,
                     double momentum, double dampening, double wd, bool nesterov, bool maximize) {
  const ScalarType dt =
      backends::check_sgd_step_args(ps, gs, bufs, first_steps, momentum, core::Device());
  if (ps.empty()) return;
  std::vector<std::int64_t> sizes;
  for (const auto& p : ps)
    sizes.push_back(p.numel());
  const bool with_momentum = momentum != 0.0;
  const bool decay = wd != 0.0;
  auto run = [&](auto zero) {
    using T = decltype(zero);
    backends::optim::SgdScalars<T> c;
    c.wd = static_cast<T>(wd);
    c.mu = static_cast<T>(momentum);
    c.one_minus_damp = static_cast<T>(1.0 - dampening);
    c.neg_lr = static_cast<T>(-lr);
    core::for_each_element(sizes, [&](std::size_t i, std::int64_t b, std::int64_t e) {
      T* p = ps[i].data_ptr<T>();
      const T* g = gs[i].data_ptr<T>();
      T* buf = with_momentum ? bufs[i].data_ptr<T>() : nullptr;
      const bool first = with_momentum && first_steps[i] != 0;
      for (std::int64_t k = b; k < e; ++k) {
        backends::optim::sgd_element<T>(p[k], g[k], buf != nullptr ? buf + k : nullptr, first,
                                        maximize, decay, nesterov, c);
      }
    });
  };
  if (dt == ScalarType::Float64) {
    run(0.0);
  } else {
    run(0.0f);
  }
}

// The sizes of a tensor list, for for_each_element.
std::vector<std::int64_t> numels(const std::vector<Tensor>& ts) {
  std::vector<std::int64_t> sizes;
  sizes.reserve(ts.size());
  for (const auto& t : ts)
    sizes.push_back(t.numel());
  return sizes;
}

void foreach_lerp_kernel(const std::vector<Tensor>& selfs, const std::vector<Tensor>& ends,
                         const Tensor& weight, double w) {
  const ScalarType dt = backends::check_lerp_args(
      "foreach_lerp_", {{"selfs", &selfs}, {"ends", &ends}}, &weight, core::Device());
  if (selfs.empty()) return;
  const double wv = weight.defined() ? weight.item() : w;
  TB_DISPATCH_FLOATING_TYPES(dt, "foreach_lerp_", [&] {
    using T = scalar_t;
    using C = compute_t<T>;
    const auto wc = static_cast<C>(wv);
    core::for_each_element(numels(selfs), [&](std::size_t i, std::int64_t b, std::int64_t e) {
      T* __restrict s = selfs[i].data_ptr<T>();
      const T* __restrict x = ends[i].data_ptr<T>();
      for (std::int64_t k = b; k < e; ++k)
        s[k] = static_cast<T>(
            backends::optim::lerp<C>(static_cast<C>(s[k]), static_cast<C>(x[k]), wc));
    });
  });
}

void muon_momentum_kernel(const std::vector<Tensor>& bufs, const std::vector<Tensor>& grads,
                          const std::vector<Tensor>& outs, double momentum) {
  const ScalarType dt = backends::check_lerp_args(
      "muon_momentum_", {{"bufs", &bufs}, {"grads", &grads}, {"outs", &outs, true}}, nullptr,
      core::Device());
  if (bufs.empty()) return;
  const bool nesterov = !outs.empty();
  TB_DISPATCH_FLOATING_TYPES(dt, "muon_momentum_", [&] {
    using T = scalar_t;
    using C = compute_t<T>;
    const auto mu = static_cast<C>(momentum);
    const auto one_minus_mu = static_cast<C>(1.0 - momentum);
    core::for_each_element(numels(bufs), [&](std::size_t i, std::int64_t b, std::int64_t e) {
      T* __restrict m = bufs[i].data_ptr<T>();
      const T* __restrict g = grads[i].data_ptr<T>();
      T* __restrict u = nesterov ? outs[i].data_ptr<T>() : nullptr;
      for (std::int64_t k = b; k < e; ++k) {
        const auto gk = static_cast<C>(g[k]);
        // The buffer is stored (rounded to T) before the Nesterov lerp reads it, as in torch.
        m[k] = static_cast<T>(backends::optim::lerp<C>(static_cast<C>(m[k]), gk, one_minus_mu));
        if (nesterov) u[k] = static_cast<T>(backends::optim::lerp<C>(gk, static_cast<C>(m[k]), mu));
      }
    });
  });
}

}  // namespace

void register_optim_kernels(dispatch::Dispatcher& d) {
  const auto cpu = dispatch::DispatchKey::CPU;
  d.impl<ops::sig::AdamStep>("adam_step_", cpu, adam_step_kernel).detach();
  d.impl<ops::sig::SgdStep>("sgd_step_", cpu, sgd_step_kernel).detach();
  d.impl<ops::sig::ForeachLerp>("foreach_lerp_", cpu, foreach_lerp_kernel).detach();
  d.impl<ops::sig::MuonMomentum>("muon_momentum_", cpu, muon_momentum_kernel).detach();
}

}  // namespace tb::cpu::TB_CPU_CAPABILITY
