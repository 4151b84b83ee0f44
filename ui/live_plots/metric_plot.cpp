#include "ui/live_plots/metric_plot.h"

#include <QFile>
#include <QFileDialog>
#include <QMenu>
#include <QMessageBox>
#include <QMouseEvent>
#include <QPainter>
#include <QSvgGenerator>
#include <QTextStream>
#include <QThread>
#include <QToolTip>
#include <QVBoxLayout>

#include <time.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include <qcustomplot.h>

#include "ui/common/legend_fit.h"
#include "ui/common/log_ticker.h"
#include "ui/live_plots/series_math.h"

namespace tb::ui {

namespace {

QVector<double> toQVector(const std::vector<double>& v) {
  return QVector<double>(v.begin(), v.end());
}

QColor faint(QColor c) {
  c.setAlpha(70);
  return c;
}

}  // namespace

MetricPlot::MetricPlot(const QString& title, const QString& yLabel, QWidget* parent)
    : QWidget(parent), m_title(title), m_plot(new QCustomPlot(this)) {
  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(0, 0, 0, 0);
  layout->addWidget(m_plot);
  setMinimumSize(200, kLeastHeight);  // two side by side beside the Compare summary at 1600 px
  m_plot->plotLayout()->insertRow(0);
  m_titleElement =
      new QCPTextElement(m_plot, title, QFont(font().family(), font().pointSize(), QFont::Bold));
  m_plot->plotLayout()->addElement(0, 0, m_titleElement);
  applyPalette();
  m_plot->xAxis->setLabel(tr("step"));
  m_plot->yAxis->setLabel(yLabel);
  m_plot->legend->setVisible(true);
  m_plot->legend->setFont(QFont(font().family(), std::max(7, font().pointSize() - 1)));
  // The legend gets its own row under the axes, filled in columns, so it never hides data.
  auto* legendRow = new QCPLayoutGrid;
  m_legendRow = legendRow;
  m_plot->plotLayout()->addElement(2, 0, legendRow);
  m_plot->plotLayout()->setRowStretchFactor(2, 0.001);
  legendRow->setMargins(QMargins(4, 0, 4, 2));
  m_plot->axisRect()->insetLayout()->take(m_plot->legend);
  // Stretchable spacers around the legend: a grid's column is never wider than its elements'
  // maximum, and a legend's maximum is its own size — without them the plot shrinks to it.
  legendRow->addElement(0, 0, new QCPLayoutElement(m_plot));
  legendRow->addElement(0, 1, m_plot->legend);
  legendRow->addElement(0, 2, new QCPLayoutElement(m_plot));
  legendRow->setColumnStretchFactor(0, 0.01);
  legendRow->setColumnStretchFactor(2, 0.01);
  m_plot->legend->setFillOrder(QCPLayoutGrid::foColumnsFirst);
  m_plot->legend->setWrap(2);
  m_plot->legend->setBorderPen(Qt::NoPen);
  m_plot->legend->setBrush(Qt::NoBrush);
  rebuildGraphs();
  m_plot->setInteractions(QCP::iRangeDrag | QCP::iRangeZoom);
  m_plot->setNoAntialiasingOnDrag(true);
  // Solid curves are drawn segment by segment instead of as one polyline: the raster engine
  // then skips computing a join at every vertex of a 1.8 px pen, a third of a redraw at one
  // vertex per pixel column, with no visible difference (dashed pens keep the polyline).
  m_plot->setPlottingHint(QCP::phFastPolylines, true);
  m_plot->setMouseTracking(true);
  connect(m_plot, &QCustomPlot::mouseMove, this, &MetricPlot::onMouseMove);
  connect(m_plot, &QCustomPlot::mousePress, this, [this] { m_userView = true; });
  connect(m_plot, &QCustomPlot::mouseWheel, this, [this] { m_userView = true; });
  connect(m_plot, &QCustomPlot::mouseDoubleClick, this, [this] {
    resetView();
    Q_EMIT viewResetByUser();
  });
  connect(m_plot->xAxis, QOverload<const QCPRange&>::of(&QCPAxis::rangeChanged), this,
          [this](const QCPRange& range) {
            if (m_inRedecimate) return;
            scheduleReplot();
            if (m_userView && !m_following)
              Q_EMIT userXRangeChanged(XRange{range.lower, range.upper});
          });
  m_plot->setContextMenuPolicy(Qt::CustomContextMenu);
  connect(m_plot, &QWidget::customContextMenuRequested, this, [this](const QPoint& pos) {
    QMenu menu(this);
    const QString base = m_title.toLower().replace(QLatin1Char(' '), QLatin1Char('-'));
    auto save = [this, base](const QString& kind) {
      const QString path = QFileDialog::getSaveFileName(
          this, tr("Save %1 as %2").arg(m_title, kind.toUpper()), base + QLatin1Char('.') + kind,
          kind.toUpper() + QStringLiteral(" (*.") + kind + QLatin1Char(')'));
      if (path.isEmpty()) return;
      bool ok = false;
      if (kind == QLatin1String("png")) ok = savePng(path, 0, 0, devicePixelRatioF());
      if (kind == QLatin1String("svg")) ok = saveSvg(path);
      if (kind == QLatin1String("csv")) {
        QFile f(path);
        ok = f.open(QIODevice::WriteOnly | QIODevice::Truncate) && f.write(toCsv().toUtf8()) >= 0;
      }
      if (!ok) QMessageBox::warning(this, m_title, tr("Could not write %1").arg(path));
    };
    menu.addAction(tr("Save as PNG…"), this, [save] { save(QStringLiteral("png")); });
    menu.addAction(tr("Save as SVG…"), this, [save] { save(QStringLiteral("svg")); });
    menu.addAction(tr("Save data as CSV (raw and smoothed)…"), this,
                   [save] { save(QStringLiteral("csv")); });
    menu.addSeparator();
    menu.addAction(tr("Reset view"), this, [this] {
      resetView();
      Q_EMIT viewResetByUser();
    });
    menu.exec(m_plot->mapToGlobal(pos));
  });
  connect(m_plot, &QCustomPlot::afterLayout, this, &MetricPlot::fitTicks);
  connect(m_plot, &QCustomPlot::afterReplot, this,
          [this] { m_xTicksDrawn = m_plot->xAxis->ticker()->tickCount(); });
  m_emptyText = new QCPItemText(m_plot);
  m_emptyText->position->setType(QCPItemPosition::ptAxisRectRatio);
  m_emptyText->position->setCoords(0.5, 0.5);
  m_emptyText->setPositionAlignment(Qt::AlignCenter);
  m_emptyText->setColor(palette().color(QPalette::Disabled, QPalette::WindowText));
  m_emptyText->setText(QString());  // (QCPItemText starts as "text")
  m_emptyText->setVisible(false);
  m_replotTimer.setSingleShot(true);  // started by scheduleReplot with the interval it needs
  connect(&m_replotTimer, &QTimer::timeout, this, &MetricPlot::replotNow);
}

MetricPlot::~MetricPlot() = default;

void MetricPlot::applyPalette() {
  const QPalette pal = palette();
  const QColor fg = pal.color(QPalette::WindowText);
  m_plot->setBackground(pal.brush(QPalette::Base));
  m_titleElement->setTextColor(fg);
  for (QCPAxis* axis : {m_plot->xAxis, m_plot->yAxis, m_plot->yAxis2}) {
    axis->setBasePen(QPen(fg));
    axis->setTickPen(QPen(fg));
    axis->setSubTickPen(QPen(fg));
    axis->setTickLabelColor(fg);
    axis->setLabelColor(fg);
    QColor grid = fg;
    grid.setAlpha(40);
    axis->grid()->setPen(QPen(grid, 0, Qt::DotLine));
  }
  m_plot->legend->setTextColor(fg);
}

void MetricPlot::changeEvent(QEvent* event) {
  QWidget::changeEvent(event);
  if (event->type() == QEvent::PaletteChange) {
    applyPalette();
    m_plot->replot(QCustomPlot::rpQueuedReplot);
  }
}

void MetricPlot::ensureCurve(const QString& id, const QString& label, const QColor& color,
                             Qt::PenStyle style, bool points, bool right) {
  Curve& c = m_curves[id];
  const bool changed = c.label != label || c.color != color || c.style != style ||
                       c.points != points || c.right != right || !m_rawGraphs.count(id);
  c.label = label;
  c.color = color;
  c.style = style;
  c.points = points;
  c.right = right;
  if (changed) rebuildGraphs();
}

void MetricPlot::setYAxisLabels(const QString& left, const QString& right) {
  m_plot->yAxis->setLabel(left);
  m_plot->yAxis2->setLabel(right);
}

void MetricPlot::append(const QString& id, const std::vector<double>& step,
                        const std::vector<double>& wall, const std::vector<double>& value) {
  auto it = m_curves.find(id);
  if (it == m_curves.end() || step.empty()) return;
  Curve& c = it->second;
  const std::size_t n = std::min({step.size(), wall.size(), value.size()});
  const double w = std::min(std::max(m_smoothing, 0.0), 0.9999);
  if (c.step.capacity() < c.step.size() + n) {  // grow geometrically, once per column
    const std::size_t cap = std::max(c.step.size() + n, 2 * c.step.capacity());
    for (auto* v : {&c.step, &c.wall, &c.raw, &c.smooth})
      v->reserve(cap);
  }
  for (std::size_t i = 0; i < n; ++i) {
    if (!c.step.empty() && step[i] <= c.step.back()) continue;  // already have it
    c.step.push_back(step[i]);
    c.wall.push_back(wall[i]);
    c.raw.push_back(value[i]);
    if (w <= 0.0 || !std::isfinite(value[i])) {  // no smoothing, or passed through
      c.smooth.push_back(value[i]);
      continue;
    }
    c.emaLast = c.emaLast * w + (1.0 - w) * value[i];
    c.emaPow *= w;
    c.smooth.push_back(c.emaLast / (1.0 - c.emaPow));
  }
  c.rawIndex.update(c.raw);
  c.smoothIndex.update(c.smooth);
  scheduleReplot(Redraw::LiveData);
}

void MetricPlot::clear() {
  m_curves.clear();
  rebuildGraphs();
  m_userView = false;
  scheduleReplot();
}

void MetricPlot::setStacked(bool stacked) {
  m_stacked = stacked;
  rebuildGraphs();
  scheduleReplot();
}

void MetricPlot::setXAxis(XAxis axis) {
  if (axis == m_xAxis) return;
  m_xAxis = axis;
  m_plot->xAxis->setLabel(axis == XAxis::Step ? tr("step") : tr("wall time (s)"));
  m_userView = false;
  scheduleReplot();
}

void MetricPlot::setLogY(bool log) {
  m_logY = log;
  for (QCPAxis* axis : {m_plot->yAxis, m_plot->yAxis2}) {
    const int count = axis->ticker()->tickCount();  // fitted to the plot's height (fitTicks)
    if (log) {
      axis->setScaleType(QCPAxis::stLogarithmic);
      axis->setTicker(QSharedPointer<LogTicker>(new LogTicker));
    } else {
      axis->setScaleType(QCPAxis::stLinear);
      axis->setTicker(QSharedPointer<QCPAxisTicker>(new QCPAxisTicker));
    }
    axis->ticker()->setTickCount(count);
  }
  scheduleReplot();
}

void MetricPlot::setSmoothing(double weight) {
  m_smoothing = std::min(std::max(weight, 0.0), 0.999);
  recomputeSmoothing();
  rebuildGraphs();
  scheduleReplot();
}

void MetricPlot::recomputeSmoothing() {
  for (auto& [id, c] : m_curves) {
    c.smooth = debiased_ema(c.raw, m_smoothing);
    c.smoothIndex.clear();
    c.smoothIndex.update(c.smooth);
    c.emaLast = 0.0;
    c.emaPow = 1.0;
    // Re-derive the incremental state from the finite points (same recurrence).
    if (m_smoothing > 0.0) {
      for (double v : c.raw) {
        if (!std::isfinite(v)) continue;
        c.emaLast = c.emaLast * m_smoothing + (1.0 - m_smoothing) * v;
        c.emaPow *= m_smoothing;
      }
    }
  }
}

void MetricPlot::resetView() {
  m_userView = false;
  replotNow();
}

std::optional<XRange> MetricPlot::dataXRange() const {
  double lo = std::numeric_limits<double>::infinity();
  double hi = -std::numeric_limits<double>::infinity();
  for (const auto& [id, c] : m_curves) {
    const auto& x = xs(c);
    if (x.empty()) continue;
    lo = std::min(lo, x.front());
    hi = std::max(hi, x.back());
  }
  if (!std::isfinite(lo)) return std::nullopt;
  return XRange{lo, hi};
}

void MetricPlot::setRobustYRange(bool robust) {
  if (m_robustY == robust) return;
  m_robustY = robust;
  scheduleReplot();
}

void MetricPlot::setLinkedXRange(std::optional<XRange> range, Redraw why) {
  const bool same =
      range.has_value() == m_linkedX.has_value() &&
      (!range || (range->lower == m_linkedX->lower && range->upper == m_linkedX->upper));
  m_linkedX = range;
  if (!same && !m_userView) scheduleReplot(why);
}

void MetricPlot::followXRange(const XRange& range) {
  m_following = true;
  m_userView = true;
  m_plot->xAxis->setRange(range.lower, range.upper);
  m_following = false;
}

namespace {
// CPU time consumed by the calling thread, in ms.
double threadCpuMs() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) * 1e3 + static_cast<double>(ts.tv_nsec) / 1e6;
}
}  // namespace

