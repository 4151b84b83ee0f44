// Persistent worker pool behind tb::core::parallel_for, and the process-wide thread count.
#include "engine/core/thread_pool.h"

#include <pthread.h>
#include <sched.h>
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <charconv>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <deque>
#include <exception>
#include <mutex>
#include <string_view>
#include <system_error>
#include <thread>
#include <vector>

#include "engine/core/error.h"

#ifdef TB_HAVE_OPENBLAS
#include <cblas.h>
#endif

namespace tb::core {
namespace {

// Serialises changes of the thread count (and the OpenBLAS call that goes with them).
std::mutex& count_mutex() {
  static std::mutex mu;
  return mu;
}

// Open ScopedSingleThreadedBlas scopes (guarded by count_mutex()): while any is open, OpenBLAS
// stays on one thread and a new count reaches it when the last scope ends.
int g_single_blas_scopes = 0;

void apply_num_threads_locked(int n) {
  detail::g_num_threads.store(n, std::memory_order_relaxed);
#ifdef TB_HAVE_OPENBLAS
  if (g_single_blas_scopes == 0) openblas_set_num_threads(n);
#endif
}

// One parallel_for call. Lives on the caller's stack; every field below `ctx` is guarded by the
// pool mutex (`pending` is also read without it, hence atomic). The caller destroys it only after
// seeing `pending` reach 0, and no worker touches a job after its own decrement of `pending`, so
// there is no use after free.
struct Job {
  detail::ChunkFn fn;
  const void* ctx;
  int64_t begin;
  int64_t base;       // every chunk has `base` elements,
  int64_t remainder;  // the first `remainder` chunks one more
  int num_chunks;
  int threads;                  // threads that may work on it, the caller included
  int next_chunk = 1;           // chunk 0 is reserved for the calling thread
  int helpers = 0;              // workers working on it now (at most threads - 1)
  std::atomic<int> pending{0};  // chunks not finished yet
  std::exception_ptr error;

  int64_t chunk_begin(int c) const { return begin + c * base + std::min<int64_t>(c, remainder); }
};

class Pool {
 public:
  // Publishes `job` (whose chunk 0 the caller keeps) and wakes workers for the other chunks.
  void submit(Job* job) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      const size_t wanted = static_cast<size_t>(std::min(job->num_chunks, job->threads) - 1);
      try {
        while (workers_.size() < wanted)
          workers_.emplace_back([this] { worker_loop(); });
      } catch (const std::system_error&) {
        // Out of threads: carry on with the workers there are; the caller can finish alone.
      }
      queue_.push_back(job);
      queued_.store(static_cast<int>(queue_.size()), std::memory_order_relaxed);
    }
    const int wake = std::min(job->num_chunks, job->threads) - 1;
    for (int i = 0; i < wake; ++i)
      work_cv_.notify_one();
  }

  // Runs chunk `c` of `job`, then records its completion.
  // Returns the next unclaimed chunk of the same job, or -1; called by the job's owner only.
  int run_and_claim_next(Job* job, int c) {
    std::exception_ptr error = run_chunk(job, c);
    std::lock_guard<std::mutex> lock(mu_);
    finish_locked(job, error);
    if (job->next_chunk >= job->num_chunks) return -1;
    const int next = job->next_chunk++;
    if (job->next_chunk == job->num_chunks) {
      erase_locked(job);
    }
    return next;
  }

  // Blocks until every chunk of `job` has finished: spins a little first (the other chunks are
  // usually about as long as the caller's own), then sleeps.
  void wait(Job* job) {
    if (spin_until([job] { return job->pending.load(std::memory_order_acquire) == 0; })) return;
    std::unique_lock<std::mutex> lock(mu_);
    done_cv_.wait(lock, [job] { return job->pending == 0; });
  }

 private:
  static std::exception_ptr run_chunk(Job* job, int c) {
    try {
      job->fn(job->ctx, job->chunk_begin(c), job->chunk_begin(c + 1));
    } catch (...) {
      return std::current_exception();
    }
    return nullptr;
  }

