// SweepView: one sweep of the store, updated as its trials finish — the metric against a swept
// key (one line per combination of the categorical keys, e.g. per optimizer, with the seeds'
// spread as a band: the learning-rate sensitivity curve), a parallel-coordinates plot of every
// finished trial, the points best first, every trial with its steps and time to a target, and
// "open the best config".
#pragma once

#include <QList>
#include <QMap>
#include <QString>
#include <QStringList>
#include <QWidget>

#include <optional>
#include <vector>

#include "engine/api/workbench_api.h"

class QComboBox;
class QCustomPlot;
class QCPTextElement;
class QLineEdit;
class QLabel;
class QPushButton;
class QTableWidget;

namespace tb::ui {

/// One line of the metric-against-key plot: a group's points by increasing x.
struct SweepCurve {
  QString name;              ///< the group ("muon", "adamw", or "all")
  std::vector<double> x;     ///< the key's value
  std::vector<double> mean;  ///< the point's mean over its finished seeds of the best metric
  std::vector<double> low;   ///< the smallest of them
  std::vector<double> high;  ///< the largest
  /// The points early stopping stopped: their seeds' mean metric at the rung they stopped at
  /// (low = high = mean), drawn as hollow markers without a line or band.
  bool stopped = false;
};

/// The x choice that merges every swept key ending in "lr" (optimizer.lr, optimizer.muon.lr):
/// each optimizer's learning rate on one axis.
inline const QString kAnyLearningRate = QStringLiteral("learning rate (any *lr key)");

/// The curves of `sweep` against `xKey` (a swept key, or kAnyLearningRate): points grouped by
/// their values of the non-numeric swept keys; points without a finished trial or without the
/// key are left out.
std::vector<SweepCurve> sweepCurves(const api::SweepResult& sweep, const QString& xKey);

/// The x choices of a sweep: its numeric swept keys, led by kAnyLearningRate when two or more of
/// them end in "lr".
QStringList sweepXKeys(const api::SweepResult& sweep);

/// The view of one sweep.
class SweepView : public QWidget {
  Q_OBJECT

 public:
  explicit SweepView(QWidget* parent = nullptr);
  /// Reads sweeps from `store` (kept; must outlive this view's use of it; null clears) and
  /// refreshes.
  void setStore(const api::StoreReader* store);
  /// Shows sweep `name` ("" = the newest).
  void showSweep(const QString& name = QString());
  /// Re-reads the sweeps list and the shown sweep (call while a sweep runs).
  void refresh();
  /// The sweep shown ("" = none).
  QString sweepName() const { return m_name; }
  /// Whether the shown sweep is still running.
  bool running() const { return m_result.status == "running"; }
  /// Whether the store's sweeps (names, statuses) differ from the list shown: a sweep another
  /// process started or ended. One short query.
  bool listChanged() const;
  /// The x choices and the current one.
  QStringList xKeys() const;
  /// Chooses the x of the curve plot (a swept key or kAnyLearningRate); false if unknown.
  bool setXKey(const QString& key);
  /// The curves drawn.
  const std::vector<SweepCurve>& curves() const { return m_curves; }
  /// The metric-against-key plot (per curve: a line graph named after it, then the band's two
  /// edge graphs).
  QCustomPlot* curvePlot() const { return m_curvePlot; }
  /// The parallel-coordinates plot (one curve per finished trial).
  QCustomPlot* parallelPlot() const { return m_parallel; }
  /// Lays the parallel plot's axis titles out for an image `width` px wide (one row, or two
  /// where neighbours would overlap), for a report's image of another size than the widget;
  /// 0: for the widget's own width again.
  void fitParallelTo(int width);
  /// Points, best first.
  QTableWidget* pointsTable() const { return m_points; }
  /// Every trial.
  QTableWidget* trialsTable() const { return m_trials; }
  /// The best finished trial's effective config ("" when none).
  QString bestConfig() const;
  /// Sets the target of "steps / time to target" on the sweep's metric.
  void setTarget(double value);

 signals:
  /// "Open the best config": its TOML and a name for it.
  void openConfig(const QString& toml, const QString& source);
  /// "Export report…" for sweep `name`.
  void exportRequested(const QString& name);

 protected:
  bool eventFilter(QObject* watched, QEvent* event) override;

 private:
  void reload();
  void fillCurves();
  void fillParallel();
  // The parallel plot's axis titles as drawn at `plotWidth`: on one row where neighbours fit
  // there; else on two rows, alternating (`*staggered`), each shortened from the left (a key's
  // last part kept) to the width its row leaves it.
  QStringList parallelTitlesAt(int plotWidth, bool* staggered) const;
  // Draws the parallel plot again where its titles at `plotWidth` differ from those drawn.
  void refitParallelTitles(int plotWidth);
  void fillTables();
  void fillTrialTargets();

  const api::StoreReader* m_store = nullptr;
  QString m_name;
  api::SweepResult m_result;
  std::vector<SweepCurve> m_curves;
  QComboBox* m_sweepBox = nullptr;
  QLabel* m_summary = nullptr;
  QComboBox* m_xBox = nullptr;
  QLineEdit* m_target = nullptr;
  QPushButton* m_openBest = nullptr;
  QPushButton* m_export = nullptr;
  // Moves the curve plot's legend to the corner of its axis rect where it covers the fewest
  // points (lays the plot out once to measure).
  void placeLegend();
  QCustomPlot* m_curvePlot = nullptr;
  QCustomPlot* m_parallel = nullptr;
  QCPTextElement* m_parallelCaption = nullptr;  // what the colours say
  QStringList m_parallelTitles;                 // the axis titles, whole
  QStringList m_parallelShown;                  // and as drawn
  QFont m_parallelTitleFont;
  bool m_parallelStaggered = false;  // titles on two rows, alternating
  int m_parallelFitWidth = 0;        // fitParallelTo()'s width; 0: the widget's
  bool m_legendQueued = false;       // a resize asked placeLegend() for the new size
  QTableWidget* m_points = nullptr;
  QTableWidget* m_trials = nullptr;
  bool m_filling = false;
};

}  // namespace tb::ui
