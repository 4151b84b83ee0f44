// Stochastic Weight Averaging and exponential moving averages of a model's weights (PyTorch's
// torch.optim.swa_utils, https://pytorch.org/docs/stable/optim.html#weight-averaging-swa-and-ema,
// torch/optim/swa_utils.py): averaging-function factories, AveragedModel and update_bn.
// (SWALR, torch.optim.swa_utils.SWALR, is a learning-rate scheduler and lives with the
// schedulers.)
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "engine/core/tensor.h"
#include "engine/nn/module.h"

namespace tb::swa {

/// Per-tensor averaging function: the new average from the current average, the model's tensor
/// and the number of models averaged so far (an int64 0-d tensor on the average's device).
using AvgFn = std::function<Tensor(const Tensor& averaged, const Tensor& current,
                                   const Tensor& num_averaged)>;
/// Multi-tensor averaging function: updates every tensor of `averaged` in place from the tensor
/// at the same position of `current`, in one pass over the lists (all tensors of one device and
/// one dtype).
using MultiAvgFn =
    std::function<void(const std::vector<Tensor>& averaged, const std::vector<Tensor>& current,
                       const Tensor& num_averaged)>;

/// EMA over lists: floating tensors ema += (1 - decay) * (cur - ema); other dtypes
/// ema := ema * decay + cur * (1 - decay). Throws tb::ValueError "Invalid decay value D provided.
/// Please provide a value in [0,1] range." when decay is outside [0, 1].
MultiAvgFn get_ema_multi_avg_fn(double decay = 0.999);
/// Running mean over lists: floating tensors avg += (cur - avg) / (n + 1) (a lerp with weight
/// 1 / (n + 1), computed in float32 for 16-bit tensors); other dtypes the same through a float
/// division, truncated back.
MultiAvgFn get_swa_multi_avg_fn();
/// EMA of one tensor: decay * ema + (1 - decay) * cur (same decay check as the multi version).
AvgFn get_ema_avg_fn(double decay = 0.999);
/// Running mean of one tensor: avg + (cur - avg) / (n + 1).
AvgFn get_swa_avg_fn();

/// An averaged copy of a model's weights (SWA by default, or EMA / any averaging function).
///
/// Keeps its own deep copy of the model's parameters and buffers (detached, on `device` or where
/// the model's tensors are). update_parameters() copies the model on its first call and averages
/// from the second on; the `n_averaged` counter is an int64 tensor on `device` (CPU when not
/// given), and a host-side flag says whether an average exists, so update_parameters() never
/// reads a device value (refreshed by load_state_dict()). With `use_buffers` the buffers are
/// averaged like the parameters; without, they are copied from the model at every update (keeps
/// running statistics in sync).
///
/// To evaluate the average, load it into a model of the same architecture with copy_to(), or
/// read averaged_state().
class AveragedModel {
 public:
  /// Copies `model`'s tensors. Give at most one of `avg_fn` and `multi_avg_fn` (else
  /// tb::ValueError "Only one of avg_fn and multi_avg_fn should be provided"); neither means SWA.
  explicit AveragedModel(const nn::Module& model, std::optional<core::Device> device = {},
                         AvgFn avg_fn = {}, MultiAvgFn multi_avg_fn = {}, bool use_buffers = false);

  /// Folds `model`'s current tensors into the average (see the class comment). Tensors are paired
  /// by position (parameters, then buffers when use_buffers), as PyTorch's zip does; a shorter
  /// list silently truncates the pairing.
  void update_parameters(const nn::Module& model);

  /// The number of models averaged (int64 0-d tensor).
  const Tensor& n_averaged() const { return n_averaged_; }
  /// Host-side: true once an average exists (n_averaged > 0); never reads the device.
  bool has_averaged() const { return has_averaged_; }
  /// Whether buffers are averaged too.
  bool use_buffers() const { return use_buffers_; }

  /// The averaged parameters under the model's names (the copies themselves, not clones).
  nn::NamedTensors averaged_parameters() const;
  /// The copies of the model's buffers (persistent or not) under the model's names.
  nn::NamedTensors averaged_buffers() const;
  /// averaged_parameters() followed by averaged_buffers().
  nn::NamedTensors averaged_state() const;
  /// Copies the averaged parameters and buffers into `target`, a model of the same architecture
  /// (converted to its dtypes/devices; its tensors keep their identity). Throws tb::ValueError
  /// naming every name `target` has that the average lacks, or whose shape differs; `target` is
  /// left untouched then.
  void copy_to(nn::Module& target) const;

  /// PyTorch's layout: "n_averaged" first, then "module.<name>" for every entry of the model's
  /// state_dict() (parameters and persistent buffers). The tensors are the copies themselves.
  nn::NamedTensors state_dict() const;
  /// Loads a state_dict(): every problem (missing or unexpected keys when strict, shape
  /// mismatches) is reported in one tb::ValueError and nothing changes then. Refreshes the
  /// host-side flag from the loaded n_averaged (one device read).
  void load_state_dict(const nn::NamedTensors& state, bool strict = true);

 private:
  struct Entry {
    std::string name;
    Tensor tensor;  // the copy (shared between tied names)
  };
  std::vector<Entry> params_;            // every parameter name, in the model's order
  std::vector<Entry> buffers_;           // every buffer name, in the model's order
  std::vector<Tensor> unique_params_;    // the copies, deduplicated (what update pairs)
  std::vector<Tensor> unique_buffers_;   // the copies, deduplicated
  std::vector<std::string> state_keys_;  // the model's state_dict() names
  Tensor n_averaged_;
  bool has_averaged_ = false;
  AvgFn avg_fn_;
  MultiAvgFn multi_avg_fn_;
  bool use_buffers_;
};

/// Recomputes the running statistics of every BatchNorm-like submodule of `model` (a module with
/// own buffers "running_mean" and "running_var", optionally "num_batches_tracked") from the
/// inputs `next_input` yields until it returns std::nullopt (as
/// torch.optim.swa_utils.update_bn): resets the statistics (mean 0, var 1, count 0), switches
/// such modules that implement nn::RunningStatsMomentum to a cumulative average, runs `model`
/// in training mode under no-grad on every input (moved to
/// `device` when given), then restores the momenta and the training flag. Without such a module
/// it returns at once, without drawing an input (a no-op). Modules with the buffers but without
/// nn::RunningStatsMomentum keep their own update rule.
void update_bn(const std::function<std::optional<Tensor>()>& next_input, nn::Module& model,
               std::optional<core::Device> device = {});
/// update_bn() over a list of inputs.
void update_bn(const std::vector<Tensor>& inputs, nn::Module& model,
               std::optional<core::Device> device = {});

}  // namespace tb::swa
