// ProcessGroup's checks and messages, the single-process group, the launch environment and the
// termination flag. The MPI group is in mpi_group.cpp.
#include "engine/dist/process_group.h"

#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>

#include "engine/dist/group_detail.h"

namespace tb::dist {

using core::ScalarType;
using core::Tensor;

const char* reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return "sum";
    case ReduceOp::kAvg:
      return "avg";
    case ReduceOp::kMin:
      return "min";
    case ReduceOp::kMax:
      return "max";
  }
  return "?";
}

namespace {

std::atomic<int> g_termination{0};

void check_tensor(const Tensor& t, const core::Device& device, const char* backend,
                  const char* op) {
  TB_CHECK(t.defined(), "[dist] ", op, ": the tensor is undefined");
  TB_CHECK(t.device() == device, "[dist] ", op, ": the ", backend, " group takes tensors on ",
           device.str(), ", got one on ", t.device().str(),
           device.is_cpu() ? " (the nccl backend takes CUDA tensors)" : "");
  TB_CHECK(t.is_contiguous(), "[dist] ", op, ": the tensor must be contiguous");
}

void check_reducible(ScalarType dtype, ReduceOp op, const char* name) {
  const bool ok = dtype == ScalarType::Float32 || dtype == ScalarType::Float64 ||
                  dtype == ScalarType::Int64 || dtype == ScalarType::Int32 ||
                  dtype == ScalarType::UInt8;
  TB_CHECK(ok, "[dist] ", name, ": cannot reduce ", core::scalar_type_name(dtype),
           " tensors (float32, float64, int64, int32, uint8)");
  TB_CHECK(op != ReduceOp::kAvg || dtype == ScalarType::Float32 || dtype == ScalarType::Float64,
           "[dist] ", name, ": avg needs a float tensor, got ", core::scalar_type_name(dtype));
}

}  // namespace

namespace detail {

void divide_in_place(void* data, std::int64_t n, ScalarType dtype, int size) {
  if (dtype == ScalarType::Float32) {
    auto* p = static_cast<float*>(data);
    const auto d = static_cast<float>(size);
    for (std::int64_t i = 0; i < n; ++i)
      p[i] /= d;
  } else if (dtype == ScalarType::Float64) {
    auto* p = static_cast<double*>(data);
    const auto d = static_cast<double>(size);
    for (std::int64_t i = 0; i < n; ++i)
      p[i] /= d;
  }
}

std::string host_name() {
  char buf[256] = {0};
  if (gethostname(buf, sizeof(buf) - 1) != 0) return "?";
  return buf;
}

}  // namespace detail

// ---- ProcessGroup -------------------------------------------------------------------------------

ProcessGroup::ProcessGroup(int rank, int size, double timeout_s)
    : rank_(rank), size_(size), timeout_s_(timeout_s) {}

ProcessGroup::~ProcessGroup() = default;

std::string ProcessGroup::describe_rank(int rank) const {
  std::string s = "rank " + std::to_string(rank);
  if (rank >= 0 && static_cast<std::size_t>(rank) < peers_.size())
    s += " (host " + peers_[static_cast<std::size_t>(rank)].host + ", pid " +
         std::to_string(peers_[static_cast<std::size_t>(rank)].pid) + ")";
  return s;
}

void ProcessGroup::set_timeout(double seconds) {
  TB_CHECK(seconds > 0, "[dist] the collective timeout must be > 0 s, got ", seconds);
  timeout_s_ = seconds;
  if (ProcessGroup* host = host_group()) host->set_timeout(seconds);
}

void ProcessGroup::set_context(std::string context) {
  if (ProcessGroup* host = host_group()) host->set_context(context);
  context_ = std::move(context);
}

bool ProcessGroup::broken() const {
  const ProcessGroup* host = const_cast<ProcessGroup*>(this)->host_group();
  return broken_ || (host != nullptr && host->broken());
}

ProcessGroup* ProcessGroup::host_for(const Tensor& t) {
  ProcessGroup* host = host_group();
  return host != nullptr && t.defined() && t.device().is_cpu() ? host : nullptr;
}

std::string ProcessGroup::begin(const char* op, const std::string& what) {
  if (broken_)
    throw DistError(std::string("[dist] ") + op +
                        ": the process group is broken by an earlier failed collective",
                    -1);
  ++seq_;
  std::string label = std::string(op) + " #" + std::to_string(seq_);
  std::string detail = what;
  if (!context_.empty()) detail += (detail.empty() ? "" : ", ") + context_;
  if (!detail.empty()) label += " (" + detail + ")";
  return label;
}

template <typename F>
void ProcessGroup::guarded(const std::string& label, F&& f) {
  (void)label;
  try {
    f();
  } catch (...) {
    broken_ = true;
    throw;
  }
}

