// A log-axis ticker that stays readable over a few decades. QCustomPlot's QCPAxisTickerLog
// labels only powers of the base and, where the range spans fewer than 1.6 of them, falls back
// to linear steps, which crowd the upper end of a log axis ("0.030.040.050.06"). LogTicker
// labels 1, 2 and 5 (or 1 and 3, or 1) times the powers of ten instead, which sit about evenly
// apart on a log axis: the densest of these that gives at least 2 and at most tickCount()
// labels. Over more decades than tickCount() it is QCPAxisTickerLog; within a factor of about
// 2.5, where none gives two labels, linear steps.
#pragma once

#include <qcustomplot.h>

namespace tb::ui {

class LogTicker : public QCPAxisTickerLog {
 protected:
  int getSubTickCount(double tickStep) override;
  QVector<double> createTickVector(double tickStep, const QCPRange& range) override;

 private:
  bool m_ownTicks = false;  // the last ticks were ours (no sub-ticks between them)
};

}  // namespace tb::ui
