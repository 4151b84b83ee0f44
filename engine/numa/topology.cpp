// Topology validation, indexing and queries.
#include "engine/numa/topology.h"

#include <algorithm>

#include "engine/core/error.h"

namespace tb::numa {

namespace {

// Records position `pos` for every CPU of `cpus` in `index`; `what` names the list for errors.
void assign(std::vector<int>& index, const CpuSet& cpus, int pos, const char* what,
            const std::string& source) {
  for (int c : cpus) {
    if (static_cast<std::size_t>(c) >= index.size())
      index.resize(static_cast<std::size_t>(c) + 1, -1);
    TB_CHECK(index[static_cast<std::size_t>(c)] == -1, "[numa] invalid topology (", source,
             "): CPU ", c, " is in two ", what);
    index[static_cast<std::size_t>(c)] = pos;
  }
}

int lookup(const std::vector<int>& index, int cpu) {
  if (cpu < 0 || static_cast<std::size_t>(cpu) >= index.size()) return -1;
  return index[static_cast<std::size_t>(cpu)];
}

}  // namespace

Topology::Topology(TopologyDesc desc) : desc_(std::move(desc)) {
  const std::string& src = desc_.source;
  auto by_min = [](const auto& a, const auto& b) {
    return (a.cpus.empty() ? -1 : a.cpus.min()) < (b.cpus.empty() ? -1 : b.cpus.min());
  };
  std::sort(desc_.packages.begin(), desc_.packages.end(),
            [](const Package& a, const Package& b) { return a.os_index < b.os_index; });
  std::sort(desc_.nodes.begin(), desc_.nodes.end(),
            [](const NumaNode& a, const NumaNode& b) { return a.os_index < b.os_index; });
  std::sort(desc_.cores.begin(), desc_.cores.end(), by_min);
  std::sort(desc_.cache_groups.begin(), desc_.cache_groups.end(), by_min);
  std::sort(desc_.gpus.begin(), desc_.gpus.end(),
            [](const GpuAffinity& a, const GpuAffinity& b) { return a.gpu_index < b.gpu_index; });

  for (std::size_t i = 1; i < desc_.packages.size(); ++i) {
    TB_CHECK(desc_.packages[i].os_index != desc_.packages[i - 1].os_index,
             "[numa] invalid topology (", src, "): package ", desc_.packages[i].os_index,
             " is listed twice");
  }
  for (std::size_t i = 1; i < desc_.nodes.size(); ++i) {
    TB_CHECK(desc_.nodes[i].os_index != desc_.nodes[i - 1].os_index, "[numa] invalid topology (",
             src, "): NUMA node ", desc_.nodes[i].os_index, " is listed twice");
  }
  for (std::size_t i = 1; i < desc_.gpus.size(); ++i) {
    TB_CHECK(desc_.gpus[i].gpu_index != desc_.gpus[i - 1].gpu_index, "[numa] invalid topology (",
             src, "): GPU ", desc_.gpus[i].gpu_index, " is listed twice");
  }
  for (const auto& g : desc_.gpus) {
    TB_CHECK(g.gpu_index >= 0, "[numa] invalid topology (", src, "): GPU index ", g.gpu_index,
             " is negative");
  }

  for (std::size_t i = 0; i < desc_.cores.size(); ++i) {
    TB_CHECK(!desc_.cores[i].cpus.empty(), "[numa] invalid topology (", src,
             "): a core has no CPUs");
    assign(core_idx_, desc_.cores[i].cpus, static_cast<int>(i), "cores", src);
    all_ = all_ | desc_.cores[i].cpus;
  }
  TB_CHECK(!all_.empty(), "[numa] invalid topology (", src, "): it has no CPUs");
  for (std::size_t i = 0; i < desc_.packages.size(); ++i) {
    assign(package_idx_, desc_.packages[i].cpus, static_cast<int>(i), "packages", src);
  }
  for (std::size_t i = 0; i < desc_.nodes.size(); ++i) {
    assign(node_idx_, desc_.nodes[i].cpus, static_cast<int>(i), "NUMA nodes", src);
  }
  for (std::size_t i = 0; i < desc_.cache_groups.size(); ++i) {
    assign(cache_idx_, desc_.cache_groups[i].cpus, static_cast<int>(i), "cache groups", src);
  }
  for (int c : all_) {
    TB_CHECK(lookup(package_idx_, c) >= 0, "[numa] invalid topology (", src, "): CPU ", c,
             " is in no package");
  }
  const CpuSet listed = [&] {
    CpuSet u;
    for (const auto& p : desc_.packages)
      u = u | p.cpus;
    for (const auto& n : desc_.nodes)
      u = u | n.cpus;
    for (const auto& g : desc_.cache_groups)
      u = u | g.cpus;
    return u;
  }();
  const CpuSet unknown = listed - all_;
  TB_CHECK(unknown.empty(), "[numa] invalid topology (", src, "): CPUs ", unknown.to_string(),
           " are listed in a package, node or cache group but in no core");

  allowed_ = desc_.allowed.value_or(all_);
  const CpuSet extra = allowed_ - all_;
  TB_CHECK(extra.empty(), "[numa] invalid topology (", src, "): allowed CPUs ", extra.to_string(),
           " are not CPUs of the topology (", all_.to_string(), ")");
  desc_.allowed = allowed_;
}

const NumaNode* Topology::find_node(int os_index) const {
  for (const auto& n : desc_.nodes) {
    if (n.os_index == os_index) return &n;
  }
  return nullptr;
}

const Core& Topology::core_of(int cpu) const {
  const int i = lookup(core_idx_, cpu);
  TB_CHECK(i >= 0, "[numa] CPU ", cpu, " is not in the topology (CPUs ", all_.to_string(), ")");
  return desc_.cores[static_cast<std::size_t>(i)];
}

const Package& Topology::package_of(int cpu) const {
  const int i = lookup(package_idx_, cpu);
  TB_CHECK(i >= 0, "[numa] CPU ", cpu, " is not in the topology (CPUs ", all_.to_string(), ")");
  return desc_.packages[static_cast<std::size_t>(i)];
}

const CacheGroup* Topology::cache_group_of(int cpu) const {
  const int i = lookup(cache_idx_, cpu);
  return i < 0 ? nullptr : &desc_.cache_groups[static_cast<std::size_t>(i)];
}

int Topology::node_of(int cpu) const {
  const int i = lookup(node_idx_, cpu);
  return i < 0 ? -1 : desc_.nodes[static_cast<std::size_t>(i)].os_index;
}

Topology Topology::with_allowed(CpuSet allowed) const {
  TopologyDesc d = desc_;
  d.allowed = std::move(allowed);
  return Topology(std::move(d));
}

Topology Topology::with_gpus(std::vector<GpuAffinity> gpus) const {
  TopologyDesc d = desc_;
  d.gpus = std::move(gpus);
  return Topology(std::move(d));
}

}  // namespace tb::numa
