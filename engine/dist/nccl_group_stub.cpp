// Builds without the NCCL group (no CUDA toolkit, or the CPU emulation of the CUDA backend): the
// "nccl" backend says so.
#include "engine/dist/group_detail.h"

namespace tb::dist::detail {

bool nccl_built() {
  return false;
}

std::shared_ptr<ProcessGroup> make_nccl_group(const GroupOptions&, std::shared_ptr<ProcessGroup>) {
  throw ValueError(
      "[dist] backend 'nccl': this build has no NCCL (configure with the CUDA toolkit and its "
      "nccl.h; use 'mpi' for CPU training)");
}

}  // namespace tb::dist::detail
