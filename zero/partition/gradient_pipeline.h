// GradientPipeline: the framework writes a unit's gradients into a staging window and signals
// it; the pipeline accumulates them where the stage keeps gradients and starts the reduction of
// every segment the unit completes, on the reduce-scatter stream, while backward goes on.
//
// Where gradients go (StagePolicy::grad_home, bucket_pool.h's routes):
//  - with full local gradients (stages 0/1, or 2/3 with no_sync_accumulation), the staging
//    window is accumulated into the full gradient buffer, and a complete segment is reduced in
//    place there: stage 0 all-reduces with AVG (a value already reduced stays put, because the
//    average of equal values is that value); stage 1 reduce-scatters with SUM and then zeroes
//    the slices it does not own, so its owned slice keeps accumulating sums across micro-batches
//    (scaled by 1/N once, when the optimizer's gradient is prepared); stages 2/3 reduce-scatter
//    with AVG, add the owned slice to the gradient shard and zero the segment.
//  - otherwise (stages 2/3), the window is converted into a constant-size bucket bound to the
//    segment, the bucket is reduce-scattered in place with AVG and its owned slice is added to
//    the gradient shard by a host function on the same stream; the bucket's event tells when it
//    can be reused. Stage 2 never holds more than the buckets' worth of full gradients.
// In stages 2/3 the first reduction of a segment after a step writes its reduced slice into the
// gradient shard instead of adding it there (grad_fresh_): the reduce-scatter delivers it
// straight into the shard (N > 1) or it is copied, so the step never clears the shard and no
// copy leaves the bucket; x + 0 == x, so the sums are the same.
//
// Copies out of the gradient window into the buckets run on the progress thread (the copy
// stream, large pieces only), so grad_ready returns once the work is enqueued; the bucket's
// reduction waits for them on its stream. No copy at all where the window holds a whole segment
// (Layout::segment_window_offset) in the reduce dtype: the segment's first reduction after a
// step then reduce-scatters out of the window straight into the gradient shard, so backward
// moves each such gradient byte once instead of three times (read and write of the copy, then
// the reduction's read). Two windows alternate: the framework writes the next unit's gradients
// into one while the last unit's leave the other, and grad_data waits only when the copies or
// reductions reading the window of the unit before that are still running.
//
// Micro-batches: a backward is complete when every trainable unit signalled; set_sync(false)
// micro-batches only accumulate (full local gradients needed). finish_reductions waits for the
// reductions and makes the f32 gradient the optimizer reads; grad_norm reduces its norm.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

#include "lib/core/status.h"
#include "zero/partition/bucket_pool.h"
#include "zero/partition/partition_context.h"

namespace zrt {

struct CollectiveArgs;

// How the offloaded step's gradient slices reach host memory (start_offload_copies).
enum class OffloadCopies { kDone, kOnStream, kInPlace };

class GradientPipeline {
 public:
  explicit GradientPipeline(const PartitionContext& ctx);

  int open_unit() const { return open_unit_; }  // the unit whose gradients are open, or -1
  bool is_signalled(int unit) const { return microbatch_.signalled[unit] != 0; }
  // The highest trainable unit not signalled in this micro-batch (backward order's next), or -1.
  int next_in_backward_order() const;
  // Whether signalling `unit` now leaves the micro-batch completable: after it, the other
  // unsignalled units in backward order never find every reduction bucket held by segments
  // that still wait for units. A refusal then, before anything is written, keeps the manager
  // usable; accepting would strand partly filled buckets.
  bool backward_stays_completable(int unit) const;
  bool microbatch_started() const { return microbatch_.started; }
  int signalled_count() const { return microbatch_.signalled_count; }
  // Gradients of an unfinished step exist (a micro-batch begun, or completed since the step).
  bool pending() const { return microbatch_.started || reduced_since_step_ || unreduced_local_; }

  // Where the framework writes `param`'s gradient (the caller checked the unit may open).
  Status grad_data(int param, void** grad);
  void set_sync(bool sync) { sync_ = sync; }
  bool sync() const { return sync_; }
  // `unit`'s gradients are written (the caller checked it may signal).
  Status grad_ready(int unit);

  // The usage checks of finish_reductions: every unit signalled, the last micro-batch synced.
  Status check_complete() const;
  // Waits for every reduction and makes the f32 gradient shard the optimizer reads.
  Status finish_reductions();
  // offload_optimizer: *order = the segments in the order their reductions finish, and how
  // their f32 gradient slices reach host memory (*how): kDone, the gradient is whole already
  // (grad_norm made it); kInPlace (host buffers, f32 reductions into the gradient shard: stages
  // 2/3), the reduced shard is the optimizer's gradient, each slice ready at its segment's
  // segment_reduced, nothing copied; kOnStream (the rest), each slice's copy (and conversion)
  // enqueued here on the offload stream after its segment's last reduction and followed by
  // segment_copied, so the progress thread makes it while the caller runs earlier segments'
  // optimizers.
  Status start_offload_copies(std::vector<int>* order, OffloadCopies* how);
  // start_offload_copies in parts, for the optimizer run during backward: the segments in the
  // order above (those reduced by the synchronised micro-batch so far, then the rest), how
  // their slices reach the host, and one segment's copy (kOnStream); copies_started() once
  // every segment's copy is enqueued.
  std::vector<int> offload_order() const;
  OffloadCopies offload_copies() const;
  Status start_offload_copy(int segment);
  void copies_started() { grads_prepared_ = true; }
  // offload_optimizer: called on the training thread (inside grad_ready) once a synchronised
  // micro-batch's reduction of a segment is enqueued and segment_reduced recorded after it;
  // its failure is grad_ready's. Empty: none.
  using ReducedListener = std::function<Status(int segment)>;
  void set_reduced_listener(ReducedListener listener) { offload_.on_reduced = std::move(listener); }
  // Micro-batches begun since the manager was made (the one in progress included).
  uint64_t microbatches_begun() const { return microbatch_.begun; }
  // The f32 gradient the optimizer reads (after finish_reductions, or per segment as
  // start_offload_copies says).
  const float* optimizer_grad() const;
  // After finish_reductions: segment s's slice of the optimizer's f32 gradient. With a
  // per-segment step (BufferPlan::per_segment_step) it is converted into the one-slice buffer
  // now, and valid until the next call.
  Status segment_optimizer_grad(int segment, const float** grad);
  Status grad_norm(double* norm, bool* has_nonfinite);
  // After a successful step: the gradients start over.
  void end_step();

