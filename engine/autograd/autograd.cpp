// Autograd implementation: per-tensor metadata, graph nodes (table-driven op nodes, view nodes,
// gradient accumulators), the backward engine, and the Autograd-key fallback.
#include "engine/autograd/autograd.h"

#include <algorithm>
#include <atomic>
#include <map>
#include <mutex>
#include <queue>
#include <unordered_map>
#include <unordered_set>

#include "engine/autograd/derivatives.h"
#include "engine/dispatch/dispatcher.h"
#include "engine/ops/ops.h"

namespace tb::autograd {

using core::DimVector;
using dispatch::DispatchKey;
using dispatch::DispatchKeySet;
using dispatch::Stack;

namespace {

std::atomic<std::uint64_t> next_sequence_nr{0};

class AccumulateGrad;

// What autograd keeps per tensor.
struct AutogradMeta final : core::AutogradMetaInterface {
  Tensor grad;                                // leaves: accumulated gradient
  std::shared_ptr<Node> grad_fn;              // non-leaves: the node that made the tensor
  int output_nr = 0;                          // which output of grad_fn
  std::weak_ptr<AccumulateGrad> accumulator;  // leaves: created on demand
};

AutogradMeta* meta(const Tensor& t) {
  return static_cast<AutogradMeta*>(t.impl()->autograd_meta.get());
}

AutogradMeta& ensure_meta(const Tensor& t) {
  auto& slot = t.impl()->autograd_meta;
  if (!slot) slot = std::make_shared<AutogradMeta>();
  return *static_cast<AutogradMeta*>(slot.get());
}

// Sums gradients into a leaf's .grad.
class AccumulateGrad final : public Node {
 public:
  explicit AccumulateGrad(std::shared_ptr<core::TensorImpl> leaf) : leaf_(std::move(leaf)) {}
  std::string name() const override { return "AccumulateGrad"; }
  std::vector<Tensor> apply(std::vector<Tensor>&& grads) override {
    if (grads.empty() || !grads[0].defined()) return {};
    Tensor g = std::move(grads[0]);
    AutogradMeta& m = ensure_meta(Tensor(leaf_));
    if (!m.grad.defined()) {
      // Own the memory: the incoming gradient may alias another node's buffer. A gradient that
      // nothing else holds (its handle and its storage referenced once, dense, exactly the
      // leaf's shape and dtype, no autograd state) is taken as it is, as PyTorch's
      // AccumulateGrad steals it (torch/csrc/autograd/functions/accumulate_grad.h): no copy.
      const bool sole_owner = g.impl_ptr().use_count() == 1 && g.storage().use_count() == 1 &&
                              !g.impl_ptr()->autograd_meta && g.is_contiguous() &&
                              g.impl_ptr()->offset == 0 && g.dtype() == leaf_->dtype &&
                              g.device() == leaf_->device &&
                              core::DimVector(g.sizes()) == leaf_->sizes &&
                              g.storage()->nbytes() == static_cast<std::size_t>(g.numel()) *
                                                           core::element_size(g.dtype());
      m.grad = sole_owner ? std::move(g) : g.clone();
    } else {
      m.grad = ops::add(m.grad, g);
    }
    return {};
  }

 private:
  std::shared_ptr<core::TensorImpl> leaf_;
};

// Where the gradient of t goes: its grad_fn's slot, its accumulator (leaf), or nowhere.
Edge gradient_edge(const Tensor& t) {
  if (!t.defined() || !t.requires_grad()) return {};
  AutogradMeta& m = ensure_meta(t);
  if (m.grad_fn) return {m.grad_fn, m.output_nr};
  auto acc = m.accumulator.lock();
  if (!acc) {
    acc = std::make_shared<AccumulateGrad>(t.impl_ptr());
    m.accumulator = acc;
  }
  return {acc, 0};
}

// A view of t's data with no autograd history (what nodes save, so graphs hold no cycles).
Tensor alias_without_history(const Tensor& t) {
  if (!t.defined()) return t;
  auto impl = std::make_shared<core::TensorImpl>(*t.impl());
  impl->requires_grad = false;
  impl->autograd_meta.reset();
  return Tensor(std::move(impl));
}

void set_history(const Tensor& out, const std::shared_ptr<Node>& fn, int output_nr) {
  out.impl()->requires_grad = true;
  AutogradMeta& m = ensure_meta(out);
  m.grad_fn = fn;
  m.output_nr = output_nr;
  m.grad = Tensor();
}

[[noreturn]] void released_error(const std::string& node) {
  throw Error("[autograd] trying to backward through " + node +
              " a second time (its saved tensors were freed after the first backward); pass "
              "retain_graph=true to the first backward if you need to backward twice");
}

// The node for an op from the derivative table.
class OpNode final : public Node {
 public:
  OpNode(std::string op, const DerivativeRule* rule, Stack args, std::vector<Tensor> outputs,
         std::vector<bool> needs)
      : op_(std::move(op)),
        rule_(rule),
        args_(std::move(args)),
        outputs_(std::move(outputs)),
        needs_(std::move(needs)) {}

