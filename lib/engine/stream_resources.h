// StreamResources: what the engine keeps per stream for the tasks that run on it. Touched only
// by the progress thread.
//
// Staging memory is constant-size and allocated once per stream (at its first communicating
// task) from transport.alloc_registered, which also touches it: no collective allocates or
// faults in fresh pages on the data path (DESIGN.md, "What this machine teaches").
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <vector>

#include "lib/engine/fingerprint.h"

namespace zrt {

// Staging bytes per stream: enough for the ring's receive and send slots (8 x 256 KiB) and for
// the small-message all-reduce, which receives every peer's whole input.
inline constexpr size_t kStreamScratchBytes = size_t{4} << 20;

// A send to one's own rank, waiting for the matching receive later on the same stream.
struct SelfMessage {
  const void* buffer = nullptr;
  size_t bytes = 0;
};

struct StreamResources {
  void* scratch = nullptr;  // kStreamScratchBytes, or nullptr before the first communicating task
  size_t scratch_bytes = 0;
  std::deque<SelfMessage> self_mailbox;
  // Point-to-point sequence numbers per peer, by direction (see Task::p2p_peer).
  std::vector<uint32_t> p2p_send_seq;
  std::vector<uint32_t> p2p_recv_seq;
  uint32_t collective_seq = 0;
  // The last collective of this stream whose fingerprint every checked peer matched (magic 0
  // before the first): named when a peer falls behind.
  OrderFingerprint last_matched;
};

}  // namespace zrt
