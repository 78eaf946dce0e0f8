#include "collectives/reduce_chain.h"

#include <algorithm>

namespace zrt {

size_t ReduceChain::chunk_count(uint64_t chunk) const {
  return std::min<size_t>(chunk_elems_, count_ - chunk * chunk_elems_);
}

Status ReduceChain::start(TaskContext& context, CollTask&) {
  const int n = context.size;
  position_ = ring_mod(context.rank - root_ - 1, n);
  left_ = ring_mod(context.rank - 1, n);
  right_ = ring_mod(context.rank + 1, n);
  chunk_elems_ = std::max<size_t>(1, kSlotBytes / spec_.element_size);
  chunks_ = (count_ + chunk_elems_ - 1) / chunk_elems_;
  next_post_ = next_done_ = 0;
  if (chunks_ == 0 || position_ == 0) return Status::ok();
  if (context.resources == nullptr || context.resources->scratch == nullptr ||
      context.resources->scratch_bytes < 2 * kSlots * kSlotBytes) {
    return Status(ZRT_INTERNAL_ERROR, "chain reduce: stream staging memory missing");
  }
  char* scratch = static_cast<char*>(context.resources->scratch);
  for (int i = 0; i < kSlots; ++i) {
    recv_slots_[i] = scratch + i * kSlotBytes;
    send_slots_[i] = scratch + (kSlots + i) * kSlotBytes;
  }
  return Status::ok();
}

Status ReduceChain::progress(TaskContext& context, CollTask& task, bool* done) {
  const int n = context.size;
  const bool first = position_ == 0;
  const bool is_root = position_ == n - 1;
  const size_t esize = spec_.element_size;
  for (;;) {
    bool moved = false;
    if (first) {
      while (next_post_ < chunks_) {
        PostedOp& send = sends_[next_post_ % kSlots];
        ZRT_RETURN_IF_ERROR(task.collect(&send, right_, true, 0));
        if (send.busy()) break;
        ZRT_RETURN_IF_ERROR(task.post_send(context, right_, static_cast<uint32_t>(next_post_),
                                           input_ + next_post_ * chunk_elems_ * esize,
                                           chunk_count(next_post_) * esize, &send));
        ++next_post_;
        moved = true;
      }
      next_done_ = next_post_;
    } else {
      while (next_post_ < chunks_ && next_post_ < next_done_ + kSlots) {
        const int slot = static_cast<int>(next_post_ % kSlots);
        ZRT_RETURN_IF_ERROR(task.post_recv(context, left_, static_cast<uint32_t>(next_post_),
                                           recv_slots_[slot], chunk_count(next_post_) * esize,
                                           &recvs_[slot]));
        ++next_post_;
        moved = true;
      }
      if (next_done_ < chunks_) {
        const int slot = static_cast<int>(next_done_ % kSlots);
        PostedOp& recv = recvs_[slot];
        PostedOp& send = sends_[slot];
        if (!is_root) ZRT_RETURN_IF_ERROR(task.collect(&send, right_, true, 0));
        if (recv.finished() && (is_root || !send.busy())) {
          const size_t count = chunk_count(next_done_);
          ZRT_RETURN_IF_ERROR(task.collect(&recv, left_, false, count * esize));
          char* out = is_root ? output_ + next_done_ * chunk_elems_ * esize : send_slots_[slot];
          reduce_chunk(spec_, recv_slots_[slot], position_ == 1 ? spec_.scale : 1.0,
                       input_ + next_done_ * chunk_elems_ * esize, spec_.scale, out, count);
          if (!is_root) {
            ZRT_RETURN_IF_ERROR(task.post_send(context, right_, static_cast<uint32_t>(next_done_),
                                               out, count * esize, &send));
          }
          ++next_done_;
          task.advanced();
          moved = true;
        }
      }
    }
    if (!moved) break;
  }
  bool sends_busy = false;
  for (PostedOp& send : sends_) {
    ZRT_RETURN_IF_ERROR(task.collect(&send, right_, true, 0));
    sends_busy |= send.busy();
  }
  if (next_done_ < chunks_) {
    task.note_waiting(first ? right_ : left_);
  } else if (sends_busy) {
    task.note_waiting(right_);
  } else {
    *done = true;
  }
  return Status::ok();
}

}  // namespace zrt
