// Registered memory: buffers that peers on this host can map and write with plain stores
// (docs/ARCHITECTURE.md#registered-memory; a UCX put into such memory runs far faster than into
// ordinary memory, measured: docs/ARCHITECTURE.md#measured-costs) and that UCX knows (ucp_mem_map
// registers them).
//
// zrt allocates the memory itself, as a memfd (anonymous shared memory): it has no name in
// /dev/shm, so it vanishes with the last process that maps it, even after kill -9, and it never
// lands in a file that fills the RAM-backed /dev/shm (UCX's own ALLOCATE path fell back to a
// file there for buffers larger than its segment). Before anything is allocated, the request is
// admitted against the machine's memory (lib/core/memory_probe.h); fallocate reserves every page
// (ENOMEM is an error here, not a SIGBUS when a page is first touched), and every page is then
// mapped so that first-touch faults (~11 us per page here, docs/ARCHITECTURE.md#measured-costs)
// never land on the training path.
//
// A peer maps this memory through /proc/<pid>/fd/<fd> of the owner (the same access a debugger
// needs; UCX's posix transport used the same path). The packed key names the owner's pid, fd,
// memfd inode and boot id, so a key from another host (ZRT_UNSUPPORTED) or from a process that
// has died (ZRT_REMOTE_ERROR) is refused, never dereferenced.
//
// Thread-safe: the transport's owner may allocate from any thread while the progress thread
// drives the worker (the context is created with mt_workers_shared; the maps below have a mutex).
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include <ucp/api/ucp.h>

#include "lib/core/status.h"
#include "transports/transport.h"

namespace zrt {

class UcxMemory {
 public:
  explicit UcxMemory(ucp_context_h context);
  ~UcxMemory();  // unmaps whatever was not freed
  UcxMemory(const UcxMemory&) = delete;
  UcxMemory& operator=(const UcxMemory&) = delete;

  Status alloc(size_t bytes, void** buffer);
  void free(void* buffer);

  // Windows (transport.h): the packed key of a buffer from alloc(), and the local address of a
  // peer's buffer from its packed key. A peer's segment is mapped once however many map_peer
  // calls name it, and unmapped when as many unmap_peer calls have undone them.
  Status pack_key(const void* buffer, std::vector<uint8_t>* key);
  Status map_peer(const std::vector<uint8_t>& key, uint64_t remote_address, void** local);
  void unmap_peer(void* local);
  // The allocation that holds [address, address + bytes) (Transport::find_registered).
  bool find(const void* address, size_t bytes, RegisteredRange* range);
  // Destroys every peer mapping; runs before the endpoints close.
  void unmap_all_peers();

 private:
  struct Segment {
    int fd = -1;
    size_t length = 0;
    uint64_t inode = 0;
    ucp_mem_h memh = nullptr;
  };
  struct PeerSegment {
    char* base = nullptr;
    size_t length = 0;
    uint64_t remote_base = 0;
    size_t uses = 0;  // map_peer calls not yet undone by unmap_peer
  };
  void release(void* address, const Segment& segment);

  ucp_context_h context_;
  std::string boot_id_;
  std::mutex mutex_;
  std::map<const char*, Segment> mapped_;  // by start address, for find()'s range lookup
  uint64_t frees_ = 0;
  std::unordered_map<std::string, PeerSegment> peers_;  // by the owner's pid, inode, base, length
};

}  // namespace zrt
