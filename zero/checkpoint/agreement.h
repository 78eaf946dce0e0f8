// How the ranks of a save, load or export agree on one outcome. Each rank runs its local phase
// (writing or reading its share), then every rank's status and a few figures are all-gathered
// in fixed-size reports, so all ranks return the same verdict and message, and a load commits
// on every rank or on none: a failure on one rank leaves every rank's state untouched.
#pragma once

#include <cstdint>
#include <vector>

#include "lib/core/status.h"

namespace zrt {

class Communicator;

struct RankReport {
  int32_t code = 0;  // zrt_status_t
  uint32_t reserved = 0;
  uint64_t values[3] = {0, 0, 0};
  char message[480] = {};
};
static_assert(sizeof(RankReport) == 512);

// Exchanges every rank's `local` status and values (an internal all-gather). Collective;
// `all` has one report per rank. Fails only when the exchange itself fails.
Status exchange_reports(Communicator& comm, const Status& local, const uint64_t (&values)[3],
                        std::vector<RankReport>* all);

// The first failed rank's status ("rank r: message"), else ok. When several ranks failed the
// message says how many.
Status verdict(const std::vector<RankReport>& all);

}  // namespace zrt