  std::string name() const override {
    std::string n = op_;
    std::replace(n.begin(), n.end(), '.', '_');
    if (!n.empty()) n[0] = static_cast<char>(std::toupper(static_cast<unsigned char>(n[0])));
    return n + "Backward";
  }
  int num_outputs() const override { return static_cast<int>(outputs_.size()); }

  std::vector<Tensor> apply(std::vector<Tensor>&& grads) override {
    if (released_) released_error(name());
    // Missing output gradients are zeros of the output's shape.
    for (std::size_t k = 0; k < outputs_.size(); ++k) {
      if (k >= grads.size()) grads.emplace_back();
      if (!grads[k].defined() && core::is_floating_point(outputs_[k].dtype())) {
        grads[k] = ops::zeros_like(outputs_[k]);
      }
    }
    GradContext ctx{args_, outputs_, grads, needs_};
    std::vector<Tensor> by_arg = (*rule_)(ctx);
    // One gradient per edge: edges are the tensor arguments in order.
    std::vector<Tensor> out;
    for (std::size_t i = 0; i < args_.size(); ++i) {
      if (!args_[i].is_tensor()) continue;
      out.push_back(i < by_arg.size() && needs_[i] ? by_arg[i] : Tensor());
    }
    return out;
  }

  void release() override {
    args_.clear();
    outputs_.clear();
    released_ = true;
  }

 private:
  std::string op_;
  const DerivativeRule* rule_;
  Stack args_;
  std::vector<Tensor> outputs_;
  std::vector<bool> needs_;
  bool released_ = false;
};

// The node for a view (core's view hook): maps the view's gradient back to the base's shape.
class ViewNode final : public Node {
 public:
  ViewNode(core::ViewRecord record, DimVector base_sizes, core::ScalarType dtype,
           core::Device device, DimVector view_sizes, DimVector view_strides,
           std::int64_t view_offset, std::int64_t base_offset, bool base_contiguous)
      : record_(std::move(record)),
        base_sizes_(std::move(base_sizes)),
        dtype_(dtype),
        device_(device),
        view_sizes_(std::move(view_sizes)),
        view_strides_(std::move(view_strides)),
        view_offset_(view_offset),
        base_offset_(base_offset),
        base_contiguous_(base_contiguous) {}

  std::string name() const override {
    switch (record_.kind) {
      case core::ViewRecord::Kind::Reshape:
        return "ViewBackward";
      case core::ViewRecord::Kind::Transpose:
        return "TransposeBackward";
      case core::ViewRecord::Kind::Permute:
        return "PermuteBackward";
      case core::ViewRecord::Kind::Expand:
        return "ExpandBackward";
      case core::ViewRecord::Kind::Slice:
        return "SliceBackward";
      case core::ViewRecord::Kind::Select:
        return "SelectBackward";
      case core::ViewRecord::Kind::AsStrided:
        return "AsStridedBackward";
    }
    return "ViewBackward";
  }

