// Transformer pieces in the Qwen/Llama style: rotary position embeddings, causal multi-head
// self-attention (optionally grouped-query), the SwiGLU feed-forward and a pre-norm decoder
// block.
#pragma once

#include <cstdint>
#include <memory>

#include "engine/nn/layers.h"
#include "engine/nn/module.h"

namespace tb::nn {

/// Rotary position embedding tables for positions [0, max_positions) and a head size:
/// angle(t, j) = t·θ^(−2j/head_dim), j < head_dim/2. The cos/sin tables are non-persistent
/// buffers (recomputed, never saved).
class RotaryEmbedding : public Module {
 public:
  /// Tables for `max_positions` positions of heads of size head_dim (even), base θ = `theta`.
  RotaryEmbedding(std::int64_t head_dim, std::int64_t max_positions, double theta = 10000.0);
  /// Rotates x [..., T, head_dim] by the angles of positions 0..T−1 (T <= max_positions).
  Tensor forward(const Tensor& x) override;
  /// The same for positions first..first+T−1 (first + T <= max_positions): a forward that
  /// continues a key/value cache.
  Tensor forward_at(const Tensor& x, std::int64_t first);

 protected:
  std::string extra_repr() const override;

 private:
  std::int64_t head_dim_;
  std::int64_t max_positions_;
  double theta_;
  Tensor cos_;
  Tensor sin_;
};

/// Settings of CausalSelfAttention.
struct AttentionConfig {
  std::int64_t d_model = 128;       ///< model width
  std::int64_t n_heads = 4;         ///< query heads; d_model must be divisible by it
  std::int64_t n_kv_heads = 0;      ///< key/value heads (grouped-query); 0 = n_heads
  std::int64_t max_positions = 64;  ///< longest sequence (context length)
  double rope_theta = 10000.0;      ///< rotary base
  bool qkv_bias = true;             ///< biases on q/k/v projections (Qwen2 has them)
};

/// Causal multi-head self-attention with RoPE on queries and keys: x [B, T, d_model] ->
/// [B, T, d_model]. Children q_proj, k_proj, v_proj, o_proj (o_proj has no bias), rotary.
/// Under a ScopedKvCache (engine/nn/kv_cache.h) x holds the positions after the cached ones.
class CausalSelfAttention : public Module {
 public:
  /// Layers initialised from `gen` (PyTorch defaults).
  explicit CausalSelfAttention(const AttentionConfig& cfg, rng::Generator* gen = nullptr);
  /// See the class comment; T beyond max_positions is an error naming the layer.
  Tensor forward(const Tensor& x) override;

 protected:
  std::string extra_repr() const override;

 private:
  AttentionConfig cfg_;
  std::int64_t head_dim_;
  std::shared_ptr<Linear> q_proj_, k_proj_, v_proj_, o_proj_;
  std::shared_ptr<RotaryEmbedding> rotary_;
};

/// SwiGLU feed-forward: down_proj(silu(gate_proj(x)) ⊙ up_proj(x)), no biases.
class SwiGLU : public Module {
 public:
  /// d_model -> hidden -> d_model.
  SwiGLU(std::int64_t d_model, std::int64_t hidden, rng::Generator* gen = nullptr);
  /// x [..., d_model] -> same shape.
  Tensor forward(const Tensor& x) override;

 private:
  std::shared_ptr<Linear> gate_proj_, up_proj_, down_proj_;
};

/// Pre-norm decoder block: x + attn(attn_norm(x)), then h + mlp(mlp_norm(h)), with RMSNorm.
class DecoderBlock : public Module {
 public:
  /// One block; ffn_hidden is the SwiGLU hidden width.
  DecoderBlock(const AttentionConfig& attn, std::int64_t ffn_hidden, double norm_eps,
               rng::Generator* gen = nullptr);
  /// x [B, T, d_model] -> same shape.
  Tensor forward(const Tensor& x) override;

 private:
  std::shared_ptr<RMSNorm> attn_norm_, mlp_norm_;
  std::shared_ptr<CausalSelfAttention> attn_;
  std::shared_ptr<SwiGLU> mlp_;
};

}  // namespace tb::nn
