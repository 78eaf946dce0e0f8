// OffloadPipeline: the optimizer half of a step under offload_optimizer
// (docs/ARCHITECTURE.md#offload-pipeline). Master and optimizer state live in host memory.
// GradientPipeline::start_offload_copies says where each segment's f32 gradient slice is: on
// host memory at stages 2/3 (f32 reductions) the reduced gradient shard itself, read in place
// once the segment's reduction event has passed; otherwise a copy that the progress thread
// makes on the offload stream after the segment's last reduction. run() walks the segments in
// the order their reductions finish: wait for the segment's gradient, call the framework's
// optimizer on that segment's slice on this (the training) thread, and make the updated
// parameter copy: a fused optimizer writes it in its own pass where it is handed the slice's
// parameters (host memory parameters with a backup to undo it); otherwise, where the stage
// keeps owned parameter slices (stages 1/2) and a backup can undo it, the conversion of the
// updated master slice into the owned slice is enqueued on the all-gather stream (ahead of the
// gathers that will publish it). So the CPU updates segment s while later segments are still
// being reduced and copied, and the progress thread converts s back while the CPU updates s + 1;
// the training thread copies nothing.
//
// Nothing here is visible to another rank or to the framework: the gathers that publish the
// owned slices wait for the step's vote (step_transaction.h), and a rollback restores master and
// state from the backup and re-derives the parameters from them.
#pragma once

#include <cstdint>
#include <vector>

#include "lib/core/status.h"
#include "zero/partition/gradient_pipeline.h"
#include "zero/partition/partition_context.h"
#include "zrt/zrt.h"

namespace zrt {

class OffloadPipeline {
 public:
  explicit OffloadPipeline(const PartitionContext& ctx);

  // One run's choices and outcome.
  struct Run {
    OffloadCopies how = OffloadCopies::kDone;  // where the gradient slices are
    // Enqueue each updated slice's conversion into the owned parameters (stages 1/2), unless
    // the optimizer wrote them.
    bool convert_back = false;
    // Hand each callback its slice's parameters (param_spans, params_written): host memory
    // parameters, and a backup from which a rollback re-derives them.
    bool offer_params = false;
    // The first failing callback's status (ZRT_SUCCESS when every one succeeded).
    zrt_status_t code = ZRT_SUCCESS;
    bool optimized = false;     // a callback ran
    size_t params_written = 0;  // segments whose callback wrote the parameters
  };

  // The optimizer over `order` (every segment once). Stops at the first segment whose callback
  // fails. The returned Status is that callback's failure or one of the pipeline itself (a
  // reduction or copy that failed, an enqueue); run->code tells which.
  Status run(GradientPipeline& grads, const std::vector<int>& order, zrt_optimizer_fn optimizer,
             void* user_data, int64_t step, Run* run);
  // One segment of run(), for a caller that walks the segments itself (the backward optimizer's
  // thread, backward_optimizer.h: one segment at a time, never two at once). Leaves run->code
  // and the counts of the segments before it as they were.
  Status run_segment(GradientPipeline& grads, int segment, zrt_optimizer_fn optimizer,
                     void* user_data, int64_t step, Run* run);

  // Segment s's shard pieces, shard_offset counted from the start of its slice.
  const std::vector<zrt_shard_piece_t>& pieces(int segment) const { return pieces_[segment]; }

 private:
  // run_segment with ctx_.ops bound to the all-gather stream by the caller.
  Status run_bound_segment(GradientPipeline& grads, int segment, zrt_optimizer_fn optimizer,
                           void* user_data, int64_t step, Run* run);
  Status convert_back_segment(int segment);

  const PartitionContext& ctx_;
  std::vector<std::vector<zrt_shard_piece_t>> pieces_;
  std::vector<float*> state_;  // per state slot, re-pointed at each segment's slice
};

}  // namespace zrt
