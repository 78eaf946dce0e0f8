// The optimizer step and the cross-shard gradient helpers.
//
// step: wait for every reduction, hand the f32 shard (master, gradient, state, piece map) to
// the framework's optimizer once, then publish the new parameters and return without waiting
// for them: stage 0 converts the whole master into the parameters; stages 1/2 enqueue, per
// segment on the all-gather stream, the conversion of the owned slice (a host function on the
// progress thread) and the in-place all-gather, first units first, each with an event that
// fetch waits on (so the next forward starts as soon as its first unit is back, and the
// conversions run while it computes); stage 3 marks the parameter shard stale (each unit's
// slice is converted just ahead of its next gather, partition_fetch.cc) and re-gathers the
// persistent segment. The gradient shard is not cleared: the next step's first reductions
// overwrite it (partition_grads.cc).
//
// The step backup (step_backup = 1) copies master and state before the optimizer. They do not
// change between steps, so the copy runs while the framework computes: every fetch after master
// or state changed enqueues on the all-gather stream the next 1/units of it (advance_backup),
// behind the gathers that fetch queued, as piecewise tasks so the progress thread serves the
// other streams between pieces; the step finds it done when it has waited for the streams and
// copies what no fetch enqueued itself. Enqueued whole at the first fetch, it would delay every
// later gather by its whole length (stage 3: the unit after the prefetched ones waited for it);
// in shares, each gather waits for at most one share. load_param and restore_checkpoint, which
// rewrite master, wait for copies in flight and mark the backup out of date.
//
// All or nothing. A step that fails must leave every rank where it was before the call, so the
// framework can checkpoint or retry; a rank that updated while a peer did not would silently
// diverge. The step therefore has three phases with a vote between each:
//   1. Prepare (local): usage checks, wait for the reductions (and the backup's copy), and for
//      the last step's conversions and gathers still reading master or the parameters.
//      Nothing is written. Vote 1: a max over every rank's
//      status code (N int32, reduce + broadcast). Any failure: every rank returns before its
//      optimizer, naming the ranks that failed.
//   2. Optimize: copy master + state into the backup (step_backup) unless the copy started at
//      the first fetch has already made it, run the callback. Vote 2:
//      the same exchange. Any callback failed: every rank restores from its backup and
//      returns the lowest failing rank's status, naming all of them. The vote itself failing
//      means the communicator broke (a peer died, an abort): restore locally and return that.
//   3. Publish (only when every optimizer succeeded): convert and enqueue the all-gathers. An
//      enqueue failure restores the backup and re-derives the local parameters from it.
// Each vote is a max over N int32 codes (each rank's at its index) rather than over one flag:
// the same latency for N x 4 bytes, and every rank learns who failed and how. Votes are skipped on
// one rank. Without a backup, phase 2 failures cannot be undone: every rank still stops before
// publishing (no rank waits in a gather a failed peer never joins), and zrt.h tells the framework
// to reload a checkpoint.
#include <algorithm>
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

Status PartitionManager::check_step_ready() {
  for (size_t u = 0; u < fetched_.size(); ++u) {
    if (fetched_[u]) {
      return Status::invalid_usage(
          "unit {} is still fetched: release every unit before the "
          "step (its parameters are about to change)",
          u);
    }
  }
  ZRT_RETURN_IF_ERROR(finish_reductions());
  ZRT_RETURN_IF_ERROR(settle_backup().with_context("waiting for the step backup's copy"));
  // The optimizer rewrites master, and publishing the parameters: no conversion of the last
  // step may still be reading master, no gather reading the parameters.
  return ag_stream_->synchronize().with_context(
      "waiting for the last step's parameter conversions and gathers");
}

