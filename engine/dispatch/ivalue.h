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
  using None = std::monostate;
  using Variant = std::variant<None, core::Tensor, std::vector<core::Tensor>, double, std::int64_t,
                               bool, std::vector<std::int64_t>, core::ScalarType, core::Device,
                               core::Scalar, std::string, rng::Generator*>;
  Variant v;

  IValue() = default;
  template <typename T>
  IValue(T&& x) : v(std::forward<T>(x)) {}  // NOLINT(google-explicit-constructor)

  bool is_tensor() const noexcept { return std::holds_alternative<core::Tensor>(v); }
  bool is_none() const noexcept { return std::holds_alternative<None>(v); }
  core::Tensor& tensor() { return std::get<core::Tensor>(v); }
  const core::Tensor& tensor() const { return std::get<core::Tensor>(v); }
};

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
  static IValue box(const T& x) { return IValue(x); }
  static T& unbox(IValue& iv) { return detail::get_or_throw<T>(iv); }
};

template <>
struct IValueTraits<core::IntList> {
  static IValue box(core::IntList x) {
    return IValue(std::vector<std::int64_t>(x.begin(), x.end()));
  }
  static core::IntList unbox(IValue& iv) {
    return core::IntList(detail::get_or_throw<std::vector<std::int64_t>>(iv));
  }
};

template <typename T>
struct IValueTraits<std::optional<T>> {
  static IValue box(const std::optional<T>& x) { return x ? IValueTraits<T>::box(*x) : IValue(); }
  static std::optional<T> unbox(IValue& iv) {
    if (iv.is_none()) return std::nullopt;
    return IValueTraits<T>::unbox(iv);
  }
};

template <>
struct IValueTraits<rng::Generator*> {
  static IValue box(rng::Generator* g) { return g ? IValue(g) : IValue(); }
  static rng::Generator* unbox(IValue& iv) {
    if (iv.is_none()) return nullptr;
    return detail::get_or_throw<rng::Generator*>(iv);
  }
};

/// Pushes a typed result onto a stack / pops it back.
template <typename R>
struct ReturnTraits {
  static void push(Stack& s, R&& r) { s.emplace_back(IValueTraits<R>::box(r)); }
  static R pop(Stack& s) {
    TB_INTERNAL_ASSERT(s.size() == 1, "boxed kernel returned ", s.size(), " values, expected 1");
    return std::move(IValueTraits<R>::unbox(s[0]));
  }
};

template <typename... Ts>
struct ReturnTraits<std::tuple<Ts...>> {
  static void push(Stack& s, std::tuple<Ts...>&& r) {
    std::apply(
        [&](auto&... xs) {
          (s.emplace_back(IValueTraits<std::decay_t<decltype(xs)>>::box(xs)), ...);
        },
        r);
  }
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
