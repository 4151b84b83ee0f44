// The MPI process group (Open MPI; CPU tensors). Every collective is MPI's non-blocking form,
// polled against the deadline and the termination flag; beside it each rank sends every peer
// one 8-byte "arrived at collective #n" message on a second communicator, so a collective that
// does not complete names the ranks that never arrived. The communicators return errors
// (MPI_ERRORS_RETURN) instead of ending the process.
#include <mpi.h>
#include <sched.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cstring>
#include <fstream>
#include <mutex>
#include <sstream>
#include <thread>
#include <vector>

#include "engine/dist/group_detail.h"

namespace tb::dist {

namespace {

using Clock = std::chrono::steady_clock;
using core::ScalarType;

bool g_initialized_here = false;
std::mutex g_init_mutex;

std::string mpi_error(int code) {
  char buf[MPI_MAX_ERROR_STRING] = {0};
  int len = 0;
  if (MPI_Error_string(code, buf, &len) != MPI_SUCCESS) return "MPI error " + std::to_string(code);
  return std::string(buf, static_cast<std::size_t>(len));
}

MPI_Datatype mpi_type(ScalarType t) {
  switch (t) {
    case ScalarType::Float32:
      return MPI_FLOAT;
    case ScalarType::Float64:
      return MPI_DOUBLE;
    case ScalarType::Int64:
      return MPI_INT64_T;
    case ScalarType::Int32:
      return MPI_INT32_T;
    case ScalarType::UInt8:
      return MPI_UINT8_T;
    default:
      break;
  }
  throw ValueError("[dist] no MPI type for " + std::string(core::scalar_type_name(t)));
}

MPI_Op mpi_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAvg:
      return MPI_SUM;
    case ReduceOp::kMin:
      return MPI_MIN;
    case ReduceOp::kMax:
      return MPI_MAX;
  }
  return MPI_SUM;
}

bool is_float(ScalarType t) {
  return t == ScalarType::Float32 || t == ScalarType::Float64;
}

void init_mpi() {
  std::lock_guard<std::mutex> lock(g_init_mutex);
  int finalized = 0;
  MPI_Finalized(&finalized);
  TB_CHECK(!finalized, "[dist] MPI was already finalised in this process");
  int initialized = 0;
  MPI_Initialized(&initialized);
  int provided = 0;
  if (!initialized) {
    const int rc = MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided);
    TB_CHECK(rc == MPI_SUCCESS, "[dist] MPI_Init_thread failed: ", mpi_error(rc));
    g_initialized_here = true;
  } else {
    MPI_Query_thread(&provided);
  }
  TB_CHECK(provided >= MPI_THREAD_SERIALIZED, "[dist] this MPI gives thread level ", provided,
           ", the trainer needs MPI_THREAD_SERIALIZED (collectives come from the run thread)");
}

class MpiGroup final : public ProcessGroup {
 public:
  MpiGroup(int rank, int size, double timeout_s, MPI_Comm data, MPI_Comm arrivals)
      : ProcessGroup(rank, size, timeout_s), data_(data), arrivals_(arrivals) {}

  ~MpiGroup() override {
    // A broken group may still have requests in flight: its communicators are left to
    // MPI_Abort / MPI_Finalize.
    if (broken()) return;
    MPI_Comm_free(&data_);
    MPI_Comm_free(&arrivals_);
  }

  const char* backend() const override { return "mpi"; }

  void abort_job(int code) noexcept override { MPI_Abort(MPI_COMM_WORLD, code); }

  void exchange_peers() {
    std::ostringstream me;
    me << detail::host_name() << ' ' << getpid();
    const auto all = all_gather_strings(me.str(), "host and pid of every rank");
    std::vector<PeerInfo> peers;
    for (int r = 0; r < size(); ++r) {
      PeerInfo p;
      p.rank = r;
      std::istringstream in(all[static_cast<std::size_t>(r)]);
      in >> p.host >> p.pid;
      peers.push_back(p);
    }
    set_peers(std::move(peers));
  }

