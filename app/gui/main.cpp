// trainbench: the GUI workbench. `trainbench [--db PATH] [CONFIG.toml]` opens the main window
// with a config ready to run; `trainbench --export-report RUN[,RUN...] -o FILE` (or
// `--export-sweep-report NAME -o FILE`) writes an HTML or PDF report without a display
// (offscreen) and exits.
#include <QApplication>
#include <QCommandLineParser>
#include <QDir>
#include <QFileInfo>
#include <QImage>
#include <QSaveFile>
#include <QSocketNotifier>
#include <QStandardPaths>
#include <QTextStream>
#include <QTimer>

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <functional>
#include <memory>

#include "engine/api/workbench_api.h"
#include "ui/main_window/main_window.h"
#include "ui/report/report.h"
#include "ui/report/sweep_report.h"
#include "ui/run_config/config_editor.h"
#include "ui/runs/runs_model.h"

namespace {

// Whether the command needs no window: a report export, or --help/--version, which print and exit
// (QApplication needs a display platform before it reads the arguments, so without a display
// they would fail like the GUI does instead of printing like trainbench-cli).
bool wantsOffscreen(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    const char* a = argv[i];
    if (std::strcmp(a, "--") == 0) break;  // the rest are positional
    if (std::strcmp(a, "--export-report") == 0 || std::strncmp(a, "--export-report=", 16) == 0 ||
        std::strcmp(a, "--export-sweep-report") == 0 ||
        std::strncmp(a, "--export-sweep-report=", 22) == 0 || std::strcmp(a, "-h") == 0 ||
        std::strcmp(a, "--help") == 0 || std::strcmp(a, "--help-all") == 0 ||
        std::strcmp(a, "-v") == 0 || std::strcmp(a, "--version") == 0)
      return true;
  }
  return false;
}

bool hasOption(int argc, char** argv, const char* name) {
  const std::size_t n = std::strlen(name);
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--") == 0) break;
    if (std::strncmp(argv[i], name, n) == 0 && (argv[i][n] == '\0' || argv[i][n] == '='))
      return true;
  }
  return false;
}

// Whether Qt would find a display: X11's or Wayland's, or a platform the user chose.
bool hasDisplay() {
  for (const char* v : {"DISPLAY", "WAYLAND_DISPLAY", "QT_QPA_PLATFORM"})
    if (const char* value = std::getenv(v); value != nullptr && *value != '\0') return true;
  return false;
}

// The config the window opens with: the given file, else the example Fashion-MNIST config
// (installed or in the source tree), else the engine's defaults.
QString defaultConfigPath() {
  const QString app = QCoreApplication::applicationDirPath();
  for (const QString& candidate :
       {app + QStringLiteral("/../share/trainbench/configs/fmnist-mlp-adamw.toml"),
        app + QStringLiteral("/../../../resources/configs/fmnist-mlp-adamw.toml"),
        QStringLiteral(TB_SOURCE_CONFIG_DIR "/fmnist-mlp-adamw.toml")}) {
    if (QFileInfo::exists(candidate)) return QDir::cleanPath(candidate);
  }
  return {};
}

