#include "ui/report/report.h"
#include "engine/api/metrics.h"

#include <QAbstractTextDocumentLayout>
#include <QBuffer>
#include <QDateTime>
#include <QFont>
#include <QMarginsF>
#include <QPageLayout>
#include <QPageSize>
#include <QPainter>
#include <QPdfWriter>
#include <QSaveFile>
#include <QTextBlock>
#include <QTextCursor>
#include <QTextDocument>
#include <QUrl>

#include <algorithm>
#include <cmath>
#include <memory>
#include <numeric>
#include <stdexcept>
#include <string>

#include <qcustomplot.h>

#include "ui/live_plots/metric_plot.h"
#include "ui/live_plots/plots_panel.h"

namespace tb::ui {

QString htmlEscape(const QString& text) {
  QString out;
  out.reserve(text.size());
  for (QChar c : text) {
    switch (c.unicode()) {
      case '&':
        out += QStringLiteral("&amp;");
        break;
      case '<':
        out += QStringLiteral("&lt;");
        break;
      case '>':
        out += QStringLiteral("&gt;");
        break;
      case '"':
        out += QStringLiteral("&quot;");
        break;
      case '\'':
        out += QStringLiteral("&#39;");
        break;
      default:
        out += c;
    }
  }
  return out;
}

QString htmlFigure(const QImage& image, const QString& title, int width, int height, bool caption) {
  QByteArray png;
  QBuffer buf(&png);
  buf.open(QIODevice::WriteOnly);
  image.save(&buf, "PNG");
  return QStringLiteral(
             "<figure><img alt=\"%1\" width=\"%2\" height=\"%3\" "
             "src=\"data:image/png;base64,%4\" />%5</figure>\n")
      .arg(htmlEscape(title))
      .arg(width)
      .arg(height)
      .arg(QString::fromLatin1(png.toBase64()),
           caption ? QStringLiteral("<figcaption>%1</figcaption>").arg(htmlEscape(title))
                   : QString());
}

QString pdfFigure(int n, const QString& title, int width, int height, bool caption) {
  return QStringLiteral(
             "<p><img alt=\"%1\" width=\"%2\" height=\"%3\" src=\"plot%4.png\" />%5</p>\n")
      .arg(htmlEscape(title))
      .arg(width)
      .arg(height)
      .arg(n)
      .arg(caption ? QStringLiteral("<br />") + htmlEscape(title) : QString());
}

QString reportHeading(const QString& title, const api::StoreReader& store) {
  return QStringLiteral("<h1>%1</h1>\n<p class=\"meta\">Generated %2 from %3</p>\n")
      .arg(htmlEscape(title), QDateTime::currentDateTimeUtc().toString(Qt::ISODate),
           htmlEscape(QString::fromStdString(store.path())));
}

QString reportHtmlHead(const QString& title) {
  return QStringLiteral(
             "<?xml version=\"1.0\" encoding=\"utf-8\"?>\n<!DOCTYPE html>\n"
             "<html xmlns=\"http://www.w3.org/1999/xhtml\" lang=\"en\">\n<head>\n"
             "<meta charset=\"utf-8\" />\n<title>%1</title>\n<style>\n"
             "body{font-family:sans-serif;margin:2em;max-width:1000px}"
             "table{border-collapse:collapse;margin:0.5em 0 0 0}"
             "th,td{border:1px solid #bbb;padding:3px 8px;text-align:left;font-size:90%}"
             "th{background:#eee}pre{background:#f6f6f6;padding:0.6em;font-size:85%}"
             ".meta{color:#666}figure{margin:1em 0}figcaption{color:#444}\n"
             "</style>\n</head>\n<body>\n")
      .arg(htmlEscape(title));
}

namespace {

const QList<QPair<QString, QString>> kPhases = {
    {QStringLiteral("data"), QLatin1String(api::metric::kDataMs)},
    {QStringLiteral("forward"), QLatin1String(api::metric::kForwardMs)},
    {QStringLiteral("backward"), QLatin1String(api::metric::kBackwardMs)},
    {QStringLiteral("optimizer"), QLatin1String(api::metric::kOptimizerMs)},
    {QStringLiteral("Newton–Schulz"), QLatin1String(api::metric::kNewtonSchulzMs)},
    {QStringLiteral("communication"), QLatin1String(api::metric::kCommMs)},
    {QStringLiteral("step"), QLatin1String(api::metric::kStepMs)},
    // Not a part of the step: one evaluation's time, at each eval.interval.
    {QStringLiteral("evaluation"), QLatin1String(api::metric::kEvalMs)}};

}  // namespace

QStringList stepPhaseNames() {
  QStringList names;
  for (const auto& phase : kPhases)
    names << phase.first;
  return names;
}

namespace {

QString num(const std::optional<double>& v, int precision = 5) {
  return v ? QString::number(*v, 'g', precision) : QStringLiteral("–");
}

}  // namespace

std::vector<RunSummaryRow> summarizeRuns(const api::StoreReader& store, const QList<qint64>& ids,
                                         const Target& target) {
  std::vector<api::RunInfo> all = store.runs();
  std::vector<RunSummaryRow> rows;
  for (qint64 id : ids) {
    auto it =
        std::find_if(all.begin(), all.end(), [&](const api::RunInfo& r) { return r.id == id; });
    if (it == all.end())
      throw std::invalid_argument("[report] run " + std::to_string(id) + " is not in " +
                                  store.path());
    RunSummaryRow row;
    row.id = id;
    row.name = QString::fromStdString(it->name);
    row.status = QString::fromStdString(it->status);
    if (it->last_step) row.steps = *it->last_step;
    if (it->started_at) {
      const double end =
          it->ended_at ? *it->ended_at : QDateTime::currentMSecsSinceEpoch() / 1000.0;
      row.duration = std::max(0.0, end - *it->started_at - it->paused_seconds);
    }
    row.finalLoss = it->final_loss;
    row.bestEvalLoss = it->best_eval_loss;
    row.bestAccuracy = it->best_accuracy;
    row.bestPerplexity = it->best_perplexity;
    const api::Series t = store.series(id, target.metric.toStdString());
    row.logsTarget = !t.value.empty();
    const bool higherIsBetter = target.metric.contains(QLatin1String("accuracy"));
    for (std::size_t i = 0; i < t.value.size(); ++i) {
      const double v = t.value[i];
      if (higherIsBetter ? v >= target.value : v <= target.value) {
        row.stepsToTarget = static_cast<qint64>(t.step[i]);
        // From the run's start, as its duration: setup and the steps before the first logged
        // one count (the series' own origin is its first logged point), the time it spent
        // ended before a resume does not (a sweep trial's waits at its rungs).
        row.timeToTarget =
            it->started_at ? store.trained_seconds(id, t.origin + t.wall_s[i]) : t.wall_s[i];
        break;
      }
    }
    for (const auto& [phase, key] : kPhases) {
      const api::Series s = store.series(id, key.toStdString());
      if (s.value.empty()) continue;
      const double mean = std::accumulate(s.value.begin(), s.value.end(), 0.0) /
                          static_cast<double>(s.value.size());
      row.meanPhaseMs.append({phase, mean});
    }
    // Muon's Newton–Schulz is part of the optimizer's time: the optimizer column is the rest, as
    // the stacked step-time plot draws it, so that the phases add up to the step.
    double ns = -1;
    for (const auto& [phase, v] : row.meanPhaseMs)
      if (phase == QStringLiteral("Newton–Schulz")) ns = v;
    if (ns >= 0)
      for (auto& [phase, v] : row.meanPhaseMs)
        if (phase == QStringLiteral("optimizer")) v = std::max(0.0, v - ns);
    rows.push_back(std::move(row));
  }
  return rows;
}

Report buildReport(const api::StoreReader& store, const QList<qint64>& given,
                   const ReportOptions& options) {
  if (given.isEmpty()) throw std::invalid_argument("[report] no runs given");
  const QList<qint64> ids = inRunOrder(given);  // the colours of the GUI's views
  const auto summaries = summarizeRuns(store, ids, options.target);
  QStringList idText;
  for (qint64 id : ids)
    idText << QString::number(id);
  const QString title = !options.title.isEmpty() ? options.title
                        : ids.size() == 1
                            ? QStringLiteral("TrainBench report: run %1").arg(ids.first())
                            : QStringLiteral("TrainBench comparison of runs %1")
                                  .arg(idText.join(QStringLiteral(", ")));
  Report report;
  QString body;
  body += reportHeading(title, store);

  // Summary.
  body += QStringLiteral(
              "<h2>Summary</h2>\n<table class=\"summary\">\n<tr><th>run</th><th>name</th>"
              "<th>status</th><th>steps</th><th>duration (s)</th><th>final loss</th>"
              "<th>best eval loss</th><th>best accuracy</th><th>best perplexity</th>"
              "<th>steps to %1 %2</th><th>time to target (s)</th></tr>\n")
              .arg(htmlEscape(options.target.metric))
              .arg(options.target.value);
  for (const auto& r : summaries) {
    body +=
        QStringLiteral(
            "<tr class=\"run\" data-run=\"%1\"><td>%1</td><td>%2</td><td>%3</td><td>%4</td>"
            "<td>%5</td><td>%6</td><td>%7</td><td>%8</td><td>%9</td><td>%10</td><td>%11</td></"
            "tr>\n")
            .arg(r.id)
            .arg(htmlEscape(r.name), htmlEscape(r.status))
            .arg(r.steps ? QString::number(*r.steps) : QStringLiteral("–"))
            .arg(r.duration ? QString::number(*r.duration, 'f', 1) : QStringLiteral("–"))
            .arg(num(r.finalLoss), num(r.bestEvalLoss), num(r.bestAccuracy), num(r.bestPerplexity))
            .arg(r.stepsToTarget ? QString::number(*r.stepsToTarget)
                 : r.logsTarget  ? QStringLiteral("not reached")
                                 : QStringLiteral("n/a"))
            .arg(r.timeToTarget ? QString::number(*r.timeToTarget, 'f', 1) : QStringLiteral("–"));
  }
  body += QStringLiteral("</table>\n");
  // The PDF's summary: one column per run, so that a page's width holds it (eleven columns of
  // numbers squeezed words to three letters a line on a page).
  QString pdfSummary = QStringLiteral(
      "<h2>Summary</h2>\n<table class=\"summary\" width=\"100%\" cellpadding=\"3\">\n"
      "<thead><tr><th></th>");
  for (const auto& r : summaries)
    pdfSummary += QStringLiteral("<th>run %1 %2</th>").arg(r.id).arg(htmlEscape(r.name));
  pdfSummary += QStringLiteral("</tr></thead>\n");
  auto pdfRow = [&](const QString& label, auto cell) {
    // A row no run has a value in (best perplexity in a report of classifiers) is left out.
    QString cells;
    bool any = false;
    for (const auto& r : summaries) {
      const QString c = cell(r);
      any = any || (c != QStringLiteral("–") && c != QStringLiteral("n/a"));
      cells += QStringLiteral("<td>%1</td>").arg(c);
    }
    if (any) pdfSummary += QStringLiteral("<tr><th>%1</th>%2</tr>\n").arg(htmlEscape(label), cells);
  };
  pdfRow(QStringLiteral("status"), [](const RunSummaryRow& r) { return htmlEscape(r.status); });
  pdfRow(QStringLiteral("steps"), [](const RunSummaryRow& r) {
    return r.steps ? QString::number(*r.steps) : QStringLiteral("–");
  });
  pdfRow(QStringLiteral("duration (s)"), [](const RunSummaryRow& r) {
    return r.duration ? QString::number(*r.duration, 'f', 1) : QStringLiteral("–");
  });
  pdfRow(QStringLiteral("final loss"), [](const RunSummaryRow& r) { return num(r.finalLoss); });
  pdfRow(QStringLiteral("best eval loss"),
         [](const RunSummaryRow& r) { return num(r.bestEvalLoss); });
  pdfRow(QStringLiteral("best accuracy"),
         [](const RunSummaryRow& r) { return num(r.bestAccuracy); });
  pdfRow(QStringLiteral("best perplexity"),
         [](const RunSummaryRow& r) { return num(r.bestPerplexity); });
  pdfRow(QStringLiteral("steps to %1 %2").arg(options.target.metric).arg(options.target.value),
         [](const RunSummaryRow& r) {
           return r.stepsToTarget ? QString::number(*r.stepsToTarget)
                  : r.logsTarget  ? QStringLiteral("not reached")
                                  : QStringLiteral("n/a");
         });
  pdfRow(QStringLiteral("time to target (s)"), [](const RunSummaryRow& r) {
    return r.timeToTarget ? QString::number(*r.timeToTarget, 'f', 1) : QStringLiteral("–");
  });
  pdfSummary += QStringLiteral("</table>\n");
  const int summaryEnd = static_cast<int>(body.size());
  // Mean step time per phase.
  body += QStringLiteral(
      "<h2>Mean step time per phase (ms)</h2>\n<table class=\"phases\">\n<thead><tr><th>run</th>");
  for (const auto& [phase, key] : kPhases)
    body += QStringLiteral("<th>%1</th>").arg(htmlEscape(phase));
  body += QStringLiteral("</tr></thead>\n");
  for (const auto& r : summaries) {
    body += QStringLiteral("<tr><td>%1 %2</td>").arg(r.id).arg(htmlEscape(r.name));
    for (const auto& [phase, key] : kPhases) {
      QString cell = QStringLiteral("–");
      for (const auto& [p, v] : r.meanPhaseMs)
        if (p == phase) cell = QString::number(v, 'f', 3);
      body += QStringLiteral("<td>%1</td>").arg(cell);
    }
    body += QStringLiteral("</tr>\n");
  }
  body += QStringLiteral(
      "</table>\n<p class=\"meta\">optimizer: without Muon's Newton–Schulz, which has its own "
      "column; the phases add up to the step. evaluation: one evaluation (each eval.interval), "
      "outside the steps.</p>\n");

  // Config diff.
  std::vector<std::string> configs;
  for (qint64 id : ids)
    configs.push_back(store.config_text(id));
  if (ids.size() >= 2) {
    const auto diff = api::config_diff(configs);
    body += QStringLiteral("<h2>Config differences</h2>\n");
    if (diff.empty()) {
      body += QStringLiteral("<p>The configs are equal.</p>\n");
    } else {
      // The keys the runs differ on first; then, apart, those only some runs' configs have
      // while the runs that have them agree (Muon's [optimizer.muon] beside AdamW's
      // [optimizer]): two dozen such rows buried optimizer.kind and the learning rates.
      std::vector<const api::ConfigDiffRow*> compared, oneSided;
      for (const auto& row : diff)
        (row.only_some ? oneSided : compared).push_back(&row);
      // <thead>: a diff longer than a page repeats its header row on each page of the PDF.
      // The key column a third of the width: narrower, Qt broke keys mid-word
      // (optimizer.adamw.amsgr|ad) to give the values room.
      auto table = [&](const std::vector<const api::ConfigDiffRow*>& rows) {
        body += QStringLiteral("<table class=\"diff\">\n<thead><tr><th width=\"33%\">key</th>");
        for (const auto& r : summaries)
          body += QStringLiteral("<th>run %1 %2</th>").arg(r.id).arg(htmlEscape(r.name));
        body += QStringLiteral("</tr></thead>\n");
        for (const auto* row : rows) {
          body += QStringLiteral("<tr class=\"diffrow\"><td>%1</td>")
                      .arg(htmlEscape(QString::fromStdString(row->key)));
          for (const auto& v : row->values)
            body += QStringLiteral("<td>%1</td>").arg(htmlEscape(QString::fromStdString(v)));
          body += QStringLiteral("</tr>\n");
        }
        body += QStringLiteral("</table>\n");
      };
      if (!compared.empty()) table(compared);
      if (!oneSided.empty()) {
        body += QStringLiteral(
                    "<p class=\"meta\">Keys only some runs' configs have (another optimizer's or "
                    "model's own settings; \"-\" where a run has none): %1</p>\n")
                    .arg(oneSided.size());
        table(oneSided);
      }
    }
  }

  // Plots, rendered offscreen.
  QString plotsHtml, plotsHtmlRes;
  {
    PlotsPanel panel;
    panel.resize(options.plotWidth, options.plotHeight * 4);
    panel.setSmoothing(options.smoothing);
    int index = 0;
    for (const auto& r : summaries)
      panel.addRun(r.id, QStringLiteral("%1 %2").arg(r.id).arg(r.name), runColor(index++));
    for (const auto& r : summaries)
      panel.loadFromStore(store, r.id);
    // Several runs' step times overlaid are a tangle of one line per phase and run: each run
    // gets its own stacked breakdown instead.
    std::vector<std::pair<MetricPlot*, QString>> toDraw;
    std::vector<std::unique_ptr<PlotsPanel>> perRun;
    for (int i = 0; i < panel.plots().size(); ++i) {
      MetricPlot* p = panel.plots()[i];
      if (!p->hasData()) continue;
      if (i != PlotsPanel::StepTime || summaries.size() < 2) {
        toDraw.emplace_back(p, p->title());
        continue;
      }
      int colour = 0;
      for (const auto& r : summaries) {
        auto& one = perRun.emplace_back(std::make_unique<PlotsPanel>());
        one->resize(options.plotWidth, options.plotHeight * 4);
        one->setSmoothing(options.smoothing);
        one->addRun(r.id, QStringLiteral("%1 %2").arg(r.id).arg(r.name), runColor(colour++));
        one->loadFromStore(store, r.id);
        MetricPlot* q = one->plots()[PlotsPanel::StepTime];
        if (q->hasData()) {
          // The plot says whose it is: no caption below it does.
          const QString whose =
              QStringLiteral("%1: run %2 %3").arg(q->title()).arg(r.id).arg(r.name);
          q->setDrawnTitle(whose);
          toDraw.emplace_back(q, whose);
        }
      }
    }
    for (const auto& [p, plotTitle] : toDraw) {
      p->resize(options.plotWidth, options.plotHeight);
      p->plot()->resize(options.plotWidth, options.plotHeight);
      p->replotNow();
      const QImage img = p->plot()->toPixmap(options.plotWidth, options.plotHeight, 1.0).toImage();
      const int n = static_cast<int>(report.images.size());
      report.images.append(img);
      report.imageTitles.append(plotTitle);
      // Each plot draws its title: no caption repeats it.
      plotsHtml += htmlFigure(img, plotTitle, options.plotWidth, options.plotHeight, false);
      // The PDF: two plots to a landscape page, each the text's full width, drawn for that
      // size — 256 pixels high, their labels then print at about 8 pt — at twice the resolution.
      const double h = pdfPlotHeight();
      const double w = pdfContentWidth();
      constexpr int kPdfH = 256;
      const int pdfW = static_cast<int>(std::lround(kPdfH * w / h));
      p->resize(pdfW, kPdfH);
      p->plot()->resize(pdfW, kPdfH);
      p->replotNow();
      p->plot()->toPixmap(pdfW, kPdfH, 2.0);  // lays the plot out at that size (its ticks)
      report.pdfImages.append(p->plot()->toPixmap(pdfW, kPdfH, 2.0).toImage());
      plotsHtmlRes += pdfFigure(n, plotTitle, static_cast<int>(w), static_cast<int>(h), false);
    }
  }
  QString configsHtml = QStringLiteral("<h2>Configs</h2>\n");
  QString pdfConfigsHtml = pdfPageBreak() + QStringLiteral("<h2>Configs</h2>\n");
  for (std::size_t i = 0; i < configs.size(); ++i) {
    const QString one = QStringLiteral("<h3>run %1 %2</h3>\n<pre>%3</pre>\n")
                            .arg(summaries[i].id)
                            .arg(htmlEscape(summaries[i].name))
                            .arg(htmlEscape(QString::fromStdString(configs[i])));
    configsHtml += one;
    pdfConfigsHtml += one;
  }
  const QString head = reportHtmlHead(title);
  const QString tail = QStringLiteral("</body>\n</html>\n");
  report.html = head + body + QStringLiteral("<h2>Plots</h2>\n") + plotsHtml + configsHtml + tail;
  // The PDF's: the summary by run, and the plots and configs each from a new page.
  const int summaryStart = static_cast<int>(body.indexOf(QStringLiteral("<h2>Summary</h2>")));
  const QString pdfBody = body.left(summaryStart) + pdfSummary + body.mid(summaryEnd);
  report.htmlWithResources = head + pdfBody + pdfPageBreak() + QStringLiteral("<h2>Plots</h2>\n") +
                             plotsHtmlRes + pdfConfigsHtml + tail;
  return report;
}

QString pdfPageBreak() {
  // A paragraph of its own, 1 px high, that starts the next page; the heading follows it. A break
  // on the heading itself left a page blank when a table ended at the foot of the page before:
  // the empty block Qt keeps after a table went onto the next page, and the heading's break then
  // began yet another.
  return QStringLiteral(
      "<p style=\"page-break-before: always; margin: 0; font-size: 1px; line-height: 1px\">"
      "&#8203;</p>\n");
}

QSizeF pdfTextArea() {
  const QPageLayout layout(QPageSize(QPageSize::A4), QPageLayout::Landscape,
                           QMarginsF(15, 15, 15, 15), QPageLayout::Millimeter);
  return layout.paintRectPoints().size();
}

namespace {

// Font, margin and page of every PDF document. Units are points (QTextDocument::print scales the
// page size to the printer's page), so the font is sized in those units rather than in points at
// the screen's resolution.
void setUpPdfDocument(QTextDocument& doc) {
  QFont font = doc.defaultFont();
  font.setPixelSize(10);
  doc.setDefaultFont(font);
  doc.setDocumentMargin(0);
  doc.setPageSize(pdfTextArea());  // laid out in points, a page at a time
}

}  // namespace

double pdfContentWidth() {
  // The width a paragraph gets in the PDF's document: the text area less the body's margins
  // (the report's style sheet), found by laying one out.
  QTextDocument probe;
  setUpPdfDocument(probe);
  probe.setHtml(reportHtmlHead(QString()) + QStringLiteral("<p>probe</p>\n</body>\n</html>\n"));
  probe.pageCount();  // lays it out
  for (QTextBlock b = probe.begin(); b.isValid(); b = b.next())
    if (b.text().trimmed() == QLatin1String("probe"))
      return std::floor(probe.documentLayout()->blockBoundingRect(b).width()) - 1.0;
  return pdfTextArea().width() * 0.9;  // not reached
}

double pdfPlotHeight() {
  // The tallest plot for which the "Plots" heading (after its page break) and two figures with
  // their captions fit one page, found by laying out that page as the PDF does: a guess at the
  // spacing ("text height less 48") pushed the second caption, or the second plot, onto the
  // next page with some fonts.
  QTextDocument probe;
  setUpPdfDocument(probe);
  auto fits = [&probe](int height) {
    const QString fig = pdfFigure(0, QStringLiteral("Probe"), 100, height);
    probe.setHtml(QStringLiteral("<p>before</p>\n") + pdfPageBreak() +
                  QStringLiteral("<h2>Plots</h2>\n") + fig + fig);
    return probe.pageCount() == 2;
  };
  int lo = 50;                                        // fits on any sane page
  int hi = static_cast<int>(pdfTextArea().height());  // never fits twice
  while (hi - lo > 1) {
    const int mid = (lo + hi) / 2;
    (fits(mid) ? lo : hi) = mid;
  }
  return lo - 1.0;  // 1 pt to spare for the rounding of the real figures' widths
}

std::unique_ptr<QTextDocument> pdfDocument(const Report& report) {
  auto doc = std::make_unique<QTextDocument>();
  const QList<QImage>& images = report.pdfImages.isEmpty() ? report.images : report.pdfImages;
  for (int i = 0; i < images.size(); ++i)
    doc->addResource(QTextDocument::ImageResource, QUrl(QStringLiteral("plot%1.png").arg(i)),
                     images[i]);
  setUpPdfDocument(*doc);
  doc->setHtml(report.htmlWithResources);
  keepHeadingsWithTheirText(*doc);
  return doc;
}

std::vector<double> firstLineTops(QTextDocument& doc, const QTextBlock& heading, int count) {
  std::vector<double> tops;
  doc.pageCount();  // lays out the whole document: blockBoundingRect does not
  QAbstractTextDocumentLayout* layout = doc.documentLayout();
  // (A heading right under it counts: "Configs" over "run 1" over its config.)
  for (QTextBlock n = heading.next(); n.isValid() && static_cast<int>(tops.size()) < count;
       n = n.next()) {
    const QRectF r = layout->blockBoundingRect(n);
    if (r.height() < 2.0) continue;  // the empty block Qt puts around a table, a page break
    const QTextLayout* lines = n.layout();
    for (int i = 0; i < lines->lineCount(); ++i) {
      // blockBoundingRect's top is the layout's position; a line's y is relative to it.
      const double top = r.top() + lines->lineAt(i).y();
      if (std::find(tops.begin(), tops.end(), top) != tops.end()) continue;
      if (static_cast<int>(tops.size()) == count) break;
      tops.push_back(top);
    }
  }
  std::sort(tops.begin(), tops.end());
  return tops;
}

int keepHeadingsWithTheirText(QTextDocument& doc) {
  // Qt's rich text has no "page-break-after: avoid" (QTextFormat::PageBreakFlag knows only
  // "always"), so this does what it would: lay the pages out, and move a heading to the top of
  // the next page when the first lines of what it heads (three lines of a paragraph or a
  // config's <pre>, a table's header row and two rows) do not all begin on its page. One heading
  // at a time, from the top, since each move shifts what follows.
  constexpr int kLinesKept = 3;
  const double pageHeight = doc.pageSize().height();
  if (pageHeight <= 0) return 0;
  QAbstractTextDocumentLayout* layout = doc.documentLayout();
  auto pageOf = [&](const QTextBlock& b) {
    return static_cast<int>(layout->blockBoundingRect(b).top() / pageHeight);
  };
  int moved = 0;
  for (QTextBlock b = doc.begin(); b.isValid(); b = b.next()) {
    if (b.blockFormat().headingLevel() == 0) continue;
    doc.pageCount();  // lays out what the last move changed: blockBoundingRect does not
    const double headingTop = layout->blockBoundingRect(b).top();
    if (headingTop - pageOf(b) * pageHeight < 1.0) continue;  // already heads its page
    // Below nothing but the paragraph that breaks the page (pdfPageBreak()), it heads it too:
    // moving it would leave a page blank (two plots, each one tall "line", are all that fit under
    // "Plots").
    bool heads = false;
    for (QTextBlock prev = b.previous(); prev.isValid() && pageOf(prev) == pageOf(b);
         prev = prev.previous()) {
      if (prev.blockFormat().pageBreakPolicy() & QTextFormat::PageBreak_AlwaysBefore) {
        heads = true;
        break;
      }
      if (layout->blockBoundingRect(prev).height() >= 2.0) break;
    }
    if (heads) continue;
    // The tops of the first kLinesKept lines after the heading (a table row's cells share one).
    const std::vector<double> tops = firstLineTops(doc, b, kLinesKept);
    if (tops.empty() || static_cast<int>(tops.back() / pageHeight) <= pageOf(b)) continue;
    // A heading right above this one ("Configs of the best points" over "p1 (...)") goes with
    // it: moved alone, this one would leave that one at the page's foot.
    for (QTextBlock prev = b.previous(); prev.isValid(); prev = prev.previous()) {
      if (layout->blockBoundingRect(prev).height() < 2.0) continue;  // a page break, a gap
      if (prev.blockFormat().headingLevel() == 0 || pageOf(prev) != pageOf(b)) break;
      b = prev;
    }
    QTextBlockFormat format = b.blockFormat();
    if (format.pageBreakPolicy() & QTextFormat::PageBreak_AlwaysBefore) continue;
    format.setPageBreakPolicy(format.pageBreakPolicy() | QTextFormat::PageBreak_AlwaysBefore);
    QTextCursor(b).setBlockFormat(format);
    ++moved;
  }
  return moved;
}

QList<QImage> pdfPageImages(const Report& report, double pixelsPerPoint) {
  const auto doc = pdfDocument(report);
  const QSizeF page = pdfTextArea();
  const double margin = 15.0 / 25.4 * 72.0;  // 15 mm in points
  QList<QImage> pages;
  for (int i = 0; i < doc->pageCount(); ++i) {
    QImage img(static_cast<int>((page.width() + 2 * margin) * pixelsPerPoint),
               static_cast<int>((page.height() + 2 * margin) * pixelsPerPoint),
               QImage::Format_RGB32);
    img.fill(Qt::white);
    QPainter painter(&img);
    painter.setRenderHint(QPainter::Antialiasing);
    painter.scale(pixelsPerPoint, pixelsPerPoint);
    painter.translate(margin, margin - i * page.height());
    doc->drawContents(&painter, QRectF(0, i * page.height(), page.width(), page.height()));
    pages.append(img);
  }
  return pages;
}

QString writeReport(const Report& report, const QString& path) {
  QByteArray bytes;
  if (path.endsWith(QLatin1String(".pdf"), Qt::CaseInsensitive)) {
    // Laid out in memory: QPdfWriter takes a short write of its file (a full disk) as done.
    const auto doc = pdfDocument(report);
    QBuffer buffer(&bytes);
    buffer.open(QIODevice::WriteOnly);
    QPdfWriter pdf(&buffer);
    pdf.setResolution(1200);  // QPrinter::HighResolution's, for the figures
    pdf.setPageLayout(QPageLayout(QPageSize(QPageSize::A4), QPageLayout::Landscape,
                                  QMarginsF(15, 15, 15, 15), QPageLayout::Millimeter));
    doc->print(&pdf);
  } else {
    bytes = report.html.toUtf8();
  }
  // Through QSaveFile: written beside `path` and put in its place only once every byte is on the
  // disk, so a full disk leaves neither a truncated report nor a lost earlier one.
  if (bytes.isEmpty()) return QStringLiteral("[report] %1: the report came out empty").arg(path);
  QSaveFile f(path);
  f.setDirectWriteFallback(true);  // a writable file in a folder this user may not write
  // Unbuffered: each write reaches the file here, where a short one is seen (QSaveFile can let
  // a failure in its final flush pass).
  if (!f.open(QIODevice::WriteOnly | QIODevice::Unbuffered))
    return QStringLiteral("[report] cannot write %1: %2").arg(path, f.errorString());
  for (qint64 done = 0; done < bytes.size();) {
    const qint64 n = f.write(bytes.constData() + done, bytes.size() - done);
    if (n <= 0)  // the write after a short one says why (no space left on the device)
      return QStringLiteral(
                 "[report] cannot write %1: %2 (%3 of %4 bytes written; the file is "
                 "left as it was)")
          .arg(path, f.errorString())
          .arg(done)
          .arg(bytes.size());
    done += n;
  }
  if (!f.commit())
    return QStringLiteral("[report] cannot write %1: %2 (the file is left as it was)")
        .arg(path, f.errorString());
  return {};
}

}  // namespace tb::ui
