// UcxWorker: one ucp_context + ucp_worker (the UCX half of a communicator before it knows its
// peers) and the worker address peers need to reach it. Split out of the transport so that
// Communicator::split can create the worker first, exchange addresses over the parent
// communicator, and only then wire a transport (see wire_ucx_transport).
//
// Choosing UCX's transports (this block is also docs/ENVIRONMENT.md's text):
//   zrt lets UCX pick, except that it leaves out posix shared memory (UCX_TLS=^posix unless
//   UCX_TLS is set: its files in /dev/shm outlive a killed process). Between processes of one
//   host UCX uses shared memory (sysv) for small
//   messages and cross-memory attach (cma, one copy with process_vm_readv) for large ones; across
//   hosts it uses RDMA (rc/dc/ud over verbs) when present, else tcp. The choice is logged at info
//   level (ZRT_LOG=info) per communicator. To steer it:
//     UCX_TLS=sm,self        shared memory only (posix, sysv, cma) plus loopback;
//     UCX_TLS=tcp,self       force tcp (e.g. to test a multi-host setup on one host);
//     UCX_TLS=^cma           everything except cma;
//     UCX_NET_DEVICES=eth0   or mlx5_0:1 — which NICs/ports the network transports may use.
//   Dead peers: UCX 1.13 selects only tcp for endpoints with peer-failure detection
//   (UCP_ERR_HANDLING_MODE_PEER) between processes of one host, which runs 3-10x slower than
//   shared memory + cma (measured: docs/MEASURED.md#collective-bandwidth-on-one-host). So by
//   default (ZRT_UCX_ERR_MODE=hybrid) data travels on endpoints without error handling
//   (shm/cma) and one idle PEER-mode endpoint per peer (tcp, keepalive every second unless
//   UCX_KEEPALIVE_INTERVAL is set) reports a dead peer within milliseconds.
//   ZRT_UCX_ERR_MODE=peer moves data on the PEER endpoints; =none drops the watcher (a dead peer
//   then surfaces through the engine's no-progress timeout). `ucx_info -d` lists what UCX sees;
//   ZRT_LOG=info prints the lanes each communicator got.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <ucp/api/ucp.h>

#include "lib/core/status.h"
#include "transports/transport.h"

namespace zrt {

class UcxWorker {
 public:
  // Creates the context (TAG | RMA | WAKEUP, thread-shared context: see ucx_worker.cc) and a
  // single-threaded worker.
  static Status create(const TransportOptions& options, std::unique_ptr<UcxWorker>* worker);
  ~UcxWorker();
  UcxWorker(const UcxWorker&) = delete;
  UcxWorker& operator=(const UcxWorker&) = delete;

  ucp_context_h context() const { return context_; }
  ucp_worker_h worker() const { return worker_; }
  // The packed worker address to hand to peers.
  const std::vector<uint8_t>& address() const { return address_; }

 private:
  UcxWorker() = default;

  ucp_context_h context_ = nullptr;
  ucp_worker_h worker_ = nullptr;
  std::vector<uint8_t> address_;
};

// "what: ucs status text" as a Status with `code`.
Status ucx_status(zrt_status_t code, const std::string& what, ucs_status_t status);

}  // namespace zrt
