#include "tools/zrt-bench/bench_options.h"

#include <algorithm>
#include <cctype>
#include <sstream>

#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include "tools/common/units.h"

namespace zrt::bench {
namespace {

std::string normalize(const std::string& text) {
  std::string out;
  for (char c : text) {
    if (c == '-' || c == '_') continue;
    out += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  }
  return out;
}

std::vector<std::string> split_commas(const std::string& text) {
  std::vector<std::string> out;
  std::stringstream stream(text);
  std::string item;
  while (std::getline(stream, item, ',')) {
    if (!item.empty()) out.push_back(item);
  }
  return out;
}

constexpr Coll kAllColls[] = {Coll::kReduceScatter, Coll::kAllGather, Coll::kAllReduce,
                              Coll::kBroadcast, Coll::kReduce};

struct DtypeName {
  const char* name;
  zrt_dtype_t dtype;
};
constexpr DtypeName kDtypeNames[] = {
    {"float", ZRT_F32},   {"f32", ZRT_F32},       {"float32", ZRT_F32}, {"double", ZRT_F64},
    {"f64", ZRT_F64},     {"float64", ZRT_F64},   {"half", ZRT_F16},    {"f16", ZRT_F16},
    {"float16", ZRT_F16}, {"bfloat16", ZRT_BF16}, {"bf16", ZRT_BF16},   {"int8", ZRT_I8},
    {"i8", ZRT_I8},       {"char", ZRT_I8},       {"uint8", ZRT_U8},    {"u8", ZRT_U8},
    {"int32", ZRT_I32},   {"i32", ZRT_I32},       {"int", ZRT_I32},     {"int64", ZRT_I64},
    {"i64", ZRT_I64},
};

}  // namespace

const char* coll_name(Coll coll) {
  switch (coll) {
    case Coll::kReduceScatter:
      return "reduce_scatter";
    case Coll::kAllGather:
      return "all_gather";
    case Coll::kAllReduce:
      return "all_reduce";
    case Coll::kBroadcast:
      return "broadcast";
    case Coll::kReduce:
      return "reduce";
  }
  return "?";
}

Status parse_collective(const std::string& text, std::vector<Coll>* out) {
  std::string key = normalize(text);
  if (key == "all") {
    for (Coll c : kAllColls) {
      if (std::find(out->begin(), out->end(), c) == out->end()) out->push_back(c);
    }
    return Status::ok();
  }
  for (Coll c : kAllColls) {
    if (key == normalize(coll_name(c)) || (c == Coll::kBroadcast && key == "bcast")) {
      if (std::find(out->begin(), out->end(), c) == out->end()) out->push_back(c);
      return Status::ok();
    }
  }
  return Status::invalid_argument(
      "unknown collective '{}' (choose from reduce_scatter, all_gather, all_reduce, broadcast, "
      "reduce, or all)",
      text);
}

size_t dtype_bytes(zrt_dtype_t dtype) {
  switch (dtype) {
    case ZRT_F32:
    case ZRT_I32:
      return 4;
    case ZRT_F64:
    case ZRT_I64:
      return 8;
    case ZRT_F16:
    case ZRT_BF16:
      return 2;
    case ZRT_I8:
    case ZRT_U8:
      return 1;
    default:
      return 0;
  }
}

bool dtype_is_float(zrt_dtype_t dtype) {
  return dtype == ZRT_F32 || dtype == ZRT_F64 || dtype == ZRT_F16 || dtype == ZRT_BF16;
}

const char* dtype_display_name(zrt_dtype_t dtype) {
  switch (dtype) {
    case ZRT_F32:
      return "float";
    case ZRT_F64:
      return "double";
    case ZRT_F16:
      return "half";
    case ZRT_BF16:
      return "bfloat16";
    case ZRT_I8:
      return "int8";
    case ZRT_U8:
      return "uint8";
    case ZRT_I32:
      return "int32";
    case ZRT_I64:
      return "int64";
    default:
      return "?";
  }
}

const char* op_display_name(zrt_op_t op) {
  switch (op) {
    case ZRT_SUM:
      return "sum";
    case ZRT_AVG:
      return "avg";
    case ZRT_MIN:
      return "min";
    case ZRT_MAX:
      return "max";
    case ZRT_PROD:
      return "prod";
    default:
      return "?";
  }
}

Status parse_dtype_list(const std::string& text, std::vector<zrt_dtype_t>* out) {
  std::vector<zrt_dtype_t> dtypes;
  if (normalize(text) == "all") {
    dtypes = {ZRT_I8, ZRT_U8, ZRT_I32, ZRT_I64, ZRT_F16, ZRT_F32, ZRT_F64, ZRT_BF16};
  } else {
    for (const std::string& item : split_commas(text)) {
      std::string key = normalize(item);
      auto it = std::find_if(std::begin(kDtypeNames), std::end(kDtypeNames),
                             [&](const DtypeName& d) { return key == d.name; });
      if (it == std::end(kDtypeNames)) {
        return Status::invalid_argument(
            "-d: unknown data type '{}' (choose from float, half, bfloat16, double, int8, uint8, "
            "int32, int64, or all)",
            item);
      }
      dtypes.push_back(it->dtype);
    }
  }
  if (dtypes.empty()) return Status::invalid_argument("-d: no data type given");
  *out = dtypes;
  return Status::ok();
}

Status parse_op_list(const std::string& text, std::vector<zrt_op_t>* out) {
  std::vector<zrt_op_t> ops;
  if (normalize(text) == "all") {
    ops = {ZRT_SUM, ZRT_PROD, ZRT_MAX, ZRT_MIN, ZRT_AVG};
  } else {
    for (const std::string& item : split_commas(text)) {
      std::string key = normalize(item);
      zrt_op_t op;
      if (key == "sum")
        op = ZRT_SUM;
      else if (key == "prod")
        op = ZRT_PROD;
      else if (key == "max")
        op = ZRT_MAX;
      else if (key == "min")
        op = ZRT_MIN;
      else if (key == "avg" || key == "mean")
        op = ZRT_AVG;
      else
        return Status::invalid_argument(
            "-o: unknown reduction '{}' (choose from sum, prod, max, min, avg, or all)", item);
      ops.push_back(op);
    }
  }
  if (ops.empty()) return Status::invalid_argument("-o: no reduction given");
  *out = ops;
  return Status::ok();
}

Status parse_bench_options(int argc, const char* const* argv, BenchOptions* options,
                           ParseResult* result) {
  CLI::App app{
      "zrt-bench: bandwidth of zrt's collectives, in the columns of nccl-tests.\n"
      "Run it under zrt-run (or any launcher that sets RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT)."};
  app.footer(
      "Collectives: reduce_scatter, all_gather, all_reduce, broadcast, reduce, or all.\n"
      "Sizes: plain bytes or with a unit: 8, 1K (=1024), 256MiB, 64KB (=64000), 2G, 7.5e9.\n"
      "Columns: size is the full buffer (count x type size x ranks for reduce_scatter and\n"
      "all_gather); algbw = size / time; busbw = algbw x (N-1)/N for reduce_scatter and\n"
      "all_gather, x 2(N-1)/N for all_reduce, x 1 for broadcast and reduce (nccl-tests' factors).\n"
      "\n"
      "Examples:\n"
      "  zrt-run -n 2 zrt-bench all_reduce -b 8 -e 128M -f 2\n"
      "  zrt-run -n 4 zrt-bench all -b 1K -e 64M --json out.json --plot busbw.svg\n"
      "  zrt-run -n 2 zrt-bench reduce_scatter -d bf16 -o sum -c 1 -n 50 -w 10\n"
      "  zrt-run -n 8 zrt-bench all_gather -m cuda -b 1M -e 1G\n"
      "\n"
      "Exit codes: 0 ok, 1 a zrt call failed, 2 bad command line, 3 wrong results (-c 1).");
  std::vector<std::string> collectives;
  std::string min_bytes = "8", max_bytes = "32M", step_bytes, dtypes = "float", ops = "sum";
  std::string mem = "host";
  double step_factor = 0;
  int check = 1, blocking = 0, average = 1;
  app.add_option("collective", collectives,
                 "collectives to run: reduce_scatter all_gather all_reduce broadcast reduce all")
      ->required();
  app.add_option("-b,--minbytes", min_bytes, "smallest message size (default 8)");
  app.add_option("-e,--maxbytes", max_bytes, "largest message size (default 32M)");
  auto* factor_opt = app.add_option("-f,--stepfactor", step_factor,
                                    "multiply the size by this each step (default 2)");
  auto* step_opt = app.add_option("-i,--stepbytes", step_bytes, "add this many bytes each step");
  step_opt->excludes(factor_opt);
  app.add_option("-n,--iters", options->iters, "timed iterations per size (default 20)")
      ->check(CLI::Range(1, 1000000));
  app.add_option("-w,--warmup_iters", options->warmup, "untimed warm-up iterations (default 5)")
      ->check(CLI::Range(0, 1000000));
  app.add_option("-c,--check", check, "check results, count wrong elements: 0 or 1 (default 1)")
      ->check(CLI::Range(0, 1));
  app.add_option("-d,--datatype", dtypes,
                 "float half bfloat16 double int8 uint8 int32 int64, a comma list, or all");
  app.add_option("-o,--op", ops, "sum prod max min avg, a comma list, or all (default sum)");
  app.add_option("-r,--root", options->root, "root rank of broadcast and reduce (default 0)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("-z,--blocking", blocking, "wait for every call before the next: 0 or 1")
      ->check(CLI::Range(0, 1));
  app.add_option("-a,--average", average,
                 "time reported: 0 rank 0, 1 mean over ranks, 2 min, 3 max (default 1)")
      ->check(CLI::Range(0, 3));
  app.add_option("-m,--memory", mem, "memory kind of the buffers: host or cuda (default host)");
  int registered = 0;
  app.add_option("-R,--registered", registered,
                 "host buffers from zrt_mem_alloc, which peers on the host map: 0 or 1 "
                 "(default 0)")
      ->check(CLI::Range(0, 1));
  app.add_option("--json", options->json_path,
                 "write every row, the settings and the topology as JSON to FILE (- = stdout, "
                 "instead of the table; everything else written there, UCX's log included, "
                 "then goes to stderr)");
  app.add_option("--plot", options->plot_path,
                 "write an SVG of bus bandwidth against size, one line per collective");
  bool no_progress = false;
  app.add_flag("--no-progress", no_progress, "no progress line on stderr");

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp&) {
    result->show_help = true;
    result->text = app.help();
    return Status::ok();
  } catch (const CLI::ParseError& e) {
    return Status::invalid_argument("{} (see --help)", e.what());
  }

  options->collectives.clear();
  for (const std::string& c : collectives)
    ZRT_RETURN_IF_ERROR(parse_collective(c, &options->collectives));
  ZRT_RETURN_IF_ERROR(tools::parse_size(min_bytes, "-b", &options->min_bytes));
  ZRT_RETURN_IF_ERROR(tools::parse_size(max_bytes, "-e", &options->max_bytes));
  if (options->max_bytes < options->min_bytes) {
    return Status::invalid_argument("-e {} is smaller than -b {}: the sweep would be empty",
                                    max_bytes, min_bytes);
  }
  // A collective's buffers are a size times the ranks: bounded so no byte total can wrap.
  if (options->max_bytes > kMaxBenchBytes) {
    return Status::invalid_argument("-e {}: {} bytes is over the limit of {} bytes (1 PiB)",
                                    max_bytes, options->max_bytes, kMaxBenchBytes);
  }
  if (!step_bytes.empty()) {
    ZRT_RETURN_IF_ERROR(tools::parse_size(step_bytes, "-i", &options->step_bytes));
    if (options->step_bytes == 0) return Status::invalid_argument("-i must be more than 0 bytes");
    options->step_factor = 1.0;
  } else if (factor_opt->count() > 0) {
    if (!(step_factor > 1.0)) {
      return Status::invalid_argument("-f must be more than 1 (got {}); use -i for equal steps",
                                      step_factor);
    }
    options->step_factor = step_factor;
  }
  // The sweep is listed before it runs: count it first, without building it.
  uint64_t points = 0;
  for (uint64_t size = options->min_bytes; size <= options->max_bytes && points <= kMaxSweepSizes;
       ++points) {
    uint64_t next = options->step_bytes > 0
                        ? size + options->step_bytes
                        : static_cast<uint64_t>(static_cast<double>(size) * options->step_factor);
    if (next <= size) next = size + 1;
    size = next;
  }
  if (points > kMaxSweepSizes) {
    return Status::invalid_argument(
        "-b {} -e {} {} makes more than {} sizes; use a larger -i or -f", min_bytes, max_bytes,
        options->step_bytes > 0 ? "-i " + step_bytes : fmt::format("-f {}", options->step_factor),
        kMaxSweepSizes);
  }
  options->check = check == 1;
  options->blocking = blocking == 1;
  options->average = static_cast<Average>(average);
  options->progress = !no_progress;
  ZRT_RETURN_IF_ERROR(parse_dtype_list(dtypes, &options->dtypes));
  ZRT_RETURN_IF_ERROR(parse_op_list(ops, &options->ops));
  std::string kind = normalize(mem);
  if (kind == "host" || kind == "cpu") {
    options->mem_kind = ZRT_MEM_HOST;
  } else if (kind == "cuda" || kind == "gpu" || kind == "device") {
    options->mem_kind = ZRT_MEM_CUDA;
  } else {
    return Status::invalid_argument("-m: unknown memory kind '{}' (choose host or cuda)", mem);
  }
  options->registered = registered == 1;
  if (options->registered && options->mem_kind != ZRT_MEM_HOST) {
    return Status::invalid_argument("-R 1: registered buffers are host memory; use -m host");
  }
  return Status::ok();
}

std::vector<uint64_t> sweep_sizes(const BenchOptions& options) {
  std::vector<uint64_t> sizes;
  for (uint64_t size = options.min_bytes; size <= options.max_bytes;) {
    sizes.push_back(size);
    uint64_t next = options.step_bytes > 0
                        ? size + options.step_bytes
                        : static_cast<uint64_t>(static_cast<double>(size) * options.step_factor);
    if (next <= size) next = size + 1;  // -b 0 or a factor that rounds back to the same size
    size = next;
  }
  return sizes;
}

}  // namespace zrt::bench
