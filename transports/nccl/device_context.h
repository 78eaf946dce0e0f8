// DeviceContext: the CUDA/NCCL side of one zrt communicator: its device, its NCCL communicator,
// and a small device arena for internal scratch. Created on the first CUDA stream (or by
// ncclCommSplit when the parent communicator has one), shared by every CUDA stream and event of
// the communicator, released with the last of them.
//
// Free of CUDA headers: the C API layer, which builds without CUDA include paths, uses it.
//
// Device selection: under zrt-run (ZRT_LOCAL_RANK set) device = local_rank % device_count, made
// current on the creating thread; otherwise the caller's current device (cudaSetDevice before
// the first CUDA stream, as with NCCL).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "lib/core/status.h"
#include "lib/engine/engine.h"

namespace zrt {

struct DeviceContextOptions {
  int rank = 0;
  int size = 1;
  int local_rank = 0;
  bool device_from_local_rank = false;  // zrt-run: device = local_rank % device count
  int64_t timeout_ms = 60000;
  std::string name = "zrt";
};

// All-gather of `bytes` bytes per rank over the host path (rank r's record at output + r*bytes).
using HostAllgather = std::function<Status(const void* input, void* output, size_t bytes)>;

class DeviceContext {
 public:
  virtual ~DeviceContext() = default;

  virtual int device() const = 0;
  virtual int rank() const = 0;
  virtual int size() const = 0;

  // A CUDA stream on this context: a new high-priority one (wrap_external false), or a wrapper
  // of the caller's `cuda_stream` (a cudaStream_t; 0 is CUDA's legacy default stream).
  virtual Status create_stream(ProgressEngine& engine, int index, void* cuda_stream,
                               bool wrap_external, std::unique_ptr<Stream>* stream) = 0;
  virtual Status create_event(ProgressEngine& engine, std::unique_ptr<Event>* event) = 0;

  // ncclCommSplit (collective over this context's ranks). *child stays null for NOCOLOR.
  virtual Status split(int color, int key, const DeviceContextOptions& child_options,
                       std::shared_ptr<DeviceContext>* child) = 0;

  virtual Status error() = 0;                    // the NCCL communicator's health
  virtual void abort(const Status& reason) = 0;  // ncclCommAbort
};

// Collective over options.size ranks: every rank reports its device readiness and rank 0's
// NCCL unique id through `allgather`, so a rank without a usable GPU makes every rank fail with
// the same message (naming it) instead of leaving the others waiting.
Status create_device_context(const DeviceContextOptions& options, const HostAllgather& allgather,
                             std::shared_ptr<DeviceContext>* context);

// The cudaStream_t (as void*) behind a CUDA stream; ZRT_INVALID_ARGUMENT for other streams.
Status cuda_stream_handle(Stream& stream, void** cuda_stream);

}  // namespace zrt