  void finish_locked(Job* job, const std::exception_ptr& error) {
    if (error && !job->error) {
      job->error = error;
      // Chunks nobody started yet are dropped: count them as finished and unpublish the job.
      const int unclaimed = job->num_chunks - job->next_chunk;
      if (unclaimed > 0) {
        job->pending -= unclaimed;
        job->next_chunk = job->num_chunks;
        erase_locked(job);
      }
    }
    if (--job->pending == 0) done_cv_.notify_all();
  }

 public:
  // Pins every worker (and the workers started later) to `cpus`; returns the previous pin set.
  std::vector<int> pin(const std::vector<int>& cpus) {
    std::lock_guard<std::mutex> lock(mu_);
    const cpu_set_t mask = cpus.empty() ? initial_mask_ : to_mask(cpus);
    for (std::thread& t : workers_) {
      const int rc = pthread_setaffinity_np(t.native_handle(), sizeof(mask), &mask);
      TB_CHECK(rc == 0, "[threads] pinning a pool worker to the CPUs failed (error ", rc, ")");
    }
    std::vector<int> previous = pin_;
    pin_ = cpus;
    return previous;
  }

  std::vector<int> pinned() {
    std::lock_guard<std::mutex> lock(mu_);
    return pin_;
  }

  std::vector<std::vector<int>> affinities() {
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<std::vector<int>> out;
    for (std::thread& t : workers_) {
      cpu_set_t mask;
      CPU_ZERO(&mask);
      std::vector<int> cpus;
      if (pthread_getaffinity_np(t.native_handle(), sizeof(mask), &mask) == 0) {
        for (int c = 0; c < CPU_SETSIZE; ++c)
          if (CPU_ISSET(c, &mask)) cpus.push_back(c);
      }
      out.push_back(std::move(cpus));
    }
    return out;
  }

  Pool() {
    CPU_ZERO(&initial_mask_);
    if (sched_getaffinity(0, sizeof(initial_mask_), &initial_mask_) != 0) {
      for (int c = 0; c < CPU_SETSIZE; ++c)
        CPU_SET(c, &initial_mask_);
    }
  }

 private:
  static cpu_set_t to_mask(const std::vector<int>& cpus) {
    cpu_set_t mask;
    CPU_ZERO(&mask);
    for (int c : cpus) {
      TB_CHECK(c >= 0 && c < CPU_SETSIZE, "[threads] CPU index ", c, " is out of range");
      CPU_SET(c, &mask);
    }
    return mask;
  }

  void erase_locked(Job* job) {
    queue_.erase(std::find(queue_.begin(), queue_.end(), job));
    queued_.store(static_cast<int>(queue_.size()), std::memory_order_relaxed);
  }

  // How long a worker keeps looking for the next job, and the caller for its job's end, before
  // sleeping on a condition variable. A kernel follows the previous one within microseconds in a
  // training step; waking a sleeping thread costs tens of microseconds on a virtual machine (more
  // than a whole small GEMM's share), which is what made a second thread slower than one.
  // OpenMP runtimes and OpenBLAS spin the same way; bounded, so an idle pool sleeps.
  static constexpr std::chrono::microseconds kSpin{100};

  template <typename Pred>
  static bool spin_until(Pred&& done) {
    const auto until = std::chrono::steady_clock::now() + kSpin;
    for (;;) {
      for (int i = 0; i < 64; ++i) {
        if (done()) return true;
#if defined(__x86_64__) || defined(__i386__)
        __builtin_ia32_pause();
#endif
      }
      if (std::chrono::steady_clock::now() >= until) return done();
    }
  }

  // The first queued job that still has an unclaimed chunk and room for another helper: a job
  // takes at most threads - 1 workers besides its caller, whatever the pool's size (it may have
  // grown for an earlier, wider job), so a run's thread count is never exceeded.
  Job* joinable_locked() const {
    for (Job* job : queue_)
      if (job->helpers < job->threads - 1) return job;
    return nullptr;
  }

