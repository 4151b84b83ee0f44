// The CUDA backend, first increment: device discovery with reasons, a device allocator with
// statistics, Philox generators per device, and kernels for copy_ (host<->device, device<->
// device), fill_, add (contiguous, same shape) and mm (cuBLAS). Everything else reports a
// missing CUDA kernel naming the op. See README.md beside this file for what comes next.
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <dlfcn.h>

#include <array>
#include <atomic>
#include <mutex>
#include <string>
#include <vector>

#include "engine/backends/common/caching_allocator.h"
#include "engine/backends/common/elementwise_math.h"
#include "engine/backends/cuda/cuda_kernels.h"
#include "engine/backends/cuda/cuda_status.h"
#include "engine/core/allocator.h"
#include "engine/core/error.h"
#include "engine/core/tensor.h"
#include "engine/dispatch/dispatcher.h"
#include "engine/ops/op_signatures.h"
#include "engine/rng/generator.h"
#include "engine/rng/philox.h"

namespace tb::backends {

namespace {

using core::Device;
using core::DeviceType;
using core::ScalarType;
using core::Tensor;

void check_cuda(cudaError_t err, const char* what) {
  if (err != cudaSuccess) {
    throw Error(tb::detail::str_cat("[cuda] ", what, " failed: ", cudaGetErrorString(err), " (",
                                    cudaGetErrorName(err), ")"));
  }
}

// Makes `index` the current device for the guard's lifetime.
class DeviceGuard {
 public:
  explicit DeviceGuard(int index) {
    check_cuda(cudaGetDevice(&previous_), "cudaGetDevice");
    if (previous_ != index) check_cuda(cudaSetDevice(index), "cudaSetDevice");
  }
  ~DeviceGuard() {
    int now = -1;
    if (cudaGetDevice(&now) == cudaSuccess && now != previous_) (void)cudaSetDevice(previous_);
  }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = 0;
};

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

// ---- kernels ------------------------------------------------------------------------------------

int dtype_code(ScalarType t) {
  switch (t) {
    case ScalarType::Float32:
      return 0;
    case ScalarType::Float64:
      return 1;
    case ScalarType::Float16:
      return 2;
    case ScalarType::BFloat16:
      return 3;
    default:
      return -1;
  }
}

// Shapes and strides of an elementwise launch: `out` and inputs broadcast to its shape.
tb::cuda::Strided strided_of(const Tensor& out, std::initializer_list<Tensor> inputs) {
  TB_CHECK_T(NotImplementedError, out.dim() <= tb::cuda::kMaxDims, "[cuda] tensors of more than ",
             tb::cuda::kMaxDims, " dimensions are not supported by the CUDA backend, got ",
             out.dim());
  tb::cuda::Strided s;
  s.ndim = static_cast<int>(out.dim());
  for (int d = 0; d < s.ndim; ++d) {
    s.sizes[d] = out.size(d);
    s.strides[0][d] = out.stride(d);
  }
  int k = 1;
  for (const Tensor& in : inputs) {
    const Tensor e = in.expand(out.sizes());
    for (int d = 0; d < s.ndim; ++d)
      s.strides[k][d] = e.stride(d);
    ++k;
  }
  return s;
}

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
                 strided_of(dst, {src}), dst.numel())),
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

// Elementwise ops with the arithmetic shared with openreg (engine/backends/common).
int ew_dtype_code(ScalarType t, bool integers) {
  const int code = dtype_code(t);
  if (code >= 0) return code;
  if (integers && t == ScalarType::Int64) return 4;
  if (integers && t == ScalarType::Int32) return 5;
  return -1;
}

Tensor unary_ew(backends::ew::Unary op, const Tensor& a) {
  const int code = ew_dtype_code(a.dtype(), false);
  TB_CHECK_T(NotImplementedError, code >= 0, "[", backends::ew::name(op),
             "] the CUDA backend computes float32, float64, float16 and bfloat16 tensors, got ",
             a.dtype());
  Tensor out = Tensor::empty(a.sizes(), a.dtype(), a.device());
  DeviceGuard guard(a.device().index());
  check_cuda(static_cast<cudaError_t>(tb::cuda::launch_unary(static_cast<int>(op), code,
                                                             out.data_ptr(), a.data_ptr(),
                                                             strided_of(out, {a}), out.numel())),
             "unary kernel launch");
  return out;
}

Tensor binary_ew(backends::ew::Binary op, const Tensor& a, const Tensor& b, double alpha) {
  const int code = ew_dtype_code(a.dtype(), true);
  TB_CHECK_T(NotImplementedError, code >= 0, "[", backends::ew::name(op),
             "] the CUDA backend computes float32/64, float16, bfloat16, int64 and int32 "
             "tensors, got ",
             a.dtype());
  TB_CHECK_T(TypeError, a.device() == b.device(), "[", backends::ew::name(op),
             "] expected all tensors on the same device, got ", a.device(), " and ", b.device());
  const core::DimVector shape =
      core::broadcast_shapes(a.sizes(), b.sizes(), backends::ew::name(op));
  Tensor out = Tensor::empty(shape, a.dtype(), a.device());
  DeviceGuard guard(a.device().index());
  check_cuda(static_cast<cudaError_t>(tb::cuda::launch_binary(
                 static_cast<int>(op), code, out.data_ptr(), a.data_ptr(), b.data_ptr(), alpha,
                 strided_of(out, {a, b}), out.numel())),
             "binary kernel launch");
  return out;
}

