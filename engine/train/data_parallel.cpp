// The data-parallel part of a run: see data_parallel.h.
#include "engine/train/data_parallel.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>
#include <set>

#include "engine/autograd/autograd.h"
#include "engine/core/error.h"
#include "engine/nn/models.h"
#include "engine/ops/ops.h"

namespace tb::train::detail {

using core::ScalarType;
using core::Tensor;

namespace {

// The extras after the gradients: loss, non-finite, cancel, pause; then one "has a gradient"
// flag per parameter; then kTimes values per rank.
constexpr std::int64_t kLossSlot = 0;
constexpr std::int64_t kNonfiniteSlot = 1;
constexpr std::int64_t kCancelSlot = 2;
constexpr std::int64_t kPauseSlot = 3;
constexpr std::int64_t kFixedExtras = 4;
constexpr std::int64_t kTimes = static_cast<std::int64_t>(std::tuple_size_v<RankTimes>);

std::uint64_t fnv1a(const void* data, std::size_t n, std::uint64_t h) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (std::size_t i = 0; i < n; ++i) {
    h ^= p[i];
    h *= 1099511628211ULL;
  }
  return h;
}

// dst[k] = src[k] * w (a copy for w = 1; dst == src allowed). Separate restrict loops, and this
// file compiled with GCC's dynamic vectorizer cost model (engine/CMakeLists.txt): at -O2's
// default the loop stayed scalar. The MLP's 0.94 MB of gradients still take 0.075-0.09 ms per
// step on two ranks of a 2-vCPU VM: the backward GEMMs' outputs are read from memory, not cache.
void scale_into(float* dst, const float* src, std::int64_t n, float w) {
  if (dst == src) {
    if (w != 1.0f)
      for (std::int64_t k = 0; k < n; ++k)
        dst[k] *= w;
    return;
  }
  float* __restrict d = dst;
  const float* __restrict s = src;
  if (w == 1.0f) {
    std::memcpy(d, s, static_cast<std::size_t>(n) * sizeof(float));
    return;
  }
  for (std::int64_t k = 0; k < n; ++k)
    d[k] = s[k] * w;
}

}  // namespace

DataParallel::DataParallel(std::shared_ptr<dist::ProcessGroup> group, const RunConfig& c)
    : group_(std::move(group)) {
  TB_CHECK(group_ != nullptr, "[trainer] distributed.backend '", c.distributed.backend,
           "' needs a process group: start the ranks with trainbench-cli launch --ddp (or mpirun)");
  TB_CHECK(c.distributed.world_size == 0 || c.distributed.world_size == group_->size(),
           "[trainer] distributed.world_size is ", c.distributed.world_size, " but ",
           group_->size(), " ranks were started");
  const core::Device device = core::Device::parse(c.run.device);
  TB_CHECK(c.distributed.backend != "nccl" || device.type() == core::DeviceType::CUDA,
           "[trainer] distributed.backend ", "'nccl' trains on CUDA devices; run.device is '",
           c.run.device, "' (use 'mpi' on CPUs)");
  // Any other device (CUDA with mpi, openreg) exchanges through the host: its flat buffer is
  // staged to the group's device for each all-reduce.
  group_->set_timeout(c.distributed.timeout_s);
  bucket_elems_ = std::max<std::int64_t>(
      1, static_cast<std::int64_t>(c.distributed.bucket_mb * 1024.0 * 1024.0 / sizeof(float)));
}

void DataParallel::broadcast_model(nn::Model& model) {
  autograd::NoGradGuard no_grad;
  for (auto& [name, t] : model.state_dict()) {
    Tensor view = t;
    TB_CHECK(view.is_contiguous(), "[trainer] cannot broadcast ", name, ": not contiguous");
    group_->broadcast(view, 0, name);
  }
}

