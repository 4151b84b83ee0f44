// The run-config form: TOML -> form -> TOML round trips for every example config, inline
// validation naming the key, kind switches that refill a section, the parameter split table and
// an LR preview equal to the engine's.
#include <QPlainTextEdit>
#include <QTabWidget>
#include <QtTest>

#include <QCheckBox>
#include <QComboBox>
#include <QDir>
#include <QFile>
#include <QLabel>
#include <QLineEdit>
#include <QStandardItemModel>
#include <QTableWidget>

#include <qcustomplot.h>

#include "engine/api/engine_api.h"
#include "engine/api/schedule_api.h"
#include "engine/api/workbench_api.h"
#include "tests/ui/ui_test_util.h"
#include "ui/live_plots/metric_plot.h"
#include "ui/run_config/config_editor.h"

using tb::ui::ConfigEditor;

namespace {

QString readFile(const QString& path) {
  QFile f(path);
  if (!f.open(QIODevice::ReadOnly)) return {};
  return QString::fromUtf8(f.readAll());
}

QString effective(const QString& toml) {
  const auto c = tb::api::check_config_text(toml.toStdString());
  return c.ok ? QString::fromStdString(c.effective_toml)
              : QStringLiteral("INVALID: ") + QString::fromStdString(c.error);
}

}  // namespace

class TestConfigEditor : public QObject {
  Q_OBJECT

 private Q_SLOTS:
  void formRoundTripsEveryExampleConfig_data() {
    QTest::addColumn<QString>("path");
    const QDir dir(QStringLiteral(TB_SOURCE_DIR "/resources/configs"));
    for (const QString& f : dir.entryList({QStringLiteral("*.toml")}))
      QTest::newRow(qPrintable(f)) << dir.filePath(f);
  }
  void formRoundTripsEveryExampleConfig() {
    QFETCH(QString, path);
    const QString text = readFile(path);
    QVERIFY(!text.isEmpty());
    ConfigEditor editor;
    QVERIFY2(editor.setToml(text, path), qPrintable(editor.errorText()));
    QVERIFY(editor.isValid());
    QCOMPARE(effective(editor.toToml()), effective(text));
    // Every key of the effective config has a field.
    const auto fields = tb::api::config_fields(effective(text).toStdString());
    QCOMPARE(editor.keys().size(), static_cast<int>(fields.size()));
  }

  void widgetsFollowTheFieldTypes() {
    ConfigEditor editor;
    QVERIFY(editor.setToml(tb::test::blobsConfig()));
    QVERIFY(editor.findChild<QCheckBox*>(QStringLiteral("field:data.shuffle")));
    auto* mode = editor.findChild<QComboBox*>(QStringLiteral("field:binding.mode"));
    QVERIFY(mode);
    QVERIFY(mode->findText(QStringLiteral("exclusive")) >= 0);
    QVERIFY(editor.findChild<QLineEdit*>(QStringLiteral("field:run.seed")));
    // amp.tf32 is a checkbox, and ticking it lands in the TOML the run stores.
    auto* tf32 = editor.findChild<QCheckBox*>(QStringLiteral("field:amp.tf32"));
    QVERIFY(tf32);
    QVERIFY(!tf32->isChecked());
    tf32->setChecked(true);
    QVERIFY(editor.validateNow());
    QVERIFY2(editor.toToml().contains(QStringLiteral("tf32 = true")), qPrintable(editor.toToml()));
  }

  // run.device: an editable list of this machine's devices (those it cannot use disabled); a
  // device typed in, one this machine lacks included, is what the config gets.
  void runDeviceIsAListOfThisMachinesDevices() {
    ConfigEditor editor;
    QVERIFY(editor.setToml(tb::test::blobsConfig()));
    auto* device = editor.findChild<QComboBox*>(QStringLiteral("field:run.device"));
    QVERIFY(device);
    QVERIFY(device->isEditable());
    QCOMPARE(device->currentText(), QStringLiteral("cpu"));
    QTRY_VERIFY(device->findText(QStringLiteral("openreg:0")) >= 0);  // the query has answered
    QVERIFY(device->findText(QStringLiteral("cpu")) >= 0);
    QCOMPARE(device->currentText(), QStringLiteral("cpu"));  // filling kept the text
    auto* items = qobject_cast<QStandardItemModel*>(device->model());
    QVERIFY(items);
    for (const auto& d : tb::api::list_devices()) {
      const int i = device->findText(QString::fromStdString(d.name));
      QVERIFY2(i >= 0, d.name.c_str());
      QCOMPARE(items->item(i)->isEnabled(), d.available);
    }
    device->setEditText(QStringLiteral("openreg:1"));  // typed
    QVERIFY(editor.validateNow());
    QVERIFY2(editor.toToml().contains(QStringLiteral("device = \"openreg:1\"")),
             qPrintable(editor.toToml()));
    // One this machine cannot use is kept as typed, and the check names the key.
    QVERIFY(editor.setFieldText(QStringLiteral("run.device"), QStringLiteral("cuda:3")));
    QCOMPARE(device->currentText(), QStringLiteral("cuda:3"));
    if (!editor.validateNow()) QCOMPARE(editor.errorKey(), QStringLiteral("run.device"));
  }

