// The report of a sweep (see sweep_report.h).
#include "ui/report/sweep_report.h"

#include <QImage>

#include <algorithm>
#include <cmath>

#include <qcustomplot.h>

#include "ui/sweeps/sweep_view.h"

namespace tb::ui {
namespace {

QString num(const std::optional<double>& v) {
  return v ? QString::number(*v, 'g', 5) : QStringLiteral("–");
}

}  // namespace

Report buildSweepReport(const api::StoreReader& store, const QString& name,
                        const SweepReportOptions& options) {
  const api::SweepResult sweep = store.sweep(name.toStdString());  // throws for an unknown one
  const auto& plan = sweep.plan;
  const QString title = QStringLiteral("TrainBench sweep report: %1").arg(name);
  Report report;
  QString body;
  body += reportHeading(title, store);
  int finished = 0;
  int stopped = 0;
  for (const auto& t : sweep.trials) {
    finished += t.status == "finished" ? 1 : 0;
    stopped += t.stopped ? 1 : 0;
  }
  QString stopping = QStringLiteral("none");
  if (plan.stopping != "none") {
    QStringList rungs;
    for (auto r : plan.rungs)
      rungs << QString::number(r);
    stopping = QString::fromStdString(plan.stopping) + QStringLiteral(" at steps ") +
               rungs.join(QStringLiteral(", "));
    if (plan.stopping == "successive_halving")
      stopping += QStringLiteral(" (keep the best 1/%1)").arg(plan.reduction_factor);
  }
  body += QStringLiteral(
              "<h2>Summary</h2>\n<table class=\"summary\">\n"
              "<tr><th>status</th><td>%1</td></tr>\n<tr><th>method</th><td>%2</td></tr>\n"
              "<tr><th>metric</th><td>%3 (%4; each run's best, mean over seeds)</td></tr>\n"
              "<tr><th>swept keys</th><td>%5</td></tr>\n"
              "<tr><th>trials</th><td>%6: %7 finished, %8 stopped early</td></tr>\n"
              "<tr><th>early stopping</th><td>%9</td></tr>\n</table>\n")
              .arg(htmlEscape(QString::fromStdString(sweep.status)),
                   htmlEscape(QString::fromStdString(plan.method)),
                   htmlEscape(QString::fromStdString(plan.metric)),
                   plan.goal == "max" ? QStringLiteral("higher is better")
                                      : QStringLiteral("lower is better"),
                   htmlEscape(QString::fromStdString([&] {
                     std::string keys;
                     for (const auto& k : plan.keys)
                       keys += (keys.empty() ? "" : ", ") + k;
                     return keys;
                   }())))
              .arg(sweep.trials.size())
              .arg(finished)
              .arg(stopped)
              .arg(htmlEscape(stopping));

  body += QStringLiteral(
      "<h2>Points, best first</h2>\n<table "
      "class=\"points\">\n<thead><tr><th>point</th><th>mean</th>"
      "<th>sd</th><th>finished</th><th>stopped</th><th>runs</th><th>values</th></tr></thead>\n");
  for (const auto& p : sweep.points) {
    QStringList runs;
    for (auto id : p.run_ids)
      runs << QString::number(id);
    body +=
        QStringLiteral(
            "<tr class=\"point\"><td>p%1</td><td>%2</td><td>%3</td><td>%4/%5</td><td>%6</td>"
            "<td>%7</td><td>%8</td></tr>\n")
            .arg(p.point)
            .arg(num(p.mean), num(p.stddev))
            .arg(p.finished)
            .arg(p.runs)
            .arg(p.stopped ? QStringLiteral("at %1 (%2)").arg(*p.stopped).arg(num(p.stopped_value))
                           : QString(),
                 runs.join(QStringLiteral(", ")), htmlEscape(QString::fromStdString(p.values)));
  }
  body += QStringLiteral("</table>\n");

  // The plots, drawn by the Sweeps tab's own view.
  SweepView view;
  view.resize(options.plotWidth * 2, options.plotHeight * 2);
  view.setStore(&store);
  view.showSweep(name);
  QString plotsHtml, plotsHtmlRes;
  // The PDF: two plots (and captions) to a landscape page, each the text's full width.
  const double pdfH = pdfPlotHeight();
  const double pdfW = pdfContentWidth();
  constexpr int kPdfH = 290;
  const int pdfPixelsW = static_cast<int>(std::lround(kPdfH * pdfW / pdfH));
  auto addPlot = [&](QCustomPlot* plot, const QString& plotTitle) {
    // Each image laid out at its size first: the tick counts fitted to a layout (one x label
    // per 70 px) are drawn by the next one.
    auto draw = [&](int w, int h, double scale) {
      if (plot == view.parallelPlot()) view.fitParallelTo(w);
      plot->toPixmap(w, h, scale);
      return plot->toPixmap(w, h, scale).toImage();
    };
    const QImage img = draw(options.plotWidth, options.plotHeight, 1.0);
    // The PDF's: drawn at a smaller size (its labels then print at about 7 pt) and twice the
    // resolution.
    const QImage pdfImg = draw(pdfPixelsW, kPdfH, 2.0);
    const int n = static_cast<int>(report.images.size());
    report.images.append(img);
    report.pdfImages.append(pdfImg);
    report.imageTitles.append(plotTitle);
    plotsHtml += htmlFigure(img, plotTitle, options.plotWidth, options.plotHeight);
    plotsHtmlRes += pdfFigure(n, plotTitle, static_cast<int>(pdfW), static_cast<int>(pdfH));
  };
  for (const QString& key : view.xKeys()) {
    view.setXKey(key);
    if (view.curves().empty()) continue;
    addPlot(view.curvePlot(),
            QStringLiteral("best %1 against %2 (mean over the seeds; the band spans them)")
                .arg(QString::fromStdString(plan.metric), key));
  }
  if (finished > 0)
    addPlot(view.parallelPlot(),
            QStringLiteral("parallel coordinates: every finished trial's keys and %1")
                .arg(QString::fromStdString(plan.metric)));

  QString trials = QStringLiteral(
      "<h2>Trials</h2>\n<table "
      "class=\"trials\">\n<thead><tr><th>trial</th><th>point</th><th>seed</th>"
      "<th>status</th><th>best</th><th>steps</th><th>run</th></tr></thead>\n");
  for (const auto& t : sweep.trials) {
    QString status = QString::fromStdString(t.status.empty() ? "not started" : t.status);
    if (t.stopped) status = QStringLiteral("stopped at %1").arg(*t.stopped);
    trials += QStringLiteral(
                  "<tr class=\"trial\"><td>%1</td><td>p%2</td><td>%3</td><td>%4</td><td>%5</td>"
                  "<td>%6</td><td>%7</td></tr>\n")
                  .arg(t.trial.index)
                  .arg(t.trial.point)
                  .arg(t.trial.seed)
                  .arg(htmlEscape(status), num(t.best),
                       t.steps ? QString::number(*t.steps) : QStringLiteral("–"),
                       t.run ? QString::number(*t.run) : QStringLiteral("–"));
  }
  trials += QStringLiteral("</table>\n");

  // The best points' best trials' configs.
  QString configs = QStringLiteral("<h2>Configs of the best points</h2>\n");
  int shown = 0;
  const bool max = plan.goal == "max";
  for (const auto& p : sweep.points) {
    if (!p.mean || shown >= options.bestConfigs) break;
    const api::SweepTrialResult* best = nullptr;
    for (const auto& t : sweep.trials)
      if (t.trial.point == p.point && t.best &&
          (!best || (max ? *t.best > *best->best : *t.best < *best->best)))
        best = &t;
    if (!best) continue;
    configs += QStringLiteral("<h3>p%1 (%2): trial %3, run %4, best %5</h3>\n<pre>%6</pre>\n")
                   .arg(p.point)
                   .arg(htmlEscape(QString::fromStdString(p.values)))
                   .arg(best->trial.index)
                   .arg(best->run ? QString::number(*best->run) : QStringLiteral("–"))
                   .arg(num(best->best))
                   .arg(htmlEscape(QString::fromStdString(best->config)));
    ++shown;
  }

  const QString head = reportHtmlHead(title);
  const QString tail = QStringLiteral("</body>\n</html>\n");
  report.html =
      head + body + QStringLiteral("<h2>Plots</h2>\n") + plotsHtml + trials + configs + tail;
  report.htmlWithResources = head + body + pdfPageBreak() + QStringLiteral("<h2>Plots</h2>\n") +
                             plotsHtmlRes + pdfPageBreak() + trials + configs + tail;
  return report;
}

}  // namespace tb::ui