void ProcessGroup::all_reduce(Tensor& t, ReduceOp op, const std::string& what) {
  if (ProcessGroup* host = host_for(t)) return host->all_reduce(t, op, what);
  check_tensor(t, device(), backend(), "all_reduce");
  check_reducible(t.dtype(), op, "all_reduce");
  const std::string label = begin("all_reduce", what);
  guarded(label, [&] { do_all_reduce(t.data_ptr(), t.numel(), t.dtype(), op, label); });
}

void ProcessGroup::broadcast(Tensor& t, int root, const std::string& what) {
  if (ProcessGroup* host = host_for(t)) return host->broadcast(t, root, what);
  check_tensor(t, device(), backend(), "broadcast");
  TB_CHECK(root >= 0 && root < size_, "[dist] broadcast: root ", root, " is not a rank of 0..",
           size_ - 1);
  const std::string label = begin("broadcast", what);
  guarded(label,
          [&] { do_broadcast(t.data_ptr(), static_cast<std::int64_t>(t.nbytes()), root, label); });
}

Tensor ProcessGroup::all_gather(const Tensor& t, const std::string& what) {
  if (ProcessGroup* host = host_for(t)) return host->all_gather(t, what);
  check_tensor(t, device(), backend(), "all_gather");
  std::vector<std::int64_t> sizes;
  sizes.push_back(size_);
  for (auto s : t.sizes())
    sizes.push_back(s);
  Tensor out = Tensor::empty(sizes, t.dtype(), t.device());
  const std::string label = begin("all_gather", what);
  guarded(label, [&] {
    do_all_gather(t.data_ptr(), out.data_ptr(), static_cast<std::int64_t>(t.nbytes()), label);
  });
  return out;
}

Tensor ProcessGroup::reduce_scatter(const Tensor& t, ReduceOp op, const std::string& what) {
  if (ProcessGroup* host = host_for(t)) return host->reduce_scatter(t, op, what);
  check_tensor(t, device(), backend(), "reduce_scatter");
  check_reducible(t.dtype(), op, "reduce_scatter");
  TB_CHECK(t.dim() >= 1 && t.size(0) % size_ == 0, "[dist] reduce_scatter: the first dimension (",
           t.dim() >= 1 ? t.size(0) : 0, ") must be divisible by the world size ", size_);
  std::vector<std::int64_t> sizes{t.size(0) / size_};
  for (std::int64_t d = 1; d < t.dim(); ++d)
    sizes.push_back(t.size(d));
  Tensor out = Tensor::empty(sizes, t.dtype(), t.device());
  const std::string label = begin("reduce_scatter", what);
  guarded(label, [&] {
    do_reduce_scatter(t.data_ptr(), out.data_ptr(), out.numel(), t.dtype(), op, label);
  });
  return out;
}

void ProcessGroup::barrier(const std::string& what) {
  const std::string label = begin("barrier", what);
  guarded(label, [&] { do_barrier(label); });
}

std::vector<std::string> ProcessGroup::all_gather_strings(const std::string& s,
                                                          const std::string& what) {
  // Lengths first, then the padded bytes.
  Tensor len = Tensor::empty({1}, ScalarType::Int64);
  *len.data_ptr<std::int64_t>() = static_cast<std::int64_t>(s.size());
  const Tensor lens = all_gather(len, what);
  std::int64_t longest = 0;
  for (int r = 0; r < size_; ++r)
    longest = std::max(longest, lens.data_ptr<std::int64_t>()[r]);
  Tensor mine = Tensor::empty({std::max<std::int64_t>(longest, 1)}, ScalarType::UInt8);
  std::memset(mine.data_ptr(), 0, mine.nbytes());
  std::memcpy(mine.data_ptr(), s.data(), s.size());
  const Tensor all = all_gather(mine, what);
  std::vector<std::string> out;
  const auto* bytes = static_cast<const char*>(all.data_ptr());
  for (int r = 0; r < size_; ++r)
    out.emplace_back(bytes + r * mine.numel(),
                     static_cast<std::size_t>(lens.data_ptr<std::int64_t>()[r]));
  return out;
}

std::string ProcessGroup::broadcast_string(const std::string& s, int root,
                                           const std::string& what) {
  Tensor len = Tensor::empty({1}, ScalarType::Int64);
  *len.data_ptr<std::int64_t>() = static_cast<std::int64_t>(s.size());
  broadcast(len, root, what);
  const std::int64_t n = *len.data_ptr<std::int64_t>();
  Tensor bytes = Tensor::empty({std::max<std::int64_t>(n, 1)}, ScalarType::UInt8);
  if (rank_ == root) std::memcpy(bytes.data_ptr(), s.data(), s.size());
  broadcast(bytes, root, what);
  return {static_cast<const char*>(bytes.data_ptr()), static_cast<std::size_t>(n)};
}

