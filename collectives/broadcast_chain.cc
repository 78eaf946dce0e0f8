#include "collectives/broadcast_chain.h"

#include <algorithm>
#include <cstring>

namespace zrt {

size_t BroadcastChain::chunk_bytes(uint64_t chunk) const {
  return std::min(kChunkBytes, bytes_ - chunk * kChunkBytes);
}

Status BroadcastChain::start(TaskContext& context, CollTask&) {
  const int n = context.size;
  position_ = ring_mod(context.rank - root_, n);
  left_ = ring_mod(context.rank - 1, n);
  right_ = ring_mod(context.rank + 1, n);
  // A zero-byte broadcast still sends one empty chunk, so that every rank takes part.
  chunks_ = std::max<uint64_t>(1, (bytes_ + kChunkBytes - 1) / kChunkBytes);
  next_post_ = next_done_ = next_copy_ = 0;
  return Status::ok();
}

Status BroadcastChain::progress(TaskContext& context, CollTask& task, bool* done) {
  const int n = context.size;
  const bool is_root = position_ == 0;
  const bool is_last = position_ == n - 1;
  const bool copy = is_root && input_ != output_;
  for (;;) {
    bool moved = false;
    while (next_post_ < chunks_ && next_post_ < next_done_ + kWindow) {
      const int slot = static_cast<int>(next_post_ % kWindow);
      const size_t bytes = bytes_ == 0 ? 0 : chunk_bytes(next_post_);
      const size_t offset = next_post_ * kChunkBytes;
      if (is_root) {
        PostedOp& send = sends_[slot];
        ZRT_RETURN_IF_ERROR(task.collect(&send, right_, true, 0));
        if (send.busy()) break;
        ZRT_RETURN_IF_ERROR(task.post_send(context, right_, static_cast<uint32_t>(next_post_),
                                           input_ + offset, bytes, &send));
      } else {
        ZRT_RETURN_IF_ERROR(task.post_recv(context, left_, static_cast<uint32_t>(next_post_),
                                           output_ + offset, bytes, &recvs_[slot]));
      }
      ++next_post_;
      moved = true;
    }
    if (is_root) {
      // The root's chunk is "done" once its send is posted.
      if (next_done_ < next_post_) {
        next_done_ = next_post_;
        task.advanced();
        moved = true;
      }
    } else if (next_done_ < chunks_) {
      const int slot = static_cast<int>(next_done_ % kWindow);
      PostedOp& recv = recvs_[slot];
      PostedOp& send = sends_[slot];
      if (!is_last) ZRT_RETURN_IF_ERROR(task.collect(&send, right_, true, 0));
      if (recv.finished() && (is_last || !send.busy())) {
        const size_t bytes = bytes_ == 0 ? 0 : chunk_bytes(next_done_);
        ZRT_RETURN_IF_ERROR(task.collect(&recv, left_, false, bytes));
        if (!is_last) {
          ZRT_RETURN_IF_ERROR(task.post_send(context, right_, static_cast<uint32_t>(next_done_),
                                             output_ + next_done_ * kChunkBytes, bytes, &send));
        }
        ++next_done_;
        task.advanced();
        moved = true;
      }
    }
    if (!moved && copy && next_copy_ * kChunkBytes < bytes_) {
      const size_t bytes = chunk_bytes(next_copy_);
      std::memcpy(output_ + next_copy_ * kChunkBytes, input_ + next_copy_ * kChunkBytes, bytes);
      ++next_copy_;
      task.advanced();
      break;
    }
    if (!moved) break;
  }
  bool sends_busy = false;
  for (PostedOp& send : sends_) {
    ZRT_RETURN_IF_ERROR(task.collect(&send, right_, true, 0));
    sends_busy |= send.busy();
  }
  const bool copied = !copy || next_copy_ * kChunkBytes >= bytes_;
  if (next_done_ < chunks_) {
    task.note_waiting(left_);
  } else if (sends_busy) {
    task.note_waiting(right_);
  } else if (copied) {
    *done = true;
  }
  return Status::ok();
}

}  // namespace zrt
