// The operator registry: operators by name, kernels per dispatch key, per-key fallbacks,
// RAII registration handles, safe kernel handles, and a dump of the whole table.
//
// Resolution for (op, key), recomputed whenever registrations change: the kernel registered for
// that key; else the key's fallback; else, for the layer keys (Autocast, Autograd), fall through
// to the next key; else the op is missing a kernel for that device (a clear error names the op,
// the device, and the devices that have a kernel).
#pragma once

#include <array>
#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <shared_mutex>
#if __has_include(<source_location>)
#include <source_location>
#endif
#include <string>
#include <string_view>
#include <typeindex>
#include <vector>

#include "engine/core/error.h"
#include "engine/dispatch/dispatch_key.h"
#include "engine/dispatch/ivalue.h"

namespace tb::dispatch {

/// Where a kernel was registered: std::source_location, or (clang 14 with libstdc++ 12, which
/// lacks it — the `fuzz` preset) an equivalent built on the compiler's __builtin_FILE/LINE.
#if defined(__cpp_lib_source_location)
using SourceLocation = std::source_location;
#else
struct SourceLocation {
  /// The caller's file and line (as std::source_location::current()).
  static constexpr SourceLocation current(const char* file = __builtin_FILE(),
                                          unsigned line = __builtin_LINE()) noexcept {
    SourceLocation l;
    l.file_ = file;
    l.line_ = line;
    return l;
  }
  /// The file name.
  constexpr const char* file_name() const noexcept { return file_; }
  /// The line.
  constexpr unsigned line() const noexcept { return line_; }

 private:
  const char* file_ = "";
  unsigned line_ = 0;
};
#endif

class OperatorEntry;
class OperatorHandle;

/// A kernel that handles any operator in boxed form (fallbacks, generic wrappers).
using BoxedKernel =
    std::function<void(const OperatorHandle& op, DispatchKeySet keys, Stack& stack)>;

/// Liveness flag shared between a registered kernel and the SafeKernelHandles taken from it.
class KernelToken {
 public:
  /// True until invalidate() is called. Thread-safe.
  bool valid() const noexcept { return !invalid_.load(std::memory_order_acquire); }
  /// Marks the kernel gone, permanently. Thread-safe.
  void invalidate() noexcept { invalid_.store(true, std::memory_order_release); }

 private:
  std::atomic<bool> invalid_{false};
};

/// A registered kernel: a typed std::function, or a boxed one. When the registration goes away
/// (or the object dies) every token registered with it is invalidated.
class KernelFunction {
 public:
  /// A typed kernel with C++ signature Sig (signature() is typeid(Sig)).
  template <typename Sig>
  static std::shared_ptr<KernelFunction> make_typed(std::function<Sig> fn) {
    auto k = std::shared_ptr<KernelFunction>(new KernelFunction(typeid(Sig)));
    k->typed_ = std::make_shared<const std::function<Sig>>(std::move(fn));
    return k;
  }
  /// A boxed kernel (signature() is typeid(void)).
  static std::shared_ptr<KernelFunction> make_boxed(BoxedKernel fn);

  /// A copy of the callable parts (no token registrations are transferred).
  std::shared_ptr<KernelFunction> copy() const;

  /// Invalidates every registered token.
  ~KernelFunction();
  KernelFunction(const KernelFunction&) = delete;
  KernelFunction& operator=(const KernelFunction&) = delete;

  /// True for a boxed kernel, false for a typed one.
  bool is_boxed() const noexcept { return typed_ == nullptr; }
  /// typeid of the typed kernel's signature; typeid(void) for a boxed kernel.
  std::type_index signature() const noexcept { return sig_; }
  /// The typed callable. Unchecked: undefined behaviour unless !is_boxed() and Sig is exactly
  /// the signature it was made with (compare signature() first).
  template <typename Sig>
  const std::function<Sig>& typed() const {
    return *static_cast<const std::function<Sig>*>(typed_.get());
  }
  /// The boxed callable (empty for a typed kernel).
  const BoxedKernel& boxed() const noexcept { return boxed_; }

  /// Remembers `token` (weakly) so that invalidate_tokens() reaches it. Thread-safe.
  void register_token(const std::shared_ptr<KernelToken>& token);
  /// Invalidates every registered token that is still alive and forgets them all. Thread-safe.
  void invalidate_tokens() noexcept;

