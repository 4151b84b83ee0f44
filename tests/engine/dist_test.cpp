// engine/dist without a launcher: the single-process group, the launch environment, the
// termination flag and the errors of bad requests. The MPI group's collectives run under mpirun
// in tests/engine/dist_mpi_test.cpp.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "engine/dist/process_group.h"
#include "engine/dist/rendezvous.h"
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
              "[dist] all_reduce #1 (gradients, step 7): this rank was ended by signal 15 "
              "(Terminated)");
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

// ---- the TCP rendezvous of torchrun-style launches (engine/dist/rendezvous.h) ------------------

using RdzvClock = std::chrono::steady_clock;

RdzvClock::time_point in_seconds(double s) {
  return RdzvClock::now() + std::chrono::milliseconds(static_cast<int>(s * 1000));
}

// What a rank thread ended with: its lines, or its error.
struct ClientOutcome {
  std::vector<std::string> lines;
  std::string error;
};

// Starts a client thread that connects as `rank` of `size`, receives `lines` lines and answers
// each with "ack <line>".
std::thread start_client(int port, int rank, int size, int lines, ClientOutcome& out,
                         double deadline_s = 10) {
  return std::thread([=, &out] {
    try {
      dist::RendezvousClient c("127.0.0.1", port, rank, size, in_seconds(deadline_s));
      for (int i = 0; i < lines; ++i) {
        out.lines.push_back(c.receive());
        c.send("ack " + out.lines.back());
      }
    } catch (const std::exception& e) {
      out.error = e.what();
    }
  });
}

// A client per (rank, world size, outcome), each receiving one line, started 100 ms apart: the
// kernel queues their connections and hellos in this order until gather() takes them.
std::vector<std::thread> start_queued(
    int port, std::initializer_list<std::tuple<int, int, ClientOutcome*>> cs) {
  std::vector<std::thread> threads;
  for (const auto& [rank, size, out] : cs) {
    if (!threads.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(100));
    threads.push_back(start_client(port, rank, size, 1, *out));
  }
  return threads;
}

TEST(Rendezvous, RanksExchangeLinesInOrder) {
  dist::RendezvousServer server("127.0.0.1", 0, 3, in_seconds(10));
  ASSERT_GT(server.port(), 0);
  ClientOutcome a;
  ClientOutcome b;
  // Rank 2 first: the server files connections by the rank they announce, not their order.
  std::thread t2 = start_client(server.port(), 2, 3, 2, b);
  std::thread t1 = start_client(server.port(), 1, 3, 2, a);
  server.gather();
  for (int r = 1; r < 3; ++r)
    server.send(r, "uri for " + std::to_string(r));
  EXPECT_EQ(server.receive(2), "ack uri for 2");
  EXPECT_EQ(server.receive(1), "ack uri for 1");
  server.send(1, "port x");
  server.send(2, "port y");
  EXPECT_EQ(server.receive(1), "ack port x");
  EXPECT_EQ(server.receive(2), "ack port y");
  t1.join();
  t2.join();
  EXPECT_EQ(a.error, "");
  EXPECT_EQ(b.error, "");
  EXPECT_EQ(a.lines, (std::vector<std::string>{"uri for 1", "port x"}));
  EXPECT_EQ(b.lines, (std::vector<std::string>{"uri for 2", "port y"}));
}

TEST(Rendezvous, WrongHellosAreRefusedWithTheReason) {
  dist::RendezvousServer server("127.0.0.1", 0, 2, in_seconds(10));
  ClientOutcome wrong_size;
  ClientOutcome out_of_range;
  ClientOutcome good;
  // gather() refuses the first two and still waits for rank 1.
  auto ts =
      start_queued(server.port(), {{1, 3, &wrong_size}, {2, 2, &out_of_range}, {1, 2, &good}});
  server.gather();
  server.send(1, "welcome");
  EXPECT_EQ(server.receive(1), "ack welcome");
  for (auto& t : ts)
    t.join();
  EXPECT_NE(wrong_size.error.find("rank 1 says WORLD_SIZE=3, rank 0 has WORLD_SIZE=2"),
            std::string::npos)
      << wrong_size.error;
  EXPECT_NE(out_of_range.error.find("RANK=2 is not in 1..1"), std::string::npos)
      << out_of_range.error;
  EXPECT_EQ(good.error, "");
  ASSERT_EQ(good.lines.size(), 1u);
}

TEST(Rendezvous, ATakenRankIsRefused) {
  dist::RendezvousServer server("127.0.0.1", 0, 3, in_seconds(10));
  ClientOutcome first;
  ClientOutcome duplicate;
  ClientOutcome two;
  // Rank 1, a second rank 1, rank 2.
  auto ts = start_queued(server.port(), {{1, 3, &first}, {1, 3, &duplicate}, {2, 3, &two}});
  server.gather();
  server.send(1, "a");
  server.send(2, "b");
  EXPECT_EQ(server.receive(1), "ack a");
  EXPECT_EQ(server.receive(2), "ack b");
  for (auto& t : ts)
    t.join();
  EXPECT_EQ(first.error, "");
  EXPECT_EQ(two.error, "");
  EXPECT_NE(duplicate.error.find("RANK=1 is already taken by another process"), std::string::npos)
      << duplicate.error;
}

