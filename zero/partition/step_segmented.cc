// step_backup = segment: phase 2 of the step (step_transaction.h) as one optimizer callback per
// segment, in shard order, each preceded by a copy of that segment's slice of master and state
// into the segment backup (constant size: the largest slice). A failing callback's segment is
// copied back and the walk stops there, so on each rank the segments before it hold the update
// and the rest are as before the step. Rolling the earlier segments back too would need their
// copies, the full backup this mode exists to avoid; instead the step is left interrupted, and
// a second zrt_partition_step resumes every rank where it stopped. Each callback's update is
// element-wise or per piece, so segment by segment, resumed or not, gives the bits of one pass.
// zrt's fused optimizers check their arguments before they write: they need no copy at all.
#include <array>

#include "lib/core/callback_status.h"
#include "zero/partition/segment_pieces.h"
#include "zero/partition/step_transaction.h"

namespace zrt {

Status StepTransaction::check_not_interrupted(const char* what) const {
  if (!progress_.interrupted) return Status::ok();
  return Status::invalid_usage(
      "{}: step {} was interrupted by a failing optimizer callback (on this rank the segments "
      "before {} hold its update); call zrt_partition_step again with the same optimizer to "
      "finish it, or zrt_partition_load to discard it",
      what, step_ + 1, progress_.next_segment);
}

Status StepTransaction::step_segmented(const Callback& callback) {
  const int64_t next = step_ + 1;
  // Phase 1: prepare, then vote. A resume must bring the interrupted step's optimizer: any
  // other would finish the step with a different update than its first segments had.
  Status ready = callback.ready;
  if (ready.is_ok() && progress_.interrupted &&
      (callback.fn != progress_.optimizer || callback.user_data != progress_.user_data)) {
    ready = Status::invalid_argument(
        "step {} was interrupted and resumes here: pass the optimizer and user_data it was "
        "interrupted with",
        next);
  }
  if (ready.is_ok()) ready = check_step_ready();
  ZRT_RETURN_IF_ERROR(vote_ready(ready, next));
  // Phase 2: the callbacks, then vote.
  progress_.optimizer = callback.fn;
  progress_.user_data = callback.user_data;
  ZRT_RETURN_IF_ERROR(vote_segments(run_segments(callback, next), next));
  // Phase 3: publish. Every rank's optimizer succeeded on every segment.
  const bool converted =
      progress_.params_written == static_cast<int>(ctx_.layout.segments().size());
  progress_ = SegmentProgress{};
  return commit(next, converted);
}

Status StepTransaction::run_segments(const Callback& callback, int64_t next) {
  const int count = static_cast<int>(ctx_.layout.segments().size());
  for (int s = progress_.next_segment; s < count; ++s) {
    int written = 0;
    const Status own = run_segment(callback, s, next, &written);
    if (!own.is_ok()) return own.with_context(fmt::format("segment {} of {}", s, count));
    if (written == 1) ++progress_.params_written;
    progress_.next_segment = s + 1;
  }
  return Status::ok();
}

Status StepTransaction::run_segment(const Callback& callback, int s, int64_t next,
                                    int* params_written) {
  const Segment& seg = ctx_.layout.segments()[s];
  const bool copy = !callback.writes_only_on_success;
  if (copy) copy_segment_backup(s, /*restore=*/false);
  const float* grad = nullptr;
  ZRT_RETURN_IF_ERROR(grads_.segment_optimizer_grad(s, &grad));
  std::array<float*, kMaxOptimizerSlots> state{};
  zrt_optimizer_args_t args =
      segment_optimizer_args(ctx_, s, segment_pieces_[s], grad, next,
                             ctx_.on_device ? ZRT_MEM_CUDA : ZRT_MEM_HOST, state.data());
  const zrt_param_span_t span{0, seg.slice, ctx_.segment_params(s)};
  args.param_spans = &span;
  args.num_param_spans = 1;
  args.params_written = params_written;
  clear_callback_message();
  const Status own =
      callback_result(callback.fn(&args, callback.user_data), "the optimizer callback");
  if (own.is_ok()) return own;
  if (copy) {
    copy_segment_backup(s, /*restore=*/true);
    // The whole shard's parameters from master: the earlier segments' convert to what their
    // callbacks wrote, this one's back to what it was.
    if (*params_written != 0) rederive_params();
  }
  *params_written = 0;
  return own;
}

void StepTransaction::copy_segment_backup(int s, bool restore) {
  const PartitionBuffers& buf = ctx_.buffers;
  const Segment& seg = ctx_.layout.segments()[s];
  const size_t bytes = seg.slice * sizeof(float);
  if (bytes == 0) return;
  ElementOps* ops = ctx_.master_ops;
  auto copy = [&](float* live, float* saved) {
    if (restore) {
      ops->copy(live, saved, bytes);
    } else {
      ops->copy(saved, live, bytes);
    }
  };
  copy(buf.master + seg.shard_offset, buf.backup_master);
  for (size_t i = 0; i < buf.state.size(); ++i) {
    copy(buf.state[i] + seg.shard_offset, buf.backup_state[i]);
  }
}

Status StepTransaction::vote_segments(const Status& own, int64_t next) {
  std::vector<int32_t> codes;
  const Status voted =
      exchange_codes(own.code(), "step: agreeing that every rank's optimizer succeeded", &codes);
  zrt_status_t first = ZRT_SUCCESS;
  const std::string failed = voted.is_ok() ? failed_ranks(codes, &first) : std::string();
  if (voted.is_ok() && failed.empty()) return Status::ok();
  if (voted.is_ok() && !any_rank_updated()) {
    // Every callback failed on its first segment: nothing changed anywhere, as with the full
    // backup, and any optimizer may run next.
    const std::string details = failure_details(own, codes);
    progress_ = SegmentProgress{};
    return Status::error(first,
                         "step {}: the optimizer callback failed on rank(s){} before any rank "
                         "updated a segment; master and state are unchanged on every rank, "
                         "parameters unchanged{}",
                         next, failed, details);
  }
  progress_.interrupted = true;
  const int count = static_cast<int>(ctx_.layout.segments().size());
  const std::string where =
      progress_.next_segment == count
          ? fmt::format("on this rank all {} segments hold the update", count)
          : fmt::format("on this rank segments [0, {}) of {} hold the update, the rest are as "
                        "before the step",
                        progress_.next_segment, count);
  const char* resume =
      "call zrt_partition_step again with the same optimizer to resume it, or zrt_partition_load "
      "to discard it";
  if (!voted.is_ok()) {
    return voted.with_context(fmt::format("step {} interrupted ({}; this rank's optimizer {}); {}",
                                          next, where,
                                          own.is_ok() ? "succeeded" : "failed: " + own.message(),
                                          resume));
  }
  const std::string details = failure_details(own, codes);
  return Status::error(first,
                       "step {}: the optimizer callback failed on rank(s){}; the step is "
                       "interrupted, no parameters were published ({}); {}{}",
                       next, failed, where, resume, details);
}

bool StepTransaction::any_rank_updated() {
  std::vector<int32_t> progress;
  const Status shared = exchange_values(
      progress_.next_segment, "step: sharing how far each rank's optimizer got", &progress);
  if (!shared.is_ok()) return true;  // unknown: keep the step to resume
  for (int32_t segments_done : progress) {
    if (segments_done > 0) return true;
  }
  return false;
}

}  // namespace zrt
