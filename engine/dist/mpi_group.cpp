// The MPI process group (Open MPI; CPU tensors). Every collective is MPI's non-blocking form,
// polled against the deadline and the termination flag; beside it each rank sends every peer
// one 8-byte "arrived at collective #n" message on a second communicator, so a collective that
// does not complete names the ranks that never arrived. The communicators return errors
// (MPI_ERRORS_RETURN) instead of ending the process.
#include <mpi.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <climits>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <mutex>
#include <sstream>
#include <thread>
#include <vector>

#include "engine/dist/group_detail.h"
#include "engine/dist/rendezvous.h"

namespace tb::dist {

namespace {

using Clock = std::chrono::steady_clock;
using core::ScalarType;

bool g_initialized_here = false;
std::mutex g_init_mutex;
// The job's communicator: MPI_COMM_WORLD under mpirun; for ranks joined by the torchrun-style
// rendezvous, the communicator connect/accept built (each of them is a singleton job of its own).
MPI_Comm g_world = MPI_COMM_WORLD;
// The ompi-server rank 0 started for such a job (-1: none).
pid_t g_ompi_server = -1;

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
    // Open MPI's non-blocking all-reduce (coll/libnbc) picks a binomial reduce + broadcast for
    // two ranks by default: 2.3x slower than its blocking MPI_Allreduce from 256 KiB on (a 1 MB
    // gradient: 307 us against 136 us on the VM of docs/benchmarks.md). Its ring algorithm
    // matches the blocking one (168 us; 4 MiB: 2.8 ms against 7.7 ms). Sums stay one addition
    // per element on two ranks; 3+ ranks reduce floats by reduce-scatter anyway. An
    // OMPI_MCA_coll_libnbc_iallreduce_algorithm the user set wins.
    setenv("OMPI_MCA_coll_libnbc_iallreduce_algorithm", "1", 0);
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

