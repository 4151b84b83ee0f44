// Models built from a config: `mlp` (a classifier over flat inputs) and `qwen-tiny` (a
// decoder-only language model in the Qwen style). Configs convert from/to JSON with errors that
// name the field; the CLI and the GUI build models through build_model().
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/nn/layers.h"
#include "engine/nn/module.h"
#include "engine/nn/transformer.h"

namespace tb::nn {

/// `mlp`: input -> hidden widths (activation, optional dropout after each) -> classes.
struct MlpConfig {
  std::int64_t input = 784;                       ///< input features
  std::vector<std::int64_t> hidden = {256, 256};  ///< hidden layer widths (may be empty)
  std::int64_t classes = 10;                      ///< output logits
  std::string activation = "relu";                ///< relu | gelu | silu | tanh
  double dropout = 0.0;                           ///< dropout probability after each activation
};

/// `qwen-tiny`: token embedding, n_layers pre-norm decoder blocks (RMSNorm, RoPE attention,
/// SwiGLU), a final RMSNorm and the output head (tied to the embedding by default).
struct QwenTinyConfig {
  std::int64_t vocab = 256;          ///< vocabulary size (256 = bytes)
  std::int64_t d_model = 128;        ///< width
  std::int64_t n_layers = 4;         ///< decoder blocks
  std::int64_t n_heads = 4;          ///< attention heads
  std::int64_t n_kv_heads = 0;       ///< key/value heads; 0 = n_heads
  std::int64_t ffn_hidden = 0;       ///< SwiGLU width; 0 = 8/3·d_model rounded up to 32
  std::int64_t context_length = 64;  ///< longest sequence
  double rope_theta = 10000.0;       ///< rotary base
  double norm_eps = 1e-6;            ///< RMSNorm epsilon
  bool tie_embeddings = true;        ///< output head shares the embedding matrix
  bool qkv_bias = true;              ///< biases on q/k/v (as Qwen2)
  double init_std = 0.02;            ///< N(0, std) for every weight matrix (Qwen's init); 0 =
                                     ///< the layers' PyTorch defaults
};

/// A model's config: its kind (a name in model_registry()) and every field of that kind, as
/// JSON. Built-in kinds convert from their typed configs.
struct ModelConfig {
  std::string kind = "mlp";  ///< model.kind
  nlohmann::json fields;     ///< field -> value (every field of the kind once read)
  /// The mlp defaults.
  ModelConfig();
  /// A config of `kind` with `fields`.
  ModelConfig(std::string kind, nlohmann::json fields);
  /// From a typed config (implicit, so `config.model = MlpConfig{...}` reads naturally).
  ModelConfig(const MlpConfig& c);  // NOLINT(google-explicit-constructor)
  /// From a typed config (implicit).
  ModelConfig(const QwenTinyConfig& c);  // NOLINT(google-explicit-constructor)
};

/// The typed config of an mlp / qwen-tiny ModelConfig (a config of another kind is an error).
MlpConfig mlp_config(const ModelConfig& cfg);
QwenTinyConfig qwen_tiny_config(const ModelConfig& cfg);

/// Validates a config; throws tb::ValueError naming the model and field ("qwen-tiny: d_model
/// 130 is not divisible by n_heads 4").
void validate(const ModelConfig& cfg);
/// The kind ("mlp", "qwen-tiny", ...).
std::string model_kind(const ModelConfig& cfg);
/// The config as JSON, with "kind" and every field.
nlohmann::json to_json(const ModelConfig& cfg);
/// Reads {"kind": KIND, field: value, ...} for any registered kind; absent fields keep their
/// defaults. Unknown kinds or fields and wrongly typed values raise tb::ValueError naming them.
ModelConfig model_config_from_json(const nlohmann::json& j);

/// A model: one input tensor to logits, plus its loss.
class Model : public Module {
 public:
  using Module::Module;
  /// Mean cross-entropy of forward(input) against target.
  virtual Tensor loss(const Tensor& logits, const Tensor& target) const;
  /// The config it was built from.
  virtual ModelConfig config() const = 0;
};

/// The `mlp` model: children "layers" (a Sequential: Linear, activation[, Dropout], ...).
class Mlp : public Model {
 public:
  /// Built and initialised from `gen` (null = default generator).
  explicit Mlp(const MlpConfig& cfg, rng::Generator* gen = nullptr);
  /// x [B, input] (or [B, ...] flattening to input) -> logits [B, classes].
  Tensor forward(const Tensor& x) override;
  ModelConfig config() const override { return cfg_; }

 private:
  MlpConfig cfg_;
  std::shared_ptr<Sequential> layers_;
};

/// The `qwen-tiny` model: children embed_tokens, layers.N (DecoderBlock), norm, lm_head (absent
/// when tied).
class QwenTiny : public Model {
 public:
  /// Built and initialised from `gen` (null = default generator).
  explicit QwenTiny(const QwenTinyConfig& cfg, rng::Generator* gen = nullptr);
  /// tokens int64 [B, T] -> logits [B, T, vocab].
  Tensor forward(const Tensor& tokens) override;
  ModelConfig config() const override { return cfg_; }

 private:
  QwenTinyConfig cfg_;
  std::shared_ptr<Embedding> embed_;
  std::shared_ptr<ModuleList> layers_;
  std::shared_ptr<RMSNorm> norm_;
  std::shared_ptr<Linear> lm_head_;
};

/// Validates `cfg` and builds its model, initialised from `gen` (null = default generator).
std::shared_ptr<Model> build_model(const ModelConfig& cfg, rng::Generator* gen = nullptr);

/// A table of the model's parameters (name, shape, count) and the total, for display.
std::string parameter_table(const Module& m);

}  // namespace tb::nn
