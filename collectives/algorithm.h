// Which algorithm runs a reduce-scatter, all-gather or all-reduce: one table of rows
// (op, rank range, host range, size range -> algorithm name), the first matching row wins. The
// built-in table (algorithm.cc) holds the crossovers measured on the development machine; a file
// in the same format (ZRT_ALGO_TABLE, written for a machine by `zrt-tune --algorithms`) goes in
// front of it, so a file may cover only some sizes. ZRT_ALGO (EngineOptions::all_reduce_algorithm)
// overrides both for every op that has the algorithm it names.
//
// The file format, one row a line; '#' starts a comment, blank lines are skipped:
//
//   # op           ranks  hosts  bytes       algorithm
//   all_reduce     2-64   1      0-64K       direct
//   all_reduce     *      *      *           ring
//
//   op         reduce_scatter, all_gather or all_reduce
//   ranks      N, A-B, A-* or * (any); inclusive
//   hosts      how many hosts the communicator's ranks are on, in the same forms: a crossover
//              measured on one host (1) need not hold where messages cross a network. A row of
//              four fields (op ranks bytes algorithm) applies to any number of hosts
//   bytes      S, A-B, A-* or *; inclusive; S is a byte count with an optional binary suffix
//              (K, KiB, M, MiB, G, GiB). The size is zrt-bench's size column: the whole buffer
//              (count x element size, times N for reduce-scatter and all-gather)
//   algorithm  a name the op has (algorithms() lists them)
//
// A row that does not parse fails the load with the line and what is wrong.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "lib/core/settings.h"
#include "lib/core/status.h"

namespace zrt {

enum class TableOp { kReduceScatter, kAllGather, kAllReduce };
const char* table_op_name(TableOp op);  // "reduce_scatter", "all_gather", "all_reduce"

// One algorithm an op can run, by the name tables and ZRT_ALGO use. The first listed for an op
// is its fallback, which must run at every rank count and size.
struct AlgorithmInfo {
  TableOp op;
  const char* name;
  const char* doc;
};
std::span<const AlgorithmInfo> algorithms();
bool op_has_algorithm(TableOp op, std::string_view name);

inline constexpr int kAnyRanks = 1 << 30;
inline constexpr uint64_t kAnyBytes = UINT64_MAX;

struct AlgorithmRow {
  TableOp op = TableOp::kAllReduce;
  int min_ranks = 1;  // inclusive
  int max_ranks = kAnyRanks;
  int min_hosts = 1;  // inclusive
  int max_hosts = kAnyRanks;
  uint64_t min_bytes = 0;  // inclusive
  uint64_t max_bytes = kAnyBytes;
  std::string algorithm;
  int line = 0;  // in the text it was parsed from

  // The row is about a communicator of `ranks` ranks on `hosts` hosts (any op and size).
  bool applies_to(int ranks, int hosts) const {
    return ranks >= min_ranks && ranks <= max_ranks && hosts >= min_hosts && hosts <= max_hosts;
  }
  bool matches(TableOp o, int ranks, uint64_t bytes, int hosts) const {
    return o == op && applies_to(ranks, hosts) && bytes >= min_bytes && bytes <= max_bytes;
  }
};

// The one-shot algorithm's name (collectives/one_shot.h), for all three ops, and the
// all-gather's single-copy variant of it (one_shot.h, "cma").
inline constexpr const char* kOneShotAlgorithm = "oneshot";
inline constexpr const char* kCmaAlgorithm = "cma";
// The all-reduce's two-shot variant of one-shot (one_shot.h, "two-shot").
inline constexpr const char* kTwoShotAlgorithm = "twoshot";

// Up to two algorithms a call cannot run (one-shot across hosts or beyond its slot, cma where
// the communicator's probe failed): rows naming one are passed over, and forcing one falls back
// to the table. Two-shot runs in the one-shot arena, with the same deposit: it is unavailable
// wherever one-shot is.
class Unavailable {
 public:
  Unavailable(const char* first = "", const char* second = "") : first_(first), second_(second) {}
  bool has(std::string_view name) const {
    if (name.empty()) return false;
    if (name == first_ || name == second_) return true;
    return name == kTwoShotAlgorithm &&
           (first_ == kOneShotAlgorithm || second_ == kOneShotAlgorithm);
  }

 private:
  std::string_view first_;
  std::string_view second_;
};

class AlgorithmTable {
 public:
  // Parses `text`; an error is ZRT_INVALID_ARGUMENT "<source>: line L: <what is wrong>".
  static Status parse(std::string_view text, std::string_view source, AlgorithmTable* table);
  // Reads and parses the file at `path` (source: "ZRT_ALGO_TABLE=<path>").
  static Status load(const std::string& path, AlgorithmTable* table);
  // The built-in table (kBuiltinTable in algorithm.cc), parsed once.
  static const AlgorithmTable& builtin();

  // The first matching row's algorithm that is not `unavailable`, or nullptr when none matches.
  // `hosts`: how many hosts the ranks are on.
  const char* find(TableOp op, int ranks, uint64_t bytes, Unavailable unavailable = {},
                   int hosts = 1) const;
  const std::vector<AlgorithmRow>& rows() const { return rows_; }
  void add(AlgorithmRow row) { rows_.push_back(std::move(row)); }

  // The rows in the file format, aligned; parse(format()) yields the same rows.
  std::string format() const;

 private:
  std::vector<AlgorithmRow> rows_;
};

// The algorithm a collective runs: `forced` (ZRT_ALGO's name; "" or "auto" for none) when the op
// has it, else the first match in `table` (nullptr: none), else in the built-in table, else the
// op's fallback. `bytes` as the table measures it (see above); `hosts`: how many hosts the ranks
// are on. Algorithms in `unavailable` are passed over, in rows and when forced.
const char* choose_algorithm(std::string_view forced, const AlgorithmTable* table, TableOp op,
                             int ranks, uint64_t bytes, Unavailable unavailable = {},
                             int hosts = 1);

// "auto", "ring", "direct", "rd" (recursive doubling), "oneshot", "twoshot" or "cma", as ZRT_ALGO
// names them.
const char* algorithm_name(AllReduceAlgorithm algorithm);

}  // namespace zrt
