// Autocast: the thread-local state, the per-op policy table and the boxed fallback at the
// Autocast dispatch key.
#include "engine/amp/autocast.h"

#include <array>
#include <string>
#include <unordered_map>

#include "engine/dispatch/dispatcher.h"
#include "engine/ops/ops.h"

namespace tb::amp {

using core::ScalarType;
using dispatch::DispatchKey;
using dispatch::DispatchKeySet;
using dispatch::Stack;

namespace {

// ---- the policy: THE one table of ops per category ---------------------------------------------
// Ops not listed here are Promote. Ops that write into an argument are never cast (copy_, fill_,
// add_, mul_, the random fills, the GradScaler ops), whatever their category.
struct PolicyEntry {
  const char* op;
  AutocastCategory category;
};
constexpr PolicyEntry kAutocastPolicy[] = {
    // Matmul-like: the tensor-core/GEMM work runs in the lower precision. (matmul is made of mm and
    // bmm, so it is covered by its pieces.)
    {"mm", AutocastCategory::LowerPrecision},
    {"addmm", AutocastCategory::LowerPrecision},
    {"bmm", AutocastCategory::LowerPrecision},
    {"baddbmm", AutocastCategory::LowerPrecision},
    {"syrk", AutocastCategory::LowerPrecision},
    // Fused attention: its products run in the lower precision, its softmax in float32 inside
    // the kernel (PyTorch's lower-precision list has scaled_dot_product_attention too).
    {"scaled_dot_product_attention", AutocastCategory::LowerPrecision},
    // Reductions that accumulate.
    {"sum", AutocastCategory::Float32},
    {"mean", AutocastCategory::Float32},
    {"norm", AutocastCategory::Float32},
    // Softmax family.
    {"softmax", AutocastCategory::Float32},
    {"log_softmax", AutocastCategory::Float32},
    // Exp/log-type and other range-sensitive pointwise ops (PyTorch's float32 list).
    {"exp", AutocastCategory::Float32},
    {"expm1", AutocastCategory::Float32},
    {"log", AutocastCategory::Float32},
    {"log1p", AutocastCategory::Float32},
    {"pow", AutocastCategory::Float32},
    {"rsqrt", AutocastCategory::Float32},
    {"reciprocal", AutocastCategory::Float32},
    // Normalisation layers (their statistics).
    {"rms_norm", AutocastCategory::Float32},
    {"layer_norm", AutocastCategory::Float32},
    // Losses.
    {"cross_entropy", AutocastCategory::Float32},
    {"cross_entropy_backward", AutocastCategory::Float32},
};

const std::unordered_map<std::string, AutocastCategory>& policy_map() {
  static const auto* m = [] {
    auto* out = new std::unordered_map<std::string, AutocastCategory>();
    for (const auto& e : kAutocastPolicy)
      out->emplace(e.op, e.category);
    return out;
  }();
  return *m;
}

// ---- thread-local state -------------------------------------------------------------------------
struct AutocastState {
  std::array<bool, core::kNumDeviceTypes> enabled{};
  std::array<ScalarType, core::kNumDeviceTypes> dtype{ScalarType::BFloat16, ScalarType::BFloat16,
                                                      ScalarType::BFloat16};
};
thread_local AutocastState tls_state;

int slot(core::DeviceType t) {
  return static_cast<int>(t);
}

// ---- the fallback -------------------------------------------------------------------------------

// Calls f(tensor&) on every tensor argument, including the elements of tensor lists.
template <typename F>
void for_each_tensor(Stack& stack, F&& f) {
  for (auto& iv : stack) {
    if (auto* t = std::get_if<core::Tensor>(&iv.v)) {
      f(*t);
    } else if (auto* ts = std::get_if<std::vector<core::Tensor>>(&iv.v)) {
      for (auto& x : *ts)
        f(x);
    }
  }
}

// Casts the floating inputs of a non-mutating op on the autocast device type by its policy.
void cast_inputs(const std::string& op, Stack& stack) {
  bool found = false;
  core::DeviceType type = core::DeviceType::CPU;
  for_each_tensor(stack, [&](core::Tensor& t) {
    if (!found && t.defined() && core::is_floating_point(t.dtype())) {
      found = true;
      type = t.device().type();
    }
  });
  if (!found || !is_autocast_enabled(type)) return;
  // The floating inputs that autocast may touch: those on the autocast device type.
  bool has_double = false;
  bool first = true;
  ScalarType widest = ScalarType::Float32;
  for_each_tensor(stack, [&](core::Tensor& t) {
    if (!t.defined() || !core::is_floating_point(t.dtype()) || t.device().type() != type) return;
    has_double = has_double || t.dtype() == ScalarType::Float64;
    widest = first ? t.dtype() : core::promote_types(widest, t.dtype());
    first = false;
  });
  if (has_double) return;  // float64 work is left alone
  ScalarType target = widest;
  switch (autocast_category(op)) {
    case AutocastCategory::LowerPrecision:
      target = autocast_dtype(type);
      break;
    case AutocastCategory::Float32:
      target = ScalarType::Float32;
      break;
    case AutocastCategory::Promote:
      break;
  }
  for_each_tensor(stack, [&](core::Tensor& t) {
    if (!t.defined() || !core::is_floating_point(t.dtype()) || t.device().type() != type) return;
    if (t.dtype() != target) t = ops::to_dtype(t, target);  // through copy_: recorded by autograd
  });
}

void autocast_fallback(const dispatch::OperatorHandle& op, DispatchKeySet ks, Stack& stack) {
  // The casts and the op itself run below this layer (autograd still records them).
  dispatch::ExcludeKeysGuard below_autocast{DispatchKeySet(DispatchKey::Autocast)};
  if (op.schema().mutated_args.empty()) cast_inputs(op.name(), stack);
  // (Called through a kernel handle, the set holds only Autocast: dispatch afresh.)
  const DispatchKeySet below = ks.remove(DispatchKey::Autocast);
  if (below.empty()) {
    op.call_boxed(stack);
  } else {
    op.redispatch_boxed(below, stack);
  }
}

}  // namespace

AutocastCategory autocast_category(std::string_view op) {
  const auto& m = policy_map();
  auto it = m.find(std::string(op));
  return it == m.end() ? AutocastCategory::Promote : it->second;
}

bool is_autocast_enabled(core::DeviceType device_type) {
  return tls_state.enabled[static_cast<std::size_t>(slot(device_type))];
}

core::ScalarType autocast_dtype(core::DeviceType device_type) {
  return tls_state.dtype[static_cast<std::size_t>(slot(device_type))];
}

AutocastGuard::AutocastGuard(core::DeviceType device_type, core::ScalarType dtype, bool enabled)
    : device_type_(device_type),
      previous_enabled_(is_autocast_enabled(device_type)),
      previous_dtype_(autocast_dtype(device_type)),
      include_(DispatchKeySet(DispatchKey::Autocast)) {
  TB_CHECK_T(TypeError, dtype == ScalarType::BFloat16 || dtype == ScalarType::Float16,
             "[autocast] 'dtype' must be bfloat16 or float16, got ", dtype);
  const auto i = static_cast<std::size_t>(slot(device_type));
  tls_state.enabled[i] = enabled;
  tls_state.dtype[i] = dtype;
}

AutocastGuard::~AutocastGuard() {
  const auto i = static_cast<std::size_t>(slot(device_type_));
  tls_state.enabled[i] = previous_enabled_;
  tls_state.dtype[i] = previous_dtype_;
}

void register_autocast(dispatch::Dispatcher& d) {
  d.fallback(DispatchKey::Autocast, &autocast_fallback).detach();
}

}  // namespace tb::amp