 protected:
  void do_all_reduce(void* data, std::int64_t n, ScalarType dtype, ReduceOp op,
                     const std::string& label) override {
    if (size() == 1 || n == 0) {
      Collective c(*this, label);
      c.finish();
      return;
    }
    check_count(n, label);
    const MPI_Datatype type = mpi_type(dtype);
    Collective c(*this, label);
    if (size() == 2 || !is_float(dtype) || op == ReduceOp::kMin || op == ReduceOp::kMax) {
      // Exact (integers, min/max) or a single addition per element (two ranks): the same bits
      // on every rank whatever the algorithm.
      MPI_Request req = MPI_REQUEST_NULL;
      c.check(
          MPI_Iallreduce(MPI_IN_PLACE, data, static_cast<int>(n), type, mpi_op(op), data_, &req));
      c.wait(req);
    } else {
      // Float sums over 3+ ranks: each element reduced on one rank (reduce-scatter), then
      // copied to all (all-gather), so that every replica gets the same bits.
      const std::size_t es = core::element_size(dtype);
      const std::int64_t chunk = (n + size() - 1) / size();
      check_count(chunk * size(), label);
      std::vector<unsigned char> tmp(static_cast<std::size_t>(chunk * size()) * es, 0);
      std::memcpy(tmp.data(), data, static_cast<std::size_t>(n) * es);
      std::vector<unsigned char> mine(static_cast<std::size_t>(chunk) * es);
      MPI_Request req = MPI_REQUEST_NULL;
      c.check(MPI_Ireduce_scatter_block(tmp.data(), mine.data(), static_cast<int>(chunk), type,
                                        MPI_SUM, data_, &req));
      c.wait(req);
      c.check(MPI_Iallgather(mine.data(), static_cast<int>(chunk), type, tmp.data(),
                             static_cast<int>(chunk), type, data_, &req));
      c.wait(req);
      std::memcpy(data, tmp.data(), static_cast<std::size_t>(n) * es);
    }
    c.finish();
    if (op == ReduceOp::kAvg) detail::divide_in_place(data, n, dtype, size());
  }

  void do_broadcast(void* data, std::int64_t bytes, int root, const std::string& label) override {
    Collective c(*this, label);
    auto* p = static_cast<unsigned char*>(data);
    constexpr std::int64_t kPiece = std::int64_t{1} << 30;
    for (std::int64_t at = 0; at < bytes; at += kPiece) {
      const auto len = static_cast<int>(std::min(kPiece, bytes - at));
      MPI_Request req = MPI_REQUEST_NULL;
      c.check(MPI_Ibcast(p + at, len, MPI_BYTE, root, data_, &req));
      c.wait(req);
    }
    c.finish();
  }

  void do_all_gather(const void* in, void* out, std::int64_t bytes,
                     const std::string& label) override {
    check_count(bytes, label);
    Collective c(*this, label);
    MPI_Request req = MPI_REQUEST_NULL;
    c.check(MPI_Iallgather(in, static_cast<int>(bytes), MPI_BYTE, out, static_cast<int>(bytes),
                           MPI_BYTE, data_, &req));
    c.wait(req);
    c.finish();
  }

  void do_reduce_scatter(const void* in, void* out, std::int64_t n, ScalarType dtype, ReduceOp op,
                         const std::string& label) override {
    check_count(n * size(), label);
    Collective c(*this, label);
    MPI_Request req = MPI_REQUEST_NULL;
    c.check(MPI_Ireduce_scatter_block(in, out, static_cast<int>(n), mpi_type(dtype), mpi_op(op),
                                      data_, &req));
    c.wait(req);
    c.finish();
    if (op == ReduceOp::kAvg) detail::divide_in_place(out, n, dtype, size());
  }

  void do_barrier(const std::string& label) override {
    Collective c(*this, label);
    MPI_Request req = MPI_REQUEST_NULL;
    c.check(MPI_Ibarrier(data_, &req));
    c.wait(req);
    c.finish();
  }

 private:
  static void check_count(std::int64_t n, const std::string& label) {
    TB_CHECK(n <= INT_MAX, "[dist] ", label, ": ", n,
             " elements is more than one MPI call takes (2^31 - 1)");
  }

