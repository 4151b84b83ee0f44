#include "engine/nn/init.h"

#include <cmath>

#include "engine/autograd/autograd.h"
#include "engine/core/error.h"
#include "engine/ops/ops.h"

namespace tb::nn::init {

namespace {
thread_local bool skip_init = false;
}  // namespace

SkipInitGuard::SkipInitGuard() : previous_(skip_init) {
  skip_init = true;
}

SkipInitGuard::~SkipInitGuard() {
  skip_init = previous_;
}

bool init_skipped() {
  return skip_init;
}

std::pair<std::int64_t, std::int64_t> fan_in_and_fan_out(const Tensor& t) {
  TB_CHECK(t.dim() >= 2,
           "[nn.init] fan in and fan out need a tensor with at least 2 dimensions, "
           "got shape ",
           core::DimVector(t.sizes()));
  std::int64_t receptive = 1;
  for (std::int64_t d = 2; d < t.dim(); ++d)
    receptive *= t.size(d);
  return {t.size(1) * receptive, t.size(0) * receptive};
}

Tensor uniform_(const Tensor& t, double low, double high, rng::Generator* gen) {
  if (skip_init) return t;
  autograd::NoGradGuard no_grad;
  Tensor x = t;
  ops::uniform_(x, low, high, gen);
  return t;
}

Tensor normal_(const Tensor& t, double mean, double std, rng::Generator* gen) {
  if (skip_init) return t;
  autograd::NoGradGuard no_grad;
  Tensor x = t;
  ops::normal_(x, mean, std, gen);
  return t;
}

Tensor constant_(const Tensor& t, double value) {
  if (skip_init) return t;
  autograd::NoGradGuard no_grad;
  Tensor x = t;
  x.fill_(value);
  return t;
}

Tensor kaiming_uniform_(const Tensor& t, double a, rng::Generator* gen) {
  // Same arithmetic as torch.nn.init (Python floats are doubles), so the bound is bit-equal.
  const auto fan = static_cast<double>(fan_in_and_fan_out(t).first);
  TB_CHECK(fan > 0, "[nn.init] kaiming_uniform_ on a tensor with zero fan-in (shape ",
           core::DimVector(t.sizes()), ")");
  const double gain = std::sqrt(2.0 / (1 + a * a));
  const double std = gain / std::sqrt(fan);
  const double bound = std::sqrt(3.0) * std;
  return uniform_(t, -bound, bound, gen);
}

}  // namespace tb::nn::init
