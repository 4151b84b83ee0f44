// RunsModel: the runs of the store as a table (status, name, model, optimizer, scheduler, ranks
// of a data-parallel run, final loss, best eval metric, duration, steps, tags), refreshed by
// polling the store's fingerprint so runs written by another process (a headless trainbench-cli
// run) appear and update live. RunsView: the table with search, status filter, sort, rename, tags
// and delete-with-confirmation.
#pragma once

#include <QAbstractTableModel>
#include <QList>
#include <QSortFilterProxyModel>
#include <QString>
#include <QTimer>
#include <QWidget>

#include <memory>
#include <vector>

#include "engine/api/workbench_api.h"

class QComboBox;
class QPushButton;
class QLineEdit;
class QTableView;

namespace tb::ui {

/// The runs of one store.
class RunsModel : public QAbstractTableModel {
  Q_OBJECT

 public:
  /// Columns.
  enum Column {
    Id,
    Status,
    Name,
    Model,
    Optimizer,
    Scheduler,
    Ranks,
    FinalLoss,
    BestEval,
    Duration,
    Steps,
    Tags,
    Sweep,
    Created,
    ColumnCount
  };

  /// Reads the store at `dbPath` ("" = default); polls every `pollMs` milliseconds (0 = never).
  explicit RunsModel(QString dbPath, int pollMs = 1000, QObject* parent = nullptr);
  ~RunsModel() override;

  int rowCount(const QModelIndex& parent = {}) const override;
  int columnCount(const QModelIndex& parent = {}) const override;
  QVariant data(const QModelIndex& index, int role) const override;
  QVariant headerData(int section, Qt::Orientation orientation, int role) const override;
  Qt::ItemFlags flags(const QModelIndex& index) const override;
  bool setData(const QModelIndex& index, const QVariant& value, int role) override;

  /// Re-reads the store when it changed; true when the rows changed.
  bool refresh();
  /// The run of a row.
  const api::RunInfo& run(int row) const { return m_runs[static_cast<std::size_t>(row)]; }
  /// The row of run `id`, -1 when absent.
  int rowOf(qint64 id) const;
  /// The open store (reads for plots and compare).
  api::StoreReader* store() const { return m_store.get(); }
  /// The store's file.
  QString dbPath() const { return m_dbPath; }
  /// The last error reading the store ("" when fine).
  QString lastError() const { return m_error; }

  /// Renames a run; false (and lastError()) on failure.
  bool renameRun(qint64 id, const QString& name);
  /// Replaces a run's tags (comma-separated text).
  bool setTags(qint64 id, const QString& commaSeparated);
  /// Deletes runs; false (and lastError()) when one could not be deleted.
  bool deleteRuns(const QList<qint64>& ids);

 Q_SIGNALS:
  /// The rows changed after a refresh (new runs, statuses, steps).
  void runsChanged();
  /// Reading the store failed (message names the file).
  void storeError(const QString& message);

 private:
  QString m_dbPath;
  std::unique_ptr<api::StoreReader> m_store;
  std::vector<api::RunInfo> m_runs;
  std::string m_fingerprint;
  QString m_error;
  QTimer m_poll;
};

/// Sort/filter proxy: free-text search over name, tags, model, optimizer, scheduler and a status
/// filter.
class RunsFilter : public QSortFilterProxyModel {
  Q_OBJECT

 public:
  explicit RunsFilter(QObject* parent = nullptr);
  /// Case-insensitive text that must occur in one of the text columns ("" = all).
  void setSearch(const QString& text);
  /// Status that rows must have ("" = all).
  void setStatus(const QString& status);
  /// Sweep whose runs are shown ("" = every run).
  void setSweep(const QString& name);

 protected:
  bool filterAcceptsRow(int row, const QModelIndex& parent) const override;
  bool lessThan(const QModelIndex& a, const QModelIndex& b) const override;

 private:
  QString m_search;
  QString m_status;
  QString m_sweep;
};

/// The runs table with its tools.
class RunsView : public QWidget {
  Q_OBJECT

 public:
  RunsView(RunsModel* model, QWidget* parent = nullptr);
  /// Ids of the selected runs, in table order.
  QList<qint64> selectedRuns() const;
  /// Selects run `id` (and scrolls to it).
  void selectRun(qint64 id);
  /// Shows only the runs of sweep `name` ("" = every run), as its choice in the sweep box.
  void setSweepFilter(const QString& name);
  /// The table (tests).
  QTableView* table() const { return m_table; }
  /// The filter (tests).
  RunsFilter* filter() const { return m_filter; }
  /// Whether run `id` can be resumed from the table: crashed or cancelled.
  bool canResume(qint64 id) const;

 Q_SIGNALS:
  /// The selection changed.
  void selectionChanged(const QList<qint64>& ids);
  /// "Compare" was asked for the selected runs.
  void compareRequested(const QList<qint64>& ids);
  /// "Duplicate config" was asked for a run.
  void duplicateRequested(qint64 id);
  /// "Resume" was asked for a crashed or cancelled run (it continues from its newest checkpoint).
  void resumeRequested(qint64 id);

 public Q_SLOTS:
  /// Asks for confirmation and deletes the selected runs.
  void deleteSelected();
  /// Asks for tags of the selected run.
  void editTags();

 private:
  RunsModel* m_model;
  RunsFilter* m_filter;
  QTableView* m_table;
  bool m_namesFitted = false;  // the name column sized to the names (once; then the user's)
  QLineEdit* m_search;
  QComboBox* m_status;
  QComboBox* m_sweep;
  QPushButton* m_resume;
  void updateButtons();
};

}  // namespace tb::ui
