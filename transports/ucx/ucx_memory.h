// Registered memory: buffers UCX allocates and maps itself (ucp_mem_map with ALLOCATE), which
// peers can reach with one-copy or zero-copy protocols (DESIGN.md: a put into such memory runs
// 18-34 GB/s here, into ordinary memory 0.03-8 GB/s). Every page is touched once at allocation
// so that first-touch faults (~11 us per page here) never land on the training path.
//
// Thread-safe: the transport's owner may allocate from any thread while the progress thread
// drives the worker (the context is created with mt_workers_shared; the map below has a mutex).
#pragma once

#include <cstddef>
#include <mutex>
#include <unordered_map>

#include <ucp/api/ucp.h>

#include "lib/core/status.h"

namespace zrt {

class UcxMemory {
 public:
  explicit UcxMemory(ucp_context_h context) : context_(context) {}
  ~UcxMemory();  // unmaps whatever was not freed
  UcxMemory(const UcxMemory&) = delete;
  UcxMemory& operator=(const UcxMemory&) = delete;

  Status alloc(size_t bytes, void** buffer);
  void free(void* buffer);

 private:
  ucp_context_h context_;
  std::mutex mutex_;
  std::unordered_map<void*, ucp_mem_h> mapped_;
};

}  // namespace zrt
