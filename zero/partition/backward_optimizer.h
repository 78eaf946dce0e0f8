// BackwardOptimizer: the thread that runs an offloaded step's optimizer during backward
// (zrt_partition_step_in_backward; docs/ARCHITECTURE.md#offload-pipeline). The step transaction
// starts a job, then hands over each segment as its last reduction is enqueued (on the training
// thread, inside grad_ready); this thread runs the job on the segments in that order (wait for
// the segment's gradient, call the optimizer, make the parameter copy) while the framework goes
// on with backward. The first failing segment ends the job: later ones are skipped, and finish()
// returns that failure for the step's vote.
//
// Why a thread of its own rather than the progress thread: the callback is CPU work of
// milliseconds, and the progress thread must keep serving the reductions it overlaps.
//
// Threading: start, push, finish and stop are called from the training thread, cancelled also
// from the job; the thread is created at the first start and joined by stop (or the destructor),
// which skips whatever is still queued (a job in progress finishes its segment).
#pragma once

#include <condition_variable>
#include <cstddef>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "lib/core/status.h"

namespace zrt {

class BackwardOptimizer {
 public:
  // Runs one segment of the step's optimizer; a failure ends the job.
  using Job = std::function<Status(int segment)>;

  // `segments`: how many pushes a job can take (each segment once): the queue is sized once.
  explicit BackwardOptimizer(size_t segments);
  ~BackwardOptimizer();
  BackwardOptimizer(const BackwardOptimizer&) = delete;
  BackwardOptimizer& operator=(const BackwardOptimizer&) = delete;

  // Begins a job (none may be active). Fails only if the thread cannot be started.
  Status start(Job job);
  // Queues a segment of the active job (at most `segments` per job).
  void push(int segment);
  // Waits until every pushed segment ran or was skipped, ends the job and returns its first
  // failure.
  Status finish();
  // Stops the thread: a job in progress finishes its segment, the rest is skipped; returns once
  // the thread has ended. Idempotent; the destructor calls it.
  void stop();
  // stop() has begun: a job should not start another callback.
  bool cancelled();

 private:
  void loop();

  std::mutex mutex_;
  std::condition_variable work_ready_;  // a push, or the destructor
  std::condition_variable drained_;     // the queue ran dry with nothing running
  std::vector<int> queue_;              // the job's segments, capacity fixed at construction
  size_t next_ = 0;                     // the next queued segment to run
  bool running_ = false;                // the thread is inside job_
  bool stopping_ = false;
  Status failure_;
  Job job_;
  std::thread thread_;
};

}  // namespace zrt
