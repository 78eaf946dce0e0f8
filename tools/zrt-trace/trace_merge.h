// zrt-trace's logic: reads the flight-recorder files of a job (engine/flight_recorder.h,
// one JSON-lines file per rank and communicator) and names where the ranks diverged: per
// stream, the collective some rank waits in, the ranks that never called it (behind), and calls
// that differ at the same position (a mismatch).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "lib/core/status.h"

namespace zrt::tools {

struct TraceEntry {
  uint64_t id = 0;
  bool partition = false;
  std::string call;  // partition calls
  int unit = -1;
  std::string kind;  // collectives
  int stream = -1;
  int64_t seq = -1;  // -1: posted, not started (the merge infers it)
  uint64_t count = 0;
  std::string dtype;
  std::string op;
  int root = -1;
  int peer = -1;
  std::string purpose;
  int purpose_id = -1;
  std::string state;
  int64_t posted_ns = 0;
  int64_t started_ns = 0;
  int64_t done_ns = 0;
};

struct RankTrace {
  std::string origin;  // the file
  int rank = 0;
  int size = 1;
  int instance = 0;
  std::string host;
  int64_t pid = 0;
  std::string reason;
  int64_t steady_ns = 0;  // when the file was written
  std::vector<TraceEntry> entries;
};

// Parses one file; errors name the file and line.
Status parse_rank_trace(const std::string& text, const std::string& origin, RankTrace* trace);
// "all_reduce(1000 x f32, sum)", "broadcast(16 x i32, root 1)", "partition grad_ready(unit 3)".
std::string describe_entry(const TraceEntry& entry);

struct Divergence {
  int stream = 0;
  int64_t seq = 0;                            // the collective the waiting ranks are in
  std::string call;                           // its description (from a waiting rank)
  std::vector<int> waiting;                   // ranks that started it and did not finish
  std::vector<int> behind;                    // ranks that never posted it
  std::vector<int> missing;                   // ranks without a file
  std::map<int, std::string> last_of_behind;  // their last call on the stream, or ""
  std::map<int, std::string> last_partition;  // their last partition call, or ""
  std::vector<std::string> mismatches;        // "rank 0 called X where rank 1 called Y"
};

struct MergeReport {
  int size = 0;
  int instance = 0;
  std::vector<Divergence> divergences;
  std::string text;  // the whole report, as zrt-trace prints it
};

// Merges the files of one communicator (equal instance and size). Errors: no files, or files
// of different communicators.
Status merge_traces(const std::vector<RankTrace>& traces, MergeReport* report);

}  // namespace zrt::tools
