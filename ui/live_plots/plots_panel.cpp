#include "ui/live_plots/plots_panel.h"
#include "engine/api/metrics.h"

#include <QCheckBox>
#include <QComboBox>
#include <QGridLayout>
#include <QLabel>
#include <QPalette>
#include <QPushButton>
#include <QSlider>
#include <QThread>
#include <QVBoxLayout>

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <optional>

#include <qcustomplot.h>

#include "ui/common/flow_layout.h"
#include "ui/common/legend_fit.h"
#include "ui/live_plots/metric_plot.h"

namespace tb::ui {

namespace {

const char* const kNsKey = api::metric::kNewtonSchulzMs;
const char* const kOptKey = api::metric::kOptimizerMs;

QString curveId(qint64 runId, const MetricRoute& r, const QString& key) {
  return QStringLiteral("%1/%2/%3")
      .arg(runId, 8, 10, QLatin1Char('0'))
      .arg(r.order, 2, 10, QLatin1Char('0'))
      .arg(key);
}

}  // namespace

QList<qint64> inRunOrder(QList<qint64> ids) {
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  return ids;
}

QColor runColor(int index) {
  static const QColor colors[] = {
      QColor(31, 119, 180),  QColor(255, 127, 14), QColor(44, 160, 44),   QColor(214, 39, 40),
      QColor(148, 103, 189), QColor(140, 86, 75),  QColor(227, 119, 194), QColor(127, 127, 127),
      QColor(188, 189, 34),  QColor(23, 190, 207)};
  const int n = static_cast<int>(sizeof(colors) / sizeof(colors[0]));
  return colors[((index % n) + n) % n];
}

MetricRoute routeMetric(const QString& key) {
  MetricRoute r;
  auto evalVariant = [&](const QString& metric, int plot) {
    if (key == QLatin1String(api::metric::kEvalPrefix) + metric) {
      r = {plot, 1, QStringLiteral("eval ") + metric, Qt::DashLine, true};
      return true;
    }
    for (const char* avg : {"swa", "ema"}) {
      if (key == QStringLiteral("eval_%1.%2").arg(QLatin1String(avg), metric)) {
        r = {plot, 2,
             QStringLiteral("eval %1 (%2)").arg(metric, QString::fromLatin1(avg).toUpper()),
             Qt::DotLine, true};
        return true;
      }
    }
    return false;
  };
  if (key == QLatin1String(api::metric::kLoss))
    return {PlotsPanel::Loss, 0, QStringLiteral("train loss")};
  if (evalVariant(QLatin1String(api::metric::kLoss), PlotsPanel::Loss)) return r;
  if (evalVariant(QStringLiteral("accuracy"), PlotsPanel::EvalMetric)) return r;
  if (evalVariant(QStringLiteral("perplexity"), PlotsPanel::EvalMetric)) return r;
  if (key.startsWith(QLatin1String(api::metric::kLrPrefix))) {
    const Qt::PenStyle styles[] = {Qt::SolidLine, Qt::DashLine, Qt::DotLine, Qt::DashDotLine};
    const int g = key.section(QLatin1Char('.'), 2).toInt();
    const bool muon = key.startsWith(QLatin1String("lr.muon"));
    // "lr.adamw.0" is "AdamW LR", another group of it "AdamW LR (group 1)": the optimizer's
    // name as people write it, not the metric key.
    static const std::map<QString, QString> kNames = {
        {QStringLiteral("adamw"), QStringLiteral("AdamW")},
        {QStringLiteral("adam"), QStringLiteral("Adam")},
        {QStringLiteral("muon"), QStringLiteral("Muon")},
        {QStringLiteral("sgd"), QStringLiteral("SGD")}};
    const QString optimizer = key.section(QLatin1Char('.'), 1, 1);
    const QString group = key.section(QLatin1Char('.'), 2);
    const auto name = kNames.find(optimizer);
    QString label = (name != kNames.end() ? name->second : optimizer) + QStringLiteral(" LR");
    if (!group.isEmpty() && group != QLatin1String("0"))
      label += QStringLiteral(" (group %1)").arg(group);
    return {PlotsPanel::LearningRate, muon ? 0 : 1, label, styles[(muon ? 0 : 1 + g) % 4]};
  }
  if (key == QLatin1String(api::metric::kDataMs))
    return {PlotsPanel::StepTime, 0, QStringLiteral("data"), Qt::DotLine};
  if (key == QLatin1String(api::metric::kForwardMs))
    return {PlotsPanel::StepTime, 1, QStringLiteral("forward"), Qt::DashLine};
  if (key == QLatin1String(api::metric::kBackwardMs))
    return {PlotsPanel::StepTime, 2, QStringLiteral("backward"), Qt::DashDotLine};
  if (key == QLatin1String(kOptKey))
    return {PlotsPanel::StepTime, 3, QStringLiteral("optimizer"), Qt::SolidLine};
  if (key == QLatin1String(kNsKey))
    return {PlotsPanel::StepTime, 4, QStringLiteral("Newton–Schulz"), Qt::DashDotDotLine};
  if (key == QLatin1String(api::metric::kCommMs))  // data-parallel: the gradient exchange
    return {PlotsPanel::StepTime, 5, QStringLiteral("communication"), Qt::DotLine};
  if (key == QLatin1String(api::metric::kSamplesPerS))
    return {PlotsPanel::Throughput, 0, QStringLiteral("samples/s")};
  if (key == QLatin1String(api::metric::kTokensPerS))
    return {PlotsPanel::Throughput, 1, QStringLiteral("tokens/s"), Qt::DashLine};
  if (key == QLatin1String(api::metric::kGradNorm))
    return {PlotsPanel::GradNorm, 0, QStringLiteral("grad norm")};
  if (key == QLatin1String(api::metric::kLossScale))
    return {PlotsPanel::LossScale, 0, QStringLiteral("loss scale")};
  return r;
}

PlotsPanel::PlotsPanel(QWidget* parent) : QWidget(parent) {
  auto* outer = new QVBoxLayout(this);
  outer->setContentsMargins(4, 4, 4, 4);
  // The controls wrap onto a second row where the panel is narrow (the Compare tab beside its
  // summary) rather than widening the page past its tab.
  auto* controls = new FlowLayout;
  m_controls = controls;
  m_xAxis = new QComboBox(this);
  m_xAxis->addItems({tr("step"), tr("wall time")});
  m_xAxis->setObjectName(QStringLiteral("xAxisCombo"));
  controls->addWidget(labelled(tr("x axis:"), m_xAxis, this));
  m_logY = new QCheckBox(tr("log y"), this);
  m_logY->setObjectName(QStringLiteral("logYCheck"));
  controls->addWidget(m_logY);
  m_linkX = new QCheckBox(tr("link x axes"), this);
  m_linkX->setObjectName(QStringLiteral("linkXCheck"));
  m_linkX->setToolTip(tr("One x range for every plot: zoom or pan one and the others follow"));
  m_linkX->setChecked(true);
  controls->addWidget(m_linkX);
  m_smoothing = new QSlider(Qt::Horizontal, this);
  m_smoothing->setObjectName(QStringLiteral("smoothingSlider"));
  m_smoothing->setRange(0, 99);
  m_smoothing->setValue(60);
  m_smoothing->setMinimumWidth(80);
  m_smoothing->setMaximumWidth(180);
  m_smoothing->setToolTip(tr("Debiased EMA weight, computed on the full raw series"));
  QWidget* smoothing = labelled(tr("smoothing:"), m_smoothing, this);
  m_smoothingLabel = new QLabel(QStringLiteral("0.60"), smoothing);
  smoothing->layout()->addWidget(m_smoothingLabel);
  controls->addWidget(smoothing);
  auto* reset = new QPushButton(tr("Reset view"), this);
  reset->setToolTip(tr("Show all data (also: double-click a plot)"));
  controls->addWidget(reset);
  // Which run the plots show (the Live tab follows the newest or selected run; nothing else on
  // the tab says which): its id and name in its colour, or how many runs.
  m_runsLabel = new QLabel(this);
  m_runsLabel->setObjectName(QStringLiteral("shownRunsLabel"));
  m_runsLabel->setTextFormat(Qt::PlainText);
  m_runsLabel->setText(tr("no run"));
  m_runsLabel->setMinimumWidth(60);  // a long run name is cut, never widens the page
  controls->addWidget(m_runsLabel);
  outer->addLayout(controls);
  m_runKey = new QLabel(this);
  m_runKey->setObjectName(QStringLiteral("runKey"));
  m_runKey->setTextFormat(Qt::RichText);
  m_runKey->setWordWrap(true);
  m_runKey->setVisible(false);
  outer->addWidget(m_runKey);

  auto* grid = new QGridLayout;
  grid->setSpacing(4);
  const QList<QPair<QString, QString>> specs = {{tr("Loss"), tr("loss")},
                                                {tr("Eval accuracy / perplexity"), tr("value")},
                                                {tr("Learning rate"), tr("lr")},
                                                {tr("Step time"), tr("ms")},
                                                {tr("Throughput"), tr("per second")},
                                                {tr("Gradient norm"), tr("norm")},
                                                {tr("Loss scale"), tr("scale")}};
  for (int i = 0; i < specs.size(); ++i) {
    auto* p = new MetricPlot(specs[i].first, specs[i].second, this);
    p->setObjectName(QStringLiteral("plot%1").arg(i));
    m_plots.append(p);
    grid->addWidget(p, i / 2, i % 2);
  }
  // Step times are heavy-tailed: the first step (kernel compilation, first allocations) can
  // take 20x the rest, which would squash every other step into the bottom pixels.
  m_plots[StepTime]->setRobustYRange(true);
  // Several runs: their step times as one stacked bar each (the mean per phase) in the step-time
  // plot's place — one line per phase and run overlaid is a tangle.
  m_stepBars = new QCustomPlot(this);
  m_stepBars->setObjectName(QStringLiteral("stepTimeBars"));
  m_stepBars->setMinimumSize(200, 160);
  m_stepBars->plotLayout()->insertRow(0);
  m_stepBars->plotLayout()->addElement(
      0, 0,
      new QCPTextElement(m_stepBars, tr("Mean step time per run"),
                         QFont(font().family(), font().pointSize(), QFont::Bold)));
  m_stepBars->yAxis->setLabel(tr("ms"));
  m_stepBars->legend->setVisible(true);
  m_stepBars->legend->setFont(QFont(font().family(), std::max(7, font().pointSize() - 1)));
  // The legend in a row of its own under the axes, so that it covers no bar.
  m_stepBars->axisRect()->insetLayout()->take(m_stepBars->legend);
  m_stepBars->plotLayout()->addElement(2, 0, m_stepBars->legend);
  m_stepBars->plotLayout()->setRowStretchFactor(2, 0.001);
  m_stepBars->legend->setFillOrder(QCPLayoutGrid::foColumnsFirst);
  m_stepBars->legend->setWrap(3);
  m_stepBars->legend->setBorderPen(Qt::NoPen);
  m_stepBars->installEventFilter(this);  // its legend's columns follow its width
  // About one y label per 30 px of axis (QCustomPlot's default stacked eight labels, 0 to 0.07,
  // into 50 px); the count changed by a layout is drawn by the next replot.
  connect(m_stepBars, &QCustomPlot::afterLayout, this, [this] {
    const int h = m_stepBars->axisRect()->height();
    const int n = std::clamp(h / 30, 2, 5);
    if (h <= 0 || m_stepBars->yAxis->ticker()->tickCount() == n) return;
    m_stepBars->yAxis->ticker()->setTickCount(n);
    m_stepBars->replot(QCustomPlot::rpQueuedReplot);
  });
  m_stepBars->hide();
  grid->addWidget(m_stepBars, StepTime / 2, StepTime % 2);
  outer->addLayout(grid, 1);

  connect(m_xAxis, QOverload<int>::of(&QComboBox::currentIndexChanged), this,
          [this](int i) { setWallTime(i == 1); });
  connect(m_logY, &QCheckBox::toggled, this, [this](bool on) { setLogY(on); });
  connect(m_linkX, &QCheckBox::toggled, this, [this](bool on) { setLinkedX(on); });
  m_liveTick.setSingleShot(true);
  connect(&m_liveTick, &QTimer::timeout, this, [this] {
    for (auto* p : m_plots)
      if (p->livePending()) p->replotNow();
  });
  connect(m_smoothing, &QSlider::valueChanged, this, [this](int v) {
    m_smoothingLabel->setText(QString::number(v / 100.0, 'f', 2));
    for (auto* p : m_plots)
      if (p != m_plots[LearningRate]) p->setSmoothing(v / 100.0);
  });
  connect(reset, &QPushButton::clicked, this, [this] {
    for (auto* p : m_plots)
      p->resetView();
  });
  for (auto* p : m_plots) {
    // The learning rate is a schedule, not a noisy measurement: smoothed, its peak would read
    // lower and later than it is (a one-cycle's max_lr), so it is drawn as logged.
    p->setSmoothing(p == m_plots[LearningRate] ? 0.0 : 0.6);
    connect(p, &MetricPlot::userXRangeChanged, this, [this, p](const XRange& range) {
      if (!linkedX()) return;
      for (auto* other : m_plots)
        if (other != p) other->followXRange(range);
    });
    connect(p, &MetricPlot::viewResetByUser, this, [this, p] {
      if (!linkedX()) return;
      for (auto* other : m_plots)
        if (other != p) other->resetView();
    });
    p->setLivePaced(linkedX());
  }
  m_plots[EvalMetric]->setEmptyText(tr("no evaluation yet"));
  updateVisibility();
}

bool PlotsPanel::linkedX() const {
  return m_linkX->isChecked();
}

void PlotsPanel::setLinkedX(bool linked) {
  if (m_linkX->isChecked() != linked) m_linkX->setChecked(linked);  // toggled() calls back
  for (auto* p : m_plots)
    p->setLivePaced(linked);
  if (!linked) m_liveTick.stop();
  syncLinkedX();
}

void PlotsPanel::startLiveTick() {
  if (!linkedX() || m_liveTick.isActive()) return;
  static const int cpus = std::max(QThread::idealThreadCount(), 1);
  int interval = 0;
  bool pending = false;
  for (auto* p : m_plots) {
    pending |= p->livePending();
    // Every plot's interval, shown or not: a hidden tab's plots (each redraw then only marks
    // them stale) must not tick at the 100 ms floor.
    interval = std::max(interval, MetricPlot::liveRedrawIntervalMs(p->lastRedrawMs(), cpus));
  }
  if (pending) m_liveTick.start(std::max(interval, MetricPlot::kMinLiveIntervalMs));
}

void PlotsPanel::syncLinkedX(bool liveData) {
  const auto why = liveData ? MetricPlot::Redraw::LiveData : MetricPlot::Redraw::Soon;
  std::optional<XRange> all;
  if (linkedX()) {
    for (auto* p : m_plots) {
      const auto r = p->dataXRange();
      if (!r) continue;
      all = all ? XRange{std::min(all->lower, r->lower), std::max(all->upper, r->upper)} : *r;
    }
  }
  for (auto* p : m_plots)
    p->setLinkedXRange(all, why);
  if (liveData) startLiveTick();
}

void PlotsPanel::clearRuns() {
  m_runs.clear();
  for (auto* p : m_plots)
    p->clear();
  placeLrCurves(QString());  // no curves: one axis, labelled "lr" again
  syncLinkedX();
  updateStackedMode();
  updateVisibility();
  updateRunsLabel();
  updateRunKey();
}

void PlotsPanel::addRun(qint64 runId, const QString& name, const QColor& color) {
  RunState& s = m_runs[runId];
  s.name = name;
  s.color = color;
  s.index = static_cast<int>(m_runs.size()) - 1;
  updateStackedMode();
  updateRunsLabel();
  updateRunKey();
}

QString PlotsPanel::shownRunsText() const {
  return m_runsLabel->text();
}

void PlotsPanel::updateRunsLabel() {
  QPalette palette = m_runsLabel->palette();
  palette.setColor(QPalette::WindowText, this->palette().color(QPalette::WindowText));
  if (m_runs.empty()) {
    m_runsLabel->setText(tr("no run"));
  } else if (m_runs.size() == 1) {
    const RunState& s = m_runs.begin()->second;
    m_runsLabel->setText(tr("run %1").arg(s.name));  // the callers' names start with the id
    palette.setColor(QPalette::WindowText, s.color.darker(115));
  } else {
    m_runsLabel->setText(tr("%n runs", nullptr, static_cast<int>(m_runs.size())));
  }
  m_runsLabel->setPalette(palette);
  m_runsLabel->setToolTip(m_runsLabel->text());  // whole where a long name is cut
  refitControls();                               // a longer label may wrap the controls
}

void PlotsPanel::setRunKey(bool on) {
  m_runKeyOn = on;
  updateRunKey();
}

QString PlotsPanel::runKeyText() const {
  return m_runKey->isHidden() ? QString() : m_runKey->toolTip();
}

void PlotsPanel::updateRunKey() {
  const bool key = m_runKeyOn && static_cast<int>(m_runs.size()) >= kKeyRuns;
  for (MetricPlot* p : m_plots)
    p->setLegendShown(!key);
  m_runKey->setVisible(key);
  if (!key) {
    m_runKey->clear();
    m_runKey->setToolTip(QString());
    return;
  }
  // Each run as its colour's square and "#id name" (long names cut, whole in the tooltip); how
  // to tell a plot's series apart, which the legends said, after them.
  QStringList items, plain;
  for (const auto& [id, s] : m_runs) {
    QString name = s.name;
    if (name.size() > 32) name = name.left(31) + QChar(0x2026);
    items << QStringLiteral("<span style=\"color:%1\">&#9632;</span>&nbsp;%2")
                 .arg(s.color.name(),
                      name.toHtmlEscaped().replace(QLatin1Char(' '), QStringLiteral("&nbsp;")));
    plain << s.name;
  }
  m_runKey->setText(items.join(QStringLiteral(" &nbsp; ")) +
                    tr(" &nbsp; <i>(solid: train or Muon; dashed: eval or the other optimizer; "
                       "hover a curve for its values)</i>"));
  m_runKey->setToolTip(plain.join(QStringLiteral(", ")));
}

QList<qint64> PlotsPanel::runIds() const {
  QList<qint64> ids;
  for (const auto& [id, s] : m_runs)
    ids.append(id);
  return ids;
}

void PlotsPanel::updateStackedMode() {
  // One run: the step time is a stacked breakdown; several: one line per phase and run.
  m_plots[StepTime]->setStacked(m_runs.size() <= 1);
}

void PlotsPanel::appendPoints(qint64 runId, const QString& key, const std::vector<double>& step,
                              const std::vector<double>& wall, const std::vector<double>& value) {
  auto it = m_runs.find(runId);
  if (it == m_runs.end() || step.empty()) return;
  const MetricRoute r = routeMetric(key);
  if (r.plot < 0) return;
  RunState& s = it->second;
  MetricPlot* p = m_plots[r.plot];
  const QString id = curveId(runId, r, key);
  QString label = r.label;
  if (m_runs.size() > 1) label = QStringLiteral("#%1 ").arg(runId) + r.label;  // colour = run
  QColor color = s.color;
  if (r.plot == StepTime && m_runs.size() <= 1) color = runColor(r.order);  // phases, one run
  bool right = false;
  if (r.plot == LearningRate) {
    const bool muon = placeLrCurves(key);
    right = muon && !key.startsWith(QLatin1String("lr.muon"));
    if (right) label += tr(" (right)");
  }
  if (r.plot == EvalMetric) {
    right = placeEvalCurves(key);
    if (right) label += tr(" (right)");
  }
  // A language model logs tokens/s beside samples/s, context-length times larger: on one axis
  // the samples/s read as a flat line at zero. Tokens/s get the right-hand axis.
  if (r.plot == Throughput && key == QLatin1String(api::metric::kTokensPerS)) {
    right = true;
    label += tr(" (right)");
    p->setYAxisLabels(tr("samples/s"), tr("tokens/s"));
  }
  p->ensureCurve(id, label, color, r.style, r.points, right);
  p->append(id, step, wall, value);
  s.lastStep[key] = step.back();
  s.lastWall[key] = wall.back();
  if (!p->isVisible() && !isHidden()) updateVisibility();
}

void PlotsPanel::moveCurves(MetricPlot* p, const std::function<bool(const QString&)>& onRight) {
  const QString suffix = tr(" (right)");
  struct Move {
    QString id, label;
    QColor color;
    Qt::PenStyle style;
    bool points, right;
  };
  std::vector<Move> moves;  // collected first: ensureCurve rebuilds the graphs
  for (const auto& [id, c] : p->curves()) {
    const bool right = onRight(id.section(QLatin1Char('/'), 2));
    if (right == c.right) continue;
    QString label = c.label;
    if (right)
      label += suffix;
    else if (label.endsWith(suffix))
      label.chop(suffix.size());
    moves.push_back({id, label, c.color, c.style, c.points, right});
  }
  for (const auto& m : moves)
    p->ensureCurve(m.id, m.label, m.color, m.style, m.points, m.right);
}

bool PlotsPanel::placeEvalCurves(const QString& key) {
  // A classifier's accuracy (0..1) beside a language model's perplexity (tens or more): on one
  // axis the accuracies read as a line at zero. With both in the plot, perplexity curves get the
  // right-hand axis; alone, either kind keeps the left one.
  MetricPlot* p = m_plots[EvalMetric];
  auto keyOf = [](const QString& id) { return id.section(QLatin1Char('/'), 2); };
  auto perplexity = [](const QString& k) { return k.endsWith(QLatin1String(".perplexity")); };
  bool anyAccuracy = !perplexity(key), anyPerplexity = perplexity(key);
  for (const auto& [id, c] : p->curves()) {
    anyAccuracy |= !perplexity(keyOf(id));
    anyPerplexity |= perplexity(keyOf(id));
  }
  const bool split = anyAccuracy && anyPerplexity;
  moveCurves(p, [&](const QString& k) { return split && perplexity(k); });
  p->setYAxisLabels(split || !anyPerplexity ? tr("accuracy") : tr("perplexity"), tr("perplexity"));
  return split && perplexity(key);
}

bool PlotsPanel::placeLrCurves(const QString& key) {
  // Muon's LR (0.02) is ~100x AdamW's (3e-4): on one linear axis AdamW's reads as a flat line
  // at zero. With a Muon curve in the plot, every other optimizer's LR curve (AdamW's, or
  // another run's Adam or SGD) gets the right-hand axis.
  MetricPlot* p = m_plots[LearningRate];
  auto keyOf = [](const QString& id) { return id.section(QLatin1Char('/'), 2); };
  const QLatin1String muonPrefix("lr.muon");
  bool muon = key.startsWith(muonPrefix);
  for (const auto& [id, c] : p->curves())
    muon |= keyOf(id).startsWith(muonPrefix);
  bool onlyAdamw = !key.startsWith(muonPrefix) && !key.isEmpty()
                       ? key.startsWith(QLatin1String("lr.adamw"))
                       : true;
  moveCurves(p, [&](const QString& k) {
    const bool right = muon && !k.startsWith(muonPrefix);
    if (right) onlyAdamw &= k.startsWith(QLatin1String("lr.adamw"));
    return right;
  });
  p->setYAxisLabels(muon ? tr("Muon lr") : tr("lr"),
                    onlyAdamw ? tr("AdamW lr") : tr("lr (other optimizers)"));
  return muon;
}

void PlotsPanel::appendSteps(qint64 runId, const std::vector<api::StepMetrics>& steps) {
  if (!m_runs.count(runId) || steps.empty()) return;
  // Columns per key over this batch.
  std::map<QString, std::vector<double>> xs, ws, vs;
  for (const auto& m : steps) {
    double ns = std::nan("");
    for (const auto& [k, v] : m.values)
      if (k == kNsKey) ns = v;
    for (const auto& [k, v] : m.values) {
      const QString key = QString::fromStdString(k);
      double value = v;
      if (k == kOptKey && std::isfinite(ns)) value = v - ns;  // the NS share is its own band
      xs[key].push_back(static_cast<double>(m.step));
      ws[key].push_back(m.wall_s);
      vs[key].push_back(value);
    }
  }
  for (auto& [key, x] : xs)
    appendPoints(runId, key, x, ws[key], vs[key]);
  // The shared x range grows with every batch: a live redraw, within each plot's budget (a
  // Redraw::Soon here redrew every plot at the 20 Hz of the batches).
  syncLinkedX(/*liveData=*/true);
}

void PlotsPanel::loadFromStore(const api::StoreReader& store, qint64 runId) {
  auto it = m_runs.find(runId);
  if (it == m_runs.end()) return;
  const auto keys = store.metric_keys(runId);
  std::map<double, double> ns;
  bool haveNs = false;
  for (const auto& k : keys) {
    if (k != kNsKey) continue;
    haveNs = true;
  }
  for (const auto& k : keys) {
    const QString key = QString::fromStdString(k);
    if (routeMetric(key).plot < 0) continue;
    const auto last = it->second.lastStep.find(key);
    const std::int64_t from =
        last == it->second.lastStep.end() ? 0 : static_cast<std::int64_t>(last->second) + 1;
    api::Series s = store.series(runId, k, from);
    if (s.step.empty()) continue;
    if (k == kOptKey && haveNs) {
      const api::Series n = store.series(runId, kNsKey, from);
      for (std::size_t i = 0; i < n.step.size(); ++i)
        ns[n.step[i]] = n.value[i];
      for (std::size_t i = 0; i < s.step.size(); ++i) {
        auto f = ns.find(s.step[i]);
        if (f != ns.end()) s.value[i] -= f->second;
      }
    }
    appendPoints(runId, key, s.step, s.wall_s, s.value);
  }
  syncLinkedX(/*liveData=*/true);
}

bool PlotsPanel::rewoundInStore(const api::StoreReader& store, qint64 runId) const {
  const auto it = m_runs.find(runId);
  if (it == m_runs.end()) return false;
  // Points are replaced or added, never removed, except by a rewind, which removes every metric's
  // steps after one step: the metric plotted furthest loses its newest point whenever any metric
  // loses one, so one read (from that point on) tells. If the resumed run has logged that step
  // again by now, the point is there with another wall time.
  const auto& last = it->second.lastStep;
  const auto furthest = std::max_element(
      last.begin(), last.end(), [](const auto& a, const auto& b) { return a.second < b.second; });
  if (furthest == last.end()) return false;
  const auto step = static_cast<std::int64_t>(furthest->second);
  const api::Series s = store.series(runId, furthest->first.toStdString(), step);
  if (s.step.empty() || static_cast<std::int64_t>(s.step.front()) != step) return true;
  const auto wall = it->second.lastWall.find(furthest->first);
  return wall != it->second.lastWall.end() && std::abs(s.wall_s.front() - wall->second) > 1e-6;
}

void PlotsPanel::reloadFromStore(const api::StoreReader& store) {
  std::vector<std::pair<int, std::pair<qint64, RunState>>> shown;
  for (const auto& [id, s] : m_runs)
    shown.push_back({s.index, {id, s}});
  std::sort(shown.begin(), shown.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  clearRuns();
  for (const auto& [index, run] : shown)
    addRun(run.first, run.second.name, run.second.color);
  for (const auto& [index, run] : shown)
    loadFromStore(store, run.first);
}

void PlotsPanel::replotAll() {
  updateVisibility();
  syncLinkedX();
  for (auto* p : m_plots)
    p->replotNow();
}

void PlotsPanel::updateVisibility() {
  // The loss scale, which only float16 runs have, stays hidden until it has data (it is last:
  // nothing moves when it appears). The eval plot stays in its place, saying what it waits for:
  // hidden, it left a hole beside the loss plot until a run's first evaluation.
  m_plots[LossScale]->setVisible(m_plots[LossScale]->hasData());
  const bool bars = m_runs.size() > 1;
  m_plots[StepTime]->setVisible(!bars);
  m_stepBars->setVisible(bars);
  if (bars) updateStepBars();
}

std::map<qint64, std::vector<std::pair<QString, double>>> PlotsPanel::meanStepPhases() const {
  // The step-time curves' ids are "<run, 8 digits>/<phase order, 2 digits>/<metric key>".
  std::map<qint64, std::map<int, std::pair<QString, double>>> byRun;
  for (const auto& [id, c] : m_plots[StepTime]->curves()) {
    if (c.raw.empty()) continue;
    const qint64 run = id.section(QLatin1Char('/'), 0, 0).toLongLong();
    const int order = id.section(QLatin1Char('/'), 1, 1).toInt();
    const QString key = id.section(QLatin1Char('/'), 2);
    double sum = 0;
    for (double v : c.raw)
      sum += v;
    byRun[run][order] = {routeMetric(key).label, sum / static_cast<double>(c.raw.size())};
  }
  std::map<qint64, std::vector<std::pair<QString, double>>> out;
  for (const auto& [run, phases] : byRun)
    for (const auto& [order, phase] : phases)
      out[run].push_back(phase);
  return out;
}

void PlotsPanel::updateStepBars() {
  m_stepBars->clearPlottables();
  const auto phases = meanStepPhases();
  // One QCPBars per phase, stacked in phase order; x = the run's position.
  std::map<QString, QCPBars*> bars;
  std::vector<QString> order;
  QSharedPointer<QCPAxisTickerText> ticker(new QCPAxisTickerText);
  int x = 0;
  for (const auto& [run, list] : phases) {
    ++x;
    ticker->addTick(x, QStringLiteral("#%1").arg(run));
    for (const auto& [label, ms] : list) {
      QCPBars*& b = bars[label];
      if (!b) {
        b = new QCPBars(m_stepBars->xAxis, m_stepBars->yAxis);
        b->setName(label);
        const QColor colour = runColor(static_cast<int>(order.size()));
        b->setBrush(colour);
        b->setPen(colour.darker(130));
        b->setWidth(0.6);
        if (!order.empty()) b->moveAbove(bars[order.back()]);
        order.push_back(label);
      }
      b->addData(x, ms);
    }
  }
  m_stepBars->xAxis->setTicker(ticker);
  m_stepBars->xAxis->setRange(0.4, x + 0.6);
  m_stepBars->rescaleAxes();
  m_stepBars->xAxis->setRange(0.4, x + 0.6);
  m_stepBars->yAxis->setRangeLower(0);
  m_stepBars->yAxis->setRangeUpper(m_stepBars->yAxis->range().upper * 1.25);
  fitStepLegend();
  m_stepBars->replot();
}

bool PlotsPanel::fitStepLegend() {
  const QMargins m = m_stepBars->legend->margins();
  return fitLegendColumns(m_stepBars->legend, m_stepBars->width() - m.left() - m.right(), 3);
}

int PlotsPanel::controlsExtraHeight(int width) const {
  const QMargins m = layout()->contentsMargins();
  return std::max(0, m_controls->heightForWidth(width - m.left() - m.right()) -
                         m_controls->minimumSize().height());
}

QSize PlotsPanel::minimumSizeHint() const {
  // The extra rows at the last resize (none before the first: a widget's default 100 px width
  // would put every control on a row of its own).
  return QWidget::minimumSizeHint() + QSize(0, m_controlsExtra);
}

void PlotsPanel::resizeEvent(QResizeEvent* event) {
  QWidget::resizeEvent(event);
  refitControls();
}

void PlotsPanel::refitControls() {
  if (!testAttribute(Qt::WA_Resized)) return;  // not laid out yet: its width means nothing
  const int extra = controlsExtraHeight(width());
  if (extra == m_controlsExtra) return;
  m_controlsExtra = extra;
  updateGeometry();  // the controls wrapped or unwrapped: a new least height
}

bool PlotsPanel::eventFilter(QObject* watched, QEvent* event) {
  if (watched == m_stepBars && event->type() == QEvent::Resize && fitStepLegend())
    m_stepBars->replot(QCustomPlot::rpQueuedReplot);
  return QWidget::eventFilter(watched, event);
}

void PlotsPanel::setSmoothing(double weight) {
  m_smoothing->setValue(static_cast<int>(std::lround(weight * 100)));
}

void PlotsPanel::setLogY(bool log) {
  if (m_logY->isChecked() != log) m_logY->setChecked(log);
  for (int i : {Loss, GradNorm, LossScale})
    m_plots[i]->setLogY(log);
}

void PlotsPanel::setWallTime(bool wall) {
  if (m_xAxis->currentIndex() != (wall ? 1 : 0)) m_xAxis->setCurrentIndex(wall ? 1 : 0);
  for (auto* p : m_plots)
    p->setXAxis(wall ? MetricPlot::XAxis::WallTime : MetricPlot::XAxis::Step);
  syncLinkedX();
}

}  // namespace tb::ui
