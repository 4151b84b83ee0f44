// The momentum control of normalisation layers that keep running statistics (BatchNorm-like):
// buffers named "running_mean", "running_var" and optionally "num_batches_tracked", updated in
// training mode as running = (1 - momentum) * running + momentum * batch_stat, or as a cumulative
// average (factor 1 / num_batches_tracked) when the momentum is unset. optim::update_bn uses it to
// recompute the statistics of an averaged model (as torch.optim.swa_utils.update_bn does).
#pragma once

#include <optional>

namespace tb::nn {

/// Implemented (besides Module) by layers with running statistics whose momentum can be changed.
class RunningStatsMomentum {
 public:
  virtual ~RunningStatsMomentum() = default;
  /// The momentum; std::nullopt means a cumulative average over the batches seen.
  virtual std::optional<double> momentum() const = 0;
  /// Sets the momentum (std::nullopt: cumulative average).
  virtual void set_momentum(std::optional<double> momentum) = 0;
};

}  // namespace tb::nn
