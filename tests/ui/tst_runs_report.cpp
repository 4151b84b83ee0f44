// The runs table over a store that another process writes, the compare view's config diff, and
// the HTML/PDF report: well-formed, one row per selected run, user text escaped.
#include <QAbstractTextDocumentLayout>
#include <QtTest>

#include <QDir>
#include <QDirIterator>
#include <QDockWidget>
#include <QElapsedTimer>
#include <QFile>
#include <QFileInfo>
#include <QHeaderView>
#include <QKeyEvent>
#include <QLineEdit>
#include <QMessageBox>
#include <QPointer>
#include <QProcess>
#include <QPushButton>
#include <QRegularExpression>
#include <QScreen>
#include <QSet>
#include <QSettings>
#include <QSplitter>
#include <QStandardPaths>
#include <QTableWidget>
#include <QTemporaryDir>
#include <QTextBlock>
#include <QTextCursor>
#include <QTextDocument>
#include <QTextLayout>
#include <QTextTable>
#include <QXmlStreamReader>

#include <sys/resource.h>

#include <algorithm>
#include <cmath>
#include <csignal>
#include <iterator>
#include <map>
#include <numeric>
#include <set>

#include <qcustomplot.h>

#include "engine/api/sweep_api.h"
#include "engine/api/workbench_api.h"
#include "engine/store/run_store.h"
#include "tests/engine/test_util.h"
#include "tests/ui/plot_test_util.h"
#include "tests/ui/ui_test_util.h"
#include "ui/compare/compare_view.h"
#include "ui/live_plots/metric_plot.h"
#include "ui/live_plots/plots_panel.h"
#include "ui/main_window/main_window.h"
#include "ui/report/report.h"
#include "ui/run_config/config_editor.h"
#include "ui/runs/left_running.h"
#include "ui/runs/runs_model.h"
#include "ui/sweeps/sweep_editor.h"

using namespace tb;

namespace {

qint64 train(const QString& db, const QString& config) {
  api::TrainRequest req;
  req.config_text = config.toStdString();
  req.db_path = db.toStdString();
  const auto out = api::start_training(req, {}, {});
  return out.status == "finished" ? out.run_id : -1;
}

}  // namespace

// The first value of `table` its column cuts ("'finished' in 40 px"), "" when every one reads
// whole.
static QString firstCutValue(const QTableWidget* table) {
  for (int r = 0; r < table->rowCount(); ++r)
    for (int c = 0; c < table->columnCount(); ++c) {
      const QString text = table->item(r, c)->text();
      if (table->fontMetrics().horizontalAdvance(text) + 6 > table->columnWidth(c))
        return QStringLiteral("'%1' in %2 px").arg(text).arg(table->columnWidth(c));
    }
  return {};
}

class TestRunsReport : public QObject {
  Q_OBJECT

  // A logged step `s` at wall time s * dt with `values`, as a run's metric callback sends it.
  static api::StepMetrics loggedStep(std::int64_t s, double dt,
                                     std::vector<std::pair<std::string, double>> values) {
    api::StepMetrics m;
    m.step = s;
    m.wall_s = dt * static_cast<double>(s);
    m.values = std::move(values);
    return m;
  }

 private Q_SLOTS:
  void initTestCase() { QStandardPaths::setTestModeEnabled(true); }
  // Each test opens its windows as on a first start: no layout saved by an earlier one, or by an
  // earlier run of this program.
  void init() { QSettings().clear(); }

  void liveRedrawsKeepToTheirShareOfTheMachine() {
    // A plot's redraws of new points take at most 0.3 % of the machine's CPU time, and come at
    // most 10 times a second: on 2 CPUs a 3 ms redraw is drawn twice a second.
    using P = ui::MetricPlot;
    QCOMPARE(P::liveRedrawIntervalMs(0.0, 2), 100);
    QCOMPARE(P::liveRedrawIntervalMs(0.5, 2), 100);
    QCOMPARE(P::liveRedrawIntervalMs(3.0, 2), 500);
    QCOMPARE(P::liveRedrawIntervalMs(3.0, 16), 100);
    QCOMPARE(P::liveRedrawIntervalMs(6.0, 8), 250);
    QCOMPARE(P::liveRedrawIntervalMs(30.0, 2), 1000);  // never more than a second behind
    QCOMPARE(P::liveRedrawIntervalMs(1.5, 0), 500);    // an unknown CPU count counts as one
    // A shown plot fed 100 times a second redraws no more often than its interval allows, and
    // measures what its redraws cost.
    ui::MetricPlot plot(QStringLiteral("loss"), QStringLiteral("loss"));
    plot.resize(600, 300);
    plot.show();
    QVERIFY(QTest::qWaitForWindowExposed(&plot));
    plot.ensureCurve(QStringLiteral("a"), QStringLiteral("a"), Qt::blue);
    int redraws = 0;
    connect(plot.plot(), &QCustomPlot::afterReplot, this, [&redraws] { ++redraws; });
    QElapsedTimer clock;
    clock.start();
    double step = 0;
    while (clock.elapsed() < 1000) {
      plot.append(QStringLiteral("a"), {step}, {step}, {std::sin(step)});
      step += 1;
      QTest::qWait(10);
    }
    QVERIFY2(redraws >= 1 && redraws <= 12, qPrintable(QString::number(redraws)));
    QVERIFY(plot.lastRedrawMs() > 0.0);
  }

  void stepTimesAreScaledToTheBulkNotToTheWarmUpStep() {
    // The first step of a run (kernel compilation, first allocations) took 25 ms, the others
    // ~1 ms: the step-time plot's y range is scaled to the steps, the loss plot keeps its
    // first (largest) value.
    ui::PlotsPanel panel;
    panel.resize(1200, 800);
    panel.addRun(1, QStringLiteral("run"), ui::runColor(0));
    std::vector<api::StepMetrics> steps;
    for (std::int64_t s = 1; s <= 1000; ++s) {
      const double warm = s == 1 ? 20.0 : 1.0;
      steps.push_back(loggedStep(s, 0.001,
                                 {{"loss", 2.0 / static_cast<double>(s)},
                                  {"time.data_ms", 0.05},
                                  {"time.forward_ms", 0.3 * warm},
                                  {"time.backward_ms", 0.4 * warm},
                                  {"time.optimizer_ms", 0.2 + 0.01 * static_cast<double>(s % 7)}}));
    }
    panel.appendSteps(1, steps);
    panel.replotAll();
    const QCPRange time = panel.plots()[ui::PlotsPanel::StepTime]->plot()->yAxis->range();
    QVERIFY2(time.upper > 0.95 && time.upper < 1.5, qPrintable(QString::number(time.upper)));
    const QCPRange loss = panel.plots()[ui::PlotsPanel::Loss]->plot()->yAxis->range();
    QVERIFY2(loss.upper >= 2.0, qPrintable(QString::number(loss.upper)));
  }

  void noPdfPageIsLeftBlank() {
    // A two-run report's config diff ended at the foot of page 2 and page 3 came out blank: the
    // table's bottom margin went onto the next page, and the plots' page break then began
    // another. Tables of every length up to two pages, each followed by the plots' break.
    auto blank = [](const QImage& page) {
      for (int y = 0; y < page.height(); ++y)
        for (int x = 0; x < page.width(); ++x)
          if (qGray(page.pixel(x, y)) < 200) return false;
      return true;
    };
    for (int rows = 20; rows <= 70; ++rows) {
      ui::Report report;
      QString html = ui::reportHtmlHead(QStringLiteral("pages")) +
                     QStringLiteral("<h2>Config differences</h2>\n<table class=\"diff\">\n");
      for (int i = 0; i < rows; ++i)
        html += QStringLiteral("<tr><td>optimizer.key_%1</td><td>%1</td><td>-</td></tr>\n").arg(i);
      html += QStringLiteral("</table>\n") + ui::pdfPageBreak() +
              QStringLiteral("<h2>Plots</h2>\n<p>a plot</p>\n</body>\n</html>\n");
      report.htmlWithResources = html;
      const QList<QImage> pages = ui::pdfPageImages(report, 0.25);
      for (int p = 0; p < pages.size(); ++p)
        QVERIFY2(!blank(pages[p]), qPrintable(QStringLiteral("%1 rows: page %2 of %3 is blank")
                                                  .arg(rows)
                                                  .arg(p + 1)
                                                  .arg(pages.size())));
    }
  }

  void noPdfPageEndsWithAHeadingAndLongTablesRepeatTheirHeader() {
    // A report's "Config differences" heading stood alone at a page's foot, its table on the next
    // page, and a diff longer than a page went on without its header row. Paragraphs of every
    // count put the heading at each height of the page; the diff is two pages long.
    for (int lines = 20; lines <= 45; ++lines) {
      ui::Report report;
      QString html = ui::reportHtmlHead(QStringLiteral("pages"));
      for (int i = 0; i < lines; ++i)
        html += QStringLiteral("<p>line %1</p>\n").arg(i);
      html += QStringLiteral(
          "<h2>Config differences</h2>\n<table class=\"diff\">\n"
          "<thead><tr><th>key</th><th>run 1</th></tr></thead>\n");
      for (int i = 0; i < 90; ++i)
        html += QStringLiteral("<tr><td>optimizer.key_%1</td><td>%1</td></tr>\n").arg(i);
      html += QStringLiteral("</table>\n");
      for (int i = 0; i < lines; ++i)
        html += QStringLiteral("<p>after %1</p>\n").arg(i);
      html += QStringLiteral(
          "<h2>Configs</h2>\n<h3>run 1</h3>\n<pre>a = 1\nb = 2\nc = 3\nd = 4</pre>\n</body>\n"
          "</html>\n");
      report.htmlWithResources = html;
      const auto doc = ui::pdfDocument(report);
      const double pageHeight = doc->pageSize().height();
      auto pageOf = [&](const QTextBlock& b) {
        return static_cast<int>(doc->documentLayout()->blockBoundingRect(b).top() / pageHeight);
      };
      // Each heading has its first three lines of text on its page: a table's header and two
      // rows, or three lines of a <pre> (a block each; a row's cells share their top).
      for (QTextBlock b = doc->begin(); b.isValid(); b = b.next()) {
        if (b.blockFormat().headingLevel() == 0) continue;
        // The block after it (text, or a heading right under it) begins on its page, measured
        // here apart from firstLineTops.
        QTextBlock next = b.next();
        while (next.isValid() && doc->documentLayout()->blockBoundingRect(next).height() < 2.0)
          next = next.next();
        QVERIFY(next.isValid());
        QVERIFY2(pageOf(next) == pageOf(b),
                 qPrintable(QStringLiteral("%1 lines: '%2' on page %3, '%4' on page %5")
                                .arg(lines)
                                .arg(b.text())
                                .arg(pageOf(b) + 1)
                                .arg(next.text())
                                .arg(pageOf(next) + 1)));
        if (next.blockFormat().headingLevel() > 0) continue;  // that heading's lines follow
        const std::vector<double> tops = ui::firstLineTops(*doc, b, 3);
        QCOMPARE(tops.size(), std::size_t{3});
        for (double top : tops)
          QVERIFY2(static_cast<int>(top / pageHeight) == pageOf(b),
                   qPrintable(QStringLiteral("%1 lines: '%2' on page %3, a line of its text on %4")
                                  .arg(lines)
                                  .arg(b.text())
                                  .arg(pageOf(b) + 1)
                                  .arg(static_cast<int>(top / pageHeight) + 1)));
      }
      QTextTable* table = nullptr;
      for (QTextBlock b = doc->begin(); b.isValid() && !table; b = b.next())
        table = QTextCursor(b).currentTable();
      QVERIFY(table);
      QCOMPARE(table->format().headerRowCount(), 1);
      QVERIFY(doc->pageCount() >= 3);
    }
  }

