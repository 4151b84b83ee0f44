// The Sweeps tab: a real 2 x 2 x 2 sweep (trainbench-cli sweep) read back by SweepView, whose
// learning-rate curves must equal what the stored metrics say — computed here from each run's
// stored eval.loss series and stored config, without the sweep's own table — and the sweep's
// report.
#include <QtTest>

#include <QApplication>
#include <QComboBox>
#include <QLabel>
#include <QMap>
#include <QMessageBox>
#include <QProcess>
#include <QPushButton>
#include <QRegularExpression>
#include <QSettings>
#include <QSignalSpy>
#include <QStandardPaths>
#include <QTableWidget>
#include <QTemporaryDir>
#include <QTimer>
#include <QXmlStreamReader>

#include <algorithm>
#include <cmath>
#include <map>

#include <qcustomplot.h>

#include "engine/api/workbench_api.h"
#include "tests/ui/plot_test_util.h"
#include "tests/ui/ui_test_util.h"
#include "ui/main_window/main_window.h"
#include "ui/report/sweep_report.h"
#include "ui/run_config/config_editor.h"
#include "ui/runs/runs_model.h"
#include "ui/sweeps/sweep_editor.h"
#include "ui/sweeps/sweep_view.h"

using namespace tb;

namespace {

// "section.key" -> value text of a TOML config as the engine writes it (one key per line).
QMap<QString, QString> flatten(const QString& toml) {
  QMap<QString, QString> out;
  QString section;
  for (const QString& raw : toml.split(QLatin1Char('\n'))) {
    const QString line = raw.trimmed();
    if (line.startsWith(QLatin1Char('['))) {
      section = line.mid(1, line.indexOf(QLatin1Char(']')) - 1);
    } else if (const int eq = line.indexOf(QLatin1Char('=')); eq > 0) {
      QString v = line.mid(eq + 1).trimmed();
      v.remove(QLatin1Char('"'));
      out[section + QLatin1Char('.') + line.left(eq).trimmed()] = v;
    }
  }
  return out;
}

}  // namespace

class TestSweepView : public QObject {
  Q_OBJECT

 private slots:
  // Each test opens its windows as on a first start: no layout saved by an earlier one, or by an
  // earlier run of this program (in the test settings, not the user's).
  void init() { QSettings().clear(); }

  void initTestCase() {
    QStandardPaths::setTestModeEnabled(true);
    QVERIFY(m_dir.isValid());
    m_db = m_dir.filePath(QStringLiteral("runs.sqlite"));
    QProcess p;
    p.start(QStringLiteral(TB_CLI_PATH),
            {QStringLiteral("--db"), m_db, QStringLiteral("sweep"),
             QStringLiteral(TB_SOURCE_DIR "/tests/data/sweep_grid.toml"),
             QStringLiteral("--parallel"), QStringLiteral("2")});
    QVERIFY(p.waitForFinished(120000));
    QVERIFY2(p.exitCode() == 0, p.readAllStandardError().constData());
  }

