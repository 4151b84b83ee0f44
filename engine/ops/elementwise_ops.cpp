// Elementwise ops: argument checks, dtype promotion, then the dispatcher.
#include <algorithm>
#include <cmath>

#include "engine/dispatch/op_signatures.h"
#include "engine/ops/op_common.h"
#include "engine/ops/ops.h"

namespace tb::ops {

using dispatch::Dispatcher;

// ---- result types (PyTorch's ResultTypeState: dim tensors > 0-d tensors > wrapped scalars) ------

namespace {

enum class Category { Bool = 0, Integral = 1, Floating = 2 };

Category category(ScalarType t) {
  if (t == ScalarType::Bool) return Category::Bool;
  return core::is_floating_point(t) ? Category::Floating : Category::Integral;
}

// combine_categories(higher, lower) from PyTorch: a higher-priority operand keeps its dtype
// unless the lower-priority one is of a higher category.
std::optional<ScalarType> combine(std::optional<ScalarType> higher,
                                  std::optional<ScalarType> lower) {
  if (!higher) return lower;
  if (!lower) return higher;
  if (core::is_floating_point(*higher)) return higher;
  if (*higher == ScalarType::Bool || core::is_floating_point(*lower)) {
    return core::promote_types(*higher, *lower);
  }
  return higher;
}

std::optional<ScalarType> promote_opt(std::optional<ScalarType> a, ScalarType b) {
  return a ? core::promote_types(*a, b) : b;
}

}  // namespace

ScalarType result_type(const Tensor& a, const Tensor& b) {
  std::optional<ScalarType> dim_result;
  std::optional<ScalarType> zero_result;
  for (const Tensor* t : {&a, &b}) {
    if (t->dim() > 0) {
      dim_result = promote_opt(dim_result, t->dtype());
    } else {
      zero_result = promote_opt(zero_result, t->dtype());
    }
  }
  return *combine(dim_result, zero_result);
}

ScalarType result_type(const Tensor& a, const Scalar& b) {
  const ScalarType wrapped = b.default_dtype();
  if (category(wrapped) > category(a.dtype())) return wrapped;
  return a.dtype();
}

namespace detail {

void check_defined(const char* op, const Tensor& t, const char* arg) {
  TB_CHECK(t.defined(), "[", op, "] argument '", arg, "' is an undefined tensor");
}

void check_same_device(const char* op, const Tensor& a, const Tensor& b) {
  TB_CHECK_T(TypeError, a.device() == b.device(), "[", op,
             "] expected all tensors on the same device, got ", a.device(), " and ", b.device());
}

bool device_has_kernel(const char* op, const core::Device& device) {
  const auto key = dispatch::backend_key(device.type());
  return Dispatcher::singleton().find(op).entry().computed(key).source !=
         dispatch::KernelSource::Missing;
}

Tensor cast_if_needed(const Tensor& t, ScalarType dtype) {
  return t.dtype() == dtype ? t : to_dtype(t, dtype);
}

}  // namespace detail

using detail::cast_if_needed;
using detail::check_defined;
using detail::check_same_device;

namespace {

bool same_sizes(const Tensor& a, const Tensor& b) {
  const auto sa = a.sizes();
  const auto sb = b.sizes();
  return sa.size() == sb.size() && std::equal(sa.begin(), sa.end(), sb.begin());
}

// Checks and promotes two operands of a binary op; returns them in the common dtype.
std::pair<Tensor, Tensor> prepare_binary(const char* op, const Tensor& a, const Tensor& b,
                                         ScalarType dtype) {
  check_defined(op, a, "self");
  check_defined(op, b, "other");
  check_same_device(op, a, b);
  if (!same_sizes(a, b)) core::broadcast_shapes(a.sizes(), b.sizes(), op);  // validates
  return {cast_if_needed(a, dtype), cast_if_needed(b, dtype)};
}

ScalarType float_result(ScalarType t) {
  return core::is_floating_point(t) ? t : ScalarType::Float32;
}

// A float alpha would be truncated by the integer kernels: refuse it, as PyTorch does.
void check_alpha(const char* op, const Scalar& alpha, ScalarType dt) {
  TB_CHECK_T(TypeError, !(alpha.is_floating_point() && !core::is_floating_point(dt)), "[", op,
             "] alpha ", alpha, " must be an integer for integer inputs (", dt, ")");
}

// In-place ops store into self: a result type of a higher category cannot be cast down.
void check_inplace_result(const char* op, const Tensor& self, ScalarType dt) {
  TB_CHECK_T(
      TypeError,
      dt == self.dtype() || core::is_floating_point(self.dtype()) || !core::is_floating_point(dt),
      "[", op, "] result type ", dt, " cannot be cast to self's dtype ", self.dtype(), " in place");
}

}  // namespace

Tensor add(const Tensor& a, const Tensor& b, const Scalar& alpha) {
  static const auto op = Dispatcher::singleton().typed<sig::BinaryAlpha>("add");
  const ScalarType dt = result_type(a, b);
  check_alpha("add", alpha, dt);
  auto [x, y] = prepare_binary("add", a, b, dt);
  return op.call(x, y, alpha);
}

Tensor sub(const Tensor& a, const Tensor& b, const Scalar& alpha) {
  static const auto op = Dispatcher::singleton().typed<sig::BinaryAlpha>("sub");
  const ScalarType dt = result_type(a, b);
  TB_CHECK_T(TypeError, dt != ScalarType::Bool,
             "[sub] subtraction of bool tensors is not supported; use logical ops");
  check_alpha("sub", alpha, dt);
  auto [x, y] = prepare_binary("sub", a, b, dt);
  return op.call(x, y, alpha);
}

Tensor div(const Tensor& a, const Tensor& b) {
  static const auto op = Dispatcher::singleton().typed<sig::Binary>("div");
  auto [x, y] = prepare_binary("div", a, b, float_result(result_type(a, b)));
  return op.call(x, y);
}

Tensor gelu_tanh_backward(const Tensor& grad, const Tensor& x) {
  static const auto op = Dispatcher::singleton().typed<sig::Binary>("gelu_tanh_backward");
  auto [g, y] = prepare_binary("gelu_tanh_backward", grad, x, float_result(result_type(grad, x)));
  return op.call(g, y);
}

Tensor silu_backward(const Tensor& grad, const Tensor& x) {
  static const auto op = Dispatcher::singleton().typed<sig::Binary>("silu_backward");
  auto [g, y] = prepare_binary("silu_backward", grad, x, float_result(result_type(grad, x)));
  return op.call(g, y);
}

Tensor relu_backward(const Tensor& grad, const Tensor& x) {
  static const auto op = Dispatcher::singleton().typed<sig::Binary>("relu_backward");
  auto [g, y] = prepare_binary("relu_backward", grad, x, result_type(grad, x));
  return op.call(g, y);
}

#define TB_BINARY_SAME_TYPE(name)                                             \
  Tensor name(const Tensor& a, const Tensor& b) {                             \
    static const auto op = Dispatcher::singleton().typed<sig::Binary>(#name); \
    auto [x, y] = prepare_binary(#name, a, b, result_type(a, b));             \
    return op.call(x, y);                                                     \
  }
TB_BINARY_SAME_TYPE(mul)
TB_BINARY_SAME_TYPE(pow)
TB_BINARY_SAME_TYPE(maximum)
TB_BINARY_SAME_TYPE(minimum)
#undef TB_BINARY_SAME_TYPE

#define TB_COMPARE(name)                                                      \
  Tensor name(const Tensor& a, const Tensor& b) {                             \
    static const auto op = Dispatcher::singleton().typed<sig::Binary>(#name); \
    auto [x, y] = prepare_binary(#name, a, b, result_type(a, b));             \
    return op.call(x, y);                                                     \
  }
TB_COMPARE_OPS(TB_COMPARE)
#undef TB_COMPARE

Tensor add(const Tensor& a, const Scalar& b) {
  check_defined("add", a, "self");
  return add(a, scalar_tensor(b, result_type(a, b), a.device()));
}
Tensor sub(const Tensor& a, const Scalar& b) {
  check_defined("sub", a, "self");
  return sub(a, scalar_tensor(b, result_type(a, b), a.device()));
}
Tensor mul(const Tensor& a, const Scalar& b) {
  check_defined("mul", a, "self");
  return mul(a, scalar_tensor(b, result_type(a, b), a.device()));
}
Tensor div(const Tensor& a, const Scalar& b) {
  check_defined("div", a, "self");
  return div(a, scalar_tensor(b, result_type(a, b), a.device()));
}
Tensor pow(const Tensor& a, const Scalar& b) {
  check_defined("pow", a, "self");
  return pow(a, scalar_tensor(b, result_type(a, b), a.device()));
}

#define TB_UNARY_KEEP(name)                                                  \
  Tensor name(const Tensor& a) {                                             \
    static const auto op = Dispatcher::singleton().typed<sig::Unary>(#name); \
    check_defined(#name, a, "self");                                         \
    return op.call(a);                                                       \
  }
TB_UNARY_KEEP_DTYPE_OPS(TB_UNARY_KEEP)
#undef TB_UNARY_KEEP

#define TB_UNARY_FLOAT(name)                                                 \
  Tensor name(const Tensor& a) {                                             \
    static const auto op = Dispatcher::singleton().typed<sig::Unary>(#name); \
    check_defined(#name, a, "self");                                         \
    return op.call(cast_if_needed(a, float_result(a.dtype())));              \
  }
TB_UNARY_FLOAT_OPS(TB_UNARY_FLOAT)
#undef TB_UNARY_FLOAT

Tensor& add_(Tensor& a, const Tensor& b, const Scalar& alpha) {
  static const auto op = Dispatcher::singleton().typed<sig::InplaceBinaryAlpha>("add_");
  check_defined("add_", a, "self");
  check_defined("add_", b, "other");
  check_same_device("add_", a, b);
  const auto shape = core::broadcast_shapes(a.sizes(), b.sizes(), "add_");
  TB_CHECK(shape == core::DimVector(a.sizes()), "[add_] other of shape ",
           core::DimVector(b.sizes()), " cannot be broadcast to self's shape ",
           core::DimVector(a.sizes()), " in place");
  const ScalarType dt = result_type(a, b);
  check_inplace_result("add_", a, dt);
  check_alpha("add_", alpha, a.dtype());
  op.call(a, cast_if_needed(b, a.dtype()), alpha);
  a.impl()->version++;
  return a;
}

Tensor& mul_(Tensor& a, const Tensor& b) {
  static const auto op = Dispatcher::singleton().typed<sig::InplaceBinary>("mul_");
  check_defined("mul_", a, "self");
  check_defined("mul_", b, "other");
  check_same_device("mul_", a, b);
  const auto shape = core::broadcast_shapes(a.sizes(), b.sizes(), "mul_");
  TB_CHECK(shape == core::DimVector(a.sizes()), "[mul_] other of shape ",
           core::DimVector(b.sizes()), " cannot be broadcast to self's shape ",
           core::DimVector(a.sizes()), " in place");
  check_inplace_result("mul_", a, result_type(a, b));
  op.call(a, cast_if_needed(b, a.dtype()));
  a.impl()->version++;
  return a;
}

Tensor& mul_(Tensor& a, const Scalar& b) {
  check_defined("mul_", a, "self");
  // The scalar's own category counts (int tensor *= 2.5 is refused, not truncated to 2).
  return mul_(a, scalar_tensor(b, result_type(a, b), a.device()));
}

Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b) {
  static const auto op = Dispatcher::singleton().typed<sig::Ternary>("where");
  check_defined("where", cond, "condition");
  TB_CHECK_T(TypeError, cond.dtype() == ScalarType::Bool, "[where] condition must be bool, got ",
             cond.dtype());
  check_same_device("where", cond, a);
  auto [x, y] = prepare_binary("where", a, b, result_type(a, b));
  core::broadcast_shapes(cond.sizes(), core::broadcast_shapes(a.sizes(), b.sizes(), "where").span(),
                         "where");
  return op.call(cond, x, y);
}

Tensor masked_fill(const Tensor& t, const Tensor& mask, const Scalar& value) {
  static const auto op = Dispatcher::singleton().typed<sig::MaskedFill>("masked_fill");
  check_defined("masked_fill", t, "self");
  check_defined("masked_fill", mask, "mask");
  TB_CHECK_T(TypeError, mask.dtype() == ScalarType::Bool, "[masked_fill] mask must be bool, got ",
             mask.dtype());
  check_same_device("masked_fill", t, mask);
  const auto shape = core::broadcast_shapes(t.sizes(), mask.sizes(), "masked_fill");
  TB_CHECK(shape == core::DimVector(t.sizes()), "[masked_fill] mask of shape ",
           core::DimVector(mask.sizes()), " does not broadcast to self's shape ",
           core::DimVector(t.sizes()));
  TB_CHECK_T(TypeError, !(value.is_floating_point() && !core::is_floating_point(t.dtype())),
             "[masked_fill] cannot fill a ", t.dtype(), " tensor with the float value ", value);
  return op.call(t, mask, value);
}

}  // namespace tb::ops