  void exportReachesItsShortcutFromATextFieldAndQueueingNeedsAValidConfig() {
    QTemporaryDir dir;
    ui::MainWindow window(dir.filePath(QStringLiteral("runs.sqlite")));
    auto* edit = window.configEditor()->findChild<QLineEdit*>();
    QVERIFY(edit != nullptr);
    // A line edit accepts the shortcut-override of keys it uses itself (Ctrl+E is "end of line"
    // on X11), and the window's shortcut then never fires. Ctrl+E is left to Export report;
    // the field keeps its other keys.
    QKeyEvent ctrlE(QEvent::ShortcutOverride, Qt::Key_E, Qt::ControlModifier);
    ctrlE.ignore();
    QApplication::sendEvent(edit, &ctrlE);
    QVERIFY(!ctrlE.isAccepted());
    QKeyEvent ctrlA(QEvent::ShortcutOverride, Qt::Key_A, Qt::ControlModifier);
    ctrlA.ignore();
    QApplication::sendEvent(edit, &ctrlA);
    QVERIFY(ctrlA.isAccepted());
    // Run, Add to queue and Queue Muon + AdamW are offered only for a config that validates.
    const auto enabled = [&](const QString& text) {
      for (auto* b : window.findChildren<QPushButton*>())
        if (b->text() == text) return b->isEnabled();
      return false;
    };
    QVERIFY(window.configEditor()->validateNow());
    QVERIFY(enabled(QStringLiteral("Add to queue")));
    QVERIFY(
        window.configEditor()->setFieldText(QStringLiteral("optimizer.lr"), QStringLiteral("-1")));
    QVERIFY(!window.configEditor()->validateNow());
    for (const QString& b : {QStringLiteral("Run"), QStringLiteral("Add to queue"),
                             QStringLiteral("Queue Muon + AdamW")})
      QVERIFY2(!enabled(b), qPrintable(b));
  }

  void aSweepConfigOpensOnTheSweepPage() {
    // The shipped sweep config (a run config with a [sweep] table, as trainbench-cli sweep
    // takes it) was refused as a run config ("unknown section 'sweep'"). It opens: the run config
    // in the form, the [sweep] on the Sweep page, which plans the same trials as the file.
    const QString path =
        QStringLiteral(TB_SOURCE_DIR "/resources/configs/sweeps/fmnist-mlp-sweep.toml");
    QFile f(path);
    QVERIFY(f.open(QIODevice::ReadOnly));
    const std::string fileText = QString::fromUtf8(f.readAll()).toStdString();
    const api::SweepPreview want = api::preview_sweep_text(fileText, "fmnist-mlp-sweep.toml");
    QTemporaryDir dir;
    ui::MainWindow window(dir.filePath(QStringLiteral("runs.sqlite")));
    QString error;
    QVERIFY2(window.openConfig(path, /*quiet=*/true, &error), qPrintable(error));
    QVERIFY(window.configEditor()->validateNow());
    QCOMPARE(window.sweepEditor()->parameters()->rowCount(),
             static_cast<int>(want.parameters.size()));
    QCOMPARE(window.sweepEditor()->check(), static_cast<int>(want.trials.size()));
    const std::string again =
        (window.configEditor()->toToml() + QLatin1Char('\n') + window.sweepEditor()->sweepToml())
            .toStdString();
    const api::SweepPreview got = api::preview_sweep_text(again, "editor");
    QCOMPARE(got.name, want.name);
    QCOMPARE(got.stopping, want.stopping);
    QCOMPARE(got.rungs, want.rungs);
    QCOMPARE(got.trials.size(), want.trials.size());
    for (std::size_t i = 0; i < want.trials.size(); ++i)
      QCOMPARE(got.trials[i].values, want.trials[i].values);
  }

  void theEvalPlotKeepsItsPlaceAndSaysWhatItWaitsFor() {
    // Before any run and during a run's first steps, the eval plot is shown beside the loss
    // plot with a note (hidden, it left a hole there); the note goes with the first evaluation.
    ui::PlotsPanel panel;
    panel.resize(1200, 800);
    panel.show();
    QVERIFY(QTest::qWaitForWindowExposed(&panel));
    ui::MetricPlot* eval = panel.plots()[ui::PlotsPanel::EvalMetric];
    panel.replotAll();
    QVERIFY(eval->isVisible());
    QVERIFY(eval->showsEmptyText());
    QVERIFY(!panel.plots()[ui::PlotsPanel::Loss]->showsEmptyText());  // only where it is set
    QVERIFY(!panel.plots()[ui::PlotsPanel::LossScale]->isVisible());
    panel.addRun(1, QStringLiteral("run"), ui::runColor(0));
    panel.appendSteps(1, {loggedStep(1, 0.01, {{"loss", 2.0}})});
    panel.replotAll();
    QVERIFY(eval->isVisible());
    QVERIFY(eval->showsEmptyText());
    panel.appendSteps(1, {loggedStep(2, 0.01, {{"loss", 1.5}, {"eval.accuracy", 0.5}})});
    panel.replotAll();
    QVERIFY(eval->isVisible());
    QVERIFY(!eval->showsEmptyText());
    // The next run, before its first evaluation: the plot starts again on its steps, not on the
    // previous run's ranges (steps 1-2, accuracies around 0.5) with "no evaluation yet" on top.
    panel.clearRuns();
    panel.addRun(2, QStringLiteral("next"), ui::runColor(0));
    std::vector<api::StepMetrics> steps;
    for (std::int64_t s = 1; s <= 400; ++s)
      steps.push_back(loggedStep(s, 0.01, {{"loss", 1.0}}));
    panel.appendSteps(2, steps);
    panel.replotAll();
    QVERIFY(eval->showsEmptyText());
    QCOMPARE(eval->plot()->yAxis->range().lower, 0.0);
    QCOMPARE(eval->plot()->yAxis->range().upper, 1.0);
    QVERIFY2(eval->plot()->xAxis->range().upper > 390,
             qPrintable(QString::number(eval->plot()->xAxis->range().upper)));
  }

  void aRunOfOneLoggedStepShowsItsPoints() {
    // A line through one point draws nothing: a run with a single logged step showed empty LR,
    // throughput and gradient-norm plots. Its lone points get markers, dropped at the second.
    ui::PlotsPanel panel;
    panel.resize(1200, 800);
    panel.addRun(1, QStringLiteral("run"), ui::runColor(0));
    panel.appendSteps(
        1, {loggedStep(5, 0.02, {{"loss", 2.0}, {"grad_norm", 0.9}, {"lr.adamw.0", 0.001}})});
    panel.replotAll();
    const auto marker = [&](int plot) {
      QCustomPlot* p = panel.plots()[plot]->plot();
      for (int g = 0; g < p->graphCount(); ++g)
        if (p->graph(g)->dataCount() == 1 &&
            p->graph(g)->scatterStyle().shape() != QCPScatterStyle::ssNone)
          return true;
      return false;
    };
    QVERIFY(marker(ui::PlotsPanel::Loss));
    QVERIFY(marker(ui::PlotsPanel::GradNorm));
    QVERIFY(marker(ui::PlotsPanel::LearningRate));
    panel.appendSteps(1, {loggedStep(10, 0.02, {{"loss", 1.5}, {"grad_norm", 0.8}})});
    panel.replotAll();
    QVERIFY(!marker(ui::PlotsPanel::GradNorm));
  }

  void linkedPlotsOfALiveRunKeepToTheSameBudgetAndStep() {
    // A run's linked plots share an x range that grows with every batch of points; that growth
    // is live data, not a user's change: fed 100 times a second, no plot redraws more often
    // than its live interval allows (it redrew every 16 ms before).
    ui::PlotsPanel panel;
    panel.resize(1200, 800);
    panel.show();
    QVERIFY(QTest::qWaitForWindowExposed(&panel));
    panel.addRun(1, QStringLiteral("run"), ui::runColor(0));
    std::map<const QCustomPlot*, int> redraws;
    for (auto* p : panel.plots())
      connect(p->plot(), &QCustomPlot::afterReplot, this,
              [&redraws, q = p->plot()] { ++redraws[q]; });
    // The plots draw new points together: whenever the event loop runs, the four plots fed
    // show the same x range (each on its own clock, the loss plot showed step 1550 beside a
    // learning-rate plot at step 2900).
    const QList<int> fed = {ui::PlotsPanel::Loss, ui::PlotsPanel::LearningRate,
                            ui::PlotsPanel::Throughput, ui::PlotsPanel::GradNorm};
    int samples = 0, apart = 0;
    QString firstApart;
    QElapsedTimer clock;
    clock.start();
    std::int64_t step = 1;
    while (clock.elapsed() < 1000) {
      panel.appendSteps(1, {loggedStep(step, 0.01,
                                       {{"loss", 2.0 / static_cast<double>(step)},
                                        {"lr.adamw.0", 1e-3},
                                        {"grad_norm", 1.0},
                                        {"samples_per_s", 1000.0}})});
      ++step;
      QTest::qWait(10);
      if (clock.elapsed() < 200) continue;  // the first points: each new curve drawn at once
      ++samples;
      const QCPRange first = panel.plots()[fed[0]]->plot()->xAxis->range();
      for (const int i : fed) {
        const QCPRange r = panel.plots()[i]->plot()->xAxis->range();
        if (r.lower == first.lower && r.upper == first.upper) continue;
        if (apart++ == 0)
          firstApart = QStringLiteral("plot %1 up to %2, the loss plot up to %3")
                           .arg(i)
                           .arg(r.upper)
                           .arg(first.upper);
        break;
      }
    }
    QVERIFY(!redraws.empty());
    for (const auto& [plot, n] : redraws)
      QVERIFY2(n <= 12, qPrintable(QStringLiteral("%1 redraws in a second").arg(n)));
    QVERIFY(samples > 10);
    QVERIFY2(apart == 0, qPrintable(QStringLiteral("%1 of %2 samples apart, first: %3")
                                        .arg(apart)
                                        .arg(samples)
                                        .arg(firstApart)));
  }