// Builds a report from the store at `db`, writes it to `out` and, with `pagesDir`, its PDF
// layout's pages as PNGs. 0, or 1 after printing the error.
int writeReportFiles(const QString& db, const QString& out, const QString& pagesDir,
                     const std::function<tb::ui::Report(const tb::api::StoreReader&)>& build) {
  QTextStream err(stderr);
  // The format comes from the name: "r.txt" would have been HTML under another name.
  const QString suffix = QFileInfo(out).suffix().toLower();
  if (suffix != QLatin1String("html") && suffix != QLatin1String("htm") &&
      suffix != QLatin1String("pdf")) {
    err << "trainbench: -o " << out << ": end the name in .html or .pdf (the report's format)\n";
    return 2;
  }
  try {
    // A report reads a store: a mistyped --db is an error, not a new empty store.
    const tb::api::StoreReader store = tb::api::StoreReader::existing(db.toStdString());
    const tb::ui::Report report = build(store);
    const QString e = tb::ui::writeReport(report, out);
    if (!e.isEmpty()) {
      err << "trainbench: " << e << "\n";
      return 1;
    }
    if (!pagesDir.isEmpty()) {  // the PDF's pages as pictures, to look at without a viewer
      if (!QDir().mkpath(pagesDir)) {
        err << "trainbench: --pages: cannot create " << pagesDir << "\n";
        return 1;
      }
      const QList<QImage> pages = tb::ui::pdfPageImages(report, 1.5);
      // page-01.png ...: two digits at least, as many as the last page's, so that they sort.
      const int digits = std::max(2, static_cast<int>(QString::number(pages.size()).size()));
      for (int i = 0; i < pages.size(); ++i) {
        const QString file = QDir(pagesDir).filePath(
            QStringLiteral("page-%1.png").arg(i + 1, digits, 10, QLatin1Char('0')));
        QSaveFile png(file);  // whole or not at all (a full disk)
        if (!png.open(QIODevice::WriteOnly | QIODevice::Unbuffered) ||
            !pages[i].save(&png, "PNG") || !png.commit()) {
          err << "trainbench: --pages: cannot write " << file << ": "
              << (png.error() != QFileDevice::NoError
                      ? png.errorString()
                      : QStringLiteral("a write fell short (is the disk full?)"))
              << "\n";
          return 1;
        }
      }
      QTextStream(stdout) << pages.size() << " page images written to " << pagesDir << "\n";
    }
  } catch (const std::exception& e) {
    err << "trainbench: " << e.what() << "\n";
    return 1;
  }
  return 0;
}

int exportReport(const QString& db, const QString& runs, const QString& out,
                 const QString& pagesDir) {
  QTextStream err(stderr);
  if (out.isEmpty()) {
    err << "trainbench: --export-report needs -o FILE (.html or .pdf)\n";
    return 2;
  }
  QList<qint64> ids;
  for (const QString& part : runs.split(QLatin1Char(','), Qt::SkipEmptyParts)) {
    bool ok = false;
    const qint64 id = part.trimmed().toLongLong(&ok);
    if (!ok || id <= 0) {
      err << "trainbench: --export-report: '" << part << "' is not a run id\n";
      return 2;
    }
    ids << id;
  }
  if (ids.isEmpty()) {
    err << "trainbench: --export-report needs run ids, e.g. 3 or 3,4\n";
    return 2;
  }
  const int rc = writeReportFiles(db, out, pagesDir, [&](const tb::api::StoreReader& store) {
    return tb::ui::buildReport(store, ids);
  });
  if (rc == 0) QTextStream(stdout) << "report of run(s) " << runs << " written to " << out << "\n";
  return rc;
}

// `--export-sweep-report NAME -o FILE`: the report of a stored sweep.
int exportSweepReport(const QString& db, const QString& name, const QString& out,
                      const QString& pagesDir) {
  if (out.isEmpty()) {
    QTextStream(stderr) << "trainbench: --export-sweep-report needs -o FILE (.html or .pdf)\n";
    return 2;
  }
  const int rc = writeReportFiles(db, out, pagesDir, [&](const tb::api::StoreReader& store) {
    return tb::ui::buildSweepReport(store, name);
  });
  if (rc == 0) QTextStream(stdout) << "report of sweep " << name << " written to " << out << "\n";
  return rc;
}

// Ctrl-C, SIGTERM or SIGHUP at the window (its terminal, closed or not, a logout, a supervisor)
// ends the program as closing it does, without the question: the runs it trains stop after their
// step with a checkpoint, the layout is saved. Before, the default action killed it and its runs
// were found crashed. The handler only writes the signal's number to a pipe the event loop reads
// (the self-pipe of https://doc.qt.io/qt-6/unix-signals.html). Qt's threads start with the signals
// blocked and the training threads block them (a handler run inside a oneDNN kernel corrupted
// the CLI's heap), so it runs on the GUI thread or on a thread a library started before main().
// Once the loop has ended, a repeat within kRepeatWindowNs counts as the same request (timeout
// signals a process and then its group) and any later one quits at once.
constexpr long long kRepeatWindowNs = 500'000'000;
std::atomic<long long> g_first_stop_ns{0};
static_assert(std::atomic<long long>::is_always_lock_free);
int g_stop_pipe[2] = {-1, -1};

