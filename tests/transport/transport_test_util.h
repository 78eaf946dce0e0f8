// Helpers for transport tests: a blocking wait the way the engine will do it (progress, arm,
// poll on the event fd) bounded by a timeout, and a data pattern that differs per (src, dst).
#pragma once

#include <poll.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "lib/core/status.h"
#include "tests/harness/file_bootstrap.h"
#include "transports/transport.h"

namespace zrt::testing {

inline Status wait_all(Transport& transport, const std::vector<TransportCompletion*>& ops,
                       int64_t timeout_ms) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  for (;;) {
    bool all = true;
    for (TransportCompletion* op : ops) all = all && op->done;
    if (all) break;
    if (transport.progress() > 0) continue;
    if (std::chrono::steady_clock::now() > deadline) {
      return Status::error(ZRT_TIMEOUT, "wait_all: no completion within {} ms", timeout_ms);
    }
    if (transport.arm()) {
      // Short poll so that keepalive (driven by progress) still runs while we sleep.
      pollfd fd{transport.event_fd(), POLLIN, 0};
      poll(&fd, 1, 50);
    }
  }
  for (TransportCompletion* op : ops) ZRT_RETURN_IF_ERROR(op->status);
  return Status::ok();
}

inline uint8_t pattern_byte(int src, int dst, size_t index) {
  return static_cast<uint8_t>(((index * 2654435761u) >> 11) ^ (src * 31 + dst * 17 + index));
}

inline void fill_pattern(std::vector<uint8_t>& buffer, int src, int dst) {
  for (size_t i = 0; i < buffer.size(); ++i) buffer[i] = pattern_byte(src, dst, i);
}

// Index of the first wrong byte, or -1.
inline int64_t first_mismatch(const std::vector<uint8_t>& buffer, int src, int dst) {
  for (size_t i = 0; i < buffer.size(); ++i) {
    if (buffer[i] != pattern_byte(src, dst, i)) return static_cast<int64_t>(i);
  }
  return -1;
}

inline std::string run_dir() {
  const char* dir = std::getenv("ZRT_TEST_RUN_DIR");
  return dir != nullptr ? dir : "";
}

}  // namespace zrt::testing
