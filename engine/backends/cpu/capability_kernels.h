// The kernel files compiled once per CPU capability level (capability.h). Each build defines
// TB_CPU_CAPABILITY as its level's name (baseline, avx2, avx512), so its functions live in their
// own namespace; engine/CMakeLists.txt links the avx2 and avx512 builds as one relocatable object
// each whose inline and template code stays private to it (no one-definition clash with the
// baseline copies of the same header functions).
#pragma once

#include "engine/backends/cpu/kernels.h"

#ifndef TB_CPU_CAPABILITY
#error "capability_kernels.h is included only by the per-capability kernel files"
#endif

namespace tb::cpu::TB_CPU_CAPABILITY {

/// Registers this level's kernels (every file below) at DispatchKey::CPU.
void register_capability_kernels(dispatch::Dispatcher& d);

void register_elementwise_kernels(dispatch::Dispatcher& d);
void register_reduce_kernels(dispatch::Dispatcher& d);
void register_softmax_index_kernels(dispatch::Dispatcher& d);
void register_random_kernels(dispatch::Dispatcher& d);
void register_nn_kernels(dispatch::Dispatcher& d);
void register_attention_kernels(dispatch::Dispatcher& d);
void register_amp_kernels(dispatch::Dispatcher& d);
void register_optim_kernels(dispatch::Dispatcher& d);
void register_conv_kernels(dispatch::Dispatcher& d);

}  // namespace tb::cpu::TB_CPU_CAPABILITY
