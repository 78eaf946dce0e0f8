// Rank 2 of 3 never calls a collective, or dies before it: every survivor's call fails with
// ZRT_TIMEOUT or ZRT_REMOTE_ERROR within the timeout (plus the engine's look interval and a loaded
// host's margin; a survivor may hear first that the other timed out and left), a dead peer's
// the same or sooner through the transport's verdict. For the memory-path collectives, whose
// waits are on peers' flags rather than messages.
#pragma once

#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <thread>

#include "tests/collectives/rig.h"
#include "tests/harness/multirank.h"
#include "tests/harness/status_assert.h"

namespace zrt::testing {

// `init` makes the rank's rig with the timeout it is given; `call` runs the collective, five
// times while every rank is there, then once without rank 2.
inline void expect_survivors_fail_without_rank2(
    bool dies, const std::function<Status(Rig&, int rank, int size, int64_t timeout_ms)>& init,
    const std::function<Status(Rig&)>& call) {
  RankOptions options;
  options.deadline_ms = 60000;
  expect_ranks_pass(
      3,
      [&](int rank, int size) {
        constexpr int64_t kTimeoutMs = 2000;
        Rig rig;
        ASSERT_OK(init(rig, rank, size, kTimeoutMs));
        if (::testing::Test::IsSkipped()) return;
        for (int i = 0; i < 5; ++i) ASSERT_OK(call(rig));
        if (rank == 2) {
          // A moment for the others' last warm-up call to return before this rank goes.
          std::this_thread::sleep_for(std::chrono::milliseconds(300));
          if (dies) _exit(0);
          std::this_thread::sleep_for(std::chrono::milliseconds(kTimeoutMs * 2));
          return;
        }
        const auto start = std::chrono::steady_clock::now();
        const Status status = call(rig);
        const auto took = std::chrono::duration_cast<std::chrono::milliseconds>(
                              std::chrono::steady_clock::now() - start)
                              .count();
        ASSERT_FALSE(status.is_ok()) << "rank " << rank << ": no error without rank 2";
        EXPECT_TRUE(status.code() == ZRT_TIMEOUT || status.code() == ZRT_REMOTE_ERROR)
            << status.message();
        EXPECT_LT(took, kTimeoutMs + 1500) << status.message();
      },
      options);
}

}  // namespace zrt::testing
