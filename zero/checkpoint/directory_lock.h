// The lock of a checkpoint folder: one job writes a folder. Rank 0 of the first save creates
// dir/zrt-checkpoint.lock naming its host, pid (with the process's start time, against pid
// reuse) and job, and keeps it until its manager is destroyed (or the process exits); a save by
// another job into that folder is refused up front with a message naming the owner. A lock whose
// owner is a dead process of this host is stale and taken over (with a warning); one of another
// host cannot be checked and is refused with what to do. Loading never takes the lock.
#pragma once

#include <string>

#include "lib/core/status.h"

namespace zrt {

inline constexpr const char* kCheckpointLockName = "zrt-checkpoint.lock";

// Takes (or confirms this process holds) the lock of `dir`, which must exist, on behalf of
// `holder` (the manager saving). Errors: ZRT_INVALID_USAGE naming the owner, ZRT_SYSTEM_ERROR
// for file errors. Thread-safe.
Status lock_checkpoint_directory(const std::string& dir, const void* holder);

// Removes the locks `holder` took (its manager is being destroyed); nullptr = every lock of
// this process (also done at exit).
void release_checkpoint_directory_locks(const void* holder = nullptr);

}  // namespace zrt
