// zrt-tune --algorithms: measures the crossovers between the algorithms of reduce-scatter,
// all-gather and all-reduce on this machine and writes the algorithm table
// (collectives/algorithm.h) that ZRT_ALGO_TABLE loads.
//
// For every rank count and every op with more than one algorithm, each candidate runs under
// zrt-run as zrt-bench does (the same sizes, shapes and timing; out of place and in place) with a
// one-row table forcing it; the runs are interleaved, round after round, so a loaded machine
// slows every candidate alike. A size's figure is the median over rounds of its out-of-place and
// in-place times averaged; the fastest candidate wins the size, neighbouring sizes with the same
// winner form one band, and each band is one row. A measured N covers the rank counts up to the
// next measured one; the last covers every count above.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "collectives/algorithm.h"
#include "lib/core/status.h"

namespace zrt::tune {

struct AlgorithmTuneOptions {
  std::vector<int> ranks{2, 4};
  uint64_t min_bytes = 4 << 10;
  uint64_t max_bytes = 4 << 20;
  double factor = 2;
  int rounds = 3;
  int iters = 20;
  int warmup = 5;
  std::string zrt_run;    // default: next to zrt-tune (installed) or in the build tree
  std::string zrt_bench;  // likewise
};

// One (op, ranks) sweep: per size, per candidate, the median time in microseconds.
struct AlgorithmSweep {
  TableOp op = TableOp::kAllReduce;
  int ranks = 2;
  std::map<uint64_t, std::map<std::string, double>> time_us;
};

// The table of the sweeps: rows per op, measured rank count and band of sizes (see above).
AlgorithmTable crossover_table(const std::vector<AlgorithmSweep>& sweeps);

// What it measured, one line per op x N x size with every candidate's time and the winner.
std::string render_sweeps(const std::vector<AlgorithmSweep>& sweeps);

// Runs the measurements (zrt-run and zrt-bench as child processes, from a plain process: not
// under a launcher), progress on stderr.
Status measure_algorithms(const AlgorithmTuneOptions& options, std::vector<AlgorithmSweep>* out);

}  // namespace zrt::tune
