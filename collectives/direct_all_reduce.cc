#include "collectives/direct_all_reduce.h"

#include <algorithm>
#include <cstring>

#include <fmt/format.h>

namespace zrt {

size_t DirectAllReduce::segment_elements(int size, size_t scratch_bytes, size_t element_size) {
  return std::max<size_t>(1, scratch_bytes / (static_cast<size_t>(size) * element_size));
}

Status DirectAllReduce::start(TaskContext& context, CollTask& task) {
  if (context.resources == nullptr || context.resources->scratch == nullptr) {
    return Status(ZRT_INTERNAL_ERROR, "direct all-reduce: stream staging memory missing");
  }
  scratch_ = static_cast<char*>(context.resources->scratch);
  header_ = task.fingerprint_on() ? kFingerprintHeaderBytes : 0;
  const size_t n = static_cast<size_t>(context.size);
  segment_elems_ = segment_elements(context.size, context.resources->scratch_bytes - header_ * n,
                                    spec_.element_size);
  stride_ = header_ + segment_elems_ * spec_.element_size;
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
  const char* own = input_ + begin * spec_.element_size;
  char* mine = slot(context.rank);
  std::memcpy(mine + header_, own, bytes);
  if (header_ > 0) std::memcpy(mine, &task.fingerprint(), sizeof(OrderFingerprint));
  const uint32_t tag = static_cast<uint32_t>(segment_);
  for (int peer = 0; peer < context.size; ++peer) {
    if (peer == context.rank) continue;
    // With a header, room for the whole slot: a peer's longer segment then still arrives and
    // its fingerprint names the calls, where a truncated receive would not.
    ZRT_RETURN_IF_ERROR(task.post_recv(context, peer, tag, slot(peer),
                                       header_ > 0 ? stride_ : bytes, &recvs_[peer]));
  }
  for (int peer = 0; peer < context.size; ++peer) {
    if (peer == context.rank) continue;
    if (header_ > 0) {
      // The header is control, not payload (docs/ARCHITECTURE.md#byte-counters).
      ZRT_RETURN_IF_ERROR(
          task.post_send(context, peer, tag, mine, header_ + bytes, &sends_[peer], false));
      if (bytes > 0) task.add_sent(bytes);
    } else {
      ZRT_RETURN_IF_ERROR(task.post_send(context, peer, tag, own, bytes, &sends_[peer]));
    }
  }
  return Status::ok();
}

Status DirectAllReduce::collect_segment(CollTask& task, int peer, size_t bytes) {
  if (header_ == 0) return task.collect(&recvs_[peer], peer, false, bytes);
  PostedOp& recv = recvs_[peer];
  if (!recv.finished()) return Status::ok();
  recv.posted = false;
  if (!recv.completion.status.is_ok()) {
    return recv.completion.status.with_context(fmt::format("receive from rank {}", peer));
  }
  const size_t got = recv.completion.bytes;
  ZRT_RETURN_IF_ERROR(task.check_fingerprint(slot(peer), std::min(got, header_), peer));
  if (got != header_ + bytes) {
    return Status::error(ZRT_REMOTE_ERROR,
                         "receive from rank {}: got {} bytes, expected {} (mismatched collective "
                         "arguments across ranks?)",
                         peer, got - header_, bytes);
  }
  task.add_received(bytes);
  task.advanced();
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
      ZRT_RETURN_IF_ERROR(collect_segment(task, peer, bytes));
      // Sends must be done too: in place, the output is the input being sent.
      if (sends_[peer].posted || recvs_[peer].posted) {
        task.note_waiting(peer);
        return Status::ok();
      }
    }
    char* out = output_ + begin * spec_.element_size;
    if (context.size == 1) {
      copy_scaled(spec_, slot(0) + header_, out, count);
    } else {
      reduce_chunk(spec_, slot(0) + header_, spec_.scale, slot(1) + header_, spec_.scale, out,
                   count);
      for (int rank = 2; rank < context.size; ++rank) {
        reduce_chunk(spec_, out, 1.0, slot(rank) + header_, spec_.scale, out, count);
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
