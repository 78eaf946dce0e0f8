// The NCCL implementation of a communicator's DeviceContext (engine/device.h): its device,
// its NCCL communicator, and a small device arena for internal scratch. Made by zero/comm's
// Communicator on its first device use (or by ncclCommSplit when the parent communicator has
// one), shared by every CUDA stream, event and partition manager of the communicator, released
// with the last of them.
//
// Device selection: under zrt-run (DeviceContextOptions::device_from_local_rank) device =
// local_rank % device_count, made current on the creating thread; otherwise the caller's current
// device (cudaSetDevice before the first CUDA stream, as with NCCL).
#pragma once

#include <memory>

#include "lib/core/status.h"
#include "engine/device.h"

namespace zrt {

// Collective over options.size ranks: every rank reports its device readiness and rank 0's
// NCCL unique id through `allgather`, so a rank without a usable GPU makes every rank fail with
// the same message (naming it) instead of leaving the others waiting.
Status create_device_context(const DeviceContextOptions& options, const HostAllgather& allgather,
                             std::shared_ptr<DeviceContext>* context);

}  // namespace zrt
