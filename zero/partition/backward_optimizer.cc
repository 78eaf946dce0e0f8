#include "zero/partition/backward_optimizer.h"

#include <system_error>
#include <utility>

namespace zrt {

BackwardOptimizer::BackwardOptimizer(size_t segments) {
  queue_.reserve(segments);
}

BackwardOptimizer::~BackwardOptimizer() {
  stop();
}

void BackwardOptimizer::stop() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  work_ready_.notify_all();
  if (thread_.joinable()) thread_.join();
}

Status BackwardOptimizer::start(Job job) {
  if (!thread_.joinable()) {
    try {
      thread_ = std::thread([this] { loop(); });
    } catch (const std::system_error& error) {
      return Status::error(ZRT_SYSTEM_ERROR,
                           "cannot start the thread that runs the optimizer during backward: {}",
                           error.what());
    }
  }
  std::lock_guard<std::mutex> lock(mutex_);
  job_ = std::move(job);
  queue_.clear();
  next_ = 0;
  failure_ = Status::ok();
  return Status::ok();
}

void BackwardOptimizer::push(int segment) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (queue_.size() == queue_.capacity()) {
      // More pushes than segments is a bug of the caller; failing the job keeps the step's
      // all-or-nothing promise instead of allocating behind it.
      if (failure_.is_ok()) {
        failure_ = Status::error(ZRT_INTERNAL_ERROR,
                                 "segment {} handed to the backward optimizer after all {} "
                                 "segments of the step",
                                 segment, queue_.capacity());
      }
      return;
    }
    queue_.push_back(segment);
  }
  work_ready_.notify_one();
}

Status BackwardOptimizer::finish() {
  std::unique_lock<std::mutex> lock(mutex_);
  drained_.wait(lock, [this] { return next_ == queue_.size() && !running_; });
  job_ = nullptr;
  return std::exchange(failure_, Status::ok());
}

bool BackwardOptimizer::cancelled() {
  std::lock_guard<std::mutex> lock(mutex_);
  return stopping_;
}

void BackwardOptimizer::loop() {
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    work_ready_.wait(lock, [this] { return stopping_ || next_ < queue_.size(); });
    if (stopping_) break;
    const int segment = queue_[next_++];
    if (!failure_.is_ok()) {
      // The job failed on an earlier segment: the step rolls back, nothing more to run.
      if (next_ == queue_.size()) drained_.notify_all();
      continue;
    }
    running_ = true;
    Job& job = job_;
    lock.unlock();
    Status status = job(segment);
    lock.lock();
    running_ = false;
    if (!status.is_ok() && failure_.is_ok()) failure_ = std::move(status);
    if (next_ == queue_.size()) drained_.notify_all();
  }
  // Whatever is still queued is skipped: the owner is going away.
  next_ = queue_.size();
  drained_.notify_all();
}

}  // namespace zrt
