// AppliedBinding: a run's CPU slot binding applied for its lifetime to the run thread, the
// kernel pool and the loader threads (and the memory policy), undone in reverse order also when
// the run throws. Internal to the Trainer.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "engine/core/thread_pool.h"
#include "engine/data/dataloader.h"
#include "engine/numa/affinity.h"
#include "engine/numa/binding.h"
#include "engine/numa/memory.h"

namespace tb::train::detail {

class AppliedBinding {
 public:
  /// Binds to `b` (memory preferred on `nodes`); what it did goes to `notes` as "level: text".
  AppliedBinding(const numa::SlotBinding& b, const std::vector<int>& nodes,
                 data::DataLoader& loader, std::vector<std::string>& notes);
  /// Restores the previous masks, pool size and memory policy (errors are swallowed).
  ~AppliedBinding();
  AppliedBinding(const AppliedBinding&) = delete;
  AppliedBinding& operator=(const AppliedBinding&) = delete;

 private:
  data::DataLoader& loader_;
  std::optional<numa::ScopedAffinity> affinity_;
  std::optional<core::ScopedNumThreads> threads_;
  std::optional<numa::ScopedMemoryPolicy> memory_;
  std::vector<int> previous_pin_;
  bool pinned_ = false;
};

}  // namespace tb::train::detail
