#include "engine/nn/cnn.h"

#include "engine/core/error.h"
#include "engine/nn/config_fields.h"
#include "engine/ops/ops.h"

namespace tb::nn {

using core::DimVector;

namespace {

template <typename... Args>
void check_field(bool cond, const char* field, Args&&... args) {
  fields::check(cond, field, "cnn: ", std::forward<Args>(args)...);
}

template <typename T>
void read(const nlohmann::json& j, const char* key, T& out) {
  fields::read(j, "cnn", key, out);
}

// Spatial size after one block (padding k/2 keeps it for odd k; pooling halves it, rounding down).
std::int64_t after_block(std::int64_t s, const CnnConfig& c) {
  return c.pool == "none" ? s : s / 2;
}

void validate_cnn(const CnnConfig& c) {
  check_field(c.input.size() == 3, "input", "input must be [channels, height, width], got ",
              c.input.size(), " values");
  for (std::size_t i = 0; i < c.input.size(); ++i)
    check_field(c.input[i] > 0, "input", "input[", i, "] must be positive, got ", c.input[i]);
  check_field(!c.channels.empty(), "channels", "channels needs at least one block");
  for (std::size_t i = 0; i < c.channels.size(); ++i)
    check_field(c.channels[i] > 0, "channels", "channels[", i, "] must be positive, got ",
                c.channels[i]);
  check_field(c.convs_per_block > 0, "convs_per_block", "convs_per_block must be positive, got ",
              c.convs_per_block);
  check_field(c.kernel > 0 && c.kernel % 2 == 1, "kernel",
              "kernel must be a positive odd size (padding kernel/2 keeps the image size), got ",
              c.kernel);
  check_field(c.norm == "batch" || c.norm == "none", "norm", "norm '", c.norm,
              "' is not one of batch, none");
  try {
    parse_activation(c.activation);
  } catch (const ValueError&) {
    throw FieldError("activation",
                     "cnn: activation '" + c.activation + "' is not one of relu, gelu, silu, tanh");
  }
  check_field(c.pool == "max" || c.pool == "avg" || c.pool == "none", "pool", "pool '", c.pool,
              "' is not one of max, avg, none");
  check_field(c.head == "avgpool" || c.head == "flatten", "head", "head '", c.head,
              "' is not one of avgpool, flatten");
  for (std::size_t i = 0; i < c.hidden.size(); ++i)
    check_field(c.hidden[i] > 0, "hidden", "hidden[", i, "] must be positive, got ", c.hidden[i]);
  check_field(c.dropout >= 0.0 && c.dropout < 1.0, "dropout", "dropout must be in [0, 1), got ",
              c.dropout);
  check_field(c.classes > 0, "classes", "classes must be positive, got ", c.classes);
  std::int64_t h = c.input[1], w = c.input[2];
  for (std::size_t i = 0; i < c.channels.size(); ++i) {
    check_field(c.pool == "none" || (h >= 2 && w >= 2), "channels", "block ", i, " gets a ", h, "x",
                w, " image: too small for another 2x2 pooling (", c.channels.size(),
                " blocks on a ", c.input[1], "x", c.input[2], " input)");
    h = after_block(h, c);
    w = after_block(w, c);
  }
}

nlohmann::json fields_of(const CnnConfig& c) {
  return {{"input", c.input},   {"channels", c.channels}, {"convs_per_block", c.convs_per_block},
          {"kernel", c.kernel}, {"norm", c.norm},         {"activation", c.activation},
          {"pool", c.pool},     {"residual", c.residual}, {"head", c.head},
          {"hidden", c.hidden}, {"dropout", c.dropout},   {"classes", c.classes}};
}

}  // namespace

CnnConfig cnn_config(const nlohmann::json& f) {
  CnnConfig c;
  read(f, "input", c.input);
  read(f, "channels", c.channels);
  read(f, "convs_per_block", c.convs_per_block);
  read(f, "kernel", c.kernel);
  read(f, "norm", c.norm);
  read(f, "activation", c.activation);
  read(f, "pool", c.pool);
  read(f, "residual", c.residual);
  read(f, "head", c.head);
  read(f, "hidden", c.hidden);
  read(f, "dropout", c.dropout);
  read(f, "classes", c.classes);
  return c;
}

// ---- ConvBlock ----------------------------------------------------------------------------------

ConvBlock::ConvBlock(std::int64_t in_channels, std::int64_t out_channels, const CnnConfig& cfg,
                     rng::Generator* gen)
    : Module("ConvBlock"), residual_(cfg.residual), act_(parse_activation(cfg.activation)) {
  const bool bn = cfg.norm == "batch";
  convs_ = register_module("convs", std::make_shared<Sequential>());
  std::int64_t c = in_channels;
  for (std::int64_t i = 0; i < cfg.convs_per_block; ++i) {
    auto unit = std::make_shared<Sequential>();
    // A convolution followed by batch norm needs no bias (the norm's shift replaces it).
    unit->push_back(
        std::make_shared<Conv2d>(c, out_channels, cfg.kernel, 1, cfg.kernel / 2, !bn, gen));
    if (bn) unit->push_back(std::make_shared<BatchNorm2d>(out_channels));
    // With a residual connection the block's last activation follows the sum.
    if (!(residual_ && i + 1 == cfg.convs_per_block))
      unit->push_back(std::make_shared<Activation>(act_));
    convs_->push_back(unit);
    c = out_channels;
  }
  if (residual_ && in_channels != out_channels) {
    skip_ = register_module("skip", std::make_shared<Sequential>());
    skip_->push_back(std::make_shared<Conv2d>(in_channels, out_channels, 1, 1, 0, !bn, gen));
    if (bn) skip_->push_back(std::make_shared<BatchNorm2d>(out_channels));
  }
  if (cfg.pool != "none")
    pool_ = register_module("pool", std::make_shared<Pool2d>(cfg.pool == "max", 2));
}

Tensor ConvBlock::forward(const Tensor& x) {
  Tensor h = convs_->forward(x);
  if (residual_) {
    h = ops::add(h, skip_ ? skip_->forward(x) : x);
    switch (act_) {
      case ActivationKind::ReLU:
        h = ops::relu(h);
        break;
      case ActivationKind::GELU:
        h = ops::gelu(h);
        break;
      case ActivationKind::SiLU:
        h = ops::silu(h);
        break;
      case ActivationKind::Tanh:
        h = ops::tanh(h);
        break;
    }
  }
  return pool_ ? pool_->forward(h) : h;
}

// ---- Cnn ----------------------------------------------------------------------------------------

Cnn::Cnn(const CnnConfig& cfg, rng::Generator* gen) : Model("Cnn"), cfg_(cfg) {
  validate_cnn(cfg_);
  blocks_ = register_module("blocks", std::make_shared<Sequential>());
  std::int64_t c = cfg_.input[0], h = cfg_.input[1], w = cfg_.input[2];
  for (std::int64_t out : cfg_.channels) {
    blocks_->push_back(std::make_shared<ConvBlock>(c, out, cfg_, gen));
    c = out;
    h = after_block(h, cfg_);
    w = after_block(w, cfg_);
  }
  classifier_ = register_module("classifier", std::make_shared<Sequential>());
  std::int64_t width = c;
  if (cfg_.head == "avgpool") {
    // AdaptiveAvgPool2d(1) + Flatten, as a torchvision head: the Linear layers' indices (and so
    // the state_dict's names) match the same torch.nn.Sequential.
    classifier_->push_back(std::make_shared<AdaptiveAvgPool2d>(1, 1));
  } else {
    width = c * h * w;
  }
  classifier_->push_back(std::make_shared<Flatten>());
  const ActivationKind act = parse_activation(cfg_.activation);
  for (std::int64_t hid : cfg_.hidden) {
    if (cfg_.dropout > 0) classifier_->push_back(std::make_shared<Dropout>(cfg_.dropout, gen));
    classifier_->push_back(std::make_shared<Linear>(width, hid, true, gen));
    classifier_->push_back(std::make_shared<Activation>(act));
    width = hid;
  }
  if (cfg_.dropout > 0) classifier_->push_back(std::make_shared<Dropout>(cfg_.dropout, gen));
  classifier_->push_back(std::make_shared<Linear>(width, cfg_.classes, true, gen));
}

Tensor Cnn::forward(const Tensor& x) {
  TB_CHECK(x.defined() && x.dim() >= 2, "[nn] Cnn: input must have a batch dimension");
  const std::int64_t per_sample = cfg_.input[0] * cfg_.input[1] * cfg_.input[2];
  std::int64_t got = 1;  // from the shape, so that an empty batch is checked too
  for (std::int64_t d = 1; d < x.dim(); ++d)
    got *= x.size(d);
  TB_CHECK(got == per_sample, "[nn] Cnn: input of shape ", DimVector(x.sizes()), " has ", got,
           " values per sample, the model expects input = [", cfg_.input[0], ", ", cfg_.input[1],
           ", ", cfg_.input[2], "] (", per_sample, ")");
  const Tensor img =
      x.dim() == 4 ? x : x.reshape({x.size(0), cfg_.input[0], cfg_.input[1], cfg_.input[2]});
  return classifier_->forward(blocks_->forward(img));
}

ModelConfig Cnn::config() const {
  return ModelConfig("cnn", fields_of(cfg_));
}

// ---- registry -----------------------------------------------------------------------------------

ModelKind cnn_kind() {
  using core::FieldSpec;
  using core::FieldType;
  ModelKind k;
  k.name = "cnn";
  k.help =
      "an image classifier: blocks of convolutions (batch norm, activation, optional "
      "residual) with 2x2 pooling, then a classifier head";
  k.task = core::kTaskClassification;
  const CnnConfig d;
  k.fields = {
      FieldSpec("input", FieldType::kIntList, d.input,
                "channels, height, width of a sample (flat inputs are reshaped to it)")
          .documented_as("", "3 values, each > 0"),
      FieldSpec("channels", FieldType::kIntList, d.channels,
                "output channels of each block (one block per entry)")
          .documented_as("", "at least one, each > 0"),
      FieldSpec("convs_per_block", FieldType::kInt, d.convs_per_block, "convolutions per block")
          .documented_as("", "> 0"),
      FieldSpec("kernel", FieldType::kInt, d.kernel,
                "kernel size of every convolution (padding kernel/2 keeps the image size)")
          .documented_as("", "odd, > 0"),
      FieldSpec("norm", FieldType::kString, d.norm,
                "batch: BatchNorm2d after each convolution (which then has no bias)")
          .one_of({"batch", "none"}),
      FieldSpec("activation", FieldType::kString, d.activation, "activation after each norm")
          .one_of({"relu", "gelu", "silu", "tanh"}),
      FieldSpec("pool", FieldType::kString, d.pool, "2x2 pooling (stride 2) after each block")
          .one_of({"max", "avg", "none"}),
      FieldSpec("residual", FieldType::kBool, d.residual,
                "a skip connection around each block's convolutions (1x1 projection when the "
                "channels change)"),
      FieldSpec("head", FieldType::kString, d.head,
                "avgpool: global average pooling before the classifier; flatten: every "
                "position's features")
          .one_of({"avgpool", "flatten"}),
      FieldSpec("hidden", FieldType::kIntList, nlohmann::json::array(),
                "hidden Linear widths of the classifier, may be empty")
          .documented_as("", "each > 0"),
      FieldSpec("dropout", FieldType::kFloat, d.dropout,
                "dropout before each classifier Linear (training only)")
          .documented_as("", "in [0, 1)"),
      FieldSpec("classes", FieldType::kInt, d.classes, "output logits").documented_as("", "> 0")};
  k.validate = [](const nlohmann::json& f) { validate_cnn(cnn_config(f)); };
  k.fit = [](const nlohmann::json& f,
             const core::DataShape& data) -> std::optional<core::FieldProblem> {
    const auto c = cnn_config(f);
    const std::int64_t per_sample = c.input[0] * c.input[1] * c.input[2];
    if (data.features > 0 && per_sample != data.features)
      return core::FieldProblem{
          "model.input", "expected " + std::to_string(data.features) +
                             " values per sample for data.kind = " + core::quote_string(data.kind) +
                             (data.features_note.empty() ? "" : " (" + data.features_note + ")") +
                             ", found [" + std::to_string(c.input[0]) + ", " +
                             std::to_string(c.input[1]) + ", " + std::to_string(c.input[2]) +
                             "] = " + std::to_string(per_sample)};
    if (data.classes > 0 && c.classes < data.classes)
      return core::FieldProblem{
          "model.classes", "expected at least " + std::to_string(data.classes) +
                               " for data.kind = " + core::quote_string(data.kind) + ", found " +
                               std::to_string(c.classes)};
    return std::nullopt;
  };
  k.make = [](const nlohmann::json& f, rng::Generator* gen) -> std::shared_ptr<Model> {
    return std::make_shared<Cnn>(cnn_config(f), gen);
  };
  return k;
}

}  // namespace tb::nn
