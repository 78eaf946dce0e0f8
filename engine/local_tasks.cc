#include "engine/local_tasks.h"

#include <fmt/format.h>

namespace zrt {

Status HostFunctionTask::start(TaskContext&) {
  return Status::ok();
}

Status HostFunctionTask::progress(TaskContext&, bool* done) {
  Status status = function_();
  if (!status.is_ok()) return status.with_context(name_);
  *done = true;
  return Status::ok();
}

Status WaitPointTask::start(TaskContext&) {
  return Status::ok();
}

Status WaitPointTask::progress(TaskContext&, bool* done) {
  std::lock_guard<std::mutex> lock(engine_.mutex());
  Status status = EngineImpl::point_status_locked(*stream_, ticket_);
  if (status.code() == ZRT_IN_PROGRESS) return Status::ok();
  if (!status.is_ok()) {
    return status.with_context(fmt::format("waited-on event of stream {}", stream_->index()));
  }
  *done = true;
  return Status::ok();
}

std::string WaitPointTask::describe() const {
  return fmt::format("wait_event(stream {}, point {})", stream_->index(), ticket_);
}

Status ForeignEventWaitTask::progress(TaskContext&, bool* done) {
  Status status = event_.query();
  if (status.code() == ZRT_IN_PROGRESS) return Status::ok();
  if (!status.is_ok()) return status.with_context("waited-on event");
  *done = true;
  return Status::ok();
}

}  // namespace zrt
