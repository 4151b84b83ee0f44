#include "engine/data/dataloader.h"

#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <numeric>
#include <string>
#include <system_error>
#include <utility>

#include "engine/core/error.h"
#include "engine/rng/cpu_sampling.h"

namespace tb::data {
namespace {

constexpr int kStateVersion = 1;

std::string to_hex(const std::vector<std::uint8_t>& bytes) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  out.reserve(bytes.size() * 2);
  for (std::uint8_t b : bytes) {
    out.push_back(kDigits[b >> 4]);
    out.push_back(kDigits[b & 0xf]);
  }
  return out;
}

int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

std::vector<std::uint8_t> from_hex(const std::string& text) {
  TB_CHECK(text.size() % 2 == 0,
           "[dataloader] malformed state: generator_state has an odd number (", text.size(),
           ") of hex digits");
  std::vector<std::uint8_t> out(text.size() / 2);
  for (std::size_t i = 0; i < out.size(); ++i) {
    const int hi = hex_digit(text[2 * i]);
    const int lo = hex_digit(text[2 * i + 1]);
    TB_CHECK(hi >= 0 && lo >= 0,
             "[dataloader] malformed state: generator_state has a non-hex "
             "character at position ",
             hi < 0 ? 2 * i : 2 * i + 1);
    out[i] = static_cast<std::uint8_t>((hi << 4) | lo);
  }
  return out;
}

}  // namespace

void to_json(nlohmann::json& j, const DataLoaderState& state) {
  j = nlohmann::json{{"version", kStateVersion},
                     {"epoch", state.epoch},
                     {"next_batch", state.next_batch},
                     {"seed", state.seed},
                     {"generator_state", to_hex(state.generator_state)},
                     {"dataset_size", state.dataset_size},
                     {"batch_size", state.batch_size},
                     {"shuffle", state.shuffle},
                     {"drop_last", state.drop_last}};
}

void from_json(const nlohmann::json& j, DataLoaderState& state) {
  DataLoaderState s;
  std::string hex;
  try {
    TB_CHECK(j.is_object(), "[dataloader] malformed state: expected a JSON object, got ",
             j.type_name());
    const int version = j.at("version").get<int>();
    TB_CHECK(version == kStateVersion, "[dataloader] malformed state: version ", version,
             " is not supported (this build reads version ", kStateVersion, ")");
    s.epoch = j.at("epoch").get<std::int64_t>();
    s.next_batch = j.at("next_batch").get<std::int64_t>();
    s.seed = j.at("seed").get<std::uint64_t>();
    hex = j.at("generator_state").get<std::string>();
    s.dataset_size = j.at("dataset_size").get<std::int64_t>();
    s.batch_size = j.at("batch_size").get<std::int64_t>();
    s.shuffle = j.at("shuffle").get<bool>();
    s.drop_last = j.at("drop_last").get<bool>();
  } catch (const nlohmann::json::exception& e) {
    throw ValueError(detail::str_cat("[dataloader] malformed state: ", e.what()));
  }
  s.generator_state = from_hex(hex);
  state = std::move(s);
}

DataLoader::DataLoader(std::shared_ptr<const Dataset> dataset, const DataLoaderOptions& options)
    : dataset_(std::move(dataset)), options_(options), generator_(options.seed) {
  TB_CHECK(dataset_ != nullptr, "[dataloader] the dataset is null");
  TB_CHECK(options_.batch_size >= 1, "[dataloader] batch_size must be >= 1, got ",
           options_.batch_size);
  TB_CHECK(options_.num_workers >= 0, "[dataloader] num_workers must be >= 0, got ",
           options_.num_workers);
  TB_CHECK(options_.prefetch_factor >= 1, "[dataloader] prefetch_factor must be >= 1, got ",
           options_.prefetch_factor);
  TB_CHECK(options_.shard_count >= 1 && options_.shard_rank >= 0 &&
               options_.shard_rank < options_.shard_count,
           "[dataloader] shard ", options_.shard_rank, " of ", options_.shard_count,
           " is not a shard (0 <= shard_rank < shard_count)");
  size_ = dataset_->size();
  TB_CHECK(size_ >= 0, "[dataloader] the dataset reports a negative size ", size_);
  num_batches_ = options_.drop_last ? size_ / options_.batch_size
                                    : (size_ + options_.batch_size - 1) / options_.batch_size;
  const auto stop_started = [this] {
    {
      std::lock_guard lock(mutex_);
      stop_ = true;
    }
    task_cv_.notify_all();
    for (std::thread& t : workers_) {
      t.join();
    }
  };
  try {
    workers_.reserve(static_cast<std::size_t>(options_.num_workers));
    for (int w = 0; w < options_.num_workers; ++w) {
      workers_.emplace_back([this, w] { worker_loop(w); });
    }
  } catch (const std::system_error& e) {
    // The system's thread limit (ulimit -u, a container's pids limit): said with the key.
    const std::size_t started = workers_.size();
    stop_started();
    throw ValueError(detail::str_cat("[dataloader] data.workers = ", options_.num_workers,
                                     ": the system refused loader thread ", started + 1, " (",
                                     e.what(), "); use fewer workers"));
  } catch (...) {
    stop_started();
    throw;
  }
}

