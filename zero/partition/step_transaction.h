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
// reductions overwrite it (gradient_pipeline.h). An optimizer may write the param_dtype copy
// itself in its pass over the shard (the fused optimizers of kernels/optim do): the step hands it
// the spans of the parameter buffers the conversion would write, and skips the conversion when
// the optimizer says it wrote them (params_written); the gathers run as before.
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
//
// offload_optimizer: step_offloaded.cc runs phase 2 as a pipeline over segments (the optimizer of
// a segment as soon as its gradient is on the host, offload_pipeline.h) under one vote that
// covers the reductions too; what waits for it is said there. step_in_backward.cc starts that
// pipeline before the step, during the backward of its last micro-batch, on a thread of its own
// (backward_optimizer.h); the step then waits for it and votes the same way.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "lib/core/status.h"
#include "zero/partition/backup_cursor.h"
#include "zero/partition/backward_optimizer.h"
#include "zero/partition/offload_pipeline.h"
#include "zero/partition/partition_context.h"
#include "zrt/zrt.h"

namespace zrt {

class GatherWindow;
class GradientPipeline;

class StepTransaction {
 public:
  // Steps over the window's fetches and the pipeline's gradients.
  StepTransaction(const PartitionContext& ctx, GatherWindow& window, GradientPipeline& grads);

  // `ready` joins phase 1's vote: what the caller checked before (the fused optimizers' config).
  // `writes_only_on_success`: a failing callback wrote nothing (zrt's fused optimizers check
  // everything first), so the segment backup need not copy ahead of it.
  struct Callback {
    zrt_optimizer_fn fn = nullptr;
    void* user_data = nullptr;
    Status ready;
    bool writes_only_on_success = false;
  };
  Status step(const Callback& optimizer);
  int64_t step_count() const { return step_; }
  // step_backup = segment: a callback failed, the step holds some segments' update and awaits
  // a resuming step or a checkpoint load. ZRT_INVALID_USAGE naming `what` while it does.
  Status check_not_interrupted(const char* what) const;
  // A checkpoint load replaces master and state: the interrupted step is dropped.
  void discard_interrupted() { progress_ = SegmentProgress{}; }

  // zrt_partition_step_in_backward (step_in_backward.cc): from the next synchronised
  // micro-batch on, each segment's optimizer runs on the backward optimizer's thread as soon as
  // its reduction is enqueued and done; step() then finishes the pipeline. The manager checked
  // the configuration (offload, a backup, host memory) and that no micro-batch is under way.
  Status arm(zrt_optimizer_fn optimizer, void* user_data);
  bool armed() const { return armed_.optimizer != nullptr; }
  bool armed_with(zrt_optimizer_fn optimizer, void* user_data) const {
    return armed_.optimizer == optimizer && armed_.user_data == user_data;
  }
  // Armed, and the micro-batch it covers is over: only the step may come next.
  bool armed_backward_done() const;
  // Stops the backward optimizer's thread (the manager is being destroyed): a callback in
  // progress finishes, the rest is skipped.
  void stop_backward_optimizer() {
    // Joined before the object goes: its job reads backward_ (unique_ptr::reset nulls the
    // pointer before the destructor runs).
    if (backward_ != nullptr) backward_->stop();
    backward_.reset();
  }

  // A unit was fetched: enqueue the next share of the backup's copy, if it is out of date.
  void on_fetch();
  // Master is about to be written outside a step: waits for the gathers and conversions that
  // read it and for the backup's copies, and marks the backup out of date.
  Status prepare_master_write();
  // One vote on every rank's `own`: ok when every rank's is; otherwise this rank's failure, or
  // ZRT_REMOTE_ERROR naming the ranks that failed. *values: every rank's `value` (-1 where the
  // vote itself failed), for settings that every rank must pass alike.
  Status agree(const Status& own, int32_t value, const char* what, std::vector<int32_t>* values);
  // The optimizer state arrays were replaced (set_optimizer_slots): the full backup's cursor
  // and the offload pipeline count them again.
  void optimizer_state_replaced();
  // Replaces master, state and frozen store with a checkpoint's and publishes them as a step
  // does (the manager checked the slot count).
  Status restore_checkpoint(const float* master, const std::vector<const float*>& states,
                            const void* frozen, zrt_dtype_t frozen_dtype, int64_t step);

