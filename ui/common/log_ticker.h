// A log-axis ticker that stays readable over a few decades. QCustomPlot's QCPAxisTickerLog
// labels only powers of the base and, where the range spans fewer than 1.6 of them, falls back
// to linear steps, which crowd the upper end of a log axis ("0.030.040.050.06"). LogTicker
// labels 1, 2 and 5 (or 1 and 3) times the powers of ten instead, which sit about evenly apart
// on a log axis, as many as tickCount() asks for; over more decades than that it is
// QCPAxisTickerLog.
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
