#include "engine/peer_verdicts.h"

#include <sched.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstring>
#include <thread>

#include "transports/transport.h"

namespace zrt {

Status PeerVerdicts::post(Transport& transport, int rank, int size) {
  rank_ = rank;
  size_ = size;
  if (size < 2) return Status::ok();
  slots_ = std::make_unique<Slot[]>(static_cast<size_t>(size));
  sends_ = std::make_unique<TransportCompletion[]>(static_cast<size_t>(size));
  for (int peer = 0; peer < size; ++peer) {
    if (peer == rank) continue;
    Slot& slot = slots_[static_cast<size_t>(peer)];
    ZRT_RETURN_IF_ERROR(
        transport.recv(peer, kVerdictTag, &slot.message, sizeof(slot.message), &slot.recv)
            .with_context("posting the mismatch-verdict receive"));
    slot.posted = true;
  }
  return Status::ok();
}

bool PeerVerdicts::poll(Verdict* verdict) {
  if (slots_ == nullptr) return false;
  for (int peer = 0; peer < size_; ++peer) {
    Slot& slot = slots_[static_cast<size_t>(peer)];
    if (!slot.posted || !slot.recv.done) continue;
    slot.posted = false;
    // A cancelled or failed receive (the peer died, the engine is closing) is no verdict.
    if (!slot.recv.status.is_ok()) continue;
    const size_t header = offsetof(Message, text);
    if (slot.recv.bytes < header) continue;
    const size_t length = std::min(slot.recv.bytes - header, kVerdictBytes);
    verdict->failure =
        Status::error(static_cast<zrt_status_t>(slot.message.code), "rank {} reports: {}", peer,
                      std::string(slot.message.text.data(), length));
    verdict->stream = slot.message.stream;
    verdict->sequence = slot.message.sequence;
    return true;
  }
  return false;
}

void PeerVerdicts::tell(Transport& transport, const Status& failure, int stream,
                        uint32_t sequence) {
  if (sends_ == nullptr || told_) return;
  told_ = true;
  const std::string& text = failure.message();
  const size_t length = std::min(text.size(), kVerdictBytes);
  message_.stream = stream;
  message_.sequence = sequence;
  message_.code = static_cast<int32_t>(failure.code());
  std::memcpy(message_.text.data(), text.data(), length);
  const size_t bytes = offsetof(Message, text) + length;
  for (int peer = 0; peer < size_; ++peer) {
    if (peer == rank_) continue;
    TransportCompletion& send = sends_[static_cast<size_t>(peer)];
    if (!transport.send(peer, kVerdictTag, &message_, bytes, &send).is_ok()) {
      send.done = true;  // not posted: nothing to wait for
    }
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(kSendGraceMs);
  for (;;) {
    bool pending = false;
    for (int peer = 0; peer < size_; ++peer) {
      if (peer != rank_ && !sends_[static_cast<size_t>(peer)].done) pending = true;
    }
    if (!pending || std::chrono::steady_clock::now() >= deadline) return;
    if (transport.progress() == 0) std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
}

void PeerVerdicts::close(Transport& transport) {
  if (slots_ == nullptr) return;
  const Status closing = Status::error(ZRT_INVALID_USAGE, "the communicator is closing");
  for (int peer = 0; peer < size_; ++peer) {
    Slot& slot = slots_[static_cast<size_t>(peer)];
    if (!slot.posted || slot.recv.done) continue;
    transport.cancel_recv(&slot.recv, closing);
    slot.posted = false;
  }
}

}  // namespace zrt