DataLoader::~DataLoader() {
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
    ++generation_;
    tasks_.clear();
  }
  task_cv_.notify_all();
  for (std::thread& t : workers_) {
    t.join();
  }
}

void DataLoader::worker_loop(int worker_id) {
  while (true) {
    Task task;
    {
      std::unique_lock lock(mutex_);
      task_cv_.wait(lock, [this] { return stop_ || !tasks_.empty(); });
      if (stop_) return;
      task = std::move(tasks_.front());
      tasks_.pop_front();
    }
    task.ctx.worker_id = worker_id;
    Result result;
    try {
      result.batch = build(task);
    } catch (...) {
      result.error = std::current_exception();
    }
    {
      std::lock_guard lock(mutex_);
      if (task.generation == generation_) {
        results_.emplace(task.ctx.batch_index, std::move(result));
      }
    }
    result_cv_.notify_all();
  }
}

void DataLoader::begin_epoch() {
  epoch_start_state_ = generator_.get_state();
  order_.resize(static_cast<std::size_t>(size_));
  if (options_.shuffle) {
    rng::randperm(generator_, order_.data(), size_);
  } else {
    std::iota(order_.begin(), order_.end(), std::int64_t{0});
  }
  next_issue_ = next_batch_;
  epoch_started_ = true;
}

void DataLoader::cancel_pending() {
  std::deque<Task> dropped_tasks;
  std::map<std::int64_t, Result> dropped_results;
  {
    std::lock_guard lock(mutex_);
    ++generation_;
    dropped_tasks.swap(tasks_);
    dropped_results.swap(results_);
  }
  next_issue_ = next_batch_;
}

void DataLoader::finish_epoch() {
  cancel_pending();
  ++epoch_;
  next_batch_ = 0;
  next_issue_ = 0;
  epoch_started_ = false;
}

DataLoader::Task DataLoader::task_of(std::int64_t batch) const {
  Task task;
  task.ctx.epoch = epoch_;
  task.ctx.batch_index = batch;
  task.ctx.seed = batch_seed(options_.seed, epoch_, batch);
  const auto n = static_cast<std::int64_t>(order_.size());
  std::int64_t begin = batch * options_.batch_size;
  std::int64_t end = std::min(n, begin + options_.batch_size);
  if (options_.shard_count > 1) {
    const std::int64_t rows = end - begin;
    const std::int64_t c = options_.shard_count;
    const std::int64_t r = options_.shard_rank;
    const std::int64_t offset = r * (rows / c) + std::min(r, rows % c);
    task.ctx.row_offset = offset;
    task.global_rows = rows;
    begin += offset;
    end = begin + rows / c + (r < rows % c ? 1 : 0);
  }
  task.indices.assign(order_.begin() + begin, order_.begin() + end);
  if (!order_.empty()) task.first_index = order_.front();
  return task;
}

Batch DataLoader::build(const Task& task) const {
  Batch b;
  if (task.indices.empty() && task.global_rows > 0) {
    // This shard has no rows of a short batch: the first sample's shapes, 0 rows.
    const std::vector<std::int64_t> first{task.first_index};
    b = dataset_->get_batch(first, task.ctx);
    b.input = b.input.narrow(0, 0, 0);
    b.target = b.target.narrow(0, 0, 0);
  } else {
    b = dataset_->get_batch(task.indices, task.ctx);
  }
  b.global_rows = task.global_rows;
  return b;
}

