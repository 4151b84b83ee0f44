// The emulated CUDA execution model (see cuda_emu.h). Every CUDA thread of a block is a fiber on
// the launching thread, created once per launch; each fiber runs its thread of every block of
// the grid in order, and all meet at a barrier between blocks. Fibers switch only at barriers
// (__syncthreads, warp shuffles, the end of a block): cooperative, round robin, with
// _setjmp/_longjmp (no signal-mask system call), so a switch costs tens of nanoseconds. A thread
// that returns leaves the barriers of its block, as on the GPU.
#undef _FORTIFY_SOURCE  // longjmp between fiber stacks is what this file does on purpose
#include <setjmp.h>
#include <ucontext.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <vector>

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/common_interface_defs.h>
#endif

#include "tests/cuda_emu/cuda_emu.h"

namespace tb_emu {

namespace {

constexpr int kWarp = 32;
constexpr std::size_t kStackBytes = 256 * 1024;

// AddressSanitizer must be told about every stack switch (or it reports the fibers' frames as
// overflows of the launching thread's stack): start before the jump, finish after landing.
#if defined(__SANITIZE_ADDRESS__)
void asan_start_switch(void** fake, const void* bottom, std::size_t size) {
  __sanitizer_start_switch_fiber(fake, bottom, size);
}
void asan_finish_switch(void* fake, const void** old_bottom, std::size_t* old_size) {
  __sanitizer_finish_switch_fiber(fake, old_bottom, old_size);
}
#else
void asan_start_switch(void**, const void*, std::size_t) {}
void asan_finish_switch(void*, const void**, std::size_t*) {}
#endif

struct Barrier {
  int live = 0;     // threads that have not returned in this block
  int arrived = 0;  // arrivals in the current generation
  std::uint64_t generation = 0;

