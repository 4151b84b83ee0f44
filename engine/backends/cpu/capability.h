// CPU capability levels of the engine's own kernels, as ATen's CPU_CAPABILITY: the elementwise,
// reduction, softmax, norm, attention, optimizer, conversion and random kernels are compiled once
// per level (engine/CMakeLists.txt) and the best level this CPU runs is chosen once per process.
// The environment variable TB_CPU_CAPABILITY (baseline, avx2, avx512) asks for a level; a level
// this CPU or build lacks falls back to the best one available, with a note saying why.
// The levels give the same bits: no FMA contraction and no reassociation at any level, so a
// vector lane computes what the scalar loop computes (tests run every supported level).
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tb::cpu {

/// An instruction-set level the kernels are compiled for, lowest first.
enum class CpuCapability {
  Baseline,  ///< the compiler's x86-64 (or other architecture's) default
  Avx2,      ///< AVX2 + FMA + F16C (FMA is not used to fuse: results equal the baseline's)
  Avx512,    ///< AVX-512 F, BW, VL and DQ, 512-bit vectors preferred
};

/// The level's name as TB_CPU_CAPABILITY spells it: "baseline", "avx2", "avx512".
std::string_view capability_name(CpuCapability c);

/// Parses a level name ("default" is "baseline"); nullopt for anything else.
std::optional<CpuCapability> parse_capability(std::string_view name);

/// The levels compiled into this build, lowest first (baseline always).
std::vector<CpuCapability> compiled_capabilities();

/// Whether this CPU and operating system can run level `c` (cpuid and the OS-enabled state).
bool cpu_supports(CpuCapability c);

/// A chosen level and, when it is not the one asked for, why.
struct CapabilityChoice {
  CpuCapability level = CpuCapability::Baseline;  ///< the level whose kernels run
  std::string note;  ///< empty, or why TB_CPU_CAPABILITY's request was not followed
};

/// The decision, given TB_CPU_CAPABILITY's value (nullptr or "" when unset), the levels compiled
/// and the levels this CPU supports: the request if it is compiled and supported, else the best
/// level that is both.
CapabilityChoice choose_capability(const char* requested,
                                   const std::vector<CpuCapability>& compiled,
                                   const std::vector<CpuCapability>& supported);

/// The level registered in this process: decided on first call from TB_CPU_CAPABILITY, this
/// build and this CPU, then fixed.
const CapabilityChoice& active_capability();

}  // namespace tb::cpu
