// Screenshots of the workbench as a user sees it (run under Xvfb by ctest): the main window
// during a run, then the compare view of two runs. Writes PNGs next to the test binary and checks
// that the plot areas are not blank.
#include <QtTest>

#include <QDir>
#include <QDockWidget>
#include <QFile>
#include <QGuiApplication>
#include <QImage>
#include <QPushButton>
#include <QScrollArea>
#include <QScrollBar>
#include <QSet>
#include <QSettings>
#include <QSplitter>
#include <QStandardPaths>
#include <QTabWidget>
#include <QTableWidget>
#include <QTemporaryDir>

#include <qcustomplot.h>

#include "tests/ui/ui_test_util.h"
#include "ui/compare/compare_view.h"
#include "ui/live_plots/metric_plot.h"
#include "ui/live_plots/plots_panel.h"
#include "ui/main_window/main_window.h"
#include "ui/run_config/config_editor.h"
#include "ui/runs/runs_model.h"
#include "ui/sweeps/sweep_editor.h"
#include "ui/sweeps/sweep_view.h"
#include "ui/topology/topology_view.h"

using namespace tb;

namespace {

// Share of pixels that differ from the most common colour, and the number of distinct colours.
QPair<double, int> inkAndColours(const QImage& image) {
  QHash<QRgb, int> counts;
  const QImage img = image.convertToFormat(QImage::Format_RGB32);
  for (int y = 0; y < img.height(); y += 2)
    for (int x = 0; x < img.width(); x += 2)
      ++counts[img.pixel(x, y)];
  int top = 0, total = 0;
  for (auto it = counts.cbegin(); it != counts.cend(); ++it) {
    top = std::max(top, it.value());
    total += it.value();
  }
  return {total ? 1.0 - static_cast<double>(top) / total : 0.0, static_cast<int>(counts.size())};
}

void checkNotBlank(ui::MetricPlot* plot, const char* what) {
  QVERIFY2(plot->hasData(), what);
  plot->replotNow();
  const auto [ink, colours] = inkAndColours(plot->grab().toImage());
  QVERIFY2(
      ink > 0.02,
      qPrintable(
          QStringLiteral("%1: only %2 of the plot is drawn").arg(QLatin1String(what)).arg(ink)));
  QVERIFY2(colours >= 4, what);
}

// A page of the central tabs fits its width: no horizontal scroll bar hides part of it.
void checkFitsWidth(QWidget* page, const char* what) {
  QWidget* w = page;
  while (w && !qobject_cast<QScrollArea*>(w))
    w = w->parentWidget();
  auto* area = qobject_cast<QScrollArea*>(w);
  QVERIFY2(area != nullptr, what);
  while (w && !qobject_cast<QTabWidget*>(w))
    w = w->parentWidget();
  QVERIFY2(w != nullptr, what);
  qobject_cast<QTabWidget*>(w)->setCurrentWidget(area);
  // A window resize and the re-layout it starts take several posted events: wait for them.
  QTRY_VERIFY2(!area->horizontalScrollBar()->isVisible(),
               qPrintable(QStringLiteral("%1 needs %2 px, its tab is %3 px wide")
                              .arg(QLatin1String(what))
                              .arg(area->widget()->minimumSizeHint().width())
                              .arg(area->viewport()->width())));
}

}  // namespace

class TestScreenshots : public QObject {
  Q_OBJECT

 private Q_SLOTS:
  void initTestCase() { QStandardPaths::setTestModeEnabled(true); }
  // Each test opens its windows as on a first start: no layout saved by an earlier one, or by an
  // earlier run of this program.
  void init() { QSettings().clear(); }

