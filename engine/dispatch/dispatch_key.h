// Dispatch keys, key sets, and the thread-local guards that exclude keys while redispatching.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "engine/core/device.h"

namespace tb::dispatch {

/// Dispatch keys in priority order: the lowest value is tried first. Autocast and Autograd are
/// layers above the backends: their kernels do their work and redispatch below themselves.
enum class DispatchKey : std::uint8_t {
  Autocast = 0,
  Autograd = 1,
  CPU = 2,
  CUDA = 3,
  PrivateUse1 = 4,
};

/// Number of DispatchKey values (for per-key tables).
inline constexpr int kNumDispatchKeys = 5;

/// "Autocast", "Autograd", "CPU", "CUDA", "PrivateUse1".
std::string_view dispatch_key_name(DispatchKey k) noexcept;

/// Parses a key name as printed by dispatch_key_name. Throws tb::ValueError
/// "Invalid dispatch key: NAME" otherwise.
DispatchKey parse_dispatch_key(std::string_view name);

/// True for keys that name a device backend (CPU, CUDA, PrivateUse1).
constexpr bool is_backend_key(DispatchKey k) noexcept {
  return k == DispatchKey::CPU || k == DispatchKey::CUDA || k == DispatchKey::PrivateUse1;
}

/// The backend key of a device type.
constexpr DispatchKey backend_key(core::DeviceType t) noexcept {
  switch (t) {
    case core::DeviceType::CPU:
      return DispatchKey::CPU;
    case core::DeviceType::CUDA:
      return DispatchKey::CUDA;
    case core::DeviceType::PrivateUse1:
      return DispatchKey::PrivateUse1;
  }
  return DispatchKey::CPU;
}

/// The device type a backend key serves (CPU for non-backend keys).
constexpr core::DeviceType key_device_type(DispatchKey k) noexcept {
  switch (k) {
    case DispatchKey::CUDA:
      return core::DeviceType::CUDA;
    case DispatchKey::PrivateUse1:
      return core::DeviceType::PrivateUse1;
    default:
      return core::DeviceType::CPU;
  }
}

/// A small bit set of dispatch keys.
class DispatchKeySet {
 public:
  /// The empty set.
  constexpr DispatchKeySet() = default;
  /// The set holding only `k`.
  constexpr explicit DispatchKeySet(DispatchKey k) : bits_(bit(k)) {}
  /// A copy with `k` added (this set is unchanged).
  constexpr DispatchKeySet add(DispatchKey k) const { return from_bits(bits_ | bit(k)); }
  /// A copy without `k` (this set is unchanged).
  constexpr DispatchKeySet remove(DispatchKey k) const { return from_bits(bits_ & ~bit(k)); }
  /// True when `k` is in the set.
  constexpr bool has(DispatchKey k) const { return (bits_ & bit(k)) != 0; }
  /// True when the set holds no key.
  constexpr bool empty() const { return bits_ == 0; }
  /// Union.
  constexpr DispatchKeySet operator|(DispatchKeySet o) const { return from_bits(bits_ | o.bits_); }
  /// Difference: the keys of this set that are not in `o`.
  constexpr DispatchKeySet operator-(DispatchKeySet o) const { return from_bits(bits_ & ~o.bits_); }
  /// Highest-priority key in the set (lowest enum value). Precondition: !empty().
  DispatchKey highest() const { return static_cast<DispatchKey>(__builtin_ctz(bits_)); }
  /// The bits: bit i is set when the key with value i is in the set.
  constexpr std::uint32_t raw() const { return bits_; }

 private:
  static constexpr std::uint32_t bit(DispatchKey k) { return 1u << static_cast<unsigned>(k); }
  static constexpr DispatchKeySet from_bits(std::uint32_t b) {
    DispatchKeySet s;
    s.bits_ = b;
    return s;
  }
  std::uint32_t bits_ = 0;
};

/// Keys excluded on this thread (e.g. Autograd while an autograd kernel redispatches, or under
/// a no-grad guard). Thread-local; read on every dispatch.
DispatchKeySet tls_excluded_keys() noexcept;

/// RAII: excludes `keys` on this thread for the guard's lifetime (nests correctly).
class ExcludeKeysGuard {
 public:
  /// Adds `keys` to this thread's excluded keys.
  explicit ExcludeKeysGuard(DispatchKeySet keys);
  /// Restores the excluded keys in effect at construction.
  ~ExcludeKeysGuard();
  ExcludeKeysGuard(const ExcludeKeysGuard&) = delete;
  ExcludeKeysGuard& operator=(const ExcludeKeysGuard&) = delete;

 private:
  DispatchKeySet previous_;
};

/// RAII: includes `keys` on this thread for the guard's lifetime (nests correctly): every dispatch
/// on this thread then considers them, as if an argument had contributed them (AutocastGuard
/// includes Autocast this way). Excluded keys still win.
class IncludeKeysGuard {
 public:
  /// Adds `keys` to this thread's included keys.
  explicit IncludeKeysGuard(DispatchKeySet keys);
  /// Restores the included keys in effect at construction.
  ~IncludeKeysGuard();
  IncludeKeysGuard(const IncludeKeysGuard&) = delete;
  IncludeKeysGuard& operator=(const IncludeKeysGuard&) = delete;

 private:
  DispatchKeySet previous_;
};

}  // namespace tb::dispatch