int MetricPlot::liveRedrawIntervalMs(double redrawMs, int cpus) {
  const double share = kLiveRedrawCpuShare * std::max(cpus, 1);
  const double interval = redrawMs / share;
  return static_cast<int>(
      std::clamp(interval, double{kMinLiveIntervalMs}, double{kMaxLiveIntervalMs}));
}

void MetricPlot::scheduleReplot(Redraw why) {
  if (why == Redraw::Soon) {
    // The user changed something (or drags and zooms): draw within a frame, coalesced.
    if (!m_replotTimer.isActive() || m_replotTimer.remainingTime() > kSoonMs)
      m_replotTimer.start(kSoonMs);
    return;
  }
  m_livePending = true;
  if (m_livePaced || m_replotTimer.isActive()) return;
  static const int cpus = std::max(QThread::idealThreadCount(), 1);
  m_replotTimer.start(liveRedrawIntervalMs(m_lastRedrawMs, cpus));
}

const std::vector<double>& MetricPlot::xs(const Curve& c) const {
  return m_xAxis == XAxis::Step ? c.step : c.wall;
}

void MetricPlot::rebuildGraphs() {
  m_plot->clearGraphs();
  // An empty legend would still claim its row; show it once there is something to name.
  m_plot->legend->setVisible(!m_curves.empty() && m_legendShown);
  if (m_legendRow) m_legendRow->setVisible(!m_curves.empty() && m_legendShown);
  m_rawGraphs.clear();
  m_smoothGraphs.clear();
  m_bandLowGraphs.clear();
  m_smoothLowGraphs.clear();
  QCPGraph* below = nullptr;
  bool anyRight = false;
  // The left axis's curves first, the right axis's drawn over them: each axis scaled to its own
  // curves, a right-hand curve of the same shape as a left-hand one (an AdamW-only run's LR
  // beside a Muon run's) lies exactly on it, and drawn under it could not be seen.
  std::vector<std::pair<const QString, Curve>*> order;
  for (auto& e : m_curves)
    if (!e.second.right || m_stacked) order.push_back(&e);
  for (auto& e : m_curves)
    if (e.second.right && !m_stacked) order.push_back(&e);
  for (auto* entry : order) {
    const QString& id = entry->first;
    Curve& c = entry->second;
    // A stacked chart (the step time's parts) is one sum: its curves share the left axis.
    const bool right = c.right && !m_stacked;
    anyRight |= right;
    QCPAxis* valueAxis = right ? m_plot->yAxis2 : m_plot->yAxis;
    auto addGraph = [&] { return m_plot->addGraph(m_plot->xAxis, valueAxis); };
    QCPGraph* raw = addGraph();
    QCPGraph* smooth = nullptr;
    if (m_stacked) {
      raw->setPen(QPen(c.color, 1.2));
      QColor fill = c.color;
      fill.setAlpha(150);
      raw->setBrush(fill);
      if (below) raw->setChannelFillGraph(below);
      raw->setName(c.label);
      below = raw;
    } else if (m_smoothing > 0.0 && !c.points) {
      raw->setPen(QPen(faint(c.color), 1.0, c.style));
      raw->removeFromLegend();
      smooth = addGraph();
      smooth->setPen(QPen(c.color, 1.8, c.style));
      smooth->setName(c.label);
    } else {
      raw->setPen(QPen(c.color, 1.6, c.style));
      raw->setName(c.label);
    }
    if (c.points) raw->setScatterStyle(QCPScatterStyle(QCPScatterStyle::ssCircle, c.color, 5));
    if (!m_stacked && !c.points) {
      // The band's lower edge: used when the raw series is reduced to a min/max per column.
      QCPGraph* low = addGraph();
      low->setPen(raw->pen());
      low->removeFromLegend();
      low->setAdaptiveSampling(false);
      low->setAntialiased(false);
      m_bandLowGraphs[id] = low;
    }
    raw->setAdaptiveSampling(false);  // we reduce the data ourselves, keeping every extreme
    // The envelope is a dense zig-zag of vertical strokes: antialiasing it costs ~20x the time
    // and changes nothing visible at one stroke per pixel column.
    raw->setAntialiased(false);
    // Its fill (the min/max band, or a stacked area) too: one edge vertex per pixel column,
    // under a pen that is not antialiased either, leaves antialiasing nothing to smooth, and
    // the antialiased rasterizer costs half of a redraw on such a polygon.
    raw->setAntialiasedFill(false);
    m_rawGraphs[id] = raw;
    if (smooth) {
      smooth->setAdaptiveSampling(false);
      smooth->setAntialiasedFill(false);  // its band, as the raw series' above
      m_smoothGraphs[id] = smooth;
      QCPGraph* low = addGraph();
      low->setPen(smooth->pen());
      low->removeFromLegend();
      low->setAdaptiveSampling(false);
      m_smoothLowGraphs[id] = low;
    }
  }
  // A hidden legend holds no items: hidden, it still claimed the height of its rows in the
  // layout, and eight runs' sixteen rows left the data a strip.
  if (!m_legendShown) m_plot->legend->clearItems();
  // The right axis only while a curve is on it; the left one then names its own curves.
  m_plot->yAxis2->setVisible(anyRight);
  m_plot->yAxis2->setTickLabels(anyRight);
  QList<QCPAxis*> vertical{m_plot->yAxis};
  if (anyRight) vertical << m_plot->yAxis2;
  m_plot->axisRect()->setRangeDragAxes(QList<QCPAxis*>{m_plot->xAxis}, vertical);
  m_plot->axisRect()->setRangeZoomAxes(QList<QCPAxis*>{m_plot->xAxis}, vertical);
}

