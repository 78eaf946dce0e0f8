// The gather window's decisions, without communication: the expected fetch order (declared,
// then learned in the first step, dropped on a departure) and the slot table (free slots,
// second copies, evictable prefetches, the prefetch and live-bytes caps).
#include <gtest/gtest.h>

#include <vector>

#include "zero/partition/fetch_order.h"
#include "zero/partition/window_slots.h"

namespace zrt {
namespace {

std::vector<int> lookahead(const FetchOrder& order, int unit, int n) {
  std::vector<int> out;
  FetchOrder::Lookahead ahead = order.ahead(unit);
  int next = -1;
  while (static_cast<int>(out.size()) < n && ahead.next(&next)) out.push_back(next);
  return out;
}

TEST(FetchOrder, FollowsTheDeclaredOrderInTheDirectionOfTheFetches) {
  FetchOrder order(4);
  int expected = -1;
  EXPECT_EQ(lookahead(order, -1, 2), (std::vector<int>{0, 1}));
  EXPECT_TRUE(order.note(0, &expected));
  EXPECT_TRUE(order.note(1, &expected));
  EXPECT_EQ(lookahead(order, 1, 5), (std::vector<int>{2, 3}));  // stops at the last unit
  EXPECT_TRUE(order.note(3, &expected));
  EXPECT_TRUE(order.note(2, &expected));  // going down now: backward
  EXPECT_EQ(lookahead(order, 2, 5), (std::vector<int>{1, 0}));
  EXPECT_FALSE(order.recorded());
}

TEST(FetchOrder, LearnsTheFirstStepAndDropsItOnADeparture) {
  FetchOrder order(3);
  int expected = -1;
  // Forward, recomputation of unit 1, backward.
  const std::vector<int> step = {0, 1, 2, 2, 1, 1, 0};
  for (int unit : step) EXPECT_TRUE(order.note(unit, &expected));
  EXPECT_TRUE(order.end_step());  // the first step ends the recording
  EXPECT_TRUE(order.recorded());
  EXPECT_EQ(lookahead(order, -1, 3), (std::vector<int>{0, 1, 2}));
  for (size_t i = 0; i < 4; ++i) EXPECT_TRUE(order.note(step[i], &expected));
  // The recording continues where the fetches are, including the repeat of unit 1.
  EXPECT_EQ(lookahead(order, 2, 3), (std::vector<int>{1, 1, 0}));
  // A departure: unit 0 instead of 1.
  EXPECT_FALSE(order.note(0, &expected));
  EXPECT_EQ(expected, 1);
  EXPECT_FALSE(order.recorded());
  EXPECT_FALSE(order.end_step());  // only the first step records
  EXPECT_FALSE(order.recorded());
  EXPECT_EQ(lookahead(order, -1, 2), (std::vector<int>{0, 1}));
}

TEST(FetchOrder, AStepWithoutFetchesRecordsNothing) {
  FetchOrder order(2);
  EXPECT_TRUE(order.end_step());
  EXPECT_FALSE(order.recorded());
}

TEST(FetchOrder, RewindStartsTheRecordedOrderOver) {
  FetchOrder order(2);
  int expected = -1;
  EXPECT_TRUE(order.note(0, &expected));
  EXPECT_TRUE(order.note(1, &expected));
  order.end_step();
  EXPECT_TRUE(order.note(0, &expected));
  EXPECT_EQ(lookahead(order, 0, 2), (std::vector<int>{1}));
  order.rewind();
  EXPECT_EQ(lookahead(order, -1, 2), (std::vector<int>{0, 1}));
}

TEST(WindowSlots, OccupyFindsFreeSlotsAndReleaseFreesThem) {
  WindowSlots slots(2, {100, 200, 300});
  EXPECT_EQ(slots.find_free(), 0);
  slots.occupy(0, 0, /*prefetch=*/false, /*again=*/false);
  EXPECT_EQ(slots.slot_of(0), 0);
  EXPECT_EQ(slots.find_free(), 1);
  slots.occupy(1, 1, /*prefetch=*/true, /*again=*/false);
  EXPECT_EQ(slots.find_free(), -1);
  EXPECT_EQ(slots.occupied(), 2);
  EXPECT_EQ(slots.live_bytes(), 300u);
  EXPECT_EQ(slots.prefetched_bytes(), 200u);
  EXPECT_EQ(slots.evictable(), 1);
  slots.claim(1);  // unit 1 fetched: no longer a prefetch
  EXPECT_EQ(slots.prefetched_bytes(), 0u);
  EXPECT_EQ(slots.evictable(), -1);
  slots.release(0);
  EXPECT_EQ(slots.slot_of(0), -1);
  EXPECT_EQ(slots.find_free(), 0);
  EXPECT_EQ(slots.live_bytes(), 200u);
}

TEST(WindowSlots, ASecondCopyBecomesTheUnitsCopyOnRelease) {
  WindowSlots slots(3, {10, 10});
  slots.occupy(1, 0, false, false);
  slots.occupy(1, 2, /*prefetch=*/true, /*again=*/true);
  EXPECT_EQ(slots.slot_of(1), 0);
  EXPECT_EQ(slots.second_slot(1), 2);
  slots.release(1);
  EXPECT_EQ(slots.slot_of(1), 2);
  EXPECT_EQ(slots.second_slot(1), -1);
  EXPECT_EQ(slots.unit_in(0), -1);
  EXPECT_EQ(slots.unit_in(2), 1);
  // Dropping the second copy instead forgets only it.
  slots.occupy(1, 0, true, /*again=*/true);
  slots.drop(0);
  EXPECT_EQ(slots.slot_of(1), 2);
  EXPECT_EQ(slots.second_slot(1), -1);
  EXPECT_EQ(slots.prefetched_bytes(), 10u);  // slot 2 is still the prefetch it was
}

TEST(WindowSlots, ForgetKeepsOnlyFetchedCopies) {
  WindowSlots slots(3, {10, 20, 30});
  slots.occupy(0, 0, false, false);
  slots.occupy(1, 1, true, false);
  slots.occupy(2, 2, false, false);
  const std::vector<uint8_t> fetched = {1, 0, 0};  // unit 2 gathered on demand, not fetched yet
  slots.forget(fetched);
  EXPECT_EQ(slots.slot_of(0), 0);
  EXPECT_EQ(slots.slot_of(1), -1);
  EXPECT_EQ(slots.slot_of(2), -1);
  EXPECT_EQ(slots.occupied(), 1);
  EXPECT_EQ(slots.prefetched_bytes(), 0u);
}

TEST(WindowSlots, PrefetchFitsWithinBothCaps) {
  WindowSlots slots(4, {100, 100, 100, 100});
  slots.occupy(0, 0, false, false);
  slots.occupy(1, 1, true, false);
  EXPECT_TRUE(slots.prefetch_fits(100, 0, 0));      // no caps
  EXPECT_TRUE(slots.prefetch_fits(100, 200, 300));  // both exactly reached
  EXPECT_FALSE(slots.prefetch_fits(100, 199, 0));   // prefetched bytes in flight
  EXPECT_FALSE(slots.prefetch_fits(100, 0, 299));   // gathered bytes at once
}

}  // namespace
}  // namespace zrt