nn::NamedTensors persistent_buffers(const nn::Model& model) {
  std::set<std::string> params;
  for (const auto& [name, p] : model.named_parameters())
    params.insert(name);
  nn::NamedTensors out;
  for (auto& [name, t] : model.state_dict())
    if (!params.count(name)) out.emplace_back(name, t);
  return out;
}

void DataParallel::broadcast_buffers(nn::Model& model) {
  autograd::NoGradGuard no_grad;
  for (auto& [name, t] : persistent_buffers(model)) {
    Tensor view = t;
    TB_CHECK(view.is_contiguous(), "[trainer] cannot broadcast buffer ", name, ": not contiguous");
    if (view.device().is_cpu() || view.device() == group_->device()) {
      group_->broadcast(view, 0, name);
    } else {
      Tensor staged = view.to(group_->device());
      group_->broadcast(staged, 0, name);
      view.copy_(staged);
    }
  }
}

data::Batch DataParallel::take_shard(const data::Batch& global) {
  const bool sharded = global.global_rows > 0;
  const std::int64_t n = sharded ? global.global_rows : global.input.size(0);
  const std::int64_t w = world();
  const std::int64_t r = rank();
  const std::int64_t base = n / w;
  const std::int64_t extra = n % w;
  shard_.rows = base + (r < extra ? 1 : 0);
  shard_.offset = r * base + std::min(r, extra);
  shard_.global_rows = n;
  if (sharded) {
    TB_CHECK(global.input.size(0) == shard_.rows, "[trainer] rank ", r, " got ",
             global.input.size(0), " rows of a global batch of ", n, ", its share is ",
             shard_.rows);
    return global;
  }
  if (w == 1) return global;
  data::Batch b;
  b.input = global.input.narrow(0, shard_.offset, shard_.rows).contiguous();
  b.target = global.target.narrow(0, shard_.offset, shard_.rows).contiguous();
  return b;
}

void DataParallel::build_layout(const std::vector<Tensor>& params) {
  offsets_.clear();
  std::int64_t at = 0;
  for (const auto& p : params) {
    TB_CHECK(p.dtype() == ScalarType::Float32, "[trainer] data-parallel training averages float32 ",
             "gradients; a parameter is ", core::scalar_type_name(p.dtype()));
    offsets_.push_back(at);
    at += p.numel();
  }
  grad_elems_ = at;
  const std::int64_t extras =
      kFixedExtras + static_cast<std::int64_t>(params.size()) + kTimes * world();
  const core::Device device = params.empty() ? core::Device() : params.front().device();
  flat_ = Tensor::empty({grad_elems_ + extras}, ScalarType::Float32, device);
}

void DataParallel::all_reduce_sum(Tensor& t, const std::string& what) {
  if (t.device().is_cpu() || t.device() == group_->device()) {
    group_->all_reduce(t, dist::ReduceOp::kSum, what);
    return;
  }
  Tensor staged = t.to(group_->device());
  group_->all_reduce(staged, dist::ReduceOp::kSum, what);
  t.copy_(staged);
}