  void worker_loop() {
    detail::t_in_parallel = true;  // anything a worker calls runs nested, i.e. inline
    // A worker never runs a signal handler: one run on a thread inside a oneDNN kernel corrupted
    // the heap. Signals for the process go to a thread that does not block them.
    sigset_t async_signals;
    sigemptyset(&async_signals);
    for (int sig : {SIGINT, SIGTERM, SIGUSR1, SIGUSR2, SIGHUP, SIGALRM, SIGCHLD, SIGWINCH})
      sigaddset(&async_signals, sig);
    pthread_sigmask(SIG_BLOCK, &async_signals, nullptr);
    std::unique_lock<std::mutex> lock(mu_);
    if (!pin_.empty()) {  // started while the pool is pinned
      const cpu_set_t mask = to_mask(pin_);
      pthread_setaffinity_np(pthread_self(), sizeof(mask), &mask);
    }
    for (;;) {
      if (joinable_locked() == nullptr) {
        lock.unlock();
        spin_until([this] { return queued_.load(std::memory_order_relaxed) > 0; });
        lock.lock();
      }
      Job* job = nullptr;
      work_cv_.wait(lock, [this, &job] { return (job = joinable_locked()) != nullptr; });
      if (job == nullptr) continue;
      ++job->helpers;
      int c = job->next_chunk++;
      if (job->next_chunk == job->num_chunks) erase_locked(job);
      // Chunk after chunk of the same job while it has unclaimed ones. The next chunk is claimed
      // before this one counts as finished, so the job (on its caller's stack) outlives the
      // claim; nothing touches it after the last finish_locked.
      for (;;) {
        lock.unlock();
        std::exception_ptr error = run_chunk(job, c);
        lock.lock();
        int next = -1;
        if (!error && job->next_chunk < job->num_chunks) {
          next = job->next_chunk++;
          if (job->next_chunk == job->num_chunks) erase_locked(job);
        }
        if (next < 0) --job->helpers;
        finish_locked(job, error);
        if (next < 0) break;
        c = next;
      }
    }
  }

  std::mutex mu_;
  std::condition_variable work_cv_;
  std::condition_variable done_cv_;
  std::deque<Job*> queue_;
  std::atomic<int> queued_{0};  // queue_.size(), for spinning workers (written under mu_)
  std::vector<std::thread> workers_;
  std::vector<int> pin_;    // CPUs the workers are pinned to (empty = not pinned)
  cpu_set_t initial_mask_;  // the mask to return to when unpinned
};

// The pool is created on first use and intentionally never destroyed: workers may be blocked
// on its condition variable at exit, and static destruction order would otherwise race them.
std::atomic<Pool*> g_pool{nullptr};
std::mutex g_pool_create_mutex;

// A forked child has none of the parent's worker threads: give it a fresh pool (leaking the
// parent's copy, whose mutex may have been held at fork time).
void reset_pool_in_child() {
  g_pool.store(nullptr, std::memory_order_relaxed);
}

Pool& pool() {
  Pool* p = g_pool.load(std::memory_order_acquire);
  if (p != nullptr) return *p;
  std::lock_guard<std::mutex> lock(g_pool_create_mutex);
  p = g_pool.load(std::memory_order_relaxed);
  if (p == nullptr) {
    static const int registered = pthread_atfork(nullptr, nullptr, &reset_pool_in_child);
    (void)registered;
    p = new Pool();
    g_pool.store(p, std::memory_order_release);
  }
  return *p;
}

int affinity_cpu_count() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) {
    const int n = CPU_COUNT(&set);
    if (n > 0) return n;
  }
  const unsigned hw = std::thread::hardware_concurrency();
  return hw > 0 ? static_cast<int>(hw) : 1;
}

// Marks the calling thread as inside a parallel region for the lifetime of the guard.
struct ParallelRegionGuard {
  ParallelRegionGuard() { detail::t_in_parallel = true; }
  ~ParallelRegionGuard() { detail::t_in_parallel = false; }
  ParallelRegionGuard(const ParallelRegionGuard&) = delete;
  ParallelRegionGuard& operator=(const ParallelRegionGuard&) = delete;
};

}  // namespace

