// Module: the base of every layer and model. Holds parameters, buffers and child modules under
// hierarchical names ("layers.0.attn.q_proj.weight"), the train/eval flag, state_dict save/load
// and device/dtype moves. Parameters keep their identity for the module's life (a move or a load
// changes their data in place), so optimizers may hold them.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "engine/core/tensor.h"

namespace tb::nn {

using core::Tensor;

/// Named tensors in a fixed order: named_parameters(), state_dict().
using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

/// What a non-strict load_state_dict skipped.
struct LoadResult {
  std::vector<std::string> missing_keys;     ///< in the module, not in the state dict
  std::vector<std::string> unexpected_keys;  ///< in the state dict, not in the module
};

/// A layer or model. Subclasses register their tensors and children in the constructor and
/// override forward().
class Module {
 public:
  /// `type_name` is shown in errors and repr(), e.g. "Linear".
  explicit Module(std::string type_name);
  virtual ~Module() = default;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  /// The layer's type, e.g. "Linear".
  const std::string& type_name() const { return type_name_; }
  /// Dotted path from the root module ("" for the root), e.g. "layers.0.attn".
  const std::string& path() const { return path_; }
  /// "Linear 'layers.0.fc'" (or just the type for a root): how errors name a layer.
  std::string describe() const;

  /// Applies the module to one input. The base class raises tb::NotImplementedError (containers
  /// such as ModuleList have no forward of their own).
  virtual Tensor forward(const Tensor& input);
  /// Calls forward().
  Tensor operator()(const Tensor& input) { return forward(input); }

  /// Parameters with their full names, in registration order (children after own tensors).
  NamedTensors named_parameters(bool recurse = true) const;
  /// The parameters of named_parameters().
  std::vector<Tensor> parameters(bool recurse = true) const;
  /// Buffers (persistent or not) with their full names.
  NamedTensors named_buffers(bool recurse = true) const;
  /// This module ("") and every descendant with its path, depth first.
  std::vector<std::pair<std::string, Module*>> named_modules();
  /// The same, read-only.
  std::vector<std::pair<std::string, const Module*>> named_modules() const;
  /// Direct children with their local names.
  const std::vector<std::pair<std::string, std::shared_ptr<Module>>>& children() const {
    return children_;
  }
  /// Number of parameter elements; a tensor shared by two modules counts once.
  std::int64_t num_parameters() const;

  /// Sets training mode here and in every descendant (Dropout acts only in training).
  void train(bool on = true);
  /// train(false).
  void eval() { train(false); }
  /// True in training mode (the default).
  bool is_training() const { return training_; }

  /// Drops (set_to_none) or zeroes the gradient of every parameter.
  void zero_grad(bool set_to_none = true);

  /// Parameters and persistent buffers by full name. The tensors are the module's own (not
  /// copies); clone them to keep a snapshot.
  NamedTensors state_dict() const;
  /// Copies values into the module's tensors (converting dtype/device). Every problem is
  /// collected first — missing keys (strict), unexpected keys (strict), shape mismatches (always)
  /// — and reported in one tb::ValueError naming the module and each key; the module is left
  /// untouched when anything is wrong.
  LoadResult load_state_dict(const NamedTensors& state, bool strict = true);

  /// Moves every parameter and buffer to `device` in place (their identity is kept).
  void to(core::Device device);
  /// Converts floating-point parameters and buffers to `dtype` in place.
  void to(core::ScalarType dtype);

  /// A tree of the module, its children and parameter shapes, one line each.
  std::string repr() const;

 protected:
  /// Registers a parameter (made a leaf that requires grad). Returns the registered tensor.
  Tensor register_parameter(const std::string& name, const Tensor& value);
  /// Registers a buffer; non-persistent buffers are left out of state_dict().
  Tensor register_buffer(const std::string& name, const Tensor& value, bool persistent = true);
  /// Registers a child module under `name`; returns it.
  template <typename M>
  std::shared_ptr<M> register_module(const std::string& name, std::shared_ptr<M> child) {
    add_child(name, child);
    return child;
  }
  /// One line of repr() for this module's own settings, e.g. "in=784, out=256".
  virtual std::string extra_repr() const { return ""; }

 private:
  struct Slot {
    std::string name;
    Tensor tensor;
    bool persistent = true;
  };
  void add_child(const std::string& name, std::shared_ptr<Module> child);
  void check_new_name(const std::string& name) const;
  void set_path(const std::string& path);
  void collect(NamedTensors& out, const std::string& prefix, bool params, bool buffers,
               bool persistent_only, bool recurse) const;
  void repr_into(std::string& out, const std::string& name, int depth) const;

  std::string type_name_;
  std::string path_;
  bool training_ = true;
  std::vector<Slot> params_;
  std::vector<Slot> buffers_;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> children_;
};

/// Replaces the data of `target` (storage, shape, dtype, device) with `value`'s, keeping the
/// tensor's identity and autograd leaf status: how modules move and load their tensors.
void assign_data(const Tensor& target, const Tensor& value);

/// An ordered list of child modules named "0", "1", ...
class ModuleList : public Module {
 public:
  /// An empty list (`type_name` lets Sequential reuse it).
  explicit ModuleList(std::string type_name = "ModuleList");
  /// Appends `m` under the next index.
  void push_back(std::shared_ptr<Module> m);
  /// The i-th module.
  Module& operator[](std::size_t i) const { return *children()[i].second; }
  /// Number of modules.
  std::size_t size() const { return children().size(); }
};

/// Children applied in order: forward(x) = m_n(...m_1(x)).
class Sequential : public ModuleList {
 public:
  Sequential() : ModuleList("Sequential") {}
  /// Runs every child on the previous child's output.
  Tensor forward(const Tensor& input) override;
};

}  // namespace tb::nn
