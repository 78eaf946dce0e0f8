// ArenaBackend: where a partition manager's one arena block comes from. Host memory registered
// with the transport (zero/partition/arena.h), or device memory made by the communicator's
// DeviceContext (engine/device.h). Declared here, below the partition and the NCCL layer,
// because both implement or use it.
#pragma once

#include <cstddef>

#include "lib/core/status.h"

namespace zrt {

class ArenaBackend {
 public:
  virtual ~ArenaBackend() = default;
  virtual Status allocate(size_t bytes, void** block) = 0;  // zero-filled, touched
  virtual void free(void* block) = 0;
};

}  // namespace zrt
