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
  job_.input = input;
  job_.length = length;
  job_.output = output;
  job_.input_scale = input_scale;
  job_.final = final;
  own_ready_ = true;
  job_.tag_first = tag_first;
  size_t longest = 0;
  for (int j = 0; j < size_; ++j) longest = std::max(longest, length[j]);
  job_.unit_count = (longest + chunk_elems_ - 1) / chunk_elems_ * static_cast<uint64_t>(size_ - 1);
  units_.restart();
  active_ = true;
}

size_t SubringReduce::chunk_count(int block, size_t chunk) const {
  const size_t begin = chunk * chunk_elems_;
  return begin >= job_.length[block] ? 0 : std::min(chunk_elems_, job_.length[block] - begin);
}

char* SubringReduce::received(int slot, size_t chunk) const {
  return size_ > 2 ? recv_slots_[slot] : job_.output + chunk * chunk_elems_ * spec_.element_size;
}

const char* SubringReduce::input_chunk(int block, size_t chunk) const {
  return job_.input[block] + chunk * chunk_elems_ * spec_.element_size;
}

bool SubringReduce::Units::finish_sends(CollTask& task, int right, Status* status) {
  bool idle = true;
  for (auto* ops : {&input_sends, &slot_sends}) {
    for (PostedOp& send : *ops) {
      Status collected = task.collect(&send, right, true, 0);
      if (!collected.is_ok() && status->is_ok()) *status = collected;
      idle &= !send.busy();
    }
  }
  return idle;
}

// Posts receives (and the step-0 sends straight from the input) within the window.
Status SubringReduce::post_units(TaskContext& context, CollTask& task, bool* moved) {
  const uint64_t steps = static_cast<uint64_t>(size_ - 1);
  const size_t esize = spec_.element_size;
  while (units_.next_post < job_.unit_count && units_.next_post < units_.next_reduce + kSlots) {
    const int slot = static_cast<int>(units_.next_post % kSlots);
    const size_t chunk = units_.next_post / steps;
    const int step = static_cast<int>(units_.next_post % steps);
    const uint32_t tag = job_.tag(units_.next_post);
    if (step == 0) {
      PostedOp& send = units_.input_sends[slot];
      ZRT_RETURN_IF_ERROR(task.collect(&send, right_, true, 0));
      if (send.busy()) break;
      const int block = ring_mod(me_ - 1, size_);
      ZRT_RETURN_IF_ERROR(task.post_data_send(context, right_, tag, input_chunk(block, chunk),
                                              chunk_count(block, chunk) * esize, &send,
                                              fingerprint_first_));
    }
    const int block = ring_mod(me_ - 2 - step, size_);
    ZRT_RETURN_IF_ERROR(task.post_data_recv(context, left_, tag, received(slot, chunk),
                                            chunk_count(block, chunk) * esize,
                                            &units_.recvs[slot], fingerprint_first_));
    fingerprint_first_ = false;
    ++units_.next_post;
    *moved = true;
  }
  return Status::ok();
}

// Reduces the oldest received chunk, in unit order, and forwards the partial unless it was the
// chunk's last step.
Status SubringReduce::reduce_next(TaskContext& context, CollTask& task, bool* moved) {
  if (units_.next_reduce >= job_.unit_count) return Status::ok();
  const uint64_t steps = static_cast<uint64_t>(size_ - 1);
  const size_t esize = spec_.element_size;
  const int slot = static_cast<int>(units_.next_reduce % kSlots);
  PostedOp& recv = units_.recvs[slot];
  const int step = static_cast<int>(units_.next_reduce % steps);
  const bool last = step == size_ - 2;
  // The last step adds this rank's own block: it waits for set_own_ready.
  if (!recv.finished() || (last && !own_ready_)) return Status::ok();
  const size_t chunk = units_.next_reduce / steps;
  const int block = ring_mod(me_ - 2 - step, size_);
  const size_t count = chunk_count(block, chunk);
  PostedOp& forward = units_.slot_sends[units_.send_seq % kSlots];
  if (!last) ZRT_RETURN_IF_ERROR(task.collect(&forward, right_, true, 0));
  if (!last && forward.busy()) return Status::ok();
  ZRT_RETURN_IF_ERROR(task.collect(&recv, left_, false, count * esize));
  char* out =
      last ? job_.output + chunk * chunk_elems_ * esize : send_slots_[units_.send_seq % kSlots];
  reduce_chunk(spec_, received(slot, chunk), step == 0 ? job_.input_scale : 1.0,
               input_chunk(block, chunk), job_.input_scale, out, count, last && job_.final);
  if (!last) {
    ZRT_RETURN_IF_ERROR(task.post_send(context, right_, job_.tag(units_.next_reduce + 1), out,
                                       count * esize, &forward));
    ++units_.send_seq;
  }
  ++units_.next_reduce;
  task.advanced();
  *moved = true;
  return Status::ok();
}

Status SubringReduce::progress(TaskContext& context, CollTask& task, bool* moved) {
  if (!active_) return Status::ok();
  for (;;) {
    bool step_moved = false;
    ZRT_RETURN_IF_ERROR(post_units(context, task, &step_moved));
    ZRT_RETURN_IF_ERROR(reduce_next(context, task, &step_moved));
    if (!step_moved) break;
    *moved = true;
  }
  Status status;
  const bool idle = units_.finish_sends(task, right_, &status);
  ZRT_RETURN_IF_ERROR(status);
  if (units_.next_reduce == job_.unit_count && idle) {
    active_ = false;
    *moved = true;
  }
  return Status::ok();
}

}  // namespace zrt
