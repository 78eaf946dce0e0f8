#include "device/device_probe.h"

#include <cstring>

#include "device/cuda_status.h"

namespace zrt {

static_assert(NCCL_UNIQUE_ID_BYTES == kNcclUniqueIdBytes, "ncclUniqueId size changed");

Status cuda_device_count(int* count) {
  int devices = 0;
  cudaError_t error = cudaGetDeviceCount(&devices);
  if (error != cudaSuccess) {
    Status status = cuda_status(error, "cudaGetDeviceCount");
    if (cuda_error_means_no_device(error)) {
      return Status(ZRT_UNSUPPORTED, "no usable CUDA device: " + status.message());
    }
    return status;
  }
  if (devices == 0) return Status(ZRT_UNSUPPORTED, "no usable CUDA device: none present");
  *count = devices;
  return Status::ok();
}

Status nccl_version(int* version) {
  int value = 0;
  ZRT_RETURN_IF_ERROR(nccl_status(ncclGetVersion(&value), "ncclGetVersion"));
  *version = value;
  return Status::ok();
}

Status nccl_unique_id(NcclUniqueIdBytes* id) {
  ncclUniqueId unique;
  ZRT_RETURN_IF_ERROR(nccl_status(ncclGetUniqueId(&unique), "ncclGetUniqueId"));
  std::memcpy(id->data(), unique.internal, kNcclUniqueIdBytes);
  return Status::ok();
}

}  // namespace zrt