  // A key the rest of the config makes idle has a greyed label, saying why in its tooltip.
  void idleKeysAreGreyed() {
    ConfigEditor editor;
    QVERIFY(editor.setToml(tb::test::blobsConfig()));
    auto* dtype = editor.findChild<QComboBox*>(QStringLiteral("field:amp.dtype"));
    auto* enabled = editor.findChild<QCheckBox*>(QStringLiteral("field:amp.enabled"));
    QVERIFY(dtype && enabled);
    QLabel* dtypeLabel = nullptr;
    for (auto* l : editor.findChildren<QLabel*>())
      if (l->buddy() == dtype) dtypeLabel = l;
    QVERIFY(dtypeLabel);
    QVERIFY(!dtypeLabel->isEnabled());
    QVERIFY(dtype->isEnabled());  // still editable
    QVERIFY2(dtype->toolTip().contains(QStringLiteral("No effect here: amp.enabled is false")),
             qPrintable(dtype->toolTip()));
    enabled->setChecked(true);
    QVERIFY(editor.validateNow());
    QVERIFY(dtypeLabel->isEnabled());
    QVERIFY(!dtype->toolTip().contains(QStringLiteral("No effect")));
  }

  void invalidValuesNameTheKeyAndRecover() {
    ConfigEditor editor;
    QVERIFY(editor.setToml(tb::test::blobsConfig()));
    QSignalSpy validity(&editor, &ConfigEditor::validityChanged);
    QVERIFY(editor.setFieldText(QStringLiteral("run.seed"), QStringLiteral("-3")));
    QVERIFY(!editor.validateNow());
    QCOMPARE(editor.errorKey(), QStringLiteral("run.seed"));
    QVERIFY2(editor.errorText().contains(QStringLiteral("run.seed")),
             qPrintable(editor.errorText()));
    auto* seed = editor.findChild<QLineEdit*>(QStringLiteral("field:run.seed"));
    QVERIFY(seed->styleSheet().contains(QStringLiteral("border")));
    QCOMPARE(validity.count(), 1);
    QCOMPARE(validity.takeFirst().at(0).toBool(), false);

    QVERIFY(editor.setFieldText(QStringLiteral("run.seed"), QStringLiteral("4")));
    QVERIFY(editor.validateNow());
    QVERIFY(seed->styleSheet().isEmpty());
    QCOMPARE(validity.count(), 1);

    QVERIFY(editor.setFieldText(QStringLiteral("optimizer.lr"), QStringLiteral("fast")));
    QVERIFY(!editor.validateNow());
    QCOMPARE(editor.errorKey(), QStringLiteral("optimizer.lr"));
    // A text that does not validate leaves the form as it was.
    const QString before = editor.toToml();
    QVERIFY(!editor.setToml(QStringLiteral("[run]\nstepz = 3\n")));
    QVERIFY(editor.errorText().contains(QStringLiteral("steps")));  // nearest-key suggestion
    QCOMPARE(editor.toToml(), before);
    // ... and is kept in the TOML tab, shown, to be fixed there; a valid text then loads.
    auto* toml = editor.findChild<QPlainTextEdit*>(QStringLiteral("tomlText"));
    QVERIFY(toml != nullptr);
    QCOMPARE(toml->toPlainText(), QStringLiteral("[run]\nstepz = 3\n"));
    auto* tabs = toml->parentWidget()->parentWidget()->parentWidget();
    QVERIFY(qobject_cast<QTabWidget*>(tabs) != nullptr);
    QCOMPARE(qobject_cast<QTabWidget*>(tabs)->currentWidget(), toml->parentWidget());
    QVERIFY(editor.setToml(tb::test::blobsConfig(7)));
    QCOMPARE(editor.fieldText(QStringLiteral("run.steps")), QStringLiteral("7"));
  }

