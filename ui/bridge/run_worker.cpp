#include "ui/bridge/run_worker.h"

#include <QMetaObject>

#include <pthread.h>
#include <signal.h>

#include <exception>
#include <system_error>

namespace tb::ui {

RunWorker::RunWorker(QString configText, QString source, QString dbPath, QObject* parent,
                     qint64 resumeRun)
    : QObject(parent),
      m_configText(std::move(configText)),
      m_source(std::move(source)),
      m_dbPath(std::move(dbPath)),
      m_resumeRun(resumeRun),
      m_control(std::make_shared<api::RunControl>()) {}

RunWorker::~RunWorker() {
  m_control->cancel();
  m_control->resume();
  if (m_thread.joinable()) m_thread.join();
}

bool RunWorker::start() {
  if (m_thread.joinable()) return true;
  m_running = true;
  try {
    m_thread = std::thread([this] { runThread(); });
  } catch (const std::exception& e) {  // no thread to be had (a process limit, no memory)
    m_running = false;
    Q_EMIT failedToStart(QStringLiteral("[run] no thread to train on could be started: %1")
                             .arg(QString::fromUtf8(e.what())));
    return false;
  }
  return true;
}

void RunWorker::cancel() {
  m_control->cancel();
  m_control->resume();
}

void RunWorker::setPaused(bool paused) {
  if (paused)
    m_control->pause();
  else
    m_control->resume();
}

bool RunWorker::isPaused() const {
  return m_control->paused();
}

bool RunWorker::isRunning() const {
  return m_running.load();
}

std::vector<api::StepMetrics> RunWorker::takeMetrics() {
  std::vector<api::StepMetrics> out;
  std::lock_guard<std::mutex> lock(m_mutex);
  out.swap(m_buffer);
  return out;
}

void RunWorker::runThread() {
  // The program's stop signals (Ctrl-C, SIGTERM) are handled on the GUI thread, never on this
  // one or the kernel, loader and store threads it starts (they inherit this mask): a handler
  // run on a thread inside a oneDNN kernel corrupted the heap.
  sigset_t stop;
  sigemptyset(&stop);
  sigaddset(&stop, SIGINT);
  sigaddset(&stop, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop, nullptr);
  api::TrainRequest req;
  req.config_text = m_configText.toStdString();
  req.source = m_source.toStdString();
  req.db_path = m_dbPath.toStdString();
  req.control = m_control;
  if (m_resumeRun > 0) req.resume = m_resumeRun;
  req.on_warning = [this](const std::string& text) {
    Q_EMIT warning(QString::fromStdString(text));
  };
  // Signals emitted from this thread are delivered queued to the GUI thread's receivers.
  try {
    const api::RunOutcomeInfo out = api::start_training(
        req,
        [this](std::int64_t id, const std::string& table) {
          m_runId = id;
          Q_EMIT started(id, QString::fromStdString(table));
        },
        [this](const api::StepMetrics& m) {
          bool wasEmpty = false;
          {
            std::lock_guard<std::mutex> lock(m_mutex);
            wasEmpty = m_buffer.empty();
            m_buffer.push_back(m);
          }
          if (wasEmpty) Q_EMIT metricsAvailable();
        });
    m_running = false;
    Q_EMIT finished(out.run_id, QString::fromStdString(out.status),
                    QString::fromStdString(out.message));
  } catch (const std::exception& e) {
    m_running = false;
    if (m_runId == 0)
      Q_EMIT failedToStart(QString::fromStdString(e.what()));
    else
      Q_EMIT finished(m_runId, QStringLiteral("failed"), QString::fromStdString(e.what()));
  } catch (...) {
    // As above: a run already stored ends failed (and is closed by the window), else it never
    // started.
    m_running = false;
    if (m_runId == 0)
      Q_EMIT failedToStart(QStringLiteral("unknown error"));
    else
      Q_EMIT finished(m_runId, QStringLiteral("failed"), QStringLiteral("unknown error"));
  }
}

}  // namespace tb::ui
