// Runs zrt-bench's sweep through the public C API only (zrt.h): what a user's program can do,
// zrt-bench does, so its numbers are the ones a framework will see.
#pragma once

#include <vector>

#include "lib/core/status.h"
#include "tools/zrt-bench/bench_options.h"
#include "tools/zrt-bench/bench_report.h"

namespace zrt::bench {

// Creates the communicator from the environment, runs every collective × dtype × op × size of
// `options`, and prints nccl-tests' table on rank 0 as rows complete (unless JSON goes to
// stdout). On success, `rows` and `info` hold what rank 0 reports; every rank returns the same
// rows (times and #wrong are agreed over ranks).
Status run_benchmark(const BenchOptions& options, std::vector<BenchRow>* rows, RunInfo* info,
                     bool* is_rank0);

}  // namespace zrt::bench
