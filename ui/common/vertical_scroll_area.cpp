#include "ui/common/vertical_scroll_area.h"

#include <QEvent>
#include <QScrollBar>

#include <algorithm>

namespace tb::ui {

VerticalScrollArea::VerticalScrollArea(QWidget* parent) : QScrollArea(parent) {
  setWidgetResizable(true);
  setFrameShape(QFrame::NoFrame);
  setHorizontalScrollBarPolicy(Qt::ScrollBarAlwaysOff);
}

bool VerticalScrollArea::eventFilter(QObject* watched, QEvent* event) {
  // QScrollArea watches its widget already (for its resizes); a layout request of the page may
  // come with a new least width, which the area's own least size follows.
  if (watched == widget() && event->type() == QEvent::LayoutRequest) updateGeometry();
  return QScrollArea::eventFilter(watched, event);
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
