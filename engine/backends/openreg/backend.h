// The openreg backend on top of its runtime: the device allocator, one Philox generator per
// device, kernels at the PrivateUse1 dispatch key, and the CPU fallback (global or per op, with a
// deny-list). Registered by engine/api/register_all.cpp; see docs/backend-integration.md.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "engine/dispatch/dispatcher.h"

namespace tb::openreg {

/// The boxed CPU fallback: copies the op's openreg tensor arguments to the CPU, runs the CPU
/// kernel, copies mutated arguments back and moves results to the arguments' openreg device.
/// Throws tb::NotImplementedError naming the op when it is on the deny-list, or when an argument
/// cannot be moved (an openreg generator).
void cpu_fallback(const dispatch::OperatorHandle& op, dispatch::DispatchKeySet keys,
                  dispatch::Stack& stack);

/// Registers the CPU fallback as `op`'s kernel at PrivateUse1 (a per-op fallback, for when the
/// global one is off). Dropping the handle removes it.
[[nodiscard]] dispatch::RegistrationHandle register_fallback_for(
    std::string_view op, dispatch::SourceLocation where = dispatch::SourceLocation::current());

/// Turns the global CPU fallback (the PrivateUse1 per-key fallback, on by default) on or off.
/// With it off, an op without an openreg kernel fails naming the op and device.
void set_global_fallback(bool enabled);
/// Whether the global CPU fallback is registered.
bool global_fallback_enabled();

/// Ops the CPU fallback refuses (default: the random ops, which must draw from the device's
/// generator, and randperm).
std::vector<std::string> fallback_deny_list();
/// Replaces the deny-list.
void set_fallback_deny_list(std::vector<std::string> ops);

/// How often each op went through the CPU fallback in this process (op name -> calls).
std::map<std::string, std::int64_t> fallback_counts();

/// Registers (true, the default) or removes (false) openreg's own compute kernels (the
/// elementwise ops of engine/backends/common/elementwise_math.h — neg ... gelu, add, sub, mul,
/// div, maximum, minimum —, add_, mul_, mm, uniform_, normal_, bernoulli_); without them those
/// ops take the CPU fallback, so results equal the CPU's bit for bit. copy_ and fill_ stay.
void set_native_kernels(bool enabled);
/// Registers (true, done at start-up) or removes (false) everything openreg has at the
/// PrivateUse1 dispatch key: copy_, fill_, the compute kernels and the global fallback. The
/// runtime, allocator and generators stay. Tests of the dispatcher itself use this to get a free
/// key; a vendor can use it to check an out-of-tree registration from scratch.
void set_dispatcher_registration(bool enabled);

/// Whether openreg's own compute kernels are registered.
bool native_kernels_enabled();

/// The ops with an openreg kernel of their own, sorted.
std::vector<std::string> native_ops();

}  // namespace tb::openreg

namespace tb::backends {
/// Registers openreg: names PrivateUse1 "openreg", installs the allocator, the generator
/// factory, the device probe, its kernels and the global CPU fallback.
void register_openreg_backend(dispatch::Dispatcher& d);
}  // namespace tb::backends