Status PartitionManager::exchange_codes(zrt_status_t mine, const char* what,
                                        std::vector<int32_t>* codes) {
  // A callback's stray negative value must still read as a failure under MAX.
  const int32_t own =
      mine < 0 ? static_cast<int32_t>(ZRT_INTERNAL_ERROR) : static_cast<int32_t>(mine);
  codes->assign(static_cast<size_t>(size_), 0);
  (*codes)[static_cast<size_t>(rank_)] = own;
  if (size_ == 1) return Status::ok();
  // Reduce (max) to rank 0 and broadcast, rather than an all-gather: the vote then stays out of
  // the reduce-scatter/all-gather/all-reduce counters, so the per-step ZeRO traffic figures
  // (zrt_comm_stats) stay exactly the formula's.
  CollectiveArgs reduce;
  reduce.kind = ZRT_COLL_REDUCE;
  reduce.sendbuf = codes->data();
  reduce.recvbuf = codes->data();
  reduce.count = codes->size();
  reduce.dtype = ZRT_I32;
  reduce.op = ZRT_MAX;
  reduce.root = 0;
  reduce.purpose = Purpose::kInternal;
  CollectiveArgs bcast = reduce;
  bcast.kind = ZRT_COLL_BROADCAST;
  Stream& stream = comm_.default_stream();
  ZRT_RETURN_IF_ERROR(enqueue_collective(stream, rank_, size_, reduce).with_context(what));
  ZRT_RETURN_IF_ERROR(enqueue_collective(stream, rank_, size_, bcast).with_context(what));
  return stream.synchronize().with_context(what);
}

Status PartitionManager::copy_backup_range(size_t begin, size_t end, Stream* stream) {
  const size_t count = layout_.shard_numel();
  ElementOps* ops = ops_.get();
  for (size_t array = begin / count; array * count < end; ++array) {
    float* to = array == 0 ? backup_master_ : backup_state_[array - 1];
    const float* from = array == 0 ? master_ : state_[array - 1];
    const size_t first = std::max(begin, array * count) - array * count;
    const size_t last = std::min(end, (array + 1) * count) - array * count;
    if (stream == nullptr) {
      ops->copy(to + first, from + first, (last - first) * sizeof(float));
      continue;
    }
    ZRT_RETURN_IF_ERROR(run_piecewise(
        *stream, last - first,
        [ops, to = to + first, from = from + first](size_t at, size_t n) {
          ops->copy(to + at, from + at, n * sizeof(float));
        },
        "partition: step backup"));
  }
  return Status::ok();
}

void PartitionManager::take_backup() {
  if (backup_master_ == nullptr || backup_current()) return;
  static_cast<void>(copy_backup_range(backup_cursor_, backup_total(), nullptr));  // cannot fail
  backup_cursor_ = backup_total();
}

void PartitionManager::advance_backup() {
  if (backup_master_ == nullptr || backup_current()) return;
  const size_t total = backup_total();
  const size_t units = std::max<size_t>(1, unit_specs_.size());
  const size_t end = std::min(total, backup_cursor_ + (total + units - 1) / units);
  backup_in_flight_ = true;  // even a partial enqueue must be waited for before master changes
  // A refused enqueue (a failed stream) leaves the cursor: the step, which reports that
  // stream's error first, would copy the rest itself.
  if (!copy_backup_range(backup_cursor_, end, ag_stream_).is_ok()) return;
  backup_cursor_ = end;
}

void PartitionManager::invalidate_backup() {
  backup_cursor_ = 0;
}

Status PartitionManager::settle_backup() {
  if (!backup_in_flight_) return Status::ok();
  const Status status = ag_stream_->synchronize();
  if (!status.is_ok()) {
    // Its copies may not have run: the backup is out of date. Still in flight until a wait
    // succeeds, since the copies might yet run.
    invalidate_backup();
    return status;
  }
  backup_in_flight_ = false;
  return Status::ok();
}

void PartitionManager::restore_backup() {
  const size_t bytes = layout_.shard_numel() * sizeof(float);
  if (backup_master_ == nullptr || bytes == 0) return;
  ops_->copy(master_, backup_master_, bytes);
  for (size_t i = 0; i < state_.size(); ++i) ops_->copy(state_[i], backup_state_[i], bytes);
  backup_cursor_ = backup_total();
}

