// Parameter initialisation as PyTorch's torch.nn.init does it, drawing from a given generator
// (null = the device's default generator), so a seed fixes the initial weights. Every function
// writes under a no-grad guard and returns its tensor.
#pragma once

#include <utility>

#include "engine/core/tensor.h"

namespace tb::rng {
class Generator;
}

namespace tb::nn::init {

using core::Tensor;

/// (fan_in, fan_out) of a weight of shape [out, in, *receptive field]; needs >= 2 dimensions.
std::pair<std::int64_t, std::int64_t> fan_in_and_fan_out(const Tensor& t);
/// Fills with U(low, high).
Tensor uniform_(const Tensor& t, double low, double high, rng::Generator* gen = nullptr);
/// Fills with N(mean, std²).
Tensor normal_(const Tensor& t, double mean, double std, rng::Generator* gen = nullptr);
/// Fills with a constant.
Tensor constant_(const Tensor& t, double value);
/// Kaiming-uniform with leaky-ReLU slope `a` over fan_in: U(−b, b), b = gain·√(3/fan_in),
/// gain = √(2/(1 + a²)). nn.Linear uses a = √5 (then b = 1/√fan_in).
Tensor kaiming_uniform_(const Tensor& t, double a, rng::Generator* gen = nullptr);

/// While one is alive on a thread, the functions above leave their tensors as they are
/// (uninitialised, no random number drawn): a model built only for its parameters' names and
/// shapes — the parameter tables of `trainbench-cli model` and the workbench — costs neither
/// the initialisation nor the memory, whose fresh pages are never touched (GPT-2 medium's
/// 1.4 GB). As PyTorch's torch.nn.utils.skip_init, for a whole model. Nests.
class SkipInitGuard {
 public:
  SkipInitGuard();
  ~SkipInitGuard();
  SkipInitGuard(const SkipInitGuard&) = delete;
  SkipInitGuard& operator=(const SkipInitGuard&) = delete;

 private:
  bool previous_;
};

/// True while a SkipInitGuard is alive on this thread.
bool init_skipped();

}  // namespace tb::nn::init