  std::vector<Tensor> apply(std::vector<Tensor>&& grads) override {
    if (grads.empty() || !grads[0].defined()) return {Tensor()};
    const Tensor& g = grads[0];
    using K = core::ViewRecord::Kind;
    switch (record_.kind) {
      case K::Reshape:
        return {g.reshape(base_sizes_.span())};
      case K::Transpose:
        return {g.transpose(record_.dim0, record_.dim1)};
      case K::Permute: {
        DimVector inverse(record_.dims.size());
        for (std::size_t i = 0; i < record_.dims.size(); ++i) {
          inverse[static_cast<std::size_t>(record_.dims[i])] = static_cast<std::int64_t>(i);
        }
        return {g.permute(inverse.span())};
      }
      case K::Expand:
        return {sum_to(g, base_sizes_.span())};
      case K::Slice: {
        Tensor z = ops::zeros(base_sizes_.span(), dtype_, device_);
        Tensor part = z.slice(record_.dim0, record_.start, record_.end, record_.step);
        part.copy_(g);
        return {z};
      }
      case K::Select: {
        Tensor z = ops::zeros(base_sizes_.span(), dtype_, device_);
        Tensor part = z.select(record_.dim0, record_.start);
        part.copy_(g);
        return {z};
      }
      case K::AsStrided: {
        TB_CHECK_T(NotImplementedError, base_contiguous_,
                   "[autograd] as_strided of a non-contiguous tensor is not differentiable");
        // Scatter-add through the same geometry on a contiguous buffer (windows may overlap).
        Tensor z = ops::zeros(base_sizes_.span(), dtype_, device_);
        const Tensor flat = z.reshape({z.numel()});
        const Tensor index =
            ops::arange(z.numel())
                .as_strided(view_sizes_.span(), view_strides_.span(), view_offset_ - base_offset_)
                .contiguous()
                .reshape({-1});
        const Tensor summed = ops::scatter_add(flat, 0, index, g.contiguous().reshape({-1}));
        return {summed.reshape(base_sizes_.span())};
      }
    }
    return {Tensor()};
  }

