// Multi-tensor in-place updates of optimizer state: foreach_lerp_ (EMA/SWA averages),
// muon_momentum_ (Muon's momentum), adam_step_ (Adam/AdamW) and sgd_step_ (SGD). The public
// functions check every list and pair. The lerps group the pairs by (device, dtype) and call the
// fused operator once per group, a pair the fused kernels cannot take (strided, or a device
// without the kernel) being updated with elementwise ops by the same formula; the Adam and SGD
// steps make one fused call when every tensor can take it, and run the same math as elementwise
// ops otherwise (as the optimizers did before they were ops).
#include <sstream>

#include "engine/core/error.h"
#include "engine/dispatch/dispatcher.h"
#include "engine/dispatch/grad_mode.h"
#include "engine/dispatch/op_signatures.h"
#include "engine/ops/op_common.h"
#include "engine/ops/ops.h"

namespace tb::ops {

using dispatch::Dispatcher;
using dispatch::DispatchKey;
using dispatch::DispatchKeySet;

namespace {

ScalarType compute_dtype(ScalarType dt) {
  return dt == ScalarType::Float64 ? ScalarType::Float64 : ScalarType::Float32;
}

// Device tensors are dispatched to their device's kernel even when a host tensor (a weight on
// the CPU) is among the arguments.
DispatchKeySet skip_for(const Device& device) {
  return device.is_cpu() ? DispatchKeySet() : DispatchKeySet(DispatchKey::CPU);
}

std::string shape_str(const Tensor& t) {
  std::ostringstream os;
  os << core::DimVector(t.sizes());
  return os.str();
}

// The rules for one (self, other) pair: defined, floating, and other of self's dtype, device and
// shape; messages name the op, the lists and the index.
void check_pair(const char* op, const char* self_name, const Tensor& self, const char* other_name,
                const Tensor& other, std::size_t i) {
  TB_CHECK(self.defined(), "[", op, "] ", self_name, "[", i, "] is an undefined tensor");
  TB_CHECK(other.defined(), "[", op, "] ", other_name, "[", i, "] is an undefined tensor");
  TB_CHECK_T(TypeError, core::is_floating_point(self.dtype()), "[", op, "] ", self_name, "[", i,
             "] must be floating point, got ", self.dtype());
  TB_CHECK_T(TypeError, other.dtype() == self.dtype(), "[", op, "] ", other_name, "[", i, "] is ",
             other.dtype(), " but ", self_name, "[", i, "] is ", self.dtype());
  TB_CHECK_T(TypeError, other.device() == self.device(), "[", op, "] ", other_name, "[", i,
             "] is on ", other.device(), " but ", self_name, "[", i, "] is on ", self.device());
  TB_CHECK(core::DimVector(other.sizes()) == core::DimVector(self.sizes()), "[", op, "] ",
           other_name, "[", i, "] has shape ", shape_str(other), " but ", self_name, "[", i,
           "] has shape ", shape_str(self));
}

void check_lengths(const char* op, const char* a, std::size_t na, const char* b, std::size_t nb) {
  TB_CHECK(na == nb, "[", op, "] ", a, " has ", na, " tensors but ", b, " has ", nb);
}

// The indices of a list grouped by (device, dtype), in order of first appearance; `fused` tells
// whether a group's device has the operator's kernel. Pairs that are not contiguous go to
// `composed` instead.
struct Group {
  Device device;
  ScalarType dtype = ScalarType::Float32;
  std::vector<std::size_t> idx;
};

void group_pairs(const char* op, const std::vector<Tensor>& a, const std::vector<Tensor>& b,
                 std::vector<Group>& fused, std::vector<std::size_t>& composed) {
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (a[i].numel() == 0) continue;
    if (!a[i].is_contiguous() || !b[i].is_contiguous() ||
        !detail::device_has_kernel(op, a[i].device())) {
      composed.push_back(i);
      continue;
    }
    Group* g = nullptr;
    for (auto& x : fused) {
      if (x.device == a[i].device() && x.dtype == a[i].dtype()) g = &x;
    }
    if (g == nullptr) g = &fused.emplace_back(Group{a[i].device(), a[i].dtype(), {}});
    g->idx.push_back(i);
  }
}

std::vector<Tensor> pick(const std::vector<Tensor>& ts, const std::vector<std::size_t>& idx) {
  std::vector<Tensor> out;
  out.reserve(idx.size());
  for (std::size_t i : idx)
    out.push_back(ts[i]);
  return out;
}

// self := lerp(self, end, w) with elementwise ops, in the compute dtype (the formula of
// engine/backends/common/optim_math.h). `wt` (a one-element tensor) replaces w when given.
void lerp_composed(const Tensor& self, const Tensor& end, const Tensor* wt, double w) {
  const ScalarType ct = compute_dtype(self.dtype());
  const Tensor a = self.to(ct);
  const Tensor b = end.to(ct);
  const Tensor diff = sub(b, a);
  Tensor r;
  if (wt != nullptr) {
    const Tensor wv = wt->to(self.device(), ct).reshape({});
    const Tensor small = lt(abs(wv), scalar_tensor(0.5, ct, self.device()));
    r = where(small, add(a, mul(wv, diff)), sub(b, mul(diff, neg(sub(wv, 1.0)))));
  } else {
    r = (w < 0 ? -w : w) < 0.5 ? add(a, mul(diff, w)) : sub(b, mul(diff, 1.0 - w));
  }
  Tensor dst = self;
  copy_(dst, r);
}

void bump_versions(const std::vector<Tensor>& ts) {
  for (const Tensor& t : ts)
    t.impl()->version++;
}

void foreach_lerp_impl(const std::vector<Tensor>& selfs, const std::vector<Tensor>& ends,
                       const Tensor* wt, double w) {
  constexpr const char* op = "foreach_lerp_";
  check_lengths(op, "selfs", selfs.size(), "ends", ends.size());
  for (std::size_t i = 0; i < selfs.size(); ++i)
    check_pair(op, "selfs", selfs[i], "ends", ends[i], i);
  if (wt != nullptr) {
    TB_CHECK(wt->defined() && wt->numel() == 1 && core::is_floating_point(wt->dtype()), "[", op,
             "] the weight must be a one-element floating tensor, got ",
             wt->defined()
                 ? tb::detail::str_cat("a ", wt->dtype(), " tensor of shape ", shape_str(*wt))
                 : std::string("an undefined tensor"));
  }
  dispatch::NoGradGuard no_grad;
  std::vector<Group> groups;
  std::vector<std::size_t> composed;
  group_pairs(op, selfs, ends, groups, composed);
  static const auto kernel = Dispatcher::singleton().typed<sig::ForeachLerp>(op);
  for (const Group& g : groups) {
    const std::vector<Tensor> s = pick(selfs, g.idx);
    Tensor weight;
    if (wt != nullptr) {
      weight = wt->device() == g.device || wt->device().is_cpu() ? *wt : wt->to(g.device);
    }
    kernel.call_skipping(skip_for(g.device), s, pick(ends, g.idx), weight, w);
    bump_versions(s);
  }
  for (std::size_t i : composed) {
    lerp_composed(selfs[i], ends[i], wt, w);
  }
}

}  // namespace

