#include "collectives/coll_task.h"

#include <cstring>

#include <fmt/format.h>

#include "collectives/one_shot.h"
#include "lib/core/dtype.h"

namespace zrt {

std::string describe_call(const CallDescription& call) {
  const char* name = coll_kind_name(call.kind);
  const char* dtype = dtype_name(call.dtype);
  switch (call.kind) {
    case ZRT_COLL_ALL_GATHER:
      return fmt::format("{}({} x {})", name, call.count, dtype);
    case ZRT_COLL_BROADCAST:
      return fmt::format("{}({} x {}, root {})", name, call.count, dtype, call.root);
    case ZRT_COLL_REDUCE:
      return fmt::format("{}({} x {}, {}, root {})", name, call.count, dtype, call.op, call.root);
    case ZRT_COLL_BARRIER:
      return "barrier";
    case ZRT_COLL_SEND:
    case ZRT_COLL_RECV:
      return fmt::format("{}({} x {}, peer {})", name, call.count, dtype, call.peer);
    default:
      return fmt::format("{}({} x {}, {})", name, call.count, dtype, call.op);
  }
}

Status CollTask::start(TaskContext& context) {
  phases_.rewind();
  phases_started_ = false;
  phases_done_ = false;
  tell_peers_ = false;
  held_.status = Status::ok();
  if (memory_path_) {
    // Every peer's header carries its call's fingerprint, compared before any of its data is
    // used (one_shot.h): what the order checker guarantees, without its messages.
    TaskContext checked = context;
    checked.fingerprint = context.fingerprint || context.check_order;
    checked.check_order = false;
    if (!local_) fingerprint_.start(checked);
    return start_phases(context);
  }
  if (!local_) fingerprint_.start(context);
  if (!local_ && fingerprinted_) {
    OrderFingerprint call = fingerprint_.mine();
    call.rank = context.rank;
    call.stream = context.stream_index;
    call.sequence = context.sequence;
    OneShotPhase::announce_call(context, call);
  }
  if (!local_ && !prepared_) ZRT_RETURN_IF_ERROR(start_order_check(context));
  if (checking()) return Status::ok();  // the data phases wait for the fingerprints
  return start_phases(context);
}

Status CollTask::prepare(TaskContext& context) {
  prepared_ = true;
  return start_order_check(context);
}

Status CollTask::start_order_check(TaskContext& context) {
  if (!context.check_order || !fingerprinted_) {
    check_.reset();
    return Status::ok();
  }
  if (check_ == nullptr) {
    check_ = std::make_unique<OrderCheck>();
    check_->set_fingerprint(fingerprint_.mine());
  }
  return check_->start(context);
}

Status CollTask::start_phases(TaskContext& context) {
  phases_started_ = true;
  if (phases_.empty()) return Status::ok();
  if (fingerprint_.enabled()) {
    ZRT_RETURN_IF_ERROR(phases_.first().start_fingerprint(context, *this));
  }
  return phases_.first().start(context, *this);
}

Status Phase::start_fingerprint(TaskContext& context, CollTask& task) {
  return task.post_fingerprint_companion(context, ring_mod(context.rank - 1, context.size),
                                         ring_mod(context.rank + 1, context.size));
}

Status CollTask::mismatch_failure() {
  tell_peers_ = true;
  return fingerprint_.mismatch();
}

// The data phases run at once; the task ends only when the neighbours' fingerprints were
// examined too. A data error while a fingerprint is still on its way (a short receive, a
// truncated message: what mismatched counts look like) waits for it a moment, since the
// fingerprint's mismatch names both calls and the data error does not. So does a truncated
// message on a link that no fingerprint covers (the two-level collectives check a tree of
// links): the ranks that compare the calls tell every rank (peer verdicts), and the engine
// fails this task with their verdict while the error waits.
Status CollTask::run_fingerprinted(TaskContext& context, bool* done) {
  auto worth_holding = [this](const Status& error) {
    return fingerprint_.awaiting() || error.code() == ZRT_INVALID_USAGE;
  };
  marker_ += static_cast<uint64_t>(fingerprint_.poll_companion());
  if (!fingerprint_.mismatch().is_ok()) return mismatch_failure();
  if (!held_.status.is_ok()) {
    const auto waited = std::chrono::steady_clock::now() - held_.since;
    if (!worth_holding(held_.status) || waited >= std::chrono::milliseconds(kFingerprintGraceMs)) {
      return held_.status;
    }
    return Status::ok();
  }
  if (!phases_done_) {
    Status status = run_phases(context, &phases_done_);
    if (!status.is_ok()) {
      if (!fingerprint_.mismatch().is_ok()) return mismatch_failure();
      if (!worth_holding(status)) return status;
      held_.status = status;
      held_.since = std::chrono::steady_clock::now();
      return Status::ok();
    }
  }
  if (!phases_done_) return Status::ok();
  if (!fingerprint_.settled()) {
    waiting_peer_ = fingerprint_.left();
    return Status::ok();
  }
  if (!fingerprint_.peer_error().is_ok()) return fingerprint_.peer_error();
  *done = true;
  return Status::ok();
}

// With the order check, the data phases start only once every checked peer's fingerprint
// arrived and matched (order_check.h tells why), and the task ends once they are done and the
// fingerprint sends completed.
Status CollTask::progress(TaskContext& context, bool* done) {
  if (!checking()) {
    if (fingerprint_.enabled()) return run_fingerprinted(context, done);
    return run_phases(context, done);
  }
  OrderCheck& check = *check_;
  marker_ += static_cast<uint64_t>(check.poll(context));
  if (!phases_started_) {
    if (check.mismatch_ready()) return check.mismatch();
    if (!check.mismatch().is_ok()) return Status::ok();  // our fingerprints still on their way
    if (!check.peer_error().is_ok()) {
      return check.peer_error().with_context(check.missing_description());
    }
    if (!check.all_matched()) return Status::ok();
    ZRT_RETURN_IF_ERROR(start_phases(context));
  }
  if (!phases_done_) ZRT_RETURN_IF_ERROR(run_phases(context, &phases_done_));
  if (!phases_done_ || !check.settled()) return Status::ok();
  if (!check.peer_error().is_ok()) return check.peer_error().with_context("order check");
  *done = true;
  return Status::ok();
}

Status CollTask::run_phases(TaskContext& context, bool* done) {
  while (Phase* phase = phases_.current()) {
    bool phase_done = false;
    ZRT_RETURN_IF_ERROR(phase->progress(context, *this, &phase_done));
    if (!phase_done) return Status::ok();
    phases_.next();
    ++marker_;
    if (Phase* next = phases_.current()) ZRT_RETURN_IF_ERROR(next->start(context, *this));
  }
  waiting_peer_ = -1;
  *done = true;
  return Status::ok();
}

std::string CollTask::waiting_on() const {
  std::string behind = check_ != nullptr ? check_->waiting_on() : "";
  if (!behind.empty()) return behind;
  if (waiting_peer_ < 0) return "";
  return fmt::format("rank {}", waiting_peer_);
}

Status CollTask::post_send(TaskContext& context, int peer, uint32_t tag, const void* buffer,
                           size_t bytes, PostedOp* op, bool data) {
  return post_send_parts(context, peer, tag, false, buffer, bytes, op, data);
}

Status CollTask::post_recv(TaskContext& context, int peer, uint32_t tag, void* buffer, size_t bytes,
                           PostedOp* op) {
  return post_recv_parts(context, peer, tag, false, buffer, bytes, op);
}

Status CollTask::post_data_send(TaskContext& context, int peer, uint32_t tag, const void* buffer,
                                size_t bytes, PostedOp* op, bool with_fingerprint) {
  return post_send_parts(context, peer, tag, with_fingerprint, buffer, bytes, op, true);
}

Status CollTask::post_data_recv(TaskContext& context, int peer, uint32_t tag, void* buffer,
                                size_t bytes, PostedOp* op, bool with_fingerprint) {
  return post_recv_parts(context, peer, tag, with_fingerprint, buffer, bytes, op);
}

Status CollTask::post_send_parts(TaskContext& context, int peer, uint32_t tag,
                                 bool with_fingerprint, const void* buffer, size_t bytes,
                                 PostedOp* op, bool data) {
  op->completion = TransportCompletion{};
  op->posted = true;
  const uint64_t full_tag = context.tag_base | (tag & 0xffffu);
  const OrderFingerprint& mine = fingerprint_.mine();
  Status status = with_fingerprint
                      ? context.transport.send_with_header(peer, full_tag, &mine, sizeof(mine),
                                                           buffer, bytes, &op->completion)
                      : context.transport.send(peer, full_tag, buffer, bytes, &op->completion);
  if (!status.is_ok()) {
    op->posted = false;
    return status.with_context(fmt::format("send of {} bytes to rank {}", bytes, peer));
  }
  if (data && peer != context.rank) bytes_sent_ += bytes;
  return Status::ok();
}

Status CollTask::post_recv_parts(TaskContext& context, int peer, uint32_t tag,
                                 bool with_fingerprint, void* buffer, size_t bytes, PostedOp* op) {
  op->completion = TransportCompletion{};
  op->posted = true;
  op->fingerprinted = with_fingerprint;
  const uint64_t full_tag = context.tag_base | (tag & 0xffffu);
  Status status;
  if (with_fingerprint) {
    fingerprint_.expect_header(peer);
    status = context.transport.recv_with_header(peer, full_tag, fingerprint_.header_slot(),
                                                sizeof(OrderFingerprint), buffer, bytes,
                                                &op->completion);
  } else {
    status = context.transport.recv(peer, full_tag, buffer, bytes, &op->completion);
  }
  if (!status.is_ok()) {
    op->posted = false;
    op->fingerprinted = false;
    return status.with_context(fmt::format("receive of {} bytes from rank {}", bytes, peer));
  }
  return Status::ok();
}

Status CollTask::post_fingerprint_companion(TaskContext& context, int left, int right) {
  fingerprint_.route(left, right);
  return fingerprint_.post_companion(context);
}

Status CollTask::collect(PostedOp* op, int peer, bool is_send, size_t expected_bytes) {
  if (!op->finished()) return Status::ok();
  op->posted = false;
  if (op->fingerprinted) {
    op->fingerprinted = false;
    ZRT_RETURN_IF_ERROR(fingerprint_.take_header(op->completion));
    if (op->completion.status.is_ok()) op->completion.bytes -= sizeof(OrderFingerprint);
  }
  if (!op->completion.status.is_ok()) {
    return op->completion.status.with_context(
        fmt::format("{} rank {}", is_send ? "send to" : "receive from", peer));
  }
  if (!is_send) {
    if (op->completion.bytes != expected_bytes) {
      return Status::error(ZRT_REMOTE_ERROR,
                           "receive from rank {}: got {} bytes, expected {} (mismatched "
                           "collective arguments across ranks?)",
                           peer, op->completion.bytes, expected_bytes);
    }
    if (peer != -1) bytes_received_ += expected_bytes;
  }
  ++marker_;
  return Status::ok();
}

void reduce_chunk(const ReduceSpec& spec, const void* a, double a_scale, const void* b,
                  double b_scale, void* out, size_t count, bool final) {
  if (count == 0) return;
  if (spec.op != ReduceOp::kSum) {
    a_scale = 1.0;
    b_scale = 1.0;
  }
  reduce_elements(spec.dtype, spec.op, a, b, out, count, a_scale, b_scale,
                  final && spec.stream_output);
}

void copy_scaled(const ReduceSpec& spec, const void* in, void* out, size_t count) {
  if (count == 0) return;
  if (spec.op == ReduceOp::kSum && spec.scale != 1.0) {
    scale_elements(spec.dtype, in, out, count, spec.scale);
  } else if (in != out) {
    std::memcpy(out, in, count * spec.element_size);
  }
}

}  // namespace zrt
