// StepTransaction's optimizer during backward (zrt_partition_step_in_backward;
// docs/ARCHITECTURE.md#offload-pipeline): the offloaded pipeline of step_offloaded.cc, started
// before the step. Once armed, each segment of the synchronised micro-batch is handed to the
// backward optimizer's thread as its reduction is enqueued (GradientPipeline's reduced
// listener, inside grad_ready); the thread waits for the segment's gradient and runs the
// callback while the framework goes on with backward. The step then hands over what backward
// did not, waits for the thread, and votes exactly as the offloaded step does: the callbacks ran
// before every rank's reductions were known to succeed, so any failure restores every rank from
// the backup (arming needs one).
//
// What keeps this safe:
//  - the backup is whole before the first callback: the first hand-over enqueues the rest of
//    its copy on the all-gather stream and records backup_taken behind it, which the thread
//    waits for; that event also follows the last step's conversions and gathers, which read
//    master and the parameters;
//  - a segment is reduced only once every unit holding its parameters has signalled grad_ready,
//    so its callback rewrites master, state and owned parameters no later unit of this backward
//    reads (a unit fetched again after its grad_ready would: the manager refuses a micro-batch
//    after the armed one);
//  - the thread touches only the segment it runs; the training thread touches master, state
//    and the backup again only after finish().
#include <string>

#include "engine/engine.h"
#include "zero/partition/gradient_pipeline.h"
#include "zero/partition/step_transaction.h"

namespace zrt {

Status StepTransaction::arm(zrt_optimizer_fn optimizer, void* user_data) {
  const size_t segments = ctx_.layout.segments().size();
  if (backward_ == nullptr) backward_ = std::make_unique<BackwardOptimizer>(segments);
  armed_.optimizer = optimizer;
  armed_.user_data = user_data;
  armed_.microbatches_before = grads_.microbatches_begun();
  armed_.backup_taken = false;
  armed_.run = offload_run();  // a backup and host memory parameters: the manager checked
  handed_.assign(segments, 0);
  const Status started =
      backward_->start([this](int segment) { return run_armed_segment(segment); });
  if (!started.is_ok()) {
    armed_ = Armed{};
    return started;
  }
  grads_.set_reduced_listener([this](int segment) { return hand_over(segment); });
  return Status::ok();
}

bool StepTransaction::armed_backward_done() const {
  return armed() && !grads_.microbatch_started() &&
         grads_.microbatches_begun() > armed_.microbatches_before;
}

Status StepTransaction::hand_over(int segment) {
  if (handed_[segment]) return Status::ok();
  if (!armed_.backup_taken) {
    // How the slices reach the host is decided now that the micro-batch has begun (its start
    // forgot any gradient grad_norm made).
    armed_.run.how = grads_.offload_copies();
    if (!backup_.current()) {
      ZRT_RETURN_IF_ERROR(
          copy_backup_range(backup_.cursor(), backup_.total(), ctx_.streams.ag)
              .with_context("enqueueing the step backup before the optimizer runs in backward"));
      backup_.complete();
    }
    backup_in_flight_ = true;  // settle_backup waits for the stream before master is restored
    ZRT_RETURN_IF_ERROR(ctx_.streams.backup_taken->record(*ctx_.streams.ag));
    armed_.backup_taken = true;
  }
  if (armed_.run.how == OffloadCopies::kOnStream) {
    ZRT_RETURN_IF_ERROR(grads_.start_offload_copy(segment));
  }
  handed_[segment] = 1;
  backward_->push(segment);
  return Status::ok();
}

Status StepTransaction::run_armed_segment(int segment) {
  ZRT_RETURN_IF_ERROR(ctx_.streams.backup_taken->synchronize().with_context(
      "waiting for the step backup before the optimizer runs in backward"));
  if (backward_->cancelled()) {
    return Status::invalid_usage(
        "the partition manager was destroyed before segment {}'s optimizer ran", segment);
  }
  return offload_->run_segment(grads_, segment, armed_.optimizer, armed_.user_data, step_ + 1,
                               &armed_.run);
}

Status StepTransaction::finish_in_backward(const Status& ready, OffloadPipeline::Run* run) {
  Status local = ready;
  if (local.is_ok()) {
    for (int segment : grads_.offload_order()) {
      local = hand_over(segment);
      if (!local.is_ok()) break;
    }
    if (local.is_ok() && armed_.run.how == OffloadCopies::kOnStream) grads_.copies_started();
  }
  // Also after a failure: the segments handed over may still run, and a rollback must follow
  // them.
  const Status job = backward_->finish();
  grads_.set_reduced_listener(nullptr);
  *run = armed_.run;
  armed_ = Armed{};
  if (local.is_ok()) local = job;
  const Status drained = drain_offload();
  // A usage failure (`ready`) is the step's own message; the drain then says nothing new.
  if (local.is_ok()) local = drained;
  return local;
}

}  // namespace zrt
