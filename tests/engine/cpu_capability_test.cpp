// CPU capability levels (engine/backends/cpu/capability.h): the choice from TB_CPU_CAPABILITY,
// the build and the CPU, and that the process runs the level asked for. ctest runs the kernel
// tests once per level this CPU supports (cpu_level.* entries, tests/CMakeLists.txt).
#include <gtest/gtest.h>

#include <cstdlib>

#include "engine/backends/cpu/capability.h"

namespace {

using tb::cpu::CpuCapability;

const std::vector<CpuCapability> kAll{CpuCapability::Baseline, CpuCapability::Avx2,
                                      CpuCapability::Avx512};

TEST(CpuCapability, NamesRoundTripAndDefaultIsBaseline) {
  for (CpuCapability c : kAll) {
    EXPECT_EQ(tb::cpu::parse_capability(tb::cpu::capability_name(c)), c);
  }
  EXPECT_EQ(tb::cpu::parse_capability("default"), CpuCapability::Baseline);
  EXPECT_FALSE(tb::cpu::parse_capability("AVX2").has_value());
  EXPECT_FALSE(tb::cpu::parse_capability("avx").has_value());
  EXPECT_FALSE(tb::cpu::parse_capability("").has_value());
}

TEST(CpuCapability, UnsetChoosesTheBestLevelCompiledAndSupported) {
  const std::vector<CpuCapability> cpu_avx2{CpuCapability::Baseline, CpuCapability::Avx2};
  auto c = tb::cpu::choose_capability(nullptr, kAll, cpu_avx2);
  EXPECT_EQ(c.level, CpuCapability::Avx2);
  EXPECT_TRUE(c.note.empty());
  c = tb::cpu::choose_capability("", kAll, kAll);
  EXPECT_EQ(c.level, CpuCapability::Avx512);
  // A build with the baseline only (not x86-64) runs it on any CPU.
  c = tb::cpu::choose_capability(nullptr, {CpuCapability::Baseline}, kAll);
  EXPECT_EQ(c.level, CpuCapability::Baseline);
}

TEST(CpuCapability, ARequestIsFollowedOnlyWhenCompiledAndSupported) {
  const std::vector<CpuCapability> cpu_avx2{CpuCapability::Baseline, CpuCapability::Avx2};
  auto c = tb::cpu::choose_capability("baseline", kAll, cpu_avx2);
  EXPECT_EQ(c.level, CpuCapability::Baseline);
  EXPECT_TRUE(c.note.empty());

  c = tb::cpu::choose_capability("avx512", kAll, cpu_avx2);
  EXPECT_EQ(c.level, CpuCapability::Avx2);
  EXPECT_EQ(c.note, "TB_CPU_CAPABILITY=avx512: this CPU does not support that level; using avx2");

  c = tb::cpu::choose_capability("avx2", {CpuCapability::Baseline}, kAll);
  EXPECT_EQ(c.level, CpuCapability::Baseline);
  EXPECT_EQ(c.note,
            "TB_CPU_CAPABILITY=avx2: this build has no kernels for that level; using baseline");

  c = tb::cpu::choose_capability("sse4", kAll, cpu_avx2);
  EXPECT_EQ(c.level, CpuCapability::Avx2);
  EXPECT_EQ(c.note,
            "TB_CPU_CAPABILITY='sse4' is not a level (baseline, avx2 or avx512); using avx2");
}

TEST(CpuCapability, BaselineIsAlwaysCompiledAndSupportedAndLevelsNest) {
  const auto compiled = tb::cpu::compiled_capabilities();
  ASSERT_FALSE(compiled.empty());
  EXPECT_EQ(compiled.front(), CpuCapability::Baseline);
  EXPECT_TRUE(tb::cpu::cpu_supports(CpuCapability::Baseline));
  // A CPU with AVX-512 (F, BW, VL, DQ) has the AVX2 level too.
  if (tb::cpu::cpu_supports(CpuCapability::Avx512)) {
    EXPECT_TRUE(tb::cpu::cpu_supports(CpuCapability::Avx2));
  }
}

// The per-level ctest entries set TB_CPU_CAPABILITY: the process must run exactly that level
// (or the test says it cannot), so each entry proves which kernels it tested.
TEST(CpuCapability, TheProcessRunsTheRequestedLevel) {
  const char* env = std::getenv("TB_CPU_CAPABILITY");
  const auto& active = tb::cpu::active_capability();
  if (env == nullptr || *env == '\0') {
    EXPECT_TRUE(active.note.empty());
    EXPECT_TRUE(tb::cpu::cpu_supports(active.level));
    return;
  }
  const auto asked = tb::cpu::parse_capability(env);
  ASSERT_TRUE(asked.has_value()) << "TB_CPU_CAPABILITY=" << env;
  if (!tb::cpu::cpu_supports(*asked)) {
    GTEST_SKIP() << "this CPU does not run " << env;
  }
  EXPECT_EQ(active.level, *asked) << active.note;
  EXPECT_TRUE(active.note.empty()) << active.note;
}

}  // namespace
