// The whole collective on one rank (N = 1): the output is the input, pre-multiplied when the
// op asks for it (ZRT_AVG over one rank or a premul sum). In place it only scales.
#pragma once

#include "collectives/coll_task.h"

namespace zrt {

class LocalCopy final : public Phase {
 public:
  LocalCopy(const void* input, void* output, size_t count, const ReduceSpec& spec)
      : input_(input), output_(output), count_(count), spec_(spec) {}
  Status start(TaskContext&, CollTask&) override { return Status::ok(); }
  Status progress(TaskContext&, CollTask& task, bool* done) override {
    if (output_ != nullptr && input_ != nullptr) copy_scaled(spec_, input_, output_, count_);
    task.advanced();
    *done = true;
    return Status::ok();
  }

 private:
  const void* input_;
  void* output_;
  size_t count_;
  ReduceSpec spec_;
};

}  // namespace zrt