 private:
  explicit KernelFunction(std::type_index sig) : sig_(sig) {}
  std::type_index sig_;
  std::shared_ptr<const void> typed_;
  BoxedKernel boxed_;
  std::mutex tokens_mutex_;
  std::vector<std::weak_ptr<KernelToken>> tokens_;
};

/// Extra facts about an operator that generic code (fallbacks) needs.
struct OpSchema {
  /// Indices of arguments the op writes into (in-place and out= ops). A fallback that runs the
  /// op on copies must copy these back.
  std::vector<int> mutated_args;
  /// Whether the op is differentiable (autograd coverage tests use this).
  bool differentiable = false;
  /// One-line description for the dump.
  std::string doc;
};

/// How a table entry was produced.
enum class KernelSource : std::uint8_t { Kernel, Fallback, Fallthrough, Missing };

/// One row of the dispatch-table dump.
struct DispatchTableRow {
  std::string op;       ///< operator name
  DispatchKey key;      ///< the dispatch key of this entry
  KernelSource source;  ///< how the entry was resolved
  std::string where;    ///< file:line of the registration ("" when missing/fallthrough)
};

/// Undoes a registration when destroyed (or when reset() is called). Move-only.
class RegistrationHandle {
 public:
  /// An inactive handle (undoes nothing).
  RegistrationHandle() = default;
  /// A handle that calls `undo` once, on reset() or destruction. `undo` should not throw.
  explicit RegistrationHandle(std::function<void()> undo) : undo_(std::move(undo)) {}
  /// Takes over `o`'s registration.
  RegistrationHandle(RegistrationHandle&&) noexcept = default;
  /// Deregisters the current registration (if any), then takes over `o`'s; `o` becomes inactive.
  RegistrationHandle& operator=(RegistrationHandle&& o) noexcept {
    reset();
    undo_ = std::move(o.undo_);
    o.undo_ = nullptr;
    return *this;
  }
  ~RegistrationHandle() { reset(); }
  /// Deregisters now.
  void reset() noexcept;
  /// Keeps the registration for the life of the process (built-in kernels).
  void detach() noexcept { undo_ = nullptr; }
  /// True while the handle still has a registration to undo.
  bool active() const noexcept { return static_cast<bool>(undo_); }

 private:
  std::function<void()> undo_;
};

/// A kernel taken out of the table with get_kernel(): its own copy of the function, bound to a
/// token of the registration that produced it. Once that registration is gone, calling raises
/// "[dispatch] SafeKernelFunction has been invalidated <debug>" instead of calling a dead kernel.
class SafeKernelHandle {
 public:
  /// Made by Dispatcher::get_kernel(): `kernel` is the handle's own copy, `token` the liveness
  /// flag registered with the original, `op` keeps the operator alive, `debug` describes the
  /// origin for error messages.
  SafeKernelHandle(std::shared_ptr<KernelFunction> kernel, std::shared_ptr<KernelToken> token,
                   std::shared_ptr<const OperatorEntry> op, DispatchKey key, std::string debug)
      : kernel_(std::move(kernel)),
        token_(std::move(token)),
        op_(std::move(op)),
        key_(key),
        debug_(std::move(debug)) {}

  /// False once the registration it came from is gone (calls then throw tb::Error).
  bool valid() const noexcept { return token_ && token_->valid(); }
  /// "(op NAME, key KEY, kernel|fallback registered at FILE:LINE)".
  const std::string& debug() const noexcept { return debug_; }
  /// The dispatch key the kernel was taken for.
  DispatchKey key() const noexcept { return key_; }

  /// Calls the kernel with typed arguments; Sig must be the operator's signature. Throws
  /// tb::Error when invalidated, tb::TypeError when a typed kernel's signature differs from Sig.
  template <typename Sig, typename... Args>
  decltype(auto) call(Args&&... args) const;
  /// Calls the kernel on a boxed stack (arguments in, results out). Throws tb::Error when
  /// invalidated.
  void call_boxed(Stack& stack) const;

 private:
  void check_valid() const;
  std::shared_ptr<KernelFunction> kernel_;
  std::shared_ptr<KernelToken> token_;
  std::shared_ptr<const OperatorEntry> op_;
  DispatchKey key_;
  std::string debug_;
};

/// An operator: its name, signature, schema facts, registrations and computed table.
class OperatorEntry : public std::enable_shared_from_this<OperatorEntry> {
 public:
  /// Runs a typed kernel of this op on a boxed stack (unbox arguments, call, box results).
  using BoxedCaller = void (*)(const KernelFunction& kernel, Stack& stack);

  /// Made by Dispatcher::define(); `sig` is typeid of the C++ signature, `sig_name` its name.
  OperatorEntry(std::string name, std::type_index sig, std::string sig_name, OpSchema schema,
                BoxedCaller boxed_caller)
      : name_(std::move(name)),
        sig_(sig),
        sig_name_(std::move(sig_name)),
        schema_(std::move(schema)),
        boxed_caller_(boxed_caller) {}

