#include "ui/runs/left_running.h"

#include <QCoreApplication>
#include <QFileInfo>
#include <QPointer>
#include <exception>

#include "engine/api/workbench_api.h"

namespace tb::ui {

LeftRunning& LeftRunning::instance() {
  static QPointer<LeftRunning> one;
  if (one.isNull()) one = new LeftRunning(QCoreApplication::instance());
  return *one;
}

LeftRunning::LeftRunning(QObject* parent) : QObject(parent) {
  m_timer.setInterval(kRetryMs);
  connect(&m_timer, &QTimer::timeout, this, &LeftRunning::retry);
}

QString LeftRunning::key(const QString& dbPath) {
  return QFileInfo(dbPath).absoluteFilePath();
}

void LeftRunning::add(const QString& dbPath, qint64 run, const QString& message) {
  m_runs[key(dbPath)].insert(run, message);
  // At once: the run's own writes may have failed for a moment only.
  QMetaObject::invokeMethod(this, &LeftRunning::retry, Qt::QueuedConnection);
  m_timer.start();
}

QList<qint64> LeftRunning::pending(const QString& dbPath) const {
  return m_runs.value(key(dbPath)).keys();
}

void LeftRunning::retry() {
  for (auto store = m_runs.begin(); store != m_runs.end();) {
    try {
      // Its own connection: the store may be shown by no window, or by several.
      api::StoreReader reader = api::StoreReader::existing(store.key().toStdString());
      auto& runs = store.value();
      for (auto it = runs.begin(); it != runs.end();) {
        // Closed now, or by someone else (a resume that took it), or not this process's run.
        const bool byThis = reader.close_own_run_left_running(it.key(), it.value().toStdString());
        emit closed(store.key(), it.key(), byThis);
        it = runs.erase(it);
      }
    } catch (const std::exception&) {
      // The store still cannot open or write (its disk is full): the next tick tries again. A
      // store that is gone keeps its runs no longer running anywhere but in this list.
      if (!QFileInfo::exists(store.key())) store.value().clear();
    }
    store = store.value().isEmpty() ? m_runs.erase(store) : std::next(store);
  }
  if (m_runs.isEmpty()) m_timer.stop();
}

}  // namespace tb::ui
