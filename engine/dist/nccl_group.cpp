// The NCCL process group (CUDA tensors), built when the CUDA toolkit and its nccl.h are found.
//
// - NCCL is loaded with dlopen on first use (libnccl.so.2), as the CUDA backend loads cuBLAS:
//   linking it would make every binary need it, GPU or not.
// - Bootstrap and host data go through a CPU group (the MPI group of the same ranks): rank 0's
//   ncclUniqueId is broadcast over it, and collectives on CPU tensors (pause requests, the
//   evaluation's sums, strings) are passed to it, so one group serves a whole run.
// - Each collective runs on the group's own stream, ordered after the compute stream (the
//   CUDA backend launches on the device's legacy default stream) by an event, and the compute
//   stream waits for it by another; as PyTorch's ProcessGroupNCCL does with its NCCL streams.
// - The deadline: before each collective the ranks meet in a barrier of the CPU group (which
//   names a rank that does not arrive or whose process is gone); then the host polls the
//   completion event and ncclCommGetAsyncError until the deadline, and a collective that does not
//   complete is aborted (ncclCommAbort) with a DistError naming it — PyTorch's NCCL watchdog
//   (ProcessGroupNCCL.cpp: timeout per work item, ncclCommAbort). Ending a communicator is itself
//   given a deadline (end_communicator), as PyTorch's heartbeat monitor bounds a hung abort, and
//   so is creating it (init_communicator): a bootstrap that cannot reach rank 0 fails the run
//   after timeout_s instead of hanging.
// - Each rank needs a GPU of its own (NCCL refuses two ranks on one device, as "invalid
//   usage"): a failed set-up with more local ranks than visible devices says so.
//
// Not runnable in CI (no GPU): the DistNccl tests of tests/engine/dist_test.cpp run under
// bench/gpu/run.sh.
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <nccl.h>

#include <chrono>
#include <condition_variable>
#include <cstring>
#include <future>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>

#include "engine/dist/group_detail.h"

