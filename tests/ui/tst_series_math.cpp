// Smoothing and decimation behind the plots: TensorBoard's debiased EMA on hand-computed values,
// and the min/max envelope keeping each pixel column's extremes (spikes survive at any length).
#include <QtTest>

#include <cmath>
#include <limits>
#include <random>
#include <tuple>
#include <vector>

#include "ui/live_plots/series_math.h"

using tb::ui::debiased_ema;
using tb::ui::legend_corner;
using tb::ui::min_max_envelope;
using tb::ui::nearest_index;
using tb::ui::robust_upper;

class TestSeriesMath : public QObject {
  Q_OBJECT

 private Q_SLOTS:
  void emaMatchesTensorBoardsDefinition() {
    // w = 0.5: last = 0.5, 1.25, 2.125; debias = 0.5, 0.75, 0.875.
    const auto s = debiased_ema({1.0, 2.0, 3.0}, 0.5);
    QCOMPARE(s.size(), std::size_t(3));
    QCOMPARE(s[0], 1.0);
    QVERIFY(std::abs(s[1] - 1.25 / 0.75) < 1e-15);
    QVERIFY(std::abs(s[2] - 2.125 / 0.875) < 1e-15);
    // The first point is never biased towards 0, weight 0 is the raw series.
    QCOMPARE(debiased_ema({7.0}, 0.99)[0], 7.0);
    QCOMPARE(debiased_ema({1.0, 5.0}, 0.0), (std::vector<double>{1.0, 5.0}));
  }

  void emaSkipsNonFiniteValues() {
    const double nan = std::numeric_limits<double>::quiet_NaN();
    const auto s = debiased_ema({1.0, nan, 3.0}, 0.5);
    QVERIFY(std::isnan(s[1]));
    // The NaN does not enter the average: the third point is the second finite one.
    QVERIFY(std::abs(s[2] - (0.5 * 0.5 + 0.5 * 3.0) / 0.75) < 1e-15);
  }

  void envelopeKeepsEveryColumnsMinAndMax() {
    const std::size_t n = 1'000'000;
    std::vector<double> x(n), y(n);
    std::mt19937_64 rng(1);
    std::normal_distribution<double> noise(0.0, 1.0);
    for (std::size_t i = 0; i < n; ++i) {
      x[i] = static_cast<double>(i);
      y[i] = std::sin(i * 1e-4) + 0.1 * noise(rng);
    }
    y[123457] = 50.0;  // one-point spikes must stay visible
    y[876543] = -40.0;
    const int columns = 800;
    const auto e = min_max_envelope(x, y, 0.0, static_cast<double>(n - 1), columns);
    QVERIFY(e.x.size() <= static_cast<std::size_t>(columns) * 4 + 8);
    QVERIFY(e.x.size() > static_cast<std::size_t>(columns));
    // Recompute each column's extremes by brute force and find them among the vertices.
    const double width = static_cast<double>(n - 1) / columns;
    std::vector<double> lo(columns + 1, 1e300), hi(columns + 1, -1e300);
    for (std::size_t i = 0; i < n; ++i) {
      const auto c = static_cast<std::size_t>(std::floor(x[i] / width));
      lo[c] = std::min(lo[c], y[i]);
      hi[c] = std::max(hi[c], y[i]);
    }
    std::vector<double> vlo(columns + 1, 1e300), vhi(columns + 1, -1e300);
    for (std::size_t i = 0; i < e.x.size(); ++i) {
      const auto c = static_cast<std::size_t>(std::floor(e.x[i] / width));
      vlo[c] = std::min(vlo[c], e.y[i]);
      vhi[c] = std::max(vhi[c], e.y[i]);
    }
    for (int c = 0; c <= columns; ++c) {
      if (lo[c] > 1e299) continue;
      QCOMPARE(vlo[c], lo[c]);
      QCOMPARE(vhi[c], hi[c]);
    }
    // x stays ascending (a polyline, not a scatter).
    for (std::size_t i = 1; i < e.x.size(); ++i)
      QVERIFY(e.x[i] >= e.x[i - 1]);
  }