TEST(Rendezvous, AMissingRankIsNamedAtTheDeadline) {
  dist::RendezvousServer server("127.0.0.1", 0, 3, in_seconds(1));
  ClientOutcome one;
  std::thread t1 = start_client(server.port(), 1, 3, 1, one);
  try {
    server.gather();
    FAIL() << "gather() returned without rank 2";
  } catch (const dist::DistError& e) {
    EXPECT_EQ(e.missing_rank(), 2);
    EXPECT_NE(std::string(e.what()).find("rank 2 of 3 did not connect before the deadline"),
              std::string::npos)
        << e.what();
  }
  // Rank 0 tells the ranks that came why it gave up.
  server.fail_all("rank 0 failed: no rank 2");
  t1.join();
  EXPECT_NE(one.error.find("says: rank 0 failed: no rank 2"), std::string::npos) << one.error;
}

TEST(Rendezvous, NobodyListeningIsAnErrorNamingTheAddress) {
  // A port the kernel just handed out and then closed: nothing listens there.
  int port = 0;
  {
    dist::RendezvousServer probe("127.0.0.1", 0, 1, in_seconds(1));
    port = probe.port();
  }
  try {
    dist::RendezvousClient c("127.0.0.1", port, 1, 2, in_seconds(0.3));
    FAIL() << "connected to a closed port";
  } catch (const dist::DistError& e) {
    EXPECT_NE(std::string(e.what()).find("rank 1 could not reach rank 0 at 127.0.0.1:" +
                                         std::to_string(port)),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW(dist::RendezvousClient("no-such-host.invalid", 29500, 1, 2, in_seconds(1)),
               dist::DistError);
}

TEST(Rendezvous, APortInUseIsNamed) {
  dist::RendezvousServer first("127.0.0.1", 0, 2, in_seconds(1));
  try {
    dist::RendezvousServer second("127.0.0.1", first.port(), 2, in_seconds(1));
    FAIL() << "two servers on one port";
  } catch (const dist::DistError& e) {
    EXPECT_NE(
        std::string(e.what()).find("cannot listen on 127.0.0.1:" + std::to_string(first.port())),
        std::string::npos)
        << e.what();
  }
}

// ---- the NCCL group (CUDA tensors)
// ---------------------------------------------------------------

// Without a GPU (CI), asking for NCCL is a clear error; with one, a communicator of one rank
// runs every collective on the device, and CPU tensors go to its host group.
TEST(DistNccl, WorldSizeOneOnTheGpuOrAClearError) {
  const tb::core::Device cuda(tb::core::DeviceType::CUDA, 0);
  const std::string why = tb::core::device_unavailable_reason(cuda);
  if (!dist::nccl_available() || !why.empty()) {
    try {
      dist::make_process_group({"nccl", 10});
      FAIL() << "an NCCL group without NCCL or a GPU";
    } catch (const tb::ValueError& e) {
      EXPECT_NE(std::string(e.what()).find("[dist] backend 'nccl'"), std::string::npos) << e.what();
    }
    GTEST_SKIP() << (dist::nccl_available() ? "no usable CUDA device: " + why
                                            : std::string("built without NCCL"));
  }
  auto g = dist::make_process_group({"nccl", 30});
  EXPECT_STREQ(g->backend(), "nccl");
  EXPECT_EQ(g->size(), 1);
  EXPECT_EQ(g->device(), cuda);
  const std::vector<float> v = {1.5f, -2.0f, 3.25f, 0.0f};
  for (const dist::ReduceOp op :
       {dist::ReduceOp::kSum, dist::ReduceOp::kAvg, dist::ReduceOp::kMin, dist::ReduceOp::kMax}) {
    Tensor t = tb::core::from_vector(v).to(cuda);
    g->all_reduce(t, op, "values");
    EXPECT_EQ(t.to(tb::core::Device()).to_vector<float>(), v) << dist::reduce_op_name(op);
  }
  Tensor b = tb::core::from_vector(v).to(cuda);
  g->broadcast(b, 0, "values");
  EXPECT_EQ(b.to(tb::core::Device()).to_vector<float>(), v);
  const Tensor all = g->all_gather(tb::core::from_vector(v).to(cuda), "values");
  EXPECT_EQ(all.device(), cuda);
  EXPECT_EQ(all.sizes()[0], 1);
  EXPECT_EQ(all.to(tb::core::Device()).to_vector<float>(), v);
  const Tensor rs = g->reduce_scatter(tb::core::from_vector(v).to(cuda), dist::ReduceOp::kSum);
  EXPECT_EQ(rs.to(tb::core::Device()).to_vector<float>(), v);
  // CPU tensors (pause requests, evaluation sums) go to the host group.
  Tensor host = tb::core::from_vector(v);
  g->all_reduce(host, dist::ReduceOp::kSum, "host values");
  EXPECT_EQ(host.to_vector<float>(), v);
  EXPECT_EQ(g->all_gather_strings("x", "strings"), std::vector<std::string>{"x"});
  g->barrier("end");
  // A CPU group names the device it takes.
  auto single = dist::make_process_group({"single", 10});
  Tensor on_gpu = tb::core::from_vector(v).to(cuda);
  try {
    single->all_reduce(on_gpu, dist::ReduceOp::kSum);
    FAIL() << "the single group took a CUDA tensor";
  } catch (const tb::ValueError& e) {
    EXPECT_NE(
        std::string(e.what()).find("the single group takes tensors on cpu, got one on cuda:0"),
        std::string::npos)
        << e.what();
  }
}

}  // namespace
