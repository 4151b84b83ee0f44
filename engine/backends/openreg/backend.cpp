// The openreg backend: allocator, generators, device probe, kernels and the CPU fallback, built
// on the runtime (runtime.h). The order of this file is the order a new backend implements
// things in (docs/backend-integration.md): allocator -> generator -> copy/fill -> fallback ->
// native compute kernels -> registration.
#include "engine/backends/openreg/backend.h"

#include <cblas.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <mutex>
#include <optional>
#include <set>
#include <shared_mutex>

#include "engine/backends/common/elementwise_math.h"
#include "engine/backends/common/random_math.h"
#include "engine/backends/openreg/runtime.h"
#include "engine/core/allocator.h"
#include "engine/core/error.h"
#include "engine/core/half.h"
#include "engine/core/tensor.h"
#include "engine/dispatch/op_signatures.h"
#include "engine/rng/generator.h"
#include "engine/rng/philox.h"

namespace tb::openreg {

namespace {

using core::Device;
using core::DeviceType;
using core::DimVector;
using core::IntList;
using core::ScalarType;
using core::Tensor;
using dispatch::DispatchKey;
using tb::detail::str_cat;
namespace ew = backends::ew;
namespace rnd = backends::rnd;

// ---- 1. allocator -------------------------------------------------------------------------------

class OpenregAllocator final : public core::Allocator {
 public:
  core::DataPtr allocate(std::size_t nbytes, Device device) override {
    check_device(device.index());
    if (nbytes == 0) return core::DataPtr(nullptr, nullptr, nullptr, device);
    void* p = device_malloc(device.index(), nbytes);
    // ctx carries the device index so the deleter returns the block to the right pool.
    return core::DataPtr(p, reinterpret_cast<void*>(static_cast<std::intptr_t>(device.index())),
                         &OpenregAllocator::release, device);
  }
  core::AllocatorStats stats(Device device) const override { return memory_stats(device.index()); }
  void reset_peak(Device device) override { reset_peak_memory(device.index()); }
  void empty_cache() override {
    for (int i = 0; i < device_count(); ++i)
      openreg::empty_cache(i);
  }
  static OpenregAllocator& instance() {
    static OpenregAllocator a;
    return a;
  }

