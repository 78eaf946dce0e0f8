// StepTransaction: the all-or-nothing optimizer step, and what keeps it undoable.
//
// step: wait for every reduction, hand the f32 shard (master, gradient, state, piece map) to
// the framework's optimizer once, then publish the new parameters and return without waiting
// for them (StagePolicy::param_home): stage 0 converts the whole master into the parameters;
// stages 1/2 enqueue, per segment on the all-gather stream, the conversion of the owned slice
// (a host function on the progress thread) and the in-place all-gather, first units first,
// each with an event that fetch waits on (so the next forward starts as soon as its first unit
// is back, and the conversions run while it computes); stage 3 marks the parameter shard stale
// (each unit's slice is converted just ahead of its next gather, gather_window.h) and
// re-gathers the persistent segment. The gradient shard is not cleared: the next step's first
// reductions overwrite it (gradient_pipeline.h).
//
// The step backup (step_backup = 1) copies master and state before the optimizer. They do not
// change between steps, so the copy runs while the framework computes: every fetch after master
// or state changed enqueues on the all-gather stream the next 1/units of it (on_fetch), behind
// the gathers that fetch queued, as piecewise tasks so the progress thread serves the other
// streams between pieces; the step finds it done when it has waited for the streams and copies
// what no fetch enqueued itself. Enqueued whole at the first fetch, it would delay every later
// gather by its whole length (stage 3: the unit after the prefetched ones waited for it); in
// shares, each gather waits for at most one share. load_param and restore_checkpoint, which
// rewrite master, wait for copies in flight and mark the backup out of date.
//
// All or nothing. A step that fails must leave every rank where it was before the call, so the
// framework can checkpoint or retry; a rank that updated while a peer did not would silently
// diverge. The step therefore has three phases with a vote between each:
//   1. Prepare (local): usage checks, wait for the reductions (and the backup's copy), and for
//      the last step's conversions and gathers still reading master or the parameters.
//      Nothing is written. Vote 1: a max over every rank's
//      status code (N int32, one internal all-reduce). Any failure: every rank returns before its
//      optimizer, naming the ranks that failed.
//   2. Optimize: copy master + state into the backup (step_backup) unless the copy started at
//      the first fetch has already made it, run the callback. Vote 2:
//      the same exchange. Any callback failed: every rank restores from its backup and
//      returns the lowest failing rank's status, naming all of them. The vote itself failing
//      means the communicator broke (a peer died, an abort): restore locally and return that.
//   3. Publish (only when every optimizer succeeded): convert and enqueue the all-gathers. An
//      enqueue failure restores the backup and re-derives the local parameters from it.
// Each vote is a max over N int32 codes (each rank's at its index) rather than over one flag:
// the same latency for N x 4 bytes, and every rank learns who failed and how. Votes are skipped on
// one rank. Without a backup, phase 2 failures cannot be undone: every rank still stops before
// publishing (no rank waits in a gather a failed peer never joins), and docs/API.md tells the
// framework to reload a checkpoint.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "lib/core/status.h"
#include "lib/partition/backup_cursor.h"
#include "lib/partition/partition_context.h"
#include "zrt/zrt.h"

namespace zrt {

class GatherWindow;
class GradientPipeline;

class StepTransaction {
 public:
  // Steps over the window's fetches and the pipeline's gradients.
  StepTransaction(const PartitionContext& ctx, GatherWindow& window, GradientPipeline& grads);

  Status step(zrt_optimizer_fn optimizer, void* user_data);
  int64_t step_count() const { return step_; }

  // A unit was fetched: enqueue the next share of the backup's copy, if it is out of date.
  void on_fetch();
  // Master is about to be written outside a step: waits for the gathers and conversions that
  // read it and for the backup's copies, and marks the backup out of date.
  Status prepare_master_write();
  // Replaces master, state and frozen store with a checkpoint's and publishes them as a step
  // does (the manager checked the slot count).
  Status restore_checkpoint(const float* master, const std::vector<const float*>& states,
                            const void* frozen, zrt_dtype_t frozen_dtype, int64_t step);

 private:
  Status check_step_ready();
  // The step's vote: every rank's code, at its index, on every rank.
  Status exchange_codes(zrt_status_t mine, const char* what, std::vector<int32_t>* codes);
  // After a vote with failures: every rank's own message (of its failure), so each rank can
  // say why the failing ones failed. " rank 1: ..." for each failing rank in *details.
  Status exchange_messages(const Status& mine, const std::vector<int32_t>& codes,
                           std::string* details);
  void take_backup();
  Status settle_backup();
  // Copies elements [begin, end) of master and the state slots, seen as one array, into the
  // backup: at once, or (stream non-null) as piecewise tasks on the stream.
  Status copy_backup_range(size_t begin, size_t end, Stream* stream);
  void restore_backup();
  // Phase 3: master to param_dtype where this rank keeps it, and the gathers that share it.
  Status publish_params();
  // After restore_backup: the parameters this rank derives from its own master.
  void rederive_params();

  const PartitionContext& ctx_;
  GatherWindow& window_;
  GradientPipeline& grads_;
  BackupCursor backup_;
  bool backup_in_flight_ = false;  // copies of it are enqueued on the all-gather stream
  int64_t step_ = 0;
};

}  // namespace zrt