StepExchange DataParallel::exchange(const std::vector<Tensor>& params, double loss,
                                    bool loss_finite, bool cancel, bool pause,
                                    const RankTimes& times, std::optional<double> weight) {
  const auto t0 = std::chrono::steady_clock::now();
  if (!flat_.defined() || offsets_.size() != params.size()) build_layout(params);
  const std::int64_t np = static_cast<std::int64_t>(params.size());
  // This rank's share of the global batch weighs its gradients and loss: the sum over the ranks
  // is then the gradient and loss of the global batch's mean (exact for one rank, w = 1).
  const double w = weight ? *weight
                   : shard_.global_rows > 0
                       ? static_cast<double>(shard_.rows) / static_cast<double>(shard_.global_rows)
                       : 1.0;
  std::vector<float> extras(static_cast<std::size_t>(flat_.numel() - grad_elems_), 0.0f);
  extras[kLossSlot] = loss_finite ? static_cast<float>(loss * w) : 0.0f;
  extras[kNonfiniteSlot] = loss_finite ? 0.0f : 1.0f;
  extras[kCancelSlot] = cancel ? 1.0f : 0.0f;
  extras[kPauseSlot] = pause ? 1.0f : 0.0f;
  for (std::int64_t k = 0; k < kTimes; ++k)
    extras[static_cast<std::size_t>(kFixedExtras + np + kTimes * rank() + k)] =
        static_cast<float>(times[static_cast<std::size_t>(k)]);
  // A rank whose loss is not finite sends zeros (every rank then skips the step).
  for (std::int64_t i = 0; i < np; ++i)
    extras[static_cast<std::size_t>(kFixedExtras + i)] =
        pack_gradient(params[static_cast<std::size_t>(i)], i, loss_finite ? w : 0.0) ? 1.0f : 0.0f;

  const std::int64_t total = flat_.numel();
  Tensor tail = flat_.narrow(0, grad_elems_, total - grad_elems_);
  if (flat_.device().is_cpu())
    std::memcpy(tail.data_ptr<float>(), extras.data(), extras.size() * sizeof(float));
  else
    tail.copy_(core::from_vector(extras));
  for (std::int64_t start = 0; start < total; start += bucket_elems_) {
    Tensor bucket = flat_.narrow(0, start, std::min(bucket_elems_, total - start));
    all_reduce_sum(bucket, "gradients");
  }
  const Tensor host_tail = flat_.device().is_cpu() ? tail : tail.to(core::Device());
  const float* sums = host_tail.data_ptr<float>();

  StepExchange ex;
  ex.nonfinite = sums[kNonfiniteSlot] > 0.0f;
  ex.loss = ex.nonfinite ? std::numeric_limits<double>::quiet_NaN()
                         : static_cast<double>(sums[kLossSlot]);
  ex.cancel = sums[kCancelSlot] > 0.0f;
  ex.pause = sums[kPauseSlot] > 0.0f;
  ex.times.resize(static_cast<std::size_t>(world()));
  for (int r = 0; r < world(); ++r)
    for (std::int64_t k = 0; k < kTimes; ++k)
      ex.times[static_cast<std::size_t>(r)][static_cast<std::size_t>(k)] =
          sums[kFixedExtras + np + kTimes * r + k];
  if (!ex.nonfinite) {
    // The averaged gradients are views of the flat buffer (PyTorch DDP's
    // gradient_as_bucket_view): no copy back. Clipping and unscaling work on them in place;
    // zero_grad drops them (or zeroes them in place) and the next backward replaces them
    // (autograd accumulates out of place). Whatever kept a gradient past the step would see the
    // next exchange overwrite it; nothing in the trainer or the optimizers does.
    autograd::NoGradGuard no_grad;
    for (std::int64_t i = 0; i < np; ++i) {
      if (sums[kFixedExtras + i] == 0.0f) continue;  // no rank has a gradient for it
      const Tensor& p = params[static_cast<std::size_t>(i)];
      autograd::set_grad(
          p, flat_.narrow(0, offsets_[static_cast<std::size_t>(i)], p.numel()).view(p.sizes()));
    }
  }
  ex.comm_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  return ex;
}

bool DataParallel::pack_gradient(const Tensor& p, std::int64_t i, double w) {
  const std::int64_t n = p.numel();
  Tensor dst = flat_.narrow(0, offsets_[static_cast<std::size_t>(i)], n);
  const Tensor g = w != 0.0 ? autograd::grad(p) : Tensor();
  if (!g.defined()) {
    if (dst.device().is_cpu())
      std::memset(dst.data_ptr<float>(), 0, static_cast<std::size_t>(n) * sizeof(float));
    else
      dst.zero_();
    return false;
  }
  TB_CHECK(g.dtype() == ScalarType::Float32 && g.device() == flat_.device(),
           "[trainer] the gradient of parameter ", i, " is not a float32 tensor on ",
           flat_.device().str());
  const Tensor gc = g.contiguous();
  const auto wf = static_cast<float>(w);
  if (dst.device().is_cpu()) {
    scale_into(dst.data_ptr<float>(), gc.data_ptr<float>(), n, wf);
  } else if (gc.data_ptr() != dst.data_ptr() || wf != 1.0f) {
    autograd::NoGradGuard no_grad;
    const Tensor flat_g = gc.view({n});
    dst.copy_(wf == 1.0f ? flat_g : ops::mul(flat_g, core::Scalar(static_cast<double>(wf))));
  }
  return true;
}

