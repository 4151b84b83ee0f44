// Multi-tensor in-place updates of optimizer state: foreach_lerp_ (EMA/SWA averages) and
// muon_momentum_ (Muon's momentum). The public functions check every pair, group the pairs by
// (device, dtype) and call the fused operator once per group; a pair the fused kernels cannot
// take (strided, or a device without the kernel) is updated with elementwise ops instead, by
// the same formula.
#include <sstream>

#include "engine/core/error.h"
#include "engine/dispatch/dispatcher.h"
#include "engine/dispatch/grad_mode.h"
#include "engine/ops/op_common.h"
#include "engine/ops/op_signatures.h"
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

}  // namespace tb::ops