  void mainWindowDuringARunAndTheCompareView() {
    QTemporaryDir dir;
    const QString db = dir.filePath(QStringLiteral("runs.sqlite"));
    const QString cfg = dir.filePath(QStringLiteral("run.toml"));
    QVERIFY(test::writeFile(cfg, test::blobsConfig(4000, QStringLiteral("screenshot-adamw"))));
    ui::MainWindow window(db);
    window.resize(1600, 1000);
    QVERIFY(window.openConfig(cfg, true));
    window.show();
    QVERIFY(QTest::qWaitForWindowExposed(&window));
    QVERIFY(window.startRun());
    ui::MetricPlot* loss = window.livePlots()->plots()[ui::PlotsPanel::Loss];
    auto points = [&] {
      std::size_t n = 0;
      for (const auto& [id, c] : loss->curves())
        n = std::max(n, c.raw.size());
      return n;
    };
    QTRY_VERIFY_WITH_TIMEOUT(points() >= 300, 60000);
    QTest::qWait(200);
    const QString out = QStringLiteral(TB_SCREENSHOT_DIR);
    QDir().mkpath(out);
    QVERIFY(window.grab().save(out + QStringLiteral("/main-window-running.png")));
    {
      // The LR preview whole in the config dock, without scrolling it (a tall Sweep page
      // pushed it half out of view).
      QWidget* preview = window.configEditor()->previewPlot();
      QWidget* w = preview;
      while (w && !qobject_cast<QScrollArea*>(w))
        w = w->parentWidget();
      QVERIFY(w != nullptr);
      QWidget* viewport = qobject_cast<QScrollArea*>(w)->viewport();
      const QRect at(preview->mapTo(viewport, QPoint(0, 0)), preview->size());
      QVERIFY2(viewport->rect().contains(at),
               qPrintable(QStringLiteral("preview at y %1..%2, the dock shows 0..%3")
                              .arg(at.top())
                              .arg(at.bottom())
                              .arg(viewport->height())));
    }
    checkNotBlank(loss, "loss plot during the run");
    checkNotBlank(window.livePlots()->plots()[ui::PlotsPanel::StepTime], "step-time plot");
    checkNotBlank(window.livePlots()->plots()[ui::PlotsPanel::LearningRate], "LR plot");
    QTRY_COMPARE_WITH_TIMEOUT(window.activeRuns(), 0, 120000);

    // A second run with Muon, then compare the two.
    QVERIFY(window.configEditor()->setFieldText(QStringLiteral("run.name"),
                                                QStringLiteral("screenshot-lr2")));
    QVERIFY(window.configEditor()->setFieldText(QStringLiteral("optimizer.lr"),
                                                QStringLiteral("0.003")));
    QVERIFY(
        window.configEditor()->setFieldText(QStringLiteral("run.steps"), QStringLiteral("1500")));
    QVERIFY(window.startRun());
    QTRY_COMPARE_WITH_TIMEOUT(window.activeRuns(), 0, 120000);
    window.runsModel()->refresh();
    QCOMPARE(window.runsModel()->rowCount(), 2);
    window.compareRuns({window.runsModel()->run(1).id, window.runsModel()->run(0).id});
    QCOMPARE(window.currentPage(), window.compareView());
    QTest::qWait(200);
    QVERIFY(window.grab().save(out + QStringLiteral("/compare-view.png")));
    checkNotBlank(window.compareView()->plots()->plots()[ui::PlotsPanel::Loss],
                  "compare loss plot");
    QVERIFY(window.compareView()->diffTable()->rowCount() >= 3);  // name, lr, steps
    checkFitsWidth(window.compareView(), "the Compare tab");
    QTRY_COMPARE(window.compareView()->splitter()->orientation(), Qt::Horizontal);
    checkFitsWidth(window.livePlots(), "the Live tab");
    // A laptop's width with every dock still open: the summary goes under the plots (the page
    // scrolls down to it) instead of the page scrolling sideways.
    window.resize(1366, 900);
    checkFitsWidth(window.compareView(), "the Compare tab at 1366 px");
    QTRY_COMPARE(window.compareView()->splitter()->orientation(), Qt::Vertical);
    {
      // The splitter moves: the summary has more than its least height to give the plots.
      QSplitter* split = window.compareView()->splitter();
      QTRY_VERIFY2(split->sizes().value(1) > split->widget(1)->minimumSizeHint().height() + 40,
                   qPrintable(QStringLiteral("summary %1 px, least %2")
                                  .arg(split->sizes().value(1))
                                  .arg(split->widget(1)->minimumSizeHint().height())));
    }
    QVERIFY(window.grab().save(out + QStringLiteral("/compare-view-narrow.png")));
    checkFitsWidth(window.livePlots(), "the Live tab at 1366 px");
    window.resize(1600, 1000);

    // The topology dock with an exclusive plan for two slots.
    window.topologyView()->setPlan(QStringLiteral("exclusive"), 2);
    QWidget* topoDock = window.topologyView();
    while (topoDock && !qobject_cast<QDockWidget*>(topoDock))
      topoDock = topoDock->parentWidget();
    QVERIFY(topoDock != nullptr);
    topoDock->raise();
    QTest::qWait(100);
    const QImage topo = window.topologyView()->grab().toImage();
    QVERIFY(topo.save(out + QStringLiteral("/topology.png")));
    QVERIFY(inkAndColours(topo).second >= 4);
  }

