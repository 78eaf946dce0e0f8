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

Status PartitionManager::gather_into_slot(int unit, int slot, bool prefetch) {
  const Segment& segment = layout_.segments()[layout_.units()[unit].segment];
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
  slot_of_[unit] = slot;
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
    if (candidate == unit || layout_.units()[candidate].segment < 0) continue;
    ++looked;
    if (slot_of_[candidate] >= 0) continue;  // gathered, in flight or fetched
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
    if (!gather_into_slot(candidate, slot, /*prefetch=*/true).is_ok()) break;
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
    slot = find_free_slot();
    if (slot < 0) {
      // Every slot is taken: drop a prefetched unit nobody asked for yet (the order changed).
      for (size_t i = 0; i < slots_.size(); ++i) {
        if (slots_[i].prefetched) {
          slot = static_cast<int>(i);
          break;
        }
      }
      if (slot < 0) {
        return Status::invalid_usage(
            "cannot fetch unit {}: the gather window's {} slot(s) hold fetched units; release "
            "one first or raise prefetch_depth",
            unit, slots_.size());
      }
      Slot& victim = slots_[slot];
      prefetched_bytes_ -= unit_gather_bytes(victim.unit);
      slot_of_[victim.unit] = -1;
      victim.unit = -1;
      victim.prefetched = false;
      ++stats_.evictions;
    }
    if (options_.max_live_bytes > 0) {
      uint64_t live = unit_gather_bytes(unit);
      for (const Slot& s : slots_) live += s.unit >= 0 ? unit_gather_bytes(s.unit) : 0;
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
    slot_of_[unit] = -1;
  }
  return Status::ok();
}

}  // namespace zrt
