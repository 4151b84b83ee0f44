// PlotsPanel: the live plots of one or more runs — loss (train and eval), eval accuracy or
// perplexity, LR per group, the step-time breakdown (stacked for one run: data, forward, backward,
// optimizer with its Newton–Schulz share), throughput, gradient norm and loss scale — with one
// colour per run, and the controls every plot shares (x = step or wall time, log y, smoothing).
#pragma once

#include <QColor>
#include <QList>
#include <QString>
#include <QTimer>
#include <QWidget>

#include <functional>

#include <map>
#include <utility>
#include <vector>

#include "engine/api/workbench_api.h"

class QCheckBox;
class QCustomPlot;
class QComboBox;
class QLabel;
class QSlider;

namespace tb::ui {

class FlowLayout;
class MetricPlot;

/// The colour of the i-th run (a qualitative palette that reads on light and dark backgrounds).
QColor runColor(int index);
/// `ids` in ascending order: every view of a set of runs (Live, Compare, a report) lists them and
/// hands out runColor() in this order, so a run keeps its colour from one view to the next
/// (they followed the runs table's sort and selection order).
QList<qint64> inRunOrder(QList<qint64> ids);

/// Where a metric goes: the plot's index in PlotsPanel::plots() (-1 = not plotted), and how.
struct MetricRoute {
  int plot = -1;                       ///< index into plots()
  int order = 0;                       ///< position within the plot (stacked order)
  QString label;                       ///< curve label without the run name
  Qt::PenStyle style = Qt::SolidLine;  ///< pen
  bool points = false;                 ///< sparse series drawn with markers
};
/// The route of metric `key` (e.g. "eval.loss" -> the loss plot, dashed, with markers).
MetricRoute routeMetric(const QString& key);

/// A grid of MetricPlots over a set of runs.
class PlotsPanel : public QWidget {
  Q_OBJECT

 public:
  /// The plots, in grid order.
  enum PlotIndex {
    Loss,
    EvalMetric,
    LearningRate,
    StepTime,
    Throughput,
    GradNorm,
    LossScale,
    Count
  };

  explicit PlotsPanel(QWidget* parent = nullptr);

  /// Forgets every run and clears the plots.
  void clearRuns();
  /// Declares run `runId` named `name` with colour `color` (before its points arrive).
  void addRun(qint64 runId, const QString& name, const QColor& color);
  /// Whether the run was added.
  bool hasRun(qint64 runId) const { return m_runs.count(runId) != 0; }
  /// The runs shown.
  QList<qint64> runIds() const;
  /// What the controls row says about them: "run 12 name", "3 runs" or "no run".
  QString shownRunsText() const;
  /// On screen (the Live tab, Compare): from kKeyRuns runs on, the plots draw no legend (two
  /// rows per run under every plot left the data a strip) and one key above them names each
  /// run in its colour. Off (the default: a report's images), every plot keeps its legend.
  void setRunKey(bool on);
  static constexpr int kKeyRuns = 3;
  /// The run key's text (tests): "#12 name, #13 name, ..." or "" when not shown.
  QString runKeyText() const;
  /// Appends the metrics of logged steps (from an in-process run).
  void appendSteps(qint64 runId, const std::vector<api::StepMetrics>& steps);
  /// Loads (or extends, from the last step seen) every series of `runId` from the store.
  void loadFromStore(const api::StoreReader& store, qint64 runId);
  /// Whether a point plotted for `runId` is no longer in the store: a resume from an earlier
  /// checkpoint removed the steps after it. Only for runs whose points all came from the store
  /// (a run this process trains plots its steps before they are committed).
  bool rewoundInStore(const api::StoreReader& store, qint64 runId) const;
  /// Clears the plots and reads every run shown again from the store (same names and colours).
  void reloadFromStore(const api::StoreReader& store);
  /// The plots.
  const QList<MetricPlot*>& plots() const { return m_plots; }
  /// Redraws every plot now.
  void replotAll();
  /// Sets the controls (also used by reports and tests).
  void setSmoothing(double weight);
  /// Log y on the plots where it makes sense (loss, grad norm, loss scale, perplexity).
  void setLogY(bool log);
  /// x = wall time instead of step.
  void setWallTime(bool wall);
  /// Linked x axes (the default): the plots show one x range — the union of their data until
  /// the user zooms; zooming or panning one moves the others; resetting one resets all.
  void setLinkedX(bool linked);
  /// Whether the x axes are linked.
  bool linkedX() const;
  /// Each run's mean step time per phase (data, forward, ...), in phase order — what the
  /// step-time bars draw when several runs are shown.
  std::map<qint64, std::vector<std::pair<QString, double>>> meanStepPhases() const;
  /// The stacked bars of the runs' step times (shown instead of the step-time plot when
  /// several runs are shown).
  QCustomPlot* stepTimeBars() const { return m_stepBars; }

