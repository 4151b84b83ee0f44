// The narrow facade that app/ and ui/ use: plain structs about the engine (version, devices,
// dispatch table, threads, GEMM backend) and the headless demo. No Tensor or registry types leak.
#pragma once

#include <cstdint>
#include <exception>
#include <ostream>
#include <string>
#include <vector>

namespace tb::api {

/// "0.1.0".
std::string version();

/// One device kind the engine knows, whether it can be used here, and why not.
struct DeviceInfo {
  std::string name;        ///< "cpu", "cuda:0", "cuda"
  bool available = false;  ///< whether it can be used in this process
  std::string detail;      ///< threads/BLAS for the CPU; the reason when unavailable
};
/// The instruction-set level of the engine's CPU kernels in this process.
struct CpuKernelLevel {
  std::string level;                   ///< "baseline", "avx2" or "avx512": the one running
  std::vector<std::string> compiled;   ///< levels this build has, lowest first
  std::vector<std::string> supported;  ///< of those, the ones this CPU can run
  std::string note;  ///< empty, or why the TB_CPU_CAPABILITY environment variable was not followed
};
/// The CPU kernels' level (chosen once per process from this CPU and TB_CPU_CAPABILITY).
CpuKernelLevel cpu_kernel_level();

/// The CPU, then each usable CUDA device ("cuda:N") or one unavailable "cuda" entry saying why,
/// then the openreg devices ("openreg:N").
std::vector<DeviceInfo> list_devices();

/// A data-parallel backend (distributed.backend) and whether this build has it.
struct DistributedBackendInfo {
  std::string name;    ///< "mpi", "nccl"
  bool built = false;  ///< compiled into this build
  std::string detail;  ///< what it runs over and needs here; how to get it when not built
};
/// The data-parallel backends: "mpi", then "nccl".
std::vector<DistributedBackendInfo> distributed_backends();

/// One (op, dispatch key) entry of the dispatcher's computed table.
struct DispatchRow {
  std::string op;      ///< operator name
  std::string key;     ///< "CPU", "CUDA", "PrivateUse1", "Autograd", "Autocast"
  std::string source;  ///< "kernel", "fallback", "fallthrough" or "missing"
  std::string where;   ///< file:line of the registration
};
/// Every (op, key) entry, ops sorted by name, keys in priority order. The first call registers
/// the built-in ops and kernels.
std::vector<DispatchRow> dispatch_table();

/// The dispatch key a device text selects ("openreg:0" -> "PrivateUse1", "cuda" -> "CUDA").
/// Throws tb::ValueError naming the text when it names no device.
std::string dispatch_key_of(const std::string& device);

/// The name the PrivateUse1 key's devices go by ("openreg").
std::string privateuse1_name();

/// Kernel-pool (and BLAS) thread count.
int num_threads();
/// Sets the kernel pool and OpenBLAS thread counts together. Throws on n < 1.
void set_num_threads(int n);

/// Result of choosing a GEMM backend: what was asked, what is used, and why they differ.
struct GemmBackendChoice {
  std::string requested;  ///< the name asked for ("auto", "openblas", ...)
  std::string used;     ///< the backend that runs ("onednn", "openblas" or "reference" on the CPU)
  std::string warning;  ///< empty when the request was honoured
};
/// Selects "auto", "openblas", "onednn", "reference", "cublas" or "cublaslt". A choice this build
/// or machine cannot run falls back to the default with a warning; an unknown name throws.
GemmBackendChoice set_gemm_backend(const std::string& name);
/// Name of the GEMM backend in use: "onednn", "openblas" or "reference".
std::string current_gemm_backend();
/// Empty, or why OpenBLAS runs slow kernels on this CPU and the OPENBLAS_CORETYPE setting that
/// fixes it (it matters for the openblas backend and for double-precision products).
std::string openblas_note();
/// Lets float32 products on CUDA devices use TF32 tensor cores (inputs rounded to 10 mantissa
/// bits, float32 accumulation; PyTorch's allow_tf32). Off by default; no effect elsewhere.
void set_allow_tf32(bool allow);

/// The candidate `word` is likely a typo of ("runz" -> "runs"), or "" (the rule config keys use
/// for "did you mean").
std::string close_word(const std::string& word, const std::vector<std::string>& candidates);

/// An error's text for a person: what() — with, for a config key of a file, where it is as
/// compilers say it ("[config] run.toml:12:1: model.input: ..."), which editors jump to.
std::string error_text(const std::exception& e);

/// Runs the headless demo (seeded data, a least-squares fit by gradient descent on the engine's
/// ops, GEMM vs SYRK timings), printing what it does to `out`. Returns 0 on success.
int run_demo(std::ostream& out, std::uint64_t seed = 0, int steps = 200);

}  // namespace tb::api