 private:
  core::ViewRecord record_;
  DimVector base_sizes_;
  core::ScalarType dtype_;
  core::Device device_;
  DimVector view_sizes_;
  DimVector view_strides_;
  std::int64_t view_offset_;
  std::int64_t base_offset_;
  bool base_contiguous_;
};

void view_hook(const Tensor& base, Tensor& view, const core::ViewRecord& record) {
  if (!is_grad_enabled()) {
    view.impl()->requires_grad = false;
    return;
  }
  auto node = std::make_shared<ViewNode>(record, DimVector(base.sizes()), base.dtype(),
                                         base.device(), DimVector(view.sizes()),
                                         DimVector(view.strides()), view.storage_offset(),
                                         base.storage_offset(), base.is_contiguous());
  node->next.push_back(gradient_edge(base));
  set_history(view, node, 0);
}

// ---- the Autograd-key fallback ------------------------------------------------------------------

void autograd_fallback(const dispatch::OperatorHandle& op, DispatchKeySet ks, Stack& stack) {
  const dispatch::OpSchema& schema = op.schema();
  std::vector<bool> needs(stack.size(), false);
  bool any = false;
  for (std::size_t i = 0; i < stack.size(); ++i) {
    if (stack[i].is_tensor() && stack[i].tensor().defined() && stack[i].tensor().requires_grad()) {
      needs[i] = true;
      any = true;
    }
  }
  any = any && is_grad_enabled();
  for (int m : schema.mutated_args) {
    const auto& iv = stack[static_cast<std::size_t>(m)];
    TB_CHECK_T(NotImplementedError, !(any && iv.is_tensor() && iv.tensor().requires_grad()),
               "[autograd] in-place op '", op.name(),
               "' on a tensor that requires grad is not supported; run it under a no-grad guard "
               "or on a detached tensor");
  }
  const DerivativeRule* rule = any ? find_derivative(op.name()) : nullptr;
  TB_CHECK_T(NotImplementedError, !any || rule != nullptr || !schema.differentiable,
             "[autograd] op '", op.name(),
             "' has no derivative rule (add one to "
             "engine/autograd/derivatives.cpp)");
  Stack saved;
  std::vector<Tensor> mutated;
  std::vector<Edge> edges;  // one per tensor argument, in order
  if (rule != nullptr) {
    for (std::size_t i = 0; i < stack.size(); ++i) {
      const auto& iv = stack[i];
      saved.push_back(iv.is_tensor() ? dispatch::IValue(alias_without_history(iv.tensor())) : iv);
      if (iv.is_tensor()) edges.push_back(needs[i] ? gradient_edge(iv.tensor()) : Edge{});
    }
    for (int m : schema.mutated_args)
      mutated.push_back(stack[static_cast<std::size_t>(m)].tensor());
  }
  {
    // Ops the kernel runs are not recorded (guard); this op continues with the keys it was
    // dispatched with, so a key its caller skipped (copy_ skips CPU) stays skipped.
    dispatch::ExcludeKeysGuard below{DispatchKeySet(DispatchKey::Autograd)};
    // (Called through a kernel handle, the set holds only Autograd: dispatch afresh.)
    const DispatchKeySet below_keys = ks.remove(DispatchKey::Autograd);
    if (below_keys.empty()) {
      op.call_boxed(stack);
    } else {
      op.redispatch_boxed(below_keys, stack);
    }
  }
  // Outputs: what the op returned, or for in-place/out ops the tensors it wrote.
  std::vector<Tensor> outputs;
  for (auto& iv : stack) {
    if (iv.is_tensor()) outputs.push_back(iv.tensor());
  }
  if (outputs.empty()) outputs = mutated;
  if (rule == nullptr) {
    // Not differentiable (or grad mode off): outputs are plain tensors.
    for (auto& t : outputs) {
      if (t.defined()) t.impl()->requires_grad = false;
    }
    return;
  }
  std::vector<Tensor> saved_outputs;
  for (const auto& t : outputs)
    saved_outputs.push_back(alias_without_history(t));
  auto node = std::make_shared<OpNode>(op.name(), rule, std::move(saved), std::move(saved_outputs),
                                       std::move(needs));
  node->next = std::move(edges);
  for (std::size_t k = 0; k < outputs.size(); ++k) {
    const Tensor& t = outputs[k];
    if (!t.defined()) continue;
    if (core::is_floating_point(t.dtype())) {
      set_history(t, node, static_cast<int>(k));
    } else {
      t.impl()->requires_grad = false;  // integer outputs (indices, comparisons) carry no grad
    }
  }
}

// ---- the backward engine ------------------------------------------------------------------------

Tensor accumulate(const Tensor& a, const Tensor& b) {
  if (!a.defined()) return b;
  if (!b.defined()) return a;
  return ops::add(a, b);
}

struct CompareSeq {
  bool operator()(const std::shared_ptr<Node>& a, const std::shared_ptr<Node>& b) const {
    return a->sequence_nr() < b->sequence_nr();  // later nodes first
  }
};

void run_backward(const Edge& root, const Tensor& root_grad, bool retain_graph) {
  // Count how many gradients each node will receive.
  std::unordered_map<Node*, int> dependencies;
  std::vector<Node*> stack_nodes{root.fn.get()};
  std::unordered_set<Node*> seen{root.fn.get()};
  std::vector<std::shared_ptr<Node>> all{root.fn};
  while (!stack_nodes.empty()) {
    Node* n = stack_nodes.back();
    stack_nodes.pop_back();
    for (const Edge& e : n->next) {
      if (!e.valid()) continue;
      dependencies[e.fn.get()]++;
      if (seen.insert(e.fn.get()).second) {
        stack_nodes.push_back(e.fn.get());
        all.push_back(e.fn);
      }
    }
  }
  std::unordered_map<Node*, std::vector<Tensor>> buffers;
  auto& root_buf = buffers[root.fn.get()];
  root_buf.resize(static_cast<std::size_t>(std::max(root.fn->num_outputs(), root.input_nr + 1)));
  root_buf[static_cast<std::size_t>(root.input_nr)] = root_grad;

  std::priority_queue<std::shared_ptr<Node>, std::vector<std::shared_ptr<Node>>, CompareSeq> ready;
  ready.push(root.fn);
  NoGradGuard no_grad;  // gradients themselves are not recorded (no create_graph)
  while (!ready.empty()) {
    std::shared_ptr<Node> n = ready.top();
    ready.pop();
    std::vector<Tensor> in = std::move(buffers[n.get()]);
    buffers.erase(n.get());
    std::vector<Tensor> out = n->apply(std::move(in));
    for (std::size_t i = 0; i < n->next.size(); ++i) {
      const Edge& e = n->next[i];
      if (!e.valid()) continue;
      auto& buf = buffers[e.fn.get()];
      if (buf.size() <= static_cast<std::size_t>(e.input_nr)) {
        buf.resize(static_cast<std::size_t>(std::max(e.fn->num_outputs(), e.input_nr + 1)));
      }
      if (i < out.size()) {
        buf[static_cast<std::size_t>(e.input_nr)] =
            accumulate(buf[static_cast<std::size_t>(e.input_nr)], out[i]);
      }
      if (--dependencies[e.fn.get()] == 0) ready.push(e.fn);
    }
  }
  if (!retain_graph) {
    for (auto& n : all)
      n->release();
  }
}

}  // namespace

Node::Node() : sequence_nr_(next_sequence_nr.fetch_add(1)) {}

Tensor requires_grad_(const Tensor& t, bool requires_grad) {
  TB_CHECK(t.defined(), "[autograd] requires_grad_ on an undefined tensor");
  TB_CHECK_T(TypeError, !requires_grad || core::is_floating_point(t.dtype()),
             "[autograd] only floating-point tensors can require gradients, got ", t.dtype());
  TB_CHECK(is_leaf(t),
           "[autograd] requires_grad_ can only change leaf tensors; use detach() to "
           "get a leaf from ",
           grad_fn_name(t));
  t.impl()->requires_grad = requires_grad;
  return t;
}

Tensor grad(const Tensor& t) {
  const AutogradMeta* m = t.defined() ? meta(t) : nullptr;
  return m != nullptr ? m->grad : Tensor();
}

void set_grad(const Tensor& t, const Tensor& g) {
  TB_CHECK(!g.defined() || core::DimVector(g.sizes()) == core::DimVector(t.sizes()),
           "[autograd] gradient of shape ", core::DimVector(g.sizes()),
           " does not match the tensor's shape ", core::DimVector(t.sizes()));
  ensure_meta(t).grad = g;
}

void zero_grad(const Tensor& t, bool set_to_none) {
  AutogradMeta* m = meta(t);
  if (m == nullptr || !m->grad.defined()) return;
  if (set_to_none) {
    m->grad = Tensor();
  } else {
    m->grad.zero_();
  }
}

bool is_leaf(const Tensor& t) {
  const AutogradMeta* m = meta(t);
  return m == nullptr || m->grad_fn == nullptr;
}

std::shared_ptr<Node> grad_fn(const Tensor& t) {
  const AutogradMeta* m = meta(t);
  return m != nullptr ? m->grad_fn : nullptr;
}

std::string grad_fn_name(const Tensor& t) {
  auto fn = grad_fn(t);
  return fn ? fn->name() : std::string();
}

void backward(const Tensor& output, const Tensor& gradient, bool retain_graph) {
  TB_CHECK(output.defined(), "[backward] called on an undefined tensor");
  TB_CHECK(output.requires_grad(),
           "[backward] the tensor does not require grad and has no grad_fn: nothing to "
           "differentiate (did an input call requires_grad_()?)");
  Tensor g = gradient;
  if (!g.defined()) {
    TB_CHECK(output.numel() == 1,
             "[backward] grad can be implicitly created only for outputs "
             "with one element; got shape ",
             DimVector(output.sizes()), " (pass the gradient explicitly)");
    g = ops::ones(output.sizes(), output.dtype(), output.device());
  } else {
    TB_CHECK(DimVector(g.sizes()) == DimVector(output.sizes()), "[backward] gradient of shape ",
             DimVector(g.sizes()), " does not match the output's shape ",
             DimVector(output.sizes()));
  }
  const Edge root = gradient_edge(output);
  run_backward(root, g, retain_graph);
}

Tensor detach(const Tensor& t) {
  return alias_without_history(t);
}

void register_autograd(dispatch::Dispatcher& d) {
  core::set_view_hook(&view_hook);
  d.fallback(DispatchKey::Autograd, &autograd_fallback).detach();
}

}  // namespace tb::autograd
