// Process groups: the collectives a data-parallel run needs (all-reduce, broadcast, all-gather,
// reduce-scatter, barrier) over an existing communication engine — Open MPI on CPUs
// (mpi_group.cpp), or one process alone (world size 1). Every collective has a deadline and a
// sequence number: a rank that does not arrive, a peer process that is gone, or a termination
// signal ends the collective with a DistError naming the operation, its number and the rank that
// did not arrive, instead of waiting forever. The group is then broken (every later call throws)
// and the caller decides what to do with the job (abort_job(): MPI_Abort).
//
// Modelled on PyTorch's c10d ProcessGroup (torch/csrc/distributed/c10d/ProcessGroup.hpp) and
// its NCCL watchdog (ProcessGroupNCCL.cpp: a timeout per collective, sequence numbers in the
// message); ranks that arrive are tracked with one tiny message per peer and collective.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/core/error.h"
#include "engine/core/tensor.h"

namespace tb::dist {

/// How a reduction combines the ranks' values. kAvg is kSum divided by the world size (float
/// dtypes only).
enum class ReduceOp { kSum, kAvg, kMin, kMax };
/// "sum", "avg", "min", "max".
const char* reduce_op_name(ReduceOp op);

/// A collective failed: timed out, a peer was lost, the process was asked to stop, or the
/// communication engine reported an error. what() names the operation, its sequence number,
/// the step context and, when known, the rank that did not arrive.
class DistError : public Error {
 public:
  /// `missing_rank` = the rank that did not arrive or whose process is gone (-1: unknown).
  DistError(const std::string& what, int missing_rank) : Error(what), missing_(missing_rank) {}
  /// The rank that did not arrive (-1 when unknown).
  int missing_rank() const noexcept { return missing_; }

 private:
  int missing_;
};

/// Who a rank is: recorded with the run, named in errors.
struct PeerInfo {
  int rank = 0;      ///< its rank
  std::string host;  ///< its host name
  int pid = 0;       ///< its process id
};

/// What a group is made from.
struct GroupOptions {
  /// "mpi" (CPU tensors), "nccl" (CUDA tensors; its ranks as for "mpi") or "single" (world
  /// size 1, no engine)
  std::string backend = "mpi";
  double timeout_s = 300;  ///< deadline of every collective, seconds (> 0)
  /// nccl, a process started alone: the index of the GPU its run uses (-1: cuda:0). Ranks of a
  /// launched job use cuda:LOCAL_RANK mod the host's GPUs.
  int device_index = -1;
};

/// The collectives of a group of processes ("ranks"). Every rank must call the same
/// collectives in the same order with the same shapes and dtypes. Tensors are contiguous CPU
/// tensors (the MPI group); results are bit-identical on every rank (float sums: each element is
/// reduced on one rank and copied to the others when the world has more than two ranks).
/// Not thread-safe: one thread at a time issues a group's collectives.
class ProcessGroup {
 public:
  /// Frees the group's communicators (a broken group leaves them to MPI's end).
  virtual ~ProcessGroup();
  ProcessGroup(const ProcessGroup&) = delete;
  ProcessGroup& operator=(const ProcessGroup&) = delete;

  /// "mpi", "nccl", "single".
  virtual const char* backend() const = 0;
  /// This process's rank, 0 <= rank < size.
  int rank() const { return rank_; }
  /// The number of ranks.
  int size() const { return size_; }
  /// Every rank's host and pid, by rank (exchanged when the group was made).
  const std::vector<PeerInfo>& peers() const { return peers_; }
  /// "rank 1 (host vm, pid 4711)".
  std::string describe_rank(int rank) const;
  /// Collectives issued so far (the next one has number sequence() + 1).
  std::int64_t sequence() const { return seq_; }
  /// The deadline of every collective from now on, in seconds (> 0).
  void set_timeout(double seconds);
  /// The deadline of every collective, in seconds.
  double timeout() const { return timeout_s_; }
  /// Words added to error messages ("step 7"): where the caller is.
  void set_context(std::string context);
  /// True after a collective failed: the group cannot be used again.
  bool broken() const;
  /// The device of the tensors the group's collectives take: the CPU, or the GPU of this rank
  /// (nccl: cuda:LOCAL_RANK mod the host's GPUs).
  virtual core::Device device() const { return core::Device(); }

  /// Reduces `t` over the ranks, in place. `what` names the data in errors ("gradients").
  void all_reduce(core::Tensor& t, ReduceOp op, const std::string& what = "");
  /// Copies root's `t` into every rank's `t` (same shape and dtype everywhere).
  void broadcast(core::Tensor& t, int root, const std::string& what = "");
  /// Every rank's `t` stacked along a new first dimension: shape [size, t.sizes...].
  core::Tensor all_gather(const core::Tensor& t, const std::string& what = "");
  /// Reduces `t` (first dimension divisible by size()) over the ranks and returns this rank's
  /// slice of the result along the first dimension.
  core::Tensor reduce_scatter(const core::Tensor& t, ReduceOp op, const std::string& what = "");
  /// Returns when every rank has called it.
  void barrier(const std::string& what = "");
  /// Every rank's string, by rank.
  std::vector<std::string> all_gather_strings(const std::string& s, const std::string& what = "");
  /// Root's string on every rank.
  std::string broadcast_string(const std::string& s, int root, const std::string& what = "");

