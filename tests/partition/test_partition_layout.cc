// Layout: segment-major sharding maps every trainable element to exactly one (segment, rank,
// shard offset), shards are equal and contiguous, and the piece maps of all ranks tile every
// parameter exactly once.
#include "zero/partition/layout.h"

#include <gtest/gtest.h>

#include <map>
#include <vector>

namespace zrt {
namespace {

struct Model {
  std::vector<UnitSpec> units;
  std::vector<ParamSpec> params;
};

// Odd sizes on purpose: nothing divides evenly.
Model odd_model() {
  Model m;
  const std::vector<std::vector<size_t>> sizes = {{37, 5}, {1000, 7, 3}, {129}, {2, 4099}};
  for (size_t u = 0; u < sizes.size(); ++u) {
    m.units.push_back({"unit" + std::to_string(u)});
    for (size_t numel : sizes[u]) {
      m.params.push_back({"p" + std::to_string(m.params.size()), numel, static_cast<int>(u), 0});
    }
  }
  return m;
}

void check_tiling(const PartitionOptions& options, int ranks, const Model& m) {
  Layout layout;
  ASSERT_TRUE(Layout::build(options, ranks, m.units, m.params, &layout).is_ok());
  const int shards = layout.shards();
  ASSERT_EQ(layout.padded_numel() % (static_cast<size_t>(shards) * options.alignment), 0u);
  // Every element of every trainable parameter appears in exactly one rank's shard, at the
  // offset locate() reports.
  std::map<std::pair<int, size_t>, int> seen;
  for (int r = 0; r < shards; ++r) {
    size_t last_end = 0;
    for (const ShardPiece& piece : layout.shard_pieces(r)) {
      EXPECT_GE(piece.shard_offset, last_end) << "pieces in shard order";
      last_end = piece.shard_offset + piece.count;
      EXPECT_LE(last_end, layout.shard_numel());
      for (size_t i = 0; i < piece.count; ++i) {
        ++seen[{piece.param, piece.param_offset + i}];
        int segment = -1, owner = -1;
        size_t offset = 0;
        ASSERT_TRUE(
            layout.locate(piece.param, piece.param_offset + i, &segment, &owner, &offset).is_ok());
        EXPECT_EQ(owner, r);
        EXPECT_EQ(offset, piece.shard_offset + i);
      }
    }
  }
  size_t trainable = 0;
  for (size_t p = 0; p < m.params.size(); ++p) {
    if (m.params[p].flags & ZRT_PARAM_FROZEN) continue;
    trainable += m.params[p].numel;
    for (size_t i = 0; i < m.params[p].numel; ++i) {
      ASSERT_EQ((seen[{static_cast<int>(p), i}]), 1) << "param " << p << " element " << i;
    }
  }
  EXPECT_EQ(seen.size(), trainable);
  EXPECT_EQ(layout.trainable_numel(), trainable);
}

TEST(PartitionLayout, EveryStageAndRankCountTilesTheParameters) {
  const Model m = odd_model();
  for (int stage = 0; stage <= 3; ++stage) {
    for (int ranks : {1, 2, 3, 4, 8}) {
      PartitionOptions options;
      options.stage = stage;
      options.alignment = 4;
      options.bucket_bytes = 512 * 4;  // several buckets, parameters straddle them
      options.persistence_threshold = 6;
      SCOPED_TRACE(::testing::Message() << "stage " << stage << " ranks " << ranks);
      check_tiling(options, ranks, m);
    }
  }
}

TEST(PartitionLayout, BucketsAreInBackwardOrderWithoutHoles) {
  const Model m = odd_model();
  PartitionOptions options;
  options.stage = 2;
  options.alignment = 4;
  options.bucket_bytes = 512 * 4;
  Layout layout;
  ASSERT_TRUE(Layout::build(options, 3, m.units, m.params, &layout).is_ok());
  // The last unit's first parameter starts the flat buffer.
  EXPECT_EQ(layout.params()[6].view_offset, 0u);
  // Full segments carry no padding: the flat view is contiguous.
  for (size_t s = 0; s + 1 < layout.segments().size(); ++s) {
    EXPECT_EQ(layout.segments()[s].numel, layout.segments()[s].used);
    EXPECT_EQ(layout.segments()[s + 1].view_offset,
              layout.segments()[s].view_offset + layout.segments()[s].numel);
  }
  EXPECT_EQ(layout.bucket_numel() % 12, 0u);
  EXPECT_GT(layout.segments().size(), 3u);
}

TEST(PartitionLayout, Stage3HasOneSegmentPerUnitAndAPersistentOne) {
  const Model m = odd_model();
  PartitionOptions options;
  options.stage = 3;
  options.alignment = 8;
  options.persistence_threshold = 10;  // params 5, 7, 3, 2 stay gathered
  Layout layout;
  ASSERT_TRUE(Layout::build(options, 4, m.units, m.params, &layout).is_ok());
  ASSERT_EQ(layout.segments().size(), 5u);
  EXPECT_EQ(layout.persistent_segment(), 4);
  EXPECT_EQ(layout.persistent_numel(), 17u);
  EXPECT_EQ(layout.segments()[1].used, 1000u);
  EXPECT_EQ(layout.segments()[1].numel % 32, 0u);
  EXPECT_EQ(layout.params()[1].place, ParamPlace::kPersistent);
}

TEST(PartitionLayout, FrozenParametersAreReplicated) {
  Model m = odd_model();
  m.params[2].flags = ZRT_PARAM_FROZEN;
  PartitionOptions options;
  options.stage = 3;
  options.persistence_threshold = 0;
  Layout layout;
  ASSERT_TRUE(Layout::build(options, 2, m.units, m.params, &layout).is_ok());
  EXPECT_EQ(layout.frozen_numel(), 1000u);
  EXPECT_EQ(layout.params()[2].place, ParamPlace::kFrozen);
  int segment = 0, rank = 0;
  size_t offset = 0;
  const Status status = layout.locate(2, 0, &segment, &rank, &offset);
  EXPECT_EQ(status.code(), ZRT_INVALID_ARGUMENT);
  EXPECT_NE(status.message().find("frozen"), std::string::npos);
}

TEST(PartitionLayout, BadRegistrationIsRefusedWithTheParameterNamed) {
  Model m = odd_model();
  m.params[3].unit = 9;
  Layout layout;
  const Status status = Layout::build(PartitionOptions{}, 2, m.units, m.params, &layout);
  EXPECT_EQ(status.code(), ZRT_INVALID_ARGUMENT);
  EXPECT_NE(status.message().find("param 3"), std::string::npos) << status.message();
  EXPECT_EQ(Layout::build(PartitionOptions{}, 2, m.units, {}, &layout).code(), ZRT_INVALID_USAGE);
}

}  // namespace
}  // namespace zrt
