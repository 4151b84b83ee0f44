// The `gpt` model kind: a GPT-2-class decoder (Radford et al., "Language Models are
// Unsupervised Multitask Learners", 2019) — learned token and position embeddings, pre-norm
// blocks of LayerNorm, causal multi-head attention and a GELU MLP, a final LayerNorm and
// an output head tied to the token embedding. Parameter names and shapes are nanoGPT's
// (karpathy/nanoGPT model.py), which are Hugging Face GPT-2's with torch.nn.Linear layout:
// transformer.wte.weight, transformer.h.0.attn.c_attn.weight [3C, C], ..., transformer.ln_f.bias
// (the biases unless GptConfig::bias is false).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "engine/nn/layers.h"
#include "engine/nn/model_registry.h"
#include "engine/nn/models.h"

namespace tb::nn {

/// Settings of a `gpt` model (defaults: GPT-2 small, 124,439,808 parameters).
struct GptConfig {
  std::int64_t vocab = 50257;  ///< tokens the model predicts (GPT-2's BPE: 50257)
  /// Rows of the embedding table: 0 = vocab; larger pads the table (llm.c uses 50304, a
  /// multiple of 128, for faster matrix products). Padded rows start at 0, are never looked up,
  /// and their logits are dropped before the loss.
  std::int64_t padded_vocab = 0;
  std::int64_t context_length = 1024;  ///< positions (the wpe table's rows)
  std::int64_t n_layers = 12;          ///< blocks
  std::int64_t n_heads = 12;           ///< attention heads; divide d_model
  std::int64_t d_model = 768;          ///< width C (the MLP is 4·C wide)
  double norm_eps = 1e-5;              ///< LayerNorm epsilon
  /// Weights ~ N(0, init_std), the residual projections (c_proj) N(0, init_std/√(2·n_layers)),
  /// biases 0 (GPT-2's and llm.c's initialisation).
  double init_std = 0.02;
  /// Biases in the Linear layers and LayerNorms (GPT-2's); false: none (nanoGPT's bias = False,
  /// its train.py default).
  bool bias = true;
  /// Dropout probability in training, where nanoGPT has it: after the embeddings
  /// (transformer.drop), on the attention weights, after the attention's and the MLP's output
  /// projections. 0 = none.
  double dropout = 0.0;
  /// The MLP's GELU: "tanh", GPT-2's approximation (Hugging Face's gelu_new, llm.c), or "exact",
  /// the erf form (torch.nn.GELU(), nanoGPT's).
  std::string gelu = "tanh";
};

/// Checks a GptConfig; a bad value is a tb::FieldError naming the field ("gpt: d_model 100 is
/// not divisible by n_heads 12").
void validate_gpt(const GptConfig& c);
/// The config of a `gpt` model's fields (absent fields keep their defaults).
GptConfig gpt_config(const nlohmann::json& fields);
/// Parameter count of the model a config builds (tied head counted once).
std::int64_t gpt_parameter_count(const GptConfig& c);

/// A GPT-2 block: x + attn(ln_1(x)), then h + mlp(ln_2(h)).
class GptBlock : public Module {
 public:
  /// One block of `c`, weights from `gen` (initialised by Gpt).
  GptBlock(const GptConfig& c, rng::Generator* gen);
  /// x [B, T, C] -> same shape.
  Tensor forward(const Tensor& x) override;

 private:
  std::int64_t n_heads_;
  std::shared_ptr<LayerNorm> ln_1_, ln_2_;
  std::shared_ptr<Module> attn_, mlp_;
  std::shared_ptr<Linear> c_attn_, attn_proj_, c_fc_, mlp_proj_;
  // GptConfig::dropout > 0: on the attention weights, after attn.c_proj, after mlp.c_proj.
  std::shared_ptr<Dropout> attn_dropout_, resid_dropout_, mlp_dropout_;
  bool exact_gelu_ = false;
};

/// The `gpt` model: tokens int64 [B, T] (T <= context_length) -> logits [B, T, vocab].
class Gpt : public Model {
 public:
  /// Builds and initialises the model from `gen`.
  explicit Gpt(const GptConfig& cfg, rng::Generator* gen = nullptr);
  /// See the class comment; a longer sequence is an error naming the context length.
  Tensor forward(const Tensor& tokens) override;
  /// {"kind": "gpt", fields}.
  ModelConfig config() const override;
  /// The settings (padded_vocab resolved).
  const GptConfig& gpt_config() const { return cfg_; }
  /// The token embedding, also the output head.
  const Tensor& wte() const { return wte_->weight(); }

 private:
  GptConfig cfg_;
  std::shared_ptr<Embedding> wte_, wpe_;
  std::shared_ptr<ModuleList> h_;
  std::shared_ptr<LayerNorm> ln_f_;
  std::shared_ptr<Dropout> drop_;  // after the embeddings (GptConfig::dropout > 0)
};

/// The registry entry of `gpt`.
ModelKind gpt_kind();

}  // namespace tb::nn
