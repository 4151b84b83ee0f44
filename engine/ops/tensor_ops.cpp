// Factories, random ops, copies/casts, and the data-touching Tensor methods.
#include <cmath>
#include <cstring>
#include <sstream>

#include "engine/dispatch/dispatcher.h"
#include "engine/dispatch/op_signatures.h"
#include "engine/ops/op_common.h"
#include "engine/ops/ops.h"
#include "engine/rng/generator.h"

namespace tb::ops {

using detail::check_defined;
using detail::check_same_device;
using dispatch::Dispatcher;

// ---- copies and fills ---------------------------------------------------------------------------

namespace {

// Element range [first, last] a tensor touches in its storage.
std::pair<std::int64_t, std::int64_t> element_span(const Tensor& t) {
  std::int64_t lo = t.storage_offset();
  std::int64_t hi = lo;
  for (std::int64_t d = 0; d < t.dim(); ++d) {
    if (t.size(d) == 0) return {0, -1};
    const std::int64_t extent = (t.size(d) - 1) * t.stride(d);
    (extent < 0 ? lo : hi) += extent;
  }
  return {lo, hi};
}

// True when src and dst share memory in a way an elementwise copy would corrupt (reading an
// element after it was overwritten): same storage, overlapping ranges, different layout.
bool partially_overlaps(const Tensor& dst, const Tensor& src) {
  if (dst.storage() != src.storage() || dst.numel() == 0) return false;
  if (dst.storage_offset() == src.storage_offset() && dst.dtype() == src.dtype() &&
      core::DimVector(dst.strides()) == core::DimVector(src.strides()) &&
      core::DimVector(dst.sizes()) == core::DimVector(src.sizes())) {
    return false;  // the very same elements: a no-op copy
  }
  const auto [dlo, dhi] = element_span(dst);
  const auto [slo, shi] = element_span(src);
  const auto de = static_cast<std::int64_t>(dst.element_size());
  const auto se = static_cast<std::int64_t>(src.element_size());
  return dlo * de <= (shi + 1) * se - 1 && slo * se <= (dhi + 1) * de - 1;
}

}  // namespace

Tensor& copy_(Tensor& dst, const Tensor& src) {
  static const auto op = Dispatcher::singleton().typed<sig::InplaceBinary>("copy_");
  check_defined("copy_", dst, "self");
  check_defined("copy_", src, "src");
  const auto shape = core::broadcast_shapes(dst.sizes(), src.sizes(), "copy_");
  TB_CHECK(shape == core::DimVector(dst.sizes()), "[copy_] src of shape ",
           core::DimVector(src.sizes()), " cannot be broadcast to the destination's shape ",
           core::DimVector(dst.sizes()));
  const Device dd = dst.device();
  const Device sd = src.device();
  if (dd == sd) {
    // x.copy_(x.t()) and friends: read from a snapshot so no element is read after it was
    // overwritten.
    op.call(dst, partially_overlaps(dst, src) ? src.clone() : src);
  } else if (dd.is_cpu() || sd.is_cpu()) {
    // Host <-> device: the device backend's kernel does the transfer, so this dispatch skips the
    // CPU key (only this one: the kernel may convert dtypes on the host with CPU ops).
    op.call_skipping(dispatch::DispatchKeySet(dispatch::DispatchKey::CPU), dst, src);
  } else if (dd.type() == sd.type()) {
    // Between two devices of one backend (openreg:0 -> openreg:1, cuda:0 -> cuda:1): the
    // backend copies peer to peer (or stages through the host itself).
    op.call(dst, src);
  } else {
    // Devices of two backends: stage through the host.
    Tensor host = to_device(src, Device());
    copy_(dst, host);
  }
  dst.impl()->version++;
  return dst;
}

Tensor& fill_(Tensor& t, const Scalar& value) {
  static const auto op = Dispatcher::singleton().typed<sig::Fill>("fill_");
  check_defined("fill_", t, "self");
  op.call(t, value);
  t.impl()->version++;
  return t;
}

Tensor to_dtype(const Tensor& t, ScalarType dtype) {
  check_defined("to", t, "self");
  Tensor out = Tensor::empty(t.sizes(), dtype, t.device());
  copy_(out, t);
  return out;
}

Tensor to_device(const Tensor& t, Device device) {
  check_defined("to", t, "self");
  Tensor out = Tensor::empty(t.sizes(), t.dtype(), device);
  copy_(out, t);
  return out;
}

// ---- factories ----------------------------------------------------------------------------------

Tensor empty(IntList sizes, ScalarType dtype, Device device) {
  return Tensor::empty(sizes, dtype, device);
}

Tensor full(IntList sizes, const Scalar& value, ScalarType dtype, Device device) {
  Tensor t = Tensor::empty(sizes, dtype, device);
  fill_(t, value);
  return t;
}

Tensor zeros(IntList sizes, ScalarType dtype, Device device) {
  return full(sizes, 0, dtype, device);
}
Tensor ones(IntList sizes, ScalarType dtype, Device device) {
  return full(sizes, 1, dtype, device);
}
Tensor zeros_like(const Tensor& t) {
  return zeros(t.sizes(), t.dtype(), t.device());
}
Tensor empty_like(const Tensor& t) {
  return Tensor::empty(t.sizes(), t.dtype(), t.device());
}

Tensor scalar_tensor(const Scalar& value, ScalarType dtype, Device device) {
  return full({}, value, dtype, device);
}

Tensor arange(std::int64_t n, ScalarType dtype, Device device) {
  TB_CHECK(n >= 0, "[arange] n must be >= 0, got ", n);
  std::vector<std::int64_t> v(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i)
    v[static_cast<std::size_t>(i)] = i;
  Tensor t = core::from_vector(v);
  if (dtype != ScalarType::Int64) t = to_dtype(t, dtype);
  return device.is_cpu() ? t : to_device(t, device);
}

// ---- random -------------------------------------------------------------------------------------

namespace {

void check_generator(const char* op, const Tensor& t, rng::Generator* gen) {
  if (gen == nullptr) return;
  TB_CHECK_T(TypeError, gen->device().type() == t.device().type(), "[", op,
             "] the generator is for ", gen->device(), " but the tensor is on ", t.device());
}

void check_float(const char* op, const Tensor& t) {
  TB_CHECK_T(TypeError, core::is_floating_point(t.dtype()), "[", op,
             "] expects a floating-point tensor, got ", t.dtype());
}

}  // namespace

Tensor& uniform_(Tensor& t, double from, double to, rng::Generator* gen) {
  static const auto op = Dispatcher::singleton().typed<sig::RandomFill>("uniform_");
  check_defined("uniform_", t, "self");
  check_float("uniform_", t);
  TB_CHECK(from <= to, "[uniform_] expects from <= to, got from=", from, " to=", to);
  TB_CHECK(std::isfinite(from) && std::isfinite(to), "[uniform_] from and to must be finite, got ",
           from, " and ", to);
  check_generator("uniform_", t, gen);
  op.call(t, from, to, gen);
  t.impl()->version++;
  return t;
}

Tensor& normal_(Tensor& t, double mean, double std, rng::Generator* gen) {
  static const auto op = Dispatcher::singleton().typed<sig::RandomFill>("normal_");
  check_defined("normal_", t, "self");
  check_float("normal_", t);
  TB_CHECK(std >= 0.0, "[normal_] expects std >= 0.0, got ", std);
  check_generator("normal_", t, gen);
  op.call(t, mean, std, gen);
  t.impl()->version++;
  return t;
}

Tensor& bernoulli_(Tensor& t, double p, rng::Generator* gen) {
  static const auto op = Dispatcher::singleton().typed<sig::BernoulliScalar>("bernoulli_");
  check_defined("bernoulli_", t, "self");
  TB_CHECK(p >= 0.0 && p <= 1.0, "[bernoulli_] expects 0 <= p <= 1, got ", p);
  check_generator("bernoulli_", t, gen);
  op.call(t, p, gen);
  t.impl()->version++;
  return t;
}

Tensor bernoulli(const Tensor& p, rng::Generator* gen) {
  static const auto op = Dispatcher::singleton().typed<sig::BernoulliTensor>("bernoulli");
  check_defined("bernoulli", p, "p");
  check_float("bernoulli", p);
  check_generator("bernoulli", p, gen);
  return op.call(p, gen);
}

Tensor rand(IntList sizes, rng::Generator* gen, ScalarType dtype, Device device) {
  Tensor t = Tensor::empty(sizes, dtype, device);
  return uniform_(t, 0.0, 1.0, gen);
}

Tensor randn(IntList sizes, rng::Generator* gen, ScalarType dtype, Device device) {
  Tensor t = Tensor::empty(sizes, dtype, device);
  return normal_(t, 0.0, 1.0, gen);
}

Tensor randperm(std::int64_t n, rng::Generator* gen, ScalarType dtype, Device device) {
  static const auto op = Dispatcher::singleton().typed<sig::Randperm>("randperm");
  TB_CHECK(n >= 0, "[randperm] n must be non-negative, got ", n);
  TB_CHECK_T(TypeError, dtype != ScalarType::Bool, "[randperm] dtype bool is not supported");
  if (dtype != ScalarType::Int64 && dtype != ScalarType::Float64) {
    const double limit =
        core::is_floating_point(dtype)
            ? std::ldexp(1.0, static_cast<int>(std::log2(1.0 / core::finfo(dtype).eps)) + 1)
            : static_cast<double>(core::iinfo(dtype).max) + 1.0;
    TB_CHECK(static_cast<double>(n) <= limit, "[randperm] n=", n, " is too large for dtype ", dtype,
             " (at most ", limit, ")");
  }
  if (gen != nullptr) {
    TB_CHECK_T(TypeError, gen->device().type() == device.type(), "[randperm] the generator is for ",
               gen->device(), " but the output is on ", device);
  }
  return op.call(n, dtype, device, gen);
}

}  // namespace tb::ops

