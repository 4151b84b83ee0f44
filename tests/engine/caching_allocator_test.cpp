// The caching device allocator (engine/backends/common), on a fake device whose "memory" is host
// memory with a capacity: size classes, splitting and merging, reuse per stream, statistics,
// empty_cache, and the release-and-retry on out-of-memory.
#include "engine/backends/common/caching_allocator.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <map>
#include <vector>

#include "tests/engine/test_util.h"

namespace {

using tb::backends::CachingAllocator;
using tb::test::error_of;
using testing::HasSubstr;

constexpr std::size_t MiB = std::size_t{1} << 20;

// A device with `capacity` bytes that records every raw call.
struct FakeDevice {
  std::size_t capacity;
  std::size_t used = 0;
  int raw_allocs = 0;
  int raw_frees = 0;
  std::map<void*, std::size_t> live;
  tb::backends::RawDeviceMemory raw() {
    return {[this](int, std::size_t bytes) -> void* {
              if (used + bytes > capacity) return nullptr;
              void* p = std::malloc(bytes);
              used += bytes;
              live[p] = bytes;
              ++raw_allocs;
              return p;
            },
            [this](int, void* p) {
              used -= live.at(p);
              live.erase(p);
              std::free(p);
              ++raw_frees;
            }};
  }
};

TEST(CachingAllocator, SizeClasses) {
  EXPECT_EQ(CachingAllocator::round_size(1), 512u);
  EXPECT_EQ(CachingAllocator::round_size(512), 512u);
  EXPECT_EQ(CachingAllocator::round_size(513), 1024u);
  EXPECT_EQ(CachingAllocator::segment_size(512), 2 * MiB);
  EXPECT_EQ(CachingAllocator::segment_size(MiB), 2 * MiB);
  EXPECT_EQ(CachingAllocator::segment_size(MiB + 512), 20 * MiB);
  EXPECT_EQ(CachingAllocator::segment_size(10 * MiB), 10 * MiB);
  EXPECT_EQ(CachingAllocator::segment_size(10 * MiB + 1), 12 * MiB);
}

TEST(CachingAllocator, SmallBlocksShareASegmentAndAreReused) {
  FakeDevice dev{64 * MiB};
  CachingAllocator a("fake", dev.raw());
  void* p = a.malloc(0, 1000);
  void* q = a.malloc(0, 3000);
  EXPECT_EQ(dev.raw_allocs, 1);  // one 2 MiB segment serves both
  EXPECT_EQ(static_cast<char*>(q) - static_cast<char*>(p), 1024);
  auto s = a.stats(0);
  EXPECT_EQ(s.allocated, 1024 + 3072);
  EXPECT_EQ(s.reserved, static_cast<std::int64_t>(2 * MiB));
  EXPECT_EQ(s.num_allocs, 2);
  a.free(p);
  EXPECT_EQ(a.stats(0).allocated, 3072);
  // The freed block is the best fit for the next request of its size: same address, no new
  // device allocation.
  EXPECT_EQ(a.malloc(0, 900), p);
  EXPECT_EQ(dev.raw_allocs, 1);
  EXPECT_EQ(a.stats(0).peak_allocated, 1024 + 3072);
  a.free(p);
  a.free(q);
  a.empty_cache();
  EXPECT_EQ(dev.used, 0u);
}

TEST(CachingAllocator, FreedNeighboursMergeAndEmptyCacheReleasesWholeSegments) {
  FakeDevice dev{64 * MiB};
  CachingAllocator a("fake", dev.raw());
  std::vector<void*> ps;
  for (int i = 0; i < 4; ++i)
    ps.push_back(a.malloc(0, 256 * 1024));
  EXPECT_EQ(a.segment_count(0), 1u);
  for (void* p : {ps[1], ps[0], ps[3], ps[2]})  // out of order: merging both ways
    a.free(p);
  EXPECT_EQ(a.stats(0).allocated, 0);
  // Merged back into one free 2 MiB block: a 1 MiB request fits without a new segment, at the
  // segment's start.
  void* big = a.malloc(0, MiB);
  EXPECT_EQ(big, ps[0]);
  EXPECT_EQ(dev.raw_allocs, 1);
  a.empty_cache();  // the segment is in use: kept
  EXPECT_EQ(a.segment_count(0), 1u);
  a.free(big);
  a.empty_cache();
  EXPECT_EQ(a.segment_count(0), 0u);
  EXPECT_EQ(a.stats(0).reserved, 0);
  EXPECT_EQ(dev.raw_frees, 1);
  EXPECT_EQ(dev.used, 0u);
}

TEST(CachingAllocator, LargeRequestsAndStreamsAndDevices) {
  FakeDevice dev{256 * MiB};
  CachingAllocator a("fake", dev.raw());
  void* l = a.malloc(0, 3 * MiB);  // a 20 MiB segment, split (17 MiB left is worth keeping)
  EXPECT_EQ(a.stats(0).reserved, static_cast<std::int64_t>(20 * MiB));
  void* m = a.malloc(0, 5 * MiB);  // from the rest of it
  EXPECT_EQ(static_cast<char*>(m) - static_cast<char*>(l), static_cast<std::ptrdiff_t>(3 * MiB));
  EXPECT_EQ(dev.raw_allocs, 1);
  void* huge = a.malloc(0, 30 * MiB + 1);  // its own segment, rounded to 2 MiB
  EXPECT_EQ(a.stats(0).reserved, static_cast<std::int64_t>(20 * MiB + 32 * MiB));
  a.free(huge);
  // A block freed on stream 0 is not reused for stream 7 (work on stream 0 may still read it).
  void* s7 = a.malloc(0, 30 * MiB + 1, 7);
  EXPECT_NE(s7, huge);
  EXPECT_EQ(dev.raw_allocs, 3);
  // Devices keep separate books.
  void* d1 = a.malloc(1, 1000);
  EXPECT_EQ(a.stats(1).allocated, 1024);
  EXPECT_EQ(a.stats(0).allocated, static_cast<std::int64_t>(8 * MiB + 30 * MiB + 512));
  a.free(d1);
  a.reset_peak(1);
  EXPECT_EQ(a.stats(1).peak_allocated, 0);
  a.free(l);
  a.free(m);
  a.free(s7);
  a.free(reinterpret_cast<void*>(0x1234));  // unknown: ignored
  a.empty_cache();
  EXPECT_EQ(dev.used, 0u);  // every segment went back to the device
  EXPECT_EQ(dev.raw_frees, dev.raw_allocs);
}

TEST(CachingAllocator, OutOfMemoryReleasesTheCacheRetriesThenNamesTheFigures) {
  FakeDevice dev{24 * MiB};
  CachingAllocator a("fake", dev.raw());
  void* p = a.malloc(0, 3 * MiB, 1);  // a 20 MiB segment for stream 1
  a.free(p);                          // cached, 20 MiB held
  // 12 MiB on stream 0 needs a new 12 MiB segment: only 4 MiB are left until the cache is
  // released.
  void* q = a.malloc(0, 12 * MiB);
  EXPECT_NE(q, nullptr);
  EXPECT_EQ(dev.raw_frees, 1);
  EXPECT_EQ(a.stats(0).reserved, static_cast<std::int64_t>(12 * MiB));
  EXPECT_THAT(error_of([&] { a.malloc(0, 16 * MiB); }),
              HasSubstr("[fake] out of memory on fake:0: cannot allocate 16777216 bytes (in use "
                        "12582912 bytes"));
  a.free(q);
  EXPECT_THAT(error_of([&] { a.malloc(0, 0); }), HasSubstr("allocation of 0 bytes"));
  a.empty_cache();
  EXPECT_EQ(dev.used, 0u);
}

}  // namespace
