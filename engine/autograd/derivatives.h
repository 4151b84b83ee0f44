// The derivative table: one backward rule per differentiable operator, keyed by op name.
// Every derivative rule of the engine lives in derivatives.cpp; a coverage test fails when a
// differentiable op has none.
#pragma once

#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "engine/core/tensor.h"
#include "engine/dispatch/ivalue.h"

namespace tb::autograd {

using core::Tensor;

/// What a rule sees: the forward op's boxed arguments and outputs (tensors detached), the
/// gradients of its outputs, and which arguments need a gradient.
struct GradContext {
  const dispatch::Stack& args;         ///< forward arguments, in signature order
  const std::vector<Tensor>& outputs;  ///< forward outputs
  const std::vector<Tensor>& grads;    ///< d(loss)/d(output k); never undefined (zeros filled in)
  const std::vector<bool>& needs;      ///< needs[i]: argument i is a tensor that needs a gradient

  /// Argument i as a tensor.
  const Tensor& tensor(std::size_t i) const { return args[i].tensor(); }
  /// Argument i as a double / int64 / bool / int list / Scalar.
  double real(std::size_t i) const;
  std::int64_t integer(std::size_t i) const;
  bool flag(std::size_t i) const;
  const std::vector<std::int64_t>& ints(std::size_t i) const;
  const core::Scalar& scalar(std::size_t i) const;
  /// The gradient of the only (or first) output.
  const Tensor& grad() const { return grads[0]; }
};

/// Returns one gradient per forward argument (undefined for non-tensors and for arguments that
/// need none). Each gradient has its argument's shape and dtype.
using DerivativeRule = std::function<std::vector<Tensor>(const GradContext&)>;

/// The rule for `op`, or null when the table has none.
const DerivativeRule* find_derivative(std::string_view op);
/// Names of every op that has a rule.
std::vector<std::string> ops_with_derivatives();

/// `grad` summed down to `shape` (undoes broadcasting).
Tensor sum_to(const Tensor& grad, core::IntList shape);

}  // namespace tb::autograd
