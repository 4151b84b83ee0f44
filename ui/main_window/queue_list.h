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

 signals:
  /// The entries or their order changed (also by dragging).
  void queueChanged();

 protected:
  void keyPressEvent(QKeyEvent* event) override;
  void contextMenuEvent(QContextMenuEvent* event) override;
  void dropEvent(QDropEvent* event) override;
};

}  // namespace tb::ui
