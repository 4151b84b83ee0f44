// NUMA memory through libnuma: the calling thread's memory policy (local to the bound nodes)
// and a page-placement report (on which node each page of a buffer lives).
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace tb::numa {

/// Whether the kernel supports NUMA memory policies here (libnuma's numa_available() >= 0).
bool numa_supported();

/// How strictly the calling thread's allocations stay on the given nodes.
enum class MemoryPolicy {
  kPreferred,  ///< allocate there, fall back to other nodes when full (numactl --preferred)
  kBind,       ///< allocate only there (numactl --membind)
};

/// Sets the calling thread's memory policy for new pages to `nodes` (os indices). kPreferred
/// with several nodes uses MPOL_PREFERRED_MANY (Linux 5.15+). Throws tb::ValueError
/// "[numa] ..." when `nodes` is empty, NUMA is unsupported, or the kernel rejects the policy.
void set_thread_memory_policy(const std::vector<int>& nodes, MemoryPolicy policy);

/// Node indices as messages list them: "0,2,3".
std::string node_list(const std::vector<int>& nodes);

/// Restores the default policy (allocate on the node of the CPU that touches the page).
void reset_thread_memory_policy();

/// RAII: saves the calling thread's memory policy, sets a new one, restores it on destruction.
class ScopedMemoryPolicy {
 public:
  /// Throws (and changes nothing) as set_thread_memory_policy does.
  ScopedMemoryPolicy(const std::vector<int>& nodes, MemoryPolicy policy);
  /// Restores the saved policy; a failure to restore is ignored.
  ~ScopedMemoryPolicy();
  ScopedMemoryPolicy(const ScopedMemoryPolicy&) = delete;
  ScopedMemoryPolicy& operator=(const ScopedMemoryPolicy&) = delete;

 private:
  int mode_ = 0;
  std::vector<unsigned long> mask_;
};

/// The pages of one node in a placement report.
struct NodePages {
  int node = 0;
  std::size_t pages = 0;
  double share = 0.0;  ///< pages / PagePlacement::pages
};

/// Where the pages of a buffer live.
struct PagePlacement {
  std::size_t page_size = 0;     ///< bytes per page used for the query
  std::size_t pages = 0;         ///< pages spanned by the buffer
  std::size_t not_present = 0;   ///< pages never touched (no physical page yet)
  std::size_t unknown = 0;       ///< pages the kernel could not report for another reason
  std::vector<NodePages> nodes;  ///< present pages per node, ascending node index
};

/// Queries (without moving anything, move_pages query mode) the node of every page spanned by
/// [data, data + bytes). Throws tb::ValueError "[numa] ..." when NUMA is unsupported or the
/// query fails. An empty range gives an empty report.
PagePlacement page_placement(const void* data, std::size_t bytes);

}  // namespace tb::numa
