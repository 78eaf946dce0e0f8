#include "zero/comm/user_memory.h"

namespace zrt {

Status UserMemory::alloc(size_t bytes, void** buffer) {
  if (bytes == 0) return Status::invalid_argument("bytes is 0: ask for at least one byte");
  void* allocated = nullptr;
  ZRT_RETURN_IF_ERROR(transport_.alloc_registered(bytes, &allocated));
  RegisteredRange range;  // the length the transport allocated, whole pages
  if (!transport_.find_registered(allocated, bytes, &range)) {
    transport_.free_registered(allocated);
    return Status(ZRT_INTERNAL_ERROR, "zrt_mem_alloc: the transport does not know its allocation");
  }
  std::lock_guard<std::mutex> lock(mutex_);
  buffers_.emplace(allocated, range.length);
  held_ += range.length;
  *buffer = allocated;
  return Status::ok();
}

Status UserMemory::free(void* buffer) {
  if (buffer == nullptr) return Status::ok();
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = buffers_.find(buffer);
    if (it == buffers_.end()) {
      return Status::invalid_argument(
          "buffer {} was not returned by zrt_mem_alloc on this communicator, or was freed "
          "already",
          buffer);
    }
    held_ -= it->second;
    buffers_.erase(it);
  }
  transport_.free_registered(buffer);
  return Status::ok();
}

size_t UserMemory::held() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return held_;
}

void UserMemory::free_all() {
  std::unordered_map<void*, size_t> buffers;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    buffers.swap(buffers_);
    held_ = 0;
  }
  for (const auto& [buffer, bytes] : buffers) transport_.free_registered(buffer);
}

}  // namespace zrt