 private:
  static void release(void* ctx, void* data) noexcept {
    device_free(static_cast<int>(reinterpret_cast<std::intptr_t>(ctx)), data);
  }
};

std::string probe(core::DeviceIndex index) {
  try {
    check_device(index);
    return "";
  } catch (const Error& e) {
    return e.what();
  }
}

// ---- 2. generators ------------------------------------------------------------------------------

rng::PhiloxGenerator& philox_for(const char* op, const Tensor& t, rng::Generator* gen) {
  return rng::philox_generator_for(op, t.device(), gen);
}

// ---- helpers: element loops that run on a stream ------------------------------------------------

// Calls f(off0, off1, ...) with each operand's element offset for every index of `sizes`
// (row-major order); `strides` holds one stride list per operand.
template <std::size_t N, typename F>
void for_each_offset(IntList sizes, const std::array<DimVector, N>& strides, F&& f) {
  std::int64_t numel = 1;
  for (auto s : sizes)
    numel *= s;
  if (numel == 0) return;
  const auto nd = static_cast<std::int64_t>(sizes.size());
  DimVector idx(sizes.size(), 0);
  std::array<std::int64_t, N> off{};
  for (std::int64_t n = 0; n < numel; ++n) {
    std::apply([&](auto... o) { f(o...); }, off);
    for (std::int64_t d = nd - 1; d >= 0; --d) {
      const auto du = static_cast<std::size_t>(d);
      if (++idx[du] < sizes[du]) {
        for (std::size_t k = 0; k < N; ++k)
          off[k] += strides[k][du];
        break;
      }
      for (std::size_t k = 0; k < N; ++k)
        off[k] -= strides[k][du] * (sizes[du] - 1);
      idx[du] = 0;
    }
  }
}

DimVector strides_of(const Tensor& t) {
  return DimVector(t.strides());
}

bool is_float(ScalarType t) {
  return t == ScalarType::Float32 || t == ScalarType::Float64;
}

// Queues `work` on the current stream of `t`'s device. The tensors named in the capture list
// stay alive until it has run.
void launch(const Tensor& t, std::function<void()> work) {
  current_stream(t.device().index()).enqueue(std::move(work));
}

void sync(const Tensor& t) {
  current_stream(t.device().index()).synchronize();
}

// ---- 3. copy and fill ---------------------------------------------------------------------------

// Same-dtype element copy between strided layouts (src already broadcast to dst's shape).
void strided_copy(const Tensor& dst, const Tensor& src) {
  const std::size_t es = dst.element_size();
  auto* d = static_cast<char*>(dst.data_ptr());
  const auto* s = static_cast<const char*>(src.data_ptr());
  if (dst.is_contiguous() && src.is_contiguous() && src.numel() == dst.numel()) {
    std::memcpy(d, s, dst.nbytes());
    return;
  }
  const std::array<DimVector, 2> st{strides_of(dst), strides_of(src)};
  for_each_offset<2>(dst.sizes(), st, [&](std::int64_t od, std::int64_t os) {
    std::memcpy(d + od * static_cast<std::int64_t>(es), s + os * static_cast<std::int64_t>(es), es);
  });
}

void copy_kernel(Tensor& dst, const Tensor& src) {
  const bool dst_dev = dst.device().type() == DeviceType::PrivateUse1;
  const bool src_dev = src.device().type() == DeviceType::PrivateUse1;
  if (dst.numel() == 0) return;
  if (dst_dev && !src_dev) {
    // Host -> device: conversions and broadcasting on the host, then one transfer.
    Tensor host = src.expand(dst.sizes()).to(dst.dtype()).contiguous();
    // The transfer runs later: stage a private copy so host writes after this call cannot leak
    // into it (CUDA does the same for pageable host memory).
    if (host.storage().get() == src.storage().get()) host = host.clone();
    const Tensor d = dst;
    launch(dst, [d, host] { strided_copy(d, host); });
    return;
  }
  if (!dst_dev && src_dev) {
    // Device -> host: one transfer into a same-dtype host buffer, then host conversions.
    Tensor host = Tensor::empty(src.sizes(), src.dtype(), Device());
    const Tensor s = src;
    launch(src, [host, s] { strided_copy(host, s); });
    sync(src);
    dst.copy_(host);
    return;
  }
  // Device -> device.
  if (src.dtype() != dst.dtype()) {
    Tensor host = Tensor::empty(src.sizes(), src.dtype(), Device());
    host.copy_(src);
    dst.copy_(host);
    return;
  }
  const Tensor s = src.expand(dst.sizes());
  const Tensor d = dst;
  if (src.device() == dst.device()) {
    launch(dst, [d, s] { strided_copy(d, s); });
    return;
  }
  // Peer copy: everything queued on the source device first, then both memories open at once.
  sync(src);
  const int src_index = src.device().index();
  launch(dst, [d, s, src_index] {
    ExecutionScope open_src(src_index);
    strided_copy(d, s);
  });
  sync(dst);  // the source may be changed by its own stream right after this returns
}

void fill_kernel(Tensor& t, const core::Scalar& value) {
  if (t.numel() == 0) return;
  // The element's bit pattern is made on the host (exact conversion), then splatted.
  Tensor one = Tensor::empty({}, t.dtype(), Device());
  one.fill_(value);
  const Tensor d = t;
  launch(t, [d, one] {
    const std::size_t es = d.element_size();
    auto* p = static_cast<char*>(d.data_ptr());
    const auto* v = static_cast<const char*>(one.data_ptr());
    const std::array<DimVector, 1> st{strides_of(d)};
    for_each_offset<1>(d.sizes(), st, [&](std::int64_t o) {
      std::memcpy(p + o * static_cast<std::int64_t>(es), v, es);
    });
  });
}

// ---- 4. the CPU fallback ------------------------------------------------------------------------

struct FallbackState {
  std::shared_mutex m;
  std::set<std::string> deny = {"uniform_", "normal_", "bernoulli_", "bernoulli", "randperm"};
  std::map<std::string, std::int64_t> counts;
  dispatch::RegistrationHandle global;
};
FallbackState& fallback_state() {
  static auto* s = new FallbackState();  // never destroyed: the handle outlives statics
  return *s;
}

Tensor to_host(const Tensor& t) {
  Tensor h = Tensor::empty(t.sizes(), t.dtype(), Device());
  h.copy_(t);
  return h;
}

// Calls a typed op through the CPU fallback (native kernels hand over cases they do not cover).
template <typename Sig, typename... Args>
decltype(auto) via_fallback(const char* op, Args&&... args) {
  const dispatch::OperatorHandle h = dispatch::Dispatcher::singleton().find(op);
  dispatch::Stack s;
  dispatch::box_args(s, args...);
  cpu_fallback(h, dispatch::DispatchKeySet(DispatchKey::PrivateUse1), s);
  using Ret = typename std::function<Sig>::result_type;
  if constexpr (!std::is_void_v<Ret>) return dispatch::ReturnTraits<std::decay_t<Ret>>::pop(s);
}

// ---- 5. native compute kernels ------------------------------------------------------------------

template <typename F>
void dispatch_float(ScalarType t, F&& f) {
  if (t == ScalarType::Float64) {
    f(0.0);
  } else {
    f(0.0f);
  }
}

// out = op(a, b) elementwise with broadcasting, float32/float64.
// The elementwise arithmetic shared with the CUDA kernels (engine/backends/common): float32 and
// float64 computed in themselves, float16/bfloat16 in float; other dtypes go to the fallback.
bool ew_dtype(ScalarType t) {
  return t == ScalarType::Float32 || t == ScalarType::Float64 || t == ScalarType::Float16 ||
         t == ScalarType::BFloat16;
}

// Calls f(T{}, C{}) with the storage type T and compute type C of `t` (an ew_dtype).
template <typename F>
void dispatch_ew(ScalarType t, F&& f) {
  switch (t) {
    case ScalarType::Float64:
      f(double{}, double{});
      break;
    case ScalarType::Float16:
      f(core::Half{}, float{});
      break;
    case ScalarType::BFloat16:
      f(core::BFloat16{}, float{});
      break;
    default:
      f(float{}, float{});
  }
}

Tensor unary_ew(ew::Unary op, const Tensor& a) {
  if (!ew_dtype(a.dtype())) return via_fallback<ops::sig::Unary>(ew::name(op), a);
  Tensor out = Tensor::empty(a.sizes(), a.dtype(), a.device());
  launch(out, [out, a, op] {
    dispatch_ew(out.dtype(), [&](auto t0, auto c0) {
      using T = decltype(t0);
      using C = decltype(c0);
      T* o = static_cast<T*>(out.data_ptr());
      const T* p = static_cast<const T*>(a.data_ptr());
      const std::array<DimVector, 2> st{strides_of(out), strides_of(a)};
      for_each_offset<2>(out.sizes(), st, [&](std::int64_t oo, std::int64_t oa) {
        o[oo] = static_cast<T>(ew::apply<C>(op, static_cast<C>(p[oa])));
      });
    });
  });
  return out;
}

Tensor binary_ew(ew::Binary op, const Tensor& a, const Tensor& b, double alpha) {
  const DimVector shape = core::broadcast_shapes(a.sizes(), b.sizes(), ew::name(op));
  Tensor out = Tensor::empty(shape, a.dtype(), a.device());
  const Tensor x = a.expand(shape);
  const Tensor y = b.expand(shape);
  launch(out, [out, x, y, op, alpha] {
    dispatch_ew(out.dtype(), [&](auto t0, auto c0) {
      using T = decltype(t0);
      using C = decltype(c0);
      T* o = static_cast<T*>(out.data_ptr());
      const T* p = static_cast<const T*>(x.data_ptr());
      const T* q = static_cast<const T*>(y.data_ptr());
      const C al = static_cast<C>(alpha);
      const std::array<DimVector, 3> st{strides_of(out), strides_of(x), strides_of(y)};
      for_each_offset<3>(out.sizes(), st, [&](std::int64_t oo, std::int64_t op_, std::int64_t oq) {
        o[oo] = static_cast<T>(ew::apply<C>(op, static_cast<C>(p[op_]), static_cast<C>(q[oq]), al));
      });
    });
  });
  return out;
}

// a = op(a, b) in place (b broadcast to a).
void binary_ew_inplace(ew::Binary op, Tensor& a, const Tensor& b, double alpha) {
  const Tensor x = a;
  const Tensor y = b.expand(a.sizes());
  launch(a, [x, y, op, alpha] {
    dispatch_ew(x.dtype(), [&](auto t0, auto c0) {
      using T = decltype(t0);
      using C = decltype(c0);
      T* p = static_cast<T*>(x.data_ptr());
      const T* q = static_cast<const T*>(y.data_ptr());
      const C al = static_cast<C>(alpha);
      const std::array<DimVector, 2> st{strides_of(x), strides_of(y)};
      for_each_offset<2>(x.sizes(), st, [&](std::int64_t op_, std::int64_t oq) {
        p[op_] =
            static_cast<T>(ew::apply<C>(op, static_cast<C>(p[op_]), static_cast<C>(q[oq]), al));
      });
    });
  });
}

void add_inplace_kernel(Tensor& a, const Tensor& b, const core::Scalar& alpha) {
  if (!ew_dtype(a.dtype())) return via_fallback<ops::sig::InplaceBinaryAlpha>("add_", a, b, alpha);
  binary_ew_inplace(ew::Binary::add, a, b, alpha.to_double());
}

void mul_inplace_kernel(Tensor& a, const Tensor& b) {
  if (!ew_dtype(a.dtype())) return via_fallback<ops::sig::InplaceBinary>("mul_", a, b);
  binary_ew_inplace(ew::Binary::mul, a, b, 1.0);
}

// mm on the device through the vendor BLAS (here: the host's CBLAS, running on device memory).
Tensor mm_kernel(const Tensor& a0, const Tensor& b0) {
  if (!is_float(a0.dtype())) return via_fallback<ops::sig::Binary>("mm", a0, b0);
  const Tensor a = a0.contiguous();
  const Tensor b = b0.contiguous();
  const std::int64_t m = a.size(0);
  const std::int64_t k = a.size(1);
  const std::int64_t n = b.size(1);
  Tensor out = Tensor::empty({m, n}, a.dtype(), a.device());
  if (m == 0 || n == 0) return out;
  if (k == 0) {
    out.fill_(0);
    return out;
  }
  launch(out, [out, a, b, m, n, k] {
    const auto M = static_cast<blasint>(m);
    const auto N = static_cast<blasint>(n);
    const auto K = static_cast<blasint>(k);
    if (out.dtype() == ScalarType::Float32) {
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, M, N, K, 1.0f,
                  static_cast<const float*>(a.data_ptr()), K,
                  static_cast<const float*>(b.data_ptr()), N, 0.0f,
                  static_cast<float*>(out.data_ptr()), N);
    } else {
      cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, M, N, K, 1.0,
                  static_cast<const double*>(a.data_ptr()), K,
                  static_cast<const double*>(b.data_ptr()), N, 0.0,
                  static_cast<double*>(out.data_ptr()), N);
    }
  });
  return out;
}

