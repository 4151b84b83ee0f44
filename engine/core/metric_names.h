// The metric vocabulary: the names a run's steps are logged under. The trainer writes them, the
// store keeps them, the GUI's plots and the reports read them — all through these constants.
#pragma once

namespace tb::core::metric {

inline constexpr const char* kLoss = "loss";                      ///< training loss of the step
inline constexpr const char* kLrPrefix = "lr.";                   ///< "lr.<optimizer>.<group>"
inline constexpr const char* kGradNorm = "grad_norm";             ///< global gradient L2 norm
inline constexpr const char* kDataMs = "time.data_ms";            ///< waiting for the batch
inline constexpr const char* kForwardMs = "time.forward_ms";      ///< forward pass + loss
inline constexpr const char* kBackwardMs = "time.backward_ms";    ///< backward pass
inline constexpr const char* kOptimizerMs = "time.optimizer_ms";  ///< unscale, clip, step
inline constexpr const char* kCommMs = "time.comm_ms";  ///< data-parallel: gradient all-reduce
/// Data-parallel: "rank<r>/" + a time.* name, each rank's own phase times.
inline constexpr const char* kRankPrefix = "rank";
inline constexpr const char* kNewtonSchulzMs = "time.newton_schulz_ms";     ///< Muon's share
inline constexpr const char* kStepMs = "time.step_ms";                      ///< the whole step
inline constexpr const char* kEvalMs = "time.eval_ms";                      ///< an evaluation
inline constexpr const char* kSamplesPerS = "samples_per_s";                ///< throughput
inline constexpr const char* kTokensPerS = "tokens_per_s";                  ///< language models
inline constexpr const char* kLossScale = "loss_scale";                     ///< GradScaler's scale
inline constexpr const char* kSkippedSteps = "skipped_steps";               ///< non-finite losses
inline constexpr const char* kScalerSkippedSteps = "scaler_skipped_steps";  ///< inf/NaN grads
inline constexpr const char* kEvalPrefix = "eval.";                ///< the model's evaluation
inline constexpr const char* kEvalLoss = "eval.loss";              ///< mean eval loss
inline constexpr const char* kEvalAccuracy = "eval.accuracy";      ///< classifiers
inline constexpr const char* kEvalPerplexity = "eval.perplexity";  ///< language models

}  // namespace tb::core::metric
