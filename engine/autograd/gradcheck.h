// gradcheck: compares autograd's gradients with central finite differences (in float64).
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "engine/core/tensor.h"

namespace tb::autograd {

/// Outcome of a gradient check.
struct GradcheckResult {
  bool ok = true;
  double max_abs_error = 0.0;  ///< largest |analytic - numeric| over all Jacobian entries
  std::string message;         ///< where the first mismatch is, when !ok
};

/// Checks d f(inputs) / d inputs for every input that requires grad. Inputs must be float64 CPU
/// tensors (the check perturbs their elements in place and restores them). f must be
/// deterministic and return one tensor. Passes when |analytic - numeric| <= atol + rtol*|numeric|
/// for every entry.
GradcheckResult gradcheck(const std::function<core::Tensor(const std::vector<core::Tensor>&)>& f,
                          const std::vector<core::Tensor>& inputs, double eps = 1e-6,
                          double atol = 1e-5, double rtol = 1e-3);

}  // namespace tb::autograd