// ---- the single-process group -------------------------------------------------------------------

namespace {

class SingleGroup final : public ProcessGroup {
 public:
  explicit SingleGroup(double timeout_s) : ProcessGroup(0, 1, timeout_s) {
    set_peers({PeerInfo{0, detail::host_name(), static_cast<int>(getpid())}});
  }
  const char* backend() const override { return "single"; }
  void abort_job(int) noexcept override {}

 protected:
  void do_all_reduce(void*, std::int64_t, ScalarType, ReduceOp, const std::string& l) override {
    check_signal(l);
  }
  void do_broadcast(void*, std::int64_t, int, const std::string& l) override { check_signal(l); }
  void do_all_gather(const void* in, void* out, std::int64_t bytes, const std::string& l) override {
    check_signal(l);
    if (bytes > 0) std::memmove(out, in, static_cast<std::size_t>(bytes));
  }
  void do_reduce_scatter(const void* in, void* out, std::int64_t n, ScalarType dtype, ReduceOp,
                         const std::string& l) override {
    check_signal(l);
    if (n > 0) std::memmove(out, in, static_cast<std::size_t>(n) * core::element_size(dtype));
  }
  void do_barrier(const std::string& l) override { check_signal(l); }

 private:
  static void check_signal(const std::string& label) {
    if (const int sig = termination_signal())
      throw DistError("[dist] " + label + ": " + ended_by_signal(sig), -1);
  }
};

}  // namespace

bool nccl_available() {
  return detail::nccl_built();
}

std::shared_ptr<ProcessGroup> make_process_group(const GroupOptions& options) {
  TB_CHECK(options.timeout_s > 0, "[dist] the collective timeout must be > 0 s, got ",
           options.timeout_s);
  if (options.backend == "single") return std::make_shared<SingleGroup>(options.timeout_s);
  if (options.backend == "mpi") return detail::make_mpi_group(options);
  if (options.backend == "nccl") {
    // Bootstrapped over the ranks' MPI group; a process started alone (world size 1: the GPU
    // check, the workbench) needs no MPI at all.
    const LaunchEnv env = detect_launch_env();
    std::shared_ptr<ProcessGroup> host;
    if (env.launcher.empty())
      host = std::make_shared<SingleGroup>(options.timeout_s);
    else
      host = detail::make_mpi_group(options);
    return detail::make_nccl_group(options, std::move(host));
  }
  throw ValueError("[dist] unknown backend '" + options.backend + "' (choose mpi, nccl or single)");
}

// ---- environment and signals --------------------------------------------------------------------

namespace {

bool read_int_env(const char* name, int& out) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return false;
  errno = 0;
  char* end = nullptr;
  const long x = std::strtol(v, &end, 10);
  TB_CHECK(errno == 0 && end != v && *end == '\0' && x >= 0 && x <= INT_MAX, "[dist] environment ",
           name, "='", v, "' is not a non-negative integer");
  out = static_cast<int>(x);
  return true;
}

}  // namespace

LaunchEnv detect_launch_env() {
  LaunchEnv e;
  if (read_int_env("OMPI_COMM_WORLD_SIZE", e.size)) {
    e.launcher = "mpirun";
    read_int_env("OMPI_COMM_WORLD_RANK", e.rank);
    if (!read_int_env("OMPI_COMM_WORLD_LOCAL_RANK", e.local_rank)) e.local_rank = e.rank;
    if (!read_int_env("OMPI_COMM_WORLD_LOCAL_SIZE", e.local_size)) e.local_size = e.size;
  } else if (read_int_env("WORLD_SIZE", e.size)) {
    e.launcher = "torchrun";
    read_int_env("RANK", e.rank);
    if (!read_int_env("LOCAL_RANK", e.local_rank)) e.local_rank = e.rank;
    if (!read_int_env("LOCAL_WORLD_SIZE", e.local_size)) e.local_size = e.size;
  }
  TB_CHECK(e.size >= 1 && e.rank < e.size && e.local_rank < e.local_size, "[dist] the launch ",
           "environment is inconsistent: rank ", e.rank, " of ", e.size, ", local rank ",
           e.local_rank, " of ", e.local_size);
  return e;
}

void notify_termination(int signal_number) noexcept {
  g_termination.store(signal_number, std::memory_order_relaxed);
}

int termination_signal() noexcept {
  return g_termination.load(std::memory_order_relaxed);
}

std::string ended_by_signal(int signal_number) {
  return "this rank was ended by signal " + std::to_string(signal_number) + " (" +
         strsignal(signal_number) + ")";
}

}  // namespace tb::dist
