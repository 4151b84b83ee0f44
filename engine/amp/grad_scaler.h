// Mixed-precision gradient scaling (PyTorch's torch.amp.GradScaler,
// https://pytorch.org/docs/stable/amp.html#gradient-scaling, torch/amp/grad_scaler.py): scale
// the loss so that small fp16/bf16 gradients do not flush to zero, unscale the gradients before
// the optimizer step, skip steps whose gradients hold inf/NaN, and adapt the scale (grow after
// `growth_interval` clean steps, back off on overflow).
//
// The two kernels are dispatcher ops (`amp_foreach_non_finite_check_and_unscale_`,
// `amp_update_scale_`) with CPU kernels in engine/backends/cpu/amp_kernels.cpp (a device backend
// adds its own), called through their checked public functions in engine/ops/ops.h. Nothing here
// reads a device value except where torch/amp/grad_scaler.py does (step() decides whether to run
// the optimizer; get_scale(); state_dict()).
//
// PyTorch's exception types map to: AssertionError and ValueError -> tb::ValueError,
// RuntimeError -> tb::Error.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "engine/core/tensor.h"
#include "engine/optim/optimizer.h"

namespace tb::amp {

using optim::Optimizer;
using optim::ParamGroup;

/// Construction parameters of a GradScaler (PyTorch's defaults).
struct GradScalerOptions {
  double init_scale = 65536.0;          ///< the first scale (2^16)
  double growth_factor = 2.0;           ///< multiplier after growth_interval clean steps; > 1
  double backoff_factor = 0.5;          ///< multiplier after an inf/NaN step; < 1
  std::int64_t growth_interval = 2000;  ///< clean steps between growths
  bool enabled = true;                  ///< false: every method is a pass-through
};

/// What GradScaler::state_dict() saves (PyTorch's keys: "scale", "growth_factor",
/// "backoff_factor", "growth_interval", "_growth_tracker").
struct GradScalerState {
  double scale = 65536.0;               ///< the current scale (init_scale before the first scale())
  double growth_factor = 2.0;           ///< growth factor
  double backoff_factor = 0.5;          ///< backoff factor
  std::int64_t growth_interval = 2000;  ///< growth interval
  std::int64_t growth_tracker = 0;      ///< clean steps since the last growth or backoff
};

/// Where one optimizer stands in the current iteration (PyTorch's OptState).
enum class OptState : int {
  Ready = 0,     ///< nothing done since the last update()
  Unscaled = 1,  ///< unscale_() ran
  Stepped = 2,   ///< step() ran
};

/// Scales losses and unscales gradients for mixed-precision training. Usage per iteration:
///
///     Tensor loss = ...;                        // forward, e.g. under an AutocastGuard
///     autograd::backward(scaler.scale(loss));
///     scaler.unscale_(opt);                     // optional: e.g. to clip gradients
///     scaler.step(opt);                         // skipped when a gradient has inf/NaN
///     scaler.update();
///
/// Not thread-safe; one scaler serves any number of optimizers.
class GradScaler {
 public:
  /// A scaler for tensors on `device` (the scale lives on the device of the first output given
  /// to scale()). When `device` is CUDA and no CUDA device can be used, the scaler is disabled
  /// and warning() says why (PyTorch warns and disables likewise). When enabled, a growth factor
  /// <= 1 ("The growth factor must be > 1.0.") or a backoff factor >= 1 ("The backoff factor
  /// must be < 1.0.") throws tb::ValueError (nothing else is validated, as in PyTorch).
  explicit GradScaler(core::DeviceType device = core::DeviceType::CUDA,
                      GradScalerOptions options = {});

  /// `outputs * scale` (the scale is created lazily, on outputs' device, at the first call).
  /// Returns `outputs` unchanged when disabled.
  Tensor scale(const Tensor& outputs);
  /// scale() of each tensor, with one copy of the scale per device.
  std::vector<Tensor> scale(const std::vector<Tensor>& outputs);

  /// Divides every gradient of `optimizer`'s parameters by the scale in place (one fused call
  /// per (device, dtype) group, no host synchronisation) and records per device whether any was
  /// inf/NaN. No-op when disabled. Throws tb::ValueError when scale() was never called or a
  /// gradient is fp16 ("Attempting to unscale FP16 gradients."), tb::Error when unscale_() already
  /// ran for this optimizer since update() or step() already ran.
  void unscale_(Optimizer& optimizer);