  void accuracyAndPerplexityEachGetAnAxis() {
    // A classifier compared with a language model: accuracies (0.8) and perplexity (22) on one
    // axis flattened the accuracies to zero. With both, perplexity takes the right-hand axis;
    // a language model alone keeps the left one.
    ui::PlotsPanel panel;
    panel.resize(1200, 800);
    panel.show();
    panel.addRun(1, QStringLiteral("lm"), ui::runColor(0));
    panel.appendSteps(1, {loggedStep(10, 0.01, {{"loss", 3.0}, {"eval.perplexity", 22.0}}),
                          loggedStep(20, 0.01, {{"loss", 2.9}, {"eval.perplexity", 21.0}})});
    panel.replotAll();
    ui::MetricPlot* eval = panel.plots()[ui::PlotsPanel::EvalMetric];
    for (const auto& [id, c] : eval->curves())
      QVERIFY2(!c.right, qPrintable(c.label));
    QCOMPARE(eval->plot()->yAxis->label(), QStringLiteral("perplexity"));
    panel.addRun(2, QStringLiteral("mlp"), ui::runColor(1));
    panel.appendSteps(2, {loggedStep(10, 0.01, {{"loss", 0.5}, {"eval.accuracy", 0.81}}),
                          loggedStep(20, 0.01, {{"loss", 0.4}, {"eval.accuracy", 0.86}})});
    panel.replotAll();
    for (const auto& [id, c] : eval->curves())
      QCOMPARE(c.right, id.endsWith(QLatin1String("eval.perplexity")));
    QCOMPARE(eval->plot()->yAxis->label(), QStringLiteral("accuracy"));
    QCOMPARE(eval->plot()->yAxis2->label(), QStringLiteral("perplexity"));
    QVERIFY(eval->plot()->yAxis->range().upper < 1.5);  // the accuracies fill the left axis
  }

  void muonAndAdamwLearningRatesEachGetAnAxis() {
    // Muon's LR (0.02) and AdamW's (3e-4, here decaying) on one linear axis: AdamW's would be a
    // flat line at zero. With a Muon curve present, AdamW's curves move to the right-hand axis,
    // each axis fitted to its own curves; an AdamW-only run keeps one axis.
    ui::PlotsPanel panel;
    panel.resize(1200, 800);
    panel.show();
    panel.addRun(1, QStringLiteral("run"), ui::runColor(0));
    std::vector<api::StepMetrics> steps;
    for (std::int64_t s = 1; s <= 100; ++s)
      steps.push_back(loggedStep(s, 0.01,
                                 {{"loss", 1.0},
                                  {"lr.adamw", 3e-4 * (1.0 - 0.005 * static_cast<double>(s))},
                                  {"lr.muon", 0.02 * (1.0 - 0.005 * static_cast<double>(s))}}));
    panel.appendSteps(1, steps);
    panel.replotAll();
    ui::MetricPlot* lr = panel.plots()[ui::PlotsPanel::LearningRate];
    QCustomPlot* plot = lr->plot();
    QMap<QString, bool> onRight;
    for (const auto& [id, c] : lr->curves())
      onRight[c.label] = c.right;
    QCOMPARE(onRight.value(QStringLiteral("AdamW LR (right)"), false), true);
    QCOMPARE(onRight.value(QStringLiteral("Muon LR"), true), false);
    QVERIFY(plot->yAxis2->visible());
    QCOMPARE(plot->yAxis->label(), QStringLiteral("Muon lr"));
    QCOMPARE(plot->yAxis2->label(), QStringLiteral("AdamW lr"));

    // Each axis spans its own curve: 0.01..0.02 on the left, 1.5e-4..3e-4 on the right.
    QVERIFY(plot->yAxis->range().lower > 0.009 && plot->yAxis->range().upper < 0.021);
    QVERIFY(plot->yAxis2->range().lower > 1.4e-4 && plot->yAxis2->range().upper < 3.1e-4);
    QVERIFY(plot->yAxis2->range().upper > 2.9e-4);

    // Beside it, an SGD run: its LR goes right too, and the right axis says whose it is.
    panel.addRun(3, QStringLiteral("sgd"), ui::runColor(1));
    panel.appendSteps(3, {loggedStep(1, 0.01, {{"loss", 1.0}, {"lr.sgd.0", 0.1}})});
    bool sgdRight = false;
    for (const auto& [id, c] : lr->curves())
      if (id.endsWith(QStringLiteral("/lr.sgd.0"))) {
        sgdRight = c.right;
        QCOMPARE(c.label,
                 QStringLiteral("#3 SGD LR (right)"));  // the optimizer's name, group 0 unsaid
      }
    QVERIFY(sgdRight);
    QCOMPARE(plot->yAxis2->label(), QStringLiteral("lr (other optimizers)"));
    // The right-hand axis's curves are drawn over the left's: each axis scaled to its own
    // curves, one of the same shape as a left-hand curve lies exactly on it, and drawn under it
    // (added first, as an AdamW-only run shown before a Muon run) could not be seen.
    bool seenRight = false;
    for (int i = 0; i < plot->graphCount(); ++i) {
      const bool isRight = plot->graph(i)->valueAxis() == plot->yAxis2;
      QVERIFY2(isRight || !seenRight, "a left-axis curve drawn over a right-axis one");
      seenRight |= isRight;
    }
    QVERIFY(seenRight);

    // The Muon run gone: back to one axis, the AdamW curve on it.
    panel.clearRuns();
    panel.addRun(2, QStringLiteral("adamw"), ui::runColor(0));
    steps.clear();
    for (std::int64_t s = 1; s <= 10; ++s)
      steps.push_back(loggedStep(s, 0.01, {{"loss", 1.0}, {"lr.adamw", 3e-4}}));
    panel.appendSteps(2, steps);
    panel.replotAll();
    QCOMPARE(lr->curves().size(), std::size_t{1});
    QCOMPARE(lr->curves().begin()->second.right, false);
    QCOMPARE(lr->curves().begin()->second.label, QStringLiteral("AdamW LR"));
    QVERIFY(!plot->yAxis2->visible());
    QCOMPARE(plot->yAxis->label(), QStringLiteral("lr"));
    // A constant LR: in the middle of its axis, not at the bottom of a 0..0.001 range.
    QVERIFY(plot->yAxis->range().lower > 2.5e-4 && plot->yAxis->range().upper < 3.5e-4);
  }

  void plotsOfARunShareTheirXRange() {
    // A run's plots share one x range: an eval plot with one point at step 468 spans the loss
    // plot's steps 1-630, not 467-469; zooming one plot moves the others; unlinked, each plot
    // fits its own data again.
    ui::PlotsPanel panel;
    panel.resize(1200, 800);
    panel.addRun(1, QStringLiteral("run"), ui::runColor(0));
    std::vector<api::StepMetrics> steps;
    for (std::int64_t s = 1; s <= 630; ++s) {
      steps.push_back(
          loggedStep(s, 0.01, {{"loss", 2.0 / static_cast<double>(s)}, {"lr.adamw.0", 1e-3}}));
      if (s == 468) steps.back().values.emplace_back("eval.accuracy", 0.8);
    }
    panel.appendSteps(1, steps);
    panel.replotAll();
    auto range = [&](int plot) {
      const QCPRange r = panel.plots()[plot]->plot()->xAxis->range();
      return std::pair<double, double>(r.lower, r.upper);
    };
    const auto loss = range(ui::PlotsPanel::Loss);
    // The data's extent, 1% more either way (the last eval's marker drawn whole).
    const double pad = ui::MetricPlot::kXPad * 629.0;
    QCOMPARE(loss, (std::pair<double, double>(1.0 - pad, 630.0 + pad)));
    QCOMPARE(range(ui::PlotsPanel::EvalMetric), loss);
    QCOMPARE(range(ui::PlotsPanel::LearningRate), loss);

    // The user zooms the loss plot: the others follow.
    QCustomPlot* lossPlot = panel.plots()[ui::PlotsPanel::Loss]->plot();
    QTest::mousePress(lossPlot, Qt::LeftButton, {}, QPoint(100, 100));
    QTest::mouseRelease(lossPlot, Qt::LeftButton, {}, QPoint(100, 100));
    lossPlot->xAxis->setRange(100.0, 200.0);
    QCOMPARE(range(ui::PlotsPanel::EvalMetric), (std::pair<double, double>(100.0, 200.0)));
    QCOMPARE(range(ui::PlotsPanel::GradNorm), (std::pair<double, double>(100.0, 200.0)));

    // Reset, then unlink: the eval plot fits its one point again.
    for (auto* p : panel.plots())
      p->resetView();
    panel.setLinkedX(false);
    panel.replotAll();
    QCOMPARE(range(ui::PlotsPanel::Loss), loss);
    const auto eval = range(ui::PlotsPanel::EvalMetric);
    QCOMPARE(eval, (std::pair<double, double>(467.0, 469.0)));
    panel.setLinkedX(true);
    panel.replotAll();
    QCOMPARE(range(ui::PlotsPanel::EvalMetric), loss);
  }

  void queueAsBoundProcessesUsesTheLauncher() {
    // The GUI queue's "N at a time" as separate processes: the same launcher as
    // `trainbench-cli launch`, each process bound to its slot; the runs appear in the table.
    QTemporaryDir dir;
    const QString db = dir.filePath(QStringLiteral("runs.sqlite"));
    ui::MainWindow window(db);
    window.setCliPath(QStringLiteral(TB_CLI_PATH));
    QVERIFY(window.configEditor()->setToml(test::blobsConfig(300, QStringLiteral("queued"))));
    window.setQueueAsProcesses(true, QStringLiteral("node"));
    window.setQueueParallel(2);
    window.enqueueCurrent();
    window.enqueueCurrent();
    window.startQueue();
    QVERIFY(window.launching());
    QTRY_VERIFY_WITH_TIMEOUT(!window.launching(), 120000);
    window.runsModel()->refresh();
    QCOMPARE(window.runsModel()->rowCount(), 2);
    api::StoreReader store(db.toStdString());
    for (int r = 0; r < 2; ++r) {
      const auto& run = window.runsModel()->run(r);
      QCOMPARE(QString::fromStdString(run.status), QStringLiteral("finished"));
      bool bound = false;
      for (const auto& e : store.events(run.id))
        bound |= e.find("bound to CPUs") != std::string::npos;
      QVERIFY2(bound, "a launched run did not record its binding");
    }
  }

  // Quitting while the queue runs as separate processes: the question counts them, and Yes
  // stops them (each after its step, with a checkpoint) and starts no further one. The window
  // used to close and then wait in its destructor for the processes to train to their end.
  void quittingStopsTheQueuesProcesses() {
    QTemporaryDir dir;
    const QString db = dir.filePath(QStringLiteral("runs.sqlite"));
    auto* window = new ui::MainWindow(db);
    window->setAttribute(Qt::WA_DeleteOnClose, false);
    window->setCliPath(QStringLiteral(TB_CLI_PATH));
    QVERIFY(window->configEditor()->setToml(test::blobsConfig(2000000, QStringLiteral("long"))));
    window->setQueueAsProcesses(true, QStringLiteral("none"));
    window->setQueueParallel(2);
    for (int i = 0; i < 3; ++i)
      window->enqueueCurrent();
    window->show();
    window->startQueue();
    QVERIFY(window->launching());
    QTRY_VERIFY_WITH_TIMEOUT(test::runsTrainingPast(db, 20) == 2, 60000);
    test::answerYesSoon();  // "1 run(s) are still training. Cancel them and quit?"
    QElapsedTimer quitting;
    quitting.start();
    window->close();
    QVERIFY(!window->isVisible());
    // The event loop goes on (as with a sweep still stopping): the batch's end, heard there,
    // must not start the third config.
    QCOMPARE(window->queuedCount(), 1);
    QTRY_VERIFY_WITH_TIMEOUT(!window->launching(), 60000);
    QTest::qWait(500);
    QCOMPARE(window->queuedCount(), 1);
    QVERIFY(!window->launching());
    delete window;  // joins the launch thread
    QVERIFY2(quitting.elapsed() < 60000, qPrintable(QString::number(quitting.elapsed())));
    const auto runs = api::StoreReader(db.toStdString()).runs();
    QCOMPARE(runs.size(), std::size_t{2});  // the third config was not started
    for (const auto& r : runs) {
      QCOMPARE(QString::fromStdString(r.status), QStringLiteral("cancelled"));
      QVERIFY(r.last_step && *r.last_step >= 20);
    }
  }

