// Streams: FIFO queues of tasks. Submission takes the engine mutex and rings the wake fd; the
// progress thread pops the head. Waiters block on the engine's condition variable.
#include <fmt/format.h>

#include "engine/engine_impl.h"
#include "engine/local_tasks.h"

namespace zrt {

ProgressEngine& StreamImpl::engine() {
  return engine_;
}

Status StreamImpl::enqueue(std::unique_ptr<Task> task) {
  if (task == nullptr) return Status::invalid_argument("stream {}: enqueue of a null task", index_);
  if (engine_.run_inline(*this, task)) return Status::ok();
  {
    std::lock_guard<std::mutex> lock(engine_.mutex());
    if (failed_) return error_;
    if (destroyed_) return Status::invalid_usage("stream {} is being destroyed", index_);
    if (!engine_.accepting_locked()) {
      return Status::invalid_usage("stream {}: the progress engine was shut down", index_);
    }
    if (task->communicates()) {
      TraceCall call = task->trace_call();
      call.stream = index_;
      task->trace_ticket = engine_.recorder().post(call);
    }
    const bool slow = !engine_.ends_soon(*task);
    queue_.push_back(std::move(task));
    ++tickets_.enqueued;
    if (slow) tickets_.last_slow_ticket = tickets_.enqueued;
  }
  engine_.wake();
  return Status::ok();
}

bool StreamImpl::begin_inline(InlineCall* call) {
  return engine_.begin_inline(*this, nullptr, call);
}

void StreamImpl::end_inline(InlineCall& call, zrt_coll_kind_t kind, bool internal,
                            uint64_t bytes_sent, uint64_t bytes_received) {
  engine_.end_inline(*this, call, kind, internal, bytes_sent, bytes_received);
}

void StreamImpl::hand_off_inline(InlineCall& call, std::unique_ptr<Task> task) {
  engine_.hand_off_inline(*this, call, std::move(task));
}

Status StreamImpl::enqueue_host_function(std::function<Status()> function, const char* name) {
  if (!function) return Status::invalid_argument("stream {}: host function is empty", index_);
  return enqueue(std::make_unique<HostFunctionTask>(std::move(function), name));
}

Status StreamImpl::synchronize() {
  uint64_t ticket = 0;
  {
    std::lock_guard<std::mutex> lock(engine_.mutex());
    ticket = tickets_.enqueued;
  }
  return engine_.wait_point(engine_.shared_stream(this), ticket);
}

Status StreamImpl::query() {
  std::lock_guard<std::mutex> lock(engine_.mutex());
  return EngineImpl::point_status_locked(*this, tickets_.enqueued);
}

Status StreamImpl::wait_event(Event& event) {
  auto* impl = dynamic_cast<EventImpl*>(&event);
  if (impl == nullptr) {
    // An event of another kind (a CUDA event): the engine polls it. It must outlive the wait;
    // zrt_event_destroy drains the communicator's streams before freeing such an event.
    if (&event.engine() != &engine_) {
      return Status::invalid_argument("stream {}: the event belongs to another communicator",
                                      index_);
    }
    return enqueue(std::make_unique<ForeignEventWaitTask>(event));
  }
  if (&impl->engine() != &engine_) {
    return Status::invalid_argument("stream {}: the event belongs to another communicator", index_);
  }
  std::shared_ptr<StreamImpl> source;
  uint64_t ticket = 0;
  {
    std::lock_guard<std::mutex> lock(engine_.mutex());
    source = impl->stream_;
    ticket = impl->ticket_;
  }
  if (source == nullptr) return Status::ok();  // never recorded: complete
  return enqueue(std::make_unique<WaitPointTask>(engine_, std::move(source), ticket));
}

}  // namespace zrt
