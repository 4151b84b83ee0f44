// MainWindow: the workbench. Docks: the run config (form, TOML, parameter split, LR preview), the
// runs table of the store, the queue, and the event log; central tabs: live plots and compare.
// Runs start in-process on worker threads (RunWorker); runs written by other processes appear
// through the store. Menus and shortcuts: Ctrl+N new config, Ctrl+O open, Ctrl+S save, Ctrl+E
// export report, Ctrl+R run. Window geometry and dock layout are remembered.
#pragma once

#include <QList>
#include <QMainWindow>
#include <QMap>
#include <QPointer>
#include <QString>
#include <QTimer>

#include <atomic>
#include <memory>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include "ui/main_window/queue_list.h"

class QAction;
class QCheckBox;
class QComboBox;
class QDockWidget;
class QTemporaryDir;
class QLabel;
class QMessageBox;
class QPlainTextEdit;
class QScrollArea;
class QSpinBox;
class QTabWidget;
class QProcess;
class QSplitter;

namespace tb::api {
class StoreReader;
struct LaunchRequest;
struct SweepPreview;
}  // namespace tb::api

namespace tb::ui {

class CompareView;
class SweepView;
class SweepEditor;
struct SweepLaunch;
class ConfigEditor;
class PlotsPanel;
class RunWorker;
class RunsModel;
class RunsView;
class TopologyView;

/// The main window.
class MainWindow : public QMainWindow {
  Q_OBJECT

 public:
  /// How the window is laid out when it opens.
  enum class Layout {
    Remembered,  ///< the size and docks saved last time, else the first start's for the screen
    /// The first start's, 1720 x 950 whatever the screen, nothing saved on the way out: a
    /// picture without a display (the offscreen platform's screen is a made-up 800 x 800).
    Picture,
  };
  /// A window over the store `dbPath` ("" = the default store).
  explicit MainWindow(const QString& dbPath = QString(), QWidget* parent = nullptr,
                      Layout layout = Layout::Remembered);
  ~MainWindow() override;

  /// Loads a config file into the editor; false (with a message box unless `quiet`, and the
  /// message in `error` when given) on error.
  bool openConfig(const QString& path, bool quiet = false, QString* error = nullptr);
  /// Opens the run store `path` (a new file becomes a new store) in a new window with this
  /// window's config, and closes this one unless runs still train here. The new window (deleted
  /// on close), or null when the store cannot be opened: said in a message box, or only in
  /// `error` when that is given.
  MainWindow* openStore(const QString& path, QString* error = nullptr);
  /// File > Open run store…: asks for a store file (an existing one opens, a new name creates
  /// one) and opens it with openStore().
  void chooseRunStore();
  /// When this window's store could not be opened (a bad --db), a window-modal box that says so
  /// with the reason and offers "Open run store…"; it deletes itself when closed. Null when the
  /// store is open.
  QMessageBox* warnIfNoStore();
  /// Starts the editor's config now (in-process). Returns false when it does not validate.
  bool startRun();
  /// Continues stored run `id` (crashed or cancelled) from its newest checkpoint, in-process.
  void resumeRun(qint64 id);
  /// Queues the editor's config.
  void enqueueCurrent();
  /// Queues the editor's config twice: with optimizer Muon and with AdamW (same everything else).
  void enqueueMuonAndAdamw();
  /// Starts queued runs, up to "N at a time".
  void startQueue();

  /// Widgets (tests, screenshots).
  ConfigEditor* configEditor() const { return m_editor; }
  PlotsPanel* livePlots() const { return m_live; }
  CompareView* compareView() const { return m_compare; }
  /// Starts a sweep from the editor: its config written to STORE_FOLDER/sweeps/NAME.toml and run
  /// by `trainbench-cli sweep` (output in the Events dock); the Sweeps tab follows it.
  void startSweep(const SweepLaunch& launch);
  /// Re-reads the samples of the runs shown live.
  void updateSamples();
  /// Whether a sweep started from the editor still runs.
  bool sweepRunning() const { return m_sweepProcess != nullptr; }
  /// The config editor's Sweep page.
  SweepEditor* sweepEditor() const { return m_sweepEditor; }
  /// Asks for a file and writes sweep `name`'s report there (HTML or PDF).
  void exportSweepReport(const QString& name);
  /// The texts the runs shown live generated at their evaluations (eval.samples).
  QPlainTextEdit* liveSamples() const { return m_samples; }
  /// Opens the Sweeps tab on sweep `name`.
  void showSweep(const QString& name);
  /// The Sweeps tab.
  SweepView* sweepView() const { return m_sweeps; }
  RunsModel* runsModel() const { return m_runsModel; }
  RunsView* runsView() const { return m_runsView; }
  QTabWidget* centralTabs() const { return m_tabs; }
  /// The page the central tabs show (the Live page, compareView() or sweepView()); the tabs
  /// hold each inside a scroll area.
  QWidget* currentPage() const;
  TopologyView* topologyView() const { return m_topology; }
  /// In-process runs still going (plus launched processes).
  int activeRuns() const;
  /// Saves the window's geometry and dock layout for the next start (on close; on a stop
  /// signal, which ends the program without closing it).
  void saveLayout();
  /// Puts a planned sweep's [sweep] table on the config editor's Sweep page and shows it.
  void loadSweep(const api::SweepPreview& sweep);
  /// Queue mode: run queued configs as separate `trainbench-cli` processes, each bound to its
  /// CPU slot by `binding` (the same launcher as `trainbench-cli launch`), instead of in-process.
  void setQueueAsProcesses(bool processes, const QString& binding = QStringLiteral("node"));
  /// Sets how many queued runs go at a time.
  void setQueueParallel(int n);
  /// How many configs wait in the queue.
  int queuedCount() const { return m_queueList->count(); }
  /// The queue's list (its order is the order the configs start in).
  QueueList* queueList() const { return m_queueList; }
  /// The trainbench-cli used for separate processes (default: next to this program).
  void setCliPath(const QString& path) { m_cliPath = path; }
  /// Whether a launched batch is still running.
  bool launching() const { return m_launching.load(); }
  /// Shows `ids` side by side in the Compare tab.
  void compareRuns(const QList<qint64>& ids);

