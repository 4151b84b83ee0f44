// How a reduction over some dims runs on any backend: the input permuted to [kept..., reduced...]
// and made contiguous (a device copy on a device), so every output element reduces one
// contiguous row of R elements of a [K, R] matrix. Host code shared by the CPU and CUDA kernels.
#pragma once

#include <vector>

#include "engine/core/tensor.h"

namespace tb::backends {

struct ReducePlan {
  core::Tensor rows;          // contiguous, viewed as [K, R]
  core::DimVector out_shape;  // with or without kept size-1 dims
  std::int64_t k = 1;
  std::int64_t r = 1;
};

/// The plan of reducing `t` over `dims` (already wrapped and distinct).
inline ReducePlan plan_reduce(const core::Tensor& t, core::IntList dims, bool keepdim) {
  ReducePlan p;
  std::vector<bool> reduced(static_cast<std::size_t>(t.dim()), false);
  for (auto d : dims)
    reduced[static_cast<std::size_t>(d)] = true;
  core::DimVector order;
  for (std::int64_t d = 0; d < t.dim(); ++d) {
    const bool red = reduced[static_cast<std::size_t>(d)];
    if (!red) {
      order.push_back(d);
      p.k *= t.size(d);
    }
    // out_shape follows the original dim order.
    if (!red) {
      p.out_shape.push_back(t.size(d));
    } else if (keepdim) {
      p.out_shape.push_back(1);
    }
  }
  for (auto d : dims) {
    order.push_back(d);
    p.r *= t.size(d);
  }
  p.rows = t.permute(order.span()).contiguous();
  return p;
}

}  // namespace tb::backends
