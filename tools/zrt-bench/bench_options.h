// zrt-bench's settings and their command line, in nccl-tests' vocabulary (-b -e -f -i -n -w -c
// -d -o -r -z -a) so that people who know nccl-tests can read and type it without a manual.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "lib/core/status.h"
#include "zrt/zrt.h"

namespace zrt::bench {

// Limits of a sweep: the largest size (its buffers times the ranks must not wrap a byte count)
// and the number of sizes.
inline constexpr uint64_t kMaxBenchBytes = uint64_t{1} << 50;
inline constexpr uint64_t kMaxSweepSizes = 4096;

enum class Coll { kReduceScatter, kAllGather, kAllReduce, kBroadcast, kReduce };

const char* coll_name(Coll coll);  // "reduce_scatter", ...
// Accepts "all_reduce", "allreduce", "all-reduce", "bcast", ... ; "all" yields all five.
Status parse_collective(const std::string& text, std::vector<Coll>* out);

// nccl-tests' names ("float", "half", "bfloat16", "int8", ...) and zrt's ("f32", "bf16", ...).
Status parse_dtype_list(const std::string& text, std::vector<zrt_dtype_t>* out);  // or "all"
Status parse_op_list(const std::string& text, std::vector<zrt_op_t>* out);        // or "all"
const char* dtype_display_name(zrt_dtype_t dtype);  // nccl-tests' spelling: "float", "half"
const char* op_display_name(zrt_op_t op);           // "sum", "prod", "max", "min", "avg"
size_t dtype_bytes(zrt_dtype_t dtype);              // 0 if unknown
bool dtype_is_float(zrt_dtype_t dtype);

// How per-rank times are combined into the reported time (nccl-tests' -a).
enum class Average { kRank0 = 0, kMean = 1, kMin = 2, kMax = 3 };

struct BenchOptions {
  std::vector<Coll> collectives;
  uint64_t min_bytes = 8;
  uint64_t max_bytes = 32ull << 20;
  double step_factor = 2.0;  // geometric sweep when > 1
  uint64_t step_bytes = 0;   // arithmetic sweep when > 0 (then step_factor is 1)
  int iters = 20;
  int warmup = 5;
  bool check = true;
  std::vector<zrt_dtype_t> dtypes{ZRT_F32};
  std::vector<zrt_op_t> ops{ZRT_SUM};
  int root = 0;
  bool blocking = false;  // synchronize after every call (nccl-tests -z)
  Average average = Average::kMean;
  zrt_mem_kind_t mem_kind = ZRT_MEM_HOST;
  bool registered = false;  // buffers from zrt_mem_alloc (nccl-tests -R)
  std::string json_path;    // "" none, "-" stdout (instead of the table)
  std::string plot_path;
  bool progress = true;
};

// The outcome of parsing: run the benchmark, or print `text` (help) and exit 0.
struct ParseResult {
  bool show_help = false;
  std::string text;
};

// Parses argv (argv[0] is the program name). Errors are ZRT_INVALID_ARGUMENT with a message
// that names the flag and says what would be accepted.
Status parse_bench_options(int argc, const char* const* argv, BenchOptions* options,
                           ParseResult* result);

// The message sizes of the sweep, in bytes, as requested (before rounding to whole elements).
std::vector<uint64_t> sweep_sizes(const BenchOptions& options);

}  // namespace zrt::bench
