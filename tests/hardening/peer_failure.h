// Shared pieces of the hardening tests: status assertions, a clock, and the hand-off that lets
// survivors end a stalled or frozen victim once they have seen their error (its pid in the run
// folder), so a test never waits for the harness deadline.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

#include "tests/harness/status_assert.h"
#include "zrt/zrt.h"

namespace zrt::testing {

inline int64_t elapsed_ms(std::chrono::steady_clock::time_point since) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() -
                                                               since)
      .count();
}

// $ZRT_TEST_RUN_DIR, the harness's scratch folder shared by the ranks of one run.
std::string run_dir();

// The victim writes its pid; survivors SIGKILL it (idempotent, harmless if it is already gone).
void publish_victim_pid();
void kill_victim();

// A barrier on `stream`, waited for.
zrt_status_t barrier_sync(zrt_comm_t comm, zrt_stream_t stream);

}  // namespace zrt::testing
