#include "zero/partition/gradient_pipeline.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <string>

#include "collectives/collectives.h"
#include "zero/comm/communicator.h"
#include "lib/core/dtype.h"
#include "engine/engine.h"

namespace zrt {

namespace {
// Pieces of gradient at least this large are copied into buckets on the progress thread;
// smaller ones right away (a task per small piece would cost more than the copy).
constexpr size_t kDeferredCopyBytes = size_t{64} << 10;
// grad_accumulate: the window is zeroed behind the copy out of it in runs of this many
// elements, so each run is still in cache when it is cleared: the clearing costs no extra pass
// over memory.
constexpr size_t kDrainElements = size_t{8} << 10;

// Runs `move(begin, n)` over [0, count) in cache-sized runs, each followed by zeroing it in the
// window when `clear` is set.
template <typename Move>
void drain(ElementOps* ops, char* window, size_t elem_size, size_t count, bool clear, Move move) {
  if (!clear) {
    move(size_t{0}, count);
    return;
  }
  for (size_t begin = 0; begin < count; begin += kDrainElements) {
    const size_t n = std::min(kDrainElements, count - begin);
    move(begin, n);
    ops->zero(window + begin * elem_size, n * elem_size);
  }
}
}  // namespace

GradientPipeline::GradientPipeline(const PartitionContext& ctx)
    : ctx_(ctx),
      window_reads_(ctx.streams.copy != nullptr &&
                    ctx.options.param_dtype == ctx.options.reduce_dtype),
      accumulate_(ctx.options.grad_accumulate),
      microbatch_(ctx.layout.units().size()),
      pending_(ctx.layout.segment_units()),
      buckets_(static_cast<int>(ctx.buffers.buckets.size()),
               static_cast<int>(ctx.layout.segments().size())),
      grad_fresh_(ctx.layout.segments().size(), 1),
      windows_(ctx.buffers.grad_windows.size()) {
  // grad_accumulate hands windows out zeroed: they start so, and every read of one clears what
  // it read.
  if (accumulate_) {
    for (char* window : ctx.buffers.grad_windows)
      ctx.ops->zero(window, ctx.plan.grad_window * ctx.p_size);
  }
}

Status GradientPipeline::grad_data(int param, void** grad) {
  ZRT_RETURN_IF_ERROR(open_grad_window());
  const ParamLocation& loc = ctx_.layout.params()[param];
  open_unit_ = loc.unit;
  *grad = ctx_.param_ptr(ctx_.buffers.grad_windows[windows_.open], loc.staging_offset);
  return Status::ok();
}

Status GradientPipeline::open_grad_window() {
  if (windows_.open >= 0) return Status::ok();  // another parameter of the open unit
  const int w = windows_.next;
  if (windows_.busy[w]) {
    // An earlier unit's gradients may still be on their way from this window into buckets.
    ZRT_RETURN_IF_ERROR(ctx_.streams.window_read[w]->synchronize().with_context(
        "waiting for an earlier unit's gradients to leave the gradient window"));
    windows_.busy[w] = 0;
  }
  windows_.open = w;
  return Status::ok();
}

char* GradientPipeline::bucket_data(const Bucket& bucket) const {
  return bucket.persistent ? ctx_.buffers.persistent_bucket : ctx_.buffers.buckets[bucket.index];
}

Status GradientPipeline::acquire_bucket(int segment, Bucket* bucket) {
  if (const std::optional<Bucket> bound = buckets_.bound(segment)) {
    *bucket = *bound;
    return Status::ok();
  }
  const Segment& seg = ctx_.layout.segments()[segment];
  if (seg.persistent) {
    *bucket = Bucket{/*persistent=*/true, 0};  // the dedicated persistent bucket
    buckets_.bind(segment, *bucket);
    ctx_.ops->zero(ctx_.buffers.persistent_bucket, seg.numel * ctx_.g_size);
    return Status::ok();
  }
  // Round robin: the oldest bucket is the one whose reduction was started first.
  if (const std::optional<int> b = buckets_.take_free()) {
    ZRT_RETURN_IF_ERROR(ctx_.streams.bucket_events[*b]->synchronize().with_context(
        fmt::format("waiting for bucket {}'s reduction", *b)));
    *bucket = Bucket{/*persistent=*/false, *b};
    buckets_.bind(segment, *bucket);
    ctx_.ops->zero(ctx_.grad_ptr(ctx_.buffers.buckets[*b], seg.used),
                   (seg.numel - seg.used) * ctx_.g_size);
    return Status::ok();
  }
  return Status::invalid_usage(
      "gradients arrived for segment {} while {} other buckets are still partly filled: units "
      "must signal their gradients in backward order (reverse of registration)",
      segment, buckets_.size());
}

Status GradientPipeline::reduce_segment(int segment, void* data) {
  char* base = static_cast<char*>(data);
  // Gradient shard, first reduction of the segment since the step: the reduced slice goes
  // straight into the gradient shard, which it overwrites (no copy out of the bucket).
  const bool fresh = ctx_.policy.grad_home() == GradHome::kShard && grad_fresh_[segment] != 0;
  const bool direct = fresh && ctx_.size > 1;
  if (ctx_.size > 1) {
    ZRT_RETURN_IF_ERROR(enqueue_collective(*ctx_.streams.rs, ctx_.rank, ctx_.size,
                                           reduction_args(segment, base, direct))
                            .with_context(fmt::format("reducing bucket {}", segment)));
  }
  reductions_in_flight_ = true;
  ZRT_RETURN_IF_ERROR(keep_reduced_slice(segment, base, fresh, direct));
  return reduction_enqueued(segment);
}

CollectiveArgs GradientPipeline::reduction_args(int segment, char* base, bool direct) const {
  const Segment& seg = ctx_.layout.segments()[segment];
  const GradHome home = ctx_.policy.grad_home();
  CollectiveArgs args;
  args.dtype = ctx_.options.reduce_dtype;
  args.purpose = Purpose::kBucket;
  args.purpose_id = segment;
  if (home == GradHome::kFull) {
    args.kind = ZRT_COLL_ALL_REDUCE;
    args.sendbuf = base;
    args.recvbuf = base;
    args.count = seg.numel;
    args.op = ZRT_AVG;
  } else {
    args.kind = ZRT_COLL_REDUCE_SCATTER;
    args.sendbuf = base;
    args.recvbuf = ctx_.grad_ptr(base, static_cast<size_t>(ctx_.owner()) * seg.slice);
    args.count = seg.slice;
    args.op = home == GradHome::kOwnedSlices ? ZRT_SUM : ZRT_AVG;
  }
  if (direct) {
    args.recvbuf = ctx_.grad_ptr(ctx_.buffers.grad_shard, seg.shard_offset);
    args.output_read_late = true;  // read by the optimizer, after backward
  }
  return args;
}

Status GradientPipeline::keep_reduced_slice(int segment, char* base, bool fresh, bool direct) {
  const Segment& seg = ctx_.layout.segments()[segment];
  const GradHome home = ctx_.policy.grad_home();
  const PartitionBuffers& buf = ctx_.buffers;
  Stream& rs = *ctx_.streams.rs;
  ElementOps* ops = ctx_.ops;
  const size_t g = ctx_.g_size;
  const zrt_dtype_t dtype = ctx_.options.reduce_dtype;
  const size_t slice_bytes = seg.slice * g;
  char* owned = base + static_cast<size_t>(ctx_.owner()) * slice_bytes;
  if (home == GradHome::kOwnedSlices) {
    return ops->run_on(
        rs,
        [ops, base, owned, slice_bytes, total = seg.numel * g]() {
          ops->zero(base, static_cast<size_t>(owned - base));
          ops->zero(owned + slice_bytes, total - static_cast<size_t>(owned - base) - slice_bytes);
          return Status::ok();
        },
        "partition: clear unowned gradient slices");
  }
  if (home != GradHome::kShard) return Status::ok();
  char* shard = ctx_.grad_ptr(buf.grad_shard, seg.shard_offset);
  const bool full = buf.full_grads != nullptr;
  if (!direct || full) {
    ZRT_RETURN_IF_ERROR(ops->run_on(
        rs,
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
  return Status::ok();
}

Status GradientPipeline::reduction_enqueued(int segment) {
  Stream& rs = *ctx_.streams.rs;
  const std::optional<Bucket> bucket = buckets_.bound(segment);
  if (bucket && !bucket->persistent) {
    ZRT_RETURN_IF_ERROR(ctx_.streams.bucket_events[bucket->index]->record(rs));
  }
  buckets_.unbind(segment);
  if (!ctx_.streams.segment_reduced.empty()) {
    // Offload: the step starts this segment's copy to the host and its optimizer here.
    ZRT_RETURN_IF_ERROR(ctx_.streams.segment_reduced[segment]->record(rs));
    offload_.reduce_order.push_back(segment);
    if (sync_ && offload_.on_reduced) ZRT_RETURN_IF_ERROR(offload_.on_reduced(segment));
  }
  return Status::ok();
}

Status GradientPipeline::begin_microbatch() {
  if (microbatch_.started) return Status::ok();
  // The previous micro-batch's reductions read the full gradient buffer in place: let them
  // finish before this one accumulates into it. (Buckets wait for themselves.)
  // Likewise the persistent bucket (stage 3), which has no event of its own and is zeroed as
  // soon as this micro-batch's first persistent gradient arrives.
  const bool persistent = ctx_.layout.persistent_segment() >= 0;
  if ((ctx_.buffers.full_grads != nullptr || persistent) && reductions_in_flight_) {
    ZRT_RETURN_IF_ERROR(ctx_.streams.rs->synchronize());
  }
  if (sync_)
    offload_.reduce_order.clear();  // this micro-batch's reductions are the ones that count
  microbatch_.started = true;
  ++microbatch_.begun;
  grads_prepared_ = false;
  return Status::ok();
}

GradRoute GradientPipeline::route(int segment) const {
  RouteFacts facts;
  facts.full_grads = ctx_.buffers.full_grads != nullptr;
  facts.sync = sync_;
  facts.in_window = window_reads_ && ctx_.layout.segment_window_offset(segment).has_value();
  return route_segment(facts);
}

// Large pieces are copied into their bucket by the progress thread (the copy stream), so
// grad_ready returns while they travel; grad_data of the next unit waits until the window is
// read. A segment that other units still fill waits for its copies at its reduction: copies
// are in order on the copy stream, so the event recorded then covers them too.
Status GradientPipeline::copy_into_bucket(const UnitPiece& piece, char* src, WindowPass* pass) {
  const zrt_dtype_t pdt = ctx_.options.param_dtype;
  const zrt_dtype_t gdt = ctx_.options.reduce_dtype;
  Bucket bucket;
  ZRT_RETURN_IF_ERROR(acquire_bucket(piece.segment, &bucket));
  char* out = ctx_.grad_ptr(bucket_data(bucket), piece.piece.segment_offset);
  const size_t count = piece.piece.count;
  ElementOps* ops = ctx_.ops;
  const size_t p_size = ctx_.p_size, g_size = ctx_.g_size;
  const bool clear = accumulate_;
  char* window = src;
  auto move = [ops, pdt, gdt, window, out, p_size, g_size](size_t begin, size_t n) {
    ops->convert(pdt, window + begin * p_size, gdt, out + begin * g_size, n);
  };
  if (ctx_.streams.copy == nullptr || count * ctx_.p_size < kDeferredCopyBytes) {
    drain(ops, window, p_size, count, clear, move);
    return Status::ok();
  }
  ZRT_RETURN_IF_ERROR(ctx_.run_piecewise(
      *ctx_.streams.copy, count,
      [ops, window, p_size, clear, move](size_t begin, size_t n) {
        drain(ops, window + begin * p_size, p_size, n, clear,
              [&move, begin](size_t at, size_t m) { move(begin + at, m); });
      },
      "partition: gradients into a bucket"));
  pass->copies_queued = true;
  pass->copies_unwaited = true;
  return Status::ok();
}

Status GradientPipeline::reduce_from_window(int segment, WindowPass* pass) {
  const Segment& seg = ctx_.layout.segments()[segment];
  char* data = ctx_.param_ptr(pass->window, *ctx_.layout.segment_window_offset(segment));
  ctx_.ops->zero(ctx_.grad_ptr(data, seg.used), (seg.numel - seg.used) * ctx_.g_size);  // padding
  pending_[segment] = ctx_.layout.segment_units(segment);  // this unit alone fills the segment
  ZRT_RETURN_IF_ERROR(reduce_segment(segment, data));
  pass->window_reduced = true;
  if (accumulate_) {
    // The reduction read the window in place (no copy to fold the clearing into): clear it on
    // the reduce-scatter stream behind the reduction and the copy of its owned slice, on the
    // progress thread, so the training thread makes no pass over it.
    ElementOps* ops = ctx_.ops;
    ZRT_RETURN_IF_ERROR(ops->run_on(
        *ctx_.streams.rs,
        [ops, data, bytes = seg.numel * ctx_.g_size]() {
          ops->zero(data, bytes);
          return Status::ok();
        },
        "partition: clear the gradient window (grad_accumulate)"));
  }
  return Status::ok();
}

Status GradientPipeline::segment_written(int segment, WindowPass* pass) {
  if (--pending_[segment] > 0) return Status::ok();
  pending_[segment] = ctx_.layout.segment_units(segment);
  const PartitionStreams& streams = ctx_.streams;
  if (pass->copies_unwaited) {
    // The reduction reads the bucket: after the copies into it (and any before them).
    ZRT_RETURN_IF_ERROR(streams.copy_event->record(*streams.copy));
    ZRT_RETURN_IF_ERROR(streams.rs->wait_event(*streams.copy_event));
    pass->copies_unwaited = false;
  }
  void* data;
  if (ctx_.buffers.full_grads != nullptr) {
    data = ctx_.grad_ptr(ctx_.buffers.full_grads, ctx_.segment_start(segment));
  } else {
    data = bucket_data(*buckets_.bound(segment));
  }
  return reduce_segment(segment, data);
}

Status GradientPipeline::close_grad_window(WindowPass* pass) {
  const PartitionStreams& streams = ctx_.streams;
  if (pass->window_reduced) {
    // The window is read on two streams: its event goes on the reduce-scatter stream, after
    // the copies out of it too.
    if (pass->copies_queued) {
      ZRT_RETURN_IF_ERROR(streams.copy_event->record(*streams.copy));
      ZRT_RETURN_IF_ERROR(streams.rs->wait_event(*streams.copy_event));
      pass->copies_unwaited = false;
    }
    ZRT_RETURN_IF_ERROR(streams.window_read[windows_.open]->record(*streams.rs));
    windows_.busy[windows_.open] = 1;
  } else if (pass->copies_queued) {
    ZRT_RETURN_IF_ERROR(streams.window_read[windows_.open]->record(*streams.copy));
    windows_.busy[windows_.open] = 1;
  }
  copies_unwaited_ = pass->copies_unwaited;
  windows_.next = (windows_.open + 1) % static_cast<int>(ctx_.buffers.grad_windows.size());
  windows_.open = -1;
  return Status::ok();
}

int GradientPipeline::next_in_backward_order() const {
  for (int u = static_cast<int>(microbatch_.signalled.size()) - 1; u >= 0; --u) {
    if (!microbatch_.signalled[u] && ctx_.layout.units()[u].trainable_numel > 0) return u;
  }
  return -1;
}

bool GradientPipeline::backward_stays_completable(int unit) const {
  // Backward order is completable by construction (the layout sizes the pool for it): only
  // an out-of-order unit needs the simulation below, which mirrors grad_ready's use of buckets.
  if (unit == next_in_backward_order() || !sync_) return true;
  const auto& segments = ctx_.layout.segments();
  std::vector<int> pending = pending_;
  std::vector<char> bound(segments.size(), 0);
  for (size_t s = 0; s < segments.size(); ++s) {
    const std::optional<Bucket> b = buckets_.bound(static_cast<int>(s));
    bound[s] = b.has_value() && !b->persistent ? 1 : 0;
  }
  int free = buckets_.free_count();
  auto signal = [&](int u) {
    const std::vector<UnitPiece>& pieces = ctx_.layout.unit_pieces(u);
    for (size_t i = 0; i < pieces.size(); ++i) {
      const int s = pieces[i].segment;
      const bool needs_bucket = !segments[s].persistent && route(s) == GradRoute::kCopyToBucket;
      if (needs_bucket && !bound[s]) {
        if (free == 0) return false;
        bound[s] = 1;
        --free;
      }
      const bool last_in_segment = i + 1 == pieces.size() || pieces[i + 1].segment != s;
      if (last_in_segment && --pending[s] == 0 && bound[s]) {
        bound[s] = 0;  // reduced: its bucket is free again
        ++free;
      }
    }
    return true;
  };
  if (!signal(unit)) return false;
  for (int u = static_cast<int>(microbatch_.signalled.size()) - 1; u >= 0; --u) {
    if (u == unit || microbatch_.signalled[u] || ctx_.layout.units()[u].trainable_numel == 0)
      continue;
    if (!signal(u)) return false;
  }
  return true;
}

void GradientPipeline::finish_unit(int unit) {
  microbatch_.signalled[unit] = 1;
  open_unit_ = -1;
  if (++microbatch_.signalled_count < ctx_.layout.trainable_units()) return;
  // The micro-batch's backward is complete.
  std::fill(microbatch_.signalled.begin(), microbatch_.signalled.end(), 0);
  microbatch_.signalled_count = 0;
  microbatch_.started = false;
  if (sync_) {
    reduced_since_step_ = true;
    unreduced_local_ = false;
  } else {
    unreduced_local_ = true;
  }
}

// Pieces come in segment order; a segment is reduced as soon as this unit has written its part
// and it was the last unit the segment waited for, so a unit larger than the bucket pool
// streams through the buckets instead of holding them all.
Status GradientPipeline::grad_ready(int unit) {
  ZRT_RETURN_IF_ERROR(begin_microbatch());
  // Device ops launch on the reduce-scatter stream, ahead of the reductions they feed.
  ScopedBind bound(*ctx_.ops);
  ZRT_RETURN_IF_ERROR(bound.bind(ctx_.streams.rs));
  // A unit none of whose gradients the framework asked for (its parameters went unused) has
  // zero gradients, not whatever an earlier unit left in the window.
  const bool unwritten = open_unit_ != unit;
  ZRT_RETURN_IF_ERROR(open_grad_window());
  WindowPass pass;
  pass.window = ctx_.buffers.grad_windows[windows_.open];
  pass.copies_unwaited = copies_unwaited_;
  const std::vector<UnitPiece>& pieces = ctx_.layout.unit_pieces(unit);
  for (size_t i = 0; i < pieces.size(); ++i) {
    const UnitPiece& piece = pieces[i];
    const int s = piece.segment;
    const ParamLocation& loc = ctx_.layout.params()[piece.piece.param];
    char* src = ctx_.param_ptr(pass.window, loc.staging_offset + piece.piece.param_offset);
    // In grad_accumulate mode the window is zero already.
    if (unwritten && !accumulate_) ctx_.ops->zero(src, piece.piece.count * ctx_.p_size);
    const bool last_in_segment = i + 1 == pieces.size() || pieces[i + 1].segment != s;
    switch (route(s)) {
      case GradRoute::kReduceFromWindow:
        if (last_in_segment) ZRT_RETURN_IF_ERROR(reduce_from_window(s, &pass));
        continue;
      case GradRoute::kAccumulateFull: {
        char* full = ctx_.grad_ptr(ctx_.buffers.full_grads,
                                   ctx_.segment_start(s) + piece.piece.segment_offset);
        ElementOps* ops = ctx_.ops;
        const zrt_dtype_t pdt = ctx_.options.param_dtype, gdt = ctx_.options.reduce_dtype;
        const size_t p_size = ctx_.p_size, g_size = ctx_.g_size;
        drain(ops, src, p_size, piece.piece.count, accumulate_,
              [ops, pdt, gdt, src, full, p_size, g_size](size_t begin, size_t n) {
                ops->accumulate(pdt, src + begin * p_size, gdt, full + begin * g_size, n, 1.0);
              });
        break;
      }
      case GradRoute::kCopyToBucket:
        ZRT_RETURN_IF_ERROR(copy_into_bucket(piece, src, &pass));
        break;
    }
    if (sync_ && last_in_segment) ZRT_RETURN_IF_ERROR(segment_written(s, &pass));
  }
  ZRT_RETURN_IF_ERROR(close_grad_window(&pass));
  finish_unit(unit);
  return Status::ok();
}

Status GradientPipeline::check_complete() const {
  if (microbatch_.started) {
    // Nothing is in flight for these units: the framework never signalled them.
    std::string missing;
    for (size_t u = 0; u < microbatch_.signalled.size(); ++u) {
      if (!microbatch_.signalled[u] && ctx_.layout.units()[u].trainable_numel > 0) {
        missing += fmt::format("{}{}", missing.empty() ? " " : ", ", u);
        if (u < ctx_.unit_names.size()) missing += fmt::format(" (\"{}\")", ctx_.unit_names[u]);
      }
    }
    return Status::invalid_usage(
        "zrt_partition_grad_ready was never called for units{} in this micro-batch ({} of {} "
        "trainable units signalled): call zrt_partition_grad_ready(pm, unit) for every unit with "
        "trainable parameters once its gradients are written, even if they went unused (they "
        "then count as zero)",
        missing, microbatch_.signalled_count, ctx_.layout.trainable_units());
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
  return Status::ok();
}

Status GradientPipeline::finish_reductions() {
  ZRT_RETURN_IF_ERROR(check_complete());
  ZRT_RETURN_IF_ERROR(ctx_.streams.rs->synchronize().with_context("waiting for the reductions"));
  reductions_in_flight_ = false;
  if (grads_prepared_) return Status::ok();
  ZRT_RETURN_IF_ERROR(reduce_across_groups());
  const zrt_dtype_t gdt = ctx_.options.reduce_dtype;
  const PartitionBuffers& buf = ctx_.buffers;
  if (converts_per_segment()) {
    // Converted a segment at a time, as the step or grad_norm reads it.
  } else if (ctx_.policy.grad_home() == GradHome::kOwnedSlices) {
    const auto& segments = ctx_.layout.segments();
    for (size_t s = 0; s < segments.size(); ++s) {
      convert_reduced_slice(static_cast<int>(s), buf.optimizer_grad + segments[s].shard_offset);
    }
  } else if (!optimizer_reads_reduced()) {
    const char* reduced =
        ctx_.policy.grad_home() == GradHome::kFull ? buf.full_grads : buf.grad_shard;
    ctx_.ops->convert(gdt, reduced, ZRT_F32, buf.optimizer_grad, ctx_.layout.shard_numel());
  }
  grads_prepared_ = true;
  return Status::ok();
}

void GradientPipeline::convert_reduced_slice(int segment, float* out) const {
  const Segment& seg = ctx_.layout.segments()[segment];
  const zrt_dtype_t gdt = ctx_.options.reduce_dtype;
  const PartitionBuffers& buf = ctx_.buffers;
  if (ctx_.policy.grad_home() == GradHome::kOwnedSlices) {
    // The owned slices hold sums over every rank of the world (across groups too).
    const char* owned =
        ctx_.grad_ptr(buf.full_grads,
                      seg.shard_offset * ctx_.size + static_cast<size_t>(ctx_.rank) * seg.slice);
    ctx_.ops->convert(gdt, owned, ZRT_F32, out, seg.slice);
    ctx_.ops->scale(ZRT_F32, out, seg.slice, 1.0 / ctx_.world.size);
    return;
  }
  char* reduced = ctx_.policy.grad_home() == GradHome::kFull ? buf.full_grads : buf.grad_shard;
  ctx_.ops->convert(gdt, ctx_.grad_ptr(reduced, seg.shard_offset), ZRT_F32, out, seg.slice);
}

Status GradientPipeline::segment_optimizer_grad(int segment, const float** grad) {
  if (!grads_prepared_) {
    return Status(ZRT_INTERNAL_ERROR, "segment_optimizer_grad before finish_reductions");
  }
  if (!converts_per_segment()) {
    *grad = optimizer_grad() + ctx_.layout.segments()[segment].shard_offset;
    return Status::ok();
  }
  convert_reduced_slice(segment, ctx_.buffers.optimizer_grad);
  *grad = ctx_.buffers.optimizer_grad;
  return Status::ok();
}

// Hybrid sharding: each group reduced its own ranks' gradients, so the ranks holding the same
// shard (one per group) all-reduce it, which makes it the world's. Once per step, after the
// group's reductions: the sum is linear, so micro-batches accumulated in the group need it once,
// and the shard is contiguous (stages 2/3: one collective), or its slices are (stage 1).
Status GradientPipeline::reduce_across_groups() {
  if (ctx_.replicas == nullptr) return Status::ok();
  Communicator& replicas = *ctx_.replicas;
  Stream& stream = replicas.default_stream();
  const PartitionBuffers& buf = ctx_.buffers;
  CollectiveArgs args;
  args.kind = ZRT_COLL_ALL_REDUCE;
  args.dtype = ctx_.options.reduce_dtype;
  args.purpose = Purpose::kBucket;
  if (ctx_.policy.grad_home() == GradHome::kOwnedSlices) {
    args.op = ZRT_SUM;  // scaled by 1/N with the rest of the slice (finish_reductions)
    const std::vector<Segment>& segments = ctx_.layout.segments();
    for (size_t s = 0; s < segments.size(); ++s) {
      char* owned =
          ctx_.grad_ptr(buf.full_grads, ctx_.segment_start(static_cast<int>(s)) +
                                            static_cast<size_t>(ctx_.rank) * segments[s].slice);
      args.sendbuf = owned;
      args.recvbuf = owned;
      args.count = segments[s].slice;
      args.purpose_id = static_cast<int32_t>(s);
      ZRT_RETURN_IF_ERROR(enqueue_collective(stream, replicas.rank(), replicas.size(), args)
                              .with_context("all-reducing a gradient slice across the groups"));
    }
  } else {
    args.op = ZRT_AVG;  // of the groups' averages: the world's, the groups being equal
    args.sendbuf = buf.grad_shard;
    args.recvbuf = buf.grad_shard;
    args.count = ctx_.layout.shard_numel();
    ZRT_RETURN_IF_ERROR(enqueue_collective(stream, replicas.rank(), replicas.size(), args)
                            .with_context("all-reducing the gradient shard across the groups"));
  }
  return stream.synchronize().with_context("waiting for the all-reduce across the groups");
}

// Offload: segment s's slice of the optimizer's f32 gradient, from where its reduction left it
// (the same conversions finish_reductions makes, element for element, so the values are too),
// on `stream`.
Status GradientPipeline::copy_segment_to_host(int segment, Stream& stream) {
  const Segment& seg = ctx_.layout.segments()[segment];
  const zrt_dtype_t gdt = ctx_.options.reduce_dtype;
  const PartitionBuffers& buf = ctx_.buffers;
  ElementOps* ops = ctx_.ops;
  float* out = buf.optimizer_grad + seg.shard_offset;
  const size_t g = ctx_.g_size;
  std::function<void(size_t, size_t)> work;
  if (ctx_.policy.grad_home() == GradHome::kOwnedSlices) {
    const char* owned = ctx_.grad_ptr(
        buf.full_grads, ctx_.segment_start(segment) + static_cast<size_t>(ctx_.rank) * seg.slice);
    const double scale = 1.0 / ctx_.size;
    work = [ops, gdt, owned, out, g, scale](size_t begin, size_t n) {
      ops->convert(gdt, owned + begin * g, ZRT_F32, out + begin, n);
      ops->scale(ZRT_F32, out + begin, n, scale);
    };
  } else {
    const char* reduced = ctx_.grad_ptr(buf.grad_shard, seg.shard_offset);
    work = [ops, gdt, reduced, out, g](size_t begin, size_t n) {
      ops->convert(gdt, reduced + begin * g, ZRT_F32, out + begin, n);
    };
  }
  return ctx_.run_piecewise(stream, seg.slice, std::move(work),
                            "partition: offload a gradient slice to the host");
}

bool GradientPipeline::optimizer_reads_reduced() const {
  if (ctx_.buffers.optimizer_grad == nullptr) return true;  // the plan made no copy
  return ctx_.plan.offload && !ctx_.on_device && ctx_.options.reduce_dtype == ZRT_F32 &&
         ctx_.policy.grad_home() == GradHome::kShard;
}

std::vector<int> GradientPipeline::offload_order() const {
  // Segments in the order their reductions were enqueued (the order they finish in), then any
  // the last synchronised micro-batch did not reduce (none, unless it reduced nothing).
  std::vector<uint8_t> listed(ctx_.layout.segments().size(), 0);
  std::vector<int> order;
  order.reserve(listed.size());
  for (int s : offload_.reduce_order) {
    if (listed[s]) continue;
    listed[s] = 1;
    order.push_back(s);
  }
  for (size_t s = 0; s < listed.size(); ++s) {
    if (!listed[s]) order.push_back(static_cast<int>(s));
  }
  return order;
}

OffloadCopies GradientPipeline::offload_copies() const {
  if (grads_prepared_) return OffloadCopies::kDone;  // grad_norm made the whole gradient already
  // Host memory is where the optimizer runs: a copy would only cost the pass's bandwidth.
  if (optimizer_reads_reduced()) return OffloadCopies::kInPlace;
  return OffloadCopies::kOnStream;
}

Status GradientPipeline::start_offload_copy(int segment) {
  ScopedBind bound(*ctx_.ops);
  ZRT_RETURN_IF_ERROR(bound.bind(ctx_.streams.offload));
  return enqueue_offload_copy(segment);
}

Status GradientPipeline::enqueue_offload_copy(int segment) {
  Stream& off = *ctx_.streams.offload;
  ZRT_RETURN_IF_ERROR(off.wait_event(*ctx_.streams.segment_reduced[segment]));
  ZRT_RETURN_IF_ERROR(copy_segment_to_host(segment, off));
  // Whoever reads the copy waits for segment_copied (or the offload stream) first.
  return ctx_.streams.segment_copied[segment]->record(off);
}

Status GradientPipeline::start_offload_copies(std::vector<int>* order, OffloadCopies* how) {
  ZRT_RETURN_IF_ERROR(check_complete());
  *order = offload_order();
  *how = offload_copies();
  if (*how != OffloadCopies::kOnStream) return Status::ok();
  ScopedBind bound(*ctx_.ops);
  ZRT_RETURN_IF_ERROR(bound.bind(ctx_.streams.offload));
  for (int s : *order) ZRT_RETURN_IF_ERROR(enqueue_offload_copy(s));
  copies_started();
  return Status::ok();
}

const float* GradientPipeline::optimizer_grad() const {
  const PartitionBuffers& buf = ctx_.buffers;
  if (!optimizer_reads_reduced()) return buf.optimizer_grad;
  return reinterpret_cast<const float*>(
      ctx_.policy.grad_home() == GradHome::kFull ? buf.full_grads : buf.grad_shard);
}

Status GradientPipeline::local_sum_squares(double* sum, bool* nonfinite) {
  if (!converts_per_segment()) {
    ctx_.ops->sum_squares(ZRT_F32, optimizer_grad(), ctx_.layout.shard_numel(), sum, nonfinite);
    return Status::ok();
  }
  *sum = 0;
  *nonfinite = false;
  const auto& segments = ctx_.layout.segments();
  for (size_t s = 0; s < segments.size(); ++s) {
    const float* grad = nullptr;
    ZRT_RETURN_IF_ERROR(segment_optimizer_grad(static_cast<int>(s), &grad));
    double part = 0;
    bool part_nonfinite = false;
    ctx_.ops->sum_squares(ZRT_F32, grad, segments[s].slice, &part, &part_nonfinite);
    *sum += part;
    *nonfinite = *nonfinite || part_nonfinite;
  }
  return Status::ok();
}

Status GradientPipeline::grad_norm(double* norm, bool* has_nonfinite) {
  ZRT_RETURN_IF_ERROR(finish_reductions());
  double sum = 0;
  bool nonfinite = false;
  ZRT_RETURN_IF_ERROR(local_sum_squares(&sum, &nonfinite));
  // One all-reduce carries both figures (the flag as a count of ranks that saw one); stage 0
  // ranks already hold the whole gradient.
  norm_buffer_[0] = sum;
  norm_buffer_[1] = nonfinite ? 1.0 : 0.0;
  if (ctx_.layout.shards() > 1) {
    if (norm == nullptr) norm_buffer_[0] = norm_buffer_[1];
    ZRT_RETURN_IF_ERROR(all_reduce_norm(/*both=*/norm != nullptr && has_nonfinite != nullptr));
    if (norm == nullptr) norm_buffer_[1] = norm_buffer_[0];
  }
  if (norm != nullptr) *norm = std::sqrt(norm_buffer_[0]);
  if (has_nonfinite != nullptr) *has_nonfinite = norm_buffer_[1] > 0 || std::isnan(norm_buffer_[0]);
  return Status::ok();
}

// The norm's internal collective: a sum over the ranks of norm_buffer_ (both figures, or the
// first only).
Status GradientPipeline::all_reduce_norm(bool both) {
  CollectiveArgs args;
  args.kind = ZRT_COLL_ALL_REDUCE;
  args.sendbuf = norm_buffer_;
  args.recvbuf = norm_buffer_;
  args.count = both ? 2 : 1;
  args.dtype = ZRT_F64;
  args.op = ZRT_SUM;
  return ctx_.comm.run_internal(args, "all-reducing the gradient norm");
}

void GradientPipeline::end_step() {
  // Clear the gradients for the next step (the reductions have all finished); the gradient
  // shard is overwritten by the next step's first reduction of each segment instead.
  if (ctx_.buffers.full_grads != nullptr) {
    ctx_.ops->zero(ctx_.buffers.full_grads, ctx_.plan.full_grads * ctx_.g_size);
  }
  std::fill(grad_fresh_.begin(), grad_fresh_.end(), 1);
  reduced_since_step_ = false;
  grads_prepared_ = false;
}

}  // namespace zrt
