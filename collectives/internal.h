// zrt's own blocking exchanges (agreements, splits, barriers, digests): one call that tags the
// collective as internal, so the counters keep it apart from the caller's traffic, enqueues it
// and waits for it.
#pragma once

#include <string>

#include "collectives/collectives.h"
#include "lib/core/status.h"

namespace zrt {

class Stream;

// Runs `args` on `stream` as an internal collective (purpose kInternal; args.purpose is
// overwritten, args.purpose_id kept) and waits for the stream to drain. rank/size are the
// communicator's. Errors carry `what` as context. Collective: every rank calls it alike.
Status run_internal_collective(Stream& stream, int rank, int size, CollectiveArgs args,
                               const std::string& what);

}  // namespace zrt
