// Operator registry implementation: definition, registration, table computation, dump.
#include "engine/dispatch/dispatcher.h"

#include <algorithm>
#include <sstream>

#include "engine/core/allocator.h"

namespace tb::dispatch {

// ---- keys ---------------------------------------------------------------------------------------

namespace {
constexpr std::string_view kKeyNames[kNumDispatchKeys] = {"Autocast", "Autograd", "CPU", "CUDA",
                                                          "PrivateUse1"};
thread_local DispatchKeySet tls_excluded;
thread_local DispatchKeySet tls_included;
}  // namespace

std::string_view dispatch_key_name(DispatchKey k) noexcept {
  return kKeyNames[static_cast<int>(k)];
}

DispatchKey parse_dispatch_key(std::string_view name) {
  for (int i = 0; i < kNumDispatchKeys; ++i) {
    if (kKeyNames[i] == name) return static_cast<DispatchKey>(i);
  }
  throw ValueError(tb::detail::str_cat("Invalid dispatch key: ", name));
}

DispatchKeySet tls_excluded_keys() noexcept {
  return tls_excluded;
}
DispatchKeySet detail::tls_included_keys() noexcept {
  return tls_included;
}

ExcludeKeysGuard::ExcludeKeysGuard(DispatchKeySet keys) : previous_(tls_excluded) {
  tls_excluded = tls_excluded | keys;
}
ExcludeKeysGuard::~ExcludeKeysGuard() {
  tls_excluded = previous_;
}

IncludeKeysGuard::IncludeKeysGuard(DispatchKeySet keys) : previous_(tls_included) {
  tls_included = tls_included | keys;
}
IncludeKeysGuard::~IncludeKeysGuard() {
  tls_included = previous_;
}

// ---- kernels and handles ------------------------------------------------------------------------

std::shared_ptr<KernelFunction> KernelFunction::make_boxed(BoxedKernel fn) {
  auto k = std::shared_ptr<KernelFunction>(new KernelFunction(typeid(void)));
  k->boxed_ = std::move(fn);
  return k;
}

std::shared_ptr<KernelFunction> KernelFunction::copy() const {
  auto k = std::shared_ptr<KernelFunction>(new KernelFunction(sig_));
  k->typed_ = typed_;
  k->boxed_ = boxed_;
  return k;
}

KernelFunction::~KernelFunction() {
  invalidate_tokens();
}

void KernelFunction::register_token(const std::shared_ptr<KernelToken>& token) {
  std::lock_guard lock(tokens_mutex_);
  // Drop tokens whose handles are gone so the list does not grow without bound.
  std::erase_if(tokens_, [](const auto& w) { return w.expired(); });
  tokens_.push_back(token);
}

void KernelFunction::invalidate_tokens() noexcept {
  std::lock_guard lock(tokens_mutex_);
  for (auto& w : tokens_) {
    if (auto t = w.lock()) t->invalidate();
  }
  tokens_.clear();
}

void RegistrationHandle::reset() noexcept {
  if (undo_) {
    auto undo = std::move(undo_);
    undo_ = nullptr;
    undo();
  }
}

void SafeKernelHandle::check_valid() const {
  if (!valid()) {
    throw Error("[dispatch] SafeKernelFunction has been invalidated " + debug_ +
                " (its kernel was deregistered)");
  }
}

void SafeKernelHandle::call_boxed(Stack& stack) const {
  check_valid();
  op_->call_kernel_boxed(*kernel_, OperatorHandle(std::const_pointer_cast<OperatorEntry>(op_)),
                         DispatchKeySet(key_), stack);
}

// ---- operator entries ---------------------------------------------------------------------------

OperatorEntry::Computed OperatorEntry::computed(DispatchKey key) const {
  std::shared_lock lock(mutex_);
  return table_[static_cast<int>(key)];
}

bool OperatorEntry::has_kernel(DispatchKey key) const {
  std::shared_lock lock(mutex_);
  return kernels_[static_cast<int>(key)].kernel != nullptr;
}

void OperatorEntry::call_kernel_boxed(const KernelFunction& k, const OperatorHandle& op,
                                      DispatchKeySet keys, Stack& stack) const {
  if (k.is_boxed()) {
    k.boxed()(op, keys, stack);
  } else {
    boxed_caller_(k, stack);
  }
}

void OperatorEntry::throw_missing(DispatchKey key, const std::string& device_text) const {
  std::vector<std::string> have;
  {
    std::shared_lock lock(mutex_);
    for (int i = 0; i < kNumDispatchKeys; ++i) {
      const auto k = static_cast<DispatchKey>(i);
      if (is_backend_key(k) && table_[i].kernel != nullptr) {
        have.push_back(core::device_type_name(key_device_type(k)));
      }
    }
  }
  std::ostringstream os;
  os << "[dispatch] op '" << name_ << "' has no kernel for device " << device_text
     << " (dispatch key " << dispatch_key_name(key) << "); ";
  if (have.empty()) {
    os << "no device has a kernel for it";
  } else {
    os << "it is available on: ";
    for (std::size_t i = 0; i < have.size(); ++i)
      os << (i ? ", " : "") << have[i];
  }
  throw NotImplementedError(os.str());
}

void OperatorHandle::call_boxed(Stack& stack, DispatchKeySet skip) const {
  DispatchKeySet ks;
  for (const auto& iv : stack) {
    if (const auto* t = std::get_if<core::Tensor>(&iv.v)) detail::collect_keys(ks, *t);
    if (const auto* ts = std::get_if<std::vector<core::Tensor>>(&iv.v))
      detail::collect_keys(ks, *ts);
    if (const auto* d = std::get_if<core::Device>(&iv.v)) detail::collect_keys(ks, *d);
  }
  redispatch_boxed((ks | detail::tls_included_keys()) - tls_excluded_keys() - skip, stack);
}

void OperatorHandle::redispatch_boxed(DispatchKeySet ks, Stack& stack) const {
  while (true) {
    TB_CHECK(!ks.empty(), "[dispatch] op '", name(),
             "' was called without any tensor or device argument");
    const DispatchKey key = ks.highest();
    KernelSource source;
    auto k = entry_->lookup(key, source);
    if (source == KernelSource::Fallthrough) {
      ks = ks.remove(key);
      continue;
    }
    if (k == nullptr) entry_->throw_missing(key, core::device_type_name(key_device_type(key)));
    entry_->call_kernel_boxed(*k, *this, ks, stack);
    return;
  }
}

void OperatorHandle::call_boxed_at(DispatchKey key, Stack& stack) const {
  KernelSource source;
  auto k = entry_->lookup(key, source);
  TB_CHECK_T(NotImplementedError, source != KernelSource::Fallthrough, "[dispatch] op '", name(),
             "' has nothing registered at the layer key ", dispatch_key_name(key),
             " (calls fall through it); call a backend key instead");
  if (k == nullptr) entry_->throw_missing(key, core::device_type_name(key_device_type(key)));
  entry_->call_kernel_boxed(*k, *this, DispatchKeySet(key), stack);
}

// ---- dispatcher ---------------------------------------------------------------------------------

Dispatcher& Dispatcher::raw() {
  // Never destroyed: kernels may be deregistered by static destructors of other objects.
  static Dispatcher* d = new Dispatcher();
  return *d;
}

namespace {
// Lets core find device allocators before the first op call has loaded the backends.
[[maybe_unused]] const bool kBackendLoaderInstalled = [] {
  core::set_backend_loader([] { Dispatcher::singleton(); });
  return true;
}();
}  // namespace

Dispatcher& Dispatcher::singleton() {
  static std::once_flag once;
  std::call_once(once, [] { register_all(); });
  return raw();
}

std::string Dispatcher::where_text(const SourceLocation& loc) {
  // The build maps the source directory away (-fmacro-prefix-map), so paths are already
  // repository-relative; otherwise cut at the first top-level folder of the repository.
  std::string file = loc.file_name();
  std::size_t best = std::string::npos;
  for (const char* top : {"engine/", "tests/", "app/", "bench/", "ui/"}) {
    for (auto pos = file.find(top); pos != std::string::npos; pos = file.find(top, pos + 1)) {
      if (pos == 0 || file[pos - 1] == '/') {
        best = std::min(best, pos);
        break;
      }
    }
  }
  if (best != std::string::npos) file = file.substr(best);
  return file + ":" + std::to_string(loc.line());
}

OperatorHandle Dispatcher::define_impl(std::string name, std::type_index sig,
                                       OperatorEntry::BoxedCaller caller, OpSchema schema) {
  TB_CHECK(!name.empty(), "[dispatch] an operator needs a name");
  std::unique_lock lock(mutex_);
  for (const auto& e : ops_) {
    TB_CHECK(e->name() != name, "[dispatch] operator '", name, "' is already defined");
  }
  auto e = std::make_shared<OperatorEntry>(name, sig, sig.name(), std::move(schema), caller);
  {
    std::unique_lock elock(e->mutex_);
    recompute(*e);
  }
  ops_.push_back(e);
  return OperatorHandle(std::move(e));
}

OperatorHandle Dispatcher::find(std::string_view name) const {
  std::shared_lock lock(mutex_);
  for (const auto& e : ops_) {
    if (e->name() == name) return OperatorHandle(e);
  }
  throw ValueError(tb::detail::str_cat("operator ", name, " does not exist"));
}

bool Dispatcher::exists(std::string_view name) const {
  std::shared_lock lock(mutex_);
  return std::any_of(ops_.begin(), ops_.end(), [&](const auto& e) { return e->name() == name; });
}

std::vector<std::string> Dispatcher::op_names() const {
  std::shared_lock lock(mutex_);
  std::vector<std::string> names;
  for (const auto& e : ops_)
    names.push_back(e->name());
  std::sort(names.begin(), names.end());
  return names;
}

void Dispatcher::check_signature(const OperatorHandle& h, std::type_index sig) const {
  TB_CHECK_T(TypeError, h.entry().signature() == sig, "[dispatch] kernel or call for op '",
             h.name(), "' uses a C++ signature that differs from the op's definition");
}

void Dispatcher::recompute(OperatorEntry& e) const {
  for (int i = 0; i < kNumDispatchKeys; ++i) {
    const auto key = static_cast<DispatchKey>(i);
    OperatorEntry::Computed c;
    if (e.kernels_[i].kernel) {
      c = {e.kernels_[i].kernel, KernelSource::Kernel, e.kernels_[i].where};
    } else if (fallbacks_[i].kernel) {
      c = {fallbacks_[i].kernel, KernelSource::Fallback, fallbacks_[i].where};
    } else if (!is_backend_key(key)) {
      c = {nullptr, KernelSource::Fallthrough, ""};
    } else {
      c = {nullptr, KernelSource::Missing, ""};
    }
    e.table_[i] = std::move(c);
  }
}

RegistrationHandle Dispatcher::register_kernel(const OperatorHandle& h, DispatchKey key,
                                               std::shared_ptr<KernelFunction> k,
                                               std::string where) {
  std::shared_lock dlock(mutex_);
  OperatorEntry& e = h.entry();
  std::unique_lock lock(e.mutex_);
  auto& slot = e.kernels_[static_cast<int>(key)];
  TB_CHECK(slot.kernel == nullptr, "[dispatch] op '", e.name(), "' already has a kernel for key ",
           dispatch_key_name(key), " (registered at ", slot.where, "); duplicate registration at ",
           where);
  slot = {k, std::move(where)};
  recompute(e);
  std::weak_ptr<OperatorEntry> weak = h.entry_ptr();
  std::weak_ptr<KernelFunction> weak_k = k;
  return RegistrationHandle([this, weak, weak_k, key] {
    auto entry = weak.lock();
    if (!entry) return;
    std::shared_lock dlock2(mutex_);
    std::unique_lock lock2(entry->mutex_);
    auto& s = entry->kernels_[static_cast<int>(key)];
    if (s.kernel && s.kernel == weak_k.lock()) {
      s.kernel->invalidate_tokens();
      s = {};
      recompute(*entry);
    }
  });
}

RegistrationHandle Dispatcher::impl_boxed(std::string_view op, DispatchKey key, BoxedKernel fn,
                                          SourceLocation where) {
  return register_kernel(find(op), key, KernelFunction::make_boxed(std::move(fn)),
                         where_text(where));
}

RegistrationHandle Dispatcher::fallback(DispatchKey key, BoxedKernel fn, SourceLocation where) {
  auto k = KernelFunction::make_boxed(std::move(fn));
  std::unique_lock lock(mutex_);
  auto& slot = fallbacks_[static_cast<int>(key)];
  TB_CHECK(slot.kernel == nullptr, "[dispatch] key ", dispatch_key_name(key),
           " already has a fallback (registered at ", slot.where, ")");
  slot = {k, where_text(where)};
  for (auto& e : ops_) {
    std::unique_lock elock(e->mutex_);
    recompute(*e);
  }
  std::weak_ptr<KernelFunction> weak_k = k;
  return RegistrationHandle([this, weak_k, key] {
    std::unique_lock lock2(mutex_);
    auto& s = fallbacks_[static_cast<int>(key)];
    if (s.kernel && s.kernel == weak_k.lock()) {
      s.kernel->invalidate_tokens();
      s = {};
      for (auto& e : ops_) {
        std::unique_lock elock(e->mutex_);
        recompute(*e);
      }
    }
  });
}

SafeKernelHandle Dispatcher::get_kernel(std::string_view op, DispatchKey key) const {
  OperatorHandle h = find(op);
  OperatorEntry& e = h.entry();
  const OperatorEntry::Computed c = e.computed(key);
  if (c.kernel == nullptr) {
    TB_CHECK_T(NotImplementedError, c.source != KernelSource::Fallthrough, "[dispatch] get_kernel(",
               op, ", ", dispatch_key_name(key),
               "): nothing is registered at this layer key (calls fall through to the backend)");
    e.throw_missing(key, core::device_type_name(key_device_type(key)));
  }
  auto token = std::make_shared<KernelToken>();
  c.kernel->register_token(token);
  std::string debug = tb::detail::str_cat(
      "(op ", e.name(), ", key ", dispatch_key_name(key), ", ",
      c.source == KernelSource::Fallback ? "fallback" : "kernel", " registered at ", c.where, ")");
  return SafeKernelHandle(c.kernel->copy(), std::move(token), h.entry_ptr(), key, std::move(debug));
}

SafeKernelHandle Dispatcher::get_kernel(std::string_view op, std::string_view key) const {
  return get_kernel(op, parse_dispatch_key(key));
}

std::vector<DispatchTableRow> Dispatcher::dump() const {
  std::vector<std::shared_ptr<OperatorEntry>> ops;
  {
    std::shared_lock lock(mutex_);
    ops = ops_;
  }
  std::sort(ops.begin(), ops.end(),
            [](const auto& a, const auto& b) { return a->name() < b->name(); });
  std::vector<DispatchTableRow> rows;
  for (const auto& e : ops) {
    for (int i = 0; i < kNumDispatchKeys; ++i) {
      const auto c = e->computed(static_cast<DispatchKey>(i));
      rows.push_back({e->name(), static_cast<DispatchKey>(i), c.source, c.where});
    }
  }
  return rows;
}

}  // namespace tb::dispatch
