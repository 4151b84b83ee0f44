// CPU capability detection and choice, and the CPU backend's registration entry point.
#include "engine/backends/cpu/capability.h"

#include <algorithm>
#include <cstdlib>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

#include "engine/backends/cpu/kernels.h"

namespace tb::cpu {

// The per-level registrations (capability_kernels.cpp, built once per compiled level).
namespace baseline {
void register_capability_kernels(dispatch::Dispatcher& d);
}
#ifdef TB_CPU_HAVE_AVX2
namespace avx2 {
void register_capability_kernels(dispatch::Dispatcher& d);
}
#endif
#ifdef TB_CPU_HAVE_AVX512
namespace avx512 {
void register_capability_kernels(dispatch::Dispatcher& d);
}
#endif

std::string_view capability_name(CpuCapability c) {
  switch (c) {
    case CpuCapability::Baseline:
      return "baseline";
    case CpuCapability::Avx2:
      return "avx2";
    case CpuCapability::Avx512:
      return "avx512";
  }
  return "baseline";
}

std::optional<CpuCapability> parse_capability(std::string_view name) {
  if (name == "baseline" || name == "default") return CpuCapability::Baseline;
  if (name == "avx2") return CpuCapability::Avx2;
  if (name == "avx512") return CpuCapability::Avx512;
  return std::nullopt;
}

std::vector<CpuCapability> compiled_capabilities() {
  std::vector<CpuCapability> out{CpuCapability::Baseline};
#ifdef TB_CPU_HAVE_AVX2
  out.push_back(CpuCapability::Avx2);
#endif
#ifdef TB_CPU_HAVE_AVX512
  out.push_back(CpuCapability::Avx512);
#endif
  return out;
}

#if defined(__x86_64__) || defined(__i386__)
// F16C from CPUID leaf 1 (ECX bit 29): clang 14's __builtin_cpu_supports does not know "f16c".
bool has_f16c() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  return __get_cpuid(1, &a, &b, &c, &d) != 0 && (c & bit_F16C) != 0;
}
#endif

bool cpu_supports(CpuCapability c) {
  switch (c) {
    case CpuCapability::Baseline:
      return true;
    case CpuCapability::Avx2:
#if defined(__x86_64__) || defined(__i386__)
      // libgcc's cpuid reading also checks that the OS saves the AVX state (XGETBV).
      return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && has_f16c();
#else
      return false;
#endif
    case CpuCapability::Avx512:
#if defined(__x86_64__) || defined(__i386__)
      return cpu_supports(CpuCapability::Avx2) && __builtin_cpu_supports("avx512f") &&
             __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
             __builtin_cpu_supports("avx512dq");
#else
      return false;
#endif
  }
  return false;
}

CapabilityChoice choose_capability(const char* requested,
                                   const std::vector<CpuCapability>& compiled,
                                   const std::vector<CpuCapability>& supported) {
  auto has = [](const std::vector<CpuCapability>& v, CpuCapability c) {
    return std::find(v.begin(), v.end(), c) != v.end();
  };
  CapabilityChoice best;
  for (CpuCapability c : compiled) {
    if (has(supported, c) && static_cast<int>(c) > static_cast<int>(best.level)) best.level = c;
  }
  if (requested == nullptr || *requested == '\0') return best;
  const std::string_view text(requested);
  const std::optional<CpuCapability> asked = parse_capability(text);
  if (!asked) {
    best.note = "TB_CPU_CAPABILITY='" + std::string(text) +
                "' is not a level (baseline, avx2 or avx512); using " +
                std::string(capability_name(best.level));
    return best;
  }
  if (!has(compiled, *asked)) {
    best.note = "TB_CPU_CAPABILITY=" + std::string(text) +
                ": this build has no kernels for that level; using " +
                std::string(capability_name(best.level));
    return best;
  }
  if (!has(supported, *asked)) {
    best.note = "TB_CPU_CAPABILITY=" + std::string(text) +
                ": this CPU does not support that level; using " +
                std::string(capability_name(best.level));
    return best;
  }
  return CapabilityChoice{*asked, {}};
}

const CapabilityChoice& active_capability() {
  static const CapabilityChoice choice = [] {
    std::vector<CpuCapability> supported;
    for (CpuCapability c : compiled_capabilities()) {
      if (cpu_supports(c)) supported.push_back(c);
    }
    return choose_capability(std::getenv("TB_CPU_CAPABILITY"), compiled_capabilities(), supported);
  }();
  return choice;
}

void register_cpu_kernels(dispatch::Dispatcher& d) {
  register_linalg_kernels(d);
  switch (active_capability().level) {
#ifdef TB_CPU_HAVE_AVX512
    case CpuCapability::Avx512:
      avx512::register_capability_kernels(d);
      return;
#endif
#ifdef TB_CPU_HAVE_AVX2
    case CpuCapability::Avx2:
      avx2::register_capability_kernels(d);
      return;
#endif
    default:
      baseline::register_capability_kernels(d);
      return;
  }
}

}  // namespace tb::cpu
