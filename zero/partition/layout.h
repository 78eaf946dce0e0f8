// Layout: where every parameter lives in zrt's flat buffers, for one rank count (see
// docs/ARCHITECTURE.md#segment-major-layout).
//
// The trainable parameters are cut into segments. Stages 0/1/2: the parameters are laid out in
// backward order (last unit first, each unit's parameters in registration order), so gradients
// fill the flat buffer front to back as backward runs, and the buffer is chopped into segments of
// the bucket capacity; a parameter may straddle two segments, and only the last segment needs
// padding, so the full parameter buffer has no holes. Stage 3: one segment per unit, holding
// the unit's trainable non-persistent parameters in registration order, then one "persistent"
// segment with every parameter that stays gathered. Every segment is padded to a multiple of
// S x alignment elements (S = N shards, 1 for stage 0) and split into S equal slices; the shard
// of rank r is slice r of every segment, in segment order. Master weights, optimizer state and
// reduced gradients all use the shard layout, so one reduce-scatter per segment delivers
// exactly the owned gradient slice and one all-gather per segment restores the parameters.
//
// Frozen parameters are not in any segment: they sit, replicated, in a frozen store.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "lib/core/status.h"
#include "zero/partition/config.h"

namespace zrt {

class StagePolicy;

struct ParamSpec {
  std::string name;
  size_t numel = 0;
  int unit = 0;
  uint32_t flags = 0;  // ZRT_PARAM_*
  // As registered (zrt_partition_add_param_shaped): the framework's dtype and shape, whose
  // product is numel. zrt_partition_add_param registers [numel] in param_dtype.
  zrt_dtype_t dtype = ZRT_F32;
  std::vector<int64_t> dims = {};
  bool shaped = false;  // registered with a shape (so a checkpoint's shape must match it)
};

struct UnitSpec {
  std::string name;
};

enum class ParamPlace : uint8_t {
  kSegmented,   // in the flat buffer (stages 0-2) or its unit's segment (stage 3)
  kPersistent,  // stage 3: in the persistent segment, always gathered
  kFrozen,      // replicated in the frozen store
};

// Elements [param_offset, param_offset + count) of `param` at segment element segment_offset.
struct SegmentPiece {
  int param = 0;
  size_t param_offset = 0;
  size_t segment_offset = 0;
  size_t count = 0;
};

struct Segment {
  size_t numel = 0;         // padded
  size_t used = 0;          // elements holding parameters (the rest is padding at the end)
  size_t slice = 0;         // numel / S
  size_t view_offset = 0;   // stages 0-2: start in the full flat buffer; stage 3: 0
  size_t shard_offset = 0;  // start of this segment's slice in every rank's shard
  int unit = -1;            // stage 3: the unit; -1 for buckets and the persistent segment
  bool persistent = false;
  std::vector<SegmentPiece> pieces;  // in segment order
};

struct ParamLocation {
  ParamPlace place = ParamPlace::kSegmented;
  int unit = 0;
  size_t numel = 0;
  uint32_t flags = 0;
  // Stages 0-2: offset in the full flat buffer. Stage 3 segmented: offset in its unit's
  // segment (= window slot). Persistent: offset in the persistent segment. Frozen: offset in
  // the frozen store.
  size_t view_offset = 0;
  int first_segment = -1;
  int last_segment = -1;
  size_t segment_offset = 0;  // offset of element 0 in first_segment
  size_t staging_offset = 0;  // offset in the unit's gradient staging window (trainable only)
};

struct UnitLayout {
  std::vector<int> params;
  size_t trainable_numel = 0;  // gradient staging elements
  int segment = -1;            // stage 3: its segment (-1 when it has none)
  // Segments holding its segmented parameters (stages 0-2: a range; -1 when none).
  int first_segment = -1;
  int last_segment = -1;
  bool has_persistent = false;
};

// A piece of one rank's shard.
struct ShardPiece {
  int param = 0;
  size_t param_offset = 0;
  size_t shard_offset = 0;
  size_t count = 0;
};

// A piece of a unit's gradients and the segment it feeds.
struct UnitPiece {
  SegmentPiece piece;
  int segment = 0;
};

// One rank's shard as the C API shows it, and per parameter the indexes of its pieces there.
struct ShardMap {
  std::vector<zrt_shard_piece_t> pieces;       // in shard order
  std::vector<std::vector<int>> param_pieces;  // per param: indexes into pieces
};

// Size limits, checked at registration and finalize so that no element count or byte total can
// overflow: with every count at most 2^50, a count times a dtype size times the optimizer slots
// stays far below 2^64. 2^50 elements is 4 PiB of f32, beyond any machine.
inline constexpr size_t kMaxNumel = size_t{1} << 50;  // one parameter, and all of them together
// Segments (buckets) a layout may have; each costs bookkeeping, so a model of 10^15 elements in
// 25 MB buckets is refused up front with what to change, instead of exhausting memory.
inline constexpr size_t kMaxSegments = size_t{1} << 22;

class Layout {
 public:
  // Lays out `params` (grouped by `units`) for `ranks` ranks. Errors name the parameter/unit.
  static Status build(const PartitionOptions& options, int ranks,
                      const std::vector<UnitSpec>& units, const std::vector<ParamSpec>& params,
                      Layout* layout);

