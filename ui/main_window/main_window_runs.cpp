// MainWindow's runs: started here on worker threads or as processes of their own (the queue's
// launch, a sweep), resumed, queued, and followed by draining the workers and polling the store.
#include "ui/main_window/main_window.h"

#include <QCheckBox>
#include <QComboBox>
#include <QCoreApplication>
#include <QDir>
#include <QDockWidget>
#include <QFile>
#include <QFileDialog>
#include <QFileInfo>
#include <QHBoxLayout>
#include <QLabel>
#include <QListWidget>
#include <QMessageBox>
#include <QPlainTextEdit>
#include <QProcess>
#include <QPushButton>
#include <QRegularExpression>
#include <QSpinBox>
#include <QSplitter>
#include <QStandardPaths>
#include <QStatusBar>
#include <QTabWidget>
#include <QTemporaryDir>
#include <QTextCursor>
#include <QVBoxLayout>
#include <algorithm>
#include <csignal>
#include <exception>
#include <system_error>

#include "engine/api/launch_api.h"
#include "engine/api/sweep_api.h"
#include "ui/bridge/run_worker.h"
#include "ui/common/vertical_scroll_area.h"
#include "ui/compare/compare_view.h"
#include "ui/live_plots/plots_panel.h"
#include "ui/report/report.h"
#include "ui/report/sweep_report.h"
#include "ui/run_config/config_editor.h"
#include "ui/runs/left_running.h"
#include "ui/runs/runs_model.h"
#include "ui/sweeps/sweep_editor.h"
#include "ui/sweeps/sweep_view.h"
#include "ui/topology/topology_view.h"

