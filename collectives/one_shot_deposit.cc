// The steps of OneShotPhase (one_shot.h) that every mode shares: the step machine, the credit
// (step 1), the deposit and its header (step 2), the wait for the peers' deposits (step 3) with
// the checks that name a peer running another call or algorithm, and `finished` (step 5). What
// each mode reads in step 4 lies in its own file: one_shot.cc, two_shot.cc, cma_all_gather.cc;
// the stream's first collective's handshake in one_shot_handshake.cc.
#include <algorithm>
#include <atomic>
#include <cstring>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "collectives/one_shot.h"
#include "collectives/one_shot_arena.h"
#include "collectives/order_check.h"

namespace zrt {

using namespace one_shot_arena;  // the arena's layout, which every step here reads

namespace {

// How often a wait looks at the call a peer announced (check_announced_call), and at which look
// first: a look is a miss on the peer's control line, which on the first look lay on the path
// of every call whose peer was a moment behind.
constexpr uint32_t kLooksPerCallCheck = 64;
constexpr uint32_t kFirstCallCheckLook = kLooksPerCallCheck - 1;

// Tiny deposits (at most 8 bytes, not cma) travel with their flag in one 16-byte store, the
// shape of NCCL's LL protocol: processors with AVX carry out aligned 16-byte loads and stores
// atomically (Intel SDM vol. 3A 9.1.1; AMD APM vol. 2 7.3.2), so a reader that sees the tag sees
// the data, and touches one line of the writer's: a header with `published`, fingerprint and
// byte count written as separate stores on the line a reader spins on cost the 8-byte
// all-reduce a second transfer of that line per call (perf: half its samples outside the waits
// stalled on the first load of a peer's data after `published`; measured:
// docs/ARCHITECTURE.md#one-shot-collectives). Elsewhere the header path.
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
// looked for every 64th look only (on every look the announcement was a visible share of an
// 8-byte all-reduce's samples, perf; measured: docs/ARCHITECTURE.md#measured-costs).
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

}  // namespace zrt