 private:
  // What one grad_ready call has done to its window so far.
  struct WindowPass {
    char* window = nullptr;
    bool copies_queued = false;   // copies out of the window were enqueued on the copy stream
    bool window_reduced = false;  // a reduction reads the window itself
    bool copies_unwaited = false;
  };

  Status begin_microbatch();
  // Makes the window the next unit's gradients go to the open one, once it has been read.
  Status open_grad_window();
  GradRoute route(int segment) const;
  Status copy_into_bucket(const UnitPiece& piece, char* src, WindowPass* pass);
  Status reduce_from_window(int segment, WindowPass* pass);
  // The unit wrote its part of `segment`: when no unit is left to, reduce it.
  Status segment_written(int segment, WindowPass* pass);
  Status close_grad_window(WindowPass* pass);
  void finish_unit(int unit);
  Status acquire_bucket(int segment, Bucket* bucket);
  char* bucket_data(const Bucket& bucket) const;
  // Enqueues the reduction of `segment` (its gradients at `data`) on the reduce-scatter stream,
  // and what keeps its result, as the stage's gradient home says.
  Status reduce_segment(int segment, void* data);
  // Its collective; `direct`: the reduced slice goes straight into the gradient shard.
  CollectiveArgs reduction_args(int segment, char* base, bool direct) const;
  // Behind the reduction, on the stream: the unowned slices cleared (owned-slices home), or the
  // reduced slice written or added into the gradient shard (shard home).
  Status keep_reduced_slice(int segment, char* base, bool fresh, bool direct);
  // The reduction is enqueued: its bucket's event, and the offloaded step's notice.
  Status reduction_enqueued(int segment);
  Status all_reduce_norm(bool both);
  Status copy_segment_to_host(int segment, Stream& stream);
  // start_offload_copy with ctx_.ops bound to the offload stream by the caller.
  Status enqueue_offload_copy(int segment);
  // The reduced gradient itself is the optimizer's f32 gradient: f32 reductions into the shard
  // (or the full buffer) where the optimizer's memory is the gradients' (no offload to a device
  // beside it) and no 1/N scaling is left to apply.
  bool optimizer_reads_reduced() const;
  // Hybrid sharding: the gradient shard's all-reduce across the shard groups (blocking).
  Status reduce_across_groups();
  // The optimizer's f32 gradient is made a segment at a time, in a buffer of one slice.
  bool converts_per_segment() const {
    return ctx_.plan.per_segment_step && ctx_.buffers.optimizer_grad != nullptr;
  }
  // The reduced gradient of segment s's owned slice, converted to f32 at `out` (and scaled by
  // 1/N where the owned slices hold sums).
  void convert_reduced_slice(int segment, float* out) const;
  // grad_norm's local sum of squares and non-finite flag, over the whole f32 gradient or
  // segment by segment through the constant buffer.
  Status local_sum_squares(double* sum, bool* nonfinite);

  const PartitionContext& ctx_;
  // Window reads skip the bucket copy (host buckets, the reduce dtype is the param dtype).
  const bool window_reads_;
  // grad_accumulate: windows are handed out zeroed; each read of a window clears it.
  const bool accumulate_;

  // The micro-batch in progress: which units signalled their gradients.
  struct Microbatch {
    explicit Microbatch(size_t units) : signalled(units, 0) {}
    std::vector<uint8_t> signalled;  // per unit
    int signalled_count = 0;
    bool started = false;
    uint64_t begun = 0;  // micro-batches begun since the manager was made
  };
  // The gradient staging windows, which alternate: the framework writes the next unit's
  // gradients into one while copies or reductions still read another.
  struct WindowRing {
    explicit WindowRing(size_t windows) : busy(windows, 0) {}
    std::vector<char> busy;  // per window: copies or reductions may still read it
    int next = 0;            // the window the next unit's gradients go to
    int open = -1;           // the window of the open unit, or -1
  };
  // offload_optimizer: what the step's pipeline learns of the reductions.
  struct OffloadFeed {
    // Segments in the order the last synchronised micro-batch reduced them.
    std::vector<int> reduce_order;
    ReducedListener on_reduced;
  };

  bool sync_ = true;
  int open_unit_ = -1;
  Microbatch microbatch_;
  bool reduced_since_step_ = false;  // a synchronised micro-batch completed
  bool unreduced_local_ = false;     // a no-sync micro-batch completed after the last sync
  bool reductions_in_flight_ = false;
  bool grads_prepared_ = false;
  std::vector<int> pending_;  // per segment: units still to signal
  BucketPool buckets_;
  // Stages 2/3, per segment: the gradient shard's slice holds the previous step's gradients, so
  // the first reduction after a step overwrites it instead of adding (no clearing pass).
  std::vector<uint8_t> grad_fresh_;

  WindowRing windows_;
  bool copies_unwaited_ = false;  // copies into a bucket no reduction has waited for yet
  double norm_buffer_[2] = {0, 0};
  OffloadFeed offload_;
};

}  // namespace zrt