// A line of one point draws nothing (a run with one logged step, or zoomed onto one): that
// point gets a marker, which goes again once there is a line.
void MetricPlot::markLonePoint(QCPGraph* graph, const Curve& c, std::size_t shown) {
  if (c.points) return;  // sparse series carry their markers already
  const bool lone = shown == 1;
  if (lone == (graph->scatterStyle().shape() != QCPScatterStyle::ssNone)) return;
  graph->setScatterStyle(lone ? QCPScatterStyle(QCPScatterStyle::ssDisc, c.color, 6)
                              : QCPScatterStyle());
}

void MetricPlot::redecimate() {
  m_inRedecimate = true;
  const std::optional<XRange> extent = dataXRange();
  if (!extent) {
    // Nothing to draw (a new run before its first evaluation): the axes start again, on the
    // linked plots' steps, not on the ranges of the run shown before.
    if (!m_userView) {
      if (m_linkedX && m_linkedX->upper > m_linkedX->lower) {
        const double pad = kXPad * (m_linkedX->upper - m_linkedX->lower);
        m_plot->xAxis->setRange(m_linkedX->lower - pad, m_linkedX->upper + pad);
      } else {
        m_plot->xAxis->setRange(0, 5);
      }
      m_plot->yAxis->setRange(0, 1);
      m_plot->yAxis2->setRange(0, 1);
    }
    m_inRedecimate = false;
    return;
  }
  double xmin = extent->lower;
  double xmax = extent->upper;
  if (!m_userView) {
    if (m_linkedX) {  // the linked plots' extent: one run's plots share their x range
      xmin = std::min(xmin, m_linkedX->lower);
      xmax = std::max(xmax, m_linkedX->upper);
    }
    // 1% either way: a marker at the first or last step (the final eval) is drawn whole, not
    // cut by the axis. Every linked plot pads alike, so their x ranges stay equal.
    const double pad = xmax > xmin ? kXPad * (xmax - xmin) : 1.0;
    m_plot->xAxis->setRange(xmin - pad, xmax + pad);
  }
  const QCPRange range = m_plot->xAxis->range();
  const int columns = std::max(50, m_plot->axisRect()->width());
  // Stacked: cumulative sums of the (smoothed) series, by index.
  std::vector<double> cumulative;
  // Each y axis's extent (0 = left, 1 = right).
  struct Span {
    double lo = std::numeric_limits<double>::infinity();
    double hi = -std::numeric_limits<double>::infinity();
    std::vector<double> tracked;  // robust y range: every value the range is taken over
  };
  Span spans[2];
  Span* span = &spans[0];
  auto track = [&](const Envelope& e) {
    for (double v : e.y) {
      if (!std::isfinite(v) || (m_logY && v <= 0)) continue;
      span->lo = std::min(span->lo, v);
      span->hi = std::max(span->hi, v);
      if (m_robustY) span->tracked.push_back(v);
    }
  };
  for (auto& [id, c] : m_curves) {
    const auto& x = xs(c);
    QCPGraph* raw = m_rawGraphs.count(id) ? m_rawGraphs[id] : nullptr;
    if (!raw) continue;
    span = &spans[raw->valueAxis() == m_plot->yAxis2 ? 1 : 0];
    if (m_stacked) {
      const std::vector<double>& v = m_smoothing > 0.0 ? c.smooth : c.raw;
      if (cumulative.size() < v.size()) cumulative.resize(v.size(), 0.0);
      std::vector<double> top(v.size());
      for (std::size_t i = 0; i < v.size(); ++i) {
        cumulative[i] += std::isfinite(v[i]) ? v[i] : 0.0;
        top[i] = cumulative[i];
      }
      const Envelope e = min_max_envelope(x, top, range.lower, range.upper, columns);
      raw->setData(toQVector(e.x), toQVector(e.y), true);
      markLonePoint(raw, c, e.x.size());
      track(e);
      continue;
    }
    const Envelope e = c.rawIndex.envelope(x, c.raw, range.lower, range.upper, columns);
    QCPGraph* low = m_bandLowGraphs.count(id) ? m_bandLowGraphs[id] : nullptr;
    if (low && !e.band_x.empty()) {
      // Reduced: a filled band between each column's min and max.
      raw->setData(toQVector(e.band_x), toQVector(e.band_hi), true);
      low->setData(toQVector(e.band_x), toQVector(e.band_lo), true);
      QColor fill = raw->pen().color();
      fill.setAlpha(m_smoothGraphs.count(id) ? 60 : 140);
      raw->setBrush(fill);
      raw->setChannelFillGraph(low);
    } else {
      raw->setData(toQVector(e.x), toQVector(e.y), true);
      raw->setBrush(Qt::NoBrush);
      raw->setChannelFillGraph(nullptr);
      if (low) low->data()->clear();
      markLonePoint(raw, c, e.x.size());
    }
    track(e);
    if (auto it = m_smoothGraphs.find(id); it != m_smoothGraphs.end()) {
      const Envelope s = c.smoothIndex.envelope(x, c.smooth, range.lower, range.upper, columns);
      QCPGraph* smooth = it->second;
      QCPGraph* smoothLow = m_smoothLowGraphs[id];
      if (!s.band_x.empty()) {
        // Reduced: the smoothed series' own min/max band, nearly opaque (reads as the line).
        smooth->setData(toQVector(s.band_x), toQVector(s.band_hi), true);
        smoothLow->setData(toQVector(s.band_x), toQVector(s.band_lo), true);
        QColor fill = c.color;
        fill.setAlpha(210);
        smooth->setBrush(fill);
        smooth->setChannelFillGraph(smoothLow);
      } else {
        smooth->setData(toQVector(s.x), toQVector(s.y), true);
        smooth->setBrush(Qt::NoBrush);
        smooth->setChannelFillGraph(nullptr);
        smoothLow->data()->clear();
      }
    }
  }
  for (int a = 0; a < 2; ++a) {
    Span& sp = spans[a];
    double ylo = sp.lo;
    double yhi = sp.hi;
    if (m_userView || !std::isfinite(ylo)) continue;
    if (m_robustY) {
      const double top = robust_upper(std::move(sp.tracked));
      if (std::isfinite(top)) yhi = std::max(top, ylo);
    }
    if (m_stacked) ylo = std::min(ylo, 0.0);
    QCPAxis* axis = a == 0 ? m_plot->yAxis : m_plot->yAxis2;
    if (m_logY) {
      axis->setRange(ylo / 1.3, yhi * 1.3);
    } else {
      // A constant value (a fixed LR of 3e-4) in the middle of a range 5% of it either way.
      const double pad = yhi > ylo    ? 0.05 * (yhi - ylo)
                         : yhi != 0.0 ? std::max(1e-300, std::abs(yhi) * 0.05)
                                      : 1e-3;
      axis->setRange(ylo - pad, yhi + pad);
    }
  }
  m_inRedecimate = false;
}