std::pair<bool, bool> DataParallel::pause_round(bool pause, bool cancel) {
  Tensor t = Tensor::empty({2}, ScalarType::Float32);
  t.data_ptr<float>()[0] = pause ? 1.0f : 0.0f;
  t.data_ptr<float>()[1] = cancel ? 1.0f : 0.0f;
  group_->all_reduce(t, dist::ReduceOp::kMax, "pause and cancel requests");
  return {t.data_ptr<float>()[0] > 0.0f, t.data_ptr<float>()[1] > 0.0f};
}

void DataParallel::share_late_times(std::vector<RankTimes>& times, double comm_ms,
                                    double optimizer_ms) {
  const auto n = static_cast<std::size_t>(world());
  Tensor t = ops::zeros({static_cast<std::int64_t>(2 * n)}, ScalarType::Float64);
  double* v = t.data_ptr<double>();
  v[2 * static_cast<std::size_t>(rank())] = comm_ms;
  v[2 * static_cast<std::size_t>(rank()) + 1] = optimizer_ms;
  group_->all_reduce(t, dist::ReduceOp::kSum, "step times");
  times.resize(n);
  for (std::size_t r = 0; r < n; ++r) {
    times[r][3] = v[2 * r];
    times[r][4] = v[2 * r + 1];
  }
}

void DataParallel::reduce_eval(double& loss_sum, double& items, double& correct) {
  Tensor t = Tensor::empty({3}, ScalarType::Float64);
  double* v = t.data_ptr<double>();
  v[0] = loss_sum;
  v[1] = items;
  v[2] = correct;
  group_->all_reduce(t, dist::ReduceOp::kSum, "evaluation");
  loss_sum = v[0];
  items = v[1];
  correct = v[2];
}

