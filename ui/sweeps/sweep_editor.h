// SweepEditor: the [sweep] of the config being edited, as a form — the swept keys with their
// values or ranges, method, trials, seeds, metric and goal, early stopping, and how many trials
// run at a time in which CPU slots — checked against the config as it is typed (the trials it
// plans, or the error naming the key), and started as `trainbench-cli sweep`.
#pragma once

#include <QString>
#include <QStringList>
#include <QWidget>

#include <functional>

class QComboBox;
class QDoubleSpinBox;
class QLabel;
class QLineEdit;
class QPushButton;
class QSpinBox;
class QTableWidget;

namespace tb::ui {

/// What "Run sweep" asks for: the config with its [sweep] table and the launch settings.
struct SweepLaunch {
  QString name;      ///< sweep.name
  QString toml;      ///< run config + [sweep]
  int parallel = 1;  ///< trials at a time
  QString binding;   ///< none, node, socket, exclusive, core-complex
};

/// The sweep form.
class SweepEditor : public QWidget {
  Q_OBJECT

 public:
  /// `runConfig` gives the run config the sweep varies (the config editor's text).
  explicit SweepEditor(std::function<QString()> runConfig, QWidget* parent = nullptr);

  /// Sets the sweep name.
  void setName(const QString& name);
  /// Adds a swept key: `values` a comma-separated list ("muon, adamw", "0.01, 0.02"), or, with
  /// `distribution` uniform / log_uniform / int_uniform, `min` and `max` (random method only).
  void addParameter(const QString& key, const QString& values,
                    const QString& distribution = QStringLiteral("values"), double min = 0,
                    double max = 0);
  /// Removes every swept key.
  void clearParameters();
  /// Sets method ("grid"/"random"), trials, seeds ("1, 2"), metric and goal.
  void setPlan(const QString& method, int trials, const QString& seeds, const QString& metric,
               const QString& goal);
  /// Sets early stopping: method ("none", "successive_halving", "median"), rung steps ("200,
  /// 400") and reduction factor.
  void setEarlyStopping(const QString& method, const QString& steps, double factor = 2);
  /// Sets the trials at a time and the binding.
  void setSlots(int parallel, const QString& binding);

  /// The [sweep] table the form says, as TOML.
  QString sweepToml() const;
  /// Checks the run config with the sweep now: the number of trials, or -1 and errorText().
  int check();
  /// The last check's error ("" when it planned).
  QString errorText() const { return m_error; }
  /// The parameters table (key, distribution, values, min, max).
  QTableWidget* parameters() const { return m_params; }

 signals:
  /// "Run sweep" with a config that checks.
  void runRequested(const SweepLaunch& launch);

 private:
  int addRow();

  std::function<QString()> m_runConfig;
  QLineEdit* m_name = nullptr;
  QComboBox* m_method = nullptr;
  QSpinBox* m_trials = nullptr;
  QLineEdit* m_seeds = nullptr;
  QComboBox* m_metric = nullptr;
  QComboBox* m_goal = nullptr;
  QTableWidget* m_params = nullptr;
  QComboBox* m_stopping = nullptr;
  QLineEdit* m_rungs = nullptr;
  QDoubleSpinBox* m_factor = nullptr;
  QSpinBox* m_parallel = nullptr;
  QComboBox* m_binding = nullptr;
  QLabel* m_status = nullptr;
  QPushButton* m_run = nullptr;
  QString m_error;
};

}  // namespace tb::ui
