// Pure series arithmetic behind the plots: TensorBoard's debiased EMA smoothing over the full raw
// series, and a min/max envelope per pixel column so long series keep every spike visible.
#pragma once

#include <cstddef>
#include <vector>

namespace tb::ui {

/// TensorBoard's debiased exponential moving average with weight `weight` in [0, 1): for each
/// point, last = last * w + (1 - w) * y; debias = 1 - w^(n); out = last / debias, where n counts
/// the finite points seen so far. Non-finite inputs are passed through unchanged and do not
/// enter the average. weight 0 returns `y`.
std::vector<double> debiased_ema(const std::vector<double>& y, double weight);

/// A polyline that draws a series at a given pixel width.
struct Envelope {
  std::vector<double> x;  ///< x of each vertex
  std::vector<double> y;  ///< y of each vertex
  /// When the points were reduced: one entry per pixel column holding points — the x of its
  /// first point and its min and max — to draw the envelope as a filled band (cheap to paint at
  /// any density, spikes included). Empty when the points are returned as they are.
  std::vector<double> band_x;
  std::vector<double> band_lo;  ///< column minimum
  std::vector<double> band_hi;  ///< column maximum
};

/// Reduces the points of (x, y) (x ascending) with x in [x_lo, x_hi] to at most 4 vertices per
/// pixel column out of `columns`: for each column holding points, its first point, its minimum
/// and maximum (in x order) and its last point. Every column's min and max survive, so a spike
/// of one point is drawn at any zoom. When the visible points are fewer than 4 * columns, they
/// are returned as they are. One point just outside each end of the range is kept so the line
/// runs to the edge. Non-finite y values are skipped.
Envelope min_max_envelope(const std::vector<double>& x, const std::vector<double>& y, double x_lo,
                          double x_hi, int columns);

/// Per-block argmin/argmax of a growing series (blocks of 64, 4096 and 262144 points), so the
/// envelope of a long series costs O(columns · log) instead of a pass over every point. Exact:
/// for finite data the vertices equal min_max_envelope()'s.
class EnvelopeIndex {
 public:
  /// Indexes the complete blocks of `y` not indexed yet (call after appending to y).
  void update(const std::vector<double>& y);
  /// Forgets everything (call when y is replaced).
  void clear();
  /// min_max_envelope(x, y, x_lo, x_hi, columns), using the index for long columns.
  Envelope envelope(const std::vector<double>& x, const std::vector<double>& y, double x_lo,
                    double x_hi, int columns) const;

 private:
  struct Level {
    std::size_t block = 0;
    std::vector<std::size_t> lo, hi;  // per complete block; npos when no finite value
  };
  void scan(const std::vector<double>& y, std::size_t i, std::size_t j, int level, std::size_t& lo,
            std::size_t& hi) const;
  std::vector<Level> levels_;
};

/// The top of a y range that ignores rare outliers above the bulk of `values` (non-finite values
/// are skipped): the largest value no higher than q99 + 0.5 * (q99 - q01), where qNN are the
/// values' quantiles. A timing series whose first step (kernel compilation, first allocations)
/// took 25 ms and the rest 1 ms gets ~1.5 ms, so the steps stay readable (what a value above is
/// drawn as: a stroke through the top edge); a level that lasts — more than 1 % of the values —
/// is never cut. The plain maximum for fewer than 100 values; NaN when none is finite.
double robust_upper(std::vector<double> values);

/// The index of the point whose x is nearest to `x` (x ascending); -1 when empty.
long nearest_index(const std::vector<double>& x, double x_value);

/// Where a legend of `legend_w` x `legend_h` pixels covers the fewest of the points (pixel
/// coordinates px[i], py[i], y downwards) inside a plot area of `area_w` x `area_h` pixels with
/// its top-left corner at (0, 0): 0 top right, 1 top left, 2 bottom right, 3 bottom left — the
/// first of them on a tie. A point counts when within `margin` pixels of the legend (a marker's
/// radius).
int legend_corner(double area_w, double area_h, double legend_w, double legend_h,
                  const std::vector<double>& px, const std::vector<double>& py, double margin);

}  // namespace tb::ui