  void resumeACancelledRunFromTheRunsTable() {
    // A run cancelled after step 12 (a checkpoint every 4 steps) is resumed from the runs
    // table's Resume button and ends with the losses of the same run never interrupted.
    QTemporaryDir dir;
    const QString db = dir.filePath(QStringLiteral("runs.sqlite"));
    const QString config = test::blobsConfig(30, QStringLiteral("resumable")) +
                           QStringLiteral("\n[checkpoint]\ninterval = 4\n");
    const qint64 whole = train(dir.filePath(QStringLiteral("whole.sqlite")), config);
    QVERIFY(whole > 0);
    qint64 cancelled = 0;
    {
      api::TrainRequest req;
      req.config_text = config.toStdString();
      req.db_path = db.toStdString();
      req.control = std::make_shared<api::RunControl>();
      const auto out = api::start_training(req, {}, [&](const api::StepMetrics& m) {
        if (m.step == 12) req.control->cancel();
      });
      QCOMPARE(QString::fromStdString(out.status), QStringLiteral("cancelled"));
      cancelled = out.run_id;
    }
    ui::MainWindow window(db);
    window.runsModel()->refresh();
    auto* resume = window.runsView()->findChild<QPushButton*>(QStringLiteral("resumeButton"));
    QVERIFY(resume);
    QVERIFY(!resume->isEnabled());  // nothing selected
    window.runsView()->selectRun(cancelled);
    QTRY_VERIFY(resume->isEnabled());
    QTest::mouseClick(resume, Qt::LeftButton);
    QTRY_COMPARE_WITH_TIMEOUT(
        QString::fromStdString(
            window.runsModel()->run(window.runsModel()->rowOf(cancelled)).status),
        QStringLiteral("finished"), 60000);
    QTRY_VERIFY(!resume->isEnabled());  // a finished run is not resumable
    const api::StoreReader resumedStore(db.toStdString());
    const api::StoreReader wholeStore(dir.filePath(QStringLiteral("whole.sqlite")).toStdString());
    const auto got = resumedStore.series(cancelled, "loss");
    const auto want = wholeStore.series(whole, "loss");
    QCOMPARE(got.step.size(), std::size_t{30});
    QCOMPARE(got.step, want.step);
    QCOMPARE(got.value, want.value);  // bit for bit, the steps before and after the resume
    QCOMPARE(window.runsModel()->rowCount(), 1);  // the same run continued, no new one
    // ... from its checkpoint of step 12, not trained again from the start.
    int resumedAt12 = 0;
    for (const auto& e : resumedStore.events(cancelled)) {
      QVERIFY2(e.find("resumed from") == std::string::npos ||
                   e.find("step-00000012 at step 12") != std::string::npos,
               e.c_str());
      resumedAt12 += e.find("step-00000012 at step 12") != std::string::npos;
    }
    QCOMPARE(resumedAt12, 1);
  }

  void theWindowFitsASmallScreen() {
    // Opened for the first time on a screen smaller than the window's usual 1720 x 950 (the
    // offscreen platform's is 800 x 600), the window takes the screen's free area and can be made
    // smaller still: the pages scroll instead of forcing their least size on the window, the
    // docks on the right join the runs table as tabs below, and the config dock keeps the
    // editor's width (it scrolls only up and down).
    QTemporaryDir dir;
    ui::MainWindow window(dir.filePath(QStringLiteral("runs.sqlite")));
    window.show();
    QVERIFY(QTest::qWaitForWindowExposed(&window));
    const QRect free = window.screen()->availableGeometry();
    QVERIFY2(free.width() < 1600, "the test needs a screen narrower than 1600 pixels");
    QVERIFY(window.width() <= free.width());
    QVERIFY(window.height() <= free.height());
    const QSize least = window.minimumSizeHint();
    QVERIFY2(
        least.width() <= 800 && least.height() <= 600,
        qPrintable(QStringLiteral("least size %1 x %2").arg(least.width()).arg(least.height())));
    auto* queue = window.findChild<QDockWidget*>(QStringLiteral("queueDock"));
    QVERIFY(queue != nullptr);
    QCOMPARE(window.dockWidgetArea(queue), Qt::BottomDockWidgetArea);
    QTRY_VERIFY(window.configEditor()->width() >= window.configEditor()->minimumSizeHint().width());
    // The editor scrolls, its Run button does not: in sight without scrolling (it was below the
    // LR preview, out of sight on a 1000-pixel screen).
    auto* run = window.findChild<QPushButton*>(QStringLiteral("runButton"));
    QVERIFY(run != nullptr);
    QVERIFY(run->isVisible());
    QCOMPARE(run->visibleRegion().boundingRect().size(), run->size());
  }

  void openRunStoreReplacesTheWindow() {
    // File > Open run store…: a file that is not a store, or a folder, is refused and the window
    // stays; a new name opens a new store in a new window with the same config, and the old
    // window (no runs training) closes and is deleted.
    QTemporaryDir dir;
    QVERIFY(test::writeFile(dir.filePath(QStringLiteral("notes.txt")), QStringLiteral("hi\n")));
    auto* window = new ui::MainWindow(dir.filePath(QStringLiteral("a.sqlite")));
    window->setAttribute(Qt::WA_DeleteOnClose);
    const QPointer<ui::MainWindow> first(window);
    window->show();
    QVERIFY(QTest::qWaitForWindowExposed(window));
    QVERIFY(window->configEditor()->setFieldText(QStringLiteral("run.name"),
                                                 QStringLiteral("carried-over")));
    QString error;
    QVERIFY(window->openStore(dir.filePath(QStringLiteral("notes.txt")), &error) == nullptr);
    QVERIFY2(error.contains(QStringLiteral("is not a TrainBench run database")), qPrintable(error));
    QVERIFY(window->openStore(dir.path(), &error) == nullptr);
    QVERIFY2(error.contains(QStringLiteral("is a folder")), qPrintable(error));
    QVERIFY(window->isVisible());
    QVERIFY(window->warnIfNoStore() == nullptr);  // its own store is open: nothing to say
    {
      // Started on a file that is not a store (trainbench --db notes.txt): a dialog says so,
      // with the reason, and offers another store.
      ui::MainWindow bad(dir.filePath(QStringLiteral("notes.txt")));
      bad.show();
      QVERIFY(QTest::qWaitForWindowExposed(&bad));
      QMessageBox* shown = bad.warnIfNoStore();
      QVERIFY(shown != nullptr);
      const QPointer<QMessageBox> box(shown);
      QTRY_VERIFY(shown->isVisible());
      const QString why = shown->informativeText();
      QVERIFY2(why.contains(QStringLiteral("is not a TrainBench run database")), qPrintable(why));
      bool offersAnother = false;
      for (QAbstractButton* b : shown->buttons())
        offersAnother |= b->text() == QStringLiteral("Open run store…");
      QVERIFY(offersAnother);
      shown->reject();
      QTRY_VERIFY(box.isNull());  // deleted when closed
    }
    const QString b = dir.filePath(QStringLiteral("b.sqlite"));
    ui::MainWindow* second = window->openStore(b, &error);
    QVERIFY2(second != nullptr, qPrintable(error));
    QTRY_VERIFY(first.isNull());  // closed, and deleted on close
    QVERIFY(second->isVisible());
    QCOMPARE(QFileInfo(second->runsModel()->dbPath()).absoluteFilePath(),
             QFileInfo(b).absoluteFilePath());
    QCOMPARE(second->configEditor()->fieldText(QStringLiteral("run.name")),
             QStringLiteral("carried-over"));
    delete second;
  }

  void aRunLeftRunningIsClosedOnceItsWindowHasGone() {
    // A run trained here whose store could not close it (its last writes failed: a full disk)
    // stays "running" with this live process as its writer: no other process closes it and
    // Resume refuses it. File > Open run store closes the window that trained it; the run is
    // still closed as failed once its store takes it.
    QTemporaryDir dir;
    const QString a = dir.filePath(QStringLiteral("a.sqlite"));
    std::int64_t left = 0;
    {
      auto store = store::RunStore::open(a.toStdString());
      left = store.create_run({.name = "left running"});
      store.set_status(left, store::RunStatus::kRunning);  // written by this process
    }
    auto* window = new ui::MainWindow(a);
    window->setAttribute(Qt::WA_DeleteOnClose);
    const QPointer<ui::MainWindow> first(window);
    window->show();
    QVERIFY(QTest::qWaitForWindowExposed(window));
    QString error;
    ui::MainWindow* second = window->openStore(dir.filePath(QStringLiteral("b.sqlite")), &error);
    QVERIFY2(second != nullptr, qPrintable(error));
    QTRY_VERIFY(first.isNull());
    ui::LeftRunning::instance().add(a, left, QStringLiteral("the run store failed: disk full"));
    QCOMPARE(ui::LeftRunning::instance().pending(a), QList<qint64>{left});
    QTRY_VERIFY(ui::LeftRunning::instance().pending(a).isEmpty());
    const auto closed = store::RunStore::open(a.toStdString()).get_run(left).summary;
    QCOMPARE(closed.status, store::RunStatus::kFailed);
    QCOMPARE(closed.message, std::string("the run store failed: disk full"));
    delete second;
  }

  void opensOnTheNewestRunsPlots() {
    // A store with finished runs opens on the newest one's curves, not on empty 0-5 axes; the
    // table's selection stays empty.
    QTemporaryDir dir;
    const QString db = dir.filePath(QStringLiteral("runs.sqlite"));
    QVERIFY(train(db, test::blobsConfig(8, QStringLiteral("older"))) > 0);
    const qint64 newest = train(db, test::blobsConfig(12, QStringLiteral("newer")));
    QVERIFY(newest > 0);
    // A newer run that failed before its first step (weights of another model: a safetensors
    // file with one tensor "x") is skipped.
    {
      const QString junk = dir.filePath(QStringLiteral("junk.safetensors"));
      QFile f(junk);
      QVERIFY(f.open(QIODevice::WriteOnly));
      const QByteArray header = R"({"x":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})";
      QByteArray length(8, '\0');
      for (int i = 0; i < 8; ++i)
        length[i] = static_cast<char>((static_cast<quint64>(header.size()) >> (8 * i)) & 0xff);
      f.write(length + header + QByteArray(4, '\0'));
      f.close();
      api::TrainRequest req;
      req.config_text = test::blobsConfig(5, QStringLiteral("broken"))
                            .replace(QStringLiteral("[run]\n"),
                                     QStringLiteral("[run]\ninit_from = \"%1\"\n").arg(junk))
                            .toStdString();
      req.db_path = db.toStdString();
      QVERIFY(api::start_training(req, {}, {}).status == "failed");
    }
    ui::MainWindow window(db);
    QCOMPARE(window.livePlots()->runIds(), QList<qint64>{newest});
    // The controls row says which run that is.
    QCOMPARE(window.livePlots()->shownRunsText(), QStringLiteral("run %1 newer").arg(newest));
    QVERIFY(window.runsView()->selectedRuns().isEmpty());
    bool lossDrawn = false;
    for (const auto* plot : window.livePlots()->plots())
      lossDrawn |= plot->hasData() && plot->plot()->xAxis->range().upper >= 11.0;
    QVERIFY2(lossDrawn, "no plot spans the newest run's 12 steps");
  }