 protected:
  void closeEvent(QCloseEvent* event) override;
  /// Lets Ctrl+E reach Export report from a text field of this window.
  bool eventFilter(QObject* watched, QEvent* event) override;

 private:
  /// A save dialog for an HTML or PDF report: in the last report's folder (else the store's), the
  /// extension following the chosen filter; "" when cancelled.
  QString askReportPath(const QString& title, const QString& baseName);
  void buildActions();
  void buildDocks();
  QDockWidget* buildQueueDock();  // the Queue dock (main_window_runs.cpp)
  /// `content` in a frameless scroll area that lets it fill the area and scrolls only when the
  /// area is smaller than the content's least size.
  static QScrollArea* scrollable(QWidget* content, QWidget* parent);
  /// Shows the central tab that holds `content`.
  void showPage(QWidget* content);
  void showRunsLive(const QList<qint64>& ids);
  /// Starts `entry` in this process; false when it could not start (its thread).
  bool startEntry(const QueueEntry& entry);
  void drainWorkers();
  void pollStore();
  void log(const QString& level, const QString& text);
  void saveConfigAs();
  void exportReport();
  void updateActions();
  void launchBatch();
  /// Stops the queue's separate processes (once) and starts no further one.
  void stopLaunchedProcesses();
  /// The launch thread: runs the batch and reports its end on the GUI thread.
  void launchThreadBody(const api::LaunchRequest& req);
  QString cliPath() const;

  QString m_dbPath;
  Layout m_layout = Layout::Remembered;
  ConfigEditor* m_editor = nullptr;
  PlotsPanel* m_live = nullptr;
  CompareView* m_compare = nullptr;
  SweepView* m_sweeps = nullptr;
  QSplitter* m_livePage = nullptr;      // the Live tab: plots over samples
  QPlainTextEdit* m_samples = nullptr;  // eval.samples texts of the runs shown live
  SweepEditor* m_sweepEditor = nullptr;
  QProcess* m_sweepProcess = nullptr;  // the sweep started from the editor, while it runs
  QString m_pendingSweep;              // its name, until the Sweeps tab shows it
  QString m_sweepName;                 // its name
  bool m_sweepStopping = false;        // asked to stop (closing the window), not ended yet
  bool m_askingToQuit = false;         // the quit question is open (its event loop runs)
  bool m_queueDeferred = false;        // the queue was to go on while the question was open
  bool m_startAfterDrag = false;       // the queue was to go on while an entry was dragged
  bool m_quitting = false;             // the window is closing (asked and answered once)
  // How long closing the window waits for its sweep to stop its trials (then it is killed).
  static constexpr int kSweepStopWaitMs = 60000;
  RunsModel* m_runsModel = nullptr;
  RunsView* m_runsView = nullptr;
  TopologyView* m_topology = nullptr;
  QTabWidget* m_tabs = nullptr;
  QueueList* m_queueList = nullptr;
  QSpinBox* m_parallel = nullptr;
  QPlainTextEdit* m_log = nullptr;
  QLabel* m_statusLabel = nullptr;
  QAction* m_runAction = nullptr;
  QAction* m_cancelAction = nullptr;
  QAction* m_pauseAction = nullptr;
  QAction* m_exportAction = nullptr;
  QList<QPointer<RunWorker>> m_workers;
  QTimer m_drainTimer;
  QTimer m_pollTimer;
  QString m_configPath;
  QCheckBox* m_asProcesses = nullptr;
  QComboBox* m_queueBinding = nullptr;
  QString m_cliPath;
  std::unique_ptr<QTemporaryDir> m_launchDir;
  std::thread m_launchThread;
  std::atomic<bool> m_launching{false};
  // The launch thread's processes still alive (their pids, forgotten as each ends and before it
  // is reaped), signalled when the window quits; and whether to start no further one.
  mutable std::mutex m_launchedMutex;
  std::set<int> m_launchedPids;
  std::atomic<bool> m_launchStop{false};
  int m_launchBatch = 0;
};

}  // namespace tb::ui
