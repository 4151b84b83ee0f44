#include "engine/nn/gpt.h"

#include <cmath>
#include <limits>

#include "engine/autograd/autograd.h"
#include "engine/core/error.h"
#include "engine/nn/config_fields.h"
#include "engine/nn/init.h"
#include "engine/nn/kv_cache.h"
#include "engine/ops/ops.h"

namespace tb::nn {

using core::DimVector;

namespace {

// A module that only groups named children (nanoGPT's "transformer", "attn", "mlp"), so that
// parameter names follow GPT-2's.
class Group : public Module {
 public:
  using Module::Module;
  template <typename M>
  std::shared_ptr<M> add(const std::string& name, std::shared_ptr<M> child) {
    return register_module(name, std::move(child));
  }
};

template <typename... Args>
void check_field(bool cond, const char* field, Args&&... args) {
  fields::check(cond, field, "gpt: ", std::forward<Args>(args)...);
}

nlohmann::json fields_of(const GptConfig& c) {
  return {{"vocab", c.vocab},
          {"padded_vocab", c.padded_vocab},
          {"context_length", c.context_length},
          {"n_layers", c.n_layers},
          {"n_heads", c.n_heads},
          {"d_model", c.d_model},
          {"norm_eps", c.norm_eps},
          {"init_std", c.init_std},
          {"bias", c.bias},
          {"dropout", c.dropout},
          {"gelu", c.gelu}};
}

std::int64_t table_rows(const GptConfig& c) {
  return c.padded_vocab == 0 ? c.vocab : c.padded_vocab;
}

}  // namespace

void validate_gpt(const GptConfig& c) {
  for (const auto& [name, v] : {std::pair<const char*, std::int64_t>{"vocab", c.vocab},
                                {"context_length", c.context_length},
                                {"n_layers", c.n_layers},
                                {"n_heads", c.n_heads},
                                {"d_model", c.d_model}})
    check_field(v > 0, name, name, " must be positive, got ", v);
  check_field(c.padded_vocab == 0 || c.padded_vocab >= c.vocab, "padded_vocab", "padded_vocab ",
              c.padded_vocab, " is smaller than vocab ", c.vocab, " (0 = no padding)");
  check_field(c.d_model % c.n_heads == 0, "d_model", "d_model ", c.d_model,
              " is not divisible by n_heads ", c.n_heads);
  check_field(c.norm_eps > 0, "norm_eps", "norm_eps must be positive, got ", c.norm_eps);
  check_field(c.init_std >= 0, "init_std", "init_std must be >= 0, got ", c.init_std);
  check_field(c.dropout >= 0 && c.dropout < 1, "dropout", "dropout must be in [0, 1), got ",
              c.dropout);
  check_field(c.gelu == "tanh" || c.gelu == "exact", "gelu",
              "gelu must be \"tanh\" or \"exact\", got \"", c.gelu, "\"");
}

GptConfig gpt_config(const nlohmann::json& f) {
  GptConfig c;
  fields::read(f, "gpt", "vocab", c.vocab);
  fields::read(f, "gpt", "padded_vocab", c.padded_vocab);
  fields::read(f, "gpt", "context_length", c.context_length);
  fields::read(f, "gpt", "n_layers", c.n_layers);
  fields::read(f, "gpt", "n_heads", c.n_heads);
  fields::read(f, "gpt", "d_model", c.d_model);
  fields::read(f, "gpt", "norm_eps", c.norm_eps);
  fields::read(f, "gpt", "init_std", c.init_std);
  fields::read(f, "gpt", "bias", c.bias);
  fields::read(f, "gpt", "dropout", c.dropout);
  fields::read(f, "gpt", "gelu", c.gelu);
  return c;
}

std::int64_t gpt_parameter_count(const GptConfig& c) {
  const std::int64_t d = c.d_model;
  const std::int64_t b = c.bias ? 1 : 0;
  const std::int64_t per_block = 2 * (1 + b) * d          // ln_1, ln_2
                                 + d * 3 * d + b * 3 * d  // c_attn
                                 + d * d + b * d          // attn.c_proj
                                 + d * 4 * d + b * 4 * d  // c_fc
                                 + 4 * d * d + b * d;     // mlp.c_proj
  return table_rows(c) * d + c.context_length * d + c.n_layers * per_block + (1 + b) * d;
}

// ---- GptBlock -----------------------------------------------------------------------------------

GptBlock::GptBlock(const GptConfig& c, rng::Generator* gen)
    : Module("GptBlock"), n_heads_(c.n_heads), exact_gelu_(c.gelu == "exact") {
  const std::int64_t d = c.d_model;
  ln_1_ = register_module("ln_1", std::make_shared<LayerNorm>(d, c.norm_eps, true, c.bias));
  auto attn = register_module("attn", std::make_shared<Group>("CausalSelfAttention"));
  c_attn_ = attn->add("c_attn", std::make_shared<Linear>(d, 3 * d, c.bias, gen));
  attn_proj_ = attn->add("c_proj", std::make_shared<Linear>(d, d, c.bias, gen));
  if (c.dropout > 0) {  // nanoGPT's names
    attn_dropout_ = attn->add("attn_dropout", std::make_shared<Dropout>(c.dropout, gen));
    resid_dropout_ = attn->add("resid_dropout", std::make_shared<Dropout>(c.dropout, gen));
  }
  attn_ = attn;
  ln_2_ = register_module("ln_2", std::make_shared<LayerNorm>(d, c.norm_eps, true, c.bias));
  auto mlp = register_module("mlp", std::make_shared<Group>("MLP"));
  c_fc_ = mlp->add("c_fc", std::make_shared<Linear>(d, 4 * d, c.bias, gen));
  mlp_proj_ = mlp->add("c_proj", std::make_shared<Linear>(4 * d, d, c.bias, gen));
  if (c.dropout > 0) mlp_dropout_ = mlp->add("dropout", std::make_shared<Dropout>(c.dropout, gen));
  mlp_ = mlp;
}

Tensor GptBlock::forward(const Tensor& x) {
  const std::int64_t b = x.size(0), t = x.size(1), d = x.size(2);
  const std::int64_t hd = d / n_heads_;
  // Attention: one [C, 3C] projection, split into q, k, v of [B, H, T, D].
  const Tensor qkv = c_attn_->forward(ln_1_->forward(x));
  auto heads = [&](std::int64_t i) {
    return qkv.narrow(2, i * d, d).reshape({b, t, n_heads_, hd}).transpose(1, 2);
  };
  Tensor k = heads(1);
  Tensor v = heads(2);
  const bool causal = attend_to_cache(current_kv_cache(), k, v, t, describe());
  Tensor y;
  // The dropout's own mode, not the block's: a data-parallel rank with no rows replays the masks
  // with only the Dropout layers in training mode (Trainer's replay_random_draws).
  if (attn_dropout_ && attn_dropout_->is_training()) {
    // Dropout on the attention weights (PyTorch's dropout_p): the weights are formed, so the
    // fused kernel, which never holds them, is not used.
    const Tensor q = heads(0);
    const std::int64_t s = k.size(2);
    Tensor scores = ops::mul(ops::matmul(q, k.transpose(-2, -1)),
                             1.0 / std::sqrt(static_cast<double>(hd)));  // [B, H, T, S]
    if (causal) {
      const Tensor qpos = ops::arange(t, core::ScalarType::Int64, x.device());
      const Tensor kpos = ops::arange(s, core::ScalarType::Int64, x.device());
      scores = ops::masked_fill(scores, ops::gt(kpos.unsqueeze(0), qpos.unsqueeze(1)),
                                -std::numeric_limits<double>::infinity());
    }
    y = ops::matmul(attn_dropout_->forward(ops::softmax(scores, -1)), v);
  } else {
    y = ops::scaled_dot_product_attention(heads(0), k, v, causal);
  }
  Tensor a = attn_proj_->forward(y.transpose(1, 2).reshape({b, t, d}));
  if (resid_dropout_) a = resid_dropout_->forward(a);
  const Tensor h = ops::add(x, a);
  // MLP: C -> 4C -> GELU (GPT-2's tanh approximation, or nanoGPT's exact one) -> C.
  const Tensor up = c_fc_->forward(ln_2_->forward(h));
  Tensor m = mlp_proj_->forward(exact_gelu_ ? ops::gelu(up) : ops::gelu_tanh(up));
  if (mlp_dropout_) m = mlp_dropout_->forward(m);
  return ops::add(h, m);
}

// ---- Gpt ----------------------------------------------------------------------------------------

Gpt::Gpt(const GptConfig& cfg, rng::Generator* gen) : Model("Gpt"), cfg_(cfg) {
  validate_gpt(cfg_);
  if (cfg_.padded_vocab == 0) cfg_.padded_vocab = cfg_.vocab;
  auto body = register_module("transformer", std::make_shared<Group>("GptTransformer"));
  wte_ = body->add("wte", std::make_shared<Embedding>(cfg_.padded_vocab, cfg_.d_model, gen));
  wpe_ = body->add("wpe", std::make_shared<Embedding>(cfg_.context_length, cfg_.d_model, gen));
  h_ = body->add("h", std::make_shared<ModuleList>());
  for (std::int64_t i = 0; i < cfg_.n_layers; ++i)
    h_->push_back(std::make_shared<GptBlock>(cfg_, gen));
  ln_f_ =
      body->add("ln_f", std::make_shared<LayerNorm>(cfg_.d_model, cfg_.norm_eps, true, cfg_.bias));
  if (cfg_.dropout > 0) drop_ = body->add("drop", std::make_shared<Dropout>(cfg_.dropout, gen));
  if (cfg_.init_std > 0) {
    // GPT-2's initialisation (llm.c train_gpt2.py _init_weights): matrices and embeddings
    // N(0, std), the projections into the residual stream N(0, std/√(2L)), biases 0; in
    // registration order from the same generator.
    const double residual_std = cfg_.init_std / std::sqrt(2.0 * static_cast<double>(cfg_.n_layers));
    for (auto& [name, p] : named_parameters()) {
      const bool is_bias = name.size() >= 5 && name.compare(name.size() - 5, 5, ".bias") == 0;
      if (p.dim() == 2) {
        const bool residual = name.find(".c_proj.weight") != std::string::npos;
        init::normal_(p, 0.0, residual ? residual_std : cfg_.init_std, gen);
      } else if (is_bias && name.find(".ln_") == std::string::npos) {
        init::constant_(p, 0.0);
      }
    }
  }
  if (cfg_.padded_vocab > cfg_.vocab) {
    // Padded rows: zero, never looked up, their logits dropped.
    autograd::NoGradGuard no_grad;
    Tensor pad = wte_->weight().narrow(0, cfg_.vocab, cfg_.padded_vocab - cfg_.vocab);
    pad.zero_();
  }
}

Tensor Gpt::forward(const Tensor& tokens) {
  TB_CHECK(tokens.defined() && tokens.dim() == 2, "[nn] gpt: tokens must be [B, T], got shape ",
           tokens.defined() ? DimVector(tokens.sizes()) : DimVector());
  const std::int64_t t = tokens.size(1);
  // Under a key/value cache the tokens continue the cached positions.
  const KvCache* cache = current_kv_cache();
  const std::int64_t past = cache ? cache->length() : 0;
  TB_CHECK(past + t <= cfg_.context_length, "[nn] gpt: sequence length ", past + t,
           " exceeds context_length ", cfg_.context_length);
  const Tensor pos = wpe_->forward(
      ops::arange(past + t, core::ScalarType::Int64, tokens.device()).narrow(0, past, t));
  Tensor h = ops::add(wte_->forward(tokens), pos);
  if (drop_) h = drop_->forward(h);
  for (std::size_t i = 0; i < h_->size(); ++i)
    h = (*h_)[i].forward(h);
  h = ln_f_->forward(h);
  const Tensor logits = ops::matmul(h, wte_->weight().t());
  return cfg_.padded_vocab > cfg_.vocab ? logits.narrow(2, 0, cfg_.vocab) : logits;
}

ModelConfig Gpt::config() const {
  GptConfig c = cfg_;
  if (c.padded_vocab == c.vocab) c.padded_vocab = 0;
  return ModelConfig("gpt", fields_of(c));
}

// ---- registry -----------------------------------------------------------------------------------

ModelKind gpt_kind() {
  using core::FieldSpec;
  using core::FieldType;
  ModelKind k;
  k.name = "gpt";
  k.help =
      "a GPT-2-class decoder (learned positions, LayerNorm, GELU MLP, tied head); names and "
      "shapes as nanoGPT / Hugging Face GPT-2";
  k.task = core::kTaskLanguageModel;
  const GptConfig d;
  k.fields = {
      FieldSpec("vocab", FieldType::kInt, d.vocab, "vocabulary (GPT-2: 50257; bytes: 256)")
          .documented_as("", "> 0"),
      FieldSpec("padded_vocab", FieldType::kInt, d.padded_vocab,
                "embedding rows; 0 = vocab, llm.c pads to 50304 (padded logits are dropped)")
          .documented_as("", "0 or >= vocab"),
      FieldSpec("context_length", FieldType::kInt, d.context_length,
                "longest sequence (position table rows)")
          .documented_as("", "> 0"),
      FieldSpec("n_layers", FieldType::kInt, d.n_layers, "blocks").at_least(1).at_most(1000),
      FieldSpec("n_heads", FieldType::kInt, d.n_heads, "attention heads")
          .documented_as("", "> 0, divides d_model"),
      FieldSpec("d_model", FieldType::kInt, d.d_model, "width (the MLP is 4x wider)")
          .documented_as("", "> 0"),
      FieldSpec("norm_eps", FieldType::kFloat, d.norm_eps, "LayerNorm epsilon")
          .documented_as("", "> 0"),
      FieldSpec("init_std", FieldType::kFloat, d.init_std,
                "weights ~ N(0, init_std), residual projections N(0, init_std/sqrt(2 n_layers)); "
                "0 keeps PyTorch's layer defaults")
          .documented_as("", ">= 0"),
      FieldSpec("bias", FieldType::kBool, d.bias,
                "biases in the Linear layers and LayerNorms (GPT-2); false: none, as nanoGPT's "
                "bias = False"),
      FieldSpec("gelu", FieldType::kString, d.gelu,
                "MLP activation: tanh = GPT-2's approximation (Hugging Face gelu_new, llm.c); "
                "exact = torch.nn.GELU(), nanoGPT's")
          .one_of({"tanh", "exact"}),
      FieldSpec("dropout", FieldType::kFloat, d.dropout,
                "training dropout after the embeddings, on the attention weights (then unfused) "
                "and after each block's two output projections, as nanoGPT")
          .at_least(0)
          .below(1)};
  k.validate = [](const nlohmann::json& f) { validate_gpt(gpt_config(f)); };
  k.fit = [](const nlohmann::json& f, const core::DataShape& data) {
    const GptConfig c = gpt_config(f);
    return language_model_fit(c.context_length, c.vocab, data);
  };
  k.make = [](const nlohmann::json& f, rng::Generator* gen) -> std::shared_ptr<Model> {
    return std::make_shared<Gpt>(gpt_config(f), gen);
  };
  return k;
}

}  // namespace tb::nn
