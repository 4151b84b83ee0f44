// A helper of the engine suites that run whole trainings (gtest assertions: engine tests only).
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <memory>

#include "engine/train/run_config.h"
#include "engine/train/trainer.h"

namespace tb::test {

/// Runs `config` to its end with a new `Sink` attached and returns the sink; checkpoints go to
/// `checkpoint_dir` (none when empty), and a non-empty `resume` continues from that checkpoint.
/// The run must finish.
template <typename Sink>
std::shared_ptr<Sink> run_recorded(const train::RunConfig& config,
                                   const std::filesystem::path& checkpoint_dir = {},
                                   const std::filesystem::path& resume = {}) {
  train::Trainer trainer(config, checkpoint_dir);
  auto sink = std::make_shared<Sink>();
  trainer.add_sink(sink);
  if (!resume.empty()) trainer.resume_from(resume);
  const train::TrainResult r = trainer.run();
  EXPECT_EQ(r.outcome, train::RunOutcome::kFinished) << r.message;
  return sink;
}

}  // namespace tb::test