// ---- Tensor methods that touch data -------------------------------------------------------------

namespace tb::core {

Tensor Tensor::contiguous() const {
  return is_contiguous() ? *this : clone();
}

Tensor Tensor::clone() const {
  Tensor out = Tensor::empty(sizes(), dtype(), device());
  return ops::copy_(out, *this);
}

Tensor Tensor::to(ScalarType dt, bool copy) const {
  if (dt == dtype() && !copy) return *this;
  return ops::to_dtype(*this, dt);
}

Tensor Tensor::to(Device d, bool copy) const {
  if (d == device() && !copy) return *this;
  return ops::to_device(*this, d);
}

Tensor Tensor::to(Device d, ScalarType dt, bool copy) const {
  if (d == device() && dt == dtype() && !copy) return *this;
  Tensor out = Tensor::empty(sizes(), dt, d);
  return ops::copy_(out, *this);
}

Tensor& Tensor::copy_(const Tensor& src) {
  return ops::copy_(*this, src);
}
Tensor& Tensor::fill_(const Scalar& value) {
  return ops::fill_(*this, value);
}
Tensor& Tensor::zero_() {
  return ops::fill_(*this, 0);
}

template <typename T>
std::vector<T> Tensor::to_vector() const {
  Tensor t = *this;
  if (!t.device().is_cpu()) t = ops::to_device(t, Device());
  if (t.dtype() != scalar_type_of<T>) t = ops::to_dtype(t, scalar_type_of<T>);
  t = t.contiguous();
  const auto n = static_cast<std::size_t>(t.numel());
  std::vector<T> out(n);
  const T* p = static_cast<const T*>(t.data_ptr());
  for (std::size_t i = 0; i < n; ++i)
    out[i] = p[i];
  return out;
}

template std::vector<std::uint8_t> Tensor::to_vector<std::uint8_t>() const;
template std::vector<std::int8_t> Tensor::to_vector<std::int8_t>() const;
template std::vector<std::int16_t> Tensor::to_vector<std::int16_t>() const;
template std::vector<std::int32_t> Tensor::to_vector<std::int32_t>() const;
template std::vector<std::int64_t> Tensor::to_vector<std::int64_t>() const;
template std::vector<Half> Tensor::to_vector<Half>() const;
template std::vector<BFloat16> Tensor::to_vector<BFloat16>() const;
template std::vector<float> Tensor::to_vector<float>() const;
template std::vector<double> Tensor::to_vector<double>() const;

template std::vector<bool> Tensor::to_vector<bool>() const;

double Tensor::item() const {
  TB_CHECK(numel() == 1, "[item] a tensor with ", numel(),
           " elements cannot be converted to a number (it needs exactly one)");
  return to_vector<double>()[0];
}

std::string Tensor::str() const {
  if (!defined()) return "Tensor(undefined)";
  std::ostringstream os;
  os << "Tensor" << DimVector(sizes()) << " " << dtype() << " " << device();
  constexpr std::int64_t kMaxShown = 16;
  if (numel() > 0) {
    const auto v = to_vector<double>();
    os << " [";
    const std::int64_t shown = std::min<std::int64_t>(numel(), kMaxShown);
    for (std::int64_t i = 0; i < shown; ++i)
      os << (i ? ", " : "") << v[static_cast<std::size_t>(i)];
    if (numel() > shown) os << ", ...";
    os << "]";
  }
  return os.str();
}

}  // namespace tb::core
