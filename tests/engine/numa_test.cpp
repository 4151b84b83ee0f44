// Tests of engine/numa: CPU sets, topology sources (explicit lists, hwloc synthetic and XML,
// this machine), the binding strategies on a reference machine (CPU sets worked out by hand
// from PyTorch's torch/numa/binding.py), errors and fallback, scoped affinity, memory policy and
// the page-placement report.
#include <gtest/gtest.h>

#include <sys/mman.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "engine/api/topology_api.h"
#include "engine/core/error.h"
#include "engine/numa/affinity.h"
#include "engine/numa/binding.h"
#include "engine/numa/cpu_set.h"
#include "engine/numa/memory.h"
#include "engine/numa/topology.h"
#include "engine/numa/topology_hwloc.h"

namespace tb::numa {
namespace {

// Returns the message of the tb::Error `fn` throws (fails the test when it does not throw).
template <typename Fn>
std::string error_message(Fn&& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected a tb::Error";
  return "";
}

std::vector<GpuAffinity> spec_gpus() {
  return {{0, 0, ""}, {1, 0, ""}, {2, 0, ""}, {3, 1, ""}};
}

// The reference machine, from explicit lists: node 0 = CPUs 0-7,16-23, node 1 = 8-15,24-31,
// siblings (i, i+16), L3 groups of four cores, GPUs 0,1,2 on node 0 and GPU 3 on node 1. It has
// no sockets of its own; here each node is its own package.
Topology spec_topology() {
  TopologyDesc d;
  d.source = "reference machine";
  d.packages = {{0, CpuSet::parse("0-7,16-23")}, {1, CpuSet::parse("8-15,24-31")}};
  d.nodes = {{0, CpuSet::parse("0-7,16-23"), 0}, {1, CpuSet::parse("8-15,24-31"), 0}};
  for (int i = 0; i < 16; ++i)
    d.cores.push_back({CpuSet{i, i + 16}});
  for (const char* g : {"0-3,16-19", "4-7,20-23", "8-11,24-27", "12-15,28-31"}) {
    d.cache_groups.push_back({3, CpuSet::parse(g)});
  }
  d.gpus = spec_gpus();
  return Topology(std::move(d));
}

// The same machine as an hwloc synthetic description with explicit PU numbers.
constexpr const char* kSpecSynthetic =
    "pack:2 numa:1 l3:2 core:4 pu:2(indexes=0,16,1,17,2,18,3,19,4,20,5,21,6,22,7,23,8,24,9,25,"
    "10,26,11,27,12,28,13,29,14,30,15,31)";

std::string cpus(const Topology& t, BindingMode m, int gpu) {
  return gpu_cpus(t, m, gpu).to_string();
}

// ---------------------------------------------------------------------------------- CpuSet

TEST(NumaCpuSet, ParsesAndPrintsCompactRanges) {
  EXPECT_EQ(CpuSet::parse("0-2,4,6-7").cpus(), (std::vector<int>{0, 1, 2, 4, 6, 7}));
  EXPECT_EQ(CpuSet::parse("0-2,4,6-7\n").to_string(), "0-2,4,6-7");
  EXPECT_EQ((CpuSet{18, 0, 16, 2, 1, 17, 1}).to_string(), "0-2,16-18");
  EXPECT_EQ(CpuSet::parse("").to_string(), "");
  EXPECT_EQ(CpuSet{5}.to_string(), "5");
  EXPECT_EQ((CpuSet::parse("0-7") & CpuSet::parse("4-9")).to_string(), "4-7");
  EXPECT_EQ((CpuSet::parse("0-3") - CpuSet{3}).to_string(), "0-2");
}

TEST(NumaCpuSet, RejectsMalformedLists) {
  EXPECT_NE(error_message([] { CpuSet::parse("0-x"); }).find("[numa] malformed CPU list '0-x'"),
            std::string::npos);
  EXPECT_NE(error_message([] { CpuSet::parse("5-2"); }).find("runs backwards"), std::string::npos);
  EXPECT_NE(error_message([] { CpuSet::parse("1,,2"); }).find("empty element"), std::string::npos);
  EXPECT_THROW(CpuSet::parse("-1"), ValueError);
  // A huge index is refused before a range up to it is expanded (it took gigabytes).
  EXPECT_NE(error_message([] {
              CpuSet::parse("0-2147483647");
            }).find("CPU 2147483647 is beyond the largest CPU number accepted (65535)"),
            std::string::npos);
  EXPECT_EQ(CpuSet::parse("65535").to_string(), "65535");
}

// --------------------------------------------------------------------------------- Topology

TEST(NumaTopology, SyntheticSpecTopologyMatchesExplicitLists) {
  const Topology a = spec_topology();
  const Topology b = load_synthetic_topology(kSpecSynthetic);
  EXPECT_EQ(b.cpus().to_string(), "0-31");
  ASSERT_EQ(b.nodes().size(), 2U);
  EXPECT_EQ(b.nodes()[0].cpus.to_string(), "0-7,16-23");
  EXPECT_EQ(b.nodes()[1].cpus.to_string(), "8-15,24-31");
  ASSERT_EQ(b.cores().size(), a.cores().size());
  for (std::size_t i = 0; i < a.cores().size(); ++i)
    EXPECT_EQ(b.cores()[i].cpus, a.cores()[i].cpus);
  ASSERT_EQ(b.cache_groups().size(), 4U);
  for (std::size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(b.cache_groups()[i].cpus, a.cache_groups()[i].cpus);
    EXPECT_EQ(b.cache_groups()[i].level, 3);
  }
  ASSERT_EQ(b.packages().size(), 2U);
  EXPECT_EQ(b.packages()[1].cpus.to_string(), "8-15,24-31");
  EXPECT_EQ(b.allowed_cpus().to_string(), "0-31");
  EXPECT_EQ(b.core_of(19).cpus.to_string(), "3,19");
  EXPECT_EQ(b.node_of(24), 1);
}

TEST(NumaTopology, SyntheticMultiSocketDescription) {
  // 2 packages x 2 nodes x 2 L3 groups x 4 cores x 2 threads = 64 CPUs.
  const Topology t = load_synthetic_topology("pack:2 numa:2 l3:2 core:4 pu:2");
  EXPECT_EQ(t.packages().size(), 2U);
  EXPECT_EQ(t.nodes().size(), 4U);
  EXPECT_EQ(t.cache_groups().size(), 8U);
  EXPECT_EQ(t.cores().size(), 32U);
  EXPECT_EQ(t.cpus().size(), 64U);
  EXPECT_EQ(t.nodes()[1].cpus.to_string(), "16-31");
  EXPECT_EQ(t.core_of(5).cpus.to_string(), "4-5");
}

TEST(NumaTopology, XmlFileKeepsDisallowedCpus) {
  const Topology t =
      load_topology_xml(std::string(TB_TEST_DATA_DIR) + "/numa/spec_11_6_cpus_3_19_disallowed.xml");
  EXPECT_EQ(t.cpus().to_string(), "0-31");
  EXPECT_EQ(t.allowed_cpus().to_string(), "0-2,4-18,20-31");
  EXPECT_EQ(t.nodes()[0].cpus.to_string(), "0-7,16-23");
  EXPECT_EQ(t.cache_groups().size(), 4U);
}

TEST(NumaTopology, SourceErrorsNameTheInput) {
  EXPECT_NE(error_message([] {
              load_synthetic_topology("pack:two");
            }).find("[numa] invalid synthetic topology 'pack:two'"),
            std::string::npos);
  EXPECT_NE(error_message([] {
              load_topology_xml("/nonexistent/topo.xml");
            }).find("'/nonexistent/topo.xml'"),
            std::string::npos);
}

TEST(NumaTopology, ValidationRejectsOverlappingCores) {
  TopologyDesc d;
  d.source = "bad";
  d.packages = {{0, CpuSet::parse("0-3")}};
  d.cores = {{CpuSet{0, 1}}, {CpuSet{1, 2}}, {CpuSet{3}}};
  EXPECT_NE(error_message([&] { Topology t(d); }).find("CPU 1 is in two cores"), std::string::npos);
  d.cores = {{CpuSet{0, 1}}, {CpuSet{2, 3}}};
  d.allowed = CpuSet{7};
  EXPECT_NE(error_message([&] { Topology t(d); }).find("allowed CPUs 7"), std::string::npos);
}

TEST(NumaTopology, RealMachineLoads) {
  const Topology t = load_machine_topology();
  EXPECT_GE(t.cpus().size(), 1U);
  EXPECT_GE(t.cores().size(), 1U);
  EXPECT_GE(t.packages().size(), 1U);
  EXPECT_FALSE(t.allowed_cpus().empty());
  EXPECT_TRUE((t.allowed_cpus() - t.cpus()).empty());
  EXPECT_TRUE((t.allowed_cpus() - current_thread_affinity()).empty());
  // Every CPU this thread may run on has a core and a package.
  for (int c : t.allowed_cpus()) {
    EXPECT_NO_THROW(t.core_of(c));
    EXPECT_NO_THROW(t.package_of(c));
  }
}

TEST(NumaTopology, GpuNodesFromPciSysfs) {
  const auto root =
      std::filesystem::temp_directory_path() / ("tb_numa_sysfs_" + std::to_string(::getpid()));
  const std::vector<std::pair<std::string, std::string>> devices = {{"0000:3b:00.0", "-1\n"},
                                                                    {"0000:af:00.0", "1\n"}};
  for (const auto& [addr, node] : devices) {
    std::filesystem::create_directories(root / "bus/pci/devices" / addr);
    std::ofstream(root / "bus/pci/devices" / addr / "numa_node") << node;
  }
  EXPECT_EQ(format_pci_address(0, 0x3b, 0), "0000:3b:00.0");
  const auto gpus = gpu_affinity_from_pci({"0000:3b:00.0", "0000:af:00.0"}, root.string());
  ASSERT_EQ(gpus.size(), 2U);
  EXPECT_EQ(gpus[0].numa_node, 0);  // -1 (single node) maps to 0
  EXPECT_EQ(gpus[1].numa_node, 1);
  EXPECT_EQ(gpus[1].gpu_index, 1);
  EXPECT_NE(error_message([&] {
              gpu_affinity_from_pci({"0000:00:01.0"}, root.string());
            }).find("GPU 0 (PCI address 0000:00:01.0)"),
            std::string::npos);
  std::filesystem::remove_all(root);
}

// -------------------------------------------------------- Binding: the reference machine

class NumaBindingSpec : public ::testing::TestWithParam<const char*> {
 protected:
  Topology topo() const {
    return std::string(GetParam()) == "explicit"
               ? spec_topology()
               : load_synthetic_topology(kSpecSynthetic).with_gpus(spec_gpus());
  }
};

TEST_P(NumaBindingSpec, NodeMode) {
  EXPECT_EQ(cpus(topo(), BindingMode::kNode, 0), "0-7,16-23");
  EXPECT_EQ(cpus(topo(), BindingMode::kNode, 3), "8-15,24-31");
}

TEST_P(NumaBindingSpec, ExclusiveMode) {
  const Topology t = topo();
  EXPECT_EQ(cpus(t, BindingMode::kExclusive, 0), "0-2,16-18");
  EXPECT_EQ(cpus(t, BindingMode::kExclusive, 1), "3-5,19-21");
  EXPECT_EQ(cpus(t, BindingMode::kExclusive, 2), "6-7,22-23");
  EXPECT_EQ(cpus(t, BindingMode::kExclusive, 3), "8-15,24-31");
}

TEST_P(NumaBindingSpec, CoreComplexModeWrapsAround) {
  const Topology t = topo();
  EXPECT_EQ(cpus(t, BindingMode::kCoreComplex, 0), "0-3,16-19");
  EXPECT_EQ(cpus(t, BindingMode::kCoreComplex, 1), "4-7,20-23");
  EXPECT_EQ(cpus(t, BindingMode::kCoreComplex, 2), "0-3,16-19");  // 3 GPUs, 2 complexes
  EXPECT_EQ(cpus(t, BindingMode::kCoreComplex, 3), "8-11,24-27");
}

TEST_P(NumaBindingSpec, CoreComplexWithCpus3And19Disallowed) {
  const Topology t = topo().with_allowed(CpuSet::parse("0-31") - CpuSet{3, 19});
  EXPECT_EQ(cpus(t, BindingMode::kCoreComplex, 0), "4-7,20-23");  // the 8-CPU group sorts first
  EXPECT_EQ(cpus(t, BindingMode::kCoreComplex, 1), "0-2,16-18");
  EXPECT_EQ(cpus(t, BindingMode::kCoreComplex, 2), "4-7,20-23");
  EXPECT_EQ(cpus(t, BindingMode::kNode, 0), "0-2,4-7,16-18,20-23");
  // Exclusive: core 3 has no allowed CPU, so node 0 has 7 cores for 3 GPUs (3, 2, 2).
  EXPECT_EQ(cpus(t, BindingMode::kExclusive, 0), "0-2,16-18");
  EXPECT_EQ(cpus(t, BindingMode::kExclusive, 1), "4-5,20-21");
  EXPECT_EQ(cpus(t, BindingMode::kExclusive, 2), "6-7,22-23");
}

TEST_P(NumaBindingSpec, SocketMode) {
  EXPECT_EQ(cpus(topo(), BindingMode::kSocket, 1), "0-7,16-23");
  EXPECT_EQ(cpus(topo(), BindingMode::kSocket, 3), "8-15,24-31");
}

TEST_P(NumaBindingSpec, NumactlLineForGpu1Exclusive) {
  const CpuSet c = gpu_cpus(topo(), BindingMode::kExclusive, 1);
  EXPECT_EQ(numactl_command_line(c, {"<cmd...>"}), "numactl --physcpubind=3-5,19-21 <cmd...>");
  EXPECT_EQ(numactl_args(c, {"python", "train.py"}),
            (std::vector<std::string>{"numactl", "--physcpubind=3-5,19-21", "python", "train.py"}));
  EXPECT_EQ(numactl_command_line(c, {"echo", "a b"}), "numactl --physcpubind=3-5,19-21 echo 'a b'");
}

INSTANTIATE_TEST_SUITE_P(Sources, NumaBindingSpec, ::testing::Values("explicit", "synthetic"));

TEST(NumaBinding, XmlWithCpus3And19DisallowedGivesTheSpecVector) {
  const Topology t =
      load_topology_xml(std::string(TB_TEST_DATA_DIR) + "/numa/spec_11_6_cpus_3_19_disallowed.xml")
          .with_gpus(spec_gpus());
  EXPECT_EQ(cpus(t, BindingMode::kCoreComplex, 0), "4-7,20-23");
  EXPECT_EQ(cpus(t, BindingMode::kCoreComplex, 1), "0-2,16-18");
  EXPECT_EQ(cpus(t, BindingMode::kCoreComplex, 2), "4-7,20-23");
}

// ------------------------------------------------------------------ Binding: more cases

TEST(NumaBinding, ExclusiveRemainderGoesToTheLowestSlots) {
  // One node, 7 single-thread cores, 3 worker slots: per 2, extra 1 -> 3, 2, 2 cores.
  const Topology t = load_synthetic_topology("pack:1 numa:1 core:7 pu:1");
  const auto plan = plan_slots(t, {BindingMode::kExclusive, false}, SlotKind::kCpuWorker, 3);
  ASSERT_EQ(plan.size(), 3U);
  EXPECT_EQ(plan[0].cpus.to_string(), "0-2");
  EXPECT_EQ(plan[1].cpus.to_string(), "3-4");
  EXPECT_EQ(plan[2].cpus.to_string(), "5-6");
  // 8 cores, 5 slots: per 1, extra 3 -> 2, 2, 2, 1, 1 cores (with both hyper-threads).
  const Topology t2 = load_synthetic_topology("pack:1 numa:1 core:8 pu:2");
  const auto p2 = plan_slots(t2, {BindingMode::kExclusive, false}, SlotKind::kCpuWorker, 5);
  const std::vector<std::string> want = {"0-3", "4-7", "8-11", "12-13", "14-15"};
  for (std::size_t i = 0; i < want.size(); ++i)
    EXPECT_EQ(p2[i].cpus.to_string(), want[i]);
}

TEST(NumaBinding, CpuWorkerSlotsGoRoundRobinOverNodes) {
  const Topology t = load_synthetic_topology("pack:2 numa:2 l3:2 core:4 pu:2");
  const SlotPlacement p5 = place_slot(t, SlotKind::kCpuWorker, 5, 6);
  EXPECT_EQ(p5.node, 1);
  EXPECT_EQ(p5.relative_index, 1);
  EXPECT_EQ(p5.slots_on_node, 2);
  const SlotPlacement p3 = place_slot(t, SlotKind::kCpuWorker, 3, 6);
  EXPECT_EQ(p3.node, 3);
  EXPECT_EQ(p3.slots_on_node, 1);
  const auto plan = plan_slots(t, {BindingMode::kExclusive, false}, SlotKind::kCpuWorker, 6);
  EXPECT_EQ(plan[0].cpus.to_string(), "0-7");    // node 0, first of two slots
  EXPECT_EQ(plan[4].cpus.to_string(), "8-15");   // node 0, second
  EXPECT_EQ(plan[3].cpus.to_string(), "48-63");  // node 3 alone
  // Socket mode: the union of the nodes of the slot's package.
  EXPECT_EQ(
      bind_slot(t, {BindingMode::kSocket, false}, SlotKind::kCpuWorker, 1, 4).cpus.to_string(),
      "0-31");
  EXPECT_EQ(
      bind_slot(t, {BindingMode::kSocket, false}, SlotKind::kCpuWorker, 2, 4).cpus.to_string(),
      "32-63");
  // Core-complex: slot 4 is the second slot on node 0 -> its second L3 group.
  EXPECT_EQ(plan_slots(t, {BindingMode::kCoreComplex, false}, SlotKind::kCpuWorker, 6)[4]
                .cpus.to_string(),
            "8-15");
  // Nodes without allowed CPUs take no slots.
  const Topology half = t.with_allowed(CpuSet::parse("0-15,32-47"));
  EXPECT_EQ(place_slot(half, SlotKind::kCpuWorker, 1, 2).node, 2);
}

TEST(NumaBinding, NoneLeavesSlotsUnbound) {
  const auto plan = plan_slots(spec_topology(), {}, SlotKind::kGpu, 4);
  for (const auto& b : plan) {
    EXPECT_FALSE(b.bound);
    EXPECT_TRUE(b.cpus.empty());
    EXPECT_TRUE(b.warning.empty());
  }
}

TEST(NumaBinding, ErrorsAndFallback) {
  // More GPUs on a node than physical cores.
  std::vector<GpuAffinity> many;
  for (int i = 0; i < 9; ++i)
    many.push_back({i, 0, ""});
  const Topology crowded = spec_topology().with_gpus(many);
  const std::string msg = error_message([&] { gpu_cpus(crowded, BindingMode::kExclusive, 0); });
  EXPECT_NE(msg.find("[binding] there are only 8 physical cores on numa_node_index=0, but there "
                     "are 9 GPUs associated with this NUMA node"),
            std::string::npos)
      << msg;
  const SlotBinding fb = bind_slot(crowded, {BindingMode::kExclusive, true}, SlotKind::kGpu, 0, 9);
  EXPECT_FALSE(fb.bound);
  EXPECT_TRUE(fb.cpus.empty());
  EXPECT_NE(fb.warning.find("only 8 physical cores"), std::string::npos);
  EXPECT_NE(fb.warning.find("runs unbound"), std::string::npos);
  const std::string workers = error_message([] {
    plan_slots(load_synthetic_topology("pack:1 numa:1 core:2 pu:1"),
               {BindingMode::kExclusive, false}, SlotKind::kCpuWorker, 3);
  });
  EXPECT_NE(
      workers.find("only 2 physical cores on numa_node_index=0, but there are 3 worker slots"),
      std::string::npos);

  // A node without allowed CPUs.
  const Topology no_node1 = spec_topology().with_allowed(CpuSet::parse("0-7,16-23"));
  for (auto m : {BindingMode::kNode, BindingMode::kSocket, BindingMode::kExclusive,
                 BindingMode::kCoreComplex}) {
    EXPECT_NE(error_message([&] {
                gpu_cpus(no_node1, m, 3);
              }).find("[binding] NUMA node 1 has no CPUs this process may use"),
              std::string::npos);
  }
  EXPECT_TRUE(bind_slot(no_node1, {BindingMode::kNode, true}, SlotKind::kGpu, 3, 4)
                  .warning.find("NUMA node 1") != std::string::npos);
  // A GPU on a node the topology does not have, a slot with no GPU.
  const Topology bad_gpu = spec_topology().with_gpus({{0, 5, ""}});
  EXPECT_NE(error_message([&] {
              gpu_cpus(bad_gpu, BindingMode::kNode, 0);
            }).find("could not determine CPUs corresponding to numa_node_index=5"),
            std::string::npos);
  EXPECT_NE(error_message([] {
              gpu_cpus(spec_topology(), BindingMode::kNode, 4);
            }).find("slot 4 is GPU local rank 4, but the topology lists GPUs '0-3'"),
            std::string::npos);
  // The empty set, and bad inputs.
  EXPECT_NE(error_message([] {
              numactl_args(CpuSet{}, {"x"});
            }).find("[binding] must bind to a non-empty set of CPU indices"),
            std::string::npos);
  EXPECT_NE(error_message([] {
              set_current_thread_affinity(CpuSet{});
            }).find("must bind to a non-empty set"),
            std::string::npos);
  EXPECT_NE(error_message([] { parse_binding_mode("numa"); })
                .find("[binding] unknown binding mode 'numa'; expected none, node, socket, "
                      "exclusive or core-complex"),
            std::string::npos);
  EXPECT_THROW(plan_slots(spec_topology(), {}, SlotKind::kCpuWorker, 0), ValueError);
  EXPECT_EQ(parse_binding_mode("core-complex"), BindingMode::kCoreComplex);
  EXPECT_EQ(binding_mode_name(BindingMode::kExclusive), "exclusive");
}

TEST(NumaBinding, NodesOfCpus) {
  EXPECT_EQ(nodes_of_cpus(spec_topology(), CpuSet::parse("3-5,19-21")), (std::vector<int>{0}));
  EXPECT_EQ(nodes_of_cpus(spec_topology(), CpuSet{0, 31}), (std::vector<int>{0, 1}));
}

TEST(NumaBinding, RealMachineExclusivePlan) {
  const Topology t = load_machine_topology();
  const auto plan = plan_slots(t, {BindingMode::kExclusive, true}, SlotKind::kCpuWorker, 1);
  ASSERT_EQ(plan.size(), 1U);
  EXPECT_TRUE(plan[0].bound) << plan[0].warning;
  EXPECT_TRUE((plan[0].cpus - t.allowed_cpus()).empty());
}

// ----------------------------------------------------------------------- scoped affinity

TEST(NumaAffinity, ScopedAffinityRestoresAfterSuccessAndException) {
  const CpuSet original = current_thread_affinity();
  ASSERT_FALSE(original.empty());
  const CpuSet one{original.min()};
  {
    ScopedAffinity scope(one);
    EXPECT_EQ(current_thread_affinity(), one);
    EXPECT_EQ(scope.saved(), original);
    CpuSet child;  // a thread started inside the scope inherits the mask
    std::thread th([&] { child = current_thread_affinity(); });
    th.join();
    EXPECT_EQ(child, one);
  }
  EXPECT_EQ(current_thread_affinity(), original);
  EXPECT_THROW(
      {
        ScopedAffinity scope(one);
        EXPECT_EQ(current_thread_affinity(), one);
        throw std::runtime_error("spawn failed");
      },
      std::runtime_error);
  EXPECT_EQ(current_thread_affinity(), original);
}

TEST(NumaAffinity, ImpossibleMaskThrowsAndChangesNothing) {
  const CpuSet original = current_thread_affinity();
  EXPECT_NE(error_message([] {
              ScopedAffinity scope(CpuSet{100000});
            }).find("[binding] cannot set the thread's CPU affinity to '100000'"),
            std::string::npos);
  EXPECT_EQ(current_thread_affinity(), original);
}

// ---------------------------------------------------------------- memory policy, placement

TEST(NumaMemory, PlacementReportOnARealBuffer) {
  if (!numa_supported()) GTEST_SKIP() << "NUMA memory policies are not available here";
  const Topology t = load_machine_topology();
  const int node = t.nodes().empty() ? 0 : t.nodes()[0].os_index;
  const std::size_t page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
  constexpr std::size_t kPages = 64;
  void* mem =
      ::mmap(nullptr, kPages * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(mem, MAP_FAILED);
  auto* bytes = static_cast<unsigned char*>(mem);

  PagePlacement before = page_placement(bytes, kPages * page);
  EXPECT_EQ(before.pages, kPages);
  EXPECT_EQ(before.not_present, kPages);  // never touched
  EXPECT_TRUE(before.nodes.empty());
  {
    ScopedMemoryPolicy policy({node}, MemoryPolicy::kPreferred);
    std::memset(bytes, 1, kPages * page / 2);  // touch the first half
  }
  const PagePlacement after = page_placement(bytes, kPages * page);
  EXPECT_EQ(after.page_size, page);
  EXPECT_EQ(after.not_present, kPages / 2);
  ASSERT_EQ(after.nodes.size(), 1U);
  EXPECT_EQ(after.nodes[0].node, node);
  EXPECT_EQ(after.nodes[0].pages, kPages / 2);
  EXPECT_DOUBLE_EQ(after.nodes[0].share, 0.5);
  // An unaligned sub-range spans the pages it touches.
  EXPECT_EQ(page_placement(bytes + 10, page).pages, 2U);
  EXPECT_EQ(page_placement(bytes, 0).pages, 0U);
  ::munmap(mem, kPages * page);
}

TEST(NumaMemory, PolicyErrors) {
  if (!numa_supported()) GTEST_SKIP() << "NUMA memory policies are not available here";
  EXPECT_NE(error_message([] {
              set_thread_memory_policy({}, MemoryPolicy::kBind);
            }).find("[numa] a memory policy needs at least one NUMA node"),
            std::string::npos);
  EXPECT_NE(error_message([] {
              set_thread_memory_policy({1 << 20}, MemoryPolicy::kBind);
            }).find("[numa] NUMA node 1048576 is out of range"),
            std::string::npos);
  {
    ScopedMemoryPolicy policy({0}, MemoryPolicy::kBind);
    std::vector<double> v(1 << 16, 1.0);
    const auto r = page_placement(v.data(), v.size() * sizeof(double));
    ASSERT_FALSE(r.nodes.empty());
    EXPECT_EQ(r.nodes[0].node, 0);
  }
  reset_thread_memory_policy();
}

// ------------------------------------------------------------------------------- facade

TEST(NumaTopologyApi, PlanForSpecTopologyWithGpus) {
  api::TopologyRequest req;
  req.synthetic = kSpecSynthetic;
  req.gpu_nodes = {0, 0, 0, 1};
  const auto info = api::describe_topology(req);
  EXPECT_EQ(info.n_cpus, 32);
  EXPECT_EQ(info.nodes.size(), 2U);
  EXPECT_EQ(info.gpus.size(), 4U);
  const auto plan = api::plan_binding(req, "exclusive", 0, false);
  EXPECT_EQ(plan.slot_kind, "gpu");
  ASSERT_EQ(plan.slots.size(), 4U);
  EXPECT_EQ(plan.slots[1].cpus, "3-5,19-21");
  EXPECT_EQ(plan.slots[1].numactl, "numactl --physcpubind=3-5,19-21 <cmd...>");
  EXPECT_EQ(plan.slots[3].node, 1);
  req.xml_path = "x.xml";
  EXPECT_THROW(api::describe_topology(req), ValueError);
}

}  // namespace
}  // namespace tb::numa