namespace tb::dist {

namespace {

using Clock = std::chrono::steady_clock;
using core::ScalarType;

// ---- libnccl, loaded on first use -------------------------------------------------------------

struct NcclApi {
  decltype(&::ncclGetVersion) get_version = nullptr;
  decltype(&::ncclGetUniqueId) get_unique_id = nullptr;
  decltype(&::ncclCommInitRank) comm_init_rank = nullptr;
  decltype(&::ncclCommDestroy) comm_destroy = nullptr;
  decltype(&::ncclCommAbort) comm_abort = nullptr;
  decltype(&::ncclCommGetAsyncError) comm_get_async_error = nullptr;
  decltype(&::ncclGetErrorString) get_error_string = nullptr;
  decltype(&::ncclAllReduce) all_reduce = nullptr;
  decltype(&::ncclBroadcast) broadcast = nullptr;
  decltype(&::ncclAllGather) all_gather = nullptr;
  decltype(&::ncclReduceScatter) reduce_scatter = nullptr;
  decltype(&::ncclGetLastError) get_last_error = nullptr;  // 2.13 and newer; may stay null
  int version = 0;
};

template <typename F>
void resolve(void* lib, F& field, const char* name) {
  void* f = dlsym(lib, name);
  if (f == nullptr)
    throw ValueError(std::string("[dist] backend 'nccl': libnccl.so.2 lacks ") + name);
  field = reinterpret_cast<F>(f);
}

const NcclApi& nccl() {
  static std::once_flag once;
  static NcclApi api;
  static std::string error;
  std::call_once(once, [] {
    void* lib = dlopen("libnccl.so.2", RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) lib = dlopen("libnccl.so", RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) {
      const char* why = dlerror();
      error = std::string("[dist] backend 'nccl': libnccl.so.2 could not be loaded (") +
              (why != nullptr ? why : "?") +
              "); install NCCL (the CUDA toolkit's, or the libnccl2 package) where the dynamic "
              "loader finds it";
      return;
    }
    try {
      resolve(lib, api.get_version, "ncclGetVersion");
      resolve(lib, api.get_unique_id, "ncclGetUniqueId");
      resolve(lib, api.comm_init_rank, "ncclCommInitRank");
      resolve(lib, api.comm_destroy, "ncclCommDestroy");
      resolve(lib, api.comm_abort, "ncclCommAbort");
      resolve(lib, api.comm_get_async_error, "ncclCommGetAsyncError");
      resolve(lib, api.get_error_string, "ncclGetErrorString");
      resolve(lib, api.all_reduce, "ncclAllReduce");
      resolve(lib, api.broadcast, "ncclBroadcast");
      resolve(lib, api.all_gather, "ncclAllGather");
      resolve(lib, api.reduce_scatter, "ncclReduceScatter");
      api.get_last_error =
          reinterpret_cast<decltype(api.get_last_error)>(dlsym(lib, "ncclGetLastError"));
      api.get_version(&api.version);
      // ncclAvg came with 2.10.
      if (api.version < 21000)
        error = "[dist] backend 'nccl': NCCL " + std::to_string(api.version) +
                " is too old (2.10 or newer is needed)";
    } catch (const std::exception& e) {
      error = e.what();
    }
  });
  if (!error.empty()) throw ValueError(error);
  return api;
}

// The error's name, and NCCL's last message where it keeps one ("invalid usage" alone does not
// say that two ranks share a GPU; the last message does).
std::string nccl_error(ncclResult_t r, ncclComm_t comm = nullptr) {
  const NcclApi& api = nccl();
  const char* s = api.get_error_string(r);
  std::string text = s != nullptr ? s : "NCCL error " + std::to_string(static_cast<int>(r));
  const char* last = api.get_last_error != nullptr ? api.get_last_error(comm) : nullptr;
  if (last != nullptr && *last != '\0') text += std::string(" (") + last + ")";
  return text;
}

void check_cuda(cudaError_t e, const char* what) {
  if (e != cudaSuccess)
    throw DistError(std::string("[dist] nccl: ") + what + ": " + cudaGetErrorString(e), -1);
}

ncclDataType_t nccl_type(ScalarType t) {
  switch (t) {
    case ScalarType::Float32:
      return ncclFloat32;
    case ScalarType::Float64:
      return ncclFloat64;
    case ScalarType::Int64:
      return ncclInt64;
    case ScalarType::Int32:
      return ncclInt32;
    case ScalarType::UInt8:
      return ncclUint8;
    default:
      break;
  }
  throw ValueError("[dist] nccl: no NCCL type for " + std::string(core::scalar_type_name(t)));
}

ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return ncclSum;
    case ReduceOp::kAvg:
      return ncclAvg;
    case ReduceOp::kMin:
      return ncclMin;
    case ReduceOp::kMax:
      return ncclMax;
  }
  return ncclSum;
}

// Makes `device` the calling thread's current device.
void make_current(int device) {
  int current = -1;
  check_cuda(cudaGetDevice(&current), "cudaGetDevice");
  if (current != device) check_cuda(cudaSetDevice(device), "cudaSetDevice");
}

// Ends a communicator (ncclCommAbort, or ncclCommDestroy for a healthy one) without letting a
// hang in NCCL hold the process: both may wait for NCCL's proxy thread and, within a node, for
// the other ranks (NVIDIA/nccl issue 863: a lone abort hung in commReclaim). The call runs on a
// thread of its own and is waited for up to kEndWait; after that the caller goes on (its run
// fails, and the job ends with the CPU group's MPI_Abort) and the thread is left to finish.
constexpr auto kEndWait = std::chrono::seconds(10);

void end_communicator(ncclComm_t comm, int device, bool abort) noexcept {
  if (comm == nullptr) return;
  try {
    auto ended = std::make_shared<std::promise<void>>();
    std::future<void> done = ended->get_future();
    // The function is taken here: the thread touches no static state of this file.
    const auto end = abort ? nccl().comm_abort : nccl().comm_destroy;
    std::thread([comm, device, end, ended] {
      (void)cudaSetDevice(device);  // the communicator's GPU, not a context on GPU 0
      end(comm);
      ended->set_value();
    }).detach();
    (void)done.wait_for(kEndWait);
  } catch (const std::exception&) {  // no thread to be had: end it here
    if (abort)
      nccl().comm_abort(comm);
    else
      nccl().comm_destroy(comm);
  }
}