  void switchingAKindRefillsItsSection() {
    ConfigEditor editor;
    QVERIFY(editor.setToml(tb::test::blobsConfig(200)));
    auto* kind = editor.findChild<QComboBox*>(QStringLiteral("field:scheduler.kind"));
    QVERIFY(kind);
    kind->setCurrentText(QStringLiteral("cosine"));
    QVERIFY(editor.isValid());
    QCOMPARE(editor.fieldText(QStringLiteral("scheduler.T_max")), QStringLiteral("200"));
    auto* opt = editor.findChild<QComboBox*>(QStringLiteral("field:optimizer.kind"));
    QVERIFY(opt);
    QVERIFY(editor.setFieldText(QStringLiteral("optimizer.weight_decay_params"),
                                QStringLiteral("matrices")));
    opt->setCurrentText(QStringLiteral("muon"));
    QVERIFY2(editor.isValid(), qPrintable(editor.errorText()));
    // A setting of [optimizer] every kind reads survives the new kind's form.
    QCOMPARE(editor.fieldText(QStringLiteral("optimizer.weight_decay_params")),
             QStringLiteral("matrices"));
    QVERIFY(editor.keys().contains(QStringLiteral("optimizer.muon.lr")));
    QVERIFY(editor.keys().contains(QStringLiteral("optimizer.adamw.lr")));
    // The split table sends the hidden matrix to Muon and the rest to AdamW (computed off the
    // GUI thread: the window stays responsive while a large model is built to list it).
    QTRY_VERIFY(!editor.splitPending());
    QTableWidget* split = editor.splitTable();
    QVERIFY(split->rowCount() >= 4);
    bool muonWeight = false, adamwBias = false;
    for (int r = 0; r < split->rowCount(); ++r) {
      const QString name = split->item(r, 0)->text();
      const QString optName = split->item(r, 3)->text();
      if (name == QLatin1String("layers.0.weight") && optName == QLatin1String("muon"))
        muonWeight = true;
      if (name.endsWith(QLatin1String("bias")) && optName == QLatin1String("adamw"))
        adamwBias = true;
    }
    QVERIFY(muonWeight);
    QVERIFY(adamwBias);
  }

  void lrPreviewEqualsTheEnginesPreview() {
    const QString path =
        QStringLiteral(TB_SOURCE_DIR "/resources/configs/qwen-tiny-fortunes-muon.toml");
    ConfigEditor editor;
    QVERIFY(editor.setToml(readFile(path), path));
    std::vector<std::string> names;
    const auto table = tb::api::preview_run_config(path.toStdString(), {}, 0, names);
    const auto drawn = editor.previewValues();
    QCOMPARE(drawn.size(), static_cast<int>(names.size()));
    for (std::size_t g = 0; g < names.size(); ++g) {
      const auto& ys = drawn.value(QString::fromStdString(names[g]));
      QCOMPARE(ys.size(), table.rows.size());
      for (std::size_t i = 0; i < ys.size(); ++i)
        QCOMPARE(ys[i], table.rows[i].lr[g]);
    }
    // Muon's and AdamW's LRs, ~100x apart, each on an axis of its own.
    const auto& curves = editor.previewPlot()->curves();
    QVERIFY(curves.count(QStringLiteral("lr.adamw")) && curves.count(QStringLiteral("lr.muon")));
    QVERIFY(curves.at(QStringLiteral("lr.adamw")).right);
    QVERIFY(!curves.at(QStringLiteral("lr.muon")).right);
    // Named and drawn as on the live LR plot.
    QCOMPARE(curves.at(QStringLiteral("lr.adamw")).label, QStringLiteral("AdamW LR (right)"));
    QCOMPARE(curves.at(QStringLiteral("lr.muon")).label, QStringLiteral("Muon LR"));
    QCOMPARE(curves.at(QStringLiteral("lr.adamw")).style, Qt::DashLine);
    QVERIFY(editor.previewPlot()->plot()->yAxis2->visible());
    QCOMPARE(editor.previewPlot()->plot()->yAxis->label(), QStringLiteral("Muon lr"));
    // Redrawn as values change.
    QVERIFY(editor.setFieldText(QStringLiteral("optimizer.muon.lr"), QStringLiteral("0.04")));
    QVERIFY(editor.validateNow());
    const auto& muon = editor.previewValues().value(QStringLiteral("lr.muon"));
    QVERIFY(!muon.empty());
    QVERIFY(std::abs(muon.back() - 2.0 * table.rows.back().lr[0]) <=
            1e-12 * std::abs(muon.back()) + 1e-15);
  }
};

QTEST_MAIN(TestConfigEditor)
#include "tst_config_editor.moc"