  // First start on a laptop's 1366 x 768 screen (ui.tst_screenshots_laptop runs this under an
  // Xvfb screen of that size): the small docks join the runs table as tabs below it, and the
  // runs table leaves the Live tab room for its three rows of plots, and the config dock shows
  // the LR preview without scrolling.
  void firstStartOnALaptopScreen() {
    const QRect free = QGuiApplication::primaryScreen()->availableGeometry();
    if (free.width() >= 1600 || free.height() >= 900 ||
        QGuiApplication::platformName() == QLatin1String("offscreen"))
      QSKIP("needs a 1366 x 768 X screen (ctest: ui.tst_screenshots_laptop, under Xvfb)");
    QTemporaryDir dir;
    ui::MainWindow window(dir.filePath(QStringLiteral("runs.sqlite")));
    window.show();
    QVERIFY(QTest::qWaitForWindowExposed(&window));
    QTest::qWait(200);
    auto* runsDock = window.findChild<QDockWidget*>(QStringLiteral("runsDock"));
    QVERIFY(runsDock != nullptr);
    QCOMPARE(window.tabifiedDockWidgets(runsDock).size(), 3);  // queue, topology, events
    QWidget* w = window.livePlots();
    while (w && !qobject_cast<QScrollArea*>(w))
      w = w->parentWidget();
    QVERIFY(w != nullptr);
    const int shown = qobject_cast<QScrollArea*>(w)->viewport()->height();
    const int page = qobject_cast<QScrollArea*>(w)->widget()->height();
    QVERIFY2(shown >= page * 9 / 10,
             qPrintable(QStringLiteral("the Live tab shows %1 of its %2 px (runs dock %3 px)")
                            .arg(shown)
                            .arg(page)
                            .arg(runsDock->height())));
    // The LR preview is in sight below the form (the form scrolls inside its tab), not below
    // the fold of the config dock.
    QWidget* preview = window.configEditor()->previewPlot();
    QWidget* area = preview;
    while (area && !qobject_cast<QScrollArea*>(area))
      area = area->parentWidget();
    QVERIFY(area != nullptr);
    const QWidget* seen = qobject_cast<QScrollArea*>(area)->viewport();
    const QRect seenRect(seen->mapTo(&window, QPoint()), seen->size());
    const QRect previewRect(preview->mapTo(&window, QPoint()), preview->size());
    QVERIFY2(seenRect.contains(previewRect),
             qPrintable(QStringLiteral("the LR preview (y %1 to %2) lies outside the dock's "
                                       "sight (y %3 to %4)")
                            .arg(previewRect.top())
                            .arg(previewRect.bottom())
                            .arg(seenRect.top())
                            .arg(seenRect.bottom())));
    const QString out = QStringLiteral(TB_SCREENSHOT_DIR);
    QDir().mkpath(out);
    QVERIFY(window.grab().save(out + QStringLiteral("/first-start-laptop.png")));
  }

  // The sweep editor beside the config form, and the Sweeps tab while the sweep runs and after.
  void sweepEditorAndSweepsTab() {
    QTemporaryDir dir;
    const QString db = dir.filePath(QStringLiteral("runs.sqlite"));
    ui::MainWindow window(db);
    window.resize(1600, 1000);
    window.setCliPath(QStringLiteral(TB_CLI_PATH));
    QVERIFY(window.configEditor()->setToml(test::blobsConfig(60, QStringLiteral("blobs"))));
    window.show();
    QVERIFY(QTest::qWaitForWindowExposed(&window));
    ui::SweepEditor* e = window.sweepEditor();
    e->setName(QStringLiteral("screenshot-sweep"));
    e->clearParameters();
    e->addParameter(QStringLiteral("optimizer.kind"), QStringLiteral("muon, adamw"));
    e->addParameter(QStringLiteral("optimizer.muon.lr"), QStringLiteral("0.005, 0.01, 0.02, 0.05"));
    e->addParameter(QStringLiteral("optimizer.lr"), QStringLiteral("1e-3, 3e-3, 1e-2, 3e-2"));
    e->setPlan(QStringLiteral("grid"), 1, QStringLiteral("1, 2"), QStringLiteral("eval.loss"),
               QStringLiteral("min"));
    e->setEarlyStopping(QStringLiteral("successive_halving"), QStringLiteral("20"));
    e->setSlots(2, QStringLiteral("none"));
    QCOMPARE(e->check(), 16);
    window.configEditor()->showPage(e);
    QTest::qWait(50);
    {
      // The Sweep page scrolls up and down in its tab, never cut at the right.
      QWidget* w = e;
      while (w && !qobject_cast<QScrollArea*>(w))
        w = w->parentWidget();
      QVERIFY(w != nullptr);
      QVERIFY2(qobject_cast<QScrollArea*>(w)->viewport()->width() >= e->minimumSizeHint().width(),
               qPrintable(QStringLiteral("the Sweep page needs %1 px, has %2")
                              .arg(e->minimumSizeHint().width())
                              .arg(qobject_cast<QScrollArea*>(w)->viewport()->width())));
    }
    QTest::qWait(100);
    const QString out = QStringLiteral(TB_SCREENSHOT_DIR);
    QVERIFY(window.grab().save(out + QStringLiteral("/sweep-editor.png")));
    e->findChild<QPushButton*>(QStringLiteral("runSweepButton"))->click();
    QTRY_VERIFY_WITH_TIMEOUT(!window.sweepRunning(), 180000);
    QTest::qWait(700);
    QCOMPARE(window.sweepView()->sweepName(), QStringLiteral("screenshot-sweep"));
    QVERIFY(window.grab().save(out + QStringLiteral("/sweeps-tab.png")));
    QVERIFY(inkAndColours(window.sweepView()->curvePlot()->grab().toImage()).second >= 3);
    checkFitsWidth(window.sweepView(), "the Sweeps tab");
    window.resize(1366, 900);
    checkFitsWidth(window.sweepView(), "the Sweeps tab at 1366 px");
    QVERIFY(window.grab().save(out + QStringLiteral("/sweeps-tab-narrow.png")));
  }
};

QTEST_MAIN(TestScreenshots)
#include "tst_screenshots.moc"
