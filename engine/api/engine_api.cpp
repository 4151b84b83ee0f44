// Implementation of the engine facade.
#include "engine/api/engine_api.h"

#include <algorithm>

#include "engine/api/api_detail.h"
#include "engine/backends/cpu/blas.h"
#include "engine/backends/cpu/capability.h"
#include "engine/backends/cuda/cuda_status.h"
#include "engine/backends/openreg/runtime.h"
#include "engine/core/allocator.h"
#include "engine/core/error.h"
#include "engine/core/fields.h"
#include "engine/core/math_mode.h"
#include "engine/core/thread_pool.h"
#include "engine/dispatch/dispatcher.h"
#include "engine/dist/process_group.h"

namespace tb::api {

std::string version() {
  return TB_VERSION_STRING;
}

CpuKernelLevel cpu_kernel_level() {
  CpuKernelLevel out;
  const cpu::CapabilityChoice& choice = cpu::active_capability();
  out.level = std::string(cpu::capability_name(choice.level));
  out.note = choice.note;
  for (cpu::CpuCapability c : cpu::compiled_capabilities()) {
    out.compiled.emplace_back(cpu::capability_name(c));
    if (cpu::cpu_supports(c)) out.supported.emplace_back(cpu::capability_name(c));
  }
  return out;
}

std::vector<DistributedBackendInfo> distributed_backends() {
  std::vector<DistributedBackendInfo> out;
  DistributedBackendInfo mpi{"mpi", dist::mpi_available(), ""};
  if (mpi.built) {
    const std::string mpirun = detail::find_on_path("mpirun");
    mpi.detail = "Open MPI, CPU ranks (trainbench-cli launch --ddp); " +
                 (mpirun.empty() ? std::string("mpirun is not on PATH (Debian's openmpi-bin)")
                                 : "mpirun: " + mpirun);
  } else {
    mpi.detail =
        "not in this build (install Debian's libopenmpi-dev and openmpi-bin, then "
        "configure again)";
  }
  out.push_back(mpi);
  DistributedBackendInfo nccl{"nccl", dist::nccl_available(), ""};
  nccl.detail = nccl.built ? "NCCL, one CUDA GPU per rank (libnccl is loaded when a run uses it)"
                           : "not in this build (needs the CUDA toolkit with NCCL at configure "
                             "time)";
  out.push_back(nccl);
  return out;
}

std::vector<DeviceInfo> list_devices() {
  std::vector<DeviceInfo> out;
  std::string cpu_detail = std::to_string(core::num_threads()) +
                           (core::num_threads() == 1 ? " kernel thread" : " kernel threads") +
                           ", kernels " + cpu_kernel_level().level + ", GEMM " +
                           std::string(cpu::gemm_backend_name(cpu::current_gemm_backend())) + " (" +
                           cpu::gemm_libraries() + ")";
  out.push_back({"cpu", true, cpu_detail});
  const backends::CudaStatus cs = backends::cuda_status();
  if (cs.device_count > 0) {
    for (int i = 0; i < cs.device_count; ++i) {
      out.push_back({"cuda:" + std::to_string(i), true, cs.runtime});
    }
  } else {
    out.push_back({"cuda", false, cs.reason});
  }
  // The reference accelerator, emulated on the CPU (engine/backends/openreg).
  core::load_backends();
  for (int i = 0; i < openreg::device_count(); ++i) {
    out.push_back({"openreg:" + std::to_string(i), true,
                   "reference accelerator emulated on the CPU, " +
                       std::to_string(openreg::device_capacity() >> 20) + " MiB"});
  }
  return out;
}

std::string dispatch_key_of(const std::string& device) {
  const core::Device d = core::Device::parse(device);
  return std::string(dispatch::dispatch_key_name(dispatch::backend_key(d.type())));
}

std::string privateuse1_name() {
  core::load_backends();
  return core::device_type_name(core::DeviceType::PrivateUse1);
}

std::vector<DispatchRow> dispatch_table() {
  std::vector<DispatchRow> rows;
  for (const auto& r : dispatch::Dispatcher::singleton().dump()) {
    const char* src = "missing";
    switch (r.source) {
      case dispatch::KernelSource::Kernel:
        src = "kernel";
        break;
      case dispatch::KernelSource::Fallback:
        src = "fallback";
        break;
      case dispatch::KernelSource::Fallthrough:
        src = "fallthrough";
        break;
      case dispatch::KernelSource::Missing:
        break;
    }
    rows.push_back({r.op, std::string(dispatch::dispatch_key_name(r.key)), src, r.where});
  }
  return rows;
}

int num_threads() {
  return core::num_threads();
}
void set_num_threads(int n) {
  core::set_num_threads(n);
}

GemmBackendChoice set_gemm_backend(const std::string& name) {
  const cpu::GemmBackend requested = cpu::parse_gemm_backend(name);
  auto sel = cpu::set_gemm_backend(requested);
  GemmBackendChoice c{std::string(cpu::gemm_backend_name(sel.requested)),
                      std::string(cpu::gemm_backend_name(sel.used)), sel.warning};
  // The CUDA choices are checked up front too: no device says so; cuBLASLt that cannot be
  // loaded falls back to cuBLAS for CUDA GEMMs.
  if (requested == cpu::GemmBackend::Cublas || requested == cpu::GemmBackend::CublasLt) {
    const bool lt = requested == cpu::GemmBackend::CublasLt;
    const std::string why = backends::cuda_blas_unavailable_reason(lt);
    if (!why.empty()) {
      const std::string cuda_why = backends::cuda_status().reason;
      if (lt && cuda_why.empty()) {
        (void)cpu::set_gemm_backend(cpu::GemmBackend::Cublas);
        c.warning += tb::detail::str_cat("; gemm_backend 'cublaslt' cannot be used (", why,
                                         "): CUDA GEMMs use 'cublas' instead");
      } else {
        c.warning += tb::detail::str_cat("; and no CUDA device can use it here: ", why);
      }
    }
  }
  return c;
}

void set_allow_tf32(bool allow) {
  core::set_allow_tf32(allow);
}

std::string close_word(const std::string& word, const std::vector<std::string>& candidates) {
  return core::close_word(word, candidates);
}

std::string error_text(const std::exception& e) {
  std::string what = e.what();
  const auto* config = dynamic_cast<const ConfigError*>(&e);
  if (config == nullptr) return what;
  const ConfigProblem& p = config->problem();
  const std::string at = "[config] " + p.source + ": ";
  if (p.line > 0 && what.rfind(at, 0) == 0) {
    std::string rest = what.substr(at.size());
    // A TOML syntax error says its place in words too ("line 2, column 10: "): once is enough.
    const std::string words =
        "line " + std::to_string(p.line) + ", column " + std::to_string(p.column) + ": ";
    if (rest.rfind(words, 0) == 0) rest.erase(0, words.size());
    what = "[config] " + p.source + ":" + std::to_string(p.line) + ":" +
           std::to_string(std::max(p.column, 1)) + ": " + rest;
  }
  return what;
}

std::string openblas_note() {
  return cpu::openblas_core_note();
}

std::string current_gemm_backend() {
  return std::string(cpu::gemm_backend_name(cpu::current_gemm_backend()));
}

}  // namespace tb::api
