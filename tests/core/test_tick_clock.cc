// TickClock (lib/core/tick_clock.h): its nanoseconds stay with steady_clock's across anchors,
// durations between readings match steady_clock's, and spin deadlines convert both ways.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "lib/core/tick_clock.h"

namespace zrt {
namespace {

// Tolerances are wide (a loaded 2-core machine preempts between two reads), yet a clock that
// ran at another rate, or converted from a stale anchor, misses them by far.
constexpr int64_t kSlackNs = 2'000'000;

TEST(TickClock, FollowsSteadyClockAcrossAnchors) {
  TickClock clock;
  for (int i = 0; i < 30; ++i) {  // 30 x 10 ms: the anchor moves at least twice
    const int64_t before = TickClock::steady_ns();
    const int64_t ticked = clock.to_ns(clock.read());
    const int64_t after = TickClock::steady_ns();
    EXPECT_GE(ticked, before - kSlackNs) << "reading " << i;
    EXPECT_LE(ticked, after + kSlackNs) << "reading " << i;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

TEST(TickClock, DurationsMatchSteadyClock) {
  TickClock clock;
  const uint64_t from = clock.read();
  const int64_t steady_from = TickClock::steady_ns();
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  const uint64_t to = clock.read();
  const int64_t steady = TickClock::steady_ns() - steady_from;
  const int64_t ticked = clock.duration_ns(from, to);
  EXPECT_NEAR(static_cast<double>(ticked), static_cast<double>(steady), kSlackNs);
  EXPECT_EQ(clock.duration_ns(to, from), 0);  // never negative
}

TEST(TickClock, DeadlinesInTicks) {
  TickClock clock;
  EXPECT_EQ(clock.ticks_in(0), 0u);
  EXPECT_GE(clock.ticks_in(1), 1u);
  const uint64_t ms = clock.ticks_in(1'000'000);
  EXPECT_NEAR(static_cast<double>(clock.duration_ns(0, ms)), 1e6, 1e4);
  const uint64_t start = clock.read();
  const uint64_t until = start + clock.ticks_in(5'000'000);
  const int64_t steady_start = TickClock::steady_ns();
  while (clock.read() < until) {
  }
  EXPECT_GE(TickClock::steady_ns() - steady_start, 5'000'000 - kSlackNs);
}

}  // namespace
}  // namespace zrt
