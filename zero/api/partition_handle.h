// The C handle behind zrt_partition_t, shared by the partition and checkpoint entry points.
#pragma once

#include <cstdint>
#include <memory>

#include "zero/api/api_common.h"
#include "zero/api/handles.h"
#include "lib/core/status.h"
#include "zero/partition/partition_manager.h"

inline constexpr uint32_t kPartitionMagic = 0x7a725041;

struct zrt_partition {
  uint32_t magic = kPartitionMagic;
  zrt_comm* comm = nullptr;
  std::unique_ptr<zrt::PartitionManager> impl;
};

namespace zrt::api {

inline Status check_partition_handle(const zrt_partition* pm) {
  if (pm == nullptr) return Status::invalid_argument("pm is NULL");
  if (pm->magic != kPartitionMagic || pm->impl == nullptr) {
    return Status::invalid_argument("pm is not a live zrt_partition_t");
  }
  // The training thread's log lines (a fetch's warning, say) carry its rank.
  note_thread_rank(pm->comm);
  return Status::ok();
}

}  // namespace zrt::api