// Seconds as a person writes them: 30, 2.5.
std::string seconds_text(double s) {
  std::ostringstream os;
  os << s;
  return os.str();
}

// ncclCommInitRank with the group's deadline. Every rank has reached it (the CPU group's barrier
// just before), so what can hang is NCCL's bootstrap: rank 0's socket that another host cannot
// reach (a firewall, the wrong interface), and a blocking ncclCommInitRank then waits forever.
// The call runs on a thread of its own (made current on the rank's GPU: the communicator is
// bound to the device current at init) and is waited for until the deadline or a termination
// signal; a thread that finishes after its caller gave up aborts the communicator it made.
// (NCCL's non-blocking communicators would make the wait pollable, but then every collective
// may return ncclInProgress too; this keeps the collectives blocking.)
struct PendingInit {
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  bool abandoned = false;
  ncclResult_t result = ncclSuccess;
  ncclComm_t comm = nullptr;
};

ncclResult_t init_communicator(ncclComm_t* comm, int size, const ncclUniqueId& id, int rank,
                               int device, double timeout_s, const std::string& who) {
  const NcclApi& api = nccl();
  auto pending = std::make_shared<PendingInit>();
  std::thread([pending, size, id, rank, device, init = api.comm_init_rank, abort = api.comm_abort] {
    ncclComm_t c = nullptr;
    ncclResult_t r = ncclUnhandledCudaError;
    if (cudaSetDevice(device) == cudaSuccess) r = init(&c, size, id, rank);
    std::lock_guard<std::mutex> lock(pending->mu);
    if (pending->abandoned) {
      if (c != nullptr) abort(c);
      return;
    }
    pending->result = r;
    pending->comm = c;
    pending->done = true;
    pending->cv.notify_all();
  }).detach();
  const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                           std::chrono::duration<double>(timeout_s));
  std::unique_lock<std::mutex> lock(pending->mu);
  for (;;) {
    if (pending->cv.wait_for(lock, std::chrono::milliseconds(100), [&] { return pending->done; })) {
      *comm = pending->comm;
      return pending->result;
    }
    std::string why;
    if (const int sig = termination_signal())
      why = ended_by_signal(sig);
    else if (Clock::now() > deadline)
      why = "not complete after " + seconds_text(timeout_s) +
            " s although every rank reached it: NCCL's bootstrap could not connect the ranks "
            "(can every host reach rank 0's host on the interface NCCL_SOCKET_IFNAME names? "
            "NCCL_DEBUG=INFO shows the addresses it tries)";
    if (!why.empty()) {
      pending->abandoned = true;
      throw DistError("[dist] ncclCommInitRank (" + who + "): " + why, -1);
    }
  }
}

