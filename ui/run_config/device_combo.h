// DeviceCombo: run.device in the config form — an editable list of the devices this process can
// train on (cpu, cuda:N, openreg:N), the ones the engine knows but cannot use here greyed with
// the reason as their tooltip. The devices are asked for once per process on a helper thread
// (a CUDA query starts the driver, which can take seconds), so the form never waits for it;
// the list fills when the answer is in. Any name may still be typed: a config for another
// machine keeps its device.
#pragma once

#include <QComboBox>

namespace tb::ui {

class DeviceCombo : public QComboBox {
  Q_OBJECT

 public:
  /// An editable list showing `current`.
  DeviceCombo(const QString& current, QWidget* parent = nullptr);
  /// Opens the list, first waiting (at most 2 s) for the device query if it is still running.
  void showPopup() override;

 private:
  // Adds the devices once the query has answered; true when it had.
  bool fill(int wait_ms);
  bool m_filled = false;
};

}  // namespace tb::ui
