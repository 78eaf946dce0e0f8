// Which ranks share a host, as the two-level collectives need it (two_level_reduce_scatter.h):
// H hosts, each holding L consecutive ranks, so rank r is local rank r % L of host r / L.
#pragma once

#include <cstdint>
#include <span>
#include <string>

namespace zrt {

struct HostGrid {
  int hosts = 1;
  int local = 1;  // ranks per host
  int host_of(int rank) const { return rank / local; }
  int local_of(int rank) const { return rank % local; }
  int rank_of(int host, int local_rank) const { return host * local + local_rank; }
};

// From one identifier per rank (equal on the ranks of one host, e.g. a hash of the host name):
// true and the grid when the ranks span at least two hosts and every host holds the same number
// of consecutive ranks; else false and, in *why_not, what stands in the way (one host, uneven
// hosts, interleaved ranks), for the log line of the fall-back to flat collectives.
bool make_host_grid(std::span<const uint64_t> host_ids, HostGrid* grid, std::string* why_not);

}  // namespace zrt
