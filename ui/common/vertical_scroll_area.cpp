#include "ui/common/vertical_scroll_area.h"

#include <QEvent>
#include <QLayout>
#include <QScrollBar>

#include <algorithm>

namespace tb::ui {

VerticalScrollArea::VerticalScrollArea(QWidget* parent) : QScrollArea(parent) {
  setWidgetResizable(true);
  setFrameShape(QFrame::NoFrame);
  setHorizontalScrollBarPolicy(Qt::ScrollBarAlwaysOff);
}

void VerticalScrollArea::setFitsLeastHeight(bool on) {
  m_fitsLeastHeight = on;
  // QScrollArea sizes a resizable page itself (its preferred height, for height-for-width
  // layouts); here the page is sized by fitPage().
  setWidgetResizable(!on);
  fitPage();
}

void VerticalScrollArea::fitPage() {
  QWidget* page = widget();
  if (!m_fitsLeastHeight || page == nullptr || m_fitting) return;
  m_fitting = true;
  const int width = viewport()->width();
  int least = std::max(page->minimumSizeHint().height(), page->minimumHeight());
  if (const QLayout* layout = page->layout(); layout != nullptr && layout->hasHeightForWidth())
    least = std::max(least, layout->totalMinimumHeightForWidth(width));
  page->resize(width, std::max(viewport()->height(), least));
  m_fitting = false;
}

bool VerticalScrollArea::eventFilter(QObject* watched, QEvent* event) {
  // QScrollArea watches its widget already (for its resizes); a layout request of the page may
  // come with a new least width, which the area's own least size follows, and a new least
  // height, which the page's height follows.
  if (watched == widget() && event->type() == QEvent::LayoutRequest) {
    updateGeometry();
    fitPage();
  }
  return QScrollArea::eventFilter(watched, event);
}

void VerticalScrollArea::resizeEvent(QResizeEvent* event) {
  QScrollArea::resizeEvent(event);
  fitPage();
}

bool VerticalScrollArea::viewportEvent(QEvent* event) {
  const bool handled = QScrollArea::viewportEvent(event);
  if (event->type() == QEvent::Resize) fitPage();  // a scroll bar came or went
  return handled;
}

QSize VerticalScrollArea::minimumSizeHint() const {
  QSize hint = QScrollArea::minimumSizeHint();
  // A fitted page changes the height only: its width stays the caller's (the config dock sets
  // it once the editor is shown).
  if (m_fitsLeastHeight) return hint;
  if (const QWidget* content = widget()) {
    const int least = std::max(content->minimumSizeHint().width(), content->minimumWidth());
    hint.setWidth(
        std::max(hint.width(), least + 2 * frameWidth() + verticalScrollBar()->sizeHint().width()));
  }
  return hint;
}

}  // namespace tb::ui