  // The curves against "any lr key" equal, per optimizer and learning rate, the mean over the
  // seeds of each run's smallest stored eval.loss; the band spans the seeds' values.
  void curvesEqualTheStoredMetrics() {
    api::StoreReader store(m_db.toStdString());
    // The oracle: optimizer -> lr -> each run's best eval.loss.
    std::map<QString, std::map<double, std::vector<double>>> want;
    int runs = 0;
    for (const auto& r : store.runs()) {
      if (std::find(r.tags.begin(), r.tags.end(), "sweep:opt-lr") == r.tags.end()) continue;
      ++runs;
      const auto config = flatten(QString::fromStdString(store.config_text(r.id)));
      const QString kind = config.value(QStringLiteral("optimizer.kind"));
      const double lr =
          config
              .value(kind == QLatin1String("muon") ? QStringLiteral("optimizer.muon.lr")
                                                   : QStringLiteral("optimizer.lr"))
              .toDouble();
      const auto s = store.series(r.id, "eval.loss");
      QVERIFY(!s.value.empty());
      want[kind][lr].push_back(*std::min_element(s.value.begin(), s.value.end()));
    }
    QCOMPARE(runs, 8);

    ui::SweepView view;
    view.resize(1400, 800);
    view.setStore(&store);
    QCOMPARE(view.sweepName(), QStringLiteral("opt-lr"));
    QVERIFY(view.xKeys().contains(ui::kAnyLearningRate));
    QVERIFY(view.setXKey(ui::kAnyLearningRate));
    const auto& curves = view.curves();
    QCOMPARE(curves.size(), std::size_t{2});
    for (const auto& c : curves) {
      QVERIFY2(want.count(c.name), qPrintable(c.name));
      const auto& byLr = want.at(c.name);
      QCOMPARE(c.x.size(), byLr.size());
      std::size_t i = 0;
      for (const auto& [lr, values] : byLr) {
        double sum = 0;
        for (double v : values)
          sum += v;
        QCOMPARE(values.size(), std::size_t{2});  // two seeds
        QVERIFY(std::abs(c.x[i] - lr) <= 1e-12 * lr);
        QVERIFY(std::abs(c.mean[i] - sum / 2) <= 1e-12);
        QCOMPARE(c.low[i], *std::min_element(values.begin(), values.end()));
        QCOMPARE(c.high[i], *std::max_element(values.begin(), values.end()));
        ++i;
      }
      // What is drawn is what was computed: the line graph named after the curve.
      QCPGraph* line = nullptr;
      for (int g = 0; g < view.curvePlot()->graphCount(); ++g)
        if (view.curvePlot()->graph(g)->name() == c.name) line = view.curvePlot()->graph(g);
      QVERIFY(line != nullptr);
      QCOMPARE(line->data()->size(), static_cast<int>(c.x.size()));
      i = 0;
      for (auto it = line->data()->constBegin(); it != line->data()->constEnd(); ++it, ++i) {
        QCOMPARE(it->key, c.x[i]);
        QCOMPARE(it->value, c.mean[i]);
      }
    }
    // The legend sits where it covers no point (mean or a seed's value) of any curve.
    view.curvePlot()->replot(QCustomPlot::rpImmediateRefresh);
    const QRect legend = view.curvePlot()->legend->outerRect();
    QVERIFY(view.curvePlot()->legend->visible() && !legend.isEmpty());
    for (const auto& c : curves)
      for (std::size_t k = 0; k < c.x.size(); ++k)
        for (const double v : {c.mean[k], c.low[k], c.high[k]}) {
          const QPoint at(static_cast<int>(view.curvePlot()->xAxis->coordToPixel(c.x[k])),
                          static_cast<int>(view.curvePlot()->yAxis->coordToPixel(v)));
          QVERIFY2(
              !legend.contains(at),
              qPrintable(QStringLiteral("%1 at x %2 under the legend").arg(c.name).arg(c.x[k])));
        }
    // One parallel-coordinates line per finished trial.
    QCOMPARE(view.parallelPlot()->plottableCount(), 8);

    // The learning rates (1e-3 .. 2e-2) on a log axis: wide, labels at 1, 2 and 5 times the
    // powers of ten (QCustomPlot's log ticker labels 0.001 and 0.01 alone there); narrower,
    // fewer labels, never touching.
    view.show();
    QVERIFY(QTest::qWaitForWindowExposed(&view));
    QCPAxis* x = view.curvePlot()->xAxis;
    QCOMPARE(x->scaleType(), QCPAxis::stLogarithmic);
    int wideLabels = 0;
    for (const int width : {1400, 700, 420, 260}) {
      view.resize(width, 700);
      QTest::qWait(50);
      view.curvePlot()->replot(QCustomPlot::rpImmediateRefresh);  // the fitted tick count
      const QVector<double> ticks = x->tickVector();
      QVERIFY2(ticks.size() >= 2, qPrintable(QString::number(width)));
      QVERIFY2(
          test::crowdedTickLabels(x).isEmpty(),
          qPrintable(QStringLiteral("at %1 px: %2").arg(width).arg(test::crowdedTickLabels(x))));
      // The parallel plot: every title and value label inside the plot, no two titles touching
      // (they take two rows where one is too narrow for them, and are shortened where two are).
      QCustomPlot* parallel = view.parallelPlot();
      parallel->replot(QCustomPlot::rpImmediateRefresh);
      QList<QRectF> titles;
      const QStringList wholeTitles = {QStringLiteral("kind"), QStringLiteral("muon.lr"),
                                       QStringLiteral("lr"), QStringLiteral("eval.loss")};
      for (int i = 0; i < parallel->itemCount(); ++i) {
        auto* label = qobject_cast<QCPItemText*>(parallel->item(i));
        if (label == nullptr) continue;
        const QRectF r(label->topLeft->pixelPosition(), label->bottomRight->pixelPosition());
        QVERIFY2(QRectF(parallel->rect()).contains(r),
                 qPrintable(QStringLiteral("at %1 px: \"%2\" outside the %3 px plot")
                                .arg(width)
                                .arg(label->text())
                                .arg(parallel->width())));
        if (!label->font().bold()) continue;
        // A title too wide for its place is shortened from the left, its key's last part kept.
        const QString shown = label->text();
        QVERIFY2(wholeTitles.contains(shown) ||
                     (shown.startsWith(QChar(0x2026)) &&
                      std::any_of(wholeTitles.begin(), wholeTitles.end(),
                                  [&](const QString& t) { return t.endsWith(shown.mid(1)); })),
                 qPrintable(QStringLiteral("at %1 px: title \"%2\"").arg(width).arg(shown)));
        for (const QRectF& other : titles)
          QVERIFY2(!other.adjusted(-4, 0, 4, 0).intersects(r),  // with a visible gap
                   qPrintable(QStringLiteral("at %1 px: title \"%2\" touches another")
                                  .arg(width)
                                  .arg(label->text())));
        titles << r;
      }
      QCOMPARE(titles.size(), 4);  // kind, muon.lr, lr ("optimizer." dropped) and eval.loss
      if (width == 1400) {
        wideLabels = static_cast<int>(ticks.size());
        for (const double label : {0.002, 0.005, 0.01})
          QVERIFY2(std::any_of(ticks.begin(), ticks.end(),
                               [&](double t) { return std::abs(t - label) < 1e-12; }),
                   qPrintable(QString::number(label)));
      } else {
        QVERIFY(ticks.size() <= wideLabels);
      }
    }

    // The points table leads with the best point: the smallest mean of the oracle.
    double best = 1e300;
    for (const auto& [kind, byLr] : want)
      for (const auto& [lr, values] : byLr)
        best = std::min(best, (values[0] + values[1]) / 2);
    QCOMPARE(view.pointsTable()->rowCount(), 4);
    const QString first = view.pointsTable()->item(0, 1)->text();
    QVERIFY2(std::abs(first.section(QLatin1Char(' '), 0, 0).toDouble() - best) <= 1e-4 * best,
             qPrintable(first));

    // Steps to a target every run reaches at its first evaluation (step 10).
    view.setTarget(100.0);
    QCOMPARE(view.trialsTable()->rowCount(), 8);
    for (int r = 0; r < 8; ++r) {
      QCOMPARE(view.trialsTable()->item(r, 6)->text(), QStringLiteral("10"));
      // Its time in three significant digits: these trials reach it in well under 0.05 s, which
      // one decimal showed as "0.0".
      const QString seconds = view.trialsTable()->item(r, 7)->text();
      QVERIFY2(seconds.toDouble() > 0 || seconds == QStringLiteral("0"), qPrintable(seconds));
    }
    // One no run reaches says so, as Compare does (it was left blank).
    view.setTarget(-1.0);
    for (int r = 0; r < 8; ++r)
      QCOMPARE(view.trialsTable()->item(r, 6)->text(), QStringLiteral("not reached"));

    // "Open best config" hands the best trial's config to whoever listens.
    QSignalSpy opened(&view, &ui::SweepView::openConfig);
    QPushButton* button = nullptr;
    for (auto* b : view.findChildren<QPushButton*>())
      if (b->text() == QStringLiteral("Open best config")) button = b;
    QVERIFY(button != nullptr);
    button->click();
    QCOMPARE(opened.count(), 1);
    QVERIFY(opened.at(0).at(0).toString().contains(QStringLiteral("opt-lr p")));
  }

