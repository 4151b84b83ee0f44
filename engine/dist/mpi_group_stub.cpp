// The build without MPI (libopenmpi-dev not found): the "mpi" backend says so.
#include "engine/dist/group_detail.h"

namespace tb::dist {

bool mpi_available() {
  return false;
}

void finalize() {}

void abort_world(int) noexcept {}

namespace detail {

std::shared_ptr<ProcessGroup> make_mpi_group(const GroupOptions&) {
  throw ValueError(
      "[dist] backend 'mpi': this build has no MPI (install Debian's libopenmpi-dev and "
      "openmpi-bin, then configure again)");
}

}  // namespace detail
}  // namespace tb::dist