// cuBLAS is loaded on first use, not linked: linking it made every start of trainbench-cli take
// ~0.5 s and ~200 MB (libcublasLt's initialisation), GPU or not, and made the binary refuse to
// start where the CUDA libraries are absent.
struct CublasApi {
  decltype(&cublasCreate_v2) create = nullptr;
  decltype(&cublasSgemm_v2) sgemm = nullptr;
  decltype(&cublasDgemm_v2) dgemm = nullptr;
  decltype(&cublasGetStatusString) status_string = nullptr;
};

const CublasApi& cublas_api() {
  static const CublasApi api = [] {
    const std::string versioned = "libcublas.so." + std::to_string(CUDART_VERSION / 1000);
    void* lib = dlopen(versioned.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) lib = dlopen("libcublas.so", RTLD_NOW | RTLD_LOCAL);
    TB_CHECK_T(NotImplementedError, lib != nullptr, "[cuda] cuBLAS could not be loaded (",
               versioned, "): ", dlerror(), "; install the CUDA toolkit's cuBLAS library");
    CublasApi a;
    auto sym = [lib](const char* name) {
      void* f = dlsym(lib, name);
      TB_CHECK_T(NotImplementedError, f != nullptr, "[cuda] cuBLAS lacks ", name);
      return f;
    };
    a.create = reinterpret_cast<decltype(a.create)>(sym("cublasCreate_v2"));
    a.sgemm = reinterpret_cast<decltype(a.sgemm)>(sym("cublasSgemm_v2"));
    a.dgemm = reinterpret_cast<decltype(a.dgemm)>(sym("cublasDgemm_v2"));
    a.status_string = reinterpret_cast<decltype(a.status_string)>(sym("cublasGetStatusString"));
    return a;
  }();
  return api;
}

cublasHandle_t cublas_handle(int device) {
  static std::mutex m;
  static std::vector<cublasHandle_t> handles(CudaAllocator::kMaxDevices, nullptr);
  const CublasApi& api = cublas_api();
  std::lock_guard lock(m);
  auto& h = handles[static_cast<std::size_t>(device)];
  if (h == nullptr) {
    const cublasStatus_t st = api.create(&h);
    TB_CHECK(st == CUBLAS_STATUS_SUCCESS, "[cuda] cublasCreate failed on cuda:", device, " (",
             api.status_string(st), ")");
  }
  return h;
}

// out[m,n] = a[m,k] @ b[k,n], row-major, via column-major cuBLAS: out^T = b^T a^T.
Tensor mm_kernel(const Tensor& a0, const Tensor& b0) {
  TB_CHECK_T(NotImplementedError,
             a0.dtype() == ScalarType::Float32 || a0.dtype() == ScalarType::Float64,
             "[mm] the CUDA backend multiplies float32 and float64 for now, got ", a0.dtype());
  const Tensor a = a0.contiguous();
  const Tensor b = b0.contiguous();
  const int m = static_cast<int>(a.size(0));
  const int k = static_cast<int>(a.size(1));
  const int n = static_cast<int>(b.size(1));
  Tensor out = Tensor::empty({m, n}, a.dtype(), a.device());
  if (m == 0 || n == 0) return out;
  DeviceGuard guard(a.device().index());
  cublasHandle_t h = cublas_handle(a.device().index());
  cublasStatus_t st;
  if (a.dtype() == ScalarType::Float32) {
    const float one = 1.0f;
    const float zero = 0.0f;
    st = cublas_api().sgemm(
        h, CUBLAS_OP_N, CUBLAS_OP_N, n, m, k, &one, static_cast<const float*>(b.data_ptr()), n,
        static_cast<const float*>(a.data_ptr()), k, &zero, out.data_ptr<float>(), n);
  } else {
    const double one = 1.0;
    const double zero = 0.0;
    st = cublas_api().dgemm(
        h, CUBLAS_OP_N, CUBLAS_OP_N, n, m, k, &one, static_cast<const double*>(b.data_ptr()), n,
        static_cast<const double*>(a.data_ptr()), k, &zero, out.data_ptr<double>(), n);
  }
  TB_CHECK(st == CUBLAS_STATUS_SUCCESS,
           "[mm] cuBLAS gemm failed: ", cublas_api().status_string(st));
  return out;
}

}  // namespace

CudaStatus cuda_status() {
  static const CudaStatus status = [] {
    CudaStatus s;
    s.compiled = true;
    int count = 0;
    const cudaError_t err = cudaGetDeviceCount(&count);
    if (err != cudaSuccess) {
      (void)cudaGetLastError();
      s.reason = tb::detail::str_cat("the CUDA runtime reports: ", cudaGetErrorString(err), " (",
                                     cudaGetErrorName(err), ")");
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
  if (!rng::has_generator_factory(DeviceType::CUDA)) {
    rng::register_generator_factory(DeviceType::CUDA, [](core::DeviceIndex i) {
      return std::make_unique<rng::PhiloxGenerator>(Device(DeviceType::CUDA, i));
    });
  }
  const auto key = dispatch::DispatchKey::CUDA;
  d.impl<sig::InplaceBinary>("copy_", key, copy_kernel).detach();
  d.impl<sig::Fill>("fill_", key, fill_kernel).detach();
  namespace ew = backends::ew;
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
       {ew::Binary::mul, ew::Binary::div, ew::Binary::maximum, ew::Binary::minimum}) {
    d.impl<sig::Binary>(ew::name(op), key, [op](const Tensor& a, const Tensor& b) {
       return binary_ew(op, a, b, 1.0);
     }).detach();
  }
  d.impl<sig::Binary>("mm", key, mm_kernel).detach();
}

}  // namespace tb::backends