  void indexedEnvelopeEqualsThePlainOne() {
    const std::size_t n = 2'000'003;  // not a multiple of any block size
    std::vector<double> x(n), y(n);
    std::mt19937_64 rng(2);
    std::uniform_real_distribution<double> u(-1.0, 1.0);
    for (std::size_t i = 0; i < n; ++i) {
      x[i] = static_cast<double>(i) * 0.5;
      y[i] = u(rng);
    }
    y[1'500'001] = 9.0;
    tb::ui::EnvelopeIndex index;
    index.update(y);
    for (auto [lo, hi, cols] : {std::tuple{0.0, x.back(), 700}, std::tuple{1000.0, 900000.0, 333},
                                std::tuple{750000.0, 750010.0, 500}}) {
      const auto a = min_max_envelope(x, y, lo, hi, cols);
      const auto b = index.envelope(x, y, lo, hi, cols);
      QCOMPARE(b.x, a.x);
      QCOMPARE(b.y, a.y);
    }
    // Appending extends the index.
    for (int i = 0; i < 100000; ++i) {
      x.push_back(x.back() + 0.5);
      y.push_back(u(rng));
    }
    index.update(y);
    const auto a = min_max_envelope(x, y, 0.0, x.back(), 640);
    const auto b = index.envelope(x, y, 0.0, x.back(), 640);
    QCOMPARE(b.y, a.y);
  }

  void envelopeOfAZoomedRangeKeepsNeighboursAndSmallSeriesAsIs() {
    std::vector<double> x{0, 1, 2, 3, 4, 5}, y{5, 4, 3, 2, 1, 0};
    auto e = min_max_envelope(x, y, 2.0, 3.0, 100);
    // Points 2 and 3 plus one neighbour on each side.
    QCOMPARE(e.x, (std::vector<double>{1, 2, 3, 4}));
    e = min_max_envelope(x, y, -10, 10, 100);
    QCOMPARE(e.y, y);
  }

  void nearestIndex() {
    const std::vector<double> x{0, 10, 20};
    QCOMPARE(nearest_index(x, -5), 0L);
    QCOMPARE(nearest_index(x, 4), 0L);
    QCOMPARE(nearest_index(x, 6), 1L);
    QCOMPARE(nearest_index(x, 99), 2L);
    QCOMPARE(nearest_index({}, 1), -1L);
  }

  // A legend goes where it covers the fewest points: away from a maximised metric's best point
  // at the top right; the top right on a tie; a marker's margin counts.
  void legendCornerAvoidsThePoints() {
    // Area 400 x 300, legend 100 x 60: corners 0 top right, 1 top left, 2 bottom right, 3 bottom
    // left. A curve rising to the top right corner:
    QCOMPARE(legend_corner(400, 300, 100, 60, {20, 200, 390}, {280, 150, 10}, 6), 1);
    QCOMPARE(legend_corner(400, 300, 100, 60, {}, {}, 6), 0);  // nothing to cover
    // Points in every top corner and at the bottom right: the bottom left.
    QCOMPARE(legend_corner(400, 300, 100, 60, {390, 10, 390}, {10, 10, 290}, 6), 3);
    // A point 4 px outside the top-right legend is within the margin; one 10 px away is not.
    QCOMPARE(legend_corner(400, 300, 100, 60, {296, 10}, {30, 290}, 6), 1);
    QCOMPARE(legend_corner(400, 300, 100, 60, {290, 10}, {30, 290}, 6), 0);
  }

  void robustUpperIgnoresRareOutliersOnly() {
    // Step times: 1.0-1.2 ms, the first step 25 ms (warm-up). The range tops at the bulk's
    // largest value, not at 25.
    std::vector<double> t(1000);
    for (std::size_t i = 0; i < t.size(); ++i)
      t[i] = 1.0 + 0.2 * static_cast<double>(i % 10) / 9.0;
    t[0] = 25.0;
    QCOMPARE(robust_upper(t), 1.2);
    // Non-finite values are skipped.
    t[1] = std::numeric_limits<double>::quiet_NaN();
    t[2] = std::numeric_limits<double>::infinity();
    QCOMPARE(robust_upper(t), 1.2);
    // A level that lasts (here the last 5 % of the run at 3 ms) is never cut...
    for (std::size_t i = 950; i < t.size(); ++i)
      t[i] = 3.0;
    QCOMPARE(robust_upper(t), 3.0);
    // ...nor is a moderate spike within half the bulk's spread above it.
    std::vector<double> u(1000, 1.0);
    for (std::size_t i = 0; i < u.size(); i += 2)
      u[i] = 2.0;
    u[500] = 2.4;
    QCOMPARE(robust_upper(u), 2.4);
    // Fewer than 100 values: the plain maximum. None finite: NaN.
    QCOMPARE(robust_upper({1.0, 25.0, 1.1}), 25.0);
    QVERIFY(std::isnan(robust_upper({std::nan(""), std::nan("")})));
    QVERIFY(std::isnan(robust_upper({})));
  }
};

QTEST_APPLESS_MAIN(TestSeriesMath)
#include "tst_series_math.moc"
