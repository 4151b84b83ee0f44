#include "ui/live_plots/series_math.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>

namespace tb::ui {

std::vector<double> debiased_ema(const std::vector<double>& y, double weight) {
  if (weight <= 0.0) return y;
  weight = std::min(weight, 0.9999);
  std::vector<double> out(y.size());
  double last = 0.0;
  double debias_pow = 1.0;  // weight^n
  for (std::size_t i = 0; i < y.size(); ++i) {
    const double v = y[i];
    if (!std::isfinite(v)) {
      out[i] = v;
      continue;
    }
    last = last * weight + (1.0 - weight) * v;
    debias_pow *= weight;
    out[i] = last / (1.0 - debias_pow);
  }
  return out;
}

Envelope min_max_envelope(const std::vector<double>& x, const std::vector<double>& y, double x_lo,
                          double x_hi, int columns) {
  Envelope e;
  const std::size_t n = std::min(x.size(), y.size());
  if (n == 0) return e;
  columns = std::max(columns, 1);
  // Visible range [begin, end), widened by one point on each side.
  std::size_t begin = static_cast<std::size_t>(
      std::lower_bound(x.begin(), x.begin() + static_cast<long>(n), x_lo) - x.begin());
  std::size_t end = static_cast<std::size_t>(
      std::upper_bound(x.begin(), x.begin() + static_cast<long>(n), x_hi) - x.begin());
  if (begin > 0) --begin;
  if (end < n) ++end;
  auto push = [&](std::size_t i) {
    if (!std::isfinite(y[i])) return;
    if (!e.x.empty() && e.x.back() == x[i] && e.y.back() == y[i]) return;
    e.x.push_back(x[i]);
    e.y.push_back(y[i]);
  };
  if (end - begin <= static_cast<std::size_t>(columns) * 4 || !(x_hi > x_lo)) {
    e.x.reserve(end - begin);
    e.y.reserve(end - begin);
    for (std::size_t i = begin; i < end; ++i)
      push(i);
    return e;
  }
  e.x.reserve(static_cast<std::size_t>(columns) * 4 + 2);
  e.y.reserve(static_cast<std::size_t>(columns) * 4 + 2);
  const double width = (x_hi - x_lo) / columns;
  std::size_t i = begin;
  while (i < end) {
    // Column of point i (points left of x_lo / right of x_hi form their own end columns).
    const double c = std::floor((x[i] - x_lo) / width);
    const double col_end = x_lo + (c + 1) * width;
    std::size_t first = i, last = i, lo = n, hi = n;
    for (; i < end && (x[i] < col_end || i == first); ++i) {
      if (!std::isfinite(y[i])) continue;
      last = i;
      if (lo == n || y[i] < y[lo]) lo = i;
      if (hi == n || y[i] > y[hi]) hi = i;
    }
    push(first);
    if (lo != n && hi != n) {
      push(std::min(lo, hi));
      push(std::max(lo, hi));
      e.band_x.push_back(x[first]);
      e.band_lo.push_back(y[lo]);
      e.band_hi.push_back(y[hi]);
    }
    push(last);
  }
  return e;
}

namespace {
constexpr std::size_t kNone = static_cast<std::size_t>(-1);
}

void EnvelopeIndex::clear() {
  levels_.clear();
}

void EnvelopeIndex::update(const std::vector<double>& y) {
  if (levels_.empty()) {
    for (std::size_t b : {std::size_t{64}, std::size_t{4096}, std::size_t{262144}}) {
      Level l;
      l.block = b;
      levels_.push_back(l);
    }
  }
  for (std::size_t L = 0; L < levels_.size(); ++L) {
    Level& lev = levels_[L];
    const std::size_t complete = y.size() / lev.block;
    while (lev.lo.size() < complete) {
      const std::size_t begin = lev.lo.size() * lev.block;
      std::size_t lo = kNone, hi = kNone;
      scan(y, begin, begin + lev.block, static_cast<int>(L) - 1, lo, hi);
      lev.lo.push_back(lo);
      lev.hi.push_back(hi);
    }
  }
}

void EnvelopeIndex::scan(const std::vector<double>& y, std::size_t i, std::size_t j, int level,
                         std::size_t& lo, std::size_t& hi) const {
  auto take = [&](std::size_t k) {
    if (k == kNone) return;
    if (lo == kNone || y[k] < y[lo]) lo = k;
    if (hi == kNone || y[k] > y[hi]) hi = k;
  };
  if (level < 0) {
    for (std::size_t k = i; k < j; ++k)
      if (std::isfinite(y[k])) take(k);
    return;
  }
  const Level& lev = levels_[static_cast<std::size_t>(level)];
  const std::size_t B = lev.block;
  const std::size_t a = (i + B - 1) / B;                 // first complete block inside
  const std::size_t b = std::min(j / B, lev.lo.size());  // one past the last
  if (a >= b) {
    scan(y, i, j, level - 1, lo, hi);
    return;
  }
  scan(y, i, a * B, level - 1, lo, hi);
  for (std::size_t blk = a; blk < b; ++blk) {
    take(lev.lo[blk]);
    take(lev.hi[blk]);
  }
  scan(y, b * B, j, level - 1, lo, hi);
}

Envelope EnvelopeIndex::envelope(const std::vector<double>& x, const std::vector<double>& y,
                                 double x_lo, double x_hi, int columns) const {
  const std::size_t n = std::min(x.size(), y.size());
  columns = std::max(columns, 1);
  const auto xb = x.begin();
  const auto xe = x.begin() + static_cast<long>(n);
  std::size_t begin = static_cast<std::size_t>(std::lower_bound(xb, xe, x_lo) - xb);
  std::size_t end = static_cast<std::size_t>(std::upper_bound(xb, xe, x_hi) - xb);
  if (begin > 0) --begin;
  if (end < n) ++end;
  // Short visible ranges: the plain pass is as fast and needs no index.
  if (levels_.empty() || end - begin <= static_cast<std::size_t>(columns) * 256 || !(x_hi > x_lo))
    return min_max_envelope(x, y, x_lo, x_hi, columns);
  Envelope e;
  e.x.reserve(static_cast<std::size_t>(columns) * 4 + 8);
  e.y.reserve(static_cast<std::size_t>(columns) * 4 + 8);
  auto push = [&](std::size_t k) {
    if (k == kNone || !std::isfinite(y[k])) return;
    if (!e.x.empty() && e.x.back() == x[k] && e.y.back() == y[k]) return;
    e.x.push_back(x[k]);
    e.y.push_back(y[k]);
  };
  const double width = (x_hi - x_lo) / columns;
  std::size_t i = begin;
  while (i < end) {
    const double c = std::floor((x[i] - x_lo) / width);
    const double col_end = x_lo + (c + 1) * width;
    // [i, j): the points of this column (at least one).
    std::size_t j =
        static_cast<std::size_t>(std::lower_bound(x.begin() + static_cast<long>(i),
                                                  xe - static_cast<long>(n - end), col_end) -
                                 xb);
    if (j <= i) j = i + 1;
    std::size_t lo = kNone, hi = kNone;
    scan(y, i, j, static_cast<int>(levels_.size()) - 1, lo, hi);
    // First and last finite points of the column.
    std::size_t first = i, last = j - 1;
    while (first < j && !std::isfinite(y[first]))
      ++first;
    while (last > first && !std::isfinite(y[last]))
      --last;
    if (first < j) {
      push(first);
      if (lo != kNone) {
        push(std::min(lo, hi));
        push(std::max(lo, hi));
        e.band_x.push_back(x[first]);
        e.band_lo.push_back(y[lo]);
        e.band_hi.push_back(y[hi]);
      }
      push(last);
    }
    i = j;
  }
  return e;
}

double robust_upper(std::vector<double> values) {
  values.erase(
      std::remove_if(values.begin(), values.end(), [](double v) { return !std::isfinite(v); }),
      values.end());
  if (values.empty()) return std::numeric_limits<double>::quiet_NaN();
  const double top = *std::max_element(values.begin(), values.end());
  if (values.size() < 100) return top;
  auto quantile = [&values](double q) {
    const auto k = static_cast<std::ptrdiff_t>(q * static_cast<double>(values.size() - 1));
    std::nth_element(values.begin(), values.begin() + k, values.end());
    return values[static_cast<std::size_t>(k)];
  };
  const double q01 = quantile(0.01);
  const double q99 = quantile(0.99);
  const double cap = q99 + 0.5 * (q99 - q01);
  // The largest value under the cap: the range ends on data, not on the cap itself.
  double best = q99;
  for (double v : values)
    if (v <= cap && v > best) best = v;
  return best;
}

long nearest_index(const std::vector<double>& x, double x_value) {
  if (x.empty()) return -1;
  const auto it = std::lower_bound(x.begin(), x.end(), x_value);
  if (it == x.begin()) return 0;
  if (it == x.end()) return static_cast<long>(x.size()) - 1;
  const long i = static_cast<long>(it - x.begin());
  return (x_value - x[static_cast<std::size_t>(i - 1)]) <=
                 (x[static_cast<std::size_t>(i)] - x_value)
             ? i - 1
             : i;
}

int legend_corner(double area_w, double area_h, double legend_w, double legend_h,
                  const std::vector<double>& px, const std::vector<double>& py, double margin) {
  int best = 0;
  std::size_t fewest = px.size() + 1;
  for (int k = 0; k < 4; ++k) {
    const bool right = k == 0 || k == 2;
    const bool top = k < 2;
    const double x0 = (right ? area_w - legend_w : 0.0) - margin;
    const double x1 = (right ? area_w : legend_w) + margin;
    const double y0 = (top ? 0.0 : area_h - legend_h) - margin;
    const double y1 = (top ? legend_h : area_h) + margin;
    std::size_t n = 0;
    for (std::size_t i = 0; i < px.size() && i < py.size(); ++i)
      if (px[i] >= x0 && px[i] <= x1 && py[i] >= y0 && py[i] <= y1) ++n;
    if (n < fewest) {
      fewest = n;
      best = k;
    }
  }
  return best;
}

}  // namespace tb::ui
