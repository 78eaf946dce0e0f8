// The two-shot all-reduce's step 4 (one_shot.h): each rank reduces its block of the ring's
// layout into its output and its own slot, publishes it, and copies each peer's reduced block out
// of the peer's slot.
#include <cstring>

#include "collectives/one_shot.h"
#include "collectives/one_shot_arena.h"

namespace zrt {

using namespace one_shot_arena;  // the arena's layout, which every step here reads

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

}  // namespace zrt
