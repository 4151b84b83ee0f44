// Thread affinity through pthread_{get,set}affinity_np with dynamically sized masks (the
// cpu_set_t macros are avoided: they do old-style casts and stop at 1024 CPUs).
#include "engine/numa/affinity.h"

#include <pthread.h>
#include <sched.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "engine/core/error.h"

namespace tb::numa {

namespace {

constexpr std::size_t kBitsPerWord = sizeof(unsigned long) * 8;

using Mask = std::vector<unsigned long>;

cpu_set_t* as_cpu_set(Mask& m) {
  return reinterpret_cast<cpu_set_t*>(m.data());
}

std::size_t bytes(const Mask& m) {
  return m.size() * sizeof(unsigned long);
}

}  // namespace

CpuSet current_thread_affinity() {
  // Grow the mask until it covers the kernel's nr_cpu_ids (EINVAL means "too small").
  for (std::size_t words = 1024 / kBitsPerWord; words <= (1U << 20) / kBitsPerWord; words *= 2) {
    Mask m(words, 0UL);
    const int rc = pthread_getaffinity_np(pthread_self(), bytes(m), as_cpu_set(m));
    if (rc == EINVAL) continue;
    TB_CHECK(rc == 0, "[binding] cannot read the thread's CPU affinity: ", std::strerror(rc));
    std::vector<int> cpus;
    for (std::size_t w = 0; w < m.size(); ++w) {
      for (std::size_t b = 0; b < kBitsPerWord; ++b) {
        if ((m[w] >> b) & 1UL) cpus.push_back(static_cast<int>(w * kBitsPerWord + b));
      }
    }
    return CpuSet::from_vector(std::move(cpus));
  }
  TB_CHECK(false, "[binding] cannot read the thread's CPU affinity: the mask is too large");
  return {};
}

void set_current_thread_affinity(const CpuSet& cpus) {
  TB_CHECK(!cpus.empty(), "[binding] must bind to a non-empty set of CPU indices");
  const auto top = static_cast<std::size_t>(cpus.max());
  Mask m(top / kBitsPerWord + 1, 0UL);
  for (int c : cpus) {
    const auto u = static_cast<std::size_t>(c);
    m[u / kBitsPerWord] |= 1UL << (u % kBitsPerWord);
  }
  const int rc = pthread_setaffinity_np(pthread_self(), bytes(m), as_cpu_set(m));
  TB_CHECK(rc == 0, "[binding] cannot set the thread's CPU affinity to '", cpus.to_string(),
           "': ", std::strerror(rc), " (are these CPUs online and allowed for this process?)");
}

ScopedAffinity::ScopedAffinity(const CpuSet& cpus) : saved_(current_thread_affinity()) {
  set_current_thread_affinity(cpus);
}

ScopedAffinity::~ScopedAffinity() {
  try {
    set_current_thread_affinity(saved_);
  } catch (...) {  // NOLINT(bugprone-empty-catch): a destructor cannot report it
  }
}

}  // namespace tb::numa
