// One-shot collectives on one host: the small-message all-reduce, reduce-scatter and all-gather
// without any message on the data path, the `oneshot` algorithm of the table (algorithm.h).
//
// Every rank owns a one-shot arena per stream (registered memory, engine/stream_resources.h):
// a control block and two slots, each a 64-byte header (the call's fingerprint and byte count)
// and kOneShotSlotBytes of data. The stream's first one-shot collective exchanges the arenas'
// memory keys with every peer and maps every peer's arena (the handshake, the only messages of
// this path). Collective k, the stream's k-th one-shot collective, alike on every rank, then
// uses slot k % 2 of every arena:
//   1. credit: every peer has finished reading collective k - 2 (its `finished` >= k - 1), so
//      this rank's slot k % 2 is free again. The common case has no wait and no load: a peer
//      finishes k - 2 before it publishes k - 1, which step 3 of k - 1 saw;
//   2. deposit: the rank copies its contribution (its all-reduce input, its whole reduce-scatter
//      input, its all-gather block) behind the header into its own slot and publishes
//      `published[k % 2] = k + 1` with a release store;
//   3. wait: for every peer's `published[k % 2] == k + 1` (acquire loads). A peer cannot be at
//      k + 2 in that slot yet: that needs this rank's credit for k;
//   4. assemble, reading the peers' slots where they are: all-gather copies block p out of rank
//      p's slot; all-reduce and reduce-scatter reduce in the order of the algorithm the table
//      would run in their place (OneShotOrder), so that choosing one-shot never changes a
//      result's bits: the ring's order for a reduce-scatter and for an all-reduce the ring
//      would run, block b (the ring's block layout) as ((x[b+1] + x[b+2]) + ...) + x[b]; rank
//      order, ((x0 + x1) + x2) + ..., for an all-reduce the direct all-reduce would run.
//      Either way every rank computes a block alike, so results are bitwise identical on
//      every rank;
//   5. `finished = k + 1` (release): the peers may reuse their slot k % 2 for collective k + 2.
// Pulling from the writer's own slot, rather than pushing into every reader's, keeps the arena
// at two slots whatever N, and the writer's work at one copy.
//
// The `cma` all-gather (EngineOptions::peer_pids: every pair of ranks can read each other's
// memory) deposits no data: the header's last word holds the address of the rank's input, and
// step 4 copies each peer's block straight out of the peer's process into the output with
// process_vm_readv (collectives/peer_memory.h): one copy of each block where the slot takes
// two, and no slot bound on the size. An input in registered memory (zrt_mem_alloc's, the
// transport's find_registered) is read through a mapping of the peer's allocation instead, kept
// per stream: a plain copy, without the kernel pinning the peer's pages on every call. Since the
// input is the caller's, a rank then waits (step 6) until every peer has finished, that is read
// it, before its collective completes.
//
// The `two-shot` all-reduce (the table's `twoshot`) deposits and waits as above, then each rank
// reduces only its block of the ring's layout, in the same order, into its output and into its
// own slot over its input's block (a region only this rank reads), publishes `reduced[k % 2] =
// k + 1`, waits for every peer's and copies each peer's reduced block out of the peer's slot
// before `finished`. Each input is read once instead of N times, for one more wait: the ring's
// traffic in two steps instead of 2(N - 1). Its deposit's byte count is marked, so that a peer
// running one-shot for the same call fails on the header check.
//
// The phase never blocks: each progress call moves what it can. It runs on the progress thread,
// or, when its stream is idle, on the calling thread (Task::runs_inline, engine/
// inline_run.cc): it touches neither the transport nor the stream's scratch once the handshake
// is done. Waits are the engine's: a peer that never publishes fails the collective with
// ZRT_TIMEOUT (no progress) or the transport's verdict on the dead peer.
//
// Counters: bytes_sent is this rank's contribution times the peers that read it, bytes_received
// what it read out of the peers' slots, as if the data had travelled as messages.
//
// The files: one_shot_arena.h (the arena's layout), one_shot_handshake.cc, one_shot_deposit.cc
// (the steps every mode shares), and each mode's reads in one_shot.cc, two_shot.cc and
// cma_all_gather.cc.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "collectives/coll_task.h"
#include "zrt/zrt.h"

namespace zrt {

// The order a one-shot reduction adds the ranks' inputs in (step 4 above).
enum class OneShotOrder {
  kRing,  // the ring reduce-scatter's, per block of the ring's layout
  kRank,  // the direct all-reduce's
};

class OneShotPhase final : public Phase {
 public:
  // all-reduce: `count` elements in and out. reduce-scatter: `count` elements out, N x count
  // in. all-gather: `count` elements in, N x count out. `order` is read by the reductions only.
  // `peer_pids` (all-gather only; null otherwise): every rank's pid, for the cma mode above.
  // The caller keeps it alive (EngineOptions::peer_pids).
  OneShotPhase(zrt_coll_kind_t kind, const void* input, void* output, size_t count,
               const ReduceSpec& spec, OneShotOrder order,
               const std::vector<int>* peer_pids = nullptr)
      : kind_(kind),
        input_(static_cast<const char*>(input)),
        output_(static_cast<char*>(output)),
        count_(count),
        spec_(spec),
        order_(order),
        peer_pids_(peer_pids) {}

