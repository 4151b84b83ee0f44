// Numeric modes that a caller chooses and the backends read: whether float32 products may use
// TF32 tensor cores. They live in core so the trainer and the API set them without seeing a
// backend (engine/README.md, "Layers").
#pragma once

#include <optional>

namespace tb::core {

/// Lets float32 products on devices with TF32 tensor cores use them (10-bit mantissa inputs,
/// float32 accumulation; PyTorch's torch.backends.cuda.matmul.allow_tf32). Off by default.
/// Process-wide; devices without TF32 ignore it.
void set_allow_tf32(bool allow);

/// Overrides set_allow_tf32 on the calling thread (a run's `amp.tf32` on its worker thread: runs
/// side by side keep their own setting); std::nullopt goes back to the process-wide one.
void set_thread_allow_tf32(std::optional<bool> allow);

/// The setting in force on the calling thread: its override when set, else the process-wide one.
bool allow_tf32();

/// RAII: a thread's TF32 override for a scope (set_thread_allow_tf32), cleared when it ends.
class ScopedThreadAllowTf32 {
 public:
  /// Sets the calling thread's override to `allow`.
  explicit ScopedThreadAllowTf32(bool allow) { set_thread_allow_tf32(allow); }
  /// Clears the calling thread's override.
  ~ScopedThreadAllowTf32() { set_thread_allow_tf32(std::nullopt); }
  ScopedThreadAllowTf32(const ScopedThreadAllowTf32&) = delete;
  ScopedThreadAllowTf32& operator=(const ScopedThreadAllowTf32&) = delete;
};

}  // namespace tb::core
