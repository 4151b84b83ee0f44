// gradcheck: Jacobians by autograd (one backward per output element) vs central differences.
#include "engine/autograd/gradcheck.h"

#include <cmath>
#include <sstream>

#include "engine/autograd/autograd.h"
#include "engine/core/error.h"
#include "engine/ops/ops.h"

namespace tb::autograd {

using core::Tensor;

GradcheckResult gradcheck(const std::function<Tensor(const std::vector<Tensor>&)>& f,
                          const std::vector<Tensor>& inputs, double eps, double atol, double rtol) {
  for (const auto& x : inputs) {
    TB_CHECK_T(TypeError,
               !x.requires_grad() || (x.dtype() == core::ScalarType::Float64 &&
                                      x.device().is_cpu() && x.is_contiguous()),
               "[gradcheck] inputs that require grad must be contiguous float64 CPU tensors, got ",
               x.dtype(), " on ", x.device());
  }
  GradcheckResult result;
  const Tensor out0 = f(inputs);
  TB_CHECK(out0.requires_grad(), "[gradcheck] the function's output does not require grad");
  const std::int64_t n_out = out0.numel();

  // Analytic Jacobian rows: d out[j] / d inputs, one backward per output element.
  std::vector<std::vector<std::vector<double>>> analytic(inputs.size());  // [input][j][i]
  for (std::int64_t j = 0; j < n_out; ++j) {
    for (const auto& x : inputs) {
      if (x.requires_grad()) zero_grad(x);
    }
    const Tensor out = f(inputs);
    Tensor seed = ops::zeros(out.sizes(), out.dtype());
    seed.reshape({n_out}).select(0, j).fill_(1.0);
    backward(out, seed);
    for (std::size_t k = 0; k < inputs.size(); ++k) {
      if (!inputs[k].requires_grad()) continue;
      const Tensor g = grad(inputs[k]);
      analytic[k].push_back(
          g.defined() ? g.to_vector<double>()
                      : std::vector<double>(static_cast<std::size_t>(inputs[k].numel()), 0.0));
    }
  }
  // Numeric Jacobian columns, compared entry by entry.
  NoGradGuard no_grad;
  for (std::size_t k = 0; k < inputs.size(); ++k) {
    if (!inputs[k].requires_grad()) continue;
    double* data = static_cast<double*>(inputs[k].data_ptr());
    for (std::int64_t i = 0; i < inputs[k].numel(); ++i) {
      const double saved = data[i];
      data[i] = saved + eps;
      const auto plus = f(inputs).to_vector<double>();
      data[i] = saved - eps;
      const auto minus = f(inputs).to_vector<double>();
      data[i] = saved;
      for (std::int64_t j = 0; j < n_out; ++j) {
        const double numeric =
            (plus[static_cast<std::size_t>(j)] - minus[static_cast<std::size_t>(j)]) / (2 * eps);
        const double ana = analytic[k][static_cast<std::size_t>(j)][static_cast<std::size_t>(i)];
        const double err = std::abs(ana - numeric);
        result.max_abs_error = std::max(result.max_abs_error, err);
        if (result.ok && !(err <= atol + rtol * std::abs(numeric))) {
          std::ostringstream os;
          os << "input " << k << " element " << i << ", output element " << j << ": analytic "
             << ana << " vs numeric " << numeric;
          result.ok = false;
          result.message = os.str();
        }
      }
    }
  }
  return result;
}

}  // namespace tb::autograd
