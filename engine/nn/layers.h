// Basic layers: Linear, Embedding, LayerNorm, RMSNorm, Dropout, activations, and the
// convolutional ones (Conv2d, BatchNorm2d, pooling, Flatten). Initialisation
// follows PyTorch's defaults and draws from the generator passed in (null = default generator).
// Shape errors name the layer (type and path) and the numbers involved.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "engine/nn/module.h"
#include "engine/nn/running_stats.h"

namespace tb::rng {
class Generator;
}

namespace tb::nn {

/// y = x·Wᵀ + b over the last dimension. weight [out, in]: Kaiming-uniform (a = √5); bias [out]:
/// U(−1/√in, 1/√in) — torch.nn.Linear's initialisation, draw for draw.
class Linear : public Module {
 public:
  /// A layer in_features -> out_features.
  Linear(std::int64_t in_features, std::int64_t out_features, bool bias = true,
         rng::Generator* gen = nullptr);
  /// x [..., in] -> [..., out].
  Tensor forward(const Tensor& x) override;
  /// The weight [out, in].
  const Tensor& weight() const { return weight_; }
  /// The bias [out] (undefined without bias).
  const Tensor& bias() const { return bias_; }
  /// in_features.
  std::int64_t in_features() const { return in_; }
  /// out_features.
  std::int64_t out_features() const { return out_; }

 protected:
  std::string extra_repr() const override;

 private:
  std::int64_t in_;
  std::int64_t out_;
  Tensor weight_;
  Tensor bias_;
};

/// A lookup table: int64 indices [...] -> rows [..., dim]. weight ~ N(0, 1) (PyTorch's default).
class Embedding : public Module {
 public:
  /// num_embeddings rows of size embedding_dim.
  Embedding(std::int64_t num_embeddings, std::int64_t embedding_dim, rng::Generator* gen = nullptr);
  /// Rows of the table for each index; an index outside [0, num_embeddings) is an IndexError
  /// naming the layer.
  Tensor forward(const Tensor& indices) override;
  /// The table [num_embeddings, embedding_dim].
  const Tensor& weight() const { return weight_; }

 protected:
  std::string extra_repr() const override;

 private:
  std::int64_t num_;
  std::int64_t dim_;
  Tensor weight_;
};

/// Layer normalisation over the last dimension: (x − mean)/√(var + eps)·weight + bias, with the
/// biased variance; weight = 1, bias = 0 initially.
class LayerNorm : public Module {
 public:
  /// Normalises vectors of size `dim`; `affine`: a learnt weight (1), and with `bias` a learnt
  /// bias (0) — PyTorch's elementwise_affine and bias.
  explicit LayerNorm(std::int64_t dim, double eps = 1e-5, bool affine = true, bool bias = true);
  /// x [..., dim] -> same shape.
  Tensor forward(const Tensor& x) override;

 protected:
  std::string extra_repr() const override;

 private:
  std::int64_t dim_;
  double eps_;
  Tensor weight_;
  Tensor bias_;
};

/// Root-mean-square normalisation: x/√(mean(x²) + eps)·weight (weight = 1 initially).
class RMSNorm : public Module {
 public:
  /// Normalises vectors of size `dim`.
  explicit RMSNorm(std::int64_t dim, double eps = 1e-6);
  /// x [..., dim] -> same shape.
  Tensor forward(const Tensor& x) override;
  /// The scale [dim].
  const Tensor& weight() const { return weight_; }

 protected:
  std::string extra_repr() const override;

 private:
  std::int64_t dim_;
  double eps_;
  Tensor weight_;
};

/// The rows of a global batch this process computes, in data-parallel training: rows
/// [offset, offset + rows) of a batch of global_rows. While a ScopedBatchShard is active on a
/// thread, Dropout draws the mask of the whole global batch and keeps this process's rows, so
/// every rank draws the same numbers from its (equally seeded) generator and a data-parallel run
/// masks each sample as the one-process run does.
struct BatchShard {
  std::int64_t offset = 0;       ///< first row of this process
  std::int64_t rows = 0;         ///< rows of this process
  std::int64_t global_rows = 0;  ///< rows of the global batch
};

/// Makes `shard` the current thread's batch shard until destroyed (the previous one again then).
class ScopedBatchShard {
 public:
  /// Makes a copy of `shard` current on this thread.
  explicit ScopedBatchShard(const BatchShard& shard);
  /// Restores the previous shard (or none).
  ~ScopedBatchShard();
  ScopedBatchShard(const ScopedBatchShard&) = delete;
  ScopedBatchShard& operator=(const ScopedBatchShard&) = delete;

 private:
  const BatchShard* previous_;
  BatchShard shard_;
};

/// The current thread's batch shard, or null outside a ScopedBatchShard.
const BatchShard* current_batch_shard();

/// In training, zeroes each element with probability p (mask drawn from `gen`, null = default
/// generator) and scales the rest by 1/(1 − p); the identity in eval mode or for p = 0. Under a
/// ScopedBatchShard whose rows match the input's first dimension, the mask is drawn for the
/// global batch and sliced to this process's rows.
class Dropout : public Module {
 public:
  /// p in [0, 1].
  explicit Dropout(double p = 0.5, rng::Generator* gen = nullptr);
  /// The generator masks are drawn from (not owned; must outlive the layer).
  void set_generator(rng::Generator* gen) { gen_ = gen; }
  /// See the class comment.
  Tensor forward(const Tensor& x) override;