namespace tb::ui {

bool MainWindow::startRun() {
  if (!m_editor->validateNow()) {
    log(QStringLiteral("error"), m_editor->errorText());
    return false;
  }
  QueueEntry e;
  e.configText = m_editor->toToml();
  e.label = m_editor->fieldText(QStringLiteral("run.name"));
  startEntry(e);
  return true;
}

void MainWindow::resumeRun(qint64 id) {
  for (const auto& w : m_workers) {
    if (w && w->runId() == id) {
      log(QStringLiteral("warning"), tr("run %1 is already running here").arg(id));
      return;
    }
  }
  QueueEntry e;
  e.label = tr("run %1").arg(id);
  const int row = m_runsModel->rowOf(id);
  if (row >= 0) e.label = QString::fromStdString(m_runsModel->run(row).name);
  e.resumeRun = id;
  log(QStringLiteral("info"), tr("resuming run %1 from its newest checkpoint").arg(id));
  startEntry(e);
}

bool MainWindow::startEntry(const QueueEntry& entry) {
  auto* worker = new RunWorker(entry.configText, entry.label, m_dbPath, this, entry.resumeRun);
  m_workers.append(worker);
  const QString label = entry.label;
  const bool resumed = entry.resumeRun > 0;
  connect(worker, &RunWorker::started, this, [this, label, resumed](qint64 id, const QString&) {
    log(QStringLiteral("info"), (resumed ? tr("run %1 resumed") : tr("run %1 started")).arg(id));
    m_runsModel->refresh();
    showPage(m_livePage);
    m_live->clearRuns();
    m_live->addRun(id, QStringLiteral("%1 %2").arg(id).arg(label), runColor(0));
    if (resumed) {  // the steps before the checkpoint, from the store
      try {
        if (api::StoreReader* store = m_runsModel->store()) m_live->loadFromStore(*store, id);
      } catch (const std::exception& e) {
        log(QStringLiteral("error"), QString::fromUtf8(e.what()));
      }
    }
    m_runsView->selectRun(id);
    updateActions();
  });
  connect(worker, &RunWorker::metricsAvailable, this, [this] {
    if (!m_drainTimer.isActive()) m_drainTimer.start();
  });
  connect(worker, &RunWorker::finished, this,
          [this, worker](qint64 id, const QString& status, const QString& message) {
            drainWorkers();
            log(status == QLatin1String("finished") ? QStringLiteral("info")
                                                    : QStringLiteral("warning"),
                tr("run %1 %2: %3").arg(id).arg(status, message));
            if (status != QLatin1String("finished") && status != QLatin1String("cancelled"))
              LeftRunning::instance().add(m_dbPath, id, message);  // if the store kept it running
            m_runsModel->refresh();
            m_workers.removeAll(worker);
            worker->deleteLater();
            updateActions();
            startQueue();
          });
  connect(worker, &RunWorker::warning, this,
          [this](const QString& text) { log(QStringLiteral("warning"), text); });
  connect(worker, &RunWorker::failedToStart, this, [this, worker](const QString& message) {
    log(QStringLiteral("error"), message);
    m_workers.removeAll(worker);
    worker->deleteLater();
    updateActions();
  });
  const bool started = worker->start();
  updateActions();
  return started;
}

void MainWindow::drainWorkers() {
  for (auto& w : m_workers) {
    if (!w) continue;
    const auto batch = w->takeMetrics();
    if (batch.empty()) continue;
    const qint64 id = batch.front().run_id;
    if (m_live->hasRun(id)) m_live->appendSteps(id, batch);
    const auto& last = batch.back();
    m_statusLabel->setText(tr("run %1: step %2/%3").arg(id).arg(last.step).arg(last.total));
  }
}

void MainWindow::pollStore() {
  // Runs shown live that another process writes (or ours, deduplicated by step).
  api::StoreReader* store = m_runsModel->store();
  if (!store) return;
  for (qint64 id : m_live->runIds()) {
    const int row = m_runsModel->rowOf(id);
    if (row < 0 || m_runsModel->run(row).status != "running") continue;
    try {
      // Another process resumed it from an earlier checkpoint: its later steps are gone from
      // the store, so the plots start again from it (a run trained here plots its steps before
      // they are committed, and was reloaded when its resume started).
      const bool here =
          std::any_of(m_workers.begin(), m_workers.end(),
                      [id](const QPointer<RunWorker>& w) { return w && w->runId() == id; });
      if (!here && m_live->rewoundInStore(*store, id)) {
        m_live->reloadFromStore(*store);
        break;
      }
      m_live->loadFromStore(*store, id);
    } catch (const std::exception& e) {
      log(QStringLiteral("error"), QString::fromUtf8(e.what()));
    }
  }
  QWidget* const page = currentPage();
  if (page == m_livePage) updateSamples();
  if (page == m_compare) m_compare->refresh();
  // A sweep started by another process (trainbench-cli sweep) shows up, and a shown one follows
  // its trials while it runs.
  if (page == m_sweeps && (m_sweepProcess || m_sweeps->running() || m_sweeps->listChanged())) {
    m_sweeps->refresh();
    if (!m_pendingSweep.isEmpty()) {
      m_sweeps->showSweep(m_pendingSweep);
      if (m_sweeps->sweepName() == m_pendingSweep) m_pendingSweep.clear();
    }
  }
}

void MainWindow::startSweep(const SweepLaunch& launch) {
  if (m_sweepProcess) {
    log(QStringLiteral("warning"), tr("a sweep is already running; wait for it to end"));
    return;
  }
  const QString cli = cliPath();
  if (cli.isEmpty()) {
    log(QStringLiteral("error"), tr("cannot find trainbench-cli to run the sweep"));
    return;
  }
  QString safe = launch.name;
  safe.replace(QRegularExpression(QStringLiteral("[^A-Za-z0-9_.-]")), QStringLiteral("_"));
  const QDir dir(QFileInfo(m_dbPath).absoluteDir().filePath(QStringLiteral("sweeps")));
  QFile file(dir.filePath(safe + QStringLiteral(".toml")));
  if (!QDir().mkpath(dir.path()) || !file.open(QIODevice::WriteOnly | QIODevice::Truncate) ||
      file.write(launch.toml.toUtf8()) < 0) {
    log(QStringLiteral("error"),
        tr("cannot write %1: %2").arg(file.fileName(), file.errorString()));
    return;
  }
  file.close();
  m_sweepProcess = new QProcess(this);
  m_sweepProcess->setProcessChannelMode(QProcess::MergedChannels);
  connect(m_sweepProcess, &QProcess::readyRead, this, [this] {
    while (m_sweepProcess->canReadLine()) {
      const QString line = QString::fromUtf8(m_sweepProcess->readLine()).trimmed();
      if (!line.isEmpty()) log(QStringLiteral("info"), line);
    }
  });
  connect(m_sweepProcess, &QProcess::finished, this,
          [this, name = launch.name](int code, QProcess::ExitStatus status) {
            const QString rest = QString::fromUtf8(m_sweepProcess->readAll()).trimmed();
            if (!rest.isEmpty()) log(QStringLiteral("info"), rest);
            log(code == 0 && status == QProcess::NormalExit ? QStringLiteral("info")
                                                            : QStringLiteral("error"),
                tr("sweep %1 ended (exit %2)").arg(name).arg(code));
            m_sweepProcess->deleteLater();
            m_sweepProcess = nullptr;
            m_sweepStopping = false;
            if (m_quitting) {  // stopped by closing the window: it closes now
              close();
              return;
            }
            m_runsModel->refresh();
            m_sweeps->refresh();
          });
  // Not started (no finished() follows): said, and forgotten, or every later sweep is refused
  // as "already running".
  connect(m_sweepProcess, &QProcess::errorOccurred, this, [this](QProcess::ProcessError error) {
    if (error != QProcess::FailedToStart || !m_sweepProcess) return;
    log(QStringLiteral("error"),
        tr("sweep %1 could not start: %2").arg(m_sweepName, m_sweepProcess->errorString()));
    m_sweepProcess->deleteLater();
    m_sweepProcess = nullptr;
    m_sweepStopping = false;
    if (m_quitting) close();
  });
  m_pendingSweep = launch.name;
  m_sweepName = launch.name;
  m_sweepProcess->start(cli,
                        {QStringLiteral("--db"), m_dbPath, QStringLiteral("sweep"), file.fileName(),
                         QStringLiteral("--parallel"), QString::number(launch.parallel),
                         QStringLiteral("--binding"), launch.binding});
  log(QStringLiteral("info"), tr("sweep %1 started: %2").arg(launch.name, file.fileName()));
  showPage(m_sweeps);
}

void MainWindow::updateSamples() {
  api::StoreReader* store = m_runsModel->store();
  if (!store) return;
  QStringList lines;
  const QString marker = QStringLiteral("sample at step ");
  for (qint64 id : m_live->runIds()) {
    try {
      for (const auto& e : store->events(id)) {
        const QString line = QString::fromStdString(e);
        const int at = line.indexOf(marker);
        if (at >= 0) lines << QStringLiteral("run %1, %2").arg(id).arg(line.mid(at + 10));
      }
    } catch (const std::exception&) {  // deleted meanwhile
    }
  }
  m_samples->setVisible(!lines.isEmpty());
  const QString text = lines.join(QLatin1Char('\n'));
  if (text != m_samples->toPlainText()) {
    m_samples->setPlainText(text);
    m_samples->moveCursor(QTextCursor::End);
  }
}

void MainWindow::showRunsLive(const QList<qint64>& selected) {
  const QList<qint64> ids = inRunOrder(selected);
  api::StoreReader* store = m_runsModel->store();
  if (!store) return;
  m_live->clearRuns();
  int index = 0;
  for (qint64 id : ids) {
    const int row = m_runsModel->rowOf(id);
    const QString name = row >= 0 ? QString::fromStdString(m_runsModel->run(row).name) : QString();
    m_live->addRun(id, QStringLiteral("%1 %2").arg(id).arg(name), runColor(index++));
  }
  try {
    for (qint64 id : ids)
      m_live->loadFromStore(*store, id);
  } catch (const std::exception& e) {
    log(QStringLiteral("error"), QString::fromUtf8(e.what()));
  }
  m_live->replotAll();
  updateSamples();
}

void MainWindow::exportSweepReport(const QString& name) {
  api::StoreReader* store = m_runsModel->store();
  if (!store) return;
  const QString path =
      askReportPath(tr("Export sweep report"), QStringLiteral("sweep-%1").arg(name));
  if (path.isEmpty()) return;
  try {
    const QString err = writeReport(buildSweepReport(*store, name), path);
    if (!err.isEmpty()) throw std::runtime_error(err.toStdString());
    log(QStringLiteral("info"), tr("sweep report written to %1").arg(path));
  } catch (const std::exception& e) {
    log(QStringLiteral("error"), QString::fromUtf8(e.what()));
  }
}

void MainWindow::showSweep(const QString& name) {
  showPage(m_sweeps);  // reads the store's sweeps
  m_sweeps->showSweep(name);
}

void MainWindow::compareRuns(const QList<qint64>& ids) {
  if (ids.size() < 2) {
    log(QStringLiteral("warning"), tr("select two or more runs to compare"));
    return;
  }
  m_compare->setRuns(m_runsModel->store(), ids);
  showPage(m_compare);
}

QDockWidget* MainWindow::buildQueueDock() {
  auto* queueDock = new QDockWidget(tr("Queue"), this);
  queueDock->setObjectName(QStringLiteral("queueDock"));
  auto* queueHost = new QWidget(queueDock);
  auto* queueLayout = new QVBoxLayout(queueHost);
  m_queueList = new QueueList(queueHost);
  m_queueList->setObjectName(QStringLiteral("queueList"));
  queueLayout->addWidget(m_queueList, 1);
  auto* queueRow = new QHBoxLayout;
  queueRow->addWidget(new QLabel(tr("at a time:"), queueHost));
  m_parallel = new QSpinBox(queueHost);
  m_parallel->setRange(1, 16);
  m_parallel->setValue(1);
  queueRow->addWidget(m_parallel);
  auto* procRow = new QHBoxLayout;
  m_asProcesses = new QCheckBox(tr("as separate processes, binding:"), queueHost);
  m_asProcesses->setToolTip(
      tr("Run each queued config as its own trainbench-cli process bound to a CPU slot "
         "(slot k of the batch), like trainbench-cli launch; they appear in Runs live"));
  m_queueBinding = new QComboBox(queueHost);
  m_queueBinding->addItems({QStringLiteral("none"), QStringLiteral("node"),
                            QStringLiteral("socket"), QStringLiteral("exclusive"),
                            QStringLiteral("core-complex")});
  m_queueBinding->setCurrentText(QStringLiteral("exclusive"));
  procRow->addWidget(m_asProcesses);
  procRow->addWidget(m_queueBinding);
  procRow->addStretch(1);
  queueLayout->addLayout(procRow);
  auto* startQueue = new QPushButton(tr("Start queue"), queueHost);
  auto* removeQueued = new QPushButton(tr("Remove"), queueHost);
  removeQueued->setObjectName(QStringLiteral("removeQueued"));
  removeQueued->setToolTip(tr("Remove the selected configs from the queue (Delete)"));
  removeQueued->setEnabled(false);
  auto* clearQueue = new QPushButton(tr("Clear"), queueHost);
  queueRow->addWidget(startQueue);
  queueRow->addWidget(removeQueued);
  queueRow->addWidget(clearQueue);
  queueLayout->addLayout(queueRow);
  queueDock->setWidget(queueHost);
  addDockWidget(Qt::RightDockWidgetArea, queueDock);
  connect(startQueue, &QPushButton::clicked, this, &MainWindow::startQueue);
  connect(clearQueue, &QPushButton::clicked, m_queueList, &QueueList::clearQueue);
  // Start and Clear only with something queued.
  startQueue->setEnabled(false);
  clearQueue->setEnabled(false);
  connect(m_queueList, &QueueList::queueChanged, this, [this, startQueue, clearQueue] {
    startQueue->setEnabled(m_queueList->count() > 0);
    clearQueue->setEnabled(m_queueList->count() > 0);
  });
  // A run that ended while an entry was dragged starts the next one once it is dropped.
  connect(m_queueList, &QueueList::dragEnded, this, [this] {
    if (m_startAfterDrag) {
      m_startAfterDrag = false;
      this->startQueue();
    }
  });
  connect(removeQueued, &QPushButton::clicked, m_queueList, &QueueList::removeSelected);
  connect(m_queueList, &QListWidget::itemSelectionChanged, removeQueued, [this, removeQueued] {
    removeQueued->setEnabled(!m_queueList->selectedItems().isEmpty());
  });
  return queueDock;
}

void MainWindow::enqueueCurrent() {
  if (!m_editor->validateNow()) {
    log(QStringLiteral("error"), m_editor->errorText());
    return;
  }
  QueueEntry e{m_editor->toToml(), m_editor->fieldText(QStringLiteral("run.name"))};
  m_queueList->append(e);
}

void MainWindow::enqueueMuonAndAdamw() {
  if (!m_editor->validateNow()) {
    log(QStringLiteral("error"), m_editor->errorText());
    return;
  }
  const QString name = m_editor->fieldText(QStringLiteral("run.name"));
  for (const QString& kind : {QStringLiteral("muon"), QStringLiteral("adamw")}) {
    const QString text = m_editor->tomlWithKind(QStringLiteral("optimizer"), kind);
    const api::ConfigCheck c = api::check_config_text(
        text.toStdString(), "queue",
        {"run.name=\"" + (name + QLatin1Char('-') + kind).toStdString() + "\""});
    if (!c.ok) {
      log(QStringLiteral("error"), QString::fromStdString(c.error));
      return;
    }
    QueueEntry e{QString::fromStdString(c.effective_toml), name + QLatin1Char('-') + kind};
    m_queueList->append(e);
  }
}

void MainWindow::setQueueAsProcesses(bool processes, const QString& binding) {
  m_asProcesses->setChecked(processes);
  m_queueBinding->setCurrentText(binding);
}

void MainWindow::setQueueParallel(int n) {
  m_parallel->setValue(n);
}

QString MainWindow::cliPath() const {
  if (!m_cliPath.isEmpty()) return m_cliPath;
  const QString dir = QCoreApplication::applicationDirPath();
  for (const QString& c :
       {dir + QStringLiteral("/trainbench-cli"), dir + QStringLiteral("/../cli/trainbench-cli")})
    if (QFileInfo(c).isExecutable()) return QFileInfo(c).canonicalFilePath();
  return QStandardPaths::findExecutable(QStringLiteral("trainbench-cli"));
}

void MainWindow::launchBatch() {
  // Up to N queued configs as processes bound to slots 0..N-1, on a helper thread (the launcher
  // waits for its children); the runs appear through the store.
  if (m_launching || m_queueList->count() == 0) return;
  const QString cli = cliPath();
  if (cli.isEmpty()) {
    log(QStringLiteral("error"),
        tr("[launch] trainbench-cli not found next to this program or on PATH"));
    return;
  }
  if (!m_launchDir) m_launchDir = std::make_unique<QTemporaryDir>();
  api::LaunchRequest req;
  req.program = cli.toStdString();
  req.binding = m_queueBinding->currentText().toStdString();
  req.fallback = true;  // a slot that cannot be bound runs unbound, with a warning event
  req.db_path = m_dbPath.toStdString();
  // Quitting stops the batch's runs (each after its step, with a checkpoint) and starts no more.
  req.stop_requested = [this] { return m_launchStop.load(); };
  req.on_exited = [this](int pid) {
    const std::lock_guard<std::mutex> lock(m_launchedMutex);
    m_launchedPids.erase(pid);
  };
  const int n = std::min<int>(m_parallel->value(), m_queueList->count());
  ++m_launchBatch;
  // The configs leave the queue only once the batch is on its way: a file that cannot be
  // written, or no thread to launch from, keeps them queued.
  for (int k = 0; k < n; ++k) {
    const QString file =
        m_launchDir->filePath(QStringLiteral("batch%1-slot%2.toml").arg(m_launchBatch).arg(k));
    QFile f(file);
    if (!f.open(QIODevice::WriteOnly | QIODevice::Truncate) ||
        f.write(m_queueList->entryAt(k).configText.toUtf8()) < 0) {
      log(QStringLiteral("error"),
          tr("[launch] cannot write %1: %2; the queue is kept").arg(file, f.errorString()));
      return;
    }
    req.configs.push_back(file.toStdString());
  }
  req.nproc = n;
  if (m_launchThread.joinable()) m_launchThread.join();
  m_launching = true;
  try {
    m_launchThread = std::thread([this, req] { launchThreadBody(req); });
  } catch (const std::exception& e) {  // no thread to be had (a process limit, no memory)
    m_launching = false;
    log(QStringLiteral("error"), tr("[launch] no thread to launch from could be started (%1); "
                                    "the queue is kept")
                                     .arg(QString::fromUtf8(e.what())));
    return;
  }
  for (int k = 0; k < n; ++k)
    m_queueList->dropFront();
  updateActions();
  log(QStringLiteral("info"),
      tr("launching %1 process(es), binding %2").arg(n).arg(m_queueBinding->currentText()));
}

void MainWindow::launchThreadBody(const api::LaunchRequest& req) {
  QString summary;
  try {
    const auto procs = api::launch_runs(req, [this](const api::LaunchedProcess& p) {
      {
        const std::lock_guard<std::mutex> lock(m_launchedMutex);
        m_launchedPids.insert(p.pid);
        if (m_launchStop) ::kill(p.pid, SIGUSR1);  // started as the window quit
      }
      const QString line =
          QStringLiteral("slot %1: pid %2, %3")
              .arg(p.slot)
              .arg(p.pid)
              .arg(p.cpus.empty() ? tr("unbound")
                                  : tr("CPUs %1").arg(QString::fromStdString(p.cpus)));
      QMetaObject::invokeMethod(
          this, [this, line] { log(QStringLiteral("info"), line); }, Qt::QueuedConnection);
    });
    for (const auto& p : procs)
      summary += QStringLiteral("slot %1 exited with %2; ").arg(p.slot).arg(p.exit_code);
  } catch (const std::exception& e) {
    summary = QString::fromUtf8(e.what());
  }
  QMetaObject::invokeMethod(
      this,
      [this, summary] {
        m_launching = false;
        log(QStringLiteral("info"), summary);
        m_runsModel->refresh();
        updateActions();
        startQueue();
      },
      Qt::QueuedConnection);
}

void MainWindow::startQueue() {
  if (m_quitting) return;  // a run cancelled by quitting ended: the queue is not started again
  if (m_askingToQuit) {    // the quit question's event loop: go on only if the answer is No
    m_queueDeferred = true;
    return;
  }
  if (m_queueList->dragging()) {  // an entry is being moved: start after the drop
    m_startAfterDrag = true;
    return;
  }
  if (m_asProcesses->isChecked()) {
    launchBatch();
    return;
  }
  while (m_queueList->count() > 0 && activeRuns() < m_parallel->value()) {
    if (!startEntry(m_queueList->entryAt(0))) break;  // said in the Events dock; it stays queued
    m_queueList->dropFront();
  }
}

int MainWindow::activeRuns() const {
  int n = 0;
  if (m_launching) {  // the batch's processes still running (1 while it starts them)
    const std::lock_guard<std::mutex> lock(m_launchedMutex);
    n = std::max<int>(1, static_cast<int>(m_launchedPids.size()));
  }
  for (const auto& w : m_workers)
    if (w && w->isRunning()) ++n;
  return n;
}

}  // namespace tb::ui