// Phase 3: master to param_dtype where this rank keeps it, and the gathers that share it.
Status PartitionManager::publish_params() {
  // Device ops convert on the all-gather stream, ahead of the gathers they feed.
  ScopedBind bound(*ops_);
  ZRT_RETURN_IF_ERROR(bound.bind(ag_stream_));
  const zrt_dtype_t pdt = options_.param_dtype;
  const auto& segments = layout_.segments();
  if (options_.stage == 0) {
    ops_->convert(ZRT_F32, master_, pdt, full_params_, layout_.shard_numel());
    return Status::ok();
  }
  if (options_.stage <= 2) {
    // Last segments hold the first units (buckets are in backward order): publish them first.
    ElementOps* ops = ops_.get();
    for (int s = static_cast<int>(segments.size()) - 1; s >= 0; --s) {
      const Segment& seg = segments[s];
      char* full = param_ptr(full_params_, segment_start(s));
      char* owned = param_ptr(full, static_cast<size_t>(rank_) * seg.slice);
      const float* master = master_ + seg.shard_offset;
      if (size_ == 1) {
        ops->convert(ZRT_F32, master, pdt, owned, seg.slice);
      } else {
        // On the stream, ahead of the gather that sends it.
        const size_t p_size = p_size_;
        ZRT_RETURN_IF_ERROR(run_piecewise(
            *ag_stream_, seg.slice,
            [ops, master, pdt, owned, p_size](size_t begin, size_t count) {
              ops->convert(ZRT_F32, master + begin, pdt, owned + begin * p_size, count);
            },
            "partition: convert master to the owned parameter slice"));
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
    return Status::ok();
  }
  // Stage 3: every unit's slice of the parameter shard is converted just ahead of its next
  // gather; units still in the window hold the old parameters.
  forget_window();
  const int p = layout_.persistent_segment();
  for (size_t s = 0; s < segments.size(); ++s) shard_stale_[s] = static_cast<int>(s) != p;
  if (p >= 0) {
    const Segment& seg = segments[p];
    ZRT_RETURN_IF_ERROR(convert_shard_segment(p));
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
  return Status::ok();
}

// After restore_backup: the parameters this rank derives from its own master, as they were
// before the step (the conversion is deterministic). Peers' slices are theirs to restore.
void PartitionManager::rederive_params() {
  // As in publish_params: device ops convert on the all-gather stream, after the gathers.
  ScopedBind bound(*ops_);
  static_cast<void>(bound.bind(ag_stream_));  // a failure is kept and reported by destroy
  const zrt_dtype_t pdt = options_.param_dtype;
  if (options_.stage == 0) {
    ops_->convert(ZRT_F32, master_, pdt, full_params_, layout_.shard_numel());
  } else if (options_.stage <= 2) {
    const auto& segments = layout_.segments();
    for (int s = 0; s < static_cast<int>(segments.size()); ++s) {
      const Segment& seg = segments[s];
      char* owned =
          param_ptr(full_params_, segment_start(s) + static_cast<size_t>(rank_) * seg.slice);
      ops_->convert(ZRT_F32, master_ + seg.shard_offset, pdt, owned, seg.slice);
    }
  } else {
    ops_->convert(ZRT_F32, master_, pdt, param_shard_, layout_.shard_numel());
    std::fill(shard_stale_.begin(), shard_stale_.end(), 0);
  }
}

namespace {

// " 1 (ZRT_TIMEOUT), 3 (ZRT_REMOTE_ERROR)"; the lowest failing rank's code in *first.
std::string failed_ranks(const std::vector<int32_t>& codes, zrt_status_t* first) {
  std::string list;
  for (size_t r = 0; r < codes.size(); ++r) {
    if (codes[r] == ZRT_SUCCESS) continue;
    const auto code = static_cast<zrt_status_t>(codes[r]);
    if (list.empty()) *first = code;
    list += fmt::format("{}{} ({})", list.empty() ? " " : ", ", r, zrt_status_string(code));
  }
  return list;
}

}  // namespace

Status PartitionManager::step(zrt_optimizer_fn optimizer, void* user_data) {
  ZRT_RETURN_IF_ERROR(check_finalized("step"));
  const int64_t next = step_ + 1;
  std::vector<int32_t> codes;

  // A bad argument is this caller's bug alone: refused at once, like any argument check.
  if (optimizer == nullptr) return Status::invalid_argument("optimizer is NULL");

  // Phase 1: prepare, then vote. Nothing has been written yet, whatever fails.
  const Status ready = check_step_ready();
  const Status vote =
      exchange_codes(ready.code(), "step: agreeing that every rank's reductions completed", &codes);
  if (!ready.is_ok()) return ready;
  if (!vote.is_ok()) {
    return vote.with_context(
        fmt::format("step {} (no optimizer ran here; master and state are unchanged)", next));
  }
  zrt_status_t first = ZRT_SUCCESS;
  std::string failed = failed_ranks(codes, &first);
  if (!failed.empty()) {
    return Status::error(ZRT_REMOTE_ERROR,
                         "step {}: rank(s){} failed before the optimizer (reductions or usage); "
                         "no rank ran its optimizer, master and state are unchanged",
                         next, failed);
  }

  // Phase 2: optimize, then vote.
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
  args.step = next;
  take_backup();  // what the fetches' shares did not copy
  const zrt_status_t code = optimizer(&args, user_data);
  invalidate_backup();
  const bool backed_up = backup_master_ != nullptr;
  const char* undo = backed_up ? "master and optimizer state were restored"
                               : "step_backup is 0: master and optimizer state are as the "
                                 "callbacks left them, reload a checkpoint";
  const Status voted =
      exchange_codes(code, "step: agreeing that every rank's optimizer succeeded", &codes);
  if (!voted.is_ok()) {
    restore_backup();
    return voted.with_context(fmt::format(
        "step {} (this rank's optimizer returned {}; {} on this rank)", next,
        zrt_status_string(code), backed_up ? "master and optimizer state were restored" : undo));
  }
  failed = failed_ranks(codes, &first);
  if (!failed.empty()) {
    restore_backup();
    return Status::error(first,
                         "step {}: the optimizer callback failed on rank(s){}; {} on every "
                         "rank, parameters unchanged",
                         next, failed, undo);
  }

  // Phase 3: publish. Every rank's optimizer succeeded.
  const Status published = publish_params();
  if (!published.is_ok()) {
    if (!backed_up) {
      return published.with_context(fmt::format(
          "step {}: publishing the updated parameters (step_backup is 0: master and state hold "
          "the update, reload a checkpoint)",
          next));
    }
    // Conversions and gathers enqueued before the failure may still read master and the owned
    // slices being restored and re-derived.
    const Status drained = ag_stream_->synchronize();
    restore_backup();
    rederive_params();
    return published.with_context(fmt::format(
        "step {}: publishing the updated parameters failed; master, state and this rank's "
        "parameters were restored{}",
        next, drained.is_ok() ? "" : " (the gather stream reported: " + drained.message() + ")"));
  }
  ++step_;

  // Clear the gradients for the next step (the reductions have all finished); the gradient
  // shard is overwritten by the next step's first reduction of each segment instead.
  if (full_grads_ != nullptr) ops_->zero(full_grads_, plan_.full_grads * g_size_);
  std::fill(grad_fresh_.begin(), grad_fresh_.end(), 1);
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
  // The next forward's first units, gathered now (behind their conversions) so that its first
  // fetch does not wait for them: from the fetch order's start, as a fetch would look ahead.
  if (options_.stage == 3 && options_.prefetch_next_step) prefetch_after(-1);
  return Status::ok();
}

}  // namespace zrt