void MetricPlot::setLivePaced(bool paced) {
  m_livePaced = paced;
  if (!paced && m_livePending) scheduleReplot(Redraw::LiveData);
}

void MetricPlot::setEmptyText(const QString& text) {
  m_emptyTextWhole = text;
  scheduleReplot();
}

bool MetricPlot::showsEmptyText() const {
  return m_emptyText->visible();
}

void MetricPlot::replotNow() {
  m_replotTimer.stop();
  m_livePending = false;
  // Elided to the axes (a compare pane's plot is ~120 px across).
  m_emptyText->setText(QFontMetrics(m_emptyText->font())
                           .elidedText(m_emptyTextWhole, Qt::ElideRight,
                                       std::max(0, m_plot->axisRect()->width() - 8)));
  m_emptyText->setVisible(!m_emptyTextWhole.isEmpty() && !hasData());
  // The redraw's cost is this thread's CPU time, not wall time: on a machine busy training, the
  // GUI thread waits for a CPU, and wall time would stretch the interval for no saving.
  const double cpuStart = threadCpuMs();
  redecimate();
  fitLegend();
  // A hidden plot (another tab, a collapsed dock) is painted when it is shown again.
  if (isVisible()) {
    m_plot->replot(QCustomPlot::rpQueuedRefresh);  // draws into the buffer now; blits later
    m_lastRedrawMs = threadCpuMs() - cpuStart;
  } else {
    m_stale = true;
  }
}

