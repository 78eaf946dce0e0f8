// fetch / release, and the stage 3 gather window with its prefetcher.
//
// The window is depth + 1 slots, each the size of the largest unit segment. fetch(u) all-gathers
// u's segment into a free slot on the all-gather stream (unless a prefetch already put it there
// or has it in flight), then looks ahead: the next `depth` units of the expected order that are
// not gathered are gathered too, while a slot is free and the byte budgets allow (prefetched
// bytes in flight <= prefetch_bytes, gathered bytes <= max_live_bytes). Only then does it wait
// for u's own gather, so prefetches queue right behind it and run while the framework computes.
// release(u) frees u's slot at once: the next gather into it is ordered after the framework's
// use by the host (the framework released it) and after the slot's previous gather by the
// stream (gathers run in order), so no wait is needed.
//
// A unit the expected order fetches again right after this fetch (the last unit of forward is
// the first of backward) is gathered again ahead like any other: its second copy goes into
// another slot (next_slot_), ahead of the prefetches behind it, and release(u) makes it u's
// copy. Keeping the first copy instead would save that gather, but the traffic per step would
// then no longer be the documented 3P(N-1)/N.
//
// After a step the parameter shard is stale: publishing only marks it, and the first gather of
// each unit converts that unit's master slice into the shard on the all-gather stream just
// ahead of the gather (convert_shard_segment), so the conversion runs on the progress thread
// while the framework computes earlier units rather than at the end of the step.
//
// With prefetch_next_step, the step itself ends by prefetching the next forward's first units
// (prefetch_after(-1)); a framework that trains on keeps the gather of the step's first unit
// off its critical path, at the price of one unused gather after its last step.
//
// The expected order is the declared one (forward, or backward once fetches go down) until the
// first step ends; from then on it is the order recorded during that step, forward, backward and
// recomputation included. A fetch that departs from the recording logs a warning and falls back
// to the declared order for good: a wrong guess costs a wasted gather (evicted unused when its
// slot is needed), never a hang or wrong data, because a demanded unit is always gathered on
// demand when it is not in the window.
#include <algorithm>

#include "collectives/collectives.h"
#include "lib/core/log.h"
#include "lib/engine/engine.h"
#include "lib/partition/partition_manager.h"

