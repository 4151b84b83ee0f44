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
class QEvent;
class QResizeEvent;
class QSplitter;
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
  /// The plots | summary splitter: side by side where the view is wide enough for the plots'
  /// least width and a summary that reads (kSideComfort px), the summary under the plots where
  /// it is not.
  QSplitter* splitter() const { return m_split; }
  /// The widest of plots and summary, not both side by side: a narrow view stacks them rather
  /// than scroll sideways.
  QSize minimumSizeHint() const override;

  /// The least width of the summary and diff beside the plots.
  static constexpr int kSideComfort = 280;
  /// Stacked, the height the summary and diff get under the plots.
  static constexpr int kStackedSide = 360;

 protected:
  bool event(QEvent* event) override;
  bool eventFilter(QObject* watched, QEvent* event) override;
  void resizeEvent(QResizeEvent* event) override;

 private:
  // Side by side or stacked, for the current width. Side by side, until the user drags the
  // splitter, the summary takes 2/5 of the width (at least kSideComfort, never so much that the
  // plots go below their least width). Stacked, the plots take the visible height (the scroll
  // area's viewport) and the summary and diff kStackedSide below it; the splitter moves.
  void arrange();
  // The scroll area's viewport this view is the page of, or null.
  QWidget* visibleArea() const;
  // Follows visibleArea()'s size (installed when the view is put in a scroll area).
  void watchViewport();
  void fillSummary();
  void fillDiff(const std::vector<api::ConfigDiffRow>& diff);
  // The diff's key column as wide as its keys but at most 45 % of the table; the runs' values
  // share the rest (elided, whole in their tooltips), so every run's value is in view.
  void fitDiffColumns();
  // The summary's row names as wide as they need, or narrower (elided) where the runs' values
  // would not fit whole beside them.
  void fitSummaryColumns();
  // The summary's width with every value whole (the row names giving way as they may).
  int summaryWidthWanted() const;
  int m_summaryNamesGiven = 0;  // px the row names gave way by (fitSummaryColumns)

  const api::StoreReader* m_store = nullptr;
  QList<qint64> m_ids;
  PlotsPanel* m_plots = nullptr;
  QSplitter* m_split = nullptr;
  QWidget* m_side = nullptr;
  bool m_userSplit = false;  // the user has dragged the splitter: keep their sizes
  int m_stackedPlots = 0;    // stacked in a scroll area: the plots' height (the visible one)
  QTableWidget* m_diff = nullptr;
  QTableWidget* m_summary = nullptr;
  QComboBox* m_targetMetric = nullptr;
  QDoubleSpinBox* m_targetValue = nullptr;
};

}  // namespace tb::ui
