// Device memory: owning data pointers, the per-device allocator registry and the CPU allocator.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "engine/core/device.h"

namespace tb::core {

/// Owning pointer to device memory; frees it through the deleter it was created with.
/// Move-only. `ctx` is passed back to the deleter (an allocator's bookkeeping, may be null).
class DataPtr {
 public:
  /// Frees `data`; called as deleter(ctx, data) on destruction. Must not throw.
  using Deleter = void (*)(void* ctx, void* data) noexcept;

  /// A null pointer on the CPU that owns nothing.
  DataPtr() = default;
  /// Takes ownership of `data` on `device`: `deleter(ctx, data)` runs on destruction unless
  /// `data` or `deleter` is null (so a null deleter makes a non-owning pointer).
  DataPtr(void* data, void* ctx, Deleter deleter, Device device)
      : data_(data), ctx_(ctx), deleter_(deleter), device_(device) {}
  DataPtr(const DataPtr&) = delete;
  DataPtr& operator=(const DataPtr&) = delete;
  /// Takes over `o`'s memory; `o` is left null.
  DataPtr(DataPtr&& o) noexcept { swap(o); }
  /// Frees the current memory (if any) and takes over `o`'s; `o` is left null.
  DataPtr& operator=(DataPtr&& o) noexcept {
    DataPtr tmp(std::move(o));
    swap(tmp);
    return *this;
  }
  ~DataPtr() {
    if (deleter_ != nullptr && data_ != nullptr) deleter_(ctx_, data_);
  }

  /// The raw address (null when empty); still owned by this DataPtr.
  void* get() const noexcept { return data_; }
  /// The device the memory lives on.
  Device device() const noexcept { return device_; }

 private:
  void swap(DataPtr& o) noexcept {
    std::swap(data_, o.data_);
    std::swap(ctx_, o.ctx_);
    std::swap(deleter_, o.deleter_);
    std::swap(device_, o.device_);
  }

  void* data_ = nullptr;
  void* ctx_ = nullptr;
  Deleter deleter_ = nullptr;
  Device device_;
};

/// Allocation statistics in bytes (what the allocator handed out, and the peak of that).
struct AllocatorStats {
  std::int64_t allocated = 0;       ///< bytes currently allocated (CPU: rounded to its size class)
  std::int64_t peak_allocated = 0;  ///< highest `allocated` since start or the last reset_peak()
  std::int64_t reserved = 0;  ///< bytes held from the system (>= allocated for caching allocators)
  std::int64_t num_allocs = 0;  ///< number of non-empty allocations so far (never decreases)
};

/// Interface every device allocator implements. Implementations are thread-safe.
class Allocator {
 public:
  virtual ~Allocator() = default;
  /// Allocates `nbytes` on `device` (0 bytes gives a null DataPtr). Throws tb::Error naming the
  /// device and size when memory cannot be had.
  virtual DataPtr allocate(std::size_t nbytes, Device device) = 0;
  /// Current statistics for `device`.
  virtual AllocatorStats stats(Device device) const = 0;
  /// Resets the peak to the current allocation for `device`.
  virtual void reset_peak(Device device) = 0;
  /// Returns cached free blocks to the system (no-op for allocators that do not cache).
  virtual void empty_cache() {}
};

/// Installs the allocator for a device type (a backend does this once at registration).
/// Replacing an already-installed allocator throws tb::ValueError.
void register_allocator(DeviceType type, Allocator* allocator);

/// Installs the function that loads the compiled-in backends (the dispatcher does this at
/// start-up), so that allocating on a device before any op has run still finds its allocator.
void set_backend_loader(void (*loader)());

/// Runs the backend loader once (if installed): registers every compiled-in backend.
void load_backends();

/// The allocator of a device type. Throws tb::NotImplementedError naming the device type when
/// no backend for it is compiled in or registered.
Allocator& get_allocator(DeviceType type);

/// Timing on a device's own clock (CUDA events, openreg events): the phases of a training step
/// are measured without synchronising after each. mark() queues a timestamp on the device's
/// current stream and returns at once; elapsed_ms() waits for the last mark and returns the time
/// between consecutive marks (marks - 1 values), then forgets the marks.
class DeviceTimer {
 public:
  virtual ~DeviceTimer() = default;
  /// Queues a timestamp on the device's current stream; does not wait.
  virtual void mark() = 0;
  /// Waits for the last mark; the milliseconds between consecutive marks (one fewer than the
  /// marks), which are then forgotten. Empty when fewer than two marks were made.
  virtual std::vector<double> elapsed_ms() = 0;
};

/// Makes a timer for one device of a backend's type.
using DeviceTimerFactory = std::unique_ptr<DeviceTimer> (*)(Device device);

/// Installs the timer factory of a non-CPU device type (a backend does this at registration).
void register_device_timer(DeviceType type, DeviceTimerFactory factory);

/// A timer for `device`, or nullptr for the CPU and devices whose backend has none (callers
/// then time on the host clock).
std::unique_ptr<DeviceTimer> make_device_timer(Device device);

/// Alignment of every CPU allocation (enough for AVX-512 and a cache line).
inline constexpr std::size_t kCpuAlignment = 64;

/// The CPU allocator: 64-byte aligned host memory with statistics. Freed blocks are reused:
/// up to 4 KiB through a per-thread cache, larger ones through a shared exact-size cache of at
/// most 1 GiB (empty_cache() releases it; `reserved` counts what is cached).
Allocator& cpu_allocator();

}  // namespace tb::core
