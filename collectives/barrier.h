// Dissemination barrier (Hensgen, Finkel and Manber).
//
// In round j = 0, 1, ... while 2^j < N, rank r sends an empty message to rank r + 2^j and waits
// for the one from rank r - 2^j. After ceil(log2 N) rounds every rank has heard, directly or
// through others, from every rank, so none leaves before all have arrived. Works for any N.
#pragma once

#include "collectives/coll_task.h"

namespace zrt {

class DisseminationBarrier final : public Phase {
 public:
  Status start(TaskContext& context, CollTask& task) override;
  Status progress(TaskContext& context, CollTask& task, bool* done) override;

 private:
  Status post_round(TaskContext& context, CollTask& task);

  int distance_ = 1;
  int round_ = 0;
  PostedOp send_;
  PostedOp recv_;
};

}  // namespace zrt