void foreach_lerp_(const std::vector<Tensor>& selfs, const std::vector<Tensor>& ends,
                   double weight) {
  foreach_lerp_impl(selfs, ends, nullptr, weight);
}

void foreach_lerp_(const std::vector<Tensor>& selfs, const std::vector<Tensor>& ends,
                   const Tensor& weight) {
  foreach_lerp_impl(selfs, ends, &weight, 0.0);
}

std::vector<Tensor> muon_momentum_(const std::vector<Tensor>& bufs,
                                   const std::vector<Tensor>& grads, double momentum,
                                   bool nesterov) {
  constexpr const char* op = "muon_momentum_";
  check_lengths(op, "bufs", bufs.size(), "grads", grads.size());
  for (std::size_t i = 0; i < bufs.size(); ++i)
    check_pair(op, "bufs", bufs[i], "grads", grads[i], i);
  dispatch::NoGradGuard no_grad;
  std::vector<Tensor> outs = bufs;
  if (nesterov) {
    for (std::size_t i = 0; i < bufs.size(); ++i)
      outs[i] = empty_like(grads[i]);
  }
  std::vector<Group> groups;
  std::vector<std::size_t> composed;
  group_pairs(op, bufs, grads, groups, composed);
  static const auto kernel = Dispatcher::singleton().typed<sig::MuonMomentum>(op);
  for (const Group& g : groups) {
    const std::vector<Tensor> b = pick(bufs, g.idx);
    const std::vector<Tensor> u = nesterov ? pick(outs, g.idx) : std::vector<Tensor>{};
    kernel.call_skipping(skip_for(g.device), b, pick(grads, g.idx), u, momentum);
    bump_versions(b);
  }
  for (std::size_t i : composed) {
    lerp_composed(bufs[i], grads[i], nullptr, 1.0 - momentum);
    if (nesterov) {
      Tensor u = outs[i];
      copy_(u, grads[i]);
      lerp_composed(u, bufs[i], nullptr, momentum);
    }
  }
  return outs;
}

