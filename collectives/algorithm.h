// Which all-reduce algorithm runs: chosen by size and rank count, or forced by ZRT_ALGO.
#pragma once

#include <cstddef>

#include "lib/core/status.h"

namespace zrt {

enum class AllReduceAlgorithm { kAuto, kRing, kDirect, kRecursiveDoubling };

// Reads ZRT_ALGO: unset or empty = kAuto; "ring", "direct", "rd" (recursive doubling). Anything
// else is ZRT_INVALID_ARGUMENT naming the value. Automatic: direct exchange for small messages
// (one round, rank-order reduction), ring reduce-scatter + all-gather otherwise.
Status algorithm_from_env(AllReduceAlgorithm* algorithm);

// Direct exchange below this many bytes per rank (and when N inputs fit the staging memory).
inline constexpr size_t kDirectAllReduceMaxBytes = size_t{64} << 10;

}  // namespace zrt
