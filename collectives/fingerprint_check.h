// The default mismatch fingerprint: with no flag, every host collective carries its call (the
// 40-byte OrderFingerprint of engine/fingerprint.h: kind, count, dtype, op, root, purpose,
// stream and collective number) in the first message it sends on each link its algorithm uses,
// and the receiving rank compares it with its own call before it uses the data. A mismatch (sum
// against max, f32 against i32, reduce-scatter against all-gather, different counts) is then
// ZRT_INVALID_USAGE naming both calls, on the ranks that see it, and through the peer verdict
// (engine/peer_verdicts.h) on every other rank. ZRT_CHECK=1 runs the full checker
// (order_check.h) instead, which also gates the data phase on the comparison.
//
// Where it travels (docs/ARCHITECTURE.md#message-tags):
//   - window rings (reduce-scatter, all-gather, ring all-reduce on one host): in READY(0) of the
//     collective's first phase, 40 bytes in front of the byte count (48 instead of 8 bytes);
//   - direct all-reduce: in a 64-byte header in front of each segment's data, which the
//     algorithm copies into its staging anyway;
//   - two-level collectives (ranks on several hosts): in front of the first message of the
//     first ring across hosts, a header that the transport gathers with the user's data into one
//     message (Transport::send_with_header), and inside each host in READY(0) of the window ring
//     (with ZRT_WINDOWS=0 a companion from local rank l to l + 1): the links checked reach every
//     rank, and no message crosses hosts for the check alone. Every block must be below
//     kFingerprintHeaderMaxBytes and every ring across hosts must move data; otherwise the
//     companion ring below (two_level_fingerprint.h);
//   - tagged-message rings, broadcast and reduce chains, recursive doubling, barrier: in one
//     40-byte message to the right ring neighbour, posted with the first data, on the task's tag
//     with the order-check bit and task bits 1 (these paths send their data straight from the
//     user's buffers, where there is no room for a header). The data does not wait for it; the
//     task completes only once the left neighbour's fingerprint arrived and matched.
// Nothing travels for a collective that moves no bytes on a link (count 0).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>

#include "lib/core/status.h"
#include "engine/fingerprint.h"
#include "engine/task.h"
#include "transports/transport.h"

namespace zrt {

// Task bits of the companion message (with kOrderCheckTagBit): the full checker's use 0.
inline constexpr uint64_t kFingerprintTag = kOrderCheckTagBit | 1;
// The direct all-reduce's per-segment header (a whole cache line, so the data stays aligned).
inline constexpr size_t kFingerprintHeaderBytes = 64;
static_assert(sizeof(OrderFingerprint) <= kFingerprintHeaderBytes);
// How long a data error waits for a fingerprint still on its way, which names the calls.
inline constexpr int64_t kFingerprintGraceMs = 500;
// Messages at least this long keep the companion: UCX sends them by rendezvous, where the
// gathered header buys nothing measurable and the iov datatype may cost the zero-copy protocol.
inline constexpr size_t kFingerprintHeaderMaxBytes = size_t{256} << 10;

class FingerprintCheck {
 public:
  void set(const OrderFingerprint& fingerprint) {
    mine_ = fingerprint;
    has_ = true;
  }
  // At the task's start: on when the engine asks for it and the task has peers.
  void start(const TaskContext& context);
  bool enabled() const { return enabled_; }
  const OrderFingerprint& mine() const { return mine_; }

  // Compares a peer's fingerprint (`bytes` as received from `peer`); ok, or the mismatch, which
  // is also kept (mismatch()).
  Status compare(const void* data, size_t bytes, int peer);
  const Status& mismatch() const { return mismatch_; }

  // The companion's neighbours: by default the ring's (rank - 1 and rank + 1); -1 for none.
  void route(int left, int right) {
    left_ = left;
    right_ = right;
  }
  // The companion message (paths without a header of their own), on the route.
  Status post_companion(TaskContext& context);
  // A header in front of a data message (Transport::send_with_header): where the left link's
  // arrives, and its examination once the receive completed (a failed receive loses it: the
  // error waits for the peer's verdict, which names the calls).
  void expect_header(int peer) {
    header_peer_ = peer;
    header_seen_ = false;
  }
  void* header_slot() { return &header_; }
  Status take_header(const TransportCompletion& completion);
  // Examines the companion receive once it completed; returns how many operations completed.
  int poll_companion();
  bool companion_posted() const { return companion_; }
  // A neighbour's fingerprint has not been examined yet.
  bool awaiting() const {
    return (companion_ && !recv_seen_) || (header_peer_ >= 0 && !header_seen_);
  }
  // The companion's operations are done (or there is no companion).
  bool settled() const { return !companion_ || (recv_seen_ && send_seen_); }
  // A failed companion receive or send (the peer failed), else ok.
  const Status& peer_error() const { return peer_error_; }
  // The neighbour whose fingerprint is awaited (for a timeout's message).
  int left() const { return companion_ && !recv_seen_ ? left_ : header_peer_; }

 private:
  OrderFingerprint mine_;
  OrderFingerprint theirs_;
  OrderFingerprint header_;
  int header_peer_ = -1;
  bool header_seen_ = false;
  bool has_ = false;
  bool enabled_ = false;
  bool companion_ = false;
  bool recv_seen_ = false;
  bool send_seen_ = false;
  int left_ = -1;
  int right_ = -1;
  TransportCompletion recv_;
  TransportCompletion send_;
  Status mismatch_;
  Status peer_error_;
};

}  // namespace zrt
