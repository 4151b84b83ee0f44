#include "ui/common/log_ticker.h"

#include <algorithm>
#include <cmath>
#include <initializer_list>

namespace tb::ui {

namespace {

// m x 10^e for each mantissa m and every e, inside [lo, hi].
QVector<double> mantissaTicks(double lo, double hi, std::initializer_list<double> mantissas) {
  QVector<double> ticks;
  const int first = static_cast<int>(std::floor(std::log10(lo)));
  const int last = static_cast<int>(std::ceil(std::log10(hi)));
  for (int e = first; e <= last; ++e)
    for (const double m : mantissas) {
      const double v = m * std::pow(10.0, e);
      // A relative slack, so that a range that ends on 0.001 (not exactly representable) keeps it.
      if (v >= lo * (1 - 1e-9) && v <= hi * (1 + 1e-9)) ticks.push_back(v);
    }
  return ticks;
}

}  // namespace

int LogTicker::getSubTickCount(double tickStep) {
  return m_ownTicks ? 0 : QCPAxisTickerLog::getSubTickCount(tickStep);
}

QVector<double> LogTicker::createTickVector(double tickStep, const QCPRange& range) {
  m_ownTicks = false;
  if (!(range.lower > 0 && range.upper > range.lower))
    return QCPAxisTickerLog::createTickVector(tickStep, range);
  const int want = std::max(2, tickCount());
  if (mantissaTicks(range.lower, range.upper, {1}).size() > want)
    return QCPAxisTickerLog::createTickVector(tickStep, range);  // many decades: powers only
  for (const auto& mantissas :
       {std::initializer_list<double>{1, 2, 5}, std::initializer_list<double>{1, 3},
        std::initializer_list<double>{1}}) {
    const QVector<double> ticks = mantissaTicks(range.lower, range.upper, mantissas);
    if (ticks.size() >= 2 && ticks.size() <= want) {
      m_ownTicks = true;
      return ticks;
    }
  }
  // Less than a factor of 2.5 or so: linear steps, which a log axis barely bends there.
  m_ownTicks = true;
  return QCPAxisTicker::createTickVector(tickStep, range);
}

}  // namespace tb::ui
