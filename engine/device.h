// The device side of a communicator behind interfaces: the layers above (partition, checkpoint,
// the C API) reach the GPU only through these, never through the NCCL layer's own headers.
// device implements them (CUDA streams and events, an NCCL communicator, device arenas
// and kernels); zero/comm's Communicator makes its DeviceContext on first use, owns it and hands
// it out (Communicator::device).
//
// Free of CUDA headers, so every layer builds whether or not CUDA and NCCL were found.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "lib/core/collective_args.h"
#include "lib/core/status.h"
#include "engine/arena_backend.h"
#include "engine/element_ops.h"
#include "engine/engine.h"
#include "engine/mapped_window.h"

namespace zrt {

// A stream on device memory (mem_kind() == ZRT_MEM_CUDA). It runs no host Tasks: its
// collectives are device calls (NCCL) on the native stream, which is why collectives/enqueue.cc
// hands them here once the arguments are valid instead of building a Task.
class DeviceStream : public Stream {
 public:
  // Enqueues `count` collectives as one batch (one NCCL group). rank/size are the
  // communicator's.
  virtual Status enqueue_collectives(int rank, int size, const CollectiveArgs* args,
                                     size_t count) = 0;
  // The native stream (a cudaStream_t).
  virtual void* native_handle() const = 0;
};

// The native stream behind a device stream; ZRT_INVALID_ARGUMENT naming the stream for others.
Status device_stream_handle(Stream& stream, void** native);

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

// One communicator's device side: its device, its NCCL communicator, a small device arena for
// internal scratch. Shared by every device stream, event and partition manager of the
// communicator; lives as long as the last of them.
class DeviceContext {
 public:
  virtual ~DeviceContext() = default;

  virtual int device() const = 0;
  virtual int rank() const = 0;
  virtual int size() const = 0;

  // A device stream on this context: a new high-priority one (wrap_external false), or a wrapper
  // of the caller's `native_stream` (a cudaStream_t; 0 is CUDA's legacy default stream).
  virtual Status create_stream(ProgressEngine& engine, int index, void* native_stream,
                               bool wrap_external, std::unique_ptr<Stream>* stream) = 0;
  virtual Status create_event(ProgressEngine& engine, std::unique_ptr<Event>* event) = 0;

  // A partition manager's arena block in device memory (allocate() hands it zero-filled), and
  // element ops over the device kernels (device/device_element_ops.h says how they are
  // ordered without host synchronisation).
  virtual Status create_arena_backend(std::unique_ptr<ArenaBackend>* backend) = 0;
  virtual Status create_element_ops(std::unique_ptr<ElementOps>* ops) = 0;
  // Page-locked host memory (allocate() hands it zero-filled) that this device reads and writes
  // directly and copies to and from asynchronously: offload_optimizer's master and state.
  virtual Status create_pinned_host_backend(std::unique_ptr<ArenaBackend>* backend) = 0;
  // A partition manager's stage 3 gather window with a fixed device address per unit, through
  // the CUDA virtual memory API (device/device_mapped_window.h).
  virtual Status create_mapped_window(const MappedWindowSpec& spec,
                                      std::unique_ptr<MappedWindow>* window) = 0;

  // ncclCommSplit (collective over this context's ranks). *child stays null for NOCOLOR.
  virtual Status split(int color, int key, const DeviceContextOptions& child_options,
                       std::shared_ptr<DeviceContext>* child) = 0;

  virtual Status error() = 0;                    // the NCCL communicator's health
  virtual void abort(const Status& reason) = 0;  // ncclCommAbort
};

}  // namespace zrt