  // One collective: the arrival messages to and from every peer, and the wait for the MPI
  // requests against the deadline and the termination flag.
  class Collective {
   public:
    Collective(MpiGroup& g, const std::string& label)
        : g_(g), label_(label), deadline_(Clock::now() + to_duration(g.timeout())) {
      if (const int sig = termination_signal()) fail("stopped by signal " + std::to_string(sig));
      sent_ = g_.sequence();
      const auto n = static_cast<std::size_t>(g_.size());
      received_.assign(n, -1);
      requests_.assign(2 * n, MPI_REQUEST_NULL);
      for (int p = 0; p < g_.size(); ++p) {
        if (p == g_.rank()) continue;
        const auto i = static_cast<std::size_t>(p);
        check(MPI_Isend(&sent_, 1, MPI_INT64_T, p, kTag, g_.arrivals_, &requests_[i]));
        check(MPI_Irecv(&received_[i], 1, MPI_INT64_T, p, kTag, g_.arrivals_, &requests_[n + i]));
      }
    }
    Collective(const Collective&) = delete;
    Collective& operator=(const Collective&) = delete;

    void check(int rc) {
      if (rc != MPI_SUCCESS) fail("MPI reported: " + mpi_error(rc));
    }

    // Waits for `req`: spins briefly (small collectives finish in microseconds), then yields,
    // then sleeps in short naps, testing the request, the deadline and the termination flag.
    void wait(MPI_Request& req) {
      const auto start = Clock::now();
      for (;;) {
        int done = 0;
        check(MPI_Test(&req, &done, MPI_STATUS_IGNORE));
        if (done) return;
        if (const int sig = termination_signal()) fail("stopped by signal " + std::to_string(sig));
        const auto now = Clock::now();
        if (now > deadline_) fail("");
        // MPI's non-blocking collectives advance only inside MPI calls: test often while the
        // data moves (a large all-reduce is many rounds), yield the CPU between tests, and nap
        // only once a peer is clearly late.
        const auto waited = now - start;
        if (waited < std::chrono::microseconds(50)) continue;
        if (waited < std::chrono::milliseconds(kYieldMs)) {
          sched_yield();
        } else {
          std::this_thread::sleep_for(std::chrono::microseconds(100));
        }
      }
    }

    // The collective completed: every peer arrived, so its arrival message is here or on its
    // way; wait for them (and our own sends).
    void finish() {
      check(MPI_Waitall(static_cast<int>(requests_.size()), requests_.data(), MPI_STATUSES_IGNORE));
      for (int p = 0; p < g_.size(); ++p) {
        if (p == g_.rank()) continue;
        if (received_[static_cast<std::size_t>(p)] != sent_)
          fail("rank " + std::to_string(p) + " is at collective #" +
               std::to_string(received_[static_cast<std::size_t>(p)]) +
               ": the ranks called different collectives");
      }
    }

   private:
    static constexpr int kTag = 7001;
    static constexpr int kYieldMs = 200;

