// The cross-rank model check of zrt_partition_finalize: every rank must register the same
// units and parameters, or the collectives would pair mismatched buffers. The digests travel
// in finalize's single all-gather; only when they disagree does explain_model_mismatch run a few
// more exchanges to say which parameter differs and how (numel, shape, dtype, flags on rank 0
// and on each differing rank), instead of only which ranks differ.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "lib/core/status.h"
#include "zero/partition/layout.h"

namespace zrt {

class Communicator;

// One digest per entry: entry 0 the counts of units and parameters, entry 1 + p parameter p
// (numel, unit, flags, dtype, shape; names are not compared, as before shapes existed).
std::vector<uint64_t> model_entry_digests(const std::vector<UnitSpec>& units,
                                          const std::vector<ParamSpec>& params);
// A digest of the whole list, for finalize's all-gather.
uint64_t model_digest(const std::vector<UnitSpec>& units, const std::vector<ParamSpec>& params);

// "param 3 "fc.weight" of unit 1 "fc": numel 100, shape [10, 10], f32, flags 0x0".
std::string describe_param(const std::vector<UnitSpec>& units, const std::vector<ParamSpec>& params,
                           size_t p);

// Collective, after finalize's digests disagreed (every rank calls it, the agreeing ones too):
// the ZRT_INVALID_USAGE status that names the first entry at which a rank departs from rank 0,
// with both sides' description. `model_differs` lists the ranks whose digest differed.
Status explain_model_mismatch(Communicator& comm, const std::vector<UnitSpec>& units,
                              const std::vector<ParamSpec>& params,
                              const std::string& model_differs);

}  // namespace zrt
