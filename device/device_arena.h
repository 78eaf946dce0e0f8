// DeviceArena: one device allocation made up front and handed out by a bump pointer, the device
// twin of the host arenas (docs/ARCHITECTURE.md#memory-arenas: constant-size buffers, allocated
// once, so memory neither fragments nor pays allocation costs on the training path). cudaMalloc is
// synchronous with the whole device; doing it once at finalize time keeps it off the step.
//
// ncclMemAlloc gives memory NCCL can register for zero-copy (NVLS, user-buffer registration);
// cudaMalloc is the fallback when that fails (older drivers, no multicast support).
#pragma once

#include <cstddef>
#include <memory>

#include "lib/core/status.h"

namespace zrt {

class DeviceArena {
 public:
  enum class Source { kCudaMalloc, kNcclMemAlloc };

  // Allocates `bytes` on `device` and zero-fills it once. Errors: ZRT_INVALID_ARGUMENT (bytes
  // 0), ZRT_OUT_OF_MEMORY, ZRT_UNSUPPORTED (no usable device).
  static Status create(int device, size_t bytes, Source source,
                       std::unique_ptr<DeviceArena>* arena);
  ~DeviceArena();
  DeviceArena(const DeviceArena&) = delete;
  DeviceArena& operator=(const DeviceArena&) = delete;

  // Hands out `bytes` aligned to `alignment` (a power of two, at most 4096). Fails with
  // ZRT_OUT_OF_MEMORY naming what is used and what is left; never allocates.
  Status allocate(size_t bytes, size_t alignment, void** buffer);
  // Returns every allocation at once (the memory stays with the arena).
  void reset() { used_ = 0; }

  void* base() const { return base_; }
  size_t capacity() const { return capacity_; }
  size_t used() const { return used_; }
  int device() const { return device_; }
  Source source() const { return source_; }

 private:
  DeviceArena() = default;

  void* base_ = nullptr;
  size_t capacity_ = 0;
  size_t used_ = 0;
  int device_ = 0;
  Source source_ = Source::kCudaMalloc;
};

}  // namespace zrt
