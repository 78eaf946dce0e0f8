#include "engine/peer_beacons.h"

#include <sched.h>

#include <algorithm>
#include <cstddef>

#include "lib/core/log.h"
#include "engine/silent_peers.h"

namespace zrt {

using Clock = std::chrono::steady_clock;

Status PeerBeacons::start(Transport& transport, int rank, int size, int64_t timeout_ms) {
  rank_ = rank;
  size_ = size;
  interval_ = beacon_interval(timeout_ms);
  close_grace_ = std::chrono::milliseconds(std::min<int64_t>(timeout_ms, 1000));
  if (size < 2) return Status::ok();
  slots_ = std::make_unique<Slot[]>(static_cast<size_t>(size));
  next_ = Clock::now();
  (void)tick(transport, next_);
  return Status::ok();
}

std::chrono::milliseconds PeerBeacons::tick(Transport& transport, Clock::time_point now) {
  if (slots_ == nullptr || closed_) return std::chrono::milliseconds::max();
  if (now < next_) {
    return std::chrono::duration_cast<std::chrono::milliseconds>(next_ - now) +
           std::chrono::milliseconds(1);
  }
  next_ = now + interval_;
  for (int peer = 0; peer < size_; ++peer) {
    if (peer == rank_) continue;
    Slot& slot = slots_[static_cast<size_t>(peer)];
    if (slot.receiving && slot.recv.done) {
      slot.receiving = false;
      // A failed or cancelled receive: the peer is gone (its error reaches the engine through
      // the transport's health), so there is nothing more to hear from it.
      if (!slot.recv.status.is_ok()) continue;
    }
    if (!slot.receiving && slot.recv.status.is_ok()) {
      // Not posted (an error) or ended at once (a peer known dead): nothing to wait for.
      slot.receiving =
          transport.recv(peer, kBeaconTag, nullptr, 0, &slot.recv).is_ok() && !slot.recv.done;
    }
    if (slot.sending && !slot.send.done) continue;
    slot.sending = transport.send(peer, kBeaconTag, nullptr, 0, &slot.send).is_ok();
  }
  return interval_;
}

void PeerBeacons::close(Transport& transport) {
  if (slots_ == nullptr || closed_) return;
  closed_ = true;
  const Status closing = Status::error(ZRT_INVALID_USAGE, "the communicator is closing");
  for (int peer = 0; peer < size_; ++peer) {
    Slot& slot = slots_[static_cast<size_t>(peer)];
    if (slot.receiving && !slot.recv.done) transport.cancel_recv(&slot.recv, closing);
    slot.receiving = false;
  }
  auto pending = [&] {
    for (int peer = 0; peer < size_; ++peer) {
      const Slot& slot = slots_[static_cast<size_t>(peer)];
      if (peer != rank_ && slot.sending && !slot.send.done) return true;
    }
    return false;
  };
  const auto deadline = Clock::now() + close_grace_;
  while (pending() && Clock::now() < deadline) {
    if (transport.progress() == 0) sched_yield();
  }
  if (pending()) {
    ZRT_LOG_WARN("a peer took no beacon for {} ms at close; cancelling what is outstanding",
                 close_grace_.count());
    transport.cancel_all(closing);
  }
}

}  // namespace zrt
