#include "kernels/optim/thread_pool.h"

#include <sched.h>

#include <cerrno>
#include <cstring>
#include <system_error>

namespace zrt::optim {

int affinity_cpu_count() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return 1;
  const int count = CPU_COUNT(&set);
  return count > 0 ? count : 1;
}

Status ThreadPool::create(int threads, std::unique_ptr<ThreadPool>* pool) {
  if (threads < 1 || threads > kMaxPoolThreads) {
    return Status::invalid_argument("threads is {}; expected 1 to {}", threads, kMaxPoolThreads);
  }
  std::unique_ptr<ThreadPool> made(new ThreadPool());
  made->workers_.reserve(static_cast<size_t>(threads - 1));
  for (int i = 1; i < threads; ++i) {
    try {
      made->workers_.emplace_back([raw = made.get(), i] { raw->worker(i); });
    } catch (const std::system_error& e) {
      // The destructor stops and joins the threads already started.
      return Status::error(ZRT_SYSTEM_ERROR, "starting optimizer thread {} of {}: {}", i + 1,
                           threads, e.what());
    }
  }
  *pool = std::move(made);
  return Status::ok();
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  start_.notify_all();
  for (std::thread& t : workers_) t.join();
}

void ThreadPool::worker(int index) {
  uint64_t seen = 0;
  for (;;) {
    const std::function<void(int)>* task = nullptr;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      start_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
      if (index >= tasks_) continue;
      task = task_;
    }
    (*task)(index);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (--pending_ == 0) done_.notify_one();
    }
  }
}

void ThreadPool::run(int tasks, const std::function<void(int)>& task) {
  if (tasks <= 0) return;
  if (tasks > threads()) tasks = threads();
  if (tasks > 1) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      task_ = &task;
      tasks_ = tasks;
      pending_ = tasks - 1;
      ++generation_;
    }
    start_.notify_all();
  }
  task(0);
  if (tasks > 1) {
    std::unique_lock<std::mutex> lock(mutex_);
    done_.wait(lock, [&] { return pending_ == 0; });
    task_ = nullptr;
  }
}

}  // namespace zrt::optim
