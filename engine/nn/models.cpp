#include "engine/nn/models.h"

#include <algorithm>
#include <iomanip>
#include <set>
#include <sstream>

#include "engine/core/error.h"
#include "engine/nn/cnn.h"
#include "engine/nn/config_fields.h"
#include "engine/nn/gpt.h"
#include "engine/nn/init.h"
#include "engine/nn/model_registry.h"
#include "engine/ops/ops.h"

namespace tb::nn {

using core::DimVector;

namespace {

std::int64_t default_ffn_hidden(std::int64_t d_model) {
  const std::int64_t raw = (8 * d_model + 2) / 3;
  return (raw + 31) / 32 * 32;
}

template <typename... Args>
void check_field(bool cond, const char* field, Args&&... args) {
  fields::check(cond, field, std::forward<Args>(args)...);
}

void check_pos(const char* model, const char* field, std::int64_t v) {
  check_field(v > 0, field, model, ": ", field, " must be positive, got ", v);
}

void validate_mlp(const MlpConfig& c) {
  check_pos("mlp", "input", c.input);
  check_pos("mlp", "classes", c.classes);
  for (std::size_t i = 0; i < c.hidden.size(); ++i) {
    check_field(c.hidden[i] > 0, "hidden", "mlp: hidden[", i, "] must be positive, got ",
                c.hidden[i]);
  }
  try {
    parse_activation(c.activation);
  } catch (const ValueError&) {
    throw FieldError("activation",
                     "mlp: activation '" + c.activation + "' is not one of relu, gelu, silu, tanh");
  }
  check_field(c.dropout >= 0.0 && c.dropout < 1.0, "dropout",
              "mlp: dropout must be in [0, 1), got ", c.dropout);
}

void validate_qwen(const QwenTinyConfig& c) {
  check_pos("qwen-tiny", "vocab", c.vocab);
  check_pos("qwen-tiny", "d_model", c.d_model);
  check_pos("qwen-tiny", "n_layers", c.n_layers);
  check_pos("qwen-tiny", "n_heads", c.n_heads);
  check_pos("qwen-tiny", "context_length", c.context_length);
  check_field(c.n_kv_heads >= 0, "n_kv_heads",
              "qwen-tiny: n_kv_heads must be >= 0 (0 = n_heads), got ", c.n_kv_heads);
  check_field(c.ffn_hidden >= 0, "ffn_hidden",
              "qwen-tiny: ffn_hidden must be >= 0 (0 = automatic), got ", c.ffn_hidden);
  check_field(c.d_model % c.n_heads == 0, "d_model", "qwen-tiny: d_model ", c.d_model,
              " is not divisible by n_heads ", c.n_heads);
  check_field((c.d_model / c.n_heads) % 2 == 0, "d_model",
              "qwen-tiny: the head size d_model/n_heads = ", c.d_model / c.n_heads,
              " must be even (rotary embeddings rotate pairs)");
  const std::int64_t kv = c.n_kv_heads == 0 ? c.n_heads : c.n_kv_heads;
  check_field(c.n_heads % kv == 0, "n_kv_heads", "qwen-tiny: n_heads ", c.n_heads,
              " is not divisible by n_kv_heads ", kv);
  check_field(c.rope_theta > 0, "rope_theta", "qwen-tiny: rope_theta must be positive, got ",
              c.rope_theta);
  check_field(c.norm_eps > 0, "norm_eps", "qwen-tiny: norm_eps must be positive, got ", c.norm_eps);
  check_field(c.init_std >= 0, "init_std", "qwen-tiny: init_std must be >= 0, got ", c.init_std);
}

template <typename T>
void read_field(const nlohmann::json& j, const char* model, const char* key, T& out) {
  fields::read(j, model, key, out);
}

// The one list of each typed config's fields: the JSON conversions come from it.
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

template <typename C>
nlohmann::json fields_of(C c) {  // a copy: for_each_field hands out mutable references
  nlohmann::json j = nlohmann::json::object();
  for_each_field(c, [&](const char* key, const auto& field) { j[key] = field; });
  return j;
}

template <typename C>
C typed_config(const nlohmann::json& j, const char* model) {
  C c;
  for_each_field(c, [&](const char* key, auto& field) { read_field(j, model, key, field); });
  return c;
}

// Whether a JSON value has the type a field wants (an integer is a float too).
bool has_type(const nlohmann::json& v, core::FieldType t) {
  using core::FieldType;
  switch (t) {
    case FieldType::kBool:
      return v.is_boolean();
    case FieldType::kInt:
      return v.is_number_integer();
    case FieldType::kFloat:
      return v.is_number();
    case FieldType::kString:
      return v.is_string();
    case FieldType::kIntList:
      return v.is_array() &&
             std::all_of(v.begin(), v.end(), [](const auto& e) { return e.is_number_integer(); });
    case FieldType::kStringList:
      return v.is_array() &&
             std::all_of(v.begin(), v.end(), [](const auto& e) { return e.is_string(); });
    case FieldType::kAny:
      return true;
  }
  return true;
}

}  // namespace

ModelConfig::ModelConfig() : ModelConfig(MlpConfig{}) {}
ModelConfig::ModelConfig(std::string k, nlohmann::json f)
    : kind(std::move(k)), fields(std::move(f)) {}
ModelConfig::ModelConfig(const MlpConfig& c) : kind("mlp"), fields(fields_of(c)) {}
ModelConfig::ModelConfig(const QwenTinyConfig& c) : kind("qwen-tiny"), fields(fields_of(c)) {}

MlpConfig mlp_config(const ModelConfig& cfg) {
  TB_CHECK(cfg.kind == "mlp", "[nn] a model config of kind '", cfg.kind, "' is not an mlp");
  return typed_config<MlpConfig>(cfg.fields, "mlp");
}

QwenTinyConfig qwen_tiny_config(const ModelConfig& cfg) {
  TB_CHECK(cfg.kind == "qwen-tiny", "[nn] a model config of kind '", cfg.kind,
           "' is not a qwen-tiny");
  return typed_config<QwenTinyConfig>(cfg.fields, "qwen-tiny");
}

void validate(const ModelConfig& cfg) {
  const auto kind = model_registry().find(cfg.kind);
  TB_CHECK(kind != nullptr, "model config: unknown kind '", cfg.kind, "' (choose ",
           core::join_or(model_registry().names()), ")");
  if (kind->validate) kind->validate(cfg.fields);
}

std::string model_kind(const ModelConfig& cfg) {
  return cfg.kind;
}

nlohmann::json to_json(const ModelConfig& cfg) {
  nlohmann::json j;
  j["kind"] = cfg.kind;
  for (const auto& [k, v] : cfg.fields.items())
    j[k] = v;
  return j;
}

ModelConfig model_config_from_json(const nlohmann::json& j) {
  TB_CHECK(j.is_object(), "model config must be a JSON object, got ", j.type_name());
  auto it = j.find("kind");
  const auto names = model_registry().names();
  TB_CHECK(it != j.end() && it->is_string(), "model config needs a string field 'kind' (",
           core::join_or(names), ")");
  const std::string name = it->get<std::string>();
  const auto kind = model_registry().find(name);
  if (kind == nullptr) {
    const std::string close = core::close_word(name, names);
    throw ValueError(tb::detail::str_cat("model config: unknown kind '", name, "' (choose ",
                                         core::join_or(names), ")",
                                         close.empty() ? "" : "; did you mean '" + close + "'?"));
  }
  for (auto f = j.begin(); f != j.end(); ++f) {
    if (f.key() == "kind" || core::find_field(kind->fields, f.key())) continue;
    const auto keys = core::field_keys(kind->fields);
    std::string list;
    for (const auto& k : keys)
      list += (list.empty() ? "" : ", ") + k;
    const std::string close = core::close_word(f.key(), keys);
    throw FieldError(
        f.key(), tb::detail::str_cat(name, ": unknown field '", f.key(), "' (known: kind, ", list,
                                     ")", close.empty() ? "" : "; did you mean '" + close + "'?"));
  }
  ModelConfig cfg(name, core::default_values(kind->fields));
  for (const auto& field : kind->fields) {
    auto v = j.find(field.key);
    if (v == j.end()) continue;
    if (!has_type(*v, field.type))
      throw ValueError(tb::detail::str_cat(name, ": field '", field.key, "' has the wrong type (",
                                           v->type_name(), "): ", v->dump()));
    // Integers stay integers where the field is a float only as JSON numbers: store as given,
    // converted to the field's type.
    cfg.fields[field.key] =
        field.type == core::FieldType::kFloat ? nlohmann::json(v->get<double>()) : *v;
  }
  if (kind->validate) kind->validate(cfg.fields);
  return cfg;
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
  std::int64_t features = 1;  // explicit, so that an empty batch flattens too
  for (std::int64_t d = 1; d < x.dim(); ++d)
    features *= x.size(d);
  const Tensor flat = x.dim() == 2 ? x : x.reshape({x.size(0), features});
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
  return model_registry().at(cfg.kind)->make(cfg.fields, gen);
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

// ---- registry -----------------------------------------------------------------------------------

namespace {

using core::FieldSpec;
using core::FieldType;

FieldSpec positive(FieldSpec f) {
  return f.documented_as("", "> 0");
}

}  // namespace

ModelKind mlp_kind() {
  ModelKind k;
  k.name = "mlp";
  k.help = "a classifier over flat inputs: Linear layers with an activation between them";
  k.task = core::kTaskClassification;
  k.fields = {
      positive(FieldSpec("input", FieldType::kInt, 784,
                         "input features (inputs of another shape are flattened per sample)")),
      FieldSpec("hidden", FieldType::kIntList, nlohmann::json::array({256, 256}),
                "hidden layer widths, may be empty")
          .documented_as("", "each > 0"),
      positive(FieldSpec("classes", FieldType::kInt, 10, "output logits")),
      FieldSpec("activation", FieldType::kString, "relu", "activation after each hidden layer")
          .one_of({"relu", "gelu", "silu", "tanh"}),
      FieldSpec("dropout", FieldType::kFloat, 0.0, "dropout after each activation (training only)")
          .documented_as("", "in [0, 1)")};
  k.validate = [](const nlohmann::json& f) { validate_mlp(typed_config<MlpConfig>(f, "mlp")); };
  k.fit = [](const nlohmann::json& f,
             const core::DataShape& d) -> std::optional<core::FieldProblem> {
    const auto c = typed_config<MlpConfig>(f, "mlp");
    if (d.features > 0 && c.input != d.features)
      return core::FieldProblem{"model.input",
                                "expected " + std::to_string(d.features) +
                                    " for data.kind = " + core::quote_string(d.kind) +
                                    (d.features_note.empty() ? "" : " (" + d.features_note + ")") +
                                    ", found " + std::to_string(c.input)};
    if (d.classes > 0 && c.classes < d.classes)
      return core::FieldProblem{
          "model.classes", "expected at least " + std::to_string(d.classes) + " for data.kind = " +
                               core::quote_string(d.kind) + ", found " + std::to_string(c.classes)};
    return std::nullopt;
  };
  k.make = [](const nlohmann::json& f, rng::Generator* gen) -> std::shared_ptr<Model> {
    return std::make_shared<Mlp>(typed_config<MlpConfig>(f, "mlp"), gen);
  };
  return k;
}

std::optional<core::FieldProblem> language_model_fit(std::int64_t context_length,
                                                     std::int64_t vocab, const core::DataShape& d) {
  if (d.context_length > context_length)
    return core::FieldProblem{
        "data.context_length",
        "expected at most model.context_length = " + std::to_string(context_length) + ", found " +
            std::to_string(d.context_length)};
  if (d.vocab > vocab)
    return core::FieldProblem{
        "model.vocab", "expected at least " + std::to_string(d.vocab) +
                           " for data.kind = " + core::quote_string(d.kind) +
                           (d.vocab_note.empty() ? "" : " (" + d.vocab_note + ")") + ", found " +
                           std::to_string(vocab)};
  return std::nullopt;
}

ModelKind qwen_tiny_kind() {
  ModelKind k;
  k.name = "qwen-tiny";
  k.help = "a decoder-only language model in the Qwen style (RMSNorm, RoPE attention, SwiGLU)";
  k.task = core::kTaskLanguageModel;
  k.fields = {
      positive(FieldSpec("vocab", FieldType::kInt, 256, "vocabulary (256: bytes)")),
      positive(FieldSpec("d_model", FieldType::kInt, 128,
                         "width (divisible by n_heads, even head size)")),
      positive(FieldSpec("n_layers", FieldType::kInt, 4, "decoder blocks")).at_most(1000),
      positive(FieldSpec("n_heads", FieldType::kInt, 4, "attention heads")),
      FieldSpec("n_kv_heads", FieldType::kInt, 0,
                "key/value heads (grouped-query attention); 0 = n_heads")
          .documented_as("", ">= 0, divides n_heads"),
      FieldSpec("ffn_hidden", FieldType::kInt, 0, "SwiGLU width; 0 = 8/3 d_model rounded up to 32")
          .documented_as("", ">= 0"),
      positive(FieldSpec("context_length", FieldType::kInt, 64, "longest sequence")),
      positive(FieldSpec("rope_theta", FieldType::kFloat, 10000.0, "rotary embedding base")),
      positive(FieldSpec("norm_eps", FieldType::kFloat, 1e-6, "RMSNorm epsilon")),
      FieldSpec("tie_embeddings", FieldType::kBool, true,
                "output head shares the embedding matrix"),
      FieldSpec("qkv_bias", FieldType::kBool, true, "biases on the q/k/v projections"),
      FieldSpec("init_std", FieldType::kFloat, 0.02,
                "every weight matrix ~ N(0, init_std); 0 keeps PyTorch's layer defaults")
          .documented_as("", ">= 0")};
  k.validate = [](const nlohmann::json& f) {
    validate_qwen(typed_config<QwenTinyConfig>(f, "qwen-tiny"));
  };
  k.fit = [](const nlohmann::json& f, const core::DataShape& d) {
    const auto c = typed_config<QwenTinyConfig>(f, "qwen-tiny");
    return language_model_fit(c.context_length, c.vocab, d);
  };
  k.make = [](const nlohmann::json& f, rng::Generator* gen) -> std::shared_ptr<Model> {
    return std::make_shared<QwenTiny>(typed_config<QwenTinyConfig>(f, "qwen-tiny"), gen);
  };
  return k;
}

core::Registry<ModelKind>& model_registry() {
  static core::Registry<ModelKind>* registry = [] {
    auto* r = new core::Registry<ModelKind>("model");
    r->add(mlp_kind());
    r->add(qwen_tiny_kind());
    r->add(cnn_kind());
    r->add(gpt_kind());
    return r;
  }();
  return *registry;
}

}  // namespace tb::nn
