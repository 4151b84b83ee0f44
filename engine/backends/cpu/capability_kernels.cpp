// One level's registration: compiled once per CPU capability level, like the kernel files.
#include "engine/backends/cpu/capability_kernels.h"

namespace tb::cpu::TB_CPU_CAPABILITY {

void register_capability_kernels(dispatch::Dispatcher& d) {
  register_elementwise_kernels(d);
  register_reduce_kernels(d);
  register_softmax_index_kernels(d);
  register_random_kernels(d);
  register_nn_kernels(d);
  register_attention_kernels(d);
  register_amp_kernels(d);
  register_optim_kernels(d);
  register_conv_kernels(d);
}

}  // namespace tb::cpu::TB_CPU_CAPABILITY
