// Dataset: what the DataLoader reads from. A dataset has a number of samples and builds a whole
// batch from a list of sample indices (gather + collate in one call), possibly drawing random
// numbers from a generator seeded for that batch alone.
#pragma once

#include <cstdint>
#include <span>

#include "engine/core/tensor.h"

namespace tb::data {

/// One batch of a dataset on the CPU: the model input and the training target.
struct Batch {
  core::Tensor input;   ///< e.g. float32 [B, 784] images or int64 [B, T] tokens
  core::Tensor target;  ///< e.g. int64 [B] class labels or int64 [B, T] next tokens
  /// Set by a sharded DataLoader (DataLoaderOptions::shard_count > 1): the rows of the global
  /// batch these rows are a share of; 0 when the batch is whole.
  std::int64_t global_rows = 0;
};

/// Where a batch sits in the loader's stream; passed to Dataset::get_batch.
struct BatchContext {
  std::int64_t epoch = 0;        ///< epoch the batch belongs to (0-based)
  std::int64_t batch_index = 0;  ///< position of the batch in its epoch (0-based)
  /// Seed for any randomness inside this batch: batch_seed(base seed, epoch, batch_index) (see
  /// dataloader.h). Depends only on those three values, never on which thread builds the batch.
  std::uint64_t seed = 0;
  /// The position in the global batch of the first index (a sharded DataLoader builds only its
  /// rows of each batch; 0 otherwise). Randomness drawn per row must be that of row
  /// row_offset + j, so that the shards of a batch together equal the whole batch.
  std::int64_t row_offset = 0;
  /// The worker thread building the batch (0..num_workers-1), or -1 for the calling thread.
  /// For per-thread caches and diagnostics only: batch contents must not depend on it.
  int worker_id = -1;
};

/// A source of samples. Implementations must make get_batch() safe to call from several threads
/// at once (the DataLoader's workers call it concurrently); the datasets of this module are
/// immutable after construction.
class Dataset {
 public:
  Dataset() = default;
  Dataset(const Dataset&) = delete;
  Dataset& operator=(const Dataset&) = delete;
  virtual ~Dataset() = default;

  /// Number of samples; an epoch of the DataLoader visits indices 0..size()-1.
  virtual std::int64_t size() const = 0;

  /// Builds the batch of the samples `indices` (each in [0, size()), in this order). Randomness
  /// must come from `ctx.seed` only. Throws tb::IndexError for an index out of range and
  /// whatever the dataset reports for a bad sample.
  virtual Batch get_batch(std::span<const std::int64_t> indices, const BatchContext& ctx) const = 0;

 protected:
  /// Lets derived datasets be moved (returned by value); copying is deleted to avoid slicing.
  Dataset(Dataset&&) = default;
  /// Move assignment for derived datasets.
  Dataset& operator=(Dataset&&) = default;
};

/// A dataset over two CPU tensors whose first dimension is the sample index: sample i is
/// (input[i], target[i]). get_batch() copies the selected rows into new contiguous tensors of
/// shapes [B, ...input dims] and [B, ...target dims] with the same dtypes.
class TensorDataset final : public Dataset {
 public:
  /// Keeps (contiguous copies of) `input` and `target`. Throws tb::ValueError unless both are
  /// defined CPU tensors with at least one dimension and the same size along dimension 0.
  TensorDataset(const core::Tensor& input, const core::Tensor& target);

  /// input.size(0).
  std::int64_t size() const override { return size_; }
  /// Gathers the rows `indices` of input and target. Throws tb::IndexError naming the index
  /// and the dataset size for an index outside [0, size()).
  Batch get_batch(std::span<const std::int64_t> indices, const BatchContext& ctx) const override;

  /// All inputs (contiguous, [N, ...]).
  const core::Tensor& input() const { return input_; }
  /// All targets (contiguous, [N, ...]).
  const core::Tensor& target() const { return target_; }

 private:
  core::Tensor input_;
  core::Tensor target_;
  std::int64_t size_ = 0;
};

/// Copies rows `indices` of the contiguous CPU tensor `src` (first dimension = rows) into a new
/// contiguous tensor [indices.size(), ...]. Throws tb::IndexError naming `what`, the index and
/// the row count for an index outside [0, src.size(0)).
core::Tensor gather_rows(const core::Tensor& src, std::span<const std::int64_t> indices,
                         const char* what);

}  // namespace tb::data
