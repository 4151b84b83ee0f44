#include "ui/runs/runs_model.h"

#include <QComboBox>
#include <QDateTime>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QInputDialog>
#include <QLineEdit>
#include <QMenu>
#include <QMessageBox>
#include <QPushButton>
#include <QSignalBlocker>
#include <QTableView>
#include <QVBoxLayout>

#include <algorithm>
#include <exception>

namespace tb::ui {

namespace {

QString fmt(const std::optional<double>& v, int precision = 4) {
  return v ? QString::number(*v, 'g', precision) : QString();
}

QColor statusColor(const std::string& s) {
  if (s == "running") return QColor(31, 119, 180);
  if (s == "finished") return QColor(44, 160, 44);
  if (s == "failed" || s == "crashed") return QColor(214, 39, 40);
  if (s == "diverged") return QColor(255, 127, 14);
  if (s == "cancelled") return QColor(127, 127, 127);
  return {};
}

// How long it trained: the time it spent ended before a resume is not part of it.
double durationSeconds(const api::RunInfo& r) {
  const double end = r.ended_at ? *r.ended_at : QDateTime::currentMSecsSinceEpoch() / 1000.0;
  return std::max(0.0, end - *r.started_at - r.paused_seconds);
}

QString durationText(const api::RunInfo& r) {
  if (!r.started_at) return {};
  const double s = durationSeconds(r);
  if (s < 60) return QString::number(s, 'f', 1) + QStringLiteral(" s");
  if (s < 3600) return QStringLiteral("%1 min").arg(s / 60, 0, 'f', 1);
  return QStringLiteral("%1 h").arg(s / 3600, 0, 'f', 2);
}

}  // namespace

RunsModel::RunsModel(QString dbPath, int pollMs, QObject* parent)
    : QAbstractTableModel(parent), m_dbPath(std::move(dbPath)) {
  try {
    m_store = std::make_unique<api::StoreReader>(m_dbPath.toStdString());
    m_dbPath = QString::fromStdString(m_store->path());
  } catch (const std::exception& e) {
    m_error = QString::fromUtf8(e.what());
  }
  refresh();
  if (pollMs > 0) {
    connect(&m_poll, &QTimer::timeout, this, [this] { refresh(); });
    m_poll.start(pollMs);
  }
}

RunsModel::~RunsModel() = default;

int RunsModel::rowCount(const QModelIndex& parent) const {
  return parent.isValid() ? 0 : static_cast<int>(m_runs.size());
}

int RunsModel::columnCount(const QModelIndex& parent) const {
  return parent.isValid() ? 0 : ColumnCount;
}

QVariant RunsModel::headerData(int section, Qt::Orientation orientation, int role) const {
  if (orientation != Qt::Horizontal || role != Qt::DisplayRole) return {};
  static const char* const names[] = {"id",        "status", "name",       "model",     "optimizer",
                                      "scheduler", "ranks",  "final loss", "best eval", "duration",
                                      "steps",     "tags",   "sweep",      "created"};
  static_assert(std::size(names) == ColumnCount, "one header per column");
  return section >= 0 && section < ColumnCount ? tr(names[section]) : QVariant();
}

Qt::ItemFlags RunsModel::flags(const QModelIndex& index) const {
  Qt::ItemFlags f = QAbstractTableModel::flags(index);
  if (index.column() == Name) f |= Qt::ItemIsEditable;
  return f;
}

QVariant RunsModel::data(const QModelIndex& index, int role) const {
  if (!index.isValid() || index.row() >= rowCount()) return {};
  const api::RunInfo& r = run(index.row());
  if (role == Qt::UserRole) return QVariant::fromValue<qlonglong>(r.id);
  if (role == Qt::ForegroundRole && index.column() == Status) {
    const QColor c = statusColor(r.status);
    return c.isValid() ? QVariant(c) : QVariant();
  }
  if (role == Qt::ToolTipRole) {
    // A name or tags cut short in the table are read whole here, above the run's message.
    QString tip;
    if (index.column() == Name || index.column() == Tags)
      tip = data(index, Qt::DisplayRole).toString();
    if (!r.message.empty())
      tip += (tip.isEmpty() ? QString() : QStringLiteral("\n")) + QString::fromStdString(r.message);
    return tip.isEmpty() ? QVariant() : QVariant(tip);
  }
  if (role == Qt::TextAlignmentRole) {
    switch (index.column()) {
      case Id:
      case Ranks:
      case FinalLoss:
      case BestEval:
      case Duration:
      case Steps:
        return QVariant(Qt::AlignRight | Qt::AlignVCenter);
      default:
        return {};
    }
  }
  const bool sortRole = role == Qt::UserRole + 1;
  if (role != Qt::DisplayRole && role != Qt::EditRole && !sortRole) return {};
  switch (index.column()) {
    case Id:
      return static_cast<qlonglong>(r.id);
    case Status:
      return QString::fromStdString(r.status);
    case Name:
      return QString::fromStdString(r.name);
    case Model:
      return QString::fromStdString(r.model);
    case Optimizer:
      return QString::fromStdString(r.optimizer);
    case Scheduler:
      return QString::fromStdString(r.scheduler);
    case Ranks:  // blank for one process; "2 (mpi)" for a data-parallel run, shown as one run
      if (r.dist_backend.empty()) return sortRole ? QVariant(1) : QVariant();
      if (sortRole) return r.world_size;
      return QStringLiteral("%1 (%2)")
          .arg(r.world_size)
          .arg(QString::fromStdString(r.dist_backend));
    case FinalLoss:
      if (sortRole) return r.final_loss ? QVariant(*r.final_loss) : QVariant();
      return fmt(r.final_loss);
    case BestEval:
      if (r.best_accuracy) {
        if (sortRole) return *r.best_accuracy;
        return QStringLiteral("acc %1").arg(*r.best_accuracy, 0, 'f', 4);
      }
      if (r.best_perplexity) {
        if (sortRole) return *r.best_perplexity;
        return QStringLiteral("ppl %1").arg(*r.best_perplexity, 0, 'g', 4);
      }
      if (r.best_eval_loss) {
        if (sortRole) return *r.best_eval_loss;
        return QStringLiteral("loss %1").arg(*r.best_eval_loss, 0, 'g', 4);
      }
      return {};
    case Duration: {
      if (sortRole) {
        if (!r.started_at) return {};
        return durationSeconds(r);
      }
      return durationText(r);
    }
    case Steps:
      return r.last_step ? QVariant(static_cast<qlonglong>(*r.last_step)) : QVariant();
    case Tags: {
      QStringList t;
      for (const auto& s : r.tags)
        t << QString::fromStdString(s);
      return t.join(QStringLiteral(", "));
    }
    case Sweep:
      if (r.sweep.empty()) return {};
      return QStringLiteral("%1 p%2")
          .arg(QString::fromStdString(r.sweep))
          .arg(r.sweep_point.value_or(0));
    case Created:
      if (sortRole) return r.created_at;
      return QDateTime::fromSecsSinceEpoch(static_cast<qint64>(r.created_at))
          .toString(QStringLiteral("yyyy-MM-dd HH:mm:ss"));
    default:
      return {};
  }
}

bool RunsModel::setData(const QModelIndex& index, const QVariant& value, int role) {
  if (role != Qt::EditRole || index.column() != Name) return false;
  return renameRun(run(index.row()).id, value.toString());
}

bool RunsModel::refresh() {
  if (!m_store) {
    try {
      m_store = std::make_unique<api::StoreReader>(m_dbPath.toStdString());
    } catch (const std::exception& e) {
      const QString msg = QString::fromUtf8(e.what());
      if (msg != m_error) Q_EMIT storeError(msg);
      m_error = msg;
      return false;
    }
  }
  try {
    const std::string fp = m_store->fingerprint();
    const bool anyRunning = std::any_of(
        m_runs.begin(), m_runs.end(), [](const api::RunInfo& r) { return r.status == "running"; });
    if (fp == m_fingerprint && !anyRunning) return false;
    std::vector<api::RunInfo> runs = m_store->runs();
    m_fingerprint = fp;
    beginResetModel();
    m_runs = std::move(runs);
    endResetModel();
    m_error.clear();
  } catch (const std::exception& e) {
    const QString msg = QString::fromUtf8(e.what());
    if (msg != m_error) Q_EMIT storeError(msg);
    m_error = msg;
    return false;
  }
  Q_EMIT runsChanged();
  return true;
}

int RunsModel::rowOf(qint64 id) const {
  for (std::size_t i = 0; i < m_runs.size(); ++i)
    if (m_runs[i].id == id) return static_cast<int>(i);
  return -1;
}

bool RunsModel::renameRun(qint64 id, const QString& name) {
  if (!m_store) return false;
  try {
    m_store->rename_run(id, name.trimmed().toStdString());
  } catch (const std::exception& e) {
    m_error = QString::fromUtf8(e.what());
    Q_EMIT storeError(m_error);
    return false;
  }
  refresh();
  return true;
}

bool RunsModel::setTags(qint64 id, const QString& commaSeparated) {
  if (!m_store) return false;
  std::vector<std::string> tags;
  for (const QString& t : commaSeparated.split(QLatin1Char(','), Qt::SkipEmptyParts)) {
    const QString s = t.trimmed();
    if (!s.isEmpty()) tags.push_back(s.toStdString());
  }
  try {
    m_store->set_tags(id, tags);
  } catch (const std::exception& e) {
    m_error = QString::fromUtf8(e.what());
    Q_EMIT storeError(m_error);
    return false;
  }
  refresh();
  return true;
}

bool RunsModel::deleteRuns(const QList<qint64>& ids) {
  if (!m_store) return false;
  bool ok = true;
  for (qint64 id : ids) {
    try {
      m_store->delete_run(id);
    } catch (const std::exception& e) {
      m_error = QString::fromUtf8(e.what());
      Q_EMIT storeError(m_error);
      ok = false;
    }
  }
  refresh();
  return ok;
}

// ---- filter -------------------------------------------------------------------------------------

RunsFilter::RunsFilter(QObject* parent) : QSortFilterProxyModel(parent) {
  setSortRole(Qt::UserRole + 1);
}

void RunsFilter::setSearch(const QString& text) {
  m_search = text.trimmed();
  invalidateFilter();
}

void RunsFilter::setStatus(const QString& status) {
  m_status = status;
  invalidateFilter();
}

void RunsFilter::setSweep(const QString& name) {
  m_sweep = name;
  invalidateFilter();
}

bool RunsFilter::filterAcceptsRow(int row, const QModelIndex& parent) const {
  const QAbstractItemModel* m = sourceModel();
  if (!m_status.isEmpty() &&
      m->data(m->index(row, RunsModel::Status, parent), Qt::DisplayRole).toString() != m_status)
    return false;
  if (!m_sweep.isEmpty() && m->data(m->index(row, RunsModel::Sweep, parent), Qt::DisplayRole)
                                    .toString()
                                    .section(QLatin1Char(' '), 0, -2) != m_sweep)
    return false;
  if (m_search.isEmpty()) return true;
  for (int c : {RunsModel::Id, RunsModel::Name, RunsModel::Model, RunsModel::Optimizer,
                RunsModel::Scheduler, RunsModel::Tags, RunsModel::Status, RunsModel::Sweep}) {
    if (m->data(m->index(row, c, parent), Qt::DisplayRole)
            .toString()
            .contains(m_search, Qt::CaseInsensitive))
      return true;
  }
  return false;
}

bool RunsFilter::lessThan(const QModelIndex& a, const QModelIndex& b) const {
  const QVariant va = sourceModel()->data(a, Qt::UserRole + 1);
  const QVariant vb = sourceModel()->data(b, Qt::UserRole + 1);
  if (!va.isValid()) return vb.isValid();  // empty cells first ascending
  if (!vb.isValid()) return false;
  return QVariant::compare(va, vb) == QPartialOrdering::Less;
}

// ---- view ---------------------------------------------------------------------------------------

RunsView::RunsView(RunsModel* model, QWidget* parent)
    : QWidget(parent), m_model(model), m_filter(new RunsFilter(this)) {
  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(4, 4, 4, 4);
  auto* tools = new QHBoxLayout;
  m_search = new QLineEdit(this);
  m_search->setObjectName(QStringLiteral("runsSearch"));
  m_search->setPlaceholderText(tr("Search name, tags, model, optimizer…"));
  m_search->setClearButtonEnabled(true);
  tools->addWidget(m_search, 1);
  m_status = new QComboBox(this);
  m_status->addItem(tr("all statuses"), QString());
  for (const char* s :
       {"queued", "running", "finished", "failed", "diverged", "cancelled", "crashed"})
    m_status->addItem(QString::fromLatin1(s), QString::fromLatin1(s));
  tools->addWidget(m_status);
  m_sweep = new QComboBox(this);
  m_sweep->setObjectName(QStringLiteral("runsSweep"));
  m_sweep->setToolTip(tr("Only the runs of one sweep"));
  m_sweep->addItem(tr("all sweeps"), QString());
  m_sweep->setSizeAdjustPolicy(QComboBox::AdjustToContents);
  tools->addWidget(m_sweep);
  auto* compare = new QPushButton(tr("Compare"), this);
  compare->setToolTip(tr("Compare the selected runs (2 or more)"));
  tools->addWidget(compare);
  m_resume = new QPushButton(tr("Resume"), this);
  m_resume->setObjectName(QStringLiteral("resumeButton"));
  m_resume->setToolTip(
      tr("Continue the selected crashed or cancelled run from its newest checkpoint"));
  m_resume->setEnabled(false);
  tools->addWidget(m_resume);
  auto* del = new QPushButton(tr("Delete…"), this);
  tools->addWidget(del);
  layout->addLayout(tools);

  m_filter->setSourceModel(model);
  m_table = new QTableView(this);
  m_table->setObjectName(QStringLiteral("runsTable"));
  m_table->setModel(m_filter);
  m_table->setSortingEnabled(true);
  m_table->sortByColumn(RunsModel::Id, Qt::DescendingOrder);
  m_table->setSelectionBehavior(QAbstractItemView::SelectRows);
  m_table->setSelectionMode(QAbstractItemView::ExtendedSelection);
  m_table->setEditTriggers(QAbstractItemView::DoubleClicked | QAbstractItemView::EditKeyPressed);
  m_table->verticalHeader()->setVisible(false);
  // One line per run, cut with an ellipsis (the tooltip and the columns' drag handles show the
  // rest): a wrapped name doubled the rows' text in a row of one line's height.
  m_table->setWordWrap(false);
  // Cut in the middle: a sweep's trials differ at the end of their names ("... p5 s2"), which a
  // cut at the right made all read alike.
  m_table->setTextElideMode(Qt::ElideMiddle);
  m_table->verticalHeader()->setDefaultSectionSize(m_table->fontMetrics().height() + 8);
  m_table->horizontalHeader()->setStretchLastSection(true);
  m_table->horizontalHeader()->setSectionResizeMode(QHeaderView::Interactive);
  m_table->setAlternatingRowColors(true);
  m_table->setContextMenuPolicy(Qt::CustomContextMenu);
  layout->addWidget(m_table, 1);
  // The names as wide as the longest stored one needs, within reason — once there are runs (the
  // store is read after this: sized on the empty table, the column kept its 100 px and cut
  // every sweep trial's name), and until the user sizes the column.
  auto fitNames = [this] {
    if (m_namesFitted || m_filter->rowCount() == 0) return;
    m_namesFitted = true;
    m_table->resizeColumnToContents(RunsModel::Name);
    m_table->setColumnWidth(RunsModel::Name, std::min(m_table->columnWidth(RunsModel::Name), 260));
  };
  fitNames();
  connect(m_filter, &QAbstractItemModel::rowsInserted, this, fitNames);
  connect(m_filter, &QAbstractItemModel::modelReset, this, fitNames);
  // The ranks column only while some run of the store is data-parallel (always blank otherwise,
  // it took a column's width from the names and tags).
  auto fitRanks = [this] {
    bool any = false;
    for (int r = 0; r < m_model->rowCount() && !any; ++r)
      any = !m_model->run(r).dist_backend.empty();
    m_table->setColumnHidden(RunsModel::Ranks, !any);
  };
  fitRanks();
  connect(model, &QAbstractItemModel::modelReset, this, fitRanks);
  connect(model, &QAbstractItemModel::rowsInserted, this, fitRanks);
  connect(model, &QAbstractItemModel::rowsRemoved, this, fitRanks);
  connect(m_table->horizontalHeader(), &QHeaderView::sectionResized, this,
          [this](int section, int, int) {
            if (section == RunsModel::Name && m_filter->rowCount() > 0) m_namesFitted = true;
          });

  connect(m_search, &QLineEdit::textChanged, m_filter, &RunsFilter::setSearch);
  connect(m_status, QOverload<int>::of(&QComboBox::currentIndexChanged), this,
          [this] { m_filter->setStatus(m_status->currentData().toString()); });
  connect(m_sweep, QOverload<int>::of(&QComboBox::currentIndexChanged), this,
          [this] { m_filter->setSweep(m_sweep->currentData().toString()); });
  // The sweep choices follow the store: every sweep some run belongs to.
  auto fillSweeps = [this] {
    QStringList names;
    for (int r = 0; r < m_model->rowCount(); ++r)
      if (!m_model->run(r).sweep.empty()) names << QString::fromStdString(m_model->run(r).sweep);
    names.removeDuplicates();
    names.sort();
    QStringList have;
    for (int i = 1; i < m_sweep->count(); ++i)
      have << m_sweep->itemData(i).toString();
    if (have == names) return;
    const QString current = m_sweep->currentData().toString();
    const QSignalBlocker block(m_sweep);
    while (m_sweep->count() > 1)
      m_sweep->removeItem(1);
    for (const QString& n : names)
      m_sweep->addItem(tr("sweep %1").arg(n), n);
    m_sweep->setCurrentIndex(std::max(0, m_sweep->findData(current)));
    if (m_sweep->currentIndex() == 0 && !current.isEmpty()) m_filter->setSweep(QString());
  };
  connect(model, &QAbstractItemModel::modelReset, this, fillSweeps);
  connect(model, &QAbstractItemModel::rowsInserted, this, fillSweeps);
  connect(model, &QAbstractItemModel::rowsRemoved, this, fillSweeps);
  fillSweeps();
  connect(compare, &QPushButton::clicked, this,
          [this] { Q_EMIT compareRequested(selectedRuns()); });
  connect(del, &QPushButton::clicked, this, &RunsView::deleteSelected);
  connect(m_table->selectionModel(), &QItemSelectionModel::selectionChanged, this, [this] {
    updateButtons();
    Q_EMIT selectionChanged(selectedRuns());
  });
  connect(model, &QAbstractItemModel::dataChanged, this, &RunsView::updateButtons);
  connect(m_resume, &QPushButton::clicked, this, [this] {
    const auto ids = selectedRuns();
    if (ids.size() == 1 && canResume(ids.first())) Q_EMIT resumeRequested(ids.first());
  });
  // Keep the selection across refreshes (the model resets).
  connect(model, &QAbstractItemModel::modelAboutToBeReset, this,
          [this] { setProperty("keepSelection", QVariant::fromValue(selectedRuns())); });
  connect(model, &QAbstractItemModel::modelReset, this, [this] {
    const auto ids = property("keepSelection").value<QList<qint64>>();
    QItemSelection sel;
    for (qint64 id : ids) {
      const int row = m_model->rowOf(id);
      if (row < 0) continue;
      const QModelIndex i = m_filter->mapFromSource(m_model->index(row, 0));
      if (i.isValid()) sel.select(i, i.siblingAtColumn(RunsModel::ColumnCount - 1));
    }
    m_table->selectionModel()->select(sel, QItemSelectionModel::ClearAndSelect);
    updateButtons();  // a status may have changed with the same selection
  });
  connect(m_table, &QTableView::customContextMenuRequested, this, [this](const QPoint& pos) {
    const auto ids = selectedRuns();
    if (ids.isEmpty()) return;
    QMenu menu(this);
    menu.addAction(tr("Rename"), this, [this] {
      const QModelIndex i = m_table->currentIndex().siblingAtColumn(RunsModel::Name);
      if (i.isValid()) m_table->edit(i);
    });
    menu.addAction(tr("Edit tags…"), this, &RunsView::editTags);
    menu.addAction(tr("Duplicate config"), this,
                   [this, ids] { Q_EMIT duplicateRequested(ids.first()); });
    if (ids.size() == 1 && canResume(ids.first()))
      menu.addAction(tr("Resume"), this, [this, ids] { Q_EMIT resumeRequested(ids.first()); });
    if (ids.size() >= 2)
      menu.addAction(tr("Compare"), this, [this, ids] { Q_EMIT compareRequested(ids); });
    menu.addSeparator();
    menu.addAction(tr("Delete…"), this, &RunsView::deleteSelected);
    menu.exec(m_table->viewport()->mapToGlobal(pos));
  });
}

bool RunsView::canResume(qint64 id) const {
  const int row = m_model->rowOf(id);
  if (row < 0) return false;
  // As `run --resume` takes them: a failed run too (a full disk, a checkpoint that could not
  // be written) goes on from its newest checkpoint; a run without one is refused, saying so.
  const std::string& status = m_model->run(row).status;
  return status == "crashed" || status == "cancelled" || status == "failed";
}

void RunsView::updateButtons() {
  const auto ids = selectedRuns();
  m_resume->setEnabled(ids.size() == 1 && canResume(ids.first()));
}

QList<qint64> RunsView::selectedRuns() const {
  QList<qint64> ids;
  const auto rows = m_table->selectionModel()->selectedRows();
  for (const QModelIndex& i : rows)
    ids << m_filter->data(i, Qt::UserRole).toLongLong();
  return ids;
}

void RunsView::selectRun(qint64 id) {
  const int row = m_model->rowOf(id);
  if (row < 0) return;
  const QModelIndex i = m_filter->mapFromSource(m_model->index(row, 0));
  if (!i.isValid()) return;
  m_table->selectionModel()->select(
      i, QItemSelectionModel::ClearAndSelect | QItemSelectionModel::Rows);
  m_table->scrollTo(i);
}

void RunsView::deleteSelected() {
  const auto ids = selectedRuns();
  if (ids.isEmpty()) return;
  QStringList names;
  for (qint64 id : ids) {
    const int row = m_model->rowOf(id);
    if (row >= 0)
      names << QStringLiteral("%1 '%2'").arg(id).arg(
          QString::fromStdString(m_model->run(row).name));
  }
  const auto answer = QMessageBox::question(
      this, tr("Delete runs"),
      tr("Delete %n run(s) with all their metrics and events?\n\n%1\n\nThis cannot be undone.",
         nullptr, static_cast<int>(ids.size()))
          .arg(names.join(QLatin1Char('\n'))),
      QMessageBox::Yes | QMessageBox::Cancel, QMessageBox::Cancel);
  if (answer != QMessageBox::Yes) return;
  if (!m_model->deleteRuns(ids))
    QMessageBox::warning(this, tr("Delete runs"), m_model->lastError());
}

void RunsView::setSweepFilter(const QString& name) {
  const int i = m_sweep->findData(name);
  m_sweep->setCurrentIndex(std::max(0, i));
  m_filter->setSweep(i > 0 ? name : QString());
}

void RunsView::editTags() {
  const auto ids = selectedRuns();
  if (ids.isEmpty()) return;
  const int row = m_model->rowOf(ids.first());
  if (row < 0) return;
  QStringList current;
  for (const auto& t : m_model->run(row).tags)
    current << QString::fromStdString(t);
  bool ok = false;
  const QString text =
      QInputDialog::getText(this, tr("Tags"), tr("Comma-separated tags:"), QLineEdit::Normal,
                            current.join(QStringLiteral(", ")), &ok);
  if (!ok) return;
  for (qint64 id : ids)
    m_model->setTags(id, text);
}

}  // namespace tb::ui
