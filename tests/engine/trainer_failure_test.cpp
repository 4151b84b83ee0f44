// How a run that cannot go on says so and what it leaves: a batch that cannot be read fails the
// run at its first step without leaving an empty checkpoint folder behind, and a model whose
// vocabulary is smaller than the data's names the data key that sets it.
#include <gtest/gtest.h>

#include <filesystem>
#include <memory>
#include <string>

#include "engine/core/error.h"
#include "engine/data/dataset.h"
#include "engine/data/registry.h"
#include "engine/train/run_config.h"
#include "engine/train/trainer.h"
#include "tests/engine/test_util.h"

namespace {

namespace fs = std::filesystem;
namespace train = tb::train;

// Every batch fails to read, as a damaged file would.
class UnreadableDataset final : public tb::data::Dataset {
 public:
  explicit UnreadableDataset(std::int64_t n) : n_(n) {}
  std::int64_t size() const override { return n_; }
  tb::data::Batch get_batch(std::span<const std::int64_t>,
                            const tb::data::BatchContext& ctx) const override {
    throw tb::ValueError("[test] batch " + std::to_string(ctx.batch_index) + " is unreadable");
  }

 private:
  std::int64_t n_;
};

void register_unreadable() {
  tb::test::register_derived_data_kind(
      "synthetic-blobs", "test-unreadable",
      "synthetic-blobs whose training batches cannot be read (tests only)",
      [](tb::data::DataSplits& s) {
        s.train = std::make_shared<UnreadableDataset>(s.train->size());
      });
}

TEST(TrainerFailure, AFirstBatchThatCannotBeReadLeavesNoEmptyCheckpointFolder) {
  register_unreadable();
  const fs::path dir = fs::temp_directory_path() / "tb_failure_no_folder" / "run-1";
  fs::remove_all(dir.parent_path());
  train::RunConfig c = train::parse_run_config(tb::test::kBlobs);
  c.data.kind = "test-unreadable";
  train::Trainer t(c, dir);
  EXPECT_TRUE(fs::is_directory(dir));  // made with the run, to fail early if it cannot be
  const train::TrainResult r = t.run();
  EXPECT_EQ(r.outcome, train::RunOutcome::kFailed);
  EXPECT_NE(r.message.find("[test] batch 0 is unreadable"), std::string::npos) << r.message;
  EXPECT_FALSE(fs::exists(dir));
  fs::remove_all(dir.parent_path());
}

TEST(TrainerFailure, AModelVocabularySmallerThanTheTokenFilesNamesDataVocab) {
  const std::string message = tb::test::error_of([] {
    (void)train::parse_run_config(
        "[model]\nkind = \"gpt\"\nvocab = 76\ncontext_length = 64\nn_layers = 1\nn_heads = 2\n"
        "d_model = 32\n[data]\nkind = \"tokens\"\npath = \"x.bin\"\ncontext_length = 64\n");
  });
  EXPECT_NE(message.find("model.vocab: expected at least 50257 for data.kind = \"tokens\" "
                         "(data.vocab = 50257, the ids the token files may hold (GPT-2's by "
                         "default); set it to your vocabulary's size), found 76"),
            std::string::npos)
      << message;
}

}  // namespace
