#include "ui/compare/compare_view.h"
#include "engine/api/metrics.h"

#include <QAbstractScrollArea>
#include <QComboBox>
#include <QDoubleSpinBox>
#include <QEvent>
#include <QFont>
#include <QFontMetrics>
#include <QHeaderView>
#include <QLabel>
#include <QResizeEvent>
#include <QScrollBar>
#include <QSplitter>
#include <QTableWidget>
#include <QVBoxLayout>

#include <algorithm>
#include <exception>
#include <map>
#include <vector>

#include "ui/common/flow_layout.h"
#include "ui/live_plots/plots_panel.h"
#include "ui/report/report.h"

namespace tb::ui {

namespace {

constexpr int kKeyRole = Qt::UserRole;              // a key row's dotted key
constexpr int kFoldRole = Qt::UserRole + 1;         // a folded row's section
constexpr int kFoldedUnderRole = Qt::UserRole + 2;  // a key row folded under that section

// "optimizer.muon" of "optimizer.muon.lr"; "" for a top-level key.
QString sectionOf(const std::string& key) {
  const auto dot = key.rfind('.');
  return dot == std::string::npos ? QString() : QString::fromStdString(key.substr(0, dot));
}

}  // namespace

CompareView::CompareView(QWidget* parent) : QWidget(parent) {
  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(4, 4, 4, 4);
  m_split = new QSplitter(Qt::Horizontal, this);
  m_plots = new PlotsPanel(m_split);
  m_plots->setRunKey(true);
  auto* side = new QWidget(m_split);
  m_side = side;
  auto* sideLayout = new QVBoxLayout(side);
  sideLayout->setContentsMargins(0, 0, 0, 0);
  auto* targetRow = new FlowLayout;  // wraps where the side panel is narrow
  m_targetMetric = new QComboBox(side);
  m_targetMetric->addItems(
      {QLatin1String(api::metric::kEvalAccuracy), QLatin1String(api::metric::kEvalLoss),
       QLatin1String(api::metric::kLoss), QLatin1String(api::metric::kEvalPerplexity)});
  targetRow->addWidget(labelled(tr("Target:"), m_targetMetric, side));
  m_targetValue = new QDoubleSpinBox(side);
  m_targetValue->setDecimals(4);
  m_targetValue->setRange(-1e9, 1e9);
  m_targetValue->setValue(0.85);
  targetRow->addWidget(m_targetValue);
  sideLayout->addLayout(targetRow);
  sideLayout->addWidget(new QLabel(tr("Summary"), side));
  m_summary = new QTableWidget(side);
  m_summary->setObjectName(QStringLiteral("compareSummary"));
  m_summary->setEditTriggers(QAbstractItemView::NoEditTriggers);
  // Every run's column in view, side by side: the columns share the width (names elided, whole
  // in the tooltip) rather than the second run waiting behind a horizontal scroll bar.
  m_summary->horizontalHeader()->setSectionResizeMode(QHeaderView::Stretch);
  m_summary->horizontalHeader()->setTextElideMode(Qt::ElideRight);
  m_summary->setHorizontalScrollBarPolicy(Qt::ScrollBarAlwaysOff);
  m_summary->setWordWrap(false);  // "2.6908e-06" elided, never broken over two lines
  // The row names give way to the values (fitSummaryColumns), elided, whole in their tooltips.
  m_summary->verticalHeader()->setTextElideMode(Qt::ElideRight);
  m_summary->installEventFilter(this);
  m_summary->viewport()->installEventFilter(this);  // and as its scroll bar comes and goes
  sideLayout->addWidget(m_summary, 1);
  sideLayout->addWidget(new QLabel(tr("Config differences (only keys that differ)"), side));
  m_diff = new QTableWidget(side);
  m_diff->setObjectName(QStringLiteral("compareDiff"));
  m_diff->setEditTriggers(QAbstractItemView::NoEditTriggers);
  m_diff->verticalHeader()->setVisible(false);
  connect(m_diff, &QTableWidget::cellClicked, this, [this](int row, int) {
    const QTableWidgetItem* item = m_diff->item(row, 0);
    const QString folded = item ? item->data(kFoldRole).toString() : QString();
    if (folded.isEmpty()) return;
    bool hidden = true;
    for (int r = row + 1; r < m_diff->rowCount(); ++r)
      if (m_diff->item(r, 0) && m_diff->item(r, 0)->data(kFoldedUnderRole).toString() == folded)
        hidden = hidden && m_diff->isRowHidden(r);
    setSectionExpanded(folded, hidden);
  });
  m_diff->setHorizontalScrollBarPolicy(Qt::ScrollBarAlwaysOff);
  m_diff->setWordWrap(false);
  m_diff->viewport()->installEventFilter(this);  // fitDiffColumns() follows its width
  sideLayout->addWidget(m_diff, 1);
  m_split->addWidget(m_plots);
  m_split->addWidget(side);
  m_split->setStretchFactor(0, 3);
  m_split->setStretchFactor(1, 2);
  m_split->setChildrenCollapsible(false);  // a too-small size in passing never hides a part
  connect(m_split, &QSplitter::splitterMoved, this, [this] { m_userSplit = true; });
  layout->addWidget(m_split);
  watchViewport();
  connect(m_targetMetric, &QComboBox::currentTextChanged, this, [this] { fillSummary(); });
  connect(m_targetValue, QOverload<double>::of(&QDoubleSpinBox::valueChanged), this,
          [this] { fillSummary(); });
}

void CompareView::resizeEvent(QResizeEvent* event) {
  QWidget::resizeEvent(event);
  arrange();
}

bool CompareView::event(QEvent* event) {
  // Stacked, the plots fill what a scroll area's viewport shows: follow its size.
  if (event->type() == QEvent::ParentChange) watchViewport();
  return QWidget::event(event);
}

void CompareView::watchViewport() {
  if (QWidget* viewport = visibleArea()) viewport->installEventFilter(this);
}

QWidget* CompareView::visibleArea() const {
  QWidget* parent = parentWidget();
  auto* area =
      parent != nullptr ? qobject_cast<QAbstractScrollArea*>(parent->parentWidget()) : nullptr;
  return area != nullptr && area->viewport() == parent ? parent : nullptr;
}

bool CompareView::eventFilter(QObject* watched, QEvent* event) {
  if (watched == visibleArea() && event->type() == QEvent::Resize) arrange();
  if (m_diff != nullptr && watched == m_diff->viewport() && event->type() == QEvent::Resize)
    fitDiffColumns();
  if (m_summary != nullptr && (watched == m_summary || watched == m_summary->viewport()) &&
      event->type() == QEvent::Resize)
    fitSummaryColumns();
  return QWidget::eventFilter(watched, event);
}

QSize CompareView::minimumSizeHint() const {
  const QMargins m = layout()->contentsMargins();
  const QSize plots = m_plots->minimumSizeHint().expandedTo(m_plots->minimumSize());
  const QSize side = m_side->minimumSizeHint().expandedTo(m_side->minimumSize());
  // Stacked: the plots at the visible height and the summary below them are the page's least
  // height, while each part keeps its own least height, so the splitter between them can move.
  const int height = m_split->orientation() == Qt::Horizontal
                         ? std::max(plots.height(), side.height())
                         : std::max(plots.height(), m_stackedPlots) + m_split->handleWidth() +
                               std::max(side.height(), kStackedSide);
  return {std::max(plots.width(), side.width()) + m.left() + m.right(),
          height + m.top() + m.bottom()};
}

void CompareView::arrange() {
  const QMargins m = layout()->contentsMargins();
  const int across = width() - m.left() - m.right() - m_split->handleWidth();
  const int plotsLeast = m_plots->minimumSizeHint().width();
  // (At the row names' full width: that they give way to the values is no reason to squeeze
  // the summary beside the plots.)
  const int sideLeast =
      std::max(kSideComfort, m_side->minimumSizeHint().width() + m_summaryNamesGiven);
  // Beside the plots only where the summary's values read whole there: with 8 runs every cell
  // of a 280 px side panel came down to "c…" while the plots were 170 px strips. Else the
  // summary and the diff go under the plots, at the full width.
  const bool wide = across >= plotsLeast + std::max(sideLeast, summaryWidthWanted());
  // Stacked in a scroll area: the plots as tall as its viewport less a strip where the target
  // row shows that more follows. Elsewhere (a window of its own) at their least height: a
  // height that followed the view's own would grow it without end.
  const QWidget* viewport = visibleArea();
  const int plotsLeastHeight = m_plots->minimumSizeHint().height();
  const int stackedPlots =
      wide || viewport == nullptr
          ? 0
          : std::max(plotsLeastHeight,
                     viewport->height() - m.top() - m.bottom() - m_split->handleWidth() - 36);
  const Qt::Orientation want = wide ? Qt::Horizontal : Qt::Vertical;
  if (want != m_split->orientation() || stackedPlots != m_stackedPlots) {
    if (want != m_split->orientation()) {
      m_split->setOrientation(want);
      m_userSplit = false;  // sizes dragged for the other orientation mean nothing here
    }
    m_stackedPlots = stackedPlots;
    updateGeometry();  // a new least size for the scroll area
  }
  if (m_userSplit) return;
  if (wide) {
    const int side =
        std::clamp(std::max(across * 2 / 5, summaryWidthWanted()), sideLeast, across - plotsLeast);
    m_split->setSizes({across - side, side});
  } else {
    const int down = height() - m.top() - m.bottom() - m_split->handleWidth();
    const int plots = std::max(plotsLeastHeight, stackedPlots);
    m_split->setSizes({plots, std::max(kStackedSide, down - plots)});
  }
}

void CompareView::setRuns(const api::StoreReader* store, const QList<qint64>& selected) {
  const QList<qint64> ids = inRunOrder(selected);
  m_store = store;
  m_ids = ids;
  m_plots->clearRuns();
  m_diff->clear();
  m_summary->clear();
  if (!store) return;
  std::vector<api::RunInfo> all;
  try {
    all = store->runs();
  } catch (const std::exception&) {
    return;
  }
  int index = 0;
  for (qint64 id : ids) {
    QString name = QString::number(id);
    for (const auto& r : all)
      if (r.id == id) name = QStringLiteral("%1 %2").arg(id).arg(QString::fromStdString(r.name));
    m_plots->addRun(id, name, runColor(index++));
  }
  std::vector<std::string> configs;
  try {
    for (qint64 id : ids) {
      m_plots->loadFromStore(*store, id);
      configs.push_back(store->config_text(id));
    }
  } catch (const std::exception&) {
    return;
  }
  m_plots->replotAll();
  fillDiff(api::config_diff(configs));
  fillSummary();
}

void CompareView::fillDiff(const std::vector<api::ConfigDiffRow>& diff) {
  const int runs = static_cast<int>(m_ids.size());
  m_diff->setColumnCount(runs + 1);
  QStringList headers{tr("key")};
  for (qint64 id : m_ids)
    headers << tr("run %1").arg(id);
  m_diff->setHorizontalHeaderLabels(headers);
  m_diff->setRowCount(0);
  auto addRow = [&](const QStringList& cells) {
    const int r = m_diff->rowCount();
    m_diff->insertRow(r);
    for (int c = 0; c < cells.size(); ++c) {
      auto* item = new QTableWidgetItem(cells[c]);
      item->setToolTip(cells[c].trimmed());  // whole, where the column elides it
      m_diff->setItem(r, c, item);
    }
    return r;
  };
  // Sections in key order; within one, the keys every run has, then those some runs lack.
  std::map<QString, std::vector<const api::ConfigDiffRow*>> sections;
  for (const auto& row : diff)
    sections[sectionOf(row.key)].push_back(&row);
  for (const auto& [section, rows] : sections) {
    const int head =
        addRow({section.isEmpty() ? tr("(top level)") : QStringLiteral("[%1]").arg(section)});
    QFont bold = m_diff->font();
    bold.setBold(true);
    m_diff->item(head, 0)->setFont(bold);
    m_diff->setSpan(head, 0, 1, runs + 1);
    std::vector<const api::ConfigDiffRow*> oneSided;
    for (const auto* row : rows) {
      // Folded: keys some runs lack while those that have them agree (another optimizer's own);
      // one the runs that have it differ on is listed (two AdamW rates beside a Muon run).
      if (row->only_some) {
        oneSided.push_back(row);
        continue;
      }
      QStringList cells{QString::fromStdString(row->key)};
      for (const auto& v : row->values)
        cells << QString::fromStdString(v);
      m_diff->item(addRow(cells), 0)->setData(kKeyRole, QString::fromStdString(row->key));
    }
    if (oneSided.empty()) continue;
    // One row for the keys only some runs have: how many each run has, the keys folded below.
    QStringList cells{tr("%1.* (%2 keys only some runs have)").arg(section).arg(oneSided.size())};
    QString tip;
    for (int c = 0; c < runs; ++c) {
      int have = 0;
      for (const auto* row : oneSided)
        have += row->values[static_cast<std::size_t>(c)] != "-" ? 1 : 0;
      cells << (have > 0 ? tr("%1 keys").arg(have) : QStringLiteral("–"));
    }
    for (const auto* row : oneSided)
      tip += QString::fromStdString(row->key) + QLatin1Char('\n');
    const int fold = addRow(cells);
    m_diff->item(fold, 0)->setData(kFoldRole, section);
    m_diff->item(fold, 0)->setToolTip(tr("Click to show or hide:\n") + tip.trimmed());
    for (const auto* row : oneSided) {
      QStringList keyCells{QStringLiteral("  ") + QString::fromStdString(row->key)};
      for (const auto& v : row->values)
        keyCells << (v == "-" ? QStringLiteral("–") : QString::fromStdString(v));
      const int r = addRow(keyCells);
      m_diff->item(r, 0)->setData(kKeyRole, QString::fromStdString(row->key));
      m_diff->item(r, 0)->setData(kFoldedUnderRole, section);
      m_diff->setRowHidden(r, true);
    }
  }
  fitDiffColumns();
}

void CompareView::fitDiffColumns() {
  const int runs = m_diff->columnCount() - 1;
  if (runs < 1) return;
  QHeaderView* header = m_diff->horizontalHeader();
  const int width = m_diff->viewport()->width();
  // (Hidden rows and the spanned section titles count too: a folded key is as long when shown.)
  int key = m_diff->fontMetrics().horizontalAdvance(m_diff->horizontalHeaderItem(0)->text()) + 24;
  for (int r = 0; r < m_diff->rowCount(); ++r)
    if (const QTableWidgetItem* item = m_diff->item(r, 0); item && m_diff->columnSpan(r, 0) == 1)
      key = std::max(key, m_diff->fontMetrics().horizontalAdvance(item->text()) + 12);
  header->setSectionResizeMode(0, QHeaderView::Interactive);
  header->resizeSection(0, std::min(key, width * 45 / 100));
  for (int c = 1; c <= runs; ++c)
    header->setSectionResizeMode(c, QHeaderView::Stretch);
}

int CompareView::summaryWidthWanted() const {
  const int runs = m_summary->columnCount();
  if (runs < 1) return 0;
  const QFontMetrics fm = m_summary->fontMetrics();
  const QFontMetrics headFm = m_summary->verticalHeader()->fontMetrics();
  int names = 0, widest = 0;
  for (int r = 0; r < m_summary->rowCount(); ++r)
    if (const QTableWidgetItem* item = m_summary->verticalHeaderItem(r))
      names = std::max(names, headFm.horizontalAdvance(item->text()) + 16);
  for (int c = 0; c < runs; ++c) {
    if (const QTableWidgetItem* head = m_summary->horizontalHeaderItem(c))
      widest = std::max(widest, headFm.horizontalAdvance(head->text()));
    for (int r = 0; r < m_summary->rowCount(); ++r)
      if (const QTableWidgetItem* item = m_summary->item(r, c))
        widest = std::max(widest, fm.horizontalAdvance(item->text()));
  }
  // The names may give way down to a third of the width (fitSummaryColumns), the values not.
  const int values = runs * (widest + 12);
  return values + std::min(names, values / 2) + 2 * m_summary->frameWidth() +
         m_summary->verticalScrollBar()->sizeHint().width();
}

void CompareView::fitSummaryColumns() {
  const int runs = m_summary->columnCount();
  if (runs < 1) return;
  QHeaderView* rowNames = m_summary->verticalHeader();
  const QFontMetrics fm = m_summary->fontMetrics();
  const QFontMetrics headFm = rowNames->fontMetrics();
  int names = 0;
  for (int r = 0; r < m_summary->rowCount(); ++r)
    if (const QTableWidgetItem* item = m_summary->verticalHeaderItem(r))
      names = std::max(names, headFm.horizontalAdvance(item->text()) + 16);
  // (The style's margins too: the header's own width, whatever width it was given.)
  {
    const int min = rowNames->minimumWidth(), max = rowNames->maximumWidth();
    rowNames->setMinimumWidth(0);
    rowNames->setMaximumWidth(QWIDGETSIZE_MAX);
    names = std::max(names, rowNames->sizeHint().width());
    rowNames->setMinimumWidth(min);
    rowNames->setMaximumWidth(max);
  }
  // The widest value (a run's "#3" too), with the cell's margins, in each of the columns, which
  // share the width equally.
  int widest = 0;
  for (int c = 0; c < runs; ++c) {
    if (m_summary->horizontalHeaderItem(c))
      widest =
          std::max(widest, headFm.horizontalAdvance(m_summary->horizontalHeaderItem(c)->text()));
    for (int r = 0; r < m_summary->rowCount(); ++r)
      if (const QTableWidgetItem* item = m_summary->item(r, c))
        widest = std::max(widest, fm.horizontalAdvance(item->text()));
  }
  const int values = runs * (widest + 12);
  const int scroll =
      m_summary->verticalScrollBar()->isVisible() ? m_summary->verticalScrollBar()->width() : 0;
  const int total = m_summary->width() - 2 * m_summary->frameWidth() - scroll;
  // Values whole where the names can give way (down to a third of the width): "finis…" beside a
  // 150 px "best eval loss" read worse than "best eval l…" beside "finished".
  const int width = std::clamp(total - values, std::min(names, total / 3), names);
  m_summaryNamesGiven = names - std::max(width, 0);
  if (m_summaryNamesGiven <= 0) {  // room for them all: the header's own width, as before
    rowNames->setMinimumWidth(0);
    rowNames->setMaximumWidth(QWIDGETSIZE_MAX);
    m_summaryNamesGiven = 0;
  } else if (rowNames->width() != std::max(width, 0)) {
    rowNames->setFixedWidth(std::max(width, 0));
  }
}

void CompareView::setSectionExpanded(const QString& section, bool expanded) {
  for (int r = 0; r < m_diff->rowCount(); ++r)
    if (m_diff->item(r, 0) && m_diff->item(r, 0)->data(kFoldedUnderRole).toString() == section)
      m_diff->setRowHidden(r, !expanded);
}

void CompareView::refresh() {
  if (!m_store) return;
  try {
    // A run resumed from an earlier checkpoint lost its later steps: read everything again.
    const bool rewound = std::any_of(m_ids.begin(), m_ids.end(), [&](qint64 id) {
      return m_plots->rewoundInStore(*m_store, id);
    });
    if (rewound) {
      m_plots->reloadFromStore(*m_store);
    } else {
      for (qint64 id : m_ids)
        m_plots->loadFromStore(*m_store, id);
    }
  } catch (const std::exception&) {
    return;
  }
  fillSummary();
}

void CompareView::fillSummary() {
  if (!m_store || m_ids.isEmpty()) return;
  Target t;
  t.metric = m_targetMetric->currentText();
  t.value = m_targetValue->value();
  std::vector<RunSummaryRow> rows;
  try {
    rows = summarizeRuns(*m_store, m_ids, t);
  } catch (const std::exception&) {
    return;
  }
  QStringList labels = {tr("status"),          tr("steps"),           tr("duration (s)"),
                        tr("final loss"),      tr("best eval loss"),  tr("best accuracy"),
                        tr("best perplexity"), tr("steps to target"), tr("time to target (s)")};
  const QStringList phases = stepPhaseNames();  // the report's rows, communication included
  for (const auto& p : phases)
    labels << tr("mean %1 ms").arg(p);
  m_summary->setRowCount(static_cast<int>(labels.size()));
  m_summary->setColumnCount(static_cast<int>(rows.size()));
  m_summary->setVerticalHeaderLabels(labels);
  for (int r = 0; r < static_cast<int>(labels.size()); ++r)
    m_summary->verticalHeaderItem(r)->setToolTip(labels[r]);  // whole, where it is elided
  // "#3" as the plots' legends name the runs; the name in the tooltip.
  QStringList headers;
  for (const auto& r : rows)
    headers << QStringLiteral("#%1").arg(r.id);
  m_summary->setHorizontalHeaderLabels(headers);
  for (int c = 0; c < static_cast<int>(rows.size()); ++c)
    m_summary->horizontalHeaderItem(c)->setToolTip(
        QStringLiteral("#%1 %2")
            .arg(rows[static_cast<std::size_t>(c)].id)
            .arg(rows[static_cast<std::size_t>(c)].name));
  auto opt = [](const std::optional<double>& v, int p = 5) {
    return v ? QString::number(*v, 'g', p) : QStringLiteral("–");
  };
  for (int c = 0; c < static_cast<int>(rows.size()); ++c) {
    const auto& r = rows[static_cast<std::size_t>(c)];
    QStringList cells = {
        r.status,
        r.steps ? QString::number(*r.steps) : QStringLiteral("–"),
        r.duration ? QString::number(*r.duration, 'f', 1) : QStringLiteral("–"),
        opt(r.finalLoss),
        opt(r.bestEvalLoss),
        opt(r.bestAccuracy),
        opt(r.bestPerplexity),
        r.stepsToTarget ? QString::number(*r.stepsToTarget)
        : r.logsTarget  ? tr("not reached")
                        : tr("n/a"),
        r.timeToTarget ? QString::number(*r.timeToTarget, 'f', 1) : QStringLiteral("–")};
    for (const auto& p : phases) {
      QString cell = QStringLiteral("–");
      for (const auto& [name, v] : r.meanPhaseMs)
        if (name == p) cell = QString::number(v, 'f', 3);
      cells << cell;
    }
    for (int i = 0; i < cells.size(); ++i) {
      auto* item = new QTableWidgetItem(cells[i]);
      item->setToolTip(cells[i]);  // whole, where the column elides it
      m_summary->setItem(i, c, item);
    }
  }
  fitSummaryColumns();
  arrange();  // beside the plots or under them, as the new values need
}

}  // namespace tb::ui
