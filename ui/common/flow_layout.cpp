#include "ui/common/flow_layout.h"

#include <QHBoxLayout>
#include <QLabel>
#include <QWidget>

#include <algorithm>

namespace tb::ui {

FlowLayout::FlowLayout(QWidget* parent, int spacing) : QLayout(parent) {
  if (spacing >= 0) setSpacing(spacing);
  setContentsMargins(0, 0, 0, 0);
}

FlowLayout::~FlowLayout() {
  while (QLayoutItem* item = takeAt(0))
    delete item;
}

void FlowLayout::addItem(QLayoutItem* item) {
  m_items.append(item);
}

int FlowLayout::count() const {
  return static_cast<int>(m_items.size());
}

QLayoutItem* FlowLayout::itemAt(int index) const {
  return index >= 0 && index < m_items.size() ? m_items.at(index) : nullptr;
}

QLayoutItem* FlowLayout::takeAt(int index) {
  return index >= 0 && index < m_items.size() ? m_items.takeAt(index) : nullptr;
}

Qt::Orientations FlowLayout::expandingDirections() const {
  return {};
}

bool FlowLayout::hasHeightForWidth() const {
  return true;
}

int FlowLayout::heightForWidth(int width) const {
  return arrange(QRect(0, 0, width, 0), false);
}

QSize FlowLayout::minimumSize() const {
  QSize size;
  for (const QLayoutItem* item : m_items)
    if (!item->isEmpty()) size = size.expandedTo(item->minimumSize());
  const QMargins m = contentsMargins();
  return size + QSize(m.left() + m.right(), m.top() + m.bottom());
}

QSize FlowLayout::sizeHint() const {
  int width = 0, height = 0, shown = 0;
  for (const QLayoutItem* item : m_items) {
    if (item->isEmpty()) continue;
    width += item->sizeHint().width();
    height = std::max(height, item->sizeHint().height());
    ++shown;
  }
  const QMargins m = contentsMargins();
  return {width + std::max(0, shown - 1) * gap() + m.left() + m.right(),
          height + m.top() + m.bottom()};
}

void FlowLayout::setGeometry(const QRect& rect) {
  QLayout::setGeometry(rect);
  arrange(rect, true, &m_rows);
}

int FlowLayout::gap() const {
  // spacing(): the set one, else the parent layout's or the parent widget's style's.
  return spacing() >= 0 ? spacing() : 6;
}

int FlowLayout::arrange(const QRect& rect, bool apply, int* rows) const {
  const QRect area = rect.marginsRemoved(contentsMargins());
  const int hgap = gap(), vgap = gap();
  // Rows first (which items share a row and its height), then placement, each item centred
  // vertically in its row so labels line up with the fields beside them.
  struct Row {
    int first, last, height;
  };
  QList<Row> laid;
  int x = area.x();
  for (int i = 0; i < m_items.size(); ++i) {
    const QLayoutItem* item = m_items.at(i);
    if (item->isEmpty()) continue;
    const QSize hint = item->sizeHint();
    const int w = std::min(hint.width(), std::max(area.width(), item->minimumSize().width()));
    if (laid.isEmpty() || (x > area.x() && x + w > area.x() + area.width())) {
      laid.append({i, i, 0});
      x = area.x();
    }
    laid.last().last = i;
    laid.last().height = std::max(laid.last().height, hint.height());
    x += w + hgap;
  }
  int y = area.y();
  for (const Row& row : laid) {
    x = area.x();
    for (int i = row.first; i <= row.last; ++i) {
      QLayoutItem* item = m_items.at(i);
      if (item->isEmpty()) continue;
      const QSize hint = item->sizeHint();
      const int w = std::min(hint.width(), std::max(area.width(), item->minimumSize().width()));
      const int h = std::min(hint.height(), row.height);
      if (apply) item->setGeometry(QRect(x, y + (row.height - h) / 2, w, h));
      x += w + hgap;
    }
    y += row.height + vgap;
  }
  if (rows != nullptr) *rows = std::max<int>(1, static_cast<int>(laid.size()));
  const QMargins m = contentsMargins();
  return (laid.isEmpty() ? 0 : y - vgap - area.y()) + m.top() + m.bottom();
}

QWidget* labelled(const QString& label, QWidget* field, QWidget* parent) {
  auto* box = new QWidget(parent);
  auto* row = new QHBoxLayout(box);
  row->setContentsMargins(0, 0, 0, 0);
  auto* text = new QLabel(label, box);
  text->setBuddy(field);
  row->addWidget(text);
  field->setParent(box);
  row->addWidget(field);
  return box;
}

}  // namespace tb::ui