  /// The operator's name.
  const std::string& name() const noexcept { return name_; }
  /// typeid of the operator's C++ signature.
  std::type_index signature() const noexcept { return sig_; }
  /// The schema facts given at definition.
  const OpSchema& schema() const noexcept { return schema_; }

  /// One resolved table entry.
  struct Computed {
    std::shared_ptr<KernelFunction> kernel;       ///< what runs; null for fallthrough/missing
    KernelSource source = KernelSource::Missing;  ///< how it was resolved
    std::string where;                            ///< file:line of the registration ("" when none)
  };

  /// The computed entry for `key` (a copy; safe to use after the lock is released).
  Computed computed(DispatchKey key) const;
  /// Fast path: the kernel to run for `key`, or null (fallthrough or missing; see `source`).
  std::shared_ptr<KernelFunction> lookup(DispatchKey key, KernelSource& source) const {
    std::shared_lock lock(mutex_);
    const auto& c = table_[static_cast<int>(key)];
    source = c.source;
    return c.kernel;
  }
  /// True when a kernel of its own (not a fallback) is registered for `key`.
  bool has_kernel(DispatchKey key) const;

  /// Runs a (typed or boxed) kernel of this op on a boxed stack.
  void call_kernel_boxed(const KernelFunction& k, const OperatorHandle& op, DispatchKeySet keys,
                         Stack& stack) const;

  /// Throws the missing-kernel error for `key` (device text is the device the call was for).
  [[noreturn]] void throw_missing(DispatchKey key, const std::string& device_text) const;

 private:
  friend class Dispatcher;
  std::string name_;
  std::type_index sig_;
  std::string sig_name_;
  OpSchema schema_;
  BoxedCaller boxed_caller_;
  mutable std::shared_mutex mutex_;
  struct Registration {
    std::shared_ptr<KernelFunction> kernel;
    std::string where;
  };
  std::array<Registration, kNumDispatchKeys> kernels_;
  std::array<Computed, kNumDispatchKeys> table_;
};

/// A cheap, copyable reference to an operator.
class OperatorHandle {
 public:
  /// A null handle: only entry_ptr() may be used on it.
  OperatorHandle() = default;
  /// A handle sharing ownership of `e`.
  explicit OperatorHandle(std::shared_ptr<OperatorEntry> e) : entry_(std::move(e)) {}
  /// The operator's name. Precondition (like the other accessors): the handle is not null.
  const std::string& name() const { return entry_->name(); }
  /// The operator's schema facts.
  const OpSchema& schema() const { return entry_->schema(); }
  /// The operator; lives at least as long as this handle.
  OperatorEntry& entry() const { return *entry_; }
  /// The owning pointer to the operator (null for a null handle).
  const std::shared_ptr<OperatorEntry>& entry_ptr() const { return entry_; }
  /// Calls the op on a boxed stack, dispatching on the tensors in it (minus `skip` keys).
  void call_boxed(Stack& stack, DispatchKeySet skip = {}) const;
  /// Continues a dispatch with exactly the keys `ks` (a layer's fallback passes on the set it was
  /// called with, minus its own key, so keys skipped by the caller stay skipped).
  void redispatch_boxed(DispatchKeySet ks, Stack& stack) const;
  /// Calls the kernel that `key` resolves to (used by fallbacks to run e.g. the CPU kernel).
  void call_boxed_at(DispatchKey key, Stack& stack) const;

