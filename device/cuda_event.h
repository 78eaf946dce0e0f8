// CudaEvent: the Event interface over a cudaEvent_t (timing disabled: only ordering matters).
// Recorded on a CudaStream it is cudaEventRecord, and a CudaStream waits on it with
// cudaStreamWaitEvent, entirely on the device. Recorded on a host stream it marks the point
// through a host function (generation counter + condition variable), so one event type connects
// any two streams; a CUDA stream that waits on such a point blocks a host callback until the
// host stream reaches it.
//
// query()/synchronize() poll cudaEventQuery with sleeps under the timeout and watch the NCCL
// communicator of the stream it was recorded on, so a hang behind a dead peer becomes an error.
#pragma once

#include <cuda_runtime.h>

#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>

#include "engine/engine.h"
#include "device/cuda_stream.h"

namespace zrt {

class CudaEvent final : public Event {
 public:
  static Status create(int device, int64_t timeout_ms, ProgressEngine& engine,
                       std::unique_ptr<CudaEvent>* event);
  ~CudaEvent() override;

  Status record(Stream& stream) override;
  Status query() override;
  Status synchronize() override;
  ProgressEngine& engine() override { return engine_; }

  // Makes `stream` wait for this event's recorded point (CudaStream::wait_event).
  Status enqueue_wait(CudaStream& stream);

 private:
  CudaEvent(int device, int64_t timeout_ms, ProgressEngine& engine)
      : device_(device), timeout_ms_(timeout_ms), engine_(engine) {}

  enum class Where { kNever, kDevice, kHost };

  // Host-recorded points: reached_ catches up with the generation each record asked for.
  struct HostMarks {
    std::mutex mutex;
    std::condition_variable changed;
    uint64_t reached = 0;
    Status error;
  };

  int device_ = 0;
  int64_t timeout_ms_ = 60000;
  ProgressEngine& engine_;
  cudaEvent_t event_ = nullptr;

  std::mutex mutex_;
  Where where_ = Where::kNever;
  uint64_t generation_ = 0;                        // last host record
  std::shared_ptr<CudaStreamState> source_state_;  // device records: the stream's failures
  std::shared_ptr<NcclComm> source_nccl_;          // device records: its communicator
  std::shared_ptr<HostMarks> marks_ = std::make_shared<HostMarks>();
};

}  // namespace zrt