  /// Unscales (unless unscale_() already ran) and runs optimizer.step() unless a gradient held
  /// inf/NaN (this reads the device flags: a host synchronisation). Returns whether the step ran.
  /// When disabled, just runs optimizer.step() and returns true. Throws tb::Error when step()
  /// already ran for this optimizer since update().
  bool step(Optimizer& optimizer);

  /// Adapts the scale from every optimizer's inf/NaN flags (backoff, or growth after
  /// growth_interval clean steps) and resets every optimizer's stage to Ready. No-op when
  /// disabled. Throws tb::ValueError when scale() was never called, or when no optimizer was
  /// unscaled or stepped ("No inf checks were recorded prior to update.").
  void update();
  /// Sets the scale to `new_scale` instead of adapting it; resets the stages like update().
  void update(double new_scale);
  /// Copies the 1-element `new_scale` (on the scaler's device type, not requiring grad) into the
  /// scale; resets the stages like update(). Throws tb::ValueError naming the broken rule.
  void update(const Tensor& new_scale);

  /// The current scale: init_scale before the first scale(), else the scale's value (a host
  /// synchronisation); 1.0 when disabled.
  double get_scale() const;
  /// Clean steps counted towards the next growth (the initial tracker before the first scale()).
  std::int64_t growth_tracker() const;
  /// The growth factor.
  double get_growth_factor() const { return growth_factor_; }
  /// Sets the growth factor (not validated, as in PyTorch).
  void set_growth_factor(double v) { growth_factor_ = v; }
  /// The backoff factor.
  double get_backoff_factor() const { return backoff_factor_; }
  /// Sets the backoff factor (not validated, as in PyTorch).
  void set_backoff_factor(double v) { backoff_factor_ = v; }
  /// The growth interval.
  std::int64_t get_growth_interval() const { return growth_interval_; }
  /// Sets the growth interval (not validated, as in PyTorch).
  void set_growth_interval(std::int64_t v) { growth_interval_ = v; }
  /// False when constructed disabled or disabled for lack of a device.
  bool is_enabled() const { return enabled_; }
  /// Why the scaler disabled itself at construction ("" when it did not).
  const std::string& warning() const { return warning_; }
  /// The device type given at construction.
  core::DeviceType device_type() const { return device_; }

  /// The stage of `optimizer` in the current iteration (Ready when unknown).
  OptState stage(const Optimizer& optimizer) const;
  /// The per-device inf/NaN flags recorded for `optimizer` by unscale_() (empty before), as
  /// 1-element float32 tensors (1.0 = found).
  std::vector<std::pair<core::Device, Tensor>> found_inf_per_device(
      const Optimizer& optimizer) const;

  /// The state to save; std::nullopt (PyTorch's empty dict) when disabled.
  std::optional<GradScalerState> state_dict() const;
  /// Restores a saved state. No-op when disabled; std::nullopt throws tb::Error ("The source state
  /// dict is empty, possibly because it was saved from a disabled instance of GradScaler.").
  void load_state_dict(const std::optional<GradScalerState>& state);

 private:
  struct PerOptimizer {
    OptState stage = OptState::Ready;
    std::vector<std::pair<core::Device, Tensor>> found_inf_per_device;
  };
  void check_scale(const char* funcname) const;
  void lazy_init(const Tensor& like);
  std::vector<std::pair<core::Device, Tensor>> unscale_grads(Optimizer& optimizer,
                                                             const Tensor& inv_scale,
                                                             const Tensor& found_inf,
                                                             bool allow_fp16);
  PerOptimizer& per_optimizer(const Optimizer& optimizer);

  core::DeviceType device_;
  bool enabled_;
  std::string warning_;
  double init_scale_;
  double growth_factor_;
  double backoff_factor_;
  std::int64_t growth_interval_;
  std::int64_t init_growth_tracker_ = 0;
  Tensor scale_;           // float32, 0-d (undefined until the first scale())
  Tensor growth_tracker_;  // int32, 0-d
  std::map<const Optimizer*, PerOptimizer> per_optimizer_;
};

}  // namespace tb::amp