int MetricPlot::legendColumns() const {
  return m_plot->legend->wrap();
}

void MetricPlot::setLegendShown(bool shown) {
  if (shown == m_legendShown) return;
  m_legendShown = shown;
  rebuildGraphs();  // the legend's items go (or come back) with the graphs
  fitLegend();
  scheduleReplot();
}

void MetricPlot::fitLegend() {
  // Two columns when two whole names fit beside each other, with 48 px for the plot's margins.
  fitLegendColumns(m_plot->legend, width() - 48, 2);  // (the chart fills this widget)
  // Tall enough for the legend's rows beside the title, the axis labels and a usable axis rect:
  // squeezed below that, QCustomPlot drew a four-entry legend's rows over one another.
  const int legend =
      m_plot->legend->visible() ? m_plot->legend->minimumOuterSizeHint().height() : 0;
  const int least = std::max(kLeastHeight, legend + 110);
  if (minimumHeight() != least) setMinimumHeight(least);
}

void MetricPlot::fitTicks() {
  // About one y label per 22-30 px: a short plot with QCustomPlot's default (5, rounded to a nice
  // step) stacked seven labels such as 0.0125 into 70 px. Called after each layout, when the
  // axis rect has its height (for the widget, or for a report's image of another size); the
  // ticks of this draw are already made, so a changed count is drawn by one more replot.
  // Across, about one x label per 75 px: on a plot 130 px wide "1000", "2000" and "3000" ran
  // into one another.
  const int h = m_plot->axisRect()->height();
  const int w = m_plot->axisRect()->width();
  if (h <= 0 || w <= 0) return;
  // One per 22 px: at one per 30 a loss plot 70 px high asked for two, which a range of 0.3 to
  // 1.8 rounds to a step of 1: a single label, "1".
  const int n = std::clamp(h / 22, 2, 5);
  // Long labels on a narrow axis may still touch at that count ("100", "200" and "300" in 55 px
  // between the LR plot's two y axes read "1002003300"): then one fewer, for this width, as the
  // last draw shows them.
  if (w != m_xCapWidth) {
    m_xCapWidth = w;
    m_xCap = 5;
  }
  int nx = std::min(std::clamp(w / 75, 2, 5), m_xCap);
  if (nx > 1 && m_xTicksDrawn == nx && m_plot->xAxis->ticker()->tickCount() == nx) {
    const QCPAxis* x = m_plot->xAxis;
    const QFontMetrics fm(x->tickLabelFont());
    const QVector<double> ticks = x->tickVector();
    const QVector<QString> labels = x->tickVectorLabels();
    for (int i = 1; i < ticks.size() && i < labels.size(); ++i) {
      const double gap = std::abs(x->coordToPixel(ticks[i]) - x->coordToPixel(ticks[i - 1]));
      if (gap < (fm.horizontalAdvance(labels[i]) + fm.horizontalAdvance(labels[i - 1])) / 2.0 + 6) {
        m_xCap = nx = nx - 1;
        break;
      }
    }
  }
  bool changed = false;
  for (QCPAxis* axis : {m_plot->yAxis, m_plot->yAxis2, m_plot->xAxis}) {
    const int want = axis == m_plot->xAxis ? nx : n;
    if (axis->ticker()->tickCount() == want) continue;
    axis->ticker()->setTickCount(want);
    changed = true;
  }
  if (changed) m_plot->replot(QCustomPlot::rpQueuedReplot);
}

