// GUI benchmarks (offscreen): a full redraw of a MetricPlot holding a 1M- and a 10M-point loss
// curve (our min/max envelope + smoothing layer + QCustomPlot replot), appending a live batch,
// and training throughput of the same run headless vs with the GUI's sink attached (metrics
// drained into a PlotsPanel at 20 Hz). Results and the command: docs/benchmarks.md.
#include <QApplication>
#include <QElapsedTimer>

#include <pthread.h>

#include <benchmark/benchmark.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <qcustomplot.h>

#include "engine/api/workbench_api.h"
#include "ui/live_plots/metric_plot.h"
#include "ui/live_plots/plots_panel.h"

namespace {

void fillCurve(tb::ui::MetricPlot& plot, std::size_t n) {
  std::vector<double> x(n), y(n);
  std::mt19937_64 rng(7);
  std::normal_distribution<double> noise(0.0, 0.05);
  for (std::size_t i = 0; i < n; ++i) {
    x[i] = static_cast<double>(i + 1);
    y[i] = 2.0 / std::sqrt(1.0 + i * 1e-4) + noise(rng);
  }
  plot.ensureCurve(QStringLiteral("loss"), QStringLiteral("loss"), Qt::blue);
  plot.append(QStringLiteral("loss"), x, x, y);
}

void BM_Replot(benchmark::State& state) {
  const auto n = static_cast<std::size_t>(state.range(0));
  tb::ui::MetricPlot plot(QStringLiteral("Loss"), QStringLiteral("loss"));
  plot.resize(900, 420);
  plot.show();  // laid out as on screen (offscreen platform): ~800 pixel columns
  QCoreApplication::processEvents();
  fillCurve(plot, n);
  plot.replotNow();
  plot.plot()->replot(QCustomPlot::rpImmediateRefresh);
  for (auto _ : state) {
    // What a redraw costs: re-decimate both layers for the visible range, then paint.
    plot.plot()->xAxis->setRange(1, static_cast<double>(n) * (1.0 - 1e-9 * state.iterations()));
    plot.replotNow();                   // envelope of both layers + paint into the buffer
    QCoreApplication::processEvents();  // the queued widget update
  }
  state.counters["vertices"] = plot.drawnVertices(QStringLiteral("loss"));
}
BENCHMARK(BM_Replot)->Arg(1'000'000)->Arg(10'000'000)->Unit(benchmark::kMillisecond)->MinTime(2.0);

// A fmnist-sized run stand-in: synthetic blobs, 3000 steps, once headless and once with the GUI
// attached: every logged step queued into a buffer that a 20 Hz "GUI thread" drains into a shown
// PlotsPanel, as MainWindow does. Each iteration runs both, in alternating order (A B / B A), so
// the machine's drift falls on both alike; the counters are the medians over iterations and the
// median of the per-iteration ratios (attached / headless steps per second; target >= 0.95).
double trainSteps(bool gui, const std::string& db) {
  const std::string config =
      "[run]\nsteps = 3000\nseed = 1\n[model]\nkind = \"mlp\"\ninput = 16\nhidden = [256, 256]\n"
      "classes = 4\n[data]\nkind = \"synthetic-blobs\"\nbatch_size = 128\nworkers = 0\n"
      "[optimizer]\nkind = \"adamw\"\n[eval]\ninterval = 500\n";
  tb::api::TrainRequest req;
  req.config_text = config;
  req.db_path = db;
  std::mutex mu;
  std::vector<tb::api::StepMetrics> buffer;
  tb::ui::PlotsPanel panel;
  panel.resize(1200, 900);
  if (gui) {
    panel.show();
    panel.addRun(1, QStringLiteral("bench"), Qt::blue);
  }
  QElapsedTimer t;
  t.start();
  std::atomic<bool> done{false};
  std::thread trainer([&] {
    // Named for profiles (`perf report --sort comm`): the run's kernel pool inherits the name.
    pthread_setname_np(pthread_self(), "trainer");
    tb::api::start_training(req, {}, [&](const tb::api::StepMetrics& m) {
      if (!gui) return;
      std::lock_guard<std::mutex> lock(mu);
      buffer.push_back(m);
    });
    done = true;
  });
  while (gui) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    std::vector<tb::api::StepMetrics> batch;
    {
      std::lock_guard<std::mutex> lock(mu);
      batch.swap(buffer);
    }
    for (auto& m : batch)
      m.run_id = 1;
    panel.appendSteps(1, batch);
    QCoreApplication::processEvents();  // the plots' own coalescing timers redraw
    if (batch.empty() && done) break;   // the run ended and everything was drawn
  }
  trainer.join();
  const double seconds = static_cast<double>(t.nsecsElapsed()) / 1e9;
  std::remove(db.c_str());
  return 3000.0 / seconds;
}

double medianOf(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n == 0 ? 0.0 : n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

void BM_GuiAttachedThroughput(benchmark::State& state) {
  const std::string db =
      std::string(std::getenv("TMPDIR") ? std::getenv("TMPDIR") : "/tmp") + "/tb_ui_bench.sqlite";
  std::vector<double> headless, attached, ratio;
  pthread_setname_np(pthread_self(), "gui");
  for (auto _ : state) {
    const bool guiFirst = headless.size() % 2 == 1;
    const double first = trainSteps(guiFirst, db);
    const double second = trainSteps(!guiFirst, db);
    headless.push_back(guiFirst ? second : first);
    attached.push_back(guiFirst ? first : second);
    ratio.push_back(attached.back() / headless.back());
    state.SetIterationTime(3000.0 / first + 3000.0 / second);
  }
  state.counters["headless_steps_per_s"] = medianOf(headless);
  state.counters["attached_steps_per_s"] = medianOf(attached);
  state.counters["ratio"] = medianOf(ratio);
}
BENCHMARK(BM_GuiAttachedThroughput)->UseManualTime()->Iterations(6)->Unit(benchmark::kSecond);

}  // namespace

int main(int argc, char** argv) {
  if (!std::getenv("QT_QPA_PLATFORM")) setenv("QT_QPA_PLATFORM", "offscreen", 1);
  QApplication app(argc, argv);
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