namespace {

// Whether one fused call of `op` can update these lists: one device with the kernel (its own or
// a fallback), one float32/float64 dtype, every tensor contiguous.
bool fused_ok(const char* op, std::initializer_list<const std::vector<Tensor>*> lists) {
  const Tensor* first = nullptr;
  for (const auto* l : lists) {
    for (const Tensor& t : *l) {
      if (first == nullptr) first = &t;
      if (!t.is_contiguous() || t.device() != first->device() || t.dtype() != first->dtype()) {
        return false;
      }
    }
  }
  if (first == nullptr) return false;
  return (first->dtype() == ScalarType::Float32 || first->dtype() == ScalarType::Float64) &&
         detail::device_has_kernel(op, first->device());
}

}  // namespace

Tensor foreach_sum_sq(const std::vector<Tensor>& tensors) {
  constexpr const char* op = "foreach_sum_sq";
  std::vector<Tensor> defined;
  defined.reserve(tensors.size());
  bool fused = true;
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    const Tensor& t = tensors[i];
    if (!t.defined()) continue;
    TB_CHECK_T(TypeError, core::is_floating_point(t.dtype()), "[", op, "] tensors[", i,
               "] must be floating point, got ", t.dtype());
    if (!defined.empty()) {
      TB_CHECK_T(TypeError, t.device() == defined[0].device(), "[", op, "] tensors[", i, "] is on ",
                 t.device(), " but the first defined tensor is on ", defined[0].device());
    }
    fused = fused && t.is_contiguous() &&
            (t.dtype() == ScalarType::Float32 || t.dtype() == ScalarType::Float64);
    defined.push_back(t);
  }
  if (defined.empty()) return Tensor();
  dispatch::NoGradGuard no_grad;
  if (fused && detail::device_has_kernel(op, defined[0].device())) {
    static const auto kernel = Dispatcher::singleton().typed<sig::ForeachSumSq>(op);
    return kernel.call(defined);
  }
  Tensor total;
  for (const Tensor& t : defined) {
    const Tensor part = sum(square(t.to(ScalarType::Float64)));
    total = total.defined() ? add(total, part) : part;
  }
  return total;
}

