// The openreg runtime: devices, protected device memory pools, streams with worker threads,
// events. See runtime.h.
#include "engine/backends/openreg/runtime.h"

#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <charconv>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <unordered_map>
#include <utility>

#include "engine/core/error.h"

namespace tb::openreg {

namespace {

using tb::detail::str_cat;

// Pages are committed in segments of this size (what "reserved" counts).
constexpr std::size_t kSegment = std::size_t{2} << 20;

std::size_t round_up(std::size_t n, std::size_t to) {
  return (n + to - 1) / to * to;
}

// Parses an environment variable as an integer in [lo, hi]; `fallback` when unset.
long env_int(const char* name, long fallback, long lo, long hi) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return fallback;
  long out = 0;
  const char* end = v + std::strlen(v);
  const auto res = std::from_chars(v, end, out);
  TB_CHECK_T(ValueError, res.ec == std::errc() && res.ptr == end && out >= lo && out <= hi,
             "[openreg] ", name, "='", v, "': expected an integer in [", lo, ", ", hi, "]");
  return out;
}

// ---- memory pools -------------------------------------------------------------------------------

// Base addresses for the SIGSEGV handler (read without locks there).
std::array<std::atomic<char*>, kMaxDevices> g_pool_base{};
std::atomic<std::size_t> g_pool_capacity{0};
struct sigaction g_previous_segv {};

// Writes "0x" + hex of v into buf (async-signal-safe); returns the length.
std::size_t format_hex(char* buf, std::uintptr_t v) {
  char tmp[2 + 2 * sizeof(v)];
  std::size_t n = 0;
  do {
    tmp[n++] = "0123456789abcdef"[v & 15U];
    v >>= 4;
  } while (v != 0);
  buf[0] = '0';
  buf[1] = 'x';
  for (std::size_t i = 0; i < n; ++i)
    buf[2 + i] = tmp[n - 1 - i];
  return n + 2;
}

void segv_handler(int sig, siginfo_t* info, void* context) {
  const int dev = device_of_pointer(info->si_addr);
  if (dev >= 0) {
    char msg[256];
    std::size_t n = 0;
    auto put = [&](const char* s) {
      const std::size_t len = std::strlen(s);
      std::memcpy(msg + n, s, len);
      n += len;
    };
    put("[openreg] host code accessed device memory of openreg:");
    if (dev >= 10) msg[n++] = static_cast<char>('0' + dev / 10);
    msg[n++] = static_cast<char>('0' + dev % 10);
    put(" at ");
    n += format_hex(msg + n, reinterpret_cast<std::uintptr_t>(info->si_addr));
    put(" outside a kernel; copy the tensor to the CPU first (tensor.to(cpu))\n");
    ssize_t ignored = ::write(STDERR_FILENO, msg, n);
    (void)ignored;
  }
  // Chain to whoever handled SIGSEGV before us (a sanitizer, a crash reporter), else die.
  if ((g_previous_segv.sa_flags & SA_SIGINFO) != 0 && g_previous_segv.sa_sigaction != nullptr) {
    g_previous_segv.sa_sigaction(sig, info, context);
    return;
  }
  if ((g_previous_segv.sa_flags & SA_SIGINFO) == 0 && g_previous_segv.sa_handler != SIG_DFL &&
      g_previous_segv.sa_handler != SIG_IGN) {
    g_previous_segv.sa_handler(sig);
    return;
  }
  signal(SIGSEGV, SIG_DFL);  // returning re-executes the access, which now kills the process
}

void install_segv_handler() {
  static std::once_flag once;
  std::call_once(once, [] {
    struct sigaction sa {};
    sa.sa_sigaction = &segv_handler;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
    (void)sigaction(SIGSEGV, &sa, &g_previous_segv);
  });
}

class Pool {
 public:
  explicit Pool(int device) : device_(device), capacity_(device_capacity()) {
    void* p =
        mmap(nullptr, capacity_, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    TB_CHECK(p != MAP_FAILED, "[openreg] cannot reserve ", capacity_ >> 20,
             " MiB of address space for openreg:", device, ": ", std::strerror(errno),
             " (lower TB_OPENREG_MEMORY_MB)");
    base_ = static_cast<char*>(p);
    g_pool_capacity.store(capacity_);
    g_pool_base[static_cast<std::size_t>(device)].store(base_);
    if (memory_protection_enabled()) install_segv_handler();
  }

  void* allocate(std::size_t nbytes) {
    const std::size_t size = round_up(nbytes, kDeviceAlignment);
    std::lock_guard lock(mutex_);
    std::size_t off = 0;
    auto best = by_size_.lower_bound({size, 0});
    if (best != by_size_.end()) {
      off = best->second;
      const std::size_t have = best->first;
      erase_free(off, have);
      if (have > size) insert_free(off + size, have - size);
    } else {
      // Grow at the top, extending a free block that ends there.
      std::size_t start = top_;
      if (!by_offset_.empty()) {
        const auto last = std::prev(by_offset_.end());
        if (last->first + last->second == top_) {
          start = last->first;
          erase_free(last->first, last->second);
        }
      }
      const std::size_t new_top = round_up(start + size, kSegment);
      if (new_top > capacity_ || start + size < start) {
        if (start != top_) insert_free(start, top_ - start);  // put the tail back
        throw Error(str_cat("[openreg] out of memory on openreg:", device_, ": cannot allocate ",
                            nbytes, " bytes (allocated ", allocated_, ", reserved ", top_, " of ",
                            capacity_, " bytes; TB_OPENREG_MEMORY_MB sets the capacity)"));
      }
      if (!memory_protection_enabled() || open_scopes_ > 0)
        protect(top_, new_top - top_, PROT_READ | PROT_WRITE);
      top_ = new_top;
      off = start;
      if (start + size < top_) insert_free(start + size, top_ - start - size);
    }
    used_.emplace(off, size);
    allocated_ += static_cast<std::int64_t>(size);
    peak_ = std::max(peak_, allocated_);
    ++num_allocs_;
    return base_ + off;
  }

  void release(void* ptr) noexcept {
    std::lock_guard lock(mutex_);
    const auto off = static_cast<std::size_t>(static_cast<char*>(ptr) - base_);
    const auto it = used_.find(off);
    if (it == used_.end()) return;
    std::size_t size = it->second;
    used_.erase(it);
    allocated_ -= static_cast<std::int64_t>(size);
    std::size_t start = off;
    const auto next = by_offset_.find(off + size);
    if (next != by_offset_.end()) {
      const std::size_t n = next->second;
      erase_free(off + size, n);
      size += n;
    }
    auto prev = by_offset_.lower_bound(off);
    if (prev != by_offset_.begin()) {
      --prev;
      if (prev->first + prev->second == off) {
        start = prev->first;
        const std::size_t n = prev->second;
        erase_free(prev->first, n);
        size += n;
      }
    }
    insert_free(start, size);
  }

  core::AllocatorStats stats() {
    std::lock_guard lock(mutex_);
    core::AllocatorStats s;
    s.allocated = allocated_;
    s.peak_allocated = peak_;
    s.reserved = static_cast<std::int64_t>(top_);
    s.num_allocs = num_allocs_;
    return s;
  }

  void reset_peak() {
    std::lock_guard lock(mutex_);
    peak_ = allocated_;
  }

  void empty_cache() {
    std::lock_guard lock(mutex_);
    if (by_offset_.empty()) return;
    const auto last = std::prev(by_offset_.end());
    if (last->first + last->second != top_) return;
    const std::size_t start = last->first;
    const std::size_t new_top = round_up(start, kSegment);
    if (new_top >= top_) return;
    erase_free(start, top_ - start);
    if (new_top > start) insert_free(start, new_top - start);
    (void)madvise(base_ + new_top, top_ - new_top, MADV_DONTNEED);
    protect(new_top, top_ - new_top, PROT_NONE);
    top_ = new_top;
  }

  void open() {
    std::lock_guard lock(mutex_);
    if (open_scopes_++ == 0 && memory_protection_enabled() && top_ > 0)
      protect(0, top_, PROT_READ | PROT_WRITE);
  }

  void close() noexcept {
    std::lock_guard lock(mutex_);
    if (--open_scopes_ == 0 && memory_protection_enabled() && top_ > 0) {
      try {
        protect(0, top_, PROT_NONE);
      } catch (...) {  // leaves the memory accessible: less checking, nothing lost
      }
    }
  }

  bool contains(const void* p) const noexcept {
    const auto* c = static_cast<const char*>(p);
    return c >= base_ && c < base_ + capacity_;
  }

 private:
  void protect(std::size_t off, std::size_t len, int prot) {
    if (len == 0) return;
    TB_CHECK(mprotect(base_ + off, len, prot) == 0, "[openreg] mprotect of openreg:", device_,
             " memory failed: ", std::strerror(errno));
  }
  void insert_free(std::size_t off, std::size_t size) {
    by_offset_.emplace(off, size);
    by_size_.emplace(size, off);
  }
  void erase_free(std::size_t off, std::size_t size) {
    by_offset_.erase(off);
    by_size_.erase({size, off});
  }

  int device_;
  std::size_t capacity_;
  char* base_ = nullptr;
  std::mutex mutex_;
  std::size_t top_ = 0;                           // committed bytes, a multiple of kSegment
  std::map<std::size_t, std::size_t> by_offset_;  // free blocks: offset -> size
  std::set<std::pair<std::size_t, std::size_t>> by_size_;  // free blocks: (size, offset)
  std::unordered_map<std::size_t, std::size_t> used_;      // live blocks: offset -> size
  std::int64_t allocated_ = 0;
  std::int64_t peak_ = 0;
  std::int64_t num_allocs_ = 0;
  int open_scopes_ = 0;
};

// Pools live for the whole process (memory may be freed by static destructors of others).
Pool& pool(int device) {
  check_device(device);
  static std::array<std::atomic<Pool*>, kMaxDevices> pools{};
  static std::mutex m;
  auto& slot = pools[static_cast<std::size_t>(device)];
  Pool* p = slot.load(std::memory_order_acquire);
  if (p != nullptr) return *p;
  std::lock_guard lock(m);
  p = slot.load();
  if (p == nullptr) {
    p = new Pool(device);
    slot.store(p, std::memory_order_release);
  }
  return *p;
}

thread_local int t_current_device = 0;

}  // namespace

int device_count() {
  static const int n = static_cast<int>(env_int("TB_OPENREG_DEVICES", 2, 1, kMaxDevices));
  return n;
}

std::size_t device_capacity() {
  static const std::size_t bytes =
      static_cast<std::size_t>(env_int("TB_OPENREG_MEMORY_MB", 4096, 16, 1L << 20)) << 20;
  return bytes;
}

void check_device(int index) {
  TB_CHECK_T(ValueError, index >= 0 && index < device_count(),
             "[openreg] no device openreg:", index, " (there are ", device_count(),
             "; TB_OPENREG_DEVICES sets how many)");
}

int current_device() {
  return t_current_device;
}

void set_device(int index) {
  check_device(index);
  t_current_device = index;
}

DeviceGuard::DeviceGuard(int index) : previous_(t_current_device) {
  set_device(index);
}

DeviceGuard::~DeviceGuard() {
  t_current_device = previous_;
}

void* device_malloc(int device, std::size_t nbytes) {
  TB_CHECK_T(ValueError, nbytes > 0, "[openreg] device_malloc of 0 bytes");
  return pool(device).allocate(nbytes);
}

void device_free(int device, void* ptr) noexcept {
  if (ptr == nullptr || device < 0 || device >= kMaxDevices) return;
  if (g_pool_base[static_cast<std::size_t>(device)].load() == nullptr) return;
  pool(device).release(ptr);
}

core::AllocatorStats memory_stats(int device) {
  return pool(device).stats();
}

void reset_peak_memory(int device) {
  pool(device).reset_peak();
}

void empty_cache(int device) {
  pool(device).empty_cache();
}

int device_of_pointer(const void* ptr) noexcept {
  const std::size_t cap = g_pool_capacity.load();
  const auto* c = static_cast<const char*>(ptr);
  for (int i = 0; i < kMaxDevices; ++i) {
    const char* base = g_pool_base[static_cast<std::size_t>(i)].load();
    if (base != nullptr && c >= base && c < base + cap) return i;
  }
  return -1;
}

bool memory_protection_enabled() {
  static const bool on = [] {
    const char* v = std::getenv("TB_OPENREG_PROTECT");
    return v == nullptr || std::string(v) != "0";
  }();
  return on;
}

ExecutionScope::ExecutionScope(int device) : device_(device) {
  pool(device).open();
}

ExecutionScope::~ExecutionScope() {
  pool(device_).close();
}

// ---- streams ------------------------------------------------------------------------------------

struct Stream::Impl {
  mutable std::mutex m;
  std::condition_variable work_cv;
  std::condition_variable done_cv;
  std::deque<std::function<void()>> queue;
  std::uint64_t submitted = 0;
  std::uint64_t completed = 0;
  bool stop = false;
  std::thread worker;
  std::exception_ptr error;
};

namespace {

std::atomic<std::uint64_t> g_next_stream_id{kMaxDevices};

struct LiveStreams {
  std::mutex m;
  std::set<Stream*> streams;
};
LiveStreams& live_streams() {
  static auto* l = new LiveStreams();  // never destroyed: streams may outlive statics
  return *l;
}

thread_local std::array<Stream*, kMaxDevices> t_current_stream{};

}  // namespace

Stream::Stream(int device) : device_(device), impl_(std::make_unique<Impl>()) {
  check_device(device);
  id_ = g_next_stream_id.fetch_add(1);
  auto& live = live_streams();
  std::lock_guard lock(live.m);
  live.streams.insert(this);
}

Stream::~Stream() {
  {
    auto& live = live_streams();
    std::lock_guard lock(live.m);
    live.streams.erase(this);
  }
  try {
    synchronize();
  } catch (...) {  // an unreported asynchronous error dies with its stream
  }
  {
    std::lock_guard lock(impl_->m);
    impl_->stop = true;
  }
  impl_->work_cv.notify_all();
  if (impl_->worker.joinable()) impl_->worker.join();
}

void Stream::enqueue(std::function<void()> work) {
  Impl& im = *impl_;
  {
    std::lock_guard lock(im.m);
    if (!im.worker.joinable()) {
      const int device = device_;
      im.worker = std::thread([&im, device] {
        // Kernels run in bursts: the device memory is opened once for everything queued back to
        // back (up to kBurst kernels) and closed again before their completion is reported, so
        // the host never sees completed work while the memory is still open.
        constexpr std::uint64_t kBurst = 64;
        std::unique_lock wl(im.m);
        while (true) {
          im.work_cv.wait(wl, [&] { return im.stop || !im.queue.empty(); });
          if (im.queue.empty()) return;  // stop requested and nothing left
          std::uint64_t ran = 0;
          std::exception_ptr err;
          {
            std::optional<ExecutionScope> scope;
            while (!im.queue.empty() && ran < kBurst) {
              std::function<void()> task = std::move(im.queue.front());
              im.queue.pop_front();
              wl.unlock();
              try {
                if (!scope) scope.emplace(device);
                task();
              } catch (...) {
                if (!err) err = std::current_exception();
              }
              task = nullptr;  // drop captured tensors before reporting completion
              ++ran;
              wl.lock();
            }
            wl.unlock();
          }  // the memory is closed here
          wl.lock();
          if (err && !im.error) im.error = err;
          im.completed += ran;
          im.done_cv.notify_all();
        }
      });
    }
    im.queue.push_back(std::move(work));
    ++im.submitted;
  }
  im.work_cv.notify_one();
}

void Stream::synchronize() {
  Impl& im = *impl_;
  std::exception_ptr err;
  {
    std::unique_lock lock(im.m);
    const std::uint64_t target = im.submitted;
    im.done_cv.wait(lock, [&] { return im.completed >= target; });
    err = std::exchange(im.error, nullptr);
  }
  if (!err) return;
  try {
    std::rethrow_exception(err);
  } catch (const std::exception& e) {
    throw Error(str_cat("[openreg] a kernel queued earlier on openreg:", device_, " (stream ", id_,
                        ") failed: ", e.what()));
  }
}

bool Stream::query() const {
  std::lock_guard lock(impl_->m);
  return impl_->completed >= impl_->submitted;
}

Stream& default_stream(int device) {
  check_device(device);
  static std::array<std::atomic<Stream*>, kMaxDevices> defaults{};
  static std::mutex m;
  auto& slot = defaults[static_cast<std::size_t>(device)];
  Stream* s = slot.load(std::memory_order_acquire);
  if (s != nullptr) return *s;
  std::lock_guard lock(m);
  s = slot.load();
  if (s == nullptr) {
    s = new Stream(device);  // lives for the process (its worker may still be running at exit)
    slot.store(s, std::memory_order_release);
  }
  return *s;
}

Stream& current_stream(int device) {
  check_device(device);
  Stream* s = t_current_stream[static_cast<std::size_t>(device)];
  return s != nullptr ? *s : default_stream(device);
}

void synchronize_device(int device) {
  std::vector<Stream*> streams;
  {
    auto& live = live_streams();
    std::lock_guard lock(live.m);
    for (Stream* s : live.streams)
      if (s->device() == device) streams.push_back(s);
  }
  for (Stream* s : streams)
    s->synchronize();
}

StreamGuard::StreamGuard(Stream& stream)
    : device_(stream.device()), previous_(t_current_stream[static_cast<std::size_t>(device_)]) {
  t_current_stream[static_cast<std::size_t>(device_)] = &stream;
}

StreamGuard::~StreamGuard() {
  t_current_stream[static_cast<std::size_t>(device_)] = previous_;
}

// ---- events -------------------------------------------------------------------------------------

struct Event::State {
  mutable std::mutex m;
  mutable std::condition_variable cv;
  bool recorded = false;
  bool done = true;
  std::uint64_t generation = 0;
  std::chrono::steady_clock::time_point time;
};

Event::Event() : state_(std::make_shared<State>()) {}

void Event::record(Stream& stream) {
  std::uint64_t gen = 0;
  {
    std::lock_guard lock(state_->m);
    state_->recorded = true;
    state_->done = false;
    gen = ++state_->generation;
  }
  stream.enqueue([st = state_, gen] {
    std::lock_guard lock(st->m);
    if (st->generation != gen) return;  // re-recorded since: a later marker counts
    st->time = std::chrono::steady_clock::now();
    st->done = true;
    st->cv.notify_all();
  });
}

bool Event::query() const {
  std::lock_guard lock(state_->m);
  return state_->done;
}

void Event::synchronize() const {
  std::unique_lock lock(state_->m);
  TB_CHECK(state_->recorded, "[openreg] Event::synchronize on an event that was never recorded");
  state_->cv.wait(lock, [&] { return state_->done; });
}

void Event::block(Stream& stream) const {
  stream.enqueue([st = state_] {
    std::unique_lock lock(st->m);
    st->cv.wait(lock, [&] { return st->done; });
  });
}

double Event::elapsed_ms(const Event& end) const {
  std::chrono::steady_clock::time_point a;
  std::chrono::steady_clock::time_point b;
  {
    std::lock_guard lock(state_->m);
    TB_CHECK(state_->recorded && state_->done,
             "[openreg] elapsed_ms: the start event has not been recorded and completed");
    a = state_->time;
  }
  {
    std::lock_guard lock(end.state_->m);
    TB_CHECK(end.state_->recorded && end.state_->done,
             "[openreg] elapsed_ms: the end event has not been recorded and completed");
    b = end.state_->time;
  }
  return std::chrono::duration<double, std::milli>(b - a).count();
}

}  // namespace tb::openreg
