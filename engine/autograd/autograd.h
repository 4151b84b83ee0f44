// Reverse-mode automatic differentiation: requires_grad, the graph of backward nodes, backward(),
// grad mode (no-grad guard), detach and gradient accumulation on leaves.
//
// How it works: tensors that require grad add the Autograd dispatch key. One boxed kernel at
// that key (the autograd fallback) runs any op below the layer, then, when an input requires
// grad and grad mode is on, records a node whose backward is the op's rule from the derivative
// table (engine/autograd/derivatives.cpp: every rule lives there). View methods reach the graph
// through core's view hook. Kernels never look at requires_grad.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/core/tensor.h"
#include "engine/dispatch/dispatch_key.h"
#include "engine/dispatch/grad_mode.h"

namespace tb::dispatch {
class Dispatcher;
}

namespace tb::autograd {

using core::Tensor;

class Node;

/// An input slot of a backward node: gradients for `input_nr` of `fn` flow along it.
struct Edge {
  std::shared_ptr<Node> fn;  ///< null: the input does not need a gradient
  int input_nr = 0;          ///< which of fn's inputs
  bool valid() const { return fn != nullptr; }
};

/// A backward function in the graph. apply() maps the gradients of the forward op's outputs to
/// the gradients of its inputs (one per edge in `next`, undefined where none is needed).
class Node : public std::enable_shared_from_this<Node> {
 public:
  Node();
  virtual ~Node() = default;
  Node(const Node&) = delete;
  Node& operator=(const Node&) = delete;

  /// Display name, e.g. "MulBackward" (the op name + "Backward").
  virtual std::string name() const = 0;
  /// Computes input gradients from output gradients (undefined entries mean zero).
  virtual std::vector<Tensor> apply(std::vector<Tensor>&& grad_outputs) = 0;
  /// Drops saved tensors after a backward without retain_graph.
  virtual void release() {}
  /// Number of forward outputs (gradient slots this node receives).
  virtual int num_outputs() const { return 1; }

  std::vector<Edge> next;  ///< one per differentiable input of the forward op
  std::uint64_t sequence_nr() const { return sequence_nr_; }

 private:
  std::uint64_t sequence_nr_;
};

/// Marks a leaf tensor as requiring (or not) a gradient. Only floating-point tensors can require
/// grad; a non-leaf cannot be changed. Returns t.
Tensor requires_grad_(const Tensor& t, bool requires_grad = true);

/// The accumulated gradient of a leaf (undefined before the first backward).
Tensor grad(const Tensor& t);
/// Sets or clears (undefined tensor) the gradient of a leaf. A gradient that itself has a graph
/// saving `t` makes a reference cycle (t -> grad -> node -> t) that is never freed, as in
/// PyTorch: compute such a value under a NoGradGuard (or detach it) first.
void set_grad(const Tensor& t, const Tensor& grad);
/// Zeroes the gradient, or drops it when set_to_none (the default, as in PyTorch).
void zero_grad(const Tensor& t, bool set_to_none = true);

/// True for tensors created by the user (no grad_fn); tensors that do not require grad are leaves.
bool is_leaf(const Tensor& t);
/// The node that produced t ("" for leaves), e.g. "MmBackward".
std::string grad_fn_name(const Tensor& t);
/// The node that produced t (null for leaves).
std::shared_ptr<Node> grad_fn(const Tensor& t);

/// Computes gradients of `output` with respect to every leaf that requires grad and accumulates
/// them into their grad(). `gradient` is d(loss)/d(output); it may be omitted only for a
/// one-element output (then 1). Without retain_graph the graph's saved tensors are freed and a
/// second backward through it raises an error saying so.
void backward(const Tensor& output, const Tensor& gradient = Tensor(), bool retain_graph = false);

/// A tensor sharing t's data that is not connected to the graph and does not require grad.
Tensor detach(const Tensor& t);

/// Grad mode lives below ops (engine/dispatch/grad_mode.h); these are its autograd names.
using dispatch::is_grad_enabled;
using dispatch::NoGradGuard;

/// Registers the autograd fallback at the Autograd key and installs the view hook (called once
/// by register_all).
void register_autograd(dispatch::Dispatcher& d);

}  // namespace tb::autograd
