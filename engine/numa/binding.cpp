// Binding strategies (torch/numa/binding.py) on a Topology, the slot rule, fallback and numactl
// lines.
#include "engine/numa/binding.h"

#include <algorithm>
#include <map>

#include "engine/core/error.h"

namespace tb::numa {

namespace {

const char* slot_noun(SlotKind kind) {
  return kind == SlotKind::kGpu ? "GPUs" : "worker slots";
}

std::string node_list(const Topology& topo) {
  std::vector<int> v;
  for (const auto& n : topo.nodes())
    v.push_back(n.os_index);
  return CpuSet::from_vector(v).to_string();
}

// The allowed CPUs of node `node`; throws when the node is unknown or has none.
CpuSet allowed_node_cpus(const Topology& topo, int node) {
  const NumaNode* n = topo.find_node(node);
  TB_CHECK(n != nullptr,
           "[binding] could not determine CPUs corresponding to numa_node_index=", node,
           ": the topology has no such NUMA node (nodes: ", node_list(topo), ")");
  const CpuSet cpus = n->cpus & topo.allowed_cpus();
  TB_CHECK(!cpus.empty(), "[binding] NUMA node ", node,
           " has no CPUs this process may use (its CPUs: '", n->cpus.to_string(), "', allowed: '",
           topo.allowed_cpus().to_string(), "'); choose another mode or allow CPUs of the node");
  return cpus;
}

CpuSet socket_cpus(const Topology& topo, int node) {
  // A node's socket is the socket of its smallest allowed CPU (as in torch/numa/binding.py).
  // Nodes without allowed CPUs contribute nothing and are skipped (PyTorch fails on them; see
  // README).
  const int socket = topo.package_of(allowed_node_cpus(topo, node).min()).os_index;
  CpuSet out;
  for (const auto& n : topo.nodes()) {
    const CpuSet cpus = n.cpus & topo.allowed_cpus();
    if (!cpus.empty() && topo.package_of(cpus.min()).os_index == socket) out = out | cpus;
  }
  return out;
}

CpuSet exclusive_cpus(const Topology& topo, const SlotPlacement& p) {
  const CpuSet node_cpus = allowed_node_cpus(topo, p.node);
  // Physical cores keyed by the smallest of their siblings (allowed or not), in key order.
  std::map<int, CpuSet> cores;
  for (int c : node_cpus) {
    const CpuSet& sib = topo.core_of(c).cpus;
    cores[sib.min()] = cores[sib.min()] | CpuSet{c};
  }
  const int n_cores = static_cast<int>(cores.size());
  const int per = n_cores / p.slots_on_node;
  const int extra = n_cores % p.slots_on_node;
  TB_CHECK(per >= 1, "[binding] there are only ", n_cores,
           " physical cores on numa_node_index=", p.node, ", but there are ", p.slots_on_node, " ",
           slot_noun(p.kind),
           " associated with this NUMA node; use fewer slots or the node/core-complex mode");
  const int r = p.relative_index;
  const int start = r * per + std::min(r, extra);
  const int stop = start + per + (r < extra ? 1 : 0);
  CpuSet out;
  int i = 0;
  for (const auto& [key, cpus] : cores) {
    if (i >= start && i < stop) out = out | cpus;
    ++i;
  }
  return out;
}

CpuSet core_complex_cpus(const Topology& topo, const SlotPlacement& p) {
  const CpuSet node_cpus = allowed_node_cpus(topo, p.node);
  // Groups keyed by the smallest CPU sharing the last-level cache; a CPU without cache
  // information is grouped with its package (documented in README.md).
  std::map<int, CpuSet> groups;
  for (int c : node_cpus) {
    const CacheGroup* g = topo.cache_group_of(c);
    const CpuSet& shared = g != nullptr ? g->cpus : topo.package_of(c).cpus;
    groups[shared.min()] = groups[shared.min()] | CpuSet{c};
  }
  std::vector<std::pair<int, CpuSet>> order(groups.begin(), groups.end());
  std::stable_sort(order.begin(), order.end(), [](const auto& a, const auto& b) {
    if (a.second.size() != b.second.size()) return a.second.size() > b.second.size();
    return a.first < b.first;
  });
  return order[static_cast<std::size_t>(p.relative_index) % order.size()].second;
}

// Whether a command-line word needs single quotes to survive a shell. "<cmd...>" is the
// placeholder the CLI prints and stays as it is.
bool needs_quotes(const std::string& s) {
  if (s == "<cmd...>") return false;
  return s.empty() || s.find_first_not_of(
                          "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                          "0123456789-_./=:,+@%") != std::string::npos;
}

}  // namespace

std::string_view binding_mode_name(BindingMode mode) {
  switch (mode) {
    case BindingMode::kNone:
      return "none";
    case BindingMode::kNode:
      return "node";
    case BindingMode::kSocket:
      return "socket";
    case BindingMode::kExclusive:
      return "exclusive";
    case BindingMode::kCoreComplex:
      return "core-complex";
  }
  return "none";
}

BindingMode parse_binding_mode(std::string_view name) {
  if (name == "none") return BindingMode::kNone;
  if (name == "node") return BindingMode::kNode;
  if (name == "socket") return BindingMode::kSocket;
  if (name == "exclusive") return BindingMode::kExclusive;
  if (name == "core-complex" || name == "core_complex") return BindingMode::kCoreComplex;
  throw ValueError(detail::str_cat("[binding] unknown binding mode '", name,
                                   "'; expected none, node, socket, exclusive or core-complex"));
}

SlotPlacement place_slot(const Topology& topo, SlotKind kind, int slot, int n_slots) {
  SlotPlacement p;
  p.slot = slot;
  p.kind = kind;
  TB_CHECK(slot >= 0, "[binding] slot ", slot, " is negative");
  if (kind == SlotKind::kGpu) {
    std::vector<int> gpu_ids;
    for (const auto& g : topo.gpus())
      gpu_ids.push_back(g.gpu_index);
    const auto it = std::find_if(topo.gpus().begin(), topo.gpus().end(),
                                 [&](const GpuAffinity& g) { return g.gpu_index == slot; });
    TB_CHECK(it != topo.gpus().end(), "[binding] slot ", slot, " is GPU local rank ", slot,
             ", but the topology lists GPUs '", CpuSet::from_vector(gpu_ids).to_string(),
             "'; give each GPU's NUMA node or use CPU worker slots");
    p.node = it->numa_node;
    p.slots_on_node = 0;
    for (const auto& g : topo.gpus()) {  // sorted by index
      if (g.numa_node != p.node) continue;
      if (g.gpu_index < slot) ++p.relative_index;
      ++p.slots_on_node;
    }
    return p;
  }
  TB_CHECK(slot < n_slots, "[binding] slot ", slot, " is out of range for ", n_slots, " slots");
  std::vector<int> nodes;
  for (const auto& n : topo.nodes()) {
    if (!(n.cpus & topo.allowed_cpus()).empty()) nodes.push_back(n.os_index);
  }
  TB_CHECK(!nodes.empty(), "[binding] no NUMA node has a CPU this process may use (allowed: '",
           topo.allowed_cpus().to_string(), "', nodes: ", node_list(topo), ")");
  const int k = static_cast<int>(nodes.size());
  const int home = slot % k;
  p.node = nodes[static_cast<std::size_t>(home)];
  p.relative_index = slot / k;
  p.slots_on_node = (n_slots - home + k - 1) / k;
  return p;
}

CpuSet slot_cpus(const Topology& topo, BindingMode mode, const SlotPlacement& p) {
  CpuSet out;
  switch (mode) {
    case BindingMode::kNone:
      return {};
    case BindingMode::kNode:
      out = allowed_node_cpus(topo, p.node);
      break;
    case BindingMode::kSocket:
      out = socket_cpus(topo, p.node);
      break;
    case BindingMode::kExclusive:
      out = exclusive_cpus(topo, p);
      break;
    case BindingMode::kCoreComplex:
      out = core_complex_cpus(topo, p);
      break;
  }
  TB_CHECK(!out.empty(), "[binding] must bind to a non-empty set of CPU indices (mode ",
           binding_mode_name(mode), ", slot ", p.slot, " on NUMA node ", p.node, ")");
  return out;
}

CpuSet gpu_cpus(const Topology& topo, BindingMode mode, int gpu_index) {
  return slot_cpus(topo, mode, place_slot(topo, SlotKind::kGpu, gpu_index, 0));
}

SlotBinding bind_slot(const Topology& topo, const BindingOptions& options, SlotKind kind, int slot,
                      int n_slots) {
  SlotBinding b;
  b.slot = slot;
  b.mode = options.mode;
  if (options.mode == BindingMode::kNone) return b;
  try {
    const SlotPlacement p = place_slot(topo, kind, slot, n_slots);
    b.cpus = slot_cpus(topo, options.mode, p);
    b.node = p.node;
    b.bound = true;
  } catch (const Error& e) {
    if (!options.fallback) throw;
    b = SlotBinding{};
    b.slot = slot;
    b.mode = options.mode;
    b.warning =
        detail::str_cat(e.what(), "; binding fallback is on, so slot ", slot, " runs unbound");
  }
  return b;
}

std::vector<SlotBinding> plan_slots(const Topology& topo, const BindingOptions& options,
                                    SlotKind kind, int n_slots) {
  TB_CHECK(n_slots >= 1, "[binding] the number of slots must be at least 1, got ", n_slots);
  std::vector<SlotBinding> out;
  for (int s = 0; s < n_slots; ++s)
    out.push_back(bind_slot(topo, options, kind, s, n_slots));
  return out;
}

std::vector<int> nodes_of_cpus(const Topology& topo, const CpuSet& cpus) {
  std::vector<int> nodes;
  for (int c : cpus) {
    const int n = topo.node_of(c);
    if (n >= 0) nodes.push_back(n);
  }
  return CpuSet::from_vector(std::move(nodes)).cpus();
}

std::vector<std::string> numactl_args(const CpuSet& cpus, const std::vector<std::string>& command) {
  TB_CHECK(!cpus.empty(), "[binding] must bind to a non-empty set of CPU indices");
  std::vector<std::string> out = {"numactl", "--physcpubind=" + cpus.to_string()};
  out.insert(out.end(), command.begin(), command.end());
  return out;
}

std::string numactl_command_line(const CpuSet& cpus, const std::vector<std::string>& command) {
  std::string line;
  for (const auto& a : numactl_args(cpus, command)) {
    if (!line.empty()) line += ' ';
    if (!needs_quotes(a)) {
      line += a;
      continue;
    }
    line += '\'';
    for (char ch : a) {
      if (ch == '\'') {
        line += "'\\''";
      } else {
        line += ch;
      }
    }
    line += '\'';
  }
  return line;
}

}  // namespace tb::numa
