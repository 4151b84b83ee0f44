// Allocator registry and the 64-byte-aligned CPU allocator.
#include "engine/core/allocator.h"

#include <sys/mman.h>
#include <sys/sysinfo.h>

#include <array>
#include <cstdlib>
#include <limits>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "engine/core/error.h"

namespace tb::core {

namespace {

// Small blocks are recycled through a per-thread cache (power-of-two classes of 64 B to 4 KiB,
// at most kCachePerClass blocks each): tiny tensors are created on every op, and a cached block
// costs a few instructions where aligned_alloc/free cost about as much as the op itself.
constexpr std::size_t kMinClassBytes = 64;
constexpr int kNumClasses = 7;  // 64 B .. 4 KiB
constexpr int kCachePerClass = 32;
// Larger blocks are kept in one shared cache keyed by exact size (a training loop asks for the
// same sizes every step), up to kLargeCacheBytes in all: fresh pages cost a page fault each, which
// on some machines makes a big matmul's output allocation cost more than the matmul.
constexpr std::size_t kLargeGranule = 4096;
constexpr std::int64_t kLargeCacheBytes = std::int64_t{1} << 30;
constexpr std::size_t kHugePage = std::size_t{2} << 20;

// The machine's memory and swap: no single block can be larger.
std::size_t memory_bytes() {
  static const std::size_t bytes = [] {
    struct sysinfo info {};
    if (sysinfo(&info) != 0) return std::numeric_limits<std::size_t>::max();
    return (static_cast<std::size_t>(info.totalram) + static_cast<std::size_t>(info.totalswap)) *
           static_cast<std::size_t>(info.mem_unit);
  }();
  return bytes;
}

int size_class(std::size_t rounded) {
  if (rounded > (kMinClassBytes << (kNumClasses - 1))) return -1;
  int c = 0;
  while ((kMinClassBytes << c) < rounded)
    ++c;
  return c;
}

class CpuAllocator final : public Allocator {
 public:
  DataPtr allocate(std::size_t nbytes, Device device) override {
    TB_INTERNAL_ASSERT(device.is_cpu());
    if (nbytes == 0) return DataPtr(nullptr, nullptr, nullptr, device);
    // aligned_alloc requires a size that is a multiple of the alignment.
    std::size_t rounded = (nbytes + kCpuAlignment - 1) / kCpuAlignment * kCpuAlignment;
    const int cls = size_class(rounded);
    if (cls >= 0) rounded = kMinClassBytes << cls;
    if (cls < 0) rounded = (rounded + kLargeGranule - 1) / kLargeGranule * kLargeGranule;
    // Transparent huge pages for big blocks, as PyTorch's THP_MEM_ALLOC_ENABLE does
    // (c10/core/alloc_cpu.cpp): aligned to 2 MiB and advised, so that each whole 2 MiB of the
    // block takes one page fault instead of 512. First touch of fresh memory was most of the
    // cost of building GPT-2 small's parameters on a virtual machine (1.9 s before, 0.5 s after),
    // and it is paid again for every activation the cache cannot reuse. The size is not rounded
    // up: the advice covers the block only, so its last partial 2 MiB keeps small pages and no
    // memory is taken beyond what was asked.
    const bool huge = cls < 0 && rounded >= kHugePage;
    void* p = cls >= 0 ? cache().pop(cls) : large_pop(rounded);
    if (p != nullptr) {
      cached_.fetch_sub(static_cast<std::int64_t>(rounded), std::memory_order_relaxed);
    } else if (rounded > memory_bytes()) {
      // More than the machine's memory and swap: refused here, not left to the system (a
      // sanitizer's allocator ends the process on such a request; overcommit fails it later).
      p = nullptr;
    } else if (huge) {
      if (posix_memalign(&p, kHugePage, rounded) != 0) p = nullptr;
#ifdef MADV_HUGEPAGE
      // Advice only: with THP off ("never") the kernel ignores it and the block has small pages.
      if (p != nullptr) (void)madvise(p, rounded, MADV_HUGEPAGE);
#endif
    } else {
      p = std::aligned_alloc(kCpuAlignment, rounded);
    }
    if (p == nullptr) {
      throw Error(tb::detail::str_cat("[allocator] out of memory on cpu: failed to allocate ",
                                      nbytes, " bytes (", static_cast<double>(nbytes) / (1 << 20),
                                      " MiB)"));
    }
    const auto now =
        allocated_.fetch_add(static_cast<std::int64_t>(rounded), std::memory_order_relaxed) +
        static_cast<std::int64_t>(rounded);
    num_allocs_.fetch_add(1, std::memory_order_relaxed);
    auto peak = peak_.load(std::memory_order_relaxed);
    while (now > peak && !peak_.compare_exchange_weak(peak, now, std::memory_order_relaxed)) {
    }
    // The rounded size travels in ctx so the deleter can keep the statistics exact.
    return DataPtr(p, reinterpret_cast<void*>(rounded), &CpuAllocator::free, device);
  }

