// The argument rules of the fused multi-tensor operators (`adam_step_`, `foreach_lerp_`,
// `muon_momentum_`), checked the same way by every backend's kernel (host code): lists of one
// length (or empty where a list is optional), one dtype, contiguous tensors, all on one device.
#pragma once

#include <cstddef>
#include <initializer_list>
#include <vector>

#include "engine/core/error.h"
#include "engine/core/tensor.h"

namespace tb::backends {

/// One named tensor list of a multi-tensor operator.
struct NamedList {
  const char* name;                       ///< the argument's name, for messages
  const std::vector<core::Tensor>* list;  ///< the tensors
  bool optional = false;                  ///< may be empty instead of one entry per parameter
};

/// Throws naming the operator, the first offending list and entry when the lists differ in
/// length or a tensor is not a contiguous tensor of the first tensor's dtype on `device`.
/// Returns that dtype (Float32 when there are no tensors).
inline core::ScalarType check_tensor_lists(const char* op, std::initializer_list<NamedList> lists,
                                           const core::Device& device) {
  const std::size_t n = lists.begin()->list->size();
  for (const NamedList& l : lists) {
    TB_CHECK(l.list->size() == n || (l.optional && l.list->empty()), "[", op, "] ", l.name, " has ",
             l.list->size(), " tensors but ", lists.begin()->name, " has ", n);
  }
  if (n == 0) return core::ScalarType::Float32;
  const core::ScalarType dt = (*lists.begin()->list)[0].dtype();
  for (const NamedList& l : lists) {
    for (std::size_t i = 0; i < l.list->size(); ++i) {
      const core::Tensor& t = (*l.list)[i];
      TB_CHECK_T(TypeError,
                 t.defined() && t.dtype() == dt && t.is_contiguous() && t.device() == device, "[",
                 op, "] every tensor must be a contiguous ", dt, " tensor on ", device, "; ",
                 l.name, "[", i, "] is ",
                 t.defined() ? detail::str_cat(t.is_contiguous() ? "a contiguous " : "a strided ",
                                               t.dtype(), " tensor on ", t.device())
                             : std::string("undefined"));
    }
  }
  return dt;
}

}  // namespace tb::backends
