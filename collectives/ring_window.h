// RingWindow: the plumbing of the window ring phases (window_reduce_scatter.h,
// window_all_gather.h). Every rank writes its outgoing chunks straight into its right
// neighbour's inbox (a registered buffer the neighbour owns and this rank has mapped), and reads
// its incoming chunks from its own inbox, which its left neighbour fills. Only notifications
// travel as messages:
//   READY(u)   right-ward, 8 bytes: unit u's chunk is in the neighbour's inbox slot u % S; the
//              payload is the chunk's byte count, which the reader checks against its own (a
//              mismatch is an error, as a short receive is on the tagged path); READY(0) of a
//              collective's first phase puts the call's fingerprint in front (48 bytes), which
//              the reader compares before anything else (fingerprint_check.h);
//   CREDIT(u)  left-ward, empty: the reader is done with slot u % S, the writer may reuse it.
// A writer fills slot u % S only after CREDIT(u - S), so at most S chunks are in flight per link,
// and the phase ends only after every chunk it wrote was credited: when it ends, the neighbour's
// inbox holds nothing of this collective, and the next collective on the stream starts with
// every slot free, whatever order the ranks finish in.
//
// Ordering: the chunk is written with ordinary (possibly non-temporal) stores and a full fence
// precedes the READY send, so the reader, which touches the slot only after READY arrived
// through UCX's shared-memory queue, sees the whole chunk.
//
// The first window phase of a stream maps the right neighbour's inbox (the handshake): it sends
// its own inbox address and packed memory key to the left neighbour and maps the one that
// arrives from the right. The mapping lives in the stream's resources until the stream goes.
//
// Tags: the 16 task bits hold the notification kind (bit 15 = CREDIT) and (tag_offset + u)
// modulo 0x7ffd; 0x7fff is the handshake's, 0x7ffd the one-shot arena's. Equal tags from one
// peer match in posting order, so the modulus never confuses a reader: fewer than S units are
// ever outstanding per link.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>

#include "collectives/coll_task.h"

namespace zrt {

class RingWindow {
 public:
  static constexpr int kMaxSlots = kWindowMaxSlots;

  // Takes the stream's inbox geometry and the ring neighbours; then chunk_elements is known.
  Status attach(TaskContext& context) {
    return attach(context, ring_mod(context.rank - 1, context.size),
                  ring_mod(context.rank + 1, context.size));
  }
  // The same for a ring over some of the ranks (the two-level collectives' ring inside a host):
  // `right` must be the same rank for every window phase of the stream, since the stream maps
  // one neighbour's inbox.
  Status attach(TaskContext& context, int left, int right);
  // Resets the per-collective state; `units` is how many chunks travel each link. READY(0)
  // carries the call's fingerprint when `fingerprint_first` (a collective's first window phase
  // that stands for the whole call) and the task has one.
  void start(uint64_t units, uint32_t tag_offset) { start(units, tag_offset, tag_offset == 0); }
  void start(uint64_t units, uint32_t tag_offset, bool fingerprint_first);

  // Runs the handshake if the stream has none yet; *ready once the right inbox is mapped.
  Status handshake(TaskContext& context, CollTask& task, bool* ready);

  // Keeps READY receives posted for the next S units to consume, starting at `next`.
  Status post_ready_receives(TaskContext& context, CollTask& task, uint64_t next);
  // Whether unit u's chunk (`bytes` long) has arrived in the inbox and may be consumed now.
  // Idempotent until consumed(u).
  Status arrived(CollTask& task, uint64_t unit, size_t bytes, bool* ok);
  const char* inbox_slot(uint64_t unit) const { return inbox_ + (unit % slots_) * slot_bytes_; }
  // After reading unit u's slot: credits it to the left neighbour and counts the bytes received.
  Status consumed(TaskContext& context, CollTask& task, uint64_t unit, size_t bytes);

  // Whether unit u may be written into the right inbox now (its slot was credited back).
  Status writable(CollTask& task, uint64_t unit, bool* ok);
  char* right_slot(uint64_t unit) const { return right_inbox_ + (unit % slots_) * slot_bytes_; }
  // After writing unit u's chunk (`bytes` long) into right_slot(u): READY to the right neighbour.
  Status written(TaskContext& context, CollTask& task, uint64_t unit, size_t bytes);

  // *done once every written unit was credited and every notification send completed.
  Status drained(CollTask& task, bool* done);

  // Elements per chunk: one slot's worth.
  static size_t chunk_elements(size_t slot_bytes, size_t element_size) {
    return std::max<size_t>(1, slot_bytes / element_size);
  }
  size_t chunk_elements(size_t element_size) const {
    return chunk_elements(slot_bytes_, element_size);
  }
  int left() const { return left_; }
  int right() const { return right_; }

 private:
  uint32_t ready_tag(uint64_t unit) const;
  uint32_t credit_tag(uint64_t unit) const { return 0x8000u | ready_tag(unit); }

  StreamResources* resources_ = nullptr;
  uint64_t slots_ = kWindowSlots;
  size_t slot_bytes_ = kWindowSlotBytes;
  char* inbox_ = nullptr;
  char* right_inbox_ = nullptr;
  int left_ = 0;
  int right_ = 0;
  uint64_t units_ = 0;
  uint32_t tag_offset_ = 0;
  uint64_t next_ready_post_ = 0;  // READY receives posted for units below this
  uint64_t written_ = 0;          // units written (and READY sent) so far
  bool handshake_started_ = false;
  PostedOp key_send_;
  PostedOp key_recv_;
  // READY(0) of a collective's first phase carries the default fingerprint in front of the
  // byte count (fingerprint_check.h): 48 bytes instead of 8. Receives take either.
  struct FingerprintedReady {
    OrderFingerprint fingerprint;
    uint64_t bytes = 0;
  };
  static_assert(sizeof(FingerprintedReady) == sizeof(OrderFingerprint) + sizeof(uint64_t));
  bool carries_fingerprint(uint64_t unit) const { return unit == 0 && fingerprint_first_; }
  bool fingerprint_first_ = false;

  std::array<PostedOp, kMaxSlots> ready_recvs_;
  std::array<FingerprintedReady, kMaxSlots> ready_in_{};
  FingerprintedReady fingerprinted_out_;
  std::array<bool, kMaxSlots> ready_seen_{};
  std::array<PostedOp, kMaxSlots> ready_sends_;
  std::array<uint64_t, kMaxSlots> ready_out_{};
  std::array<PostedOp, kMaxSlots> credit_recvs_;  // slot u % S: CREDIT(u) from the right
  std::array<PostedOp, kMaxSlots> credit_sends_;
};

}  // namespace zrt
