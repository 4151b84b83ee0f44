// The GUI's small layout parts: FlowLayout (rows of controls that wrap instead of widening a
// page) and LogTicker (log-axis labels between the powers of ten over a few decades).
#include <QtTest>

#include <QLabel>
#include <QLineEdit>
#include <QLocale>
#include <QPushButton>

#include <cmath>

#include "ui/common/flow_layout.h"
#include "ui/common/log_ticker.h"

using namespace tb;

namespace {

QVector<double> ticksOf(ui::LogTicker& ticker, double lo, double hi, int count, int* subTicks) {
  ticker.setTickCount(count);
  QVector<double> ticks, sub;
  QVector<QString> labels;
  ticker.generate(QCPRange(lo, hi), QLocale::c(), QLatin1Char('g'), 6, ticks, &sub, &labels);
  // generate() keeps one tick beyond either end (for sub-ticks); the axis draws those inside.
  QVector<double> inside;
  for (double t : ticks)
    if (t >= lo * (1 - 1e-9) && t <= hi * (1 + 1e-9)) inside.push_back(t);
  *subTicks = static_cast<int>(sub.size());
  return inside;
}

bool near(const QVector<double>& got, std::initializer_list<double> want) {
  if (got.size() != static_cast<qsizetype>(want.size())) return false;
  int i = 0;
  for (double w : want)
    if (std::abs(got[i++] - w) > 1e-12 * w) return false;
  return true;
}

QString str(const QVector<double>& v) {
  QStringList s;
  for (double x : v)
    s << QString::number(x, 'g', 6);
  return s.join(QLatin1Char(' '));
}

}  // namespace

class TestLayouts : public QObject {
  Q_OBJECT

 private Q_SLOTS:
  void flowLayoutWrapsInOrderAndNeverOverflows() {
    QWidget page;
    auto* flow = new ui::FlowLayout(&page, 6);
    QList<QWidget*> items;
    for (int i = 0; i < 5; ++i) {
      auto* b = new QPushButton(QStringLiteral("button number %1").arg(i), &page);
      flow->addWidget(b);
      items << b;
    }
    auto* field = new QLineEdit(&page);
    field->setFixedWidth(120);
    QWidget* pair = ui::labelled(QStringLiteral("target:"), field, &page);
    flow->addWidget(pair);
    items << pair;

    int widest = 0, total = 0;
    for (QWidget* w : items) {
      widest = std::max(widest, w->sizeHint().width());
      total += w->sizeHint().width();
    }
    // Never wider than its widest item demands; one row when everything fits.
    QCOMPARE(flow->minimumSize().width(), widest);
    QCOMPARE(flow->sizeHint().width(), total + 5 * 6);
    const int oneRow = flow->heightForWidth(flow->sizeHint().width());
    QCOMPARE(oneRow, flow->sizeHint().height());

    for (const int width : {total + 200, total / 2, widest}) {
      page.resize(width, 400);
      flow->setGeometry(QRect(0, 0, width, 400));
      const int rows = flow->rows();
      if (width > total) QCOMPARE(rows, 1);
      if (width == widest) QCOMPARE(rows, static_cast<int>(items.size()));
      if (width < total) QVERIFY(rows > 1);
      QCOMPARE(flow->heightForWidth(width) > oneRow, rows > 1);
      // Reading order: left to right, then down; nothing past the right edge; no overlaps.
      for (int i = 0; i < items.size(); ++i) {
        const QRect r = items[i]->geometry();
        QVERIFY2(r.right() < width,
                 qPrintable(QStringLiteral("item %1 at %2 px wide").arg(i).arg(width)));
        if (i > 0) {
          const QRect prev = items[i - 1]->geometry();
          QVERIFY(prev.center().y() < r.top() || (r.left() > prev.right() && !r.intersects(prev)));
        }
      }
    }
    // The label stays beside its field.
    QCOMPARE(field->parentWidget(), pair);
    QVERIFY(pair->findChild<QLabel*>()->buddy() == field);
  }

  void logTickerLabelsBetweenThePowersOfTen() {
    ui::LogTicker ticker;
    int sub = 0;
    // A sweep's learning rates, 0.001 .. 0.02, padded: 1-2-5 when the axis has room for them.
    auto ticks = ticksOf(ticker, 0.001 / 1.5, 0.02 * 1.5, 6, &sub);
    QVERIFY2(near(ticks, {0.001, 0.002, 0.005, 0.01, 0.02}), qPrintable(str(ticks)));
    QCOMPARE(sub, 0);
    // Less room: 1-3, then the powers alone.
    ticks = ticksOf(ticker, 0.001 / 1.5, 0.02 * 1.5, 4, &sub);
    QVERIFY2(near(ticks, {0.001, 0.003, 0.01, 0.03}), qPrintable(str(ticks)));
    ticks = ticksOf(ticker, 0.001 / 1.5, 0.02 * 1.5, 2, &sub);
    QVERIFY2(near(ticks, {0.001, 0.01}), qPrintable(str(ticks)));
    // Many decades: QCustomPlot's log ticker (powers of ten, sub-ticks between them).
    ticks = ticksOf(ticker, 1e-7, 10, 5, &sub);
    QVERIFY(ticks.size() >= 2 && ticks.size() <= 6);
    for (double t : ticks) {
      const double e = std::log10(t);
      QVERIFY2(std::abs(e - std::round(e)) < 1e-9, qPrintable(str(ticks)));
    }
    QVERIFY(sub > 0);
    // Within a factor of 2: evenly spaced values, as a linear axis would have.
    ticks = ticksOf(ticker, 2.0, 3.5, 5, &sub);
    QVERIFY2(ticks.size() >= 3, qPrintable(str(ticks)));
    for (int i = 2; i < ticks.size(); ++i)
      QVERIFY(std::abs((ticks[i] - ticks[i - 1]) - (ticks[1] - ticks[0])) < 1e-12);
  }
};

QTEST_MAIN(TestLayouts)
#include "tst_layouts.moc"