  void abort_job(int code) noexcept override { MPI_Abort(g_world, code); }

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
      if (const int sig = termination_signal()) fail(ended_by_signal(sig));
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
        if (const int sig = termination_signal()) fail(ended_by_signal(sig));
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
      // Ended by a signal with every peer on this host still running (arrived, or signalled as
      // well before it did): the job as a whole was stopped (SIGTERM to mpirun or its launcher,
      // a scheduler's time limit), no rank was lost — blaming another rank would send the user
      // looking for a fault there is none of.
      bool peers_here = true;
      for (int p = 0; p < g_.size(); ++p)
        if (p != g_.rank() && (static_cast<std::size_t>(p) >= g_.peers().size() ||
                               g_.peers()[static_cast<std::size_t>(p)].host != me))
          peers_here = false;
      if (!why.empty() && termination_signal() != 0 && unwell.empty() && peers_here) {
        culprit = -1;
        os << "; every other rank was running: the job was stopped (or this rank alone was "
              "signalled)";
        throw DistError(os.str(), culprit);
      }
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
  if (g_initialized_here) {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized) MPI_Finalize();
    g_initialized_here = false;
    g_world = MPI_COMM_WORLD;
  }
  // The name server of a torchrun-style job (also when the rendezvous failed before MPI began).
  if (g_ompi_server > 0) {
    kill(g_ompi_server, SIGTERM);
    // Up to 2 s to go, then SIGKILL.
    for (int i = 0; i < 200 && waitpid(g_ompi_server, nullptr, WNOHANG) == 0; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    if (waitpid(g_ompi_server, nullptr, WNOHANG) == 0) {
      kill(g_ompi_server, SIGKILL);
      waitpid(g_ompi_server, nullptr, 0);
    }
    g_ompi_server = -1;
  }
}

void abort_world(int code) noexcept {
  int initialized = 0;
  int finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  int size = 1;
  int rank = 0;
  if (initialized && !finalized) {
    MPI_Comm_size(g_world, &size);
    MPI_Comm_rank(g_world, &rank);
  }
  // MPI_Abort kills every rank at once. Rank 0 writes the run into the store, and it fails too
  // when another rank does (its collective ends with the same error, or the same stop signal):
  // another rank gives it a moment to record why before ending the job (launch --ddp closes a
  // run rank 0 could not). Under mpirun's own grace (2 s, set by launch --ddp), a rank 0 that
  // hangs still ends with the job.
  if (size > 1 && rank != 0) std::this_thread::sleep_for(std::chrono::milliseconds(1000));
  if (size > 1) MPI_Abort(g_world, code);
  try {
    finalize();
  } catch (...) {  // nothing left to report to
  }
}

// ---- torchrun-style launches: joining separately started processes ----------------------------
//
// Processes started with RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT (torchrun, a scheduler, a
// script) are each an MPI job of one (a singleton). Open MPI joins such jobs with
// MPI_Comm_connect/MPI_Comm_accept once they share a name server, ompi-server (ompi-server(1),
// "MPI_Comm_connect(3)"). Rank 0 starts one and, over the TCP rendezvous on MASTER_ADDR:
// MASTER_PORT, tells every rank its address before they initialise MPI, then lets them in one
// by one in rank order: the group accepts, the newcomer connects, the two merge with the
// newcomer last — so the final communicator's ranks are the RANKs.

namespace {

void set_env_default(const char* name, const char* value) {
  if (std::getenv(name) == nullptr) setenv(name, value, 1);
}

// MASTER_PORT, or the next port when torchrun's own agent store holds MASTER_PORT (its static
// rendezvous: TORCHELASTIC_USE_AGENT_STORE=True).
int rendezvous_port() {
  const char* v = std::getenv("MASTER_PORT");
  TB_CHECK(v != nullptr && *v != '\0', "[dist] RANK and WORLD_SIZE are set but MASTER_PORT is not ",
           "(a torchrun-style launch needs MASTER_ADDR and MASTER_PORT: rank 0's host and a free ",
           "port on it)");
  char* end = nullptr;
  errno = 0;
  const long port = std::strtol(v, &end, 10);
  TB_CHECK(errno == 0 && end != v && *end == '\0' && port >= 1 && port <= 65535,
           "[dist] environment MASTER_PORT='", v, "' is not a TCP port (1-65535)");
  const char* agent = std::getenv("TORCHELASTIC_USE_AGENT_STORE");
  const bool agent_store = agent != nullptr && std::string(agent) == "True";
  TB_CHECK(!agent_store || port < 65535, "[dist] MASTER_PORT=65535 is torchrun's store; ours ",
           "takes the next port and there is none");
  return static_cast<int>(port) + (agent_store ? 1 : 0);
}

// The path of `program` on PATH ("" when it is not there).
std::string find_on_path(const char* program) {
  const char* path = std::getenv("PATH");
  std::string dirs = path != nullptr ? path : "/usr/bin:/bin";
  std::size_t at = 0;
  while (at <= dirs.size()) {
    const std::size_t end = std::min(dirs.find(':', at), dirs.size());
    std::string candidate = dirs.substr(at, end - at);
    candidate = (candidate.empty() ? "." : candidate) + "/" + program;
    if (access(candidate.c_str(), X_OK) == 0) return candidate;
    at = end + 1;
  }
  return "";
}

// Starts ompi-server (it dies with this process's thread that started it, or at finalize()) and
// returns its URI.
std::string start_ompi_server(Clock::time_point deadline) {
  const std::string program = find_on_path("ompi-server");
  if (program.empty())
    throw DistError(
        "[dist] ompi-server not found on PATH: a torchrun-style launch needs Open "
        "MPI's ompi-server (Debian's openmpi-bin)",
        -1);
  char path[] = "/tmp/trainbench-ompi-server-XXXXXX";
  const int fd = mkstemp(path);
  TB_CHECK(fd >= 0,
           "[dist] cannot create a file for ompi-server's address: ", std::strerror(errno));
  close(fd);
  // Everything the child needs is prepared here: after fork() it only calls async-signal-safe
  // functions (prctl, getppid, execv, _exit).
  std::vector<char*> argv = {const_cast<char*>(program.c_str()),
                             const_cast<char*>("--no-daemonize"), const_cast<char*>("-r"), path,
                             nullptr};
  const pid_t parent = getpid();
  const pid_t pid = fork();
  TB_CHECK(pid >= 0, "[dist] cannot start ompi-server: ", std::strerror(errno));
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (getppid() != parent) _exit(1);
    execv(argv[0], argv.data());
    _exit(127);
  }
  g_ompi_server = pid;
  std::string uri;
  for (;;) {
    // The whole line: ompi-server writes its URI and a newline.
    std::ifstream in(path);
    std::ostringstream contents;
    contents << in.rdbuf();
    const std::string text = contents.str();
    if (const auto nl = text.find('\n'); nl != std::string::npos && nl > 0) {
      uri = text.substr(0, nl);
      break;
    }
    int status = 0;
    if (waitpid(pid, &status, WNOHANG) == pid) {
      g_ompi_server = -1;
      unlink(path);
      throw DistError("[dist] ompi-server ended before it gave its address (exit status " +
                          std::to_string(WIFEXITED(status) ? WEXITSTATUS(status) : -1) + ")",
                      -1);
    }
    if (Clock::now() >= deadline) {
      unlink(path);
      throw DistError("[dist] ompi-server gave no address before the deadline", -1);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  unlink(path);
  return uri;
}

// Ends the process if the join is not over by the deadline (see join_env_world).
class JoinWatchdog {
 public:
  JoinWatchdog(Clock::time_point deadline, int rank, int size)
      : thread_([this, deadline, rank, size] {
          std::unique_lock<std::mutex> lock(mu_);
          if (cv_.wait_until(lock, deadline, [this] { return done_; })) return;
          std::fprintf(stderr,
                       "error: [dist] rendezvous: rank %d of %d: the ranks did not join before "
                       "the deadline (distributed.timeout_s); a rank failed or stopped while they "
                       "connected. Ending this rank.\n",
                       rank, size);
          std::fflush(stderr);
          // Not MPI_Abort: the thread level is MPI_THREAD_SERIALIZED and the main thread is
          // inside MPI_Comm_accept/connect right now, so a second MPI call from this thread is
          // erroneous (it may hang the very path meant to end a hang). The process ends without
          // MPI; a launcher (mpirun, torchrun) sees the exit code and stops the other ranks.
          _exit(3);
        }) {}
  ~JoinWatchdog() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      done_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  JoinWatchdog(const JoinWatchdog&) = delete;
  JoinWatchdog& operator=(const JoinWatchdog&) = delete;

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  std::thread thread_;  // last: starts after the members it uses
};

// Joins the job's processes into g_world (see above).
void join_env_world(const LaunchEnv& env, double timeout_s) {
  const char* addr_env = std::getenv("MASTER_ADDR");
  TB_CHECK(addr_env != nullptr && *addr_env != '\0', "[dist] RANK and WORLD_SIZE are set but ",
           "MASTER_ADDR is not (a torchrun-style launch needs MASTER_ADDR and MASTER_PORT: rank ",
           "0's host and a free port on it)");
  const std::string address = addr_env;
  const int port = rendezvous_port();
  const auto deadline =
      Clock::now() + std::chrono::milliseconds(static_cast<std::int64_t>(timeout_s * 1000.0));
  if (is_loopback_address(address)) {
    // One host: Open MPI's daemons and TCP transport stay on loopback.
    set_env_default("OMPI_MCA_oob_tcp_if_include", "lo");
    set_env_default("OMPI_MCA_btl_tcp_if_include", "lo");
  }
  auto check = [](int rc, const char* what) {
    TB_CHECK(rc == MPI_SUCCESS, "[dist] ", what, " failed: ", mpi_error(rc));
  };
  // Each newcomer in rank order: the group so far accepts (root: its rank 0), the newcomer
  // connects, and the two merge with the newcomer last.
  auto admit = [&](MPI_Comm group, const char* port_name) {
    MPI_Comm inter = MPI_COMM_NULL;
    MPI_Comm merged = MPI_COMM_NULL;
    check(MPI_Comm_accept(port_name, MPI_INFO_NULL, 0, group, &inter), "MPI_Comm_accept");
    check(MPI_Intercomm_merge(inter, 0, &merged), "MPI_Intercomm_merge");
    MPI_Comm_free(&inter);
    MPI_Comm_set_errhandler(merged, MPI_ERRORS_RETURN);
    return merged;
  };
  // Open MPI's accept and connect have no deadline: a rank that dies or stops while the others
  // are joined to it would hold them forever. The watchdog ends this process just after the
  // rendezvous's own deadline (whose errors name the rank, and come first)
  // (MPI_Abort, the job-ending call; torchrun or the scheduler then stops the others).
  JoinWatchdog watchdog(deadline + std::chrono::seconds(2), env.rank, env.size);
  MPI_Comm world = MPI_COMM_NULL;
  if (env.rank == 0) {
    RendezvousServer server(address, port, env.size, deadline);
    try {
      const std::string uri = start_ompi_server(deadline);
      server.gather();
      for (int r = 1; r < env.size; ++r)
        server.send(r, uri);
      setenv("OMPI_MCA_pmix_server_uri", uri.c_str(), 1);
      init_mpi();
      MPI_Comm_set_errhandler(MPI_COMM_SELF, MPI_ERRORS_RETURN);
      char port_name[MPI_MAX_PORT_NAME] = {0};
      check(MPI_Open_port(MPI_INFO_NULL, port_name), "MPI_Open_port");
      check(MPI_Comm_dup(MPI_COMM_SELF, &world), "MPI_Comm_dup");
      // Every rank's MPI first: a rank that fails there fails the rendezvous while nobody
      // waits in an accept yet.
      for (int r = 1; r < env.size; ++r) {
        const std::string ready = server.receive(r);
        if (ready != "ready")
          throw DistError("[dist] rendezvous: rank " + std::to_string(r) + " " + ready, r);
      }
      for (int r = 1; r < env.size; ++r) {
        server.send(r, port_name);
        MPI_Comm next = admit(world, port_name);
        MPI_Comm_free(&world);
        world = next;
      }
      MPI_Close_port(port_name);
    } catch (const std::exception& e) {
      server.fail_all(std::string("rank 0 failed: ") + e.what());
      throw;
    }
  } else {
    RendezvousClient client(address, port, env.rank, env.size, deadline);
    const std::string uri = client.receive();
    setenv("OMPI_MCA_pmix_server_uri", uri.c_str(), 1);
    try {
      init_mpi();
    } catch (const std::exception& e) {
      client.send(std::string("could not initialise MPI: ") + e.what());
      throw;
    }
    MPI_Comm_set_errhandler(MPI_COMM_SELF, MPI_ERRORS_RETURN);
    client.send("ready");
    std::string port_name = client.receive();
    MPI_Comm inter = MPI_COMM_NULL;
    check(MPI_Comm_connect(port_name.data(), MPI_INFO_NULL, 0, MPI_COMM_SELF, &inter),
          "MPI_Comm_connect");
    check(MPI_Intercomm_merge(inter, 1, &world), "MPI_Intercomm_merge");
    MPI_Comm_free(&inter);
    MPI_Comm_set_errhandler(world, MPI_ERRORS_RETURN);
    for (int r = env.rank + 1; r < env.size; ++r) {
      MPI_Comm next = admit(world, nullptr);
      MPI_Comm_free(&world);
      world = next;
    }
  }
  g_world = world;
}

}  // namespace

namespace detail {

std::shared_ptr<ProcessGroup> make_mpi_group(const GroupOptions& options) {
  const LaunchEnv env = detect_launch_env();
  if (env.launcher == "torchrun" && env.size > 1 && g_world == MPI_COMM_WORLD)
    join_env_world(env, options.timeout_s);
  else
    init_mpi();
  int rank = 0;
  int size = 1;
  MPI_Comm_rank(g_world, &rank);
  MPI_Comm_size(g_world, &size);
  if (env.launcher == "torchrun")
    TB_CHECK(rank == env.rank && size == env.size, "[dist] this process is MPI rank ", rank, " of ",
             size, " but its environment says RANK=", env.rank, " WORLD_SIZE=", env.size);
  MPI_Comm data = MPI_COMM_NULL;
  MPI_Comm arrivals = MPI_COMM_NULL;
  int rc = MPI_Comm_dup(g_world, &data);
  if (rc == MPI_SUCCESS) rc = MPI_Comm_dup(g_world, &arrivals);
  TB_CHECK(rc == MPI_SUCCESS, "[dist] MPI_Comm_dup failed: ", mpi_error(rc));
  MPI_Comm_set_errhandler(data, MPI_ERRORS_RETURN);
  MPI_Comm_set_errhandler(arrivals, MPI_ERRORS_RETURN);
  auto g = std::make_shared<MpiGroup>(rank, size, options.timeout_s, data, arrivals);
  g->exchange_peers();
  return g;
}

}  // namespace detail
}  // namespace tb::dist