    static Clock::duration to_duration(double s) {
      return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s));
    }

    // Ends the collective with a DistError: `why` = "" for the deadline.
    [[noreturn]] void fail(const std::string& why) {
      std::vector<int> missing;
      std::vector<std::pair<int, std::string>> unwell;  // same-host peers: gone, stopped
      const std::string me = detail::host_name();
      for (int p = 0; p < g_.size(); ++p) {
        if (p == g_.rank()) continue;
        const auto i = static_cast<std::size_t>(p);
        if (!requests_.empty()) {
          MPI_Request& r = requests_[static_cast<std::size_t>(g_.size()) + i];
          int arrived = r == MPI_REQUEST_NULL ? 1 : 0;
          if (!arrived) MPI_Test(&r, &arrived, MPI_STATUS_IGNORE);
          if (!arrived) missing.push_back(p);
        }
        if (i < g_.peers().size() && g_.peers()[i].host == me && g_.peers()[i].pid > 0) {
          const std::string state = process_state(g_.peers()[i].pid);
          if (!state.empty()) unwell.emplace_back(p, state);
        }
      }
      // The culprit is the rank that did not arrive (one whose process is gone or stopped first);
      // a rank that arrived and has exited since (it finished its part and left) is named but
      // not blamed unless nobody is missing.
      int culprit = !missing.empty() ? missing.front() : -1;
      for (const auto& [p, st] : unwell)
        if (std::find(missing.begin(), missing.end(), p) != missing.end()) {
          culprit = p;
          break;
        }
      if (culprit < 0 && !unwell.empty()) culprit = unwell.front().first;
      std::ostringstream os;
      os << "[dist] ";
      if (why.empty()) {
        os << label_ << " timed out after " << g_.timeout() << " s";
      } else {
        os << label_ << ": " << why;
      }
      auto state_of = [&](int p) -> std::string {
        for (const auto& [q, st] : unwell)
          if (q == p) return st;
        return "";
      };
      for (int p : missing) {
        os << "; " << g_.describe_rank(p) << " did not arrive";
        if (const std::string st = state_of(p); !st.empty()) os << " (its process " << st << ")";
      }
      for (const auto& [p, st] : unwell)
        if (std::find(missing.begin(), missing.end(), p) == missing.end())
          os << "; the process of " << g_.describe_rank(p) << " " << st;
      if (missing.empty() && unwell.empty() && g_.size() == 2) {
        // Two ranks, both arrived, this one still waits: the other stopped doing its part.
        culprit = 1 - g_.rank();
        os << "; " << g_.describe_rank(culprit) << " arrived but did not finish its part";
      } else if (missing.empty() && unwell.empty() && why.empty()) {
        os << "; every rank arrived, the transfer itself stalled";
      }
      throw DistError(os.str(), culprit);
    }

    // "is gone" (no such process, or a zombie), "is stopped" (SIGSTOP, a debugger), or "" when
    // it runs or sleeps: the state letter of /proc/PID/stat (proc(5)).
    static std::string process_state(int pid) {
      if (kill(pid, 0) != 0 && errno == ESRCH) return "is gone";
      std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
      std::string stat;
      std::getline(in, stat);
      const auto paren = stat.rfind(')');
      if (paren == std::string::npos || paren + 2 >= stat.size()) return "";
      const char st = stat[paren + 2];
      if (st == 'Z' || st == 'X') return "is gone";
      if (st == 'T' || st == 't') return "is stopped";
      return "";
    }

    MpiGroup& g_;
    std::string label_;
    Clock::time_point deadline_;
    std::int64_t sent_ = 0;
    std::vector<std::int64_t> received_;
    std::vector<MPI_Request> requests_;
  };

  MPI_Comm data_;
  MPI_Comm arrivals_;
};

}  // namespace

bool mpi_available() {
  return true;
}

void finalize() {
  std::lock_guard<std::mutex> lock(g_init_mutex);
  if (!g_initialized_here) return;
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
  g_initialized_here = false;
}

void abort_world(int code) noexcept {
  int initialized = 0;
  int finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  int size = 1;
  if (initialized && !finalized) MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (size > 1) MPI_Abort(MPI_COMM_WORLD, code);
  try {
    finalize();
  } catch (...) {  // nothing left to report to
  }
}

namespace detail {

std::shared_ptr<ProcessGroup> make_mpi_group(const GroupOptions& options) {
  init_mpi();
  int rank = 0;
  int size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  MPI_Comm data = MPI_COMM_NULL;
  MPI_Comm arrivals = MPI_COMM_NULL;
  int rc = MPI_Comm_dup(MPI_COMM_WORLD, &data);
  if (rc == MPI_SUCCESS) rc = MPI_Comm_dup(MPI_COMM_WORLD, &arrivals);
  TB_CHECK(rc == MPI_SUCCESS, "[dist] MPI_Comm_dup failed: ", mpi_error(rc));
  MPI_Comm_set_errhandler(data, MPI_ERRORS_RETURN);
  MPI_Comm_set_errhandler(arrivals, MPI_ERRORS_RETURN);
  auto g = std::make_shared<MpiGroup>(rank, size, options.timeout_s, data, arrivals);
  g->exchange_peers();
  return g;
}

}  // namespace detail
}  // namespace tb::dist