 private:
  std::shared_ptr<OperatorEntry> entry_;
};

namespace detail {

// Dispatch keys of one argument: a tensor contributes its backend (and Autograd when it
// requires grad); a Device argument (factory ops) contributes its backend.
inline void collect_keys(DispatchKeySet& ks, const core::Tensor& t) {
  if (!t.defined()) return;
  const core::TensorImpl* im = t.impl();
  ks = ks.add(backend_key(im->device.type()));
  if (im->requires_grad) ks = ks.add(DispatchKey::Autograd);
}
inline void collect_keys(DispatchKeySet& ks, const std::optional<core::Tensor>& t) {
  if (t) collect_keys(ks, *t);
}
inline void collect_keys(DispatchKeySet& ks, const std::vector<core::Tensor>& ts) {
  for (const auto& t : ts)
    collect_keys(ks, t);
}
inline void collect_keys(DispatchKeySet& ks, const core::Device& d) {
  ks = ks.add(backend_key(d.type()));
}
inline void collect_keys(DispatchKeySet& ks, const std::optional<core::Device>& d) {
  if (d) ks = ks.add(backend_key(d->type()));
}
template <typename T>
inline void collect_keys(DispatchKeySet&, const T&) {}

DispatchKeySet tls_included_keys() noexcept;

// Device text for the missing-kernel message: the first tensor/device argument of that type.
inline void find_device(std::string& out, core::DeviceType type, const core::Tensor& t) {
  if (out.empty() && t.defined() && t.device().type() == type) out = t.device().str();
}
inline void find_device(std::string& out, core::DeviceType type, const core::Device& d) {
  if (out.empty() && d.type() == type) out = d.str();
}
inline void find_device(std::string& out, core::DeviceType type,
                        const std::vector<core::Tensor>& ts) {
  for (const auto& t : ts)
    find_device(out, type, t);
}
template <typename T>
inline void find_device(std::string&, core::DeviceType, const T&) {}

template <typename Sig>
struct SigTraits;
template <typename Ret, typename... Args>
struct SigTraits<Ret(Args...)> {
  // Unboxes the stack into typed arguments, calls the typed kernel, boxes the result.
  static void call_from_stack(const KernelFunction& k, Stack& s) {
    TB_CHECK_T(TypeError, s.size() == sizeof...(Args), "[dispatch] boxed call with ", s.size(),
               " arguments, the op takes ", sizeof...(Args));
    call_impl(k.typed<Ret(Args...)>(), s, std::index_sequence_for<Args...>{});
  }
  template <std::size_t... I>
  static void call_impl(const std::function<Ret(Args...)>& f, Stack& s, std::index_sequence<I...>) {
    if constexpr (std::is_void_v<Ret>) {
      f(IValueTraits<std::decay_t<Args>>::unbox(s[I])...);
      s.clear();
    } else {
      Ret r = f(IValueTraits<std::decay_t<Args>>::unbox(s[I])...);
      s.clear();
      ReturnTraits<std::decay_t<Ret>>::push(s, std::move(r));
    }
  }
};

}  // namespace detail

template <typename Sig>
class TypedOp;

/// Typed, cached access to one operator: the hot path of every op call.
template <typename Ret, typename... Args>
class TypedOp<Ret(Args...)> {
 public:
  /// A null TypedOp; call() must not be used on it.
  TypedOp() = default;
  /// Wraps `h`, whose signature must be Ret(Args...) (Dispatcher::typed() checks it).
  explicit TypedOp(OperatorHandle h) : handle_(std::move(h)) {}
  /// The underlying operator handle.
  const OperatorHandle& handle() const { return handle_; }

  /// Dispatches on the arguments' devices (and autograd/autocast state) and runs the kernel.
  /// Throws tb::ValueError when no argument yields a dispatch key, tb::NotImplementedError when
  /// the resolved key has no kernel, and whatever the kernel throws.
  Ret call(Args... args) const { return call_skipping(DispatchKeySet(), args...); }

  /// Like call(), but `skip` keys are left out of this one dispatch (not of ops the kernel
  /// calls, unlike an ExcludeKeysGuard): e.g. copy_ skips CPU so that the device backend does a
  /// host<->device transfer while its kernel can still run CPU ops on host buffers.
  Ret call_skipping(DispatchKeySet skip, Args... args) const {
    DispatchKeySet ks;
    (detail::collect_keys(ks, args), ...);
    ks = (ks | detail::tls_included_keys()) - tls_excluded_keys() - skip;
    OperatorEntry& e = handle_.entry();
    while (true) {
      TB_CHECK(!ks.empty(), "[dispatch] op '", e.name(),
               "' was called without any tensor or device argument to dispatch on");
      const DispatchKey key = ks.highest();
      KernelSource source;
      std::shared_ptr<KernelFunction> k = e.lookup(key, source);
      if (source == KernelSource::Fallthrough) {
        ks = ks.remove(key);
        continue;
      }
      if (k == nullptr) {
        std::string device;
        (detail::find_device(device, key_device_type(key), args), ...);
        e.throw_missing(key,
                        device.empty() ? core::device_type_name(key_device_type(key)) : device);
      }
      if (!k->is_boxed()) return k->template typed<Ret(Args...)>()(std::forward<Args>(args)...);
      Stack s;
      box_args(s, args...);
      k->boxed()(handle_, ks, s);
      if constexpr (std::is_void_v<Ret>) {
        return;
      } else {
        return ReturnTraits<std::decay_t<Ret>>::pop(s);
      }
    }
  }

 private:
  OperatorHandle handle_;
};

/// The process-wide registry.
class Dispatcher {
 public:
  /// The registry with every built-in op and kernel registered (done once, on first use).
  static Dispatcher& singleton();
  /// The bare registry, without triggering built-in registration (used by registration code).
  static Dispatcher& raw();

