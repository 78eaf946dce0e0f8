// Which all-reduce algorithm runs: chosen by size and rank count, or forced by ZRT_ALGO.
#pragma once

#include <cstddef>

#include "lib/core/status.h"

namespace zrt {

enum class AllReduceAlgorithm { kAuto, kRing, kDirect };

// Reads ZRT_ALGO: unset or empty = kAuto; "ring", "direct"; "rd" (recursive doubling) is served
// by the direct exchange, which has the same single-round latency class and a rank-order
// reduction. Anything else is ZRT_INVALID_ARGUMENT naming the value.
Status algorithm_from_env(AllReduceAlgorithm* algorithm);

// Direct exchange below this many bytes per rank (and when N inputs fit the staging memory).
inline constexpr size_t kDirectAllReduceMaxBytes = size_t{64} << 10;

}  // namespace zrt
