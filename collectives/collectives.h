// The entry point of the collectives layer: validates a collective's arguments and enqueues the
// task that runs the chosen algorithm on a stream. The C API and the partition managers both
// come through here.
#pragma once

#include "lib/core/collective_args.h"
#include "lib/core/status.h"

namespace zrt {

class Stream;

// Checks the arguments (messages name the argument) and enqueues the collective on `stream`.
// rank/size are the communicator's.
Status enqueue_collective(Stream& stream, int rank, int size, const CollectiveArgs& args);

}  // namespace zrt
