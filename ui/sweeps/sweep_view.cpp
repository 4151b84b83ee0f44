// SweepView (see sweep_view.h).
#include "ui/sweeps/sweep_view.h"

#include <qcustomplot.h>

#include <QComboBox>
#include <QDoubleValidator>
#include <QHeaderView>
#include <QLabel>
#include <QLineEdit>
#include <QPushButton>
#include <QResizeEvent>
#include <QSplitter>
#include <QTabWidget>
#include <QTableWidget>
#include <QVBoxLayout>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "ui/common/flow_layout.h"
#include "ui/common/log_ticker.h"
#include "ui/live_plots/plots_panel.h"
#include "ui/live_plots/series_math.h"
#include "ui/sweeps/sweep_values.h"

namespace tb::ui {
namespace {

using sweep_values::display;
using sweep_values::number;
using sweep_values::numberOf;
using sweep_values::numericKey;
using sweep_values::valuesOf;

bool endsWithLr(const std::string& key) {
  return key.size() >= 2 && key.compare(key.size() - 2, 2, "lr") == 0;
}

// Whether `value` reaches `target` for a metric with this goal.
bool reaches(double value, double target, bool max) {
  return max ? value >= target : value <= target;
}

QTableWidgetItem* cell(const QString& text) {
  auto* item = new QTableWidgetItem(text);
  item->setFlags(item->flags() & ~Qt::ItemIsEditable);
  item->setToolTip(text);  // whole, where the column elides it
  return item;
}

}  // namespace

QStringList sweepXKeys(const api::SweepResult& sweep) {
  QStringList keys;
  int lrKeys = 0;
  for (const auto& k : sweep.plan.keys)
    if (numericKey(sweep, k)) {
      keys << QString::fromStdString(k);
      lrKeys += endsWithLr(k) ? 1 : 0;
    }
  if (lrKeys >= 2) keys.prepend(kAnyLearningRate);
  return keys;
}

std::vector<SweepCurve> sweepCurves(const api::SweepResult& sweep, const QString& xKey) {
  const bool anyLr = xKey == kAnyLearningRate;
  const std::string key = xKey.toStdString();
  // point -> its finished trials' best values
  std::map<std::int64_t, std::vector<double>> bests;
  for (const auto& t : sweep.trials)
    if (t.best) bests[t.trial.point].push_back(*t.best);
  // A point's x and its group's name (the other swept values).
  const auto place = [&](std::int64_t point) -> std::optional<std::pair<double, QString>> {
    std::optional<double> x;
    QStringList group;
    for (const auto& [k, v] : valuesOf(sweep, point)) {
      const bool isX = anyLr ? (endsWithLr(k) && numericKey(sweep, k)) : k == key;
      if (isX && !x) {
        x = numberOf(v);
      } else if (!isX) {
        group << (numericKey(sweep, k) ? QString::fromStdString(k) + QLatin1Char('=') + display(v)
                                       : display(v));
      }
    }
    if (!x) return std::nullopt;
    return std::make_pair(
        *x, group.isEmpty() ? QStringLiteral("all") : group.join(QStringLiteral(", ")));
  };
  // group -> x -> values (points of a group sharing an x pool their trials)
  std::map<QString, std::map<double, std::vector<double>>> groups, stoppedGroups;
  for (const auto& [point, values] : bests)
    if (const auto at = place(point)) {
      auto& vs = groups[at->second][at->first];
      vs.insert(vs.end(), values.begin(), values.end());
    }
  // Points early stopping stopped have no finished seed: their value at the rung (a sweep whose
  // AdamW points all stopped drew no AdamW line at all, as if they had not been tried).
  for (const auto& p : sweep.points)
    if (p.stopped && p.stopped_value && !bests.count(p.point))
      if (const auto at = place(p.point))
        stoppedGroups[at->second][at->first].push_back(*p.stopped_value);
  std::vector<SweepCurve> curves;
  for (const auto* set : {&groups, &stoppedGroups})
    for (const auto& [name, byX] : *set) {
      SweepCurve c;
      c.name = name;
      c.stopped = set == &stoppedGroups;
      for (const auto& [x, vs] : byX) {
        double sum = 0;
        for (double v : vs)
          sum += v;
        c.x.push_back(x);
        c.mean.push_back(sum / static_cast<double>(vs.size()));
        c.low.push_back(*std::min_element(vs.begin(), vs.end()));
        c.high.push_back(*std::max_element(vs.begin(), vs.end()));
      }
      curves.push_back(std::move(c));
    }
  return curves;
}

SweepView::SweepView(QWidget* parent) : QWidget(parent) {
  // The controls wrap onto more rows where the tab is narrow (docks open beside it) rather
  // than widening the page past its tab.
  auto* top = new FlowLayout;
  m_sweepBox = new QComboBox(this);
  m_sweepBox->setToolTip(tr("The sweeps of the store, newest first"));
  m_sweepBox->setMinimumContentsLength(24);
  m_summary = new QLabel(this);
  m_summary->setTextInteractionFlags(Qt::TextSelectableByMouse);
  m_summary->setWordWrap(true);
  m_xBox = new QComboBox(this);
  m_xBox->setToolTip(tr("The swept key on the x axis of the metric plot"));
  m_xBox->setSizeAdjustPolicy(QComboBox::AdjustToContents);
  m_xBox->setMinimumContentsLength(20);
  m_target = new QLineEdit(this);
  m_target->setValidator(new QDoubleValidator(m_target));
  m_target->setMinimumWidth(90);
  m_target->setMaximumWidth(120);
  m_target->setToolTip(
      tr("Target of the sweep's metric: the trials table shows the steps and "
         "time each trial took to reach it"));
  m_openBest = new QPushButton(tr("Open best config"), this);
  m_openBest->setToolTip(tr("Load the best finished trial's config into the config editor"));
  top->addWidget(labelled(tr("Sweep:"), m_sweepBox, this));
  top->addWidget(labelled(tr("x:"), m_xBox, this));
  top->addWidget(labelled(tr("target:"), m_target, this));
  top->addWidget(m_openBest);
  m_export = new QPushButton(tr("Export report…"), this);
  m_export->setToolTip(
      tr("This sweep as an HTML or PDF report: its plots, points, trials and "
         "the best configs"));
  top->addWidget(m_export);

  m_curvePlot = new QCustomPlot(this);
  m_curvePlot->setMinimumHeight(300);
  m_curvePlot->legend->setVisible(true);
  m_curvePlot->setInteractions(QCP::iRangeDrag | QCP::iRangeZoom);
  // About one x label per 70 px of axis, so that a narrow plot's labels do not run together;
  // the count changed by this layout is drawn by the next replot.
  connect(m_curvePlot, &QCustomPlot::afterLayout, this, [this] {
    const int n = std::clamp(m_curvePlot->axisRect()->width() / 70, 2, 8);
    if (m_curvePlot->axisRect()->width() <= 0 || m_curvePlot->xAxis->ticker()->tickCount() == n)
      return;
    m_curvePlot->xAxis->ticker()->setTickCount(n);
    m_curvePlot->replot(QCustomPlot::rpQueuedReplot);
  });
  m_curvePlot->setToolTip(
      tr("Each point's best metric, mean over its seeds; the band spans "
         "the seeds' values"));
  m_parallel = new QCustomPlot(this);
  m_parallel->setMinimumHeight(300);
  m_parallel->xAxis->setVisible(false);
  m_parallel->yAxis->setVisible(false);
  m_parallel->axisRect()->setAutoMargins(QCP::msNone);
  m_parallel->axisRect()->setMargins(QMargins(10, 10, 10, 10));
  // What the colours say, under the axes (the plot has no legend: a line per trial).
  QFont caption = font();
  caption.setPointSizeF(caption.pointSizeF() * 0.85);
  m_parallelCaption = new QCPTextElement(m_parallel, QString(), caption);
  QColor captionColor = palette().color(QPalette::WindowText);
  captionColor.setAlpha(170);
  m_parallelCaption->setTextColor(captionColor);
  m_parallelCaption->setMinimumSize(1, 0);  // its text sets no least width for the plot
  m_parallel->plotLayout()->addElement(1, 0, m_parallelCaption);
  m_parallel->plotLayout()->setRowStretchFactor(1, 0.001);
  auto* plots = new QSplitter(Qt::Horizontal, this);
  plots->addWidget(m_curvePlot);
  plots->addWidget(m_parallel);
  m_parallel->installEventFilter(this);   // titles on one row or two, by its width
  m_curvePlot->installEventFilter(this);  // the legend's corner, by its size

  m_points = new QTableWidget(this);
  m_trials = new QTableWidget(this);
  for (QTableWidget* t : {m_points, m_trials}) {
    t->verticalHeader()->setVisible(false);
    t->setSelectionBehavior(QAbstractItemView::SelectRows);
    t->horizontalHeader()->setStretchLastSection(true);
    // One line a row (the values elided, whole in the tooltip): more points in sight.
    t->setWordWrap(false);
    t->setTextElideMode(Qt::ElideRight);
    t->verticalHeader()->setDefaultSectionSize(fontMetrics().height() + 6);
  }
  auto* tables = new QTabWidget(this);
  tables->addTab(m_points, tr("Points (best first)"));
  tables->addTab(m_trials, tr("Trials"));

  auto* split = new QSplitter(Qt::Vertical, this);
  split->addWidget(plots);
  split->addWidget(tables);
  split->setStretchFactor(0, 3);
  split->setStretchFactor(1, 2);
  // Room for the best few points (header, tabs and five rows) on a laptop's screen: the plots
  // took all but two rows of it at 1366 x 768.
  tables->setMinimumHeight(fontMetrics().height() * 11);
  split->setCollapsible(1, false);
  auto* layout = new QVBoxLayout(this);
  layout->addLayout(top);
  layout->addWidget(m_summary);
  layout->addWidget(split, 1);

  connect(m_sweepBox, &QComboBox::currentIndexChanged, this, [this](int i) {
    if (m_filling || i < 0) return;
    showSweep(m_sweepBox->itemData(i).toString());
  });
  connect(m_xBox, &QComboBox::currentTextChanged, this, [this] {
    if (m_filling) return;
    fillCurves();
  });
  connect(m_target, &QLineEdit::editingFinished, this, [this] {
    if (m_filling) return;
    fillTrialTargets();
  });
  connect(m_openBest, &QPushButton::clicked, this, [this] {
    const QString config = bestConfig();
    if (config.isEmpty()) return;
    emit openConfig(config, tr("sweep %1, best trial").arg(m_name));
  });
  connect(m_export, &QPushButton::clicked, this, [this] {
    if (!m_name.isEmpty()) emit exportRequested(m_name);
  });
  reload();
}

void SweepView::setStore(const api::StoreReader* store) {
  if (store != m_store) m_name.clear();
  m_store = store;
  refresh();
}

void SweepView::refresh() {
  // The sweeps list, keeping the one shown.
  m_filling = true;
  m_sweepBox->clear();
  std::vector<api::SweepRow> rows;
  QString error;
  if (m_store) {
    try {
      rows = m_store->sweeps();
    } catch (const std::exception& e) {
      error = QString::fromUtf8(e.what());
    }
  }
  for (const auto& r : rows)
    m_sweepBox->addItem(QStringLiteral("%1 (%2)").arg(QString::fromStdString(r.name),
                                                      QString::fromStdString(r.status)),
                        QString::fromStdString(r.name));
  m_filling = false;
  if (!error.isEmpty()) {
    m_summary->setText(error);
    return;
  }
  showSweep(m_name);
}

bool SweepView::listChanged() const {
  if (!m_store) return false;
  std::vector<api::SweepRow> rows;
  try {
    rows = m_store->sweeps();
  } catch (const std::exception&) {
    return false;  // refresh() says why when it runs
  }
  if (static_cast<int>(rows.size()) != m_sweepBox->count()) return true;
  for (int i = 0; i < m_sweepBox->count(); ++i) {
    const auto& r = rows[static_cast<std::size_t>(i)];
    if (m_sweepBox->itemText(i) != QStringLiteral("%1 (%2)").arg(QString::fromStdString(r.name),
                                                                 QString::fromStdString(r.status)))
      return true;
  }
  return false;
}

void SweepView::showSweep(const QString& name) {
  QString want = name;
  if (want.isEmpty() && m_sweepBox->count() > 0) want = m_sweepBox->itemData(0).toString();
  const int index = m_sweepBox->findData(want);
  if (index < 0) {
    m_name.clear();
    m_result = {};
    // The box shows no sweep either (it showed the first one beside "no sweep" for a name given
    // with --sweep that the store lacks).
    m_filling = true;
    m_sweepBox->setCurrentIndex(-1);
    m_xBox->clear();
    m_filling = false;
    if (!m_store)
      m_summary->clear();
    else if (m_sweepBox->count() == 0)
      m_summary->setText(
          tr("No sweep in this store: run one with trainbench-cli sweep CONFIG or "
             "the config editor's Sweep tab"));
    else
      m_summary->setText(tr("No sweep '%1' in this store: choose one above").arg(want));
    reload();
    return;
  }
  const bool changed = want != m_name;
  m_name = want;
  m_filling = true;
  m_sweepBox->setCurrentIndex(index);
  m_filling = false;
  try {
    m_result = m_store->sweep(m_name.toStdString());
  } catch (const std::exception& e) {
    m_result = {};
    m_summary->setText(QString::fromUtf8(e.what()));
    reload();
    return;
  }
  if (changed) {  // a new sweep: its x choices
    m_filling = true;
    m_xBox->clear();
    m_xBox->addItems(sweepXKeys(m_result));
    m_target->clear();
    m_filling = false;
  }
  if (m_target->text().isEmpty()) {
    // A target half the finished trials reach (their median), once there are some.
    std::vector<double> bests;
    for (const auto& t : m_result.trials)
      if (t.best) bests.push_back(*t.best);
    if (!bests.empty()) {
      std::sort(bests.begin(), bests.end());
      m_target->setText(QString::number(bests[(bests.size() - 1) / 2], 'g', 6));
    }
  }
  int finished = 0;
  int stopped = 0;
  for (const auto& t : m_result.trials) {
    finished += t.status == "finished" ? 1 : 0;
    stopped += t.stopped ? 1 : 0;
  }
  const auto& p = m_result.plan;
  QString text = tr("%1, %2: %3 %4; %5 trials, %6 finished")
                     .arg(QString::fromStdString(m_result.status), QString::fromStdString(p.method),
                          QString::fromStdString(p.goal), QString::fromStdString(p.metric))
                     .arg(m_result.trials.size())
                     .arg(finished);
  if (p.stopping != "none")
    text += tr(", %1 stopped early (%2)").arg(stopped).arg(QString::fromStdString(p.stopping));
  m_summary->setText(text);
  reload();
}

void SweepView::reload() {
  fillCurves();
  fillParallel();
  fillTables();
  m_openBest->setEnabled(!bestConfig().isEmpty());
  m_export->setEnabled(!m_name.isEmpty());
}

QStringList SweepView::xKeys() const {
  QStringList keys;
  for (int i = 0; i < m_xBox->count(); ++i)
    keys << m_xBox->itemText(i);
  return keys;
}

bool SweepView::setXKey(const QString& key) {
  const int i = m_xBox->findText(key);
  if (i < 0) return false;
  m_xBox->setCurrentIndex(i);
  fillCurves();
  return true;
}

void SweepView::setTarget(double value) {
  m_target->setText(QString::number(value, 'g', 17));
  fillTrialTargets();
}

QString SweepView::bestConfig() const {
  if (m_result.points.empty() || !m_result.points.front().mean) return {};
  const std::int64_t point = m_result.points.front().point;
  const bool max = m_result.plan.goal == "max";
  const api::SweepTrialResult* best = nullptr;
  for (const auto& t : m_result.trials)
    if (t.trial.point == point && t.best &&
        (!best || (max ? *t.best > *best->best : *t.best < *best->best)))
      best = &t;
  return best ? QString::fromStdString(best->config) : QString();
}

void SweepView::fillCurves() {
  QCustomPlot* plot = m_curvePlot;
  plot->clearGraphs();
  const QString xKey = m_xBox->currentText();
  m_curves = xKey.isEmpty() ? std::vector<SweepCurve>{} : sweepCurves(m_result, xKey);
  double lo = 0;
  double hi = 0;
  bool first = true;
  for (std::size_t i = 0; i < m_curves.size(); ++i) {
    const SweepCurve& c = m_curves[i];
    // A group's stopped points in its finished line's colour (else the next one of their own).
    int colorIndex = static_cast<int>(i);
    if (c.stopped)
      for (std::size_t j = 0; j < i; ++j)
        if (!m_curves[j].stopped && m_curves[j].name == c.name) colorIndex = static_cast<int>(j);
    const QColor color = runColor(colorIndex);
    QVector<double> x(c.x.begin(), c.x.end());
    QCPGraph* line = plot->addGraph();
    if (c.stopped) {
      line->setName(c.name + tr(" (stopped early)"));  // its value at the rung it stopped at
      line->setLineStyle(QCPGraph::lsNone);
      line->setPen(QPen(color, 1.5));
      line->setScatterStyle(
          QCPScatterStyle(QCPScatterStyle::ssCircle, QPen(color, 1.5), Qt::NoBrush, 8));
      line->setData(x, QVector<double>(c.mean.begin(), c.mean.end()), true);
      for (double v : c.x) {
        lo = first ? v : std::min(lo, v);
        hi = first ? v : std::max(hi, v);
        first = false;
      }
      continue;
    }
    line->setName(c.name);
    line->setPen(QPen(color, 2));
    line->setScatterStyle(QCPScatterStyle(QCPScatterStyle::ssCircle, 6));
    line->setData(x, QVector<double>(c.mean.begin(), c.mean.end()), true);
    QCPGraph* low = plot->addGraph();
    low->setName(c.name + tr(" (lowest seed)"));
    low->setPen(Qt::NoPen);
    low->setData(x, QVector<double>(c.low.begin(), c.low.end()), true);
    low->removeFromLegend();
    QCPGraph* high = plot->addGraph();
    high->setName(c.name + tr(" (highest seed)"));
    high->setPen(Qt::NoPen);
    QColor band = color;
    band.setAlpha(50);
    high->setBrush(band);
    high->setChannelFillGraph(low);
    high->setData(x, QVector<double>(c.high.begin(), c.high.end()), true);
    high->removeFromLegend();
    for (double v : c.x) {
      lo = first ? v : std::min(lo, v);
      hi = first ? v : std::max(hi, v);
      first = false;
    }
  }
  const bool logX = !first && lo > 0 && hi / lo >= 10;
  plot->xAxis->setScaleType(logX ? QCPAxis::stLogarithmic : QCPAxis::stLinear);
  const int tickCount = plot->xAxis->ticker()->tickCount();  // fitted to the width
  if (logX) {
    plot->xAxis->setTicker(QSharedPointer<LogTicker>(new LogTicker));
  } else {
    plot->xAxis->setTicker(QSharedPointer<QCPAxisTicker>(new QCPAxisTicker));
  }
  plot->xAxis->ticker()->setTickCount(tickCount);
  plot->xAxis->setLabel(xKey);
  plot->yAxis->setLabel(tr("best %1").arg(QString::fromStdString(m_result.plan.metric)));
  plot->rescaleAxes();
  if (!first) {
    // Some room around the points (a factor on a log axis).
    if (logX) {
      plot->xAxis->setRange(lo / 1.5, hi * 1.5);
    } else {
      const double pad = hi > lo ? (hi - lo) * 0.08 : std::max(std::abs(lo) * 0.1, 1e-3);
      plot->xAxis->setRange(lo - pad, hi + pad);
    }
    plot->yAxis->scaleRange(1.15, plot->yAxis->range().center());
  }
  plot->legend->setVisible(!m_curves.empty());
  placeLegend();
  plot->replot();
}

void SweepView::placeLegend() {
  // The legend goes to the corner where it covers the fewest points: at the top right
  // (QCustomPlot's place) it covered the best point of a maximised metric, which rises there.
  // Laid out once to know the legend's size and the points' pixels.
  QCustomPlot* plot = m_curvePlot;
  if (!plot->legend->visible()) return;
  QCPLayoutInset* inset = plot->axisRect()->insetLayout();
  inset->setInsetAlignment(0, Qt::AlignTop | Qt::AlignRight);
  plot->replot(QCustomPlot::rpImmediateRefresh);
  const QRect area = plot->axisRect()->rect();
  const QRect legend = plot->legend->outerRect();
  std::vector<double> px, py;
  for (const auto& c : m_curves)
    for (std::size_t i = 0; i < c.x.size(); ++i) {
      for (const double v : {c.mean[i], c.low[i], c.high[i]}) {
        px.push_back(plot->xAxis->coordToPixel(c.x[i]) - area.left());
        py.push_back(plot->yAxis->coordToPixel(v) - area.top());
      }
      // The line between two points too (a corner free of points could still hide a line
      // crossing it: the Muon line behind the legend once stopped AdamW points filled the
      // other corner): points along it every few pixels.
      if (c.stopped || i + 1 == c.x.size()) continue;
      const double x0 = plot->xAxis->coordToPixel(c.x[i]),
                   x1 = plot->xAxis->coordToPixel(c.x[i + 1]);
      const double y0 = plot->yAxis->coordToPixel(c.mean[i]);
      const double y1 = plot->yAxis->coordToPixel(c.mean[i + 1]);
      const int steps = std::clamp(static_cast<int>(std::hypot(x1 - x0, y1 - y0) / 8), 1, 200);
      for (int k = 1; k < steps; ++k) {
        const double t = static_cast<double>(k) / steps;
        px.push_back(x0 + t * (x1 - x0) - area.left());
        py.push_back(y0 + t * (y1 - y0) - area.top());
      }
    }
  // The legend's size with the inset layout's margin from the plot's edge.
  const double w = legend.width() + (area.right() - legend.right());
  const double h = legend.height() + (legend.top() - area.top());
  static const Qt::Alignment kCorners[] = {
      Qt::AlignTop | Qt::AlignRight, Qt::AlignTop | Qt::AlignLeft, Qt::AlignBottom | Qt::AlignRight,
      Qt::AlignBottom | Qt::AlignLeft};
  inset->setInsetAlignment(
      0, kCorners[legend_corner(area.width(), area.height(), w, h, px, py, /*margin=*/6)]);
}

void SweepView::fillTables() {
  m_points->clear();
  m_points->setColumnCount(6);
  m_points->setHorizontalHeaderLabels(
      {tr("point"), tr("mean ± sd"), tr("finished"), tr("stopped"), tr("runs"), tr("values")});
  m_points->setRowCount(static_cast<int>(m_result.points.size()));
  for (int r = 0; r < m_points->rowCount(); ++r) {
    const auto& p = m_result.points[static_cast<std::size_t>(r)];
    QString stat = p.mean ? number(*p.mean) : QStringLiteral("-");
    if (p.mean && p.stddev) stat += QStringLiteral(" ± ") + QString::number(*p.stddev, 'g', 3);
    std::vector<std::int64_t> ids = p.run_ids;  // in trial order; listed in id order
    std::sort(ids.begin(), ids.end());
    QStringList runs;
    for (auto id : ids)
      runs << QString::number(id);
    m_points->setItem(r, 0, cell(QStringLiteral("p%1").arg(p.point)));
    m_points->setItem(r, 1, cell(stat));
    m_points->setItem(r, 2, cell(QStringLiteral("%1/%2").arg(p.finished).arg(p.runs)));
    m_points->setItem(
        r, 3,
        cell(p.stopped ? tr("at %1%2")
                             .arg(*p.stopped)
                             .arg(p.stopped_value ? QStringLiteral(" (") +
                                                        number(*p.stopped_value) + QLatin1Char(')')
                                                  : QString())
                       : QString()));
    m_points->setItem(r, 4, cell(runs.join(QStringLiteral(", "))));
    m_points->setItem(r, 5, cell(QString::fromStdString(p.values)));
  }
  m_points->resizeColumnsToContents();

  m_trials->clear();
  m_trials->setColumnCount(9);
  m_trials->setHorizontalHeaderLabels({tr("trial"), tr("point"), tr("seed"), tr("status"),
                                       tr("best"), tr("steps"), tr("steps to target"),
                                       tr("time to target (s)"), tr("run")});
  m_trials->setRowCount(static_cast<int>(m_result.trials.size()));
  for (int r = 0; r < m_trials->rowCount(); ++r) {
    const auto& t = m_result.trials[static_cast<std::size_t>(r)];
    QString status = QString::fromStdString(t.status.empty() ? "not started" : t.status);
    if (t.stopped) status = tr("stopped at %1").arg(*t.stopped);
    m_trials->setItem(r, 0, cell(QString::number(t.trial.index)));
    m_trials->setItem(r, 1, cell(QStringLiteral("p%1").arg(t.trial.point)));
    m_trials->setItem(r, 2, cell(QString::number(t.trial.seed)));
    m_trials->setItem(r, 3, cell(status));
    m_trials->setItem(r, 4, cell(t.best ? number(*t.best) : QString()));
    m_trials->setItem(r, 5, cell(t.steps ? QString::number(*t.steps) : QString()));
    m_trials->setItem(r, 8, cell(t.run ? QString::number(*t.run) : QString()));
  }
  fillTrialTargets();
}

void SweepView::fillTrialTargets() {
  bool ok = false;
  const double target = m_target->text().toDouble(&ok);
  const bool max = m_result.plan.goal == "max";
  for (int r = 0; r < m_trials->rowCount() && r < static_cast<int>(m_result.trials.size()); ++r) {
    const auto& t = m_result.trials[static_cast<std::size_t>(r)];
    QString steps, seconds;
    if (ok && t.run && m_store) {
      try {
        const api::Series s = m_store->series(*t.run, m_result.plan.metric);
        // As Compare says it; a trial with no value of the metric yet stays blank.
        if (!s.value.empty()) steps = tr("not reached");
        for (std::size_t i = 0; i < s.value.size(); ++i)
          if (reaches(s.value[i], target, max)) {
            steps = QString::number(static_cast<qint64>(s.step[i]));
            // From the trial's start, less its waits at the rungs (the time its run spent
            // ended before a resume), as Compare counts it. Three significant digits: a short
            // trial reaches it in hundredths of a second, which one decimal showed as "0.0".
            seconds =
                QString::number(m_store->trained_seconds(*t.run, s.origin + s.wall_s[i]), 'g', 3);
            break;
          }
      } catch (const std::exception&) {  // deleted meanwhile: left blank
      }
    }
    m_trials->setItem(r, 6, cell(steps));
    m_trials->setItem(r, 7, cell(seconds));
  }
  m_trials->resizeColumnsToContents();
}

}  // namespace tb::ui