class NcclGroup final : public ProcessGroup {
 public:
  NcclGroup(std::shared_ptr<ProcessGroup> cpu, int device, double timeout_s)
      : ProcessGroup(cpu->rank(), cpu->size(), timeout_s), cpu_(std::move(cpu)), device_(device) {
    set_peers(cpu_->peers());
    const NcclApi& api = nccl();
    // Rank 0's id to every rank over the CPU group.
    ncclUniqueId id;
    std::memset(&id, 0, sizeof id);
    if (rank() == 0) {
      const ncclResult_t r = api.get_unique_id(&id);
      if (r != ncclSuccess) throw DistError("[dist] ncclGetUniqueId: " + nccl_error(r), -1);
    }
    const std::string bytes = cpu_->broadcast_string(
        std::string(reinterpret_cast<const char*>(&id), sizeof id), 0, "the NCCL unique id");
    std::memcpy(&id, bytes.data(), sizeof id);
    // This rank's GPU becomes the thread's current device for good (as torch.cuda.set_device):
    // a guard that restored device 0 would open a context on GPU 0 in every rank.
    std::string local_error;
    try {
      make_current(device_);
      handles_.create();
    } catch (const std::exception& e) {
      local_error = e.what();
    }
    // ncclCommInitRank waits for every rank: agree first that every rank got this far.
    core::Tensor ok = core::Tensor::empty({1}, ScalarType::Int32);
    *ok.data_ptr<std::int32_t>() = local_error.empty() ? 1 : 0;
    cpu_->all_reduce(ok, ReduceOp::kMin, "NCCL set-up");
    if (!local_error.empty()) throw DistError(local_error, -1);
    if (*ok.data_ptr<std::int32_t>() == 0)
      throw DistError("[dist] nccl: another rank failed to set up its GPU", -1);
    const std::string who = "rank " + std::to_string(rank()) + " of " + std::to_string(size()) +
                            ", cuda:" + std::to_string(device_);
    const ncclResult_t r = init_communicator(&comm_, size(), id, rank(), device_, timeout(), who);
    if (r != ncclSuccess) {
      // NCCL refuses two ranks on one GPU ("Duplicate GPU detected", as invalid usage). Whether
      // that is the cause cannot be told from here alone (each rank may see only its own GPU
      // through CUDA_VISIBLE_DEVICES), so it is a hint, after NCCL's own message.
      const LaunchEnv env = detect_launch_env();
      int count = 0;
      const bool crowded = r == ncclInvalidUsage && cudaGetDeviceCount(&count) == cudaSuccess &&
                           env.local_size > count;
      throw DistError("[dist] ncclCommInitRank (" + who + "): " + nccl_error(r) +
                          (crowded ? "; " + std::to_string(env.local_size) +
                                         " ranks on this host see " + std::to_string(count) +
                                         " GPU(s): NCCL needs a GPU of its own for each rank "
                                         "(use distributed.backend = \"mpi\" to share one)"
                                   : std::string()),
                      -1);
    }
  }

  ~NcclGroup() override {
    // A broken communicator is aborted (its collectives may still be queued); a healthy one
    // destroyed.
    end_communicator(comm_, device_, broken());
  }

  const char* backend() const override { return "nccl"; }
  core::Device device() const override { return core::Device(core::DeviceType::CUDA, device_); }
  ProcessGroup* host_group() override { return cpu_.get(); }

  void abort_job(int code) noexcept override {
    end_communicator(comm_, device_, true);
    comm_ = nullptr;
    cpu_->abort_job(code);
  }

 protected:
  void do_all_reduce(void* data, std::int64_t n, ScalarType dtype, ReduceOp op,
                     const std::string& label) override {
    run(label, [&](ncclComm_t comm, cudaStream_t s) {
      return nccl().all_reduce(data, data, static_cast<std::size_t>(n), nccl_type(dtype),
                               nccl_op(op), comm, s);
    });
  }
  void do_broadcast(void* data, std::int64_t bytes, int root, const std::string& label) override {
    run(label, [&](ncclComm_t comm, cudaStream_t s) {
      return nccl().broadcast(data, data, static_cast<std::size_t>(bytes), ncclUint8, root, comm,
                              s);
    });
  }
  void do_all_gather(const void* in, void* out, std::int64_t bytes,
                     const std::string& label) override {
    run(label, [&](ncclComm_t comm, cudaStream_t s) {
      return nccl().all_gather(in, out, static_cast<std::size_t>(bytes), ncclUint8, comm, s);
    });
  }
  void do_reduce_scatter(const void* in, void* out, std::int64_t n_per_rank, ScalarType dtype,
                         ReduceOp op, const std::string& label) override {
    run(label, [&](ncclComm_t comm, cudaStream_t s) {
      return nccl().reduce_scatter(in, out, static_cast<std::size_t>(n_per_rank), nccl_type(dtype),
                                   nccl_op(op), comm, s);
    });
  }
  void do_barrier(const std::string& label) override { cpu_->barrier(label); }

