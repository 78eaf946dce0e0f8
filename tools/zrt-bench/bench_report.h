// zrt-bench's results and how they are shown: nccl-tests' table, a JSON record, an SVG plot.
// Pure functions of the measured rows, so they are tested without running any collective.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tools/zrt-bench/bench_options.h"

namespace zrt::bench {

// Shape of one benchmark point: how many elements each call moves for a requested size.
struct CollShape {
  uint64_t count = 0;  // the count passed to the call (recvcount / sendcount for RS / AG)
  uint64_t bytes = 0;  // the full buffer: count × type size × (N for RS and AG, else 1)
};
// Rounds `requested_bytes` down to whole elements (at least one per rank).
CollShape coll_shape(Coll coll, uint64_t requested_bytes, zrt_dtype_t dtype, int ranks);

// nccl-tests' bus bandwidth factor for N ranks.
double busbw_factor(Coll coll, int ranks);

struct Measure {
  double time_us = 0;
  double algbw_gbs = 0;
  double busbw_gbs = 0;
  int64_t wrong = -1;  // -1 when not checked
};

struct BenchRow {
  Coll coll = Coll::kAllReduce;
  uint64_t bytes = 0;
  uint64_t count = 0;
  zrt_dtype_t dtype = ZRT_F32;
  zrt_op_t op = ZRT_SUM;
  int root = -1;
  Measure out_of_place;
  Measure in_place;
};

// Time (µs per call, already agreed over ranks) → algbw, busbw.
Measure make_measure(Coll coll, uint64_t bytes, int ranks, double time_us, int64_t wrong);

// Whether the redop and root columns apply ("none" / -1 otherwise, as nccl-tests prints).
bool coll_has_op(Coll coll);
bool coll_has_root(Coll coll);

struct RunInfo {
  int ranks = 1;
  int local_ranks = 1;
  int hosts = 1;
  std::vector<std::string> rank_lines;  // "Rank  0 Pid  1234 on host vm"
  std::string hostname;
  int cores = 0;  // from hwloc when built in, else 0
  int numa_nodes = 0;
};

// The header above a collective's rows and the rows themselves, in nccl-tests' format.
std::string format_settings(const BenchOptions& options, const RunInfo& info);
std::string format_table_header();
std::string format_row(const BenchRow& row);
// Mean busbw over the rows (out-of-place and in-place both count, as nccl-tests does).
double average_busbw(const std::vector<BenchRow>& rows);
int64_t total_wrong(const std::vector<BenchRow>& rows);  // -1 if unchecked

nlohmann::json rows_to_json(const BenchOptions& options, const RunInfo& info,
                            const std::vector<BenchRow>& rows);

// The bus bandwidth plot: one line per collective (and dtype/op when several), out-of-place.
Status render_busbw_plot(const std::vector<BenchRow>& rows, int ranks, std::string* svg);

}  // namespace zrt::bench