// ---- random ops (Philox, seed/offset semantics of at::CUDAGeneratorImpl) ------------------------
//
// Element i of a float32 tensor is word i % 4 of the first curand4() of Philox subsequence i / 4
// started at (seed, offset); float64 uses two words per element (subsequence i / 2). Each call
// reserves 4 draws of offset, so a call's numbers depend only on (seed, offset at the call).

template <typename Fill>
void random_fill(const char* op, Tensor& t, rng::Generator* gen, Fill fill) {
  if (t.numel() == 0) return;
  rng::PhiloxGenerator& g = philox_for(op, t, gen);
  std::pair<std::uint64_t, std::uint64_t> so;
  {
    std::lock_guard lock(g.mutex());
    so = g.reserve(4);
  }
  if (!is_float(t.dtype()) || !t.is_contiguous()) {
    // Other dtypes and layouts: draw into a contiguous float32 buffer, then convert/scatter.
    Tensor tmp = Tensor::empty(t.sizes(), ScalarType::Float32, t.device());
    const ScalarType target = t.dtype();
    launch(tmp, [tmp, so, fill, target] { fill(tmp, so.first, so.second, target); });
    t.copy_(tmp);
    return;
  }
  const Tensor d = t;
  launch(t, [d, so, fill] { fill(d, so.first, so.second, d.dtype()); });
}