  // A collective of another algorithm on a stream with a one-shot arena announces its call
  // (kind, count, ..., collective number) in the arena's control block, so that a peer that
  // took the one-shot path for the same collective number (arguments that differ across
  // ranks, and with them the table's choice) fails with the mismatch naming both calls
  // instead of waiting out the timeout. Does nothing before the stream's first one-shot.
  static void announce_call(TaskContext& context, const OrderFingerprint& call);

  // The bytes a rank deposits for a collective (what must fit kOneShotSlotBytes).
  static size_t deposit_bytes(zrt_coll_kind_t kind, size_t count, size_t element_size, int size);

  // A failure outside progress() (its start() on the submitting thread, one_shot_lane.h):
  // progress() returns it from then on, wherever the phase continues.
  void keep_error(const Status& status) {
    if (!status.is_ok() && error_.is_ok()) error_ = status;
  }

  Status start(TaskContext& context, CollTask& task) override;
  Status progress(TaskContext& context, CollTask& task, bool* done) override;
  Status start_fingerprint(TaskContext&, CollTask&) override { return Status::ok(); }
  bool waits_on_memory() const override { return true; }

  // all-reduce only: the two-shot mode above.
  void set_two_shot() { two_shot_ = true; }

  // The phase follows another of its task that announced the call (the ring all-reduce's
  // reduce-scatter before a cma all-gather): a peer's announcement of the same call is then that
  // peer still in the first part, not a mismatch, and is not looked at.
  void set_after_announced_phase() { after_announced_phase_ = true; }

 private:
  enum class Step { kHandshake, kCredit, kWait, kShare, kDrain, kDone };

  // The handshake (one_shot_handshake.cc): the stream's first one-shot collective maps every
  // peer's arena.
  Status handshake(TaskContext& context, CollTask& task, bool* ready);
  // Allocates the arena (the stream's first handshake), sends its key, posts the peers'.
  Status post_keys(TaskContext& context, CollTask& task);
  // Maps each peer's arena as its key arrives; `all` once every one is mapped.
  Status map_peer_arenas(TaskContext& context, CollTask& task, bool* all);

  // The steps every mode shares (one_shot_deposit.cc).
  Status move(TaskContext& context, CollTask& task, bool* done);
  bool credited(TaskContext& context, CollTask& task);
  Status deposit(TaskContext& context, CollTask& task);
  Status published(TaskContext& context, CollTask& task, bool* all);
  Status unpublished(TaskContext& context, CollTask& task, char* arena, uint64_t parity);
  Status check_header(TaskContext& context, CollTask& task, int peer, const char* header) const;
  Status check_announced_call(CollTask& task, int peer, char* arena) const;
  // After the reads: `finished = k + 1`, then the drain (cma) or done.
  void finish_reads(TaskContext& context, CollTask& task);
  // The header's byte-count word: deposit_bytes_, marked in cma mode.
  uint64_t expected_bytes_word() const;

  // The one-shot mode's reads, and the reductions two-shot shares (one_shot.cc).
  Status assemble(TaskContext& context);
  const char* deposit_of(TaskContext& context, int rank, uint64_t parity) const;
  // Reduces elements [first, first + count) of every rank's slot data into `out` in ring order
  // for block `block`: ((x[block+1] + x[block+2]) + ...) + x[block].
  void reduce_in_ring_order(TaskContext& context, int block, size_t first, size_t count,
                            char* out) const;
  // The same elements in rank order: ((x0 + x1) + x2) + ...
  void reduce_in_rank_order(TaskContext& context, size_t first, size_t count, char* out) const;

  // The two-shot mode (two_shot.cc).
  // Reduces this rank's block into the output and its slot, and publishes it.
  void reduce_own_block(TaskContext& context, CollTask& task);
  // Copies the peers' reduced blocks as they publish them; `all` once every one is in.
  void copy_reduced_blocks(TaskContext& context, CollTask& task, bool* all);

  // The cma mode (cma_all_gather.cc).
  // The registered allocation the input lies in, if any, for the peers to map.
  Status describe_source(TaskContext& context, uint64_t parity);
  // Where `peer`'s input is mapped here, or null (then the kernel reads it).
  Status mapped_source(TaskContext& context, int peer, const char* peer_slot, uint64_t source,
                       size_t bytes, const char** mapped);
  // Copies every peer's block out of its process into the output.
  Status read_peers(TaskContext& context);
  // Whether every peer has finished this collective, that is read this rank's input.
  bool drained(TaskContext& context, CollTask& task);

  zrt_coll_kind_t kind_;
  const char* input_;
  char* output_;
  size_t count_;
  ReduceSpec spec_;
  OneShotOrder order_;
  const std::vector<int>* peer_pids_;
  Step step_ = Step::kHandshake;
  uint64_t sequence_ = 0;  // k: this collective's one-shot number on the stream
  size_t deposit_bytes_ = 0;
  int next_peer_ = 0;      // the wait's cursor: peers below it have published
  bool tiny_ = false;      // a deposit of at most 8 bytes, with its tag in one 16-byte store
  uint64_t tiny_tag_ = 0;  // this call's tag, alike on every rank that runs the same call
  uint32_t unpublished_looks_ = 0;
  Status error_;  // sticky: a progress call after a failure fails the same way
  std::vector<PostedOp> key_sends_;
  std::vector<PostedOp> key_recvs_;
  bool keys_posted_ = false;
  bool after_announced_phase_ = false;
  bool two_shot_ = false;
};

}  // namespace zrt
