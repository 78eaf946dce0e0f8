#include "collectives/one_shot.h"

#include <algorithm>
#include <atomic>
#include <cstring>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include <fmt/format.h>

#include "collectives/order_check.h"
#include "collectives/peer_memory.h"
#include "lib/core/log.h"

namespace zrt {
namespace {

// The arena (one_shot.h): the control block, written only by its owner, with `finished` (after
// its reads) on a cache line of its own, the call it runs by another algorithm (announce_call)
// on the next, the tiny deposits' lines and the two-shot's `reduced` words on lines of their
// own (a peer spins on them while this rank writes its slot), then the two slots. A slot's header
// line holds its `published` word with the deposit's call and byte count, and the data follows on
// the line the hardware fetches with it (an aligned pair: slots start 128 bytes apart): a reader's
// wait and its header check cost one miss, where `published` on a control line of its own cost a
// second, serial one per peer and call. A deposit of at most 8 bytes (a vote, a norm, an 8-byte
// all-reduce) lies in the header line's last word: the reduction's load of it was a miss of its
// own, 17% of an 8-byte all-reduce's samples (perf).
constexpr size_t kControlBytes = 384;
constexpr size_t kFinishedOffset = 0;
constexpr size_t kCallOffset = 64;  // the collective number + 1, then its fingerprint
// A tiny deposit's line per parity: its tag word (the collective number + 1 and a hash of the
// call) and its 8 data bytes, stored and loaded as one 16-byte access (tiny_load / tiny_store).
constexpr size_t kTinyOffset = 128;
// two-shot: k + 1 once this rank's reduced block of collective k lies in its slot, per parity.
constexpr size_t kReducedOffset = 256;
constexpr size_t kCallFingerprintWords = (sizeof(OrderFingerprint) + 7) / 8;
static_assert(kCallOffset + sizeof(uint64_t) * (1 + kCallFingerprintWords) <= kControlBytes);
constexpr size_t kHeaderBytes = 64;
constexpr size_t kPublishedOffset = 0;  // in the slot: k + 1 once deposit k lies behind it
constexpr size_t kFingerprintOffset = 8;
constexpr size_t kBytesOffset = kFingerprintOffset + sizeof(OrderFingerprint);
constexpr size_t kInlineOffset = kBytesOffset + sizeof(uint64_t);
constexpr size_t kInlineBytes = kHeaderBytes - kInlineOffset;
// A cma deposit (one_shot.h) marks its byte count, so that a peer in the other mode fails on the
// header check, and puts its input's address where an inline deposit would lie.
constexpr uint64_t kPeerReadMark = uint64_t{1} << 63;
// A two-shot deposit marks its byte count too: a one-shot peer would never publish a reduced
// block, and a two-shot one would wait for it.
constexpr uint64_t kTwoShotMark = uint64_t{1} << 62;
constexpr uint64_t kModeMarks = kPeerReadMark | kTwoShotMark;
constexpr size_t kSourceOffset = kInlineOffset;
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
constexpr size_t kSourceLineOffset = kHeaderBytes;
constexpr size_t kSourceKeyOffset = kSourceLineOffset + sizeof(SourceLine);
constexpr size_t kSourceKeyMaxBytes = 512;
static_assert(sizeof(SourceLine) + sizeof(uint64_t) + kSourceKeyMaxBytes <= kOneShotSlotBytes);
constexpr size_t kLinePair = 128;
constexpr size_t kSlotStride =
    (kHeaderBytes + kOneShotSlotBytes + kLinePair - 1) / kLinePair * kLinePair;
static_assert(kControlBytes % kLinePair == 0);
constexpr size_t kArenaBytes = kControlBytes + 2 * kSlotStride;
// How often a wait looks at the call a peer announced (check_announced_call), and at which look
// first: a look is a miss on the peer's control line, which on the first look lay on the path
// of every call whose peer was a moment behind.
constexpr uint32_t kLooksPerCallCheck = 64;
constexpr uint32_t kFirstCallCheckLook = kLooksPerCallCheck - 1;
// Task bits of the handshake's key messages.
constexpr uint32_t kKeyTag = 0x7ffd;

uint64_t* finished_word(char* arena) {
  return reinterpret_cast<uint64_t*>(arena + kFinishedOffset);
}
char* tiny_pair(char* arena, uint64_t parity) {
  return arena + kTinyOffset + parity * 64;
}
uint64_t* reduced_word(char* arena, uint64_t parity) {
  return reinterpret_cast<uint64_t*>(arena + kReducedOffset + parity * 64);
}
uint64_t* call_word(char* arena) {
  return reinterpret_cast<uint64_t*>(arena + kCallOffset);
}
uint64_t* call_fingerprint_word(char* arena, size_t i) {
  return reinterpret_cast<uint64_t*>(arena + kCallOffset) + 1 + i;
}
char* slot(char* arena, uint64_t parity) {
  return arena + kControlBytes + parity * kSlotStride;
}
uint64_t* published_word(char* arena, uint64_t parity) {
  return reinterpret_cast<uint64_t*>(slot(arena, parity) + kPublishedOffset);
}
// Where a deposit of `bytes` starts in its slot; alike on every rank, which checks the bytes.
size_t data_offset(size_t bytes) {
  return bytes <= kInlineBytes ? kInlineOffset : kHeaderBytes;
}
// Where rank `rank`'s deposit of `bytes` lies in its arena, through this rank's mapping of it.
char* slot_data(const std::vector<char*>& ranks, int rank, uint64_t parity, size_t bytes) {
  return slot(ranks[rank], parity) + data_offset(bytes);
}
// The peers' words are read and written by other processes through their own mappings.
uint64_t load_acquire(uint64_t* word) {
  return std::atomic_ref<uint64_t>(*word).load(std::memory_order_acquire);
}
void store_release(uint64_t* word, uint64_t value) {
  std::atomic_ref<uint64_t>(*word).store(value, std::memory_order_release);
}
uint64_t load_relaxed(uint64_t* word) {
  return std::atomic_ref<uint64_t>(*word).load(std::memory_order_relaxed);
}
void store_relaxed(uint64_t* word, uint64_t value) {
  std::atomic_ref<uint64_t>(*word).store(value, std::memory_order_relaxed);
}

// Tiny deposits (at most 8 bytes, not cma) travel with their flag in one 16-byte store, the
// shape of NCCL's LL protocol: processors with AVX carry out aligned 16-byte loads and stores
// atomically (Intel SDM vol. 3A 9.1.1; AMD APM vol. 2 7.3.2), so a reader that sees the tag sees
// the data, and touches one line of the writer's: a header with `published`, fingerprint and
// byte count written as separate stores on the line a reader spins on cost the 8-byte
// all-reduce a second transfer of that line per call (perf: half its samples outside the waits
// stalled on the first load of a peer's data after `published`). Elsewhere the header path.
bool tiny_supported() {
#if defined(__x86_64__)
  static const bool avx = __builtin_cpu_supports("avx");
  return avx;
#else
  return false;
#endif
}

struct TinyPair {
  uint64_t tag;
  uint64_t data;
};

// Inline assembly, so that the compiler neither splits the access into two 8-byte ones (which
// it did with the intrinsics, a reader then seeing a tag before its data) nor moves memory
// accesses across it.
TinyPair tiny_load(const char* pair) {
  TinyPair value{0, 0};
#if defined(__x86_64__)
  __m128i bits;
  asm volatile("movdqa %1, %0"
               : "=x"(bits)
               : "m"(*reinterpret_cast<const __m128i*>(pair))
               : "memory");
  value.tag = static_cast<uint64_t>(_mm_cvtsi128_si64(bits));
  value.data = static_cast<uint64_t>(_mm_cvtsi128_si64(_mm_unpackhi_epi64(bits, bits)));
#else
  (void)pair;
#endif
  return value;
}

void tiny_store(char* pair, const TinyPair& value) {
#if defined(__x86_64__)
  const __m128i bits =
      _mm_set_epi64x(static_cast<long long>(value.data), static_cast<long long>(value.tag));
  asm volatile("movdqa %1, %0" : "=m"(*reinterpret_cast<__m128i*>(pair)) : "x"(bits) : "memory");
#else
  (void)pair;
  (void)value;
#endif
}

// The tag: the collective number + 1 in the low half, a hash of what ranks must agree on (the
// fields fingerprints_match compares, and the byte count) in the high half. A peer whose tag
// has our number but another hash runs another call: the header then names both.
uint64_t tiny_tag(uint64_t sequence, const OrderFingerprint& call, uint64_t bytes_word) {
  uint64_t h = 0x9e3779b97f4a7c15ull;
  auto mix = [&h](uint64_t v) {
    h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
    h *= 0xff51afd7ed558ccdull;
  };
  mix(call.count);
  mix(uint64_t{call.kind} | uint64_t{call.dtype} << 8 | uint64_t{call.op} << 16 |
      uint64_t{call.purpose} << 24);
  mix(uint64_t{static_cast<uint32_t>(call.root)} << 32 | static_cast<uint32_t>(call.purpose_id));
  mix(bytes_word);
  return ((sequence + 1) & 0xffffffffull) | (h ^ h >> 32) << 32;
}

// How a deposit's byte-count word says it is read, for messages.
const char* mode_name(uint64_t bytes_word) {
  if ((bytes_word & kPeerReadMark) != 0) return " by cma";
  if ((bytes_word & kTwoShotMark) != 0) return " by two-shot";
  return "";
}

}  // namespace

size_t OneShotPhase::deposit_bytes(zrt_coll_kind_t kind, size_t count, size_t element_size,
                                   int size) {
  const size_t bytes = count * element_size;
  return kind == ZRT_COLL_REDUCE_SCATTER ? bytes * static_cast<size_t>(size) : bytes;
}

uint64_t OneShotPhase::expected_bytes_word() const {
  return deposit_bytes_ | (peer_pids_ != nullptr ? kPeerReadMark : 0) |
         (two_shot_ ? kTwoShotMark : 0);
}

Status OneShotPhase::start(TaskContext& context, CollTask&) {
  error_ = Status::ok();
  next_peer_ = 0;
  unpublished_looks_ = 0;
  keys_posted_ = false;
  if (context.resources == nullptr) {
    return Status(ZRT_INTERNAL_ERROR, "one-shot: the stream's resources are missing");
  }
  deposit_bytes_ = deposit_bytes(kind_, count_, spec_.element_size, context.size);
  if (peer_pids_ != nullptr &&
      (kind_ != ZRT_COLL_ALL_GATHER || peer_pids_->size() != static_cast<size_t>(context.size))) {
    return Status(ZRT_INTERNAL_ERROR, "one-shot: cma is an all-gather with every rank's pid");
  }
  if (two_shot_ && kind_ != ZRT_COLL_ALL_REDUCE) {
    return Status(ZRT_INTERNAL_ERROR, "one-shot: two-shot is an all-reduce");
  }
  if (peer_pids_ == nullptr && deposit_bytes_ > kOneShotSlotBytes) {
    return Status::error(ZRT_INTERNAL_ERROR, "one-shot: {} bytes exceed the arena slot's {}",
                         deposit_bytes_, kOneShotSlotBytes);
  }
  OneShotArena& arena = context.resources->one_shot;
  sequence_ = arena.next++;
  step_ = arena.ready ? Step::kCredit : Step::kHandshake;
  // A two-shot rank writes its reduced block into its slot, where a tiny deposit has no room.
  tiny_ =
      peer_pids_ == nullptr && !two_shot_ && deposit_bytes_ <= sizeof(uint64_t) && tiny_supported();
  return Status::ok();
}

Status OneShotPhase::progress(TaskContext& context, CollTask& task, bool* done) {
  if (!error_.is_ok()) return error_;
  Status status = move(context, task, done);
  if (!status.is_ok()) error_ = status;
  return status;
}

Status OneShotPhase::move(TaskContext& context, CollTask& task, bool* done) {
  if (step_ == Step::kHandshake) {
    bool ready = false;
    ZRT_RETURN_IF_ERROR(handshake(context, task, &ready));
    if (!ready) return Status::ok();
    step_ = Step::kCredit;
  }
  if (step_ == Step::kCredit) {
    if (!credited(context, task)) return Status::ok();
    ZRT_RETURN_IF_ERROR(deposit(context, task));
    step_ = Step::kWait;
  }
  if (step_ == Step::kWait) {
    bool all = false;
    ZRT_RETURN_IF_ERROR(published(context, task, &all));
    if (!all) return Status::ok();
    if (two_shot_) {
      reduce_own_block(context, task);
      next_peer_ = 1;
      step_ = Step::kShare;
    } else {
      ZRT_RETURN_IF_ERROR(assemble(context));
      task.add_received(static_cast<uint64_t>(context.size - 1) * count_ * spec_.element_size);
      finish_reads(context, task);
    }
  }
  if (step_ == Step::kShare) {
    bool all = false;
    copy_reduced_blocks(context, task, &all);
    if (!all) return Status::ok();
    finish_reads(context, task);
  }
  if (step_ == Step::kDrain) {
    if (!drained(context, task)) return Status::ok();
    step_ = Step::kDone;
  }
  *done = true;
  return Status::ok();
}

void OneShotPhase::finish_reads(TaskContext& context, CollTask& task) {
  store_release(finished_word(context.resources->one_shot.own), sequence_ + 1);
  task.advanced();
  next_peer_ = 0;
  step_ = peer_pids_ != nullptr ? Step::kDrain : Step::kDone;
}

// Exchanges the arenas' keys with every peer and maps theirs; the stream keeps the mappings.
Status OneShotPhase::handshake(TaskContext& context, CollTask& task, bool* ready) {
  OneShotArena& arena = context.resources->one_shot;
  const int n = context.size;
  *ready = false;
  if (!keys_posted_) {
    keys_posted_ = true;
    if (arena.own == nullptr) {
      void* memory = nullptr;
      ZRT_RETURN_IF_ERROR(context.transport.alloc_registered(kArenaBytes, &memory)
                              .with_context(fmt::format("one-shot arena of stream {} ({} bytes)",
                                                        context.stream_index, kArenaBytes)));
      arena.own = static_cast<char*>(memory);
      arena.bytes = kArenaBytes;
      std::memset(arena.own, 0, kControlBytes);  // nothing finished, no call announced
      for (uint64_t parity = 0; parity < 2; ++parity) {
        std::memset(slot(arena.own, parity), 0, kHeaderBytes);  // nothing published
      }
    }
    std::vector<uint8_t> key;
    ZRT_RETURN_IF_ERROR(
        context.transport.pack_registered_key(arena.own, &key).with_context("one-shot handshake"));
    const uint64_t address = reinterpret_cast<uintptr_t>(arena.own);
    arena.key.resize(sizeof(address) + key.size());
    std::memcpy(arena.key.data(), &address, sizeof(address));
    std::memcpy(arena.key.data() + sizeof(address), key.data(), key.size());
    arena.peer_keys.assign(n, std::vector<uint8_t>(sizeof(address) + kWindowKeyMaxBytes));
    arena.ranks.assign(n, nullptr);
    arena.peer_finished.assign(n, 0);
    arena.tiny_values.assign(n, 0);
    arena.sources.assign(n, {});
    arena.source_frees.assign(n, 0);
    arena.slot_source = {};
    arena.slot_source_frees = {};
    key_sends_.assign(n, PostedOp{});
    key_recvs_.assign(n, PostedOp{});
    for (int peer = 0; peer < n; ++peer) {
      if (peer == context.rank) continue;
      ZRT_RETURN_IF_ERROR(task.post_recv(context, peer, kKeyTag, arena.peer_keys[peer].data(),
                                         arena.peer_keys[peer].size(), &key_recvs_[peer]));
    }
    for (int peer = 0; peer < n; ++peer) {
      if (peer == context.rank) continue;
      ZRT_RETURN_IF_ERROR(task.post_send(context, peer, kKeyTag, arena.key.data(), arena.key.size(),
                                         &key_sends_[peer], /*data=*/false));
    }
  }
  for (int peer = 0; peer < n; ++peer) {
    PostedOp& recv = key_recvs_[peer];
    if (peer == context.rank || !recv.posted) continue;
    if (!recv.finished()) {
      task.note_waiting(peer);
      return Status::ok();
    }
    recv.posted = false;
    if (!recv.completion.status.is_ok()) {
      return recv.completion.status.with_context(
          fmt::format("one-shot handshake: receive from rank {}", peer));
    }
    const size_t got = recv.completion.bytes;
    if (got <= sizeof(uint64_t)) {
      return Status::error(ZRT_REMOTE_ERROR, "one-shot handshake: {} bytes from rank {}", got,
                           peer);
    }
    const std::vector<uint8_t>& received = arena.peer_keys[peer];
    uint64_t address = 0;
    std::memcpy(&address, received.data(), sizeof(address));
    const std::vector<uint8_t> key(received.begin() + sizeof(address),
                                   received.begin() + static_cast<long>(got));
    void* mapped = nullptr;
    ZRT_RETURN_IF_ERROR(
        context.transport.map_peer_registered(peer, key, address, &mapped)
            .with_context(fmt::format("one-shot handshake: mapping rank {}'s arena (ZRT_ALGO or "
                                      "ZRT_ALGO_TABLE can choose another algorithm)",
                                      peer)));
    arena.ranks[peer] = static_cast<char*>(mapped);
    task.advanced();
  }
  for (int peer = 0; peer < n; ++peer) {
    if (peer == context.rank) continue;
    ZRT_RETURN_IF_ERROR(task.collect(&key_sends_[peer], peer, true, 0));
    if (key_sends_[peer].busy()) {
      task.note_waiting(peer);
      return Status::ok();
    }
  }
  arena.ranks[context.rank] = arena.own;
  arena.ready = true;
  *ready = true;
  return Status::ok();
}

// Whether every peer has finished collective k - 2, whose data this rank's slot k % 2 holds.
bool OneShotPhase::credited(TaskContext& context, CollTask& task) {
  if (sequence_ < 2) return true;
  OneShotArena& arena = context.resources->one_shot;
  for (int peer = 0; peer < context.size; ++peer) {
    if (peer == context.rank || arena.peer_finished[peer] >= sequence_ - 1) continue;
    arena.peer_finished[peer] = load_acquire(finished_word(arena.ranks[peer]));
    if (arena.peer_finished[peer] < sequence_ - 1) {
      task.note_waiting(peer);
      return false;
    }
  }
  return true;
}

Status OneShotPhase::deposit(TaskContext& context, CollTask& task) {
  OneShotArena& arena = context.resources->one_shot;
  const uint64_t parity = sequence_ & 1;
  char* mine = slot(arena.own, parity);
  const OrderFingerprint fingerprint =
      task.fingerprint_on() ? task.fingerprint() : OrderFingerprint{};
  const uint64_t bytes = expected_bytes_word();
  std::memcpy(mine + kFingerprintOffset, &fingerprint, sizeof(fingerprint));
  std::memcpy(mine + kBytesOffset, &bytes, sizeof(bytes));
  if (tiny_) {
    tiny_tag_ = tiny_tag(sequence_, fingerprint, bytes);
    TinyPair pair{tiny_tag_, 0};
    if (deposit_bytes_ > 0) std::memcpy(&pair.data, input_, deposit_bytes_);
    arena.tiny_values[context.rank] = pair.data;
    tiny_store(tiny_pair(arena.own, parity), pair);
  } else if (peer_pids_ != nullptr) {
    const uint64_t source = reinterpret_cast<uintptr_t>(input_);
    std::memcpy(mine + kSourceOffset, &source, sizeof(source));
    ZRT_RETURN_IF_ERROR(describe_source(context, parity));
  } else if (deposit_bytes_ > 0) {
    std::memcpy(mine + data_offset(deposit_bytes_), input_, deposit_bytes_);
    arena.slot_source[parity] = 0;  // the data lies over the key: a cma call writes it again
  }
  store_release(published_word(arena.own, parity), sequence_ + 1);
  if (two_shot_) {
    // Every peer reads its own block of the input (its reduced block: reduce_own_block).
    const BlockLayout layout = BlockLayout::split(count_, context.size);
    task.add_sent(deposit_bytes_ - layout.length(context.rank) * spec_.element_size);
  } else {
    // Every peer reads the contribution (of a reduce-scatter, its own block of it).
    const uint64_t per_peer =
        kind_ == ZRT_COLL_REDUCE_SCATTER ? count_ * spec_.element_size : deposit_bytes_;
    task.add_sent(static_cast<uint64_t>(context.size - 1) * per_peer);
  }
  task.advanced();
  return Status::ok();
}

Status OneShotPhase::describe_source(TaskContext& context, uint64_t parity) {
  OneShotArena& arena = context.resources->one_shot;
  char* mine = slot(arena.own, parity);
  const size_t bytes = count_ * spec_.element_size;
  RegisteredRange range;
  SourceLine line{};
  if (context.transport.find_registered(input_, std::max<size_t>(bytes, 1), &range)) {
    if (arena.slot_source[parity] != range.id || arena.slot_source_frees[parity] != range.frees) {
      std::vector<uint8_t> key;
      ZRT_RETURN_IF_ERROR(
          context.transport.pack_registered_key(reinterpret_cast<const void*>(range.base), &key)
              .with_context("cma all-gather: describing the input's registered allocation"));
      if (key.size() > kSourceKeyMaxBytes) {
        return Status::error(ZRT_INTERNAL_ERROR, "cma all-gather: a memory key of {} bytes",
                             key.size());
      }
      const uint64_t key_bytes = key.size();
      std::memcpy(mine + kSourceKeyOffset, &key_bytes, sizeof(key_bytes));
      std::memcpy(mine + kSourceKeyOffset + sizeof(key_bytes), key.data(), key.size());
      arena.slot_source[parity] = range.id;
      arena.slot_source_frees[parity] = range.frees;
    }
    line = SourceLine{range.id, range.frees, range.base, range.length};
  } else {
    line.frees = range.frees;
  }
  std::memcpy(mine + kSourceLineOffset, &line, sizeof(line));
  return Status::ok();
}

// Advances over the peers that published collective k, checking each one's header. A peer
// publishes k only after it finished k - 1 (its `finished` >= k), which the next credit uses.
Status OneShotPhase::published(TaskContext& context, CollTask& task, bool* all) {
  OneShotArena& own = context.resources->one_shot;
  const uint64_t parity = sequence_ & 1;
  *all = false;
  for (; next_peer_ < context.size; ++next_peer_) {
    if (next_peer_ == context.rank) continue;
    char* arena = own.ranks[next_peer_];
    if (tiny_) {
      const TinyPair pair = tiny_load(tiny_pair(arena, parity));
      if (pair.tag != tiny_tag_) {
        // Our number with another hash: another call, which the header names.
        if ((pair.tag ^ tiny_tag_) << 32 == 0) {
          ZRT_RETURN_IF_ERROR(check_header(context, task, next_peer_, slot(arena, parity)));
          return Status::error(ZRT_INVALID_USAGE,
                               "one-shot: rank {} runs another call as collective {} of stream {}",
                               next_peer_, sequence_, context.stream_index);
        }
        ZRT_RETURN_IF_ERROR(unpublished(context, task, arena, parity));
        return Status::ok();
      }
      own.tiny_values[next_peer_] = pair.data;
    } else if (load_acquire(published_word(arena, parity)) != sequence_ + 1) {
      ZRT_RETURN_IF_ERROR(unpublished(context, task, arena, parity));
      return Status::ok();
    } else {
      ZRT_RETURN_IF_ERROR(check_header(context, task, next_peer_, slot(arena, parity)));
    }
    own.peer_finished[next_peer_] = std::max(own.peer_finished[next_peer_], sequence_);
    task.advanced();
  }
  *all = true;
  return Status::ok();
}

// A peer that has not published (as this rank expects) may run this collective by another
// algorithm, or, waited for as a tiny deposit, deposit by the header: both are mismatches,
// looked for every 64th look only (on every look the announcement took 9% of an 8-byte
// all-reduce's time, perf).
Status OneShotPhase::unpublished(TaskContext& context, CollTask& task, char* arena,
                                 uint64_t parity) {
  if (unpublished_looks_++ % kLooksPerCallCheck == kFirstCallCheckLook) {
    if (task.fingerprint_on() && !after_announced_phase_) {
      ZRT_RETURN_IF_ERROR(check_announced_call(task, next_peer_, arena));
    }
    if (tiny_ && load_acquire(published_word(arena, parity)) == sequence_ + 1) {
      ZRT_RETURN_IF_ERROR(check_header(context, task, next_peer_, slot(arena, parity)));
    }
  }
  task.note_waiting(next_peer_);
  return Status::ok();
}

Status OneShotPhase::check_header(TaskContext& context, CollTask& task, int peer,
                                  const char* header) const {
  if (task.fingerprint_on()) {
    OrderFingerprint fingerprint;
    std::memcpy(&fingerprint, header + kFingerprintOffset, sizeof(fingerprint));
    ZRT_RETURN_IF_ERROR(task.check_fingerprint(&fingerprint, sizeof(OrderFingerprint), peer));
  }
  uint64_t bytes = 0;
  std::memcpy(&bytes, header + kBytesOffset, sizeof(bytes));
  if (bytes != expected_bytes_word()) {
    return Status::error(
        ZRT_REMOTE_ERROR,
        "one-shot: rank {} deposited {} bytes{} for collective {} of stream {}, "
        "expected {}{} (mismatched collective arguments or algorithm settings across ranks?)",
        peer, bytes & ~kModeMarks, mode_name(bytes), sequence_, context.stream_index,
        deposit_bytes_, mode_name(expected_bytes_word()));
  }
  return Status::ok();
}

void OneShotPhase::announce_call(TaskContext& context, const OrderFingerprint& call) {
  if (context.resources == nullptr || context.resources->one_shot.own == nullptr) return;
  char* arena = context.resources->one_shot.own;
  uint64_t words[kCallFingerprintWords] = {};
  std::memcpy(words, &call, sizeof(call));
  for (size_t i = 0; i < kCallFingerprintWords; ++i) {
    store_relaxed(call_fingerprint_word(arena, i), words[i]);
  }
  store_release(call_word(arena), uint64_t{call.sequence} + 1);
}

// A peer that has not published this collective may be running it by another algorithm: then it
// announced the call, which differs from ours (the table chose by its arguments) or, if equal,
// its algorithm settings do. Read like a sequence lock: the words count only if the collective
// number was the same before and after them.
Status OneShotPhase::check_announced_call(CollTask& task, int peer, char* arena) const {
  const uint32_t sequence = task.fingerprint().sequence;
  const uint64_t announced = load_acquire(call_word(arena));
  if (announced != uint64_t{sequence} + 1) return Status::ok();
  uint64_t words[kCallFingerprintWords];
  for (size_t i = 0; i < kCallFingerprintWords; ++i) {
    words[i] = load_relaxed(call_fingerprint_word(arena, i));
  }
  std::atomic_thread_fence(std::memory_order_acquire);
  if (load_relaxed(call_word(arena)) != announced) return Status::ok();
  ZRT_RETURN_IF_ERROR(task.check_fingerprint(words, sizeof(OrderFingerprint), peer));
  return Status::error(ZRT_INVALID_USAGE,
                       "one-shot: rank {} runs collective #{} of stream {} ({}) by another "
                       "algorithm than this rank's one-shot (ZRT_ALGO or ZRT_ALGO_TABLE differ "
                       "across ranks?)",
                       peer, sequence, task.fingerprint().stream,
                       describe_fingerprint(task.fingerprint()));
}

void OneShotPhase::reduce_in_ring_order(TaskContext& context, int block, size_t first, size_t count,
                                        char* out) const {
  if (count == 0) return;
  const uint64_t parity = sequence_ & 1;
  const int n = context.size;
  const size_t offset = first * spec_.element_size;
  auto input = [&](int step) {  // the input the ring adds at `step` (1: the block's first)
    return deposit_of(context, ring_mod(block + step, n), parity) + offset;
  };
  reduce_chunk(spec_, input(1), spec_.scale, input(2), spec_.scale, out, count);
  for (int step = 3; step <= n; ++step) {
    reduce_chunk(spec_, out, 1.0, input(step), spec_.scale, out, count);
  }
}

void OneShotPhase::reduce_in_rank_order(TaskContext& context, size_t first, size_t count,
                                        char* out) const {
  if (count == 0) return;
  const uint64_t parity = sequence_ & 1;
  const size_t offset = first * spec_.element_size;
  reduce_chunk(spec_, deposit_of(context, 0, parity) + offset, spec_.scale,
               deposit_of(context, 1, parity) + offset, spec_.scale, out, count);
  for (int rank = 2; rank < context.size; ++rank) {
    reduce_chunk(spec_, out, 1.0, deposit_of(context, rank, parity) + offset, spec_.scale, out,
                 count);
  }
}

void OneShotPhase::reduce_own_block(TaskContext& context, CollTask& task) {
  const int rank = context.rank;
  const BlockLayout layout = BlockLayout::split(count_, context.size);
  const size_t first = layout.offset(rank);
  const size_t bytes = layout.length(rank) * spec_.element_size;
  char* out = output_ + first * spec_.element_size;
  if (order_ == OneShotOrder::kRing) {
    reduce_in_ring_order(context, rank, first, layout.length(rank), out);
  } else {
    reduce_in_rank_order(context, first, layout.length(rank), out);
  }
  // Over this rank's input block: the peers read only their own blocks of this slot.
  OneShotArena& arena = context.resources->one_shot;
  const uint64_t parity = sequence_ & 1;
  if (bytes > 0) {
    std::memcpy(slot_data(arena.ranks, rank, parity, deposit_bytes_) + first * spec_.element_size,
                out, bytes);
  }
  store_release(reduced_word(arena.own, parity), sequence_ + 1);
  task.add_received(static_cast<uint64_t>(context.size - 1) * bytes);
  task.add_sent(static_cast<uint64_t>(context.size - 1) * bytes);
  task.advanced();
}

// From the next rank on, as read_peers does; `next_peer_` counts the steps from 1.
void OneShotPhase::copy_reduced_blocks(TaskContext& context, CollTask& task, bool* all) {
  OneShotArena& arena = context.resources->one_shot;
  const uint64_t parity = sequence_ & 1;
  const BlockLayout layout = BlockLayout::split(count_, context.size);
  *all = false;
  for (; next_peer_ < context.size; ++next_peer_) {
    const int peer = ring_mod(context.rank + next_peer_, context.size);
    if (load_acquire(reduced_word(arena.ranks[peer], parity)) != sequence_ + 1) {
      task.note_waiting(peer);
      return;
    }
    const size_t at = layout.offset(peer) * spec_.element_size;
    const size_t bytes = layout.length(peer) * spec_.element_size;
    if (bytes > 0) {
      std::memcpy(output_ + at, slot_data(arena.ranks, peer, parity, deposit_bytes_) + at, bytes);
    }
    task.add_received(bytes);
    task.advanced();
  }
  *all = true;
}

Status OneShotPhase::read_peers(TaskContext& context) {
  const std::vector<char*>& ranks = context.resources->one_shot.ranks;
  const uint64_t parity = sequence_ & 1;
  const size_t bytes = count_ * spec_.element_size;
  // From the next rank on, so that N - 1 readers of one input do not all start on it at once.
  for (int step = 1; step < context.size; ++step) {
    const int peer = ring_mod(context.rank + step, context.size);
    const char* peer_slot = slot(ranks[peer], parity);
    uint64_t source = 0;
    std::memcpy(&source, peer_slot + kSourceOffset, sizeof(source));
    char* out = output_ + static_cast<size_t>(peer) * bytes;
    const char* mapped = nullptr;
    Status status = mapped_source(context, peer, peer_slot, source, bytes, &mapped);
    if (status.is_ok() && mapped != nullptr) {
      std::memcpy(out, mapped, bytes);
    } else if (status.is_ok()) {
      status = read_peer_memory((*peer_pids_)[peer], source, out, bytes, peer);
    }
    ZRT_RETURN_IF_ERROR(status.with_context(fmt::format(
        "cma all-gather, collective {} of stream {}", sequence_, context.stream_index)));
  }
  char* own = output_ + static_cast<size_t>(context.rank) * bytes;
  if (own != input_) std::memcpy(own, input_, bytes);
  return Status::ok();
}

// Where `peer`'s input at `source` is mapped here, or null when it is not in registered memory
// or the peer's memory cannot be mapped (then the kernel reads it). Mappings of a peer whose
// count of freed allocations changed are dropped first: one may be of a buffer it freed.
Status OneShotPhase::mapped_source(TaskContext& context, int peer, const char* peer_slot,
                                   uint64_t source, size_t bytes, const char** mapped) {
  OneShotArena& arena = context.resources->one_shot;
  SourceLine line;
  std::memcpy(&line, peer_slot + kSourceLineOffset, sizeof(line));
  std::vector<MappedSource>& sources = arena.sources[peer];
  if (arena.source_frees[peer] != line.frees) {
    for (const MappedSource& old : sources) {
      if (old.local != nullptr) context.transport.unmap_peer_registered(old.local);
    }
    sources.clear();
    arena.source_frees[peer] = line.frees;
  }
  *mapped = nullptr;
  if (line.id == 0) return Status::ok();
  if (source < line.base || source - line.base > line.length ||
      bytes > line.length - (source - line.base)) {
    return Status::error(ZRT_REMOTE_ERROR,
                         "rank {} described its input ({} bytes at {:#x}) outside its registered "
                         "allocation ({} bytes at {:#x})",
                         peer, bytes, source, line.length, line.base);
  }
  const uint64_t offset = source - line.base;
  for (const MappedSource& known : sources) {
    if (known.id != line.id) continue;
    if (known.local != nullptr) *mapped = known.local + offset;
    return Status::ok();
  }
  uint64_t key_bytes = 0;
  std::memcpy(&key_bytes, peer_slot + kSourceKeyOffset, sizeof(key_bytes));
  if (key_bytes == 0 || key_bytes > kSourceKeyMaxBytes) {
    return Status::error(ZRT_REMOTE_ERROR, "rank {} described its input with a {}-byte key", peer,
                         key_bytes);
  }
  const char* key_start = peer_slot + kSourceKeyOffset + sizeof(key_bytes);
  const std::vector<uint8_t> key(key_start, key_start + key_bytes);
  void* local = nullptr;
  Status status = context.transport.map_peer_registered(peer, key, line.base, &local);
  // A dead peer fails the call; anything else (a descriptor limit, an mmap failure) leaves the
  // reads of this allocation to the kernel, which still reaches it, and says why once.
  if (status.code() == ZRT_REMOTE_ERROR) return status;
  if (!status.is_ok()) {
    ZRT_LOG_WARN("cma all-gather: rank {}'s registered memory is read through the kernel: {}", peer,
                 status.message());
    sources.push_back(MappedSource{line.id, nullptr});
    return Status::ok();
  }
  sources.push_back(MappedSource{line.id, static_cast<char*>(local)});
  *mapped = static_cast<char*>(local) + offset;
  return Status::ok();
}

bool OneShotPhase::drained(TaskContext& context, CollTask& task) {
  OneShotArena& arena = context.resources->one_shot;
  for (; next_peer_ < context.size; ++next_peer_) {
    if (next_peer_ == context.rank || arena.peer_finished[next_peer_] > sequence_) continue;
    arena.peer_finished[next_peer_] = load_acquire(finished_word(arena.ranks[next_peer_]));
    if (arena.peer_finished[next_peer_] <= sequence_) {
      task.note_waiting(next_peer_);
      return false;
    }
  }
  return true;
}

// Where rank `rank`'s deposit is read: its copy in tiny_values, else its slot.
const char* OneShotPhase::deposit_of(TaskContext& context, int rank, uint64_t parity) const {
  OneShotArena& arena = context.resources->one_shot;
  if (tiny_) return reinterpret_cast<const char*>(&arena.tiny_values[rank]);
  return slot_data(arena.ranks, rank, parity, deposit_bytes_);
}

Status OneShotPhase::assemble(TaskContext& context) {
  const uint64_t parity = sequence_ & 1;
  const int n = context.size;
  const size_t bytes = count_ * spec_.element_size;
  if (kind_ == ZRT_COLL_ALL_GATHER) {
    if (bytes == 0) return Status::ok();
    if (peer_pids_ != nullptr) return read_peers(context);
    for (int rank = 0; rank < n; ++rank) {
      char* out = output_ + static_cast<size_t>(rank) * bytes;
      if (rank != context.rank) {
        std::memcpy(out, deposit_of(context, rank, parity), bytes);
      } else if (out != input_) {
        std::memcpy(out, input_, bytes);
      }
    }
    return Status::ok();
  }
  if (kind_ == ZRT_COLL_REDUCE_SCATTER) {  // this rank's block of every rank's input
    reduce_in_ring_order(context, context.rank, static_cast<size_t>(context.rank) * count_, count_,
                         output_);
    return Status::ok();
  }
  if (order_ == OneShotOrder::kRing) {  // the ring all-reduce's blocks
    const BlockLayout layout = BlockLayout::split(count_, n);
    for (int block = 0; block < n; ++block) {
      const size_t first = layout.offset(block);
      reduce_in_ring_order(context, block, first, layout.length(block),
                           output_ + first * spec_.element_size);
    }
    return Status::ok();
  }
  reduce_in_rank_order(context, 0, count_, output_);
  return Status::ok();
}

}  // namespace zrt
