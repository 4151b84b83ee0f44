// Reductions, linear algebra, softmax and indexing ops: checks, promotion, dispatch.
#include <algorithm>
#include <cmath>

#include "engine/dispatch/op_signatures.h"
#include "engine/ops/op_common.h"
#include "engine/ops/ops.h"

namespace tb::ops {

using core::DimVector;
using detail::cast_if_needed;
using detail::check_defined;
using detail::check_same_device;
using dispatch::Dispatcher;

namespace {

// Wraps, sorts and de-duplicates reduction dims (empty = all dims).
std::vector<std::int64_t> normalize_dims(const char* op, const Tensor& t, IntList dims) {
  std::vector<std::int64_t> out;
  if (dims.empty()) {
    for (std::int64_t d = 0; d < t.dim(); ++d)
      out.push_back(d);
    return out;
  }
  for (auto d : dims) {
    const auto w = core::wrap_dim(d, t.dim(), op);
    TB_CHECK(std::find(out.begin(), out.end(), w) == out.end(), "[", op, "] dimension ", d,
             " appears more than once in ", DimVector(dims));
    out.push_back(w);
  }
  std::sort(out.begin(), out.end());
  if (t.dim() == 0) out.clear();
  return out;
}

void check_float(const char* op, const Tensor& t) {
  TB_CHECK_T(TypeError, core::is_floating_point(t.dtype()), "[", op,
             "] expects a floating-point tensor, got ", t.dtype());
}

void check_nonempty_dim(const char* op, const Tensor& t, std::int64_t dim) {
  if (t.dim() == 0) return;
  TB_CHECK_T(IndexError, t.size(dim) > 0, "[", op, "] cannot reduce over dimension ", dim,
             " of size 0 (shape ", DimVector(t.sizes()), ")");
}

}  // namespace

Tensor sum(const Tensor& t, IntList dims, bool keepdim) {
  static const auto op = Dispatcher::singleton().typed<sig::Reduce>("sum");
  check_defined("sum", t, "self");
  const auto d = normalize_dims("sum", t, dims);
  // Integer and bool sums accumulate in int64, as in PyTorch.
  const Tensor x = core::is_integral(t.dtype(), true) ? cast_if_needed(t, ScalarType::Int64) : t;
  return op.call(x, d, keepdim);
}

Tensor mean(const Tensor& t, IntList dims, bool keepdim) {
  static const auto op = Dispatcher::singleton().typed<sig::Reduce>("mean");
  check_defined("mean", t, "self");
  TB_CHECK_T(TypeError, core::is_floating_point(t.dtype()),
             "[mean] expects a floating-point tensor, got ", t.dtype(),
             "; convert it first, e.g. t.to(float32)");
  return op.call(t, normalize_dims("mean", t, dims), keepdim);
}

Tensor max(const Tensor& t) {
  static const auto op = Dispatcher::singleton().typed<sig::ReduceAll>("max");
  check_defined("max", t, "self");
  TB_CHECK(t.numel() > 0, "[max] cannot take the max of an empty tensor (shape ",
           DimVector(t.sizes()), ")");
  return op.call(t);
}

Tensor min(const Tensor& t) {
  static const auto op = Dispatcher::singleton().typed<sig::ReduceAll>("min");
  check_defined("min", t, "self");
  TB_CHECK(t.numel() > 0, "[min] cannot take the min of an empty tensor (shape ",
           DimVector(t.sizes()), ")");
  return op.call(t);
}

std::tuple<Tensor, Tensor> max(const Tensor& t, std::int64_t dim, bool keepdim) {
  static const auto op = Dispatcher::singleton().typed<sig::ReduceDimWithIndex>("max.dim");
  check_defined("max", t, "self");
  dim = core::wrap_dim(dim, t.dim(), "max");
  check_nonempty_dim("max", t, dim);
  return op.call(t, dim, keepdim);
}

std::tuple<Tensor, Tensor> min(const Tensor& t, std::int64_t dim, bool keepdim) {
  static const auto op = Dispatcher::singleton().typed<sig::ReduceDimWithIndex>("min.dim");
  check_defined("min", t, "self");
  dim = core::wrap_dim(dim, t.dim(), "min");
  check_nonempty_dim("min", t, dim);
  return op.call(t, dim, keepdim);
}

Tensor argmax(const Tensor& t, std::optional<std::int64_t> dim, bool keepdim) {
  static const auto op = Dispatcher::singleton().typed<sig::Argmax>("argmax");
  check_defined("argmax", t, "self");
  if (dim) {
    dim = core::wrap_dim(*dim, t.dim(), "argmax");
    check_nonempty_dim("argmax", t, *dim);
  } else {
    TB_CHECK(t.numel() > 0, "[argmax] cannot take the argmax of an empty tensor");
  }
  return op.call(t, dim, keepdim);
}

Tensor norm(const Tensor& t, double p, IntList dims, bool keepdim) {
  static const auto op = Dispatcher::singleton().typed<sig::Norm>("norm");
  check_defined("norm", t, "self");
  check_float("norm", t);
  // +inf passes (max |x|); -inf (min |x|) and NaN are not supported.
  TB_CHECK(p > 0.0, "[norm] p must be > 0 or inf, got ", p);
  return op.call(t, p, normalize_dims("norm", t, dims), keepdim);
}

// ---- linear algebra -----------------------------------------------------------------------------

namespace {

ScalarType matmul_dtype(const char* op, const Tensor& a, const Tensor& b) {
  check_defined(op, a, "self");
  check_defined(op, b, "mat2");
  check_same_device(op, a, b);
  const ScalarType dt = result_type(a, b);
  TB_CHECK_T(TypeError, core::is_floating_point(dt), "[", op,
             "] expects floating-point inputs, got ", a.dtype(), " and ", b.dtype());
  return dt;
}

}  // namespace

Tensor mm(const Tensor& a, const Tensor& b) {
  static const auto op = Dispatcher::singleton().typed<sig::Binary>("mm");
  const ScalarType dt = matmul_dtype("mm", a, b);
  TB_CHECK(a.dim() == 2 && b.dim() == 2, "[mm] expects 2-D tensors, got shapes ",
           DimVector(a.sizes()), " and ", DimVector(b.sizes()));
  TB_CHECK(a.size(1) == b.size(0), "[mm] shapes ", DimVector(a.sizes()), " and ",
           DimVector(b.sizes()), " cannot be multiplied (", a.size(1), " != ", b.size(0), ")");
  return op.call(cast_if_needed(a, dt), cast_if_needed(b, dt));
}

Tensor addmm(const Tensor& bias, const Tensor& a, const Tensor& b, double beta, double alpha) {
  static const auto op = Dispatcher::singleton().typed<sig::Addmm>("addmm");
  const ScalarType dt = matmul_dtype("addmm", a, b);
  check_defined("addmm", bias, "input");
  check_same_device("addmm", bias, a);
  TB_CHECK(a.dim() == 2 && b.dim() == 2, "[addmm] expects 2-D matrices, got shapes ",
           DimVector(a.sizes()), " and ", DimVector(b.sizes()));
  TB_CHECK(a.size(1) == b.size(0), "[addmm] shapes ", DimVector(a.sizes()), " and ",
           DimVector(b.sizes()), " cannot be multiplied (", a.size(1), " != ", b.size(0), ")");
  const std::int64_t mn[2] = {a.size(0), b.size(1)};
  const auto shape = core::broadcast_shapes(bias.sizes(), IntList(mn, 2), "addmm");
  TB_CHECK(shape == DimVector(IntList(mn, 2)), "[addmm] input of shape ", DimVector(bias.sizes()),
           " does not broadcast to the product's shape ", DimVector(IntList(mn, 2)));
  return op.call(cast_if_needed(bias, dt), cast_if_needed(a, dt), cast_if_needed(b, dt), beta,
                 alpha);
}

Tensor bmm(const Tensor& a, const Tensor& b) {
  static const auto op = Dispatcher::singleton().typed<sig::Binary>("bmm");
  const ScalarType dt = matmul_dtype("bmm", a, b);
  TB_CHECK(a.dim() == 3 && b.dim() == 3, "[bmm] expects 3-D tensors, got shapes ",
           DimVector(a.sizes()), " and ", DimVector(b.sizes()));
  TB_CHECK(a.size(0) == b.size(0), "[bmm] batch sizes differ: ", a.size(0), " vs ", b.size(0));
  TB_CHECK(a.size(2) == b.size(1), "[bmm] shapes ", DimVector(a.sizes()), " and ",
           DimVector(b.sizes()), " cannot be multiplied (", a.size(2), " != ", b.size(1), ")");
  return op.call(cast_if_needed(a, dt), cast_if_needed(b, dt));
}

Tensor baddbmm(const Tensor& c, const Tensor& a, const Tensor& b, double beta, double alpha) {
  static const auto op = Dispatcher::singleton().typed<sig::Addmm>("baddbmm");
  const ScalarType dt = matmul_dtype("baddbmm", a, b);
  check_defined("baddbmm", c, "input");
  check_same_device("baddbmm", c, a);
  TB_CHECK(a.dim() == 3 && b.dim() == 3, "[baddbmm] expects 3-D batches, got shapes ",
           DimVector(a.sizes()), " and ", DimVector(b.sizes()));
  TB_CHECK(a.size(0) == b.size(0) && a.size(2) == b.size(1), "[baddbmm] shapes ",
           DimVector(a.sizes()), " and ", DimVector(b.sizes()), " cannot be batch-multiplied");
  const std::int64_t out[3] = {a.size(0), a.size(1), b.size(2)};
  const auto shape = core::broadcast_shapes(c.sizes(), IntList(out, 3), "baddbmm");
  TB_CHECK(shape == DimVector(IntList(out, 3)), "[baddbmm] input of shape ", DimVector(c.sizes()),
           " does not broadcast to the product's shape ", DimVector(IntList(out, 3)));
  return op.call(cast_if_needed(c, dt), cast_if_needed(a, dt), cast_if_needed(b, dt), beta, alpha);
}

Tensor syrk(const Tensor& x, double alpha) {
  static const auto op = Dispatcher::singleton().typed<sig::Syrk>("syrk");
  check_defined("syrk", x, "self");
  check_float("syrk", x);
  TB_CHECK(x.dim() == 2, "[syrk] expects a 2-D matrix, got shape ", DimVector(x.sizes()));
  return op.call(x, alpha);
}

Tensor matmul(const Tensor& a, const Tensor& b) {
  check_defined("matmul", a, "self");
  check_defined("matmul", b, "other");
  TB_CHECK(a.dim() >= 1 && b.dim() >= 1, "[matmul] both arguments need at least 1 dimension, got ",
           a.dim(), "-D and ", b.dim(), "-D");
  if (a.dim() == 1 && b.dim() == 1) {
    TB_CHECK(a.size(0) == b.size(0), "[matmul] 1-D tensors of sizes ", a.size(0), " and ",
             b.size(0), " cannot be multiplied");
    return mm(a.unsqueeze(0), b.unsqueeze(1)).reshape(IntList());
  }
  if (a.dim() == 2 && b.dim() == 1) return mm(a, b.unsqueeze(1)).squeeze(1);
  if (a.dim() == 1 && b.dim() == 2) return mm(a.unsqueeze(0), b).squeeze(0);
  if (a.dim() == 2 && b.dim() == 2) return mm(a, b);
  if (a.dim() >= 3 && b.dim() == 2) {
    // [..., m, k] x [k, n]: one GEMM over the folded rows (no copy of b per batch).
    TB_CHECK(a.size(-1) == b.size(0), "[matmul] shapes ", DimVector(a.sizes()), " and ",
             DimVector(b.sizes()), " cannot be multiplied (", a.size(-1), " != ", b.size(0), ")");
    DimVector out_shape(a.sizes());
    out_shape.back() = b.size(1);
    return mm(a.reshape({-1, a.size(-1)}), b).view(out_shape.span());
  }
  // Batched: broadcast the batch dims, fold them into one, bmm, unfold.
  const Tensor a3 = a.dim() == 1 ? a.unsqueeze(0) : a;
  const Tensor b3 = b.dim() == 1 ? b.unsqueeze(1) : b;
  const std::int64_t m = a3.size(-2);
  const std::int64_t k = a3.size(-1);
  const std::int64_t k2 = b3.size(-2);
  const std::int64_t n = b3.size(-1);
  TB_CHECK(k == k2, "[matmul] shapes ", DimVector(a.sizes()), " and ", DimVector(b.sizes()),
           " cannot be multiplied (", k, " != ", k2, ")");
  const DimVector batch_a(a3.sizes().subspan(0, static_cast<std::size_t>(a3.dim() - 2)));
  const DimVector batch_b(b3.sizes().subspan(0, static_cast<std::size_t>(b3.dim() - 2)));
  const DimVector batch = core::broadcast_shapes(batch_a.span(), batch_b.span(), "matmul");
  std::int64_t nb = 1;
  for (auto s : batch)
    nb *= s;
  DimVector ea = batch;
  ea.push_back(m);
  ea.push_back(k);
  DimVector eb = batch;
  eb.push_back(k);
  eb.push_back(n);
  const Tensor aa = a3.expand(ea.span()).reshape({nb, m, k});
  const Tensor bb = b3.expand(eb.span()).reshape({nb, k, n});
  DimVector out_shape = batch;
  if (a.dim() > 1) out_shape.push_back(m);
  if (b.dim() > 1) out_shape.push_back(n);
  return bmm(aa, bb).reshape(out_shape.span());
}

// ---- softmax ------------------------------------------------------------------------------------

Tensor softmax(const Tensor& t, std::int64_t dim) {
  static const auto op = Dispatcher::singleton().typed<sig::Softmax>("softmax");
  check_defined("softmax", t, "self");
  check_float("softmax", t);
  return op.call(t, core::wrap_dim(dim, t.dim(), "softmax"));
}

Tensor log_softmax(const Tensor& t, std::int64_t dim) {
  static const auto op = Dispatcher::singleton().typed<sig::Softmax>("log_softmax");
  check_defined("log_softmax", t, "self");
  check_float("log_softmax", t);
  return op.call(t, core::wrap_dim(dim, t.dim(), "log_softmax"));
}

// ---- indexing -----------------------------------------------------------------------------------

namespace {

void check_index_tensor(const char* op, const Tensor& t, const Tensor& index) {
  check_defined(op, index, "index");
  check_same_device(op, t, index);
  TB_CHECK_T(TypeError, index.dtype() == ScalarType::Int64 || index.dtype() == ScalarType::Int32,
             "[", op, "] index must be int64 or int32, got ", index.dtype());
}

}  // namespace

Tensor index_select(const Tensor& t, std::int64_t dim, const Tensor& index) {
  static const auto op = Dispatcher::singleton().typed<sig::IndexSelect>("index_select");
  check_defined("index_select", t, "self");
  check_index_tensor("index_select", t, index);
  TB_CHECK(index.dim() <= 1, "[index_select] index must be 1-D, got shape ",
           DimVector(index.sizes()));
  dim = core::wrap_dim(dim, t.dim(), "index_select");
  return op.call(t, dim, cast_if_needed(index, ScalarType::Int64));
}

Tensor gather(const Tensor& t, std::int64_t dim, const Tensor& index) {
  static const auto op = Dispatcher::singleton().typed<sig::IndexSelect>("gather");
  check_defined("gather", t, "self");
  check_index_tensor("gather", t, index);
  TB_CHECK(index.dim() == t.dim(), "[gather] index must have the input's rank (", t.dim(),
           "), got shape ", DimVector(index.sizes()));
  dim = core::wrap_dim(dim, t.dim(), "gather");
  for (std::int64_t d = 0; d < t.dim(); ++d) {
    TB_CHECK(d == dim || index.size(d) <= t.size(d), "[gather] index size ", index.size(d),
             " exceeds the input's size ", t.size(d), " at dimension ", d);
  }
  return op.call(t, dim, cast_if_needed(index, ScalarType::Int64));
}

Tensor scatter_add(const Tensor& t, std::int64_t dim, const Tensor& index, const Tensor& src) {
  static const auto op = Dispatcher::singleton().typed<sig::ScatterAdd>("scatter_add");
  check_defined("scatter_add", t, "self");
  check_defined("scatter_add", src, "src");
  check_index_tensor("scatter_add", t, index);
  check_same_device("scatter_add", t, src);
  TB_CHECK(index.dim() == t.dim() && src.dim() == t.dim(),
           "[scatter_add] self, index and src must have the same rank, got shapes ",
           DimVector(t.sizes()), ", ", DimVector(index.sizes()), " and ", DimVector(src.sizes()));
  dim = core::wrap_dim(dim, t.dim(), "scatter_add");
  for (std::int64_t d = 0; d < t.dim(); ++d) {
    TB_CHECK(index.size(d) <= src.size(d) && (d == dim || index.size(d) <= t.size(d)),
             "[scatter_add] index shape ", DimVector(index.sizes()), " exceeds src shape ",
             DimVector(src.sizes()), " or self shape ", DimVector(t.sizes()), " at dimension ", d);
  }
  return op.call(t, dim, cast_if_needed(index, ScalarType::Int64), cast_if_needed(src, t.dtype()));
}

}  // namespace tb::ops
