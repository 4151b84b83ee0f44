// Allocator registry and the 64-byte-aligned CPU allocator.
#include "engine/core/allocator.h"

#include <array>
#include <cstdlib>
#include <mutex>

#include "engine/core/error.h"

namespace tb::core {

namespace {

class CpuAllocator final : public Allocator {
 public:
  DataPtr allocate(std::size_t nbytes, Device device) override {
    TB_INTERNAL_ASSERT(device.is_cpu());
    if (nbytes == 0) return DataPtr(nullptr, nullptr, nullptr, device);
    // aligned_alloc requires a size that is a multiple of the alignment.
    const std::size_t rounded = (nbytes + kCpuAlignment - 1) / kCpuAlignment * kCpuAlignment;
    void* p = std::aligned_alloc(kCpuAlignment, rounded);
    if (p == nullptr) {
      throw Error(tb::detail::str_cat("[allocator] out of memory on cpu: failed to allocate ",
                                      nbytes, " bytes (", static_cast<double>(nbytes) / (1 << 20),
                                      " MiB)"));
    }
    const auto now = allocated_.fetch_add(static_cast<std::int64_t>(rounded)) +
                     static_cast<std::int64_t>(rounded);
    num_allocs_.fetch_add(1, std::memory_order_relaxed);
    auto peak = peak_.load(std::memory_order_relaxed);
    while (now > peak && !peak_.compare_exchange_weak(peak, now)) {
    }
    // The rounded size travels in ctx so the deleter can keep the statistics exact.
    return DataPtr(p, reinterpret_cast<void*>(rounded), &CpuAllocator::free, device);
  }

  AllocatorStats stats(Device) const override {
    AllocatorStats s;
    s.allocated = allocated_.load();
    s.peak_allocated = peak_.load();
    s.reserved = s.allocated;
    s.num_allocs = num_allocs_.load();
    return s;
  }

  void reset_peak(Device) override { peak_.store(allocated_.load()); }

  static void free(void* ctx, void* data) noexcept {
    instance().allocated_.fetch_sub(static_cast<std::int64_t>(reinterpret_cast<std::size_t>(ctx)));
    std::free(data);
  }

  static CpuAllocator& instance() {
    static CpuAllocator a;
    return a;
  }

 private:
  std::atomic<std::int64_t> allocated_{0};
  std::atomic<std::int64_t> peak_{0};
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
