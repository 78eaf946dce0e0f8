// Which all-reduce algorithm runs: chosen by size and rank count, or forced by ZRT_ALGO
// (EngineOptions::all_reduce_algorithm, read once when the engine is created).
#pragma once

#include <cstddef>

#include "lib/core/settings.h"

namespace zrt {

// AllReduceAlgorithm::kAuto picks direct exchange for small messages (one round, rank-order
// reduction), ring reduce-scatter + all-gather otherwise.

// "auto", "ring", "direct" or "rd" (recursive doubling), as ZRT_ALGO names them; for log lines.
const char* algorithm_name(AllReduceAlgorithm algorithm);

// Direct exchange below this many bytes per rank (and when N inputs fit the staging memory).
inline constexpr size_t kDirectAllReduceMaxBytes = size_t{64} << 10;

}  // namespace zrt