void adam_step_(const std::vector<Tensor>& params, const std::vector<Tensor>& grads,
                const std::vector<Tensor>& exp_avgs, const std::vector<Tensor>& exp_avg_sqs,
                const std::vector<Tensor>& max_exp_avg_sqs, const std::vector<double>& step_sizes,
                const std::vector<double>& bc2_sqrts, double lr, double beta1, double beta2,
                double eps, double weight_decay, bool maximize, bool decoupled) {
  constexpr const char* op = "adam_step_";
  const std::size_t n = params.size();
  const bool amsgrad = !max_exp_avg_sqs.empty();
  check_lengths(op, "params", n, "grads", grads.size());
  check_lengths(op, "params", n, "exp_avgs", exp_avgs.size());
  check_lengths(op, "params", n, "exp_avg_sqs", exp_avg_sqs.size());
  if (amsgrad) check_lengths(op, "params", n, "max_exp_avg_sqs", max_exp_avg_sqs.size());
  TB_CHECK(step_sizes.size() == n && bc2_sqrts.size() == n, "[", op,
           "] the step scalars must have one entry per parameter (", n, "), got step_sizes ",
           step_sizes.size(), " and bc2_sqrts ", bc2_sqrts.size());
  for (std::size_t i = 0; i < n; ++i) {
    check_pair(op, "params", params[i], "grads", grads[i], i);
    check_pair(op, "params", params[i], "exp_avgs", exp_avgs[i], i);
    check_pair(op, "params", params[i], "exp_avg_sqs", exp_avg_sqs[i], i);
    if (amsgrad) check_pair(op, "params", params[i], "max_exp_avg_sqs", max_exp_avg_sqs[i], i);
  }
  if (n == 0) return;
  dispatch::NoGradGuard no_grad;
  if (fused_ok(op, {&params, &grads, &exp_avgs, &exp_avg_sqs, &max_exp_avg_sqs})) {
    // The step scalars travel as host tensors (the CPU key is skipped for device tensors).
    static const auto kernel = Dispatcher::singleton().typed<sig::AdamStep>(op);
    kernel.call_skipping(skip_for(params[0].device()), params, grads, exp_avgs, exp_avg_sqs,
                         max_exp_avg_sqs, core::from_vector(step_sizes),
                         core::from_vector(bc2_sqrts), lr, beta1, beta2, eps, weight_decay,
                         maximize, decoupled);
    for (const auto* l : {&params, &exp_avgs, &exp_avg_sqs, &max_exp_avg_sqs})
      bump_versions(*l);
    return;
  }
  for (std::size_t i = 0; i < n; ++i) {
    Tensor p = params[i];
    Tensor m = exp_avgs[i];
    Tensor v = exp_avg_sqs[i];
    Tensor d = maximize ? neg(grads[i]) : grads[i];
    if (weight_decay != 0.0) {
      if (decoupled) {
        p.copy_(mul(p, 1.0 - lr * weight_decay));
      } else {
        d = add(d, mul(p, weight_decay));
      }
    }
    m.copy_(add(m, mul(sub(d, m), 1.0 - beta1)));
    // (1 − beta2)·d·d in that order: torch.addcmul's, and the fused kernel's (optim_math.h).
    v.copy_(add(mul(v, beta2), mul(mul(d, 1.0 - beta2), d)));
    Tensor second = v;
    if (amsgrad) {
      Tensor vmax = max_exp_avg_sqs[i];
      vmax.copy_(maximum(vmax, v));
      second = vmax;
    }
    const Tensor denom = add(div(sqrt(second), bc2_sqrts[i]), eps);
    add_(p, div(m, denom), -step_sizes[i]);
  }
}

void sgd_step_(const std::vector<Tensor>& params, const std::vector<Tensor>& grads,
               const std::vector<Tensor>& momentum_buffers, const std::vector<bool>& first_steps,
               double lr, double momentum, double dampening, double weight_decay, bool nesterov,
               bool maximize) {
  constexpr const char* op = "sgd_step_";
  const std::size_t n = params.size();
  const bool with_momentum = momentum != 0.0;
  check_lengths(op, "params", n, "grads", grads.size());
  if (with_momentum) {
    check_lengths(op, "params", n, "momentum_buffers", momentum_buffers.size());
  } else {
    TB_CHECK(momentum_buffers.empty(), "[", op, "] momentum 0 takes no momentum buffers, got ",
             momentum_buffers.size());
  }
  check_lengths(op, "momentum_buffers", momentum_buffers.size(), "first_steps", first_steps.size());
  for (std::size_t i = 0; i < n; ++i) {
    check_pair(op, "params", params[i], "grads", grads[i], i);
    if (with_momentum)
      check_pair(op, "params", params[i], "momentum_buffers", momentum_buffers[i], i);
  }
  if (n == 0) return;
  dispatch::NoGradGuard no_grad;
  if (fused_ok(op, {&params, &grads, &momentum_buffers})) {
    static const auto kernel = Dispatcher::singleton().typed<sig::SgdStep>(op);
    const std::vector<std::int64_t> first(first_steps.begin(), first_steps.end());
    kernel.call_skipping(skip_for(params[0].device()), params, grads, momentum_buffers, first, lr,
                         momentum, dampening, weight_decay, nesterov, maximize);
    bump_versions(params);
    bump_versions(momentum_buffers);
    return;
  }
  for (std::size_t i = 0; i < n; ++i) {
    Tensor d = maximize ? neg(grads[i]) : grads[i];
    if (weight_decay != 0.0) d = add(d, mul(params[i], weight_decay));
    if (with_momentum) {
      Tensor buf = momentum_buffers[i];
      if (first_steps[i]) {
        buf.copy_(d);
      } else {
        buf.copy_(add(mul(buf, momentum), mul(d, 1.0 - dampening)));
      }
      d = nesterov ? add(d, mul(buf, momentum)) : buf;
    }
    Tensor p = params[i];
    add_(p, d, -lr);
  }
}

}  // namespace tb::ops
