// Internals shared by the process-group files. Not part of the engine's API.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "engine/core/scalar_type.h"
#include "engine/dist/process_group.h"

namespace tb::dist::detail {

/// p[i] /= size for float32/float64 data (avg after a sum); nothing for other dtypes.
void divide_in_place(void* data, std::int64_t n, core::ScalarType dtype, int size);
/// gethostname(), "?" when it fails.
std::string host_name();
/// The MPI group (mpi_group.cpp), or a tb::ValueError when the build has no MPI.
std::shared_ptr<ProcessGroup> make_mpi_group(const GroupOptions& options);
/// Whether this build has the NCCL group (nccl_group.cpp; nccl_group_stub.cpp otherwise).
bool nccl_built();
/// The NCCL group of the ranks of `cpu` (its bootstrap and host-data group), or a
/// tb::ValueError when the build has no NCCL, libnccl cannot be loaded or there is no GPU.
std::shared_ptr<ProcessGroup> make_nccl_group(const GroupOptions& options,
                                              std::shared_ptr<ProcessGroup> cpu);

}  // namespace tb::dist::detail
