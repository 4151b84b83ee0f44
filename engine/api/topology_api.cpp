// describe_topology / plan_binding: engine/numa results turned into plain structs.
#include "engine/api/topology_api.h"

#include <algorithm>

#include "engine/core/error.h"
#include "engine/numa/binding.h"
#include "engine/numa/topology_hwloc.h"

namespace tb::api {

namespace {

numa::Topology load(const TopologyRequest& r) {
  TB_CHECK(r.xml_path.empty() || r.synthetic.empty(),
           "[numa] give either a topology XML file or a synthetic description, not both");
  numa::Topology t = !r.xml_path.empty()    ? numa::load_topology_xml(r.xml_path)
                     : !r.synthetic.empty() ? numa::load_synthetic_topology(r.synthetic)
                                            : numa::load_machine_topology();
  if (r.gpu_nodes.empty()) return t;
  std::vector<numa::GpuAffinity> gpus;
  for (std::size_t i = 0; i < r.gpu_nodes.size(); ++i) {
    gpus.push_back({static_cast<int>(i), std::max(r.gpu_nodes[i], 0), ""});
  }
  return t.with_gpus(std::move(gpus));
}

}  // namespace

TopologyInfo describe_topology(const TopologyRequest& request) {
  const numa::Topology t = load(request);
  TopologyInfo info;
  info.source = t.source();
  info.cpus = t.cpus().to_string();
  info.allowed_cpus = t.allowed_cpus().to_string();
  info.n_cpus = static_cast<int>(t.cpus().size());
  info.n_allowed = static_cast<int>(t.allowed_cpus().size());
  for (const auto& p : t.packages())
    info.packages.push_back({p.os_index, p.cpus.to_string()});
  for (const auto& n : t.nodes()) {
    info.nodes.push_back(
        {n.os_index, n.cpus.to_string(), (n.cpus & t.allowed_cpus()).to_string(), n.memory_bytes});
  }
  for (const auto& g : t.cache_groups())
    info.cache_groups.push_back({g.level, g.cpus.to_string()});
  for (const auto& c : t.cores()) {
    info.cores.push_back(
        {c.cpus.to_string(), t.package_of(c.cpus.min()).os_index, t.node_of(c.cpus.min())});
  }
  for (const auto& g : t.gpus())
    info.gpus.push_back({g.gpu_index, g.numa_node});
  return info;
}

BindingPlan plan_binding(const TopologyRequest& request, const std::string& mode, int slots,
                         bool fallback) {
  const numa::BindingOptions options{numa::parse_binding_mode(mode), fallback};
  const numa::Topology t = load(request);
  const bool gpu = !t.gpus().empty();
  if (slots <= 0) slots = gpu ? static_cast<int>(t.gpus().size()) : 1;
  BindingPlan plan;
  plan.mode = std::string(numa::binding_mode_name(options.mode));
  plan.slot_kind = gpu ? "gpu" : "cpu-worker";
  plan.slot_rule = gpu ? "slot s is GPU local rank s, bound near its GPU's NUMA node"
                       : "CPU worker slot s goes to the (s mod k)-th of the k NUMA nodes with "
                         "allowed CPUs";
  const auto kind = gpu ? numa::SlotKind::kGpu : numa::SlotKind::kCpuWorker;
  for (const auto& b : numa::plan_slots(t, options, kind, slots)) {
    SlotPlanRow row;
    row.slot = b.slot;
    row.bound = b.bound;
    row.node = b.node;
    row.cpus = b.cpus.to_string();
    row.n_cpus = static_cast<int>(b.cpus.size());
    if (b.bound) row.numactl = numa::numactl_command_line(b.cpus, {"<cmd...>"});
    row.warning = b.warning;
    plan.slots.push_back(std::move(row));
  }
  return plan;
}

}  // namespace tb::api
