// The topology view: a synthetic two-socket machine, the CPUs each slot gets for a strategy
// (drawn per slot and listed with the numactl line, equal to the engine's plan), and the CPUs a
// run recorded highlighted.
#include <QtTest>

#include <QLabel>
#include <QLineEdit>
#include <QTableWidget>

#include "ui/topology/topology_view.h"

using namespace tb;

// plan.slots below is engine/api's field, not Qt's keyword macro.
#undef slots

class TestTopology : public QObject {
  Q_OBJECT

 private Q_SLOTS:
  void cpuLists() {
    QCOMPARE(ui::parseCpuList(QStringLiteral("0-2,8,10-11")), (QList<int>{0, 1, 2, 8, 10, 11}));
    QCOMPARE(ui::parseCpuList(QStringLiteral("")), QList<int>{});
    QCOMPARE(ui::parseCpuList(QStringLiteral("3-1,x,5")), QList<int>{5});
  }

  void planOfASyntheticMachineIsDrawnPerSlot() {
    ui::TopologyView view;
    auto* synth = view.findChild<QLineEdit*>();
    QVERIFY(synth);
    const QString desc = QStringLiteral("pack:2 numa:2 l3:2 core:4 pu:2");
    synth->setText(desc);
    view.refresh();
    QVERIFY2(view.errorText().isEmpty(), qPrintable(view.errorText()));
    view.setPlan(QStringLiteral("exclusive"), 4);
    api::TopologyRequest req;
    req.synthetic = desc.toStdString();
    const api::BindingPlan plan = api::plan_binding(req, "exclusive", 4, false);
    QCOMPARE(view.planTable()->rowCount(), 4);
    for (const auto& s : plan.slots) {
      QCOMPARE(view.planTable()->item(s.slot, 2)->text(), QString::fromStdString(s.cpus));
      QVERIFY(view.planTable()->item(s.slot, 3)->text().startsWith(
          QLatin1String("numactl --physcpubind=")));
      for (int cpu : ui::parseCpuList(QString::fromStdString(s.cpus)))
        QCOMPARE(view.map()->slotsOf(cpu), QList<int>{s.slot});
    }
    // node: slots share their node's CPUs.
    view.setPlan(QStringLiteral("node"), 8);
    QVERIFY(view.map()->slotsOf(0).size() >= 2);
    // An impossible plan shows the engine's message instead of a table.
    view.setPlan(QStringLiteral("exclusive"), 4096);
    QVERIFY(view.planTable()->item(0, 4)->text().contains(QLatin1String("[binding]")));
  }

  void aRunsRecordedBindingIsHighlighted() {
    ui::TopologyView view;
    view.setRunBinding(QStringLiteral("run 3"),
                       {QStringLiteral("info: bound to CPUs 1 (slot 1, node 0, mode exclusive)"),
                        QStringLiteral("info: memory placement after step 1: node 0 100.0%")});
    const QLabel* label = nullptr;
    for (auto* l : view.findChildren<QLabel*>())
      if (l->text().startsWith(QLatin1String("run 3:"))) label = l;
    QVERIFY(label);
    QVERIFY(label->text().contains(QLatin1String("memory placement")));
  }
};

QTEST_MAIN(TestTopology)
#include "tst_topology.moc"
