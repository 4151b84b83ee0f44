// CPU affinity of the calling thread (sched_getaffinity(2), sched_setaffinity(2)): read, set,
// and ScopedAffinity (PyTorch PR 161183's "save the calling thread's mask, set the slot's mask,
// spawn, restore"). Linux masks are per thread, and a child process or thread inherits the mask
// of the thread that creates it.
#pragma once

#include "engine/numa/cpu_set.h"

namespace tb::numa {

/// The calling thread's affinity mask (pthread_getaffinity_np). Throws tb::ValueError
/// "[binding] ..." when the kernel refuses.
CpuSet current_thread_affinity();

/// Sets the calling thread's affinity mask. Throws tb::ValueError "[binding] ..." naming the
/// set when it is empty or the kernel rejects it (no CPU of it is allowed or online).
void set_current_thread_affinity(const CpuSet& cpus);

/// RAII: saves the calling thread's mask, sets `cpus`, and restores the saved mask when
/// destroyed — also during stack unwinding. Create and destroy it on the same thread; spawn
/// the child process or thread inside its scope so it inherits the mask.
class ScopedAffinity {
 public:
  /// Throws (and changes nothing) when `cpus` cannot be set.
  explicit ScopedAffinity(const CpuSet& cpus);
  /// Restores the saved mask; a failure to restore cannot be reported and is ignored.
  ~ScopedAffinity();
  ScopedAffinity(const ScopedAffinity&) = delete;
  ScopedAffinity& operator=(const ScopedAffinity&) = delete;

  /// The mask that will be restored.
  const CpuSet& saved() const { return saved_; }

 private:
  CpuSet saved_;
};

}  // namespace tb::numa
