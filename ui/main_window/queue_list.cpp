#include "ui/main_window/queue_list.h"

#include <QContextMenuEvent>
#include <QDropEvent>
#include <QKeyEvent>
#include <QMenu>

#include <algorithm>
#include <vector>

namespace tb::ui {

namespace {

constexpr int kConfigRole = Qt::UserRole;
constexpr int kResumeRole = Qt::UserRole + 1;

}  // namespace

QueueList::QueueList(QWidget* parent) : QListWidget(parent) {
  setSelectionMode(QAbstractItemView::ExtendedSelection);
  setDragDropMode(QAbstractItemView::InternalMove);
  setDefaultDropAction(Qt::MoveAction);
  setToolTip(
      tr("Configs start from the top. Drag to reorder (or Alt+Up / Alt+Down); Delete "
         "removes the selected ones."));
}

void QueueList::append(const QueueEntry& entry) {
  auto* item = new QListWidgetItem(entry.label, this);
  item->setData(kConfigRole, entry.configText);
  item->setData(kResumeRole, entry.resumeRun);
  // Movable and selectable, never a drop target itself (a drop lands between items).
  item->setFlags(Qt::ItemIsEnabled | Qt::ItemIsSelectable | Qt::ItemIsDragEnabled);
  emit queueChanged();
}

QueueEntry QueueList::entryAt(int row) const {
  const QListWidgetItem* it = item(row);
  if (it == nullptr) return {};
  return QueueEntry{it->data(kConfigRole).toString(), it->text(),
                    it->data(kResumeRole).toLongLong()};
}

void QueueList::dropFront() {
  if (count() == 0) return;
  delete takeItem(0);
  emit queueChanged();
}

int QueueList::removeSelected() {
  const QList<QListWidgetItem*> selected = selectedItems();
  for (QListWidgetItem* it : selected)
    delete takeItem(row(it));
  if (!selected.isEmpty()) emit queueChanged();
  return static_cast<int>(selected.size());
}

void QueueList::moveSelected(int delta) {
  std::vector<int> rows;
  for (const QListWidgetItem* it : selectedItems())
    rows.push_back(row(it));
  if (rows.empty() || delta == 0) return;
  std::sort(rows.begin(), rows.end());
  // Blocked at an end: the block of selected items moves together or not at all.
  if ((delta < 0 && rows.front() == 0) || (delta > 0 && rows.back() == count() - 1)) return;
  if (delta > 0) std::reverse(rows.begin(), rows.end());
  for (int r : rows) {
    QListWidgetItem* it = takeItem(r);
    insertItem(r + delta, it);
    it->setSelected(true);
  }
  setCurrentRow(rows.front() + delta, QItemSelectionModel::NoUpdate);
  emit queueChanged();
}

void QueueList::clearQueue() {
  if (count() == 0) return;
  clear();
  emit queueChanged();
}

void QueueList::startDrag(Qt::DropActions actions) {
  m_dragging = true;
  QListWidget::startDrag(actions);
  m_dragging = false;
  emit dragEnded();
}

bool QueueList::dropMimeData(int, const QMimeData*, Qt::DropAction) {
  return false;
}

void QueueList::keyPressEvent(QKeyEvent* event) {
  if (event->key() == Qt::Key_Delete || event->key() == Qt::Key_Backspace) {
    removeSelected();
    return;
  }
  if (event->modifiers() & Qt::AltModifier) {
    if (event->key() == Qt::Key_Up) {
      moveSelected(-1);
      return;
    }
    if (event->key() == Qt::Key_Down) {
      moveSelected(+1);
      return;
    }
  }
  QListWidget::keyPressEvent(event);
}

void QueueList::contextMenuEvent(QContextMenuEvent* event) {
  // From the mouse: the item under it (alone, unless it is part of the selection); from the
  // keyboard's menu key: the selection as it is.
  if (event->reason() != QContextMenuEvent::Keyboard) {
    if (QListWidgetItem* it = itemAt(event->pos()); it != nullptr && !it->isSelected()) {
      clearSelection();
      it->setSelected(true);
    }
  }
  if (selectedItems().isEmpty()) return;
  QMenu menu(this);
  QAction* up = menu.addAction(tr("Move up"), QKeySequence(Qt::ALT | Qt::Key_Up));
  QAction* down = menu.addAction(tr("Move down"), QKeySequence(Qt::ALT | Qt::Key_Down));
  menu.addSeparator();
  QAction* remove = menu.addAction(tr("Remove from queue"), QKeySequence(Qt::Key_Delete));
  QAction* chosen = menu.exec(event->globalPos());
  if (chosen == up) moveSelected(-1);
  if (chosen == down) moveSelected(+1);
  if (chosen == remove) removeSelected();
}

void QueueList::dropEvent(QDropEvent* event) {
  QListWidget::dropEvent(event);
  if (event->isAccepted()) emit queueChanged();
}

}  // namespace tb::ui
