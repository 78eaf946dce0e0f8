// CudaStream: the DeviceStream interface (engine/device.h) over a cudaStream_t. Collectives
// enqueued on it are NCCL calls on that stream (DeviceStream::enqueue_collectives); host functions
// are cudaLaunchHostFunc; waits on CUDA events are cudaStreamWaitEvent, so ordering between the
// framework's compute stream and zrt's all-gather / reduce-scatter streams never costs a host
// synchronisation.
//
// A zrt-made stream is created non-blocking at the device's highest priority (communication
// should overtake compute kernels queued earlier, as in ZeRO's overlap); a wrapped one
// (zrt_stream_from_cuda) is the framework's and is never destroyed by zrt.
//
// Errors are sticky (zrt.h): the first failure (an NCCL asynchronous error, a failed host
// function, a timeout) fails the stream and every later call reports it. Waits poll with sleeps
// (poll_wait.h) and watch the NCCL communicator, so a dead peer surfaces within the timeout; a
// timeout aborts the NCCL communicator, which releases kernels stuck on that peer.
//
// Counters (zrt_comm_stats) count a batch once zrt sees the device past it: on the next enqueue,
// query or synchronize of this stream; busy time is the device time between timing events
// recorded around the batch.
#pragma once

#include <cuda_runtime.h>

#include <deque>
#include <memory>
#include <mutex>
#include <vector>

#include "lib/core/collective_args.h"
#include "engine/device.h"
#include "engine/engine.h"
#include "device/device_arena.h"
#include "device/nccl_comm.h"

namespace zrt {

// The failure state of a stream, shared with host callbacks that may outlive the stream object.
struct CudaStreamState {
  std::mutex mutex;
  Status error;
  void fail(const Status& status) {
    std::lock_guard<std::mutex> lock(mutex);
    if (error.is_ok()) error = status;
  }
  Status get() {
    std::lock_guard<std::mutex> lock(mutex);
    return error;
  }
};

// What a stream shares with its communicator's device context (kept alive by every stream).
struct CudaStreamResources {
  std::shared_ptr<NcclComm> nccl;
  std::shared_ptr<DeviceArena> scratch;  // owns barrier_scratch
  void* barrier_scratch = nullptr;       // 4 bytes of device memory
};

class CudaStream final : public DeviceStream {
 public:
  // external == nullptr with owns == true: a new high-priority stream. Otherwise wraps
  // `external` (cudaStreamLegacy / 0 included), which must live as long as this object.
  static Status create(const CudaStreamResources& resources, ProgressEngine& engine, int index,
                       cudaStream_t external, bool wrap_external,
                       std::unique_ptr<CudaStream>* stream);
  ~CudaStream() override;

  // Host Tasks need the progress engine's transport, which lives on host memory: refused.
  Status enqueue(std::unique_ptr<Task> task) override;
  // Runs `function` on CUDA's host-callback thread when the stream reaches this point. It must
  // not call CUDA. A failure fails the stream.
  Status enqueue_host_function(std::function<Status()> function, const char* name) override;
  Status synchronize() override;
  Status query() override;
  // CudaEvent: cudaStreamWaitEvent. Any other event (the engine's host events): a host callback
  // on this stream blocks until the event completes (bounded by the timeout); the event must
  // then stay alive until this stream has passed the wait.
  Status wait_event(Event& event) override;
  Status enqueue_collectives(int rank, int size, const CollectiveArgs* args, size_t count) override;
  void* native_handle() const override { return static_cast<void*>(stream_); }

  int index() const override { return index_; }
  zrt_mem_kind_t mem_kind() const override { return ZRT_MEM_CUDA; }
  ProgressEngine& engine() override { return engine_; }

  cudaStream_t cuda() const { return stream_; }
  int device() const { return resources_.nccl->device(); }
  int64_t timeout_ms() const { return resources_.nccl->options().timeout_ms; }
  const std::shared_ptr<CudaStreamState>& state() const { return state_; }
  const std::shared_ptr<NcclComm>& nccl() const { return resources_.nccl; }
  // Fails the stream with `reason` (first failure wins).
  void fail(const Status& reason) { state_->fail(reason); }

 private:
  CudaStream(const CudaStreamResources& resources, ProgressEngine& engine, int index)
      : resources_(resources), engine_(engine), index_(index) {}

  // ok / ZRT_IN_PROGRESS / error; `check_engine` also watches the host communicator (not done
  // from the destructor, which may run after the communicator is gone).
  Status poll(bool check_engine);
  Status wait(bool check_engine, const char* what);
  Status device_copy(const void* src, void* dst, size_t bytes);

  struct SelfSend {
    const void* buffer;
    size_t bytes;
  };
  // A batch of collectives whose counters wait for the device to pass `end`.
  struct PendingCounts {
    struct Totals {
      zrt_coll_kind_t kind;
      bool internal;
      uint64_t sent;
      uint64_t received;
    };
    cudaEvent_t start = nullptr;
    cudaEvent_t end = nullptr;
    std::vector<Totals> totals;
  };

  // enqueue_collectives' phases, under enqueue_mutex_: the timing event before the batch (a
  // failure to record it fails the stream), the NCCL calls and own-rank copies, the counters.
  Status record_start_event(cudaEvent_t* start_event);
  Status enqueue_batch(int rank, const CollectiveArgs* args, size_t count);
  // A receive from the own rank: a device copy from the oldest remembered send to it.
  Status receive_from_self(int rank, const CollectiveArgs& recv);
  // Queues the batch's counters for reap_counters, behind a timing event after the batch.
  Status count_when_done(cudaEvent_t start_event, int rank, int size, const CollectiveArgs* args,
                         size_t count);

  Status take_event(cudaEvent_t* event);  // a timing event, from the spares or new
  void give_back_event(cudaEvent_t event);
  // Adds the counters of every batch the device has finished (in order) to the engine's.
  void reap_counters();

  CudaStreamResources resources_;
  ProgressEngine& engine_;
  int index_ = 0;
  cudaStream_t stream_ = nullptr;
  bool owns_stream_ = false;
  std::shared_ptr<CudaStreamState> state_ = std::make_shared<CudaStreamState>();
  std::mutex enqueue_mutex_;         // orders enqueues from several threads
  std::deque<SelfSend> self_sends_;  // sends to own rank waiting for their receive
  std::mutex counters_mutex_;        // guards pending_counts_ and spare_events_
  std::deque<PendingCounts> pending_counts_;
  std::vector<cudaEvent_t> spare_events_;
};

}  // namespace zrt