rnd::Target target_of(ScalarType t) {
  if (t == ScalarType::Float16) return rnd::Target::f16;
  if (t == ScalarType::BFloat16) return rnd::Target::bf16;
  return rnd::Target::f32;
}

// The per-block arithmetic is shared with the CUDA kernels (engine/backends/common/random_math.h).
void uniform_fill(const Tensor& t, std::uint64_t seed, std::uint64_t offset, double from, double to,
                  ScalarType target) {
  const std::int64_t n = t.numel();
  if (t.dtype() == ScalarType::Float64) {
    auto* p = static_cast<double*>(t.data_ptr());
    for (std::int64_t b = 0; b < (n + 1) / 2; ++b) {
      const rng::Philox4 w = rnd::block_words(seed, offset, static_cast<std::uint64_t>(b));
      for (int j = 0; j < 2 && b * 2 + j < n; ++j)
        p[b * 2 + j] = rnd::uniform_f64(w, j, from, to);
    }
    return;
  }
  auto* p = static_cast<float*>(t.data_ptr());
  const rnd::Target tg = target_of(target);
  for (std::int64_t b = 0; b < (n + 3) / 4; ++b) {
    const rng::Philox4 w = rnd::block_words(seed, offset, static_cast<std::uint64_t>(b));
    for (int j = 0; j < 4 && b * 4 + j < n; ++j) {
      p[b * 4 + j] = rnd::uniform_f32(w, j, static_cast<float>(from), static_cast<float>(to), tg);
    }
  }
}

