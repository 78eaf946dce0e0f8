// PeerBeacons: every rank hears from every peer at least once a beacon interval, so that a
// timeout can tell the peers whose traffic stopped from those that only wait like itself
// (silent_peers.h). A collective's links reach only a few peers (a ring: two), and a rank that
// waits on its same-host neighbour would otherwise have nothing to tell that the rank behind
// the neighbour, on another host, went quiet.
//
// Each engine keeps one 0-byte receive posted per peer on kBeaconTag and, every
// beacon_interval(), sends each peer a 0-byte beacon (never a second one while the first is
// still in flight, so a peer that stopped taking them costs one pending send, not a queue).
// The transport stamps each arrival (Transport::last_heard); completed receives are posted
// again at the next interval. A message's arrival is all that counts, so beacons carry nothing.
// Progress thread only.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>

#include "lib/core/status.h"
#include "engine/peer_verdicts.h"
#include "transports/transport.h"

namespace zrt {

// Beside the verdicts' tag (peer_verdicts.h), in the bits no task's message uses.
inline constexpr uint64_t kBeaconTag = kVerdictTag | 1;

class PeerBeacons {
 public:
  // Posts the receives and sends the first beacons (nothing at size 1).
  Status start(Transport& transport, int rank, int size, int64_t timeout_ms);
  // Sends the beacons and posts the receives that are due; returns the time until the next
  // interval, for the caller's sleep.
  std::chrono::milliseconds tick(Transport& transport, std::chrono::steady_clock::time_point now);
  // Stops for good: cancels the receives and waits for the last beacons to leave (up to the
  // timeout, at most 1 s; a 0-byte send normally ends at once). One still pending then is
  // cancelled with the transport's other operations (Transport::cancel_all), since nothing
  // may write into this object after it.
  void close(Transport& transport);

 private:
  struct Slot {
    TransportCompletion recv;
    TransportCompletion send;
    bool receiving = false;  // a receive is posted
    bool sending = false;    // a beacon is on its way
  };
  int rank_ = 0;
  int size_ = 1;
  std::chrono::milliseconds interval_{1000};
  std::chrono::milliseconds close_grace_{1000};  // close()'s wait for the last beacons
  std::chrono::steady_clock::time_point next_;
  std::unique_ptr<Slot[]> slots_;  // one per rank (this rank's unused); never moves
  bool closed_ = false;
};

}  // namespace zrt
