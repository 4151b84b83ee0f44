// libFuzzer entry point for one target, chosen at build time (-DTB_FUZZ_TARGET=run_config, ...).
#include <cstddef>
#include <cstdint>

#include "tests/fuzz/targets.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  tb::fuzz::TB_FUZZ_TARGET(data, size);
  return 0;
}