  AllocatorStats stats(Device) const override {
    AllocatorStats s;
    s.allocated = allocated_.load();
    s.peak_allocated = peak_.load();
    s.reserved = s.allocated + cached_.load();
    s.num_allocs = num_allocs_.load();
    return s;
  }

  void reset_peak(Device) override {
    peak_.store(allocated_.load());
  }

  static void free(void* ctx, void* data) noexcept {
    const auto rounded = reinterpret_cast<std::size_t>(ctx);
    CpuAllocator& a = instance();
    a.allocated_.fetch_sub(static_cast<std::int64_t>(rounded), std::memory_order_relaxed);
    const int cls = size_class(rounded);
    if (cls >= 0 && (kMinClassBytes << cls) == rounded && a.cache().push(cls, data)) {
      a.cached_.fetch_add(static_cast<std::int64_t>(rounded), std::memory_order_relaxed);
      return;
    }
    if (cls < 0 && a.large_push(rounded, data)) return;
    std::free(data);
  }

  void empty_cache() override {
    std::lock_guard lock(large_mutex_);
    for (auto& [size, blocks] : large_) {
      for (void* p : blocks)
        std::free(p);
      cached_.fetch_sub(static_cast<std::int64_t>(size * blocks.size()));
    }
    large_.clear();
  }

  static CpuAllocator& instance() {
    // Never destroyed: tensors in static objects may be freed during static destruction, and
    // the cached blocks stay reachable (not leaks) until the process ends.
    static CpuAllocator* a = new CpuAllocator();
    return *a;
  }

 private:
  // Per-thread free lists; blocks left at thread exit go back to the system.
  struct ThreadCache {
    std::array<std::array<void*, kCachePerClass>, kNumClasses> blocks{};
    std::array<int, kNumClasses> count{};
    void* pop(int cls) noexcept { return count[cls] > 0 ? blocks[cls][--count[cls]] : nullptr; }
    bool push(int cls, void* p) noexcept {
      if (count[cls] == kCachePerClass) return false;
      blocks[cls][count[cls]++] = p;
      return true;
    }
    ~ThreadCache() {
      for (int c = 0; c < kNumClasses; ++c) {
        for (int i = 0; i < count[c]; ++i)
          std::free(blocks[c][i]);
        instance().cached_.fetch_sub(static_cast<std::int64_t>(kMinClassBytes << c) * count[c]);
      }
    }
  };
  void* large_pop(std::size_t size) {
    std::lock_guard lock(large_mutex_);
    auto it = large_.find(size);
    if (it == large_.end() || it->second.empty()) return nullptr;
    void* p = it->second.back();
    it->second.pop_back();
    return p;
  }