  int ranks() const { return ranks_; }
  int shards() const { return shards_; }  // S: ranks, or 1 for stage 0
  const std::vector<Segment>& segments() const { return segments_; }
  const std::vector<ParamLocation>& params() const { return params_; }
  const std::vector<UnitLayout>& units() const { return units_; }

  size_t trainable_numel() const { return trainable_numel_; }     // P, unpadded
  size_t padded_numel() const { return padded_numel_; }           // sum of segment sizes
  size_t shard_numel() const { return padded_numel_ / shards_; }  // per rank
  size_t frozen_numel() const { return frozen_numel_; }
  size_t persistent_numel() const { return persistent_numel_; }              // unpadded
  int persistent_segment() const { return persistent_segment_; }             // -1 when none
  size_t max_unit_segment_numel() const { return max_unit_segment_numel_; }  // stage 3
  size_t max_segment_numel() const { return max_segment_numel_; }
  size_t max_unit_trainable_numel() const { return max_unit_trainable_numel_; }
  // Elements of a gradient staging window: the largest unit's gradients, and the padding of
  // any segment that one unit fills alone (segment_window_offset).
  size_t grad_window_numel() const { return grad_window_.numel; }
  // Stages 0-2: the bucket capacity in elements (every segment but the last has this size).
  size_t bucket_numel() const { return bucket_numel_; }

  // The pieces of rank r's shard, in shard order.
  std::vector<ShardPiece> shard_pieces(int rank) const;
  // The same pieces, with each parameter's indexes among them (load_param writes them).
  ShardMap shard_map(int rank) const;

  // Maps derived from the segments once, at build, for the gradient path.
  // Per unit: the segments it feeds, in segment order without repeats.
  const std::vector<int>& unit_segments(int unit) const { return unit_segments_[unit]; }
  // Per unit: its pieces in every segment it feeds, in segment order.
  const std::vector<UnitPiece>& unit_pieces(int unit) const { return unit_pieces_[unit]; }
  // Per segment: how many units feed it (its reduction waits for that many grad_ready calls).
  int segment_units(int segment) const { return segment_units_[segment]; }
  const std::vector<int>& segment_units() const { return segment_units_; }
  int trainable_units() const { return trainable_units_; }  // units with a trainable parameter
  // Per segment: where it starts in its unit's gradient staging window, when that window holds
  // it whole in segment order (one unit feeds it, it is not persistent, its padding falls after
  // the unit's gradients; the window has room for that padding); nullopt otherwise. The gradient path
  // may then reduce straight out of the window (gradient_pipeline.h).
  std::optional<size_t> segment_window_offset(int segment) const {
    return grad_window_.segment_offset[segment];
  }

  // Where element `element` of `param` lives: its segment, the rank owning it and its offset in
  // that rank's shard. Errors for frozen parameters or out-of-range elements.
  Status locate(int param, size_t element, int* segment, int* rank, size_t* shard_offset) const;

  // A digest of the layout's inputs (counts, flags, units) for the cross-rank check.
  uint64_t hash() const { return hash_; }

 private:
  // The phases of build. Checks every parameter, hashes the inputs and places each one: frozen
  // (in the frozen store), persistent (stage 3) or segmented, at its offset in its unit's
  // gradient staging window.
  Status place_params(const PartitionOptions& options, const StagePolicy& policy, size_t unit_count,
                      const std::vector<ParamSpec>& params);
  // Stages 0-2: the trainable parameters in backward order, cut into buckets.
  Status cut_buckets(const PartitionOptions& options, size_t granule);
  // Appends param p, at `flat` in the full buffer, to the buckets, opening a new one whenever
  // the last is full (so a parameter may straddle two).
  void append_to_buckets(int p, size_t flat, size_t granule);
  // Stage 3: one segment per unit with segmented parameters, then the persistent segment.
  void cut_unit_segments(size_t granule);
  // Pads the segment to a multiple of `granule` and gives it its place in the shards.
  void close_segment(Segment* segment, size_t granule);
  void derive_maps();
  // Where segment s starts in its unit's window when the window can hold it whole, ignoring
  // the window's size (derive_maps sizes the window for these).
  std::optional<size_t> window_start(int s) const;

  int ranks_ = 1;
  int shards_ = 1;
  std::vector<Segment> segments_;
  std::vector<ParamLocation> params_;
  std::vector<UnitLayout> units_;
  size_t trainable_numel_ = 0;
  size_t padded_numel_ = 0;
  size_t frozen_numel_ = 0;
  size_t persistent_numel_ = 0;
  int persistent_segment_ = -1;
  size_t max_unit_segment_numel_ = 0;
  size_t max_segment_numel_ = 0;
  size_t max_unit_trainable_numel_ = 0;
  size_t bucket_numel_ = 0;
  uint64_t hash_ = 0;
  std::vector<std::vector<int>> unit_segments_;
  std::vector<std::vector<UnitPiece>> unit_pieces_;
  std::vector<int> segment_units_;
  int trainable_units_ = 0;
  // The gradient staging window: its elements, and where each segment sits in it.
  struct GradWindow {
    size_t numel = 0;
    std::vector<std::optional<size_t>> segment_offset;
  };
  GradWindow grad_window_;
};

}  // namespace zrt