namespace zrt {

size_t PartitionManager::unit_gather_bytes(int unit) const {
  const int segment = layout_.units()[unit].segment;
  return segment < 0 ? 0 : layout_.segments()[segment].numel * p_size_;
}

int PartitionManager::find_free_slot() const {
  for (size_t i = 0; i < slots_.size(); ++i) {
    if (slots_[i].unit < 0) return static_cast<int>(i);
  }
  return -1;
}

void PartitionManager::update_window_peaks() {
  int units = 0;
  uint64_t bytes = 0;
  for (const Slot& slot : slots_) {
    if (slot.unit < 0) continue;
    ++units;
    bytes += unit_gather_bytes(slot.unit);
  }
  stats_.max_gathered_units = std::max(stats_.max_gathered_units, units);
  stats_.max_gathered_bytes = std::max(stats_.max_gathered_bytes, bytes);
}

Status PartitionManager::convert_shard_segment(int segment) {
  const Segment& seg = layout_.segments()[segment];
  shard_stale_[segment] = 0;
  ElementOps* ops = ops_.get();
  const float* master = master_ + seg.shard_offset;
  char* shard = param_ptr(param_shard_, seg.shard_offset);
  const zrt_dtype_t pdt = options_.param_dtype;
  const size_t p_size = p_size_;
  return run_piecewise(
      *ag_stream_, seg.slice,
      [ops, master, shard, pdt, p_size](size_t begin, size_t count) {
        ops->convert(ZRT_F32, master + begin, pdt, shard + begin * p_size, count);
      },
      "partition: convert master to the parameter shard");
}

// Converts every stale segment at once and waits (checkpoints read the parameter shard).
Status PartitionManager::flush_shard_conversions() {
  bool any = false;
  for (size_t s = 0; s < shard_stale_.size(); ++s) {
    if (!shard_stale_[s]) continue;
    ZRT_RETURN_IF_ERROR(convert_shard_segment(static_cast<int>(s)));
    any = true;
  }
  return any ? ag_stream_->synchronize() : Status::ok();
}

void PartitionManager::drop_slot(int slot) {
  Slot& victim = slots_[slot];
  if (victim.prefetched) prefetched_bytes_ -= unit_gather_bytes(victim.unit);
  if (next_slot_[victim.unit] == slot) {
    next_slot_[victim.unit] = -1;
  } else {
    slot_of_[victim.unit] = -1;
  }
  victim.unit = -1;
  victim.prefetched = false;
}

void PartitionManager::forget_window() {
  for (size_t i = 0; i < slots_.size(); ++i) {
    const Slot& slot = slots_[i];
    if (slot.unit >= 0 && (slot.prefetched || !fetched_[slot.unit])) {
      drop_slot(static_cast<int>(i));
    }
  }
}

Status PartitionManager::gather_into_slot(int unit, int slot, bool prefetch, bool again) {
  const int segment_index = layout_.units()[unit].segment;
  const Segment& segment = layout_.segments()[segment_index];
  if (shard_stale_[segment_index]) {
    ZRT_RETURN_IF_ERROR(
        convert_shard_segment(segment_index).with_context(fmt::format("gathering unit {}", unit)));
  }
  CollectiveArgs args;
  args.kind = ZRT_COLL_ALL_GATHER;
  args.sendbuf = param_ptr(param_shard_, segment.shard_offset);
  args.recvbuf = window_ + static_cast<size_t>(slot) * slot_bytes_;
  args.count = segment.slice;
  args.dtype = options_.param_dtype;
  args.purpose = Purpose::kUnit;
  args.purpose_id = unit;
  ZRT_RETURN_IF_ERROR(enqueue_collective(*ag_stream_, rank_, size_, args)
                          .with_context(fmt::format("gathering unit {}", unit)));
  ZRT_RETURN_IF_ERROR(slots_[slot].event->record(*ag_stream_));
  slots_[slot].unit = unit;
  slots_[slot].prefetched = prefetch;
  (again ? next_slot_ : slot_of_)[unit] = slot;
  if (prefetch) {
    prefetched_bytes_ += unit_gather_bytes(unit);
    ++stats_.prefetches;
  } else {
    ++stats_.gathers;
  }
  update_window_peaks();
  return Status::ok();
}

void PartitionManager::note_fetch_order(int unit) {
  if (recording_) {
    order_.push_back(unit);
  } else if (recorded_) {
    if (order_pos_ < order_.size() && order_[order_pos_] == unit) {
      ++order_pos_;
    } else {
      ZRT_LOG_WARN(
          "partition: fetch of unit {} departs from the order recorded in the first step "
          "(expected {}); prefetching falls back to the declared order",
          unit, order_pos_ < order_.size() ? order_[order_pos_] : -1);
      recorded_ = false;
      stats_.order_invalidated = true;
    }
  }
  if (last_fetched_ >= 0 && unit != last_fetched_) direction_ = unit > last_fetched_ ? 1 : -1;
  last_fetched_ = unit;
}

void PartitionManager::prefetch_after(int unit) {
  const int depth = options_.prefetch_depth;
  if (depth == 0) return;
  const int units = static_cast<int>(unit_specs_.size());
  int looked = 0;
  size_t cursor = order_pos_;
  int next = unit;
  while (looked < depth) {
    int candidate = -1;
    if (recorded_) {
      if (cursor >= order_.size()) break;
      candidate = order_[cursor++];
    } else {
      next += direction_;
      if (next < 0 || next >= units) break;
      candidate = next;
    }
    if (layout_.units()[candidate].segment < 0) continue;
    // The unit being fetched comes again: a second copy, unless one is in the window.
    const bool again = candidate == unit;
    if (again && !recorded_) continue;
    ++looked;
    if ((again ? next_slot_ : slot_of_)[candidate] >= 0) continue;  // gathered or in flight
    const int slot = find_free_slot();
    if (slot < 0) break;
    const uint64_t bytes = unit_gather_bytes(candidate);
    if (options_.prefetch_bytes > 0 && prefetched_bytes_ + bytes > options_.prefetch_bytes) break;
    if (options_.max_live_bytes > 0) {
      uint64_t live = 0;
      for (const Slot& s : slots_) live += s.unit >= 0 ? unit_gather_bytes(s.unit) : 0;
      if (live + bytes > options_.max_live_bytes) break;
    }
    // A failed prefetch also fails the stream, so the demand fetch that needs it reports the
    // error; here it only stops looking ahead.
    if (!gather_into_slot(candidate, slot, /*prefetch=*/true, again).is_ok()) break;
  }
}

Status PartitionManager::fetch_stage3(int unit) {
  int slot = slot_of_[unit];
  if (slot >= 0) {
    ++stats_.prefetch_hits;
    if (slots_[slot].prefetched) {
      prefetched_bytes_ -= unit_gather_bytes(unit);
      slots_[slot].prefetched = false;
    }
  } else {
    // A unit gathered ahead that nobody asked for yet (the order changed) gives way to a
    // demanded one: its slot is dropped.
    auto evict = [this](int victim) {
      drop_slot(victim);
      ++stats_.evictions;
    };
    auto evictable = [this]() {
      for (size_t i = 0; i < slots_.size(); ++i) {
        if (slots_[i].prefetched) return static_cast<int>(i);
      }
      return -1;
    };
    slot = find_free_slot();
    if (slot < 0) {
      slot = evictable();
      if (slot < 0) {
        return Status::invalid_usage(
            "cannot fetch unit {}: the gather window's {} slot(s) hold fetched units; release "
            "one first or raise prefetch_depth",
            unit, slots_.size());
      }
      evict(slot);
    }
    if (options_.max_live_bytes > 0) {
      auto live_with_unit = [this, unit]() {
        uint64_t live = unit_gather_bytes(unit);
        for (const Slot& s : slots_) live += s.unit >= 0 ? unit_gather_bytes(s.unit) : 0;
        return live;
      };
      for (int victim = evictable(); victim >= 0 && live_with_unit() > options_.max_live_bytes;
           victim = evictable()) {
        evict(victim);
      }
      const uint64_t live = live_with_unit();
      if (live > options_.max_live_bytes && live > unit_gather_bytes(unit)) {
        return Status::invalid_usage(
            "cannot fetch unit {}: {} gathered bytes would exceed max_live_bytes ({}); "
            "release a unit first",
            unit, live, options_.max_live_bytes);
      }
    }
    ZRT_RETURN_IF_ERROR(gather_into_slot(unit, slot, /*prefetch=*/false));
  }
  prefetch_after(unit);
  return slots_[slot].event->synchronize().with_context(fmt::format("fetching unit {}", unit));
}

Status PartitionManager::fetch(int unit) {
  ZRT_RETURN_IF_ERROR(check_finalized("fetch"));
  ZRT_RETURN_IF_ERROR(check_unit(unit));
  if (fetched_[unit]) {
    return Status::invalid_usage("unit {} (\"{}\") is already fetched; release it first", unit,
                                 unit_specs_[unit].name);
  }
  ++stats_.fetches;
  note_fetch_order(unit);
  const UnitLayout& layout = layout_.units()[unit];
  if (options_.stage == 3) {
    if (layout.segment >= 0) ZRT_RETURN_IF_ERROR(fetch_stage3(unit));
    if (layout.has_persistent) ZRT_RETURN_IF_ERROR(persistent_event_->synchronize());
  } else if (!segment_events_.empty() && layout.first_segment >= 0) {
    for (int s = layout.first_segment; s <= layout.last_segment; ++s) {
      ZRT_RETURN_IF_ERROR(segment_events_[s]->synchronize().with_context(
          fmt::format("waiting for unit {}'s parameters", unit)));
    }
  }
  // Every fetch after master or state changed enqueues a share of the step backup's copy, so it
  // runs behind the framework's compute, spread over the forward (partition_step.cc); after
  // this unit's gather and prefetches, so that it delays none the framework is waiting for.
  if (!backup_current()) advance_backup();
  fetched_[unit] = 1;
  return Status::ok();
}

Status PartitionManager::release(int unit) {
  ZRT_RETURN_IF_ERROR(check_finalized("release"));
  ZRT_RETURN_IF_ERROR(check_unit(unit));
  if (!fetched_[unit]) {
    return Status::invalid_usage("unit {} (\"{}\") is not fetched, so it cannot be released", unit,
                                 unit_specs_[unit].name);
  }
  fetched_[unit] = 0;
  const int slot = slot_of_[unit];
  if (slot >= 0) {
    slots_[slot].unit = -1;
    slots_[slot].prefetched = false;
    slot_of_[unit] = next_slot_[unit];  // a second copy gathered ahead, or -1
    next_slot_[unit] = -1;
  }
  return Status::ok();
}

}  // namespace zrt
