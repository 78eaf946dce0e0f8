// The collective-order checker. A job whose ranks call collectives in a different order, a
// different number of times or with different arguments would otherwise hang until the
// timeout with no hint of why; with the checker (ZRT_CHECK, EngineOptions::check_order) such a
// collective fails on the ranks involved with ZRT_INVALID_USAGE naming both calls.
//
// How it works. Every host collective carries a 40-byte fingerprint (engine/fingerprint.h:
// kind, count, dtype, op, root, purpose and purpose id, plus the stream and collective number
// that name it). When the task starts, it posts a receive for each checked peer's fingerprint
// and sends its own, on the task's tag with kOrderCheckTagBit set, so these messages never
// match data; all ranks do so at about the same time, so the exchange costs one small-message
// latency, not a round trip. The data phase starts only once every fingerprint arrived and
// matched. (Running it alongside the exchange would hide even that latency, but a mismatched
// data phase leaves rendezvous sends that no peer will ever receive, still in flight when the
// communicator fails; checking first means a mismatch fails with no data in flight, and the
// data phase never reads or writes buffers for a call the peers did not make.) A mismatch is
// reported once this rank's own fingerprint sends have completed (at most kVerdictGraceMs
// later), so that its peers reach the same verdict before this rank's failure cancels them.
//
// Which peers. Up to kMaxCheckedPeers other ranks, every peer is checked: each rank then sees
// each mismatch itself and reports it with the same kind of message, no verdict has to travel.
// Larger communicators check their two ring neighbours only. Any difference among the ranks
// then still shows between some pair of neighbours (the ring has a boundary between differing
// calls), so at least two ranks report it; the others see those ranks fail (a remote error or
// the timeout) rather than the mismatch itself.
//
// A rank that calls fewer collectives leaves its peers waiting for a fingerprint; the engine's
// no-progress timeout then names it as behind, and the last collective every peer matched on
// this stream (StreamResources::last_matched), through Task::waiting_on().
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <string>

#include "collectives/collectives.h"
#include "lib/core/status.h"
#include "engine/fingerprint.h"
#include "engine/task.h"
#include "transports/transport.h"

namespace zrt {

inline constexpr int kMaxCheckedPeers = 16;
inline constexpr int64_t kVerdictGraceMs = 2000;

// The fingerprint of a collective from its (validated) arguments; rank, stream and sequence
// are filled when the task starts.
OrderFingerprint make_fingerprint(const CollectiveArgs& args);
// "all_gather(unit 7, 393216 x f32 = 1.5 MiB)", "reduce(bucket 3, 16 x f64 = 128 B, sum, root 1)".
std::string describe_fingerprint(const OrderFingerprint& fingerprint);
// Whether two fingerprints describe the same call (rank, stream and sequence aside).
bool fingerprints_match(const OrderFingerprint& a, const OrderFingerprint& b);

// The checker's state inside one CollTask: fixed-size, nothing allocated per call.
class OrderCheck {
 public:
  void set_fingerprint(const OrderFingerprint& fingerprint) {
    mine_ = fingerprint;
    has_fingerprint_ = true;
  }

  // Posts the fingerprint exchange if the engine checks order and the task has peers.
  Status start(TaskContext& context);
  // Collects finished exchanges. Returns how many completed (the task's progress marker).
  int poll(TaskContext& context);

  bool active() const { return active_; }
  bool has_fingerprint() const { return has_fingerprint_; }
  // Every posted exchange finished (received, sent, or failed).
  bool settled() const { return pending_ops_ == 0; }
  // Every peer's fingerprint arrived and matched this rank's.
  bool all_matched() const { return matched_peers_ == exchange_count_; }
  // A mismatch is known and this rank's own fingerprints are out (or the grace period passed):
  // time to fail with it.
  bool mismatch_ready() const;
  const Status& mismatch() const { return mismatch_; }
  // The first failed fingerprint send or receive (a peer failed), else ok.
  const Status& peer_error() const { return peer_error_; }
  // Context for an error while fingerprints are missing: "no fingerprint from rank 1 ...".
  std::string missing_description() const;
  // For timeouts: the peers whose fingerprint has not arrived, named as behind ("" = none).
  std::string waiting_on() const;

  uint64_t bytes_sent() const { return bytes_sent_; }
  uint64_t messages_sent() const { return messages_sent_; }

 private:
  struct Exchange {
    int peer = -1;
    TransportCompletion send;
    TransportCompletion recv;
    bool send_posted = false;
    bool recv_posted = false;
    bool send_seen = false;
    bool recv_seen = false;
    bool received = false;  // a well-formed fingerprint arrived
    OrderFingerprint theirs;
  };

  void examine(Exchange& exchange);
  void note_matched(TaskContext& context);

  OrderFingerprint mine_;
  OrderFingerprint last_matched_;
  bool has_fingerprint_ = false;
  bool active_ = false;
  bool matched_noted_ = false;
  std::array<Exchange, kMaxCheckedPeers> exchanges_;
  int exchange_count_ = 0;
  int pending_ops_ = 0;
  int pending_sends_ = 0;
  int matched_peers_ = 0;
  Status mismatch_;
  Status peer_error_;
  uint64_t bytes_sent_ = 0;
  uint64_t messages_sent_ = 0;
  std::chrono::steady_clock::time_point started_;
  std::chrono::steady_clock::time_point mismatch_time_;
};

}  // namespace zrt
