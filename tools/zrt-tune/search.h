// Which settings zrt-tune measures, and in which order.
//
// The search is a function of the measurements alone (the step times and memory figures the
// runner hands it are already the maximum over ranks), so every rank walks the same candidates
// in the same order without broadcasting any decision.
//
// Stages 0-2 tune the bucket size. A coarse pass walks sizes a factor 4 apart from 64 KiB to
// the gradient size (a bucket larger than all gradients is the same as one that holds them
// all); then the best is refined with its neighbours a factor 2 away, then a factor sqrt(2)
// away. Small buckets pay a collective's latency many times; big ones start reducing late in
// backward and leave the tail exposed, so the curve has one valley and refining around the
// coarse minimum finds it with ~10 runs instead of a grid.
// Stage 3 tunes prefetch depth, then the prefetch byte budget. Depths 0, 1, 2, 4, 8, ... up to
// units - 1 first; then the integers between the best and its measured neighbours, halving the
// gap; then, at the best depth, budgets of 1, 2, 4, ... typical units of gathered bytes (a
// budget holds back prefetches that would compete with the reduce-scatters for bandwidth).
// Memory grows with the swept value in both cases (buckets, gather window slots), so once a
// value is over the memory cap, larger ones are not even allocated.
// Last, the fastest few that fit are measured again with more steps, and the recommendation
// is the fastest of those second measurements: picking the minimum of noisy figures favours a
// lucky run, and the fresh measurement is what the report states.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "lib/core/status.h"

namespace zrt::tune {

struct Candidate {
  size_t bucket_bytes = 0;
  int prefetch_depth = 0;
  size_t prefetch_bytes = 0;  // 0 = no budget
  std::string origin;         // "extra", "coarse", "refine", "budget"
  bool same_setting(const Candidate& o) const {
    return bucket_bytes == o.bucket_bytes && prefetch_depth == o.prefetch_depth &&
           prefetch_bytes == o.prefetch_bytes;
  }
};

struct Measurement {
  bool skipped = false;  // not run: a smaller value of the swept setting was already over the cap
  bool fits = true;      // peak zrt memory within the cap
  double step_ms = 0;    // median step, maximum over ranks (0 when not timed)
  double memory_bytes = 0;
};

struct Trial {
  Candidate candidate;
  Measurement sweep;
  double confirm_ms = 0;  // the second measurement, for the fastest few; 0 if none
};

struct SearchSpace {
  int stage = 2;
  uint64_t grad_bytes = 0;  // trainable elements x reduce dtype size
  int units = 1;
  uint64_t typical_unit_bytes = 0;  // median gathered bytes of a unit (stage 3 budgets)
  size_t base_bucket_bytes = 0;     // held fixed in stage 3
  int base_prefetch_depth = 1;      // held fixed in stages 0-2
  std::vector<Candidate> extras;    // measured first, and compared in the report
  int confirm = 3;                  // how many to measure again
};

// measure(candidate, confirm, result): confirm=false for the sweep (the runner decides fit and
// times the steps), true for the second measurement (only step_ms is read).
using MeasureFn = std::function<Status(const Candidate&, bool confirm, Measurement*)>;
// progress(done, expected, label): expected grows as refinement adds candidates.
using ProgressFn = std::function<void(size_t, size_t, const std::string&)>;

struct SearchResult {
  std::vector<Trial> trials;  // in the order measured
  int best = -1;              // index into trials; -1 if nothing fits
};

Status run_search(const SearchSpace& space, const MeasureFn& measure, const ProgressFn& progress,
                  SearchResult* result);

// The coarse sizes of stages 0-2 (exposed for tests).
std::vector<size_t> coarse_buckets(uint64_t grad_bytes);
// The coarse depths of stage 3.
std::vector<int> coarse_depths(int units);

std::string describe(const Candidate& c, int stage);

}  // namespace zrt::tune
