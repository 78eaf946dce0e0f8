#include "collectives/direct_all_reduce.h"

#include <algorithm>
#include <cstring>

namespace zrt {

size_t DirectAllReduce::segment_elements(int size, size_t scratch_bytes, size_t element_size) {
  return std::max<size_t>(1, scratch_bytes / (static_cast<size_t>(size) * element_size));
}

Status DirectAllReduce::start(TaskContext& context, CollTask& task) {
  if (context.resources == nullptr || context.resources->scratch == nullptr) {
    return Status(ZRT_INTERNAL_ERROR, "direct all-reduce: stream staging memory missing");
  }
  scratch_ = static_cast<char*>(context.resources->scratch);
  segment_elems_ =
      segment_elements(context.size, context.resources->scratch_bytes, spec_.element_size);
  segments_ = (count_ + segment_elems_ - 1) / segment_elems_;
  segment_ = 0;
  sends_.assign(context.size, PostedOp{});
  recvs_.assign(context.size, PostedOp{});
  if (segments_ == 0) return Status::ok();
  return post_segment(context, task);
}

Status DirectAllReduce::post_segment(TaskContext& context, CollTask& task) {
  const size_t begin = segment_ * segment_elems_;
  const size_t count = std::min(segment_elems_, count_ - begin);
  const size_t bytes = count * spec_.element_size;
  const size_t slot_bytes = segment_elems_ * spec_.element_size;
  const char* own = input_ + begin * spec_.element_size;
  std::memcpy(scratch_ + context.rank * slot_bytes, own, bytes);
  const uint32_t tag = static_cast<uint32_t>(segment_);
  for (int peer = 0; peer < context.size; ++peer) {
    if (peer == context.rank) continue;
    ZRT_RETURN_IF_ERROR(
        task.post_recv(context, peer, tag, scratch_ + peer * slot_bytes, bytes, &recvs_[peer]));
  }
  for (int peer = 0; peer < context.size; ++peer) {
    if (peer == context.rank) continue;
    ZRT_RETURN_IF_ERROR(task.post_send(context, peer, tag, own, bytes, &sends_[peer]));
  }
  return Status::ok();
}

Status DirectAllReduce::progress(TaskContext& context, CollTask& task, bool* done) {
  while (segment_ < segments_) {
    const size_t begin = segment_ * segment_elems_;
    const size_t count = std::min(segment_elems_, count_ - begin);
    const size_t bytes = count * spec_.element_size;
    for (int peer = 0; peer < context.size; ++peer) {
      if (peer == context.rank) continue;
      ZRT_RETURN_IF_ERROR(task.collect(&sends_[peer], peer, true, 0));
      ZRT_RETURN_IF_ERROR(task.collect(&recvs_[peer], peer, false, bytes));
      // Sends must be done too: in place, the output is the input being sent.
      if (sends_[peer].posted || recvs_[peer].posted) {
        task.note_waiting(peer);
        return Status::ok();
      }
    }
    const size_t slot_bytes = segment_elems_ * spec_.element_size;
    char* out = output_ + begin * spec_.element_size;
    if (context.size == 1) {
      copy_scaled(spec_, scratch_, out, count);
    } else {
      reduce_chunk(spec_, scratch_, spec_.scale, scratch_ + slot_bytes, spec_.scale, out, count);
      for (int rank = 2; rank < context.size; ++rank) {
        reduce_chunk(spec_, out, 1.0, scratch_ + rank * slot_bytes, spec_.scale, out, count);
      }
    }
    task.advanced();
    ++segment_;
    if (segment_ < segments_) ZRT_RETURN_IF_ERROR(post_segment(context, task));
  }
  *done = true;
  return Status::ok();
}

}  // namespace zrt
