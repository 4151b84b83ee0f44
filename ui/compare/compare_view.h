// CompareView: two or more runs side by side — overlaid curves with one colour per run across
// every plot, the config diff (only the keys that differ, grouped by section, keys that only
// some runs have folded into one row per section), and a summary with one column per run, all
// in view (final/best metrics, steps and time to a target the user sets, mean step time per
// phase).
#pragma once

#include <QList>
#include <QWidget>

#include "engine/api/workbench_api.h"

class QComboBox;
class QDoubleSpinBox;
class QTableWidget;

namespace tb::ui {

class PlotsPanel;

/// The comparison of runs.
class CompareView : public QWidget {
  Q_OBJECT

 public:
  explicit CompareView(QWidget* parent = nullptr);
  /// Shows runs `ids` of `store` (kept for refreshes; must outlive this view's use of it).
  void setRuns(const api::StoreReader* store, const QList<qint64>& ids);
  /// Re-reads new points of running runs and the summary.
  void refresh();
  /// The runs shown.
  const QList<qint64>& runs() const { return m_ids; }
  /// The config-diff table (key + one column per run): a row per section ("[optimizer]", its
  /// cells spanned), then its differing keys. Keys that some runs do not have (a Muon run's
  /// optimizer.muon.* beside an AdamW run) are folded into one row, "optimizer.muon.* (N keys)",
  /// whose click shows or hides them. Column 0 of a key row holds the dotted key in
  /// Qt::UserRole (section and folded rows hold none).
  QTableWidget* diffTable() const { return m_diff; }
  /// Shows or hides the keys folded under `section` (e.g. "optimizer.muon").
  void setSectionExpanded(const QString& section, bool expanded);
  /// The summary table.
  QTableWidget* summaryTable() const { return m_summary; }
  /// The overlaid plots.
  PlotsPanel* plots() const { return m_plots; }

 private:
  void fillSummary();
  void fillDiff(const std::vector<api::ConfigDiffRow>& diff);

  const api::StoreReader* m_store = nullptr;
  QList<qint64> m_ids;
  PlotsPanel* m_plots = nullptr;
  QTableWidget* m_diff = nullptr;
  QTableWidget* m_summary = nullptr;
  QComboBox* m_targetMetric = nullptr;
  QDoubleSpinBox* m_targetValue = nullptr;
};

}  // namespace tb::ui
