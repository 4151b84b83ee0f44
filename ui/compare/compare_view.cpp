#include "ui/compare/compare_view.h"
#include "engine/api/metrics.h"

#include <QComboBox>
#include <QDoubleSpinBox>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QSplitter>
#include <QTableWidget>
#include <QVBoxLayout>

#include <exception>

#include "ui/live_plots/plots_panel.h"
#include "ui/report/report.h"

namespace tb::ui {

CompareView::CompareView(QWidget* parent) : QWidget(parent) {
  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(4, 4, 4, 4);
  auto* splitter = new QSplitter(Qt::Horizontal, this);
  m_plots = new PlotsPanel(splitter);
  auto* side = new QWidget(splitter);
  auto* sideLayout = new QVBoxLayout(side);
  sideLayout->setContentsMargins(0, 0, 0, 0);
  auto* targetRow = new QHBoxLayout;
  targetRow->addWidget(new QLabel(tr("Target:"), side));
  m_targetMetric = new QComboBox(side);
  m_targetMetric->addItems(
      {QLatin1String(api::metric::kEvalAccuracy), QLatin1String(api::metric::kEvalLoss),
       QLatin1String(api::metric::kLoss), QLatin1String(api::metric::kEvalPerplexity)});
  targetRow->addWidget(m_targetMetric);
  m_targetValue = new QDoubleSpinBox(side);
  m_targetValue->setDecimals(4);
  m_targetValue->setRange(-1e9, 1e9);
  m_targetValue->setValue(0.85);
  targetRow->addWidget(m_targetValue);
  targetRow->addStretch(1);
  sideLayout->addLayout(targetRow);
  sideLayout->addWidget(new QLabel(tr("Summary"), side));
  m_summary = new QTableWidget(side);
  m_summary->setObjectName(QStringLiteral("compareSummary"));
  m_summary->setEditTriggers(QAbstractItemView::NoEditTriggers);
  sideLayout->addWidget(m_summary, 1);
  sideLayout->addWidget(new QLabel(tr("Config differences (only keys that differ)"), side));
  m_diff = new QTableWidget(side);
  m_diff->setObjectName(QStringLiteral("compareDiff"));
  m_diff->setEditTriggers(QAbstractItemView::NoEditTriggers);
  sideLayout->addWidget(m_diff, 1);
  splitter->addWidget(m_plots);
  splitter->addWidget(side);
  splitter->setStretchFactor(0, 3);
  splitter->setStretchFactor(1, 2);
  layout->addWidget(splitter);
  connect(m_targetMetric, &QComboBox::currentTextChanged, this, [this] { fillSummary(); });
  connect(m_targetValue, QOverload<double>::of(&QDoubleSpinBox::valueChanged), this,
          [this] { fillSummary(); });
}

void CompareView::setRuns(const api::StoreReader* store, const QList<qint64>& ids) {
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
  const auto diff = api::config_diff(configs);
  m_diff->setColumnCount(static_cast<int>(ids.size()) + 1);
  QStringList headers{tr("key")};
  for (qint64 id : ids)
    headers << tr("run %1").arg(id);
  m_diff->setHorizontalHeaderLabels(headers);
  m_diff->setRowCount(static_cast<int>(diff.size()));
  for (int r = 0; r < static_cast<int>(diff.size()); ++r) {
    const auto& row = diff[static_cast<std::size_t>(r)];
    m_diff->setItem(r, 0, new QTableWidgetItem(QString::fromStdString(row.key)));
    for (int c = 0; c < static_cast<int>(row.values.size()); ++c)
      m_diff->setItem(
          r, c + 1,
          new QTableWidgetItem(QString::fromStdString(row.values[static_cast<std::size_t>(c)])));
  }
  m_diff->resizeColumnsToContents();
  fillSummary();
}

void CompareView::refresh() {
  if (!m_store) return;
  try {
    for (qint64 id : m_ids)
      m_plots->loadFromStore(*m_store, id);
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
  const QStringList phases = {QStringLiteral("data"),          QStringLiteral("forward"),
                              QStringLiteral("backward"),      QStringLiteral("optimizer"),
                              QStringLiteral("Newton–Schulz"), QStringLiteral("step")};
  for (const auto& p : phases)
    labels << tr("mean %1 ms").arg(p);
  m_summary->setRowCount(static_cast<int>(labels.size()));
  m_summary->setColumnCount(static_cast<int>(rows.size()));
  m_summary->setVerticalHeaderLabels(labels);
  QStringList headers;
  for (const auto& r : rows)
    headers << QStringLiteral("%1 %2").arg(r.id).arg(r.name);
  m_summary->setHorizontalHeaderLabels(headers);
  auto opt = [](const std::optional<double>& v, int p = 5) {
    return v ? QString::number(*v, 'g', p) : QStringLiteral("–");
  };
  for (int c = 0; c < static_cast<int>(rows.size()); ++c) {
    const auto& r = rows[static_cast<std::size_t>(c)];
    QStringList cells = {
        r.status,
        QString::number(r.steps),
        r.duration ? QString::number(*r.duration, 'f', 1) : QStringLiteral("–"),
        opt(r.finalLoss),
        opt(r.bestEvalLoss),
        opt(r.bestAccuracy),
        opt(r.bestPerplexity),
        r.stepsToTarget ? QString::number(*r.stepsToTarget) : tr("not reached"),
        r.timeToTarget ? QString::number(*r.timeToTarget, 'f', 1) : QStringLiteral("–")};
    for (const auto& p : phases) {
      QString cell = QStringLiteral("–");
      for (const auto& [name, v] : r.meanPhaseMs)
        if (name == p) cell = QString::number(v, 'f', 3);
      cells << cell;
    }
    for (int i = 0; i < cells.size(); ++i)
      m_summary->setItem(i, c, new QTableWidgetItem(cells[i]));
  }
  m_summary->resizeColumnsToContents();
}

}  // namespace tb::ui
