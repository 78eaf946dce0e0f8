#include "collectives/recursive_doubling_all_reduce.h"

#include <algorithm>
#include <cstring>

namespace zrt {

void RecursiveDoublingAllReduce::plan(int rank, int size) {
  int pow2 = 1;
  while (pow2 * 2 <= size) pow2 *= 2;
  const int rem = size - pow2;
  step_count_ = 0;
  const double p = spec_.scale;
  if (rank < 2 * rem && rank % 2 == 0) {
    // Folded away: hand the input up, get the result back.
    steps_[step_count_++] = Step{rank + 1, -1, false, false, false, 1.0, 1.0, 0};
    steps_[step_count_++] = Step{-1, rank + 1, true, false, false, 1.0, 1.0, 64};
    return;
  }
  int virtual_rank = rank - rem;
  bool raw = true;  // my partial is still my unscaled input
  if (rank < 2 * rem) {
    virtual_rank = rank / 2;
    steps_[step_count_++] = Step{-1, rank - 1, false, true, true, p, p, 0};
    raw = false;
  }
  uint32_t round = 1;
  for (int mask = 1; mask < pow2; mask <<= 1, ++round) {
    const int peer_virtual = virtual_rank ^ mask;
    const int peer = peer_virtual < rem ? peer_virtual * 2 + 1 : peer_virtual + rem;
    // The peer is raw exactly when it was not folded and this is the first round.
    const bool peer_raw = mask == 1 && peer >= 2 * rem;
    steps_[step_count_++] = Step{
        peer, peer, false, true, peer_virtual < virtual_rank, raw ? p : 1.0, peer_raw ? p : 1.0,
        round};
    raw = false;
  }
  if (rank < 2 * rem) {
    steps_[step_count_++] = Step{rank - 1, -1, false, false, false, 1.0, 1.0, 64};
  }
}

Status RecursiveDoublingAllReduce::start(TaskContext& context, CollTask& task) {
  if (context.resources == nullptr || context.resources->scratch == nullptr) {
    return Status(ZRT_INTERNAL_ERROR, "recursive doubling: stream staging memory missing");
  }
  scratch_ = static_cast<char*>(context.resources->scratch);
  segment_elems_ = std::max<size_t>(1, context.resources->scratch_bytes / spec_.element_size);
  segments_ = (count_ + segment_elems_ - 1) / segment_elems_;
  segment_ = 0;
  step_ = 0;
  step_posted_ = false;
  plan(context.rank, context.size);
  if (input_ != output_ && count_ > 0) {
    std::memcpy(output_, input_, count_ * spec_.element_size);
  }
  if (segments_ == 0) return Status::ok();
  return post_step(context, task);
}

Status RecursiveDoublingAllReduce::post_step(TaskContext& context, CollTask& task) {
  const Step& step = steps_[step_];
  const size_t begin = segment_ * segment_elems_;
  const size_t bytes = std::min(segment_elems_, count_ - begin) * spec_.element_size;
  char* out = output_ + begin * spec_.element_size;
  const uint32_t tag = static_cast<uint32_t>(segment_ * 65 + step.tag);
  if (step.recv_from >= 0) {
    ZRT_RETURN_IF_ERROR(task.post_recv(context, step.recv_from, tag,
                                       step.recv_into_output ? out : scratch_, bytes, &recv_));
  }
  if (step.send_to >= 0) {
    ZRT_RETURN_IF_ERROR(task.post_send(context, step.send_to, tag, out, bytes, &send_));
  }
  step_posted_ = true;
  return Status::ok();
}

Status RecursiveDoublingAllReduce::progress(TaskContext& context, CollTask& task, bool* done) {
  while (segment_ < segments_) {
    const Step& step = steps_[step_];
    const size_t begin = segment_ * segment_elems_;
    const size_t count = std::min(segment_elems_, count_ - begin);
    ZRT_RETURN_IF_ERROR(task.collect(&send_, step.send_to, true, 0));
    ZRT_RETURN_IF_ERROR(task.collect(&recv_, step.recv_from, false, count * spec_.element_size));
    // The send must be done before the combination overwrites the partial it reads.
    if (recv_.posted || send_.posted) {
      task.note_waiting(recv_.posted ? step.recv_from : step.send_to);
      return Status::ok();
    }
    char* out = output_ + begin * spec_.element_size;
    if (step.combine) {
      if (step.peer_is_lower) {
        reduce_chunk(spec_, scratch_, step.peer_scale, out, step.my_scale, out, count);
      } else {
        reduce_chunk(spec_, out, step.my_scale, scratch_, step.peer_scale, out, count);
      }
    }
    task.advanced();
    if (++step_ == step_count_) {
      step_ = 0;
      ++segment_;
    }
    if (segment_ < segments_) ZRT_RETURN_IF_ERROR(post_step(context, task));
  }
  *done = true;
  return Status::ok();
}

}  // namespace zrt
