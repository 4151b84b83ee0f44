// Run store benchmarks: batched metric ingest (rows/s through RunWriter into SQLite, commits
// included), reading one metric's 1M-point series back (what the GUI does when it opens a run),
// and the producer-side cost of logging one training step (what the step loop pays).
#include <benchmark/benchmark.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "engine/store/run_store.h"
#include "engine/store/run_writer.h"

namespace {

namespace fs = std::filesystem;
using tb::store::KeyedValue;
using tb::store::MetricValue;
using tb::store::RunStore;
using tb::store::RunWriter;

// The metrics the trainer logs per step (issue 5): loss, LRs, norms, throughput, time breakdown.
const std::vector<std::string>& step_keys() {
  static const std::vector<std::string> keys = {
      "train/loss",       "train/lr/group0",  "train/lr/group1",   "train/grad_norm",
      "train/loss_scale", "train/samples_s",  "train/tokens_s",    "time/data_wait_ms",
      "time/forward_ms",  "time/backward_ms", "time/optimizer_ms", "time/newton_schulz_ms",
      "time/total_ms",    "train/skipped",    "train/epoch",       "train/tokens"};
  return keys;
}

struct TempDb {
  fs::path dir;
  TempDb() {
    dir = fs::temp_directory_path() / ("tb_store_bench_" + std::to_string(getpid()));
    fs::remove_all(dir);
    fs::create_directories(dir);
  }
  ~TempDb() { fs::remove_all(dir); }
  fs::path db() const { return dir / "runs.sqlite"; }
};

// Rows per second from log_metrics to committed, 16 metrics per step, 4096 steps per flush.
void BM_IngestBatched(benchmark::State& state) {
  TempDb tmp;
  auto store = RunStore::open(tmp.db());
  const auto run = store.create_run({.name = "bench"});
  RunWriter writer(tmp.db(), run);
  std::vector<KeyedValue> values;
  for (const std::string& k : step_keys())
    values.push_back({writer.key(k), 0.0});
  const std::int64_t steps_per_iter = state.range(0);
  std::int64_t step = 0;
  for (auto _ : state) {
    for (std::int64_t s = 0; s < steps_per_iter; ++s, ++step) {
      for (std::size_t i = 0; i < values.size(); ++i) {
        values[i].value = static_cast<double>(step) * 1e-3 + static_cast<double>(i);
      }
      writer.log_metrics(step, values);
    }
    writer.flush();
  }
  writer.set_status(tb::store::RunStatus::kFinished);
  writer.close();
  const auto stats = writer.stats();
  state.SetItemsProcessed(static_cast<std::int64_t>(stats.rows_committed));
  state.counters["rows_per_s"] =
      benchmark::Counter(static_cast<double>(stats.rows_committed), benchmark::Counter::kIsRate);
  state.counters["batches"] = static_cast<double>(stats.batches);
  state.counters["largest_batch"] = static_cast<double>(stats.largest_batch);
}
BENCHMARK(BM_IngestBatched)->Arg(4096)->Arg(65536)->Unit(benchmark::kMillisecond)->UseRealTime();

// Reads one metric's whole 1M-point series (RunStore::series) from a run of 4 metrics logged for
// 1M steps, committed every `range(0)` steps (a commit is one chunk per metric: 256 steps is a
// 200 ms commit interval at 1.3k steps/s, 4096 at 20k steps/s). Target: <= 50 ms.
void BM_ReadSeries(benchmark::State& state) {
  TempDb tmp;
  constexpr std::int64_t kSteps = 1 << 20;
  std::int64_t run = 0;
  {
    auto store = RunStore::open(tmp.db());
    run = store.create_run({.name = "bench"});
    RunWriter writer(tmp.db(), run);
    std::vector<KeyedValue> values;
    for (int i = 0; i < 4; ++i)
      values.push_back({writer.key(step_keys()[static_cast<std::size_t>(i)]), 0.0});
    for (std::int64_t step = 0; step < kSteps; ++step) {
      for (KeyedValue& v : values)
        v.value = static_cast<double>(step) * 1e-3;
      writer.log_metrics(step, values);
      if ((step + 1) % state.range(0) == 0) writer.flush();
    }
    writer.set_status(tb::store::RunStatus::kFinished);
  }
  auto store = RunStore::open(tmp.db());
  std::size_t points = 0;
  for (auto _ : state) {
    const auto series = store.series(run, step_keys()[0]);
    points = series.size();
    benchmark::DoNotOptimize(series.data());
  }
  if (points != static_cast<std::size_t>(kSteps)) state.SkipWithError("short series");
  state.counters["points"] = static_cast<double>(points);
}
BENCHMARK(BM_ReadSeries)->Arg(256)->Arg(4096)->Unit(benchmark::kMillisecond)->UseRealTime();

// What the step loop pays per step: one log_metrics call of 16 values (string keys or interned
// handles) while the writer thread commits in the background every 200 ms. Steps are paced at
// 20k steps/s (320k rows/s, well inside the writer's capacity, and faster than any real training
// step) so that the queue is in its steady state; only the call itself is timed.
template <bool kInterned>
void BM_LogStep(benchmark::State& state) {
  TempDb tmp;
  auto store = RunStore::open(tmp.db());
  const auto run = store.create_run({.name = "bench"});
  RunWriter writer(tmp.db(), run);
  std::vector<MetricValue> named;
  std::vector<KeyedValue> keyed;
  for (const std::string& k : step_keys()) {
    named.push_back({k, 0.0});
    keyed.push_back({writer.key(k), 0.0});
  }
  using Clock = std::chrono::steady_clock;
  const auto pace = std::chrono::microseconds(50);
  std::int64_t step = 0;
  auto next = Clock::now();
  for (auto _ : state) {
    next += pace;
    while (Clock::now() < next) {
    }
    const auto t0 = Clock::now();
    if constexpr (kInterned) {
      keyed[0].value = static_cast<double>(step);
      writer.log_metrics(step, keyed);
    } else {
      named[0].value = static_cast<double>(step);
      writer.log_metrics(step, named);
    }
    state.SetIterationTime(std::chrono::duration<double>(Clock::now() - t0).count());
    ++step;
  }
  writer.set_status(tb::store::RunStatus::kFinished);
  writer.close();
  state.counters["producer_waits"] = static_cast<double>(writer.stats().producer_waits);
  state.counters["batches"] = static_cast<double>(writer.stats().batches);
}
BENCHMARK(BM_LogStep<false>)->Name("BM_LogStep/string_keys")->Iterations(100000)->UseManualTime();
BENCHMARK(BM_LogStep<true>)->Name("BM_LogStep/interned_keys")->Iterations(100000)->UseManualTime();

}  // namespace

BENCHMARK_MAIN();
