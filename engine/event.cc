// Events: a recorded point (stream, number of tasks enqueued before it). The point is reached
// when the stream completed that many tasks; it fails if the stream failed before.
#include "engine/engine_impl.h"

namespace zrt {

ProgressEngine& EventImpl::engine() {
  return engine_;
}

Status EventImpl::record(Stream& stream) {
  auto* impl = dynamic_cast<StreamImpl*>(&stream);
  if (impl == nullptr || &impl->engine() != &engine_) {
    return Status::invalid_argument(
        "event record: the stream is not a host stream of this communicator");
  }
  std::shared_ptr<StreamImpl> shared = engine_.shared_stream(impl);
  if (shared == nullptr) {
    return Status::invalid_argument("event record: stream {} was destroyed", impl->index());
  }
  std::lock_guard<std::mutex> lock(engine_.mutex());
  stream_ = std::move(shared);
  ticket_ = impl->tickets_.enqueued;
  return Status::ok();
}

Status EventImpl::query() {
  std::lock_guard<std::mutex> lock(engine_.mutex());
  if (stream_ == nullptr) return Status::ok();
  return EngineImpl::point_status_locked(*stream_, ticket_);
}

Status EventImpl::synchronize() {
  std::shared_ptr<StreamImpl> stream;
  uint64_t ticket = 0;
  {
    std::lock_guard<std::mutex> lock(engine_.mutex());
    stream = stream_;
    ticket = ticket_;
  }
  if (stream == nullptr) return Status::ok();
  return engine_.wait_point(stream, ticket);
}

}  // namespace zrt
