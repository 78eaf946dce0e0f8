// The gradient path's and the step's decisions, without communication: which way a segment's
// gradients go, the round-robin bucket pool, and the step backup's cursor.
#include <gtest/gtest.h>

#include <optional>

#include "zero/partition/backup_cursor.h"
#include "zero/partition/bucket_pool.h"

namespace zrt {
namespace {

TEST(GradRoute, FullGradientsAccumulate) {
  RouteFacts facts;
  facts.full_grads = true;
  for (bool sync : {false, true}) {
    facts.sync = sync;
    facts.in_window = true;
    EXPECT_EQ(route_segment(facts), GradRoute::kAccumulateFull);
  }
}

// Fresh or not, on one rank or several: the window is reduced in place (the first reduction
// after a step straight into the shard, the later ones added there as from a bucket).
TEST(GradRoute, AWholeSegmentIsReducedFromTheWindow) {
  RouteFacts facts;
  facts.sync = true;
  facts.in_window = true;
  EXPECT_EQ(route_segment(facts), GradRoute::kReduceFromWindow);
  RouteFacts outside = facts;
  outside.in_window = false;
  EXPECT_EQ(route_segment(outside), GradRoute::kCopyToBucket);
}

TEST(BucketPool, HandsOutBucketsRoundRobinAndSkipsFillingOnes) {
  BucketPool pool(2, 5);
  EXPECT_FALSE(pool.bound(0).has_value());
  std::optional<int> b = pool.take_free();
  ASSERT_TRUE(b.has_value());
  EXPECT_EQ(*b, 0);
  pool.bind(4, Bucket{false, *b});
  b = pool.take_free();
  ASSERT_TRUE(b.has_value());
  EXPECT_EQ(*b, 1);
  pool.bind(3, Bucket{false, *b});
  EXPECT_FALSE(pool.take_free().has_value()) << "both buckets are filling";
  pool.unbind(4);  // segment 4 reduced: bucket 0 is free again
  EXPECT_FALSE(pool.bound(4).has_value());
  b = pool.take_free();
  ASSERT_TRUE(b.has_value());
  EXPECT_EQ(*b, 0);
  pool.bind(2, Bucket{false, *b});
  pool.unbind(3);
  pool.unbind(2);
  // Round robin from the cursor: bucket 1, whose reduction started before bucket 0's.
  b = pool.take_free();
  ASSERT_TRUE(b.has_value());
  EXPECT_EQ(*b, 1);
}

TEST(BucketPool, ThePersistentBucketIsNotThePools) {
  BucketPool pool(1, 3);
  pool.bind(2, Bucket{/*persistent=*/true, 0});
  ASSERT_TRUE(pool.bound(2).has_value());
  EXPECT_TRUE(pool.bound(2)->persistent);
  std::optional<int> b = pool.take_free();
  ASSERT_TRUE(b.has_value()) << "the pool's bucket is still free";
  pool.unbind(2);
  EXPECT_FALSE(pool.bound(2).has_value());
}

TEST(BucketPool, AnEmptyPoolHasNoFreeBucket) {
  BucketPool pool(0, 1);
  EXPECT_FALSE(pool.take_free().has_value());
}

TEST(BackupCursor, SharesCoverTheBackupInOnePassOfUnits) {
  BackupCursor cursor(/*total=*/10, /*units=*/3);  // shares of 4
  EXPECT_FALSE(cursor.current());
  EXPECT_EQ(cursor.share_end(), 4u);
  cursor.advance_to(cursor.share_end());
  EXPECT_EQ(cursor.share_end(), 8u);
  cursor.advance_to(cursor.share_end());
  EXPECT_EQ(cursor.share_end(), 10u);
  cursor.advance_to(cursor.share_end());
  EXPECT_TRUE(cursor.current());
  cursor.invalidate();
  EXPECT_EQ(cursor.cursor(), 0u);
  cursor.complete();
  EXPECT_TRUE(cursor.current());
}

TEST(BackupCursor, NoUnitsMeansOneShare) {
  BackupCursor cursor(7, 0);
  EXPECT_EQ(cursor.share_end(), 7u);
}

}  // namespace
}  // namespace zrt