 private:
  // wait_reductions false (offload): the usage checks only, the reductions still running.
  Status check_step_ready(bool wait_reductions = true);
  // Vote 1 on this rank's `ready`: every rank prepared, or the step returns before any
  // optimizer ran (this rank's own failure first, then the vote's, then the failing ranks).
  Status vote_ready(const Status& ready, int64_t next);
  // Phase 2's callback over the whole shard, after the rest of the backup's copy; its status.
  // *params_written is the callback's answer (zrt_optimizer_args_t::params_written).
  Status run_optimizer(zrt_optimizer_fn optimizer, void* user_data, int64_t next,
                       int* params_written);
  // Vote 2 on the callback's status `own`: any failure on any rank rolls this rank back (and
  // re-derives the parameters the callback wrote) and names the failing ranks.
  Status vote_optimized(const Status& own, bool params_written, int64_t next);
  // What a failed step did to master and state, for its message.
  static const char* undo_note(bool backed_up);
  // After a vote with failures: " rank 1: ..." for each failing rank, or why the messages
  // could not be shared.
  std::string failure_details(const Status& own, const std::vector<int32_t>& codes);
  // offload_optimizer: the step as a pipeline over segments (step_offloaded.cc).
  Status step_offloaded(zrt_optimizer_fn optimizer, void* user_data);
  // step_backup = segment (step_segmented.cc): phase 2 as one callback per segment, in shard
  // order, from where an interrupted step stopped; a failing segment is restored from the
  // segment backup and the walk stops there.
  Status step_segmented(const Callback& optimizer);
  Status run_segments(const Callback& optimizer, int64_t next);
  Status run_segment(const Callback& optimizer, int segment, int64_t next, int* params_written);
  // Copies segment s's slice of master and state into the segment backup, or back.
  void copy_segment_backup(int segment, bool restore);
  // Vote 2 of a segmented step: any failure leaves every rank interrupted where it stopped.
  Status vote_segments(const Status& own, int64_t next);
  // After a failed vote: whether any rank's callbacks updated a segment (one more exchange).
  bool any_rank_updated();
  // Its phase 2: the pipeline over segments (or the end of the one armed during backward),
  // when `ready`; the first failure, `ready`'s included. *run is what the pipeline did.
  Status run_offload_pipeline(const Status& ready, zrt_optimizer_fn optimizer, void* user_data,
                              int64_t next, OffloadPipeline::Run* run);
  // Its one vote, over the reductions, the copies and the callbacks (`local`, then run.code):
  // any failure on any rank rolls back what this rank's pipeline changed.
  Status vote_offloaded(const Status& local, const OffloadPipeline::Run& run, int64_t next);
  // Armed (step_in_backward.cc): segment s's gradient is on its way; the first call also
  // records backup_taken behind the rest of the backup's copy. Training thread.
  Status hand_over(int segment);
  // The backward optimizer's job for one segment. Its thread.
  Status run_armed_segment(int segment);
  // The step's end of an armed pipeline: hands over the segments backward did not (when
  // `ready`), waits for the thread, drains the copies and reductions, disarms; *run is what the
  // thread did. Returns the first failure.
  Status finish_in_backward(const Status& ready, OffloadPipeline::Run* run);
  // Waits for the gradients' copies to the host and the rest of the reductions (before an
  // offloaded step returns, so a retry reads a whole host gradient).
  Status drain_offload();
  // The offloaded pipeline's choices for this manager: convert the owned slices back, or hand
  // the callback its slice's parameters (both need a backup to undo them; the latter host
  // memory parameters).
  OffloadPipeline::Run offload_run() const;
  // " 1 (ZRT_TIMEOUT), 3 (ZRT_REMOTE_ERROR)": the ranks whose code is not ZRT_SUCCESS; the
  // lowest one's code in *first.
  static std::string failed_ranks(const std::vector<int32_t>& codes, zrt_status_t* first);
  // The step's vote: every rank's code, at its index, on every rank.
  Status exchange_codes(zrt_status_t mine, const char* what, std::vector<int32_t>* codes);
  // Every rank's non-negative `own` at its index, on every rank (one all-reduce, max).
  Status exchange_values(int32_t own, const char* what, std::vector<int32_t>* values);
  // After a vote with failures: every rank's own message (of its failure), so each rank can
  // say why the failing ones failed. " rank 1: ..." for each failing rank in *details.
  Status exchange_messages(const Status& mine, const std::vector<int32_t>& codes,
                           std::string* details);
  // step_backup = full (or segment under offload): the whole shard's copy is kept.
  bool full_backup() const {
    return ctx_.buffers.backup_master != nullptr && !ctx_.plan.per_segment_step;
  }
  void take_backup();
  Status settle_backup();
  // Copies elements [begin, end) of master and the state slots, seen as one array, into the
  // backup: at once, or (stream non-null) as piecewise tasks on the stream.
  Status copy_backup_range(size_t begin, size_t end, Stream* stream);
  void restore_backup();
  // Phase 3: master to param_dtype where this rank keeps it (unless it is there already:
  // `converted`, by the optimizer's own pass or the offload pipeline), and the gathers that
  // share it.
  Status publish_params(bool converted);
  // Where this rank's parameters are published from, per stretch of the shard, for the
  // optimizer that writes them in its own pass (zrt_optimizer_args_t::param_spans).
  void fill_param_spans();
  // Phase 3 once every rank's optimizer succeeded: publish, or undo a failed publish; success
  // commits the step.
  Status commit(int64_t next, bool optimizer_wrote_params);
  // After restore_backup: the parameters this rank derives from its own master.
  void rederive_params();

