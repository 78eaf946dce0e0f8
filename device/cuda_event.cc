#include "device/cuda_event.h"

#include <chrono>

#include "device/cuda_status.h"
#include "device/poll_wait.h"

namespace zrt {

Status CudaEvent::create(int device, int64_t timeout_ms, ProgressEngine& engine,
                         std::unique_ptr<CudaEvent>* event) {
  DeviceGuard device_guard;
  ZRT_RETURN_IF_ERROR(device_guard.enter(device));
  std::unique_ptr<CudaEvent> made(new CudaEvent(device, timeout_ms, engine));
  ZRT_CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&made->event_, cudaEventDisableTiming));
  *event = std::move(made);
  return Status::ok();
}

CudaEvent::~CudaEvent() {
  DeviceGuard device_guard;
  if (event_ != nullptr && device_guard.enter(device_).is_ok()) cudaEventDestroy(event_);
}

Status CudaEvent::record(Stream& stream) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (auto* cuda_stream = dynamic_cast<CudaStream*>(&stream)) {
    if (cuda_stream->device() != device_) {
      return Status::invalid_argument("event of CUDA device {} recorded on a stream of device {}",
                                      device_, cuda_stream->device());
    }
    source_state_ = cuda_stream->state();
    source_nccl_ = cuda_stream->nccl();
    where_ = Where::kDevice;
    // After a failure the event stands for the failure (zrt.h: events recorded after it report
    // the same status); nothing is recorded on the device.
    ZRT_RETURN_IF_ERROR(source_state_->get());
    Status status = cuda_status(cudaEventRecord(event_, cuda_stream->cuda()), "cudaEventRecord");
    if (!status.is_ok()) source_state_->fail(status);
    return status;
  }
  // A host stream: mark the point with a host function in its order.
  const uint64_t generation = ++generation_;
  std::shared_ptr<HostMarks> marks = marks_;
  where_ = Where::kHost;
  Status status = stream.enqueue_host_function(
      [marks, generation]() -> Status {
        std::lock_guard<std::mutex> marks_lock(marks->mutex);
        if (marks->reached < generation) marks->reached = generation;
        marks->changed.notify_all();
        return Status::ok();
      },
      "cuda event record");
  if (!status.is_ok()) {
    std::lock_guard<std::mutex> marks_lock(marks->mutex);
    marks->error = status;
    marks->changed.notify_all();
  }
  return status;
}

Status CudaEvent::query() {
  std::lock_guard<std::mutex> lock(mutex_);
  switch (where_) {
    case Where::kNever:
      return Status::ok();
    case Where::kHost: {
      std::lock_guard<std::mutex> marks_lock(marks_->mutex);
      ZRT_RETURN_IF_ERROR(marks_->error);
      if (marks_->reached >= generation_) return Status::ok();
      return Status(ZRT_IN_PROGRESS, "event not reached");
    }
    case Where::kDevice: {
      ZRT_RETURN_IF_ERROR(source_state_->get());
      cudaError_t result = cudaEventQuery(event_);
      if (result == cudaSuccess) return Status::ok();
      if (result == cudaErrorNotReady) return Status(ZRT_IN_PROGRESS, "event not reached");
      return cuda_status(result, "cudaEventQuery");
    }
  }
  return Status(ZRT_INTERNAL_ERROR, "CudaEvent in an unknown state");
}

Status CudaEvent::synchronize() {
  Where where;
  uint64_t generation;
  std::shared_ptr<NcclComm> nccl;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    where = where_;
    generation = generation_;
    nccl = source_nccl_;
  }
  if (where == Where::kNever) return Status::ok();
  if (where == Where::kHost) {
    // Host points are set by a host function under a condition variable: a true blocking wait.
    std::unique_lock<std::mutex> marks_lock(marks_->mutex);
    const bool reached = marks_->changed.wait_for(
        marks_lock, std::chrono::milliseconds(timeout_ms_),
        [&] { return marks_->reached >= generation || !marks_->error.is_ok(); });
    if (!marks_->error.is_ok()) return marks_->error;
    if (!reached) {
      return Status::error(ZRT_TIMEOUT, "CUDA event (host-recorded) not reached after {} ms",
                           timeout_ms_);
    }
    return Status::ok();
  }
  Status status = poll_until(timeout_ms_, "CUDA event synchronize", [&]() -> Status {
    if (nccl != nullptr) ZRT_RETURN_IF_ERROR(nccl->health());
    return query();
  });
  if (status.code() == ZRT_TIMEOUT && nccl != nullptr) nccl->abort(status);
  return status;
}

Status CudaEvent::enqueue_wait(CudaStream& stream) {
  std::lock_guard<std::mutex> lock(mutex_);
  switch (where_) {
    case Where::kNever:
      return Status::ok();
    case Where::kDevice: {
      Status failed = source_state_->get();
      if (!failed.is_ok()) {
        stream.fail(failed);  // a stream waiting on a failed event fails in turn
        return failed;
      }
      return cuda_status(cudaStreamWaitEvent(stream.cuda(), event_, 0), "cudaStreamWaitEvent");
    }
    case Where::kHost: {
      std::shared_ptr<HostMarks> marks = marks_;
      const uint64_t generation = generation_;
      const int64_t timeout_ms = timeout_ms_;
      return stream.enqueue_host_function(
          [marks, generation, timeout_ms]() -> Status {
            std::unique_lock<std::mutex> marks_lock(marks->mutex);
            const bool reached = marks->changed.wait_for(
                marks_lock, std::chrono::milliseconds(timeout_ms),
                [&] { return marks->reached >= generation || !marks->error.is_ok(); });
            if (!marks->error.is_ok()) return marks->error;
            if (!reached) {
              return Status::error(ZRT_TIMEOUT, "host-recorded event not reached after {} ms",
                                   timeout_ms);
            }
            return Status::ok();
          },
          "wait for host-recorded event");
    }
  }
  return Status(ZRT_INTERNAL_ERROR, "CudaEvent in an unknown state");
}

}  // namespace zrt
