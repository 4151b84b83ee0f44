// Checks on drawn QCustomPlot axes shared by the Qt tests.
#pragma once

#include <QFontMetrics>
#include <QString>

#include <qcustomplot.h>

namespace tb::test {

/// "" when the axis' tick labels of the last replot keep at least 4 px (across) or 2 px (up and
/// down) between neighbours, else which two labels touch and by how much.
inline QString crowdedTickLabels(const QCPAxis* axis) {
  const bool across = axis->orientation() == Qt::Horizontal;
  const QFontMetrics fm(axis->tickLabelFont());
  const QVector<double> ticks = axis->tickVector();
  const QVector<QString> labels = axis->tickVectorLabels();
  for (int i = 1; i < ticks.size(); ++i) {
    const double gap = std::abs(axis->coordToPixel(ticks[i]) - axis->coordToPixel(ticks[i - 1]));
    const double need =
        across ? (fm.horizontalAdvance(labels[i]) + fm.horizontalAdvance(labels[i - 1])) / 2.0 + 4
               : fm.height() + 2;
    if (gap < need)
      return QStringLiteral("%1 labels %2 and %3: %4 px apart, need %5")
          .arg(across ? QStringLiteral("x") : QStringLiteral("y"), labels[i - 1], labels[i])
          .arg(gap)
          .arg(need);
  }
  return {};
}

}  // namespace tb::test
