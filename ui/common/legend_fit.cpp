#include "ui/common/legend_fit.h"

#include <algorithm>

#include <qcustomplot.h>

namespace tb::ui {

bool fitLegendColumns(QCPLegend* legend, int room, int most) {
  int widest = 0;
  for (int i = 0; i < legend->itemCount(); ++i)  // a grid's cells: some may be empty
    if (const QCPAbstractLegendItem* item = legend->item(i))
      widest = std::max(widest, item->minimumOuterSizeHint().width());
  const int gap = legend->columnSpacing();
  const int columns = widest > 0 ? std::clamp((room + gap) / (widest + gap), 1, most) : most;
  if (legend->wrap() == columns) return false;
  legend->setWrap(columns);
  legend->setFillOrder(QCPLayoutGrid::foColumnsFirst, true);  // re-flows the items already there
  return true;
}

}  // namespace tb::ui
