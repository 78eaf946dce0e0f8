#include "device/cuda_status.h"

namespace zrt {

bool cuda_error_means_no_device(cudaError_t error) {
  return error == cudaErrorInsufficientDriver || error == cudaErrorNoDevice ||
         error == cudaErrorDevicesUnavailable || error == cudaErrorStubLibrary;
}

Status cuda_status(cudaError_t error, const char* what) {
  if (error == cudaSuccess) return Status::ok();
  // Asynchronous errors are sticky in CUDA; reading them here keeps the next call's report
  // about the next call.
  (void)cudaGetLastError();
  zrt_status_t code = ZRT_SYSTEM_ERROR;
  if (cuda_error_means_no_device(error)) {
    code = ZRT_UNSUPPORTED;
  } else if (error == cudaErrorMemoryAllocation) {
    code = ZRT_OUT_OF_MEMORY;
  } else if (error == cudaErrorInvalidValue || error == cudaErrorInvalidDevicePointer ||
             error == cudaErrorInvalidResourceHandle) {
    code = ZRT_INVALID_ARGUMENT;
  }
  return Status::error(code, "{}: {} ({})", what, cudaGetErrorName(error),
                       cudaGetErrorString(error));
}

DeviceGuard::~DeviceGuard() {
  if (restore_) (void)cudaSetDevice(previous_);
}

Status DeviceGuard::enter(int device) {
  int current = -1;
  ZRT_RETURN_IF_ERROR(cuda_status(cudaGetDevice(&current), "cudaGetDevice"));
  if (current == device) return Status::ok();
  ZRT_RETURN_IF_ERROR(cuda_status(cudaSetDevice(device), "cudaSetDevice"));
  previous_ = current;
  restore_ = true;
  return Status::ok();
}

Status nccl_status(ncclResult_t result, const char* what) {
  if (result == ncclSuccess) return Status::ok();
  zrt_status_t code = ZRT_INTERNAL_ERROR;
  switch (result) {
    case ncclUnhandledCudaError:
    case ncclSystemError:
      code = ZRT_SYSTEM_ERROR;
      break;
    case ncclInvalidArgument:
      code = ZRT_INVALID_ARGUMENT;
      break;
    case ncclInvalidUsage:
      code = ZRT_INVALID_USAGE;
      break;
    case ncclRemoteError:
      code = ZRT_REMOTE_ERROR;
      break;
    case ncclInProgress:
      code = ZRT_IN_PROGRESS;
      break;
    default:
      code = ZRT_INTERNAL_ERROR;
      break;
  }
  const char* detail = ncclGetLastError(nullptr);
  if (detail != nullptr && detail[0] != '\0') {
    return Status::error(code, "{}: {} ({})", what, ncclGetErrorString(result), detail);
  }
  return Status::error(code, "{}: {}", what, ncclGetErrorString(result));
}

}  // namespace zrt
