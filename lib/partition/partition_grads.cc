// The gradient path: the framework writes a unit's gradients into the staging window and
// signals it; zrt accumulates them where the stage keeps gradients and starts the reduction of
// every segment the unit completes, on the reduce-scatter stream, while backward goes on.
//
// Where gradients go:
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
// Copies out of the gradient window into the buckets run on the progress thread (copy_stream_,
// large pieces only), so grad_ready returns once the work is enqueued; the bucket's reduction
// waits for them on its stream. No copy at all where the window holds a whole segment, unpadded
// or at the end of the unit's gradients, in the reduce dtype (segment_window_offset_): the
// segment's first reduction after a step then reduce-scatters out of the window straight into
// the gradient shard, so backward moves each such gradient byte once instead of three times
// (read and write of the copy, then the reduction's read). Two windows alternate: the framework
// writes the next unit's gradients into one while the last unit's leave the other, and
// grad_data waits only when the copies or reductions reading the window of the unit before that
// are still running.
#include <algorithm>

#include "collectives/collectives.h"
#include "lib/core/dtype.h"
#include "lib/engine/engine.h"
#include "lib/partition/partition_manager.h"

namespace zrt {

namespace {
// Pieces of gradient at least this large are copied into buckets on the progress thread;
// smaller ones right away (a task per small piece would cost more than the copy).
constexpr size_t kDeferredCopyBytes = size_t{64} << 10;
}  // namespace

Status PartitionManager::grad_data(int param, void** grad) {
  ZRT_RETURN_IF_ERROR(check_finalized("grad_data"));
  ZRT_RETURN_IF_ERROR(check_param(param));
  const ParamLocation& loc = layout_.params()[param];
  if (loc.place == ParamPlace::kFrozen) {
    return Status::invalid_argument("param {} (\"{}\") is frozen: it has no gradient", param,
                                    param_specs_[param].name);
  }
  if (open_unit_ >= 0 && open_unit_ != loc.unit) {
    return Status::invalid_usage(
        "param {} belongs to unit {}, but unit {}'s gradients are open: signal them with "
        "zrt_partition_grad_ready first",
        param, loc.unit, open_unit_);
  }
  ZRT_RETURN_IF_ERROR(open_grad_window());
  open_unit_ = loc.unit;
  *grad = param_ptr(grad_windows_[open_window_], loc.staging_offset);
  return Status::ok();
}

Status PartitionManager::open_grad_window() {
  if (open_window_ >= 0) return Status::ok();  // another parameter of the open unit
  const int w = next_window_;
  if (window_busy_[w]) {
    // An earlier unit's gradients may still be on their way from this window into buckets.
    ZRT_RETURN_IF_ERROR(window_read_[w]->synchronize().with_context(
        "waiting for an earlier unit's gradients to leave the gradient window"));
    window_busy_[w] = 0;
  }
  open_window_ = w;
  return Status::ok();
}

Status PartitionManager::set_sync(bool sync) {
  ZRT_RETURN_IF_ERROR(check_finalized("set_sync"));
  if (microbatch_started_) {
    return Status::invalid_usage(
        "set_sync in the middle of a backward pass ({} of {} units "
        "signalled); call it between micro-batches",
        signalled_count_, trainable_units_);
  }
  if (!sync && full_grads_ == nullptr) {
    return Status::invalid_usage(
        "stage {} keeps no full local gradients, so a micro-batch cannot skip the reduction; "
        "set no_sync_accumulation in the config",
        options_.stage);
  }
  sync_ = sync;
  return Status::ok();
}

Status PartitionManager::acquire_bucket(int segment, int* bucket) {
  if (bucket_of_[segment] != -1) {  // already bound (-2: the persistent bucket)
    *bucket = bucket_of_[segment];
    return Status::ok();
  }
  const Segment& seg = layout_.segments()[segment];
  if (seg.persistent) {
    *bucket = -2;  // the dedicated persistent bucket
    bucket_of_[segment] = -2;
    ops_->zero(persistent_bucket_, seg.numel * g_size_);
    return Status::ok();
  }
  // Round robin: the oldest bucket is the one whose reduction was started first.
  for (size_t tries = 0; tries < buckets_.size(); ++tries) {
    const int b = next_bucket_;
    next_bucket_ = (next_bucket_ + 1) % static_cast<int>(buckets_.size());
    if (bucket_segment_[b] >= 0) continue;  // still filling for another segment
    ZRT_RETURN_IF_ERROR(bucket_events_[b]->synchronize().with_context(
        fmt::format("waiting for bucket {}'s reduction", b)));
    bucket_segment_[b] = segment;
    bucket_of_[segment] = b;
    ops_->zero(grad_ptr(buckets_[b], seg.used), (seg.numel - seg.used) * g_size_);
    *bucket = b;
    return Status::ok();
  }
  return Status::invalid_usage(
      "gradients arrived for segment {} while {} other buckets are still partly filled: units "
      "must signal their gradients in backward order (reverse of registration)",
      segment, buckets_.size());
}

Status PartitionManager::reduce_segment(int segment, void* data) {
  const Segment& seg = layout_.segments()[segment];
  const int shards = layout_.shards();
  const int owner = shards == 1 ? 0 : rank_;
  char* base = static_cast<char*>(data);
  CollectiveArgs args;
  args.dtype = options_.reduce_dtype;
  args.purpose = Purpose::kBucket;
  args.purpose_id = segment;
  if (options_.stage == 0) {
    args.kind = ZRT_COLL_ALL_REDUCE;
    args.sendbuf = base;
    args.recvbuf = base;
    args.count = seg.numel;
    args.op = ZRT_AVG;
  } else {
    args.kind = ZRT_COLL_REDUCE_SCATTER;
    args.sendbuf = base;
    args.recvbuf = grad_ptr(base, static_cast<size_t>(owner) * seg.slice);
    args.count = seg.slice;
    args.op = options_.stage == 1 ? ZRT_SUM : ZRT_AVG;
  }
  // Stages 2/3, first reduction of the segment since the step: the reduced slice goes straight
  // into the gradient shard, which it overwrites (no copy out of the bucket).
  const bool fresh = options_.stage >= 2 && grad_fresh_[segment] != 0;
  const bool direct = fresh && size_ > 1;
  if (direct) {
    args.recvbuf = grad_ptr(grad_shard_, seg.shard_offset);
    args.output_read_late = true;  // read by the optimizer, after backward
  }
  if (size_ > 1) {
    ZRT_RETURN_IF_ERROR(enqueue_collective(*rs_stream_, rank_, size_, args)
                            .with_context(fmt::format("reducing bucket {}", segment)));
  }
  reductions_in_flight_ = true;
  ElementOps* ops = ops_.get();
  const size_t g = g_size_;
  const zrt_dtype_t dtype = options_.reduce_dtype;
  const size_t slice_bytes = seg.slice * g;
  char* owned = base + static_cast<size_t>(owner) * slice_bytes;
  if (options_.stage == 1) {
    ZRT_RETURN_IF_ERROR(ops->run_on(
        *rs_stream_,
        [ops, base, owned, slice_bytes, total = seg.numel * g]() {
          ops->zero(base, static_cast<size_t>(owned - base));
          ops->zero(owned + slice_bytes, total - static_cast<size_t>(owned - base) - slice_bytes);
          return Status::ok();
        },
        "partition: clear unowned gradient slices"));
  } else if (options_.stage >= 2) {
    char* shard = grad_ptr(grad_shard_, seg.shard_offset);
    const bool full = full_grads_ != nullptr;
    if (!direct || full) {
      ZRT_RETURN_IF_ERROR(ops->run_on(
          *rs_stream_,
          [ops, dtype, owned, shard, count = seg.slice, full, fresh, direct, base,
           total = seg.numel * g]() {
            if (direct) {
              // Already in the shard.
            } else if (fresh) {
              ops->copy(shard, owned, count * dtype_size(dtype));
            } else {
              ops->accumulate(dtype, owned, dtype, shard, count, 1.0);
            }
            if (full) ops->zero(base, total);
            return Status::ok();
          },
          "partition: accumulate reduced gradient slice"));
    }
    grad_fresh_[segment] = 0;
  }
  const int bucket = bucket_of_[segment];
  if (bucket >= 0) {
    ZRT_RETURN_IF_ERROR(bucket_events_[bucket]->record(*rs_stream_));
    bucket_segment_[bucket] = -1;
  }
  bucket_of_[segment] = -1;
  return Status::ok();
}

Status PartitionManager::grad_ready(int unit) {
  ZRT_RETURN_IF_ERROR(check_finalized("grad_ready"));
  ZRT_RETURN_IF_ERROR(check_unit(unit));
  const UnitLayout& layout = layout_.units()[unit];
  if (layout.trainable_numel == 0) {
    return Status::invalid_argument("unit {} (\"{}\") has no trainable parameter", unit,
                                    unit_specs_[unit].name);
  }
  if (signalled_[unit]) {
    return Status::invalid_usage("unit {} (\"{}\"): gradients signalled twice in one micro-batch",
                                 unit, unit_specs_[unit].name);
  }
  if (open_unit_ >= 0 && open_unit_ != unit) {
    return Status::invalid_usage("grad_ready of unit {} while unit {}'s gradients are open", unit,
                                 open_unit_);
  }
  if (!microbatch_started_) {
    // The previous micro-batch's reductions read the full gradient buffer in place: let them
    // finish before this one accumulates into it. (Buckets wait for themselves.)
    if (full_grads_ != nullptr && reductions_in_flight_) {
      ZRT_RETURN_IF_ERROR(rs_stream_->synchronize());
    }
    microbatch_started_ = true;
    grads_prepared_ = false;
  }
  // Device ops launch on the reduce-scatter stream, ahead of the reductions they feed.
  ScopedBind bound(*ops_);
  ZRT_RETURN_IF_ERROR(bound.bind(rs_stream_));
  const zrt_dtype_t pdt = options_.param_dtype;
  const zrt_dtype_t gdt = options_.reduce_dtype;
  // Pieces come in segment order; a segment is reduced as soon as this unit has written its
  // part and it was the last unit the segment waited for, so a unit larger than the bucket pool
  // streams through the buckets instead of holding them all.
  const auto& pieces = unit_pieces_[unit];
  const auto& piece_segments = unit_piece_segment_[unit];
  // Large pieces are copied into their bucket by the progress thread (copy_stream_), so this
  // call returns while they travel; grad_data of the next unit waits until the window is read.
  // A segment that other units still fill waits for its copies at its reduction: copies are
  // in order on the copy stream, so the event recorded then covers them too.
  // A unit none of whose gradients the framework asked for (its parameters went unused) has
  // zero gradients, not whatever an earlier unit left in the window.
  const bool unwritten = open_unit_ != unit;
  ZRT_RETURN_IF_ERROR(open_grad_window());
  char* window = grad_windows_[open_window_];
  bool copies_queued = false;
  bool window_reduced = false;
  bool copies_unwaited = copies_unwaited_;
  for (size_t i = 0; i < pieces.size(); ++i) {
    const SegmentPiece& piece = pieces[i];
    const ParamLocation& loc = layout_.params()[piece.param];
    char* src = param_ptr(window, loc.staging_offset + piece.param_offset);
    if (unwritten) ops_->zero(src, piece.count * p_size_);
    const int s = piece_segments[i];
    // The segment's first reduction after a step reads the window itself when the window holds
    // it whole: the reduced slice goes straight into the gradient shard, and no bucket copy
    // doubles the memory traffic of backward.
    const bool from_window = full_grads_ == nullptr && sync_ && size_ > 1 && grad_fresh_[s] != 0 &&
                             segment_window_offset_[s] != kNotInWindow;
    if (from_window) {
      if (i + 1 < pieces.size() && piece_segments[i + 1] == s) continue;
      const Segment& seg = layout_.segments()[s];
      char* data = param_ptr(window, segment_window_offset_[s]);
      ops_->zero(grad_ptr(data, seg.used), (seg.numel - seg.used) * g_size_);  // padding
      pending_[s] = segment_units_[s];  // this unit alone fills the segment
      ZRT_RETURN_IF_ERROR(reduce_segment(s, data));
      window_reduced = true;
      continue;
    }
    if (full_grads_ != nullptr) {
      ops_->accumulate(pdt, src, gdt,
                       grad_ptr(full_grads_, segment_start(s) + piece.segment_offset), piece.count,
                       1.0);
    } else if (sync_) {
      int bucket = -1;
      ZRT_RETURN_IF_ERROR(acquire_bucket(s, &bucket));
      char* dst = bucket == -2 ? persistent_bucket_ : buckets_[bucket];
      char* out = grad_ptr(dst, piece.segment_offset);
      if (copy_stream_ != nullptr && piece.count * p_size_ >= kDeferredCopyBytes) {
        ElementOps* ops = ops_.get();
        ZRT_RETURN_IF_ERROR(run_piecewise(
            *copy_stream_, piece.count,
            [ops, pdt, gdt, src, out, p_size = p_size_, g_size = g_size_](size_t begin,
                                                                          size_t count) {
              ops->convert(pdt, src + begin * p_size, gdt, out + begin * g_size, count);
            },
            "partition: gradients into a bucket"));
        copies_queued = true;
        copies_unwaited = true;
      } else {
        ops_->convert(pdt, src, gdt, out, piece.count);
      }
    }
    const bool last_in_segment = i + 1 == pieces.size() || piece_segments[i + 1] != s;
    if (!sync_ || !last_in_segment) continue;
    if (--pending_[s] > 0) continue;
    pending_[s] = segment_units_[s];
    if (copies_unwaited) {
      // The reduction reads the bucket: after the copies into it (and any before them).
      ZRT_RETURN_IF_ERROR(copy_event_->record(*copy_stream_));
      ZRT_RETURN_IF_ERROR(rs_stream_->wait_event(*copy_event_));
      copies_unwaited = false;
    }
    void* data;
    if (full_grads_ != nullptr) {
      data = grad_ptr(full_grads_, segment_start(s));
    } else {
      data = bucket_of_[s] == -2 ? persistent_bucket_ : buckets_[bucket_of_[s]];
    }
    ZRT_RETURN_IF_ERROR(reduce_segment(s, data));
  }
  if (window_reduced) {
    // The window is read on two streams: its event goes on the reduce-scatter stream, after
    // the copies out of it too.
    if (copies_queued) {
      ZRT_RETURN_IF_ERROR(copy_event_->record(*copy_stream_));
      ZRT_RETURN_IF_ERROR(rs_stream_->wait_event(*copy_event_));
      copies_unwaited = false;
    }
    ZRT_RETURN_IF_ERROR(window_read_[open_window_]->record(*rs_stream_));
    window_busy_[open_window_] = 1;
  } else if (copies_queued) {
    ZRT_RETURN_IF_ERROR(window_read_[open_window_]->record(*copy_stream_));
    window_busy_[open_window_] = 1;
  }
  copies_unwaited_ = copies_unwaited;
  next_window_ = (open_window_ + 1) % static_cast<int>(grad_windows_.size());
  open_window_ = -1;
  signalled_[unit] = 1;
  open_unit_ = -1;
  if (++signalled_count_ == trainable_units_) {
    // The micro-batch's backward is complete.
    std::fill(signalled_.begin(), signalled_.end(), 0);
    signalled_count_ = 0;
    microbatch_started_ = false;
    if (sync_) {
      reduced_since_step_ = true;
      unreduced_local_ = false;
    } else {
      unreduced_local_ = true;
    }
  }
  return Status::ok();
}

// Waits for every reduction and makes the f32 gradient shard the optimizer reads.
Status PartitionManager::finish_reductions() {
  if (microbatch_started_) {
    std::string missing;
    for (size_t u = 0; u < signalled_.size(); ++u) {
      if (!signalled_[u] && layout_.units()[u].trainable_numel > 0) {
        missing += fmt::format(" {}", u);
      }
    }
    return Status::invalid_usage("the gradients of units{} have not arrived yet", missing);
  }
  if (!reduced_since_step_) {
    return Status::invalid_usage(
        "no synchronised micro-batch since the last step: no reduced "
        "gradients to use");
  }
  if (unreduced_local_) {
    return Status::invalid_usage(
        "the last micro-batch ran without synchronisation: its "
        "gradients were never reduced (end with set_sync(1))");
  }
  ZRT_RETURN_IF_ERROR(rs_stream_->synchronize().with_context("waiting for the reductions"));
  reductions_in_flight_ = false;
  if (grads_prepared_) return Status::ok();
  const zrt_dtype_t gdt = options_.reduce_dtype;
  if (options_.stage == 1) {
    const double scale = 1.0 / size_;
    for (const Segment& seg : layout_.segments()) {
      const char* owned =
          grad_ptr(full_grads_, seg.shard_offset * size_ + static_cast<size_t>(rank_) * seg.slice);
      float* out = optimizer_grad_ + seg.shard_offset;
      ops_->convert(gdt, owned, ZRT_F32, out, seg.slice);
      ops_->scale(ZRT_F32, out, seg.slice, scale);
    }
  } else if (optimizer_grad_ != nullptr) {
    const char* reduced = options_.stage == 0 ? full_grads_ : grad_shard_;
    ops_->convert(gdt, reduced, ZRT_F32, optimizer_grad_, layout_.shard_numel());
  }
  grads_prepared_ = true;
  return Status::ok();
}

}  // namespace zrt
