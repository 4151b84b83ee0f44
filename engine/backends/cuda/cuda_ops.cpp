// The CUDA backend's compute kernels (host side): argument handling, output allocation and the
// launches of cuda_*.cu, registered at the CUDA dispatch key. Semantics are the CPU kernels'
// (engine/backends/cpu); tests/engine/backend_parity_test.cpp checks every one against them on a
// GPU. Index and target errors are found on the device and raised here with the CPU's messages
// (reading them back is the one synchronisation those ops make).
#include <algorithm>
#include <cmath>
#include <limits>
#include <mutex>
#include <tuple>
#include <vector>

#include "engine/backends/common/adam_args.h"
#include "engine/backends/common/elementwise_math.h"
#include "engine/backends/common/reduce_plan.h"
#include "engine/backends/cuda/cuda_internal.h"
#include "engine/backends/cuda/cuda_kernels.h"
#include "engine/core/error.h"
#include "engine/core/tensor.h"
#include "engine/ops/op_signatures.h"
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

bool is_float(ScalarType t) {
  return core::is_floating_point(t);
}

void require_float(const Tensor& t, const char* op) {
  TB_CHECK_T(NotImplementedError, is_float(t.dtype()), "[", op,
             "] the CUDA backend computes float32, float64, float16 and bfloat16 tensors here, "
             "got ",
             t.dtype());
}

void same_device(const char* op, const Tensor& a, const Tensor& b) {
  TB_CHECK_T(TypeError, a.device() == b.device(), "[", op,
             "] expected all tensors on the same device, got ", a.device(), " and ", b.device());
}

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
  if (op == ew::Binary::pow) return is_float(t);
  return is_float(t) || t == ScalarType::Int64 || t == ScalarType::Int32;
}

