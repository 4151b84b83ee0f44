// Topology sources: this machine, an hwloc XML file or an hwloc synthetic description (all
// read through hwloc), and the GPU -> NUMA node hook that reads sysfs for PCI bus ids.
#pragma once

#include <string>
#include <vector>

#include "engine/numa/topology.h"

namespace tb::numa {

/// The hwloc version this engine was built against ("2.9.0").
std::string hwloc_version();

/// This machine, read by hwloc (disallowed CPUs included). allowed_cpus() is hwloc's allowed
/// set (cgroup cpuset) intersected with the calling thread's affinity mask (taskset), like
/// torch/numa/binding.py's os.sched_getaffinity(0) (sched_getaffinity(2)). Node CPU lists come from
/// /sys/devices/system/node/node<N>/cpulist where readable. No GPUs are listed: add them with
/// Topology::with_gpus (see gpu_affinity_from_pci). Throws tb::ValueError "[numa] ..." when
/// hwloc fails.
Topology load_machine_topology();

/// A topology exported by hwloc (`lstopo file.xml`, hwloc_topology_export_xml). Allowed CPUs
/// are the file's allowed_cpuset. Throws tb::ValueError naming the file when it cannot be read.
Topology load_topology_xml(const std::string& path);

/// hwloc's synthetic description, e.g. "pack:2 numa:2 l3:2 core:4 pu:2" (2 packages x 2 nodes
/// x 2 L3 groups x 4 cores x 2 threads; CPUs numbered depth-first) or with explicit PU numbers
/// "... pu:2(indexes=0,16,1,17,...)". All CPUs are allowed. Throws tb::ValueError naming the
/// description when hwloc rejects it.
Topology load_synthetic_topology(const std::string& description);

/// "%04x:%02x:%02x.0" — the PCI address form sysfs uses, from CUDA's device properties
/// (pci_domain_id, pci_bus_id, pci_device_id).
std::string format_pci_address(int domain, int bus, int device);

/// GPU i -> NUMA node read from <sysfs_root>/bus/pci/devices/<pci_addresses[i]>/numa_node,
/// with -1 (single-node machines) mapped to 0, as torch/numa/binding.py does. This is the hook
/// CUDA detection will feed. Throws tb::ValueError naming the GPU and file when it cannot be read.
std::vector<GpuAffinity> gpu_affinity_from_pci(const std::vector<std::string>& pci_addresses,
                                               const std::string& sysfs_root = "/sys");

}  // namespace tb::numa
