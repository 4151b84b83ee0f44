#include "ui/common/vertical_scroll_area.h"

#include <QScrollBar>

#include <algorithm>

namespace tb::ui {

VerticalScrollArea::VerticalScrollArea(QWidget* parent) : QScrollArea(parent) {
  setWidgetResizable(true);
  setFrameShape(QFrame::NoFrame);
  setHorizontalScrollBarPolicy(Qt::ScrollBarAlwaysOff);
}

QSize VerticalScrollArea::minimumSizeHint() const {
  QSize hint = QScrollArea::minimumSizeHint();
  if (const QWidget* content = widget()) {
    const int least = std::max(content->minimumSizeHint().width(), content->minimumWidth());
    hint.setWidth(
        std::max(hint.width(), least + 2 * frameWidth() + verticalScrollBar()->sizeHint().width()));
  }
  return hint;
}

}  // namespace tb::ui
