// ConfigEditor: a run config as a form — one field per key of the effective config, grouped by
// TOML section, generated from the engine's own field list so no key is missing — plus the TOML
// text, the model's parameter table with the Muon/AdamW split, and a live LR-schedule preview.
// Every edit is validated by the engine (debounced): the message names the key and the field is
// marked; switching a `kind` (model, optimizer, scheduler) refills that section's defaults.
#pragma once

#include <QMap>
#include <QString>
#include <QTimer>
#include <QWidget>

#include <optional>
#include <thread>
#include <vector>

#include "engine/api/workbench_api.h"

class QFormLayout;
class QLabel;
class QPlainTextEdit;
class QSpinBox;
class QTableWidget;
class QTabWidget;
class QVBoxLayout;

namespace tb::ui {

class MetricPlot;

/// The run-config form.
class ConfigEditor : public QWidget {
  Q_OBJECT

 public:
  explicit ConfigEditor(QWidget* parent = nullptr);
  /// Waits for a parameter split still being computed.
  ~ConfigEditor() override;

  /// Loads a config text (`source` names it in messages). Returns false and shows the message
  /// when it does not validate (the form is left as it was).
  bool setToml(const QString& text, const QString& source = QStringLiteral("<editor>"));
  /// The form as TOML text (every field, in section order).
  QString toToml() const;
  /// Validates the form now; true when valid.
  bool validateNow();
  /// Whether the last validation passed.
  bool isValid() const { return m_valid; }
  /// The last validation message ("" when valid).
  QString errorText() const { return m_error; }
  /// The key the last error names ("" when none).
  QString errorKey() const { return m_errorKey; }
  /// The value text of `key` as the form holds it (TOML literal for arrays/tables, plain text
  /// for strings), "" when unknown.
  QString fieldText(const QString& key) const;
  /// Sets the field `key` as a user would (strings without quotes; booleans "true"/"false";
  /// numbers, arrays and tables as TOML). Returns false for an unknown key.
  bool setFieldText(const QString& key, const QString& text);
  /// The keys of the form, in order.
  QStringList keys() const;
  /// Adds a page beside Form, TOML and Parameters (the sweep editor). The page scrolls up and
  /// down inside its tab, so that a tall page does not push the LR preview out of the dock.
  void addPage(QWidget* page, const QString& title);
  /// Shows the page `page` (one of addPage()'s).
  void showPage(QWidget* page);
  /// The LR preview plot.
  MetricPlot* previewPlot() const { return m_preview; }
  /// The parameter-split table. It is filled off the GUI thread (the model is built to list its
  /// parameters: half a second for GPT-2 small, more for larger ones); splitPending() says
  /// whether it is being computed.
  QTableWidget* splitTable() const { return m_split; }
  bool splitPending() const { return m_splitBusy; }
  /// Steps drawn in the LR preview (0 = the run's steps).
  void setPreviewSteps(int steps);
  /// The LR values drawn in the preview, per group name ("lr.adamw"), one per step 0..N.
  QMap<QString, std::vector<double>> previewValues() const { return m_previewValues; }
  /// The source name of the loaded text.
  QString source() const { return m_source; }
  /// The form as TOML with section `section` ("model", "optimizer", "scheduler") reduced to
  /// `kind = "<kind>"` (plus a scheduler kind's required fields), so the engine fills that kind's
  /// defaults — what switching the kind in the form does; also the queue's "Muon and AdamW".
  QString tomlWithKind(const QString& section, const QString& kind) const;

 Q_SIGNALS:
  /// The config validated (or stopped validating) after an edit.
  void validityChanged(bool valid);
  /// The form changed (any field).
  void edited();

 private:
  struct Field {
    api::ConfigField spec;
    QWidget* widget = nullptr;
    QLabel* label = nullptr;  // greyed while the key has no effect (spec.idle)
    QString tip;              // the key's help, before any "no effect" note
  };
  // Greys the labels of the keys the rest of the config makes idle, saying why in the tooltip.
  void showIdle(const std::vector<api::ConfigField>& fields);
  void buildForm(const std::vector<api::ConfigField>& fields);
  void onFieldEdited(const QString& key);
  void kindChanged(const QString& key);
  void revealField(const QString& key);  // scrolls the form to `key`'s section and focuses it
  void updatePreview(const api::ParsedConfig& config);
  void updateSplit(const api::ParsedConfig& config);
  QString literal(const Field& f) const;
  void markError(const QString& key, const QString& message);

  QTabWidget* m_tabs = nullptr;
  QWidget* m_formHost = nullptr;
  QVBoxLayout* m_formLayout = nullptr;
  QPlainTextEdit* m_toml = nullptr;
  QTableWidget* m_split = nullptr;
  // The split's worker: one at a time; a config edited meanwhile waits in m_splitNext.
  void startSplit(const api::ParsedConfig& config);
  void showSplit(const std::vector<api::SplitRow>& rows, const QString& error);
  std::thread m_splitThread;
  bool m_splitBusy = false;
  std::optional<api::ParsedConfig> m_splitNext;
  QLabel* m_status = nullptr;
  MetricPlot* m_preview = nullptr;
  QSpinBox* m_previewSteps = nullptr;
  std::vector<Field> m_fields;
  QTimer m_validateTimer;
  bool m_valid = false;
  bool m_loading = false;
  QString m_error;
  QString m_errorKey;
  QString m_source = QStringLiteral("<editor>");
  QString m_splitKey;  // model + optimizer text the split table was built for
  QMap<QString, std::vector<double>> m_previewValues;
};

}  // namespace tb::ui