  /// Defines an operator with C++ signature Sig. Defining a name twice throws tb::ValueError.
  template <typename Sig>
  OperatorHandle define(std::string name, OpSchema schema = {},
                        SourceLocation where = SourceLocation::current()) {
    (void)where;
    return define_impl(std::move(name), typeid(Sig), &detail::SigTraits<Sig>::call_from_stack,
                       std::move(schema));
  }

  /// The operator named `name`. Throws tb::ValueError "operator NAME does not exist".
  OperatorHandle find(std::string_view name) const;
  /// True when an operator named `name` is defined.
  bool exists(std::string_view name) const;
  /// Names of every defined operator, sorted.
  std::vector<std::string> op_names() const;

  /// Typed access; throws tb::TypeError if Sig differs from the op's defined signature.
  template <typename Sig>
  TypedOp<Sig> typed(std::string_view name) const {
    OperatorHandle h = find(name);
    check_signature(h, typeid(Sig));
    return TypedOp<Sig>(std::move(h));
  }

  /// Registers a typed kernel for (op, key). A second registration for the same (op, key) while
  /// the first is alive throws tb::ValueError. Dropping the handle deregisters it.
  template <typename Sig, typename F>
  [[nodiscard]] RegistrationHandle impl(std::string_view op, DispatchKey key, F&& fn,
                                        SourceLocation where = SourceLocation::current()) {
    OperatorHandle h = find(op);
    check_signature(h, typeid(Sig));
    return register_kernel(h, key,
                           KernelFunction::make_typed<Sig>(std::function<Sig>(std::forward<F>(fn))),
                           where_text(where));
  }

  /// Registers a boxed kernel for one op at `key` (e.g. a per-op fallback).
  [[nodiscard]] RegistrationHandle impl_boxed(std::string_view op, DispatchKey key, BoxedKernel fn,
                                              SourceLocation where = SourceLocation::current());

  /// Registers a per-key fallback, used for every op without its own kernel at `key`.
  /// One fallback per key; a second throws tb::ValueError.
  [[nodiscard]] RegistrationHandle fallback(DispatchKey key, BoxedKernel fn,
                                            SourceLocation where = SourceLocation::current());

  /// A safe handle to the kernel that `key` resolves to for `op` (direct kernel or fallback).
  /// Throws "operator NAME does not exist" or a missing-kernel error.
  SafeKernelHandle get_kernel(std::string_view op, DispatchKey key) const;
  /// Same with the key given by name; an unknown name raises "Invalid dispatch key: NAME".
  SafeKernelHandle get_kernel(std::string_view op, std::string_view key) const;

  /// Every (op, key) entry of the computed table, ops sorted by name.
  std::vector<DispatchTableRow> dump() const;

 private:
  Dispatcher() = default;
  OperatorHandle define_impl(std::string name, std::type_index sig,
                             OperatorEntry::BoxedCaller caller, OpSchema schema);
  void check_signature(const OperatorHandle& h, std::type_index sig) const;
  RegistrationHandle register_kernel(const OperatorHandle& h, DispatchKey key,
                                     std::shared_ptr<KernelFunction> k, std::string where);
  void recompute(OperatorEntry& e) const;  // caller holds e.mutex_ exclusively
  static std::string where_text(const SourceLocation& loc);

  mutable std::shared_mutex mutex_;  // guards ops_ and fallbacks_
  std::vector<std::shared_ptr<OperatorEntry>> ops_;
  struct Fallback {
    std::shared_ptr<KernelFunction> kernel;
    std::string where;
  };
  std::array<Fallback, kNumDispatchKeys> fallbacks_;
};

template <typename Sig, typename... Args>
decltype(auto) SafeKernelHandle::call(Args&&... args) const {
  check_valid();
  TB_CHECK_T(TypeError, kernel_->is_boxed() || kernel_->signature() == std::type_index(typeid(Sig)),
             "[dispatch] SafeKernelHandle::call with a signature that differs from the op's");
  if (!kernel_->is_boxed()) return kernel_->typed<Sig>()(std::forward<Args>(args)...);
  using Ret = typename std::function<Sig>::result_type;
  Stack s;
  box_args(s, args...);
  call_boxed(s);
  if constexpr (std::is_void_v<Ret>) {
    return;
  } else {
    return ReturnTraits<std::decay_t<Ret>>::pop(s);
  }
}

/// Registers every built-in op and every compiled-in backend's kernels
/// (engine/api/register_all.cpp, the composition root).
void register_all();

}  // namespace tb::dispatch
