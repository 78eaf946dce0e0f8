#include "zero/comm/host_cpus.h"

#include <cerrno>
#include <cstring>

namespace zrt {

int union_cpu_count(const std::vector<cpu_set_t>& masks, const std::vector<uint64_t>& host_ids,
                    int rank) {
  cpu_set_t cpus;
  CPU_ZERO(&cpus);
  for (size_t r = 0; r < masks.size(); ++r) {
    if (!host_ids.empty() && host_ids[r] != host_ids[static_cast<size_t>(rank)]) continue;
    CPU_OR(&cpus, &cpus, &masks[r]);
  }
  return CPU_COUNT(&cpus);
}

Status gather_host_cpus(Bootstrap& bootstrap, const std::vector<uint64_t>& host_ids, int* count) {
  cpu_set_t mine;
  CPU_ZERO(&mine);
  if (sched_getaffinity(0, sizeof(mine), &mine) != 0) {
    return Status::error(ZRT_SYSTEM_ERROR, "sched_getaffinity: {} (reading this rank's CPUs)",
                         strerror(errno));
  }
  std::vector<cpu_set_t> masks(static_cast<size_t>(bootstrap.size()));
  ZRT_RETURN_IF_ERROR(bootstrap.allgather(&mine, masks.data(), sizeof(mine))
                          .with_context("exchanging the ranks' CPU masks"));
  *count = union_cpu_count(masks, host_ids, bootstrap.rank());
  return Status::ok();
}

}  // namespace zrt