void DataParallel::sync_owned(const std::vector<Tensor>& tensors, const std::vector<int>& owner,
                              const std::string& what) {
  if (world() == 1) return;
  std::vector<std::int64_t> count(static_cast<std::size_t>(world()), 0);
  const core::Device device = tensors.empty() ? core::Device() : tensors.front().device();
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    const Tensor& t = tensors[i];
    TB_CHECK(t.dtype() == ScalarType::Float32 && t.device() == device && t.is_contiguous(),
             "[trainer] ", what, ": tensor ", i, " is not a contiguous float32 tensor on ",
             device.str());
    count[static_cast<std::size_t>(owner[i])] += t.numel();
  }
  const std::int64_t longest =
      std::max<std::int64_t>(1, *std::max_element(count.begin(), count.end()));
  if (!device.is_cpu()) {
    // On a device: the same packing with tensor copies; the all-gather on the group's device.
    autograd::NoGradGuard no_grad;
    Tensor mine = Tensor::empty({longest}, ScalarType::Float32, device);
    std::int64_t at = 0;
    for (std::size_t i = 0; i < tensors.size(); ++i) {
      if (owner[i] != rank()) continue;
      const std::int64_t n = tensors[i].numel();
      mine.narrow(0, at, n).copy_(tensors[i].view({n}));
      at += n;
    }
    const Tensor all =
        group_->all_gather(device == group_->device() ? mine : mine.to(group_->device()), what)
            .to(device)
            .view({world() * longest});
    std::vector<std::int64_t> from(static_cast<std::size_t>(world()));
    for (int r = 0; r < world(); ++r)
      from[static_cast<std::size_t>(r)] = r * longest;
    for (std::size_t i = 0; i < tensors.size(); ++i) {
      const auto r = static_cast<std::size_t>(owner[i]);
      const std::int64_t n = tensors[i].numel();
      if (owner[i] != rank()) {
        Tensor dst = tensors[i].view({n});
        dst.copy_(all.narrow(0, from[r], n));
      }
      from[r] += n;
    }
    return;
  }
  Tensor mine = Tensor::empty({longest}, ScalarType::Float32);
  float* out = mine.data_ptr<float>();
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    if (owner[i] != rank()) continue;
    std::memcpy(out, tensors[i].data_ptr<float>(),
                static_cast<std::size_t>(tensors[i].numel()) * sizeof(float));
    out += tensors[i].numel();
  }
  const Tensor all = group_->all_gather(mine, what);
  std::vector<const float*> from(static_cast<std::size_t>(world()));
  for (int r = 0; r < world(); ++r)
    from[static_cast<std::size_t>(r)] = all.data_ptr<float>() + r * longest;
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    const auto r = static_cast<std::size_t>(owner[i]);
    if (owner[i] != rank())
      std::memcpy(tensors[i].data_ptr<float>(), from[r],
                  static_cast<std::size_t>(tensors[i].numel()) * sizeof(float));
    from[r] += tensors[i].numel();
  }
}

void DataParallel::partition_muon(optim::Muon& muon) {
  optim::MuonPartition part;
  part.rank = rank();
  part.owner = optim::assign_muon_owners(muon.all_params(), world());
  part.sync = [this](const std::vector<Tensor>& params, const std::vector<int>& owner) {
    sync_owned(params, owner, "Muon's updated matrices");
  };
  muon.set_partition(std::move(part));
}

void DataParallel::gather_muon_state(optim::Muon& muon) {
  const std::vector<Tensor> params = muon.all_params();
  const std::vector<int>& owner = muon.partition().owner;
  std::vector<Tensor> bufs;
  for (const auto& p : params) {
    optim::ParamState& st = muon.state(p);
    auto it = st.find("momentum_buffer");
    if (it == st.end()) {
      Tensor z = Tensor::empty(p.sizes(), ScalarType::Float32, p.device());
      z.zero_();
      it = st.emplace("momentum_buffer", z).first;
    }
    bufs.push_back(it->second);
  }
  sync_owned(bufs, owner, "Muon's momentum for the checkpoint");
}

void DataParallel::release_muon_state(optim::Muon& muon) {
  const std::vector<Tensor> params = muon.all_params();
  const std::vector<int>& owner = muon.partition().owner;
  for (std::size_t i = 0; i < params.size(); ++i)
    if (owner[i] != rank() && muon.has_state(params[i]))
      muon.state(params[i]).erase("momentum_buffer");
}

void DataParallel::check_replicas(const std::vector<Tensor>& params, std::int64_t step) {
  std::uint64_t h = 1469598103934665603ULL;
  for (const auto& p : params) {
    const Tensor c = p.device().is_cpu() ? p.contiguous() : p.to(core::Device());
    h = fnv1a(c.data_ptr(), c.nbytes(), h);
  }
  Tensor mine = Tensor::empty({1}, ScalarType::Int64);
  std::memcpy(mine.data_ptr(), &h, sizeof(h));
  const Tensor all = group_->all_gather(mine, "parameter checksums");
  const auto* sums = all.data_ptr<std::int64_t>();
  for (int r = 1; r < world(); ++r)
    TB_CHECK(sums[r] == sums[0],
             "[trainer] distributed.check_replicas: the parameters or buffers of ",
             group_->describe_rank(r), " differ from rank 0's after step ", step);
}

}  // namespace tb::train::detail