void normal_fill(const Tensor& t, std::uint64_t seed, std::uint64_t offset, double mean,
                 double stdv, ScalarType) {
  const std::int64_t n = t.numel();
  if (t.dtype() == ScalarType::Float64) {
    auto* p = static_cast<double*>(t.data_ptr());
    for (std::int64_t b = 0; b < (n + 1) / 2; ++b) {
      const rng::Philox4 w = rnd::block_words(seed, offset, static_cast<std::uint64_t>(b));
      for (int j = 0; j < 2 && b * 2 + j < n; ++j)
        p[b * 2 + j] = rnd::normal_f64(w, j, mean, stdv);
    }
    return;
  }
  auto* p = static_cast<float*>(t.data_ptr());
  for (std::int64_t b = 0; b < (n + 3) / 4; ++b) {
    const rng::Philox4 w = rnd::block_words(seed, offset, static_cast<std::uint64_t>(b));
    for (int j = 0; j < 4 && b * 4 + j < n; ++j) {
      p[b * 4 + j] = rnd::normal_f32(w, j, static_cast<float>(mean), static_cast<float>(stdv));
    }
  }
}

void uniform_kernel(Tensor& t, double from, double to, rng::Generator* gen) {
  random_fill("uniform_", t, gen,
              [from, to](const Tensor& d, std::uint64_t s, std::uint64_t o, ScalarType target) {
                uniform_fill(d, s, o, from, to, target);
              });
}

