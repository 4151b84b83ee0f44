// How a matrix operand (the last two dims of a 2-D or 3-D tensor) is handed to a BLAS: as is,
// as a transpose (column-major storage), or as a contiguous copy when its strides fit neither.
// Host code shared by the CPU and CUDA matrix-product kernels.
#pragma once

#include <algorithm>
#include <cstdint>

#include "engine/core/tensor.h"

namespace tb::backends {

struct MatArg {
  core::Tensor t;                 // the tensor BLAS reads (possibly a contiguous copy)
  bool trans = false;             // stored transposed: rows have stride 1
  std::int64_t ld = 1;            // leading dimension
  std::int64_t batch_stride = 0;  // elements between matrices of a 3-D operand (0: broadcast)
};

inline MatArg mat_arg(const core::Tensor& x) {
  const std::int64_t nd = x.dim();
  const std::int64_t rows = x.size(nd - 2);
  const std::int64_t cols = x.size(nd - 1);
  const std::int64_t rs = x.stride(nd - 2);
  const std::int64_t cs = x.stride(nd - 1);
  MatArg m;
  if ((cs == 1 || cols == 1) && rs >= std::max<std::int64_t>(1, cols)) {
    m = {x, false, rs, nd == 3 ? x.stride(0) : 0};
  } else if ((rs == 1 || rows == 1) && cs >= std::max<std::int64_t>(1, rows)) {
    m = {x, true, cs, nd == 3 ? x.stride(0) : 0};
  } else {
    core::Tensor c = x.contiguous();
    m = {c, false, std::max<std::int64_t>(1, cols), nd == 3 ? rows * cols : 0};
  }
  // A broadcast batch dim (stride 0) is fine for BLAS; other odd batch strides are not.
  if (nd == 3 && x.size(0) > 1 && m.batch_stride != 0 && m.batch_stride < rows * cols) {
    core::Tensor c = x.contiguous();
    m = {c, false, std::max<std::int64_t>(1, cols), rows * cols};
  }
  return m;
}

}  // namespace tb::backends
