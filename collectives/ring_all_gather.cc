#include "collectives/ring_all_gather.h"

#include <algorithm>
#include <cstring>

namespace zrt {

size_t RingAllGather::chunk_count(int block, size_t chunk) const {
  return layout_.chunk_length(block, chunk, chunk_elems_);
}

char* RingAllGather::output_chunk(int block, size_t chunk) const {
  return output_ + (layout_.offset(block) + chunk * chunk_elems_) * element_size_;
}

Status RingAllGather::start(TaskContext& context, CollTask&) {
  const int n = context.size;
  left_ = ring_mod(context.rank - 1, n);
  right_ = ring_mod(context.rank + 1, n);
  chunk_elems_ = std::max<size_t>(1, kChunkBytes / element_size_);
  chunks_ = (layout_.max_length() + chunk_elems_ - 1) / chunk_elems_;
  unit_count_ = chunks_ * static_cast<uint64_t>(n - 1);
  next_post_ = next_done_ = next_copy_ = 0;
  const bool in_place = own_ == output_chunk(context.rank, 0);
  copy_chunks_ = in_place ? 0 : (layout_.length(context.rank) + chunk_elems_ - 1) / chunk_elems_;
  return Status::ok();
}

Status RingAllGather::progress(TaskContext& context, CollTask& task, bool* done) {
  const int n = context.size;
  const int rank = context.rank;
  const uint64_t steps = static_cast<uint64_t>(n - 1);
  for (;;) {
    bool moved = false;
    while (next_post_ < unit_count_ && next_post_ < next_done_ + kWindow) {
      const int slot = static_cast<int>(next_post_ % kWindow);
      const size_t chunk = next_post_ / steps;
      const int step = static_cast<int>(next_post_ % steps);
      if (step == 0) {
        PostedOp& send = sends_[slot];
        ZRT_RETURN_IF_ERROR(task.collect(&send, right_, true, 0));
        if (send.busy()) break;
        const size_t count = chunk_count(rank, chunk);
        ZRT_RETURN_IF_ERROR(task.post_send(
            context, right_, tag_offset_ + static_cast<uint32_t>(next_post_),
            own_ + chunk * chunk_elems_ * element_size_, count * element_size_, &send));
      }
      const int block = ring_mod(rank - step - 1, n);
      ZRT_RETURN_IF_ERROR(task.post_recv(
          context, left_, tag_offset_ + static_cast<uint32_t>(next_post_),
          output_chunk(block, chunk), chunk_count(block, chunk) * element_size_, &recvs_[slot]));
      ++next_post_;
      moved = true;
    }
    if (next_done_ < unit_count_) {
      const int slot = static_cast<int>(next_done_ % kWindow);
      PostedOp& recv = recvs_[slot];
      if (recv.finished()) {
        const size_t chunk = next_done_ / steps;
        const int step = static_cast<int>(next_done_ % steps);
        const int block = ring_mod(rank - step - 1, n);
        const size_t count = chunk_count(block, chunk);
        const bool forward = step < n - 2;
        PostedOp& send = sends_[(next_done_ + 1) % kWindow];
        if (forward) ZRT_RETURN_IF_ERROR(task.collect(&send, right_, true, 0));
        if (!forward || !send.busy()) {
          ZRT_RETURN_IF_ERROR(task.collect(&recv, left_, false, count * element_size_));
          if (forward) {
            ZRT_RETURN_IF_ERROR(
                task.post_send(context, right_, tag_offset_ + static_cast<uint32_t>(next_done_ + 1),
                               output_chunk(block, chunk), count * element_size_, &send));
          }
          ++next_done_;
          task.advanced();
          moved = true;
        }
      }
    }
    if (!moved && next_copy_ < copy_chunks_) {
      // Nothing arrived yet: copy a chunk of our own block meanwhile.
      const size_t count = chunk_count(rank, next_copy_);
      std::memcpy(output_chunk(rank, next_copy_), own_ + next_copy_ * chunk_elems_ * element_size_,
                  count * element_size_);
      ++next_copy_;
      task.advanced();
      break;  // back to the engine, which drives the transport before the next chunk
    }
    if (!moved) break;
  }
  bool sends_busy = false;
  for (PostedOp& send : sends_) {
    ZRT_RETURN_IF_ERROR(task.collect(&send, right_, true, 0));
    sends_busy |= send.busy();
  }
  if (next_done_ < unit_count_) {
    task.note_waiting(left_);
  } else if (sends_busy) {
    task.note_waiting(right_);
  } else if (next_copy_ == copy_chunks_) {
    *done = true;
  }
  return Status::ok();
}

}  // namespace zrt
