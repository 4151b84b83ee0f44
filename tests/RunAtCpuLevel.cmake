# Runs the whole engine test binary with TB_CPU_CAPABILITY=LEVEL (ctest cpu_level.LEVEL): every
# kernel test at that level's build of the CPU kernels. A level this CPU does not run prints
# "CPU_LEVEL_NOT_SUPPORTED" (the entry's skip expression) instead.
# Inputs: EXE (tb_engine_tests), LEVEL (baseline, avx2 or avx512), TMP (a directory of its own:
# the suite's fixed temporary names must not meet another level's run, or the same test run by
# itself, at the same time).
set(ENV{TB_CPU_CAPABILITY} "${LEVEL}")
file(REMOVE_RECURSE "${TMP}")
file(MAKE_DIRECTORY "${TMP}")
set(ENV{TMPDIR} "${TMP}")
execute_process(COMMAND ${EXE} --gtest_filter=CpuCapability.TheProcessRunsTheRequestedLevel
  OUTPUT_VARIABLE probe ERROR_VARIABLE probe RESULT_VARIABLE rc)
if(probe MATCHES "\\[  SKIPPED \\] CpuCapability")
  message("CPU_LEVEL_NOT_SUPPORTED: this CPU does not run the ${LEVEL} kernels")
  return()
endif()
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "TB_CPU_CAPABILITY=${LEVEL} did not select that level:\n${probe}")
endif()
execute_process(COMMAND ${EXE} RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "the engine tests failed at CPU level ${LEVEL}")
endif()
file(REMOVE_RECURSE "${TMP}")
message("every engine test passed at CPU level ${LEVEL}")
