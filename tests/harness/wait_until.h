// wait_until: how a test waits for something to happen. It polls `done` every `poll` until it
// holds, and fails, saying what did not happen and for how long it was awaited, once `deadline`
// has passed. A fixed sleep instead either waits longer than needed or, on a loaded machine,
// not long enough; a deadline only bounds a wait that normally ends as soon as the condition
// holds. Use it as ASSERT_TRUE(wait_until(...)) or EXPECT_TRUE(wait_until(...)).
//
// Sleeps that remain in tests are stimuli, not waits (a rank that stays silent long enough to
// trip a timeout, a measurement window); each says so and derives its length from what it tests.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <thread>

namespace zrt::testing {

template <typename Predicate>
::testing::AssertionResult wait_until(
    Predicate&& done, std::chrono::milliseconds deadline, const char* what,
    std::chrono::milliseconds poll = std::chrono::milliseconds(2)) {
  const auto start = std::chrono::steady_clock::now();
  for (;;) {
    if (done()) return ::testing::AssertionSuccess();
    if (std::chrono::steady_clock::now() - start >= deadline) {
      return ::testing::AssertionFailure() << what << ": not within " << deadline.count() << " ms";
    }
    std::this_thread::sleep_for(poll);
  }
}

}  // namespace zrt::testing
