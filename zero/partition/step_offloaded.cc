// StepTransaction::step_offloaded: the all-or-nothing step of step_transaction.h as a pipeline
// over segments, for offload_optimizer (docs/ARCHITECTURE.md#offload-pipeline).
//
// Without offload, vote 1 (every rank's reductions completed) comes before any optimizer runs.
// Here a segment's optimizer runs as soon as its gradient is on the host, while later segments
// are still being reduced, so with a backup one vote after the last segment covers everything:
// the reductions, the copies to the host and the callbacks. What must wait for that vote:
//  - the gathers that publish the owned slices (stages 1/2) and stage 3's stale-shard marking:
//    before them nothing of the step is visible to another rank, so a rollback is local;
//  - with step_backup = 1, take_backup() completes the copy of master and state before the first
//    callback, and any failure on any rank restores every rank from it and re-derives the
//    parameters the pipeline had already written (owned slices converted back, or written by a
//    fused optimizer in its pass: stage 3's parameter shard too);
//  - with step_backup = 0 a callback's work cannot be undone: the step first waits for every
//    reduction and holds vote 1 as without offload, and writes no parameters before vote 2
//    (the owned slices are what param_data shows); the pipeline then overlaps only the copies
//    to the host with the callbacks.
// Before returning, the step waits for the copies still in flight, so a retried step reads a
// whole host gradient and the next backward cannot overwrite what a copy still reads.
#include <string>

#include "engine/engine.h"
#include "zero/partition/gradient_pipeline.h"
#include "zero/partition/step_trace.h"
#include "zero/partition/step_transaction.h"

namespace zrt {

Status StepTransaction::drain_offload() {
  return traced_step_part(ctx_.comm, kTraceOffloadDrain, -1, [&] {
    if (ctx_.streams.offload != nullptr) {
      ZRT_RETURN_IF_ERROR(ctx_.streams.offload->synchronize().with_context(
          "waiting for the gradients' copies to the host"));
    }
    return grads_.finish_reductions();  // the rest of the reduce stream
  });
}

OffloadPipeline::Run StepTransaction::offload_run() const {
  const bool backed_up = ctx_.buffers.backup_master != nullptr;
  OffloadPipeline::Run run;
  run.convert_back = backed_up && ctx_.policy.param_home() == ParamHome::kOwnedSlices;
  run.offer_params = backed_up && !ctx_.on_device;
  return run;
}

Status StepTransaction::step_offloaded(zrt_optimizer_fn optimizer, void* user_data) {
  const int64_t next = step_ + 1;
  const bool backed_up = ctx_.buffers.backup_master != nullptr;
  const Status ready = check_step_ready(/*wait_reductions=*/!backed_up);
  if (!backed_up) ZRT_RETURN_IF_ERROR(vote_ready(ready, next));
  OffloadPipeline::Run run = offload_run();
  const Status local = run_offload_pipeline(ready, optimizer, user_data, next, &run);
  if (run.optimized) backup_.invalidate();
  ZRT_RETURN_IF_ERROR(vote_offloaded(local, run, next));
  // Every rank's pipeline succeeded: publish (owned slices are converted already; stage 3's
  // shard is where every callback wrote it).
  owned_converted_ = run.convert_back;
  const bool all_written = run.params_written == ctx_.layout.segments().size();
  return traced_step_part(ctx_.comm, kTraceStepPublish, -1,
                          [&] { return commit(next, all_written); });
}

// The pipeline: per segment, its gradient on the host, the callback, the parameters.
Status StepTransaction::run_offload_pipeline(const Status& ready, zrt_optimizer_fn optimizer,
                                             void* user_data, int64_t next,
                                             OffloadPipeline::Run* run) {
  if (armed()) {
    // Started during backward (step_in_backward.cc; arming needs a backup).
    return finish_in_backward(ready, run);
  }
  if (!ready.is_ok()) return ready;
  static_cast<void>(traced_step_part(ctx_.comm, kTraceStepBackup, -1, [&] {
    take_backup();  // whole before the first callback
    return Status::ok();
  }));
  std::vector<int> order;
  Status local = grads_.start_offload_copies(&order, &run->how);
  if (local.is_ok()) local = offload_->run(grads_, order, optimizer, user_data, next, run);
  // Also after a failed callback: the copies of the segments after it are still in flight,
  // and a retry reads them.
  const Status drained = drain_offload();
  if (local.is_ok()) local = drained;
  return local;
}

Status StepTransaction::vote_offloaded(const Status& local, const OffloadPipeline::Run& run,
                                       int64_t next) {
  const bool backed_up = ctx_.buffers.backup_master != nullptr;
  const zrt_status_t code = run.code;
  const bool optimized = run.optimized;
  // Parameters this rank's pipeline may have changed before the vote (a failing callback may
  // have written its spans too): a rollback re-derives them.
  const bool params_changed = run.convert_back || (run.offer_params && optimized);
  const char* undo = undo_note(backed_up);
  // What this rank's callbacks and conversions back changed, undone (they may still be read by
  // conversions on the all-gather stream).
  auto roll_back = [&]() {
    if (!optimized || !backed_up) return;
    static_cast<void>(ctx_.streams.ag->synchronize());  // a failure shows in the vote's result
    restore_backup();
    if (params_changed) rederive_params();
  };
  const zrt_status_t mine = local.is_ok() ? code : local.code();
  std::vector<int32_t> codes;
  const Status voted = traced_step_part(ctx_.comm, kTraceStepVote, -1, [&] {
    return exchange_codes(
        mine, "step: agreeing that every rank's reductions and offloaded optimizer succeeded",
        &codes);
  });
  if (!voted.is_ok()) {
    roll_back();
    return voted.with_context(
        fmt::format("step {} (offloaded; this rank's optimizer returned {}; {} on this rank)", next,
                    zrt_status_string(code), undo));
  }
  zrt_status_t first = ZRT_SUCCESS;
  const std::string failed = failed_ranks(codes, &first);
  if (!failed.empty()) {
    roll_back();
    // Every rank takes this branch (the codes agree), so each shares its own message and every
    // rank can say why the failing ones failed.
    const std::string details = failure_details(local, codes);
    return Status::error(first,
                         "step {}: rank(s){} failed in the offloaded step (a reduction, a copy "
                         "to the host or the optimizer callback); {} on this rank, parameters "
                         "unchanged{}",
                         next, failed, optimized ? undo : "nothing was changed", details);
  }
  return Status::ok();
}

}  // namespace zrt