  // The sweep report is well-formed XHTML whose every plot is an embedded PNG that decodes to
  // the drawn size — the learning-rate curve and the parallel coordinates among them — with the
  // points, every trial and the best configs; its PDF is written.
  // Points early stopping stopped are drawn too, at their seeds' mean at the rung, as hollow
  // markers in their group's colour: a group whose points all stopped drew no line at all.
  void stoppedPointsAreDrawnAtTheirRung() {
    QFile grid(QStringLiteral(TB_SOURCE_DIR "/tests/data/sweep_grid.toml"));
    QVERIFY(grid.open(QIODevice::ReadOnly));
    QString text = QString::fromUtf8(grid.readAll());
    text.replace(QStringLiteral("name = \"opt-lr\""), QStringLiteral("name = \"opt-lr-es\""));
    text += QStringLiteral(
        "\n[sweep.early_stopping]\nmethod = \"successive_halving\"\nsteps = [10]\n"
        "reduction_factor = 4\n");
    QTemporaryDir own;  // a store of its own: the other tests count the shared one's sweeps
    const QString db = own.filePath(QStringLiteral("runs.sqlite"));
    const QString config = own.filePath(QStringLiteral("es.toml"));
    QFile out(config);
    QVERIFY(out.open(QIODevice::WriteOnly));
    out.write(text.toUtf8());
    out.close();
    QProcess p;
    p.start(QStringLiteral(TB_CLI_PATH),
            {QStringLiteral("--db"), db, QStringLiteral("sweep"), config,
             QStringLiteral("--parallel"), QStringLiteral("2")});
    QVERIFY(p.waitForFinished(120000));
    QVERIFY2(p.exitCode() == 0, p.readAllStandardError().constData());
    api::StoreReader store(db.toStdString());
    const api::SweepResult result = store.sweep("opt-lr-es");
    std::map<double, double> want;  // mean at the rung of each stopped point, by its x
    int stopped = 0;
    for (const auto& pt : result.points)
      if (pt.stopped && pt.stopped_value) ++stopped;
    QVERIFY(stopped >= 2);
    const auto curves = ui::sweepCurves(result, ui::kAnyLearningRate);
    int drawn = 0;
    for (const auto& c : curves) {
      if (!c.stopped) continue;
      drawn += static_cast<int>(c.x.size());
      QCOMPARE(c.low, c.mean);
      QCOMPARE(c.high, c.mean);
    }
    QCOMPARE(drawn, stopped);
    ui::SweepView view;
    view.resize(1400, 800);
    view.setStore(&store);
    view.showSweep(QStringLiteral("opt-lr-es"));
    QVERIFY(view.setXKey(ui::kAnyLearningRate));
    int hollow = 0;
    for (int g = 0; g < view.curvePlot()->graphCount(); ++g)
      if (view.curvePlot()->graph(g)->name().contains(QStringLiteral("stopped early")))
        hollow += view.curvePlot()->graph(g)->data()->size();
    QCOMPARE(hollow, stopped);
  }

