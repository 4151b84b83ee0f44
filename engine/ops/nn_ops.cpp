// Fused neural-network ops: rotary position embedding and cross-entropy (log-softmax + NLL with
// ignore_index and label smoothing). Checks here; kernels in engine/backends/<device>/.
#include <cmath>

#include "engine/ops/op_common.h"
#include "engine/ops/op_signatures.h"
#include "engine/ops/ops.h"

namespace tb::ops {

using core::DimVector;
using detail::check_defined;
using detail::check_same_device;
using dispatch::Dispatcher;

namespace {

void check_rope_args(const Tensor& x, const Tensor& cos, const Tensor& sin) {
  check_defined("rope", x, "self");
  check_defined("rope", cos, "cos");
  check_defined("rope", sin, "sin");
  TB_CHECK_T(TypeError, core::is_floating_point(x.dtype()),
             "[rope] expects a floating-point tensor, got ", x.dtype());
  TB_CHECK(x.dim() >= 2, "[rope] input must have at least 2 dimensions [..., T, D], got shape ",
           DimVector(x.sizes()));
  const std::int64_t t = x.size(-2);
  const std::int64_t d = x.size(-1);
  TB_CHECK(d % 2 == 0, "[rope] the last dimension (head size) must be even, got ", d);
  for (const Tensor* c : {&cos, &sin}) {
    const char* name = c == &cos ? "cos" : "sin";
    TB_CHECK(c->dim() == 2 && c->size(0) == t && c->size(1) == d / 2, "[rope] ", name,
             " must have shape [", t, ", ", d / 2, "] for an input of shape ", DimVector(x.sizes()),
             ", got ", DimVector(c->sizes()));
    check_same_device("rope", x, *c);
  }
}

void check_cross_entropy_args(const Tensor& logits, const Tensor& target, double smoothing) {
  check_defined("cross_entropy", logits, "input");
  check_defined("cross_entropy", target, "target");
  TB_CHECK_T(TypeError, core::is_floating_point(logits.dtype()),
             "[cross_entropy] expects floating-point logits, got ", logits.dtype());
  TB_CHECK_T(TypeError, target.dtype() == core::ScalarType::Int64,
             "[cross_entropy] target must hold int64 class indices, got ", target.dtype());
  TB_CHECK(logits.dim() == 2,
           "[cross_entropy] logits must have shape [N, C] (flatten batch and time first), got ",
           DimVector(logits.sizes()));
  TB_CHECK(target.dim() == 1 && target.size(0) == logits.size(0),
           "[cross_entropy] target of shape ", DimVector(target.sizes()),
           " does not match logits of shape ", DimVector(logits.sizes()), " (expected [",
           logits.size(0), "])");
  TB_CHECK(logits.size(1) > 0, "[cross_entropy] logits have no classes (shape ",
           DimVector(logits.sizes()), ")");
  TB_CHECK(smoothing >= 0.0 && smoothing <= 1.0,
           "[cross_entropy] label_smoothing must be in [0, 1], got ", smoothing);
  check_same_device("cross_entropy", logits, target);
}

}  // namespace

Tensor rope(const Tensor& x, const Tensor& cos, const Tensor& sin) {
  static const auto op = Dispatcher::singleton().typed<sig::Ternary>("rope");
  check_rope_args(x, cos, sin);
  return op.call(x, cos, sin);
}

Tensor cross_entropy(const Tensor& logits, const Tensor& target, std::int64_t ignore_index,
                     double label_smoothing) {
  static const auto op = Dispatcher::singleton().typed<sig::CrossEntropy>("cross_entropy");
  check_cross_entropy_args(logits, target, label_smoothing);
  return op.call(logits, target, ignore_index, label_smoothing);
}

Tensor cross_entropy_backward(const Tensor& grad, const Tensor& logits, const Tensor& target,
                              std::int64_t ignore_index, double label_smoothing) {
  static const auto op =
      Dispatcher::singleton().typed<sig::CrossEntropyBackward>("cross_entropy_backward");
  check_cross_entropy_args(logits, target, label_smoothing);
  check_defined("cross_entropy_backward", grad, "grad");
  TB_CHECK(grad.numel() == 1, "[cross_entropy_backward] grad must have one element, got shape ",
           DimVector(grad.sizes()));
  return op.call(grad, logits, target, ignore_index, label_smoothing);
}

}  // namespace tb::ops
