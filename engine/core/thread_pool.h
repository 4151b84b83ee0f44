// Persistent worker pool for the engine's CPU kernels, kept in step with OpenBLAS's thread count.
//
// One process-wide pool. Its size (num_threads) counts the calling thread: with N threads a
// parallel_for uses the caller plus up to N-1 workers. Setting the size also sets OpenBLAS's
// thread count, so the kernel pool and BLAS never oversubscribe the cores.
//
// Why a FIFO of jobs rather than a single "current job" slot: several threads (run thread,
// loader threads) may call parallel_for at once. Each caller always works on its own job and can
// finish it alone, so no caller ever waits for a pool that is busy with someone else's work, and
// there is no deadlock whatever the nesting or concurrency.
#pragma once

#include <algorithm>

#include <atomic>
#include <cstdint>
#include <functional>
#include <type_traits>
#include <utility>
#include <vector>

namespace tb::core {

/// The most kernel threads a process may ask for (TB_NUM_THREADS, --threads, `threads`): more
/// is a typo, not a machine (99999 would start 99999 pool threads).
inline constexpr int kMaxNumThreads = 1024;

/// Number of threads the CPU kernels use (the caller included), >= 1. The first call resolves
/// the default (see default_num_threads) and applies it to OpenBLAS as well.
int num_threads();

/// Sets the number of threads for the kernel pool AND for OpenBLAS (openblas_set_num_threads).
/// Throws tb::ValueError "[threads] thread count must be in [1, 1024], got N" outside that. Call it
/// between operations: changing OpenBLAS's count while another thread is inside a BLAS call is not
/// safe.
void set_num_threads(int n);

/// The default thread count: env TB_NUM_THREADS when set (an integer in [1, kMaxNumThreads],
/// else tb::ValueError), otherwise the number of CPUs this process may run on
/// (sched_getaffinity; at most kMaxNumThreads). Reads the environment on every call; does not
/// change the current setting.
int default_num_threads();

/// True while the calling thread runs a chunk of a parallel_for (or is a pool worker). Nested
/// parallel_for calls and kernels that would start their own threads check this.
bool in_parallel_region();

/// RAII: sets the thread count for a scope and restores the previous count when it ends.
class ScopedNumThreads {
 public:
  /// Remembers num_threads() and calls set_num_threads(n) (throws like it for n < 1).
  explicit ScopedNumThreads(int n);
  /// Restores the count that was current at construction.
  ~ScopedNumThreads();
  ScopedNumThreads(const ScopedNumThreads&) = delete;
  ScopedNumThreads& operator=(const ScopedNumThreads&) = delete;

