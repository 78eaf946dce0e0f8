// GatherWindow: fetch and release of units, and in stage 3 the window their parameters are
// all-gathered into, with its prefetcher.
//
// The window is depth + 1 slots, each the size of the largest unit segment. fetch(u) all-gathers
// u's segment into a free slot on the all-gather stream (unless a prefetch already put it there
// or has it in flight), then looks ahead: the next `depth` units of the expected order
// (fetch_order.h) that are not gathered are gathered too, while a slot is free and the byte
// budgets allow (prefetched bytes in flight <= prefetch_bytes, gathered bytes <=
// max_live_bytes). Only then does it wait for u's own gather, so prefetches queue right behind
// it and run while the framework computes. release(u) frees u's slot at once: the next gather
// into it is ordered after the framework's use by the host (the framework released it) and
// after the slot's previous gather by the stream (gathers run in order), so no wait is needed.
//
// A unit the expected order fetches again right after this fetch (the last unit of forward is
// the first of backward) is gathered again ahead like any other: its second copy goes into
// another slot (window_slots.h), ahead of the prefetches behind it, and release(u) makes it u's
// copy. Keeping the first copy instead would save that gather, but the traffic per step would
// then no longer be the documented 3P(N-1)/N.
//
// After a step the parameter shard is stale: publishing only marks it, and the first gather of
// each unit converts that unit's master slice into the shard on the all-gather stream just
// ahead of the gather (convert_shard_segment), so the conversion runs on the progress thread
// while the framework computes earlier units rather than at the end of the step.
//
// With prefetch_next_step, the step itself ends by prefetching the next forward's first units;
// a framework that trains on keeps the gather of the step's first unit off its critical path,
// at the price of one unused gather after its last step.
//
// Every unit has an address of its own, fixed for the manager's life (mapped_window.h): the
// gathers write the slots through the slots' addresses, and fetch(u) maps u's slot at u's
// address once its gather is done; release(u) unmaps it. So the pointers param_data hands out
// never change, a pointer kept across a release reads the unit's values again once it is
// fetched, and in between reading it faults instead of showing another unit's parameters. A
// second copy gathered ahead goes into another slot through that slot's address while the
// first is still mapped at the unit's; the next fetch maps the second.
//
// A fetch that departs from the recorded order logs a warning: a wrong guess costs a wasted
// gather (evicted unused when its slot is needed), never a hang or wrong data, because a
// demanded unit is always gathered on demand when it is not in the window.
//
// hpZ (config.hpz_group_size = H, ZeRO++'s hierarchical partitioning): the shard stays flat over
// all N ranks. A gather of a unit whose secondary copy is stale runs over the world as above and
// is followed, on the same stream, by a copy of the H-rank slice this rank keeps
// (param_secondary, 1/H of the segment) out of the gathered slot; the copy is then current, and
// every later gather of the unit (backward, recomputation, further micro-batches) is an
// all-gather of those slices among the H ranks, on the secondary group's stream. An all-gather
// only copies, so both paths put the same bits in the slot. forget() (the parameters changed:
// publish, load, checkpoint) and rederive() mark every copy stale, so the next step's forward
// gathers over the world again. The two streams are not ordered with each other: a gather into
// a slot first waits (on the host) for the other stream's last work on that slot, and a gather
// from a copy for the copy itself, both usually long done.
//
// Stages 1/2 have no window: fetch waits for the post-step gathers of the unit's segments.
#pragma once

#include <cstdint>
#include <vector>

#include "lib/core/status.h"
#include "zero/partition/fetch_order.h"
#include "zero/partition/partition_context.h"
#include "zero/partition/window_slots.h"

namespace zrt {

// Counters of the stage 3 gather window (zrt_partition_stats).
struct WindowStats {
  uint64_t fetches = 0;
  uint64_t gathers = 0;        // all-gathers issued on demand
  uint64_t prefetches = 0;     // all-gathers issued ahead
  uint64_t prefetch_hits = 0;  // fetches that found their unit gathered or in flight
  uint64_t evictions = 0;      // prefetched units dropped unused (order changed)
  int max_gathered_units = 0;
  uint64_t max_gathered_bytes = 0;
  bool order_recorded = false;
  bool order_invalidated = false;
};

class GatherWindow {
 public:
  explicit GatherWindow(const PartitionContext& ctx);

  bool is_fetched(int unit) const { return fetched_[unit] != 0; }
  int first_fetched() const;  // the lowest fetched unit, or -1

  // Makes `unit`'s parameters available (the caller checked it is not fetched).
  Status fetch(int unit);
  // Stage 3: the unit's address stops showing its slot (a read of it faults).
  Status release(int unit);
  // Stage 3: where a fetched unit's segment is seen (its own address); null when it has no
  // slot.
  char* unit_view(int unit) const;
  // Stage 3: the unit's address, fixed for the manager's life, fetched or not; null when it has
  // no segment, and on the slot-address path.
  char* unit_address(int unit) const;

  // Drops every copy not fetched: its parameters are about to change.
  void forget();
  // Stage 3, after the optimizer: every segment of the parameter shard is stale (converted
  // just ahead of its next gather) and the persistent segment is gathered again now.
  // shard_converted: the optimizer already wrote the whole shard (zrt_optimizer_args_t's
  // params_written), so nothing is stale.
  Status publish(bool shard_converted = false);
  // Stage 3, after the backup was restored: the whole parameter shard from master.
  void rederive();
  // Converts every stale segment at once and waits (checkpoints read the parameter shard).
  Status flush_conversions();
  // The step ended: the first ends the recording of the fetch order; the order starts over.
  // With prefetch_next_step, the next forward's first units are gathered now (behind their
  // conversions), from the order's start, as a fetch would look ahead.
  void end_step();
  // A checkpoint replaced the parameters: forget the window and start the order over.
  void rewind();

  const WindowStats& stats() const { return stats_; }

 private:
  Status fetch_into_window(int unit);
  char* slot_address(int slot) const;  // where gathers write the slot
  // again: a second copy of a fetched unit, which release makes its copy.
  Status gather_into_slot(int unit, int slot, bool prefetch, bool again = false);
  // Gathers ahead of a fetch of `unit` (-1: before the step's first fetch), in the expected
  // order, within the depth and the byte caps.
  void prefetch_after(int unit);
  void evict(int slot);
  void update_peaks();
  Status convert_shard_segment(int segment);
  // hpZ (see the top of this file).
  bool secondary_is_current(int segment) const {
    return !secondary_current_.empty() && secondary_current_[segment] != 0;
  }
  Event& slot_event(int slot) const;  // after the last gather into the slot, on either stream
  Status wait_other_stream(int slot, bool secondary) const;
  Status gather_from_secondary(int unit, int slot);
  Status copy_into_secondary(int segment, int slot);

  const PartitionContext& ctx_;
  std::vector<uint8_t> fetched_;  // per unit
  std::vector<uint8_t> mapped_;   // per unit: its address shows its slot (mapped_window.h)
  WindowSlots slots_;
  FetchOrder order_;
  // Stage 3, per segment: the parameter shard still holds the parameters before the last step.
  std::vector<uint8_t> shard_stale_;
  // hpZ (empty when off). Per segment: where this rank's slice of it sits in param_secondary,
  // and whether that slice holds the current parameters. Per slot: whether its last gather ran
  // on the secondary stream, and which segment's copy into the secondary read it last (-1).
  std::vector<size_t> secondary_offset_;
  std::vector<uint8_t> secondary_current_;
  std::vector<uint8_t> slot_secondary_;
  std::vector<int> slot_copied_segment_;
  WindowStats stats_;
};

}  // namespace zrt
