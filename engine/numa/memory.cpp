// Memory policy (set_mempolicy/get_mempolicy) and page placement (numa_move_pages) via libnuma.
#include "engine/numa/memory.h"

#include <numa.h>
#include <numaif.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <map>

#include "engine/core/error.h"

namespace tb::numa {

namespace {

constexpr std::size_t kBits = sizeof(unsigned long) * 8;

// Words needed for a node mask the kernel accepts (numa_max_possible_node() + 1 bits).
std::size_t mask_words() {
  const int max_node = numa_max_possible_node();
  return static_cast<std::size_t>(max_node < 0 ? 0 : max_node) / kBits + 1;
}

void require_numa() {
  TB_CHECK(numa_supported(),
           "[numa] NUMA memory policies are not available here (numa_available() < 0: the kernel "
           "lacks NUMA support or the container forbids get_mempolicy)");
}

}  // namespace

bool numa_supported() {
  return numa_available() >= 0;
}

std::string node_list(const std::vector<int>& nodes) {
  std::string list;
  for (int n : nodes) {
    // Appends, not "," + string: GCC 12 -O3 reports a false -Wrestrict on that (PR 105329).
    if (!list.empty()) list += ',';
    list += std::to_string(n);
  }
  return list;
}

void set_thread_memory_policy(const std::vector<int>& nodes, MemoryPolicy policy) {
  TB_CHECK(!nodes.empty(), "[numa] a memory policy needs at least one NUMA node");
  require_numa();
  std::vector<unsigned long> mask(mask_words(), 0UL);
  for (int n : nodes) {
    TB_CHECK(n >= 0 && static_cast<std::size_t>(n) < mask.size() * kBits, "[numa] NUMA node ", n,
             " is out of range (0..", numa_max_possible_node(), ")");
    mask[static_cast<std::size_t>(n) / kBits] |= 1UL << (static_cast<std::size_t>(n) % kBits);
  }
  int mode = MPOL_BIND;
  if (policy == MemoryPolicy::kPreferred)
    mode = nodes.size() == 1 ? MPOL_PREFERRED : MPOL_PREFERRED_MANY;
  if (set_mempolicy(mode, mask.data(), mask.size() * kBits + 1) != 0) {
    const int err = errno;
    const std::string list = node_list(nodes);
    TB_CHECK(false, "[numa] cannot set the memory policy ",
             policy == MemoryPolicy::kBind ? "bind" : "preferred", " to nodes '", list,
             "': ", std::strerror(err),
             mode == MPOL_PREFERRED_MANY ? " (preferring several nodes needs Linux 5.15+)" : "");
  }
}

void reset_thread_memory_policy() {
  if (numa_supported()) set_mempolicy(MPOL_DEFAULT, nullptr, 0);
}

ScopedMemoryPolicy::ScopedMemoryPolicy(const std::vector<int>& nodes, MemoryPolicy policy) {
  require_numa();
  mask_.assign(mask_words(), 0UL);
  TB_CHECK(get_mempolicy(&mode_, mask_.data(), mask_.size() * kBits, nullptr, 0) == 0,
           "[numa] cannot read the thread's memory policy: ", std::strerror(errno));
  set_thread_memory_policy(nodes, policy);
}

ScopedMemoryPolicy::~ScopedMemoryPolicy() {
  // mode_ may carry MPOL_F_STATIC_NODES/RELATIVE_NODES flags; set_mempolicy accepts them.
  const bool empty_mask = mode_ == MPOL_DEFAULT || mode_ == MPOL_LOCAL;
  set_mempolicy(mode_, empty_mask ? nullptr : mask_.data(),
                empty_mask ? 0 : mask_.size() * kBits + 1);
}

PagePlacement page_placement(const void* data, std::size_t bytes) {
  PagePlacement r;
  const long ps = sysconf(_SC_PAGESIZE);
  r.page_size = ps > 0 ? static_cast<std::size_t>(ps) : 4096;
  if (bytes == 0 || data == nullptr) return r;
  require_numa();
  const auto begin = reinterpret_cast<std::uintptr_t>(data) / r.page_size * r.page_size;
  const auto end = reinterpret_cast<std::uintptr_t>(data) + bytes;
  r.pages = (end - begin + r.page_size - 1) / r.page_size;
  std::map<int, std::size_t> per_node;
  constexpr std::size_t kBatch = 4096;  // pages per query
  std::vector<void*> pages;
  std::vector<int> status;
  for (std::size_t first = 0; first < r.pages; first += kBatch) {
    const std::size_t n = std::min(kBatch, r.pages - first);
    pages.resize(n);
    status.assign(n, 0);
    for (std::size_t i = 0; i < n; ++i) {
      pages[i] = reinterpret_cast<void*>(begin + (first + i) * r.page_size);
    }
    const long rc =
        numa_move_pages(0, static_cast<unsigned long>(n), pages.data(), nullptr, status.data(), 0);
    TB_CHECK(rc == 0, "[numa] cannot query page placement (move_pages): ", std::strerror(errno));
    for (int s : status) {
      if (s >= 0) {
        ++per_node[s];
      } else if (s == -ENOENT) {
        ++r.not_present;
      } else {
        ++r.unknown;
      }
    }
  }
  for (const auto& [node, count] : per_node) {
    r.nodes.push_back({node, count, static_cast<double>(count) / static_cast<double>(r.pages)});
  }
  return r;
}

}  // namespace tb::numa
