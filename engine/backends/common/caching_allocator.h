// A caching device allocator (the design of PyTorch's CUDACachingAllocator, without its graph
// and expandable-segment parts): memory is taken from the device in segments, cut into blocks,
// and freed blocks are kept for reuse — a training step allocates the same sizes every time, so
// after the first step almost nothing reaches the device's (slow, synchronising) allocator.
//
// Device-agnostic: the backend supplies raw segment allocation (cudaMalloc/cudaFree for CUDA);
// the logic is tested on the CPU with a fake device (tests/engine/caching_allocator_test.cpp).
//
// Rules (as PyTorch's):
// - sizes round up to 512 bytes;
// - requests up to 1 MiB come from the small pool, cut from 2 MiB segments; larger ones from the
//   large pool: below 10 MiB from 20 MiB segments, above rounded up to 2 MiB, one per segment;
// - best fit among the free blocks of the same pool and stream; a block is split when the rest
//   is worth keeping (small pool: >= 512 bytes, large: > 1 MiB);
// - a freed block merges with free neighbours of its segment;
// - when the device is out of memory, every unused cached segment is released and the request
//   retried once before failing;
// - empty_cache() releases every segment that is entirely free.
// Blocks belong to the stream they were allocated on and are reused only on it (a block freed on
// one stream may still be read by work queued there).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <unordered_map>

#include "engine/core/allocator.h"

namespace tb::backends {

/// Raw device memory for the caching allocator: allocate returns null when the device is out of
/// memory (it must not throw for that), free never fails.
struct RawDeviceMemory {
  std::function<void*(int device, std::size_t bytes)> allocate;
  std::function<void(int device, void* ptr)> free;
};

/// The caching allocator of one device type (all its devices). Thread-safe.
class CachingAllocator {
 public:
  /// Size classes (public for tests and docs).
  static constexpr std::size_t kMinBlock = 512;
  static constexpr std::size_t kSmallRequest = std::size_t{1} << 20;  ///< <= this: small pool
  static constexpr std::size_t kSmallSegment = std::size_t{2} << 20;
  static constexpr std::size_t kLargeRequest = std::size_t{10} << 20;  ///< < this: 20 MiB segment
  static constexpr std::size_t kLargeSegment = std::size_t{20} << 20;
  static constexpr std::size_t kRoundLarge = std::size_t{2} << 20;

  /// `name` prefixes error messages ("cuda"); `raw` gets and returns whole segments.
  CachingAllocator(std::string name, RawDeviceMemory raw);
  /// Releases every segment (blocks still in use are leaked to the device, never freed twice).
  ~CachingAllocator();
  CachingAllocator(const CachingAllocator&) = delete;
  CachingAllocator& operator=(const CachingAllocator&) = delete;

  /// A block of at least `bytes` (> 0) on `device` for work on `stream` (0 = the default
  /// stream). Throws tb::Error "[<name>] out of memory on <name>:<device> ..." with the
  /// allocator's figures when even a retry after releasing the cache fails.
  void* malloc(int device, std::size_t bytes, std::uintptr_t stream = 0);
  /// Returns a block from malloc() to the cache. Unknown pointers are ignored (noexcept).
  void free(void* ptr) noexcept;
  /// Releases every entirely free segment of every device to the device.
  void empty_cache();
  /// allocated (bytes in blocks in use), reserved (bytes in segments), peak, allocations.
  core::AllocatorStats stats(int device) const;
  /// Peak := current allocation for `device`.
  void reset_peak(int device);
  /// Number of segments `device` holds (tests).
  std::size_t segment_count(int device) const;

  /// The rounded size a request of `bytes` takes (tests).
  static std::size_t round_size(std::size_t bytes);
  /// The segment size a request of (rounded) `size` gets when no cached block fits.
  static std::size_t segment_size(std::size_t size);

 private:
  struct Block;
  struct BlockOrder {
    bool operator()(const Block* a, const Block* b) const;
  };
  using Pool = std::set<Block*, BlockOrder>;
  struct DeviceState {
    Pool small;
    Pool large;
    std::int64_t allocated = 0;
    std::int64_t reserved = 0;
    std::int64_t peak = 0;
    std::int64_t num_allocs = 0;
    std::size_t segments = 0;
  };

  Block* take_free_block(DeviceState& d, Pool& pool, std::size_t size, std::uintptr_t stream);
  Block* new_segment(int device, DeviceState& d, bool small, std::size_t size,
                     std::uintptr_t stream);
  void release_free_segments(int device, DeviceState& d);
  DeviceState& state(int device);

  std::string name_;
  RawDeviceMemory raw_;
  mutable std::mutex mutex_;
  std::map<int, DeviceState> devices_;
  std::unordered_map<void*, Block*> live_;  // blocks in use, by address
};

}  // namespace tb::backends
