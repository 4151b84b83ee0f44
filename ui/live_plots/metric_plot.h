// MetricPlot: one QCustomPlot chart of metric curves (one per run and metric), drawn honestly at
// any length: the raw series faint behind its debiased-EMA smoothing, both reduced to a min/max
// envelope per pixel column of the visible range. x is the step or the wall time; y linear or
// log; drag to pan, wheel to zoom, double-click to reset; hover shows exact values. Appends are
// cheap (the smoothing extends incrementally); redraws are coalesced on a 100 ms timer.
#pragma once

#include <QColor>
#include <QString>
#include <QTimer>
#include <QWidget>

#include <map>
#include <optional>
#include <vector>

#include "ui/live_plots/series_math.h"

class QCustomPlot;
class QCPGraph;
class QCPItemText;
class QCPTextElement;
class QCPLayoutGrid;
class QMouseEvent;

namespace tb::ui {

/// An x range, [lower, upper].
struct XRange {
  double lower = 0;  ///< left end
  double upper = 0;  ///< right end
};

/// One curve's data and style.
struct Curve {
  QString label;                       ///< legend text, e.g. "run 3 · loss"
  QColor color;                        ///< one colour per run
  Qt::PenStyle style = Qt::SolidLine;  ///< e.g. dashed for eval curves
  bool points = false;                 ///< draw markers (sparse series such as eval)
  bool right = false;                  ///< on the right-hand y axis (its own scale)
  std::vector<double> step;            ///< x when the axis shows steps
  std::vector<double> wall;            ///< x when the axis shows wall time (seconds)
  std::vector<double> raw;             ///< values
  std::vector<double> smooth;          ///< debiased EMA of raw (kept in step with raw)
  double emaLast = 0.0;                ///< EMA state for incremental smoothing
  double emaPow = 1.0;                 ///< weight^n
  EnvelopeIndex rawIndex;              ///< fast envelopes of raw
  EnvelopeIndex smoothIndex;           ///< fast envelopes of smooth
};

/// A chart of curves.
class MetricPlot : public QWidget {
  Q_OBJECT

 public:
  /// What the x axis shows.
  enum class XAxis { Step, WallTime };

  /// A chart titled `title` with y axis label `yLabel`.
  MetricPlot(const QString& title, const QString& yLabel, QWidget* parent = nullptr);
  ~MetricPlot() override;

  /// The chart's title.
  QString title() const { return m_title; }
  /// Draws `text` as the plot's title instead of title() (a report's "Step time: run 3 name").
  void setDrawnTitle(const QString& text);
  /// Adds (or restyles) curve `id`.
  void ensureCurve(const QString& id, const QString& label, const QColor& color,
                   Qt::PenStyle style = Qt::SolidLine, bool points = false, bool right = false);
  /// The y axes' labels, left and right. The right-hand axis is shown, with its own scale, while
  /// a curve is on it (values orders of magnitude apart: Muon's and AdamW's learning rates).
  void setYAxisLabels(const QString& left, const QString& right);
  /// Appends points (step ascending after the existing ones) to curve `id` (created by
  /// ensureCurve()).
  void append(const QString& id, const std::vector<double>& step, const std::vector<double>& wall,
              const std::vector<double>& value);
  /// Removes every curve.
  void clear();
  /// The curves by id.
  const std::map<QString, Curve>& curves() const { return m_curves; }
  /// Stacked mode: curves are drawn as filled areas on top of each other, in id order.
  void setStacked(bool stacked);

  /// x axis: step or wall time.
  void setXAxis(XAxis axis);
  /// y axis: logarithmic or linear.
  void setLogY(bool log);
  /// The automatic y range ignores rare outliers above the bulk of the data (robust_upper(): a
  /// warm-up step 25× slower than the rest), for heavy-tailed series such as step times; a
  /// value above the range is drawn through the top edge. Off: the range holds every value.
  void setRobustYRange(bool robust);
  /// Smoothing weight in [0, 1) (0 = off, the raw series is drawn normally).
  void setSmoothing(double weight);
  /// A grey note in the middle of the axes while no curve has a point ("" for none): what the
  /// plot will show, rather than bare axes.
  void setEmptyText(const QString& text);
  /// Whether the last redraw showed the empty text (tests).
  bool showsEmptyText() const;
  /// Whether the legend row is drawn (default true). Off, the plot keeps its height for the
  /// data; whoever turns it off says elsewhere which colour is which (PlotsPanel's run key).
  void setLegendShown(bool shown);
  bool legendShown() const { return m_legendShown; }
  /// Resets zoom and pan to show everything (also on double-click).
  void resetView();
  /// Redraws now (normally coalesced on a timer).
  void replotNow();
  /// Why a redraw is wanted: new points of a training run, or a change the user made.
  enum class Redraw { LiveData, Soon };
  /// Coalesces redraws. A user's change (Soon) is drawn within kSoonMs (one frame). New
  /// points (LiveData) wait for liveRedrawIntervalMs(): at most 10 redraws a second, fewer when
  /// a redraw is costly for the machine, so that a plot's redraws take no more than
  /// kLiveRedrawCpuShare of the machine's CPU time (what a run training on every CPU gives up
  /// to the GUI; on a 2-CPU machine a 3 ms redraw is drawn twice a second).
  void scheduleReplot(Redraw why = Redraw::Soon);
  /// Paced from outside: new points only mark the plot livePending(), and whoever paces it
  /// (a panel drawing its linked plots on one clock, so that they show the same steps) calls
  /// replotNow(). Unpaced again, a pending redraw is scheduled as usual.
  void setLivePaced(bool paced);
  bool livePending() const { return m_livePending; }
  /// The share of the machine's CPU time one plot may spend redrawing live data.
  static constexpr double kLiveRedrawCpuShare = 0.003;
  /// The delay of a redraw the user asked for, in ms.
  static constexpr int kSoonMs = 16;
  /// Bounds of the live redraw interval, in ms.
  static constexpr int kMinLiveIntervalMs = 100;
  static constexpr int kMaxLiveIntervalMs = 1000;
  /// The least height of a plot with a legend of one or two rows (more rows: taller).
  static constexpr int kLeastHeight = 150;
  /// The share of the data's x extent left free at either end when the view follows the data.
  static constexpr double kXPad = 0.01;
  /// The live redraw interval for a redraw that took `redrawMs` on a machine with `cpus` CPUs:
  /// redrawMs / (kLiveRedrawCpuShare * cpus), within [kMinLiveIntervalMs, kMaxLiveIntervalMs].
  static int liveRedrawIntervalMs(double redrawMs, int cpus);
  /// The GUI thread's CPU time for the last redraw (reduction and painting into the buffer), ms.
  double lastRedrawMs() const { return m_lastRedrawMs; }

