// TopologyView: the machine as the binding strategies see it — packages, NUMA nodes, physical
// cores and their logical CPUs (disallowed ones greyed) — with the CPUs each slot would get for a
// strategy and a number of slots coloured per slot before a run starts, the plan as a table (with
// the equivalent numactl line), and the CPUs and memory placement a selected run recorded.
#pragma once

#include <QList>
#include <QMap>
#include <QString>
#include <QWidget>

// engine/api names a field `slots`, which is also a Qt keyword macro: read it without the macro.
#pragma push_macro("slots")
#undef slots
#include "engine/api/topology_api.h"
#pragma pop_macro("slots")

class QCheckBox;
class QComboBox;
class QLabel;
class QLineEdit;
class QSpinBox;
class QTableWidget;

namespace tb::ui {

/// Parses a CPU list ("0-3,8,10-11") into indices; malformed parts are skipped.
QList<int> parseCpuList(const QString& text);

/// The painted map of packages, nodes, cores and CPUs.
class TopologyMap : public QWidget {
  Q_OBJECT

 public:
  explicit TopologyMap(QWidget* parent = nullptr);
  /// The topology to draw.
  void setTopology(const api::TopologyInfo& info);
  /// CPU -> slots that get it (colours); empty = no plan.
  void setAssignment(const QMap<int, QList<int>>& slotsOfCpu);
  /// CPUs to outline (what a run actually used).
  void setHighlight(const QList<int>& cpus);
  QSize sizeHint() const override;
  /// Slots drawn on CPU `cpu` (tests).
  QList<int> slotsOf(int cpu) const { return m_slotsOfCpu.value(cpu); }

 protected:
  void paintEvent(QPaintEvent* event) override;

 private:
  api::TopologyInfo m_info;
  QMap<int, QList<int>> m_slotsOfCpu;
  QList<int> m_highlight;
};

/// The topology dock.
class TopologyView : public QWidget {
  Q_OBJECT

 public:
  explicit TopologyView(QWidget* parent = nullptr);
  /// Re-reads the topology and re-plans.
  void refresh();
  /// Sets the strategy and slots (as the controls do).
  void setPlan(const QString& mode, int slots);
  /// Shows what run `title` recorded (its events' binding and placement lines).
  void setRunBinding(const QString& title, const QStringList& eventLines);
  /// The map (tests).
  TopologyMap* map() const { return m_map; }
  /// The plan table (tests).
  QTableWidget* planTable() const { return m_plan; }
  /// The last error ("" when fine).
  QString errorText() const { return m_error; }

 private:
  void replan();

  TopologyMap* m_map = nullptr;
  QComboBox* m_mode = nullptr;
  QSpinBox* m_slots = nullptr;
  QLineEdit* m_synthetic = nullptr;
  QCheckBox* m_fallback = nullptr;
  QTableWidget* m_plan = nullptr;
  QLabel* m_summary = nullptr;
  QLabel* m_run = nullptr;
  QString m_error;
};

}  // namespace tb::ui