 protected:
  std::string extra_repr() const override;

 private:
  double p_;
  rng::Generator* gen_;
};

/// Elementwise activation functions by name.
enum class ActivationKind { ReLU, GELU, SiLU, Tanh };

/// Parses "relu", "gelu", "silu" or "tanh"; anything else is a tb::ValueError listing them.
ActivationKind parse_activation(const std::string& name);
/// The lower-case name parse_activation() accepts.
const char* activation_name(ActivationKind kind);

/// An activation as a module (no parameters): ReLU, GELU (erf form), SiLU or Tanh.
class Activation : public Module {
 public:
  /// The activation `kind`.
  explicit Activation(ActivationKind kind);
  /// f(x) elementwise.
  Tensor forward(const Tensor& x) override;

 private:
  ActivationKind kind_;
};

/// 2-D convolution (torch.nn.Conv2d): x [N, in, H, W] -> [N, out, OH, OW]. weight
/// [out, in/groups, k, k]: Kaiming-uniform (a = √5); bias [out]: U(−1/√fan_in, 1/√fan_in) with
/// fan_in = in/groups·k² — PyTorch's initialisation, draw for draw.
class Conv2d : public Module {
 public:
  /// A square kernel of size `kernel`; stride, padding and dilation the same in both directions.
  Conv2d(std::int64_t in_channels, std::int64_t out_channels, std::int64_t kernel,
         std::int64_t stride = 1, std::int64_t padding = 0, bool bias = true,
         rng::Generator* gen = nullptr, std::int64_t dilation = 1, std::int64_t groups = 1);
  /// x [N, in, H, W] (or [in, H, W]) -> [N, out, OH, OW].
  Tensor forward(const Tensor& x) override;
  /// The weight [out, in/groups, k, k].
  const Tensor& weight() const { return weight_; }
  /// The bias [out] (undefined without bias).
  const Tensor& bias() const { return bias_; }

 protected:
  std::string extra_repr() const override;

 private:
  std::int64_t in_, out_, kernel_, stride_, padding_, dilation_, groups_;
  Tensor weight_;
  Tensor bias_;
};

/// Batch normalisation over the channels of [N, C, ...] inputs (torch.nn.BatchNorm2d, also for
/// [N, C]): weight = 1, bias = 0; buffers running_mean = 0, running_var = 1 and
/// num_batches_tracked (int64), as in PyTorch's state_dict. Training normalises with the batch's
/// statistics and updates the running ones; eval mode uses the running ones.
class BatchNorm2d : public Module, public RunningStatsMomentum {
 public:
  /// `channels` features; momentum of the running statistics, eps added to the variance.
  explicit BatchNorm2d(std::int64_t channels, double eps = 1e-5, double momentum = 0.1,
                       bool affine = true);
  /// x [N, C, ...] -> same shape.
  Tensor forward(const Tensor& x) override;
  /// The momentum; nullopt: a cumulative average over the batches seen (factor
  /// 1 / num_batches_tracked), as PyTorch's momentum=None, which update_bn sets.
  std::optional<double> momentum() const override { return momentum_; }
  void set_momentum(std::optional<double> momentum) override;

 protected:
  std::string extra_repr() const override;

 private:
  std::int64_t channels_;
  double eps_;
  std::optional<double> momentum_;
  Tensor weight_, bias_;
  Tensor running_mean_, running_var_, num_batches_tracked_;
};

/// Max or average pooling over square windows (torch.nn.MaxPool2d / AvgPool2d); no parameters.
class Pool2d : public Module {
 public:
  /// Max (true) or average pooling with a `kernel`×`kernel` window; stride 0 = the kernel.
  Pool2d(bool max, std::int64_t kernel, std::int64_t stride = 0, std::int64_t padding = 0);
  /// x [N, C, H, W] -> [N, C, OH, OW].
  Tensor forward(const Tensor& x) override;

 protected:
  std::string extra_repr() const override;

 private:
  bool max_;
  std::int64_t kernel_, stride_, padding_;
};

/// Average pooling to a fixed output size (torch.nn.AdaptiveAvgPool2d): [N, C, H, W] ->
/// [N, C, OH, OW]; output size 1 is global average pooling.
class AdaptiveAvgPool2d : public Module {
 public:
  /// The output height and width.
  AdaptiveAvgPool2d(std::int64_t out_h, std::int64_t out_w);
  /// x [N, C, H, W] -> [N, C, out_h, out_w].
  Tensor forward(const Tensor& x) override;

 protected:
  std::string extra_repr() const override;

 private:
  std::int64_t out_h_, out_w_;
};

/// Flattens every dimension after the first: [N, ...] -> [N, features] (torch.nn.Flatten).
class Flatten : public Module {
 public:
  /// No parameters.
  Flatten();
  /// x [N, ...] -> [N, product of the rest].
  Tensor forward(const Tensor& x) override;
};

/// Mean cross-entropy of logits [..., C] against int64 targets [...] (flattened to [N, C]):
/// fused, stable for large logits, with ignore_index and label smoothing (see ops::cross_entropy).
Tensor cross_entropy(const Tensor& logits, const Tensor& target, std::int64_t ignore_index = -100,
                     double label_smoothing = 0.0);
/// Mean squared error mean((a − b)²) (shapes must match).
Tensor mse_loss(const Tensor& input, const Tensor& target);

}  // namespace tb::nn
