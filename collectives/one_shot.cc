// The one-shot mode's step 4 (one_shot.h): every rank assembles its result out of the peers'
// slots where they lie, an all-gather by copies, an all-reduce or reduce-scatter by reductions in
// the order of the algorithm the table would run in its place (OneShotOrder). The reductions
// serve the two-shot mode too (two_shot.cc).
#include <cstring>

#include "collectives/one_shot.h"
#include "collectives/one_shot_arena.h"

namespace zrt {

using namespace one_shot_arena;  // the arena's layout, which every step here reads

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

// Where rank `rank`'s deposit is read: its copy in tiny_values, else its slot.
const char* OneShotPhase::deposit_of(TaskContext& context, int rank, uint64_t parity) const {
  OneShotArena& arena = context.resources->one_shot;
  if (tiny_) return reinterpret_cast<const char*>(&arena.tiny_values[rank]);
  return slot_data(arena.ranks, rank, parity, deposit_bytes_);
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

}  // namespace zrt
