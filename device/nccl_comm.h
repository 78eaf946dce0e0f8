// NcclComm: one NCCL communicator, owned by one zrt communicator's device context, used in
// NCCL's non-blocking mode so that no zrt call can hang inside NCCL.
//
// Non-blocking mode (config.blocking = 0) lets every NCCL call return ncclInProgress; the call
// has then been accepted and NCCL finishes it in the background. zrt settles each call before
// the next (polls ncclCommGetAsyncError until it leaves ncclInProgress) under the communicator's
// timeout; a timeout or an asynchronous error aborts the NCCL communicator (ncclCommAbort), which
// releases every kernel waiting on a dead peer, and fails the zrt communicator with the cause.
//
// Threading: calls that issue NCCL work are serialised by a mutex (NCCL forbids concurrent calls
// on one communicator); health() and abort() may be called from any thread at any time.
#pragma once

#include <cuda_runtime.h>
#include <nccl.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "lib/core/collective_args.h"
#include "lib/core/status.h"
#include "device/device_probe.h"

namespace zrt {

struct NcclCommOptions {
  int rank = 0;
  int size = 1;
  int device = 0;  // CUDA device ordinal the communicator lives on
  int64_t timeout_ms = 60000;
  std::string name = "zrt";
};

class NcclComm {
 public:
  // ncclCommInitRankConfig (non-blocking), then waits for the init to finish. Collective over
  // options.size ranks holding the same id.
  static Status init(const NcclUniqueIdBytes& id, const NcclCommOptions& options,
                     std::unique_ptr<NcclComm>* comm);
  ~NcclComm();
  NcclComm(const NcclComm&) = delete;
  NcclComm& operator=(const NcclComm&) = delete;

  // ncclCommSplit: ranks with equal color form a new communicator ordered by (key, rank); color
  // ZRT_SPLIT_NOCOLOR takes no part (*comm stays null). Collective over this communicator.
  Status split(int color, int key, int64_t timeout_ms, std::unique_ptr<NcclComm>* comm);

  // Enqueues args[0..count) on `stream` as one NCCL group (ncclGroupStart/End). Point-to-point
  // with peer == own rank is not handled here (the stream turns it into a device copy).
  // `barrier_scratch` is 4 bytes of device memory on this communicator's device.
  Status enqueue(const CollectiveArgs* args, size_t count, cudaStream_t stream,
                 void* barrier_scratch);

  // ok, or the first asynchronous failure (then the communicator is aborted). Any thread.
  Status health();
  // ncclCommAbort; every later call fails with `reason`. Idempotent; any thread.
  void abort(const Status& reason);
  // Finalises (flushes, in step with the peers) and destroys when healthy, aborts otherwise.
  // Idempotent; the destructor calls it.
  Status destroy();

  int rank() const { return options_.rank; }
  int size() const { return options_.size; }
  int device() const { return options_.device; }
  const NcclCommOptions& options() const { return options_; }

 private:
  NcclComm(ncclComm_t comm, const NcclCommOptions& options) : comm_(comm), options_(options) {}

  // Turns a non-blocking call's result into a final one: waits out ncclInProgress (timeout ->
  // abort), records and returns failures.
  Status settle(ncclResult_t result, const char* what);
  Status failure() const;
  Status enqueue_one(const CollectiveArgs& args, cudaStream_t stream, void* barrier_scratch,
                     std::vector<ncclRedOp_t>* created_ops);

  ncclComm_t comm_ = nullptr;
  NcclCommOptions options_;
  std::mutex call_mutex_;  // serialises NCCL calls that issue work
  mutable std::mutex state_mutex_;
  Status failure_;  // first failure; guarded by state_mutex_
  std::atomic<bool> failed_{false};
  bool destroyed_ = false;  // guarded by call_mutex_
};

// NCCL's datatype for a zrt dtype; false if NCCL has none.
bool nccl_datatype(zrt_dtype_t dtype, ncclDataType_t* out);

}  // namespace zrt