  /// Vertices drawn for curve `id` in the last redraw (raw layer); for tests and benchmarks.
  int drawnVertices(const QString& id) const;
  /// The chart's QCustomPlot (exports, tests).
  QCustomPlot* plot() const { return m_plot; }
  /// Saves the chart as PNG (`scale` for high-DPI); false when writing failed.
  bool savePng(const QString& path, int width = 0, int height = 0, double scale = 1.0);
  /// Saves the chart as SVG.
  bool saveSvg(const QString& path, int width = 0, int height = 0);
  /// The visible points of every curve as CSV: curve,step,wall_s,raw,smoothed.
  QString toCsv() const;
  /// Whether any curve has a point.
  bool hasData() const;

  /// The x extent of the data on the current x axis (step or wall time); nullopt without data.
  std::optional<XRange> dataXRange() const;
  /// Linked plots: until the user zooms, the plot shows the union of its data's x extent and
  /// `range` (every linked plot's data), so plots of one run share their x range; nullopt = its
  /// own data alone. `why`: LiveData when the range grew with a run's new points (redrawn
  /// within the live redraw budget), Soon when the user linked or unlinked the plots.
  void setLinkedXRange(std::optional<XRange> range, Redraw why = Redraw::Soon);
  /// Shows x range `range` as if the user had zoomed here (a linked plot was zoomed or panned);
  /// emits nothing.
  void followXRange(const XRange& range);
  /// Whether the user zoomed or panned (the x range no longer follows the data).
  bool userView() const { return m_userView; }
  /// Columns of the legend: 2, or 1 when two whole names do not fit side by side.
  int legendColumns() const;

 Q_SIGNALS:
  /// The user zoomed or panned the x axis to `range`.
  void userXRangeChanged(const tb::ui::XRange& range);
  /// The user asked for the whole data (double-click, context menu).
  void viewResetByUser();

 protected:
  /// Follows palette changes (system light/dark theme switches).
  void changeEvent(QEvent* event) override;
  /// Paints what changed while hidden.
  void showEvent(QShowEvent* event) override;
  /// Fits the legend's columns to the new width (they stayed as the last redraw of new points
  /// left them: a step-time legend of one column at 430 px pushed the plots below out of view).
  void resizeEvent(QResizeEvent* event) override;

 private:
  void applyPalette();
  void rebuildGraphs();
  void redecimate();
  void markLonePoint(QCPGraph* graph, const Curve& c, std::size_t shown);
  void fitLegend();
  // Fewer y tick labels on a short plot, fewer x tick labels on a narrow one.
  void fitTicks();
  void onMouseMove(QMouseEvent* event);
  const std::vector<double>& xs(const Curve& c) const;
  void recomputeSmoothing();

  QString m_title;
  QCustomPlot* m_plot = nullptr;
  QCPTextElement* m_titleElement = nullptr;
  QCPLayoutGrid* m_legendRow = nullptr;
  std::map<QString, Curve> m_curves;
  std::map<QString, QCPGraph*> m_rawGraphs;
  std::map<QString, QCPGraph*> m_smoothGraphs;
  std::map<QString, QCPGraph*> m_bandLowGraphs;    // lower edge of a reduced raw series' band
  std::map<QString, QCPGraph*> m_smoothLowGraphs;  // the same for the smoothed series
  XAxis m_xAxis = XAxis::Step;
  bool m_legendShown = true;
  bool m_logY = false;
  bool m_stacked = false;
  bool m_robustY = false;
  double m_smoothing = 0.6;
  bool m_userView = false;   // the user zoomed or panned: do not auto-rescale
  bool m_following = false;  // followXRange() is moving the axis
  std::optional<XRange> m_linkedX;
  bool m_inRedecimate = false;
  bool m_stale = false;                // data changed while hidden
  QCPItemText* m_emptyText = nullptr;  // setEmptyText()
  QString m_emptyTextWhole;
  bool m_livePaced = false;    // setLivePaced()
  bool m_livePending = false;  // new points not drawn yet
  double m_lastRedrawMs = 0.0;
  int m_xCapWidth = -1;    // fitTicks(): the axis width m_xCap was found for
  int m_xCap = 5;          // the most x labels that did not touch at that width
  int m_xTicksDrawn = -1;  // the x tick count of the last draw (its labels' positions)
  QTimer m_replotTimer;
};

}  // namespace tb::ui
