// StreamResources: what the engine keeps per stream for the tasks that run on it. Touched only
// by the thread that runs the stream's tasks: the progress thread, or the submitting thread
// while it runs one inline (engine/inline_run.cc), which excludes the progress thread.
//
// Staging memory is constant-size, from transport.alloc_registered, which admits it against the
// machine's memory and touches it: no collective allocates or faults in fresh pages on the data
// path (docs/ARCHITECTURE.md#measured-costs). The scratch is pooled across the streams of a
// communicator: a stream holds one only while it has collectives to run, so the pool holds as
// many as streams ever ran collectives at the same moment. The window inbox is the stream's own
// (its left neighbour has mapped it) and is allocated at its first collective.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <vector>

#include "engine/fingerprint.h"

namespace zrt {

// Staging bytes per stream: enough for the ring's receive and send slots (8 x 256 KiB) and for
// the small-message all-reduce, which receives every peer's whole input.
inline constexpr size_t kStreamScratchBytes = size_t{4} << 20;

// The window inbox (collectives/ring_window.h): where the left ring neighbour writes this rank's
// incoming chunks with plain stores, in kWindowSlots slots of kWindowSlotBytes. Slots are sized
// to stay in the shared L3 cache between the writer's stores and the reader's loads, so a chunk
// crosses DRAM only as the writer's input and the reader's output. It follows the scratch in
// the same registered allocation, and is used only by window phases, so a neighbour that runs
// ahead into the next collective never writes over staging that this rank still reads.
// Defaults of EngineOptions::window_slots / window_slot_bytes (ZRT_WINDOW_SLOTS,
// ZRT_WINDOW_SLOT_KIB), and the bounds the communicator accepts.
inline constexpr int kWindowSlots = 8;
inline constexpr size_t kWindowSlotBytes = size_t{256} << 10;
inline constexpr int kWindowMaxSlots = 16;
inline constexpr size_t kWindowMinSlotBytes = size_t{4} << 10;
inline constexpr size_t kWindowMaxSlotBytes = size_t{16} << 20;
// Largest packed memory key a neighbour may send in the window handshake (UCX's are ~30 bytes).
inline constexpr size_t kWindowKeyMaxBytes = 1024;

// The one-shot arena (collectives/one_shot.h): per stream, a control block and two slots of a
// 64-byte header and kOneShotSlotBytes of data; one-shot collectives serve only what fits (the
// built-in table's crossovers: 1 MiB of reduce-scatter input, the slot; 128-512 KiB of
// all-reduce input by rank count; an all-gather block up to 1 MiB, and past 8 KiB at N = 2 the
// cma all-gather, which deposits only its header). Only the communicator's first kOneShotStreams
// streams (by creation order, the same on every rank) have one, so that the memory the arenas hold,
// each mapped by every peer, stays constant however many streams a framework creates (1000 streams
// once held 4 GB of arenas).
inline constexpr size_t kOneShotSlotBytes = size_t{1} << 20;
inline constexpr int kOneShotStreams = 4;

// A peer's registered allocation mapped here (Transport::map_peer_registered).
struct MappedSource {
  uint64_t id = 0;        // RegisteredRange::id
  char* local = nullptr;  // null: mapping failed, the kernel reads this allocation
};

struct OneShotArena {
  char* own = nullptr;  // this rank's, from transport.alloc_registered (stream's first one-shot)
  size_t bytes = 0;
  std::vector<char*> ranks;  // every rank's arena as mapped here (own at [rank]), once `ready`
  bool ready = false;
  uint64_t next = 0;                            // the stream's next one-shot collective's number
  std::vector<uint8_t> key;                     // ours (address + packed key), sent to every peer
  std::vector<std::vector<uint8_t>> peer_keys;  // as received, per rank
  // Per rank, the highest `finished` word known without reading it: a peer that published
  // collective k has finished k - 1, so the credit for k + 1 needs no load of its word (one
  // cross-core cache miss fewer per call).
  std::vector<uint64_t> peer_finished;
  // Per rank, the current tiny deposit (at most 8 bytes, collectives/one_shot_deposit.cc),
  // copied out of its 16-byte pair.
  std::vector<uint64_t> tiny_values;
  // The cma all-gather's reads through mappings (collectives/one_shot.h): per rank, its
  // registered allocations that inputs came from, mapped here, and its count of freed ones when
  // they were mapped (another count unmaps them all: one may be freed).
  std::vector<std::vector<MappedSource>> sources;
  std::vector<uint64_t> source_frees;
  // Per parity, the allocation whose key this rank's slot holds, and this rank's count of freed
  // allocations when it was written: the key is written again when either changes (an id may
  // come back once its allocation is freed).
  std::array<uint64_t, 2> slot_source{};
  std::array<uint64_t, 2> slot_source_frees{};
};

// A send to one's own rank, waiting for the matching receive later on the same stream.
struct SelfMessage {
  const void* buffer = nullptr;
  size_t bytes = 0;
};

struct StreamResources {
  void* scratch = nullptr;  // kStreamScratchBytes from the pool while the stream has collectives
  size_t scratch_bytes = 0;
  // Windows (EngineOptions::peer_windows): `inbox` is the stream's own allocation; the right
  // neighbour's inbox is mapped at `right_inbox` by the first window phase of the stream (the
  // handshake), and unmapped when the stream's resources are released.
  bool windows = false;
  int window_slots = 0;
  size_t window_slot_bytes = 0;
  char* inbox = nullptr;
  char* right_inbox = nullptr;
  std::vector<uint8_t> window_key;                            // ours, sent to the left neighbour
  std::array<uint8_t, 8 + kWindowKeyMaxBytes> window_peer{};  // the right's address + key
  std::deque<SelfMessage> self_mailbox;
  // Point-to-point sequence numbers per peer, by direction (see Task::p2p_peer).
  std::vector<uint32_t> p2p_send_seq;
  std::vector<uint32_t> p2p_recv_seq;
  // Atomic: a collective run on the submitting thread (engine/inline_run.cc) counts itself
  // here while the progress thread may read it (EngineImpl::verdict_due).
  std::atomic<uint32_t> collective_seq{0};
  OneShotArena one_shot;
  // The last collective of this stream whose fingerprint every checked peer matched (magic 0
  // before the first): named when a peer falls behind.
  OrderFingerprint last_matched;
};

}  // namespace zrt
