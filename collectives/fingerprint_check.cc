#include "collectives/fingerprint_check.h"

#include <cstring>

#include <fmt/format.h>

#include "collectives/order_check.h"

namespace zrt {

void FingerprintCheck::start(const TaskContext& context) {
  enabled_ = has_ && context.fingerprint && context.size > 1;
  companion_ = false;
  recv_seen_ = send_seen_ = false;
  header_peer_ = -1;
  header_seen_ = false;
  mismatch_ = Status::ok();
  peer_error_ = Status::ok();
  if (!enabled_) return;
  mine_.rank = context.rank;
  mine_.stream = context.stream_index;
  mine_.sequence = context.sequence;
  left_ = (context.rank + context.size - 1) % context.size;
  right_ = (context.rank + 1) % context.size;
}

Status FingerprintCheck::compare(const void* data, size_t bytes, int peer) {
  if (!enabled_) return Status::ok();
  if (!mismatch_.is_ok()) return mismatch_;
  OrderFingerprint theirs;
  if (bytes < sizeof(theirs)) {
    mismatch_ = Status::error(ZRT_INVALID_USAGE,
                              "collective #{} of stream {}: rank {} sent {} bytes where rank {} "
                              "expected its call's fingerprint (mismatched collective arguments "
                              "across ranks? this rank called {})",
                              mine_.sequence, mine_.stream, peer, bytes, mine_.rank,
                              describe_fingerprint(mine_));
    return mismatch_;
  }
  std::memcpy(&theirs, data, sizeof(theirs));
  if (theirs.magic != kOrderFingerprintMagic) {
    mismatch_ =
        Status::error(ZRT_INVALID_USAGE,
                      "collective #{} of stream {}: rank {} sent no fingerprint where rank "
                      "{} called {} (mismatched collective arguments across ranks, or "
                      "different zrt builds?)",
                      mine_.sequence, mine_.stream, peer, mine_.rank, describe_fingerprint(mine_));
    return mismatch_;
  }
  if (fingerprints_match(mine_, theirs) && theirs.sequence == mine_.sequence &&
      theirs.stream == mine_.stream) {
    return Status::ok();
  }
  const std::string where =
      theirs.sequence == mine_.sequence && theirs.stream == mine_.stream
          ? fmt::format("collective #{} of stream {}", mine_.sequence, mine_.stream)
          : fmt::format("collective #{} of stream {} (rank {}'s #{} of stream {})", mine_.sequence,
                        mine_.stream, theirs.rank, theirs.sequence, theirs.stream);
  mismatch_ = Status::error(ZRT_INVALID_USAGE,
                            "collective mismatch at {}: rank {} called {} where rank {} called {} "
                            "(mismatched collective arguments across ranks)",
                            where, theirs.rank, describe_fingerprint(theirs), mine_.rank,
                            describe_fingerprint(mine_));
  return mismatch_;
}

Status FingerprintCheck::post_companion(TaskContext& context) {
  if (!enabled_) return Status::ok();
  const uint64_t tag = context.tag_base | kFingerprintTag;
  recv_ = TransportCompletion{};
  send_ = TransportCompletion{};
  recv_seen_ = left_ < 0;
  send_seen_ = right_ < 0;
  if (left_ >= 0) {
    ZRT_RETURN_IF_ERROR(context.transport.recv(left_, tag, &theirs_, sizeof(theirs_), &recv_)
                            .with_context(fmt::format("fingerprint: receive from rank {}", left_)));
  }
  companion_ = true;
  if (right_ < 0) return Status::ok();
  Status sent = context.transport.send(right_, tag, &mine_, sizeof(mine_), &send_);
  if (!sent.is_ok()) {
    send_seen_ = true;
    return sent.with_context(fmt::format("fingerprint: send to rank {}", right_));
  }
  return Status::ok();
}

Status FingerprintCheck::take_header(const TransportCompletion& completion) {
  if (header_peer_ < 0 || header_seen_) return Status::ok();
  // A message longer than the receive (what mismatched counts look like) loses the header:
  // awaiting() stays true and holds that error for the verdict of the peer that saw the calls.
  // Any other failure (the peer is gone) has no fingerprint to wait for.
  if (!completion.status.is_ok()) {
    header_seen_ = completion.status.code() != ZRT_INVALID_USAGE;
    return Status::ok();
  }
  header_seen_ = true;
  return compare(&header_, completion.bytes, header_peer_);
}

int FingerprintCheck::poll_companion() {
  if (!companion_) return 0;
  int completed = 0;
  if (!send_seen_ && send_.done) {
    send_seen_ = true;
    ++completed;
    if (!send_.status.is_ok() && peer_error_.is_ok()) peer_error_ = send_.status;
  }
  if (!recv_seen_ && recv_.done) {
    recv_seen_ = true;
    ++completed;
    if (!recv_.status.is_ok()) {
      if (peer_error_.is_ok()) peer_error_ = recv_.status;
    } else {
      (void)compare(&theirs_, recv_.bytes, left_);
    }
  }
  return completed;
}

}  // namespace zrt
