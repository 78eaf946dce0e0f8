#include "zero/partition/gather_window.h"

#include <algorithm>

#include "collectives/collectives.h"
#include "lib/core/log.h"
#include "engine/engine.h"
#include "engine/mapped_window.h"

namespace zrt {

namespace {

std::vector<uint64_t> unit_gather_bytes(const PartitionContext& ctx) {
  std::vector<uint64_t> bytes;
  for (const UnitLayout& unit : ctx.layout.units()) {
    bytes.push_back(unit.segment < 0 ? 0 : ctx.layout.segments()[unit.segment].numel * ctx.p_size);
  }
  return bytes;
}

}  // namespace

GatherWindow::GatherWindow(const PartitionContext& ctx)
    : ctx_(ctx),
      fetched_(ctx.layout.units().size(), 0),
      mapped_(ctx.layout.units().size(), 0),
      slots_(static_cast<int>(ctx.streams.slot_events.size()), unit_gather_bytes(ctx)),
      order_(static_cast<int>(ctx.layout.units().size())),
      shard_stale_(ctx.layout.segments().size(), 0) {
  if (ctx.secondary.comm == nullptr) return;
  const auto& segments = ctx.layout.segments();
  size_t offset = 0;
  for (size_t s = 0; s < segments.size(); ++s) {
    secondary_offset_.push_back(offset);
    if (static_cast<int>(s) == ctx.layout.persistent_segment()) continue;
    offset += segments[s].numel / static_cast<size_t>(ctx.secondary.size);
  }
  secondary_current_.assign(segments.size(), 0);
  slot_secondary_.assign(ctx.streams.slot_events.size(), 0);
  slot_copied_segment_.assign(ctx.streams.slot_events.size(), -1);
}

int GatherWindow::first_fetched() const {
  for (size_t u = 0; u < fetched_.size(); ++u) {
    if (fetched_[u]) return static_cast<int>(u);
  }
  return -1;
}

char* GatherWindow::slot_address(int slot) const {
  MappedWindow* mapped = ctx_.buffers.mapped_window;
  if (mapped != nullptr) return mapped->slot_address(slot);
  return ctx_.buffers.window + static_cast<size_t>(slot) * ctx_.buffers.slot_bytes;
}

char* GatherWindow::unit_view(int unit) const {
  const int slot = slots_.slot_of(unit);
  if (!fetched_[unit] || slot < 0) return nullptr;
  MappedWindow* mapped = ctx_.buffers.mapped_window;
  return mapped != nullptr ? mapped->unit_address(unit) : slot_address(slot);
}

char* GatherWindow::unit_address(int unit) const {
  MappedWindow* mapped = ctx_.buffers.mapped_window;
  return mapped != nullptr ? mapped->unit_address(unit) : nullptr;
}

void GatherWindow::update_peaks() {
  stats_.max_gathered_units = std::max(stats_.max_gathered_units, slots_.occupied());
  stats_.max_gathered_bytes = std::max(stats_.max_gathered_bytes, slots_.live_bytes());
}

Status GatherWindow::convert_shard_segment(int segment) {
  const Segment& seg = ctx_.layout.segments()[segment];
  shard_stale_[segment] = 0;
  ElementOps* ops = ctx_.ops;
  const float* master = ctx_.buffers.master + seg.shard_offset;
  char* shard = ctx_.param_ptr(ctx_.buffers.param_shard, seg.shard_offset);
  const zrt_dtype_t pdt = ctx_.options.param_dtype;
  const size_t p_size = ctx_.p_size;
  return ctx_.run_piecewise(
      *ctx_.streams.ag, seg.slice,
      [ops, master, shard, pdt, p_size](size_t begin, size_t count) {
        ops->convert(ZRT_F32, master + begin, pdt, shard + begin * p_size, count);
      },
      "partition: convert master to the parameter shard");
}

Status GatherWindow::flush_conversions() {
  bool any = false;
  for (size_t s = 0; s < shard_stale_.size(); ++s) {
    if (!shard_stale_[s]) continue;
    ZRT_RETURN_IF_ERROR(convert_shard_segment(static_cast<int>(s)));
    any = true;
  }
  return any ? ctx_.streams.ag->synchronize() : Status::ok();
}

void GatherWindow::forget() {
  slots_.forget(fetched_);
  std::fill(secondary_current_.begin(), secondary_current_.end(), 0);
}

Event& GatherWindow::slot_event(int slot) const {
  if (!slot_secondary_.empty() && slot_secondary_[slot]) {
    return *ctx_.streams.secondary_slot_events[slot];
  }
  return *ctx_.streams.slot_events[slot];
}

Status GatherWindow::wait_other_stream(int slot, bool secondary) const {
  if (slot_secondary_.empty() || (slot_secondary_[slot] != 0) == secondary) return Status::ok();
  // The slot's last gather ran on the other stream; a unit evicted or forgotten unfetched may
  // still be arriving there.
  ZRT_RETURN_IF_ERROR(slot_event(slot).synchronize());
  const int copied = slot_copied_segment_[slot];
  if (secondary && copied >= 0) {
    // The world's stream may still be copying out of the slot.
    ZRT_RETURN_IF_ERROR(ctx_.streams.secondary_copied[copied]->synchronize());
  }
  return Status::ok();
}

Status GatherWindow::gather_from_secondary(int unit, int slot) {
  const int s = ctx_.layout.units()[unit].segment;
  const Segment& segment = ctx_.layout.segments()[s];
  // The copy that made the slice current ran on the world's stream (for backward, while the
  // forward went on: long done).
  ZRT_RETURN_IF_ERROR(ctx_.streams.secondary_copied[s]->synchronize());
  Stream& stream = *ctx_.streams.secondary_ag;
  CollectiveArgs args;
  args.kind = ZRT_COLL_ALL_GATHER;
  args.sendbuf = ctx_.param_ptr(ctx_.buffers.param_secondary, secondary_offset_[s]);
  args.recvbuf = slot_address(slot);
  args.count = segment.numel / static_cast<size_t>(ctx_.secondary.size);
  args.dtype = ctx_.options.param_dtype;
  args.purpose = Purpose::kUnit;
  args.purpose_id = unit;
  ZRT_RETURN_IF_ERROR(enqueue_collective(stream, ctx_.secondary.rank, ctx_.secondary.size, args));
  ZRT_RETURN_IF_ERROR(ctx_.streams.secondary_slot_events[slot]->record(stream));
  slot_secondary_[slot] = 1;
  slot_copied_segment_[slot] = -1;
  return Status::ok();
}

Status GatherWindow::copy_into_secondary(int segment, int slot) {
  const size_t slice =
      ctx_.layout.segments()[segment].numel / static_cast<size_t>(ctx_.secondary.size);
  const char* from =
      ctx_.param_ptr(slot_address(slot), slice * static_cast<size_t>(ctx_.secondary.rank));
  char* to = ctx_.param_ptr(ctx_.buffers.param_secondary, secondary_offset_[segment]);
  // A gather from the old copy may still read it: one dropped unfetched (nothing else is in
  // flight there when a step's first forward copies; the wait is then free).
  ZRT_RETURN_IF_ERROR(ctx_.streams.secondary_ag->synchronize());
  ElementOps* ops = ctx_.ops;
  const size_t p_size = ctx_.p_size;
  Stream& ag = *ctx_.streams.ag;
  ZRT_RETURN_IF_ERROR(ctx_.run_piecewise(
      ag, slice,
      [ops, from, to, p_size](size_t begin, size_t count) {
        ops->copy(to + begin * p_size, from + begin * p_size, count * p_size);
      },
      "partition: copy a gathered unit's slice into hpZ's secondary copy"));
  ZRT_RETURN_IF_ERROR(ctx_.streams.secondary_copied[segment]->record(ag));
  secondary_current_[segment] = 1;
  slot_copied_segment_[slot] = segment;
  return Status::ok();
}

void GatherWindow::evict(int slot) {
  slots_.drop(slot);
  ++stats_.evictions;
}

Status GatherWindow::gather_into_slot(int unit, int slot, bool prefetch, bool again) {
  const int segment_index = ctx_.layout.units()[unit].segment;
  const Segment& segment = ctx_.layout.segments()[segment_index];
  const bool secondary = secondary_is_current(segment_index);
  if (!secondary && shard_stale_[segment_index]) {
    ZRT_RETURN_IF_ERROR(
        convert_shard_segment(segment_index).with_context(fmt::format("gathering unit {}", unit)));
  }
  ZRT_RETURN_IF_ERROR(
      wait_other_stream(slot, secondary).with_context(fmt::format("gathering unit {}", unit)));
  MappedWindow* mapped = ctx_.buffers.mapped_window;
  if (mapped != nullptr) {
    ZRT_RETURN_IF_ERROR(
        mapped->prepare_gather(slot).with_context(fmt::format("gathering unit {}", unit)));
  }
  if (secondary) {
    ZRT_RETURN_IF_ERROR(
        gather_from_secondary(unit, slot)
            .with_context(fmt::format("gathering unit {} from hpZ's secondary copy", unit)));
  } else {
    Stream& ag = *ctx_.streams.ag;
    CollectiveArgs args;
    args.kind = ZRT_COLL_ALL_GATHER;
    args.sendbuf = ctx_.param_ptr(ctx_.buffers.param_shard, segment.shard_offset);
    args.recvbuf = slot_address(slot);
    args.count = segment.slice;
    args.dtype = ctx_.options.param_dtype;
    args.purpose = Purpose::kUnit;
    args.purpose_id = unit;
    ZRT_RETURN_IF_ERROR(enqueue_collective(ag, ctx_.rank, ctx_.size, args)
                            .with_context(fmt::format("gathering unit {}", unit)));
    // The fetch waits for the gather only; the copy runs behind it, reading the slot, and what
    // writes the slot next waits for it (stream order, or wait_other_stream).
    ZRT_RETURN_IF_ERROR(ctx_.streams.slot_events[slot]->record(ag));
    if (!slot_secondary_.empty()) {
      slot_secondary_[slot] = 0;
      slot_copied_segment_[slot] = -1;
      ZRT_RETURN_IF_ERROR(copy_into_secondary(segment_index, slot)
                              .with_context(fmt::format("gathering unit {}", unit)));
    }
  }
  slots_.occupy(unit, slot, prefetch, again);
  if (prefetch) {
    ++stats_.prefetches;
  } else {
    ++stats_.gathers;
  }
  update_peaks();
  return Status::ok();
}

void GatherWindow::prefetch_after(int unit) {
  const int depth = ctx_.options.prefetch_depth;
  if (depth == 0) return;
  int looked = 0;
  FetchOrder::Lookahead ahead = order_.ahead(unit);
  int candidate = -1;
  while (looked < depth && ahead.next(&candidate)) {
    if (ctx_.layout.units()[candidate].segment < 0) continue;
    // The unit being fetched comes again: a second copy, unless one is in the window.
    const bool again = candidate == unit;
    if (again && !order_.recorded()) continue;
    ++looked;
    const int held = again ? slots_.second_slot(candidate) : slots_.slot_of(candidate);
    if (held >= 0) continue;  // gathered or in flight
    const int slot = slots_.find_free();
    if (slot < 0) break;
    if (!slots_.prefetch_fits(slots_.unit_bytes(candidate), ctx_.options.prefetch_bytes,
                              ctx_.options.max_live_bytes)) {
      break;
    }
    // A failed prefetch also fails the stream, so the demand fetch that needs it reports the
    // error; here it only stops looking ahead.
    if (!gather_into_slot(candidate, slot, /*prefetch=*/true, again).is_ok()) break;
  }
}

Status GatherWindow::fetch_into_window(int unit) {
  int slot = slots_.slot_of(unit);
  if (slot >= 0) {
    ++stats_.prefetch_hits;
    slots_.claim(slot);
  } else {
    // A unit gathered ahead that nobody asked for yet (the order changed) gives way to a
    // demanded one: its slot is dropped.
    slot = slots_.find_free();
    if (slot < 0) {
      slot = slots_.evictable();
      if (slot < 0) {
        return Status::invalid_usage(
            "cannot fetch unit {}: the gather window's {} slot(s) hold fetched units; release "
            "one first or raise prefetch_depth",
            unit, slots_.size());
      }
      evict(slot);
    }
    const uint64_t cap = ctx_.options.max_live_bytes;
    if (cap > 0) {
      const uint64_t bytes = slots_.unit_bytes(unit);
      for (int victim = slots_.evictable(); victim >= 0 && slots_.live_bytes() + bytes > cap;
           victim = slots_.evictable()) {
        evict(victim);
      }
      const uint64_t live = slots_.live_bytes() + bytes;
      if (live > cap && live > bytes) {
        return Status::invalid_usage(
            "cannot fetch unit {}: {} gathered bytes would exceed max_live_bytes ({}); "
            "release a unit first",
            unit, live, cap);
      }
    }
    ZRT_RETURN_IF_ERROR(gather_into_slot(unit, slot, /*prefetch=*/false));
  }
  prefetch_after(unit);
  ZRT_RETURN_IF_ERROR(
      slot_event(slot).synchronize().with_context(fmt::format("fetching unit {}", unit)));
  // The unit's own address shows the slot only now, while it is fetched: the slot's memory is
  // the window's, the address the unit's for the manager's life.
  MappedWindow* mapped = ctx_.buffers.mapped_window;
  if (mapped != nullptr) {
    ZRT_RETURN_IF_ERROR(
        mapped->map(unit, slot).with_context(fmt::format("fetching unit {}", unit)));
    mapped_[unit] = 1;
  }
  return Status::ok();
}

Status GatherWindow::fetch(int unit) {
  ++stats_.fetches;
  int expected = -1;
  // Only a stage that prefetches follows the recorded order; the others have nothing to warn
  // about (a framework that reads parameters between steps fetches in any order).
  if (!order_.note(unit, &expected) && ctx_.policy.gathers_on_fetch()) {
    ZRT_LOG_WARN(
        "partition: fetch of unit {} departs from the order recorded in the first step "
        "(expected {}); prefetching falls back to the declared order",
        unit, expected);
    stats_.order_invalidated = true;
  }
  const UnitLayout& layout = ctx_.layout.units()[unit];
  const std::vector<Event*>& segment_events = ctx_.streams.segment_events;
  if (ctx_.policy.gathers_on_fetch()) {
    if (layout.segment >= 0) ZRT_RETURN_IF_ERROR(fetch_into_window(unit));
    if (layout.has_persistent) ZRT_RETURN_IF_ERROR(ctx_.streams.persistent_event->synchronize());
  } else if (!segment_events.empty() && layout.first_segment >= 0) {
    for (int s = layout.first_segment; s <= layout.last_segment; ++s) {
      ZRT_RETURN_IF_ERROR(segment_events[s]->synchronize().with_context(
          fmt::format("waiting for unit {}'s parameters", unit)));
    }
  }
  fetched_[unit] = 1;
  return Status::ok();
}

Status GatherWindow::release(int unit) {
  fetched_[unit] = 0;
  slots_.release(unit);
  if (!mapped_[unit]) return Status::ok();
  mapped_[unit] = 0;
  return ctx_.buffers.mapped_window->unmap(unit).with_context(
      fmt::format("releasing unit {}", unit));
}

Status GatherWindow::publish(bool shard_converted) {
  // Every unit's slice of the parameter shard is converted just ahead of its next gather;
  // units still in the window hold the old parameters.
  forget();
  const auto& segments = ctx_.layout.segments();
  const int p = ctx_.layout.persistent_segment();
  for (size_t s = 0; s < segments.size(); ++s) {
    shard_stale_[s] = !shard_converted && static_cast<int>(s) != p;
  }
  if (p < 0) return Status::ok();
  const Segment& seg = segments[p];
  if (!shard_converted) ZRT_RETURN_IF_ERROR(convert_shard_segment(p));
  Stream& ag = *ctx_.streams.ag;
  CollectiveArgs args;
  args.kind = ZRT_COLL_ALL_GATHER;
  args.sendbuf = ctx_.param_ptr(ctx_.buffers.param_shard, seg.shard_offset);
  args.recvbuf = ctx_.buffers.full_params;
  args.count = seg.slice;
  args.dtype = ctx_.options.param_dtype;
  args.purpose = Purpose::kUnit;
  args.purpose_id = -1;
  ZRT_RETURN_IF_ERROR(enqueue_collective(ag, ctx_.rank, ctx_.size, args)
                          .with_context("gathering the persistent parameters"));
  return ctx_.streams.persistent_event->record(ag);
}

void GatherWindow::rederive() {
  ctx_.ops->convert(ZRT_F32, ctx_.buffers.master, ctx_.options.param_dtype,
                    ctx_.buffers.param_shard, ctx_.layout.shard_numel());
  std::fill(shard_stale_.begin(), shard_stale_.end(), 0);
  std::fill(secondary_current_.begin(), secondary_current_.end(), 0);
}

void GatherWindow::end_step() {
  if (order_.end_step()) stats_.order_recorded = order_.recorded();
  if (ctx_.policy.gathers_on_fetch() && ctx_.options.prefetch_next_step) prefetch_after(-1);
}

void GatherWindow::rewind() {
  forget();
  order_.rewind();
}

}  // namespace zrt
