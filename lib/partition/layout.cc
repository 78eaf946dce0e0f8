#include "lib/partition/layout.h"

#include <algorithm>

#include "lib/core/dtype.h"

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

}  // namespace

Status Layout::build(const PartitionOptions& options, int ranks, const std::vector<UnitSpec>& units,
                     const std::vector<ParamSpec>& params, Layout* layout) {
  ZRT_RETURN_IF_ERROR(validate_partition_options(options));
  if (ranks < 1) return Status::invalid_argument("ranks is {}; expected >= 1", ranks);
  if (params.empty()) return Status::invalid_usage("no parameter was registered");
  Layout l;
  l.stage_ = options.stage;
  l.ranks_ = ranks;
  l.shards_ = options.stage == 0 ? 1 : ranks;
  const size_t granule = static_cast<size_t>(l.shards_) * options.alignment;
  l.units_.resize(units.size());
  l.params_.resize(params.size());
  l.hash_ = 0xcbf29ce484222325ull;
  hash_mix(&l.hash_, units.size());
  for (size_t p = 0; p < params.size(); ++p) {
    const ParamSpec& spec = params[p];
    if (spec.unit < 0 || static_cast<size_t>(spec.unit) >= units.size()) {
      return Status::invalid_argument("param {} (\"{}\") names unit {}, but {} units exist", p,
                                      spec.name, spec.unit, units.size());
    }
    if (spec.numel == 0) {
      return Status::invalid_argument("param {} (\"{}\") has numel 0", p, spec.name);
    }
    hash_mix(&l.hash_, spec.numel);
    hash_mix(&l.hash_, static_cast<uint64_t>(spec.unit));
    hash_mix(&l.hash_, spec.flags);
    ParamLocation& loc = l.params_[p];
    loc.unit = spec.unit;
    loc.numel = spec.numel;
    loc.flags = spec.flags;
    UnitLayout& unit = l.units_[spec.unit];
    unit.params.push_back(static_cast<int>(p));
    if (spec.flags & ZRT_PARAM_FROZEN) {
      loc.place = ParamPlace::kFrozen;
      loc.view_offset = l.frozen_numel_;
      l.frozen_numel_ += spec.numel;
      continue;
    }
    loc.staging_offset = unit.trainable_numel;
    unit.trainable_numel += spec.numel;
    l.trainable_numel_ += spec.numel;
    const bool persistent = options.stage == 3 && ((spec.flags & ZRT_PARAM_UNSHARDED) ||
                                                   spec.numel < options.persistence_threshold);
    if (persistent) {
      loc.place = ParamPlace::kPersistent;
      unit.has_persistent = true;
      l.persistent_numel_ += spec.numel;
    }
  }
  for (const UnitLayout& unit : l.units_) {
    l.max_unit_trainable_numel_ = std::max(l.max_unit_trainable_numel_, unit.trainable_numel);
  }

  // Appends `count` elements of param p to the segment list, opening segments of `capacity`
  // elements as needed (capacity 0: never split, the caller opens segments).
  auto close_segment = [&l, granule](Segment& segment) {
    segment.numel = round_up(std::max<size_t>(segment.used, 1), granule);
    segment.slice = segment.numel / l.shards_;
    segment.shard_offset = l.padded_numel_ / l.shards_;
    l.padded_numel_ += segment.numel;
    l.max_segment_numel_ = std::max(l.max_segment_numel_, segment.numel);
  };

  if (options.stage <= 2) {
    // Bucket capacity in elements of the reduce dtype, a whole number of granules so that
    // full segments need no padding and parameters can straddle them without holes.
    const size_t bucket_elems = options.bucket_bytes / dtype_size(options.reduce_dtype);
    l.bucket_numel_ = std::max(granule, bucket_elems / granule * granule);
    size_t flat = 0;
    for (int u = static_cast<int>(l.units_.size()) - 1; u >= 0; --u) {
      UnitLayout& unit = l.units_[u];
      for (int p : unit.params) {
        ParamLocation& loc = l.params_[p];
        if (loc.place == ParamPlace::kFrozen) continue;
        loc.view_offset = flat;
        size_t done = 0;
        while (done < loc.numel) {
          if (l.segments_.empty() || l.segments_.back().used == l.bucket_numel_) {
            if (!l.segments_.empty()) close_segment(l.segments_.back());
            l.segments_.emplace_back();
            l.segments_.back().view_offset = flat + done;
          }
          Segment& segment = l.segments_.back();
          const size_t take = std::min(loc.numel - done, l.bucket_numel_ - segment.used);
          const int index = static_cast<int>(l.segments_.size()) - 1;
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
        flat += loc.numel;
      }
    }
    if (!l.segments_.empty()) close_segment(l.segments_.back());
  } else {
    for (size_t u = 0; u < l.units_.size(); ++u) {
      UnitLayout& unit = l.units_[u];
      Segment segment;
      segment.unit = static_cast<int>(u);
      const int index = static_cast<int>(l.segments_.size());
      for (int p : unit.params) {
        ParamLocation& loc = l.params_[p];
        if (loc.place != ParamPlace::kSegmented) continue;
        loc.view_offset = segment.used;
        loc.first_segment = loc.last_segment = index;
        loc.segment_offset = segment.used;
        segment.pieces.push_back({p, 0, segment.used, loc.numel});
        segment.used += loc.numel;
      }
      if (segment.used == 0) continue;
      unit.segment = unit.first_segment = unit.last_segment = index;
      close_segment(segment);
      l.max_unit_segment_numel_ = std::max(l.max_unit_segment_numel_, segment.numel);
      l.segments_.push_back(std::move(segment));
    }
    if (l.persistent_numel_ > 0) {
      Segment segment;
      segment.persistent = true;
      const int index = static_cast<int>(l.segments_.size());
      for (size_t p = 0; p < l.params_.size(); ++p) {
        ParamLocation& loc = l.params_[p];
        if (loc.place != ParamPlace::kPersistent) continue;
        loc.view_offset = segment.used;
        loc.first_segment = loc.last_segment = index;
        loc.segment_offset = segment.used;
        segment.pieces.push_back({static_cast<int>(p), 0, segment.used, loc.numel});
        segment.used += loc.numel;
      }
      close_segment(segment);
      l.persistent_segment_ = index;
      l.segments_.push_back(std::move(segment));
    }
  }
  hash_mix(&l.hash_, l.padded_numel_);
  *layout = std::move(l);
  return Status::ok();
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