  // Arrive; true when this arrival completed the generation (everyone may go on).
  bool arrive() {
    if (++arrived >= live) {
      arrived = 0;
      ++generation;
      return true;
    }
    return false;
  }
  // A thread returned: it no longer counts; its absence may complete the generation.
  void leave() {
    --live;
    if (live > 0 && arrived >= live) {
      arrived = 0;
      ++generation;
    }
  }
};

struct Fiber {
  ucontext_t start{};  // the first entry only
  jmp_buf env{};
  std::unique_ptr<char[]> stack;
  ThreadContext coords;
  bool started = false;
  bool done = false;
  void* asan_fake = nullptr;  // the sanitizer's fake stack while switched away
};

struct Launch {
  const std::function<void()>* body = nullptr;
  dim3 grid;
  dim3 block;
  int threads = 0;
  std::vector<Fiber>* fibers = nullptr;
  Barrier block_bar;  // __syncthreads of the current block
  Barrier end_bar;    // between blocks (never left)
  std::vector<Barrier> warp_bar;
  std::vector<std::array<unsigned char, 8 * kWarp>> warp_buf;
  jmp_buf scheduler{};
  int current = -1;
  void* asan_fake = nullptr;           // the launching thread's, while a fiber runs
  const void* sched_bottom = nullptr;  // the launching thread's stack (for the sanitizer)
  std::size_t sched_size = 0;
};

Launch* g_launch = nullptr;
ThreadContext g_outside;  // coordinates seen outside a kernel

Fiber& me() {
  return (*g_launch->fibers)[static_cast<std::size_t>(g_launch->current)];
}

// On a fiber's stack, just switched to from the scheduler: learn the scheduler's stack.
void landed_on_fiber(void* fake) {
  asan_finish_switch(fake, &g_launch->sched_bottom, &g_launch->sched_size);
}

void yield() {
  if (_setjmp(me().env) == 0) {
    asan_start_switch(&me().asan_fake, g_launch->sched_bottom, g_launch->sched_size);
    _longjmp(g_launch->scheduler, 1);
  }
  landed_on_fiber(me().asan_fake);
}

// Waits until `bar` completes the generation this thread arrived in.
void wait(Barrier& bar) {
  const std::uint64_t gen = bar.generation;
  if (bar.arrive()) return;
  while (bar.generation == gen)
    yield();
}

void reset_block_barriers(Launch& l) {
  const int n = l.threads;
  l.block_bar = Barrier{n, 0, l.block_bar.generation + 1};
  for (std::size_t w = 0; w < l.warp_bar.size(); ++w) {
    l.warp_bar[w].live = std::min(kWarp, n - static_cast<int>(w) * kWarp);
    l.warp_bar[w].arrived = 0;
    ++l.warp_bar[w].generation;
  }
}

// A fiber lives across launches: after its thread of the last block it parks, and the next
// launch resumes it at the top with the new grid (no context is created twice).
void fiber_main() {
  landed_on_fiber(nullptr);
  for (;;) {
    Launch& l = *g_launch;
    const int i = l.current;
    const unsigned blocks = l.grid.x * l.grid.y;
    for (unsigned b = 0; b < blocks; ++b) {
      me().coords.block_idx = dim3(b % l.grid.x, b / l.grid.x);
      (*l.body)();
      // This thread has returned from block b: it leaves the block's barriers, then waits for
      // the others; the last to arrive resets the barriers for the next block.
      l.block_bar.leave();
      l.warp_bar[static_cast<std::size_t>(i / kWarp)].leave();
      const std::uint64_t gen = l.end_bar.generation;
      if (l.end_bar.arrive()) {
        reset_block_barriers(l);
      } else {
        while (l.end_bar.generation == gen)
          yield();
      }
    }
    me().done = true;
    yield();  // parked until a later launch resumes it
  }
}

std::mutex& launch_mutex() {
  static std::mutex m;
  return m;
}

std::mutex& atomics() {
  static std::mutex m;
  return m;
}

// Runs fiber f until it yields or parks (its first run ever enters fiber_main on its own stack).
[[gnu::noinline]] void resume(Launch& l, Fiber& f) {
  if (_setjmp(l.scheduler) != 0) {
    asan_finish_switch(l.asan_fake, nullptr, nullptr);
    return;
  }
  asan_start_switch(&l.asan_fake, f.stack.get(), kStackBytes);
  if (f.started) _longjmp(f.env, 1);
  f.started = true;
  ucontext_t here;
  getcontext(&f.start);
  f.start.uc_stack.ss_sp = f.stack.get();
  f.start.uc_stack.ss_size = kStackBytes;
  f.start.uc_link = nullptr;
  makecontext(&f.start, &fiber_main, 0);
  swapcontext(&here, &f.start);  // comes back through _longjmp(scheduler)
}

}  // namespace

ThreadContext& context() {
  return g_launch != nullptr && g_launch->current >= 0 ? me().coords : g_outside;
}

void sync_block() {
  wait(g_launch->block_bar);
}

void warp_exchange(const void* mine, void* out, int bytes, int src_lane) {
  const int t = g_launch->current;
  const int warp = t / kWarp;
  const int lane = t % kWarp;
  auto& buf = g_launch->warp_buf[static_cast<std::size_t>(warp)];
  Barrier& bar = g_launch->warp_bar[static_cast<std::size_t>(warp)];
  std::memcpy(buf.data() + lane * 8, mine, static_cast<std::size_t>(bytes));
  wait(bar);
  const int lanes = std::min(kWarp, g_launch->threads - warp * kWarp);
  std::memcpy(out, buf.data() + (src_lane < lanes ? src_lane : lane) * 8,
              static_cast<std::size_t>(bytes));
  wait(bar);
}

void run_grid(dim3 grid, dim3 block, const std::function<void()>& body) {
  if (grid.z != 1 || block.y != 1 || block.z != 1 || block.x == 0 || block.x > 1024) {
    std::fprintf(stderr, "cuda emulator: unsupported launch geometry\n");
    std::abort();
  }
  if (grid.x == 0 || grid.y == 0) return;
  std::lock_guard lock(launch_mutex());  // one kernel at a time, as on the default stream
  static std::vector<Fiber> pool;        // stacks kept between launches
  if (pool.size() < block.x) pool.resize(block.x);
  Launch l;
  l.body = &body;
  l.grid = grid;
  l.block = block;
  l.threads = static_cast<int>(block.x);
  l.fibers = &pool;
  const int warps = (l.threads + kWarp - 1) / kWarp;
  l.warp_bar.assign(static_cast<std::size_t>(warps), Barrier{});
  l.warp_buf.assign(static_cast<std::size_t>(warps), {});
  l.end_bar = Barrier{l.threads, 0, 0};
  reset_block_barriers(l);
  for (int i = 0; i < l.threads; ++i) {
    Fiber& f = pool[static_cast<std::size_t>(i)];
    if (!f.stack) f.stack = std::make_unique<char[]>(kStackBytes);
    f.done = false;
    f.coords = ThreadContext{dim3(static_cast<unsigned>(i)), dim3(0), block, grid};
  }
  g_launch = &l;
  // Round robin until every fiber has run every block.
  for (int left = l.threads; left > 0;) {
    left = 0;
    for (int i = 0; i < l.threads; ++i) {
      Fiber& f = pool[static_cast<std::size_t>(i)];
      if (f.done) continue;
      l.current = i;
      resume(l, f);
      if (!f.done) ++left;
    }
  }
  l.current = -1;
  g_launch = nullptr;
}

void atomic_lock() {
  atomics().lock();
}
void atomic_unlock() {
  atomics().unlock();
}

}  // namespace tb_emu