  void languageModelSamplesShowBesideThePlots() {
    // eval.samples: the texts a language model wrote at its evaluations appear under the Live
    // plots of its run, one line per text; a classifier's run shows no samples pane.
    QTemporaryDir dir;
    const QString db = dir.filePath(QStringLiteral("runs.sqlite"));
    QVERIFY(train(db, test::blobsConfig(8, QStringLiteral("classifier"))) > 0);
    const qint64 lm = train(db, QString::fromStdString(tb::test::kTinyLm));
    QVERIFY(lm > 0);
    ui::MainWindow window(db);
    window.show();
    QCOMPARE(window.livePlots()->runIds(), QList<qint64>{lm});
    const QStringList lines = window.liveSamples()->toPlainText().split(QLatin1Char('\n'));
    QCOMPARE(lines.size(), 4);  // 2 texts at steps 10 and 20
    QVERIFY2(lines[0].startsWith(QStringLiteral("run %1, step 10: ").arg(lm)),
             qPrintable(lines[0]));
    QVERIFY2(lines[3].startsWith(QStringLiteral("run %1, step 20: ").arg(lm)),
             qPrintable(lines[3]));
    QVERIFY(window.liveSamples()->isVisible());
    window.runsView()->selectRun(lm - 1);
    QTRY_COMPARE(window.livePlots()->runIds(), QList<qint64>{lm - 1});
    QVERIFY(!window.liveSamples()->isVisible());
  }

  void runsWrittenByAnotherProcessAppearLive() {
    QTemporaryDir dir;
    const QString db = dir.filePath(QStringLiteral("runs.sqlite"));
    const QString cfg = dir.filePath(QStringLiteral("run.toml"));
    QVERIFY(test::writeFile(cfg, test::blobsConfig(20000, QStringLiteral("headless"))));
    ui::RunsModel model(db, 100);
    QCOMPARE(model.rowCount(), 0);
    QProcess cli;
    cli.start(QStringLiteral(TB_CLI_PATH),
              {QStringLiteral("--db"), db, QStringLiteral("run"), cfg});
    QVERIFY(cli.waitForStarted());
    // The run appears while it is running, and its step count grows.
    QTRY_COMPARE_WITH_TIMEOUT(model.rowCount(), 1, 20000);
    QCOMPARE(QString::fromStdString(model.run(0).name), QStringLiteral("headless"));
    QTRY_COMPARE_WITH_TIMEOUT(QString::fromStdString(model.run(0).status),
                              QStringLiteral("running"), 20000);
    QTRY_VERIFY_WITH_TIMEOUT(model.run(0).last_step.has_value(), 20000);
    const qint64 seen = *model.run(0).last_step;
    QTRY_VERIFY_WITH_TIMEOUT(*model.run(0).last_step > seen, 20000);  // live: it grows
    if (cli.state() != QProcess::NotRunning) QVERIFY(cli.waitForFinished(120000));
    QVERIFY2(cli.exitCode() == 0, cli.readAllStandardError().constData());
    QTRY_COMPARE_WITH_TIMEOUT(QString::fromStdString(model.run(0).status),
                              QStringLiteral("finished"), 5000);
    QCOMPARE(*model.run(0).last_step, 20000);
    QVERIFY(model.run(0).final_loss.has_value());
    const qint64 id = model.run(0).id;
    // Rename, tag, filter, delete.
    QVERIFY(model.setData(model.index(0, ui::RunsModel::Name), QStringLiteral("renamed"),
                          Qt::EditRole));
    QCOMPARE(model.data(model.index(0, ui::RunsModel::Name), Qt::DisplayRole).toString(),
             QStringLiteral("renamed"));
    QVERIFY(model.setTags(id, QStringLiteral("a, b ,c")));
    QCOMPARE(model.data(model.index(0, ui::RunsModel::Tags), Qt::DisplayRole).toString(),
             QStringLiteral("a, b, c"));
    ui::RunsFilter filter;
    filter.setSourceModel(&model);
    filter.setSearch(QStringLiteral("zzz"));
    QCOMPARE(filter.rowCount(), 0);
    filter.setSearch(QStringLiteral("B"));  // tags are searched, case-insensitively
    QCOMPARE(filter.rowCount(), 1);
    filter.setStatus(QStringLiteral("failed"));
    QCOMPARE(filter.rowCount(), 0);
    QVERIFY(model.deleteRuns({id}));
    QCOMPARE(model.rowCount(), 0);
  }

  void plotsOfARunResumedElsewhereFromAnEarlierCheckpointStartAgain() {
    // Another process resumes run 1 (stopped at step 6) from its checkpoint of step 2 and stops
    // at step 3: the store drops steps 4 to 6, and the plots must too (reading on from the last
    // step seen would keep them, and never fetch the new steps below it).
    QTemporaryDir dir;
    const QString db = dir.filePath(QStringLiteral("runs.sqlite"));
    const QString cfg = dir.filePath(QStringLiteral("run.toml"));
    QVERIFY(test::writeFile(cfg, test::blobsConfig(20, QStringLiteral("rewound")) +
                                     QStringLiteral("\n[checkpoint]\ninterval = 2\nkeep = 3\n")));
    const auto cli = [&](const QStringList& args) {
      QProcess p;
      p.start(QStringLiteral(TB_CLI_PATH), QStringList{QStringLiteral("--db"), db} + args);
      return p.waitForFinished(120000) && p.exitStatus() == QProcess::NormalExit;
    };
    // Every metric at every step (an evaluation too), so that only the wall time of a step
    // logged again tells the second rewind below.
    QVERIFY(cli({QStringLiteral("run"), cfg, QStringLiteral("--stop-at"), QStringLiteral("6"),
                 QStringLiteral("--set"), QStringLiteral("eval.interval=1")}));
    const api::StoreReader store(db.toStdString());
    ui::PlotsPanel panel;
    panel.addRun(1, QStringLiteral("1 rewound"), Qt::blue);
    panel.loadFromStore(store, 1);
    const auto lossSteps = [&] {
      for (const auto& [id, c] : panel.plots()[ui::PlotsPanel::Loss]->curves())
        if (id.endsWith(QStringLiteral("/loss"))) return c.step;
      return std::vector<double>{};
    };
    QCOMPARE(lossSteps().back(), 6.0);
    QVERIFY(!panel.rewoundInStore(store, 1));
    QString two;
    QDirIterator it(dir.path(), {QStringLiteral("step-00000002")}, QDir::Dirs,
                    QDirIterator::Subdirectories);
    if (it.hasNext()) two = it.next();
    QVERIFY(!two.isEmpty());
    QVERIFY(cli({QStringLiteral("run"), QStringLiteral("--resume"), QStringLiteral("1"),
                 QStringLiteral("--from-checkpoint"), two, QStringLiteral("--stop-at"),
                 QStringLiteral("3")}));
    QVERIFY(panel.rewoundInStore(store, 1));
    panel.reloadFromStore(store);
    QCOMPARE(lossSteps(), (std::vector<double>{1, 2, 3}));
    QVERIFY(!panel.rewoundInStore(store, 1));
    QCOMPARE(panel.runIds(), QList<qint64>{1});
    // Rewound again, and already past the plotted step 3 when the plots look: step 3 is
    // there, written again at another time.
    QVERIFY(cli({QStringLiteral("run"), QStringLiteral("--resume"), QStringLiteral("1"),
                 QStringLiteral("--from-checkpoint"), two, QStringLiteral("--stop-at"),
                 QStringLiteral("7")}));
    QVERIFY(panel.rewoundInStore(store, 1));
    panel.reloadFromStore(store);
    QCOMPARE(lossSteps(), (std::vector<double>{1, 2, 3, 4, 5, 6, 7}));
  }

  void theRanksColumnShowsADataParallelRunAsOneRun() {
    QTemporaryDir dir;
    const QString db = dir.filePath(QStringLiteral("runs.sqlite"));
    const qint64 plain = train(db, test::blobsConfig(10, QStringLiteral("plain")));
    {
      // Without a data-parallel run the always-blank column is not shown.
      ui::RunsModel only(db, 0);
      ui::RunsView view(&only);
      QVERIFY(view.table()->isColumnHidden(ui::RunsModel::Ranks));
      QCOMPARE(view.table()->textElideMode(), Qt::ElideMiddle);  // "... p5 s2" stays in view
    }
    // One rank through the distributed path (a process not started by a launcher is rank 0 of 1).
    const qint64 ddp = train(db, test::blobsConfig(10, QStringLiteral("ddp")) +
                                     QStringLiteral("\n[distributed]\nbackend = \"mpi\"\n"));
    QVERIFY(plain > 0 && ddp > 0);
    ui::RunsModel model(db, 0);
    QCOMPARE(model.headerData(ui::RunsModel::Ranks, Qt::Horizontal, Qt::DisplayRole).toString(),
             QStringLiteral("ranks"));
    const QModelIndex p = model.index(model.rowOf(plain), ui::RunsModel::Ranks);
    const QModelIndex d = model.index(model.rowOf(ddp), ui::RunsModel::Ranks);
    QVERIFY(model.data(p, Qt::DisplayRole).toString().isEmpty());
    QCOMPARE(model.data(d, Qt::DisplayRole).toString(), QStringLiteral("1 (mpi)"));
    QCOMPARE(model.data(d, Qt::UserRole + 1).toInt(), 1);  // sorts by the number of ranks
    ui::RunsView view(&model);
    QVERIFY(!view.table()->isColumnHidden(ui::RunsModel::Ranks));
  }

  void manyRunsOnScreenGetOneKeyInsteadOfALegendUnderEveryPlot() {
    // Two legend rows per run under every plot left the data a strip from three runs on: on
    // screen the plots then drop their legends and one key names each run in its colour. A
    // report's panel (no key) keeps its legends.
    ui::PlotsPanel screen, report;
    screen.setRunKey(true);
    for (ui::PlotsPanel* p : {&screen, &report})
      for (int i = 0; i < 2; ++i)
        p->addRun(i + 1, QStringLiteral("%1 run-%1").arg(i + 1), ui::runColor(i));
    QVERIFY(screen.plots()[ui::PlotsPanel::Loss]->legendShown());
    QVERIFY(screen.runKeyText().isEmpty());
    for (ui::PlotsPanel* p : {&screen, &report})
      p->addRun(3, QStringLiteral("3 run-3"), ui::runColor(2));
    for (ui::MetricPlot* plot : screen.plots())
      QVERIFY(!plot->legendShown());
    QCOMPARE(screen.runKeyText(), QStringLiteral("1 run-1, 2 run-2, 3 run-3"));
    for (ui::MetricPlot* plot : report.plots())
      QVERIFY(plot->legendShown());
    QVERIFY(report.runKeyText().isEmpty());
    screen.clearRuns();
    QVERIFY(screen.plots()[ui::PlotsPanel::Loss]->legendShown());
    QVERIFY(screen.runKeyText().isEmpty());
  }

