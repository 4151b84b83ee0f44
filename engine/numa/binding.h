// Binding strategies (the modes of PyTorch's torchrun --numa-binding, pytorch/pytorch
// torch/numa/binding.py): which logical CPUs a slot gets for a mode — none, node, socket,
// exclusive, core-complex — with that file's errors and its fallback to "unbound + warning"
// (should_fall_back_if_binding_fails), plus the equivalent numactl(8) command line.
//
// Slot rule. A slot is either
//  - a GPU slot (SlotKind::kGpu): slot s is GPU local rank s, bound near GPU s's NUMA node; the
//    GPUs sharing a node are the topology's GPUs with that node, in index order, and a GPU's
//    relative index is its position among them (as in torch/numa/binding.py); or
//  - a CPU worker slot (SlotKind::kCpuWorker), for runs without GPUs: the NUMA nodes that have
//    at least one allowed CPU, in os-index order, take slots round-robin — slot s goes to node
//    nodes[s % k] with relative index s / k, and the slots sharing a node are those of
//    0..n_slots-1 that land on it. They then play the role of "the GPUs on the node".
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "engine/numa/topology.h"

namespace tb::numa {

/// The binding strategies. kNone (the default) leaves threads unbound.
enum class BindingMode { kNone, kNode, kSocket, kExclusive, kCoreComplex };

/// "none", "node", "socket", "exclusive", "core-complex".
std::string_view binding_mode_name(BindingMode mode);
/// Parses a mode name (also "core_complex"). Throws tb::ValueError "[binding] unknown binding
/// mode ..." listing the choices.
BindingMode parse_binding_mode(std::string_view name);

/// What a slot is (see the slot rule at the top of this file).
enum class SlotKind { kGpu, kCpuWorker };

/// How to bind.
struct BindingOptions {
  BindingMode mode = BindingMode::kNone;
  /// When true, a binding failure yields an unbound slot with a warning instead of an error.
  bool fallback = false;
};

/// Where a slot sits: its NUMA node, its relative index there and how many slots share it.
struct SlotPlacement {
  int slot = 0;
  SlotKind kind = SlotKind::kCpuWorker;
  int node = 0;            ///< NUMA node os index
  int relative_index = 0;  ///< position among the slots (GPUs) on that node
  int slots_on_node = 1;   ///< how many slots (GPUs) share that node
};

/// Places `slot` by the slot rule. For kGpu, n_slots is not used (the GPUs on a node come from
/// the topology). Throws tb::ValueError "[binding] ..." when the slot is out of range, names a
/// GPU the topology does not list, or (kCpuWorker) no node has an allowed CPU.
SlotPlacement place_slot(const Topology& topo, SlotKind kind, int slot, int n_slots);

/// The CPU set of a placed slot for `mode` (the rules of torch/numa/binding.py), never empty.
/// Throws tb::ValueError "[binding] ..." when the node is unknown, has no allowed CPUs, has fewer
/// physical cores than slots (exclusive), or the result is empty. kNone returns the empty set.
CpuSet slot_cpus(const Topology& topo, BindingMode mode, const SlotPlacement& placement);

/// Convenience: the CPU set of GPU `gpu_index` (a GPU slot) for `mode`.
CpuSet gpu_cpus(const Topology& topo, BindingMode mode, int gpu_index);

/// The result of binding one slot.
struct SlotBinding {
  int slot = 0;
  BindingMode mode = BindingMode::kNone;
  bool bound = false;   ///< false for kNone and for a failure with fallback on
  int node = -1;        ///< the slot's NUMA node, -1 when unbound
  CpuSet cpus;          ///< empty when unbound
  std::string warning;  ///< why the slot is unbound after a failure (fallback), else empty
};

/// Places and binds one slot. Errors propagate unless options.fallback is set, in which case
/// the slot comes back unbound with the error text in `warning`.
SlotBinding bind_slot(const Topology& topo, const BindingOptions& options, SlotKind kind, int slot,
                      int n_slots);

/// bind_slot for slots 0..n_slots-1. Throws tb::ValueError when n_slots < 1.
std::vector<SlotBinding> plan_slots(const Topology& topo, const BindingOptions& options,
                                    SlotKind kind, int n_slots);

/// The NUMA nodes (os indices, ascending) that own at least one CPU of `cpus` — the nodes a
/// bound slot's memory policy should prefer.
std::vector<int> nodes_of_cpus(const Topology& topo, const CpuSet& cpus);

/// {"numactl", "--physcpubind=<cpus>", command...} (as torch/numa/binding.py since PyTorch PR
/// 166026; numactl(8)). Throws tb::ValueError "[binding] must bind to a non-empty set of CPU
/// indices" when `cpus` is empty.
std::vector<std::string> numactl_args(const CpuSet& cpus, const std::vector<std::string>& command);

/// numactl_args joined by spaces for display (arguments with shell-special characters are
/// single-quoted), e.g. "numactl --physcpubind=3-5,19-21 <cmd...>".
std::string numactl_command_line(const CpuSet& cpus, const std::vector<std::string>& command);

}  // namespace tb::numa
