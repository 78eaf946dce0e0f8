// PeerVerdicts: how a rank that found a mismatched collective tells every other rank, so that
// each one fails with the message naming both calls, not only the ranks whose messages showed
// it. The default fingerprint (collectives/fingerprint_check.h) travels only along the links an
// algorithm uses anyway, so at N >= 3 some ranks exchange nothing with the rank that differs;
// they would otherwise wait for the failed peer until the timeout.
//
// Each engine keeps one receive posted per peer on kVerdictTag for its whole life (a verdict is
// at most kVerdictBytes); the rank that finds a mismatch sends the collective's stream and
// number and its error's message to every peer before its own engine fails, and a rank that
// receives one fails with "rank R reports: <message>" (and its code) once it has started that
// collective
// itself (or at once if it has no such stream, or kHoldMs later): the collectives before it,
// which its peers completed, still complete here. The receives are cancelled one by one at a normal
// close (Transport::cancel_recv), so the transport still says its farewells. A rank that fails
// because a peer failed tells its peers too (EngineImpl::peer_failure_cause): a survivor that
// then closes looks dead to its own neighbours, and they would otherwise name it, not the rank
// that died. Progress thread only.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "lib/core/status.h"
#include "engine/task.h"
#include "transports/transport.h"

namespace zrt {

// The p2p bit with the order-check bit: point-to-point tags never carry bit 32 (the stream
// index starts at bit 33), so no task's message can match a verdict.
inline constexpr uint64_t kVerdictTag = (uint64_t{1} << 43) | kOrderCheckTagBit;
inline constexpr size_t kVerdictBytes = 1024;

class PeerVerdicts {
 public:
  // Posts the receives (nothing at size 1).
  Status post(Transport& transport, int rank, int size);
  // A verdict that arrived since the last call: fills what it is about and returns true.
  struct Verdict {
    Status failure;
    int stream = -1;
    uint32_t sequence = 0;
  };
  bool poll(Verdict* verdict);
  // Sends `failure`'s message, about collective `sequence` of stream `stream`, to every peer and
  // drives the transport until the sends are out (at most kSendGraceMs: a peer that is gone
  // must not hold this rank's failure back).
  void tell(Transport& transport, const Status& failure, int stream, uint32_t sequence);
  // Cancels the receives still posted (a normal close; after cancel_all there are none).
  void close(Transport& transport);

  static constexpr int64_t kSendGraceMs = 500;
  static constexpr int64_t kHoldMs = 2000;

 private:
  // On the wire: the collective, then the message's text.
  struct Message {
    int32_t stream = -1;
    uint32_t sequence = 0;
    int32_t code = ZRT_INVALID_USAGE;  // the failure's zrt_status_t
    std::array<char, kVerdictBytes> text{};
  };
  struct Slot {
    TransportCompletion recv;
    bool posted = false;
    Message message;
  };
  int rank_ = 0;
  int size_ = 1;
  std::unique_ptr<Slot[]> slots_;  // one per rank (this rank's unused); never moves
  std::unique_ptr<TransportCompletion[]> sends_;
  Message message_;  // what tell() sends, alive until its sends ended
  bool told_ = false;
};

}  // namespace zrt
