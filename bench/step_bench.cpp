// TrainBench side of bench/vs_torch.sh: trains a shipped run config for a number of steps and
// prints the medians of the trainer's own per-step timings (time.step_ms and its phases) after a
// warm-up, in the one-line format bench/torch_train_step.py prints for PyTorch.
//
//   step_bench CONFIG [--steps N] [--warmup W] [--threads T] [--gemm-backend NAME]
//              [--set key.path=value]...
//
// The step is the trainer's whole step: the batch from the loader, forward + loss, backward,
// gradient norm, optimizers and schedulers. Metrics are logged every step (the sink only keeps
// them); evaluation and checkpoints are off.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <iostream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "engine/backends/cpu/blas.h"
#include "engine/core/metric_names.h"
#include "engine/core/thread_pool.h"
#include "engine/train/run_config.h"
#include "engine/train/trainer.h"

namespace {

class Collect : public tb::train::MetricSink {
 public:
  explicit Collect(std::int64_t warmup) : warmup_(warmup) {}
  void on_metrics(std::int64_t step, const tb::train::Metrics& metrics) override {
    if (step <= warmup_) return;
    for (const auto& [k, v] : metrics)
      series[k].push_back(v);
  }
  std::map<std::string, std::vector<double>> series;

 private:
  std::int64_t warmup_;
};

double median(std::vector<double> v) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

int usage() {
  std::cerr << "usage: step_bench CONFIG [--steps N] [--warmup W] [--threads T] "
               "[--gemm-backend NAME] [--set key.path=value]...\n";
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) return usage();
  std::string config_path = argv[1];
  long steps = 100, warmup = 10, threads = 0;
  std::vector<std::string> overrides;
  std::string gemm = "auto";
  for (int i = 2; i < argc; ++i) {
    const std::string a = argv[i];
    if (i + 1 >= argc) return usage();
    const char* v = argv[++i];
    if (a == "--steps") {
      steps = std::strtol(v, nullptr, 10);
    } else if (a == "--warmup") {
      warmup = std::strtol(v, nullptr, 10);
    } else if (a == "--threads") {
      threads = std::strtol(v, nullptr, 10);
    } else if (a == "--set") {
      overrides.emplace_back(v);
    } else if (a == "--gemm-backend") {
      gemm = v;
    } else {
      return usage();
    }
  }
  if (steps < 1 || warmup < 0 || threads < 0) return usage();
  try {
    const tb::cpu::GemmSelection sel = tb::cpu::set_gemm_backend(tb::cpu::parse_gemm_backend(gemm));
    if (!sel.warning.empty()) std::cerr << "step_bench: warning: " << sel.warning << "\n";
    overrides.push_back("run.steps=" + std::to_string(steps + warmup));
    overrides.emplace_back("run.epochs=0");
    overrides.emplace_back("run.log_interval=1");
    overrides.push_back("eval.interval=" + std::to_string(steps + warmup + 1));
    overrides.emplace_back("eval.batches=1");
    overrides.emplace_back("checkpoint.interval=0");
    if (threads > 0) overrides.push_back("threads=" + std::to_string(threads));
    tb::train::RunConfig config = tb::train::load_run_config(config_path, overrides);
    tb::train::Trainer trainer(config);
    auto sink = std::make_shared<Collect>(warmup);
    trainer.add_sink(sink);
    const tb::train::TrainResult r = trainer.run();
    if (r.outcome != tb::train::RunOutcome::kFinished) {
      std::cerr << "step_bench: the run did not finish: " << r.message << "\n";
      return 1;
    }
    namespace metric = tb::core::metric;
    // "auto/onednn": Auto runs oneDNN but sends its largest float products to OpenBLAS, so the
    // requested setting is printed beside the backend it chose.
    std::string gemm_used(tb::cpu::gemm_backend_name(tb::cpu::current_gemm_backend()));
    if (tb::cpu::requested_gemm_backend() == tb::cpu::GemmBackend::Auto)
      gemm_used = "auto/" + gemm_used;
    std::printf("tb threads=%d gemm=%s steps=%ld", tb::core::num_threads(), gemm_used.c_str(),
                steps);
    for (const char* k : {metric::kStepMs, metric::kDataMs, metric::kForwardMs, metric::kBackwardMs,
                          metric::kOptimizerMs, metric::kNewtonSchulzMs}) {
      auto it = sink->series.find(k);
      if (it != sink->series.end()) std::printf(" %s=%.4f", k, median(it->second));
    }
    std::printf(" loss=%.5f\n", r.last_loss);
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "step_bench: " << e.what() << "\n";
    return 1;
  }
}
