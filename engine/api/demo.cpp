// The headless demo behind `trainbench-cli demo` and Quick start command (1) without a display:
// exercises the engine end to end (generators, dispatch, elementwise, reductions, GEMM, SYRK)
// and prints what it did.
#include <chrono>
#include <iomanip>

#include "engine/api/engine_api.h"
#include "engine/autograd/autograd.h"
#include "engine/dispatch/dispatcher.h"
#include "engine/ops/ops.h"
#include "engine/rng/generator.h"

namespace tb::api {

namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

int run_demo(std::ostream& out, std::uint64_t seed, int steps) {
  using core::Tensor;
  out << "TrainBench " << version() << " headless demo (the engine alone; no display needed)\n";
  for (const auto& d : list_devices()) {
    out << "  device " << std::left << std::setw(7) << d.name
        << (d.available ? " available: " : " unavailable: ") << d.detail << "\n";
  }
  out << "  dispatcher: " << dispatch::Dispatcher::singleton().op_names().size() << " operators\n";

  // 1. A least-squares fit y = X w by gradient descent, entirely on engine ops.
  auto gen = rng::make_generator(core::Device());
  gen->manual_seed(seed);
  const std::int64_t n = 512;
  const std::int64_t d = 16;
  const Tensor x = ops::randn({n, d}, gen.get());
  const Tensor w_true = ops::randn({d, 1}, gen.get());
  const Tensor noise = ops::mul(ops::randn({n, 1}, gen.get()), 0.01);
  const Tensor y = ops::add(ops::mm(x, w_true), noise);
  Tensor w = autograd::requires_grad_(ops::zeros({d, 1}));
  const double lr = 0.1;
  out << "\nFitting a " << d << "-parameter linear model to " << n
      << " noisy samples by gradient descent, gradients by autograd (seed " << seed << ", lr " << lr
      << "):\n";
  const auto t0 = std::chrono::steady_clock::now();
  double first = 0.0;
  double loss = 0.0;
  double grad_diff = 0.0;  // autograd's gradient against the hand-derived one, largest relative
  for (int step = 0; step <= steps; ++step) {
    const Tensor r = ops::sub(ops::mm(x, w), y);
    const Tensor l = ops::mean(ops::square(r));  // mean squared error
    loss = l.item();
    if (step == 0) first = loss;
    if (step % std::max(1, steps / 4) == 0) {
      out << "  step " << std::setw(4) << step << "  loss " << std::scientific
          << std::setprecision(4) << loss << std::defaultfloat << "\n";
    }
    autograd::zero_grad(w);
    autograd::backward(l);
    autograd::NoGradGuard no_grad;  // the update itself is not part of the graph
    // d/dw mean((Xw - y)^2) = 2/n Xᵀ(Xw - y), by hand.
    const Tensor by_hand =
        ops::mul(ops::mm(x.t(), autograd::detach(r)), 2.0 / static_cast<double>(n));
    const double scale = ops::max(ops::abs(by_hand)).item();
    if (scale > 0)
      grad_diff = std::max(grad_diff,
                           ops::max(ops::abs(ops::sub(autograd::grad(w), by_hand))).item() / scale);
    ops::add_(w, autograd::grad(w), -lr);
  }
  const double err = ops::norm(ops::sub(autograd::detach(w), w_true)).item();
  out << "  loss " << std::scientific << std::setprecision(3) << first << " -> " << loss
      << ", |w - w_true| = " << err << std::defaultfloat << " in " << std::fixed
      << std::setprecision(3) << seconds_since(t0) << " s\n"
      << std::defaultfloat << "  autograd's gradient against 2/n Xᵀ(Xw - y) by hand, every step: "
      << "largest difference " << std::scientific << std::setprecision(2) << grad_diff
      << std::defaultfloat << " of the largest component\n";

  // 2. X·Xᵀ as a GEMM and as a symmetric product (Muon's Newton–Schulz uses the latter).
  const Tensor a = ops::randn({512, 1024}, gen.get());
  auto time_it = [](auto&& f) {
    f();
    const auto t = std::chrono::steady_clock::now();
    for (int i = 0; i < 5; ++i)
      f();
    return seconds_since(t) / 5.0;
  };
  Tensor g;
  Tensor s;
  const double t_gemm = time_it([&] { g = ops::mm(a, a.t()); });
  const double t_syrk = time_it([&] { s = ops::syrk(a); });
  const double diff = ops::max(ops::abs(ops::sub(g, s))).item();
  out << "\nX·Xᵀ for X of 512x1024 (float32, " << num_threads()
      << (num_threads() == 1 ? " thread" : " threads") << ", GEMM backend "
      << current_gemm_backend() << "):\n"
      << std::fixed << std::setprecision(2) << "  gemm " << t_gemm * 1e3 << " ms, syrk "
      << t_syrk * 1e3 << " ms (" << t_gemm / t_syrk << "x), max |difference| " << std::scientific
      << diff << std::defaultfloat << "\n";
  // float32: the two gradients sum in different orders; a wrong backward is off by far more.
  const bool converged = loss < first * 1e-3 && err < 0.01;
  const bool grads = grad_diff < 1e-5;
  const bool products = diff < 1e-2;
  if (converged && grads && products) {
    out << "\nDemo finished: the fit converged, the gradients agree, and both products agree.\n";
    return 0;
  }
  // Each check that failed, by name: a short --steps leaves the fit short of converging.
  out << "\nDemo finished with unexpected numbers:\n";
  if (!converged)
    out << "  the fit did not converge in " << steps
        << " steps (it must lower the loss 1000-fold and come within 0.01 of w_true)"
        << (steps < 200 ? "; give more --steps (200, the default, converges)" : "") << "\n";
  if (!grads) out << "  autograd's gradient differs from the hand-derived one by more than 1e-5\n";
  if (!products) out << "  gemm and syrk differ by more than 1e-2\n";
  return 1;
}

}  // namespace tb::api