  bool large_push(std::size_t size, void* p) noexcept {
    std::lock_guard lock(large_mutex_);
    if (cached_.load(std::memory_order_relaxed) + static_cast<std::int64_t>(size) >
        kLargeCacheBytes) {
      return false;
    }
    try {
      large_[size].push_back(p);
    } catch (...) {
      return false;
    }
    cached_.fetch_add(static_cast<std::int64_t>(size), std::memory_order_relaxed);
    return true;
  }

  static ThreadCache& cache() noexcept {
    thread_local ThreadCache c;
    return c;
  }

  std::mutex large_mutex_;
  std::unordered_map<std::size_t, std::vector<void*>> large_;
  std::atomic<std::int64_t> allocated_{0};
  std::atomic<std::int64_t> peak_{0};
  std::atomic<std::int64_t> cached_{0};
  std::atomic<std::int64_t> num_allocs_{0};
};

struct Registry {
  std::mutex mutex;
  std::array<std::atomic<Allocator*>, kNumDeviceTypes> allocators{};
};

std::atomic<void (*)()> backend_loader{nullptr};

Registry& registry() {
  static Registry r;
  return r;
}

}  // namespace

Allocator& cpu_allocator() {
  return CpuAllocator::instance();
}

void register_allocator(DeviceType type, Allocator* allocator) {
  TB_CHECK(allocator != nullptr, "[allocator] cannot register a null allocator for ",
           device_type_name(type));
  auto& r = registry();
  std::lock_guard lock(r.mutex);
  auto& slot = r.allocators[static_cast<int>(type)];
  TB_CHECK(slot.load() == nullptr || slot.load() == allocator, "[allocator] an allocator for ",
           device_type_name(type), " is already registered");
  slot.store(allocator);
}

void set_backend_loader(void (*loader)()) {
  backend_loader.store(loader);
}

void load_backends() {
  if (auto* load = backend_loader.load()) load();
}

namespace {
std::array<std::atomic<DeviceProbe>, kNumDeviceTypes> g_probes{};
}  // namespace

void register_device_probe(DeviceType type, DeviceProbe probe) {
  TB_CHECK(type != DeviceType::CPU && probe != nullptr,
           "[device] a probe is registered for a non-CPU device type, and cannot be null");
  g_probes[static_cast<std::size_t>(type)].store(probe);
}

std::string device_unavailable_reason(Device device) {
  if (device.is_cpu()) return "";
  load_backends();
  const DeviceProbe probe = g_probes[static_cast<std::size_t>(device.type())].load();
  if (probe == nullptr) {
    return tb::detail::str_cat("the ", device_type_name(device.type()),
                               " backend is not compiled into this build");
  }
  return probe(device.index());
}

namespace {
std::array<std::atomic<DeviceTimerFactory>, kNumDeviceTypes> g_timers{};
}  // namespace

void register_device_timer(DeviceType type, DeviceTimerFactory factory) {
  TB_CHECK(type != DeviceType::CPU && factory != nullptr,
           "[device] a timer is registered for a non-CPU device type, and cannot be null");
  g_timers[static_cast<std::size_t>(type)].store(factory);
}

std::unique_ptr<DeviceTimer> make_device_timer(Device device) {
  if (device.is_cpu()) return nullptr;
  load_backends();
  const DeviceTimerFactory f = g_timers[static_cast<std::size_t>(device.type())].load();
  return f != nullptr ? f(device) : nullptr;
}

Allocator& get_allocator(DeviceType type) {
  if (type == DeviceType::CPU) return cpu_allocator();
  Allocator* a = registry().allocators[static_cast<int>(type)].load();
  if (a == nullptr) {
    if (auto* load = backend_loader.load()) {
      load();  // registers every compiled-in backend once
      a = registry().allocators[static_cast<int>(type)].load();
    }
  }
  if (a == nullptr) {
    throw NotImplementedError(
        tb::detail::str_cat("[allocator] no allocator for device type '", device_type_name(type),
                            "': its backend is not compiled in or not loaded"));
  }
  return *a;
}

}  // namespace tb::core