void normal_kernel(Tensor& t, double mean, double stdv, rng::Generator* gen) {
  random_fill("normal_", t, gen,
              [mean, stdv](const Tensor& d, std::uint64_t s, std::uint64_t o, ScalarType target) {
                normal_fill(d, s, o, mean, stdv, target);
              });
}

void bernoulli_scalar_kernel(Tensor& t, double p, rng::Generator* gen) {
  random_fill("bernoulli_", t, gen,
              [p](const Tensor& d, std::uint64_t s, std::uint64_t o, ScalarType) {
                uniform_fill(d, s, o, 0.0, 1.0, d.dtype());
                dispatch_float(d.dtype(), [&](auto zero) {
                  using T = decltype(zero);
                  T* x = static_cast<T*>(d.data_ptr());
                  for (std::int64_t i = 0; i < d.numel(); ++i)
                    x[i] = static_cast<double>(x[i]) < p ? T(1) : T(0);
                });
              });
}

}  // namespace

// ---- the fallback (public) ----------------------------------------------------------------------

void cpu_fallback(const dispatch::OperatorHandle& op, dispatch::DispatchKeySet,
                  dispatch::Stack& stack) {
  FallbackState& fs = fallback_state();
  {
    std::unique_lock lock(fs.m);
    TB_CHECK_T(NotImplementedError, fs.deny.count(op.name()) == 0, "[openreg] op '", op.name(),
               "' has no openreg kernel and is on the CPU fallback's deny-list (running it on the "
               "CPU would give different results, e.g. draw from the CPU generator)");
    ++fs.counts[op.name()];
  }
  // Everything below runs under the backend keys only: the layers above already ran.
  dispatch::ExcludeKeysGuard below(
      dispatch::DispatchKeySet(DispatchKey::Autograd).add(DispatchKey::Autocast));
  std::optional<Device> target;
  const auto& mutated = op.schema().mutated_args;
  struct WriteBack {
    Tensor device;
    Tensor host;
  };
  std::vector<WriteBack> write_back;
  for (std::size_t i = 0; i < stack.size(); ++i) {
    auto& v = stack[i].v;
    const bool is_mutated =
        std::find(mutated.begin(), mutated.end(), static_cast<int>(i)) != mutated.end();
    auto move_one = [&](Tensor& t) {
      if (!t.defined() || t.device().type() != DeviceType::PrivateUse1) return;
      if (!target) target = t.device();
      Tensor h = to_host(t);
      if (is_mutated) write_back.push_back({t, h});
      t = h;
    };
    if (auto* t = std::get_if<Tensor>(&v)) {
      move_one(*t);
    } else if (auto* ts = std::get_if<std::vector<Tensor>>(&v)) {
      for (auto& x : *ts)
        move_one(x);
    } else if (auto* d = std::get_if<Device>(&v)) {
      if (d->type() == DeviceType::PrivateUse1) {
        if (!target) target = *d;
        *d = Device();
      }
    } else if (auto* g = std::get_if<rng::Generator*>(&v)) {
      TB_CHECK_T(
          NotImplementedError, *g == nullptr || (*g)->device().type() != DeviceType::PrivateUse1,
          "[openreg] op '", op.name(), "' has no openreg kernel and the CPU fallback cannot use a ",
          (*g)->device(), " generator");
    }
  }
  op.call_boxed_at(DispatchKey::CPU, stack);
  for (auto& w : write_back)
    w.device.copy_(w.host);
  if (!target) return;
  for (auto& r : stack) {
    if (auto* t = std::get_if<Tensor>(&r.v)) {
      if (t->defined() && t->device().is_cpu()) *t = t->to(*target);
    } else if (auto* ts = std::get_if<std::vector<Tensor>>(&r.v)) {
      for (auto& x : *ts)
        if (x.defined() && x.device().is_cpu()) x = x.to(*target);
    }
  }
}

