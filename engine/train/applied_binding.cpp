// AppliedBinding (see applied_binding.h).
#include "engine/train/applied_binding.h"

#include <algorithm>

#include "engine/core/error.h"

namespace tb::train::detail {

AppliedBinding::AppliedBinding(const numa::SlotBinding& b, const std::vector<int>& nodes,
                               data::DataLoader& loader, std::vector<std::string>& notes)
    : loader_(loader) {
  const std::vector<int>& cpus = b.cpus.cpus();
  affinity_.emplace(b.cpus);
  // No oversubscription (within the engine's most: a slot of more CPUs runs 1024 threads).
  threads_.emplace(static_cast<int>(std::min<std::size_t>(cpus.size(), core::kMaxNumThreads)));
  previous_pin_ = core::pin_workers(cpus);
  pinned_ = true;
  loader_.pin_workers(cpus);
  std::string memory = "memory: default policy";
  if (numa::numa_supported() && !nodes.empty()) {
    try {
      memory_.emplace(nodes, numa::MemoryPolicy::kPreferred);
      memory = "memory preferred on node " + numa::node_list(nodes);
    } catch (const ValueError& e) {
      notes.push_back(std::string("warning: binding: ") + e.what() + "; memory policy unchanged");
    }
  }
  notes.push_back("info: bound to CPUs " + b.cpus.to_string() + " (slot " + std::to_string(b.slot) +
                  ", node " + std::to_string(b.node) + ", mode " +
                  std::string(numa::binding_mode_name(b.mode)) + "); kernel pool " +
                  std::to_string(cpus.size()) + " threads; " + memory);
}

AppliedBinding::~AppliedBinding() {
  memory_.reset();
  threads_.reset();
  try {
    if (pinned_) core::pin_workers(previous_pin_);
  } catch (...) {  // restoring cannot be reported from a destructor
  }
  affinity_.reset();  // the run thread's own mask first: unpinning the loader reads it
  try {
    loader_.pin_workers({});
  } catch (...) {
  }
}

}  // namespace tb::train::detail
