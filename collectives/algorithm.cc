#include "collectives/algorithm.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include <fmt/format.h>

#include "lib/core/log.h"

namespace zrt {
namespace {

// The first algorithm of each op is its fallback (algorithm.h).
constexpr AlgorithmInfo kAlgorithms[] = {
    {TableOp::kReduceScatter, "ring",
     "ring through the neighbour's mapped window (one host) or tagged messages"},
    {TableOp::kAllGather, "ring",
     "ring through the neighbour's mapped window (one host) or tagged messages"},
    {TableOp::kAllReduce, "ring", "ring reduce-scatter then ring all-gather"},
    {TableOp::kAllReduce, "direct",
     "every rank sends its input to every other in one round, reduced in rank order"},
    {TableOp::kAllReduce, "rd", "recursive doubling"},
    {TableOp::kReduceScatter, "oneshot",
     "one host: every rank reads its block of every peer's input out of the peers' mapped "
     "arenas, reduced in rank order"},
    {TableOp::kAllGather, "oneshot",
     "one host: every rank copies every peer's block out of the peers' mapped arenas"},
    {TableOp::kAllGather, "cma",
     "one host, where ranks may read each other's memory: every rank copies every peer's block "
     "straight out of the peer's input (process_vm_readv), one copy instead of two"},
    {TableOp::kAllReduce, "oneshot",
     "one host: every rank reduces every peer's input out of the peers' mapped arenas, in rank "
     "order"},
    {TableOp::kAllReduce, "twoshot",
     "one host: every rank reduces its block of every peer's input out of the peers' mapped "
     "arenas, then copies the peers' reduced blocks"},
};

// The crossovers were measured on the development machine (2 cores, one host) by `zrt-tune
// --algorithms` and by one algorithm against another forced with ZRT_ALGO, interleaved; the
// figures are in docs/MEASURED.md#the-built-in-table. One-shot and two-shot run through the
// mapped arenas on one host only; elsewhere, and where a rank's deposit exceeds the 1 MiB arena
// slot, their rows are passed over. Their all-gather copies, and their reductions add in the
// order of the algorithm they stand in for (the ring's, or the direct all-reduce's where that
// one runs), so the choice never changes a result's bits. The cma all-gather needs ranks that
// may read each other's memory; elsewhere its rows are passed over and the next match runs. The
// direct all-reduce runs up to 64 KiB while N inputs of that size fit the stream's 4 MiB staging
// (64 ranks). Across hosts it sends every input whole over the network and lost to the ring from
// 16 KiB up; below, direct, ring and rd were within noise of each other, and direct keeps one
// round.
constexpr const char* kBuiltinTable = R"(
# op              ranks  hosts  bytes   algorithm
all_reduce        2-7    1      0-32K   oneshot
all_reduce        8      1      0-8K    oneshot
all_reduce        2      1      0-512K  twoshot
all_reduce        3-8    1      0-1M    twoshot
all_reduce        2-64   1      0-64K   direct
all_reduce        2-64   2-*    0-8K    direct
all_reduce        *      *      *       ring
reduce_scatter    2-8    1      0-1M    oneshot
reduce_scatter    *      *      *       ring
all_gather        2      1      0-8K    oneshot
all_gather        2      1      0-32M   cma
all_gather        2      1      0-1M    oneshot
all_gather        3-8    1      0-4M    oneshot
all_gather        3-8    1      0-16M   cma
all_gather        *      *      *       ring
)";

constexpr TableOp kOps[] = {TableOp::kReduceScatter, TableOp::kAllGather, TableOp::kAllReduce};

std::vector<std::string_view> split_fields(std::string_view line) {
  std::vector<std::string_view> fields;
  size_t i = 0;
  while (i < line.size()) {
    while (i < line.size() && (line[i] == ' ' || line[i] == '\t' || line[i] == '\r')) ++i;
    const size_t start = i;
    while (i < line.size() && line[i] != ' ' && line[i] != '\t' && line[i] != '\r') ++i;
    if (i > start) fields.push_back(line.substr(start, i - start));
  }
  return fields;
}

bool parse_count(std::string_view text, uint64_t* value) {
  if (text.empty() || text.size() > 20 || text[0] < '0' || text[0] > '9') return false;
  const std::string copy(text);
  errno = 0;
  char* end = nullptr;
  const unsigned long long parsed = std::strtoull(copy.c_str(), &end, 10);
  if (errno != 0) return false;
  const std::string_view suffix(end);
  int shift = 0;
  if (suffix.empty()) {
    shift = 0;
  } else if (suffix == "K" || suffix == "KiB") {
    shift = 10;
  } else if (suffix == "M" || suffix == "MiB") {
    shift = 20;
  } else if (suffix == "G" || suffix == "GiB") {
    shift = 30;
  } else {
    return false;
  }
  if (parsed > (UINT64_MAX >> shift)) return false;
  *value = static_cast<uint64_t>(parsed) << shift;
  return true;
}

// "*", "V", "A-B" or "A-*" into [*lo, *hi]; false when it is none of these or empty.
bool parse_range(std::string_view text, uint64_t any, uint64_t* lo, uint64_t* hi) {
  if (text == "*") {
    *hi = any;
    return true;
  }
  const size_t dash = text.find('-');
  if (dash == std::string_view::npos) {
    if (!parse_count(text, lo)) return false;
    *hi = *lo;
    return true;
  }
  if (!parse_count(text.substr(0, dash), lo)) return false;
  const std::string_view upper = text.substr(dash + 1);
  if (upper == "*") {
    *hi = any;
  } else if (!parse_count(upper, hi)) {
    return false;
  }
  return *lo <= *hi;
}

std::string format_count(uint64_t value) {
  if (value != 0 && value % (uint64_t{1} << 30) == 0) return fmt::format("{}G", value >> 30);
  if (value != 0 && value % (uint64_t{1} << 20) == 0) return fmt::format("{}M", value >> 20);
  if (value != 0 && value % (uint64_t{1} << 10) == 0) return fmt::format("{}K", value >> 10);
  return std::to_string(value);
}

std::string format_range(uint64_t lo, uint64_t hi, uint64_t any, uint64_t first) {
  if (lo <= first && hi == any) return "*";
  if (hi == any) return format_count(lo) + "-*";
  if (lo == hi) return format_count(lo);
  return format_count(lo) + "-" + format_count(hi);
}

std::string op_algorithms(TableOp op) {
  std::string names;
  for (const AlgorithmInfo& info : kAlgorithms) {
    if (info.op != op) continue;
    if (!names.empty()) names += ", ";
    names += info.name;
  }
  return names;
}

// "N", "A-B", "A-*" or "*" as a count range from 1 into [*lo, *hi]; false when it is not.
bool parse_count_range(std::string_view text, int* lo, int* hi) {
  uint64_t low = 1, high = 0;
  if (!parse_range(text, kAnyRanks, &low, &high) || low < 1 || high > kAnyRanks) return false;
  *lo = static_cast<int>(low);
  *hi = static_cast<int>(high);
  return true;
}

// Four fields (op ranks bytes algorithm: any number of hosts) or five (op ranks hosts bytes
// algorithm).
Status parse_row(const std::vector<std::string_view>& fields, AlgorithmRow* row) {
  if (fields.size() != 4 && fields.size() != 5) {
    return Status::invalid_argument(
        "{} field(s), expected 5: op ranks hosts bytes algorithm (or 4, without hosts)",
        fields.size());
  }
  const bool has_hosts = fields.size() == 5;
  const std::string_view bytes_field = fields[has_hosts ? 3 : 2];
  const std::string_view algorithm = fields.back();
  bool known = false;
  for (TableOp op : kOps) {
    if (fields[0] == table_op_name(op)) {
      row->op = op;
      known = true;
    }
  }
  if (!known) {
    return Status::invalid_argument("op '{}' is not reduce_scatter, all_gather or all_reduce",
                                    fields[0]);
  }
  if (!parse_count_range(fields[1], &row->min_ranks, &row->max_ranks)) {
    return Status::invalid_argument(
        "ranks '{}' is not N, A-B, A-* or * (rank counts from 1, the first not above the second)",
        fields[1]);
  }
  if (has_hosts && !parse_count_range(fields[2], &row->min_hosts, &row->max_hosts)) {
    return Status::invalid_argument(
        "hosts '{}' is not N, A-B, A-* or * (host counts from 1, the first not above the second)",
        fields[2]);
  }
  uint64_t lo = 0, hi = 0;
  if (!parse_range(bytes_field, kAnyBytes, &lo, &hi)) {
    return Status::invalid_argument(
        "bytes '{}' is not S, A-B, A-* or * (byte counts, optionally with K, M or G; the first "
        "not above the second)",
        bytes_field);
  }
  row->min_bytes = lo;
  row->max_bytes = hi;
  if (!op_has_algorithm(row->op, algorithm)) {
    return Status::invalid_argument("{} has no algorithm '{}' (it has: {})", table_op_name(row->op),
                                    algorithm, op_algorithms(row->op));
  }
  row->algorithm = std::string(algorithm);
  return Status::ok();
}

}  // namespace

