// Registered memory: buffers UCX allocates and maps itself (ucp_mem_map with ALLOCATE), which peers
// can reach with one-copy or zero-copy protocols (docs/ARCHITECTURE.md#measured-costs: a put into
// such memory runs 18-34 GB/s here, into ordinary memory 0.03-8 GB/s). Every page is touched once
// at allocation so that first-touch faults (~11 us per page here) never land on the training path.
//
// Thread-safe: the transport's owner may allocate from any thread while the progress thread
// drives the worker (the context is created with mt_workers_shared; the map below has a mutex).
#pragma once

#include <cstddef>
#include <mutex>
#include <unordered_map>
#include <vector>

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

  // Windows (transport.h): the packed remote key of a buffer from alloc(), and the local address
  // of a peer's buffer from its packed key, unpacked on `endpoint` (the data endpoint to that
  // peer). ucp_rkey_ptr succeeds only where the memory domain can attach the peer's segment
  // (sysv/posix shared memory on one host); anything else is ZRT_UNSUPPORTED.
  Status pack_key(const void* buffer, std::vector<uint8_t>* key);
  Status map_peer(ucp_ep_h endpoint, const std::vector<uint8_t>& key, uint64_t remote_address,
                  void** local);
  void unmap_peer(void* local);
  // Destroys every peer mapping; runs before the endpoints close (remote keys belong to them).
  void unmap_all_peers();

 private:
  ucp_context_h context_;
  std::mutex mutex_;
  std::unordered_map<void*, ucp_mem_h> mapped_;
  std::unordered_map<void*, ucp_rkey_h> peer_keys_;  // by local address of the peer's memory
};

}  // namespace zrt