int default_num_threads() {
  if (const char* env = std::getenv("TB_NUM_THREADS"); env != nullptr && *env != '\0') {
    const std::string_view text(env);
    int value = 0;
    const auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
    TB_CHECK(ec == std::errc() && ptr == text.data() + text.size() && value >= 1 &&
                 value <= kMaxNumThreads,
             "[threads] TB_NUM_THREADS must be an integer in [1, ", kMaxNumThreads, "], got '",
             text, "'; unset it to use every CPU this process may run on");
    return value;
  }
  return std::min(affinity_cpu_count(), kMaxNumThreads);  // (a machine of more CPUs)
}

void set_num_threads(int n) {
  TB_CHECK(n >= 1 && n <= kMaxNumThreads, "[threads] thread count must be in [1, ", kMaxNumThreads,
           "], got ", n);
  std::lock_guard<std::mutex> lock(count_mutex());
  apply_num_threads_locked(n);
}

ScopedSingleThreadedBlas::ScopedSingleThreadedBlas() {
  (void)num_threads();  // resolved first, so the restore below has a count to go back to
  std::lock_guard<std::mutex> lock(count_mutex());
#ifdef TB_HAVE_OPENBLAS
  if (g_single_blas_scopes == 0) openblas_set_num_threads(1);
#endif
  ++g_single_blas_scopes;
}

ScopedSingleThreadedBlas::~ScopedSingleThreadedBlas() {
  std::lock_guard<std::mutex> lock(count_mutex());
  --g_single_blas_scopes;
#ifdef TB_HAVE_OPENBLAS
  if (g_single_blas_scopes == 0)
    openblas_set_num_threads(detail::g_num_threads.load(std::memory_order_relaxed));
#endif
}

std::vector<int> pin_workers(const std::vector<int>& cpus) {
  return pool().pin(cpus);
}

std::vector<int> pinned_workers() {
  return pool().pinned();
}

std::vector<std::vector<int>> worker_affinities() {
  return pool().affinities();
}

ScopedNumThreads::ScopedNumThreads(int n) : previous_(num_threads()) {
  set_num_threads(n);
}

ScopedNumThreads::~ScopedNumThreads() {
  std::lock_guard<std::mutex> lock(count_mutex());
  apply_num_threads_locked(previous_);
}

namespace detail {

int resolve_num_threads() {
  const int n = default_num_threads();  // may throw for a malformed TB_NUM_THREADS
  std::lock_guard<std::mutex> lock(count_mutex());
  const int current = g_num_threads.load(std::memory_order_relaxed);
  if (current != 0) return current;  // someone set or resolved it meanwhile
  apply_num_threads_locked(n);
  return n;
}

// Chunks per thread a loop is cut into when its grain allows. Kernels give the same bits for
// any chunking (their reductions use fixed blocks of their own), so this is a load-balancing
// choice only; each chunk costs one claim under the pool's mutex (well under a microsecond).
constexpr int kChunksPerThread = 4;

void parallel_for_pooled(int64_t begin, int64_t end, int64_t grain, int threads, ChunkFn fn,
                         const void* ctx) {
  if (begin >= end) return;  // reachable with a negative grain
  const int64_t range = end - begin;
  const int64_t g = std::max<int64_t>(grain, 1);
  const int64_t wanted = range / g + (range % g != 0 ? 1 : 0);
  // More chunks than threads, claimed one at a time by whoever is free: a thread preempted by
  // another process (the GUI, a loader thread, the OS) then delays only the chunk it holds, not
  // a whole 1/threads share of the loop, which the others could have taken over meanwhile.
  const int chunks =
      static_cast<int>(std::min<int64_t>(int64_t{threads} * kChunksPerThread, wanted));
  ParallelRegionGuard region;
  if (chunks <= 1) {
    fn(ctx, begin, end);
    return;
  }
  Job job{fn, ctx, begin, range / chunks, range % chunks, chunks, threads, 1, 0, chunks, nullptr};
  Pool& p = pool();
  p.submit(&job);
  // The caller runs chunk 0, then helps with any chunk no worker has claimed yet.
  for (int c = 0; c >= 0;)
    c = p.run_and_claim_next(&job, c);
  p.wait(&job);
  if (job.error) std::rethrow_exception(job.error);
}

}  // namespace detail
}  // namespace tb::core
