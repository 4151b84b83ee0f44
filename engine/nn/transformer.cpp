#include "engine/nn/transformer.h"

#include <cmath>
#include <limits>

#include "engine/core/error.h"
#include "engine/nn/kv_cache.h"
#include "engine/ops/ops.h"

namespace tb::nn {

using core::DimVector;
using core::ScalarType;

// ---- RotaryEmbedding ----------------------------------------------------------------------------

RotaryEmbedding::RotaryEmbedding(std::int64_t head_dim, std::int64_t max_positions, double theta)
    : Module("RotaryEmbedding"), head_dim_(head_dim), max_positions_(max_positions), theta_(theta) {
  TB_CHECK(head_dim > 0 && head_dim % 2 == 0,
           "[nn] RotaryEmbedding: head_dim must be positive and even, got ", head_dim);
  TB_CHECK(max_positions > 0, "[nn] RotaryEmbedding: max_positions must be positive, got ",
           max_positions);
  TB_CHECK(theta > 0, "[nn] RotaryEmbedding: theta must be positive, got ", theta);
  const std::int64_t h = head_dim / 2;
  std::vector<float> c(static_cast<std::size_t>(max_positions * h));
  std::vector<float> s(c.size());
  for (std::int64_t t = 0; t < max_positions; ++t) {
    for (std::int64_t j = 0; j < h; ++j) {
      const double inv_freq =
          std::pow(theta, -2.0 * static_cast<double>(j) / static_cast<double>(head_dim));
      const double angle = static_cast<double>(t) * inv_freq;
      c[static_cast<std::size_t>(t * h + j)] = static_cast<float>(std::cos(angle));
      s[static_cast<std::size_t>(t * h + j)] = static_cast<float>(std::sin(angle));
    }
  }
  cos_ = register_buffer("cos", core::from_vector(c, {max_positions, h}), false);
  sin_ = register_buffer("sin", core::from_vector(s, {max_positions, h}), false);
}

Tensor RotaryEmbedding::forward(const Tensor& x) {
  return forward_at(x, 0);
}

Tensor RotaryEmbedding::forward_at(const Tensor& x, std::int64_t first) {
  TB_CHECK(x.defined() && x.dim() >= 2 && x.size(-1) == head_dim_, "[nn] ", describe(),
           ": input must be [..., T, ", head_dim_, "], got shape ",
           x.defined() ? DimVector(x.sizes()) : DimVector());
  const std::int64_t t = x.size(-2);
  TB_CHECK(first >= 0 && first + t <= max_positions_, "[nn] ", describe(), ": sequence length ",
           first + t, " exceeds the context length ", max_positions_);
  return ops::rope(x, cos_.narrow(0, first, t), sin_.narrow(0, first, t));
}

std::string RotaryEmbedding::extra_repr() const {
  return tb::detail::str_cat("head_dim=", head_dim_, ", max_positions=", max_positions_,
                             ", theta=", theta_);
}

// ---- CausalSelfAttention ------------------------------------------------------------------------

CausalSelfAttention::CausalSelfAttention(const AttentionConfig& cfg, rng::Generator* gen)
    : Module("CausalSelfAttention"), cfg_(cfg) {
  if (cfg_.n_kv_heads == 0) cfg_.n_kv_heads = cfg_.n_heads;
  TB_CHECK(cfg_.d_model > 0 && cfg_.n_heads > 0 && cfg_.n_kv_heads > 0,
           "[nn] CausalSelfAttention: d_model, n_heads and n_kv_heads must be positive, got ",
           cfg_.d_model, ", ", cfg_.n_heads, ", ", cfg_.n_kv_heads);
  TB_CHECK(cfg_.d_model % cfg_.n_heads == 0, "[nn] CausalSelfAttention: d_model ", cfg_.d_model,
           " is not divisible by n_heads ", cfg_.n_heads);
  TB_CHECK(cfg_.n_heads % cfg_.n_kv_heads == 0, "[nn] CausalSelfAttention: n_heads ", cfg_.n_heads,
           " is not divisible by n_kv_heads ", cfg_.n_kv_heads);
  head_dim_ = cfg_.d_model / cfg_.n_heads;
  TB_CHECK(head_dim_ % 2 == 0,
           "[nn] CausalSelfAttention: the head size d_model/n_heads = ", head_dim_,
           " must be even for rotary embeddings");
  const std::int64_t kv = cfg_.n_kv_heads * head_dim_;
  q_proj_ = register_module(
      "q_proj", std::make_shared<Linear>(cfg_.d_model, cfg_.d_model, cfg_.qkv_bias, gen));
  k_proj_ =
      register_module("k_proj", std::make_shared<Linear>(cfg_.d_model, kv, cfg_.qkv_bias, gen));
  v_proj_ =
      register_module("v_proj", std::make_shared<Linear>(cfg_.d_model, kv, cfg_.qkv_bias, gen));
  o_proj_ =
      register_module("o_proj", std::make_shared<Linear>(cfg_.d_model, cfg_.d_model, false, gen));
  rotary_ = register_module(
      "rotary", std::make_shared<RotaryEmbedding>(head_dim_, cfg_.max_positions, cfg_.rope_theta));
}

Tensor CausalSelfAttention::forward(const Tensor& x) {
  TB_CHECK(x.defined() && x.dim() == 3 && x.size(2) == cfg_.d_model, "[nn] ", describe(),
           ": input must be [B, T, ", cfg_.d_model, "], got shape ",
           x.defined() ? DimVector(x.sizes()) : DimVector());
  const std::int64_t b = x.size(0);
  const std::int64_t t = x.size(1);
  KvCache* cache = current_kv_cache();
  const std::int64_t past = cache ? cache->length() : 0;
  TB_CHECK(past + t <= cfg_.max_positions, "[nn] ", describe(), ": sequence length ", past + t,
           " exceeds the context length ", cfg_.max_positions);
  const std::int64_t h = cfg_.n_heads;
  const std::int64_t kvh = cfg_.n_kv_heads;
  const std::int64_t d = head_dim_;
  // [B, T, H*D] -> [B, H, T, D]
  Tensor q = q_proj_->forward(x).view({b, t, h, d}).transpose(1, 2);
  Tensor k = k_proj_->forward(x).view({b, t, kvh, d}).transpose(1, 2);
  Tensor v = v_proj_->forward(x).view({b, t, kvh, d}).transpose(1, 2);
  q = rotary_->forward_at(q, past);
  k = rotary_->forward_at(k, past);
  const bool causal = attend_to_cache(cache, k, v, t, describe());
  // Grouped-query heads are mapped inside the op (no expanded copies of k and v); fused where
  // the device has the kernel, composed from matmul/softmax otherwise.
  const Tensor attn = ops::scaled_dot_product_attention(q, k, v, causal);
  const Tensor out = attn.transpose(1, 2).reshape({b, t, cfg_.d_model});
  return o_proj_->forward(out);
}

std::string CausalSelfAttention::extra_repr() const {
  return tb::detail::str_cat("d_model=", cfg_.d_model, ", n_heads=", cfg_.n_heads,
                             ", n_kv_heads=", cfg_.n_kv_heads, ", head_dim=", head_dim_);
}

// ---- SwiGLU -------------------------------------------------------------------------------------

SwiGLU::SwiGLU(std::int64_t d_model, std::int64_t hidden, rng::Generator* gen) : Module("SwiGLU") {
  gate_proj_ = register_module("gate_proj", std::make_shared<Linear>(d_model, hidden, false, gen));
  up_proj_ = register_module("up_proj", std::make_shared<Linear>(d_model, hidden, false, gen));
  down_proj_ = register_module("down_proj", std::make_shared<Linear>(hidden, d_model, false, gen));
}

Tensor SwiGLU::forward(const Tensor& x) {
  // One fused pass forward and back (ops::swiglu): silu, mul and their three gradient passes were
  // a tenth of a qwen-tiny step.
  return down_proj_->forward(ops::swiglu(gate_proj_->forward(x), up_proj_->forward(x)));
}

// ---- DecoderBlock -------------------------------------------------------------------------------

DecoderBlock::DecoderBlock(const AttentionConfig& attn, std::int64_t ffn_hidden, double norm_eps,
                           rng::Generator* gen)
    : Module("DecoderBlock") {
  attn_norm_ = register_module("attn_norm", std::make_shared<RMSNorm>(attn.d_model, norm_eps));
  attn_ = register_module("attn", std::make_shared<CausalSelfAttention>(attn, gen));
  mlp_norm_ = register_module("mlp_norm", std::make_shared<RMSNorm>(attn.d_model, norm_eps));
  mlp_ = register_module("mlp", std::make_shared<SwiGLU>(attn.d_model, ffn_hidden, gen));
}

Tensor DecoderBlock::forward(const Tensor& x) {
  const Tensor h = ops::add(x, attn_->forward(attn_norm_->forward(x)));
  return ops::add(h, mlp_->forward(mlp_norm_->forward(h)));
}

}  // namespace tb::nn
