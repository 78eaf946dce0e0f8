#include "collectives/two_level_ring_gather.h"

#include <algorithm>
#include <cstring>

namespace zrt {

void SubringGather::init(const std::vector<int>* members, int me, size_t chunk_bytes,
                         size_t element_size) {
  me_ = me;
  size_ = static_cast<int>(members->size());
  left_ = (*members)[ring_mod(me - 1, size_)];
  right_ = (*members)[ring_mod(me + 1, size_)];
  element_size_ = element_size;
  chunk_elems_ = std::max<size_t>(1, chunk_bytes / element_size);
}

void SubringGather::begin(char* const* output, const size_t* length, const char* own,
                          uint32_t tag_first) {
  output_ = output;
  length_ = length;
  own_ = own;
  tag_first_ = tag_first;
  size_t longest = 0;
  for (int j = 0; j < size_; ++j) longest = std::max(longest, length[j]);
  unit_count_ = (longest + chunk_elems_ - 1) / chunk_elems_ * static_cast<uint64_t>(size_ - 1);
  next_post_ = next_done_ = 0;
  active_ = true;
  // The own block first: the ring forwards other blocks from the output, never this one, but
  // the caller's next level reads it there.
  if (own_ != output_[me_] && length_[me_] > 0) {
    std::memcpy(output_[me_], own_, length_[me_] * element_size_);
  }
}

size_t SubringGather::chunk_count(int block, size_t chunk) const {
  const size_t begin = chunk * chunk_elems_;
  return begin >= length_[block] ? 0 : std::min(chunk_elems_, length_[block] - begin);
}

char* SubringGather::output_chunk(int block, size_t chunk) const {
  return output_[block] + chunk * chunk_elems_ * element_size_;
}

Status SubringGather::progress(TaskContext& context, CollTask& task, bool* moved) {
  if (!active_) return Status::ok();
  const uint64_t steps = static_cast<uint64_t>(size_ - 1);
  for (;;) {
    bool step_moved = false;
    while (next_post_ < unit_count_ && next_post_ < next_done_ + kWindow) {
      const int slot = static_cast<int>(next_post_ % kWindow);
      const size_t chunk = next_post_ / steps;
      const int step = static_cast<int>(next_post_ % steps);
      const uint32_t tag = tag_first_ + static_cast<uint32_t>(next_post_);
      if (step == 0) {
        PostedOp& send = sends_[slot];
        ZRT_RETURN_IF_ERROR(task.collect(&send, right_, true, 0));
        if (send.busy()) break;
        ZRT_RETURN_IF_ERROR(task.post_data_send(context, right_, tag, output_chunk(me_, chunk),
                                                chunk_count(me_, chunk) * element_size_, &send,
                                                fingerprint_first_));
      }
      const int block = ring_mod(me_ - step - 1, size_);
      ZRT_RETURN_IF_ERROR(task.post_data_recv(context, left_, tag, output_chunk(block, chunk),
                                              chunk_count(block, chunk) * element_size_,
                                              &recvs_[slot], fingerprint_first_));
      fingerprint_first_ = false;
      ++next_post_;
      step_moved = true;
    }
    if (next_done_ < unit_count_) {
      const int slot = static_cast<int>(next_done_ % kWindow);
      PostedOp& recv = recvs_[slot];
      if (recv.finished()) {
        const size_t chunk = next_done_ / steps;
        const int step = static_cast<int>(next_done_ % steps);
        const int block = ring_mod(me_ - step - 1, size_);
        const size_t count = chunk_count(block, chunk);
        const bool forward = step < size_ - 2;
        PostedOp& send = sends_[(next_done_ + 1) % kWindow];
        if (forward) ZRT_RETURN_IF_ERROR(task.collect(&send, right_, true, 0));
        if (!forward || !send.busy()) {
          ZRT_RETURN_IF_ERROR(task.collect(&recv, left_, false, count * element_size_));
          if (forward) {
            ZRT_RETURN_IF_ERROR(
                task.post_send(context, right_, tag_first_ + static_cast<uint32_t>(next_done_ + 1),
                               output_chunk(block, chunk), count * element_size_, &send));
          }
          ++next_done_;
          task.advanced();
          step_moved = true;
        }
      }
    }
    if (!step_moved) break;
    *moved = true;
  }
  bool idle = true;
  for (PostedOp& send : sends_) {
    ZRT_RETURN_IF_ERROR(task.collect(&send, right_, true, 0));
    idle &= !send.busy();
  }
  if (next_done_ == unit_count_ && idle) {
    active_ = false;
    *moved = true;
  }
  return Status::ok();
}

}  // namespace zrt
