// The derivative table: every backward rule of the engine, keyed by dispatcher op name.
// Rules run under no-grad and are written with the public ops, so they work on every device
// whose kernels exist. Notation: g = gradient of the output, x/y = the op's tensor arguments.
#include "engine/autograd/derivatives.h"

#include <cmath>
#include <numbers>
#include <unordered_map>

#include "engine/core/error.h"
#include "engine/ops/ops.h"

namespace tb::autograd {

using core::DimVector;
using core::IntList;

double GradContext::real(std::size_t i) const {
  return std::get<double>(args[i].v);
}
std::int64_t GradContext::integer(std::size_t i) const {
  return std::get<std::int64_t>(args[i].v);
}
bool GradContext::flag(std::size_t i) const {
  return std::get<bool>(args[i].v);
}
const std::vector<std::int64_t>& GradContext::ints(std::size_t i) const {
  return std::get<std::vector<std::int64_t>>(args[i].v);
}
const core::Scalar& GradContext::scalar(std::size_t i) const {
  return std::get<core::Scalar>(args[i].v);
}

Tensor sum_to(const Tensor& grad, IntList shape) {
  const auto gs = grad.sizes();
  if (gs.size() == shape.size() && std::equal(gs.begin(), gs.end(), shape.begin())) return grad;
  const std::size_t lead = gs.size() - shape.size();
  std::vector<std::int64_t> dims;
  for (std::size_t i = 0; i < gs.size(); ++i) {
    if (i < lead || (shape[i - lead] == 1 && gs[i] != 1))
      dims.push_back(static_cast<std::int64_t>(i));
  }
  Tensor r = dims.empty() ? grad : ops::sum(grad, dims, true);
  return r.reshape(shape);
}

namespace {

using Grads = std::vector<Tensor>;
using ops::mul;

// Grad of a reduction's output, shaped to broadcast against the input again.
Tensor unreduce(const Tensor& g, const Tensor& x, const std::vector<std::int64_t>& dims,
                bool keepdim) {
  Tensor r = g;
  if (!keepdim && x.dim() > 0) {
    for (auto d : dims)
      r = r.unsqueeze(d);  // dims are sorted ascending
  }
  return r.expand(x.sizes());
}

// The gradient of b in a @ b given the output gradient g: aᵀ·g. When b is stored transposed
// (nn.Linear's weight.t()), (gᵀ·a)ᵀ is the same product in b's own layout, so the gradient that
// flows back through the transpose to the weight is dense and AccumulateGrad takes it without a
// copy (torch.nn.functional.linear's backward computes gᵀ·x for the same reason).
Tensor weight_grad(const Tensor& a, const Tensor& g, const Tensor& b) {
  const bool b_transposed = b.dim() == 2 && b.size(0) > 1 && b.size(1) > 1 && b.stride(0) == 1 &&
                            b.stride(1) == b.size(0);
  return b_transposed ? ops::mm(g.t(), a).t() : ops::mm(a.t(), g);
}

Tensor as_float_mask(const Tensor& b, const Tensor& like) {
  return b.to(like.dtype());
}

// Unary rules: g, x, out -> grad of x.
using UnaryRule = Tensor (*)(const Tensor& g, const Tensor& x, const Tensor& out);

DerivativeRule unary(UnaryRule f) {
  return [f](const GradContext& c) -> Grads { return {f(c.grad(), c.tensor(0), c.outputs[0])}; };
}

std::unordered_map<std::string, DerivativeRule> build_table() {
  std::unordered_map<std::string, DerivativeRule> t;

  // ---- unary ----------------------------------------------------------------------------------
  t["neg"] = unary([](const Tensor& g, const Tensor&, const Tensor&) { return ops::neg(g); });
  t["abs"] =
      unary([](const Tensor& g, const Tensor& x, const Tensor&) { return mul(g, ops::sign(x)); });
  t["sign"] =
      unary([](const Tensor& g, const Tensor&, const Tensor&) { return ops::zeros_like(g); });
  t["square"] =
      unary([](const Tensor& g, const Tensor& x, const Tensor&) { return mul(g, mul(x, 2.0)); });
  // One fused pass: the comparison, its bool-to-float copy and the product were a tenth of a
  // small CNN's step.
  t["relu"] = unary(
      [](const Tensor& g, const Tensor& x, const Tensor&) { return ops::relu_backward(g, x); });
  t["exp"] = unary([](const Tensor& g, const Tensor&, const Tensor& out) { return mul(g, out); });
  t["log"] = unary([](const Tensor& g, const Tensor& x, const Tensor&) { return ops::div(g, x); });
  t["log1p"] = unary([](const Tensor& g, const Tensor& x, const Tensor&) {
    return ops::div(g, ops::add(x, 1.0));
  });
  t["expm1"] = unary(
      [](const Tensor& g, const Tensor&, const Tensor& out) { return mul(g, ops::add(out, 1.0)); });
  t["sqrt"] = unary(
      [](const Tensor& g, const Tensor&, const Tensor& out) { return ops::div(g, mul(out, 2.0)); });
  t["rsqrt"] = unary([](const Tensor& g, const Tensor&, const Tensor& out) {
    return mul(g, mul(ops::pow(out, 3.0), -0.5));
  });
  t["reciprocal"] = unary([](const Tensor& g, const Tensor&, const Tensor& out) {
    return mul(ops::neg(g), ops::square(out));
  });
  t["sin"] =
      unary([](const Tensor& g, const Tensor& x, const Tensor&) { return mul(g, ops::cos(x)); });
  t["cos"] = unary([](const Tensor& g, const Tensor& x, const Tensor&) {
    return mul(g, ops::neg(ops::sin(x)));
  });
  t["tanh"] = unary([](const Tensor& g, const Tensor&, const Tensor& out) {
    return mul(g, ops::sub(ops::ones({}, out.dtype(), out.device()), ops::square(out)));
  });
  t["sigmoid"] = unary([](const Tensor& g, const Tensor&, const Tensor& out) {
    return mul(g, mul(out, ops::sub(ops::ones({}, out.dtype(), out.device()), out)));
  });
  t["erf"] = unary([](const Tensor& g, const Tensor& x, const Tensor&) {
    return mul(g, mul(ops::exp(ops::neg(ops::square(x))), 2.0 / std::sqrt(std::numbers::pi)));
  });
  // One fused pass (ops::silu_backward): the six elementwise ops of the formula were a twentieth
  // of a qwen-tiny step.
  t["silu"] = unary(
      [](const Tensor& g, const Tensor& x, const Tensor&) { return ops::silu_backward(g, x); });
  // One fused pass (ops::gelu_tanh_backward): the dozen elementwise ops of the formula cost a
  // tenth of a GPT-2 small step on the CPU.
  t["gelu_tanh"] = unary([](const Tensor& g, const Tensor& x, const Tensor&) {
    return ops::gelu_tanh_backward(g, x);
  });
  t["gelu"] = unary([](const Tensor& g, const Tensor& x, const Tensor&) {
    const Tensor cdf = mul(ops::add(ops::erf(mul(x, 1.0 / std::numbers::sqrt2)), 1.0), 0.5);
    const Tensor pdf =
        mul(ops::exp(mul(ops::square(x), -0.5)), 1.0 / std::sqrt(2.0 * std::numbers::pi));
    return mul(g, ops::add(cdf, mul(x, pdf)));
  });

  // ---- binary (inputs arrive in one dtype; gradients are summed back over broadcasting) -------
  auto add_sub = [](double sign) {
    return [sign](const GradContext& c) -> Grads {
      const double alpha = c.scalar(2).to_double() * sign;
      Grads r(3);
      if (c.needs[0]) r[0] = sum_to(c.grad(), c.tensor(0).sizes());
      if (c.needs[1])
        r[1] = sum_to(alpha == 1.0 ? c.grad() : mul(c.grad(), alpha), c.tensor(1).sizes());
      return r;
    };
  };
  t["add"] = add_sub(1.0);
  t["sub"] = add_sub(-1.0);
  t["mul"] = [](const GradContext& c) -> Grads {
    Grads r(2);
    if (c.needs[0]) r[0] = sum_to(mul(c.grad(), c.tensor(1)), c.tensor(0).sizes());
    if (c.needs[1]) r[1] = sum_to(mul(c.grad(), c.tensor(0)), c.tensor(1).sizes());
    return r;
  };
  t["div"] = [](const GradContext& c) -> Grads {
    const Tensor& x = c.tensor(0);
    const Tensor& y = c.tensor(1);
    Grads r(2);
    if (c.needs[0]) r[0] = sum_to(ops::div(c.grad(), y), x.sizes());
    if (c.needs[1]) r[1] = sum_to(ops::neg(mul(c.grad(), ops::div(c.outputs[0], y))), y.sizes());
    return r;
  };
  t["pow"] = [](const GradContext& c) -> Grads {
    const Tensor& x = c.tensor(0);
    const Tensor& y = c.tensor(1);
    Grads r(2);
    if (c.needs[0]) r[0] = sum_to(mul(c.grad(), mul(y, ops::pow(x, ops::sub(y, 1.0)))), x.sizes());
    if (c.needs[1]) {
      // d/dy x^y = x^y log x; taken as 0 where x == 0 (PyTorch's convention), NaN for x < 0.
      const Tensor zero = ops::zeros({}, x.dtype(), x.device());
      const Tensor logx = ops::where(ops::eq(x, zero), zero, ops::log(x));
      r[1] = sum_to(mul(c.grad(), mul(c.outputs[0], logx)), y.sizes());
    }
    return r;
  };
  auto extreme_pair = [](bool is_max) {
    return [is_max](const GradContext& c) -> Grads {
      const Tensor& x = c.tensor(0);
      const Tensor& y = c.tensor(1);
      // The winner takes the gradient; ties split it in half (as PyTorch).
      const Tensor half = mul(c.grad(), 0.5);
      const Tensor zero = ops::zeros({}, c.grad().dtype(), c.grad().device());
      const Tensor x_wins = is_max ? ops::gt(x, y) : ops::lt(x, y);
      const Tensor y_wins = is_max ? ops::lt(x, y) : ops::gt(x, y);
      const Tensor tie = ops::eq(x, y);
      Grads r(2);
      if (c.needs[0]) {
        r[0] = sum_to(ops::where(x_wins, c.grad(), ops::where(tie, half, zero)), x.sizes());
      }
      if (c.needs[1]) {
        r[1] = sum_to(ops::where(y_wins, c.grad(), ops::where(tie, half, zero)), y.sizes());
      }
      return r;
    };
  };
  t["maximum"] = extreme_pair(true);
  t["minimum"] = extreme_pair(false);
  t["where"] = [](const GradContext& c) -> Grads {
    const Tensor& cond = c.tensor(0);
    const Tensor zero = ops::zeros({}, c.grad().dtype(), c.grad().device());
    Grads r(3);
    if (c.needs[1]) r[1] = sum_to(ops::where(cond, c.grad(), zero), c.tensor(1).sizes());
    if (c.needs[2]) r[2] = sum_to(ops::where(cond, zero, c.grad()), c.tensor(2).sizes());
    return r;
  };
  t["masked_fill"] = [](const GradContext& c) -> Grads {
    return {ops::masked_fill(c.grad(), c.tensor(1), 0.0), Tensor(), Tensor()};
  };
  t["copy_"] = [](const GradContext& c) -> Grads {
    const Tensor& src = c.tensor(1);
    return {Tensor(), sum_to(c.grad(), src.sizes()).to(src.device(), src.dtype())};
  };

  // ---- reductions -----------------------------------------------------------------------------
  t["sum"] = [](const GradContext& c) -> Grads {
    return {unreduce(c.grad(), c.tensor(0), c.ints(1), c.flag(2)), Tensor(), Tensor()};
  };
  t["mean"] = [](const GradContext& c) -> Grads {
    const Tensor& x = c.tensor(0);
    std::int64_t count = 1;
    for (auto d : c.ints(1))
      count *= x.size(d);
    return {mul(unreduce(c.grad(), x, c.ints(1), c.flag(2)), 1.0 / static_cast<double>(count)),
            Tensor(), Tensor()};
  };
  auto extreme_all = [](const GradContext& c) -> Grads {
    // Ties share the gradient evenly.
    const Tensor& x = c.tensor(0);
    const Tensor mask = as_float_mask(ops::eq(x, c.outputs[0]), x);
    return {mul(ops::div(mask, ops::sum(mask)), c.grad())};
  };
  t["max"] = extreme_all;
  t["min"] = extreme_all;
  auto extreme_dim = [](const GradContext& c) -> Grads {
    const Tensor& x = c.tensor(0);
    if (x.dim() == 0) return {c.grad(), Tensor(), Tensor()};
    const std::int64_t dim = c.integer(1);
    Tensor g = c.grad();
    Tensor idx = c.outputs[1];
    if (!c.flag(2)) {
      g = g.unsqueeze(dim);
      idx = idx.unsqueeze(dim);
    }
    return {ops::scatter_add(ops::zeros_like(x), dim, idx, g), Tensor(), Tensor()};
  };
  t["max.dim"] = extreme_dim;
  t["min.dim"] = extreme_dim;
  t["norm"] = [](const GradContext& c) -> Grads {
    const Tensor& x = c.tensor(0);
    const double p = c.real(1);
    const auto& dims = c.ints(2);
    const bool keepdim = c.flag(3);
    const Tensor g = unreduce(c.grad(), x, dims, keepdim);
    const Tensor n = unreduce(c.outputs[0], x, dims, keepdim);
    const Tensor zero = ops::zeros({}, x.dtype(), x.device());
    Tensor local;  // d norm / dx
    if (p == 1.0) {
      local = ops::sign(x);
    } else if (std::isinf(p)) {
      const Tensor mask = as_float_mask(ops::eq(ops::abs(x), n), x);
      const Tensor count = unreduce(ops::sum(mask, dims, keepdim), x, dims, keepdim);
      local = mul(ops::sign(x), ops::div(mask, count));
    } else if (p == 2.0) {
      local = ops::where(ops::eq(n, zero), zero, ops::div(x, n));
    } else {
      local = ops::where(ops::eq(n, zero), zero,
                         ops::div(mul(x, ops::pow(ops::abs(x), p - 2.0)), ops::pow(n, p - 1.0)));
    }
    return {mul(g, local), Tensor(), Tensor(), Tensor()};
  };

  // ---- linear algebra -------------------------------------------------------------------------
  t["mm"] = [](const GradContext& c) -> Grads {
    Grads r(2);
    if (c.needs[0]) r[0] = ops::mm(c.grad(), c.tensor(1).t());
    if (c.needs[1]) r[1] = weight_grad(c.tensor(0), c.grad(), c.tensor(1));
    return r;
  };
  t["addmm"] = [](const GradContext& c) -> Grads {
    const double beta = c.real(3);
    const double alpha = c.real(4);
    Grads r(5);
    // Scaling by 1 (nn.Linear's case) is exact and skipped: no extra pass over the gradients.
    auto scaled = [](const Tensor& g, double f) { return f == 1.0 ? g : mul(g, f); };
    if (c.needs[0]) r[0] = sum_to(scaled(c.grad(), beta), c.tensor(0).sizes());
    if (c.needs[1]) r[1] = scaled(ops::mm(c.grad(), c.tensor(2).t()), alpha);
    if (c.needs[2]) r[2] = scaled(weight_grad(c.tensor(1), c.grad(), c.tensor(2)), alpha);
    return r;
  };
  t["bmm"] = [](const GradContext& c) -> Grads {
    Grads r(2);
    if (c.needs[0]) r[0] = ops::bmm(c.grad(), c.tensor(1).transpose(1, 2));
    if (c.needs[1]) r[1] = ops::bmm(c.tensor(0).transpose(1, 2), c.grad());
    return r;
  };
  t["baddbmm"] = [](const GradContext& c) -> Grads {
    const double beta = c.real(3);
    const double alpha = c.real(4);
    Grads r(5);
    if (c.needs[0]) r[0] = sum_to(mul(c.grad(), beta), c.tensor(0).sizes());
    if (c.needs[1]) r[1] = mul(ops::bmm(c.grad(), c.tensor(2).transpose(1, 2)), alpha);
    if (c.needs[2]) r[2] = mul(ops::bmm(c.tensor(1).transpose(1, 2), c.grad()), alpha);
    return r;
  };
  t["syrk"] = [](const GradContext& c) -> Grads {
    // out = alpha X Xᵀ  =>  dX = alpha (G + Gᵀ) X
    const Tensor sym = ops::add(c.grad(), c.grad().t());
    return {mul(ops::mm(sym, c.tensor(0)), c.real(1)), Tensor()};
  };

  // ---- softmax ----------------------------------------------------------------------------------
  t["softmax"] = [](const GradContext& c) -> Grads {
    const std::int64_t dim = c.integer(1);
    const Tensor& y = c.outputs[0];
    const std::int64_t d[1] = {dim};
    const Tensor dot = ops::sum(mul(c.grad(), y), IntList(d, 1), true);
    return {mul(y, ops::sub(c.grad(), dot)), Tensor()};
  };
  t["log_softmax"] = [](const GradContext& c) -> Grads {
    const std::int64_t dim = c.integer(1);
    const std::int64_t d[1] = {dim};
    const Tensor total = ops::sum(c.grad(), IntList(d, 1), true);
    return {ops::sub(c.grad(), mul(ops::exp(c.outputs[0]), total)), Tensor()};
  };

  // ---- fused nn ops -----------------------------------------------------------------------------
  t["swiglu"] = [](const GradContext& c) -> Grads {
    auto [dg, du] = ops::swiglu_backward(c.grad(), c.tensor(0), c.tensor(1));
    Grads r(2);
    if (c.needs[0]) r[0] = std::move(dg);
    if (c.needs[1]) r[1] = std::move(du);
    return r;
  };
  t["rope"] = [](const GradContext& c) -> Grads {
    // A rotation per (position, pair): its transpose is the rotation by -angle.
    TB_CHECK_T(NotImplementedError, !c.needs[1] && !c.needs[2],
               "[autograd] rope: gradients with respect to cos/sin are not supported (they are "
               "constant tables; detach them)");
    return {ops::rope(c.grad(), c.tensor(1), ops::neg(c.tensor(2))), Tensor(), Tensor()};
  };
  // RMSNorm / LayerNorm: the kernels' backward from the forward's per-row statistics (outputs 1,
  // not differentiated).
  for (const bool rms : {true, false}) {
    t[rms ? "rms_norm" : "layer_norm"] = [rms](const GradContext& c) -> Grads {
      auto [dx, dw, db] = ops::row_norm_backward(rms, c.grad(), c.tensor(0), c.tensor(1),
                                                 c.outputs[1], c.tensor(2).defined());
      const Tensor& w = c.tensor(1);
      if (w.defined() && dw.defined() && dw.dtype() != w.dtype()) dw = dw.to(w.dtype());
      const Tensor& b = c.tensor(2);
      if (b.defined() && db.defined() && db.dtype() != b.dtype()) db = db.to(b.dtype());
      return {dx, c.needs[1] ? dw : Tensor(), c.needs[2] ? db : Tensor(), Tensor()};
    };
  }
  // ---- convolutional networks -------------------------------------------------------------
  t["conv2d"] = [](const GradContext& c) -> Grads {
    auto [dx, dw, db] =
        ops::conv2d_backward(c.grad(), c.tensor(0), c.tensor(1), c.ints(3), c.ints(4), c.ints(5),
                             c.integer(6), c.tensor(2).defined() && c.needs[2], c.needs[0]);
    return {c.needs[0] ? dx : Tensor(),
            c.needs[1] ? dw : Tensor(),
            c.needs[2] ? db : Tensor(),
            Tensor(),
            Tensor(),
            Tensor(),
            Tensor()};
  };
  t["max_pool2d"] = [](const GradContext& c) -> Grads {
    // Output 1 (the indices) is not differentiable.
    return {ops::max_pool2d_backward(c.grad(), c.tensor(0), c.outputs[1]), Tensor(), Tensor(),
            Tensor()};
  };
  t["avg_pool2d"] = [](const GradContext& c) -> Grads {
    return {
        ops::avg_pool2d_backward(c.grad(), c.tensor(0), c.ints(1), c.ints(2), c.ints(3), c.flag(4)),
        Tensor(), Tensor(), Tensor(), Tensor()};
  };
  t["adaptive_avg_pool2d"] = [](const GradContext& c) -> Grads {
    return {ops::adaptive_avg_pool2d_backward(c.grad(), c.tensor(0)), Tensor()};
  };
  t["batch_norm"] = [](const GradContext& c) -> Grads {
    // From the statistics the forward used (outputs 1 and 2, not differentiated); the running
    // statistics (args 3, 4) get none.
    const bool wb = c.needs[1] || c.needs[2];
    auto [dx, dw, db] = ops::batch_norm_backward(c.grad(), c.tensor(0), c.tensor(1), c.outputs[1],
                                                 c.outputs[2], c.flag(5), wb);
    if (c.needs[2] && db.defined() && db.dtype() != c.tensor(2).dtype())
      db = db.to(c.tensor(2).dtype());
    return {c.needs[0] ? dx : Tensor(),
            c.needs[1] ? dw : Tensor(),
            c.needs[2] ? db : Tensor(),
            Tensor(),
            Tensor(),
            Tensor(),
            Tensor(),
            Tensor()};
  };
  t["scaled_dot_product_attention"] = [](const GradContext& c) -> Grads {
    // The fused backward recomputes the probabilities from the forward's log-sum-exp (outputs
    // 1); the log-sum-exp itself is not differentiated.
    auto [dq, dk, dv] = ops::scaled_dot_product_attention_backward(
        c.grad(), c.tensor(0), c.tensor(1), c.tensor(2), c.outputs[0], c.outputs[1], c.real(3),
        c.flag(4));
    return {dq, dk, dv, Tensor(), Tensor()};
  };
  t["cross_entropy"] = [](const GradContext& c) -> Grads {
    return {
        ops::cross_entropy_backward(c.grad(), c.tensor(0), c.tensor(1), c.integer(2), c.real(3)),
        Tensor(), Tensor(), Tensor()};
  };

  // ---- indexing ---------------------------------------------------------------------------------
  t["index_select"] = [](const GradContext& c) -> Grads {
    const Tensor& x = c.tensor(0);
    const std::int64_t dim = c.integer(1);
    const Tensor& idx = c.tensor(2);
    if (x.dim() == 0) return {ops::sum(c.grad()), Tensor(), Tensor()};
    DimVector shape(static_cast<std::size_t>(x.dim()), 1);
    shape[static_cast<std::size_t>(dim)] = idx.numel();
    const Tensor full = idx.reshape(shape.span()).expand(c.grad().sizes()).contiguous();
    return {ops::scatter_add(ops::zeros_like(x), dim, full, c.grad()), Tensor(), Tensor()};
  };
  t["gather"] = [](const GradContext& c) -> Grads {
    return {ops::scatter_add(ops::zeros_like(c.tensor(0)), c.integer(1), c.tensor(2), c.grad()),
            Tensor(), Tensor()};
  };
  t["scatter_add"] = [](const GradContext& c) -> Grads {
    Grads r(4);
    if (c.needs[0]) r[0] = c.grad();
    if (c.needs[3]) {
      const Tensor& src = c.tensor(3);
      const Tensor& idx = c.tensor(2);
      Tensor gs = ops::gather(c.grad(), c.integer(1), idx);
      // src may be larger than index: its extra elements were not used.
      Tensor full = ops::zeros_like(src);
      Tensor part = full;
      for (std::int64_t d = 0; d < src.dim(); ++d)
        part = part.narrow(d, 0, idx.size(d));
      part.copy_(gs);
      r[3] = full;
    }
    return r;
  };
  return t;
}

const std::unordered_map<std::string, DerivativeRule>& table() {
  static const auto t = build_table();
  return t;
}

}  // namespace

const DerivativeRule* find_derivative(std::string_view op) {
  const auto& t = table();
  auto it = t.find(std::string(op));
  return it == t.end() ? nullptr : &it->second;
}

std::vector<std::string> ops_with_derivatives() {
  std::vector<std::string> names;
  for (const auto& [name, rule] : table())
    names.push_back(name);
  std::sort(names.begin(), names.end());
  return names;
}

}  // namespace tb::autograd