  void compareOfManyRunsPutsTheSummaryUnderThePlots() {
    // Eight runs beside the plots cut every summary cell to "c…" and the plots to strips: where
    // the values cannot read whole beside the plots, the summary goes under them, every value
    // whole; two runs stay side by side.
    QTemporaryDir dir;
    const QString db = dir.filePath(QStringLiteral("runs.sqlite"));
    QList<qint64> ids;
    for (int i = 0; i < 8; ++i)
      ids << train(db, test::blobsConfig(4, QStringLiteral("run-%1").arg(i)));
    api::StoreReader store(db.toStdString());
    ui::CompareView view;
    view.resize(850, 700);
    view.setRuns(&store, ids.mid(0, 2));
    view.show();
    QVERIFY(QTest::qWaitForWindowExposed(&view));
    QTRY_COMPARE(view.splitter()->orientation(), Qt::Horizontal);
    view.setRuns(&store, ids);
    QTRY_COMPARE(view.splitter()->orientation(), Qt::Vertical);
    QTest::qWait(50);
    QTableWidget* summary = view.summaryTable();
    QCOMPARE(summary->columnCount(), 8);
    {
      const QString cut = firstCutValue(summary);
      QVERIFY2(cut.isEmpty(), qPrintable(cut));
    }
  }

  void compareReadsAtAGlance() {
    // Muon against AdamW in a narrow compare pane: both runs' summary columns in view without a
    // horizontal scroll; the diff grouped by section, the keys only one optimizer has folded
    // into one row per section that a click unfolds.
    QTemporaryDir dir;
    const QString db = dir.filePath(QStringLiteral("runs.sqlite"));
    QString muonConfig = test::blobsConfig(12, QStringLiteral("with-muon"));
    muonConfig.replace(
        QStringLiteral("[optimizer]\nkind = \"adamw\"\nlr = 0.01\n"),
        QStringLiteral("[optimizer]\nkind = \"muon\"\n\n[optimizer.muon]\nlr = 0.02\n"));
    const qint64 muon = train(db, muonConfig);
    const qint64 adamw = train(db, test::blobsConfig(12, QStringLiteral("with-adamw")));
    QVERIFY(muon > 0 && adamw > 0);
    api::StoreReader store(db.toStdString());
    ui::CompareView view;
    view.resize(700, 700);
    view.setRuns(&store, {adamw, muon});
    view.show();
    QVERIFY(QTest::qWaitForWindowExposed(&view));
    QTableWidget* summary = view.summaryTable();
    QCOMPARE(summary->columnCount(), 2);
    {
      // Muon's optimizer time holds its Newton–Schulz: the summary's optimizer is the rest, as
      // the stacked plot draws it (the two were added twice); a target metric a run does not
      // log is "n/a", not "not reached".
      auto mean = [&](const char* key) {
        const api::Series s = store.series(muon, key);
        double sum = 0;
        for (double v : s.value)
          sum += v;
        return sum / static_cast<double>(s.value.size());
      };
      const auto rows = ui::summarizeRuns(store, {muon}, ui::Target{});
      double optimizer = -1;
      for (const auto& [phase, v] : rows[0].meanPhaseMs)
        if (phase == QStringLiteral("optimizer")) optimizer = v;
      QVERIFY(std::abs(optimizer - (mean("time.optimizer_ms") - mean("time.newton_schulz_ms"))) <
              1e-9);
      // The evaluation's time too (the product's step-time breakdown has it): one
      // evaluation's mean, beside the step's phases.
      double evaluation = -1;
      for (const auto& [phase, v] : rows[0].meanPhaseMs)
        if (phase == QStringLiteral("evaluation")) evaluation = v;
      QVERIFY(evaluation > 0);
      QVERIFY(std::abs(evaluation - mean("time.eval_ms")) < 1e-9);
      QVERIFY(rows[0].logsTarget);
      const auto none =
          ui::summarizeRuns(store, {muon}, ui::Target{QStringLiteral("eval.perplexity"), 5});
      QVERIFY(!none[0].logsTarget);
    }
    // Selected newest first, listed and coloured by run id, as in the Live tab and a report: run
    // `muon` (the older) first and in the first colour.
    QCOMPARE(summary->horizontalHeaderItem(0)->text(), QStringLiteral("#%1").arg(muon));
    QCOMPARE(summary->horizontalHeaderItem(1)->text(), QStringLiteral("#%1").arg(adamw));
    QCOMPARE(ui::inRunOrder({adamw, muon, adamw}), (QList<qint64>{muon, adamw}));
    QVERIFY2(summary->horizontalHeader()->length() <= summary->viewport()->width(),
             qPrintable(QStringLiteral("%1 > %2")
                            .arg(summary->horizontalHeader()->length())
                            .arg(summary->viewport()->width())));
    for (int c = 0; c < 2; ++c)
      QVERIFY(summary->columnWidth(c) > 40);
    // 700 px holds the plots or a readable summary, not both: stacked. 1200 px holds both side
    // by side, the summary at least its comfortable width.
    QCOMPARE(view.splitter()->orientation(), Qt::Vertical);
    // A window of its own (no scroll area): stacked at the plots' least height, the view does
    // not grow itself (a height that followed its own grew it without end).
    QTest::qWait(100);
    QVERIFY2(view.height() < 1000, qPrintable(QString::number(view.height())));
    view.resize(1200, 700);
    QTRY_COMPARE(view.splitter()->orientation(), Qt::Horizontal);
    QTRY_VERIFY(view.splitter()->sizes().value(1) >= ui::CompareView::kSideComfort);
    // Beside the plots the runs' values read whole ("finis…" and "2.69…" beside row names at
    // their full 150 px); the names give way, elided, whole in their tooltips.
    view.splitter()->setSizes(
        {1200 - ui::CompareView::kSideComfort, ui::CompareView::kSideComfort});
    QTest::qWait(50);
    {
      const QString cut = firstCutValue(summary);
      QVERIFY2(cut.isEmpty(), qPrintable(cut));
    }
    QCOMPARE(summary->verticalHeaderItem(0)->toolTip(), summary->verticalHeaderItem(0)->text());
    view.resize(700, 700);

    QTableWidget* diff = view.diffTable();
    int foldRow = -1, visibleKeys = 0, hiddenKeys = 0;
    QStringList sections;
    for (int r = 0; r < diff->rowCount(); ++r) {
      const QString text = diff->item(r, 0)->text();
      if (text.startsWith(QLatin1Char('['))) sections << text;
      if (text.startsWith(QLatin1String("optimizer.muon.*"))) foldRow = r;
      if (diff->item(r, 0)->data(Qt::UserRole).toString().isEmpty()) continue;
      (diff->isRowHidden(r) ? hiddenKeys : visibleKeys) += 1;
    }
    QVERIFY2(sections.contains(QStringLiteral("[optimizer.muon]")), qPrintable(sections.join(',')));
    QVERIFY(foldRow >= 0);
    QVERIFY(hiddenKeys >= 3);   // momentum, nesterov, ns_steps, ...: folded
    QVERIFY(visibleKeys >= 1);  // optimizer.kind, run.name at least
    QCOMPARE(diff->item(foldRow, 1)->text().endsWith(QLatin1String("keys")), true);
    QCOMPARE(diff->item(foldRow, 2)->text(), QStringLiteral("–"));  // the AdamW run has none
    view.setSectionExpanded(QStringLiteral("optimizer.muon"), true);
    QVERIFY(!diff->isRowHidden(foldRow + 1));
    view.setSectionExpanded(QStringLiteral("optimizer.muon"), false);
    QVERIFY(diff->isRowHidden(foldRow + 1));
    // Every run's value in view beside the keys (the widest key row filled the table, and the
    // values sat behind it): the columns fit the table, each value column readable — also beside
    // the plots, where the table is narrow.
    view.resize(1200, 700);
    QTRY_COMPARE(view.splitter()->orientation(), Qt::Horizontal);
    QTRY_VERIFY2(diff->horizontalHeader()->length() <= diff->viewport()->width(),
                 qPrintable(QStringLiteral("%1 > %2")
                                .arg(diff->horizontalHeader()->length())
                                .arg(diff->viewport()->width())));
    for (int c = 1; c < diff->columnCount(); ++c)
      QVERIFY2(diff->columnWidth(c) >= 60, qPrintable(QString::number(diff->columnWidth(c))));
    view.resize(700, 700);

    // The step times as one stacked bar per run (mean ms per phase), not ten lines.
    ui::PlotsPanel* plots = view.plots();
    QVERIFY(plots->stepTimeBars()->isVisible());
    QVERIFY(!plots->plots()[ui::PlotsPanel::StepTime]->isVisible());
    const auto phases = plots->meanStepPhases();
    QCOMPARE(phases.size(), std::size_t{2});
    QVERIFY(phases.at(muon).size() >= 4);  // data, forward, backward, optimizer (+ Newton–Schulz)
    QCOMPARE(plots->stepTimeBars()->plottableCount(), static_cast<int>(phases.at(muon).size()));
    const auto stored = store.series(adamw, "time.forward_ms");
    double sum = 0;
    for (double v : stored.value)
      sum += v;
    double drawn = -1;
    for (const auto& [label, ms] : phases.at(adamw))
      if (label == QLatin1String("forward")) drawn = ms;
    QVERIFY(std::abs(drawn - sum / static_cast<double>(stored.value.size())) < 1e-9);
    // Their y labels keep apart on a short plot.
    plots->stepTimeBars()->replot(QCustomPlot::rpImmediateRefresh);
    plots->stepTimeBars()->replot(QCustomPlot::rpImmediateRefresh);  // the fitted tick count
    QVERIFY2(test::crowdedTickLabels(plots->stepTimeBars()->yAxis).isEmpty(),
             qPrintable(test::crowdedTickLabels(plots->stepTimeBars()->yAxis)));

    // Whole legend names: one column when two do not fit side by side.
    ui::MetricPlot* eval = plots->plots()[ui::PlotsPanel::EvalMetric];
    eval->resize(260, 220);
    eval->replotNow();
    QCOMPARE(eval->legendColumns(), 1);
    eval->resize(1200, 300);
    eval->replotNow();
    QCOMPARE(eval->legendColumns(), 2);
  }

