// The optimizer step and the cross-shard gradient helpers.
//
// step: wait for every reduction, hand the f32 shard (master, gradient, state, piece map) to
// the framework's optimizer once, then publish the new parameters: stage 0 converts the whole
// master into the parameters; stages 1/2 convert the owned slice of every segment in place in
// the full parameter buffer and all-gather each segment in place on the all-gather stream,
// first units first, each with an event that fetch waits on (so the next forward starts as soon
// as its first unit is back); stage 3 converts the master into the parameter shard and
// re-gathers the persistent segment. Finally the gradients are cleared for the next step.
#include <cmath>

#include "collectives/collectives.h"
#include "lib/comm/communicator.h"
#include "lib/core/dtype.h"
#include "lib/engine/engine.h"
#include "lib/partition/partition_manager.h"

namespace zrt {

Status PartitionManager::grad_norm(double* norm, bool* has_nonfinite) {
  ZRT_RETURN_IF_ERROR(check_finalized("grad_norm"));
  if (norm == nullptr && has_nonfinite == nullptr) {
    return Status::invalid_argument("norm and has_nonfinite are both NULL");
  }
  ZRT_RETURN_IF_ERROR(finish_reductions());
  const float* grad =
      optimizer_grad_ != nullptr
          ? optimizer_grad_
          : reinterpret_cast<const float*>(options_.stage == 0 ? full_grads_ : grad_shard_);
  double sum = 0;
  bool nonfinite = false;
  ops_->sum_squares(ZRT_F32, grad, layout_.shard_numel(), &sum, &nonfinite);
  // One all-reduce carries both figures (the flag as a count of ranks that saw one); stage 0
  // ranks already hold the whole gradient.
  norm_buffer_[0] = sum;
  norm_buffer_[1] = nonfinite ? 1.0 : 0.0;
  if (layout_.shards() > 1) {
    CollectiveArgs args;
    args.kind = ZRT_COLL_ALL_REDUCE;
    args.sendbuf = norm_buffer_;
    args.recvbuf = norm_buffer_;
    args.count = (norm != nullptr && has_nonfinite != nullptr) ? 2 : 1;
    args.dtype = ZRT_F64;
    args.op = ZRT_SUM;
    args.purpose = Purpose::kInternal;
    if (norm == nullptr) norm_buffer_[0] = norm_buffer_[1];
    Stream& stream = comm_.default_stream();
    ZRT_RETURN_IF_ERROR(enqueue_collective(stream, rank_, size_, args));
    ZRT_RETURN_IF_ERROR(stream.synchronize().with_context("all-reducing the gradient norm"));
    if (norm == nullptr) norm_buffer_[1] = norm_buffer_[0];
  }
  if (norm != nullptr) *norm = std::sqrt(norm_buffer_[0]);
  if (has_nonfinite != nullptr) *has_nonfinite = norm_buffer_[1] > 0 || std::isnan(norm_buffer_[0]);
  return Status::ok();
}

Status PartitionManager::step(zrt_optimizer_fn optimizer, void* user_data) {
  ZRT_RETURN_IF_ERROR(check_finalized("step"));
  if (optimizer == nullptr) return Status::invalid_argument("optimizer is NULL");
  for (size_t u = 0; u < fetched_.size(); ++u) {
    if (fetched_[u]) {
      return Status::invalid_usage(
          "unit {} is still fetched: release every unit before the "
          "step (its parameters are about to change)",
          u);
    }
  }
  ZRT_RETURN_IF_ERROR(finish_reductions());
  const size_t count = layout_.shard_numel();
  zrt_optimizer_args_t args{};
  args.size = sizeof(args);
  args.master = master_;
  args.grad = optimizer_grad_ != nullptr
                  ? optimizer_grad_
                  : reinterpret_cast<const float*>(options_.stage == 0 ? full_grads_ : grad_shard_);
  args.state = state_.data();
  args.num_state = static_cast<int>(state_.size());
  args.count = count;
  args.pieces = pieces_.data();
  args.num_pieces = pieces_.size();
  args.step = step_ + 1;
  const zrt_status_t code = optimizer(&args, user_data);
  if (code != ZRT_SUCCESS) {
    return Status(code, fmt::format("the optimizer callback failed with {} on step {}",
                                    zrt_status_string(code), args.step));
  }
  ++step_;

  // Device ops convert on the all-gather stream, ahead of the gathers they feed.
  ScopedBind bound(*ops_);
  ZRT_RETURN_IF_ERROR(bound.bind(ag_stream_));
  const zrt_dtype_t pdt = options_.param_dtype;
  const auto& segments = layout_.segments();
  if (options_.stage == 0) {
    ops_->convert(ZRT_F32, master_, pdt, full_params_, count);
  } else if (options_.stage <= 2) {
    // Last segments hold the first units (buckets are in backward order): publish them first.
    for (int s = static_cast<int>(segments.size()) - 1; s >= 0; --s) {
      const Segment& seg = segments[s];
      char* full = param_ptr(full_params_, segment_start(s));
      char* owned = param_ptr(full, static_cast<size_t>(rank_) * seg.slice);
      ops_->convert(ZRT_F32, master_ + seg.shard_offset, pdt, owned, seg.slice);
      if (size_ > 1) {
        CollectiveArgs ag;
        ag.kind = ZRT_COLL_ALL_GATHER;
        ag.sendbuf = owned;
        ag.recvbuf = full;
        ag.count = seg.slice;
        ag.dtype = pdt;
        ag.purpose = Purpose::kBucket;
        ag.purpose_id = s;
        ZRT_RETURN_IF_ERROR(enqueue_collective(*ag_stream_, rank_, size_, ag)
                                .with_context(fmt::format("gathering bucket {}", s)));
        ZRT_RETURN_IF_ERROR(segment_events_[s]->record(*ag_stream_));
      }
    }
  } else {
    // No gather of this rank's shard may be reading it while it changes.
    ZRT_RETURN_IF_ERROR(ag_stream_->synchronize());
    ops_->convert(ZRT_F32, master_, pdt, param_shard_, count);
    const int p = layout_.persistent_segment();
    if (p >= 0) {
      const Segment& seg = segments[p];
      CollectiveArgs ag;
      ag.kind = ZRT_COLL_ALL_GATHER;
      ag.sendbuf = param_ptr(param_shard_, seg.shard_offset);
      ag.recvbuf = full_params_;
      ag.count = seg.slice;
      ag.dtype = pdt;
      ag.purpose = Purpose::kUnit;
      ag.purpose_id = -1;
      ZRT_RETURN_IF_ERROR(enqueue_collective(*ag_stream_, rank_, size_, ag)
                              .with_context("gathering the persistent parameters"));
      ZRT_RETURN_IF_ERROR(persistent_event_->record(*ag_stream_));
    }
  }

  // Clear the gradients for the next step (the reductions have all finished).
  if (full_grads_ != nullptr) ops_->zero(full_grads_, plan_.full_grads * g_size_);
  if (grad_shard_ != nullptr) ops_->zero(grad_shard_, plan_.grad_shard * g_size_);
  reduced_since_step_ = false;
  grads_prepared_ = false;
  if (recording_) {
    recording_ = false;
    recorded_ = !order_.empty();
    stats_.order_recorded = recorded_;
  }
  order_pos_ = 0;
  last_fetched_ = -1;
  direction_ = 1;
  return Status::ok();
}

}  // namespace zrt
