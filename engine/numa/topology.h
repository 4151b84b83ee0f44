// Topology: the machine model used for CPU/NUMA binding — packages (sockets), NUMA nodes,
// last-level-cache groups (core complexes), physical cores with their hyper-thread siblings,
// the CPUs this process may use, and which NUMA node each GPU is attached to.
//
// A Topology is built from a TopologyDesc (explicit lists; tests use this for a 2-node machine) or
// by the hwloc loaders in topology_hwloc.h (this machine, an hwloc XML file, or a synthetic
// description). It is immutable and validated on construction.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "engine/numa/cpu_set.h"

namespace tb::numa {

/// One processor package (socket).
struct Package {
  int os_index = 0;  ///< physical_package_id
  CpuSet cpus;       ///< its logical CPUs
};

/// One NUMA node. Memory-only nodes (HBM, CXL, GPU memory) have no CPUs.
struct NumaNode {
  int os_index = 0;                ///< the kernel's node number
  CpuSet cpus;                     ///< the kernel's cpulist for the node (allowed or not)
  std::uint64_t memory_bytes = 0;  ///< local memory, 0 when unknown
};

/// The CPUs sharing one last-level cache (a "core complex"): for each CPU the highest-level
/// data or unified cache (sysfs cache/index*), as torch/numa/binding.py picks it.
struct CacheGroup {
  int level = 0;  ///< cache level (3 for an L3)
  CpuSet cpus;    ///< the CPUs sharing it (allowed or not)
};

/// One physical core; `cpus` are its hyper-thread siblings.
struct Core {
  CpuSet cpus;
};

/// Which NUMA node a GPU is local to. Hook for CUDA: gpu_affinity_from_pci() in
/// topology_hwloc.h turns PCI bus ids into these; until then callers pass them in.
struct GpuAffinity {
  int gpu_index = 0;       ///< the device index (cuda:N); a GPU slot is its local rank
  int numa_node = 0;       ///< NUMA node os index (sysfs -1 is mapped to 0)
  std::string pci_bus_id;  ///< "0000:3b:00.0" when known, else empty
};

/// Everything a Topology is made of, as plain lists (any order).
struct TopologyDesc {
  std::string source;                    ///< where it came from, for messages ("synthetic ...")
  std::vector<Package> packages;         ///< every CPU in exactly one
  std::vector<NumaNode> nodes;           ///< every CPU in at most one
  std::vector<CacheGroup> cache_groups;  ///< every CPU in at most one
  std::vector<Core> cores;               ///< every CPU in exactly one; their union is all CPUs
  std::optional<CpuSet> allowed;         ///< CPUs this process may use; nullopt = all
  std::vector<GpuAffinity> gpus;         ///< GPU -> NUMA node
};

/// A validated, immutable machine model. Lists are sorted: packages and nodes by os index,
/// cores and cache groups by their smallest CPU, GPUs by index.
class Topology {
 public:
  /// Validates and indexes `desc`. Throws tb::ValueError "[numa] invalid topology ..." when a
  /// CPU is in no core or package, in two cores/packages/nodes/cache groups, when an allowed
  /// CPU is not a CPU of the topology, or when an os index or GPU index repeats.
  explicit Topology(TopologyDesc desc);

  const std::string& source() const { return desc_.source; }
  const std::vector<Package>& packages() const { return desc_.packages; }
  const std::vector<NumaNode>& nodes() const { return desc_.nodes; }
  const std::vector<CacheGroup>& cache_groups() const { return desc_.cache_groups; }
  const std::vector<Core>& cores() const { return desc_.cores; }
  const std::vector<GpuAffinity>& gpus() const { return desc_.gpus; }
  /// Every logical CPU.
  const CpuSet& cpus() const { return all_; }
  /// The CPUs this process may use (cgroup cpuset and the thread's affinity mask at load).
  const CpuSet& allowed_cpus() const { return allowed_; }

  /// The node with that os index, or nullptr.
  const NumaNode* find_node(int os_index) const;
  /// The core containing `cpu`. Throws tb::ValueError when `cpu` is not in the topology.
  const Core& core_of(int cpu) const;
  /// The package containing `cpu`. Throws tb::ValueError when `cpu` is not in the topology.
  const Package& package_of(int cpu) const;
  /// The last-level-cache group of `cpu`, or nullptr when the source reported no cache.
  const CacheGroup* cache_group_of(int cpu) const;
  /// The os index of the node of `cpu`, or -1 when no node lists it.
  int node_of(int cpu) const;

  /// A copy whose allowed set is `allowed` (must be a subset of cpus(); throws otherwise).
  Topology with_allowed(CpuSet allowed) const;
  /// A copy with this GPU -> node list instead of the current one.
  Topology with_gpus(std::vector<GpuAffinity> gpus) const;

 private:
  TopologyDesc desc_;
  CpuSet all_;
  CpuSet allowed_;
  // Per CPU (index = CPU number; -1 = none): positions in the sorted lists.
  std::vector<int> core_idx_, package_idx_, node_idx_, cache_idx_;
};

}  // namespace tb::numa
