// Facade for CPU topology and NUMA binding plans (trainbench-cli topo, later the GUI's topology
// view): plain structs with CPU lists as text ("0-2,16-18"); no engine/numa types leak.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tb::api {

/// Which topology to read. Empty xml_path and synthetic = this machine.
struct TopologyRequest {
  std::string xml_path;   ///< an hwloc XML export
  std::string synthetic;  ///< an hwloc synthetic description ("pack:2 numa:2 l3:2 core:4 pu:2")
  std::vector<int> gpu_nodes;  ///< NUMA node of GPU 0, 1, ... (empty: no GPUs given)
};

/// A processor package (socket).
struct TopologyPackage {
  int index = 0;     ///< OS index of the package
  std::string cpus;  ///< its logical CPUs
};
/// A NUMA node.
struct TopologyNode {
  int index = 0;                   ///< OS index of the node
  std::string cpus;                ///< all CPUs of the node
  std::string allowed_cpus;        ///< those this process may use
  std::uint64_t memory_bytes = 0;  ///< local memory size
};
/// CPUs sharing a last-level cache (a core complex).
struct TopologyCacheGroup {
  int level = 0;     ///< 3 for an L3
  std::string cpus;  ///< the CPUs sharing it
};
/// A physical core.
struct TopologyCore {
  std::string cpus;  ///< the hyper-thread siblings
  int package = 0;   ///< its package
  int node = -1;     ///< its NUMA node (-1 when unknown)
};
/// A GPU and the NUMA node it is attached to.
struct TopologyGpu {
  int index = 0;  ///< GPU index (local rank)
  int node = 0;   ///< NUMA node
};

/// The whole topology, every list sorted.
struct TopologyInfo {
  std::string source;        ///< "this machine (hwloc 2.9.0)", "xml FILE", "synthetic DESC"
  std::string cpus;          ///< every logical CPU
  std::string allowed_cpus;  ///< CPUs this process may use
  int n_cpus = 0;            ///< number of logical CPUs
  int n_allowed = 0;         ///< number of allowed CPUs
  std::vector<TopologyPackage> packages;         ///< packages (sockets)
  std::vector<TopologyNode> nodes;               ///< NUMA nodes
  std::vector<TopologyCacheGroup> cache_groups;  ///< last-level-cache groups
  std::vector<TopologyCore> cores;               ///< physical cores
  std::vector<TopologyGpu> gpus;                 ///< GPUs given in the request
};

/// Reads the requested topology. Throws tb::ValueError "[numa] ..." when both xml_path and
/// synthetic are set or the source cannot be read.
TopologyInfo describe_topology(const TopologyRequest& request);

/// One slot of a binding plan.
struct SlotPlanRow {
  int slot = 0;         ///< slot number (GPU local rank or CPU worker slot)
  bool bound = false;   ///< whether the slot gets a CPU set
  int node = -1;        ///< -1 when unbound
  std::string cpus;     ///< empty when unbound
  int n_cpus = 0;       ///< number of CPUs in `cpus`
  std::string numactl;  ///< "numactl --physcpubind=... <cmd...>", empty when unbound
  std::string warning;  ///< why a slot is unbound after a failure with fallback on
};

/// The CPU sets a binding mode gives to each slot.
struct BindingPlan {
  std::string mode;                ///< "none", "node", "socket", "exclusive", "core-complex"
  std::string slot_kind;           ///< "gpu" (slots are GPU local ranks) or "cpu-worker"
  std::string slot_rule;           ///< one sentence describing how slots map to NUMA nodes
  std::vector<SlotPlanRow> slots;  ///< one row per slot
};

/// Plans `mode` for `slots` slots: GPU slots when request.gpu_nodes is given, CPU worker slots
/// otherwise; slots <= 0 means one per GPU (or 1 without GPUs). Binding errors throw
/// tb::ValueError "[binding] ..." unless `fallback`, which gives unbound rows with a warning.
BindingPlan plan_binding(const TopologyRequest& request, const std::string& mode, int slots,
                         bool fallback);

}  // namespace tb::api
