// ThreadPool: a fixed set of threads that run one elementwise job at a time, split into one
// task per thread, the calling thread taking task 0. Made once (the thread count is checked
// before any thread starts) and owned by whoever made it (the C API's zrt_optimizer_pool_t);
// there is no process-wide pool. Threads inherit the creating thread's CPU affinity, so a rank
// bound by zrt-run --bind keeps its optimizer on its own cores.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "lib/core/status.h"

namespace zrt::optim {

// The number of CPUs the calling thread may run on (sched_getaffinity), at least 1.
int affinity_cpu_count();

inline constexpr int kMaxPoolThreads = 1024;

class ThreadPool {
 public:
  // threads in [1, kMaxPoolThreads]: that many, the caller counted, so threads - 1 start.
  // ZRT_INVALID_ARGUMENT out of range; ZRT_SYSTEM_ERROR when a thread cannot start (those
  // already started are stopped again).
  static Status create(int threads, std::unique_ptr<ThreadPool>* pool);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int threads() const { return static_cast<int>(workers_.size()) + 1; }

  // Runs task(t) for t in [0, tasks), tasks <= threads(), task 0 on the calling thread, and
  // returns when every task has returned. One run at a time (the caller serialises).
  void run(int tasks, const std::function<void(int)>& task);

 private:
  ThreadPool() = default;
  void worker(int index);

  std::mutex mutex_;
  std::condition_variable start_;
  std::condition_variable done_;
  uint64_t generation_ = 0;  // bumped by every run
  int tasks_ = 0;            // of the current run
  int pending_ = 0;          // worker tasks of the current run not yet finished
  const std::function<void(int)>* task_ = nullptr;
  bool stop_ = false;
  std::vector<std::thread> workers_;
};

}  // namespace zrt::optim
