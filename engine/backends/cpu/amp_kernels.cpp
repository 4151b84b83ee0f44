// CPU kernels of the mixed-precision (GradScaler) ops, with the semantics of PyTorch's
// aten/src/ATen/native/cpu/AmpGradScalerKernels.cpp:
//   amp_foreach_non_finite_check_and_unscale_(grads, found_inf, inv_scale)
//   amp_update_scale_(scale, growth_tracker, found_inf, growth, backoff, interval)
// Arguments are checked by the callers in engine/amp/grad_scaler.cpp; the kernels only compute.
#include <atomic>
#include <cmath>

#include "engine/backends/cpu/capability_kernels.h"
#include "engine/dispatch/op_signatures.h"

namespace tb::cpu::TB_CPU_CAPABILITY {

using dispatch::DispatchKey;
namespace sig = ops::sig;

namespace {

// One tensor, contiguous: x is not finite -> found; x *= inv_scale unless inv_scale == 1
// (computed in float for 16-bit floats, rounded back to the element type).
template <typename T>
bool unscale_contiguous(T* data, std::int64_t n, float inv_scale) {
  using C = compute_t<T>;
  const C inv = static_cast<C>(inv_scale);
  const bool scale = inv_scale != 1.0f;
  std::atomic<bool> found{false};
  core::parallel_for(0, n, 32768, [&](std::int64_t b, std::int64_t e) {
    bool local = false;
    for (std::int64_t i = b; i < e; ++i) {
      const C x = static_cast<C>(data[i]);
      if (!std::isfinite(x)) local = true;
      if (scale) data[i] = convert<T>(x * inv);
    }
    if (local) found.store(true, std::memory_order_relaxed);
  });
  return found.load();
}

void amp_unscale_kernel(const std::vector<Tensor>& grads, Tensor& found_inf,
                        const Tensor& inv_scale) {
  const float inv = *static_cast<const float*>(inv_scale.data_ptr());
  bool found = false;
  for (const Tensor& g : grads) {
    if (g.numel() == 0) continue;
    // A strided gradient is processed through a contiguous copy written back afterwards.
    Tensor work = g.is_contiguous() ? g : g.contiguous();
    TB_DISPATCH_FLOATING_TYPES(work.dtype(), "amp_foreach_non_finite_check_and_unscale_", [&] {
      using T = scalar_t;
      if (unscale_contiguous(work.data_ptr<T>(), work.numel(), inv)) found = true;
    });
    if (!work.is_same(g)) {
      Tensor dst = g;
      dst.copy_(work);
    }
  }
  // Only ever set, never cleared (the caller pre-zeroes it).
  if (found) *static_cast<float*>(found_inf.data_ptr()) = 1.0f;
}

void amp_update_scale_kernel(Tensor& scale, Tensor& growth_tracker, const Tensor& found_inf,
                             double growth_factor, double backoff_factor,
                             std::int64_t growth_interval) {
  float* s = static_cast<float*>(scale.data_ptr());
  auto* tracker = static_cast<std::int32_t*>(growth_tracker.data_ptr());
  const float inf = *static_cast<const float*>(found_inf.data_ptr());
  if (inf != 0.0f) {
    *s = static_cast<float>(static_cast<double>(*s) * backoff_factor);
    *tracker = 0;
    return;
  }
  // Entering this branch means we just carried out a successful step, so growth_tracker is
  // incremented before comparing to growth_interval.
  const std::int64_t successful = static_cast<std::int64_t>(*tracker) + 1;
  if (successful == growth_interval) {
    const auto grown = static_cast<float>(static_cast<double>(*s) * growth_factor);
    // Never grow to inf (the scale would be useless from then on).
    if (std::isfinite(grown)) *s = grown;
    *tracker = 0;
  } else {
    *tracker = static_cast<std::int32_t>(successful);
  }
}

}  // namespace

void register_amp_kernels(dispatch::Dispatcher& d) {
  const auto cpu = DispatchKey::CPU;
  d.impl<sig::AmpUnscale>("amp_foreach_non_finite_check_and_unscale_", cpu, amp_unscale_kernel)
      .detach();
  d.impl<sig::AmpUpdateScale>("amp_update_scale_", cpu, amp_update_scale_kernel).detach();
}

}  // namespace tb::cpu::TB_CPU_CAPABILITY
