// Replays every file of tests/fuzz/corpus/<target>/ through its fuzz target in the normal test
// run: seeds and every input a fuzzer once found (regressions) must be accepted or rejected with
// a tb::Error, never crash or throw anything else.
#include <gtest/gtest.h>

#include <exception>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "tests/fuzz/targets.h"

namespace {

namespace fs = std::filesystem;

class Replay : public testing::TestWithParam<tb::fuzz::NamedTarget> {};

TEST_P(Replay, EveryCorpusInputIsAcceptedOrRejectedCleanly) {
  const auto target = GetParam();
  const fs::path dir = fs::path(TB_FUZZ_CORPUS) / target.name;
  ASSERT_TRUE(fs::is_directory(dir)) << dir;
  int files = 0;
  for (const auto& entry : fs::directory_iterator(dir)) {
    if (!entry.is_regular_file() || entry.path().filename() == "README.md") continue;
    std::ifstream in(entry.path(), std::ios::binary);
    const std::vector<char> bytes((std::istreambuf_iterator<char>(in)), {});
    ++files;
    try {
      target.fn(reinterpret_cast<const std::uint8_t*>(bytes.data()), bytes.size());
    } catch (const std::exception& e) {
      ADD_FAILURE() << entry.path() << ": " << e.what();
    }
  }
  EXPECT_GE(files, 3) << "the corpus of " << target.name << " has fewer than 3 seeds";
}

INSTANTIATE_TEST_SUITE_P(Fuzz, Replay, testing::ValuesIn(tb::fuzz::targets()),
                         [](const auto& param_info) { return std::string(param_info.param.name); });

}  // namespace
