#include "collectives/ring_reduce_scatter.h"

#include <algorithm>

namespace zrt {

namespace {
size_t chunk_elements(size_t element_size) {
  return std::max<size_t>(1, RingReduceScatter::kSlotBytes / element_size);
}
uint64_t chunks_per_block(const BlockLayout& layout, size_t chunk_elems) {
  return (layout.max_length() + chunk_elems - 1) / chunk_elems;
}
}  // namespace

uint32_t RingReduceScatter::units(const BlockLayout& layout, int size, size_t element_size) {
  return static_cast<uint32_t>(chunks_per_block(layout, chunk_elements(element_size)) *
                               static_cast<uint64_t>(size - 1));
}

size_t RingReduceScatter::chunk_count(int block, size_t chunk) const {
  return layout_.chunk_length(block, chunk, chunk_elems_);
}

const char* RingReduceScatter::input_chunk(int block, size_t chunk) const {
  return input_ + (layout_.offset(block) + chunk * chunk_elems_) * spec_.element_size;
}

Status RingReduceScatter::start(TaskContext& context, CollTask&) {
  const int n = context.size;
  left_ = ring_mod(context.rank - 1, n);
  right_ = ring_mod(context.rank + 1, n);
  chunk_elems_ = chunk_elements(spec_.element_size);
  unit_count_ = chunks_per_block(layout_, chunk_elems_) * static_cast<uint64_t>(n - 1);
  next_post_ = next_reduce_ = send_seq_ = 0;
  if (unit_count_ == 0) return Status::ok();
  if (context.resources == nullptr || context.resources->scratch == nullptr ||
      context.resources->scratch_bytes < (kRecvSlots + kSendSlots) * kSlotBytes) {
    return Status(ZRT_INTERNAL_ERROR, "ring reduce-scatter: stream staging memory missing");
  }
  char* scratch = static_cast<char*>(context.resources->scratch);
  for (int i = 0; i < kRecvSlots; ++i) recv_slots_[i] = scratch + i * kSlotBytes;
  for (int i = 0; i < kSendSlots; ++i) send_slots_[i] = scratch + (kRecvSlots + i) * kSlotBytes;
  return Status::ok();
}

Status RingReduceScatter::progress(TaskContext& context, CollTask& task, bool* done) {
  const int n = context.size;
  const int rank = context.rank;
  const uint64_t steps = static_cast<uint64_t>(n - 1);
  for (;;) {
    bool moved = false;
    // Post receives (and the step-0 sends straight from the input) within the window.
    while (next_post_ < unit_count_ && next_post_ < next_reduce_ + kRecvSlots) {
      const int slot = static_cast<int>(next_post_ % kRecvSlots);
      const size_t chunk = next_post_ / steps;
      const int step = static_cast<int>(next_post_ % steps);
      if (step == 0) {
        PostedOp& send = input_sends_[slot];
        ZRT_RETURN_IF_ERROR(task.collect(&send, right_, true, 0));
        if (send.busy()) break;
        const int block = ring_mod(rank - 1, n);
        const size_t count = chunk_count(block, chunk);
        ZRT_RETURN_IF_ERROR(
            task.post_send(context, right_, tag_offset_ + static_cast<uint32_t>(next_post_),
                           input_chunk(block, chunk), count * spec_.element_size, &send));
      }
      const int block = ring_mod(rank - 2 - step, n);
      const size_t count = chunk_count(block, chunk);
      ZRT_RETURN_IF_ERROR(
          task.post_recv(context, left_, tag_offset_ + static_cast<uint32_t>(next_post_),
                         recv_slots_[slot], count * spec_.element_size, &recvs_[slot]));
      ++next_post_;
      moved = true;
    }
    // Reduce the oldest received chunk, in unit order.
    if (next_reduce_ < unit_count_) {
      const int slot = static_cast<int>(next_reduce_ % kRecvSlots);
      PostedOp& recv = recvs_[slot];
      if (recv.finished()) {
        const size_t chunk = next_reduce_ / steps;
        const int step = static_cast<int>(next_reduce_ % steps);
        const int block = ring_mod(rank - 2 - step, n);
        const size_t count = chunk_count(block, chunk);
        const bool last = step == n - 2;
        const int send_slot = static_cast<int>(send_seq_ % kSendSlots);
        PostedOp& forward = slot_sends_[send_slot];
        if (!last) ZRT_RETURN_IF_ERROR(task.collect(&forward, right_, true, 0));
        if (last || !forward.busy()) {
          ZRT_RETURN_IF_ERROR(task.collect(&recv, left_, false, count * spec_.element_size));
          char* out =
              last ? output_ + chunk * chunk_elems_ * spec_.element_size : send_slots_[send_slot];
          reduce_chunk(spec_, recv_slots_[slot], step == 0 ? spec_.scale : 1.0,
                       input_chunk(block, chunk), spec_.scale, out, count, last);
          if (!last) {
            ZRT_RETURN_IF_ERROR(task.post_send(
                context, right_, tag_offset_ + static_cast<uint32_t>(next_reduce_ + 1), out,
                count * spec_.element_size, &forward));
            ++send_seq_;
          }
          ++next_reduce_;
          task.advanced();
          moved = true;
        }
      }
    }
    if (!moved) break;
  }
  bool sends_busy = false;
  for (PostedOp& send : input_sends_) {
    ZRT_RETURN_IF_ERROR(task.collect(&send, right_, true, 0));
    sends_busy |= send.busy();
  }
  for (PostedOp& send : slot_sends_) {
    ZRT_RETURN_IF_ERROR(task.collect(&send, right_, true, 0));
    sends_busy |= send.busy();
  }
  if (next_reduce_ < unit_count_) {
    task.note_waiting(left_);
  } else if (sends_busy) {
    task.note_waiting(right_);
  } else {
    *done = true;
  }
  return Status::ok();
}

}  // namespace zrt
