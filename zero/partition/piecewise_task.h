// PiecewiseTask: element-wise work of the partition manager (the step backup's copy, the
// conversion of master into parameters) that runs on the progress thread in stream order but
// must not hold that thread for the milliseconds a whole buffer takes: every other stream's
// collective moves in 256 KiB chunks, one round of them per pass of the progress loop, so one
// long host function between two passes delays each of them by its whole length. This task
// does one piece per progress() call, so the other streams advance between pieces.
#pragma once

#include <algorithm>
#include <cstddef>
#include <functional>
#include <string>
#include <utility>

#include "engine/task.h"

namespace zrt {

class PiecewiseTask final : public Task {
 public:
  // Calls work(begin, count) over [0, total) in pieces of at most `piece` (> 0) units.
  PiecewiseTask(size_t total, size_t piece, std::function<void(size_t, size_t)> work,
                const char* name)
      : total_(total), piece_(piece), work_(std::move(work)), name_(name) {}

  Status start(TaskContext&) override { return Status::ok(); }
  Status progress(TaskContext&, bool* done) override {
    if (done_ < total_) {
      const size_t count = std::min(piece_, total_ - done_);
      work_(done_, count);
      done_ += count;
      ++pieces_;  // the engine then goes round again rather than sleeping
    }
    *done = done_ == total_;
    return Status::ok();
  }
  bool communicates() const override { return false; }
  zrt_coll_kind_t kind() const override { return ZRT_COLL_KIND_COUNT; }
  uint64_t bytes_sent() const override { return 0; }
  uint64_t bytes_received() const override { return 0; }
  std::string describe() const override { return name_; }
  uint64_t progress_count() const override { return pieces_; }

 private:
  size_t total_;
  size_t piece_;
  size_t done_ = 0;
  uint64_t pieces_ = 0;
  std::function<void(size_t, size_t)> work_;
  std::string name_;
};

}  // namespace zrt
