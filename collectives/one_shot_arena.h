// The one-shot arena's layout (one_shot.h): where a rank's control words, slots and headers lie,
// and the atomic accesses to words that other processes read and write through their mappings.
// Shared by the files of OneShotPhase: the handshake, the deposit and the three modes' reads.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "collectives/order_check.h"
#include "engine/stream_resources.h"

namespace zrt::one_shot_arena {

// The arena: the control block, written only by its owner, with `finished` (after its reads) on
// a cache line of its own, the call it runs by another algorithm (announce_call) on the next, the
// tiny deposits' lines and the two-shot's `reduced` words on lines of their own (a peer spins on
// them while this rank writes its slot), then the two slots. A slot's header line holds its
// `published` word with the deposit's call and byte count, and the data follows on the line the
// hardware fetches with it (an aligned pair: slots start 128 bytes apart): a reader's wait and
// its header check cost one miss, where `published` on a control line of its own cost a second,
// serial one per peer and call. A deposit of at most 8 bytes (a vote, a norm, an 8-byte
// all-reduce) lies in the header line's last word: on the next line the reduction's load of it
// was a miss of its own, a large share of an 8-byte all-reduce's samples (perf; measured:
// docs/ARCHITECTURE.md#measured-costs).
inline constexpr size_t kControlBytes = 384;
inline constexpr size_t kFinishedOffset = 0;
inline constexpr size_t kCallOffset = 64;  // the collective number + 1, then its fingerprint
// A tiny deposit's line per parity: its tag word (the collective number + 1 and a hash of the
// call) and its 8 data bytes, stored and loaded as one 16-byte access (tiny_load / tiny_store).
inline constexpr size_t kTinyOffset = 128;
// two-shot: k + 1 once this rank's reduced block of collective k lies in its slot, per parity.
inline constexpr size_t kReducedOffset = 256;
inline constexpr size_t kCallFingerprintWords = (sizeof(OrderFingerprint) + 7) / 8;
static_assert(kCallOffset + sizeof(uint64_t) * (1 + kCallFingerprintWords) <= kControlBytes);
inline constexpr size_t kHeaderBytes = 64;
inline constexpr size_t kPublishedOffset = 0;  // in the slot: k + 1 once deposit k lies behind it
inline constexpr size_t kFingerprintOffset = 8;
inline constexpr size_t kBytesOffset = kFingerprintOffset + sizeof(OrderFingerprint);
inline constexpr size_t kInlineOffset = kBytesOffset + sizeof(uint64_t);
inline constexpr size_t kInlineBytes = kHeaderBytes - kInlineOffset;
// A cma deposit (one_shot.h) marks its byte count, so that a peer in the other mode fails on the
// header check, and puts its input's address where an inline deposit would lie.
inline constexpr uint64_t kPeerReadMark = uint64_t{1} << 63;
// A two-shot deposit marks its byte count too: a one-shot peer would never publish a reduced
// block, and a two-shot one would wait for it.
inline constexpr uint64_t kTwoShotMark = uint64_t{1} << 62;
inline constexpr uint64_t kModeMarks = kPeerReadMark | kTwoShotMark;
inline constexpr size_t kSourceOffset = kInlineOffset;
static_assert(kInlineOffset % 8 == 0 && kInlineBytes >= 8);
// Behind a cma deposit's header, on the line a reader fetches with it: the registered allocation
// the input lies in (id 0: none; the peers read it through the kernel) and the owner's count of
// freed allocations; then, written only when the slot's allocation changes, the allocation's
// packed key (its length, then its bytes), which a peer maps once.
struct SourceLine {
  uint64_t id;
  uint64_t frees;
  uint64_t base;
  uint64_t length;
};
inline constexpr size_t kSourceLineOffset = kHeaderBytes;
inline constexpr size_t kSourceKeyOffset = kSourceLineOffset + sizeof(SourceLine);
inline constexpr size_t kSourceKeyMaxBytes = 512;
static_assert(sizeof(SourceLine) + sizeof(uint64_t) + kSourceKeyMaxBytes <= kOneShotSlotBytes);
inline constexpr size_t kLinePair = 128;
inline constexpr size_t kSlotStride =
    (kHeaderBytes + kOneShotSlotBytes + kLinePair - 1) / kLinePair * kLinePair;
static_assert(kControlBytes % kLinePair == 0);
inline constexpr size_t kArenaBytes = kControlBytes + 2 * kSlotStride;

inline uint64_t* finished_word(char* arena) {
  return reinterpret_cast<uint64_t*>(arena + kFinishedOffset);
}
inline char* tiny_pair(char* arena, uint64_t parity) {
  return arena + kTinyOffset + parity * 64;
}
inline uint64_t* reduced_word(char* arena, uint64_t parity) {
  return reinterpret_cast<uint64_t*>(arena + kReducedOffset + parity * 64);
}
inline uint64_t* call_word(char* arena) {
  return reinterpret_cast<uint64_t*>(arena + kCallOffset);
}
inline uint64_t* call_fingerprint_word(char* arena, size_t i) {
  return reinterpret_cast<uint64_t*>(arena + kCallOffset) + 1 + i;
}
inline char* slot(char* arena, uint64_t parity) {
  return arena + kControlBytes + parity * kSlotStride;
}
inline uint64_t* published_word(char* arena, uint64_t parity) {
  return reinterpret_cast<uint64_t*>(slot(arena, parity) + kPublishedOffset);
}
// Where a deposit of `bytes` starts in its slot; alike on every rank, which checks the bytes.
inline size_t data_offset(size_t bytes) {
  return bytes <= kInlineBytes ? kInlineOffset : kHeaderBytes;
}
// Where rank `rank`'s deposit of `bytes` lies in its arena, through this rank's mapping of it.
inline char* slot_data(const std::vector<char*>& ranks, int rank, uint64_t parity, size_t bytes) {
  return slot(ranks[rank], parity) + data_offset(bytes);
}
// The peers' words are read and written by other processes through their own mappings.
inline uint64_t load_acquire(uint64_t* word) {
  return std::atomic_ref<uint64_t>(*word).load(std::memory_order_acquire);
}
inline void store_release(uint64_t* word, uint64_t value) {
  std::atomic_ref<uint64_t>(*word).store(value, std::memory_order_release);
}
inline uint64_t load_relaxed(uint64_t* word) {
  return std::atomic_ref<uint64_t>(*word).load(std::memory_order_relaxed);
}
inline void store_relaxed(uint64_t* word, uint64_t value) {
  std::atomic_ref<uint64_t>(*word).store(value, std::memory_order_relaxed);
}

}  // namespace zrt::one_shot_arena
