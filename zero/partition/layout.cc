#include "zero/partition/layout.h"

#include <algorithm>

#include "lib/core/dtype.h"
#include "zero/partition/stage_policy.h"

namespace zrt {
namespace {

size_t round_up(size_t value, size_t multiple) {
  return (value + multiple - 1) / multiple * multiple;
}

void hash_mix(uint64_t* h, uint64_t value) {
  for (int i = 0; i < 8; ++i) {
    *h ^= (value >> (8 * i)) & 0xff;
    *h *= 0x100000001b3ull;
  }
}

// The checks on one parameter, given the elements of those before it (trainable and frozen).
Status check_param(size_t p, const ParamSpec& spec, size_t unit_count, size_t numel_before) {
  if (spec.unit < 0 || static_cast<size_t>(spec.unit) >= unit_count) {
    return Status::invalid_argument("param {} (\"{}\") names unit {}, but {} units exist", p,
                                    spec.name, spec.unit, unit_count);
  }
  if (spec.numel == 0) {
    return Status::invalid_argument("param {} (\"{}\") has numel 0", p, spec.name);
  }
  if (spec.numel > kMaxNumel) {
    return Status::invalid_argument(
        "param {} (\"{}\") has numel {}, over the limit of {} (2^50) elements per parameter", p,
        spec.name, spec.numel, kMaxNumel);
  }
  // Each numel is <= 2^50, so the sum of the two below cannot wrap before this check.
  if (spec.numel > kMaxNumel - numel_before) {
    return Status::invalid_argument(
        "param {} (\"{}\", {} elements) brings the model over the limit of {} (2^50) elements "
        "in all",
        p, spec.name, spec.numel, kMaxNumel);
  }
  return Status::ok();
}

}  // namespace

Status Layout::build(const PartitionOptions& options, int ranks, const std::vector<UnitSpec>& units,
                     const std::vector<ParamSpec>& params, Layout* layout) {
  ZRT_RETURN_IF_ERROR(validate_partition_options(options));
  if (ranks < 1) return Status::invalid_argument("ranks is {}; expected >= 1", ranks);
  if (params.empty()) return Status::invalid_usage("no parameter was registered");
  const StagePolicy policy(options);
  Layout l;
  l.ranks_ = ranks;
  l.shards_ = policy.shards_optimizer_state() ? ranks : 1;
  ZRT_RETURN_IF_ERROR(l.place_params(options, policy, units.size(), params));
  const size_t granule = static_cast<size_t>(l.shards_) * options.alignment;
  if (!policy.segment_per_unit()) {
    ZRT_RETURN_IF_ERROR(l.cut_buckets(options, granule));
  } else {
    l.cut_unit_segments(granule);
  }
  // Padding adds less than one granule (<= 2^40 elements) per segment: still far from wrapping,
  // but the padded total must itself respect the limit the rest of zrt assumes.
  if (l.padded_numel_ > kMaxNumel) {
    return Status::invalid_argument(
        "the model's {} elements are {} after padding to the alignment ({} elements x {} shards), "
        "over the limit of {} (2^50)",
        l.trainable_numel_, l.padded_numel_, options.alignment, l.shards_, kMaxNumel);
  }
  hash_mix(&l.hash_, l.padded_numel_);
  l.derive_maps();
  *layout = std::move(l);
  return Status::ok();
}

Status Layout::place_params(const PartitionOptions& options, const StagePolicy& policy,
                            size_t unit_count, const std::vector<ParamSpec>& params) {
  units_.resize(unit_count);
  params_.resize(params.size());
  hash_ = 0xcbf29ce484222325ull;
  hash_mix(&hash_, unit_count);
  for (size_t p = 0; p < params.size(); ++p) {
    const ParamSpec& spec = params[p];
    ZRT_RETURN_IF_ERROR(check_param(p, spec, unit_count, trainable_numel_ + frozen_numel_));
    hash_mix(&hash_, spec.numel);
    hash_mix(&hash_, static_cast<uint64_t>(spec.unit));
    hash_mix(&hash_, spec.flags);
    ParamLocation& loc = params_[p];
    loc.unit = spec.unit;
    loc.numel = spec.numel;
    loc.flags = spec.flags;
    UnitLayout& unit = units_[spec.unit];
    unit.params.push_back(static_cast<int>(p));
    if (spec.flags & ZRT_PARAM_FROZEN) {
      loc.place = ParamPlace::kFrozen;
      loc.view_offset = frozen_numel_;
      frozen_numel_ += spec.numel;
      continue;
    }
    loc.staging_offset = unit.trainable_numel;
    unit.trainable_numel += spec.numel;
    trainable_numel_ += spec.numel;
    const bool persistent =
        policy.has_persistent_segment() &&
        ((spec.flags & ZRT_PARAM_UNSHARDED) || spec.numel < options.persistence_threshold);
    if (persistent) {
      loc.place = ParamPlace::kPersistent;
      unit.has_persistent = true;
      persistent_numel_ += spec.numel;
    }
  }
  for (const UnitLayout& unit : units_) {
    max_unit_trainable_numel_ = std::max(max_unit_trainable_numel_, unit.trainable_numel);
  }
  return Status::ok();
}

void Layout::close_segment(Segment* segment, size_t granule) {
  segment->numel = round_up(std::max<size_t>(segment->used, 1), granule);
  segment->slice = segment->numel / shards_;
  segment->shard_offset = padded_numel_ / shards_;
  padded_numel_ += segment->numel;
  max_segment_numel_ = std::max(max_segment_numel_, segment->numel);
}

Status Layout::cut_buckets(const PartitionOptions& options, size_t granule) {
  // Bucket capacity in elements of the reduce dtype, a whole number of granules so that
  // full segments need no padding and parameters can straddle them without holes.
  const size_t bucket_elems = options.bucket_bytes / dtype_size(options.reduce_dtype);
  bucket_numel_ = std::max(granule, bucket_elems / granule * granule);
  // Checked before any segment exists: the count is known from the totals.
  const size_t segments = trainable_numel_ / bucket_numel_ + 2;
  if (segments > kMaxSegments) {
    return Status::invalid_argument(
        "{} trainable elements in buckets of {} elements need about {} buckets, over the limit "
        "of {}; raise the bucket size (config.bucket_bytes, now {} bytes)",
        trainable_numel_, bucket_numel_, segments, kMaxSegments, options.bucket_bytes);
  }
  size_t flat = 0;
  for (int u = static_cast<int>(units_.size()) - 1; u >= 0; --u) {
    for (int p : units_[u].params) {
      if (params_[p].place == ParamPlace::kFrozen) continue;
      append_to_buckets(p, flat, granule);
      flat += params_[p].numel;
    }
  }
  if (!segments_.empty()) close_segment(&segments_.back(), granule);
  return Status::ok();
}

void Layout::append_to_buckets(int p, size_t flat, size_t granule) {
  ParamLocation& loc = params_[p];
  UnitLayout& unit = units_[loc.unit];
  loc.view_offset = flat;
  size_t done = 0;
  while (done < loc.numel) {
    if (segments_.empty() || segments_.back().used == bucket_numel_) {
      if (!segments_.empty()) close_segment(&segments_.back(), granule);
      segments_.emplace_back();
      segments_.back().view_offset = flat + done;
    }
    Segment& segment = segments_.back();
    const size_t take = std::min(loc.numel - done, bucket_numel_ - segment.used);
    const int index = static_cast<int>(segments_.size()) - 1;
    if (done == 0) {
      loc.first_segment = index;
      loc.segment_offset = segment.used;
    }
    loc.last_segment = index;
    if (unit.first_segment < 0) unit.first_segment = index;
    unit.last_segment = index;
    segment.pieces.push_back({p, done, segment.used, take});
    segment.used += take;
    done += take;
  }
}

void Layout::cut_unit_segments(size_t granule) {
  for (size_t u = 0; u < units_.size(); ++u) {
    UnitLayout& unit = units_[u];
    Segment segment;
    segment.unit = static_cast<int>(u);
    const int index = static_cast<int>(segments_.size());
    for (int p : unit.params) {
      ParamLocation& loc = params_[p];
      if (loc.place != ParamPlace::kSegmented) continue;
      loc.view_offset = segment.used;
      loc.first_segment = loc.last_segment = index;
      loc.segment_offset = segment.used;
      segment.pieces.push_back({p, 0, segment.used, loc.numel});
      segment.used += loc.numel;
    }
    if (segment.used == 0) continue;
    unit.segment = unit.first_segment = unit.last_segment = index;
    close_segment(&segment, granule);
    max_unit_segment_numel_ = std::max(max_unit_segment_numel_, segment.numel);
    segments_.push_back(std::move(segment));
  }
  if (persistent_numel_ == 0) return;
  Segment segment;
  segment.persistent = true;
  const int index = static_cast<int>(segments_.size());
  for (size_t p = 0; p < params_.size(); ++p) {
    ParamLocation& loc = params_[p];
    if (loc.place != ParamPlace::kPersistent) continue;
    loc.view_offset = segment.used;
    loc.first_segment = loc.last_segment = index;
    loc.segment_offset = segment.used;
    segment.pieces.push_back({static_cast<int>(p), 0, segment.used, loc.numel});
    segment.used += loc.numel;
  }
  close_segment(&segment, granule);
  persistent_segment_ = index;
  segments_.push_back(std::move(segment));
}

std::vector<ShardPiece> Layout::shard_pieces(int rank) const {
  std::vector<ShardPiece> out;
  for (const Segment& segment : segments_) {
    const size_t begin = static_cast<size_t>(rank) * segment.slice;
    const size_t end = begin + segment.slice;
    for (const SegmentPiece& piece : segment.pieces) {
      const size_t lo = std::max(begin, piece.segment_offset);
      const size_t hi = std::min(end, piece.segment_offset + piece.count);
      if (lo >= hi) continue;
      out.push_back({piece.param, piece.param_offset + (lo - piece.segment_offset),
                     segment.shard_offset + (lo - begin), hi - lo});
    }
  }
  return out;
}

ShardMap Layout::shard_map(int rank) const {
  ShardMap map;
  map.param_pieces.assign(params_.size(), {});
  for (const ShardPiece& piece : shard_pieces(rank)) {
    map.param_pieces[piece.param].push_back(static_cast<int>(map.pieces.size()));
    map.pieces.push_back({piece.param, piece.param_offset, piece.shard_offset, piece.count});
  }
  return map;
}

void Layout::derive_maps() {
  const size_t units = units_.size();
  unit_segments_.assign(units, {});
  unit_pieces_.assign(units, {});
  segment_units_.assign(segments_.size(), 0);
  for (size_t s = 0; s < segments_.size(); ++s) {
    for (const SegmentPiece& piece : segments_[s].pieces) {
      const int u = params_[piece.param].unit;
      std::vector<int>& fed = unit_segments_[u];
      if (std::find(fed.begin(), fed.end(), static_cast<int>(s)) == fed.end()) {
        fed.push_back(static_cast<int>(s));
        ++segment_units_[s];
      }
      unit_pieces_[u].push_back({piece, static_cast<int>(s)});
    }
  }
  trainable_units_ = 0;
  for (const UnitLayout& unit : units_) trainable_units_ += unit.trainable_numel > 0;
  // The window holds the largest unit's gradients and, where a unit's own segment (stage 3)
  // ends in padding, that padding too, so every such segment can be reduced out of the window;
  // the segments of buckets (stages 0-2) use it where it has room.
  std::vector<std::optional<size_t>> starts(segments_.size());
  size_t numel = max_unit_trainable_numel_;
  for (size_t s = 0; s < segments_.size(); ++s) {
    starts[s] = window_start(static_cast<int>(s));
    if (starts[s] && segments_[s].unit >= 0) {
      numel = std::max(numel, *starts[s] + segments_[s].numel);
    }
  }
  for (size_t s = 0; s < segments_.size(); ++s) {
    if (starts[s] && *starts[s] + segments_[s].numel > numel) starts[s].reset();
  }
  grad_window_ = GradWindow{numel, std::move(starts)};
}

std::optional<size_t> Layout::window_start(int s) const {
  const Segment& seg = segments_[s];
  if (seg.persistent || segment_units_[s] != 1) return std::nullopt;
  // Contiguous: every piece sits at the same distance from its place in the segment.
  std::optional<size_t> start;
  for (const SegmentPiece& piece : seg.pieces) {
    const size_t at = params_[piece.param].staging_offset + piece.param_offset;
    if (at < piece.segment_offset) return std::nullopt;
    const size_t begin = at - piece.segment_offset;
    if (start && begin != *start) return std::nullopt;
    start = begin;
  }
  if (!start) return std::nullopt;
  // Padding after the pieces is zeroed in the window: only where the unit's gradients end (a
  // persistent parameter's may follow them).
  const int unit = params_[seg.pieces.front().param].unit;
  const bool padding_free =
      seg.numel == seg.used || *start + seg.used == units_[unit].trainable_numel;
  if (!padding_free) return std::nullopt;
  return start;
}

Status Layout::locate(int param, size_t element, int* segment, int* rank,
                      size_t* shard_offset) const {
  if (param < 0 || static_cast<size_t>(param) >= params_.size()) {
    return Status::invalid_argument("param {} is unknown ({} registered)", param, params_.size());
  }
  const ParamLocation& loc = params_[param];
  if (element >= loc.numel) {
    return Status::invalid_argument("element {} is outside param {} ({} elements)", element, param,
                                    loc.numel);
  }
  if (loc.place == ParamPlace::kFrozen) {
    return Status::invalid_argument("param {} is frozen: it is replicated, not sharded", param);
  }
  for (int s = loc.first_segment; s <= loc.last_segment; ++s) {
    for (const SegmentPiece& piece : segments_[s].pieces) {
      if (piece.param != param || element < piece.param_offset ||
          element >= piece.param_offset + piece.count) {
        continue;
      }
      const size_t in_segment = piece.segment_offset + (element - piece.param_offset);
      *segment = s;
      *rank = static_cast<int>(in_segment / segments_[s].slice);
      *shard_offset = segments_[s].shard_offset + in_segment % segments_[s].slice;
      return Status::ok();
    }
  }
  return Status(ZRT_INTERNAL_ERROR,
                fmt::format("param {} element {} has no segment", param, element));
}

}  // namespace zrt