void MetricPlot::setDrawnTitle(const QString& text) {
  m_titleElement->setText(text);
}

void MetricPlot::resizeEvent(QResizeEvent* event) {
  QWidget::resizeEvent(event);
  const int columns = legendColumns();
  const int least = minimumHeight();
  fitLegend();
  if (legendColumns() != columns || minimumHeight() != least) scheduleReplot();
}

void MetricPlot::showEvent(QShowEvent* event) {
  QWidget::showEvent(event);
  if (m_stale) {
    m_stale = false;
    replotNow();
  }
}

int MetricPlot::drawnVertices(const QString& id) const {
  auto it = m_rawGraphs.find(id);
  int n = it == m_rawGraphs.end() ? 0 : it->second->dataCount();
  auto low = m_bandLowGraphs.find(id);
  if (low != m_bandLowGraphs.end()) n += low->second->dataCount();
  return n;
}

bool MetricPlot::hasData() const {
  for (const auto& [id, c] : m_curves)
    if (!c.raw.empty()) return true;
  return false;
}

void MetricPlot::onMouseMove(QMouseEvent* event) {
  if (m_curves.empty()) return;
  const double x = m_plot->xAxis->pixelToCoord(event->position().x());
  QString text;
  for (const auto& [id, c] : m_curves) {
    const long i = nearest_index(xs(c), x);
    if (i < 0) continue;
    const auto k = static_cast<std::size_t>(i);
    text += QStringLiteral("%1: %2 (step %3, %4 s)")
                .arg(c.label)
                .arg(c.raw[k], 0, 'g', 7)
                .arg(static_cast<qlonglong>(c.step[k]))
                .arg(c.wall[k], 0, 'f', 1);
    if (m_smoothing > 0.0 && !c.points && c.smooth[k] != c.raw[k])
      text += QStringLiteral(", smoothed %1").arg(c.smooth[k], 0, 'g', 7);
    text += QLatin1Char('\n');
  }
  text.chop(1);
  QToolTip::showText(event->globalPosition().toPoint(), text, m_plot);
}