  /// Counts the rows the controls wrap into at the current width, so that a wrapped row never
  /// squeezes the plots below their least height.
  QSize minimumSizeHint() const override;

 protected:
  bool eventFilter(QObject* watched, QEvent* event) override;
  void resizeEvent(QResizeEvent* event) override;

 private:
  struct RunState {
    QString name;
    QColor color;
    int index = 0;
    std::map<QString, double> lastStep;  // per metric key
    std::map<QString, double> lastWall;  // per metric key: the wall time of its lastStep point
    double optimizerMs = 0, nsMs = 0;    // pending per-step pair for the derived NS split
  };
  void appendPoints(qint64 runId, const QString& key, const std::vector<double>& step,
                    const std::vector<double>& wall, const std::vector<double>& value);
  void updateStackedMode();
  // Puts the LR plot's AdamW curves on the right-hand axis while a Muon curve (or `key`, about
  // to be added) is in it, and back on the left when none is; whether one is.
  bool placeLrCurves(const QString& key);
  // Puts the eval plot's perplexity curves on the right-hand axis while an accuracy curve (or
  // `key`) is in it too, and back on the left when not; whether `key` goes on the right.
  bool placeEvalCurves(const QString& key);
  // Puts each curve of `p` on the right-hand axis when onRight(its metric key) says so, and
  // back on the left otherwise, with " (right)" after its label while there.
  static void moveCurves(MetricPlot* p, const std::function<bool(const QString&)>& onRight);
  void updateVisibility();
  // liveData: the linked range grew with a run's new points (a live redraw, within each
  // plot's budget), not a change the user made.
  void syncLinkedX(bool liveData = false);
  // Linked plots draw new points together, at the longest live interval any of them needs,
  // so that they show the same steps (each on its own clock, a cheap plot ran a second ahead
  // of a costly one).
  void startLiveTick();
  void updateStepBars();
  // As many legend columns under the bars as their width holds (at most 3), so no phase's
  // name is cut off on a narrow plot; whether the columns changed.
  bool fitStepLegend();
  // How much taller than one row the controls are at panel width `width`.
  int controlsExtraHeight(int width) const;
  // Re-reads controlsExtraHeight() at the current width; a new least height when it changed.
  void refitControls();
  void updateRunsLabel();

  QList<MetricPlot*> m_plots;
  QTimer m_liveTick;  // startLiveTick()
  std::map<qint64, RunState> m_runs;
  QComboBox* m_xAxis = nullptr;
  QCheckBox* m_logY = nullptr;
  QCheckBox* m_linkX = nullptr;
  QCustomPlot* m_stepBars = nullptr;
  QSlider* m_smoothing = nullptr;
  QLabel* m_smoothingLabel = nullptr;
  QLabel* m_runsLabel = nullptr;
  QLabel* m_runKey = nullptr;  // setRunKey: the runs in their colours, above the plots
  bool m_runKeyOn = false;
  void updateRunKey();
  FlowLayout* m_controls = nullptr;
  int m_controlsExtra = 0;  // the wrapped controls' height beyond one row, at the last refit
};

}  // namespace tb::ui
