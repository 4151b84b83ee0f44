// Device parsing/printing and the PrivateUse1 backend name.
#include "engine/core/device.h"

#include <charconv>
#include <mutex>

#include "engine/core/allocator.h"
#include "engine/core/error.h"

namespace tb::core {

namespace {

std::mutex& name_mutex() {
  static std::mutex m;
  return m;
}

std::string& privateuse1_name() {
  static std::string name = "privateuse1";
  return name;
}

bool privateuse1_renamed = false;

}  // namespace

Device::Device(DeviceType type, DeviceIndex index) : type_(type), index_(index) {
  TB_CHECK(index >= 0, "[device] device index must be >= 0, got ", index, " for ",
           device_type_name(type));
  TB_CHECK(type != DeviceType::CPU || index == 0, "[device] the CPU device has index 0 only, got ",
           index);
}

std::string device_type_name(DeviceType type) {
  switch (type) {
    case DeviceType::CPU:
      return "cpu";
    case DeviceType::CUDA:
      return "cuda";
    case DeviceType::PrivateUse1: {
      std::lock_guard lock(name_mutex());
      return privateuse1_name();
    }
  }
  return "unknown";
}

void rename_privateuse1_backend(const std::string& name) {
  TB_CHECK(!name.empty() && name != "cpu" && name != "cuda",
           "[device] invalid PrivateUse1 backend name '", name, "'");
  std::lock_guard lock(name_mutex());
  if (privateuse1_renamed) {
    TB_CHECK(privateuse1_name() == name, "[device] the PrivateUse1 backend is already named '",
             privateuse1_name(), "'; cannot rename it to '", name, "'");
    return;
  }
  privateuse1_name() = name;
  privateuse1_renamed = true;
}

Device Device::parse(std::string_view text) {
  const auto colon = text.find(':');
  const std::string_view type_text = text.substr(0, colon);
  DeviceType type;
  if (type_text == "cpu") {
    type = DeviceType::CPU;
  } else if (type_text == "cuda") {
    type = DeviceType::CUDA;
  } else if (type_text == "privateuse1" || [&] {
               // The PrivateUse1 backend names itself when it registers: load it first.
               if (type_text != device_type_name(DeviceType::PrivateUse1)) load_backends();
               return type_text == device_type_name(DeviceType::PrivateUse1);
             }()) {
    type = DeviceType::PrivateUse1;
  } else {
    throw ValueError(tb::detail::str_cat("[device] cannot parse device '", text,
                                         "': expected 'cpu', 'cuda[:N]' or '",
                                         device_type_name(DeviceType::PrivateUse1), "[:N]'"));
  }
  int index = 0;
  if (colon != std::string_view::npos) {
    const std::string_view idx = text.substr(colon + 1);
    const auto res = std::from_chars(idx.data(), idx.data() + idx.size(), index);
    TB_CHECK(res.ec == std::errc() && res.ptr == idx.data() + idx.size() && !idx.empty() &&
                 index >= 0 && index < 32768,
             "[device] cannot parse device '", text,
             "': the index after ':' must be an integer in [0, 32767]");
  }
  return Device(type, static_cast<DeviceIndex>(index));
}

std::string Device::str() const {
  if (type_ == DeviceType::CPU) return "cpu";
  return device_type_name(type_) + ":" + std::to_string(index_);
}

std::ostream& operator<<(std::ostream& os, const Device& d) {
  return os << d.str();
}
std::ostream& operator<<(std::ostream& os, DeviceType t) {
  return os << device_type_name(t);
}

}  // namespace tb::core
