#include "collectives/point_to_point.h"

#include <cstring>

namespace zrt {

Status SendPhase::start(TaskContext& context, CollTask& task) {
  if (peer_ == context.rank) {
    if (context.resources == nullptr) {
      return Status(ZRT_INTERNAL_ERROR, "send to self: no stream resources");
    }
    context.resources->self_mailbox.push_back(SelfMessage{buffer_, bytes_});
    return Status::ok();
  }
  return task.post_send(context, peer_, 0, buffer_, bytes_, &op_);
}

Status SendPhase::progress(TaskContext& context, CollTask& task, bool* done) {
  if (peer_ != context.rank) {
    ZRT_RETURN_IF_ERROR(task.collect(&op_, peer_, true, 0));
    if (op_.posted) {
      task.note_waiting(peer_);
      return Status::ok();
    }
  }
  *done = true;
  return Status::ok();
}

Status RecvPhase::start(TaskContext& context, CollTask& task) {
  if (peer_ == context.rank) return Status::ok();
  return task.post_recv(context, peer_, 0, buffer_, bytes_, &op_);
}

Status RecvPhase::progress(TaskContext& context, CollTask& task, bool* done) {
  if (peer_ == context.rank) {
    auto& mailbox = context.resources->self_mailbox;
    if (mailbox.empty()) {
      return Status::invalid_usage(
          "receive from self ({} bytes) has no matching earlier send to self on this stream",
          bytes_);
    }
    SelfMessage message = mailbox.front();
    mailbox.pop_front();
    if (message.bytes != bytes_) {
      return Status::invalid_argument("receive from self: the send has {} bytes, the receive {}",
                                      message.bytes, bytes_);
    }
    if (bytes_ > 0 && message.buffer != buffer_) std::memmove(buffer_, message.buffer, bytes_);
    task.advanced();
    *done = true;
    return Status::ok();
  }
  ZRT_RETURN_IF_ERROR(task.collect(&op_, peer_, false, bytes_));
  if (op_.posted) {
    task.note_waiting(peer_);
    return Status::ok();
  }
  *done = true;
  return Status::ok();
}

}  // namespace zrt
