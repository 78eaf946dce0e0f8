// Waiting on CUDA and NCCL without spinning. Neither library offers a wait that also watches a
// timeout and a peer failure (cudaStreamSynchronize can block forever behind a hung NCCL kernel),
// so zrt polls: a cheap query, then a sleep that doubles from 20 us to 1 ms. A machine may run
// more ranks than cores, so the sleeps matter more than the latency they add.
#pragma once

#include <cstdint>
#include <functional>

#include "lib/core/status.h"

namespace zrt {

// Calls `check` until it returns something other than ZRT_IN_PROGRESS and returns that, or,
// after `timeout_ms` of ZRT_IN_PROGRESS, returns ZRT_TIMEOUT naming `what`. timeout_ms <= 0
// means no timeout (only for waits whose end is guaranteed).
Status poll_until(int64_t timeout_ms, const char* what, const std::function<Status()>& check);

}  // namespace zrt
