// What can be asked about CUDA and NCCL without a communicator, and without a GPU: how many
// devices are usable (and why none are), NCCL's version, a fresh NCCL unique id. Free of CUDA
// headers so that the C API layer can include it.
#pragma once

#include <array>
#include <cstddef>

#include "lib/core/status.h"

namespace zrt {

// NCCL_UNIQUE_ID_BYTES; checked against nccl.h where it is included.
inline constexpr size_t kNcclUniqueIdBytes = 128;
using NcclUniqueIdBytes = std::array<char, kNcclUniqueIdBytes>;

// The number of CUDA devices this process can use (> 0), or ZRT_UNSUPPORTED whose message
// carries the runtime's reason (e.g. "cudaErrorInsufficientDriver (CUDA driver version is
// insufficient for CUDA runtime version)" on a machine without a GPU).
Status cuda_device_count(int* count);

// NCCL's version code (e.g. 22809 for 2.28.9). Needs no device.
Status nccl_version(int* version);

// A fresh NCCL unique id (the rendezvous token rank 0 hands to the others).
Status nccl_unique_id(NcclUniqueIdBytes* id);

}  // namespace zrt
