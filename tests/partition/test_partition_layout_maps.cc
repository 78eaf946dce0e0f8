// The maps Layout derives from its segments for the gradient path and the shard: which units
// feed which segments, each unit's pieces, the per-rank piece map, and where a segment can be
// reduced straight out of its unit's gradient window.
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "zero/partition/layout.h"

namespace zrt {
namespace {

struct Model {
  std::vector<UnitSpec> units;
  std::vector<ParamSpec> params;
};

Model model_of(const std::vector<std::vector<size_t>>& sizes) {
  Model m;
  for (size_t u = 0; u < sizes.size(); ++u) {
    m.units.push_back({"unit" + std::to_string(u)});
    for (size_t numel : sizes[u]) {
      m.params.push_back({"p" + std::to_string(m.params.size()), numel, static_cast<int>(u), 0});
    }
  }
  return m;
}

Layout build(const PartitionOptions& options, int ranks, const Model& m) {
  Layout layout;
  EXPECT_TRUE(Layout::build(options, ranks, m.units, m.params, &layout).is_ok());
  return layout;
}

// Every unit's pieces cover its trainable parameters exactly once, in segment order, and the
// segment counts agree with unit_segments.
void check_unit_maps(const Layout& layout) {
  std::vector<int> feeders(layout.segments().size(), 0);
  int trainable = 0;
  for (size_t u = 0; u < layout.units().size(); ++u) {
    const int unit = static_cast<int>(u);
    trainable += layout.units()[u].trainable_numel > 0;
    size_t covered = 0;
    int last_segment = -1;
    for (const UnitPiece& piece : layout.unit_pieces(unit)) {
      EXPECT_EQ(layout.params()[piece.piece.param].unit, unit);
      EXPECT_GE(piece.segment, last_segment) << "segment order";
      last_segment = piece.segment;
      covered += piece.piece.count;
    }
    // Persistent parameters count too: their pieces are in the persistent segment.
    EXPECT_EQ(covered, layout.units()[u].trainable_numel) << "unit " << u;
    const std::vector<int>& segments = layout.unit_segments(unit);
    for (size_t i = 0; i < segments.size(); ++i) {
      ++feeders[segments[i]];
      for (size_t j = 0; j < i; ++j) EXPECT_NE(segments[i], segments[j]) << "no repeats";
    }
  }
  for (size_t s = 0; s < feeders.size(); ++s) {
    EXPECT_EQ(layout.segment_units(static_cast<int>(s)), feeders[s]) << "segment " << s;
  }
  EXPECT_EQ(layout.trainable_units(), trainable);
}

TEST(LayoutMaps, UnitPiecesCoverEveryTrainableElementAtEveryStage) {
  const Model m = model_of({{37, 5}, {1000, 7, 3}, {129}, {2, 4099}});
  for (int stage = 0; stage <= 3; ++stage) {
    for (int ranks : {1, 2, 3}) {
      PartitionOptions options;
      options.stage = stage;
      options.alignment = 4;
      options.bucket_bytes = 512 * 4;
      options.persistence_threshold = 6;
      SCOPED_TRACE("stage " + std::to_string(stage) + ", ranks " + std::to_string(ranks));
      check_unit_maps(build(options, ranks, m));
    }
  }
}

TEST(LayoutMaps, ShardMapIndexesEachParamsPieces) {
  const Model m = model_of({{37, 5}, {1000, 7, 3}, {129}, {2, 4099}});
  PartitionOptions options;
  options.stage = 2;
  options.alignment = 4;
  options.bucket_bytes = 512 * 4;
  const Layout layout = build(options, 3, m);
  for (int rank = 0; rank < 3; ++rank) {
    const ShardMap map = layout.shard_map(rank);
    const std::vector<ShardPiece> pieces = layout.shard_pieces(rank);
    ASSERT_EQ(map.pieces.size(), pieces.size());
    for (size_t i = 0; i < pieces.size(); ++i) {
      EXPECT_EQ(map.pieces[i].param, pieces[i].param);
      EXPECT_EQ(map.pieces[i].param_offset, pieces[i].param_offset);
      EXPECT_EQ(map.pieces[i].shard_offset, pieces[i].shard_offset);
      EXPECT_EQ(map.pieces[i].count, pieces[i].count);
    }
    ASSERT_EQ(map.param_pieces.size(), m.params.size());
    size_t indexed = 0;
    for (size_t p = 0; p < map.param_pieces.size(); ++p) {
      for (int index : map.param_pieces[p]) {
        EXPECT_EQ(map.pieces[index].param, static_cast<int>(p));
        ++indexed;
      }
    }
    EXPECT_EQ(indexed, pieces.size());
  }
}

TEST(LayoutMaps, Stage2SegmentsFedByTwoUnitsAreNotReadFromTheWindow) {
  // Buckets of 16 elements over units of 10 and 12: segments straddle units.
  const Model m = model_of({{10}, {12}});
  PartitionOptions options;
  options.stage = 2;
  options.alignment = 4;
  options.bucket_bytes = 16 * 4;
  const Layout layout = build(options, 2, m);
  bool straddled = false;
  for (size_t s = 0; s < layout.segments().size(); ++s) {
    if (layout.segment_units(static_cast<int>(s)) > 1) {
      straddled = true;
      EXPECT_FALSE(layout.segment_window_offset(static_cast<int>(s)).has_value()) << s;
    }
  }
  EXPECT_TRUE(straddled);
}

TEST(LayoutMaps, Stage3UnitSegmentsSitWholeInTheirWindow) {
  // Unit 0: 40 and 24 elements (both segmented); unit 1: a persistent 3 between two segmented.
  const Model m = model_of({{40, 24}, {30, 3, 50}});
  PartitionOptions options;
  options.stage = 3;
  options.alignment = 8;
  options.persistence_threshold = 10;
  const Layout layout = build(options, 2, m);
  const int u0 = layout.units()[0].segment;
  const int u1 = layout.units()[1].segment;
  ASSERT_GE(u0, 0);
  ASSERT_GE(u1, 0);
  // Unit 0's gradients are its segment, in order, from the window's start; padding follows
  // the unit's last gradient.
  ASSERT_TRUE(layout.segment_window_offset(u0).has_value());
  EXPECT_EQ(*layout.segment_window_offset(u0), 0u);
  // Unit 1's persistent parameter sits between its segmented ones in the window: the segment
  // is not contiguous there.
  EXPECT_FALSE(layout.segment_window_offset(u1).has_value());
  // The persistent segment never is.
  ASSERT_GE(layout.persistent_segment(), 0);
  EXPECT_FALSE(layout.segment_window_offset(layout.persistent_segment()).has_value());
  EXPECT_EQ(layout.segment_units(layout.persistent_segment()), 1);
}

TEST(LayoutMaps, FrozenUnitsAreNotTrainable) {
  Model m = model_of({{16}, {8}});
  m.params[1].flags = ZRT_PARAM_FROZEN;
  PartitionOptions options;
  options.stage = 3;
  options.persistence_threshold = 0;
  const Layout layout = build(options, 2, m);
  EXPECT_EQ(layout.trainable_units(), 1);
  EXPECT_TRUE(layout.unit_pieces(1).empty());
  EXPECT_TRUE(layout.unit_segments(1).empty());
}

}  // namespace
}  // namespace zrt
