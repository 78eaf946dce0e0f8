// Send and receive tasks. A pair matches by (stream, direction, per-peer sequence): the k-th
// send from rank a to rank b on stream s meets the k-th receive from a on b's stream s (the
// engine derives the tag). A send to oneself is a local copy: it is parked in the stream's
// mailbox and delivered by the next receive from oneself on the same stream, so its buffer must
// stay untouched until that receive has run.
#pragma once

#include "collectives/coll_task.h"

namespace zrt {

class SendPhase final : public Phase {
 public:
  SendPhase(const void* buffer, size_t bytes, int peer)
      : buffer_(buffer), bytes_(bytes), peer_(peer) {}
  Status start(TaskContext& context, CollTask& task) override;
  Status progress(TaskContext& context, CollTask& task, bool* done) override;

 private:
  const void* buffer_;
  size_t bytes_;
  int peer_;
  PostedOp op_;
};

class RecvPhase final : public Phase {
 public:
  RecvPhase(void* buffer, size_t bytes, int peer) : buffer_(buffer), bytes_(bytes), peer_(peer) {}
  Status start(TaskContext& context, CollTask& task) override;
  Status progress(TaskContext& context, CollTask& task, bool* done) override;

 private:
  void* buffer_;
  size_t bytes_;
  int peer_;
  PostedOp op_;
};

}  // namespace zrt
