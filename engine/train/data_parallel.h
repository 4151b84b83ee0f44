// (internal) The data-parallel part of a run (distributed.backend != none): rank 0's weights
// broadcast at the start, each rank's rows of every global batch, and one exchange per step — a
// flat, persistent float32 buffer holding every gradient (weighted by the rank's share of the
// batch) followed by the loss, the non-finite flag, cancel/pause requests, which parameters have
// gradients and every rank's phase times — summed over the ranks in buckets; the averaged
// gradients are then views of that buffer (DDP's gradient_as_bucket_view). After it every rank
// holds the same gradients and the same decisions (skip, cancel, pause), so logging, clipping,
// GradScaler's inf check and step skipping agree on every rank and a request can never leave one
// rank waiting for the others. As PyTorch's DistributedDataParallel with one bucket view per
// step (torch/nn/parallel/distributed.py, torch/csrc/distributed/c10d/reducer.cpp).
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "engine/core/tensor.h"
#include "engine/data/dataset.h"
#include "engine/dist/process_group.h"
#include "engine/nn/layers.h"
#include "engine/nn/module.h"
#include "engine/optim/muon.h"
#include "engine/train/run_config.h"

namespace tb::train::detail {

/// One rank's phase times of a step, milliseconds: data, forward, backward, communication and
/// optimizer (the step's exchange carries the step before's last two; share_late_times gives
/// this step's on a logged one).
using RankTimes = std::array<double, 5>;

/// What every rank learns from a step's exchange.
struct StepExchange {
  double loss = 0;               ///< the global batch's loss (NaN when a rank's was not finite)
  bool nonfinite = false;        ///< some rank's loss was not finite: every rank skips the step
  bool cancel = false;           ///< some rank was asked to stop
  bool pause = false;            ///< some rank was asked to pause
  std::vector<RankTimes> times;  ///< by rank
  double comm_ms = 0;            ///< this rank's time in the exchange
};

/// The data-parallel state of a run.
/// The persistent buffers of `model`: its state_dict entries that are not parameters, in order.
nn::NamedTensors persistent_buffers(const nn::Model& model);

class DataParallel {
 public:
  /// Checks the group against the config (distributed.world_size) and the device (CPU).
  DataParallel(std::shared_ptr<dist::ProcessGroup> group, const RunConfig& config);

  /// This process's rank.
  int rank() const { return group_->rank(); }
  /// The number of ranks.
  int world() const { return group_->size(); }
  /// The process group.
  dist::ProcessGroup& group() { return *group_; }

  /// Copies rank 0's parameters and buffers into every rank's model.
  void broadcast_model(nn::Model& model);
  /// Copies rank 0's persistent buffers (those in the state_dict that are not parameters:
  /// BatchNorm's running statistics) into every rank's model; nothing when there are none.
  void broadcast_buffers(nn::Model& model);
  /// This rank's rows of `global` (a global batch: data.batch_size x world rows), remembered
  /// as shard() for Dropout and the gradient weight. A batch a sharded DataLoader built
  /// (Batch::global_rows > 0) is this rank's rows already: it is returned as it is.
  data::Batch take_shard(const data::Batch& global);
  /// The shard of the last take_shard().
  const nn::BatchShard& shard() const { return shard_; }

  /// The step's exchange (see the file comment). `loss` is this rank's loss over its rows
  /// (ignored when `loss_finite` is false or the rank has no rows). `weight` weighs this rank's
  /// gradients and loss in the sum; unset, it is the rank's share of the last take_shard's
  /// global batch (a step of accumulated batches has weighed each batch's loss already: 1).
  StepExchange exchange(const std::vector<core::Tensor>& params, double loss, bool loss_finite,
                        bool cancel, bool pause, const RankTimes& times,
                        std::optional<double> weight = std::nullopt);
  /// On a logged step, after the optimizer: every rank's exchange and optimizer times of this
  /// step into `times` (a small all-reduce; the step's exchange could carry only the earlier
  /// phases, and the step before's of these two).
  void share_late_times(std::vector<RankTimes>& times, double comm_ms, double optimizer_ms);
  /// While paused: one small exchange of the pause and cancel requests. Returns {pause, cancel}
  /// over all ranks.
  std::pair<bool, bool> pause_round(bool pause, bool cancel);
  /// Sums evaluation counts over the ranks (float64).
  void reduce_eval(double& loss_sum, double& items, double& correct);
  /// Gives every rank each owner's values of `tensors` (float32, contiguous; owner[i] owns
  /// tensors[i]): each rank's owned tensors packed into one buffer, one all-gather.
  void sync_owned(const std::vector<core::Tensor>& tensors, const std::vector<int>& owner,
                  const std::string& what);
  /// Distributed Muon: makes `muon` update only the matrices this rank owns (assigned by
  /// Newton–Schulz cost) and gather them after every step.
  void partition_muon(optim::Muon& muon);
  /// Distributed Muon before a checkpoint: every rank gets every matrix's momentum from its owner
  /// (a collective: every rank calls it), so rank 0 saves the whole state.
  void gather_muon_state(optim::Muon& muon);
  /// Distributed Muon after a checkpoint is saved or loaded: drops the momentum of the matrices
  /// this rank does not own.
  void release_muon_state(optim::Muon& muon);
  /// Compares the ranks' parameters (and buffers) bit for bit (a checksum each); throws
  /// tb::ValueError naming the first rank that differs from rank 0.
  void check_replicas(const std::vector<core::Tensor>& params, std::int64_t step);

 private:
  void build_layout(const std::vector<core::Tensor>& params);
  // Reduces `t` in place over the ranks: directly when the group takes its device (CPU tensors
  // always), else through a copy on the group's device (an MPI group with a CUDA model).
  void all_reduce_sum(core::Tensor& t, const std::string& what);
  // Writes parameter i's gradient times `w` into its place in the flat buffer (zeros when it has
  // none or w = 0); true when it had one. Host memory: a vectorised loop; a device: tensor ops.
  bool pack_gradient(const core::Tensor& p, std::int64_t i, double w);

  std::shared_ptr<dist::ProcessGroup> group_;
  std::int64_t bucket_elems_ = 0;
  nn::BatchShard shard_;
  core::Tensor flat_;                  // gradients, then the extras
  std::vector<std::int64_t> offsets_;  // each parameter's place in flat_
  std::int64_t grad_elems_ = 0;
};

}  // namespace tb::train::detail