  // 40 000 steps on a plot as narrow as a compare pane's, linear and log y: tick labels never
  // run into one another (QCustomPlot's defaults put five x labels such as "10000" in 130 px),
  // and a log axis of under two decades is labelled between its powers of ten.
  void narrowPlotsKeepTheirTickLabelsApart() {
    ui::MetricPlot plot(QStringLiteral("Loss"), QStringLiteral("loss"));
    plot.ensureCurve(QStringLiteral("a"), QStringLiteral("#1 train loss"), Qt::blue);
    std::vector<double> step, wall, value;
    for (int i = 0; i <= 40000; i += 100) {
      step.push_back(i);
      wall.push_back(i * 0.01);
      value.push_back(2.0 * std::exp(-i / 8000.0) + 0.05);
    }
    plot.append(QStringLiteral("a"), step, wall, value);
    // Three more curves: a compare pane's Loss plot (train and eval loss of two runs).
    for (const char* id : {"b", "c", "d"}) {
      plot.ensureCurve(QLatin1String(id), QStringLiteral("#2 eval loss %1").arg(QLatin1String(id)),
                       Qt::red, Qt::DashLine, true);
      plot.append(QLatin1String(id), step, wall, value);
    }
    plot.show();
    QVERIFY(QTest::qWaitForWindowExposed(&plot));
    for (const bool logY : {false, true}) {
      plot.setLogY(logY);
      for (const int width : {1000, 400, 230}) {
        plot.resize(width, 300);
        QTest::qWait(20);
        plot.replotNow();
        plot.replotNow();  // with the tick counts fitted to the first layout's axis rect
        // At its least height too, the legend's four rows do not overlap.
        if (width == 230) {
          plot.resize(width, plot.minimumHeight());
          QTest::qWait(20);
          plot.replotNow();
          plot.plot()->replot(QCustomPlot::rpImmediateRefresh);
          QCPLegend* legend = plot.plot()->legend;
          QList<QRect> rows;
          for (int i = 0; i < legend->itemCount(); ++i)
            if (const QCPAbstractLegendItem* item = legend->item(i)) {
              for (const QRect& other : rows)
                QVERIFY2(
                    !other.intersects(item->rect()),
                    qPrintable(
                        QStringLiteral("legend rows overlap at %1 px high").arg(plot.height())));
              rows << item->rect();
            }
          QCOMPARE(rows.size(), 4);
        }
        for (const QCPAxis* axis : {plot.plot()->xAxis, plot.plot()->yAxis}) {
          const QString where = QStringLiteral("%1 px wide, log y %2: ").arg(width).arg(logY);
          QVERIFY2(axis->tickVector().size() >= 2, qPrintable(where));
          // 0.05 .. 2.05 on a log axis 300 px high: more than its two powers of ten labelled.
          if (logY && axis == plot.plot()->yAxis && plot.height() >= 300)
            QVERIFY2(axis->tickVector().size() >= 3,
                     qPrintable(where + axis->tickVectorLabels().join(QLatin1Char(' '))));
          QVERIFY2(test::crowdedTickLabels(axis).isEmpty(),
                   qPrintable(where + test::crowdedTickLabels(axis)));
        }
      }
    }
  }

  void tokensPerSecondGetTheirOwnAxis() {
    // A language model's throughput: tokens/s (64x samples/s at context 64) on the right-hand
    // axis, so the samples/s curve is not a flat line at zero under it.
    ui::PlotsPanel panel;
    panel.resize(1200, 800);
    panel.addRun(1, QStringLiteral("lm"), ui::runColor(0));
    std::vector<api::StepMetrics> steps;
    for (std::int64_t s = 1; s <= 20; ++s)
      steps.push_back(loggedStep(
          s, 0.01,
          {{"loss", 3.0}, {"samples_per_s", 200.0 + s}, {"tokens_per_s", 64 * (200.0 + s)}}));
    panel.appendSteps(1, steps);
    panel.replotAll();
    ui::MetricPlot* throughput = panel.plots()[ui::PlotsPanel::Throughput];
    int left = 0, right = 0;
    for (const auto& [id, c] : throughput->curves())
      (c.right ? right : left) += 1;
    QCOMPARE(left, 1);
    QCOMPARE(right, 1);
    QCOMPARE(throughput->plot()->yAxis2->label(), QStringLiteral("tokens/s"));
    QVERIFY(throughput->plot()->yAxis->range().upper < 1000);  // scaled to the samples/s
  }

  void aLegendRefitsItsColumnsWhenThePlotIsResized() {
    // The legend's columns followed only redraws of new points: a finished run's step-time plot
    // laid out narrow at first kept one column of four rows at 430 px, pushing the plots below
    // out of view on a laptop screen. A resize alone now refits them.
    ui::MetricPlot plot(QStringLiteral("Step time"), QStringLiteral("ms"));
    for (const char* phase : {"data", "forward", "backward", "optimizer"}) {
      plot.ensureCurve(QLatin1String(phase), QLatin1String(phase), Qt::blue);
      plot.append(QLatin1String(phase), {1, 2, 3}, {0.1, 0.2, 0.3}, {1, 2, 3});
    }
    plot.resize(210, 400);
    plot.show();
    QVERIFY(QTest::qWaitForWindowExposed(&plot));
    plot.replotNow();
    const int narrow = plot.legendColumns();
    plot.resize(600, 400);
    QTRY_VERIFY2(plot.legendColumns() > narrow,
                 qPrintable(QStringLiteral("%1 columns at 210 px, %2 at 600 px")
                                .arg(narrow)
                                .arg(plot.legendColumns())));
  }

  void xLabelsBetweenTwoYAxesStayApart() {
    // The Compare tab's LR plot: Muon's LR on the left axis, AdamW's on the right, steps 10-300,
    // the axis rect ~55 px wide between them — "100", "200" and "300" read "1002003300".
    ui::MetricPlot plot(QStringLiteral("Learning rate"), QStringLiteral("Muon lr"));
    plot.ensureCurve(QStringLiteral("m"), QStringLiteral("#2 LR muon.0"), Qt::blue);
    plot.ensureCurve(QStringLiteral("a"), QStringLiteral("#1 LR adamw.0 (right)"), Qt::red,
                     Qt::DashLine, false, true);
    std::vector<double> step, wall, muon, adamw;
    for (int i = 10; i <= 300; i += 10) {  // run.log_interval = 10
      step.push_back(i);
      wall.push_back(i * 0.01);
      muon.push_back(0.02 * (1.0 - i / 600.0));
      adamw.push_back(0.001 * (1.0 - i / 600.0));
    }
    plot.append(QStringLiteral("m"), step, wall, muon);
    plot.append(QStringLiteral("a"), step, wall, adamw);
    plot.setYAxisLabels(QStringLiteral("Muon lr"), QStringLiteral("AdamW lr"));
    plot.show();
    QVERIFY(QTest::qWaitForWindowExposed(&plot));
    for (const int width : {400, 240, 200}) {
      plot.resize(width, 220);
      QTest::qWait(20);
      for (int i = 0; i < 4; ++i) {  // the counts fitted to the layout, then to the drawn labels
        plot.replotNow();
        plot.plot()->replot(QCustomPlot::rpImmediateRefresh);
      }
      const QCPAxis* x = plot.plot()->xAxis;
      const QString where = QStringLiteral("%1 px wide (axis rect %2 px): ")
                                .arg(width)
                                .arg(plot.plot()->axisRect()->width());
      QVERIFY2(!x->tickVector().isEmpty(), qPrintable(where));
      QVERIFY2(test::crowdedTickLabels(x).isEmpty(),
               qPrintable(where + test::crowdedTickLabels(x)));
    }
  }

  void aRunWithoutLoggedStepsShowsNoStepsNotZero() {
    // A run that failed before its first step: the report and compare say "–", as `runs` says
    // "-", not "0 steps".
    QTemporaryDir dir;
    const QString db = dir.filePath(QStringLiteral("runs.sqlite"));
    const QString empty = dir.filePath(QStringLiteral("no-data"));
    QVERIFY(QDir().mkpath(empty));
    api::TrainRequest req;
    req.config_text = QStringLiteral(
                          "[run]\nname = \"nodata\"\n[data]\nkind = \"fashion-mnist\"\n"
                          "path = \"%1\"\n")
                          .arg(empty)
                          .toStdString();
    req.db_path = db.toStdString();
    const auto out = api::start_training(req, {}, {});
    QCOMPARE(QString::fromStdString(out.status), QStringLiteral("failed"));
    api::StoreReader store(db.toStdString());
    const auto rows = ui::summarizeRuns(store, {out.run_id}, ui::Target{});
    QCOMPARE(rows.size(), std::size_t{1});
    QVERIFY(!rows[0].steps.has_value());
    const ui::Report report = ui::buildReport(store, {out.run_id});
    const QString row =
        QStringLiteral("<td>%1</td><td>nodata</td><td>failed</td><td>–</td>").arg(out.run_id);
    QVERIFY2(report.html.contains(row), qPrintable(report.html));
    ui::CompareView view;
    view.setRuns(&store, {out.run_id});
    bool dash = false;
    for (int r = 0; r < view.summaryTable()->rowCount(); ++r)
      if (view.summaryTable()->verticalHeaderItem(r) &&
          view.summaryTable()->verticalHeaderItem(r)->text() == QStringLiteral("steps"))
        dash = view.summaryTable()->item(r, 0)->text() == QStringLiteral("–");
    QVERIFY(dash);
    // Resume is offered for a failed run, as `run --resume` takes one (this one, which has no
    // checkpoint, is then refused saying so).
    ui::MainWindow window(db);
    window.runsModel()->refresh();
    auto* resume = window.runsView()->findChild<QPushButton*>(QStringLiteral("resumeButton"));
    QVERIFY(resume);
    window.runsView()->selectRun(out.run_id);
    QTRY_VERIFY(resume->isEnabled());
  }

  // A report that cannot be written whole (a full disk; here a file-size limit, which fails the
  // same writes with EFBIG) is an error naming the file, and an earlier report there is kept:
  // it used to be said "written" with the file cut short, the earlier one lost.
  void aReportThatCannotBeWrittenWholeKeepsTheOldFile() {
    QTemporaryDir dir;
    ui::Report report;
    report.html = QStringLiteral("<p>%1</p>").arg(QString(400000, QLatin1Char('x')));
    report.htmlWithResources = QStringLiteral("<p>%1</p>").arg(QString(4000, QLatin1Char('x')));
    for (const QString& name : {QStringLiteral("r.html"), QStringLiteral("r.pdf")}) {
      const QString path = dir.filePath(name);
      QVERIFY(test::writeFile(path, QStringLiteral("the earlier report")));
      struct rlimit old {};
      QCOMPARE(getrlimit(RLIMIT_FSIZE, &old), 0);
      const auto oldHandler = std::signal(SIGXFSZ, SIG_IGN);
      struct rlimit small = old;
      small.rlim_cur = name.endsWith(QLatin1String(".pdf")) ? 2000 : 100000;
      QCOMPARE(setrlimit(RLIMIT_FSIZE, &small), 0);
      const QString error = ui::writeReport(report, path);
      setrlimit(RLIMIT_FSIZE, &old);
      std::signal(SIGXFSZ, oldHandler);
      QVERIFY2(error.startsWith(QStringLiteral("[report] cannot write ") + path + QLatin1Char(':')),
               qPrintable(error));
      QVERIFY2(error.contains(QStringLiteral("the file is left as it was")), qPrintable(error));
      QFile kept(path);
      QVERIFY(kept.open(QIODevice::ReadOnly));
      QCOMPARE(kept.readAll(), QByteArray("the earlier report"));
      QCOMPARE(QDir(dir.path()).entryList(QDir::Files).size(), 1);  // no temporary file left
      QVERIFY(QFile::remove(path));
    }
  }

