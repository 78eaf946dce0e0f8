#include "collectives/barrier.h"

namespace zrt {

Status DisseminationBarrier::start(TaskContext& context, CollTask& task) {
  distance_ = 1;
  round_ = 0;
  if (context.size == 1) return Status::ok();
  return post_round(context, task);
}

Status DisseminationBarrier::post_round(TaskContext& context, CollTask& task) {
  const int to = ring_mod(context.rank + distance_, context.size);
  const int from = ring_mod(context.rank - distance_, context.size);
  ZRT_RETURN_IF_ERROR(
      task.post_recv(context, from, static_cast<uint32_t>(round_), nullptr, 0, &recv_));
  return task.post_send(context, to, static_cast<uint32_t>(round_), nullptr, 0, &send_);
}

Status DisseminationBarrier::progress(TaskContext& context, CollTask& task, bool* done) {
  while (distance_ < context.size) {
    const int to = ring_mod(context.rank + distance_, context.size);
    const int from = ring_mod(context.rank - distance_, context.size);
    ZRT_RETURN_IF_ERROR(task.collect(&send_, to, true, 0));
    ZRT_RETURN_IF_ERROR(task.collect(&recv_, from, false, 0));
    if (recv_.posted) {
      task.note_waiting(from);
      return Status::ok();
    }
    if (send_.posted) {
      task.note_waiting(to);
      return Status::ok();
    }
    distance_ *= 2;
    ++round_;
    if (distance_ < context.size) ZRT_RETURN_IF_ERROR(post_round(context, task));
  }
  *done = true;
  return Status::ok();
}

}  // namespace zrt
