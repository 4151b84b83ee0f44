#include "engine/nn/module.h"

#include <algorithm>
#include <map>
#include <set>
#include <sstream>

#include "engine/autograd/autograd.h"
#include "engine/core/error.h"
#include "engine/ops/ops.h"

namespace tb::nn {

using core::DimVector;

Module::Module(std::string type_name) : type_name_(std::move(type_name)) {}

std::string Module::describe() const {
  return path_.empty() ? type_name_ : type_name_ + " '" + path_ + "'";
}

Tensor Module::forward(const Tensor&) {
  throw NotImplementedError(
      tb::detail::str_cat("[nn] ", describe(), " has no forward(input) of its own"));
}

void Module::check_new_name(const std::string& name) const {
  TB_CHECK(!name.empty() && name.find('.') == std::string::npos, "[nn] ", describe(),
           ": invalid name '", name, "' (it must be non-empty and contain no '.')");
  auto taken = [&](const auto& v) {
    return std::any_of(v.begin(), v.end(), [&](const auto& s) { return s.name == name; });
  };
  const bool child = std::any_of(children_.begin(), children_.end(),
                                 [&](const auto& c) { return c.first == name; });
  TB_CHECK(!taken(params_) && !taken(buffers_) && !child, "[nn] ", describe(), ": the name '", name,
           "' is already registered");
}

Tensor Module::register_parameter(const std::string& name, const Tensor& value) {
  check_new_name(name);
  TB_CHECK(value.defined(), "[nn] ", describe(), ": parameter '", name, "' is undefined");
  Tensor p = value;
  if (!autograd::is_leaf(p)) p = autograd::detach(p);
  autograd::requires_grad_(p, true);
  params_.push_back({name, p, true});
  return p;
}

Tensor Module::register_buffer(const std::string& name, const Tensor& value, bool persistent) {
  check_new_name(name);
  TB_CHECK(value.defined(), "[nn] ", describe(), ": buffer '", name, "' is undefined");
  buffers_.push_back({name, value, persistent});
  return value;
}

void Module::add_child(const std::string& name, std::shared_ptr<Module> child) {
  check_new_name(name);
  TB_CHECK(child != nullptr, "[nn] ", describe(), ": child module '", name, "' is null");
  children_.emplace_back(name, child);
  child->set_path(path_.empty() ? name : path_ + "." + name);
}

void Module::set_path(const std::string& path) {
  path_ = path;
  for (auto& [name, child] : children_)
    child->set_path(path_.empty() ? name : path_ + "." + name);
}

void Module::collect(NamedTensors& out, const std::string& prefix, bool params, bool buffers,
                     bool persistent_only, bool recurse) const {
  if (params) {
    for (const auto& s : params_)
      out.emplace_back(prefix + s.name, s.tensor);
  }
  if (buffers) {
    for (const auto& s : buffers_) {
      if (!persistent_only || s.persistent) out.emplace_back(prefix + s.name, s.tensor);
    }
  }
  if (!recurse) return;
  for (const auto& [name, child] : children_)
    child->collect(out, prefix + name + ".", params, buffers, persistent_only, true);
}

NamedTensors Module::named_parameters(bool recurse) const {
  NamedTensors out;
  collect(out, "", true, false, false, recurse);
  return out;
}

std::vector<Tensor> Module::parameters(bool recurse) const {
  std::vector<Tensor> out;
  for (auto& [name, t] : named_parameters(recurse))
    out.push_back(t);
  return out;
}

NamedTensors Module::named_buffers(bool recurse) const {
  NamedTensors out;
  collect(out, "", false, true, false, recurse);
  return out;
}

std::vector<std::pair<std::string, Module*>> Module::named_modules() {
  std::vector<std::pair<std::string, Module*>> out{{"", this}};
  for (auto& [name, child] : children_) {
    for (auto& [sub, m] : child->named_modules())
      out.emplace_back(sub.empty() ? name : name + "." + sub, m);
  }
  return out;
}

std::vector<std::pair<std::string, const Module*>> Module::named_modules() const {
  std::vector<std::pair<std::string, const Module*>> out;
  for (const auto& [path, m] : const_cast<Module*>(this)->named_modules())
    out.emplace_back(path, m);
  return out;
}

std::int64_t Module::num_parameters() const {
  std::set<const core::TensorImpl*> seen;
  std::int64_t n = 0;
  for (const auto& [name, t] : named_parameters()) {
    if (seen.insert(t.impl()).second) n += t.numel();
  }
  return n;
}

void Module::train(bool on) {
  training_ = on;
  for (auto& [name, child] : children_)
    child->train(on);
}

void Module::zero_grad(bool set_to_none) {
  for (const auto& p : parameters())
    autograd::zero_grad(p, set_to_none);
}

NamedTensors Module::state_dict() const {
  NamedTensors out;
  collect(out, "", true, true, true, true);
  return out;
}

namespace {
std::string shape_str(const Tensor& t) {
  std::ostringstream os;
  os << DimVector(t.sizes());
  return os.str();
}
}  // namespace

LoadResult Module::load_state_dict(const NamedTensors& state, bool strict) {
  const NamedTensors own = state_dict();
  std::map<std::string, const Tensor*> given;
  std::vector<std::string> duplicates;
  for (const auto& [name, t] : state) {
    if (!given.emplace(name, &t).second) duplicates.push_back(name);
  }
  LoadResult result;
  std::vector<std::string> mismatched;
  std::set<std::string> own_names;
  for (const auto& [name, t] : own) {
    own_names.insert(name);
    auto it = given.find(name);
    if (it == given.end()) {
      result.missing_keys.push_back(name);
      continue;
    }
    const Tensor& v = *it->second;
    if (!v.defined()) {
      mismatched.push_back("value for " + name + " is an undefined tensor");
    } else if (DimVector(v.sizes()) != DimVector(t.sizes())) {
      mismatched.push_back("size mismatch for " + name + ": copying a param with shape " +
                           shape_str(v) + " from checkpoint, the shape in current model is " +
                           shape_str(t));
    }
  }
  for (const auto& [name, t] : state) {
    if (!own_names.count(name)) result.unexpected_keys.push_back(name);
  }
  std::ostringstream err;
  auto quoted = [](const std::vector<std::string>& v) {
    std::string s;
    for (std::size_t i = 0; i < v.size(); ++i)
      s += (i ? ", \"" : "\"") + v[i] + "\"";
    return s;
  };
  if (strict && !result.missing_keys.empty())
    err << "\n\tMissing key(s) in state_dict: " << quoted(result.missing_keys) << ".";
  if (strict && !result.unexpected_keys.empty())
    err << "\n\tUnexpected key(s) in state_dict: " << quoted(result.unexpected_keys) << ".";
  if (!duplicates.empty())
    err << "\n\tDuplicate key(s) in state_dict: " << quoted(duplicates) << ".";
  for (const auto& m : mismatched)
    err << "\n\t" << m << ".";
  if (!err.str().empty()) {
    throw ValueError("[nn] Error(s) in loading state_dict for " + describe() + ":" + err.str());
  }
  autograd::NoGradGuard no_grad;
  for (const auto& [name, t] : own) {
    auto it = given.find(name);
    if (it == given.end()) continue;
    Tensor dst = t;
    ops::copy_(dst, *it->second);
  }
  return result;
}

void assign_data(const Tensor& target, const Tensor& value) {
  TB_CHECK(target.defined() && value.defined(), "[nn] assign_data needs two defined tensors");
  core::TensorImpl* im = target.impl();
  const core::TensorImpl* src = value.impl();
  const bool same_kind = im->dtype == src->dtype && im->device == src->device;
  im->storage = src->storage;
  im->sizes = src->sizes;
  im->strides = src->strides;
  im->offset = src->offset;
  im->dtype = src->dtype;
  im->device = src->device;
  im->version++;
  // A gradient of another dtype/device no longer fits the parameter.
  if (!same_kind && autograd::is_leaf(target)) autograd::set_grad(target, Tensor());
}

void Module::to(core::Device device) {
  autograd::NoGradGuard no_grad;
  for (auto& [name, t] : named_parameters())
    if (t.device() != device) assign_data(t, t.to(device));
  for (auto& [name, t] : named_buffers())
    if (t.device() != device) assign_data(t, t.to(device));
}

void Module::to(core::ScalarType dtype) {
  TB_CHECK_T(TypeError, core::is_floating_point(dtype), "[nn] ", describe(),
             ": modules convert to floating-point dtypes only, got ", dtype);
  autograd::NoGradGuard no_grad;
  auto convert = [&](const Tensor& t) {
    if (core::is_floating_point(t.dtype()) && t.dtype() != dtype) assign_data(t, t.to(dtype));
  };
  for (auto& [name, t] : named_parameters())
    convert(t);
  for (auto& [name, t] : named_buffers())
    convert(t);
}

void Module::repr_into(std::string& out, const std::string& name, int depth) const {
  const std::string indent(static_cast<std::size_t>(depth) * 2, ' ');
  out += indent + (name.empty() ? "" : name + ": ") + type_name_;
  const std::string extra = extra_repr();
  if (!extra.empty()) out += "(" + extra + ")";
  out += "\n";
  for (const auto& s : params_)
    out += indent + "  " + s.name + " " + shape_str(s.tensor) + "\n";
  for (const auto& [child_name, child] : children_)
    child->repr_into(out, child_name, depth + 1);
}

std::string Module::repr() const {
  std::string out;
  repr_into(out, "", 0);
  return out;
}

ModuleList::ModuleList(std::string type_name) : Module(std::move(type_name)) {}

void ModuleList::push_back(std::shared_ptr<Module> m) {
  register_module(std::to_string(children().size()), std::move(m));
}

Tensor Sequential::forward(const Tensor& input) {
  Tensor x = input;
  for (const auto& [name, child] : children())
    x = child->forward(x);
  return x;
}

}  // namespace tb::nn