  /// Ends the whole job now (MPI_Abort for the MPI group) with `code`; for the single-process
  /// group it does nothing. For an application that cannot continue after a DistError.
  virtual void abort_job(int code) noexcept = 0;

 protected:
  ProcessGroup(int rank, int size, double timeout_s);
  /// A group for CPU tensors beside a device group (nccl: the MPI group of the same ranks, which
  /// bootstrapped it), or null. Collectives on CPU tensors go to it.
  virtual ProcessGroup* host_group() { return nullptr; }
  /// Sets the peers (called once by the implementation's factory).
  void set_peers(std::vector<PeerInfo> peers) { peers_ = std::move(peers); }

  /// All-reduce of `n` elements at `data` in place. Arguments are checked (contiguous, CPU,
  /// dtype) before any do_* call; `label` ("all_reduce #12 (gradients, step 7)") is for messages.
  virtual void do_all_reduce(void* data, std::int64_t n, core::ScalarType dtype, ReduceOp op,
                             const std::string& label) = 0;
  virtual void do_broadcast(void* data, std::int64_t bytes, int root, const std::string& label) = 0;
  virtual void do_all_gather(const void* in, void* out, std::int64_t bytes,
                             const std::string& label) = 0;
  /// Reduce-scatter: `in` holds size() x `n_per_rank` elements; this rank's reduced slice to
  /// `out`.
  virtual void do_reduce_scatter(const void* in, void* out, std::int64_t n_per_rank,
                                 core::ScalarType dtype, ReduceOp op, const std::string& label) = 0;
  virtual void do_barrier(const std::string& label) = 0;

 private:
  std::string begin(const char* op, const std::string& what);
  ProcessGroup* host_for(const core::Tensor& t);
  template <typename F>
  void guarded(const std::string& label, F&& f);

  int rank_;
  int size_;
  double timeout_s_;
  std::int64_t seq_ = 0;
  std::string context_;
  bool broken_ = false;
  std::vector<PeerInfo> peers_;
};

/// A group of `options.backend` for this process: "single" (world size 1), or "mpi" (the
/// ranks mpirun started, or those of a torchrun-style environment, joined over the rendezvous on
/// MASTER_ADDR:MASTER_PORT; MPI is initialised on first use, thread level serialized). Throws
/// tb::ValueError naming the backend when it is unknown or not built in.
std::shared_ptr<ProcessGroup> make_process_group(const GroupOptions& options);
/// Whether this build has the MPI group.
bool mpi_available();
/// Whether this build has the NCCL group (CUDA toolkit with nccl.h at configure time; libnccl
/// itself is loaded when a group is made).
bool nccl_available();
/// Finalises MPI if a group initialised it (call once, at the end of main, after every group is
/// gone). Does nothing otherwise.
void finalize();
/// Ends every rank of the job (MPI_Abort on MPI_COMM_WORLD) when MPI runs with more than one
/// rank; otherwise finalize(). For a rank that failed: the others must not wait for it.
void abort_world(int code) noexcept;

/// How this process was started, from its environment.
struct LaunchEnv {
  std::string launcher;  ///< "mpirun" (OMPI_COMM_WORLD_*), "torchrun" (RANK/WORLD_SIZE), ""
  int rank = 0;          ///< its rank
  int size = 1;          ///< the world size
  int local_rank = 0;    ///< its rank among the ranks on its host
  int local_size = 1;    ///< ranks on its host
};
/// Reads OMPI_COMM_WORLD_{RANK,SIZE,LOCAL_RANK,LOCAL_SIZE} (mpirun) or RANK, WORLD_SIZE,
/// LOCAL_RANK, LOCAL_WORLD_SIZE (torchrun). Malformed values are a tb::ValueError naming the
/// variable.
LaunchEnv detect_launch_env();

/// Records a termination request (async-signal-safe: a SIGTERM/SIGINT handler calls it). A
/// collective waiting, or the next one, then fails with a DistError naming the signal.
void notify_termination(int signal_number) noexcept;
/// The signal recorded by notify_termination (0 = none).
int termination_signal() noexcept;
/// How a collective says it was interrupted by `signal_number`: "this rank was ended by signal
/// 15 (Terminated)" — the signal came to this rank (mpirun sends SIGTERM to every rank when one
/// is lost or the job is stopped); it does not say which rank, if any, was lost.
std::string ended_by_signal(int signal_number);

}  // namespace tb::dist
