#include "engine/nn/models.h"

#include <iomanip>
#include <set>
#include <sstream>

#include "engine/core/error.h"
#include "engine/nn/init.h"
#include "engine/ops/ops.h"

namespace tb::nn {

using core::DimVector;

namespace {

std::int64_t default_ffn_hidden(std::int64_t d_model) {
  const std::int64_t raw = (8 * d_model + 2) / 3;
  return (raw + 31) / 32 * 32;
}

void check_pos(const char* model, const char* field, std::int64_t v) {
  TB_CHECK(v > 0, model, ": ", field, " must be positive, got ", v);
}

void validate_mlp(const MlpConfig& c) {
  check_pos("mlp", "input", c.input);
  check_pos("mlp", "classes", c.classes);
  for (std::size_t i = 0; i < c.hidden.size(); ++i) {
    TB_CHECK(c.hidden[i] > 0, "mlp: hidden[", i, "] must be positive, got ", c.hidden[i]);
  }
  try {
    parse_activation(c.activation);
  } catch (const ValueError&) {
    throw ValueError("mlp: activation '" + c.activation + "' is not one of relu, gelu, silu, tanh");
  }
  TB_CHECK(c.dropout >= 0.0 && c.dropout < 1.0, "mlp: dropout must be in [0, 1), got ", c.dropout);
}

void validate_qwen(const QwenTinyConfig& c) {
  check_pos("qwen-tiny", "vocab", c.vocab);
  check_pos("qwen-tiny", "d_model", c.d_model);
  check_pos("qwen-tiny", "n_layers", c.n_layers);
  check_pos("qwen-tiny", "n_heads", c.n_heads);
  check_pos("qwen-tiny", "context_length", c.context_length);
  TB_CHECK(c.n_kv_heads >= 0, "qwen-tiny: n_kv_heads must be >= 0 (0 = n_heads), got ",
           c.n_kv_heads);
  TB_CHECK(c.ffn_hidden >= 0, "qwen-tiny: ffn_hidden must be >= 0 (0 = automatic), got ",
           c.ffn_hidden);
  TB_CHECK(c.d_model % c.n_heads == 0, "qwen-tiny: d_model ", c.d_model,
           " is not divisible by n_heads ", c.n_heads);
  TB_CHECK((c.d_model / c.n_heads) % 2 == 0,
           "qwen-tiny: the head size d_model/n_heads = ", c.d_model / c.n_heads,
           " must be even (rotary embeddings rotate pairs)");
  const std::int64_t kv = c.n_kv_heads == 0 ? c.n_heads : c.n_kv_heads;
  TB_CHECK(c.n_heads % kv == 0, "qwen-tiny: n_heads ", c.n_heads,
           " is not divisible by n_kv_heads ", kv);
  TB_CHECK(c.rope_theta > 0, "qwen-tiny: rope_theta must be positive, got ", c.rope_theta);
  TB_CHECK(c.norm_eps > 0, "qwen-tiny: norm_eps must be positive, got ", c.norm_eps);
  TB_CHECK(c.init_std >= 0, "qwen-tiny: init_std must be >= 0, got ", c.init_std);
}

// Reads field `key` of `j` into `out` when present, naming the field on a type error.
template <typename T>
void read_field(const nlohmann::json& j, const char* model, const char* key, T& out) {
  auto it = j.find(key);
  if (it == j.end()) return;
  try {
    out = it->get<T>();
  } catch (const nlohmann::json::exception&) {
    throw ValueError(tb::detail::str_cat(model, ": field '", key, "' has the wrong type (",
                                         it->type_name(), "): ", it->dump()));
  }
}

void check_known(const nlohmann::json& j, const char* model, std::set<std::string> known) {
  known.insert("kind");
  for (auto it = j.begin(); it != j.end(); ++it) {
    if (!known.count(it.key())) {
      std::string list;
      for (const auto& k : known)
        list += (list.empty() ? "" : ", ") + k;
      throw ValueError(
          tb::detail::str_cat(model, ": unknown field '", it.key(), "' (known: ", list, ")"));
    }
  }
}

// The one list of each config's fields: to_json, model_config_from_json and the known-key check
// all come from it, so adding a field is one line here.
template <typename F>
void for_each_field(MlpConfig& c, F&& f) {
  f("input", c.input);
  f("hidden", c.hidden);
  f("classes", c.classes);
  f("activation", c.activation);
  f("dropout", c.dropout);
}

template <typename F>
void for_each_field(QwenTinyConfig& c, F&& f) {
  f("vocab", c.vocab);
  f("d_model", c.d_model);
  f("n_layers", c.n_layers);
  f("n_heads", c.n_heads);
  f("n_kv_heads", c.n_kv_heads);
  f("ffn_hidden", c.ffn_hidden);
  f("context_length", c.context_length);
  f("rope_theta", c.rope_theta);
  f("norm_eps", c.norm_eps);
  f("tie_embeddings", c.tie_embeddings);
  f("qkv_bias", c.qkv_bias);
  f("init_std", c.init_std);
}

// Reads a config of type C named `model` from `j`: unknown fields are errors, absent ones keep
// their defaults.
template <typename C>
C config_from_json(const nlohmann::json& j, const char* model) {
  C c;
  std::set<std::string> known;
  for_each_field(c, [&](const char* key, auto&) { known.insert(key); });
  check_known(j, model, known);
  for_each_field(c, [&](const char* key, auto& field) { read_field(j, model, key, field); });
  return c;
}

}  // namespace

void validate(const ModelConfig& cfg) {
  if (const auto* m = std::get_if<MlpConfig>(&cfg)) validate_mlp(*m);
  if (const auto* q = std::get_if<QwenTinyConfig>(&cfg)) validate_qwen(*q);
}

std::string model_kind(const ModelConfig& cfg) {
  return std::holds_alternative<MlpConfig>(cfg) ? "mlp" : "qwen-tiny";
}

nlohmann::json to_json(const ModelConfig& cfg) {
  nlohmann::json j;
  j["kind"] = model_kind(cfg);
  std::visit(
      [&](auto c) {  // a copy: for_each_field hands out mutable references
        for_each_field(c, [&](const char* key, const auto& field) { j[key] = field; });
      },
      cfg);
  return j;
}

ModelConfig model_config_from_json(const nlohmann::json& j) {
  TB_CHECK(j.is_object(), "model config must be a JSON object, got ", j.type_name());
  auto it = j.find("kind");
  TB_CHECK(it != j.end() && it->is_string(),
           "model config needs a string field 'kind' (\"mlp\" or \"qwen-tiny\")");
  const std::string kind = it->get<std::string>();
  if (kind == "mlp") {
    const auto c = config_from_json<MlpConfig>(j, "mlp");
    validate_mlp(c);
    return c;
  }
  if (kind == "qwen-tiny") {
    const auto c = config_from_json<QwenTinyConfig>(j, "qwen-tiny");
    validate_qwen(c);
    return c;
  }
  throw ValueError("model config: unknown kind '" + kind + "' (choose mlp or qwen-tiny)");
}

Tensor Model::loss(const Tensor& logits, const Tensor& target) const {
  return cross_entropy(logits, target);
}

// ---- Mlp ----------------------------------------------------------------------------------------

Mlp::Mlp(const MlpConfig& cfg, rng::Generator* gen) : Model("Mlp"), cfg_(cfg) {
  validate_mlp(cfg_);
  layers_ = register_module("layers", std::make_shared<Sequential>());
  const ActivationKind act = parse_activation(cfg_.activation);
  std::int64_t width = cfg_.input;
  for (std::int64_t h : cfg_.hidden) {
    layers_->push_back(std::make_shared<Linear>(width, h, true, gen));
    layers_->push_back(std::make_shared<Activation>(act));
    if (cfg_.dropout > 0) layers_->push_back(std::make_shared<Dropout>(cfg_.dropout, gen));
    width = h;
  }
  layers_->push_back(std::make_shared<Linear>(width, cfg_.classes, true, gen));
}

Tensor Mlp::forward(const Tensor& x) {
  TB_CHECK(x.defined() && x.dim() >= 1, "[nn] Mlp: input must have a batch dimension");
  const Tensor flat = x.dim() == 2 ? x : x.reshape({x.size(0), -1});
  TB_CHECK(flat.size(1) == cfg_.input, "[nn] Mlp: input of shape ", DimVector(x.sizes()), " has ",
           flat.size(1), " features per sample, the model expects input = ", cfg_.input);
  return layers_->forward(flat);
}

// ---- QwenTiny -----------------------------------------------------------------------------------

QwenTiny::QwenTiny(const QwenTinyConfig& cfg, rng::Generator* gen) : Model("QwenTiny"), cfg_(cfg) {
  validate_qwen(cfg_);
  if (cfg_.ffn_hidden == 0) cfg_.ffn_hidden = default_ffn_hidden(cfg_.d_model);
  if (cfg_.n_kv_heads == 0) cfg_.n_kv_heads = cfg_.n_heads;
  embed_ =
      register_module("embed_tokens", std::make_shared<Embedding>(cfg_.vocab, cfg_.d_model, gen));
  layers_ = register_module("layers", std::make_shared<ModuleList>());
  AttentionConfig attn;
  attn.d_model = cfg_.d_model;
  attn.n_heads = cfg_.n_heads;
  attn.n_kv_heads = cfg_.n_kv_heads;
  attn.max_positions = cfg_.context_length;
  attn.rope_theta = cfg_.rope_theta;
  attn.qkv_bias = cfg_.qkv_bias;
  for (std::int64_t i = 0; i < cfg_.n_layers; ++i)
    layers_->push_back(std::make_shared<DecoderBlock>(attn, cfg_.ffn_hidden, cfg_.norm_eps, gen));
  norm_ = register_module("norm", std::make_shared<RMSNorm>(cfg_.d_model, cfg_.norm_eps));
  if (!cfg_.tie_embeddings) {
    lm_head_ =
        register_module("lm_head", std::make_shared<Linear>(cfg_.d_model, cfg_.vocab, false, gen));
  }
  if (cfg_.init_std > 0) {
    // Qwen's initialisation: every matrix ~ N(0, init_std), biases 0, norms 1 — in registration
    // order, from the same generator.
    for (auto& [name, p] : named_parameters()) {
      if (p.dim() == 2) {
        init::normal_(p, 0.0, cfg_.init_std, gen);
      } else if (name.size() >= 5 && name.compare(name.size() - 5, 5, ".bias") == 0) {
        init::constant_(p, 0.0);
      }
    }
  }
}

Tensor QwenTiny::forward(const Tensor& tokens) {
  TB_CHECK(tokens.defined() && tokens.dim() == 2,
           "[nn] QwenTiny: tokens must be [B, T], got shape ",
           tokens.defined() ? DimVector(tokens.sizes()) : DimVector());
  TB_CHECK(tokens.size(1) <= cfg_.context_length, "[nn] QwenTiny: sequence length ", tokens.size(1),
           " exceeds context_length ", cfg_.context_length);
  Tensor h = embed_->forward(tokens);
  for (std::size_t i = 0; i < layers_->size(); ++i)
    h = (*layers_)[i].forward(h);
  h = norm_->forward(h);
  return lm_head_ ? lm_head_->forward(h) : ops::matmul(h, embed_->weight().t());
}

// ---- helpers ------------------------------------------------------------------------------------

std::shared_ptr<Model> build_model(const ModelConfig& cfg, rng::Generator* gen) {
  validate(cfg);
  if (const auto* m = std::get_if<MlpConfig>(&cfg)) return std::make_shared<Mlp>(*m, gen);
  return std::make_shared<QwenTiny>(std::get<QwenTinyConfig>(cfg), gen);
}

std::string parameter_table(const Module& m) {
  std::ostringstream os;
  std::size_t width = 4;
  const auto params = m.named_parameters();
  for (const auto& [name, t] : params)
    width = std::max(width, name.size());
  std::set<const core::TensorImpl*> seen;
  for (const auto& [name, t] : params) {
    std::ostringstream shape;
    shape << DimVector(t.sizes());
    os << std::left << std::setw(static_cast<int>(width) + 2) << name << std::setw(16)
       << shape.str() << std::right << std::setw(12) << t.numel()
       << (seen.insert(t.impl()).second ? "" : "  (shared)") << "\n";
  }
  os << "total " << m.num_parameters() << " parameters\n";
  return os.str();
}

}  // namespace tb::nn
