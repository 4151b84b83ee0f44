#include "ui/topology/topology_view.h"

#include <QCheckBox>
#include <QComboBox>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QLineEdit>
#include <QPainter>
#include <QRegularExpression>
#include <QScrollArea>
#include <QSpinBox>
#include <QTableWidget>
#include <QVBoxLayout>

#include <algorithm>
#include <exception>
#include <set>

#include "ui/live_plots/plots_panel.h"

// BindingPlan::slots (engine/api) vs Qt's `slots` keyword macro: this file declares no slots.
#undef slots

namespace tb::ui {

QList<int> parseCpuList(const QString& text) {
  QList<int> out;
  for (const QString& part : text.split(QLatin1Char(','), Qt::SkipEmptyParts)) {
    const QStringList ends = part.trimmed().split(QLatin1Char('-'));
    bool ok1 = false, ok2 = true;
    const int lo = ends.value(0).toInt(&ok1);
    const int hi = ends.size() > 1 ? ends.value(1).toInt(&ok2) : lo;
    if (!ok1 || !ok2 || hi < lo || hi - lo > 100000) continue;
    for (int c = lo; c <= hi; ++c)
      out.append(c);
  }
  return out;
}

namespace {

constexpr int kCell = 18;  // one logical CPU
constexpr int kGap = 4;    // between CPUs of a core
constexpr int kCoresPerRow = 8;
constexpr int kPad = 8;

}  // namespace

// ---- map ----------------------------------------------------------------------------------------

TopologyMap::TopologyMap(QWidget* parent) : QWidget(parent) {
  setMinimumHeight(80);
}

void TopologyMap::setTopology(const api::TopologyInfo& info) {
  m_info = info;
  updateGeometry();
  update();
}

void TopologyMap::setAssignment(const QMap<int, QList<int>>& slotsOfCpu) {
  m_slotsOfCpu = slotsOfCpu;
  update();
}

void TopologyMap::setHighlight(const QList<int>& cpus) {
  m_highlight = cpus;
  update();
}

QSize TopologyMap::sizeHint() const {
  // Rows of cores per node, nodes stacked.
  int height = kPad;
  int width = 200;
  for (const auto& node : m_info.nodes) {
    int cores = 0, puPerCore = 1;
    for (const auto& c : m_info.cores) {
      if (c.node != node.index) continue;
      ++cores;
      puPerCore = std::max(puPerCore,
                           static_cast<int>(parseCpuList(QString::fromStdString(c.cpus)).size()));
    }
    const int rows = std::max(1, (cores + kCoresPerRow - 1) / kCoresPerRow);
    const int coreW = puPerCore * (kCell + kGap) + kGap;
    width = std::max(width, 2 * kPad + std::min(cores, kCoresPerRow) * (coreW + kGap) + 2 * kPad);
    height += 22 + rows * (kCell + 2 * kGap + kGap) + kPad;
  }
  return {width, height + kPad};
}

void TopologyMap::paintEvent(QPaintEvent*) {
  QPainter p(this);
  p.setRenderHint(QPainter::Antialiasing);
  const QPalette pal = palette();
  p.fillRect(rect(), pal.color(QPalette::Base));
  const std::set<int> allowed = [&] {
    const auto l = parseCpuList(QString::fromStdString(m_info.allowed_cpus));
    return std::set<int>(l.begin(), l.end());
  }();
  int y = kPad;
  QFont small = font();
  small.setPointSizeF(std::max(6.0, small.pointSizeF() - 2));
  for (const auto& node : m_info.nodes) {
    int cores = 0;
    for (const auto& c : m_info.cores)
      if (c.node == node.index) ++cores;
    int puPerCore = 1;
    for (const auto& c : m_info.cores)
      if (c.node == node.index)
        puPerCore = std::max(puPerCore,
                             static_cast<int>(parseCpuList(QString::fromStdString(c.cpus)).size()));
    const int rows = std::max(1, (cores + kCoresPerRow - 1) / kCoresPerRow);
    const int coreW = puPerCore * (kCell + kGap) + kGap;
    const int boxH = 22 + rows * (kCell + 3 * kGap);
    const QRect box(kPad, y, width() - 2 * kPad, boxH);
    p.setPen(QPen(pal.color(QPalette::Mid), 1));
    p.setBrush(pal.color(QPalette::AlternateBase));
    p.drawRoundedRect(box, 6, 6);
    p.setPen(pal.color(QPalette::WindowText));
    QString title =
        tr("NUMA node %1 — CPUs %2").arg(node.index).arg(QString::fromStdString(node.cpus));
    if (node.memory_bytes > 0)
      title += tr(", %1 GiB")
                   .arg(static_cast<double>(node.memory_bytes) / (1024.0 * 1024 * 1024), 0, 'f', 1);
    p.drawText(box.adjusted(8, 3, -8, 0), Qt::AlignLeft | Qt::AlignTop, title);
    int i = 0;
    for (const auto& c : m_info.cores) {
      if (c.node != node.index) continue;
      const int col = i % kCoresPerRow, row = i / kCoresPerRow;
      ++i;
      const QRect core(box.left() + kPad + col * (coreW + kGap),
                       box.top() + 22 + row * (kCell + 3 * kGap), coreW, kCell + 2 * kGap);
      p.setPen(QPen(pal.color(QPalette::Mid), 1));
      p.setBrush(pal.color(QPalette::Base));
      p.drawRoundedRect(core, 3, 3);
      int k = 0;
      for (int cpu : parseCpuList(QString::fromStdString(c.cpus))) {
        const QRect cell(core.left() + kGap + k * (kCell + kGap), core.top() + kGap, kCell, kCell);
        ++k;
        const QList<int> slots = m_slotsOfCpu.value(cpu);
        if (!allowed.count(cpu)) {
          p.setBrush(QBrush(pal.color(QPalette::Mid), Qt::BDiagPattern));
        } else if (slots.isEmpty()) {
          p.setBrush(pal.color(QPalette::Button));
        } else if (slots.size() == 1) {
          p.setBrush(runColor(slots.first()));
        } else {
          // Shared by several slots: the first slot's colour, hatched.
          p.setBrush(QBrush(runColor(slots.first()), Qt::Dense4Pattern));
        }
        p.setPen(m_highlight.contains(cpu) ? QPen(pal.color(QPalette::Highlight), 3)
                                           : QPen(pal.color(QPalette::Dark), 1));
        p.drawRect(cell);
        p.setFont(small);
        p.setPen(slots.size() == 1 ? QColor(Qt::white) : pal.color(QPalette::ButtonText));
        p.drawText(cell, Qt::AlignCenter, QString::number(cpu));
        p.setFont(font());
      }
    }
    y += boxH + kPad;
  }
  if (m_info.nodes.empty()) {
    p.setPen(pal.color(QPalette::WindowText));
    p.drawText(rect(), Qt::AlignCenter, tr("no topology"));
  }
}

// ---- view ---------------------------------------------------------------------------------------

TopologyView::TopologyView(QWidget* parent) : QWidget(parent) {
  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(4, 4, 4, 4);
  auto* controls = new QHBoxLayout;
  controls->addWidget(new QLabel(tr("Binding:"), this));
  m_mode = new QComboBox(this);
  m_mode->addItems({QStringLiteral("none"), QStringLiteral("node"), QStringLiteral("socket"),
                    QStringLiteral("exclusive"), QStringLiteral("core-complex")});
  m_mode->setCurrentText(QStringLiteral("exclusive"));
  controls->addWidget(m_mode);
  controls->addWidget(new QLabel(tr("slots:"), this));
  m_slots = new QSpinBox(this);
  m_slots->setRange(1, 4096);
  m_slots->setValue(2);
  controls->addWidget(m_slots);
  m_fallback = new QCheckBox(tr("fallback"), this);
  m_fallback->setToolTip(tr("A slot that cannot be bound runs unbound with a warning"));
  controls->addWidget(m_fallback);
  controls->addStretch(1);
  layout->addLayout(controls);
  auto* synthRow = new QHBoxLayout;
  synthRow->addWidget(new QLabel(tr("Topology:"), this));
  m_synthetic = new QLineEdit(this);
  m_synthetic->setPlaceholderText(
      tr("this machine — or an hwloc synthetic description, e.g. pack:2 numa:2 l3:2 core:4 pu:2"));
  synthRow->addWidget(m_synthetic, 1);
  layout->addLayout(synthRow);
  m_summary = new QLabel(this);
  m_summary->setWordWrap(true);
  layout->addWidget(m_summary);
  auto* scroll = new QScrollArea(this);
  scroll->setWidgetResizable(true);
  m_map = new TopologyMap(scroll);
  scroll->setWidget(m_map);
  layout->addWidget(scroll, 2);
  m_plan = new QTableWidget(0, 5, this);
  m_plan->setHorizontalHeaderLabels(
      {tr("slot"), tr("node"), tr("CPUs"), tr("numactl"), tr("warning")});
  m_plan->horizontalHeader()->setStretchLastSection(true);
  m_plan->verticalHeader()->setVisible(false);
  m_plan->setEditTriggers(QAbstractItemView::NoEditTriggers);
  layout->addWidget(m_plan, 1);
  m_run = new QLabel(this);
  m_run->setWordWrap(true);
  m_run->setTextInteractionFlags(Qt::TextSelectableByMouse);
  layout->addWidget(m_run);
  connect(m_mode, &QComboBox::currentTextChanged, this, [this] { replan(); });
  connect(m_slots, QOverload<int>::of(&QSpinBox::valueChanged), this, [this] { replan(); });
  connect(m_fallback, &QCheckBox::toggled, this, [this] { replan(); });
  connect(m_synthetic, &QLineEdit::editingFinished, this, [this] { refresh(); });
  refresh();
}

void TopologyView::refresh() {
  api::TopologyRequest req;
  req.synthetic = m_synthetic->text().trimmed().toStdString();
  try {
    const api::TopologyInfo info = api::describe_topology(req);
    m_map->setTopology(info);
    m_summary->setText(
        tr("%1: %2 package(s), %3 NUMA node(s), %4 core(s), %5 CPU(s), %6 allowed (%7)")
            .arg(QString::fromStdString(info.source))
            .arg(info.packages.size())
            .arg(info.nodes.size())
            .arg(info.cores.size())
            .arg(info.n_cpus)
            .arg(info.n_allowed)
            .arg(QString::fromStdString(info.allowed_cpus)));
    m_error.clear();
  } catch (const std::exception& e) {
    m_error = QString::fromUtf8(e.what());
    m_summary->setText(m_error);
    m_map->setTopology({});
  }
  replan();
}

void TopologyView::setPlan(const QString& mode, int slots) {
  m_mode->setCurrentText(mode);
  m_slots->setValue(slots);
  replan();
}

void TopologyView::replan() {
  api::TopologyRequest req;
  req.synthetic = m_synthetic->text().trimmed().toStdString();
  QMap<int, QList<int>> assignment;
  m_plan->setRowCount(0);
  try {
    const api::BindingPlan plan = api::plan_binding(req, m_mode->currentText().toStdString(),
                                                    m_slots->value(), m_fallback->isChecked());
    m_plan->setRowCount(static_cast<int>(plan.slots.size()));
    for (int r = 0; r < static_cast<int>(plan.slots.size()); ++r) {
      const auto& s = plan.slots[static_cast<std::size_t>(r)];
      auto* slot = new QTableWidgetItem(QString::number(s.slot));
      slot->setBackground(runColor(s.slot));
      slot->setForeground(Qt::white);
      m_plan->setItem(r, 0, slot);
      m_plan->setItem(
          r, 1, new QTableWidgetItem(s.node >= 0 ? QString::number(s.node) : QStringLiteral("–")));
      m_plan->setItem(
          r, 2, new QTableWidgetItem(s.bound ? QString::fromStdString(s.cpus) : tr("unbound")));
      m_plan->setItem(r, 3, new QTableWidgetItem(QString::fromStdString(s.numactl)));
      m_plan->setItem(r, 4, new QTableWidgetItem(QString::fromStdString(s.warning)));
      if (s.bound)
        for (int cpu : parseCpuList(QString::fromStdString(s.cpus)))
          assignment[cpu].append(s.slot);
    }
    m_plan->resizeColumnsToContents();
    if (m_error.isEmpty()) m_plan->setToolTip(QString::fromStdString(plan.slot_rule));
  } catch (const std::exception& e) {
    m_plan->setRowCount(1);
    m_plan->setItem(0, 4, new QTableWidgetItem(QString::fromUtf8(e.what())));
    m_plan->resizeColumnsToContents();
  }
  m_map->setAssignment(assignment);
}

void TopologyView::setRunBinding(const QString& title, const QStringList& eventLines) {
  QStringList relevant;
  QList<int> cpus;
  static const QRegularExpression bound(QStringLiteral("bound to CPUs ([0-9,\\-]+)"));
  for (const QString& line : eventLines) {
    if (line.contains(QLatin1String("bound to CPUs")) ||
        line.contains(QLatin1String("memory placement")) ||
        line.contains(QLatin1String("binding failed")))
      relevant << line;
    const auto m = bound.match(line);
    if (m.hasMatch()) cpus = parseCpuList(m.captured(1));
  }
  m_map->setHighlight(cpus);
  m_run->setText(relevant.isEmpty()
                     ? tr("%1: not bound (binding.mode = none)").arg(title)
                     : title + QStringLiteral(":\n") + relevant.join(QLatin1Char('\n')));
}

}  // namespace tb::ui
