// Transport: the point-to-point interface that collectives are written against. A transport
// moves bytes between the ranks of one communicator; it knows nothing about collectives, streams
// or partitions. transports/ucx implements it for host memory.
//
// Threading: after wire-up, every method except event_fd() and the registered-memory ones
// (alloc_registered to find_registered, thread-safe) is called from one thread only, the
// communicator's progress thread. Wire-up (the create function) runs on the creating thread.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "lib/core/status.h"

namespace zrt {

class LauncherVariables;  // lib/core/launcher_variables.h

class Bootstrap;

// Tags carry kTagBits bits chosen by the caller; the transport adds the source rank itself, so
// a receive matches only messages from the named peer.
inline constexpr int kTagBits = 44;
inline constexpr uint64_t kTagMask = (uint64_t{1} << kTagBits) - 1;

// Filled by the transport when an operation ends (success, failure or cancellation). The poster
// owns it and must keep it alive, unmoved, until `done` is true.
struct TransportCompletion {
  bool done = false;
  Status status;
  size_t bytes = 0;  // bytes actually received (receives only)
};

struct TransportOptions {
  int64_t timeout_ms = 60000;
  const char* name = "zrt";
  // How dead peers are detected: "hybrid", "peer" or "none" (ZRT_UCX_ERR_MODE's values);
  // nullptr = ZRT_UCX_ERR_MODE, read when the transport is created.
  const char* error_mode = nullptr;
  // The job's ranks span hosts: messages below 256 KiB go eager rather than by
  // rendezvous, unless UCX_RNDV_THRESH says otherwise (transports/ucx/ucx_worker.cc says why).
  bool spans_hosts = false;
  // The launcher variables (UCX_* among them) the communicator's settings took when they were
  // loaded; nullptr = take a snapshot when the transport is created.
  const LauncherVariables* launcher = nullptr;
};

// A registered allocation, as find_registered describes it.
struct RegisteredRange {
  uint64_t id = 0;     // unique on this host while the allocation lives (the memfd's inode); not 0
  uint64_t base = 0;   // the allocation's start in the owner's address space
  size_t length = 0;   // its length, whole pages
  uint64_t frees = 0;  // registered allocations the owner has freed so far
};

class Transport {
 public:
  virtual ~Transport() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;

  // Post a tagged send / receive of `bytes` bytes. Returns an error only if the operation could
  // not be posted (the completion is then untouched); otherwise the outcome arrives in
  // `completion`, possibly before the call returns. A receive of fewer bytes than the matching
  // send completes with an error. bytes == 0 is a valid message. peer == rank() is allowed.
  virtual Status send(int peer, uint64_t tag, const void* buffer, size_t bytes,
                      TransportCompletion* completion) = 0;
  virtual Status recv(int peer, uint64_t tag, void* buffer, size_t bytes,
                      TransportCompletion* completion) = 0;
  // As send / recv, for one message in two parts: `header` (header_bytes > 0) in front of the
  // data, gathered on the send and scattered on the receive without a copy by zrt (a collective
  // carries its call's fingerprint in front of its first data, fingerprint_check.h). A message
  // sent this way must be received this way, with the same header_bytes. The header is owned by
  // the poster like the buffer, until `done`; a receive's `bytes` then counts both parts.
  virtual Status send_with_header(int peer, uint64_t tag, const void* header, size_t header_bytes,
                                  const void* buffer, size_t bytes,
                                  TransportCompletion* completion) = 0;
  virtual Status recv_with_header(int peer, uint64_t tag, void* header, size_t header_bytes,
                                  void* buffer, size_t bytes, TransportCompletion* completion) = 0;

  // Drives communication; returns how many operations completed (0 = nothing happened).
  virtual unsigned progress() = 0;

  // Readies the transport for a blocking wait on event_fd(). Returns false when there is work to
  // do right away (the caller must call progress() instead of sleeping).
  virtual bool arm() = 0;
  // A file descriptor that becomes readable when the transport has work after arm().
  virtual int event_fd() const = 0;

  // When the last message from `peer` arrived (a receive from it completed successfully; the
  // transport's creation if none has yet). What a timeout reads to name the peers that went
  // silent (engine/silent_peers.h).
  virtual std::chrono::steady_clock::time_point last_heard(int peer) const = 0;

  // The first asynchronous failure (e.g. a peer's endpoint failed), or ok.
  virtual Status health() const = 0;

  // Fails every outstanding operation with `reason` (completions are written before return).
  virtual void cancel_all(const Status& reason) = 0;
  // Cancels one outstanding receive, the one posted with `completion`: it is written (with
  // `reason`) before return; nothing happens if it already completed. For a receive its owner
  // gives up at a normal close, where cancel_all would end the communicator (no farewell).
  virtual void cancel_recv(TransportCompletion* completion, const Status& reason) = 0;

  // Memory that peers can access directly (UCX: ucp_mem_map), for arenas and staging buffers.
  // Touched once before return so that first-touch faults never land on the training path.
  virtual Status alloc_registered(size_t bytes, void** buffer) = 0;
  virtual void free_registered(void* buffer) = 0;

  // Windows: a peer on the same host maps this rank's registered memory into its own address space
  // and writes it with plain stores, the cheapest way between processes here
  // (docs/ARCHITECTURE.md#registered-memory: no kernel copy, no rendezvous). pack_registered_key
  // describes a buffer returned by alloc_registered (its start address) for the peer;
  // map_peer_registered turns a description that `peer` packed, plus the address of its buffer
  // there, into a local address of the same memory. ZRT_UNSUPPORTED when this peer's memory cannot
  // be mapped (another host, another IPC namespace). A mapping lives until
  // unmap_peer_registered(local), for every map call, or the transport's destruction; the peer's
  // memory stays valid while it is mapped, even if the peer exits or frees it.
  virtual Status pack_registered_key(const void* buffer, std::vector<uint8_t>* key) = 0;
  virtual Status map_peer_registered(int peer, const std::vector<uint8_t>& key,
                                     uint64_t remote_address, void** local) = 0;
  virtual void unmap_peer_registered(void* local) = 0;

  // Which registered allocation holds [address, address + bytes), if one does, so that a peer
  // may read it through a mapping rather than through the kernel (the cma all-gather,
  // collectives/one_shot.h). Sets range->frees whether or not it finds one: a peer that saw
  // another count drops its mappings of this rank's memory, since they may be of freed buffers.
  // Thread-safe, like alloc_registered, free_registered and the mapping calls above.
  virtual bool find_registered(const void* address, size_t bytes, RegisteredRange* range) = 0;

  // Human-readable description of what the transport uses (e.g. UCX's chosen transports).
  virtual std::string describe() const = 0;
};

// Creates a UCX transport for the ranks of `bootstrap`, wiring endpoints to every peer through
// the bootstrap's all-gather. Collective over the bootstrap's ranks.
Status create_ucx_transport(Bootstrap& bootstrap, const TransportOptions& options,
                            std::unique_ptr<Transport>* transport);

}  // namespace zrt
