// Muon (torch.optim.Muon, https://pytorch.org/docs/stable/generated/torch.optim.Muon.html;
// pytorch/pytorch torch/optim/_muon.py, PR 160213): momentum as an exponential average with
// Nesterov, Newton–Schulz orthogonalisation of the update, decoupled weight decay with the
// unadjusted LR, and the `original` / `match_rms_adamw` LR adjustments. 2-D parameters only.
//
// Newton–Schulz runs in a selectable precision (bf16 — the reference's choice, and the default
// where the device has fast bf16 GEMMs —, fp32, or fp64 for verification) and in two forms:
// the symmetric/fused one (X·Xᵀ and A·A as SYRK, a·X folded into the GEMM's beta) and the
// plain-GEMM one, for comparison. Per-iteration coefficient schedules are selectable by name.
#pragma once

#include <array>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/core/allocator.h"
#include "engine/core/scalar_type.h"
#include "engine/optim/optimizer.h"

namespace tb::optim {

/// Newton–Schulz settings.
struct NewtonSchulzOptions {
  std::array<double, 3> coefficients = {3.4445, -4.7750, 2.0315};  ///< (a, b, c) of every step
  int steps = 5;                                                   ///< iterations (< 100)
  double eps = 1e-7;  ///< the norm is clamped to at least eps
  /// "default" (the constant coefficients above) or "polar_express" (Amsel et al. 2025:
  /// per-iteration coefficients with safety factor 1.01, the last one repeating).
  std::string schedule = "default";
  /// Working precision: BFloat16, Float32 or Float64; unset = automatic (bf16 on CUDA,
  /// fp32 on the CPU, whose bf16 GEMM is not fast, and on openreg, which runs the CPU's).
  std::optional<core::ScalarType> dtype;
  bool symmetric = true;  ///< SYRK for X·Xᵀ and A·A (false: plain GEMMs)
  /// "standard" (iterate on X) or "gram": for a non-square X (n×m, n < m after the transpose)
  /// iterate on the n×n Gram matrix R = X·Xᵀ and the accumulated polynomial Q, then X ← Q·X
  /// (the Dao-AILab/gram-newton-schulz algorithm; the same iteration in exact arithmetic, fewer
  /// flops when m is well above n). Square matrices run the standard form.
  std::string variant = "standard";
  /// Gram variant: iterations (1..steps-1) at which X is rebuilt as Q·X and R recomputed from it,
  /// bounding the error that iterating on R alone accumulates (the reference's default: {2}).
  std::vector<int> gram_restarts = {2};
};

/// Orthogonalises the 2-D `g` (the Newton–Schulz iteration of torch/optim/_muon.py, after
/// Keller Jordan, Muon (2024), https://kellerjordan.github.io/posts/muon/) and returns the
/// result in the working dtype.
Tensor newton_schulz(const Tensor& g, const NewtonSchulzOptions& options = {});

/// The (a, b, c) of iteration `i` (0-based) of a named schedule; throws tb::ValueError for an
/// unknown name, listing the known ones.
std::array<double, 3> ns_coefficients(const std::string& schedule, int i,
                                      const std::array<double, 3>& constant);

/// torch.optim.Muon's adjust_lr_fn: lr·√max(1, rows/cols) ("original", also for ""; Keller
/// Jordan, Muon (2024), https://kellerjordan.github.io/posts/muon/), lr·0.2·√max(rows, cols)
/// ("match_rms_adamw"; Liu et al., Muon is Scalable for LLM Training (2025), arXiv:2502.16982).
double muon_adjusted_lr(double lr, const std::string& adjust_lr_fn, std::int64_t rows,
                        std::int64_t cols);

/// Muon options (PyTorch's defaults; note the non-zero weight decay).
struct MuonOptions {
  double lr = 1e-3;                       ///< learning rate (>= 0)
  double weight_decay = 0.1;              ///< decoupled, with the unadjusted lr (>= 0)
  double momentum = 0.95;                 ///< EMA factor (>= 0)
  bool nesterov = true;                   ///< Nesterov-style update input
  std::string adjust_lr_fn = "original";  ///< "original" or "match_rms_adamw"
  NewtonSchulzOptions ns;                 ///< orthogonalisation settings
  /// Accept parameters of more than 2 dimensions (convolution filters [out, in, kh, kw]) and
  /// orthogonalise them flattened to [out, in·kh·kw], as KellerJordan/Muon does; the LR
  /// adjustment uses that matrix's shape. False (torch.optim.Muon): 2-D parameters only.
  bool flatten_conv = false;
};

/// Distributed Muon, as KellerJordan/Muon's distributed `Muon` (muon.py): in data-parallel
/// training, whose gradients are already averaged and equal on every process, each process
/// updates only the matrices it owns — momentum, Newton–Schulz, weight decay, the update — and
/// `sync` then copies every matrix from its owner to every process. The result is the
/// replicated optimizer's, bit for bit; the Newton–Schulz work is divided, and a matrix's
/// momentum lives on its owner only.
struct MuonPartition {
  int rank = 0;            ///< this process
  std::vector<int> owner;  ///< the owning process of each parameter, groups flattened in order
  /// Called at the end of every step() on every process with all the parameters (same order as
  /// `owner`): must give every process each owner's values.
  std::function<void(const std::vector<Tensor>& params, const std::vector<int>& owner)> sync;
};

/// Owners for distributed Muon: the matrices by decreasing Newton–Schulz cost (m·n·min(m, n)),
/// each to the process with the least cost so far (lowest rank on ties) — the same on every
/// process.
std::vector<int> assign_muon_owners(const std::vector<Tensor>& params, int world);

/// The Muon optimizer. Group keys: lr, weight_decay, momentum, nesterov, adjust_lr_fn, ns_a,
/// ns_b, ns_c, ns_steps, eps, ns_schedule, ns_variant. State: "momentum_buffer".
class Muon : public Optimizer {
 public:
  /// One group holding `params` (each must be 2-D).
  Muon(std::vector<Tensor> params, const MuonOptions& options = {});
  /// Groups given explicitly.
  Muon(std::vector<ParamGroup> groups, const MuonOptions& options = {});
  void step() override;
  /// Milliseconds the last step() spent in Newton–Schulz (the trainer reports it as the
  /// orthogonalisation share of the optimizer time): the host clock on the CPU; on a device with
  /// a timer (CUDA events), the device's own time, read here — step() itself never waits.
  double last_newton_schulz_ms();
  /// Appends "time.newton_schulz_ms": last_newton_schulz_ms().
  void append_step_metrics(std::vector<std::pair<std::string, double>>& out) override;
  /// Makes this optimizer distributed (see MuonPartition); `owner` must have one entry per
  /// parameter. Throws tb::ValueError otherwise.
  void set_partition(MuonPartition partition);
  /// The partition (owner empty: replicated).
  const MuonPartition& partition() const { return partition_; }
  /// All parameters, groups flattened in order (MuonPartition::owner's order).
  std::vector<Tensor> all_params() const;

 protected:
  void validate_group(const ParamGroup& group) const override;

 private:
  NewtonSchulzOptions ns_;
  double last_ns_ms_ = 0.0;
  std::unique_ptr<core::DeviceTimer> ns_timer_;  // device parameters: marks around each NS
  core::Device ns_timer_device_;
  bool ns_marks_pending_ = false;  // marks of the last step not read yet
  double pending_ns_ms();          // reads (waits for) and sums the pending marks
  MuonPartition partition_;
  std::map<const core::TensorImpl*, int> owner_of_;  // from partition_
};

}  // namespace tb::optim
