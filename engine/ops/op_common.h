// Argument checks shared by the op implementations in engine/ops.
#pragma once

#include "engine/core/tensor.h"

namespace tb::ops::detail {

/// Throws tb::ValueError "[op] argument 'arg' is an undefined tensor".
void check_defined(const char* op, const core::Tensor& t, const char* arg);
/// Throws tb::TypeError naming both devices when a and b live on different devices.
void check_same_device(const char* op, const core::Tensor& a, const core::Tensor& b);
/// True when `op` has a kernel (its own or a fallback) for devices of `device`'s type; a fused
/// op's public function composes ordinary ops otherwise.
bool device_has_kernel(const char* op, const core::Device& device);
/// t itself when it already has `dtype`, else a converted copy.
core::Tensor cast_if_needed(const core::Tensor& t, core::ScalarType dtype);

}  // namespace tb::ops::detail