Tensor binary_ew(ew::Binary op, const Tensor& a, const Tensor& b, double alpha) {
  TB_CHECK_T(NotImplementedError, binary_dtype_ok(op, a.dtype()), "[", ew::name(op),
             "] the CUDA backend computes ",
             op == ew::Binary::pow ? "floating-point" : "float, int64 and int32",
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

// ---- GradScaler, fused Adam ---------------------------------------------------------------------

void amp_unscale_kernel(const std::vector<Tensor>& grads, Tensor& found_inf,
                        const Tensor& inv_scale) {
  // Tensors grouped by dtype, one multi-tensor launch sequence per group; strided gradients are
  // processed through contiguous copies written back afterwards.
  for (const ScalarType dt :
       {ScalarType::Float32, ScalarType::Float16, ScalarType::BFloat16, ScalarType::Float64}) {
    std::vector<void*> ptrs;
    std::vector<std::int64_t> sizes;
    std::vector<std::pair<Tensor, Tensor>> write_back;
    int device = -1;
    for (const Tensor& g : grads) {
      if (g.dtype() != dt || g.numel() == 0) continue;
      same_device("amp_foreach_non_finite_check_and_unscale_", g, found_inf);
      Tensor work = g.is_contiguous() ? g : g.contiguous();
      if (!work.is_same(g)) write_back.emplace_back(g, work);
      ptrs.push_back(work.data_ptr());
      sizes.push_back(work.numel());
      device = static_cast<int>(g.device().index());
    }
    if (ptrs.empty()) continue;
    DeviceGuard guard(device);
    check_launch(
        kern::launch_amp_unscale(static_cast<int>(dt), static_cast<int>(ptrs.size()), ptrs.data(),
                                 sizes.data(), static_cast<float*>(found_inf.data_ptr()),
                                 static_cast<const float*>(inv_scale.data_ptr())),
        "amp_foreach_non_finite_check_and_unscale_");
    for (auto& [dst, work] : write_back) {
      Tensor d = dst;
      d.copy_(work);
    }
  }
  for (const Tensor& g : grads) {
    TB_CHECK_T(NotImplementedError, g.numel() == 0 || is_float(g.dtype()),
               "[amp_foreach_non_finite_check_and_unscale_] gradients must be floating point, "
               "got ",
               g.dtype());
  }
}

void amp_update_scale_kernel(Tensor& scale, Tensor& growth_tracker, const Tensor& found_inf,
                             double growth, double backoff, std::int64_t interval) {
  DeviceGuard guard(scale.device().index());
  check_launch(kern::launch_amp_update_scale(static_cast<float*>(scale.data_ptr()),
                                             static_cast<std::int32_t*>(growth_tracker.data_ptr()),
                                             static_cast<const float*>(found_inf.data_ptr()),
                                             growth, backoff, interval),
               "amp_update_scale_");
}

void adam_step_kernel(const std::vector<Tensor>& ps, const std::vector<Tensor>& gs,
                      const std::vector<Tensor>& ms, const std::vector<Tensor>& vs,
                      const std::vector<Tensor>& vmaxs, const Tensor& step_sizes,
                      const Tensor& bc2_sqrts, double lr, double b1, double b2, double eps,
                      double wd, bool maximize, bool decoupled) {
  const std::size_t n = ps.size();
  const bool amsgrad = !vmaxs.empty();
  const Device device = ps.empty() ? Device() : ps[0].device();
  const ScalarType dt = check_adam_step_args(ps, gs, ms, vs, vmaxs, step_sizes, bc2_sqrts, device);
  if (n == 0) return;
  // The per-parameter scalars are host values (the optimizer computes them on the host).
  const Tensor ss = step_sizes.to(Device(), ScalarType::Float64).contiguous();
  const Tensor bc = bc2_sqrts.to(Device(), ScalarType::Float64).contiguous();
  std::vector<void*> p(n);
  std::vector<const void*> g(n);
  std::vector<void*> m(n);
  std::vector<void*> v(n);
  std::vector<void*> vmax(amsgrad ? n : 0);
  std::vector<std::int64_t> sizes(n);
  for (std::size_t i = 0; i < n; ++i) {
    p[i] = ps[i].data_ptr();
    g[i] = gs[i].data_ptr();
    m[i] = ms[i].data_ptr();
    v[i] = vs[i].data_ptr();
    if (amsgrad) vmax[i] = vmaxs[i].data_ptr();
    sizes[i] = ps[i].numel();
  }
  kern::AdamArgs a;
  a.st = static_cast<int>(dt);
  a.count = static_cast<int>(n);
  a.params = p.data();
  a.grads = g.data();
  a.exp_avgs = m.data();
  a.exp_avg_sqs = v.data();
  a.max_exp_avg_sqs = amsgrad ? vmax.data() : nullptr;
  a.numels = sizes.data();
  a.step_sizes = ss.data_ptr<double>();
  a.bc2_sqrts = bc.data_ptr<double>();
  a.lr = lr;
  a.beta1 = b1;
  a.beta2 = b2;
  a.eps = eps;
  a.weight_decay = wd;
  a.maximize = maximize;
  a.decoupled = decoupled;
  DeviceGuard guard(device.index());
  check_launch(kern::launch_adam(a), "adam_step_");
}

// ---- RMSNorm / LayerNorm ------------------------------------------------------------------------

ScalarType norm_stat_dtype(ScalarType dt) {
  return dt == ScalarType::Float64 ? ScalarType::Float64 : ScalarType::Float32;
}

const void* ptr_or_null(const Tensor& t) {
  return t.defined() ? t.data_ptr() : nullptr;
}

template <bool Rms>
std::tuple<Tensor, Tensor> row_norm_kernel(const Tensor& x_in, const Tensor& weight,
                                           const Tensor& bias, double eps) {
  const Tensor x = x_in.contiguous();
  const std::int64_t n = x.size(-1);
  const std::int64_t rows = n == 0 ? 0 : x.numel() / n;
  Tensor y = Tensor::empty(x.sizes(), x.dtype(), x.device());
  Tensor stats = Tensor::empty({rows, 2}, norm_stat_dtype(x.dtype()), x.device());
  DeviceGuard guard(x.device().index());
  check_launch(
      kern::launch_row_norm(static_cast<int>(x.dtype()), Rms, x.data_ptr(), ptr_or_null(weight),
                            ptr_or_null(bias), y.data_ptr(), stats.data_ptr(), rows, n, eps),
      Rms ? "rms_norm" : "layer_norm");
  return {y, stats};
}

template <bool Rms>
std::tuple<Tensor, Tensor, Tensor> row_norm_backward_kernel(const Tensor& dy_in, const Tensor& x_in,
                                                            const Tensor& weight,
                                                            const Tensor& stats_in,
                                                            bool with_bias) {
  const Tensor x = x_in.contiguous();
  const Tensor dy = dy_in.contiguous();
  const std::int64_t n = x.size(-1);
  const std::int64_t rows = n == 0 ? 0 : x.numel() / n;
  const ScalarType st = norm_stat_dtype(x.dtype());
  const Tensor stats = stats_in.to(st).contiguous();
  Tensor dx = Tensor::empty(x.sizes(), x.dtype(), x.device());
  Tensor dw = weight.defined() ? Tensor::empty({n}, x.dtype(), x.device()) : Tensor();
  Tensor db = with_bias ? Tensor::empty({n}, x.dtype(), x.device()) : Tensor();
  const std::int64_t chunks = kern::norm_partial_chunks(rows);
  Tensor pw = dw.defined() ? Tensor::empty({chunks, n}, st, x.device()) : Tensor();
  Tensor pb = db.defined() ? Tensor::empty({chunks, n}, st, x.device()) : Tensor();
  auto ptr = [](Tensor& t) { return t.defined() ? t.data_ptr() : nullptr; };
  DeviceGuard guard(x.device().index());
  check_launch(
      kern::launch_row_norm_backward(static_cast<int>(x.dtype()), Rms, dy.data_ptr(), x.data_ptr(),
                                     ptr_or_null(weight), stats.data_ptr(), dx.data_ptr(), ptr(dw),
                                     ptr(db), ptr(pw), ptr(pb), rows, n),
      Rms ? "rms_norm_backward" : "layer_norm_backward");
  return {dx, dw, db};
}

// ---- fused attention ----------------------------------------------------------------------------

// A [B, heads, length, width] operand for the attention kernels (unit stride in width).
kern::AttnOperand attn_operand(const Tensor& t) {
  kern::AttnOperand o;
  o.p = t.data_ptr();
  o.sb = t.stride(0);
  o.sh = t.stride(1);
  o.sl = t.stride(2);
  return o;
}

Tensor unit_width(const Tensor& t) {
  return t.size(3) <= 1 || t.stride(3) == 1 ? t : t.contiguous();
}

kern::AttentionArgs attention_args(const Tensor& q, const Tensor& k, const Tensor& v, double scale,
                                   bool causal) {
  kern::AttentionArgs a;
  a.st = static_cast<int>(q.dtype());
  a.b = q.size(0);
  a.h = q.size(1);
  a.t = q.size(2);
  a.d = q.size(3);
  a.hkv = k.size(1);
  a.s = k.size(2);
  a.e = v.size(3);
  a.q = attn_operand(q);
  a.k = attn_operand(k);
  a.v = attn_operand(v);
  a.scale = scale;
  a.causal = causal;
  TB_CHECK_T(TypeError, k.dtype() == q.dtype() && v.dtype() == q.dtype(),
             "[scaled_dot_product_attention] the CUDA kernel takes query, key and value of one "
             "dtype, got ",
             q.dtype(), ", ", k.dtype(), " and ", v.dtype());
  TB_CHECK(a.b * a.h * ((a.t + 3) / 4) < (std::int64_t{1} << 31) &&
               a.b * a.hkv * ((a.s + 3) / 4) < (std::int64_t{1} << 31),
           "[scaled_dot_product_attention] too many rows for one launch: batch ", a.b, " x heads ",
           a.h, " x length ", std::max(a.t, a.s));
  TB_CHECK(std::max(a.d, a.e) <= kern::kAttentionMaxHead,
           "[scaled_dot_product_attention] the CUDA kernel takes head sizes up to ",
           kern::kAttentionMaxHead, ", got ", std::max(a.d, a.e));
  return a;
}

ScalarType attention_stat_dtype(ScalarType dt) {
  return dt == ScalarType::Float64 ? ScalarType::Float64 : ScalarType::Float32;
}

std::tuple<Tensor, Tensor> attention_kernel(const Tensor& q_in, const Tensor& k_in,
                                            const Tensor& v_in, double scale, bool causal) {
  const Tensor q = unit_width(q_in);
  const Tensor k = unit_width(k_in);
  const Tensor v = unit_width(v_in);
  const kern::AttentionArgs a = attention_args(q, k, v, scale, causal);
  Tensor out = Tensor::empty({a.b, a.h, a.t, a.e}, q.dtype(), q.device());
  Tensor lse = Tensor::empty({a.b, a.h, a.t}, attention_stat_dtype(q.dtype()), q.device());
  DeviceGuard guard(q.device().index());
  check_launch(kern::launch_attention_forward(a, out.data_ptr(), lse.data_ptr()),
               "scaled_dot_product_attention");
  return {out, lse};
}

std::tuple<Tensor, Tensor, Tensor> attention_backward_kernel(const Tensor& g_in, const Tensor& q_in,
                                                             const Tensor& k_in, const Tensor& v_in,
                                                             const Tensor& out_in,
                                                             const Tensor& lse_in, double scale,
                                                             bool causal) {
  const Tensor q = unit_width(q_in);
  const Tensor k = unit_width(k_in);
  const Tensor v = unit_width(v_in);
  const Tensor g = unit_width(g_in);
  const Tensor out = unit_width(out_in);
  const kern::AttentionArgs a = attention_args(q, k, v, scale, causal);
  TB_CHECK_T(TypeError, g.dtype() == q.dtype() && out.dtype() == q.dtype(),
             "[scaled_dot_product_attention_backward] grad_out and out must have the inputs' "
             "dtype ",
             q.dtype(), ", got ", g.dtype(), " and ", out.dtype());
  const ScalarType st = attention_stat_dtype(q.dtype());
  const Tensor lse = lse_in.to(st).contiguous();
  Tensor dvec = Tensor::empty({a.b, a.h, a.t}, st, q.device());
  Tensor dq = Tensor::empty({a.b, a.h, a.t, a.d}, q.dtype(), q.device());
  Tensor dk = Tensor::empty({a.b, a.hkv, a.s, a.d}, q.dtype(), q.device());
  Tensor dv = Tensor::empty({a.b, a.hkv, a.s, a.e}, q.dtype(), q.device());
  DeviceGuard guard(q.device().index());
  check_launch(
      kern::launch_attention_backward(a, attn_operand(g), attn_operand(out), lse.data_ptr(),
                                      dvec.data_ptr(), dq.data_ptr(), dk.data_ptr(), dv.data_ptr()),
      "scaled_dot_product_attention_backward");
  return {dq, dk, dv};
}

// Device pointers and element counts of a tensor list.
std::vector<void*> pointers(const std::vector<Tensor>& ts) {
  std::vector<void*> out(ts.size());
  for (std::size_t i = 0; i < ts.size(); ++i)
    out[i] = ts[i].data_ptr();
  return out;
}

std::vector<std::int64_t> numels(const std::vector<Tensor>& ts) {
  std::vector<std::int64_t> out(ts.size());
  for (std::size_t i = 0; i < ts.size(); ++i)
    out[i] = ts[i].numel();
  return out;
}

void foreach_lerp_kernel(const std::vector<Tensor>& selfs, const std::vector<Tensor>& ends,
                         const Tensor& weight, double w) {
  const Device device = selfs.empty() ? Device() : selfs[0].device();
  const ScalarType dt = backends::check_lerp_args(
      "foreach_lerp_", {{"selfs", &selfs}, {"ends", &ends}}, &weight, device);
  if (selfs.empty()) return;
  // A host weight is passed by value; a device weight is read by the kernel (no sync).
  const void* wptr = nullptr;
  int wst = 0;
  Tensor wdev;
  if (weight.defined()) {
    if (weight.device().is_cpu()) {
      w = weight.item();
    } else {
      wdev = weight.dtype() == ScalarType::Float64 ? weight.contiguous()
                                                   : weight.to(ScalarType::Float32).contiguous();
      wptr = wdev.data_ptr();
      wst = static_cast<int>(wdev.dtype());
    }
  }
  const std::vector<void*> s = pointers(selfs);
  const std::vector<void*> e = pointers(ends);
  const std::vector<std::int64_t> n = numels(selfs);
  DeviceGuard guard(device.index());
  check_launch(kern::launch_foreach_lerp(static_cast<int>(dt), static_cast<int>(s.size()), s.data(),
                                         e.data(), n.data(), wptr, wst, w),
               "foreach_lerp_");
}

void muon_momentum_kernel(const std::vector<Tensor>& bufs, const std::vector<Tensor>& grads,
                          const std::vector<Tensor>& outs, double momentum) {
  const Device device = bufs.empty() ? Device() : bufs[0].device();
  const ScalarType dt = backends::check_lerp_args(
      "muon_momentum_", {{"bufs", &bufs}, {"grads", &grads}, {"outs", &outs, true}}, nullptr,
      device);
  if (bufs.empty()) return;
  const std::vector<void*> b = pointers(bufs);
  const std::vector<void*> g = pointers(grads);
  const std::vector<void*> u = pointers(outs);
  const std::vector<std::int64_t> n = numels(bufs);
  DeviceGuard guard(device.index());
  check_launch(
      kern::launch_muon_momentum(static_cast<int>(dt), static_cast<int>(b.size()), b.data(),
                                 g.data(), outs.empty() ? nullptr : u.data(), n.data(), momentum),
      "muon_momentum_");
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
  for (const auto op : {ew::Binary::mul, ew::Binary::div, ew::Binary::maximum, ew::Binary::minimum,
                        ew::Binary::pow}) {
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

  d.impl<sig::RandomFill>("uniform_", key, uniform_kernel).detach();
  d.impl<sig::RandomFill>("normal_", key, normal_kernel).detach();
  d.impl<sig::BernoulliScalar>("bernoulli_", key, bernoulli_scalar_kernel).detach();
  d.impl<sig::BernoulliTensor>("bernoulli", key, bernoulli_tensor_kernel).detach();

  d.impl<sig::AmpUnscale>("amp_foreach_non_finite_check_and_unscale_", key, amp_unscale_kernel)
      .detach();
  d.impl<sig::AmpUpdateScale>("amp_update_scale_", key, amp_update_scale_kernel).detach();
  d.impl<ops::sig::AdamStep>("adam_step_", key, adam_step_kernel).detach();
  d.impl<ops::sig::ForeachLerp>("foreach_lerp_", key, foreach_lerp_kernel).detach();
  d.impl<sig::Attention>("scaled_dot_product_attention", key, attention_kernel).detach();
  d.impl<sig::RowNorm>("rms_norm", key, row_norm_kernel<true>).detach();
  d.impl<sig::RowNorm>("layer_norm", key, row_norm_kernel<false>).detach();
  d.impl<sig::RowNormBackward>("rms_norm_backward", key, row_norm_backward_kernel<true>).detach();
  d.impl<sig::RowNormBackward>("layer_norm_backward", key, row_norm_backward_kernel<false>)
      .detach();
  d.impl<sig::AttentionBackward>("scaled_dot_product_attention_backward", key,
                                 attention_backward_kernel)
      .detach();
  d.impl<ops::sig::MuonMomentum>("muon_momentum_", key, muon_momentum_kernel).detach();
}

}  // namespace tb::backends::cuda_detail