  void reportParsesAndEmbedsItsPlots() {
    api::StoreReader store(m_db.toStdString());
    ui::SweepReportOptions options;
    const ui::Report report = ui::buildSweepReport(store, QStringLiteral("opt-lr"), options);
    QXmlStreamReader xml(report.html);
    int images = 0;
    int points = 0;
    int trials = 0;
    int pres = 0;
    while (!xml.atEnd()) {
      xml.readNext();
      if (!xml.isStartElement()) continue;
      const auto attrs = xml.attributes();
      if (xml.name() == QLatin1String("img")) {
        const QString src = attrs.value(QStringLiteral("src")).toString();
        QVERIFY2(src.startsWith(QStringLiteral("data:image/png;base64,")),
                 qPrintable(src.left(40)));
        QImage img;
        QVERIFY(img.loadFromData(QByteArray::fromBase64(src.mid(22).toLatin1()), "PNG"));
        QCOMPARE(img.size(), QSize(options.plotWidth, options.plotHeight));
        ++images;
      } else if (xml.name() == QLatin1String("tr")) {
        points += attrs.value(QStringLiteral("class")) == QLatin1String("point") ? 1 : 0;
        trials += attrs.value(QStringLiteral("class")) == QLatin1String("trial") ? 1 : 0;
      } else if (xml.name() == QLatin1String("pre")) {
        ++pres;
      }
    }
    QVERIFY2(!xml.hasError(), qPrintable(xml.errorString()));
    QCOMPARE(images, static_cast<int>(report.images.size()));
    QVERIFY(images >= 2);
    QVERIFY(report.imageTitles.first().contains(ui::kAnyLearningRate));
    QVERIFY(report.imageTitles.last().startsWith(QStringLiteral("parallel coordinates")));
    QCOMPARE(points, 4);
    QCOMPARE(trials, 8);
    QCOMPARE(pres, 3);  // the three best points' configs
    const QString pdf = m_dir.filePath(QStringLiteral("sweep.pdf"));
    QCOMPARE(ui::writeReport(report, pdf), QString());
    QFile f(pdf);
    QVERIFY(f.open(QIODevice::ReadOnly));
    QVERIFY(f.read(5) == "%PDF-");
    try {
      (void)ui::buildSweepReport(store, QStringLiteral("nope"));
      QFAIL("a report of an unknown sweep was built");
    } catch (const std::exception& e) {
      QVERIFY2(
          QString::fromUtf8(e.what()).contains(QStringLiteral("no sweep 'nope' (it has: opt-lr)")),
          e.what());
    }
  }

