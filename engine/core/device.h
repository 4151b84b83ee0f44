// Device: where a tensor's storage lives (type + index), and its text form ("cpu", "cuda:0").
#pragma once

#include <cstdint>
#include <functional>
#include <ostream>
#include <string>
#include <string_view>

namespace tb::core {

/// The kinds of device the engine knows. PrivateUse1 is the slot for an out-of-tree accelerator
/// (the reference one is `openreg`); its user-visible name is set with
/// rename_privateuse1_backend().
enum class DeviceType : std::uint8_t { CPU = 0, CUDA = 1, PrivateUse1 = 2 };

/// Number of DeviceType values (for per-device tables).
inline constexpr int kNumDeviceTypes = 3;

/// Index of a device among those of its type (0..32767; CPU is always 0).
using DeviceIndex = std::int16_t;

/// A device: its type and its index among devices of that type (CPU is always index 0).
class Device {
 public:
  /// Constructs `type:index`. Throws tb::ValueError for a negative index or a CPU index other than
  /// 0.
  explicit Device(DeviceType type = DeviceType::CPU, DeviceIndex index = 0);

  /// Parses "cpu", "cuda", "cuda:1", "openreg:0" (the PrivateUse1 name in use). A missing index
  /// means 0. Throws tb::ValueError naming the text and the accepted forms when it cannot be
  /// parsed.
  static Device parse(std::string_view text);

  /// The device type.
  DeviceType type() const noexcept { return type_; }
  /// The index among devices of this type (>= 0; 0 for the CPU).
  DeviceIndex index() const noexcept { return index_; }
  /// True for the CPU device.
  bool is_cpu() const noexcept { return type_ == DeviceType::CPU; }

  /// "cpu", "cuda:0", "openreg:1".
  std::string str() const;

  /// Same type and same index.
  friend bool operator==(const Device& a, const Device& b) noexcept {
    return a.type_ == b.type_ && a.index_ == b.index_;
  }
  /// Different type or index.
  friend bool operator!=(const Device& a, const Device& b) noexcept { return !(a == b); }

 private:
  DeviceType type_;
  DeviceIndex index_;
};

/// Name of a device type: "cpu", "cuda", or the current PrivateUse1 name (default "privateuse1").
std::string device_type_name(DeviceType type);

/// Gives the PrivateUse1 slot a user-visible name, e.g. "openreg" (PyTorch's
/// rename_privateuse1_backend). May be called once with a new name; calling again with the same
/// name is a no-op, with a different one throws tb::ValueError; "", "cpu" and "cuda" are
/// rejected.
void rename_privateuse1_backend(const std::string& name);

/// Reports why a device of one type cannot be used ("" when it can); a backend registers one.
using DeviceProbe = std::string (*)(DeviceIndex index);

/// Installs the probe of a non-CPU device type (replacing an earlier one).
void register_device_probe(DeviceType type, DeviceProbe probe);

/// Why `device` cannot be used in this process, "" when it can: loads the compiled-in backends
/// first, then asks the probe its backend registered ("its backend is not compiled in" when
/// none did). The CPU is always usable.
std::string device_unavailable_reason(Device device);

/// Writes d.str() ("cpu", "cuda:0").
std::ostream& operator<<(std::ostream& os, const Device& d);
/// Writes device_type_name(t).
std::ostream& operator<<(std::ostream& os, DeviceType t);

}  // namespace tb::core

template <>
struct std::hash<tb::core::Device> {
  std::size_t operator()(const tb::core::Device& d) const noexcept {
    return (static_cast<std::size_t>(d.type()) << 16) ^ static_cast<std::uint16_t>(d.index());
  }
};
