// SGD (momentum, dampening, nesterov, weight decay, maximize), Adam and AdamW (amsgrad,
// maximize, decoupled decay) — torch.optim.SGD/Adam/AdamW
// (https://pytorch.org/docs/stable/generated/torch.optim.Adam.html and its SGD/AdamW siblings;
// pytorch/pytorch torch/optim/sgd.py, adam.py), PyTorch's constructor checks and messages. Each
// step is one multi-tensor op per parameter group (ops::sgd_step_, ops::adam_step_): a fused pass
// where the device has the kernel (on the CPU every element of every parameter updated in one
// parallel loop; hyper-parameters read once per step, no per-tensor synchronisation), the same
// math as engine ops elsewhere.
#pragma once

#include "engine/optim/optimizer.h"

namespace tb::optim {

/// SGD options (PyTorch's defaults).
struct SgdOptions {
  double lr = 1e-3;           ///< learning rate (>= 0)
  double momentum = 0.0;      ///< momentum factor (>= 0)
  double dampening = 0.0;     ///< dampening for momentum
  double weight_decay = 0.0;  ///< L2 penalty (>= 0)
  bool nesterov = false;      ///< Nesterov momentum (needs momentum > 0, dampening 0)
  bool maximize = false;      ///< ascend instead of descend
};

/// Stochastic gradient descent; state "momentum_buffer" only when momentum != 0.
class SGD : public Optimizer {
 public:
  /// One group holding `params`; more groups via add_param_group (keys: lr, momentum,
  /// dampening, weight_decay, nesterov, maximize).
  SGD(std::vector<Tensor> params, const SgdOptions& options = {});
  /// Groups given explicitly (each group's options override the defaults from `options`).
  SGD(std::vector<ParamGroup> groups, const SgdOptions& options = {});
  void step() override;

 protected:
  void validate_group(const ParamGroup& group) const override;
};

/// Adam/AdamW options (PyTorch's defaults for Adam; AdamW's weight decay default is 1e-2).
struct AdamOptions {
  double lr = 1e-3;           ///< learning rate (>= 0)
  double beta1 = 0.9;         ///< first-moment decay, in [0, 1)
  double beta2 = 0.999;       ///< second-moment decay, in [0, 1)
  double eps = 1e-8;          ///< added to the bias-corrected root (>= 0)
  double weight_decay = 0.0;  ///< L2 (Adam) or decoupled (AdamW) decay (>= 0)
  bool amsgrad = false;       ///< keep the max of the raw second moment
  bool maximize = false;      ///< ascend instead of descend
};

/// Adam (decoupled = false: L2 decay added to the gradient) and AdamW (decoupled = true: the
/// parameter shrinks by lr·wd before the moment updates). State: "step" (0-d float32 on the
/// CPU), "exp_avg", "exp_avg_sq", and "max_exp_avg_sq" with amsgrad.
class Adam : public Optimizer {
 public:
  /// One group holding `params`.
  Adam(std::vector<Tensor> params, const AdamOptions& options = {}, bool decoupled = false);
  /// Groups given explicitly (keys: lr, beta1, beta2, eps, weight_decay, amsgrad, maximize,
  /// decoupled_weight_decay).
  Adam(std::vector<ParamGroup> groups, const AdamOptions& options = {}, bool decoupled = false);
  void step() override;

 protected:
  /// For AdamW.
  Adam(std::string name, std::vector<ParamGroup> groups, const AdamOptions& options,
       bool decoupled);
  void validate_group(const ParamGroup& group) const override;
};

/// AdamW: Adam with decoupled weight decay (default 1e-2).
class AdamW : public Adam {
 public:
  /// AdamW's defaults: AdamOptions with weight_decay = 1e-2.
  static AdamOptions default_options();
  /// One group holding `params`.
  explicit AdamW(std::vector<Tensor> params, const AdamOptions& options = default_options());
  /// Groups given explicitly.
  explicit AdamW(std::vector<ParamGroup> groups, const AdamOptions& options = default_options());
};

}  // namespace tb::optim