  const PartitionContext& ctx_;
  GatherWindow& window_;
  GradientPipeline& grads_;
  BackupCursor backup_;
  std::vector<zrt_param_span_t> param_spans_;
  bool backup_in_flight_ = false;  // copies of it are enqueued on the all-gather stream
  int64_t step_ = 0;
  std::unique_ptr<OffloadPipeline> offload_;  // offload_optimizer only
  // The offload pipeline converted the owned parameter slices already: publish only gathers.
  bool owned_converted_ = false;
  // zrt_partition_step_in_backward's state, between arm() and the step's end.
  struct Armed {
    zrt_optimizer_fn optimizer = nullptr;
    void* user_data = nullptr;
    uint64_t microbatches_before = 0;  // grads_.microbatches_begun() when armed
    bool backup_taken = false;         // hand_over recorded the backup_taken event
    OffloadPipeline::Run run;          // the thread's choices and outcome
  };
  Armed armed_;
  std::vector<uint8_t> handed_;  // per segment: handed to the thread in the armed step
  std::unique_ptr<BackwardOptimizer> backward_;  // made by the first arm()
  // step_backup = segment: each segment's pieces rebased on its slice, and how far the current
  // step's callbacks got (kept across an interrupted step until it resumes or is discarded).
  std::vector<std::vector<zrt_shard_piece_t>> segment_pieces_;
  struct SegmentProgress {
    int next_segment = 0;         // the first segment whose callback has not succeeded
    int params_written = 0;       // segments whose callback wrote their parameters
    bool interrupted = false;     // a step failed after some callbacks ran
    zrt_optimizer_fn optimizer = nullptr;  // the interrupted step's, which a resume must pass
    void* user_data = nullptr;
  };
  SegmentProgress progress_;
};

}  // namespace zrt
