// OffloadPipeline: the optimizer half of a step under offload_optimizer
// (docs/ARCHITECTURE.md#offload-pipeline). Master and optimizer state live in host memory; the
// gradient pipeline has enqueued, per segment and after its last reduction, the copy of the
// segment's f32 gradient slice to the host (GradientPipeline::start_offload_copies). run() walks
// the segments in the order their reductions finish: wait for the segment's copy, call the
// framework's optimizer on that segment's slice on this (the training) thread (on host memory
// this thread makes the copy itself, after the segment's reduction event, so the progress
// thread is left to the reductions), and, where the
// stage keeps owned parameter slices (stages 1/2) and a backup can undo it, enqueue the
// conversion of the updated master slice back into the owned parameter slice on the all-gather
// stream (ahead of the gathers that will publish it). So the CPU updates segment s while later
// segments are still being reduced and copied, and the progress thread converts s back while the
// CPU updates s + 1.
//
// Nothing here is visible to another rank or to the framework: the gathers that publish the
// owned slices wait for the step's vote (step_transaction.h), and a rollback restores master and
// state from the backup and re-derives the owned slices from them.
#pragma once

#include <cstdint>
#include <vector>

#include "lib/core/status.h"
#include "lib/partition/gradient_pipeline.h"
#include "lib/partition/partition_context.h"
#include "zrt/zrt.h"

namespace zrt {

class OffloadPipeline {
 public:
  explicit OffloadPipeline(const PartitionContext& ctx);

  // The optimizer over `order` (every segment once), each segment's gradient slice first
  // brought to the host as `how` says (GradientPipeline::start_offload_copies). convert_back:
  // enqueue each updated slice's conversion into the owned parameters (stages 1/2 only).
  // Stops at the first segment whose callback fails: *code is that callback's status
  // (ZRT_SUCCESS when every one succeeded), *optimized whether any callback ran. The returned
  // Status is a failure of the pipeline itself (a reduction or copy that failed, an enqueue).
  Status run(GradientPipeline& grads, const std::vector<int>& order, OffloadCopies how,
             bool convert_back, zrt_optimizer_fn optimizer, void* user_data, int64_t step,
             zrt_status_t* code, bool* optimized);

  // Segment s's shard pieces, shard_offset counted from the start of its slice.
  const std::vector<zrt_shard_piece_t>& pieces(int segment) const { return pieces_[segment]; }

 private:
  Status convert_back_segment(int segment);

  const PartitionContext& ctx_;
  std::vector<std::vector<zrt_shard_piece_t>> pieces_;
  std::vector<float*> state_;  // per state slot, re-pointed at each segment's slice
};

}  // namespace zrt