bool MetricPlot::savePng(const QString& path, int width, int height, double scale) {
  replotNow();
  return m_plot->savePng(path, width, height, scale);
}

bool MetricPlot::saveSvg(const QString& path, int width, int height) {
  replotNow();
  const int w = width > 0 ? width : m_plot->width();
  const int h = height > 0 ? height : m_plot->height();
  QSvgGenerator gen;
  gen.setFileName(path);
  gen.setSize(QSize(w, h));
  gen.setViewBox(QRect(0, 0, w, h));
  gen.setTitle(m_title);
  QCPPainter painter;
  if (!painter.begin(&gen)) return false;
  m_plot->toPainter(&painter, w, h);
  painter.end();
  return QFile::exists(path);
}

QString MetricPlot::toCsv() const {
  QString out;
  QTextStream s(&out);
  s << "curve,step,wall_s,raw,smoothed\n";
  const QCPRange range = m_plot->xAxis->range();
  for (const auto& [id, c] : m_curves) {
    const auto& x = xs(c);
    QString label = c.label;
    label.replace(QLatin1Char('"'), QStringLiteral("\"\""));
    for (std::size_t i = 0; i < c.raw.size(); ++i) {
      if (x[i] < range.lower || x[i] > range.upper) continue;
      s << '"' << label << "\"," << static_cast<qlonglong>(c.step[i]) << ','
        << QString::number(c.wall[i], 'g', 10) << ',' << QString::number(c.raw[i], 'g', 17) << ','
        << QString::number(c.smooth[i], 'g', 17) << '\n';
    }
  }
  return out;
}

}  // namespace tb::ui