  // Muon against AdamW: the report's config differences list the keys the runs differ on first
  // (optimizer.kind), and apart from them the two dozen keys only one run's config has (each
  // optimizer's own), which used to bury them.
  void reportListsTheKeysOnlySomeRunsHaveApart() {
    QTemporaryDir dir;
    const QString db = dir.filePath(QStringLiteral("runs.sqlite"));
    const QString adamw = test::blobsConfig(5, QStringLiteral("adamw"), 0.01);
    QString muon = test::blobsConfig(5, QStringLiteral("muon"), 0.01, QStringLiteral("muon"));
    muon.replace(QStringLiteral("\nlr = 0.01"), QString());  // [optimizer.muon] has its own
    const qint64 a = train(db, adamw);
    const qint64 b = train(db, muon);
    const qint64 c = train(db, test::blobsConfig(5, QStringLiteral("adamw-fast"), 0.02));
    QVERIFY(a > 0 && b > 0 && c > 0);
    api::StoreReader store(db.toStdString());
    const QString html = ui::buildReport(store, {a, b}).html;
    const auto kind = html.indexOf(QStringLiteral("<td>optimizer.kind</td>"));
    const auto apart = html.indexOf(QStringLiteral("Keys only some runs' configs have"));
    const auto muonLr = html.indexOf(QStringLiteral("<td>optimizer.muon.lr</td>"));
    QVERIFY2(kind >= 0 && apart > kind && muonLr > apart, qPrintable(html.left(200)));
    // Three runs, two AdamW rates and a Muon: optimizer.lr differs among the runs that have it,
    // so it is listed with the keys compared, in the report and the Compare tab — not folded
    // away because the Muon run lacks it.
    const QString three = ui::buildReport(store, {a, b, c}).html;
    const auto lr = three.indexOf(QStringLiteral("<td>optimizer.lr</td>"));
    QVERIFY(lr >= 0 && lr < three.indexOf(QStringLiteral("Keys only some runs' configs have")));
    ui::CompareView view;
    view.setRuns(&store, {a, b, c});
    bool shown = false;
    for (int r = 0; r < view.diffTable()->rowCount(); ++r)
      if (view.diffTable()->item(r, 0)->data(Qt::UserRole).toString() ==
          QStringLiteral("optimizer.lr"))
        shown = !view.diffTable()->isRowHidden(r);
    QVERIFY(shown);
  }

  void compareShowsExactlyTheDifferingKeysAndTheReportHoldsEveryRun() {
    QTemporaryDir dir;
    const QString db = dir.filePath(QStringLiteral("runs.sqlite"));
    const QString evil = QStringLiteral("<script>alert(\"x\")</script> & co");
    const qint64 a = train(db, test::blobsConfig(30, QStringLiteral("plain"), 0.01));
    const qint64 b = train(db, test::blobsConfig(30, evil, 0.02));
    QVERIFY(a > 0 && b > 0);
    api::StoreReader store(db.toStdString());

    ui::CompareView view;
    view.setRuns(&store, {a, b});
    QTableWidget* diff = view.diffTable();
    std::set<QString> keys;
    for (int r = 0; r < diff->rowCount(); ++r)
      if (!diff->item(r, 0)->data(Qt::UserRole).toString().isEmpty())
        keys.insert(diff->item(r, 0)->data(Qt::UserRole).toString());
    QCOMPARE(keys, (std::set<QString>{QStringLiteral("optimizer.lr"), QStringLiteral("run.name")}));
    // Overlaid curves: one loss curve per run, in the runs' colours.
    ui::MetricPlot* loss = view.plots()->plots()[ui::PlotsPanel::Loss];
    int trainCurves = 0;
    for (const auto& [id, c] : loss->curves())
      if (id.endsWith(QLatin1String("/loss"))) ++trainCurves;
    QCOMPARE(trainCurves, 2);
    QCOMPARE(view.summaryTable()->columnCount(), 2);

    const ui::Report report = ui::buildReport(store, {a, b});
    QXmlStreamReader xml(report.html);
    int runRows = 0;
    std::set<QString> runIds;
    int images = 0;
    while (!xml.atEnd()) {
      xml.readNext();
      if (xml.isStartElement() && xml.name() == QLatin1String("tr") &&
          xml.attributes().value(QLatin1String("class")) == QLatin1String("run")) {
        ++runRows;
        runIds.insert(xml.attributes().value(QLatin1String("data-run")).toString());
      }
      if (xml.isStartElement() && xml.name() == QLatin1String("img")) {
        ++images;
        QVERIFY(xml.attributes()
                    .value(QLatin1String("src"))
                    .startsWith(QLatin1String("data:image/png;base64,")));
      }
    }
    QVERIFY2(!xml.hasError(), qPrintable(xml.errorString()));
    QCOMPARE(runRows, 2);
    QCOMPARE(runIds, (std::set<QString>{QString::number(a), QString::number(b)}));
    QVERIFY(images >= 4);
    // The embedded plots are drawn (rendered offscreen from hidden widgets), not blank frames.
    for (const QImage& img : report.images) {
      QSet<QRgb> colours;
      for (int y = 0; y < img.height(); y += 3)
        for (int x = 0; x < img.width(); x += 3)
          colours.insert(img.pixel(x, y));
      QVERIFY2(colours.size() > 8, "a report plot is blank");
    }
    QVERIFY(!report.html.contains(QStringLiteral("<script>")));
    QVERIFY(report.html.contains(
        QStringLiteral("&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt; &amp; co")));

    const QString html = dir.filePath(QStringLiteral("r.html"));
    const QString pdf = dir.filePath(QStringLiteral("r.pdf"));
    QCOMPARE(ui::writeReport(report, html), QString());
    QCOMPARE(ui::writeReport(report, pdf), QString());
    QFile p(pdf);
    QVERIFY(p.open(QIODevice::ReadOnly));
    const QByteArray bytes = p.readAll();
    QVERIFY(bytes.startsWith("%PDF-"));
    QVERIFY(bytes.size() > 10000);  // the plots are in it
    // Landscape pages: A4's MediaBox is 842 x 595 points.
    const QRegularExpressionMatch box =
        QRegularExpression(QStringLiteral("/MediaBox \\[0 0 ([0-9.]+) ([0-9.]+)\\]"))
            .match(QString::fromLatin1(bytes));
    QVERIFY(box.hasMatch());
    QVERIFY2(box.captured(1).toDouble() > box.captured(2).toDouble(), qPrintable(box.captured(0)));

    // Laid out for the page: no table cell breaks a word across lines (eleven summary columns
    // on a portrait page wrapped "duration" as "dur/atio/n"), the plots and the configs start
    // pages of their own, and each run's step time is a plot of its own.
    const auto doc = ui::pdfDocument(report);
    int cells = 0;
    for (QTextBlock block = doc->begin(); block.isValid(); block = block.next()) {
      if (!QTextCursor(block).currentTable()) continue;
      ++cells;
      const int words =
          static_cast<int>(block.text().split(QLatin1Char(' '), Qt::SkipEmptyParts).size());
      QVERIFY2(block.layout()->lineCount() <= std::max(1, words),
               qPrintable(QStringLiteral("'%1' takes %2 lines")
                              .arg(block.text())
                              .arg(block.layout()->lineCount())));
    }
    QVERIFY(cells > 20);
    QVERIFY(doc->pageCount() >= 3);
    // Two plots to a page: a spacing guess that left the second plot no room put every plot on
    // a page of its own (and left the page after the heading blank).
    std::map<int, int> plotsOnPage;
    const double pageHeight = doc->pageSize().height();
    for (QTextBlock block = doc->begin(); block.isValid(); block = block.next())
      for (auto it = block.begin(); !it.atEnd(); ++it) {
        if (!it.fragment().charFormat().isImageFormat()) continue;
        const QTextLine line =
            block.layout()->lineForTextPosition(it.fragment().position() - block.position());
        const double blockTop = doc->documentLayout()->blockBoundingRect(block).top();
        const int page = static_cast<int>((blockTop + line.y()) / pageHeight);
        ++plotsOnPage[page];
        // No caption under it (the plot draws its title); it ends on its page, and takes the
        // text's width (it used to take two thirds) without passing it.
        QCOMPARE(block.layout()->lineCount(), 1);
        QCOMPARE(static_cast<int>((blockTop + line.y() + line.height() - 1.0) / pageHeight), page);
        const QTextImageFormat image = it.fragment().charFormat().toImageFormat();
        QCOMPARE(image.width(), ui::pdfContentWidth());
        QVERIFY(image.width() > 0.9 * doc->pageSize().width());
        QVERIFY(line.naturalTextWidth() <= doc->documentLayout()->blockBoundingRect(block).width());
      }
    // The "Plots" heading is on the page its page break starts: moving it to keep it with three
    // lines (three plots) left that page blank.
    for (QTextBlock block = doc->begin(); block.isValid(); block = block.next())
      if (block.blockFormat().headingLevel() > 0 && block.text() == QLatin1String("Plots"))
        QCOMPARE(
            static_cast<int>(doc->documentLayout()->blockBoundingRect(block).top() / pageHeight),
            static_cast<int>(doc->documentLayout()->blockBoundingRect(block.previous()).top() /
                             pageHeight));
    const int placed = std::accumulate(plotsOnPage.begin(), plotsOnPage.end(), 0,
                                       [](int sum, const auto& kv) { return sum + kv.second; });
    QCOMPARE(placed, static_cast<int>(report.pdfImages.size()));
    QVERIFY(plotsOnPage.size() >= 2);
    for (auto it = plotsOnPage.begin(); std::next(it) != plotsOnPage.end(); ++it)
      QVERIFY2(
          it->second == 2,
          qPrintable(QStringLiteral("page %1 holds %2 plots").arg(it->first + 1).arg(it->second)));
    QVERIFY(report.imageTitles.contains(QStringLiteral("Step time: run %1 plain").arg(a)));
    QCOMPARE(report.imageTitles.filter(QStringLiteral("Step time")).size(), 2);
    const QList<QImage> pages = ui::pdfPageImages(report, 1.0);
    QCOMPARE(pages.size(), doc->pageCount());
    QVERIFY(pages.first().width() > pages.first().height());
    const QString shots = qEnvironmentVariable("TB_REPORT_PAGES_DIR");
    if (!shots.isEmpty())
      for (int i = 0; i < pages.size(); ++i)
        pages[i].save(QStringLiteral("%1/report-page-%2.png").arg(shots).arg(i + 1));
    // An unknown run is an error naming it.
    bool threw = false;
    try {
      ui::buildReport(store, {a, 999});
    } catch (const std::exception& e) {
      threw = QString::fromUtf8(e.what()).contains(QStringLiteral("999"));
    }
    QVERIFY(threw);
  }
};

QTEST_MAIN(TestRunsReport)
#include "tst_runs_report.moc"
