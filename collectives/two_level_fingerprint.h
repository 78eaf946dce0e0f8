// The default fingerprint's route for the two-level collectives (fingerprint_check.h): its
// check must cover every rank without a message across hosts for the check alone.
#pragma once

#include <cstddef>

#include "collectives/coll_task.h"
#include "collectives/two_level_grid.h"

namespace zrt {

// Rank (g, l)'s block is block g * L + l of `layout`, and the ring across hosts of local rank l
// moves blocks (g, l) of every host g. When each such ring moves data (one of its blocks is not
// empty) and every block is below kFingerprintHeaderMaxBytes, the fingerprint travels in front
// of the first message of the first ring across hosts and, inside each host, in READY(0) of the
// mapped window ring (`host_windows`), else in a companion from each local rank to the next:
// the checked links then cover every rank, and no message goes out for the check alone when
// the host has windows. *in_header is then true: the caller marks the ring across hosts
// (SubringReduce / SubringGather::carry_fingerprint) and its window (HostWindowRing::begin).
// Otherwise the companion around all ranks (*in_header false), as on every other tagged path.
Status start_two_level_fingerprint(TaskContext& context, CollTask& task, const HostGrid& grid,
                                   const BlockLayout& layout, size_t element_size,
                                   bool host_windows, bool* in_header);

}  // namespace zrt