const char* table_op_name(TableOp op) {
  switch (op) {
    case TableOp::kReduceScatter:
      return "reduce_scatter";
    case TableOp::kAllGather:
      return "all_gather";
    case TableOp::kAllReduce:
      return "all_reduce";
  }
  return "?";
}

std::span<const AlgorithmInfo> algorithms() {
  return kAlgorithms;
}

bool op_has_algorithm(TableOp op, std::string_view name) {
  return std::any_of(std::begin(kAlgorithms), std::end(kAlgorithms),
                     [&](const AlgorithmInfo& info) { return info.op == op && name == info.name; });
}

Status AlgorithmTable::parse(std::string_view text, std::string_view source,
                             AlgorithmTable* table) {
  if (table == nullptr) return Status::invalid_argument("AlgorithmTable::parse: table is NULL");
  AlgorithmTable parsed;
  int line_number = 0;
  while (!text.empty()) {
    const size_t newline = text.find('\n');
    std::string_view line = text.substr(0, newline);
    text.remove_prefix(newline == std::string_view::npos ? text.size() : newline + 1);
    ++line_number;
    line = line.substr(0, line.find('#'));
    const std::vector<std::string_view> fields = split_fields(line);
    if (fields.empty()) continue;
    AlgorithmRow row;
    row.line = line_number;
    Status status = parse_row(fields, &row);
    if (!status.is_ok()) {
      return Status::invalid_argument("{}: line {}: {}", source, line_number, status.message());
    }
    parsed.rows_.push_back(std::move(row));
  }
  *table = std::move(parsed);
  return Status::ok();
}

