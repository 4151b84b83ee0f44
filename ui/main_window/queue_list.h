// QueueList: the Queue dock's list of configs waiting to run, in the order they start. Each item
// carries its entry (config text, label, run to resume); the user reorders them by dragging or
// with Alt+Up/Alt+Down, and removes the selected ones with Delete or the context menu — the
// order shown is always the order they start in.
#pragma once

#include <QListWidget>
#include <QString>

namespace tb::ui {

/// A queued run.
struct QueueEntry {
  QString configText;    ///< TOML ("" when resuming: the run's stored config)
  QString label;         ///< shown in the queue
  qint64 resumeRun = 0;  ///< > 0: continue this stored run from its newest checkpoint
};

/// The queue's list (see the file comment).
class QueueList : public QListWidget {
  Q_OBJECT

 public:
  explicit QueueList(QWidget* parent = nullptr);

  /// Adds `entry` at the end.
  void append(const QueueEntry& entry);
  /// The entry at `row` (0 = the next to start).
  QueueEntry entryAt(int row) const;
  /// Removes the first entry (it started).
  void dropFront();
  /// Removes the selected entries; returns how many.
  int removeSelected();
  /// Moves the selected entries one place up (delta = -1) or down (+1), keeping them selected.
  void moveSelected(int delta);
  /// Removes every entry.
  void clearQueue();
  /// True while the user drags an entry (a drag runs its own event loop: the queue must not
  /// start entries under it).
  bool dragging() const { return m_dragging; }

 signals:
  /// The entries or their order changed (also by dragging).
  void queueChanged();
  /// A drag ended (dropped or not).
  void dragEnded();

 protected:
  void keyPressEvent(QKeyEvent* event) override;
  void contextMenuEvent(QContextMenuEvent* event) override;
  void dropEvent(QDropEvent* event) override;
  void startDrag(Qt::DropActions actions) override;
  // Only moves: a drop whose items are no longer selected (started meanwhile) must not insert a
  // copy of them, which QAbstractItemView's fallback would.
  bool dropMimeData(int index, const QMimeData* data, Qt::DropAction action) override;

 private:
  bool m_dragging = false;
};

}  // namespace tb::ui
