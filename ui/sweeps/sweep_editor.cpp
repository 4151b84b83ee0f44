// SweepEditor (see sweep_editor.h).
#include "ui/sweeps/sweep_editor.h"

#include <QComboBox>
#include <QDoubleSpinBox>
#include <QGridLayout>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QLineEdit>
#include <QPushButton>
#include <QRegularExpression>
#include <QSignalBlocker>
#include <QSpinBox>
#include <QTableWidget>
#include <QVBoxLayout>

#include <cmath>
#include <exception>

#include "engine/api/sweep_api.h"

namespace tb::ui {
namespace {

// A factor as the config writes it ("2", "1.5"), not "2.00".
class FactorSpinBox : public QDoubleSpinBox {
 public:
  using QDoubleSpinBox::QDoubleSpinBox;

 protected:
  QString textFromValue(double value) const override { return QString::number(value, 'g', 6); }
};

enum ParamColumn { Key, Distribution, Values, Min, Max, ParamColumns };

QString quoted(const QString& s) {
  QString out = s;
  out.replace(QLatin1Char('\\'), QStringLiteral("\\\\"))
      .replace(QLatin1Char('"'), QStringLiteral("\\\""));
  return QLatin1Char('"') + out + QLatin1Char('"');
}

// One value as the user typed it, as TOML: numbers and booleans as they are, strings quoted.
QString tomlValue(const QString& raw) {
  const QString t = raw.trimmed();
  if (t == QLatin1String("true") || t == QLatin1String("false")) return t;
  if (t.size() >= 2 && t.startsWith(QLatin1Char('"')) && t.endsWith(QLatin1Char('"'))) return t;
  bool ok = false;
  const qlonglong i = t.toLongLong(&ok);
  if (ok) return QString::number(i);
  const double d = t.toDouble(&ok);
  if (ok && std::isfinite(d)) {
    QString s = QString::number(d, 'g', 17);
    if (!s.contains(QLatin1Char('.')) && !s.contains(QLatin1Char('e'))) s += QStringLiteral(".0");
    return s;
  }
  return quoted(t);
}

QString number(double v) {
  QString s = QString::number(v, 'g', 17);
  if (!s.contains(QLatin1Char('.')) && !s.contains(QLatin1Char('e'))) s += QStringLiteral(".0");
  return s;
}

QString cellText(const QTableWidget* t, int row, int col) {
  const auto* item = t->item(row, col);
  return item ? item->text().trimmed() : QString();
}

}  // namespace

SweepEditor::SweepEditor(std::function<QString()> runConfig, QWidget* parent)
    : QWidget(parent), m_runConfig(std::move(runConfig)) {
  auto* form = new QGridLayout;
  m_name = new QLineEdit(QStringLiteral("sweep"), this);
  m_name->setToolTip(tr("Unique in the store; runs are named NAME pPOINT sSEED"));
  m_method = new QComboBox(this);
  m_method->addItems({QStringLiteral("grid"), QStringLiteral("random")});
  m_trials = new QSpinBox(this);
  m_trials->setRange(1, 100000);
  m_trials->setValue(16);
  m_trials->setToolTip(tr("random: points drawn"));
  m_seeds = new QLineEdit(QStringLiteral("1, 2"), this);
  m_seeds->setToolTip(tr("run.seed of each point's replicates (empty: the config's seed)"));
  m_metric = new QComboBox(this);
  m_metric->setEditable(true);
  m_metric->addItems({QStringLiteral("eval.loss"), QStringLiteral("eval.accuracy"),
                      QStringLiteral("eval.perplexity"), QStringLiteral("loss")});
  m_goal = new QComboBox(this);
  m_goal->addItems({QStringLiteral("min"), QStringLiteral("max")});
  connect(m_metric, &QComboBox::currentTextChanged, this, [this](const QString& m) {
    m_goal->setCurrentText(m.contains(QLatin1String("accuracy")) ? QStringLiteral("max")
                                                                 : QStringLiteral("min"));
  });
  // Two fields a row: the parameters table below gets the height.
  form->addWidget(new QLabel(tr("name"), this), 0, 0);
  form->addWidget(m_name, 0, 1, 1, 3);
  form->addWidget(new QLabel(tr("method"), this), 1, 0);
  form->addWidget(m_method, 1, 1);
  form->addWidget(new QLabel(tr("trials"), this), 1, 2);
  form->addWidget(m_trials, 1, 3);
  form->addWidget(new QLabel(tr("metric"), this), 2, 0);
  form->addWidget(m_metric, 2, 1);
  form->addWidget(new QLabel(tr("goal"), this), 2, 2);
  form->addWidget(m_goal, 2, 3);
  form->addWidget(new QLabel(tr("seeds"), this), 3, 0);
  form->addWidget(m_seeds, 3, 1, 1, 3);
  form->setColumnStretch(1, 1);
  form->setColumnStretch(3, 1);

  m_params = new QTableWidget(0, ParamColumns, this);
  // "values" alone: "values, comma-separated" was cut to "ues, comma-separa" at the dock's
  // default width; how to write them is in the column's tooltip.
  m_params->setHorizontalHeaderLabels(
      {tr("key"), tr("distribution"), tr("values"), tr("min"), tr("max")});
  m_params->horizontalHeaderItem(Values)->setToolTip(
      tr("The values to try, comma-separated (0.01, 0.02 or muon, adamw); the random method "
         "draws from them, or from min..max with a distribution"));
  m_params->verticalHeader()->setVisible(false);
  m_params->horizontalHeader()->setSectionResizeMode(Values, QHeaderView::Stretch);
  m_params->setColumnWidth(Key, 125);
  m_params->setColumnWidth(Distribution, 95);
  m_params->setColumnWidth(Min, 42);
  m_params->setColumnWidth(Max, 42);
  // As tall as its keys (three at least), so that its empty rows do not push "Run sweep" out of
  // view; the page scrolls in its tab when the dock is shorter than the form.
  m_params->setSizeAdjustPolicy(QAbstractScrollArea::AdjustToContents);
  m_params->setMinimumHeight(m_params->horizontalHeader()->sizeHint().height() +
                             3 * m_params->verticalHeader()->defaultSectionSize() +
                             2 * m_params->frameWidth());
  m_params->setToolTip(
      tr("Any config key (optimizer.kind, optimizer.muon.lr, model.hidden...): "
         "a list of values, or a range for the random method"));
  auto* paramButtons = new QHBoxLayout;
  auto* add = new QPushButton(tr("Add key"), this);
  auto* remove = new QPushButton(tr("Remove key"), this);
  auto* preset = new QPushButton(tr("Muon vs AdamW × LR"), this);
  preset->setToolTip(
      tr("optimizer.kind = muon, adamw; optimizer.muon.lr and optimizer.lr at "
         "three rates each"));
  paramButtons->addWidget(add);
  paramButtons->addWidget(remove);
  paramButtons->addWidget(preset);
  paramButtons->addStretch(1);

  auto* stopping = new QHBoxLayout;
  m_stopping = new QComboBox(this);
  m_stopping->addItems(
      {QStringLiteral("none"), QStringLiteral("successive_halving"), QStringLiteral("median")});
  m_rungs = new QLineEdit(this);
  m_rungs->setPlaceholderText(tr("steps, e.g. 200, 400"));
  m_factor = new FactorSpinBox(this);
  m_factor->setRange(1.01, 100);
  m_factor->setValue(2);
  m_factor->setToolTip(tr("successive_halving: keep the best 1/factor of the points at each rung"));
  stopping->addWidget(new QLabel(tr("early stopping"), this));
  stopping->addWidget(m_stopping);
  stopping->addWidget(new QLabel(tr("at"), this));
  stopping->addWidget(m_rungs, 1);
  stopping->addWidget(new QLabel(tr("factor"), this));
  stopping->addWidget(m_factor);

  auto* launch = new QHBoxLayout;
  m_parallel = new QSpinBox(this);
  m_parallel->setRange(1, 1024);
  m_parallel->setToolTip(tr("Trials at a time, each a process in its own CPU slot"));
  m_binding = new QComboBox(this);
  m_binding->addItems({QStringLiteral("exclusive"), QStringLiteral("node"),
                       QStringLiteral("socket"), QStringLiteral("core-complex"),
                       QStringLiteral("none")});
  m_run = new QPushButton(tr("Run sweep"), this);
  m_run->setObjectName(QStringLiteral("runSweepButton"));
  launch->addWidget(new QLabel(tr("at a time:"), this));
  launch->addWidget(m_parallel);
  launch->addWidget(new QLabel(tr("binding:"), this));
  launch->addWidget(m_binding);
  launch->addStretch(1);
  launch->addWidget(m_run);

  m_status = new QLabel(this);
  m_status->setObjectName(QStringLiteral("sweepStatus"));
  m_status->setWordWrap(true);
  m_status->setTextInteractionFlags(Qt::TextSelectableByMouse);

  auto* layout = new QVBoxLayout(this);
  layout->addLayout(form);
  layout->addWidget(m_params, 1);
  layout->addLayout(paramButtons);
  layout->addLayout(stopping);
  layout->addLayout(launch);
  layout->addWidget(m_status);

  connect(add, &QPushButton::clicked, this, [this] { addRow(); });
  connect(remove, &QPushButton::clicked, this, [this] {
    const int r = m_params->currentRow();
    m_params->removeRow(r >= 0 ? r : m_params->rowCount() - 1);
    check();
  });
  connect(preset, &QPushButton::clicked, this, [this] {
    clearParameters();
    addParameter(QStringLiteral("optimizer.kind"), QStringLiteral("muon, adamw"));
    addParameter(QStringLiteral("optimizer.muon.lr"), QStringLiteral("0.01, 0.02, 0.05"));
    addParameter(QStringLiteral("optimizer.lr"), QStringLiteral("3e-4, 1e-3, 3e-3"));
  });
  connect(m_params, &QTableWidget::itemChanged, this, [this] { check(); });
  for (QLineEdit* e : {m_name, m_seeds, m_rungs})
    connect(e, &QLineEdit::textChanged, this, [this] { check(); });
  for (QComboBox* c : {m_method, m_metric, m_goal, m_stopping})
    connect(c, &QComboBox::currentTextChanged, this, [this] { check(); });
  connect(m_trials, &QSpinBox::valueChanged, this, [this] { check(); });
  connect(m_factor, &QDoubleSpinBox::valueChanged, this, [this] { check(); });
  connect(m_run, &QPushButton::clicked, this, [this] {
    if (check() < 0) return;
    emit runRequested({m_name->text().trimmed(), m_runConfig() + QStringLiteral("\n") + sweepToml(),
                       m_parallel->value(), m_binding->currentText()});
  });
  check();
}

int SweepEditor::addRow() {
  const int r = m_params->rowCount();
  m_params->insertRow(r);
  auto* dist = new QComboBox(m_params);
  dist->addItems({QStringLiteral("values"), QStringLiteral("uniform"),
                  QStringLiteral("log_uniform"), QStringLiteral("int_uniform")});
  m_params->setCellWidget(r, Distribution, dist);
  connect(dist, &QComboBox::currentTextChanged, this, [this] { check(); });
  return r;
}

void SweepEditor::setName(const QString& name) {
  m_name->setText(name);
}

void SweepEditor::addParameter(const QString& key, const QString& values,
                               const QString& distribution, double min, double max) {
  const QSignalBlocker block(m_params);
  const int r = addRow();
  m_params->setItem(r, Key, new QTableWidgetItem(key));
  m_params->setItem(r, Values, new QTableWidgetItem(values));
  m_params->setItem(r, Min,
                    new QTableWidgetItem(distribution == "values" ? QString() : number(min)));
  m_params->setItem(r, Max,
                    new QTableWidgetItem(distribution == "values" ? QString() : number(max)));
  if (auto* dist = qobject_cast<QComboBox*>(m_params->cellWidget(r, Distribution))) {
    const QSignalBlocker blockDist(dist);
    dist->setCurrentText(distribution);
  }
  check();
}

void SweepEditor::clearParameters() {
  m_params->setRowCount(0);
  check();
}

void SweepEditor::setPlan(const QString& method, int trials, const QString& seeds,
                          const QString& metric, const QString& goal) {
  m_method->setCurrentText(method);
  m_trials->setValue(trials);
  m_seeds->setText(seeds);
  m_metric->setCurrentText(metric);
  m_goal->setCurrentText(goal);
}

void SweepEditor::setEarlyStopping(const QString& method, const QString& steps, double factor) {
  m_stopping->setCurrentText(method);
  m_rungs->setText(steps);
  m_factor->setValue(factor);
}

void SweepEditor::setSlots(int parallel, const QString& binding) {
  m_parallel->setValue(parallel);
  m_binding->setCurrentText(binding);
}

QString SweepEditor::sweepToml() const {
  QString t = QStringLiteral("[sweep]\nname = %1\nmethod = %2\n")
                  .arg(quoted(m_name->text().trimmed()), quoted(m_method->currentText()));
  if (m_method->currentText() == QLatin1String("random"))
    t += QStringLiteral("trials = %1\n").arg(m_trials->value());
  const QStringList seeds =
      m_seeds->text().split(QRegularExpression(QStringLiteral("[,\\s]+")), Qt::SkipEmptyParts);
  if (!seeds.isEmpty()) t += QStringLiteral("seeds = [%1]\n").arg(seeds.join(QStringLiteral(", ")));
  t += QStringLiteral("metric = %1\ngoal = %2\n")
           .arg(quoted(m_metric->currentText().trimmed()), quoted(m_goal->currentText()));
  t += QStringLiteral("\n[sweep.parameters]\n");
  for (int r = 0; r < m_params->rowCount(); ++r) {
    const QString key = cellText(m_params, r, Key);
    if (key.isEmpty()) continue;
    const auto* dist = qobject_cast<QComboBox*>(m_params->cellWidget(r, Distribution));
    const QString d = dist ? dist->currentText() : QStringLiteral("values");
    if (d == QLatin1String("values")) {
      QStringList values;
      for (const QString& v :
           cellText(m_params, r, Values).split(QLatin1Char(','), Qt::SkipEmptyParts))
        values << tomlValue(v);
      t += QStringLiteral("%1 = [%2]\n").arg(quoted(key), values.join(QStringLiteral(", ")));
    } else {
      t += QStringLiteral("%1 = { distribution = %2, min = %3, max = %4 }\n")
               .arg(quoted(key), quoted(d), tomlValue(cellText(m_params, r, Min)),
                    tomlValue(cellText(m_params, r, Max)));
    }
  }
  if (m_stopping->currentText() != QLatin1String("none")) {
    const QStringList rungs =
        m_rungs->text().split(QRegularExpression(QStringLiteral("[,\\s]+")), Qt::SkipEmptyParts);
    t += QStringLiteral("\n[sweep.early_stopping]\nmethod = %1\nsteps = [%2]\n")
             .arg(quoted(m_stopping->currentText()), rungs.join(QStringLiteral(", ")));
    if (m_stopping->currentText() == QLatin1String("successive_halving"))
      t += QStringLiteral("reduction_factor = %1\n").arg(number(m_factor->value()));
  }
  return t;
}

int SweepEditor::check() {
  m_trials->setEnabled(m_method->currentText() == QLatin1String("random"));
  const bool stopping = m_stopping->currentText() != QLatin1String("none");
  m_rungs->setEnabled(stopping);
  m_factor->setEnabled(m_stopping->currentText() == QLatin1String("successive_halving"));
  // No key to vary yet (a fresh page): what to do, not an error in red before anything was done.
  bool anyKey = false;
  for (int r = 0; r < m_params->rowCount() && !anyKey; ++r)
    anyKey = !cellText(m_params, r, Key).isEmpty();
  if (!anyKey) {
    m_error = tr("[sweep] no key to vary yet");
    m_status->setStyleSheet(QString());
    m_status->setText(tr("Add a key to vary (Add key), or Muon vs AdamW × LR for an example."));
    m_run->setEnabled(false);
    return -1;
  }
  try {
    const auto plan = api::preview_sweep_text(
        (m_runConfig() + QStringLiteral("\n") + sweepToml()).toStdString(), "sweep editor");
    m_error.clear();
    m_status->setStyleSheet(QString());
    m_status->setText(tr("%1 trials: %2 points × %3 seeds")
                          .arg(plan.trials.size())
                          .arg(plan.points.size())
                          .arg(plan.points.empty() ? 0 : plan.trials.size() / plan.points.size()));
    m_run->setEnabled(true);
    return static_cast<int>(plan.trials.size());
  } catch (const std::exception& e) {
    m_error = QString::fromUtf8(e.what());
    m_status->setStyleSheet(QStringLiteral("color: #b00020"));
    m_status->setText(m_error);
    m_run->setEnabled(false);
    return -1;
  }
}

}  // namespace tb::ui
