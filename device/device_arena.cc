#include "device/device_arena.h"

#include <cuda_runtime.h>
#include <nccl.h>

#include "lib/core/log.h"
#include "device/cuda_status.h"

namespace zrt {

Status DeviceArena::create(int device, size_t bytes, Source source,
                           std::unique_ptr<DeviceArena>* arena) {
  if (bytes == 0) return Status::invalid_argument("device arena of 0 bytes");
  DeviceGuard device_guard;
  ZRT_RETURN_IF_ERROR(device_guard.enter(device));
  std::unique_ptr<DeviceArena> made(new DeviceArena());
  made->device_ = device;
  made->capacity_ = bytes;
  if (source == Source::kNcclMemAlloc) {
    ncclResult_t result = ncclMemAlloc(&made->base_, bytes);
    if (result != ncclSuccess) {
      ZRT_LOG_INFO("ncclMemAlloc({} bytes) failed ({}); falling back to cudaMalloc", bytes,
                   ncclGetErrorString(result));
      made->base_ = nullptr;
      source = Source::kCudaMalloc;
    }
  }
  made->source_ = source;
  if (made->base_ == nullptr) {
    Status status = cuda_status(cudaMalloc(&made->base_, bytes), "cudaMalloc");
    if (!status.is_ok()) {
      made->base_ = nullptr;
      return status.with_context(
          fmt::format("device arena of {} bytes on device {}", bytes, device));
    }
  }
  // Zero once so that no step ever reads stale data from a freshly carved buffer.
  ZRT_CUDA_RETURN_IF_ERROR(cudaMemset(made->base_, 0, bytes));
  ZRT_CUDA_RETURN_IF_ERROR(cudaDeviceSynchronize());
  *arena = std::move(made);
  return Status::ok();
}

DeviceArena::~DeviceArena() {
  if (base_ == nullptr) return;
  DeviceGuard device_guard;
  if (!device_guard.enter(device_).is_ok()) return;
  if (source_ == Source::kNcclMemAlloc) {
    ncclMemFree(base_);
  } else {
    cudaFree(base_);
  }
}

Status DeviceArena::allocate(size_t bytes, size_t alignment, void** buffer) {
  if (alignment == 0 || (alignment & (alignment - 1)) != 0 || alignment > 4096) {
    return Status::invalid_argument("alignment {} is not a power of two <= 4096", alignment);
  }
  const size_t start = (used_ + alignment - 1) & ~(alignment - 1);
  if (start > capacity_ || bytes > capacity_ - start) {
    return Status::error(ZRT_OUT_OF_MEMORY,
                         "device arena on device {}: {} bytes requested, {} of {} bytes in use",
                         device_, bytes, used_, capacity_);
  }
  used_ = start + bytes;
  *buffer = static_cast<char*>(base_) + start;
  return Status::ok();
}

}  // namespace zrt