void DataLoader::issue_tasks() {
  const std::int64_t capacity =
      static_cast<std::int64_t>(options_.num_workers) * options_.prefetch_factor;
  std::int64_t issued = 0;
  {
    std::lock_guard lock(mutex_);
    while (next_issue_ < num_batches_ && next_issue_ < next_batch_ + capacity) {
      Task task = task_of(next_issue_);
      task.generation = generation_;
      tasks_.push_back(std::move(task));
      ++next_issue_;
      ++issued;
    }
  }
  if (issued == 1) {
    task_cv_.notify_one();
  } else if (issued > 1) {
    task_cv_.notify_all();
  }
}

std::optional<Batch> DataLoader::next() {
  if (!epoch_started_) begin_epoch();
  if (next_batch_ >= num_batches_) {
    finish_epoch();
    return std::nullopt;
  }
  const std::int64_t b = next_batch_;
  if (workers_.empty()) {
    Task task = task_of(b);
    task.ctx.worker_id = -1;
    ++next_batch_;
    return build(task);
  }

  issue_tasks();
  Result result;
  {
    std::unique_lock lock(mutex_);
    result_cv_.wait(lock, [this, b] { return results_.count(b) != 0; });
    auto it = results_.find(b);
    result = std::move(it->second);
    results_.erase(it);
  }
  ++next_batch_;
  issue_tasks();
  if (result.error) std::rethrow_exception(result.error);
  return std::move(result.batch);
}

void DataLoader::end_epoch() {
  if (!epoch_started_) begin_epoch();
  finish_epoch();
}

DataLoaderState DataLoader::state() const {
  DataLoaderState s;
  s.epoch = epoch_;
  s.next_batch = next_batch_;
  s.seed = options_.seed;
  s.generator_state = epoch_started_ ? epoch_start_state_ : generator_.get_state();
  s.dataset_size = size_;
  s.batch_size = options_.batch_size;
  s.shuffle = options_.shuffle;
  s.drop_last = options_.drop_last;
  return s;
}

void DataLoader::load_state(const DataLoaderState& state) {
  const std::int64_t n = size_;
  TB_CHECK(state.dataset_size == n, "[dataloader] cannot restore a state saved for a dataset of ",
           state.dataset_size, " samples into a loader of a dataset of ", n, " samples");
  TB_CHECK(state.batch_size == options_.batch_size,
           "[dataloader] cannot restore a state saved with batch_size ", state.batch_size,
           " into a loader with batch_size ", options_.batch_size);
  TB_CHECK(state.shuffle == options_.shuffle,
           "[dataloader] cannot restore a state saved with "
           "shuffle ",
           state.shuffle ? "on" : "off", " into a loader with shuffle ",
           options_.shuffle ? "on" : "off");
  TB_CHECK(state.drop_last == options_.drop_last,
           "[dataloader] cannot restore a state saved "
           "with drop_last ",
           state.drop_last ? "on" : "off", " into a loader with drop_last ",
           options_.drop_last ? "on" : "off");
  TB_CHECK(state.epoch >= 0, "[dataloader] cannot restore a state with epoch ", state.epoch);
  TB_CHECK(state.next_batch >= 0 && state.next_batch <= num_batches_,
           "[dataloader] cannot restore a state at batch ", state.next_batch, " of an epoch of ",
           num_batches_, " batches");
  rng::CpuGenerator check;
  check.set_state(state.generator_state);  // throws tb::ValueError for a malformed state

  cancel_pending();
  generator_.set_state(state.generator_state);
  options_.seed = state.seed;
  epoch_ = state.epoch;
  next_batch_ = state.next_batch;
  next_issue_ = next_batch_;
  epoch_started_ = false;
}

void DataLoader::pin_workers(const std::vector<int>& cpus) {
  cpu_set_t mask;
  CPU_ZERO(&mask);
  if (cpus.empty()) {
    TB_CHECK(sched_getaffinity(0, sizeof(mask), &mask) == 0,
             "[dataloader] reading the process's CPU mask failed");
  }
  for (int c : cpus) {
    TB_CHECK(c >= 0 && c < CPU_SETSIZE, "[dataloader] CPU index ", c, " is out of range");
    CPU_SET(c, &mask);
  }
  for (std::thread& t : workers_) {
    const int rc = pthread_setaffinity_np(t.native_handle(), sizeof(mask), &mask);
    TB_CHECK(rc == 0, "[dataloader] pinning a worker thread failed (error ", rc, ")");
  }
}

}  // namespace tb::data
