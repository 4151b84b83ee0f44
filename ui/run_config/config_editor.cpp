#include "ui/run_config/config_editor.h"

#include <QCheckBox>
#include <QComboBox>
#include <QFormLayout>
#include <QGroupBox>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QLineEdit>
#include <QPlainTextEdit>
#include <QPushButton>
#include <QScrollArea>
#include <QScrollBar>
#include <QSpinBox>
#include <QSplitter>
#include <QTabWidget>
#include <QTableWidget>
#include <QVBoxLayout>

#include <algorithm>
#include <exception>

#include "ui/common/vertical_scroll_area.h"
#include "ui/live_plots/metric_plot.h"
#include "ui/live_plots/plots_panel.h"
#include "ui/run_config/device_combo.h"

namespace tb::ui {

namespace {

QString quoteToml(const QString& s) {
  QString out = QStringLiteral("\"");
  for (QChar c : s) {
    if (c == QLatin1Char('"') || c == QLatin1Char('\\')) {
      out += QLatin1Char('\\');
      out += c;
    } else if (c == QLatin1Char('\n')) {
      out += QStringLiteral("\\n");
    } else if (c == QLatin1Char('\t')) {
      out += QStringLiteral("\\t");
    } else {
      out += c;
    }
  }
  return out + QLatin1Char('"');
}

// A string value's text without its TOML quotes and escapes.
QString unquoteToml(const QString& literal) {
  if (literal.size() < 2 || !literal.startsWith(QLatin1Char('"'))) return literal;
  QString out;
  for (int i = 1; i + 1 < literal.size(); ++i) {
    QChar c = literal[i];
    if (c == QLatin1Char('\\') && i + 2 < literal.size()) {
      const QChar n = literal[++i];
      out += n == QLatin1Char('n')   ? QLatin1Char('\n')
             : n == QLatin1Char('t') ? QLatin1Char('\t')
                                     : n;
    } else {
      out += c;
    }
  }
  return out;
}

// Fields a scheduler kind needs to be valid, sized for `steps` steps and a base LR `lr`.
QString schedulerTemplate(const QString& kind, qint64 steps, double lr) {
  const qint64 n = std::max<qint64>(steps, 10);
  const QString lrs = QString::number(lr, 'g', 6);
  if (kind == QLatin1String("step"))
    return QStringLiteral("step_size = %1\ngamma = 0.1\n").arg(n / 3);
  if (kind == QLatin1String("multistep"))
    return QStringLiteral("milestones = [%1, %2]\ngamma = 0.1\n").arg(n / 2).arg(3 * n / 4);
  if (kind == QLatin1String("exponential")) return QStringLiteral("gamma = 0.99\n");
  if (kind == QLatin1String("cosine")) return QStringLiteral("T_max = %1\neta_min = 0.0\n").arg(n);
  if (kind == QLatin1String("cosine_warm_restarts"))
    return QStringLiteral("T_0 = %1\nT_mult = 1\n").arg(std::max<qint64>(1, n / 4));
  if (kind == QLatin1String("cyclic"))
    return QStringLiteral("base_lr = %1\nmax_lr = %2\nstep_size_up = %3\n")
        .arg(QString::number(lr / 10, 'g', 6), lrs)
        .arg(std::max<qint64>(1, n / 4));
  if (kind == QLatin1String("one_cycle"))
    return QStringLiteral("max_lr = %1\ntotal_steps = %2\n").arg(lrs).arg(n);
  if (kind == QLatin1String("lambda") || kind == QLatin1String("multiplicative"))
    return QStringLiteral("lr_lambda = \"1.0\"\n");
  if (kind == QLatin1String("sequential")) {
    const qint64 warm = std::max<qint64>(1, n / 10);
    return QStringLiteral(
               "milestones = [%1]\nschedulers = [{ kind = \"linear\", start_factor = 0.1, "
               "total_iters = %1 }, { kind = \"cosine\", T_max = %2 }]\n")
        .arg(warm)
        .arg(n - warm);
  }
  if (kind == QLatin1String("chained"))
    return QStringLiteral("schedulers = [{ kind = \"exponential\", gamma = 0.99 }]\n");
  if (kind == QLatin1String("swa")) return QStringLiteral("swa_lr = %1\n").arg(lrs);
  return {};
}

const QStringList kSchedulerKinds = {QStringLiteral("none"),
                                     QStringLiteral("step"),
                                     QStringLiteral("multistep"),
                                     QStringLiteral("constant"),
                                     QStringLiteral("linear"),
                                     QStringLiteral("exponential"),
                                     QStringLiteral("polynomial"),
                                     QStringLiteral("cosine"),
                                     QStringLiteral("cosine_warm_restarts"),
                                     QStringLiteral("cyclic"),
                                     QStringLiteral("one_cycle"),
                                     QStringLiteral("lambda"),
                                     QStringLiteral("multiplicative"),
                                     QStringLiteral("sequential"),
                                     QStringLiteral("chained"),
                                     QStringLiteral("plateau"),
                                     QStringLiteral("swa")};

}  // namespace

ConfigEditor::ConfigEditor(QWidget* parent) : QWidget(parent) {
  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(4, 4, 4, 4);
  m_status = new QLabel(this);
  m_status->setObjectName(QStringLiteral("configStatus"));
  m_status->setWordWrap(true);
  m_status->setTextInteractionFlags(Qt::TextSelectableByMouse);
  layout->addWidget(m_status);

  auto* splitter = new QSplitter(Qt::Vertical, this);
  m_tabs = new QTabWidget(splitter);
  auto* scroll = new QScrollArea(m_tabs);
  scroll->setWidgetResizable(true);
  m_formHost = new QWidget(scroll);
  m_formLayout = new QVBoxLayout(m_formHost);
  m_formLayout->setContentsMargins(2, 2, 2, 2);
  scroll->setWidget(m_formHost);
  m_tabs->addTab(scroll, tr("Form"));

  auto* tomlPage = new QWidget(m_tabs);
  auto* tomlLayout = new QVBoxLayout(tomlPage);
  m_toml = new QPlainTextEdit(tomlPage);
  m_toml->setObjectName(QStringLiteral("tomlText"));
  QFont mono(QStringLiteral("monospace"));
  mono.setStyleHint(QFont::Monospace);
  m_toml->setFont(mono);
  tomlLayout->addWidget(m_toml);
  auto* apply = new QPushButton(tr("Apply TOML to the form"), tomlPage);
  tomlLayout->addWidget(apply);
  connect(apply, &QPushButton::clicked, this, [this] { setToml(m_toml->toPlainText(), m_source); });
  m_tabs->addTab(tomlPage, tr("TOML"));

  m_split = new QTableWidget(0, 5, m_tabs);
  m_split->setObjectName(QStringLiteral("splitTable"));
  m_split->setHorizontalHeaderLabels(
      {tr("parameter"), tr("shape"), tr("elements"), tr("optimizer"), tr("why")});
  m_split->horizontalHeader()->setStretchLastSection(true);
  m_split->verticalHeader()->setVisible(false);
  m_split->setEditTriggers(QAbstractItemView::NoEditTriggers);
  m_tabs->addTab(m_split, tr("Parameters"));

  auto* previewBox = new QWidget(splitter);
  auto* previewLayout = new QVBoxLayout(previewBox);
  previewLayout->setContentsMargins(0, 0, 0, 0);
  auto* stepsRow = new QHBoxLayout;
  stepsRow->addWidget(new QLabel(tr("LR preview steps (0 = the run's):"), previewBox));
  m_previewSteps = new QSpinBox(previewBox);
  m_previewSteps->setRange(0, 10'000'000);
  m_previewSteps->setValue(0);
  stepsRow->addWidget(m_previewSteps);
  stepsRow->addStretch(1);
  previewLayout->addLayout(stepsRow);
  m_preview = new MetricPlot(tr("LR schedule preview"), tr("lr"), previewBox);
  m_preview->setSmoothing(0.0);
  previewLayout->addWidget(m_preview, 1);
  splitter->addWidget(m_tabs);
  splitter->addWidget(previewBox);
  splitter->setStretchFactor(0, 3);
  splitter->setStretchFactor(1, 1);
  layout->addWidget(splitter, 1);
  connect(m_previewSteps, QOverload<int>::of(&QSpinBox::valueChanged), this,
          [this] { validateNow(); });

  m_validateTimer.setSingleShot(true);
  m_validateTimer.setInterval(250);
  connect(&m_validateTimer, &QTimer::timeout, this, [this] { validateNow(); });

  setToml(QString::fromStdString(api::default_config_toml()));
}

void ConfigEditor::buildForm(const std::vector<api::ConfigField>& fields) {
  // Tear down the old form.
  // Old widgets go later (one of them may be emitting the signal that got us here); until then
  // they are hidden and nameless so nothing finds them.
  while (QLayoutItem* item = m_formLayout->takeAt(0)) {
    if (QWidget* w = item->widget()) {
      w->hide();
      for (QWidget* child : w->findChildren<QWidget*>())
        child->setObjectName(QString());
      w->deleteLater();
    }
    delete item;
  }
  m_fields.clear();
  QMap<QString, QFormLayout*> sections;
  QStringList order;
  for (const auto& f : fields) {
    const QString section = f.section.empty() ? tr("general") : QString::fromStdString(f.section);
    if (!sections.contains(section)) {
      auto* box = new QGroupBox(section, m_formHost);
      auto* form = new QFormLayout(box);
      form->setFieldGrowthPolicy(QFormLayout::AllNonFixedFieldsGrow);
      sections[section] = form;
      order << section;
      m_formLayout->addWidget(box);
    }
    QFormLayout* form = sections[section];
    Field field;
    field.spec = f;
    const QString key = QString::fromStdString(f.key);
    const QString value = QString::fromStdString(f.value_toml);
    QWidget* w = nullptr;
    std::vector<std::string> choices = f.choices;
    if (key == QLatin1String("scheduler.kind") && choices.empty()) {
      for (const auto& k : kSchedulerKinds)
        choices.push_back(k.toStdString());
    }
    if (f.type == "bool") {
      auto* cb = new QCheckBox(m_formHost);
      cb->setChecked(value == QLatin1String("true"));
      connect(cb, &QCheckBox::toggled, this, [this, key] { onFieldEdited(key); });
      w = cb;
    } else if (key == QLatin1String("run.device")) {
      auto* combo = new DeviceCombo(unquoteToml(value), m_formHost);
      connect(combo, &QComboBox::currentTextChanged, this, [this, key] { onFieldEdited(key); });
      w = combo;
    } else if (!choices.empty()) {
      auto* combo = new QComboBox(m_formHost);
      for (const auto& c : choices)
        combo->addItem(QString::fromStdString(c));
      const QString current = unquoteToml(value);
      if (combo->findText(current) < 0) combo->addItem(current);
      combo->setCurrentText(current);
      connect(combo, &QComboBox::currentTextChanged, this, [this, key] {
        if (key == QLatin1String("model.kind") || key == QLatin1String("optimizer.kind") ||
            key == QLatin1String("scheduler.kind"))
          kindChanged(key);
        else
          onFieldEdited(key);
      });
      w = combo;
    } else {
      auto* edit = new QLineEdit(m_formHost);
      edit->setText(f.type == "string" ? unquoteToml(value) : value);
      if (f.type == "array" || f.type == "table") {
        QFont mono(QStringLiteral("monospace"));
        mono.setStyleHint(QFont::Monospace);
        edit->setFont(mono);
      }
      connect(edit, &QLineEdit::textEdited, this, [this, key] { onFieldEdited(key); });
      w = edit;
    }
    w->setObjectName(QStringLiteral("field:") + key);
    QString tip = QString::fromStdString(f.help);
    if (!tip.isEmpty()) tip += QStringLiteral("\n");
    tip += key + QStringLiteral(" (") + QString::fromStdString(f.type) + QStringLiteral(")");
    auto* label = new QLabel(key.section(QLatin1Char('.'), -1), m_formHost);
    label->setBuddy(w);
    form->addRow(label, w);
    field.widget = w;
    field.label = label;
    field.tip = tip;
    m_fields.push_back(field);
  }
  m_formLayout->addStretch(1);
  showIdle(fields);
}

void ConfigEditor::showIdle(const std::vector<api::ConfigField>& fields) {
  for (auto& f : m_fields) {
    const auto it = std::find_if(fields.begin(), fields.end(),
                                 [&](const api::ConfigField& c) { return c.key == f.spec.key; });
    const QString idle = it == fields.end() ? QString() : QString::fromStdString(it->idle);
    f.spec.idle = idle.toStdString();
    // A disabled label is drawn greyed; the field stays editable (set it first, enable later).
    f.label->setEnabled(idle.isEmpty());
    const QString tip =
        idle.isEmpty() ? f.tip : f.tip + QStringLiteral("\n") + tr("No effect here: %1").arg(idle);
    f.label->setToolTip(tip);
    f.widget->setToolTip(tip);
  }
}

QString ConfigEditor::literal(const Field& f) const {
  if (auto* cb = qobject_cast<QCheckBox*>(f.widget))
    return cb->isChecked() ? QStringLiteral("true") : QStringLiteral("false");
  QString text;
  if (auto* combo = qobject_cast<QComboBox*>(f.widget)) text = combo->currentText();
  if (auto* edit = qobject_cast<QLineEdit*>(f.widget)) text = edit->text();
  if (f.spec.type == "string") return quoteToml(text);
  text = text.trimmed();
  if (f.spec.type == "int" || f.spec.type == "float") {
    // Not a number: hand it over as a string so the engine's message names the key and says
    // what it expected.
    bool ok = false;
    text.toDouble(&ok);
    if (!ok) text.toLongLong(&ok, 0);
    if (!ok) return quoteToml(text);
  }
  return text.isEmpty() ? QStringLiteral("\"\"") : text;
}

void ConfigEditor::addPage(QWidget* page, const QString& title) {
  auto* scroll = new VerticalScrollArea(m_tabs);
  scroll->setWidget(page);
  m_tabs->addTab(scroll, title);
}

void ConfigEditor::showPage(QWidget* page) {
  for (int i = 0; i < m_tabs->count(); ++i) {
    auto* scroll = qobject_cast<QScrollArea*>(m_tabs->widget(i));
    if (m_tabs->widget(i) == page || (scroll != nullptr && scroll->widget() == page))
      m_tabs->setCurrentIndex(i);
  }
}

QString ConfigEditor::toToml() const {
  QString out;
  QString section;
  bool first = true;
  // Top-level keys first (a TOML key after a [table] header belongs to that table).
  for (const auto& f : m_fields) {
    if (!f.spec.section.empty()) continue;
    out +=
        QString::fromStdString(f.spec.key) + QStringLiteral(" = ") + literal(f) + QLatin1Char('\n');
  }
  for (const auto& f : m_fields) {
    if (f.spec.section.empty()) continue;
    const QString s = QString::fromStdString(f.spec.section);
    if (first || s != section) {
      out += (out.isEmpty() ? QString() : QStringLiteral("\n")) + QLatin1Char('[') + s +
             QStringLiteral("]\n");
      section = s;
      first = false;
    }
    const QString key = QString::fromStdString(f.spec.key).mid(s.size() + 1);
    out += key + QStringLiteral(" = ") + literal(f) + QLatin1Char('\n');
  }
  return out;
}

bool ConfigEditor::setToml(const QString& text, const QString& source) {
  const api::ParsedConfig parsed = api::parse_config(text.toStdString(), source.toStdString());
  const api::ConfigCheck& check = parsed.check();
  if (!check.ok) {
    markError(QString::fromStdString(check.key_path), QString::fromStdString(check.error));
    m_valid = false;
    Q_EMIT validityChanged(false);
    // The text that did not load is kept in the TOML tab, shown, to be fixed there and applied
    // (a file with one mistake would otherwise be out of reach in the workbench).
    if (text != m_toml->toPlainText()) m_toml->setPlainText(text);
    m_source = source;
    m_tabs->setCurrentWidget(m_toml->parentWidget());
    return false;
  }
  m_loading = true;
  m_source = source;
  try {
    buildForm(api::config_fields(parsed));
  } catch (const std::exception& e) {
    m_loading = false;
    markError({}, QString::fromUtf8(e.what()));
    return false;
  }
  m_loading = false;
  m_splitKey.clear();
  validateNow();
  return true;
}

void ConfigEditor::onFieldEdited(const QString& key) {
  Q_UNUSED(key);
  if (m_loading) return;
  Q_EMIT edited();
  m_validateTimer.start();
}

void ConfigEditor::kindChanged(const QString& key) {
  if (m_loading) return;
  const QString section = key.left(key.size() - 5);  // "model", "optimizer", "scheduler"
  const QString text = tomlWithKind(section, fieldText(key));
  if (!setToml(text, m_source)) {
    // Keep the user's form; the message says what the new kind needs.
    m_validateTimer.start();
  } else {
    // The rebuilt form keeps the edited section in view, its kind field focused, with the new
    // kind's fields below it (it jumped to wherever the old form's height put the scroll bar,
    // another section, with Muon's fields off screen).
    revealField(key);
  }
  Q_EMIT edited();
}

void ConfigEditor::revealField(const QString& key) {
  QWidget* widget = nullptr;
  for (const auto& f : m_fields)
    if (QString::fromStdString(f.spec.key) == key) widget = f.widget;
  auto* scroll = qobject_cast<QScrollArea*>(m_tabs->widget(0));
  if (widget == nullptr || scroll == nullptr) return;
  m_formHost->layout()->activate();
  // Its section's box at the top of the view.
  QWidget* box = widget->parentWidget() != nullptr ? widget->parentWidget() : widget;
  scroll->verticalScrollBar()->setValue(box->mapTo(m_formHost, QPoint(0, 0)).y());
  widget->setFocus(Qt::OtherFocusReason);
}

QString ConfigEditor::tomlWithKind(const QString& section, const QString& kind) const {
  QString top, out, current;
  bool wroteSection = false;
  qint64 steps = fieldText(QStringLiteral("run.steps")).toLongLong();
  if (steps <= 0) steps = 1000;
  double lr = fieldText(QStringLiteral("optimizer.lr")).toDouble();
  if (lr <= 0) lr = fieldText(QStringLiteral("optimizer.muon.lr")).toDouble();
  if (lr <= 0) lr = 1e-3;
  for (const auto& f : m_fields) {
    const QString s = QString::fromStdString(f.spec.section);
    const QString k = QString::fromStdString(f.spec.key);
    if (s.isEmpty()) {
      top += k + QStringLiteral(" = ") + literal(f) + QLatin1Char('\n');
      continue;
    }
    const bool inSection = s == section || s.startsWith(section + QLatin1Char('.'));
    if (inSection) {
      if (!wroteSection) {
        out += QStringLiteral("\n[") + section + QStringLiteral("]\nkind = ") + quoteToml(kind) +
               QLatin1Char('\n');
        if (section == QLatin1String("scheduler")) out += schedulerTemplate(kind, steps, lr);
        // A setting of the section that every kind reads stays (weight_decay_params).
        if (section == QLatin1String("optimizer"))
          for (const auto& g : m_fields)
            if (QString::fromStdString(g.spec.key) ==
                QLatin1String("optimizer.weight_decay_params"))
              out += QStringLiteral("weight_decay_params = ") + literal(g) + QLatin1Char('\n');
        wroteSection = true;
      }
      continue;
    }
    if (s != current) {
      out += QStringLiteral("\n[") + s + QStringLiteral("]\n");
      current = s;
    }
    out += k.mid(s.size() + 1) + QStringLiteral(" = ") + literal(f) + QLatin1Char('\n');
  }
  return top + out;
}

QString ConfigEditor::fieldText(const QString& key) const {
  for (const auto& f : m_fields) {
    if (QString::fromStdString(f.spec.key) != key) continue;
    if (f.spec.type == "string") return unquoteToml(literal(f));
    return literal(f);
  }
  return {};
}

bool ConfigEditor::setFieldText(const QString& key, const QString& text) {
  for (const auto& f : m_fields) {
    if (QString::fromStdString(f.spec.key) != key) continue;
    if (auto* cb = qobject_cast<QCheckBox*>(f.widget)) {
      cb->setChecked(text == QLatin1String("true"));
    } else if (auto* combo = qobject_cast<QComboBox*>(f.widget)) {
      if (!combo->isEditable() && combo->findText(text) < 0) combo->addItem(text);
      combo->setCurrentText(text);
    } else if (auto* edit = qobject_cast<QLineEdit*>(f.widget)) {
      edit->setText(text);
      onFieldEdited(key);
    }
    return true;
  }
  return false;
}

QStringList ConfigEditor::keys() const {
  QStringList out;
  for (const auto& f : m_fields)
    out << QString::fromStdString(f.spec.key);
  return out;
}

void ConfigEditor::setPreviewSteps(int steps) {
  m_previewSteps->setValue(steps);
  validateNow();
}

void ConfigEditor::markError(const QString& key, const QString& message) {
  m_error = message;
  m_errorKey = key;
  for (const auto& f : m_fields) {
    const bool bad = !key.isEmpty() && QString::fromStdString(f.spec.key) == key;
    f.widget->setStyleSheet(bad ? QStringLiteral("border: 2px solid #d62728;") : QString());
  }
  if (message.isEmpty()) {
    m_status->setText(tr("✔ valid config"));
    m_status->setStyleSheet(QStringLiteral("color: #2ca02c;"));
  } else {
    m_status->setText(message);
    m_status->setStyleSheet(QStringLiteral("color: #d62728;"));
  }
}

bool ConfigEditor::validateNow() {
  m_validateTimer.stop();
  const QString text = toToml();
  // One parse per edit: the check, the LR preview and the parameter split all read it.
  const api::ParsedConfig parsed = api::parse_config(text.toStdString(), m_source.toStdString());
  const api::ConfigCheck& check = parsed.check();
  if (!m_toml->hasFocus()) m_toml->setPlainText(text);
  const bool was = m_valid;
  m_valid = check.ok;
  if (!check.ok) {
    QString key = QString::fromStdString(check.key_path);
    const QString error = QString::fromStdString(check.error);
    // A TOML syntax error has a line of the text we generated but no key: map the line back.
    if (key.isEmpty() && check.line > 0) {
      const QStringList lines = text.split(QLatin1Char('\n'));
      const int line = check.line - 1;
      QString section;
      for (int i = 0; i <= line && i < lines.size(); ++i) {
        const QString l = lines[i].trimmed();
        if (l.startsWith(QLatin1Char('['))) section = l.mid(1, l.indexOf(QLatin1Char(']')) - 1);
        if (i == line && l.contains(QLatin1Char('='))) {
          const QString k = l.left(l.indexOf(QLatin1Char('='))).trimmed();
          key = section.isEmpty() ? k : section + QLatin1Char('.') + k;
        }
      }
    }
    markError(key, error);
  } else {
    markError({}, {});
    try {
      showIdle(api::config_fields(parsed));
    } catch (const std::exception&) {  // the form keeps its last state
    }
    updatePreview(parsed);
    updateSplit(parsed);
  }
  if (was != m_valid) Q_EMIT validityChanged(m_valid);
  return m_valid;
}

void ConfigEditor::updatePreview(const api::ParsedConfig& config) {
  std::vector<std::string> names;
  api::ScheduleTable table;
  try {
    table = api::preview_config(config, m_previewSteps->value(), names);
  } catch (const std::exception& e) {
    markError({}, tr("LR preview: ") + QString::fromUtf8(e.what()));
    return;
  }
  m_preview->clear();
  m_previewValues.clear();
  // Muon's LR is ~100x AdamW's: with both, AdamW's gets the right-hand axis (as on the live
  // LR plot), else it is a flat line at zero.
  const bool muon = std::any_of(names.begin(), names.end(),
                                [](const std::string& n) { return n.rfind("lr.muon", 0) == 0; });
  m_preview->setYAxisLabels(muon ? tr("Muon lr") : tr("lr"), tr("AdamW lr"));
  for (std::size_t g = 0; g < names.size(); ++g) {
    const QString name = QString::fromStdString(names[g]);
    std::vector<double> x, y;
    for (const auto& row : table.rows) {
      if (g >= row.lr.size()) continue;
      x.push_back(row.step);
      y.push_back(row.lr[g]);
    }
    m_previewValues[name] = y;
    const bool right = muon && names[g].rfind("lr.adamw", 0) == 0;
    // Named and drawn as on the live LR plot ("AdamW LR (right)", dashed), a colour each.
    const MetricRoute route = routeMetric(name);
    m_preview->ensureCurve(name, right ? route.label + tr(" (right)") : route.label,
                           runColor(static_cast<int>(g)), route.style, false, right);
    m_preview->append(name, x, x, y);
  }
  m_preview->replotNow();
}

void ConfigEditor::updateSplit(const api::ParsedConfig& config) {
  // Only when the model or optimizer changed (building the model costs a little).
  QString key;
  for (const auto& f : m_fields) {
    const QString s = QString::fromStdString(f.spec.section);
    if (s.startsWith(QLatin1String("model")) || s.startsWith(QLatin1String("optimizer")))
      key += QString::fromStdString(f.spec.key) + literal(f);
  }
  if (key == m_splitKey) return;
  m_splitKey = key;
  startSplit(config);
}

ConfigEditor::~ConfigEditor() {
  if (m_splitThread.joinable()) m_splitThread.join();
}

void ConfigEditor::startSplit(const api::ParsedConfig& config) {
  // Off the GUI thread: the model is built (and initialised) to list its parameters, which took
  // the window away on every edit of a large model. One build at a time; the newest config
  // edited meanwhile goes next.
  if (m_splitBusy) {
    m_splitNext = config;
    return;
  }
  if (m_splitThread.joinable()) m_splitThread.join();  // the last one has posted its result
  m_splitBusy = true;
  m_splitThread = std::thread([this, config] {
    std::vector<api::SplitRow> rows;
    QString error;
    try {
      rows = api::parameter_split(config);
    } catch (const std::exception& e) {
      error = QString::fromUtf8(e.what());
    }
    // Delivered on the GUI thread; the destructor joins this thread first, and an event for a
    // deleted editor is dropped.
    QMetaObject::invokeMethod(
        this, [this, rows = std::move(rows), error] { showSplit(rows, error); },
        Qt::QueuedConnection);
  });
}

void ConfigEditor::showSplit(const std::vector<api::SplitRow>& rows, const QString& error) {
  m_splitBusy = false;
  if (m_splitNext) {  // a newer config: its table, not this one
    const api::ParsedConfig next = *m_splitNext;
    m_splitNext.reset();
    startSplit(next);
    return;
  }
  if (!error.isEmpty()) {
    // (Not over the message of a config made invalid since: that one is the news; the table
    // is computed again, and its error said, once the config is valid again.)
    if (m_valid)
      markError({}, tr("parameters: ") + error);
    else
      m_splitKey.clear();
    return;
  }
  m_split->setRowCount(static_cast<int>(rows.size()));
  for (int i = 0; i < static_cast<int>(rows.size()); ++i) {
    const auto& r = rows[static_cast<std::size_t>(i)];
    m_split->setItem(i, 0, new QTableWidgetItem(QString::fromStdString(r.name)));
    m_split->setItem(i, 1, new QTableWidgetItem(QString::fromStdString(r.shape)));
    auto* n = new QTableWidgetItem;
    n->setData(Qt::DisplayRole, static_cast<qlonglong>(r.numel));
    m_split->setItem(i, 2, n);
    m_split->setItem(i, 3, new QTableWidgetItem(QString::fromStdString(r.optimizer)));
    m_split->setItem(i, 4, new QTableWidgetItem(QString::fromStdString(r.reason)));
  }
  m_split->resizeColumnsToContents();
}

}  // namespace tb::ui
