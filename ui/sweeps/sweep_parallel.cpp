// SweepView's parallel coordinates (see sweep_view.h): an axis per swept key and one for the
// metric, a line per trial, and the axis titles fitted (elided or staggered) to the plot's width.
#include <qcustomplot.h>

#include <QResizeEvent>
#include <QTimer>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "ui/sweeps/sweep_values.h"
#include "ui/sweeps/sweep_view.h"

namespace tb::ui {

using sweep_values::display;
using sweep_values::kValueGap;
using sweep_values::number;
using sweep_values::numberOf;
using sweep_values::numericKey;
using sweep_values::valuesOf;

void SweepView::fillParallel() {
  QCustomPlot* plot = m_parallel;
  plot->clearPlottables();
  plot->clearItems();
  const auto& keys = m_result.plan.keys;
  const bool max = m_result.plan.goal == "max";
  // The axes: every swept key, then the metric. Per axis, a value's height in [0, 1]
  // (n/a: below the axis).
  struct Axis {
    QString title;
    bool numeric = true;
    bool log = false;
    double lo = 0, hi = 0;
    QStringList categories;
    bool missing = false;
    bool any = false;  // some trial has a value here
  };
  std::vector<Axis> axes;
  std::vector<const api::SweepTrialResult*> shown;
  for (const auto& t : m_result.trials)
    if (t.best) shown.push_back(&t);
  auto valueOf = [&](const api::SweepTrialResult& t,
                     std::size_t axis) -> std::optional<std::string> {
    if (axis == keys.size()) return std::to_string(*t.best);
    for (const auto& [k, v] : valuesOf(m_result, t.trial.point))
      if (k == keys[axis]) return v;
    return std::nullopt;
  };
  // Axis titles without the keys' common dotted prefix ("kind", "lr", "muon.lr" for three
  // optimizer.* keys), so that neighbours do not overlap; the prefix goes to the tooltip.
  QString prefix;
  if (keys.size() >= 2) {
    const QStringList first = QString::fromStdString(keys[0]).split(QLatin1Char('.'));
    for (int n = static_cast<int>(first.size()) - 1; n > 0 && prefix.isEmpty(); --n) {
      const QString p = QStringList(first.mid(0, n)).join(QLatin1Char('.')) + QLatin1Char('.');
      if (std::all_of(keys.begin(), keys.end(), [&](const std::string& k) {
            return QString::fromStdString(k).startsWith(p) && QString::fromStdString(k) != p;
          }))
        prefix = p;
    }
  }
  plot->setToolTip(prefix.isEmpty() ? QString() : tr("Axes: keys under %1").arg(prefix));
  for (std::size_t a = 0; a <= keys.size(); ++a) {
    Axis ax;
    ax.title = a < keys.size() ? QString::fromStdString(keys[a]).mid(prefix.size())
                               : QString::fromStdString(m_result.plan.metric);
    ax.numeric = a == keys.size() || numericKey(m_result, keys[a]);
    bool first = true;
    std::set<QString> cats;
    for (const auto* t : shown) {
      const auto v = valueOf(*t, a);
      if (!v) {
        ax.missing = true;
        continue;
      }
      if (ax.numeric) {
        const double x = numberOf(*v).value_or(0);
        ax.lo = first ? x : std::min(ax.lo, x);
        ax.hi = first ? x : std::max(ax.hi, x);
        first = false;
      } else {
        cats.insert(display(*v));
      }
    }
    ax.any = !first || !cats.empty();
    ax.categories = QStringList(cats.begin(), cats.end());
    ax.log = ax.numeric && a < keys.size() && ax.lo > 0 && ax.hi / ax.lo >= 10;
    axes.push_back(ax);
  }
  auto height = [&](const Axis& ax, const std::optional<std::string>& v) {
    if (!v) return -0.12;
    if (!ax.numeric) {
      const auto n = ax.categories.size();
      const auto i = ax.categories.indexOf(display(*v));
      return n <= 1 ? 0.5 : static_cast<double>(i) / static_cast<double>(n - 1);
    }
    const double x = numberOf(*v).value_or(0);
    if (!(ax.hi > ax.lo)) return 0.5;
    return ax.log ? (std::log(x) - std::log(ax.lo)) / (std::log(ax.hi) - std::log(ax.lo))
                  : (x - ax.lo) / (ax.hi - ax.lo);
  };
  // One curve per finished trial, coloured from red (worst) to blue (best).
  const Axis& metric = axes.back();
  for (const auto* t : shown) {
    auto* curve = new QCPCurve(plot->xAxis, plot->yAxis);
    QVector<double> xs, ys;
    for (std::size_t a = 0; a < axes.size(); ++a) {
      xs << static_cast<double>(a);
      ys << height(axes[a], valueOf(*t, a));
    }
    curve->setData(xs, ys);
    double good = metric.hi > metric.lo ? (*t->best - metric.lo) / (metric.hi - metric.lo) : 1.0;
    if (!max) good = 1.0 - good;
    const QColor color = QColor::fromRgbF(0.7 * (1 - good) + 0.13 * good, 0.1 + 0.3 * good,
                                          0.17 * (1 - good) + 0.67 * good);
    curve->setPen(QPen(color, 1.6));
    curve->setName(QString::fromStdString(t->trial.name));
  }
  // The axes, their titles and value labels. The labels may reach into the axis rect's margins
  // (pixels, so that the last axis' values are never cut at the plot's right edge), and the
  // titles take two rows, alternating, where neighbours would overlap on one.
  QFont labelFont = plot->font();
  labelFont.setPointSizeF(labelFont.pointSizeF() * 0.85);
  QFont titleFont = labelFont;
  titleFont.setBold(true);
  auto text = [&](double x, double y, const QString& s, Qt::Alignment align, bool bold = false) {
    auto* item = new QCPItemText(plot);
    item->setClipToAxisRect(false);
    item->position->setCoords(x, y);
    item->setText(s);
    item->setPositionAlignment(align);
    item->setFont(bold ? titleFont : labelFont);
    // A value label starts a fixed distance right of its axis, in pixels as the margins are.
    if (align & Qt::AlignLeft) item->setPadding(QMargins(kValueGap, 0, 0, 0));
  };
  auto valueLabels = [&](const Axis& ax) {
    QStringList labels;
    if (ax.any && ax.numeric) {
      labels << number(ax.lo);
      if (ax.hi > ax.lo) labels << number(ax.hi);
    } else if (ax.any) {
      labels = ax.categories;
    }
    if (ax.missing) labels << tr("n/a");
    return labels;
  };
  const QFontMetrics labelMetrics(labelFont), titleMetrics(titleFont);
  int lastWidth = 0;  // the widest value label of the last axis
  for (const QString& l : valueLabels(axes.back()))
    lastWidth = std::max(lastWidth, labelMetrics.horizontalAdvance(l));
  const int right =
      std::max(lastWidth + kValueGap + 6, titleMetrics.horizontalAdvance(axes.back().title) / 2);
  const int left = std::max(10, titleMetrics.horizontalAdvance(axes.front().title) / 2 + 2);
  plot->axisRect()->setMargins(QMargins(left, 10, right, 10));
  m_parallelTitles.clear();
  for (const Axis& ax : axes)
    m_parallelTitles << ax.title;
  m_parallelTitleFont = titleFont;
  m_parallelShown = parallelTitlesAt(
      m_parallelFitWidth > 0 ? m_parallelFitWidth : m_parallel->width(), &m_parallelStaggered);
  if (m_parallelShown != m_parallelTitles)  // some shortened: the tooltip names them whole
    plot->setToolTip(plot->toolTip() +
                     (plot->toolTip().isEmpty() ? QString() : QStringLiteral("\n")) +
                     tr("Axes: %1").arg(m_parallelTitles.join(QStringLiteral(", "))));
  for (std::size_t a = 0; a < axes.size(); ++a) {
    const Axis& ax = axes[a];
    const auto x = static_cast<double>(a);
    auto* line = new QCPItemLine(plot);
    line->start->setCoords(x, 0);
    line->end->setCoords(x, 1);
    line->setPen(QPen(QColor(90, 90, 90), 1.2));
    text(x, m_parallelStaggered && a % 2 == 1 ? 1.13 : 1.04, m_parallelShown[static_cast<int>(a)],
         Qt::AlignHCenter | Qt::AlignBottom, true);
    // (An axis no finished trial has a value on is labelled n/a only.)
    if (ax.any && ax.numeric) {
      text(x, 0, number(ax.lo), Qt::AlignLeft | Qt::AlignVCenter);
      if (ax.hi > ax.lo) text(x, 1, number(ax.hi), Qt::AlignLeft | Qt::AlignVCenter);
    } else if (ax.any) {
      for (int i = 0; i < ax.categories.size(); ++i) {
        const double y = ax.categories.size() <= 1 ? 0.5 : double(i) / (ax.categories.size() - 1);
        text(x, y, ax.categories[i], Qt::AlignLeft | Qt::AlignVCenter);
      }
    }
    if (ax.missing) text(x, -0.12, tr("n/a"), Qt::AlignLeft | Qt::AlignVCenter);
  }
  m_parallelCaption->setText(tr("a line per trial; its best %1: blue best, red worst")
                                 .arg(QString::fromStdString(m_result.plan.metric)));
  plot->xAxis->setRange(-0.02, static_cast<double>(axes.size()) - 0.98);
  plot->yAxis->setRange(-0.2, m_parallelStaggered ? 1.25 : 1.16);
  plot->replot(QCustomPlot::rpQueuedReplot);  // also called from a resize, before it is done
}

bool SweepView::eventFilter(QObject* watched, QEvent* event) {
  if (watched == m_parallel && event->type() == QEvent::Resize && m_parallelFitWidth == 0)
    refitParallelTitles(static_cast<QResizeEvent*>(event)->size().width());
  // The legend's corner was chosen for the curve plot's size when it was filled (often hidden,
  // at another size): chosen again for the size it is shown at, once the resize is done.
  if (watched == m_curvePlot && event->type() == QEvent::Resize && !m_legendQueued) {
    m_legendQueued = true;
    QTimer::singleShot(0, this, [this] {
      m_legendQueued = false;
      placeLegend();
      m_curvePlot->replot(QCustomPlot::rpQueuedReplot);
    });
  }
  return QWidget::eventFilter(watched, event);
}

void SweepView::fitParallelTo(int width) {
  const int before = m_parallelFitWidth;
  m_parallelFitWidth = width;
  if (width != before) refitParallelTitles(width > 0 ? width : m_parallel->width());
}

void SweepView::refitParallelTitles(int plotWidth) {
  if (m_parallelTitles.isEmpty()) return;
  bool staggered = false;
  const QStringList shown = parallelTitlesAt(plotWidth, &staggered);
  if (shown != m_parallelShown || staggered != m_parallelStaggered) fillParallel();
}

QStringList SweepView::parallelTitlesAt(int plotWidth, bool* staggered) const {
  *staggered = false;
  const int axes = static_cast<int>(m_parallelTitles.size());
  if (axes < 2) return m_parallelTitles;
  const QFontMetrics metrics(m_parallelTitleFont);
  QList<int> widths;
  for (const QString& t : m_parallelTitles)
    widths << metrics.horizontalAdvance(t);
  const QMargins m = m_parallel->axisRect()->margins();
  // The x range runs from -0.02 to axes - 0.98: axis a sits at (a + 0.02) spacings.
  const double spacing = (plotWidth - m.left() - m.right()) / (axes - 1 + 0.04);
  constexpr int kGap = 8;  // px between neighbouring titles
  for (int a = 1; a < axes && !*staggered; ++a)
    if ((widths[a - 1] + widths[a]) / 2.0 + kGap > spacing) *staggered = true;
  if (!*staggered) return m_parallelTitles;
  // On two rows a title's neighbours on its row are two axes away: each may take 2 spacings
  // less the gap.
  const int most = std::max(1, static_cast<int>(2 * spacing) - kGap);
  QStringList shown;
  for (int a = 0; a < axes; ++a)
    shown << (widths[a] > most ? metrics.elidedText(m_parallelTitles[a], Qt::ElideLeft, most)
                               : m_parallelTitles[a]);
  return shown;
}

}  // namespace tb::ui
