#include "zero/partition/step_transaction.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <string>

#include "collectives/collectives.h"
#include "zero/comm/communicator.h"
#include "lib/core/callback_status.h"
#include "engine/engine.h"
#include "zero/partition/gather_window.h"
#include "zero/partition/gradient_pipeline.h"
#include "zero/partition/segment_pieces.h"

namespace zrt {

// " 1 (ZRT_TIMEOUT), 3 (ZRT_REMOTE_ERROR)"; the lowest failing rank's code in *first.
std::string StepTransaction::failed_ranks(const std::vector<int32_t>& codes, zrt_status_t* first) {
  std::string list;
  for (size_t r = 0; r < codes.size(); ++r) {
    if (codes[r] == ZRT_SUCCESS) continue;
    const auto code = static_cast<zrt_status_t>(codes[r]);
    if (list.empty()) *first = code;
    list += fmt::format("{}{} ({})", list.empty() ? " " : ", ", r, status_code_name(code));
  }
  return list;
}

StepTransaction::StepTransaction(const PartitionContext& ctx, GatherWindow& window,
                                 GradientPipeline& grads)
    : ctx_(ctx),
      window_(window),
      grads_(grads),
      backup_(ctx.layout.shard_numel() * (1 + ctx.buffers.state.size()),
              ctx.layout.units().size()) {
  if (ctx.options.offload_optimizer) offload_ = std::make_unique<OffloadPipeline>(ctx);
  if (ctx.plan.per_segment_step) {
    segment_pieces_ = cut_pieces_by_segment(ctx.layout.segments(), ctx.shard.pieces);
  }
}

Status StepTransaction::check_step_ready(bool wait_reductions) {
  const int fetched = window_.first_fetched();
  if (fetched >= 0) {
    return Status::invalid_usage(
        "unit {} is still fetched: release every unit before the "
        "step (its parameters are about to change)",
        fetched);
  }
  ZRT_RETURN_IF_ERROR(wait_reductions ? grads_.finish_reductions() : grads_.check_complete());
  ZRT_RETURN_IF_ERROR(settle_backup().with_context("waiting for the step backup's copy"));
  // The optimizer rewrites master, and publishing the parameters: no conversion of the last
  // step may still be reading master, no gather reading the parameters.
  return ctx_.streams.ag->synchronize().with_context(
      "waiting for the last step's parameter conversions and gathers");
}

Status StepTransaction::exchange_codes(zrt_status_t mine, const char* what,
                                       std::vector<int32_t>* codes) {
  // A callback's stray negative value must still read as a failure under MAX.
  const int32_t own =
      mine < 0 ? static_cast<int32_t>(ZRT_INTERNAL_ERROR) : static_cast<int32_t>(mine);
  return exchange_values(own, what, codes);
}

Status StepTransaction::exchange_values(int32_t own, const char* what,
                                        std::vector<int32_t>* codes) {
  codes->assign(static_cast<size_t>(ctx_.world.size), 0);
  (*codes)[static_cast<size_t>(ctx_.world.rank)] = own;
  if (ctx_.world.size == 1) return Status::ok();
  // One all-reduce (max) of every rank's slot: each rank learns every code, and the vote is
  // counted as internal traffic, apart from the ZeRO figures. Over the world, not the shard
  // group: the replica groups must roll back or commit together too.
  CollectiveArgs vote;
  vote.kind = ZRT_COLL_ALL_REDUCE;
  vote.sendbuf = codes->data();
  vote.recvbuf = codes->data();
  vote.count = codes->size();
  vote.dtype = ZRT_I32;
  vote.op = ZRT_MAX;
  return ctx_.world.comm->run_internal(vote, what);
}

Status StepTransaction::agree(const Status& own, int32_t value, const char* what,
                              std::vector<int32_t>* values) {
  // Each rank's code and value in slots of their own: one all-reduce (max) carries both.
  const size_t size = static_cast<size_t>(ctx_.world.size);
  const size_t rank = static_cast<size_t>(ctx_.world.rank);
  std::vector<int32_t> slots(2 * size, std::numeric_limits<int32_t>::min());
  slots[rank] = own.code() < 0 ? static_cast<int32_t>(ZRT_INTERNAL_ERROR) : own.code();
  slots[size + rank] = value;
  Status vote;
  if (size > 1) {
    CollectiveArgs args;
    args.kind = ZRT_COLL_ALL_REDUCE;
    args.sendbuf = slots.data();
    args.recvbuf = slots.data();
    args.count = slots.size();
    args.dtype = ZRT_I32;
    args.op = ZRT_MAX;
    vote = ctx_.world.comm->run_internal(args, what);
  }
  values->assign(slots.begin() + static_cast<std::ptrdiff_t>(size), slots.end());
  if (!vote.is_ok()) values->assign(size, -1);
  if (!own.is_ok()) return own;
  if (!vote.is_ok()) return vote;
  const std::vector<int32_t> codes(slots.begin(),
                                   slots.begin() + static_cast<std::ptrdiff_t>(size));
  zrt_status_t first = ZRT_SUCCESS;
  const std::string failed = failed_ranks(codes, &first);
  if (failed.empty()) return Status::ok();
  return Status::error(ZRT_REMOTE_ERROR, "{}: rank(s){} failed", what, failed);
}

void StepTransaction::optimizer_state_replaced() {
  backup_ = BackupCursor(ctx_.layout.shard_numel() * (1 + ctx_.buffers.state.size()),
                         ctx_.layout.units().size());
  if (offload_ != nullptr) offload_ = std::make_unique<OffloadPipeline>(ctx_);
}

Status StepTransaction::exchange_messages(const Status& mine, const std::vector<int32_t>& codes,
                                          std::string* details) {
  // Fixed slots, so one all-gather carries them; only on the failure path, never in a step
  // that succeeds.
  constexpr size_t kSlot = 1024;
  const size_t size = static_cast<size_t>(ctx_.world.size);
  std::vector<char> slots(kSlot * size, 0);
  char* own = slots.data() + kSlot * static_cast<size_t>(ctx_.world.rank);
  const std::string& text = mine.message();
  std::copy_n(text.data(), std::min(text.size(), kSlot - 1), own);
  if (size > 1) {
    std::vector<char> mine_copy(own, own + kSlot);
    CollectiveArgs gather;
    gather.kind = ZRT_COLL_ALL_GATHER;
    gather.sendbuf = mine_copy.data();
    gather.recvbuf = slots.data();
    gather.count = kSlot;
    gather.dtype = ZRT_U8;
    ZRT_RETURN_IF_ERROR(
        ctx_.world.comm->run_internal(gather, "step: sharing the failing ranks' error messages"));
  }
  for (size_t r = 0; r < size; ++r) {
    if (codes[r] == ZRT_SUCCESS) continue;
    const char* slot = slots.data() + kSlot * r;
    *details += fmt::format("; rank {}: {}", r, std::string(slot, strnlen(slot, kSlot)));
  }
  return Status::ok();
}

Status StepTransaction::copy_backup_range(size_t begin, size_t end, Stream* stream) {
  const size_t count = ctx_.layout.shard_numel();
  const PartitionBuffers& buf = ctx_.buffers;
  ElementOps* ops = ctx_.master_ops;
  for (size_t array = begin / count; array * count < end; ++array) {
    float* to = array == 0 ? buf.backup_master : buf.backup_state[array - 1];
    const float* from = array == 0 ? buf.master : buf.state[array - 1];
    const size_t first = std::max(begin, array * count) - array * count;
    const size_t last = std::min(end, (array + 1) * count) - array * count;
    if (stream == nullptr) {
      ops->copy(to + first, from + first, (last - first) * sizeof(float));
      continue;
    }
    ZRT_RETURN_IF_ERROR(ctx_.run_piecewise(
        *stream, last - first,
        [ops, to = to + first, from = from + first](size_t at, size_t n) {
          ops->copy(to + at, from + at, n * sizeof(float));
        },
        "partition: step backup"));
  }
  return Status::ok();
}

void StepTransaction::take_backup() {
  if (!full_backup() || backup_.current()) return;
  static_cast<void>(copy_backup_range(backup_.cursor(), backup_.total(), nullptr));  // cannot fail
  backup_.complete();
}

void StepTransaction::on_fetch() {
  if (backup_.current()) return;
  if (!full_backup()) return;
  const size_t end = backup_.share_end();
  backup_in_flight_ = true;  // even a partial enqueue must be waited for before master changes
  // A refused enqueue (a failed stream) leaves the cursor: the step, which reports that
  // stream's error first, would copy the rest itself.
  if (!copy_backup_range(backup_.cursor(), end, ctx_.streams.ag).is_ok()) return;
  backup_.advance_to(end);
}

Status StepTransaction::settle_backup() {
  if (!backup_in_flight_) return Status::ok();
  const Status status = ctx_.streams.ag->synchronize();
  if (!status.is_ok()) {
    // Its copies may not have run: the backup is out of date. Still in flight until a wait
    // succeeds, since the copies might yet run.
    backup_.invalidate();
    return status;
  }
  backup_in_flight_ = false;
  return Status::ok();
}

Status StepTransaction::prepare_master_write() {
  // Parameters must not change under an all-gather that is reading them, nor master under
  // the step backup's copy.
  ZRT_RETURN_IF_ERROR(ctx_.streams.ag->synchronize());
  ZRT_RETURN_IF_ERROR(settle_backup());
  backup_.invalidate();
  return Status::ok();
}

void StepTransaction::restore_backup() {
  const PartitionBuffers& buf = ctx_.buffers;
  const size_t bytes = ctx_.layout.shard_numel() * sizeof(float);
  if (!full_backup() || bytes == 0) return;
  ctx_.master_ops->copy(buf.master, buf.backup_master, bytes);
  for (size_t i = 0; i < buf.state.size(); ++i)
    ctx_.master_ops->copy(buf.state[i], buf.backup_state[i], bytes);
  backup_.complete();
}

void StepTransaction::fill_param_spans() {
  const PartitionBuffers& buf = ctx_.buffers;
  param_spans_.clear();
  switch (ctx_.policy.param_home()) {
    case ParamHome::kReplicated:
      param_spans_.push_back({0, ctx_.layout.shard_numel(), buf.full_params});
      return;
    case ParamHome::kShard:
      param_spans_.push_back({0, ctx_.layout.shard_numel(), buf.param_shard});
      return;
    case ParamHome::kOwnedSlices:
      break;
  }
  // The owned slice of every segment, as publish_params converts it.
  const auto& segments = ctx_.layout.segments();
  for (int s = 0; s < static_cast<int>(segments.size()); ++s) {
    const Segment& seg = segments[s];
    char* owned = ctx_.param_ptr(
        buf.full_params, ctx_.segment_start(s) + static_cast<size_t>(ctx_.rank) * seg.slice);
    param_spans_.push_back({seg.shard_offset, seg.slice, owned});
  }
}

Status StepTransaction::publish_params(bool converted) {
  // Device ops convert on the all-gather stream, ahead of the gathers they feed.
  ElementOps* ops = ctx_.ops;
  ScopedBind bound(*ops);
  Stream& ag = *ctx_.streams.ag;
  ZRT_RETURN_IF_ERROR(bound.bind(&ag));
  const zrt_dtype_t pdt = ctx_.options.param_dtype;
  const PartitionBuffers& buf = ctx_.buffers;
  const auto& segments = ctx_.layout.segments();
  switch (ctx_.policy.param_home()) {
    case ParamHome::kReplicated:
      if (!converted) {
        ops->convert(ZRT_F32, buf.master, pdt, buf.full_params, ctx_.layout.shard_numel());
      }
      return Status::ok();
    case ParamHome::kShard:
      return window_.publish(converted);
    case ParamHome::kOwnedSlices:
      break;
  }
  // Last segments hold the first units (buckets are in backward order): publish them first.
  for (int s = static_cast<int>(segments.size()) - 1; s >= 0; --s) {
    const Segment& seg = segments[s];
    char* full = ctx_.param_ptr(buf.full_params, ctx_.segment_start(s));
    char* owned = ctx_.param_ptr(full, static_cast<size_t>(ctx_.rank) * seg.slice);
    const float* master = buf.master + seg.shard_offset;
    if (ctx_.size == 1) {
      if (!converted) ops->convert(ZRT_F32, master, pdt, owned, seg.slice);
      continue;
    }
    // On the stream, ahead of the gather that sends it (offload: converted there already).
    const size_t p_size = ctx_.p_size;
    if (!converted) {
      ZRT_RETURN_IF_ERROR(ctx_.run_piecewise(
          ag, seg.slice,
          [ops, master, pdt, owned, p_size](size_t begin, size_t count) {
            ops->convert(ZRT_F32, master + begin, pdt, owned + begin * p_size, count);
          },
          "partition: convert master to the owned parameter slice"));
    }
    CollectiveArgs args;
    args.kind = ZRT_COLL_ALL_GATHER;
    args.sendbuf = owned;
    args.recvbuf = full;
    args.count = seg.slice;
    args.dtype = pdt;
    args.purpose = Purpose::kBucket;
    args.purpose_id = s;
    ZRT_RETURN_IF_ERROR(enqueue_collective(ag, ctx_.rank, ctx_.size, args)
                            .with_context(fmt::format("gathering bucket {}", s)));
    ZRT_RETURN_IF_ERROR(ctx_.streams.segment_events[s]->record(ag));
  }
  return Status::ok();
}

// The conversion is deterministic, so the parameters come back as they were before the step;
// peers' slices are theirs to restore.
void StepTransaction::rederive_params() {
  // As in publish_params: device ops convert on the all-gather stream, after the gathers.
  ScopedBind bound(*ctx_.ops);
  static_cast<void>(bound.bind(ctx_.streams.ag));  // a failure is kept and reported by destroy
  const zrt_dtype_t pdt = ctx_.options.param_dtype;
  const PartitionBuffers& buf = ctx_.buffers;
  switch (ctx_.policy.param_home()) {
    case ParamHome::kReplicated:
      ctx_.ops->convert(ZRT_F32, buf.master, pdt, buf.full_params, ctx_.layout.shard_numel());
      break;
    case ParamHome::kOwnedSlices: {
      const auto& segments = ctx_.layout.segments();
      for (int s = 0; s < static_cast<int>(segments.size()); ++s) {
        const Segment& seg = segments[s];
        char* owned = ctx_.param_ptr(
            buf.full_params, ctx_.segment_start(s) + static_cast<size_t>(ctx_.rank) * seg.slice);
        ctx_.ops->convert(ZRT_F32, buf.master + seg.shard_offset, pdt, owned, seg.slice);
      }
      break;
    }
    case ParamHome::kShard:
      window_.rederive();
      break;
  }
}

const char* StepTransaction::undo_note(bool backed_up) {
  return backed_up ? "master and optimizer state were restored"
                   : "step_backup is 0: master and optimizer state are as the "
                     "callbacks left them, reload a checkpoint";
}

std::string StepTransaction::failure_details(const Status& own, const std::vector<int32_t>& codes) {
  std::string details;
  const Status shared = exchange_messages(own, codes, &details);
  if (!shared.is_ok()) {
    details = fmt::format(" (their messages could not be shared: {}{})", shared.message(),
                          own.is_ok() ? "" : "; this rank: " + own.message());
  }
  return details;
}

Status StepTransaction::vote_ready(const Status& ready, int64_t next) {
  std::vector<int32_t> codes;
  const Status vote =
      exchange_codes(ready.code(), "step: agreeing that every rank's reductions completed", &codes);
  if (!ready.is_ok()) return ready;
  if (!vote.is_ok()) {
    return vote.with_context(
        fmt::format("step {} (no optimizer ran here; master and state are unchanged)", next));
  }
  zrt_status_t first = ZRT_SUCCESS;
  const std::string failed = failed_ranks(codes, &first);
  if (!failed.empty()) {
    return Status::error(ZRT_REMOTE_ERROR,
                         "step {}: rank(s){} failed before the optimizer (reductions or usage); "
                         "no rank ran its optimizer, master and state are unchanged",
                         next, failed);
  }
  return Status::ok();
}

Status StepTransaction::run_optimizer(zrt_optimizer_fn optimizer, void* user_data, int64_t next,
                                      int* params_written) {
  const PartitionBuffers& buf = ctx_.buffers;
  zrt_optimizer_args_t args{};
  args.size = sizeof(args);
  args.master = buf.master;
  args.grad = grads_.optimizer_grad();
  args.state = buf.state.data();
  args.num_state = static_cast<int>(buf.state.size());
  args.count = ctx_.layout.shard_numel();
  args.pieces = ctx_.shard.pieces.data();
  args.num_pieces = ctx_.shard.pieces.size();
  args.step = next;
  args.mem_kind = ctx_.on_device ? ZRT_MEM_CUDA : ZRT_MEM_HOST;
  args.param_dtype = ctx_.options.param_dtype;
  fill_param_spans();
  args.param_spans = param_spans_.data();
  args.num_param_spans = param_spans_.size();
  args.params_written = params_written;
  take_backup();  // what the fetches' shares did not copy
  clear_callback_message();
  const Status own = callback_result(optimizer(&args, user_data), "the optimizer callback");
  backup_.invalidate();
  return own;
}

Status StepTransaction::vote_optimized(const Status& own, bool params_written, int64_t next) {
  const bool backed_up = full_backup();
  const char* undo = undo_note(backed_up);
  // Rolled back after the optimizer wrote the parameters: they follow the restored master.
  auto roll_back = [&] {
    restore_backup();
    if (backed_up && params_written) rederive_params();
  };
  std::vector<int32_t> codes;
  const Status voted =
      exchange_codes(own.code(), "step: agreeing that every rank's optimizer succeeded", &codes);
  if (!voted.is_ok()) {
    roll_back();
    return voted.with_context(
        fmt::format("step {} (this rank's optimizer {}; {} on this rank)", next,
                    own.is_ok() ? "succeeded" : "failed: " + own.message(), undo));
  }
  zrt_status_t first = ZRT_SUCCESS;
  const std::string failed = failed_ranks(codes, &first);
  if (!failed.empty()) {
    roll_back();
    const std::string details = failure_details(own, codes);
    return Status::error(first,
                         "step {}: the optimizer callback failed on rank(s){}; {} on every "
                         "rank, parameters unchanged{}",
                         next, failed, undo, details);
  }
  return Status::ok();
}

Status StepTransaction::step(const Callback& callback) {
  if (offload_ != nullptr) {
    ZRT_RETURN_IF_ERROR(callback.ready);
    return step_offloaded(callback.fn, callback.user_data);
  }
  if (ctx_.plan.per_segment_step) return step_segmented(callback);
  const zrt_optimizer_fn optimizer = callback.fn;
  void* user_data = callback.user_data;
  const int64_t next = step_ + 1;
  // Phase 1: prepare, then vote. Nothing has been written yet, whatever fails.
  const Status ready = callback.ready.is_ok() ? check_step_ready() : callback.ready;
  ZRT_RETURN_IF_ERROR(vote_ready(ready, next));
  // Phase 2: optimize, then vote.
  int params_written = 0;
  const Status own = run_optimizer(optimizer, user_data, next, &params_written);
  const bool converted = own.code() == ZRT_SUCCESS && params_written == 1;
  ZRT_RETURN_IF_ERROR(vote_optimized(own, params_written != 0, next));
  // Phase 3: publish. Every rank's optimizer succeeded.
  return commit(next, converted);
}

Status StepTransaction::commit(int64_t next, bool optimizer_wrote_params) {
  const bool backed_up = full_backup();
  const Status published = publish_params(optimizer_wrote_params || owned_converted_);
  owned_converted_ = false;
  if (!published.is_ok()) {
    if (!backed_up) {
      return published.with_context(fmt::format(
          "step {}: publishing the updated parameters (no full step backup: master and state "
          "hold the update, reload a checkpoint)",
          next));
    }
    // Conversions and gathers enqueued before the failure may still read master and the owned
    // slices being restored and re-derived.
    const Status drained = ctx_.streams.ag->synchronize();
    restore_backup();
    rederive_params();
    return published.with_context(fmt::format(
        "step {}: publishing the updated parameters failed; master, state and this rank's "
        "parameters were restored{}",
        next, drained.is_ok() ? "" : " (the gather stream reported: " + drained.message() + ")"));
  }
  ++step_;
  grads_.end_step();
  window_.end_step();
  return Status::ok();
}

Status StepTransaction::restore_checkpoint(const float* master,
                                           const std::vector<const float*>& states,
                                           const void* frozen, zrt_dtype_t frozen_dtype,
                                           int64_t step) {
  ZRT_RETURN_IF_ERROR(prepare_master_write());
  const PartitionBuffers& buf = ctx_.buffers;
  const size_t count = ctx_.layout.shard_numel();
  ctx_.ops->copy(buf.master, master, count * sizeof(float));
  for (size_t i = 0; i < buf.state.size(); ++i) {
    ctx_.ops->copy(buf.state[i], states[i], count * sizeof(float));
  }
  if (buf.frozen != nullptr && ctx_.layout.frozen_numel() > 0) {
    ctx_.ops->convert(frozen_dtype, frozen, ctx_.options.param_dtype, buf.frozen,
                      ctx_.layout.frozen_numel());
  }
  step_ = step;
  // Units gathered ahead hold the old parameters: forget them, and start the order over.
  window_.rewind();
  // Publish master as a step does.
  return publish_params(false);
}

}  // namespace zrt
