// Reports of one run or a comparison: per-run summaries (final/best metrics, steps and time to a
// target, mean step time per phase), the config diff, and the plots — as one self-contained HTML
// file (plots embedded as PNG data) or a PDF. Used by the GUI's Export and by
// `trainbench --export-report` (offscreen).
#pragma once

#include <QImage>
#include <QList>
#include <QSizeF>
#include <QString>
#include <QStringList>
#include <QTextBlock>
#include <QTextDocument>

#include <memory>
#include <optional>
#include <vector>

#include "engine/api/workbench_api.h"

namespace tb::ui {

/// HTML-escapes user text (&, <, >, ", ').
QString htmlEscape(const QString& text);

/// A report's first lines: the title as <h1> and "Generated TIME from STORE".
QString reportHeading(const QString& title, const api::StoreReader& store);

/// The start of a report's XHTML document up to and including <body>: title and style.
QString reportHtmlHead(const QString& title);

/// An HTML figure: `image` embedded as PNG data (a data: URL), shown at width × height pixels,
/// with `title` as its alt text and (`caption`) below it (escaped here). A plot that draws its
/// title has no caption: it would say the same.
QString htmlFigure(const QImage& image, const QString& title, int width, int height,
                   bool caption = true);

/// The PDF document's figure: image resource plotN.png at width × height points, `title` as its
/// alt text and (`caption`) below it.
QString pdfFigure(int n, const QString& title, int width, int height, bool caption = true);

/// A target for "steps and time to target": the first step where `metric` reaches `value`
/// (<= for losses and perplexity, >= for accuracy).
struct Target {
  QString metric = QStringLiteral("eval.accuracy");  ///< metric key
  double value = 0.85;                               ///< threshold
};

/// One run's summary line.
struct RunSummaryRow {
  qint64 id = 0;                         ///< run id
  QString name;                          ///< name
  QString status;                        ///< status
  std::optional<qint64> steps;           ///< newest step; none before the first
  std::optional<double> duration;        ///< seconds from start to end (or now)
  std::optional<double> finalLoss;       ///< last train loss
  std::optional<double> bestEvalLoss;    ///< min eval.loss
  std::optional<double> bestAccuracy;    ///< max eval.accuracy
  std::optional<double> bestPerplexity;  ///< min eval.perplexity
  std::optional<qint64> stepsToTarget;   ///< first step reaching the target
  bool logsTarget = false;               ///< whether the run logs the target's metric
  std::optional<double> timeToTarget;    ///< wall seconds to it
  /// phase -> mean ms (data, forward, ...; optimizer without Newton–Schulz, which is its own)
  QList<QPair<QString, double>> meanPhaseMs;
};

/// The step phases of RunSummaryRow::meanPhaseMs, in the order tables show them (data, forward,
/// backward, optimizer, Newton–Schulz, communication, step).
QStringList stepPhaseNames();

/// Summaries of `ids` from the store.
std::vector<RunSummaryRow> summarizeRuns(const api::StoreReader& store, const QList<qint64>& ids,
                                         const Target& target);

/// What a report holds.
struct ReportOptions {
  QString title;           ///< "" = "TrainBench report: run 3" / "... comparison of runs 3, 4"
  Target target;           ///< for the summary
  double smoothing = 0.6;  ///< plot smoothing
  int plotWidth = 900;     ///< plot image size (pixels)
  int plotHeight = 360;    ///< plot image size (pixels)
};

/// A rendered report.
struct Report {
  QString html;               ///< with images as data: URLs (self-contained)
  QString htmlWithResources;  ///< with images as "plotN.png" (for QTextDocument / PDF)
  QList<QImage> images;       ///< plotN.png
  QList<QImage> pdfImages;    ///< plotN.png of the PDF (drawn for its page; or empty: images)
  QStringList imageTitles;    ///< plot titles
};

/// Builds the report of `ids` (1 or more runs; unknown ids throw std::invalid_argument naming
/// them). Needs a QApplication (plots render offscreen).
Report buildReport(const api::StoreReader& store, const QList<qint64>& ids,
                   const ReportOptions& options = {});

/// Writes `report` to `path`: ".pdf" as PDF (pdfDocument() on landscape A4), anything else as
/// HTML. Returns "" or the error.
QString writeReport(const Report& report, const QString& path);

/// The PDF's text area in points: landscape A4 (842 × 595 pt) less 15 mm margins.
QSizeF pdfTextArea();
/// The HTML that starts a new page of a PDF report (reports and sweep reports alike).
QString pdfPageBreak();

/// The height in points of a plot in the PDF, measured so that two plots with their captions
/// (and the "Plots" heading above the first pair) fill one page of pdfTextArea().
double pdfPlotHeight();

/// The width in points a figure may take in the PDF: its text area less the body's margins.
double pdfContentWidth();

/// The document a PDF of `report` prints, laid out on pdfTextArea() pages in points: the summary
/// with one column per run, plots at the full text width (the step time one run per plot), the
/// plots and the configs starting on pages of their own.
std::unique_ptr<QTextDocument> pdfDocument(const Report& report);

/// Moves each heading of `doc` (laid out in pages) whose first three lines of text (a table's
/// header and two rows) do not all begin on its page to the top of the next page, so that no page
/// ends with a heading alone. Returns how many it moved.
int keepHeadingsWithTheirText(QTextDocument& doc);

/// The tops (document coordinates) of the first `count` lines of text after `heading` (a heading
/// right under it among them), in order: a table row's cells count once.
std::vector<double> firstLineTops(QTextDocument& doc, const QTextBlock& heading, int count);

/// Images of the PDF's pages (`pixelsPerPoint` = 1 for 72 dpi), white pages as printed: to look
/// at a report's layout without a PDF viewer (trainbench --export-report FILE.pdf --pages DIR).
QList<QImage> pdfPageImages(const Report& report, double pixelsPerPoint = 1.0);

}  // namespace tb::ui
