// The CUDA backend's runtime side: device discovery with reasons, the device allocator (caching,
// with statistics), Philox generators per device, copy_ and fill_, and the registration of every
// CUDA kernel (cuda_ops.cpp: elementwise, reductions, softmax, cross-entropy, indexing, RoPE,
// random; cuda_optim_ops.cpp: GradScaler, fused Adam and SGD, lerps; cuda_nn_ops.cpp: norms,
// attention; cuda_blas.cpp: cuBLAS/cuBLASLt products).
#include <cuda_runtime.h>

#include <array>
#include <atomic>
#include <mutex>
#include <string>
#include <vector>

#include "engine/backends/common/caching_allocator.h"
#include "engine/backends/cuda/cuda_internal.h"
#include "engine/backends/cuda/cuda_kernels.h"
#include "engine/backends/cuda/cuda_status.h"
#include "engine/core/allocator.h"
#include "engine/core/error.h"
#include "engine/core/tensor.h"
#include "engine/dispatch/dispatcher.h"
#include "engine/dispatch/op_signatures.h"
#include "engine/rng/generator.h"
#include "engine/rng/philox.h"

namespace tb::backends {

namespace cuda_detail {

void check_cuda(cudaError_t err, const char* what) {
  if (err != cudaSuccess) {
    throw Error(tb::detail::str_cat("[cuda] ", what, " failed: ", cudaGetErrorString(err), " (",
                                    cudaGetErrorName(err), ")"));
  }
}

DeviceGuard::DeviceGuard(int index) {
  check_cuda(cudaGetDevice(&previous_), "cudaGetDevice");
  if (previous_ != index) check_cuda(cudaSetDevice(index), "cudaSetDevice");
}

DeviceGuard::~DeviceGuard() {
  int now = -1;
  if (cudaGetDevice(&now) == cudaSuccess && now != previous_) (void)cudaSetDevice(previous_);
}

tb::cuda::Strided strided_of(const core::Tensor& out, std::initializer_list<core::Tensor> inputs,
                             const char* op) {
  TB_CHECK_T(NotImplementedError, out.dim() <= tb::cuda::kMaxDims, "[", op,
             "] tensors of more than ", tb::cuda::kMaxDims,
             " dimensions are not supported by the CUDA backend, got ", out.dim());
  tb::cuda::Strided s;
  s.ndim = static_cast<int>(out.dim());
  for (int d = 0; d < s.ndim; ++d) {
    s.sizes[d] = out.size(d);
    s.strides[0][d] = out.stride(d);
  }
  int k = 1;
  for (const core::Tensor& in : inputs) {
    const core::Tensor e = in.expand(out.sizes());
    for (int d = 0; d < s.ndim; ++d)
      s.strides[k][d] = e.stride(d);
    ++k;
  }
  return s;
}

core::Tensor scratch(std::int64_t bytes, const core::Device& device) {
  return core::Tensor::empty({bytes < 1 ? 1 : bytes}, core::ScalarType::UInt8, device);
}

}  // namespace cuda_detail

namespace {

using core::Device;
using core::DeviceType;
using core::ScalarType;
using core::Tensor;

using cuda_detail::check_cuda;
using cuda_detail::DeviceGuard;
using cuda_detail::strided_of;

// Device memory through the caching allocator (engine/backends/common): cudaMalloc/cudaFree
// synchronise the device and cost tens of microseconds, so segments are kept and reused.
class CudaAllocator final : public core::Allocator {
 public:
  static constexpr int kMaxDevices = 64;

  CudaAllocator()
      : cache_("cuda", RawDeviceMemory{[](int device, std::size_t bytes) -> void* {
                                         DeviceGuard guard(device);
                                         void* p = nullptr;
                                         if (cudaMalloc(&p, bytes) != cudaSuccess) {
                                           (void)cudaGetLastError();  // clear it: we retry
                                           return nullptr;
                                         }
                                         return p;
                                       },
                                       [](int device, void* p) {
                                         int prev = 0;
                                         const bool switched =
                                             cudaGetDevice(&prev) == cudaSuccess && prev != device;
                                         if (switched) (void)cudaSetDevice(device);
                                         (void)cudaFree(p);
                                         if (switched) (void)cudaSetDevice(prev);
                                       }}) {}

