// Device memory: owning data pointers, the per-device allocator registry and the CPU allocator.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <utility>

#include "engine/core/device.h"

namespace tb::core {

/// Owning pointer to device memory; frees it through the deleter it was created with.
/// Move-only. `ctx` is passed back to the deleter (an allocator's bookkeeping, may be null).
class DataPtr {
 public:
  using Deleter = void (*)(void* ctx, void* data) noexcept;

  DataPtr() = default;
  DataPtr(void* data, void* ctx, Deleter deleter, Device device)
      : data_(data), ctx_(ctx), deleter_(deleter), device_(device) {}
  DataPtr(const DataPtr&) = delete;
  DataPtr& operator=(const DataPtr&) = delete;
  DataPtr(DataPtr&& o) noexcept { swap(o); }
  DataPtr& operator=(DataPtr&& o) noexcept {
    DataPtr tmp(std::move(o));
    swap(tmp);
    return *this;
  }
  ~DataPtr() {
    if (deleter_ != nullptr && data_ != nullptr) deleter_(ctx_, data_);
  }

  void* get() const noexcept { return data_; }
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
  std::int64_t allocated = 0;
  std::int64_t peak_allocated = 0;
  std::int64_t reserved = 0;  ///< bytes held from the system (>= allocated for caching allocators)
  std::int64_t num_allocs = 0;
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
};

/// Installs the allocator for a device type (a backend does this once at registration).
/// Replacing an already-installed allocator throws tb::ValueError.
void register_allocator(DeviceType type, Allocator* allocator);

/// The allocator of a device type. Throws tb::NotImplementedError naming the device type when
/// no backend for it is compiled in or registered.
Allocator& get_allocator(DeviceType type);

/// Alignment of every CPU allocation (enough for AVX-512 and a cache line).
inline constexpr std::size_t kCpuAlignment = 64;

/// The CPU allocator: 64-byte aligned host memory with statistics.
Allocator& cpu_allocator();

}  // namespace tb::core