dispatch::RegistrationHandle register_fallback_for(std::string_view op,
                                                   dispatch::SourceLocation where) {
  return dispatch::Dispatcher::singleton().impl_boxed(op, DispatchKey::PrivateUse1, &cpu_fallback,
                                                      where);
}

void set_global_fallback(bool enabled) {
  FallbackState& fs = fallback_state();
  std::unique_lock lock(fs.m);
  if (enabled == fs.global.active()) return;
  if (enabled) {
    fs.global = dispatch::Dispatcher::raw().fallback(DispatchKey::PrivateUse1, &cpu_fallback);
  } else {
    fs.global.reset();
  }
}

bool global_fallback_enabled() {
  FallbackState& fs = fallback_state();
  std::shared_lock lock(fs.m);
  return fs.global.active();
}

std::vector<std::string> fallback_deny_list() {
  FallbackState& fs = fallback_state();
  std::shared_lock lock(fs.m);
  return {fs.deny.begin(), fs.deny.end()};
}

void set_fallback_deny_list(std::vector<std::string> ops) {
  FallbackState& fs = fallback_state();
  std::unique_lock lock(fs.m);
  fs.deny = std::set<std::string>(ops.begin(), ops.end());
}

std::map<std::string, std::int64_t> fallback_counts() {
  FallbackState& fs = fallback_state();
  std::shared_lock lock(fs.m);
  return fs.counts;
}

std::vector<std::string> native_ops() {
  std::vector<std::string> out;
  const auto& d = dispatch::Dispatcher::singleton();
  for (const auto& name : d.op_names())
    if (d.find(name).entry().has_kernel(DispatchKey::PrivateUse1)) out.push_back(name);
  return out;
}

namespace {
struct NativeKernels {
  std::mutex m;
  std::vector<dispatch::RegistrationHandle> handles;  // compute kernels
  std::vector<dispatch::RegistrationHandle> minimal;  // copy_, fill_
};
NativeKernels& native_kernels() {
  static auto* n = new NativeKernels();  // never destroyed: kernels stay for the process
  return *n;
}
}  // namespace

void set_native_kernels(bool enabled) {
  namespace sig = ops::sig;
  NativeKernels& nk = native_kernels();
  std::lock_guard lock(nk.m);
  if (enabled == !nk.handles.empty()) return;
  if (!enabled) {
    nk.handles.clear();  // deregisters: those ops go to the CPU fallback
    return;
  }
  auto& d = dispatch::Dispatcher::raw();
  const auto key = DispatchKey::PrivateUse1;
  auto& h = nk.handles;
  // Elementwise kernels of its own (float dtypes; other dtypes go to the CPU fallback).
  for (int i = 0; i < static_cast<int>(ew::Unary::kCount); ++i) {
    const auto op = static_cast<ew::Unary>(i);
    h.push_back(
        d.impl<sig::Unary>(ew::name(op), key, [op](const Tensor& a) { return unary_ew(op, a); }));
  }
  for (const auto op : {ew::Binary::add, ew::Binary::sub}) {
    h.push_back(d.impl<sig::BinaryAlpha>(
        ew::name(op), key, [op](const Tensor& a, const Tensor& b, const core::Scalar& alpha) {
          if (!ew_dtype(a.dtype()))
            return via_fallback<sig::BinaryAlpha>(ew::name(op), a, b, alpha);
          return binary_ew(op, a, b, alpha.to_double());
        }));
  }
  for (const auto op :
       {ew::Binary::mul, ew::Binary::div, ew::Binary::maximum, ew::Binary::minimum, ew::Binary::pow,
        ew::Binary::gelu_tanh_backward, ew::Binary::relu_backward, ew::Binary::silu_backward}) {
    h.push_back(d.impl<sig::Binary>(ew::name(op), key, [op](const Tensor& a, const Tensor& b) {
      if (!ew_dtype(a.dtype())) return via_fallback<sig::Binary>(ew::name(op), a, b);
      return binary_ew(op, a, b, 1.0);
    }));
  }
  h.push_back(d.impl<sig::InplaceBinaryAlpha>("add_", key, add_inplace_kernel));
  h.push_back(d.impl<sig::InplaceBinary>("mul_", key, mul_inplace_kernel));
  h.push_back(d.impl<sig::Binary>("mm", key, mm_kernel));
  // Random ops draw from the device's Philox generator (so they are on the deny-list).
  h.push_back(d.impl<sig::RandomFill>("uniform_", key, uniform_kernel));
  h.push_back(d.impl<sig::RandomFill>("normal_", key, normal_kernel));
  h.push_back(d.impl<sig::BernoulliScalar>("bernoulli_", key, bernoulli_scalar_kernel));
}

