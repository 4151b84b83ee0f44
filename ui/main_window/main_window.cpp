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
#include <QKeyEvent>
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
#include <QTimer>
#include <QToolBar>
#include <QVBoxLayout>

#include <csignal>
#include <exception>
#include <utility>

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

MainWindow::MainWindow(const QString& dbPath, QWidget* parent, Layout layout)
    : QMainWindow(parent), m_dbPath(dbPath), m_layout(layout) {
  setWindowTitle(tr("TrainBench"));
  setObjectName(QStringLiteral("TrainBenchMainWindow"));
  m_runsModel = new RunsModel(dbPath, 1000, this);
  m_dbPath = m_runsModel->dbPath();

  m_tabs = new QTabWidget(this);
  m_live = new PlotsPanel(m_tabs);
  m_live->setRunKey(true);  // on screen: one key for many runs, the plots kept for the data
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
  connect(&LeftRunning::instance(), &LeftRunning::closed, this,
          [this](const QString& db, qint64 run, bool byThis) {
            if (!byThis || QFileInfo(db) != QFileInfo(m_dbPath)) return;
            log(QStringLiteral("info"),
                tr("run %1 closed as failed in the store: it can be resumed").arg(run));
            m_runsModel->refresh();
          });

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
  const bool picture = layout == Layout::Picture;
  if (picture ||
      !restoreGeometry(settings.value(QStringLiteral("window/geometry")).toByteArray())) {
    // First start: 1720 x 950, or the screen's free area when that is smaller.
    const QRect free =
        screen() != nullptr && !picture ? screen()->availableGeometry() : QRect(0, 0, 1720, 950);
    resize(std::min(1720, free.width()), std::min(950, free.height()));
  }
  if ((picture || !restoreState(settings.value(QStringLiteral("window/state")).toByteArray())) &&
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
  stopLaunchedProcesses();  // first: nothing below may delay it
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
  if (m_launchThread.joinable()) m_launchThread.join();
}

void MainWindow::stopLaunchedProcesses() {
  // SIGUSR1 cancels each of the queue's processes after its step, with a checkpoint; the launch
  // thread, joined on the way out, then ends. Not SIGTERM: the processes share this program's
  // process group, so a Ctrl-C in its terminal has reached them already, and a second stop
  // signal half a second later makes a run quit at once, without its checkpoint.
  if (m_launchStop.exchange(true)) return;
  const std::lock_guard<std::mutex> lock(m_launchedMutex);
  for (const int pid : m_launchedPids)
    ::kill(pid, SIGUSR1);
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
  // right would hide what they hold), so the dock is as wide as the editor needs. Only below the
  // editor's least height: at its preferred height (QScrollArea's way with the word-wrapped
  // status line) a laptop's 768 px put the LR preview below the fold, the form scrolled inside.
  auto* configArea = new VerticalScrollArea(dockHost);
  configArea->setWidget(configHost);
  configArea->setFitsLeastHeight(true);
  dockLayout->addWidget(configArea, 1);
  dockLayout->addLayout(buttons);
  configDock->setWidget(dockHost);
  addDockWidget(Qt::LeftDockWidgetArea, configDock);
  connect(run, &QPushButton::clicked, this, [this] { startRun(); });
  connect(queue, &QPushButton::clicked, this, &MainWindow::enqueueCurrent);
  connect(pair, &QPushButton::clicked, this, &MainWindow::enqueueMuonAndAdamw);
  // Nothing that would start or queue the config is offered while it does not validate (the
  // queue took it and only then said why it could not run).
  for (QPushButton* b : {run, queue, pair})
    connect(m_editor, &ConfigEditor::validityChanged, b, &QPushButton::setEnabled);
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
  for (QPushButton* b : {run, queue, pair})
    b->setEnabled(m_editor->isValid());

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
    api::StoreReader* store = m_runsModel->store();
    if (store == nullptr) {  // the store went away since the table was drawn
      log(QStringLiteral("error"), tr("no run store is open: %1").arg(m_runsModel->lastError()));
      return;
    }
    try {
      const QString text = QString::fromStdString(store->config_text(id));
      m_editor->setToml(text, tr("run %1").arg(id));
      log(QStringLiteral("info"), tr("config of run %1 loaded into the editor").arg(id));
    } catch (const std::exception& e) {
      log(QStringLiteral("error"), QString::fromUtf8(e.what()));
    }
  });

  QDockWidget* queueDock = buildQueueDock();

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
  m_exportAction = exportAct;
  // Ctrl+E also from a text field (eventFilter).
  qApp->installEventFilter(this);
  file->addSeparator();
  QAction* quit = file->addAction(tr("&Quit"), this, &QWidget::close);
  quit->setShortcut(QKeySequence::Quit);

  QMenu* runMenu = menuBar()->addMenu(tr("&Run"));
  // One name for one action: the toolbar's "Run" is the config dock's Run button (Ctrl+R).
  m_runAction = runMenu->addAction(tr("&Run this config"), this, [this] { startRun(); });
  m_runAction->setIconText(tr("Run"));
  m_runAction->setShortcut(QKeySequence(Qt::CTRL | Qt::Key_R));
  QAction* queueAct = runMenu->addAction(tr("Add to &queue"), this, &MainWindow::enqueueCurrent);
  QAction* pairAct =
      runMenu->addAction(tr("Queue &Muon + AdamW"), this, &MainWindow::enqueueMuonAndAdamw);
  for (QAction* a : {m_runAction, queueAct, pairAct}) {
    connect(m_editor, &ConfigEditor::validityChanged, a, &QAction::setEnabled);
    a->setEnabled(m_editor->isValid());
  }
  runMenu->addAction(tr("Start q&ueue"), this, &MainWindow::startQueue);
  runMenu->addSeparator();
  m_pauseAction = runMenu->addAction(tr("&Pause"), this, [this] {
    const bool pause = m_pauseAction->isChecked();
    QStringList runs;
    for (auto& w : m_workers)
      if (w && w->isRunning()) {
        w->setPaused(pause);
        if (w->runId() > 0) runs << tr("run %1").arg(w->runId());
      }
    // Said on the button and in the status bar: a pressed "Pause" alone read as still running.
    m_pauseAction->setText(pause ? tr("&Continue") : tr("&Pause"));
    m_pauseAction->setIconText(pause ? tr("Continue") : tr("Pause"));
    const QString who = runs.isEmpty() ? tr("the runs") : runs.join(QStringLiteral(", "));
    log(QStringLiteral("info"),
        pause ? tr("%1 paused (Continue goes on)").arg(who) : tr("%1 continued").arg(who));
    if (pause)
      statusBar()->showMessage(tr("%1 paused").arg(who));
    else
      statusBar()->clearMessage();
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

void MainWindow::updateActions() {
  const bool running = activeRuns() > 0;
  m_cancelAction->setEnabled(running);
  m_pauseAction->setEnabled(running);
  if (!running && m_pauseAction->isChecked()) {
    m_pauseAction->setChecked(false);
    m_pauseAction->setText(tr("&Pause"));
    m_pauseAction->setIconText(tr("Pause"));
    statusBar()->clearMessage();
  }
}

bool MainWindow::eventFilter(QObject* watched, QEvent* event) {
  // A line or text edit takes Ctrl+E ("end of line" on X11) by accepting the shortcut-override
  // event, so Export report never fired while the form, the search box or the TOML page had the
  // focus (where it usually is). Filtered out unaccepted, the key goes to the shortcut.
  if (event->type() == QEvent::ShortcutOverride && m_exportAction != nullptr) {
    const auto* w = qobject_cast<QWidget*>(watched);
    const auto* key = static_cast<QKeyEvent*>(event);
    if (w != nullptr && w->window() == this && m_exportAction->isEnabled() &&
        QKeySequence(key->keyCombination()) == m_exportAction->shortcut())
      return true;
  }
  return QMainWindow::eventFilter(watched, event);
}

void MainWindow::log(const QString& level, const QString& text) {
  const QString line =
      QStringLiteral("%1 %2: %3")
          .arg(QDateTime::currentDateTime().toString(QStringLiteral("HH:mm:ss")), level, text);
  // The newest line in view, unless the user scrolled up to read an older one (appendPlainText
  // follows only while the dock is visible and laid out: after a pause or cancel the newest
  // event was often the hidden one).
  QScrollBar* bar = m_log->verticalScrollBar();
  const bool follow = bar->value() >= bar->maximum() - 1;
  m_log->appendPlainText(line);
  if (follow) {
    bar->setValue(bar->maximum());
    QTimer::singleShot(0, m_log, [bar] { bar->setValue(bar->maximum()); });
  }
  if (level == QLatin1String("error")) statusBar()->showMessage(text, 8000);
}

void MainWindow::exportReport() {
  QList<qint64> ids = m_runsView->selectedRuns();
  if (ids.isEmpty()) ids = m_live->runIds();
  if (ids.isEmpty()) {
    QMessageBox::information(this, tr("Export report"), tr("Select one or more runs first."));
    return;
  }
  const QString path = askReportPath(tr("Export report"), QStringLiteral("trainbench-report"));
  if (path.isEmpty()) return;
  api::StoreReader* store = m_runsModel->store();
  if (store == nullptr) {
    QMessageBox::warning(this, tr("Export report"),
                         tr("No run store is open: %1").arg(m_runsModel->lastError()));
    return;
  }
  try {
    const Report r = buildReport(*store, ids);
    const QString err = writeReport(r, path);
    if (!err.isEmpty()) throw std::runtime_error(err.toStdString());
    log(QStringLiteral("info"), tr("report written to %1").arg(path));
  } catch (const std::exception& e) {
    QMessageBox::warning(this, tr("Export report"), QString::fromUtf8(e.what()));
  }
}

QString MainWindow::askReportPath(const QString& title, const QString& baseName) {
  // Starts where the last report went, else beside the store (not the process's working
  // folder); the chosen filter sets the extension, as the format follows the extension.
  QSettings settings;
  QString dir = settings.value(QStringLiteral("reports/folder")).toString();
  if (dir.isEmpty() || !QFileInfo(dir).isDir())
    dir = m_dbPath.isEmpty() ? QDir::homePath() : QFileInfo(m_dbPath).absolutePath();
  const QString html = tr("HTML report (*.html)"), pdf = tr("PDF report (*.pdf)");
  QFileDialog dialog(this, title, dir, html + QStringLiteral(";;") + pdf);
  dialog.setAcceptMode(QFileDialog::AcceptSave);
  dialog.setDefaultSuffix(QStringLiteral("html"));
  dialog.selectFile(baseName + QStringLiteral(".html"));
  connect(&dialog, &QFileDialog::filterSelected, &dialog, [&](const QString& filter) {
    const QString suffix = filter == pdf ? QStringLiteral("pdf") : QStringLiteral("html");
    dialog.setDefaultSuffix(suffix);
    const QStringList chosen = dialog.selectedFiles();
    const QString name = chosen.isEmpty() ? baseName : QFileInfo(chosen.first()).completeBaseName();
    dialog.selectFile(name + QLatin1Char('.') + suffix);
  });
  if (dialog.exec() != QDialog::Accepted || dialog.selectedFiles().isEmpty()) return QString();
  const QString path = dialog.selectedFiles().first();
  settings.setValue(QStringLiteral("reports/folder"), QFileInfo(path).absolutePath());
  return path;
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
    // The question's event loop runs: a batch or run that ends meanwhile does not start the
    // next queued config, unless the answer is No.
    m_askingToQuit = true;
    const bool quit = QMessageBox::question(this, tr("Quit"), text) == QMessageBox::Yes;
    m_askingToQuit = false;
    if (!quit) {
      event->ignore();
      if (std::exchange(m_queueDeferred, false)) startQueue();
      return;
    }
  }
  m_quitting = true;
  for (auto& w : m_workers)
    if (w) w->cancel();
  stopLaunchedProcesses();  // the question counted them
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
  if (m_layout == Layout::Picture) return;  // not the user's layout
  QSettings settings;
  settings.setValue(QStringLiteral("window/geometry"), saveGeometry());
  settings.setValue(QStringLiteral("window/state"), saveState());
}

}  // namespace tb::ui
