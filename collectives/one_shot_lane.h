// The one-shot lane: a one-shot collective (one_shot.h) runs on the submitting thread from its
// deposit to its result without a Task on the heap. The call's CollTask and OneShotPhase live on
// the caller's stack; the stream is claimed as a task that runs inline would claim it
// (Stream::begin_inline), the phase runs until done or the claim's spin ends, and only a call
// still waiting then (a late peer), or failing, moves into a heap task that the progress thread
// continues (Stream::hand_off_inline). A stream that cannot be claimed (busy behind a late
// collective, failed) gets the heap task in its queue, as before.
//
// Why: with the peers there, an 8-byte all-reduce's own work is a 16-byte store and load each
// way (about 50 ns between two cores here); around it, building, running and freeing the heap
// task and its phase (two allocations, the task's fingerprint and phase bookkeeping, the virtual
// progress chain) was the larger part of the call's time (perf; bench_breakdown; measured:
// docs/ARCHITECTURE.md#one-shot-collectives, "The one-shot lane").
#pragma once

#include "collectives/coll_task.h"
#include "collectives/one_shot.h"
#include "engine/engine.h"

namespace zrt {

// Runs `task` (set up for a one-shot collective: fingerprint, trace; no phase yet) with `phase`
// on `stream`: inline when the stream can be claimed, else queued. Returns what enqueue returns:
// ok once the collective completed, was handed to the progress thread or queued; errors of the
// collective itself surface through the stream, as for any task.
Status run_one_shot_collective(Stream& stream, CollTask& task, OneShotPhase phase);

}  // namespace zrt