  // The runs table knows each run's sweep and point, and shows one sweep's runs on demand.
  void runsTableFiltersBySweep() {
    ui::MainWindow w(m_db);
    ui::RunsView* view = w.runsView();
    QAbstractItemModel* shown = view->table()->model();
    const int all = shown->rowCount();
    QCOMPARE(all, 8);
    // The sweep column: the sweep's name and the run's point.
    QVERIFY(QRegularExpression(QStringLiteral("^opt-lr p[0-3]$"))
                .match(shown->data(shown->index(0, ui::RunsModel::Sweep)).toString())
                .hasMatch());
    auto* box = view->findChild<QComboBox*>(QStringLiteral("runsSweep"));
    QVERIFY(box != nullptr);
    QCOMPARE(box->count(), 2);  // all sweeps, opt-lr
    view->setSweepFilter(QStringLiteral("opt-lr"));
    QCOMPARE(box->currentData().toString(), QStringLiteral("opt-lr"));
    QCOMPARE(shown->rowCount(), 8);
    view->setSweepFilter(QStringLiteral("other"));  // unknown: every run
    QCOMPARE(box->currentIndex(), 0);
    QCOMPARE(shown->rowCount(), all);
    view->filter()->setSweep(QStringLiteral("opt"));  // a prefix is not the sweep
    QCOMPARE(shown->rowCount(), 0);
    view->filter()->setSweep(QString());
  }

  // The sweep editor writes the [sweep] its form says, checks it against the config as typed
  // (errors name the key), and runs it: the sweep lands in the store with its runs.
  void editorChecksAndRunsASweep() {
    QTemporaryDir dir;
    const QString db = dir.filePath(QStringLiteral("runs.sqlite"));
    ui::MainWindow w(db);
    w.setCliPath(QStringLiteral(TB_CLI_PATH));
    QVERIFY(w.configEditor()->setToml(test::blobsConfig(20)));
    ui::SweepEditor* e = w.sweepEditor();
    QVERIFY(e != nullptr);
    e->setName(QStringLiteral("gui-sweep"));
    e->clearParameters();
    // No key yet: nothing to run, and a hint in the normal colour rather than an error in red.
    QCOMPARE(e->check(), -1);
    auto* status = e->findChild<QLabel*>(QStringLiteral("sweepStatus"));
    QVERIFY(status != nullptr);
    QVERIFY2(
        status->styleSheet().isEmpty() && status->text().startsWith(QStringLiteral("Add a key")),
        qPrintable(status->text()));
    e->addParameter(QStringLiteral("optimizer.lr"), QStringLiteral("0.01, 0.02"));
    e->addParameter(QStringLiteral("optimizer.kind"), QStringLiteral("adamw, muon"));
    e->setPlan(QStringLiteral("grid"), 1, QStringLiteral("3"), QStringLiteral("eval.accuracy"),
               QStringLiteral("max"));
    // optimizer.lr does not apply to the Muon points: 2 AdamW points + 1 Muon point, 1 seed.
    QCOMPARE(e->check(), 3);
    QVERIFY2(e->sweepToml().contains(QStringLiteral("\"optimizer.kind\" = [\"adamw\", \"muon\"]")),
             qPrintable(e->sweepToml()));
    e->setEarlyStopping(QStringLiteral("median"), QString());
    QCOMPARE(e->check(), -1);
    QVERIFY2(e->errorText().contains(QStringLiteral("sweep.early_stopping.steps")),
             qPrintable(e->errorText()));
    e->setEarlyStopping(QStringLiteral("none"), QString());
    e->addParameter(QStringLiteral("optimizer.lrr"), QStringLiteral("1"));
    QCOMPARE(e->check(), -1);
    QVERIFY2(e->errorText().contains(QStringLiteral("optimizer.lrr")), qPrintable(e->errorText()));
    e->parameters()->removeRow(2);
    QCOMPARE(e->check(), 3);

    e->setSlots(2, QStringLiteral("none"));
    auto* run = e->findChild<QPushButton*>(QStringLiteral("runSweepButton"));
    QVERIFY(run != nullptr && run->isEnabled());
    run->click();
    QVERIFY(w.sweepRunning());
    QTRY_VERIFY_WITH_TIMEOUT(!w.sweepRunning(), 120000);
    api::StoreReader store(db.toStdString());
    const auto sweep = store.sweep("gui-sweep");
    QCOMPARE(sweep.status, std::string("finished"));
    QCOMPARE(sweep.trials.size(), std::size_t{3});
    for (const auto& t : sweep.trials)
      QCOMPARE(t.status, std::string("finished"));
    QCOMPARE(w.sweepView()->sweepName(), QStringLiteral("gui-sweep"));
  }