  core::DataPtr allocate(std::size_t nbytes, Device device) override {
    const CudaStatus st = cuda_status();
    TB_CHECK_T(NotImplementedError, device.index() < st.device_count, "[cuda] cannot allocate on ",
               device, ": ",
               st.device_count == 0
                   ? st.reason
                   : "no such device (" + std::to_string(st.device_count) + " present)");
    if (nbytes == 0) return core::DataPtr(nullptr, nullptr, nullptr, device);
    void* p = cache_.malloc(device.index(), nbytes);
    return core::DataPtr(p, this, &CudaAllocator::release, device);
  }

  core::AllocatorStats stats(Device device) const override { return cache_.stats(device.index()); }

  void reset_peak(Device device) override { cache_.reset_peak(device.index()); }

  void empty_cache() override { cache_.empty_cache(); }

  static CudaAllocator& instance() {
    static auto* a = new CudaAllocator();  // never destroyed: tensors may outlive statics
    return *a;
  }

 private:
  static void release(void* ctx, void* data) noexcept {
    static_cast<CudaAllocator*>(ctx)->cache_.free(data);
  }

  CachingAllocator cache_;
};

// ---- copy_ and fill_ ----------------------------------------------------------------------------

// dst[i] = src[i] for two same-dtype tensors on one CUDA device (src broadcast to dst's shape).
void device_strided_copy(const Tensor& dst, const Tensor& src) {
  if (dst.numel() == 0) return;
  DeviceGuard guard(dst.device().index());
  if (dst.is_contiguous() && src.is_contiguous() && src.numel() == dst.numel()) {
    check_cuda(cudaMemcpy(dst.data_ptr(), src.data_ptr(), dst.nbytes(), cudaMemcpyDeviceToDevice),
               "cudaMemcpy device->device");
    return;
  }
  check_cuda(static_cast<cudaError_t>(tb::cuda::launch_strided_copy(
                 static_cast<int>(dst.element_size()), dst.data_ptr(), src.data_ptr(),
                 strided_of(dst, {src}, "copy_"), dst.numel())),
             "strided copy kernel launch");
}

void copy_kernel(Tensor& dst, const Tensor& src) {
  // Host-side conversions first: the device transfer itself is always a plain byte copy.
  const bool dst_cuda = dst.device().type() == DeviceType::CUDA;
  const bool src_cuda = src.device().type() == DeviceType::CUDA;
  if (dst.numel() == 0) return;
  if (dst_cuda && !src_cuda) {
    const Tensor host = src.expand(dst.sizes()).to(dst.dtype()).contiguous();
    // Into a strided destination: a contiguous device buffer first, then a strided copy.
    const Tensor target =
        dst.is_contiguous() ? dst : Tensor::empty(dst.sizes(), dst.dtype(), dst.device());
    {
      DeviceGuard guard(dst.device().index());
      check_cuda(
          cudaMemcpy(target.data_ptr(), host.data_ptr(), target.nbytes(), cudaMemcpyHostToDevice),
          "cudaMemcpy host->device");
    }
    if (!target.is_same(dst)) device_strided_copy(dst, target);
    return;
  }
  if (!dst_cuda && src_cuda) {
    // From a strided source: gathered into a contiguous device buffer first.
    Tensor dense = src;
    if (!src.is_contiguous()) {
      dense = Tensor::empty(src.sizes(), src.dtype(), src.device());
      device_strided_copy(dense, src);
    }
    Tensor host = Tensor::empty(src.sizes(), src.dtype(), Device());
    {
      DeviceGuard guard(src.device().index());
      check_cuda(
          cudaMemcpy(host.data_ptr(), dense.data_ptr(), host.nbytes(), cudaMemcpyDeviceToHost),
          "cudaMemcpy device->host");
    }
    dst.copy_(host);  // conversion, broadcasting and dst's layout on the host
    return;
  }
  // device -> device.
  if (src.dtype() == dst.dtype() && src.device() == dst.device()) {
    device_strided_copy(dst, src);
    return;
  }
  if (src.device() == dst.device() &&
      tb::cuda::can_convert_on_device(cuda_detail::st(dst), cuda_detail::st(src))) {
    // A dtype conversion on one device (autocast's casts, .to(dtype)): one kernel.
    DeviceGuard guard(dst.device().index());
    cuda_detail::check_launch(
        tb::cuda::launch_convert(cuda_detail::st(dst), dst.data_ptr(), cuda_detail::st(src),
                                 src.data_ptr(), strided_of(dst, {src}, "copy_"), dst.numel()),
        "copy_");
    return;
  }
  if (src.dtype() == dst.dtype() && src.is_contiguous() && dst.is_contiguous() &&
      src.numel() == dst.numel()) {
    check_cuda(cudaMemcpyPeer(dst.data_ptr(), dst.device().index(), src.data_ptr(),
                              src.device().index(), dst.nbytes()),
               "cudaMemcpyPeer");
    return;
  }
  // Conversions between devices: staged through the host.
  Tensor host = Tensor::empty(src.sizes(), src.dtype(), Device());
  host.copy_(src);
  dst.copy_(host);
}

void fill_kernel(Tensor& t, const core::Scalar& value) {
  if (t.numel() == 0) return;
  // The element's bit pattern is made on the host (exact conversion), then splatted.
  Tensor one = Tensor::empty({}, t.dtype(), Device());
  one.fill_(value);
  const Tensor target = t.is_contiguous() ? t : Tensor::empty(t.sizes(), t.dtype(), t.device());
  {
    DeviceGuard guard(t.device().index());
    check_cuda(static_cast<cudaError_t>(
                   tb::cuda::launch_fill(target.data_ptr(), target.numel(),
                                         static_cast<int>(target.element_size()), one.data_ptr())),
               "fill kernel launch");
  }
  if (!target.is_same(t)) device_strided_copy(t, target);
}

// Step timings on the GPU's clock: CUDA events on the default stream (core::DeviceTimer). The
// events are created once and reused; only elapsed_ms() waits (for the last one).
class CudaTimer final : public core::DeviceTimer {
 public:
  explicit CudaTimer(Device d) : device_(static_cast<int>(d.index())) {}
  ~CudaTimer() override {
    for (cudaEvent_t e : events_)
      (void)cudaEventDestroy(e);
  }
  CudaTimer(const CudaTimer&) = delete;
  CudaTimer& operator=(const CudaTimer&) = delete;

