// The UCX transport (transports/transport.h over UCP's tag matching). Two ways to build one:
// create_ucx_transport (transport.h) exchanges worker addresses through a Bootstrap;
// wire_ucx_transport wires a worker made earlier from addresses the caller already exchanged
// (Communicator::split gathers them over the parent communicator).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "lib/core/status.h"
#include "transports/transport.h"
#include "transports/ucx/ucx_worker.h"

namespace zrt {

// Creates endpoints from `worker` to every rank (addresses[r] is rank r's worker address, our
// own included) and returns the transport, which takes ownership of the worker. Local: no
// message is exchanged until the first send.
Status wire_ucx_transport(std::unique_ptr<UcxWorker> worker, int rank, int size,
                          const std::vector<std::vector<uint8_t>>& addresses,
                          const TransportOptions& options, std::unique_ptr<Transport>* transport);

}  // namespace zrt