  // Closing the window while its sweep runs asks, then stops the sweep as Ctrl-C does: its
  // trials stop after their step with a checkpoint, and the window — which answers meanwhile —
  // closes once the sweep has ended. It used to kill the sweep process, its trials training on.
  void closingTheWindowStopsItsSweep() {
    const QString db = m_dir.filePath(QStringLiteral("close.sqlite"));
    auto* w = new ui::MainWindow(db);
    w->setAttribute(Qt::WA_DeleteOnClose, false);
    w->setCliPath(QStringLiteral(TB_CLI_PATH));
    w->show();
    QVERIFY(w->configEditor()->setToml(test::blobsConfig(2000000)));
    ui::SweepEditor* e = w->sweepEditor();
    e->setName(QStringLiteral("closed"));
    e->clearParameters();
    e->addParameter(QStringLiteral("optimizer.lr"), QStringLiteral("0.01, 0.02"));
    e->setPlan(QStringLiteral("grid"), 1, QStringLiteral("3"), QStringLiteral("eval.accuracy"),
               QStringLiteral("max"));
    e->setEarlyStopping(QStringLiteral("none"), QString());
    e->setSlots(2, QStringLiteral("none"));
    QCOMPARE(e->check(), 2);
    e->findChild<QPushButton*>(QStringLiteral("runSweepButton"))->click();
    QVERIFY(w->sweepRunning());
    QTRY_VERIFY_WITH_TIMEOUT(test::runsTrainingPast(db, 50) == 2, 60000);
    test::answerYesSoon();  // "Sweep closed is running. Stop it and quit?"
    w->close();
    QVERIFY(w->isVisible());  // until the sweep has ended
    QTRY_VERIFY_WITH_TIMEOUT(!w->isVisible(), 60000);
    QVERIFY(!w->sweepRunning());
    int cancelled = 0;
    for (const auto& r : api::StoreReader(db.toStdString()).runs()) {
      QVERIFY2(r.status != "running", qPrintable(QString::fromStdString(r.name)));
      cancelled += r.status == "cancelled";
    }
    QCOMPARE(cancelled, 2);
    delete w;
  }

  // The main window's Sweeps tab and "open the best config" into the editor.
  void mainWindowOpensTheBestConfig() {
    ui::MainWindow w(m_db);
    w.showSweep(QStringLiteral("opt-lr"));
    QCOMPARE(w.currentPage(), static_cast<QWidget*>(w.sweepView()));
    QCOMPARE(w.sweepView()->sweepName(), QStringLiteral("opt-lr"));
    const QString best = w.sweepView()->bestConfig();
    QVERIFY(!best.isEmpty());
    emit w.sweepView()->openConfig(best, QStringLiteral("best"));
    QVERIFY(w.configEditor()->toToml().contains(flatten(best).value(QStringLiteral("run.name"))));
    // A name the store lacks (trainbench --sweep NAME mistyped): no sweep shown, and the tab says
    // so — it showed the first sweep in its box beside "no sweep in this store".
    w.showSweep(QStringLiteral("no-such-sweep"));
    QCOMPARE(w.sweepView()->sweepName(), QString());
    QComboBox* box = nullptr;  // the sweep box: the one listing the stored sweeps
    for (auto* b : w.sweepView()->findChildren<QComboBox*>())
      if (b->findData(QStringLiteral("opt-lr")) >= 0) box = b;
    QVERIFY(box);
    QCOMPARE(box->currentIndex(), -1);
    bool said = false;
    for (auto* label : w.sweepView()->findChildren<QLabel*>())
      said = said || label->text() ==
                         QStringLiteral("No sweep 'no-such-sweep' in this store: choose one above");
    QVERIFY(said);
  }

 private:
  QTemporaryDir m_dir;
  QString m_db;
};

QTEST_MAIN(TestSweepView)
#include "tst_sweep_view.moc"