void stopHandler(int sig) {
  const int saved = errno;
  const auto byte = static_cast<unsigned char>(sig);
  (void)!write(g_stop_pipe[1], &byte, 1);
  errno = saved;
}

long long monotonicNs() {
  timespec now{};
  clock_gettime(CLOCK_MONOTONIC, &now);  // async-signal-safe
  return static_cast<long long>(now.tv_sec) * 1'000'000'000 + now.tv_nsec;
}

sigset_t stopSignals() {
  sigset_t set;
  sigemptyset(&set);
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) {
    struct sigaction old = {};
    // One the program was started ignoring (SIGINT of a job started with & from a script) stays
    // ignored.
    if (sigaction(sig, nullptr, &old) == 0 && old.sa_handler == SIG_IGN) continue;
    sigaddset(&set, sig);
  }
  return set;
}

// After the event loop: a repeat of the stop signal within the window is ignored, a later one
// takes the default action.
void afterStopHandler(int sig) {
  if (monotonicNs() - g_first_stop_ns.load() < kRepeatWindowNs) return;
  std::signal(sig, SIG_DFL);
  std::raise(sig);  // delivered when this handler returns
}

// Without XDG_RUNTIME_DIR (a headless shell, a container, su) Qt prints "QStandardPaths:
// XDG_RUNTIME_DIR not set, defaulting to ..." as the first line of every command, --help
// included, and then uses /tmp/runtime-USER itself. That folder is set here instead, made as Qt
// makes it (this user's, mode 0700), so that nothing is printed; one that is not so is left to Qt.
void quietRuntimeDir() {
  if (std::getenv("XDG_RUNTIME_DIR") != nullptr) return;
  const std::string dir = "/tmp/runtime-" + std::to_string(getuid());
  (void)mkdir(dir.c_str(), 0700);
  struct stat st = {};
  if (stat(dir.c_str(), &st) == 0 && S_ISDIR(st.st_mode) && st.st_uid == getuid() &&
      (st.st_mode & 0777) == 0700)
    setenv("XDG_RUNTIME_DIR", dir.c_str(), 0);
}

// The offscreen platform (--screenshot, --export-report without a display) says "This plugin
// does not support propagateSizeHints()" for every top-level window it shows: a limit of that
// platform, of no use to the person who asked for a picture. Other messages go on as before.
QtMessageHandler g_previousHandler = nullptr;
void quietOffscreenHandler(QtMsgType type, const QMessageLogContext& context, const QString& text) {
  if (type == QtWarningMsg && text.contains(QLatin1String("does not support propagateSizeHints")))
    return;
  if (g_previousHandler) g_previousHandler(type, context, text);
}

}  // namespace

