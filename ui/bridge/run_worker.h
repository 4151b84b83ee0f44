// RunWorker: one training run of the in-process engine on its own thread, seen from the GUI as
// queued Qt signals. The engine's callbacks append to a locked buffer and post one queued call
// when it goes from empty to non-empty; the GUI drains it with takeMetrics(). Every exception is
// caught on the run thread and becomes a signal with its message: nothing crosses into Qt's
// event loop.
#pragma once

#include <QObject>
#include <QString>
#include <QVector>

#include <atomic>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "engine/api/workbench_api.h"

namespace tb::ui {

/// One training run started from the GUI.
class RunWorker : public QObject {
  Q_OBJECT

 public:
  /// A worker for `configText` (TOML; `source` names it in messages) into the store `dbPath`.
  /// With `resumeRun` > 0 it continues that stored run from its newest checkpoint instead (an
  /// empty `configText` takes the run's stored config).
  RunWorker(QString configText, QString source, QString dbPath, QObject* parent = nullptr,
            qint64 resumeRun = 0);
  /// Cancels a running run and joins its thread.
  ~RunWorker() override;

  /// Starts the run thread (once); false, after failedToStart, when no thread could be started.
  bool start();
  /// Asks the run to stop after its current step.
  void cancel();
  /// Holds the run before its next step / releases it.
  void setPaused(bool paused);
  /// Whether the run is paused.
  bool isPaused() const;
  /// Whether the run thread is still going.
  bool isRunning() const;
  /// The stored run id (0 until started() was emitted).
  qint64 runId() const { return m_runId.load(); }
  /// The config text this worker runs.
  const QString& configText() const { return m_configText; }
  /// The metrics received since the last call, oldest first.
  std::vector<api::StepMetrics> takeMetrics();

 Q_SIGNALS:
  /// The run exists in the store; `table` is its parameter / Muon-split table.
  void started(qint64 runId, const QString& table);
  /// New metrics wait in takeMetrics() (posted once per empty -> non-empty transition).
  void metricsAvailable();
  /// The run ended: status finished, failed, diverged or cancelled.
  void finished(qint64 runId, const QString& status, const QString& message);
  /// The run could not start (bad config, unreadable store): nothing was stored.
  void failedToStart(const QString& message);
  /// A warning of the run as it happens (also stored with its events).
  void warning(const QString& text);

 private:
  void runThread();

  QString m_configText;
  QString m_source;
  QString m_dbPath;
  qint64 m_resumeRun = 0;
  std::atomic<qint64> m_runId{0};
  std::shared_ptr<api::RunControl> m_control;
  std::thread m_thread;
  std::atomic<bool> m_running{false};
  std::mutex m_mutex;
  std::vector<api::StepMetrics> m_buffer;
};

}  // namespace tb::ui
