#include "ui/main_window/main_window.h"

#include <QAction>
#include <QApplication>
#include <QCheckBox>
#include <QCloseEvent>
#include <QComboBox>
#include <QDateTime>
#include <QDir>
#include <QDockWidget>
#include <QFile>
#include <QFileDialog>
#include <QFileInfo>
#include <QGridLayout>
#include <QHBoxLayout>
#include <QKeySequence>
#include <QLabel>
#include <QListWidget>
#include <QMenuBar>
#include <QMessageBox>
#include <QPlainTextEdit>
#include <QProcess>
#include <QPushButton>
#include <QRegularExpression>
#include <QScreen>
#include <QScrollArea>
#include <QScrollBar>
#include <QSettings>
#include <QSpinBox>
#include <QSplitter>
#include <QStandardPaths>
#include <QStatusBar>
#include <QTabWidget>
#include <QTemporaryDir>
#include <QTextCursor>
#include <QTextStream>
#include <QToolBar>
#include <QVBoxLayout>

#include <exception>

#include "engine/api/launch_api.h"
#include "engine/api/sweep_api.h"

#include "ui/bridge/run_worker.h"
#include "ui/common/vertical_scroll_area.h"
#include "ui/compare/compare_view.h"
#include "ui/live_plots/plots_panel.h"
#include "ui/report/report.h"
#include "ui/report/sweep_report.h"
#include "ui/run_config/config_editor.h"
#include "ui/runs/runs_model.h"
#include "ui/sweeps/sweep_editor.h"
#include "ui/sweeps/sweep_view.h"
#include "ui/topology/topology_view.h"

