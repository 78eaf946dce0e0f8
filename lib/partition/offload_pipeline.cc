#include "lib/partition/offload_pipeline.h"

#include "lib/core/callback_status.h"

#include <algorithm>

#include "lib/engine/engine.h"
#include "lib/partition/step_trace.h"

namespace zrt {

OffloadPipeline::OffloadPipeline(const PartitionContext& ctx)
    : ctx_(ctx), pieces_(ctx.layout.segments().size()), state_(ctx.buffers.state.size(), nullptr) {
  // The shard's pieces cut at segment boundaries (a parameter may straddle two segments), each
  // rebased on its segment's slice: what args.pieces means when args.master is that slice.
  const auto& segments = ctx.layout.segments();
  for (const zrt_shard_piece_t& piece : ctx.shard.pieces) {
    for (size_t s = 0; s < segments.size(); ++s) {
      const size_t begin = segments[s].shard_offset;
      const size_t end = begin + segments[s].slice;
      const size_t lo = std::max(begin, piece.shard_offset);
      const size_t hi = std::min(end, piece.shard_offset + piece.count);
      if (lo >= hi) continue;
      zrt_shard_piece_t cut = piece;
      cut.param_offset = piece.param_offset + (lo - piece.shard_offset);
      cut.shard_offset = lo - begin;
      cut.count = hi - lo;
      pieces_[s].push_back(cut);
    }
  }
}

Status OffloadPipeline::convert_back_segment(int segment) {
  const Segment& seg = ctx_.layout.segments()[segment];
  char* owned =
      ctx_.param_ptr(ctx_.buffers.full_params,
                     ctx_.segment_start(segment) + static_cast<size_t>(ctx_.rank) * seg.slice);
  const float* master = ctx_.buffers.master + seg.shard_offset;
  ElementOps* ops = ctx_.ops;
  const zrt_dtype_t pdt = ctx_.options.param_dtype;
  const size_t p_size = ctx_.p_size;
  if (ctx_.size == 1) {
    // No gather follows, so no event would tell fetch when the conversion ran: convert now, as
    // publishing does on one rank.
    ops->convert(ZRT_F32, master, pdt, owned, seg.slice);
    return Status::ok();
  }
  return ctx_.run_piecewise(
      *ctx_.streams.ag, seg.slice,
      [ops, master, pdt, owned, p_size](size_t begin, size_t count) {
        ops->convert(ZRT_F32, master + begin, pdt, owned + begin * p_size, count);
      },
      "partition: offloaded master slice back into the owned parameters");
}

Status OffloadPipeline::run(GradientPipeline& grads, const std::vector<int>& order,
                            OffloadCopies how, bool convert_back, zrt_optimizer_fn optimizer,
                            void* user_data, int64_t step, zrt_status_t* code, bool* optimized) {
  *code = ZRT_SUCCESS;
  *optimized = false;
  const PartitionBuffers& buf = ctx_.buffers;
  const auto& segments = ctx_.layout.segments();
  // The conversions back go on the all-gather stream, ahead of the gathers that will publish
  // them, and not behind the later segments' gradient copies on the offload stream.
  ScopedBind bound(*ctx_.ops);
  ZRT_RETURN_IF_ERROR(bound.bind(ctx_.streams.ag));
  for (int s : order) {
    const Segment& seg = segments[s];
    if (how == OffloadCopies::kOnStream) {
      ZRT_RETURN_IF_ERROR(traced_step_part(ctx_.comm, kTraceOffloadWait, s, [&] {
        return ctx_.streams.segment_copied[s]->synchronize().with_context(
            fmt::format("waiting for segment {}'s reduction and its copy to the host", s));
      }));
    } else if (how == OffloadCopies::kByCaller) {
      ZRT_RETURN_IF_ERROR(traced_step_part(ctx_.comm, kTraceOffloadWait, s, [&] {
        return ctx_.streams.segment_reduced[s]->synchronize().with_context(
            fmt::format("waiting for segment {}'s reduction", s));
      }));
      ZRT_RETURN_IF_ERROR(traced_step_part(ctx_.comm, kTraceOffloadCopy, s,
                                           [&] { return grads.copy_segment_to_host(s); }));
    }
    for (size_t i = 0; i < state_.size(); ++i) state_[i] = buf.state[i] + seg.shard_offset;
    zrt_optimizer_args_t args{};
    args.size = sizeof(args);
    args.master = buf.master + seg.shard_offset;
    args.grad = buf.optimizer_grad + seg.shard_offset;
    args.state = state_.data();
    args.num_state = static_cast<int>(state_.size());
    args.count = seg.slice;
    args.pieces = pieces_[s].data();
    args.num_pieces = pieces_[s].size();
    args.step = step;
    // Offloaded master and state are host memory whatever the parameters are; the parameter
    // copy is the pipeline's (no param_spans), so a fused optimizer writes master and state only.
    args.mem_kind = ZRT_MEM_HOST;
    args.param_dtype = ctx_.options.param_dtype;
    *optimized = true;
    clear_callback_message();
    Status own;
    static_cast<void>(traced_step_part(ctx_.comm, kTraceOffloadOptimizer, s, [&] {
      own = callback_result(optimizer(&args, user_data), "the optimizer callback");
      return own;
    }));
    *code = own.code();
    if (!own.is_ok()) return own.with_context(fmt::format("segment {}", s));
    if (convert_back) {
      ZRT_RETURN_IF_ERROR(traced_step_part(ctx_.comm, kTraceOffloadConvert, s,
                                           [&] { return convert_back_segment(s); }));
    }
  }
  if (how == OffloadCopies::kByCaller) grads.host_copy_complete();
  return Status::ok();
}

}  // namespace zrt
