#include "ui/run_config/device_combo.h"

#include <QLineEdit>
#include <QStandardItemModel>
#include <QTimer>

#include <chrono>
#include <exception>
#include <future>
#include <vector>

#include "engine/api/engine_api.h"

namespace tb::ui {

namespace {

// The process's one device query, started by the first list. Never destroyed: the last owner of
// an std::async state waits for its thread, and a wedged driver must not hold up the exit.
std::shared_future<std::vector<api::DeviceInfo>>& deviceQuery() {
  static auto* query = new std::shared_future<std::vector<api::DeviceInfo>>(
      std::async(std::launch::async, [] {
        try {
          return api::list_devices();
        } catch (const std::exception&) {
          return std::vector<api::DeviceInfo>{{"cpu", true, ""}};
        }
      }).share());
  return *query;
}

}  // namespace

DeviceCombo::DeviceCombo(const QString& current, QWidget* parent) : QComboBox(parent) {
  setEditable(true);
  setInsertPolicy(QComboBox::NoInsert);
  setEditText(current);
  if (fill(0)) return;
  // Not answered yet: look again until it has (the form is not held up meanwhile).
  auto* poll = new QTimer(this);
  connect(poll, &QTimer::timeout, this, [this, poll] {
    if (fill(0)) poll->deleteLater();
  });
  poll->start(100);
}

void DeviceCombo::showPopup() {
  fill(2000);
  QComboBox::showPopup();
}

bool DeviceCombo::fill(int wait_ms) {
  if (m_filled) return true;
  auto& query = deviceQuery();
  if (query.wait_for(std::chrono::milliseconds(wait_ms)) != std::future_status::ready) return false;
  m_filled = true;
  // Adding the first item would replace the text shown (a device typed, or the config's): the
  // text is kept, and no edit is signalled.
  const QString text = currentText();
  const QSignalBlocker quiet(this);
  auto* items = qobject_cast<QStandardItemModel*>(model());
  for (const auto& d : query.get()) {
    addItem(QString::fromStdString(d.name));
    const int i = count() - 1;
    setItemData(i, QString::fromStdString(d.detail), Qt::ToolTipRole);
    if (!d.available && items != nullptr) items->item(i)->setEnabled(false);
  }
  setEditText(text);
  return true;
}

}  // namespace tb::ui
