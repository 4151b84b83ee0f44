// Strided N-operand loops for CPU elementwise kernels, with broadcasting and dim coalescing.
//
// An operand set is an output (fresh or in-place) plus inputs already expanded to the output's
// shape (stride 0 on broadcast dims). Dims are coalesced where every operand is contiguous
// across them, then rows of the innermost dim are run in parallel. The inner loop is typed, so
// the contiguous case vectorises.
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>

#include "engine/core/tensor.h"
#include "engine/core/thread_pool.h"

namespace tb::cpu {

using core::DimVector;
using core::IntList;
using core::Tensor;

/// Geometry of N same-shaped operands after coalescing; strides are in elements.
template <int N>
struct LoopGeometry {
  DimVector shape;
  std::array<DimVector, N> strides;

  LoopGeometry(IntList sizes, const std::array<const Tensor*, N>& ops) {
    // Drop size-1 dims, then merge dim i into i+1 when every operand is contiguous across them.
    for (std::size_t d = 0; d < sizes.size(); ++d) {
      if (sizes[d] == 1) continue;
      shape.push_back(sizes[d]);
      for (int k = 0; k < N; ++k)
        strides[k].push_back(ops[k]->strides()[d]);
    }
    if (shape.empty()) {
      shape.push_back(1);
      for (int k = 0; k < N; ++k)
        strides[k].push_back(0);
    }
    DimVector s2;
    std::array<DimVector, N> st2;
    s2.push_back(shape[0]);
    for (int k = 0; k < N; ++k)
      st2[k].push_back(strides[k][0]);
    for (std::size_t d = 1; d < shape.size(); ++d) {
      bool mergeable = true;
      for (int k = 0; k < N; ++k) {
        if (st2[k].back() != strides[k][d] * shape[d]) mergeable = false;
      }
      if (mergeable) {
        s2.back() *= shape[d];
        for (int k = 0; k < N; ++k)
          st2[k].back() = strides[k][d];
      } else {
        s2.push_back(shape[d]);
        for (int k = 0; k < N; ++k)
          st2[k].push_back(strides[k][d]);
      }
    }
    shape = std::move(s2);
    strides = std::move(st2);
  }
};

/// Runs `row(ptrs, inner_strides, n)` over every innermost row of the operands, in parallel.
/// ptrs[k] points at the row's first element of operand k (as char*); inner_strides[k] is the
/// element stride along the row. `elem_sizes[k]` is operand k's element size in bytes.
template <int N, typename RowFn>
void for_each_row(const LoopGeometry<N>& g, const std::array<char*, N>& base,
                  const std::array<std::int64_t, N>& elem_sizes, RowFn&& row) {
  const std::size_t nd = g.shape.size();
  const std::int64_t inner = g.shape[nd - 1];
  std::int64_t rows = 1;
  for (std::size_t d = 0; d + 1 < nd; ++d)
    rows *= g.shape[d];
  std::array<std::int64_t, N> inner_strides;
  for (int k = 0; k < N; ++k)
    inner_strides[k] = g.strides[k][nd - 1];
  const std::int64_t grain = std::max<std::int64_t>(1, 32768 / std::max<std::int64_t>(inner, 1));
  core::parallel_for(0, rows, grain, [&](std::int64_t r0, std::int64_t r1) {
    for (std::int64_t r = r0; r < r1; ++r) {
      std::array<char*, N> p = base;
      std::int64_t rem = r;
      for (std::size_t d = nd - 1; d-- > 0;) {
        const std::int64_t idx = rem % g.shape[d];
        rem /= g.shape[d];
        for (int k = 0; k < N; ++k)
          p[k] += idx * g.strides[k][d] * elem_sizes[k];
      }
      row(p, inner_strides, inner);
    }
  });
}

/// Accumulation/compute type: float for 16-bit floats, the type itself otherwise.
template <typename T>
struct ComputeType {
  using type = T;
};
template <>
struct ComputeType<core::Half> {
  using type = float;
};
template <>
struct ComputeType<core::BFloat16> {
  using type = float;
};
template <typename T>
using compute_t = typename ComputeType<T>::type;

/// True when every operand is contiguous (then one flat loop covers them all).
inline bool all_contiguous(std::initializer_list<const Tensor*> ts) {
  for (const Tensor* t : ts) {
    if (!t->is_contiguous()) return false;
  }
  return true;
}

/// Runs body(begin, end) over [0, n) in parallel chunks (the flat, all-contiguous fast path).
template <typename Body>
void flat_loop(std::int64_t n, Body&& body) {
  core::parallel_for(0, n, 32768, body);
}

/// out[i] = f(a[i]) over same-shaped operands of element types Out and In.
template <typename Out, typename In, typename F>
void unary_loop(Tensor& out, const Tensor& a, F f) {
  if (all_contiguous({&out, &a})) {
    Out* o = static_cast<Out*>(out.data_ptr());
    const In* x = static_cast<const In*>(a.data_ptr());
    flat_loop(out.numel(), [&](std::int64_t b, std::int64_t e) {
      for (std::int64_t i = b; i < e; ++i)
        o[i] = f(x[i]);
    });
    return;
  }
  LoopGeometry<2> g(out.sizes(), {&out, &a});
  std::array<char*, 2> base = {static_cast<char*>(out.data_ptr()),
                               static_cast<char*>(a.data_ptr())};
  for_each_row<2>(
      g, base, {sizeof(Out), sizeof(In)},
      [&](const std::array<char*, 2>& p, const std::array<std::int64_t, 2>& s, std::int64_t n) {
        Out* o = reinterpret_cast<Out*>(p[0]);
        const In* x = reinterpret_cast<const In*>(p[1]);
        if (s[0] == 1 && s[1] == 1) {
          for (std::int64_t i = 0; i < n; ++i)
            o[i] = f(x[i]);
        } else {
          for (std::int64_t i = 0; i < n; ++i)
            o[i * s[0]] = f(x[i * s[1]]);
        }
      });
}

/// out[i] = f(a[i], b[i]) over same-shaped operands (inputs may have stride 0).
template <typename Out, typename In, typename F>
void binary_loop(Tensor& out, const Tensor& a, const Tensor& b, F f) {
  if (all_contiguous({&out, &a, &b})) {
    Out* o = static_cast<Out*>(out.data_ptr());
    const In* x = static_cast<const In*>(a.data_ptr());
    const In* y = static_cast<const In*>(b.data_ptr());
    flat_loop(out.numel(), [&](std::int64_t i0, std::int64_t i1) {
      for (std::int64_t i = i0; i < i1; ++i)
        o[i] = f(x[i], y[i]);
    });
    return;
  }
  LoopGeometry<3> g(out.sizes(), {&out, &a, &b});
  std::array<char*, 3> base = {static_cast<char*>(out.data_ptr()), static_cast<char*>(a.data_ptr()),
                               static_cast<char*>(b.data_ptr())};
  for_each_row<3>(
      g, base, {sizeof(Out), sizeof(In), sizeof(In)},
      [&](const std::array<char*, 3>& p, const std::array<std::int64_t, 3>& s, std::int64_t n) {
        Out* o = reinterpret_cast<Out*>(p[0]);
        const In* x = reinterpret_cast<const In*>(p[1]);
        const In* y = reinterpret_cast<const In*>(p[2]);
        if (s[0] == 1 && s[1] == 1 && s[2] == 1) {
          for (std::int64_t i = 0; i < n; ++i)
            o[i] = f(x[i], y[i]);
        } else if (s[0] == 1 && s[1] == 1 && s[2] == 0) {
          const In yv = y[0];
          for (std::int64_t i = 0; i < n; ++i)
            o[i] = f(x[i], yv);
        } else if (s[0] == 1 && s[1] == 0 && s[2] == 1) {
          const In xv = x[0];
          for (std::int64_t i = 0; i < n; ++i)
            o[i] = f(xv, y[i]);
        } else {
          for (std::int64_t i = 0; i < n; ++i)
            o[i * s[0]] = f(x[i * s[1]], y[i * s[2]]);
        }
      });
}

}  // namespace tb::cpu
