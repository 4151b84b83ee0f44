// DataLoader: batches of a Dataset in a deterministic order, built by N worker threads (or the
// calling thread) with a bounded prefetch queue, delivered in order; its position can be saved
// and restored exactly.
#pragma once

#include <algorithm>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <thread>
#include <vector>

#include "engine/data/dataset.h"
#include "engine/rng/cpu_generator.h"

namespace tb::data {

/// SplitMix64's finaliser (Steele, Lea, Flood 2014): a bijective 64-bit mix.
/// z += 0x9e3779b97f4a7c15; z = (z ^ z >> 30) * 0xbf58476d1ce4e5b9;
/// z = (z ^ z >> 27) * 0x94d049bb133111eb; return z ^ z >> 31.
constexpr std::uint64_t mix64(std::uint64_t z) noexcept {
  z += 0x9e3779b97f4a7c15ULL;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

/// The seed of batch `batch_index` of epoch `epoch` (BatchContext::seed):
/// mix64(mix64(mix64(base_seed ^ 0x6261746368000000) + epoch) + batch_index), with epoch and
/// batch_index taken as uint64. A function of these three values only.
constexpr std::uint64_t batch_seed(std::uint64_t base_seed, std::int64_t epoch,
                                   std::int64_t batch_index) noexcept {
  return mix64(mix64(mix64(base_seed ^ 0x6261746368000000ULL) + static_cast<std::uint64_t>(epoch)) +
               static_cast<std::uint64_t>(batch_index));
}

/// A seed for per-worker state that must not influence batch contents (caches, a worker's own
/// scratch generator): mix64(mix64(base_seed ^ 0x776f726b65720000) + worker_id). Batch
/// randomness must use BatchContext::seed (batch_seed) instead, so that batches do not depend on
/// which worker built them.
constexpr std::uint64_t worker_seed(std::uint64_t base_seed, int worker_id) noexcept {
  return mix64(mix64(base_seed ^ 0x776f726b65720000ULL) +
               static_cast<std::uint64_t>(static_cast<std::int64_t>(worker_id)));
}

/// How a DataLoader batches and loads.
struct DataLoaderOptions {
  std::int64_t batch_size = 1;  ///< samples per batch; >= 1
  /// Visit the samples of each epoch in a fresh random order (see DataLoader) instead of 0..N-1.
  bool shuffle = false;
  /// Leave out the last batch of an epoch when it has fewer than batch_size samples.
  bool drop_last = false;
  /// Worker threads that build batches; 0 builds each batch in the thread calling next().
  int num_workers = 0;
  /// Batches requested ahead per worker: at most num_workers * prefetch_factor batches are
  /// queued, being built or waiting to be taken. >= 1.
  int prefetch_factor = 2;
  /// Seeds the shuffle generator and, through batch_seed(), every batch's randomness.
  std::uint64_t seed = rng::kDefaultRngSeed;
  /// Data-parallel sharding: of each batch of n samples, build only the rows of shard
  /// `shard_rank` of `shard_count` — rows [r * (n / c) + min(r, n % c), + n / c + (r < n % c))
  /// — with BatchContext::row_offset set to the first and Batch::global_rows to n. The order,
  /// the seeds and the number of batches are those of the whole loader, so the shards of batch k
  /// together are its batch k. A shard with no rows is an empty batch (0 rows).
  int shard_rank = 0;
  /// The number of shards (data-parallel ranks); 1 = build whole batches. See shard_rank.
  int shard_count = 1;
};

/// A DataLoader's position, enough to continue exactly where it was (also in another process).
struct DataLoaderState {
  std::int64_t epoch = 0;       ///< the epoch next() reads from
  std::int64_t next_batch = 0;  ///< batches of that epoch already delivered
  std::uint64_t seed = 0;       ///< the base seed (DataLoaderOptions::seed)
  /// CpuGenerator::get_state() of the shuffle generator at the start of `epoch`, before its
  /// permutation is drawn (5056 bytes).
  std::vector<std::uint8_t> generator_state;
  std::int64_t dataset_size = 0;  ///< checked on restore
  std::int64_t batch_size = 0;    ///< checked on restore
  bool shuffle = false;           ///< checked on restore
  bool drop_last = false;         ///< checked on restore
};

/// JSON form of a DataLoaderState: {"version": 1, "epoch", "next_batch", "seed",
/// "generator_state" (lower-case hex), "dataset_size", "batch_size", "shuffle", "drop_last"}.
void to_json(nlohmann::json& j, const DataLoaderState& state);
/// Reads the JSON form. Throws tb::ValueError "[dataloader] malformed state: ..." for a missing
/// or mistyped field, bad hex or an unknown version.
void from_json(const nlohmann::json& j, DataLoaderState& state);

/// Batches of a Dataset, epoch after epoch.
///
/// Order: epoch e visits the samples in the order 0..N-1, or with shuffle in the permutation
/// drawn at the start of the epoch by rng::randperm (PyTorch 1.13's CPU randperm: Fisher–Yates
/// with `random() % (N - i)`) from the loader's CpuGenerator, which is seeded with `seed` at
/// construction and used for nothing else — so the orders of epochs 0, 1, ... are those of
/// successive torch.randperm(N, generator=torch.Generator().manual_seed(seed)) calls. Batch b
/// holds the samples at positions [b * batch_size, (b + 1) * batch_size) of that order (the
/// last may be shorter unless drop_last). The calling thread decides every batch's indices;
/// workers only run Dataset::get_batch, with BatchContext::seed = batch_seed(seed, e, b); and
/// batches are delivered in order. Batches therefore do not depend on num_workers or timing.
///
/// Iteration: next() returns the next batch of the current epoch, or std::nullopt once the
/// epoch is exhausted, after which the loader is at the start of the following epoch:
///
///     while (loader.epoch() < num_epochs)
///       while (std::optional<Batch> batch = loader.next()) train_step(*batch);
///
/// An exception thrown by get_batch (in a worker or not) is re-thrown by the next() call that
/// would have returned that batch, with its type and message; the batch counts as delivered, so
/// the following next() continues with the batch after it.
///
/// Threads: workers start in the constructor and are joined by the destructor, which first
/// drops the queued batches and waits only for those being built. A DataLoader is used from one
/// thread at a time and cannot be moved. The loader shares ownership of the dataset.
class DataLoader {
 public:
  /// Starts `options.num_workers` threads. The dataset's size() is read once, here (datasets
  /// do not change size). Throws tb::ValueError for a null dataset, batch_size < 1,
  /// num_workers < 0 or prefetch_factor < 1.
  DataLoader(std::shared_ptr<const Dataset> dataset, const DataLoaderOptions& options);
  /// Drops pending batches and joins the workers (waits for batches being built).
  ~DataLoader();
  DataLoader(const DataLoader&) = delete;
  DataLoader& operator=(const DataLoader&) = delete;

  /// The next batch of the current epoch (drawing the epoch's order first if it has not been
  /// drawn), or std::nullopt when the epoch has no batch left; the loader then moves to the next
  /// epoch. Re-throws what get_batch threw for this batch.
  std::optional<Batch> next();

  /// Abandons the rest of the current epoch (all of it if none of its batches was taken yet)
  /// and moves to the start of the next. Its order is still drawn, so later epochs are the same
  /// as if every batch had been taken.
  void end_epoch();

  /// The epoch next() reads from (0-based).
  std::int64_t epoch() const { return epoch_; }
  /// The index in its epoch of the batch next() returns next.
  std::int64_t next_batch_index() const { return next_batch_; }
  /// Batches per epoch: ceil(N / batch_size), or floor with drop_last.
  std::int64_t num_batches() const { return num_batches_; }
  /// The samples of batch `batch` of an epoch (0 <= batch < num_batches()), of every shard:
  /// batch_size, the last one what is left when it is short.
  std::int64_t batch_rows(std::int64_t batch) const {
    return std::min(options_.batch_size, size_ - batch * options_.batch_size);
  }
  /// The options (seed as restored by load_state).
  const DataLoaderOptions& options() const { return options_; }
  /// The dataset read.
  const Dataset& dataset() const { return *dataset_; }

  /// The current position (see DataLoaderState).
  DataLoaderState state() const;
  /// Pins the worker threads to the logical CPUs `cpus` (a bound run does this; empty = every
  /// CPU the process may use). Throws tb::ValueError "[dataloader] ..." when the kernel refuses.
  void pin_workers(const std::vector<int>& cpus);
  /// Moves to a position saved by state(), dropping pending batches; the next batches are
  /// those an uninterrupted run would have delivered after it. The saved seed replaces
  /// options().seed. Throws tb::ValueError (and changes nothing) when the dataset size,
  /// batch_size, shuffle or drop_last differ from the saved ones, the position is outside the
  /// epoch, or the generator state is malformed.
  void load_state(const DataLoaderState& state);

 private:
  struct Task {
    std::uint64_t generation = 0;
    BatchContext ctx;
    std::vector<std::int64_t> indices;
    std::int64_t global_rows = 0;  // 0: not sharded
    std::int64_t first_index = 0;  // the epoch's first sample (an empty shard's shapes)
  };
  struct Result {
    std::optional<Batch> batch;
    std::exception_ptr error;
  };

  void begin_epoch();
  void finish_epoch();
  void cancel_pending();
  void issue_tasks();
  // Batch `batch` of the current epoch: its (shard's) indices, context and global rows.
  Task task_of(std::int64_t batch) const;
  // Runs get_batch for a task (an empty shard: 0 rows of the dataset's first sample).
  Batch build(const Task& task) const;
  void worker_loop(int worker_id);

  // Used by the calling thread only.
  std::shared_ptr<const Dataset> dataset_;
  DataLoaderOptions options_;
  rng::CpuGenerator generator_;
  std::int64_t size_ = 0;  // dataset_->size() at construction
  std::int64_t num_batches_ = 0;
  std::int64_t epoch_ = 0;
  std::int64_t next_batch_ = 0;
  std::int64_t next_issue_ = 0;
  bool epoch_started_ = false;
  std::vector<std::uint8_t> epoch_start_state_;
  std::vector<std::int64_t> order_;

  // Shared with the workers, guarded by mutex_.
  std::mutex mutex_;
  std::condition_variable task_cv_;
  std::condition_variable result_cv_;
  std::deque<Task> tasks_;
  std::map<std::int64_t, Result> results_;
  std::uint64_t generation_ = 0;
  bool stop_ = false;
  std::vector<std::thread> workers_;
};

}  // namespace tb::data
