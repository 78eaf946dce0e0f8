#include "collectives/two_level_grid.h"

#include <fmt/format.h>

namespace zrt {

bool make_host_grid(std::span<const uint64_t> host_ids, HostGrid* grid, std::string* why_not) {
  const int size = static_cast<int>(host_ids.size());
  int local = 1;
  while (local < size && host_ids[local] == host_ids[0]) ++local;
  if (local == size) {
    *why_not = "every rank is on one host";
    return false;
  }
  if (size % local != 0) {
    *why_not = fmt::format("{} ranks do not split into hosts of {} (host 0's count)", size, local);
    return false;
  }
  for (int rank = 0; rank < size; ++rank) {
    const int first = rank - rank % local;
    if (host_ids[rank] != host_ids[first]) {
      *why_not = fmt::format(
          "rank {} is not on the host of rank {} (hosts must hold {} "
          "consecutive ranks each)",
          rank, first, local);
      return false;
    }
    if (rank == first && rank > 0) {
      for (int other = 0; other < rank; other += local) {
        if (host_ids[other] == host_ids[rank]) {
          *why_not =
              fmt::format("ranks {} and {} share a host but are not consecutive", other, rank);
          return false;
        }
      }
    }
  }
  grid->local = local;
  grid->hosts = size / local;
  return true;
}

}  // namespace zrt
