// engine/dist without a launcher: the single-process group, the launch environment, the
// termination flag and the errors of bad requests. The MPI group's collectives run under mpirun
// in tests/engine/dist_mpi_test.cpp.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "engine/dist/process_group.h"
#include "engine/nn/layers.h"
#include "engine/ops/ops.h"
#include "engine/optim/muon.h"
#include "engine/rng/cpu_generator.h"

namespace {

using tb::core::ScalarType;
using tb::core::Tensor;
namespace dist = tb::dist;

// Sets environment variables for a test's scope and removes them afterwards.
class EnvGuard {
 public:
  EnvGuard(std::initializer_list<std::pair<const char*, const char*>> vars) {
    for (const auto& [k, v] : vars) {
      names_.emplace_back(k);
      setenv(k, v, 1);
    }
  }
  ~EnvGuard() {
    for (const auto& n : names_)
      unsetenv(n.c_str());
  }

 private:
  std::vector<std::string> names_;
};

TEST(Dist, SingleGroupCollectivesAreIdentities) {
  auto g = dist::make_process_group({"single", 10});
  EXPECT_STREQ(g->backend(), "single");
  EXPECT_EQ(g->rank(), 0);
  EXPECT_EQ(g->size(), 1);
  ASSERT_EQ(g->peers().size(), 1u);
  Tensor t = Tensor::empty({3}, ScalarType::Float32);
  for (int i = 0; i < 3; ++i)
    t.data_ptr<float>()[i] = static_cast<float>(i) + 0.5f;
  g->all_reduce(t, dist::ReduceOp::kAvg, "x");
  EXPECT_EQ(t.data_ptr<float>()[2], 2.5f);
  const Tensor all = g->all_gather(t);
  ASSERT_EQ(all.dim(), 2);
  EXPECT_EQ(all.size(0), 1);
  EXPECT_EQ(all.data_ptr<float>()[1], 1.5f);
  EXPECT_EQ(g->all_gather_strings("hello"), std::vector<std::string>{"hello"});
  EXPECT_EQ(g->broadcast_string("abc", 0), "abc");
  EXPECT_EQ(g->sequence(), 1 + 1 + 2 + 2);  // all_reduce, all_gather, 2 + 2 for the strings
}

TEST(Dist, BadRequestsNameTheProblem) {
  auto g = dist::make_process_group({"single", 10});
  Tensor h = Tensor::empty({2}, ScalarType::Float16);
  try {
    g->all_reduce(h, dist::ReduceOp::kSum);
    FAIL() << "float16 reduce accepted";
  } catch (const tb::ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("cannot reduce float16"), std::string::npos) << e.what();
  }
  Tensor i = Tensor::empty({2}, ScalarType::Int64);
  EXPECT_THROW(g->all_reduce(i, dist::ReduceOp::kAvg), tb::ValueError);
  Tensor t = Tensor::empty({2}, ScalarType::Float32);
  EXPECT_THROW(g->broadcast(t, 1), tb::ValueError);
  EXPECT_THROW(g->set_timeout(0), tb::ValueError);
  try {
    (void)dist::make_process_group({"gloo", 10});
    FAIL() << "unknown backend accepted";
  } catch (const tb::ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("unknown backend 'gloo'"), std::string::npos);
  }
}

TEST(Dist, TerminationFailsTheNextCollectiveAndBreaksTheGroup) {
  auto g = dist::make_process_group({"single", 10});
  g->set_context("step 7");
  dist::notify_termination(15);
  Tensor t = Tensor::empty({1}, ScalarType::Float32);
  try {
    g->all_reduce(t, dist::ReduceOp::kSum, "gradients");
    dist::notify_termination(0);
    FAIL() << "no error";
  } catch (const dist::DistError& e) {
    dist::notify_termination(0);
    EXPECT_EQ(std::string(e.what()),
              "[dist] all_reduce #1 (gradients, step 7): stopped by signal 15");
  }
  EXPECT_TRUE(g->broken());
  EXPECT_THROW(g->barrier(), dist::DistError);
}

TEST(Dist, LaunchEnvironment) {
  {
    const auto e = dist::detect_launch_env();
    EXPECT_EQ(e.launcher, "");
    EXPECT_EQ(e.size, 1);
  }
  {
    EnvGuard env({{"OMPI_COMM_WORLD_SIZE", "4"},
                  {"OMPI_COMM_WORLD_RANK", "3"},
                  {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
                  {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"}});
    const auto e = dist::detect_launch_env();
    EXPECT_EQ(e.launcher, "mpirun");
    EXPECT_EQ(e.rank, 3);
    EXPECT_EQ(e.size, 4);
    EXPECT_EQ(e.local_rank, 1);
    EXPECT_EQ(e.local_size, 2);
  }
  {
    EnvGuard env({{"WORLD_SIZE", "2"}, {"RANK", "1"}, {"LOCAL_RANK", "1"}});
    const auto e = dist::detect_launch_env();
    EXPECT_EQ(e.launcher, "torchrun");
    EXPECT_EQ(e.rank, 1);
    EXPECT_EQ(e.local_size, 2);
  }
  {
    EnvGuard env({{"WORLD_SIZE", "two"}});
    try {
      (void)dist::detect_launch_env();
      FAIL() << "malformed WORLD_SIZE accepted";
    } catch (const tb::ValueError& e) {
      EXPECT_NE(std::string(e.what()).find("WORLD_SIZE='two'"), std::string::npos) << e.what();
    }
  }
  {
    EnvGuard env({{"WORLD_SIZE", "2"}, {"RANK", "2"}});
    EXPECT_THROW((void)dist::detect_launch_env(), tb::ValueError);
  }
}

// Dropout under a batch shard draws the global batch's mask and keeps its rows: rank r's mask
// equals rows [offset, offset + rows) of the one-process mask.
TEST(Dist, DropoutMaskOfAShardIsTheGlobalMasksRows) {
  tb::rng::CpuGenerator g1(5);
  tb::rng::CpuGenerator g2(5);
  tb::nn::Dropout whole(0.5, &g1);
  tb::nn::Dropout part(0.5, &g2);
  const Tensor x = tb::ops::ones({6, 4});
  const auto full = whole.forward(x).to_vector<float>();
  tb::nn::BatchShard shard{2, 3, 6};
  std::vector<float> mine;
  {
    tb::nn::ScopedBatchShard scope(shard);
    mine = part.forward(tb::ops::ones({3, 4})).to_vector<float>();
  }
  ASSERT_EQ(mine.size(), 12u);
  for (std::size_t i = 0; i < mine.size(); ++i)
    EXPECT_EQ(mine[i], full[8 + i]) << i;
  EXPECT_EQ(tb::nn::current_batch_shard(), nullptr);
}

// Distributed Muon's owners: by decreasing Newton-Schulz cost, each to the least-loaded rank.
TEST(Dist, MuonOwnersBalanceNewtonSchulzCost) {
  const std::vector<Tensor> params = {tb::ops::zeros({32, 32}), tb::ops::zeros({64, 64}),
                                      tb::ops::zeros({32, 32}), tb::ops::zeros({16, 16})};
  EXPECT_EQ(tb::optim::assign_muon_owners(params, 2), (std::vector<int>{1, 0, 1, 1}));
  EXPECT_EQ(tb::optim::assign_muon_owners(params, 1), (std::vector<int>{0, 0, 0, 0}));
  EXPECT_EQ(tb::optim::assign_muon_owners(params, 4), (std::vector<int>{1, 0, 2, 3}));
}

}  // namespace