 private:
  int previous_;
};

/// RAII: OpenBLAS on one thread for a scope, then on num_threads() again. For loops that run
/// whole BLAS calls in parallel on the pool (batched products, Muon's Newton–Schulz over many
/// matrices): each call then computes on its own chunk's thread and the cores are not
/// oversubscribed. Scopes nest and may overlap across threads: OpenBLAS's count is restored when
/// the last one ends. The setting is process-wide, so another thread's BLAS calls during the
/// scope run on one thread too. No effect without OpenBLAS.
class ScopedSingleThreadedBlas {
 public:
  /// Sets OpenBLAS to one thread (when this is the first open scope).
  ScopedSingleThreadedBlas();
  /// Restores num_threads() for OpenBLAS when this is the last open scope.
  ~ScopedSingleThreadedBlas();
  ScopedSingleThreadedBlas(const ScopedSingleThreadedBlas&) = delete;
  ScopedSingleThreadedBlas& operator=(const ScopedSingleThreadedBlas&) = delete;
};

/// Pins the pool's worker threads — those running now and those started later — to the logical
/// CPUs `cpus` (empty: unpin, i.e. the mask the process had when the pool started). Returns the
/// previous pin set. Used by a bound run (tb::train::Trainer) for its duration. Throws
/// tb::ValueError "[threads] ..." when the kernel rejects the set.
std::vector<int> pin_workers(const std::vector<int>& cpus);
/// The CPUs the pool's workers are pinned to (empty = not pinned).
std::vector<int> pinned_workers();
/// The affinity masks of the pool's worker threads as they are now (one list of CPUs per worker;
/// for checks and reports).
std::vector<std::vector<int>> worker_affinities();

namespace detail {

/// Type-erased chunk body: ctx points at the caller's callable.
using ChunkFn = void (*)(const void* ctx, int64_t begin, int64_t end);

/// Current thread count; 0 until resolved (then always >= 1).
inline std::atomic<int> g_num_threads{0};
/// Set while this thread executes a parallel_for chunk or is a pool worker.
inline thread_local bool t_in_parallel = false;

/// Resolves and applies the default thread count (cold path of num_threads()).
int resolve_num_threads();

/// Splits [begin, end) into chunks and runs them on the pool; see parallel_for.
void parallel_for_pooled(int64_t begin, int64_t end, int64_t grain, int threads, ChunkFn fn,
                         const void* ctx);

}  // namespace detail

inline int num_threads() {
  const int n = detail::g_num_threads.load(std::memory_order_relaxed);
  return n != 0 ? n : detail::resolve_num_threads();
}

inline bool in_parallel_region() {
  return detail::t_in_parallel;
}

/// Calls fn(chunk_begin, chunk_end) over disjoint chunks that cover [begin, end) exactly once.
/// - Runs fn(begin, end) inline on the caller (no pool hop) when end - begin <= grain, when
///   num_threads() == 1, or when called from inside a parallel region (nested: no deadlock).
/// - Otherwise uses min(4 * num_threads(), ceil((end - begin) / grain)) chunks of near-equal
///   size, claimed one at a time by the calling thread and up to num_threads() - 1 workers (so a
///   preempted thread holds back one chunk, not its whole share); the caller returns when all
///   are done. Kernels must not let their results depend on the chunk boundaries.
/// - An empty range (begin >= end) calls nothing. A grain <= 0 behaves like 1.
/// - The first exception thrown by any chunk is rethrown on the calling thread after every
///   started chunk has finished; chunks not yet started when it was thrown are skipped.
/// - Safe to call from several threads at once.
/// This template overload takes any callable without wrapping it in std::function, so the inline
/// path costs a couple of comparisons and nothing else.
template <typename F>
requires std::is_invocable_v<F&, int64_t, int64_t>
inline void parallel_for(int64_t begin, int64_t end, int64_t grain, F&& fn) {
  if (end - begin <= grain || detail::t_in_parallel) {
    if (begin < end) fn(begin, end);
    return;
  }
  const int threads = num_threads();
  if (threads == 1) {
    if (begin < end) fn(begin, end);
    return;
  }
  using Fn = std::remove_reference_t<F>;
  detail::parallel_for_pooled(
      begin, end, grain, threads,
      [](const void* ctx, int64_t b, int64_t e) {
        (*static_cast<Fn*>(const_cast<void*>(ctx)))(b, e);
      },
      static_cast<const void*>(&fn));
}

/// Same contract as the template overload, for callers that already hold a std::function.
inline void parallel_for(int64_t begin, int64_t end, int64_t grain,
                         const std::function<void(int64_t, int64_t)>& fn) {
  parallel_for<const std::function<void(int64_t, int64_t)>&>(begin, end, grain, fn);
}

/// The multi-tensor pass of the fused optimizer updates: runs body(tensor index, begin, end) over
/// the elements of a list of tensors with `sizes` elements in one parallel loop; chunks may span
/// tensor boundaries (each call covers one tensor's part of a chunk).
template <typename Body>
void for_each_element(const std::vector<std::int64_t>& sizes, Body&& body) {
  std::vector<std::int64_t> start(sizes.size() + 1, 0);
  for (std::size_t i = 0; i < sizes.size(); ++i)
    start[i + 1] = start[i] + sizes[i];
  parallel_for(0, start.back(), 16384, [&](std::int64_t b, std::int64_t e) {
    auto it = std::upper_bound(start.begin(), start.end(), b);
    std::size_t i = static_cast<std::size_t>(it - start.begin()) - 1;
    while (b < e) {
      while (start[i + 1] <= b)
        ++i;
      const std::int64_t end = std::min(e, start[i + 1]);
      body(i, b - start[i], end - start[i]);
      b = end;
    }
  });
}

}  // namespace tb::core
