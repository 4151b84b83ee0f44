// The caching device allocator. See caching_allocator.h for the rules.
#include "engine/backends/common/caching_allocator.h"

#include <algorithm>
#include <vector>

#include "engine/core/error.h"

namespace tb::backends {

struct CachingAllocator::Block {
  int device = 0;
  std::uintptr_t stream = 0;
  bool small = false;
  std::size_t size = 0;
  char* ptr = nullptr;
  bool allocated = false;
  Block* prev = nullptr;  // neighbours inside the segment (null at its ends)
  Block* next = nullptr;
};

bool CachingAllocator::BlockOrder::operator()(const Block* a, const Block* b) const {
  if (a->stream != b->stream) return a->stream < b->stream;
  if (a->size != b->size) return a->size < b->size;
  return std::less<const char*>()(a->ptr, b->ptr);
}

CachingAllocator::CachingAllocator(std::string name, RawDeviceMemory raw)
    : name_(std::move(name)), raw_(std::move(raw)) {}

CachingAllocator::~CachingAllocator() {
  std::lock_guard lock(mutex_);
  for (auto& [device, d] : devices_)
    release_free_segments(device, d);
}

std::size_t CachingAllocator::round_size(std::size_t bytes) {
  if (bytes < kMinBlock) return kMinBlock;
  return (bytes + kMinBlock - 1) / kMinBlock * kMinBlock;
}

std::size_t CachingAllocator::segment_size(std::size_t size) {
  if (size <= kSmallRequest) return kSmallSegment;
  if (size < kLargeRequest) return kLargeSegment;
  return (size + kRoundLarge - 1) / kRoundLarge * kRoundLarge;
}

CachingAllocator::DeviceState& CachingAllocator::state(int device) {
  return devices_[device];
}

CachingAllocator::Block* CachingAllocator::take_free_block(DeviceState&, Pool& pool,
                                                           std::size_t size,
                                                           std::uintptr_t stream) {
  Block key;
  key.stream = stream;
  key.size = size;
  key.ptr = nullptr;
  const auto it = pool.lower_bound(&key);
  if (it == pool.end() || (*it)->stream != stream) return nullptr;
  Block* b = *it;
  pool.erase(it);
  return b;
}

CachingAllocator::Block* CachingAllocator::new_segment(int device, DeviceState& d, bool small,
                                                       std::size_t size, std::uintptr_t stream) {
  const std::size_t seg = segment_size(size);
  void* p = raw_.allocate(device, seg);
  if (p == nullptr) return nullptr;
  d.reserved += static_cast<std::int64_t>(seg);
  ++d.segments;
  auto* b = new Block();
  b->device = device;
  b->stream = stream;
  b->small = small;
  b->size = seg;
  b->ptr = static_cast<char*>(p);
  return b;
}

void CachingAllocator::release_free_segments(int device, DeviceState& d) {
  for (Pool* pool : {&d.small, &d.large}) {
    std::vector<Block*> whole;
    for (Block* b : *pool)
      if (b->prev == nullptr && b->next == nullptr) whole.push_back(b);
    for (Block* b : whole) {
      pool->erase(b);
      raw_.free(device, b->ptr);
      d.reserved -= static_cast<std::int64_t>(b->size);
      --d.segments;
      delete b;
    }
  }
}

void* CachingAllocator::malloc(int device, std::size_t bytes, std::uintptr_t stream) {
  TB_CHECK_T(ValueError, bytes > 0, "[", name_, "] allocation of 0 bytes");
  const std::size_t size = round_size(bytes);
  const bool small = size <= kSmallRequest;
  std::lock_guard lock(mutex_);
  DeviceState& d = state(device);
  Pool& pool = small ? d.small : d.large;
  Block* b = take_free_block(d, pool, size, stream);
  if (b == nullptr) b = new_segment(device, d, small, size, stream);
  if (b == nullptr) {
    // Out of memory: give the cache back to the device and try once more.
    const std::int64_t cached = d.reserved - d.allocated;
    release_free_segments(device, d);
    b = new_segment(device, d, small, size, stream);
    if (b == nullptr) {
      throw Error(tb::detail::str_cat(
          "[", name_, "] out of memory on ", name_, ":", device, ": cannot allocate ", bytes,
          " bytes (in use ", d.allocated, " bytes, held by the cache ", d.reserved,
          " bytes; the device refused a ", segment_size(size), "-byte segment even after ", cached,
          " cached bytes were released)"));
    }
  }
  const std::size_t rest = b->size - size;
  if ((small && rest >= kMinBlock) || (!small && rest > kSmallRequest)) {
    auto* r = new Block();
    r->device = device;
    r->stream = stream;
    r->small = small;
    r->size = rest;
    r->ptr = b->ptr + size;
    r->prev = b;
    r->next = b->next;
    if (b->next != nullptr) b->next->prev = r;
    b->next = r;
    b->size = size;
    pool.insert(r);
  }
  b->allocated = true;
  live_.emplace(b->ptr, b);
  d.allocated += static_cast<std::int64_t>(b->size);
  d.peak = std::max(d.peak, d.allocated);
  ++d.num_allocs;
  return b->ptr;
}

void CachingAllocator::free(void* ptr) noexcept {
  if (ptr == nullptr) return;
  std::lock_guard lock(mutex_);
  const auto it = live_.find(ptr);
  if (it == live_.end()) return;
  Block* b = it->second;
  live_.erase(it);
  DeviceState& d = state(b->device);
  Pool& pool = b->small ? d.small : d.large;
  b->allocated = false;
  d.allocated -= static_cast<std::int64_t>(b->size);
  // Merge with free neighbours of the same segment (they are in the pool: take them out first,
  // their order key changes).
  if (Block* n = b->next; n != nullptr && !n->allocated) {
    pool.erase(n);
    b->size += n->size;
    b->next = n->next;
    if (b->next != nullptr) b->next->prev = b;
    delete n;
  }
  if (Block* p = b->prev; p != nullptr && !p->allocated) {
    pool.erase(p);
    p->size += b->size;
    p->next = b->next;
    if (p->next != nullptr) p->next->prev = p;
    delete b;
    b = p;
  }
  pool.insert(b);
}

void CachingAllocator::empty_cache() {
  std::lock_guard lock(mutex_);
  for (auto& [device, d] : devices_)
    release_free_segments(device, d);
}

core::AllocatorStats CachingAllocator::stats(int device) const {
  std::lock_guard lock(mutex_);
  core::AllocatorStats s;
  const auto it = devices_.find(device);
  if (it == devices_.end()) return s;
  s.allocated = it->second.allocated;
  s.peak_allocated = it->second.peak;
  s.reserved = it->second.reserved;
  s.num_allocs = it->second.num_allocs;
  return s;
}

void CachingAllocator::reset_peak(int device) {
  std::lock_guard lock(mutex_);
  DeviceState& d = state(device);
  d.peak = d.allocated;
}

std::size_t CachingAllocator::segment_count(int device) const {
  std::lock_guard lock(mutex_);
  const auto it = devices_.find(device);
  return it == devices_.end() ? 0 : it->second.segments;
}

}  // namespace tb::backends
