// hwloc-backed topology sources and the sysfs GPU -> NUMA node lookup.
#include "engine/numa/topology_hwloc.h"

#include <hwloc.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <map>
#include <sstream>

#include "engine/core/error.h"
#include "engine/numa/affinity.h"

namespace tb::numa {

namespace {

enum class Kind { kMachine, kXml, kSynthetic };

// Owns an hwloc topology handle.
class HwlocTopology {
 public:
  HwlocTopology() {
    TB_CHECK(hwloc_topology_init(&topo_) == 0, "[numa] hwloc_topology_init failed");
  }
  ~HwlocTopology() { hwloc_topology_destroy(topo_); }
  HwlocTopology(const HwlocTopology&) = delete;
  HwlocTopology& operator=(const HwlocTopology&) = delete;
  hwloc_topology_t get() const { return topo_; }

 private:
  hwloc_topology_t topo_ = nullptr;
};

CpuSet to_cpuset(hwloc_const_bitmap_t bm) {
  std::vector<int> v;
  if (bm == nullptr) return {};
  TB_CHECK(hwloc_bitmap_weight(bm) >= 0, "[numa] hwloc reported an infinite CPU set");
  for (int i = hwloc_bitmap_first(bm); i >= 0; i = hwloc_bitmap_next(bm, i)) {
    v.push_back(i);
  }
  return CpuSet::from_vector(std::move(v));
}

std::vector<hwloc_obj_t> objects(hwloc_topology_t t, hwloc_obj_type_t type) {
  std::vector<hwloc_obj_t> out;
  for (hwloc_obj_t o = hwloc_get_next_obj_by_type(t, type, nullptr); o != nullptr;
       o = hwloc_get_next_obj_by_type(t, type, o)) {
    out.push_back(o);
  }
  return out;
}

bool read_file(const std::string& path, std::string& out) {
  std::ifstream f(path);
  if (!f) return false;
  std::ostringstream ss;
  ss << f.rdbuf();
  out = ss.str();
  return true;
}

Topology extract(hwloc_topology_t t, Kind kind, const std::string& source) {
  TopologyDesc d;
  d.source = source;
  const CpuSet complete = to_cpuset(hwloc_topology_get_complete_cpuset(t));
  const std::vector<hwloc_obj_t> pus = objects(t, HWLOC_OBJ_PU);

  // Cores: a PU without a Core ancestor is its own core.
  for (hwloc_obj_t core : objects(t, HWLOC_OBJ_CORE)) {
    d.cores.push_back({to_cpuset(core->cpuset)});
  }
  for (hwloc_obj_t pu : pus) {
    if (hwloc_get_ancestor_obj_by_type(t, HWLOC_OBJ_CORE, pu) == nullptr) {
      d.cores.push_back({CpuSet{static_cast<int>(pu->os_index)}});
    }
  }

  // Packages: a machine without Package objects is one package 0.
  for (hwloc_obj_t p : objects(t, HWLOC_OBJ_PACKAGE)) {
    d.packages.push_back({static_cast<int>(p->os_index), to_cpuset(p->cpuset)});
  }
  if (d.packages.empty()) d.packages.push_back({0, complete});

  // NUMA nodes. hwloc gives a memory object its parent's cpuset, so a CPU-less node attached
  // beside a normal one shows the same CPUs; a CPU belongs to the node with the smallest cpuset
  // containing it (ties: the lower os index), which matches the kernel's cpulists.
  auto nodes = objects(t, HWLOC_OBJ_NUMANODE);
  std::map<int, int> owner;  // cpu -> index into nodes
  for (std::size_t i = 0; i < nodes.size(); ++i) {
    for (int c : to_cpuset(nodes[i]->cpuset)) {
      auto it = owner.find(c);
      if (it == owner.end()) {
        owner[c] = static_cast<int>(i);
        continue;
      }
      hwloc_obj_t cur = nodes[static_cast<std::size_t>(it->second)];
      const int wc = hwloc_bitmap_weight(cur->cpuset);
      const int wi = hwloc_bitmap_weight(nodes[i]->cpuset);
      if (wi < wc || (wi == wc && nodes[i]->os_index < cur->os_index)) {
        it->second = static_cast<int>(i);
      }
    }
  }
  for (std::size_t i = 0; i < nodes.size(); ++i) {
    NumaNode n;
    n.os_index = static_cast<int>(nodes[i]->os_index);
    n.memory_bytes = nodes[i]->attr->numanode.local_memory;
    std::vector<int> cpus;
    for (const auto& [c, idx] : owner) {
      if (idx == static_cast<int>(i)) cpus.push_back(c);
    }
    n.cpus = CpuSet::from_vector(std::move(cpus));
    if (kind == Kind::kMachine) {
      std::string text;
      const std::string path =
          "/sys/devices/system/node/node" + std::to_string(n.os_index) + "/cpulist";
      if (read_file(path, text)) n.cpus = CpuSet::parse(text) & complete;
    }
    d.nodes.push_back(std::move(n));
  }

  // Last-level cache per CPU: the highest-level data or unified cache above it.
  std::map<hwloc_obj_t, CpuSet> groups;
  for (hwloc_obj_t pu : pus) {
    hwloc_obj_t best = nullptr;
    for (hwloc_obj_t a = pu->parent; a != nullptr; a = a->parent) {
      if (hwloc_obj_type_is_dcache(a->type) &&
          (best == nullptr || a->attr->cache.depth > best->attr->cache.depth)) {
        best = a;
      }
    }
    if (best != nullptr) groups[best] = to_cpuset(best->cpuset);
  }
  for (const auto& [obj, cpus] : groups) {
    d.cache_groups.push_back({static_cast<int>(obj->attr->cache.depth), cpus});
  }

  CpuSet allowed = to_cpuset(hwloc_topology_get_allowed_cpuset(t)) & complete;
  if (kind == Kind::kMachine) {
    const CpuSet mine = current_thread_affinity();
    if (!mine.empty()) allowed = allowed & mine;
  }
  d.allowed = allowed;
  return Topology(std::move(d));
}

}  // namespace

std::string hwloc_version() {
  return HWLOC_VERSION;
}

Topology load_machine_topology() {
  HwlocTopology t;
  hwloc_topology_set_flags(t.get(), HWLOC_TOPOLOGY_FLAG_INCLUDE_DISALLOWED);
  TB_CHECK(hwloc_topology_load(t.get()) == 0,
           "[numa] hwloc could not read this machine's topology");
  return extract(t.get(), Kind::kMachine, "this machine (hwloc " + hwloc_version() + ")");
}

Topology load_topology_xml(const std::string& path) {
  HwlocTopology t;
  std::ifstream probe(path);
  TB_CHECK(static_cast<bool>(probe), "[numa] cannot open topology XML file '", path, "'");
  TB_CHECK(hwloc_topology_set_xml(t.get(), path.c_str()) == 0,
           "[numa] hwloc cannot use topology XML file '", path, "'");
  hwloc_topology_set_flags(t.get(), HWLOC_TOPOLOGY_FLAG_INCLUDE_DISALLOWED);
  TB_CHECK(hwloc_topology_load(t.get()) == 0, "[numa] hwloc could not load topology XML file '",
           path, "' (is it an hwloc XML export?)");
  return extract(t.get(), Kind::kXml, "xml " + path);
}

Topology load_synthetic_topology(const std::string& description) {
  HwlocTopology t;
  TB_CHECK(hwloc_topology_set_synthetic(t.get(), description.c_str()) == 0,
           "[numa] invalid synthetic topology '", description,
           "' (hwloc syntax, e.g. \"pack:2 numa:2 l3:2 core:4 pu:2\")");
  TB_CHECK(hwloc_topology_load(t.get()) == 0, "[numa] hwloc could not build synthetic topology '",
           description, "'");
  return extract(t.get(), Kind::kSynthetic, "synthetic " + description);
}

std::string format_pci_address(int domain, int bus, int device) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%04x:%02x:%02x.0", static_cast<unsigned>(domain),
                static_cast<unsigned>(bus), static_cast<unsigned>(device));
  return buf;
}

std::vector<GpuAffinity> gpu_affinity_from_pci(const std::vector<std::string>& pci_addresses,
                                               const std::string& sysfs_root) {
  std::vector<GpuAffinity> out;
  for (std::size_t i = 0; i < pci_addresses.size(); ++i) {
    const std::string path = sysfs_root + "/bus/pci/devices/" + pci_addresses[i] + "/numa_node";
    std::string text;
    TB_CHECK(read_file(path, text), "[numa] cannot read the NUMA node of GPU ", i, " (PCI address ",
             pci_addresses[i], "): '", path, "' is not readable");
    int node = 0;
    std::istringstream is(text);
    TB_CHECK(static_cast<bool>(is >> node), "[numa] malformed NUMA node '", text, "' in '", path,
             "' for GPU ", i);
    out.push_back({static_cast<int>(i), std::max(node, 0), pci_addresses[i]});
  }
  return out;
}

}  // namespace tb::numa
