// The openreg runtime: an accelerator emulated on the CPU, with what a real device runtime has —
// devices, a current device per thread, device memory that host code cannot touch, streams that
// run kernels asynchronously in order, events with elapsed time, synchronisation.
//
// This is the layer a vendor's driver/runtime library occupies (CUDA's cudart, PyTorch's
// OpenReg runtime). Nothing here knows about tensors or the dispatcher; backend.cpp builds the
// allocator, generators and kernels on top of it. See docs/backend-integration.md.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>

#include "engine/core/allocator.h"

namespace tb::openreg {

/// Most devices the runtime can emulate.
inline constexpr int kMaxDevices = 16;

/// Number of openreg devices: TB_OPENREG_DEVICES (1..16) when set, else 2. Read once.
int device_count();

/// Capacity of each device's memory in bytes: TB_OPENREG_MEMORY_MB (MiB, >= 16) when set, else
/// 4096 MiB. This is address space reserved up front; pages are committed as memory is used.
std::size_t device_capacity();

/// Throws tb::ValueError "[openreg] no device openreg:N (there are C)" for an index out of range.
void check_device(int index);

/// The calling thread's current device (0 until set_device()).
int current_device();
/// Makes `index` the calling thread's current device. Throws like check_device().
void set_device(int index);

/// RAII: makes `index` current for the guard's lifetime (PyTorch's DeviceGuard).
class DeviceGuard {
 public:
  /// Switches to `index` (throws like check_device()).
  explicit DeviceGuard(int index);
  /// Switches back to the device current at construction.
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_;
};

// ---- device memory ----------------------------------------------------------------------------

/// Alignment of every device allocation.
inline constexpr std::size_t kDeviceAlignment = 512;

/// Allocates `nbytes` (> 0) of `device`'s memory (a caching best-fit pool over one reserved
/// range; freed blocks are reused and merged). Throws tb::Error "[openreg] out of memory on
/// openreg:N ..." with the pool's figures when it does not fit.
void* device_malloc(int device, std::size_t nbytes);
/// Returns a block from device_malloc() to its pool. Unknown pointers are ignored (noexcept).
void device_free(int device, void* ptr) noexcept;
/// Allocated / peak / reserved (committed) bytes and allocation count of `device`.
core::AllocatorStats memory_stats(int device);
/// Sets `device`'s peak to its current allocation.
void reset_peak_memory(int device);
/// Releases the free memory at the top of `device`'s pool back to the system (reserved drops).
void empty_cache(int device);
/// The openreg device whose memory contains `ptr`, or -1 for host memory.
int device_of_pointer(const void* ptr) noexcept;

/// Whether device memory is protected from host access (TB_OPENREG_PROTECT=0 turns it off).
/// When on, device memory is mapped PROT_NONE except while a kernel runs (ExecutionScope), so a
/// host read or write of device memory faults; a SIGSEGV handler names the device and the
/// address before the process dies.
bool memory_protection_enabled();

/// RAII: `device`'s memory is readable and writable while at least one scope on it is alive.
/// Stream workers wrap every kernel in one. (Host code on another thread is not caught while
/// a kernel runs: the protection is per device, not per thread.)
class ExecutionScope {
 public:
  /// Opens `device`'s memory (throws like check_device()).
  explicit ExecutionScope(int device);
  /// Closes it again when this was the last open scope on the device.
  ~ExecutionScope();
  ExecutionScope(const ExecutionScope&) = delete;
  ExecutionScope& operator=(const ExecutionScope&) = delete;

 private:
  int device_;
};

// ---- streams and events -----------------------------------------------------------------------

/// An in-order queue of work on one device, run by the stream's own worker thread (kernels run
/// asynchronously with the host, in submission order, inside an ExecutionScope).
class Stream {
 public:
  /// A new stream on `device` (throws like check_device()). Its worker starts on first use.
  explicit Stream(int device);
  /// Waits for the queued work, then stops the worker.
  ~Stream();
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;

  /// The device the stream runs on.
  int device() const noexcept { return device_; }
  /// A process-unique id.
  std::uint64_t id() const noexcept { return id_; }

  /// Queues `work`; it runs after everything queued before it. An exception thrown by `work` is
  /// kept and rethrown (as tb::Error naming the stream) by the next synchronize().
  void enqueue(std::function<void()> work);
  /// Waits until everything queued so far has run; rethrows the first asynchronous error.
  void synchronize();
  /// True when nothing queued is still pending.
  bool query() const;

 private:
  struct Impl;
  int device_;
  std::uint64_t id_;
  std::unique_ptr<Impl> impl_;
};

/// The default stream of `device` (lives for the whole process).
Stream& default_stream(int device);
/// The calling thread's current stream on `device` (the default stream unless a StreamGuard
/// changed it).
Stream& current_stream(int device);
/// Waits for every stream of `device` that has been used (the default and all live ones).
void synchronize_device(int device);

/// RAII: makes `stream` the calling thread's current stream on its device.
class StreamGuard {
 public:
  /// Sets `stream` current on its device for this thread.
  explicit StreamGuard(Stream& stream);
  /// Restores the stream current at construction.
  ~StreamGuard();
  StreamGuard(const StreamGuard&) = delete;
  StreamGuard& operator=(const StreamGuard&) = delete;

 private:
  int device_;
  Stream* previous_;
};

/// A marker in a stream: completes when the stream reaches it and records the time then.
class Event {
 public:
  /// An event that has not been recorded (query() is true, like CUDA's).
  Event();
  /// Queues the marker on `stream` (re-recording replaces the previous marker).
  void record(Stream& stream);
  /// True when the last recorded marker has been reached (or nothing was recorded).
  bool query() const;
  /// Waits for the marker. Throws tb::Error if the event was never recorded.
  void synchronize() const;
  /// Makes `stream` wait for this event before running work queued after this call.
  void block(Stream& stream) const;
  /// Milliseconds from this event to `end`; both must be recorded and completed (tb::Error
  /// names which one is not).
  double elapsed_ms(const Event& end) const;

 private:
  struct State;
  std::shared_ptr<State> state_;
};

}  // namespace tb::openreg
