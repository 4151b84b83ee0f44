// The `cnn` model kind: an image classifier built from a stack of convolution blocks and a
// classifier head, configured by the run config's [model] section.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/nn/layers.h"
#include "engine/nn/model_registry.h"
#include "engine/nn/models.h"

namespace tb::nn {

/// `cnn`: blocks of `convs_per_block` × (Conv2d k×k, padding k/2 → BatchNorm2d → activation),
/// with an optional residual connection around each block's convolutions (a 1×1 convolution
/// projects the input when the channel count changes), then 2×2 pooling; a head of global
/// average pooling (or flatten), optional hidden Linear layers, dropout and the output Linear.
struct CnnConfig {
  std::vector<std::int64_t> input = {1, 28, 28};  ///< channels, height, width of a sample
  std::vector<std::int64_t> channels = {32, 64};  ///< output channels, one block each
  std::int64_t convs_per_block = 2;               ///< convolutions per block
  std::int64_t kernel = 3;                        ///< odd kernel size
  std::string norm = "batch";                     ///< batch | none
  std::string activation = "relu";                ///< relu | gelu | silu | tanh
  std::string pool = "max";                       ///< max | avg | none (2×2, stride 2)
  bool residual = false;                          ///< skip connection around each block
  std::string head = "avgpool";                   ///< avgpool | flatten
  std::vector<std::int64_t> hidden = {};          ///< classifier hidden widths
  double dropout = 0.0;                           ///< before each classifier Linear
  std::int64_t classes = 10;                      ///< output logits
};

/// One block: convs.N.{conv, norm, act}, an optional `skip` projection, an optional `pool`.
class ConvBlock : public Module {
 public:
  /// in_channels -> out_channels with the config's block settings.
  ConvBlock(std::int64_t in_channels, std::int64_t out_channels, const CnnConfig& cfg,
            rng::Generator* gen);
  /// x [N, in, H, W] -> [N, out, H', W'].
  Tensor forward(const Tensor& x) override;

 private:
  bool residual_;
  ActivationKind act_;
  std::shared_ptr<Sequential> convs_;
  std::shared_ptr<Sequential> skip_;  // null: identity (or no residual)
  std::shared_ptr<Pool2d> pool_;
};

/// The `cnn` model: children `blocks` (ConvBlock each) and `classifier` (Sequential: pooling,
/// Flatten, [Dropout,] Linear, ...): the names of the same torch.nn modules' state_dict.
class Cnn : public Model {
 public:
  /// Built and initialised from `gen` (null = default generator).
  explicit Cnn(const CnnConfig& cfg, rng::Generator* gen = nullptr);
  /// x [B, C, H, W], or [B, C·H·W] (reshaped to `input`) -> logits [B, classes].
  Tensor forward(const Tensor& x) override;
  /// The config it was built from (kind "cnn").
  ModelConfig config() const override;

 private:
  CnnConfig cfg_;
  std::shared_ptr<Sequential> blocks_;
  std::shared_ptr<Sequential> classifier_;
};

/// The typed config of a `cnn` ModelConfig's fields (throws tb::ValueError naming a wrongly
/// typed field).
CnnConfig cnn_config(const nlohmann::json& fields);
/// The registry entry of the `cnn` kind.
ModelKind cnn_kind();

}  // namespace tb::nn
