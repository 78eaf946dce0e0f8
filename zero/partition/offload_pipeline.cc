#include "zero/partition/offload_pipeline.h"

#include "lib/core/callback_status.h"

#include <algorithm>

#include "engine/engine.h"
#include "zero/partition/segment_pieces.h"
#include "zero/partition/step_trace.h"

namespace zrt {

OffloadPipeline::OffloadPipeline(const PartitionContext& ctx)
    : ctx_(ctx),
      pieces_(cut_pieces_by_segment(ctx.layout.segments(), ctx.shard.pieces)),
      state_(ctx.buffers.state.size(), nullptr) {}

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
                            zrt_optimizer_fn optimizer, void* user_data, int64_t step, Run* run) {
  run->code = ZRT_SUCCESS;
  run->optimized = false;
  run->params_written = 0;
  // The conversions back go on the all-gather stream, ahead of the gathers that will publish
  // them, and not behind the later segments' gradient copies on the offload stream.
  ScopedBind bound(*ctx_.ops);
  ZRT_RETURN_IF_ERROR(bound.bind(ctx_.streams.ag));
  for (int s : order) {
    ZRT_RETURN_IF_ERROR(run_bound_segment(grads, s, optimizer, user_data, step, run));
  }
  return Status::ok();
}

Status OffloadPipeline::run_segment(GradientPipeline& grads, int s, zrt_optimizer_fn optimizer,
                                    void* user_data, int64_t step, Run* run) {
  ScopedBind bound(*ctx_.ops);
  ZRT_RETURN_IF_ERROR(bound.bind(ctx_.streams.ag));
  return run_bound_segment(grads, s, optimizer, user_data, step, run);
}

Status OffloadPipeline::run_bound_segment(GradientPipeline& grads, int s,
                                          zrt_optimizer_fn optimizer, void* user_data, int64_t step,
                                          Run* run) {
  const Segment& seg = ctx_.layout.segments()[s];
  if (run->how == OffloadCopies::kOnStream) {
    ZRT_RETURN_IF_ERROR(traced_step_part(ctx_.comm, kTraceOffloadWait, s, [&] {
      return ctx_.streams.segment_copied[s]->synchronize().with_context(
          fmt::format("waiting for segment {}'s reduction and its copy to the host", s));
    }));
  } else if (run->how == OffloadCopies::kInPlace) {
    ZRT_RETURN_IF_ERROR(traced_step_part(ctx_.comm, kTraceOffloadWait, s, [&] {
      return ctx_.streams.segment_reduced[s]->synchronize().with_context(
          fmt::format("waiting for segment {}'s reduction", s));
    }));
  }
  // Offloaded master and state are host memory whatever the parameters are.
  zrt_optimizer_args_t args =
      segment_optimizer_args(ctx_, s, pieces_[s], grads.optimizer_grad() + seg.shard_offset, step,
                             ZRT_MEM_HOST, state_.data());
  const zrt_param_span_t span{0, seg.slice, ctx_.segment_params(s)};
  int params_written = 0;
  if (run->offer_params) {
    args.param_spans = &span;
    args.num_param_spans = 1;
    args.params_written = &params_written;
  }
  run->optimized = true;
  clear_callback_message();
  Status own;
  static_cast<void>(traced_step_part(ctx_.comm, kTraceOffloadOptimizer, s, [&] {
    own = callback_result(optimizer(&args, user_data), "the optimizer callback");
    return own;
  }));
  run->code = own.code();
  if (!own.is_ok()) return own.with_context(fmt::format("segment {}", s));
  if (params_written == 1) {
    ++run->params_written;
  } else if (run->convert_back) {
    ZRT_RETURN_IF_ERROR(traced_step_part(ctx_.comm, kTraceOffloadConvert, s,
                                         [&] { return convert_back_segment(s); }));
  }
  return Status::ok();
}

}  // namespace zrt