namespace tb::ui {

MainWindow::MainWindow(const QString& dbPath, QWidget* parent)
    : QMainWindow(parent), m_dbPath(dbPath) {
  setWindowTitle(tr("TrainBench"));
  setObjectName(QStringLiteral("TrainBenchMainWindow"));
  m_runsModel = new RunsModel(dbPath, 1000, this);
  m_dbPath = m_runsModel->dbPath();

  m_tabs = new QTabWidget(this);
  m_live = new PlotsPanel(m_tabs);
  m_live->setObjectName(QStringLiteral("livePlots"));
  m_compare = new CompareView(m_tabs);
  m_sweeps = new SweepView(m_tabs);
  m_sweeps->setObjectName(QStringLiteral("sweepView"));
  // The Live tab: the plots, and below them the texts a language model wrote at its
  // evaluations (eval.samples), shown when there are some.
  m_livePage = new QSplitter(Qt::Vertical, m_tabs);
  m_live->setParent(m_livePage);
  m_livePage->addWidget(m_live);
  m_samples = new QPlainTextEdit(m_livePage);
  m_samples->setObjectName(QStringLiteral("liveSamples"));
  m_samples->setReadOnly(true);
  m_samples->setPlaceholderText(tr("Samples (eval.samples of a language model)"));
  m_samples->setToolTip(tr("Texts the model wrote at its evaluations, newest last"));
  m_samples->setVisible(false);
  m_livePage->addWidget(m_samples);
  m_livePage->setStretchFactor(0, 4);
  m_livePage->setStretchFactor(1, 1);
  // Each page scrolls when the window is smaller than the page's least size (a laptop screen),
  // instead of forcing a window larger than the screen.
  m_tabs->addTab(scrollable(m_livePage, m_tabs), tr("Live"));
  m_tabs->addTab(scrollable(m_compare, m_tabs), tr("Compare"));
  m_tabs->addTab(scrollable(m_sweeps, m_tabs), tr("Sweeps"));
  setCentralWidget(m_tabs);
  m_sweeps->setStore(m_runsModel->store());
  // The sweeps list and the shown sweep are read when the tab is opened, then while it runs.
  connect(m_tabs, &QTabWidget::currentChanged, this, [this] {
    if (currentPage() == m_sweeps) m_sweeps->setStore(m_runsModel->store());
  });

  buildDocks();
  buildActions();
  // Open on the newest run's plots rather than on empty axes (the table's selection, and so
  // what Resume/Compare act on, stays empty until the user picks): the newest run that logged a
  // step, so that a run which failed at its start does not hide the last one with curves.
  qint64 newest = 0;
  qint64 newestLogged = 0;
  for (int r = 0; r < m_runsModel->rowCount(); ++r) {
    const api::RunInfo& run = m_runsModel->run(r);
    newest = std::max<qint64>(newest, run.id);
    if (run.last_step) newestLogged = std::max<qint64>(newestLogged, run.id);
  }
  if (newestLogged > 0 || newest > 0) showRunsLive({newestLogged > 0 ? newestLogged : newest});

  m_statusLabel = new QLabel(this);
  statusBar()->addPermanentWidget(m_statusLabel);
  statusBar()->showMessage(tr("Store: %1").arg(m_dbPath));
  if (!m_runsModel->lastError().isEmpty()) {
    log(QStringLiteral("error"), m_runsModel->lastError());
    log(QStringLiteral("info"), tr("File > Open run store… opens or creates another store"));
  }
  connect(m_runsModel, &RunsModel::storeError, this,
          [this](const QString& m) { log(QStringLiteral("error"), m); });

  m_drainTimer.setSingleShot(true);
  m_drainTimer.setInterval(50);  // <= 20 Hz
  connect(&m_drainTimer, &QTimer::timeout, this, &MainWindow::drainWorkers);
  m_pollTimer.setInterval(500);
  connect(&m_pollTimer, &QTimer::timeout, this, &MainWindow::pollStore);
  m_pollTimer.start();

  // The config dock as wide as its editor needs once shown (its fields have their size then):
  // the dock scrolls up and down, never sideways.
  QTimer::singleShot(0, this, [this] {
    auto* configArea = findChild<QDockWidget*>(QStringLiteral("configDock"))
                           ->widget()
                           ->findChild<QScrollArea*>(QString(), Qt::FindDirectChildrenOnly);
    if (configArea == nullptr) return;
    QWidget* host = configArea->widget();
    configArea->setMinimumWidth(host->minimumSizeHint().width() +
                                configArea->verticalScrollBar()->sizeHint().width());
  });
  QSettings settings;
  if (!restoreGeometry(settings.value(QStringLiteral("window/geometry")).toByteArray())) {
    // First start: 1720 x 950, or the screen's free area when that is smaller.
    const QRect free = screen() != nullptr ? screen()->availableGeometry() : QRect(0, 0, 1720, 950);
    resize(std::min(1720, free.width()), std::min(950, free.height()));
  }
  if (!restoreState(settings.value(QStringLiteral("window/state")).toByteArray()) &&
      width() < 1600) {
    // First start on a narrow screen (a laptop's 1366 pixels): the queue, topology and events
    // join the runs table as tabs below, so the plots keep the middle's width.
    auto* runsDock = findChild<QDockWidget*>(QStringLiteral("runsDock"));
    for (const char* name : {"queueDock", "topologyDock", "logDock"})
      if (auto* dock = findChild<QDockWidget*>(QLatin1String(name))) {
        addDockWidget(Qt::BottomDockWidgetArea, dock);
        tabifyDockWidget(runsDock, dock);
      }
    runsDock->raise();
    // A short screen as well (768 pixels): the runs table gets less of the height, so that
    // three rows of plots fit above it without scrolling the Live tab.
    resizeDocks({runsDock}, {height() * (height() < 900 ? 2 : 3) / 10}, Qt::Vertical);
  }
  updateActions();
}

QScrollArea* MainWindow::scrollable(QWidget* content, QWidget* parent) {
  auto* area = new QScrollArea(parent);
  area->setFrameShape(QFrame::NoFrame);
  area->setWidgetResizable(true);  // the content fills the area; bars only below its least size
  area->setWidget(content);
  return area;
}

QWidget* MainWindow::currentPage() const {
  auto* area = qobject_cast<QScrollArea*>(m_tabs->currentWidget());
  return area != nullptr ? area->widget() : m_tabs->currentWidget();
}

void MainWindow::showPage(QWidget* content) {
  for (int i = 0; i < m_tabs->count(); ++i) {
    auto* area = qobject_cast<QScrollArea*>(m_tabs->widget(i));
    if (m_tabs->widget(i) == content || (area != nullptr && area->widget() == content))
      m_tabs->setCurrentIndex(i);
  }
}

MainWindow::~MainWindow() {
  for (auto& w : m_workers)
    if (w) w->cancel();
  // Ended without closing the window (a stop signal, --screenshot): the sweep is stopped as
  // Ctrl-C stops it, not killed by QProcess's destructor with its trials left training.
  if (m_sweepProcess && m_sweepProcess->state() != QProcess::NotRunning) {
    m_sweepProcess->disconnect(this);
    // Once only: a second SIGTERM half a second after the first quits the sweep at once.
    if (!m_sweepStopping) m_sweepProcess->terminate();
    if (!m_sweepProcess->waitForFinished(kSweepStopWaitMs)) m_sweepProcess->kill();
  }
  // Launched processes are independent runs; wait for the launcher so its thread ends cleanly.
  if (m_launchThread.joinable()) m_launchThread.join();
}

void MainWindow::buildDocks() {
  auto* configDock = new QDockWidget(tr("Run config"), this);
  configDock->setObjectName(QStringLiteral("configDock"));
  // The editor scrolls; the buttons under it do not: on a short screen Run was scrolled out of
  // sight below the LR preview.
  auto* dockHost = new QWidget(configDock);
  auto* dockLayout = new QVBoxLayout(dockHost);
  dockLayout->setContentsMargins(0, 0, 0, 0);
  auto* configHost = new QWidget(dockHost);
  auto* configLayout = new QVBoxLayout(configHost);
  configLayout->setContentsMargins(0, 0, 0, 0);
  m_editor = new ConfigEditor(configHost);
  configLayout->addWidget(m_editor, 1);
  // Two rows: in one, the three buttons were wider than the editor on a small screen.
  auto* buttons = new QGridLayout;
  buttons->setContentsMargins(4, 2, 4, 4);
  auto* run = new QPushButton(tr("Run"), dockHost);
  run->setObjectName(QStringLiteral("runButton"));
  run->setToolTip(tr("Start this config now (Ctrl+R)"));
  auto* queue = new QPushButton(tr("Add to queue"), dockHost);
  auto* pair = new QPushButton(tr("Queue Muon + AdamW"), dockHost);
  pair->setToolTip(tr("Queue this config twice: with Muon (+AdamW for the rest) and with AdamW"));
  buttons->addWidget(run, 0, 0);
  buttons->addWidget(queue, 0, 1);
  buttons->addWidget(pair, 1, 0, 1, 2);
  // Scrolls up and down on a short screen; never sideways (the form's fields cut off at the
  // right would hide what they hold), so the dock is as wide as the editor needs.
  QScrollArea* configArea = scrollable(configHost, dockHost);
  configArea->setHorizontalScrollBarPolicy(Qt::ScrollBarAlwaysOff);
  dockLayout->addWidget(configArea, 1);
  dockLayout->addLayout(buttons);
  configDock->setWidget(dockHost);
  addDockWidget(Qt::LeftDockWidgetArea, configDock);
  connect(run, &QPushButton::clicked, this, [this] { startRun(); });
  connect(queue, &QPushButton::clicked, this, &MainWindow::enqueueCurrent);
  connect(pair, &QPushButton::clicked, this, &MainWindow::enqueueMuonAndAdamw);
  connect(m_editor, &ConfigEditor::validityChanged, run, &QPushButton::setEnabled);
  m_sweepEditor = new SweepEditor([this] { return m_editor->toToml(); }, m_editor);
  m_sweepEditor->setName(m_editor->fieldText(QStringLiteral("run.name")) +
                         QStringLiteral("-sweep"));
  m_editor->addPage(m_sweepEditor, tr("Sweep"));
  connect(m_editor, &ConfigEditor::edited, m_sweepEditor, [this] { m_sweepEditor->check(); });
  connect(m_sweepEditor, &SweepEditor::runRequested, this, &MainWindow::startSweep);
  connect(m_sweeps, &SweepView::exportRequested, this, &MainWindow::exportSweepReport);
  connect(m_sweeps, &SweepView::openConfig, this,
          [this, configDock](const QString& toml, const QString& source) {
            if (m_editor->setToml(toml, source)) {
              configDock->show();
              configDock->raise();
              log(QStringLiteral("info"), tr("loaded the config of %1").arg(source));
            } else {
              log(QStringLiteral("error"), m_editor->errorText());
            }
          });
  run->setEnabled(m_editor->isValid());

  auto* runsDock = new QDockWidget(tr("Runs"), this);
  runsDock->setObjectName(QStringLiteral("runsDock"));
  m_runsView = new RunsView(m_runsModel, runsDock);
  runsDock->setWidget(m_runsView);
  addDockWidget(Qt::BottomDockWidgetArea, runsDock);
  connect(m_runsView, &RunsView::selectionChanged, this, [this](const QList<qint64>& ids) {
    if (ids.isEmpty()) return;
    showRunsLive(ids);
    // The topology view shows where the (first) selected run was bound.
    if (api::StoreReader* store = m_runsModel->store()) {
      try {
        QStringList lines;
        for (const auto& e : store->events(ids.first()))
          lines << QString::fromStdString(e);
        m_topology->setRunBinding(tr("run %1").arg(ids.first()), lines);
      } catch (const std::exception& e) {
        log(QStringLiteral("error"), QString::fromUtf8(e.what()));
      }
    }
  });
  connect(m_runsView, &RunsView::compareRequested, this, &MainWindow::compareRuns);
  connect(m_runsView, &RunsView::resumeRequested, this, &MainWindow::resumeRun);
  connect(m_runsView, &RunsView::duplicateRequested, this, [this](qint64 id) {
    try {
      const QString text = QString::fromStdString(m_runsModel->store()->config_text(id));
      m_editor->setToml(text, tr("run %1").arg(id));
      log(QStringLiteral("info"), tr("config of run %1 loaded into the editor").arg(id));
    } catch (const std::exception& e) {
      log(QStringLiteral("error"), QString::fromUtf8(e.what()));
    }
  });

  auto* queueDock = new QDockWidget(tr("Queue"), this);
  queueDock->setObjectName(QStringLiteral("queueDock"));
  auto* queueHost = new QWidget(queueDock);
  auto* queueLayout = new QVBoxLayout(queueHost);
  m_queueList = new QListWidget(queueHost);
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
  auto* clearQueue = new QPushButton(tr("Clear"), queueHost);
  queueRow->addWidget(startQueue);
  queueRow->addWidget(clearQueue);
  queueLayout->addLayout(queueRow);
  queueDock->setWidget(queueHost);
  addDockWidget(Qt::RightDockWidgetArea, queueDock);
  connect(startQueue, &QPushButton::clicked, this, &MainWindow::startQueue);
  connect(clearQueue, &QPushButton::clicked, this, [this] {
    m_queue.clear();
    m_queueList->clear();
  });

  auto* topoDock = new QDockWidget(tr("Topology"), this);
  topoDock->setObjectName(QStringLiteral("topologyDock"));
  // The view scrolls in its dock: tabified under the plots on a laptop's short screen, its
  // least height (270 px) had made the whole bottom dock area that tall.
  auto* topoArea = new VerticalScrollArea(topoDock);
  m_topology = new TopologyView(topoArea);
  topoArea->setWidget(m_topology);
  topoDock->setWidget(topoArea);
  addDockWidget(Qt::RightDockWidgetArea, topoDock);
  tabifyDockWidget(queueDock, topoDock);
  queueDock->raise();

  auto* logDock = new QDockWidget(tr("Events"), this);
  logDock->setObjectName(QStringLiteral("logDock"));
  m_log = new QPlainTextEdit(logDock);
  m_log->setReadOnly(true);
  m_log->setMaximumBlockCount(5000);
  logDock->setWidget(m_log);
  addDockWidget(Qt::RightDockWidgetArea, logDock);
}

void MainWindow::buildActions() {
  QMenu* file = menuBar()->addMenu(tr("&File"));
  QAction* newAct = file->addAction(tr("&New config"), this, [this] {
    m_editor->setToml(QString::fromStdString(api::default_config_toml()), tr("<new>"));
    m_configPath.clear();
  });
  newAct->setShortcut(QKeySequence::New);
  QAction* openAct = file->addAction(tr("&Open config…"), this, [this] {
    const QString path = QFileDialog::getOpenFileName(
        this, tr("Open run config"), m_configPath, tr("TOML run configs (*.toml);;All files (*)"));
    if (!path.isEmpty()) openConfig(path);
  });
  openAct->setShortcut(QKeySequence::Open);
  QAction* saveAct = file->addAction(tr("&Save config as…"), this, &MainWindow::saveConfigAs);
  saveAct->setShortcut(QKeySequence::Save);
  file->addSeparator();
  // Another store without restarting with --db: an existing file opens, a new name creates one.
  file->addAction(tr("Open run s&tore…"), this, &MainWindow::chooseRunStore);
  file->addSeparator();
  QAction* exportAct = file->addAction(tr("&Export report…"), this, &MainWindow::exportReport);
  exportAct->setShortcut(QKeySequence(Qt::CTRL | Qt::Key_E));
  file->addSeparator();
  QAction* quit = file->addAction(tr("&Quit"), this, &QWidget::close);
  quit->setShortcut(QKeySequence::Quit);

  QMenu* runMenu = menuBar()->addMenu(tr("&Run"));
  // One name for one action: the toolbar's "Run" is the config dock's Run button (Ctrl+R).
  m_runAction = runMenu->addAction(tr("&Run this config"), this, [this] { startRun(); });
  m_runAction->setIconText(tr("Run"));
  m_runAction->setShortcut(QKeySequence(Qt::CTRL | Qt::Key_R));
  runMenu->addAction(tr("Add to &queue"), this, &MainWindow::enqueueCurrent);
  runMenu->addAction(tr("Queue &Muon + AdamW"), this, &MainWindow::enqueueMuonAndAdamw);
  runMenu->addAction(tr("Start q&ueue"), this, &MainWindow::startQueue);
  runMenu->addSeparator();
  m_pauseAction = runMenu->addAction(tr("&Pause"), this, [this] {
    const bool pause = m_pauseAction->isChecked();
    for (auto& w : m_workers)
      if (w && w->isRunning()) w->setPaused(pause);
    log(QStringLiteral("info"), pause ? tr("paused") : tr("resumed"));
  });
  m_pauseAction->setCheckable(true);
  m_cancelAction = runMenu->addAction(tr("&Cancel"), this, [this] {
    for (auto& w : m_workers)
      if (w && w->isRunning()) w->cancel();
  });

  QMenu* view = menuBar()->addMenu(tr("&View"));
  for (QDockWidget* d : findChildren<QDockWidget*>())
    view->addAction(d->toggleViewAction());
  view->addSeparator();
  view->addAction(tr("&Compare selected runs"), this,
                  [this] { compareRuns(m_runsView->selectedRuns()); });

  QMenu* help = menuBar()->addMenu(tr("&Help"));
  help->addAction(tr("&About TrainBench"), this, [this] {
    QMessageBox::about(
        this, tr("About TrainBench"),
        tr("<b>TrainBench %1</b><br>A workbench for training neural networks with an "
           "in-process C++ engine.<br>Store: %2")
            .arg(QApplication::applicationVersion(), htmlEscape(m_dbPath)));
  });

  QToolBar* tools = addToolBar(tr("Main"));
  tools->setObjectName(QStringLiteral("mainToolBar"));
  tools->addAction(newAct);
  tools->addAction(openAct);
  tools->addAction(saveAct);
  tools->addSeparator();
  tools->addAction(m_runAction);
  tools->addAction(m_pauseAction);
  tools->addAction(m_cancelAction);
  tools->addSeparator();
  tools->addAction(exportAct);
}

bool MainWindow::openConfig(const QString& path, bool quiet, QString* error) {
  const auto fail = [&](const QString& msg) {
    log(QStringLiteral("error"), msg);
    if (error != nullptr) *error = msg;
    if (!quiet) QMessageBox::warning(this, tr("Open run config"), msg);
    return false;
  };
  if (QFileInfo(path).isDir())
    return fail(tr("[config] %1: is a folder, not a config file (give a .toml file)").arg(path));
  QFile f(path);
  if (!f.open(QIODevice::ReadOnly))
    return fail(tr("[config] %1: cannot open (%2)").arg(path, f.errorString()));
  const QString text = QString::fromUtf8(f.readAll());
  // A sweep config (a run config with a [sweep] table, as trainbench-cli sweep takes it): the
  // run config into the form, the [sweep] onto the Sweep page (it was refused as a run config).
  static const QRegularExpression sweepTable(
      QStringLiteral("(^|\\n)[ \\t]*\\[[ \\t]*sweep[ \\t]*[\\].]"));
  if (sweepTable.match(text).hasMatch()) {
    api::SweepPreview sweep;
    try {
      sweep = api::preview_sweep_text(text.toStdString(), QFileInfo(path).fileName().toStdString());
    } catch (const std::exception& e) {
      return fail(QString::fromStdString(e.what()));
    }
    if (!m_editor->setToml(QString::fromStdString(sweep.base_toml), QFileInfo(path).fileName()))
      return fail(m_editor->errorText());
    loadSweep(sweep);
    m_configPath = path;
    QSettings().setValue(QStringLiteral("config/last"), path);
    log(QStringLiteral("info"), tr("opened %1: sweep %2 (%3 trials) on the Sweep page")
                                    .arg(path, QString::fromStdString(sweep.name))
                                    .arg(sweep.trials.size()));
    return true;
  }
  if (!m_editor->setToml(text, QFileInfo(path).fileName()))
    return fail(m_editor->errorText() +
                tr("\n\nThe file's text is in the TOML tab: fix it there and press \"Apply TOML "
                   "to the form\"."));
  m_configPath = path;
  QSettings().setValue(QStringLiteral("config/last"), path);
  log(QStringLiteral("info"), tr("opened %1").arg(path));
  return true;
}

void MainWindow::loadSweep(const api::SweepPreview& sweep) {
  m_sweepEditor->setName(QString::fromStdString(sweep.name));
  m_sweepEditor->clearParameters();
  for (const auto& param : sweep.parameters) {
    QStringList values;
    for (const auto& v : param.values) {
      QString text = QString::fromStdString(v);
      // The editor's list takes bare words for strings ("muon, adamw").
      if (text.size() >= 2 && text.startsWith(QLatin1Char('"')) && text.endsWith(QLatin1Char('"')))
        text = text.mid(1, text.size() - 2);
      values << text;
    }
    m_sweepEditor->addParameter(QString::fromStdString(param.key),
                                values.join(QStringLiteral(", ")),
                                QString::fromStdString(param.distribution), param.min, param.max);
  }
  QStringList seeds;
  for (const auto s : sweep.seeds)
    seeds << QString::number(s);
  m_sweepEditor->setPlan(QString::fromStdString(sweep.method),
                         static_cast<int>(sweep.random_trials), seeds.join(QStringLiteral(", ")),
                         QString::fromStdString(sweep.metric), QString::fromStdString(sweep.goal));
  QStringList rungs;
  for (const auto r : sweep.rungs)
    rungs << QString::number(r);
  m_sweepEditor->setEarlyStopping(QString::fromStdString(sweep.stopping),
                                  rungs.join(QStringLiteral(", ")), sweep.reduction_factor);
  m_sweepEditor->check();
  m_editor->showPage(m_sweepEditor);
}

void MainWindow::saveConfigAs() {
  const QString path = QFileDialog::getSaveFileName(this, tr("Save run config"), m_configPath,
                                                    tr("TOML run configs (*.toml)"));
  if (path.isEmpty()) return;
  QFile f(path);
  if (!f.open(QIODevice::WriteOnly | QIODevice::Truncate)) {
    QMessageBox::warning(this, tr("Save run config"), tr("%1: %2").arg(path, f.errorString()));
    return;
  }
  f.write(m_editor->toToml().toUtf8());
  m_configPath = path;
  log(QStringLiteral("info"), tr("saved %1").arg(path));
}

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

void MainWindow::startEntry(const QueueEntry& entry) {
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
  worker->start();
  updateActions();
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
  if (page == m_sweeps && (m_sweepProcess || m_sweeps->running())) {
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
  const QString path = QFileDialog::getSaveFileName(this, tr("Export sweep report"),
                                                    QStringLiteral("sweep-%1.html").arg(name),
                                                    tr("HTML report (*.html);;PDF report (*.pdf)"));
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

void MainWindow::enqueueCurrent() {
  if (!m_editor->validateNow()) {
    log(QStringLiteral("error"), m_editor->errorText());
    return;
  }
  QueueEntry e{m_editor->toToml(), m_editor->fieldText(QStringLiteral("run.name"))};
  m_queue.push_back(e);
  m_queueList->addItem(e.label);
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
    m_queue.push_back(e);
    m_queueList->addItem(e.label);
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
  if (m_launching || m_queue.empty()) return;
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
  const int n = std::min<int>(m_parallel->value(), static_cast<int>(m_queue.size()));
  ++m_launchBatch;
  for (int k = 0; k < n; ++k) {
    const QueueEntry e = m_queue.front();
    m_queue.erase(m_queue.begin());
    delete m_queueList->takeItem(0);
    const QString file =
        m_launchDir->filePath(QStringLiteral("batch%1-slot%2.toml").arg(m_launchBatch).arg(k));
    QFile f(file);
    if (!f.open(QIODevice::WriteOnly | QIODevice::Truncate) || f.write(e.configText.toUtf8()) < 0) {
      log(QStringLiteral("error"), tr("[launch] cannot write %1: %2").arg(file, f.errorString()));
      return;
    }
    req.configs.push_back(file.toStdString());
  }
  req.nproc = n;
  if (m_launchThread.joinable()) m_launchThread.join();
  m_launching = true;
  updateActions();
  log(QStringLiteral("info"),
      tr("launching %1 process(es), binding %2").arg(n).arg(m_queueBinding->currentText()));
  m_launchThread = std::thread([this, req] {
    QString summary;
    try {
      const auto procs = api::launch_runs(req, [this](const api::LaunchedProcess& p) {
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
  });
}

void MainWindow::startQueue() {
  if (m_asProcesses->isChecked()) {
    launchBatch();
    return;
  }
  while (!m_queue.empty() && activeRuns() < m_parallel->value()) {
    const QueueEntry e = m_queue.front();
    m_queue.erase(m_queue.begin());
    delete m_queueList->takeItem(0);
    startEntry(e);
  }
}

int MainWindow::activeRuns() const {
  int n = m_launching ? 1 : 0;
  for (const auto& w : m_workers)
    if (w && w->isRunning()) ++n;
  return n;
}

void MainWindow::updateActions() {
  const bool running = activeRuns() > 0;
  m_cancelAction->setEnabled(running);
  m_pauseAction->setEnabled(running);
  if (!running) m_pauseAction->setChecked(false);
}

void MainWindow::log(const QString& level, const QString& text) {
  const QString line =
      QStringLiteral("%1 %2: %3")
          .arg(QDateTime::currentDateTime().toString(QStringLiteral("HH:mm:ss")), level, text);
  m_log->appendPlainText(line);
  if (level == QLatin1String("error")) statusBar()->showMessage(text, 8000);
}

void MainWindow::exportReport() {
  QList<qint64> ids = m_runsView->selectedRuns();
  if (ids.isEmpty()) ids = m_live->runIds();
  if (ids.isEmpty()) {
    QMessageBox::information(this, tr("Export report"), tr("Select one or more runs first."));
    return;
  }
  const QString path = QFileDialog::getSaveFileName(this, tr("Export report"),
                                                    QStringLiteral("trainbench-report.html"),
                                                    tr("HTML report (*.html);;PDF report (*.pdf)"));
  if (path.isEmpty()) return;
  try {
    const Report r = buildReport(*m_runsModel->store(), ids);
    const QString err = writeReport(r, path);
    if (!err.isEmpty()) throw std::runtime_error(err.toStdString());
    log(QStringLiteral("info"), tr("report written to %1").arg(path));
  } catch (const std::exception& e) {
    QMessageBox::warning(this, tr("Export report"), QString::fromUtf8(e.what()));
  }
}

void MainWindow::chooseRunStore() {
  const QString path = QFileDialog::getSaveFileName(
      this, tr("Open or create a run store"), m_dbPath,
      tr("Run stores (*.sqlite *.db);;All files (*)"), nullptr, QFileDialog::DontConfirmOverwrite);
  if (!path.isEmpty()) openStore(path);
}

QMessageBox* MainWindow::warnIfNoStore() {
  if (m_runsModel->store() != nullptr) return nullptr;
  // Said where the user looks, not only in the Events dock: without a store nothing can be
  // listed or trained, and the way out is another store.
  auto* box = new QMessageBox(QMessageBox::Warning, tr("Run store"),
                              tr("The run store could not be opened, so runs cannot be listed or "
                                 "trained here."),
                              QMessageBox::NoButton, this);
  box->setObjectName(QStringLiteral("storeProblem"));
  box->setInformativeText(m_runsModel->lastError());
  box->setWindowModality(Qt::WindowModal);
  box->setAttribute(Qt::WA_DeleteOnClose);
  QPushButton* other = box->addButton(tr("Open run store…"), QMessageBox::AcceptRole);
  box->addButton(QMessageBox::Close);
  box->setDefaultButton(other);
  connect(other, &QPushButton::clicked, this, [this] {
    QMetaObject::invokeMethod(this, &MainWindow::chooseRunStore, Qt::QueuedConnection);
  });
  box->open();
  return box;
}

MainWindow* MainWindow::openStore(const QString& path, QString* error) {
  auto fail = [&](const QString& message) -> MainWindow* {
    if (error != nullptr)
      *error = message;
    else
      QMessageBox::warning(this, tr("Open run store"), message);
    return nullptr;
  };
  if (QFileInfo(path).isDir())
    return fail(tr("%1 is a folder; a run store is a file (e.g. runs.sqlite)").arg(path));
  auto* window = new MainWindow(path);
  window->setAttribute(Qt::WA_DeleteOnClose);
  if (const QString problem = window->m_runsModel->lastError(); !problem.isEmpty()) {
    delete window;
    return fail(problem);
  }
  window->m_editor->setToml(m_editor->toToml(),
                            m_configPath.isEmpty() ? tr("<editor>") : m_configPath);
  window->m_configPath = m_configPath;
  window->show();
  window->log(QStringLiteral("info"), tr("opened the run store %1").arg(window->m_dbPath));
  const bool sweeping = m_sweepProcess && m_sweepProcess->state() != QProcess::NotRunning;
  if (activeRuns() == 0 && !sweeping) {
    close();
  } else {
    log(QStringLiteral("info"), tr("%1 opened in a new window; this one stays open while its "
                                   "runs or its sweep train")
                                    .arg(window->m_dbPath));
  }
  return window;
}

void MainWindow::closeEvent(QCloseEvent* event) {
  const bool sweeping = m_sweepProcess && m_sweepProcess->state() != QProcess::NotRunning;
  if (!m_quitting && (activeRuns() > 0 || sweeping)) {
    const QString runs =
        tr("%n run(s) are still training. Cancel them and quit?", nullptr, activeRuns());
    const QString sweep =
        tr("Sweep %1 is running. Stop it and quit? Its trials stop after their step, with a "
           "checkpoint; trainbench-cli --db %2 sweep --resume %1 continues it.")
            .arg(m_sweepName, m_dbPath);
    const QString text = !sweeping           ? runs
                         : activeRuns() == 0 ? sweep
                                             : runs + QStringLiteral("\n\n") + sweep;
    if (QMessageBox::question(this, tr("Quit"), text) != QMessageBox::Yes) {
      event->ignore();
      return;
    }
  }
  m_quitting = true;
  for (auto& w : m_workers)
    if (w) w->cancel();
  // Again: the question's event loop may have seen the sweep end.
  const bool stillSweeping = m_sweepProcess && m_sweepProcess->state() != QProcess::NotRunning;
  // The sweep process is ours (QProcess would kill it, and its trials would train on without
  // it): SIGTERM stops it as Ctrl-C does — its trials stop after their step and it waits for
  // them. The window stays (and answers) until it has ended; its end closes the window. One
  // that has not ended after kSweepStopWaitMs is killed.
  if (stillSweeping) {
    if (!m_sweepStopping) {
      m_sweepStopping = true;
      statusBar()->showMessage(
          tr("Stopping sweep %1: its trials stop after their step…").arg(m_sweepName));
      m_sweepProcess->terminate();
      QTimer::singleShot(kSweepStopWaitMs, this, [this] {
        if (m_sweepProcess) m_sweepProcess->kill();
      });
    }
    event->ignore();
    return;
  }
  saveLayout();
  event->accept();
}

void MainWindow::saveLayout() {
  QSettings settings;
  settings.setValue(QStringLiteral("window/geometry"), saveGeometry());
  settings.setValue(QStringLiteral("window/state"), saveState());
}

}  // namespace tb::ui