 private:
  // One collective: the ranks meet on the CPU group, the collective is queued on the NCCL stream
  // after the compute stream's work, the compute stream waits for it, and the host waits for it
  // against the deadline.
  template <typename Enqueue>
  void run(const std::string& label, Enqueue&& enqueue) {
    cpu_->barrier("arrival at " + label);
    // The rank's GPU becomes (and stays) the calling thread's device, as at construction: the
    // thread that runs the collectives is the one that trains on that GPU, and restoring a
    // device it never chose (0) would open a context on GPU 0.
    make_current(device_);
    check_cuda(cudaEventRecord(handles_.ready, cudaStreamLegacy), "cudaEventRecord");
    check_cuda(cudaStreamWaitEvent(handles_.stream, handles_.ready, 0), "cudaStreamWaitEvent");
    const ncclResult_t r = enqueue(comm_, handles_.stream);
    if (r != ncclSuccess) throw DistError("[dist] " + label + ": " + nccl_error(r, comm_), -1);
    check_cuda(cudaEventRecord(handles_.done, handles_.stream), "cudaEventRecord");
    check_cuda(cudaStreamWaitEvent(cudaStreamLegacy, handles_.done, 0), "cudaStreamWaitEvent");
    wait(label);
  }

  void wait(const std::string& label) {
    const auto start = Clock::now();
    const auto deadline = start + std::chrono::duration_cast<Clock::duration>(
                                      std::chrono::duration<double>(timeout()));
    for (;;) {
      const cudaError_t q = cudaEventQuery(handles_.done);
      if (q == cudaSuccess) return;
      ncclResult_t async = ncclSuccess;
      nccl().comm_get_async_error(comm_, &async);
      std::string why;
      // A failed query (a dead context) aborts too: the collective may still be queued on
      // buffers the caller frees when this throws.
      if (q != cudaErrorNotReady)
        why = std::string("cudaEventQuery: ") + cudaGetErrorString(q);
      else if (async != ncclSuccess && async != ncclInProgress)
        why = "NCCL reported " + nccl_error(async, comm_);
      else if (const int sig = termination_signal())
        why = ended_by_signal(sig);
      else if (Clock::now() > deadline)
        why = "not complete after " + seconds_text(timeout()) +
              " s although every rank arrived (the NCCL transfer stalled)";
      if (!why.empty()) {
        end_communicator(comm_, device_, true);
        comm_ = nullptr;
        throw DistError("[dist] " + label + ": " + why + "; the NCCL communicator is aborted", -1);
      }
      // Short collectives finish within microseconds: spin a little, then yield, then nap.
      const auto waited = Clock::now() - start;
      if (waited < std::chrono::microseconds(50)) continue;
      if (waited < std::chrono::milliseconds(200))
        std::this_thread::yield();
      else
        std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
  }

  // The group's stream and its two events, freed also when the constructor throws.
  struct CudaHandles {
    cudaStream_t stream = nullptr;
    cudaEvent_t ready = nullptr;
    cudaEvent_t done = nullptr;
    void create() {
      check_cuda(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
      check_cuda(cudaEventCreateWithFlags(&ready, cudaEventDisableTiming), "cudaEventCreate");
      check_cuda(cudaEventCreateWithFlags(&done, cudaEventDisableTiming), "cudaEventCreate");
    }
    CudaHandles() = default;
    CudaHandles(const CudaHandles&) = delete;
    CudaHandles& operator=(const CudaHandles&) = delete;
    ~CudaHandles() {
      if (done != nullptr) cudaEventDestroy(done);
      if (ready != nullptr) cudaEventDestroy(ready);
      if (stream != nullptr) cudaStreamDestroy(stream);
    }
  };

  std::shared_ptr<ProcessGroup> cpu_;
  int device_;
  CudaHandles handles_;
  ncclComm_t comm_ = nullptr;
};

}  // namespace

namespace detail {

bool nccl_built() {
  return true;
}

std::shared_ptr<ProcessGroup> make_nccl_group(const GroupOptions& options,
                                              std::shared_ptr<ProcessGroup> cpu) {
  (void)nccl();  // a clear error before any collective when NCCL cannot be loaded
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess || count == 0)
    throw ValueError(std::string("[dist] backend 'nccl' needs a CUDA device; ") +
                     (e != cudaSuccess ? cudaGetErrorString(e) : "none was found"));
  const LaunchEnv env = detect_launch_env();
  // One GPU per rank on a host: local rank k uses cuda:(k mod devices); a process started alone
  // the device its run asks for.
  const int device = env.launcher.empty() && options.device_index >= 0
                         ? options.device_index % count
                         : env.local_rank % count;
  return std::make_shared<NcclGroup>(std::move(cpu), device, options.timeout_s);
}

}  // namespace detail
}  // namespace tb::dist