  void mark() override {
    DeviceGuard guard(device_);
    if (used_ == events_.size()) {
      cudaEvent_t e = nullptr;
      check_cuda(cudaEventCreate(&e), "cudaEventCreate");
      events_.push_back(e);
    }
    check_cuda(cudaEventRecord(events_[used_++], nullptr), "cudaEventRecord");
  }

  std::vector<double> elapsed_ms() override {
    std::vector<double> out;
    if (used_ == 0) return out;
    DeviceGuard guard(device_);
    check_cuda(cudaEventSynchronize(events_[used_ - 1]), "cudaEventSynchronize");
    for (std::size_t i = 1; i < used_; ++i) {
      float ms = 0.0f;
      check_cuda(cudaEventElapsedTime(&ms, events_[i - 1], events_[i]), "cudaEventElapsedTime");
      out.push_back(static_cast<double>(ms));
    }
    used_ = 0;
    return out;
  }

 private:
  int device_;
  std::vector<cudaEvent_t> events_;
  std::size_t used_ = 0;
};

}  // namespace

CudaStatus cuda_status() {
  static const CudaStatus status = [] {
    CudaStatus s;
    s.compiled = true;
    int count = 0;
    const cudaError_t err = cudaGetDeviceCount(&count);
    if (err != cudaSuccess) {
      (void)cudaGetLastError();
      // What the user can act on first, the runtime's own words after it: without an NVIDIA
      // driver the runtime says "CUDA driver version is insufficient for CUDA runtime version".
      int driver = 0;
      int runtime = 0;
      (void)cudaDriverGetVersion(&driver);
      (void)cudaRuntimeGetVersion(&runtime);
      std::string what;
      if ((err == cudaErrorInsufficientDriver && driver == 0) || err == cudaErrorNoDevice) {
        what = "no NVIDIA GPU or driver found here (run.device = \"cpu\" trains on the CPU). ";
      } else if (err == cudaErrorInsufficientDriver) {
        what = tb::detail::str_cat("the NVIDIA driver here supports CUDA ", driver / 1000, ".",
                                   (driver % 1000) / 10, ", older than this build's runtime ",
                                   runtime / 1000, ".", (runtime % 1000) / 10,
                                   ": update the driver, or use run.device = \"cpu\". ");
      }
      s.reason = tb::detail::str_cat(what, "The CUDA runtime reports: ", cudaGetErrorString(err),
                                     " (", cudaGetErrorName(err), ")");
      return s;
    }
    if (count == 0) {
      s.reason = "no CUDA-capable device is present";
      return s;
    }
    s.device_count = count;
    int runtime = 0;
    int driver = 0;
    (void)cudaRuntimeGetVersion(&runtime);
    (void)cudaDriverGetVersion(&driver);
    cudaDeviceProp prop{};
    if (cudaGetDeviceProperties(&prop, 0) == cudaSuccess) {
      s.runtime = tb::detail::str_cat(prop.name, ", sm_", prop.major, prop.minor, ", ",
                                      prop.totalGlobalMem >> 20, " MiB, runtime ", runtime / 1000,
                                      ".", (runtime % 1000) / 10, ", driver ", driver / 1000, ".",
                                      (driver % 1000) / 10);
    }
    return s;
  }();
  return status;
}

void register_cuda_backend(dispatch::Dispatcher& d) {
  namespace sig = ops::sig;
  core::register_allocator(DeviceType::CUDA, &CudaAllocator::instance());
  core::register_device_probe(DeviceType::CUDA, [](core::DeviceIndex i) -> std::string {
    const CudaStatus st = cuda_status();
    if (st.device_count == 0) return st.reason;
    if (i >= st.device_count) {
      return "no device cuda:" + std::to_string(i) + " (there are " +
             std::to_string(st.device_count) + ")";
    }
    return "";
  });
  core::register_device_timer(DeviceType::CUDA,
                              [](core::Device dev) -> std::unique_ptr<core::DeviceTimer> {
                                return std::make_unique<CudaTimer>(dev);
                              });
  if (!rng::has_generator_factory(DeviceType::CUDA)) {
    rng::register_generator_factory(DeviceType::CUDA, [](core::DeviceIndex i) {
      return std::make_unique<rng::PhiloxGenerator>(Device(DeviceType::CUDA, i));
    });
  }
  const auto key = dispatch::DispatchKey::CUDA;
  d.impl<sig::InplaceBinary>("copy_", key, copy_kernel).detach();
  d.impl<sig::Fill>("fill_", key, fill_kernel).detach();
  cuda_detail::register_cuda_ops(d);
  cuda_detail::register_cuda_optim_ops(d);
  cuda_detail::register_cuda_nn_ops(d);
  cuda_detail::register_cuda_conv_ops(d);
  cuda_detail::register_cuda_blas(d);
}

}  // namespace tb::backends
