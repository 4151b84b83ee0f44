// The CUDA backend's compute kernels (host side) for elementwise ops, reductions, softmax,
// cross-entropy, indexing, RoPE and random ops: argument handling, output allocation and the
// launches of cuda_*.cu, registered at the CUDA dispatch key (the optimizer and GradScaler ops
// are in cuda_optim_ops.cpp, RMSNorm/LayerNorm and attention in cuda_nn_ops.cpp). Semantics are the
// CPU kernels' (engine/backends/cpu); tests/engine/backend_parity_test.cpp checks every one against
// them on a GPU. Index and target errors are found on the device and raised here with the CPU's
// messages (reading them back is the one synchronisation those ops make).
#include <algorithm>
#include <cmath>
#include <limits>
#include <mutex>
#include <tuple>
#include <vector>

#include "engine/backends/common/elementwise_math.h"
#include "engine/backends/common/reduce_plan.h"
#include "engine/backends/cuda/cuda_internal.h"
#include "engine/backends/cuda/cuda_kernels.h"
#include "engine/core/error.h"
#include "engine/core/tensor.h"
#include "engine/dispatch/op_signatures.h"
#include "engine/rng/generator.h"
#include "engine/rng/philox.h"

namespace tb::backends::cuda_detail {

namespace {

using core::Device;
using core::DimVector;
using core::IntList;
using core::ScalarType;
using core::Tensor;
namespace kern = tb::cuda;
namespace ew = backends::ew;

// Reads a device int64 back (synchronises).
std::int64_t read_i64(const std::int64_t* p) {
  std::int64_t v = 0;
  check_cuda(cudaMemcpy(&v, p, sizeof v, cudaMemcpyDeviceToHost), "cudaMemcpy device->host");
  return v;
}

std::int64_t read_i64(const Tensor& t, std::int64_t index = 0) {
  DeviceGuard guard(t.device().index());
  return read_i64(t.data_ptr<std::int64_t>() + index);
}

// ---- elementwise --------------------------------------------------------------------------------

Tensor unary_ew(ew::Unary op, const Tensor& a) {
  require_float(a, ew::name(op));
  Tensor out = Tensor::empty(a.sizes(), a.dtype(), a.device());
  DeviceGuard guard(a.device().index());
  check_launch(kern::launch_unary(static_cast<int>(op), st(a), out.data_ptr(), a.data_ptr(),
                                  strided_of(out, {a}, ew::name(op)), out.numel()),
               ew::name(op));
  return out;
}

bool binary_dtype_ok(ew::Binary op, ScalarType t) {
  if (op == ew::Binary::pow || op == ew::Binary::gelu_tanh_backward ||
      op == ew::Binary::silu_backward)
    return is_float(t);
  return is_float(t) || t == ScalarType::Int64 || t == ScalarType::Int32;
}

Tensor binary_ew(ew::Binary op, const Tensor& a, const Tensor& b, double alpha) {
  TB_CHECK_T(NotImplementedError, binary_dtype_ok(op, a.dtype()), "[", ew::name(op),
             "] the CUDA backend computes ",
             binary_dtype_ok(op, ScalarType::Int64) ? "float, int64 and int32" : "floating-point",
             " tensors here, got ", a.dtype());
  same_device(ew::name(op), a, b);
  const DimVector shape = core::broadcast_shapes(a.sizes(), b.sizes(), ew::name(op));
  Tensor out = Tensor::empty(shape, a.dtype(), a.device());
  const Tensor y = b.dtype() == a.dtype() ? b : b.to(a.dtype());
  DeviceGuard guard(a.device().index());
  check_launch(
      kern::launch_binary(static_cast<int>(op), st(a), out.data_ptr(), a.data_ptr(), y.data_ptr(),
                          alpha, strided_of(out, {a, y}, ew::name(op)), out.numel()),
      ew::name(op));
  return out;
}

// a = op(a, b) in place (b broadcast to a; any strides of a).
void binary_ew_inplace(ew::Binary op, const char* name, Tensor& a, const Tensor& b, double alpha) {
  TB_CHECK_T(NotImplementedError, binary_dtype_ok(op, a.dtype()), "[", name,
             "] the CUDA backend computes float, int64 and int32 tensors here, got ", a.dtype());
  same_device(name, a, b);
  const Tensor y = b.dtype() == a.dtype() ? b : b.to(a.dtype());
  DeviceGuard guard(a.device().index());
  check_launch(kern::launch_binary(static_cast<int>(op), st(a), a.data_ptr(), a.data_ptr(),
                                   y.data_ptr(), alpha, strided_of(a, {a, y}, name), a.numel()),
               name);
}

Tensor compare_ew(ew::Compare op, const Tensor& a, const Tensor& b) {
  same_device(ew::name(op), a, b);
  const DimVector shape = core::broadcast_shapes(a.sizes(), b.sizes(), ew::name(op));
  Tensor out = Tensor::empty(shape, ScalarType::Bool, a.device());
  const Tensor y = b.dtype() == a.dtype() ? b : b.to(a.dtype());
  DeviceGuard guard(a.device().index());
  check_launch(
      kern::launch_compare(static_cast<int>(op), st(a), out.data_ptr<bool>(), a.data_ptr(),
                           y.data_ptr(), strided_of(out, {a, y}, ew::name(op)), out.numel()),
      ew::name(op));
  return out;
}

Tensor where_kernel(const Tensor& cond, const Tensor& a, const Tensor& b) {
  same_device("where", cond, a);
  same_device("where", a, b);
  const DimVector ab = core::broadcast_shapes(a.sizes(), b.sizes(), "where");
  const DimVector shape = core::broadcast_shapes(cond.sizes(), ab.span(), "where");
  Tensor out = Tensor::empty(shape, a.dtype(), a.device());
  const Tensor y = b.dtype() == a.dtype() ? b : b.to(a.dtype());
  DeviceGuard guard(a.device().index());
  check_launch(kern::launch_where(static_cast<int>(a.element_size()), out.data_ptr(),
                                  cond.data_ptr<bool>(), a.data_ptr(), y.data_ptr(),
                                  strided_of(out, {cond, a, y}, "where"), out.numel()),
               "where");
  return out;
}

Tensor masked_fill_kernel(const Tensor& t, const Tensor& mask, const core::Scalar& value) {
  same_device("masked_fill", t, mask);
  Tensor out = t.clone();
  Tensor one = Tensor::empty({}, t.dtype(), Device());
  one.fill_(value);  // the element's bit pattern, converted on the host
  DeviceGuard guard(t.device().index());
  check_launch(kern::launch_masked_fill(static_cast<int>(t.element_size()), out.data_ptr(),
                                        mask.data_ptr<bool>(), one.data_ptr(),
                                        strided_of(out, {mask}, "masked_fill"), out.numel()),
               "masked_fill");
  return out;
}

// ---- reductions ---------------------------------------------------------------------------------

Tensor row_reduce(kern::RowReduce kind, const char* op, const Tensor& t, IntList dims, bool keepdim,
                  double p = 0.0) {
  const ReducePlan plan = plan_reduce(t, dims, keepdim);
  Tensor out = Tensor::empty(plan.out_shape.span(), t.dtype(), t.device());
  if (plan.k == 0) return out;
  DeviceGuard guard(t.device().index());
  const Tensor ws = scratch(kern::row_reduce_workspace_bytes(plan.k, plan.r), t.device());
  check_launch(kern::launch_row_reduce(kind, st(t), out.data_ptr(), plan.rows.data_ptr(), plan.k,
                                       plan.r, p, ws.data_ptr()),
               op);
  return out;
}

Tensor sum_kernel(const Tensor& t, IntList dims, bool keepdim) {
  TB_CHECK_T(NotImplementedError, t.dtype() != ScalarType::Bool,
             "[sum] the CUDA backend does "
             "not sum bool tensors (convert to an integer dtype first)");
  return row_reduce(kern::RowReduce::sum, "sum", t, dims, keepdim);
}

Tensor mean_kernel(const Tensor& t, IntList dims, bool keepdim) {
  require_float(t, "mean");
  return row_reduce(kern::RowReduce::mean, "mean", t, dims, keepdim);
}

Tensor norm_kernel(const Tensor& t, double p, IntList dims, bool keepdim) {
  require_float(t, "norm");
  if (std::isinf(p)) return row_reduce(kern::RowReduce::norm_inf, "norm", t, dims, keepdim);
  if (p == 2.0) return row_reduce(kern::RowReduce::norm2, "norm", t, dims, keepdim);
  if (p == 1.0) return row_reduce(kern::RowReduce::norm1, "norm", t, dims, keepdim);
  return row_reduce(kern::RowReduce::norm_p, "norm", t, dims, keepdim, p);
}

// values and indices of the extreme along `dims` (one dim, or none for a 0-d tensor).
std::tuple<Tensor, Tensor> extreme(bool greater, const Tensor& t, IntList dims, bool keepdim,
                                   bool want_values) {
  const char* op = greater ? "max" : "min";
  const ReducePlan plan = plan_reduce(t, dims, keepdim);
  TB_CHECK_T(IndexError, plan.r > 0 || plan.k == 0, "[", op,
             "] cannot reduce over an empty dimension");
  Tensor values =
      want_values ? Tensor::empty(plan.out_shape.span(), t.dtype(), t.device()) : Tensor();
  Tensor indices = Tensor::empty(plan.out_shape.span(), ScalarType::Int64, t.device());
  if (plan.k == 0) return {values, indices};
  DeviceGuard guard(t.device().index());
  const Tensor ws = scratch(kern::row_arg_extreme_workspace_bytes(plan.k, plan.r), t.device());
  check_launch(
      kern::launch_row_arg_extreme(greater, st(t), want_values ? values.data_ptr() : nullptr,
                                   indices.data_ptr<std::int64_t>(), plan.rows.data_ptr(), plan.k,
                                   plan.r, ws.data_ptr()),
      op);
  return {values, indices};
}

template <bool Greater>
std::tuple<Tensor, Tensor> extreme_dim_kernel(const Tensor& t, std::int64_t dim, bool keepdim) {
  const std::int64_t d[1] = {dim};
  return extreme(Greater, t, t.dim() == 0 ? IntList() : IntList(d, 1), keepdim, true);
}

template <bool Greater>
Tensor extreme_all_kernel(const Tensor& t) {
  TB_CHECK_T(IndexError, t.numel() > 0, "[", Greater ? "max" : "min",
             "] cannot reduce an empty tensor");
  const Tensor flat = t.contiguous().reshape({t.numel()});
  return std::get<0>(extreme(Greater, flat, IntList({0}), false, true));
}

Tensor argmax_kernel(const Tensor& t, std::optional<std::int64_t> dim, bool keepdim) {
  if (!dim) {
    TB_CHECK_T(IndexError, t.numel() > 0, "[argmax] cannot reduce an empty tensor");
    Tensor i =
        std::get<1>(extreme(true, t.contiguous().reshape({t.numel()}), IntList({0}), false, false));
    if (!keepdim) return i;
    DimVector ones(static_cast<std::size_t>(t.dim()), 1);
    return i.reshape(ones.span());
  }
  const std::int64_t d[1] = {*dim};
  return std::get<1>(extreme(true, t, t.dim() == 0 ? IntList() : IntList(d, 1), keepdim, false));
}

// ---- softmax, cross-entropy ---------------------------------------------------------------------

template <bool Log>
Tensor softmax_kernel(const Tensor& t, std::int64_t dim) {
  const char* op = Log ? "log_softmax" : "softmax";
  require_float(t, op);
  if (t.dim() == 0) {
    Tensor out = Tensor::empty(t.sizes(), t.dtype(), t.device());
    return out.fill_(Log ? 0.0 : 1.0);
  }
  const Tensor x = t.transpose(dim, -1).contiguous();
  Tensor y = Tensor::empty(x.sizes(), x.dtype(), x.device());
  const std::int64_t n = x.size(-1);
  const std::int64_t rows = n == 0 ? 0 : x.numel() / n;
  DeviceGuard guard(t.device().index());
  check_launch(kern::launch_softmax(Log, st(t), y.data_ptr(), x.data_ptr(), rows, n), op);
  return y.transpose(dim, -1).contiguous();
}

[[noreturn]] void target_error(const Tensor& target, std::int64_t row, std::int64_t classes) {
  throw IndexError(tb::detail::str_cat("[cross_entropy] target ", read_i64(target, row), " of row ",
                                       row, " is out of range for ", classes,
                                       " classes (and is not ignore_index)"));
}

Tensor cross_entropy_kernel(const Tensor& logits_in, const Tensor& target_in,
                            std::int64_t ignore_index, double smoothing) {
  require_float(logits_in, "cross_entropy");
  same_device("cross_entropy", logits_in, target_in);
  const Tensor logits = logits_in.contiguous();
  const Tensor target = target_in.contiguous();
  const std::int64_t n = logits.size(0);
  const std::int64_t c = logits.size(1);
  Tensor out = Tensor::empty({}, logits.dtype(), logits.device());
  DeviceGuard guard(logits.device().index());
  const Tensor ws = scratch(kern::cross_entropy_workspace_bytes(n) + 8, logits.device());
  auto* bad = reinterpret_cast<std::int64_t*>(static_cast<char*>(ws.data_ptr()) +
                                              kern::cross_entropy_workspace_bytes(n));
  check_launch(kern::launch_cross_entropy(st(logits), out.data_ptr(), logits.data_ptr(),
                                          target.data_ptr<std::int64_t>(), n, c, ignore_index,
                                          smoothing, bad, ws.data_ptr()),
               "cross_entropy");
  if (const std::int64_t row = read_i64(bad); row < n) target_error(target, row, c);
  return out;
}

Tensor cross_entropy_backward_kernel(const Tensor& grad, const Tensor& logits_in,
                                     const Tensor& target_in, std::int64_t ignore_index,
                                     double smoothing) {
  require_float(logits_in, "cross_entropy_backward");
  const Tensor logits = logits_in.contiguous();
  const Tensor target = target_in.contiguous();
  const Tensor g = grad.dtype() == logits.dtype() ? grad.contiguous() : grad.to(logits.dtype());
  const std::int64_t n = logits.size(0);
  const std::int64_t c = logits.size(1);
  Tensor out = Tensor::empty(logits.sizes(), logits.dtype(), logits.device());
  DeviceGuard guard(logits.device().index());
  const Tensor ws = scratch(16, logits.device());
  auto* bad = reinterpret_cast<std::int64_t*>(static_cast<char*>(ws.data_ptr()) + 8);
  check_launch(
      kern::launch_cross_entropy_backward(st(logits), out.data_ptr(), g.data_ptr(),
                                          logits.data_ptr(), target.data_ptr<std::int64_t>(), n, c,
                                          ignore_index, smoothing, bad, ws.data_ptr()),
      "cross_entropy_backward");
  if (const std::int64_t row = read_i64(bad); row < n) target_error(target, row, c);
  return out;
}

// ---- indexing, RoPE -----------------------------------------------------------------------------

[[noreturn]] void index_error(const char* op, std::int64_t idx, std::int64_t dim,
                              std::int64_t size) {
  throw IndexError(tb::detail::str_cat("[", op, "] index ", idx, " is out of range for dimension ",
                                       dim, " with size ", size));
}

// A device int64 holding `sentinel` (the "nothing bad" value the kernels lower).
Tensor bad_slot(std::int64_t sentinel, const Device& device) {
  Tensor t = Tensor::empty({1}, ScalarType::Int64, device);
  t.fill_(sentinel);
  return t;
}

Tensor index_select_kernel(const Tensor& t0, std::int64_t dim, const Tensor& index0) {
  same_device("index_select", t0, index0);
  const Tensor index = index0.contiguous();
  const std::int64_t n = index.numel();
  if (t0.dim() == 0) {
    // A 0-d source: every (valid) index selects the one element.
    const Tensor flat = t0.reshape({1});
    return index_select_kernel(flat, 0, index).reshape(index.sizes());
  }
  const Tensor t = t0.contiguous();
  const std::int64_t size = t.size(dim);
  std::int64_t outer = 1;
  for (std::int64_t d = 0; d < dim; ++d)
    outer *= t.size(d);
  std::int64_t inner = 1;
  for (std::int64_t d = dim + 1; d < t.dim(); ++d)
    inner *= t.size(d);
  DimVector shape(t.sizes());
  shape[static_cast<std::size_t>(dim)] = n;
  Tensor out = Tensor::empty(shape.span(), t.dtype(), t.device());
  if (n == 0) return out;
  DeviceGuard guard(t.device().index());
  const Tensor bad = bad_slot(n, t.device());
  check_launch(kern::launch_index_select(static_cast<int>(t.element_size()), out.data_ptr(),
                                         t.data_ptr(), index.data_ptr<std::int64_t>(), n, outer,
                                         size, inner, bad.data_ptr<std::int64_t>()),
               "index_select");
  const std::int64_t b = read_i64(bad);
  if (b < n) index_error("index_select", read_i64(index, b), dim, size);
  return out;
}

// Strides of the gather/scatter operands over the index's shape; operand 0 (the tensor indexed
// along `dim`) gets stride 0 there, its stride along `dim` is returned in `dim_stride`.
kern::Strided index_strides(const Tensor& index, std::initializer_list<Tensor> operands,
                            std::int64_t dim, std::int64_t& dim_stride, const char* op) {
  TB_CHECK_T(NotImplementedError, index.dim() <= kern::kMaxDims, "[", op, "] tensors of more than ",
             kern::kMaxDims, " dimensions are not supported by the CUDA backend");
  kern::Strided s;
  s.ndim = static_cast<int>(index.dim());
  for (int d = 0; d < s.ndim; ++d)
    s.sizes[d] = index.size(d);
  int k = 0;
  for (const Tensor& t : operands) {
    for (int d = 0; d < s.ndim; ++d)
      s.strides[k][d] = t.stride(d);
    ++k;
  }
  dim_stride = s.ndim == 0 ? 0 : s.strides[0][dim];
  if (s.ndim > 0) s.strides[0][dim] = 0;
  return s;
}

Tensor gather_kernel(const Tensor& t, std::int64_t dim, const Tensor& index) {
  same_device("gather", t, index);
  Tensor out = Tensor::empty(index.sizes(), t.dtype(), t.device());
  const std::int64_t n = index.numel();
  if (n == 0) return out;
  const std::int64_t size = t.dim() == 0 ? 1 : t.size(dim);
  DeviceGuard guard(t.device().index());
  const Tensor bad = bad_slot(n, t.device());
  std::int64_t dim_stride = 0;
  const kern::Strided s = index_strides(index, {t, index}, dim, dim_stride, "gather");
  check_launch(kern::launch_gather(static_cast<int>(t.element_size()), out.data_ptr(), t.data_ptr(),
                                   index.data_ptr<std::int64_t>(), dim_stride, size, s, n,
                                   bad.data_ptr<std::int64_t>()),
               "gather");
  const std::int64_t b = read_i64(bad);
  if (b < n) index_error("gather", read_i64(index.contiguous(), b), dim, size);
  return out;
}

Tensor scatter_add_kernel(const Tensor& t, std::int64_t dim, const Tensor& index,
                          const Tensor& src0) {
  same_device("scatter_add", t, index);
  same_device("scatter_add", t, src0);
  Tensor out = t.contiguous().clone();
  const std::int64_t n = index.numel();
  if (n == 0) return out;
  const Tensor src = src0.dtype() == t.dtype() ? src0 : src0.to(t.dtype());
  const std::int64_t size = t.dim() == 0 ? 1 : t.size(dim);
  DeviceGuard guard(t.device().index());
  const Tensor bad = bad_slot(n, t.device());
  std::int64_t dim_stride = 0;
  const kern::Strided s = index_strides(index, {out, index, src}, dim, dim_stride, "scatter_add");
  check_launch(kern::launch_scatter_add(st(t), out.data_ptr(), index.data_ptr<std::int64_t>(),
                                        src.data_ptr(), dim_stride, size, s, n,
                                        bad.data_ptr<std::int64_t>()),
               "scatter_add");
  const std::int64_t b = read_i64(bad);
  if (b < n) {
    index_error("scatter_add", read_i64(index.contiguous(), b), dim, size);
  }
  return out;
}

Tensor rope_kernel(const Tensor& x_in, const Tensor& cos_in, const Tensor& sin_in) {
  require_float(x_in, "rope");
  const Tensor x = x_in.contiguous();
  Tensor out = Tensor::empty(x.sizes(), x.dtype(), x.device());
  const std::int64_t t_len = x.size(-2);
  const std::int64_t d = x.size(-1);
  const std::int64_t rows = d == 0 ? 0 : x.numel() / d;
  const ScalarType ct =
      x.dtype() == ScalarType::Float64 ? ScalarType::Float64 : ScalarType::Float32;
  const Tensor c = cos_in.to(x.device(), ct).contiguous();
  const Tensor s = sin_in.to(x.device(), ct).contiguous();
  DeviceGuard guard(x.device().index());
  check_launch(kern::launch_rope(st(x), out.data_ptr(), x.data_ptr(), c.data_ptr(), s.data_ptr(),
                                 rows, t_len, d),
               "rope");
  return out;
}

Tensor swiglu_kernel(const Tensor& gate_in, const Tensor& up_in) {
  require_float(gate_in, "swiglu");
  const Tensor gate = gate_in.contiguous();
  const Tensor up = up_in.contiguous();
  Tensor out = Tensor::empty(gate.sizes(), gate.dtype(), gate.device());
  DeviceGuard guard(gate.device().index());
  check_launch(
      kern::launch_swiglu(st(gate), out.data_ptr(), gate.data_ptr(), up.data_ptr(), gate.numel()),
      "swiglu");
  return out;
}

std::tuple<Tensor, Tensor> swiglu_backward_kernel(const Tensor& grad_in, const Tensor& gate_in,
                                                  const Tensor& up_in) {
  require_float(gate_in, "swiglu_backward");
  const Tensor grad = grad_in.contiguous();
  const Tensor gate = gate_in.contiguous();
  const Tensor up = up_in.contiguous();
  Tensor dgate = Tensor::empty(gate.sizes(), gate.dtype(), gate.device());
  Tensor dup = Tensor::empty(gate.sizes(), gate.dtype(), gate.device());
  DeviceGuard guard(gate.device().index());
  check_launch(
      kern::launch_swiglu_backward(st(gate), dgate.data_ptr(), dup.data_ptr(), grad.data_ptr(),
                                   gate.data_ptr(), up.data_ptr(), gate.numel()),
      "swiglu_backward");
  return {dgate, dup};
}

// ---- random -------------------------------------------------------------------------------------

rng::PhiloxGenerator& philox_for(const char* op, const Tensor& t, rng::Generator* gen) {
  return rng::philox_generator_for(op, t.device(), gen);
}

// Draws into t (any float dtype and layout): a contiguous buffer of t's dtype first when t is
// strided. launch(buffer, seed, offset) enqueues the kernel.
template <typename Launch>
void random_fill(const char* op, Tensor& t, rng::Generator* gen, Launch launch) {
  if (t.numel() == 0) return;
  require_float(t, op);
  rng::PhiloxGenerator& g = philox_for(op, t, gen);
  std::pair<std::uint64_t, std::uint64_t> so;
  {
    std::lock_guard lock(g.mutex());
    so = g.reserve(4);
  }
  Tensor target = t.is_contiguous() ? t : Tensor::empty(t.sizes(), t.dtype(), t.device());
  DeviceGuard guard(t.device().index());
  check_launch(launch(target, so.first, so.second), op);
  if (!target.is_same(t)) t.copy_(target);
}

void uniform_kernel(Tensor& t, double from, double to, rng::Generator* gen) {
  random_fill("uniform_", t, gen, [&](Tensor& b, std::uint64_t seed, std::uint64_t off) {
    return kern::launch_uniform(st(b), b.data_ptr(), b.numel(), seed, off, from, to);
  });
}

void normal_kernel(Tensor& t, double mean, double stdv, rng::Generator* gen) {
  random_fill("normal_", t, gen, [&](Tensor& b, std::uint64_t seed, std::uint64_t off) {
    return kern::launch_normal(st(b), b.data_ptr(), b.numel(), seed, off, mean, stdv);
  });
}

void bernoulli_scalar_kernel(Tensor& t, double p, rng::Generator* gen) {
  random_fill("bernoulli_", t, gen, [&](Tensor& b, std::uint64_t seed, std::uint64_t off) {
    return kern::launch_bernoulli(st(b), b.data_ptr(), b.numel(), seed, off, p, nullptr);
  });
}

Tensor bernoulli_tensor_kernel(const Tensor& p, rng::Generator* gen) {
  require_float(p, "bernoulli");
  const Tensor pf = p.to(ScalarType::Float32).contiguous();
  // Probabilities are checked as the CPU kernel does (this reads two scalars back).
  if (pf.numel() > 0) {
    const Tensor lo = extreme_all_kernel<false>(pf).to(Device());
    const Tensor hi = extreme_all_kernel<true>(pf).to(Device());
    const auto l = static_cast<float>(lo.item());
    const auto h = static_cast<float>(hi.item());
    TB_CHECK(l >= 0.0f && h <= 1.0f, "[bernoulli] probabilities must be in [0, 1], got ",
             (l < 0.0f || l != l) ? l : h);
  }
  Tensor out = Tensor::empty(p.sizes(), p.dtype(), p.device());
  random_fill("bernoulli", out, gen, [&](Tensor& b, std::uint64_t seed, std::uint64_t off) {
    return kern::launch_bernoulli(st(b), b.data_ptr(), b.numel(), seed, off, 0.0,
                                  pf.data_ptr<float>());
  });
  return out;
}

}  // namespace

void register_cuda_ops(dispatch::Dispatcher& d) {
  namespace sig = ops::sig;
  const auto key = dispatch::DispatchKey::CUDA;
  for (int i = 0; i < static_cast<int>(ew::Unary::kCount); ++i) {
    const auto op = static_cast<ew::Unary>(i);
    d.impl<sig::Unary>(ew::name(op), key, [op](const Tensor& a) {
       return unary_ew(op, a);
     }).detach();
  }
  for (const auto op : {ew::Binary::add, ew::Binary::sub}) {
    d.impl<sig::BinaryAlpha>(ew::name(op), key,
                             [op](const Tensor& a, const Tensor& b, const core::Scalar& alpha) {
                               return binary_ew(op, a, b, alpha.to_double());
                             })
        .detach();
  }
  for (const auto op :
       {ew::Binary::mul, ew::Binary::div, ew::Binary::maximum, ew::Binary::minimum, ew::Binary::pow,
        ew::Binary::gelu_tanh_backward, ew::Binary::relu_backward, ew::Binary::silu_backward}) {
    d.impl<sig::Binary>(ew::name(op), key, [op](const Tensor& a, const Tensor& b) {
       return binary_ew(op, a, b, 1.0);
     }).detach();
  }
  for (int i = 0; i < static_cast<int>(ew::Compare::kCount); ++i) {
    const auto op = static_cast<ew::Compare>(i);
    d.impl<sig::Binary>(ew::name(op), key, [op](const Tensor& a, const Tensor& b) {
       return compare_ew(op, a, b);
     }).detach();
  }
  d.impl<sig::InplaceBinaryAlpha>("add_", key,
                                  [](Tensor& a, const Tensor& b, const core::Scalar& alpha) {
                                    binary_ew_inplace(ew::Binary::add, "add_", a, b,
                                                      alpha.to_double());
                                  })
      .detach();
  d.impl<sig::InplaceBinary>("mul_", key, [](Tensor& a, const Tensor& b) {
     binary_ew_inplace(ew::Binary::mul, "mul_", a, b, 1.0);
   }).detach();
  d.impl<sig::Ternary>("where", key, where_kernel).detach();
  d.impl<sig::MaskedFill>("masked_fill", key, masked_fill_kernel).detach();

  d.impl<sig::Reduce>("sum", key, sum_kernel).detach();
  d.impl<sig::Reduce>("mean", key, mean_kernel).detach();
  d.impl<sig::Norm>("norm", key, norm_kernel).detach();
  d.impl<sig::ReduceAll>("max", key, extreme_all_kernel<true>).detach();
  d.impl<sig::ReduceAll>("min", key, extreme_all_kernel<false>).detach();
  d.impl<sig::ReduceDimWithIndex>("max.dim", key, extreme_dim_kernel<true>).detach();
  d.impl<sig::ReduceDimWithIndex>("min.dim", key, extreme_dim_kernel<false>).detach();
  d.impl<sig::Argmax>("argmax", key, argmax_kernel).detach();

  d.impl<sig::Softmax>("softmax", key, softmax_kernel<false>).detach();
  d.impl<sig::Softmax>("log_softmax", key, softmax_kernel<true>).detach();
  d.impl<sig::CrossEntropy>("cross_entropy", key, cross_entropy_kernel).detach();
  d.impl<sig::CrossEntropyBackward>("cross_entropy_backward", key, cross_entropy_backward_kernel)
      .detach();

  d.impl<sig::IndexSelect>("index_select", key, index_select_kernel).detach();
  d.impl<sig::IndexSelect>("gather", key, gather_kernel).detach();
  d.impl<sig::ScatterAdd>("scatter_add", key, scatter_add_kernel).detach();
  d.impl<sig::Ternary>("rope", key, rope_kernel).detach();
  d.impl<sig::Binary>("swiglu", key, swiglu_kernel).detach();
  d.impl<sig::SwigluBackward>("swiglu_backward", key, swiglu_backward_kernel).detach();

  d.impl<sig::RandomFill>("uniform_", key, uniform_kernel).detach();
  d.impl<sig::RandomFill>("normal_", key, normal_kernel).detach();
  d.impl<sig::BernoulliScalar>("bernoulli_", key, bernoulli_scalar_kernel).detach();
  d.impl<sig::BernoulliTensor>("bernoulli", key, bernoulli_tensor_kernel).detach();
}

}  // namespace tb::backends::cuda_detail
