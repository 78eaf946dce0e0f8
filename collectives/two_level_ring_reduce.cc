#include "collectives/two_level_ring_reduce.h"

#include <algorithm>

namespace zrt {

void SubringReduce::init(const std::vector<int>* members, int me, char* scratch, size_t slot_bytes,
                         const ReduceSpec& spec) {
  members_ = members;
  me_ = me;
  size_ = static_cast<int>(members->size());
  left_ = (*members)[ring_mod(me - 1, size_)];
  right_ = (*members)[ring_mod(me + 1, size_)];
  spec_ = spec;
  chunk_elems_ = std::max<size_t>(1, slot_bytes / spec.element_size);
  for (int i = 0; i < kSlots; ++i) {
    recv_slots_[i] = size_ > 2 ? scratch + i * slot_bytes : nullptr;
    send_slots_[i] = size_ > 2 ? scratch + (kSlots + i) * slot_bytes : nullptr;
  }
}

void SubringReduce::begin(const char* const* input, const size_t* length, char* output,
                          double input_scale, bool final, uint32_t tag_first) {
  input_ = input;
  length_ = length;
  output_ = output;
  input_scale_ = input_scale;
  final_ = final;
  own_ready_ = true;
  tag_first_ = tag_first;
  size_t longest = 0;
  for (int j = 0; j < size_; ++j) longest = std::max(longest, length[j]);
  unit_count_ = (longest + chunk_elems_ - 1) / chunk_elems_ * static_cast<uint64_t>(size_ - 1);
  next_post_ = next_reduce_ = send_seq_ = 0;
  active_ = true;
}

size_t SubringReduce::chunk_count(int block, size_t chunk) const {
  const size_t begin = chunk * chunk_elems_;
  return begin >= length_[block] ? 0 : std::min(chunk_elems_, length_[block] - begin);
}

char* SubringReduce::received(int slot, size_t chunk) const {
  return size_ > 2 ? recv_slots_[slot] : output_ + chunk * chunk_elems_ * spec_.element_size;
}

const char* SubringReduce::input_chunk(int block, size_t chunk) const {
  return input_[block] + chunk * chunk_elems_ * spec_.element_size;
}

// Collects finished sends; true when none is still in flight.
bool SubringReduce::finish_sends(CollTask& task, Status* status) {
  bool idle = true;
  for (auto* ops : {&input_sends_, &slot_sends_}) {
    for (PostedOp& send : *ops) {
      Status collected = task.collect(&send, right_, true, 0);
      if (!collected.is_ok() && status->is_ok()) *status = collected;
      idle &= !send.busy();
    }
  }
  return idle;
}

Status SubringReduce::progress(TaskContext& context, CollTask& task, bool* moved) {
  if (!active_) return Status::ok();
  const uint64_t steps = static_cast<uint64_t>(size_ - 1);
  const size_t esize = spec_.element_size;
  for (;;) {
    bool step_moved = false;
    // Post receives (and the step-0 sends straight from the input) within the window.
    while (next_post_ < unit_count_ && next_post_ < next_reduce_ + kSlots) {
      const int slot = static_cast<int>(next_post_ % kSlots);
      const size_t chunk = next_post_ / steps;
      const int step = static_cast<int>(next_post_ % steps);
      const uint32_t tag = tag_first_ + static_cast<uint32_t>(next_post_);
      if (step == 0) {
        PostedOp& send = input_sends_[slot];
        ZRT_RETURN_IF_ERROR(task.collect(&send, right_, true, 0));
        if (send.busy()) break;
        const int block = ring_mod(me_ - 1, size_);
        ZRT_RETURN_IF_ERROR(task.post_data_send(context, right_, tag, input_chunk(block, chunk),
                                                chunk_count(block, chunk) * esize, &send,
                                                fingerprint_first_));
      }
      const int block = ring_mod(me_ - 2 - step, size_);
      ZRT_RETURN_IF_ERROR(task.post_data_recv(context, left_, tag, received(slot, chunk),
                                              chunk_count(block, chunk) * esize, &recvs_[slot],
                                              fingerprint_first_));
      fingerprint_first_ = false;
      ++next_post_;
      step_moved = true;
    }
    // Reduce the oldest received chunk, in unit order.
    if (next_reduce_ < unit_count_) {
      const int slot = static_cast<int>(next_reduce_ % kSlots);
      PostedOp& recv = recvs_[slot];
      const int step = static_cast<int>(next_reduce_ % steps);
      const bool last = step == size_ - 2;
      if (recv.finished() && (own_ready_ || !last)) {
        const size_t chunk = next_reduce_ / steps;
        const int block = ring_mod(me_ - 2 - step, size_);
        const size_t count = chunk_count(block, chunk);
        PostedOp& forward = slot_sends_[send_seq_ % kSlots];
        if (!last) ZRT_RETURN_IF_ERROR(task.collect(&forward, right_, true, 0));
        if (last || !forward.busy()) {
          ZRT_RETURN_IF_ERROR(task.collect(&recv, left_, false, count * esize));
          char* out =
              last ? output_ + chunk * chunk_elems_ * esize : send_slots_[send_seq_ % kSlots];
          reduce_chunk(spec_, received(slot, chunk), step == 0 ? input_scale_ : 1.0,
                       input_chunk(block, chunk), input_scale_, out, count, last && final_);
          if (!last) {
            ZRT_RETURN_IF_ERROR(task.post_send(context, right_,
                                               tag_first_ + static_cast<uint32_t>(next_reduce_ + 1),
                                               out, count * esize, &forward));
            ++send_seq_;
          }
          ++next_reduce_;
          task.advanced();
          step_moved = true;
        }
      }
    }
    if (!step_moved) break;
    *moved = true;
  }
  Status status;
  const bool idle = finish_sends(task, &status);
  ZRT_RETURN_IF_ERROR(status);
  if (next_reduce_ == unit_count_ && idle) {
    active_ = false;
    *moved = true;
  }
  return Status::ok();
}

}  // namespace zrt