Status AlgorithmTable::load(const std::string& path, AlgorithmTable* table) {
  const std::string source = "ZRT_ALGO_TABLE=" + path;
  std::ifstream file(path, std::ios::binary);
  if (!file) {
    return Status::invalid_argument(
        "{}: cannot open the file (write one with zrt-tune "
        "--algorithms, or unset the variable)",
        source);
  }
  std::ostringstream text;
  text << file.rdbuf();
  if (file.bad()) return Status::invalid_argument("{}: reading the file failed", source);
  return parse(text.str(), source, table);
}

const AlgorithmTable& AlgorithmTable::builtin() {
  // Immutable once built; a parse error is a defect of kBuiltinTable that the unit tests catch,
  // and leaves the ops' fallbacks in charge.
  static const AlgorithmTable table = [] {
    AlgorithmTable parsed;
    Status status = parse(kBuiltinTable, "built-in algorithm table", &parsed);
    if (!status.is_ok()) ZRT_LOG_ERROR("{}", status.message());
    return parsed;
  }();
  return table;
}

const char* AlgorithmTable::find(TableOp op, int ranks, uint64_t bytes, Unavailable unavailable,
                                 int hosts) const {
  for (const AlgorithmRow& row : rows_) {
    if (row.matches(op, ranks, bytes, hosts) && !unavailable.has(row.algorithm)) {
      return row.algorithm.c_str();
    }
  }
  return nullptr;
}

std::string AlgorithmTable::format() const {
  std::string out =
      fmt::format("# {:<16} {:<7} {:<6} {:<17} {}\n", "op", "ranks", "hosts", "bytes", "algorithm");
  for (const AlgorithmRow& row : rows_) {
    out += fmt::format("{:<18} {:<7} {:<6} {:<17} {}\n", table_op_name(row.op),
                       format_range(static_cast<uint64_t>(row.min_ranks),
                                    static_cast<uint64_t>(row.max_ranks), kAnyRanks, 1),
                       format_range(static_cast<uint64_t>(row.min_hosts),
                                    static_cast<uint64_t>(row.max_hosts), kAnyRanks, 1),
                       format_range(row.min_bytes, row.max_bytes, kAnyBytes, 0), row.algorithm);
  }
  return out;
}

const char* choose_algorithm(std::string_view forced, const AlgorithmTable* table, TableOp op,
                             int ranks, uint64_t bytes, Unavailable unavailable, int hosts) {
  // Most calls force nothing: the scan compared "auto" with every name of the op, a strlen each,
  // on the path of every small collective (perf: 2.4% of an 8-byte all-reduce's samples;
  // docs/ARCHITECTURE.md#measured-costs).
  const bool forces = !forced.empty() && forced != "auto";
  for (const AlgorithmInfo& info : kAlgorithms) {
    if (forces && info.op == op && forced == info.name && !unavailable.has(forced)) {
      return info.name;
    }
  }
  if (table != nullptr) {
    if (const char* name = table->find(op, ranks, bytes, unavailable, hosts)) return name;
  }
  if (const char* name = AlgorithmTable::builtin().find(op, ranks, bytes, unavailable, hosts)) {
    return name;
  }
  for (const AlgorithmInfo& info : kAlgorithms) {
    if (info.op == op) return info.name;
  }
  return "ring";
}

const char* algorithm_name(AllReduceAlgorithm algorithm) {
  switch (algorithm) {
    case AllReduceAlgorithm::kAuto:
      return "auto";
    case AllReduceAlgorithm::kRing:
      return "ring";
    case AllReduceAlgorithm::kDirect:
      return "direct";
    case AllReduceAlgorithm::kRecursiveDoubling:
      return "rd";
    case AllReduceAlgorithm::kOneShot:
      return "oneshot";
    case AllReduceAlgorithm::kCma:
      return "cma";
    case AllReduceAlgorithm::kTwoShot:
      return "twoshot";
  }
  return "?";
}

}  // namespace zrt
