// How many CPUs the job's ranks on this host may run on, for EngineOptions::core_per_rank: the
// union of their affinity masks (sched_getaffinity when the communicator is created), so that a
// cpuset (a container's, a scheduler's allocation) and a launcher's binding both count, where
// the host's online CPUs would not: 8 ranks confined to 2 of 64 CPUs share 2 cores.
#pragma once

#include <sched.h>

#include <cstdint>
#include <vector>

#include "lib/bootstrap/bootstrap.h"
#include "lib/core/status.h"

namespace zrt {

// The CPUs in the union of the masks of `rank`'s host: the ranks whose host_ids entry equals
// rank's, or every rank when host_ids is empty (all on one host). masks holds one per rank.
int union_cpu_count(const std::vector<cpu_set_t>& masks, const std::vector<uint64_t>& host_ids,
                    int rank);

// Collective over `bootstrap` (one all-gather of every rank's affinity mask): *count becomes
// union_cpu_count of the gathered masks, alike on every rank of a host. Errors: the gather's,
// and ZRT_SYSTEM_ERROR when this process's mask cannot be read.
Status gather_host_cpus(Bootstrap& bootstrap, const std::vector<uint64_t>& host_ids, int* count);

}  // namespace zrt
