// IValue and Stack: the boxed (type-erased) form of an operator's arguments and results.
//
// Typed kernels are called directly on the hot path. Boxing is used where code must handle any
// operator generically: per-key fallbacks (e.g. a device falling back to the CPU kernel) and
// SafeKernelHandle::call_boxed. Every argument type an operator signature may use has an
// IValueTraits specialisation below; an op defined with another type fails to compile.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <tuple>
#include <type_traits>
#include <variant>
#include <vector>

#include "engine/core/error.h"
#include "engine/core/tensor.h"

namespace tb::rng {
class Generator;
}

namespace tb::dispatch {

/// One boxed value. `None` stands for an empty optional (or a default generator).
struct IValue {
  /// The empty alternative.
  using None = std::monostate;
  /// Every type a boxed value can hold (an IntList is boxed as std::vector<std::int64_t>).
  using Variant = std::variant<None, core::Tensor, std::vector<core::Tensor>, double, std::int64_t,
                               bool, std::vector<std::int64_t>, core::ScalarType, core::Device,
                               core::Scalar, std::string, rng::Generator*>;
  Variant v;  ///< the value; a Generator* is not owned

  /// None.
  IValue() = default;
  /// Holds `x`, converted to the Variant alternative std::variant's converting constructor picks.
  template <typename T, typename = std::enable_if_t<!std::is_same_v<std::decay_t<T>, IValue>>>
  IValue(T&& x) : v(std::forward<T>(x)) {}  // NOLINT(google-explicit-constructor)

  /// True when a core::Tensor is held.
  bool is_tensor() const noexcept { return std::holds_alternative<core::Tensor>(v); }
  /// True when None is held.
  bool is_none() const noexcept { return std::holds_alternative<None>(v); }
  /// The held tensor. Throws std::bad_variant_access when no tensor is held.
  core::Tensor& tensor() { return std::get<core::Tensor>(v); }
  /// The held tensor. Throws std::bad_variant_access when no tensor is held.
  const core::Tensor& tensor() const { return std::get<core::Tensor>(v); }
};

/// Boxed arguments (in order) going into a kernel; its results (in order) coming out.
using Stack = std::vector<IValue>;

namespace detail {
template <typename T>
T& get_or_throw(IValue& iv) {
  auto* p = std::get_if<T>(&iv.v);
  TB_CHECK_T(TypeError, p != nullptr,
             "[dispatch] boxed argument has the wrong type (variant index ", iv.v.index(), ")");
  return *p;
}
}  // namespace detail

/// How a C++ argument/return type is boxed and unboxed.
template <typename T>
struct IValueTraits {
  /// An IValue holding a copy of `x`.
  static IValue box(const T& x) { return IValue(x); }
  /// The T held by `iv` (a reference into it). Throws tb::TypeError if `iv` holds another type.
  static T& unbox(IValue& iv) { return detail::get_or_throw<T>(iv); }
};

/// An IntList is boxed as an owning std::vector<std::int64_t>.
template <>
struct IValueTraits<core::IntList> {
  /// Copies the viewed values into the IValue.
  static IValue box(core::IntList x) {
    return IValue(std::vector<std::int64_t>(x.begin(), x.end()));
  }
  /// A view of the vector held by `iv` (valid while `iv` lives unchanged). Throws tb::TypeError
  /// if `iv` holds no std::vector<std::int64_t>.
  static core::IntList unbox(IValue& iv) {
    return core::IntList(detail::get_or_throw<std::vector<std::int64_t>>(iv));
  }
};

/// An empty optional is boxed as None; a full one as its value.
template <typename T>
struct IValueTraits<std::optional<T>> {
  /// None for an empty optional, else the boxed value.
  static IValue box(const std::optional<T>& x) { return x ? IValueTraits<T>::box(*x) : IValue(); }
  /// std::nullopt for None, else a copy of the unboxed value (throws like IValueTraits<T>).
  static std::optional<T> unbox(IValue& iv) {
    if (iv.is_none()) return std::nullopt;
    return IValueTraits<T>::unbox(iv);
  }
};

/// A null generator (use the default one) is boxed as None. The generator is not owned.
template <>
struct IValueTraits<rng::Generator*> {
  /// None for null, else the pointer.
  static IValue box(rng::Generator* g) { return g ? IValue(g) : IValue(); }
  /// Null for None, else the pointer. Throws tb::TypeError if `iv` holds another type.
  static rng::Generator* unbox(IValue& iv) {
    if (iv.is_none()) return nullptr;
    return detail::get_or_throw<rng::Generator*>(iv);
  }
};

/// Pushes a typed result onto a stack / pops it back.
template <typename R>
struct ReturnTraits {
  /// Appends the boxed `r` to `s`.
  static void push(Stack& s, R&& r) { s.emplace_back(IValueTraits<R>::box(r)); }
  /// Moves the single value out of `s` (the slot stays, moved-from). Throws tb::InternalError if
  /// `s` does not hold exactly one value, tb::TypeError if it has the wrong type.
  static R pop(Stack& s) {
    TB_INTERNAL_ASSERT(s.size() == 1, "boxed kernel returned ", s.size(), " values, expected 1");
    return std::move(IValueTraits<R>::unbox(s[0]));
  }
};

/// A tuple result occupies one stack slot per element, in order.
template <typename... Ts>
struct ReturnTraits<std::tuple<Ts...>> {
  /// Appends each boxed element of `r` to `s`.
  static void push(Stack& s, std::tuple<Ts...>&& r) {
    std::apply(
        [&](auto&... xs) {
          (s.emplace_back(IValueTraits<std::decay_t<decltype(xs)>>::box(xs)), ...);
        },
        r);
  }
  /// Unboxes the elements from `s`. Throws tb::InternalError if `s` does not hold exactly
  /// sizeof...(Ts) values, tb::TypeError if one has the wrong type.
  static std::tuple<Ts...> pop(Stack& s) {
    TB_INTERNAL_ASSERT(s.size() == sizeof...(Ts), "boxed kernel returned ", s.size(),
                       " values, expected ", sizeof...(Ts));
    return pop_impl(s, std::index_sequence_for<Ts...>{});
  }

 private:
  template <std::size_t... I>
  static std::tuple<Ts...> pop_impl(Stack& s, std::index_sequence<I...>) {
    return std::tuple<Ts...>(std::move(IValueTraits<Ts>::unbox(s[I]))...);
  }
};

/// Boxes each argument onto `s`.
template <typename... Args>
void box_args(Stack& s, const Args&... args) {
  s.reserve(s.size() + sizeof...(Args));
  (s.emplace_back(IValueTraits<std::decay_t<Args>>::box(args)), ...);
}

}  // namespace tb::dispatch