void set_dispatcher_registration(bool enabled) {
  namespace sig = ops::sig;
  {
    NativeKernels& nk = native_kernels();
    std::lock_guard lock(nk.m);
    if (!enabled) {
      nk.minimal.clear();
    } else if (nk.minimal.empty()) {
      // The minimal set: transfers and fill (allocation and views need no kernel: the allocator
      // and the tensor's strided metadata do them; item() is a device->host copy).
      auto& d = dispatch::Dispatcher::raw();
      const auto key = DispatchKey::PrivateUse1;
      nk.minimal.push_back(d.impl<sig::InplaceBinary>("copy_", key, copy_kernel));
      nk.minimal.push_back(d.impl<sig::Fill>("fill_", key, fill_kernel));
    }
  }
  set_native_kernels(enabled);
  set_global_fallback(enabled);  // everything else: the CPU fallback
}

bool native_kernels_enabled() {
  NativeKernels& nk = native_kernels();
  std::lock_guard lock(nk.m);
  return !nk.handles.empty();
}

}  // namespace tb::openreg

namespace tb::backends {

namespace {
// Step timings on the device's clock: events on its current stream (core::DeviceTimer).
class OpenregTimer final : public core::DeviceTimer {
 public:
  explicit OpenregTimer(Device d) : device_(static_cast<int>(d.index())) {}
  void mark() override {
    events_.emplace_back();
    events_.back().record(tb::openreg::current_stream(device_));
  }
  std::vector<double> elapsed_ms() override {
    std::vector<double> out;
    if (!events_.empty()) events_.back().synchronize();
    for (std::size_t i = 1; i < events_.size(); ++i)
      out.push_back(events_[i - 1].elapsed_ms(events_[i]));
    events_.clear();
    return out;
  }

 private:
  int device_;
  std::vector<tb::openreg::Event> events_;
};
}  // namespace

void register_openreg_backend(dispatch::Dispatcher& /*d: registers through Dispatcher::raw()*/) {
  using namespace tb::openreg;  // NOLINT(google-build-using-namespace)
  core::rename_privateuse1_backend("openreg");
  core::register_allocator(DeviceType::PrivateUse1, &OpenregAllocator::instance());
  core::register_device_probe(DeviceType::PrivateUse1, &probe);
  core::register_device_timer(DeviceType::PrivateUse1,
                              [](Device d) -> std::unique_ptr<core::DeviceTimer> {
                                return std::make_unique<OpenregTimer>(d);
                              });
  if (!rng::has_generator_factory(DeviceType::PrivateUse1)) {
    rng::register_generator_factory(DeviceType::PrivateUse1, [](core::DeviceIndex i) {
      return std::make_unique<rng::PhiloxGenerator>(Device(DeviceType::PrivateUse1, i));
    });
  }
  set_dispatcher_registration(true);
}

}  // namespace tb::backends
