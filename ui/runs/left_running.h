// LeftRunning: the runs trained in this process that their store could not close when they ended
// (their last writes failed: a full disk). While this process lives nothing else closes them
// (every other process sees a live writer, and Resume refuses a running run), so they are tried
// again every few seconds until the store takes them — whichever window shows that store, or none
// (File > Open run store closes the window that trained them). Once the process has ended, the
// next open of the store marks them crashed instead.
#pragma once

#include <QMap>
#include <QObject>
#include <QString>
#include <QTimer>

namespace tb::ui {

/// The process's runs left running in their stores; lives as long as the application.
class LeftRunning : public QObject {
  Q_OBJECT

 public:
  /// The one of this process (created on first use, a child of the application).
  static LeftRunning& instance();
  /// Closes run `run` of the store at `dbPath` as failed with `message` once the store takes it.
  void add(const QString& dbPath, qint64 run, const QString& message);
  /// The runs of `dbPath` not closed yet.
  QList<qint64> pending(const QString& dbPath) const;
  /// How often a store that failed is tried again.
  static constexpr int kRetryMs = 2000;

 signals:
  /// Run `run` of `dbPath` is now failed in its store (`byThis`: marked here, not by another).
  void closed(const QString& dbPath, qint64 run, bool byThis);

 private:
  explicit LeftRunning(QObject* parent);
  void retry();
  static QString key(const QString& dbPath);

  QMap<QString, QMap<qint64, QString>> m_runs;  // store file -> run -> message
  QTimer m_timer;
};

}  // namespace tb::ui
