// CUDA and NCCL result codes as zrt Status values. The function that first sees a failure names
// the call; these helpers add the library's own name and text for the code.
#pragma once

#include <cuda_runtime.h>
#include <nccl.h>

#include "lib/core/status.h"

namespace zrt {

// ok for cudaSuccess; else "what: cudaErrorX (text)". No device or a driver older than the
// runtime maps to ZRT_UNSUPPORTED (the machine has no usable GPU), out of memory to
// ZRT_OUT_OF_MEMORY, everything else to ZRT_SYSTEM_ERROR. Clears CUDA's sticky last error.
Status cuda_status(cudaError_t error, const char* what);

// ok for ncclSuccess; else "what: <NCCL's text> (<ncclGetLastError>)" with a code that follows
// NCCL's classification (remote error, invalid argument/usage, system, internal).
Status nccl_status(ncclResult_t result, const char* what);

// True when `error` means "there is no GPU to use here" rather than a failure of one.
bool cuda_error_means_no_device(cudaError_t error);

// Makes a device current until the guard goes out of scope, then restores the caller's: zrt
// works on its communicator's device without moving the framework's thread to another GPU.
class DeviceGuard {
 public:
  DeviceGuard() = default;
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;
  Status enter(int device);

 private:
  int previous_ = -1;
  bool restore_ = false;
};

}  // namespace zrt

#define ZRT_CUDA_RETURN_IF_ERROR(call) ZRT_RETURN_IF_ERROR(::zrt::cuda_status((call), #call))