int main(int argc, char** argv) {
  quietRuntimeDir();
  g_previousHandler = qInstallMessageHandler(quietOffscreenHandler);
  const bool offscreen = wantsOffscreen(argc, argv);
  if (!offscreen && !hasDisplay()) {
    if (hasOption(argc, argv, "--screenshot")) {
      // A picture of the window needs no display: drawn offscreen, at the first-start size.
      setenv("QT_QPA_PLATFORM", "offscreen", 1);
    } else {
      // Qt would abort with "could not connect to display ... no Qt platform plugin could be
      // initialized. Reinstalling the application may fix this problem", which it would not.
      std::fprintf(stderr,
                   "trainbench: no display to open the window on (DISPLAY and WAYLAND_DISPLAY "
                   "are not set).\nWithout one: trainbench-cli trains and compares runs, "
                   "trainbench --screenshot FILE and --export-report work, or start the window "
                   "under a virtual display: xvfb-run -a trainbench\n");
      return 1;
    }
  }
  if (offscreen && std::getenv("QT_QPA_PLATFORM") == nullptr)
    setenv("QT_QPA_PLATFORM", "offscreen", 1);
  // Blocked while QApplication starts its threads, which inherit the mask (see above).
  const sigset_t stop = stopSignals();
  if (!offscreen) pthread_sigmask(SIG_BLOCK, &stop, nullptr);
  QApplication app(argc, argv);
  if (!offscreen && pipe2(g_stop_pipe, O_CLOEXEC | O_NONBLOCK) == 0) {
    struct sigaction sa = {};
    sa.sa_handler = stopHandler;
    sigfillset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    for (int sig : {SIGINT, SIGTERM, SIGHUP})
      if (sigismember(&stop, sig)) sigaction(sig, &sa, nullptr);
  }
  if (!offscreen) pthread_sigmask(SIG_UNBLOCK, &stop, nullptr);
  QApplication::setApplicationName(QStringLiteral("TrainBench"));
  QApplication::setOrganizationName(QStringLiteral("TrainBench"));
  QApplication::setApplicationVersion(QStringLiteral(TB_VERSION));
  QApplication::setDesktopFileName(QStringLiteral("io.github.trainbench.TrainBench"));

  QCommandLineParser parser;
  parser.setApplicationDescription(
      QStringLiteral("TrainBench: configure, run, watch and compare neural-network training."));
  parser.addHelpOption();
  parser.addVersionOption();
  const QCommandLineOption dbOpt(
      QStringLiteral("db"),
      QStringLiteral("Run store (default: $XDG_DATA_HOME/trainbench/runs.sqlite)."),
      QStringLiteral("PATH"));
  const QCommandLineOption exportOpt(
      QStringLiteral("export-report"),
      QStringLiteral("Write a report of RUN[,RUN...] and exit (no display needed)."),
      QStringLiteral("RUNS"));
  const QCommandLineOption outOpt(QStringList{QStringLiteral("o"), QStringLiteral("output")},
                                  QStringLiteral("Report file: .html (self-contained) or .pdf."),
                                  QStringLiteral("FILE"));
  const QCommandLineOption runOpt(QStringLiteral("run"),
                                  QStringLiteral("Start the config right away."));
  const QCommandLineOption screenshotOpt(
      QStringLiteral("screenshot"),
      QStringLiteral("Save a PNG of the window to FILE after --screenshot-delay ms, then quit."),
      QStringLiteral("FILE"));
  const QCommandLineOption delayOpt(
      QStringLiteral("screenshot-delay"),
      QStringLiteral("Milliseconds before --screenshot (default 3000)."), QStringLiteral("MS"),
      QStringLiteral("3000"));
  const QCommandLineOption pagesOpt(
      QStringLiteral("pages"),
      QStringLiteral("With --export-report or --export-sweep-report: also save the PDF layout's "
                     "pages as PNGs in DIR."),
      QStringLiteral("DIR"));
  const QCommandLineOption sweepOpt(QStringLiteral("sweep"),
                                    QStringLiteral("Open the Sweeps tab on sweep NAME."),
                                    QStringLiteral("NAME"));
  const QCommandLineOption exportSweepOpt(
      QStringLiteral("export-sweep-report"),
      QStringLiteral("Write a report of sweep NAME and exit (no display needed)."),
      QStringLiteral("NAME"));
  parser.addOptions({dbOpt, exportOpt, outOpt, runOpt, screenshotOpt, delayOpt, pagesOpt, sweepOpt,
                     exportSweepOpt});
  parser.addPositionalArgument(QStringLiteral("config"),
                               QStringLiteral("A TOML run config to open."),
                               QStringLiteral("[CONFIG.toml]"));
  parser.process(app);

  const QString db = parser.value(dbOpt);
  if (parser.isSet(exportSweepOpt))
    return exportSweepReport(db, parser.value(exportSweepOpt), parser.value(outOpt),
                             parser.value(pagesOpt));
  if (parser.isSet(exportOpt))
    return exportReport(db, parser.value(exportOpt), parser.value(outOpt), parser.value(pagesOpt));

  // On the heap and deleted when closed: File > Open run store… replaces it with a new window,
  // and a closed one must not go on polling its store.
  // A screenshot without a display: the first start's layout at its full size (the offscreen
  // platform's screen is a made-up 800 x 800; the saved layout belongs to a real screen).
  const bool picture =
      parser.isSet(screenshotOpt) && QGuiApplication::platformName() == QLatin1String("offscreen");
  auto* window = new tb::ui::MainWindow(
      db, nullptr,
      picture ? tb::ui::MainWindow::Layout::Picture : tb::ui::MainWindow::Layout::Remembered);
  window->setAttribute(Qt::WA_DeleteOnClose);
  // A store that cannot be opened (a --db that is not a run store, a folder without write
  // access) is said on stderr; with --run it ends the program (exit code 1) rather than showing
  // a window that cannot train, and interactively a dialog offers another store.
  if (window->runsModel()->store() == nullptr) {
    QTextStream(stderr) << "trainbench: " << window->runsModel()->lastError() << "\n";
    if (parser.isSet(runOpt)) {
      delete window;
      return 1;
    }
  }
  const QStringList positional = parser.positionalArguments();
  const QString config = positional.isEmpty() ? defaultConfigPath() : positional.first();
  // A config named on the command line that cannot be opened is said on stderr. Interactively
  // it is also shown in a dialog; with --run or --screenshot (scripts: nobody answers a dialog)
  // it ends the program with exit code 1 instead of training or capturing something else.
  const bool scripted = parser.isSet(runOpt) || parser.isSet(screenshotOpt);
  QString configError;
  if (!config.isEmpty() &&
      !window->openConfig(config, /*quiet=*/positional.isEmpty() || scripted, &configError) &&
      !positional.isEmpty()) {
    QTextStream(stderr) << "trainbench: " << configError << "\n";
    if (scripted) {
      delete window;
      return 1;
    }
  }
  int stopSignal = 0;
  const int stopFd = g_stop_pipe[0];
  std::unique_ptr<QSocketNotifier> stopNotifier;
  if (stopFd >= 0) {
    stopNotifier = std::make_unique<QSocketNotifier>(stopFd, QSocketNotifier::Read);
    QObject::connect(stopNotifier.get(), &QSocketNotifier::activated, &app, [&] {
      unsigned char sig = 0;
      while (read(stopFd, &sig, 1) == 1) {
        if (stopSignal != 0) continue;  // quitting already
        stopSignal = sig;
        g_first_stop_ns.store(monotonicNs());
        QTextStream(stderr) << "trainbench: " << strsignal(stopSignal)
                            << ": quitting; the runs training here stop after their step, with a "
                               "checkpoint (the same signal again quits at once)\n";
        QCoreApplication::exit(128 + stopSignal);  // as a shell reports a process it signalled
      }
    });
  }
  window->show();
  if (!scripted) window->warnIfNoStore();
  if (parser.isSet(sweepOpt)) window->showSweep(parser.value(sweepOpt));
  if (parser.isSet(runOpt)) QTimer::singleShot(0, window, [window] { window->startRun(); });
  if (parser.isSet(screenshotOpt)) {
    const QString file = parser.value(screenshotOpt);
    QTimer::singleShot(parser.value(delayOpt).toInt(), window, [window, file] {
      window->grab().save(file);
      // exit(), not quit(): Qt 6's quit() closes the windows first, and the main window asks
      // before cancelling runs that still train — a question nobody answers here. The window's
      // destructor cancels them (an in-process run after its step; a distributed one through
      // SIGUSR1 to its mpirun).
      QCoreApplication::exit(0);
    });
  }
  const int rc = QApplication::exec();
  // While the windows below cancel their runs: a stop signal now quits at once, as before the
  // window was there, except a repeat of the one that ended the loop.
  stopNotifier.reset();
  if (stopFd >= 0) {
    struct sigaction sa = {};
    sa.sa_handler = stopSignal != 0 ? afterStopHandler : SIG_DFL;
    sigemptyset(&sa.sa_mask);
    for (int sig : {SIGINT, SIGTERM, SIGHUP})
      if (sigismember(&stop, sig)) sigaction(sig, &sa, nullptr);
  }
  // The windows still open (exit() from --screenshot, a stop signal) are deleted here: their
  // destructors cancel what still trains.
  // (Collected first: deleting a window deletes its menus, which are top-level widgets too.)
  QList<tb::ui::MainWindow*> open;
  for (QWidget* w : QApplication::topLevelWidgets())
    if (auto* main_window = qobject_cast<tb::ui::MainWindow*>(w)) open.append(main_window);
  if (stopSignal != 0)
    for (auto* w : open)
      w->saveLayout();
  qDeleteAll(open);
  return rc;
}
