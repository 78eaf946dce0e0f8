// UserMemory: the buffers a framework allocates through its communicator (zrt_mem_alloc). They
// are the transport's registered memory, so that peers on this host read a collective's input
// out of them through a mapping (the cma all-gather, collectives/one_shot.h) rather than
// through the kernel. This class keeps which buffers are the caller's, so that zrt_mem_free
// refuses anything else (an arena of zrt's own included), and the bytes they hold.
//
// Thread-safe. Freed by the owner before its transport (Communicator::destroy).
#pragma once

#include <cstddef>
#include <mutex>
#include <unordered_map>

#include "lib/core/status.h"
#include "transports/transport.h"

namespace zrt {

class UserMemory {
 public:
  explicit UserMemory(Transport& transport) : transport_(transport) {}
  ~UserMemory() { free_all(); }
  UserMemory(const UserMemory&) = delete;
  UserMemory& operator=(const UserMemory&) = delete;

  // `bytes` (> 0) of registered memory, zeroed, every page touched.
  Status alloc(size_t bytes, void** buffer);
  // A buffer of alloc(); null does nothing. ZRT_INVALID_ARGUMENT for anything else.
  Status free(void* buffer);
  // The bytes the live buffers hold (whole pages).
  size_t held() const;
  // Frees every live buffer.
  void free_all();

 private:
  Transport& transport_;
  mutable std::mutex mutex_;
  std::unordered_map<void*, size_t> buffers_;  // start -> bytes allocated (whole pages)
  size_t held_ = 0;
};

}  // namespace zrt
