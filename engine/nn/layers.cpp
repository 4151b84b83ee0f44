#include "engine/nn/layers.h"

#include <cmath>
#include <sstream>

#include "engine/autograd/autograd.h"
#include "engine/core/error.h"
#include "engine/nn/init.h"
#include "engine/ops/ops.h"
#include "engine/rng/generator.h"

namespace tb::nn {

using core::DimVector;

namespace {

std::string shape_str(const Tensor& t) {
  std::ostringstream os;
  os << DimVector(t.sizes());
  return os.str();
}

// Checks that x is defined, floating point, and has `dim` features in its last dimension.
void check_features(const Module& m, const char* what, const Tensor& x, std::int64_t dim) {
  TB_CHECK(x.defined(), "[nn] ", m.describe(), ": input is an undefined tensor");
  TB_CHECK(x.dim() >= 1 && x.size(-1) == dim, "[nn] ", m.describe(), ": input of shape ",
           shape_str(x), " has ", x.dim() == 0 ? 0 : x.size(-1),
           " features in its last dimension, expected ", dim, " (", what, ")");
}

void check_positive(const char* layer, const char* field, std::int64_t v) {
  TB_CHECK(v > 0, "[nn] ", layer, ": ", field, " must be positive, got ", v);
}

}  // namespace

// ---- Linear -------------------------------------------------------------------------------------

Linear::Linear(std::int64_t in_features, std::int64_t out_features, bool bias, rng::Generator* gen)
    : Module("Linear"), in_(in_features), out_(out_features) {
  check_positive("Linear", "in_features", in_features);
  check_positive("Linear", "out_features", out_features);
  weight_ = register_parameter("weight", ops::empty({out_, in_}));
  init::kaiming_uniform_(weight_, std::sqrt(5.0), gen);
  if (bias) {
    bias_ = register_parameter("bias", ops::empty({out_}));
    const double bound = 1.0 / std::sqrt(static_cast<double>(in_));
    init::uniform_(bias_, -bound, bound, gen);
  }
}

Tensor Linear::forward(const Tensor& x) {
  check_features(*this, "in_features", x, in_);
  if (x.dim() == 2) {
    return bias_.defined() ? ops::addmm(bias_, x, weight_.t()) : ops::mm(x, weight_.t());
  }
  // Fold leading dimensions into rows: one GEMM.
  DimVector out_shape(x.sizes());
  out_shape.back() = out_;
  const Tensor rows = x.reshape({-1, in_});
  const Tensor y =
      bias_.defined() ? ops::addmm(bias_, rows, weight_.t()) : ops::mm(rows, weight_.t());
  return y.view(out_shape.span());
}

std::string Linear::extra_repr() const {
  return tb::detail::str_cat("in_features=", in_, ", out_features=", out_,
                             ", bias=", bias_.defined() ? "true" : "false");
}

// ---- convolutional layers -----------------------------------------------------------------------

Conv2d::Conv2d(std::int64_t in_channels, std::int64_t out_channels, std::int64_t kernel,
               std::int64_t stride, std::int64_t padding, bool bias, rng::Generator* gen,
               std::int64_t dilation, std::int64_t groups)
    : Module("Conv2d"),
      in_(in_channels),
      out_(out_channels),
      kernel_(kernel),
      stride_(stride),
      padding_(padding),
      dilation_(dilation),
      groups_(groups) {
  check_positive("Conv2d", "in_channels", in_channels);
  check_positive("Conv2d", "out_channels", out_channels);
  check_positive("Conv2d", "kernel_size", kernel);
  check_positive("Conv2d", "stride", stride);
  check_positive("Conv2d", "dilation", dilation);
  check_positive("Conv2d", "groups", groups);
  TB_CHECK(padding >= 0, "[nn] Conv2d: padding must be >= 0, got ", padding);
  TB_CHECK(in_channels % groups == 0 && out_channels % groups == 0, "[nn] Conv2d: in_channels ",
           in_channels, " and out_channels ", out_channels, " must be divisible by groups ",
           groups);
  weight_ = register_parameter("weight", ops::empty({out_, in_ / groups_, kernel_, kernel_}));
  init::kaiming_uniform_(weight_, std::sqrt(5.0), gen);
  if (bias) {
    bias_ = register_parameter("bias", ops::empty({out_}));
    const double bound =
        1.0 / std::sqrt(static_cast<double>(init::fan_in_and_fan_out(weight_).first));
    init::uniform_(bias_, -bound, bound, gen);
  }
}

Tensor Conv2d::forward(const Tensor& x) {
  TB_CHECK(x.defined(), "[nn] ", describe(), ": input is an undefined tensor");
  TB_CHECK((x.dim() == 4 || x.dim() == 3) && x.size(x.dim() - 3) == in_, "[nn] ", describe(),
           ": input of shape ", shape_str(x), " should be [N, ", in_,
           ", H, W] (in_channels = ", in_, ")");
  return ops::conv2d(x, weight_, bias_, {stride_}, {padding_}, {dilation_}, groups_);
}

std::string Conv2d::extra_repr() const {
  std::string s = tb::detail::str_cat(in_, ", ", out_, ", kernel_size=", kernel_,
                                      ", stride=", stride_, ", padding=", padding_);
  if (dilation_ != 1) s += tb::detail::str_cat(", dilation=", dilation_);
  if (groups_ != 1) s += tb::detail::str_cat(", groups=", groups_);
  if (!bias_.defined()) s += ", bias=false";
  return s;
}

BatchNorm2d::BatchNorm2d(std::int64_t channels, double eps, double momentum, bool affine)
    : Module("BatchNorm2d"), channels_(channels), eps_(eps), momentum_(momentum) {
  check_positive("BatchNorm2d", "num_features", channels);
  TB_CHECK(eps >= 0 && std::isfinite(eps), "[nn] BatchNorm2d: eps must be >= 0, got ", eps);
  TB_CHECK(momentum >= 0 && momentum <= 1, "[nn] BatchNorm2d: momentum must be in [0, 1], got ",
           momentum);
  if (affine) {
    weight_ = register_parameter("weight", ops::ones({channels_}));
    bias_ = register_parameter("bias", ops::zeros({channels_}));
  }
  running_mean_ = register_buffer("running_mean", ops::zeros({channels_}));
  running_var_ = register_buffer("running_var", ops::ones({channels_}));
  num_batches_tracked_ =
      register_buffer("num_batches_tracked", ops::zeros({}, core::ScalarType::Int64));
}

Tensor BatchNorm2d::forward(const Tensor& x) {
  TB_CHECK(x.defined(), "[nn] ", describe(), ": input is an undefined tensor");
  TB_CHECK(x.dim() >= 2 && x.size(1) == channels_, "[nn] ", describe(), ": input of shape ",
           shape_str(x), " should be [N, ", channels_, ", ...] (num_features = ", channels_, ")");
  double factor = momentum_.value_or(0.0);
  if (is_training()) {
    autograd::NoGradGuard no_grad;
    ops::add_(num_batches_tracked_,
              ops::ones({}, core::ScalarType::Int64, num_batches_tracked_.device()));
    // momentum None: the cumulative average (torch.nn.modules.batchnorm, exponential_average_
    // factor = 1 / num_batches_tracked), what update_bn recomputes an average's statistics with.
    if (!momentum_)
      factor = 1.0 / num_batches_tracked_.item();  // item() copies a device's value back
  }
  return ops::batch_norm(x, running_mean_, running_var_, weight_, bias_, is_training(), factor,
                         eps_);
}

void BatchNorm2d::set_momentum(std::optional<double> momentum) {
  TB_CHECK(!momentum || (*momentum >= 0 && *momentum <= 1),
           "[nn] BatchNorm2d: momentum must be in [0, 1], got ", momentum.value_or(0));
  momentum_ = momentum;
}

std::string BatchNorm2d::extra_repr() const {
  return tb::detail::str_cat(channels_, ", eps=", eps_, ", momentum=",
                             momentum_ ? tb::detail::str_cat(*momentum_) : std::string("None"),
                             weight_.defined() ? "" : ", affine=false");
}

Pool2d::Pool2d(bool max, std::int64_t kernel, std::int64_t stride, std::int64_t padding)
    : Module(max ? "MaxPool2d" : "AvgPool2d"),
      max_(max),
      kernel_(kernel),
      stride_(stride == 0 ? kernel : stride),
      padding_(padding) {
  check_positive(max ? "MaxPool2d" : "AvgPool2d", "kernel_size", kernel);
  check_positive(max ? "MaxPool2d" : "AvgPool2d", "stride", stride_);
}

Tensor Pool2d::forward(const Tensor& x) {
  TB_CHECK(x.defined() && (x.dim() == 4 || x.dim() == 3), "[nn] ", describe(),
           ": expects an input [N, C, H, W], got shape ",
           x.defined() ? shape_str(x) : std::string("undefined"));
  return max_ ? ops::max_pool2d(x, {kernel_}, {stride_}, {padding_})
              : ops::avg_pool2d(x, {kernel_}, {stride_}, {padding_});
}

std::string Pool2d::extra_repr() const {
  return tb::detail::str_cat("kernel_size=", kernel_, ", stride=", stride_, ", padding=", padding_);
}

AdaptiveAvgPool2d::AdaptiveAvgPool2d(std::int64_t out_h, std::int64_t out_w)
    : Module("AdaptiveAvgPool2d"), out_h_(out_h), out_w_(out_w) {
  check_positive("AdaptiveAvgPool2d", "output height", out_h);
  check_positive("AdaptiveAvgPool2d", "output width", out_w);
}

Tensor AdaptiveAvgPool2d::forward(const Tensor& x) {
  TB_CHECK(x.defined() && (x.dim() == 4 || x.dim() == 3), "[nn] ", describe(),
           ": expects an input [N, C, H, W], got shape ",
           x.defined() ? shape_str(x) : std::string("undefined"));
  return ops::adaptive_avg_pool2d(x, {out_h_, out_w_});
}

std::string AdaptiveAvgPool2d::extra_repr() const {
  return tb::detail::str_cat("output_size=(", out_h_, ", ", out_w_, ")");
}

Flatten::Flatten() : Module("Flatten") {}

Tensor Flatten::forward(const Tensor& x) {
  TB_CHECK(x.defined() && x.dim() >= 1, "[nn] ", describe(),
           ": expects an input with a batch dimension");
  std::int64_t features = 1;  // explicit, so that an empty batch flattens too
  for (std::int64_t d = 1; d < x.dim(); ++d)
    features *= x.size(d);
  return x.reshape({x.size(0), features});
}

// ---- Embedding ----------------------------------------------------------------------------------

Embedding::Embedding(std::int64_t num_embeddings, std::int64_t embedding_dim, rng::Generator* gen)
    : Module("Embedding"), num_(num_embeddings), dim_(embedding_dim) {
  check_positive("Embedding", "num_embeddings", num_embeddings);
  check_positive("Embedding", "embedding_dim", embedding_dim);
  weight_ = register_parameter("weight", ops::empty({num_, dim_}));
  init::normal_(weight_, 0.0, 1.0, gen);
}

Tensor Embedding::forward(const Tensor& indices) {
  TB_CHECK(indices.defined(), "[nn] ", describe(), ": input is an undefined tensor");
  TB_CHECK_T(TypeError, indices.dtype() == core::ScalarType::Int64, "[nn] ", describe(),
             ": indices must be int64, got ", indices.dtype());
  const Tensor flat = indices.reshape({-1});
  if (flat.numel() > 0 && flat.device().is_cpu()) {
    const Tensor c = flat.contiguous();
    const auto* p = c.data_ptr<std::int64_t>();
    for (std::int64_t i = 0; i < c.numel(); ++i) {
      TB_CHECK_T(IndexError, p[i] >= 0 && p[i] < num_, "[nn] ", describe(), ": index ", p[i],
                 " is out of range for num_embeddings=", num_);
    }
  }
  DimVector out_shape(indices.sizes());
  out_shape.push_back(dim_);
  return ops::index_select(weight_, 0, flat).view(out_shape.span());
}

std::string Embedding::extra_repr() const {
  return tb::detail::str_cat("num_embeddings=", num_, ", embedding_dim=", dim_);
}

// ---- norms --------------------------------------------------------------------------------------

LayerNorm::LayerNorm(std::int64_t dim, double eps, bool affine, bool bias)
    : Module("LayerNorm"), dim_(dim), eps_(eps) {
  check_positive("LayerNorm", "dim", dim);
  TB_CHECK(eps > 0, "[nn] LayerNorm: eps must be positive, got ", eps);
  if (affine) {
    weight_ = register_parameter("weight", ops::ones({dim_}));
    if (bias) bias_ = register_parameter("bias", ops::zeros({dim_}));
  }
}

Tensor LayerNorm::forward(const Tensor& x) {
  check_features(*this, "normalized dim", x, dim_);
  return ops::layer_norm(x, weight_, bias_, eps_);  // fused: one pass per row
}

std::string LayerNorm::extra_repr() const {
  return tb::detail::str_cat("dim=", dim_, ", eps=", eps_);
}

RMSNorm::RMSNorm(std::int64_t dim, double eps) : Module("RMSNorm"), dim_(dim), eps_(eps) {
  check_positive("RMSNorm", "dim", dim);
  TB_CHECK(eps > 0, "[nn] RMSNorm: eps must be positive, got ", eps);
  weight_ = register_parameter("weight", ops::ones({dim_}));
}

Tensor RMSNorm::forward(const Tensor& x) {
  check_features(*this, "normalized dim", x, dim_);
  return ops::rms_norm(x, weight_, eps_);  // fused: one pass per row
}

std::string RMSNorm::extra_repr() const {
  return tb::detail::str_cat("dim=", dim_, ", eps=", eps_);
}

// ---- Dropout ------------------------------------------------------------------------------------

Dropout::Dropout(double p, rng::Generator* gen) : Module("Dropout"), p_(p), gen_(gen) {
  TB_CHECK(p >= 0.0 && p <= 1.0, "[nn] Dropout: p must be in [0, 1], got ", p);
}

namespace {
thread_local const BatchShard* t_batch_shard = nullptr;
}  // namespace

ScopedBatchShard::ScopedBatchShard(const BatchShard& shard)
    : previous_(t_batch_shard), shard_(shard) {
  t_batch_shard = &shard_;
}

ScopedBatchShard::~ScopedBatchShard() {
  t_batch_shard = previous_;
}

const BatchShard* current_batch_shard() {
  return t_batch_shard;
}

Tensor Dropout::forward(const Tensor& x) {
  if (!is_training() || p_ == 0.0) return x;
  if (p_ == 1.0) return ops::mul(x, 0.0);
  Tensor mask;
  {
    autograd::NoGradGuard no_grad;
    // Data-parallel: the global batch's mask, this process's rows of it.
    const BatchShard* shard = current_batch_shard();
    const bool sliced = shard != nullptr && x.dim() >= 1 && x.size(0) == shard->rows &&
                        shard->global_rows != shard->rows;
    DimVector shape(x.sizes());
    if (sliced) shape[0] = shard->global_rows;
    if (gen_ != nullptr && gen_->device() != x.device()) {
      // The model's generator is a CPU one (so a run draws the same masks on every device):
      // draw the mask where the generator lives, then move it.
      Tensor host = ops::empty(shape, x.dtype(), gen_->device());
      ops::bernoulli_(host, 1.0 - p_, gen_);
      if (sliced) host = host.narrow(0, shard->offset, shard->rows).contiguous();
      mask = host.to(x.device());
    } else {
      mask = ops::empty(shape, x.dtype(), x.device());
      ops::bernoulli_(mask, 1.0 - p_, gen_);
      if (sliced) mask = mask.narrow(0, shard->offset, shard->rows).contiguous();
    }
  }
  return ops::mul(x, ops::mul(mask, 1.0 / (1.0 - p_)));
}

std::string Dropout::extra_repr() const {
  return tb::detail::str_cat("p=", p_);
}

// ---- activations --------------------------------------------------------------------------------

ActivationKind parse_activation(const std::string& name) {
  if (name == "relu") return ActivationKind::ReLU;
  if (name == "gelu") return ActivationKind::GELU;
  if (name == "silu") return ActivationKind::SiLU;
  if (name == "tanh") return ActivationKind::Tanh;
  throw ValueError("[nn] unknown activation '" + name + "' (choose relu, gelu, silu or tanh)");
}

const char* activation_name(ActivationKind kind) {
  switch (kind) {
    case ActivationKind::ReLU:
      return "relu";
    case ActivationKind::GELU:
      return "gelu";
    case ActivationKind::SiLU:
      return "silu";
    case ActivationKind::Tanh:
      return "tanh";
  }
  return "?";
}

namespace {
const char* activation_type(ActivationKind kind) {
  switch (kind) {
    case ActivationKind::ReLU:
      return "ReLU";
    case ActivationKind::GELU:
      return "GELU";
    case ActivationKind::SiLU:
      return "SiLU";
    case ActivationKind::Tanh:
      return "Tanh";
  }
  return "?";
}
}  // namespace

Activation::Activation(ActivationKind kind) : Module(activation_type(kind)), kind_(kind) {}

Tensor Activation::forward(const Tensor& x) {
  switch (kind_) {
    case ActivationKind::ReLU:
      return ops::relu(x);
    case ActivationKind::GELU:
      return ops::gelu(x);
    case ActivationKind::SiLU:
      return ops::silu(x);
    case ActivationKind::Tanh:
      return ops::tanh(x);
  }
  return x;
}

// ---- losses -------------------------------------------------------------------------------------

Tensor cross_entropy(const Tensor& logits, const Tensor& target, std::int64_t ignore_index,
                     double label_smoothing) {
  TB_CHECK(logits.defined() && target.defined(), "[cross_entropy] undefined input or target");
  TB_CHECK(logits.dim() >= 1 && target.dim() == logits.dim() - 1,
           "[cross_entropy] logits of shape ", shape_str(logits), " and target of shape ",
           shape_str(target),
           " do not match (target must be logits' shape without the class "
           "dimension)");
  for (std::int64_t d = 0; d < target.dim(); ++d) {
    TB_CHECK(target.size(d) == logits.size(d), "[cross_entropy] logits of shape ",
             shape_str(logits), " and target of shape ", shape_str(target), " differ in dimension ",
             d);
  }
  const std::int64_t c = logits.size(-1);
  return ops::cross_entropy(logits.reshape({-1, c}), target.reshape({-1}), ignore_index,
                            label_smoothing);
}

Tensor mse_loss(const Tensor& input, const Tensor& target) {
  TB_CHECK(input.defined() && target.defined(), "[mse_loss] undefined input or target");
  TB_CHECK(DimVector(input.sizes()) == DimVector(target.sizes()), "[mse_loss] input of shape ",
           shape_str(input), " and target of shape ", shape_str(target), " differ");
  return ops::mean(ops::square(ops::sub(input, target)));
}

}  // namespace tb::nn
