#include "tools/zrt-trace/trace_merge.h"

#include <algorithm>
#include <set>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace zrt::tools {
namespace {

template <typename T>
T field(const nlohmann::json& object, const char* key, T fallback) {
  auto found = object.find(key);
  if (found == object.end() || found->is_null()) return fallback;
  return found->get<T>();
}

std::string join(const std::vector<int>& ranks) {
  std::string text;
  for (size_t i = 0; i < ranks.size(); ++i) text += (i == 0 ? "" : ", ") + std::to_string(ranks[i]);
  return text;
}

std::string ranks_word(const std::vector<int>& ranks) {
  return (ranks.size() == 1 ? "rank " : "ranks ") + join(ranks);
}

// The collectives of one rank on one stream, by sequence number: posted ones that did not start
// follow the last started one in posting order.
std::map<int64_t, const TraceEntry*> by_sequence(const RankTrace& trace, int stream) {
  std::map<int64_t, const TraceEntry*> result;
  int64_t next = -1;
  for (const TraceEntry& entry : trace.entries) {
    if (entry.partition || entry.stream != stream || entry.peer >= 0) continue;
    if (entry.seq >= 0) {
      next = entry.seq + 1;
      result[entry.seq] = &entry;
    } else if (next >= 0) {
      result[next++] = &entry;
    }
  }
  return result;
}

bool same_call(const TraceEntry& a, const TraceEntry& b) {
  return a.kind == b.kind && a.count == b.count && a.dtype == b.dtype && a.op == b.op &&
         a.root == b.root;
}

}  // namespace

std::string describe_entry(const TraceEntry& entry) {
  if (entry.partition) {
    return entry.unit >= 0 ? fmt::format("partition {}(unit {})", entry.call, entry.unit)
                           : fmt::format("partition {}()", entry.call);
  }
  if (entry.kind == "barrier") return "barrier";
  std::string text = fmt::format("{}(", entry.kind);
  if (!entry.purpose.empty()) {
    text += fmt::format("{} {}, ", entry.purpose, entry.purpose_id);
  }
  text += fmt::format("{} x {}", entry.count, entry.dtype.empty() ? "?" : entry.dtype);
  if (!entry.op.empty()) text += ", " + entry.op;
  if (entry.root >= 0) text += fmt::format(", root {}", entry.root);
  if (entry.peer >= 0) text += fmt::format(", peer {}", entry.peer);
  return text + ")";
}

Status parse_rank_trace(const std::string& text, const std::string& origin, RankTrace* trace) {
  std::istringstream lines(text);
  std::string line;
  int number = 0;
  bool header = false;
  RankTrace parsed;
  parsed.origin = origin;
  while (std::getline(lines, line)) {
    ++number;
    if (line.empty()) continue;
    nlohmann::json object;
    try {
      object = nlohmann::json::parse(line);
    } catch (const nlohmann::json::exception& error) {
      return Status::invalid_argument("{}:{}: not JSON ({})", origin, number, error.what());
    }
    if (!object.is_object())
      return Status::invalid_argument("{}:{}: not an object", origin, number);
    try {
      if (!header) {
        if (field<int>(object, "zrt_trace", 0) != 1) {
          return Status::invalid_argument(
              "{}:{}: not a zrt flight-recorder file (no \"zrt_trace\":1 header)", origin, number);
        }
        parsed.rank = field<int>(object, "rank", 0);
        parsed.size = field<int>(object, "size", 1);
        parsed.instance = field<int>(object, "instance", 0);
        parsed.host = field<std::string>(object, "host", "");
        parsed.pid = field<int64_t>(object, "pid", 0);
        parsed.reason = field<std::string>(object, "reason", "");
        parsed.steady_ns = field<int64_t>(object, "steady_ns", 0);
        header = true;
        continue;
      }
      TraceEntry entry;
      entry.id = field<uint64_t>(object, "id", 0);
      entry.partition = field<std::string>(object, "what", "") == "partition";
      entry.call = field<std::string>(object, "call", "");
      entry.unit = field<int>(object, "unit", -1);
      entry.kind = field<std::string>(object, "kind", "");
      entry.stream = field<int>(object, "stream", -1);
      entry.seq = field<int64_t>(object, "seq", -1);
      entry.count = field<uint64_t>(object, "count", 0);
      entry.dtype = field<std::string>(object, "dtype", "");
      entry.op = field<std::string>(object, "op", "");
      entry.root = field<int>(object, "root", -1);
      entry.peer = field<int>(object, "peer", -1);
      entry.purpose = field<std::string>(object, "purpose", "");
      entry.purpose_id = field<int>(object, "purpose_id", -1);
      entry.state = field<std::string>(object, "state", "");
      entry.posted_ns = field<int64_t>(object, "posted_ns", 0);
      entry.started_ns = field<int64_t>(object, "started_ns", 0);
      entry.done_ns = field<int64_t>(object, "done_ns", 0);
      parsed.entries.push_back(std::move(entry));
    } catch (const nlohmann::json::exception& error) {
      return Status::invalid_argument("{}:{}: {}", origin, number, error.what());
    }
  }
  if (!header) return Status::invalid_argument("{}: empty (no header line)", origin);
  *trace = std::move(parsed);
  return Status::ok();
}

Status merge_traces(const std::vector<RankTrace>& traces, MergeReport* report) {
  if (traces.empty()) return Status::invalid_argument("no flight-recorder files to merge");
  MergeReport result;
  result.size = traces[0].size;
  result.instance = traces[0].instance;
  std::map<int, const RankTrace*> ranks;
  for (const RankTrace& trace : traces) {
    if (trace.size != result.size || trace.instance != result.instance) {
      return Status::invalid_argument(
          "{} is of another communicator (size {}, instance {}) than {} (size {}, instance {})",
          trace.origin, trace.size, trace.instance, traces[0].origin, result.size, result.instance);
    }
    ranks[trace.rank] = &trace;
  }
  std::vector<int> missing;
  for (int rank = 0; rank < result.size; ++rank) {
    if (ranks.count(rank) == 0) missing.push_back(rank);
  }
  std::string& out = result.text;
  out += fmt::format("communicator c{} of {} ranks: {} file(s)", result.instance, result.size,
                     ranks.size());
  if (!missing.empty()) out += fmt::format("; no file from {}", ranks_word(missing));
  out += "\n";
  for (const auto& [rank, trace] : ranks) {
    out += fmt::format("  rank {} ({} pid {}): {}\n", rank, trace->host, trace->pid,
                       trace->reason.empty() ? "-" : trace->reason);
  }

  std::set<int> streams;
  for (const auto& [rank, trace] : ranks) {
    for (const TraceEntry& entry : trace->entries) {
      if (!entry.partition && entry.peer < 0) streams.insert(entry.stream);
    }
  }
  for (const int stream : streams) {
    std::map<int, std::map<int64_t, const TraceEntry*>> calls;
    for (const auto& [rank, trace] : ranks) calls[rank] = by_sequence(*trace, stream);
    // The earliest collective some rank is waiting in (started or posted, not finished).
    int64_t stuck = -1;
    for (const auto& [rank, sequence] : calls) {
      for (const auto& [seq, entry] : sequence) {
        if (entry->state == "done") continue;
        if (stuck < 0 || seq < stuck) stuck = seq;
        break;
      }
    }
    Divergence divergence;
    divergence.stream = stream;
    divergence.missing = missing;
    // Calls that differ at the same position, up to the stuck one.
    std::set<int64_t> positions;
    for (const auto& [rank, sequence] : calls) {
      for (const auto& [seq, entry] : sequence) positions.insert(seq);
    }
    for (const int64_t seq : positions) {
      if (stuck >= 0 && seq > stuck) break;
      const TraceEntry* first = nullptr;
      int first_rank = -1;
      for (const auto& [rank, sequence] : calls) {
        auto found = sequence.find(seq);
        if (found == sequence.end()) continue;
        if (first == nullptr) {
          first = found->second;
          first_rank = rank;
        } else if (!same_call(*first, *found->second)) {
          divergence.mismatches.push_back(fmt::format(
              "collective #{} of stream {}: rank {} called {} where rank {} called {}", seq, stream,
              first_rank, describe_entry(*first), rank, describe_entry(*found->second)));
        }
      }
    }
    if (stuck < 0 && divergence.mismatches.empty()) {
      int64_t last = -1;
      for (const auto& [rank, sequence] : calls) {
        if (!sequence.empty()) last = std::max(last, sequence.rbegin()->first);
      }
      out +=
          fmt::format("stream {}: every rank finished its collectives (last #{})\n", stream, last);
      continue;
    }
    if (stuck >= 0) {
      divergence.seq = stuck;
      for (const auto& [rank, sequence] : calls) {
        auto found = sequence.find(stuck);
        if (found == sequence.end()) {
          divergence.behind.push_back(rank);
          divergence.last_of_behind[rank] =
              sequence.empty() ? ""
                               : fmt::format("#{} {} ({})", sequence.rbegin()->first,
                                             describe_entry(*sequence.rbegin()->second),
                                             sequence.rbegin()->second->state);
          std::string partition;
          for (const TraceEntry& entry : ranks[rank]->entries) {
            if (entry.partition) {
              partition = fmt::format("{} ({})", describe_entry(entry), entry.state);
            }
          }
          divergence.last_partition[rank] = partition;
        } else if (found->second->state != "done") {
          divergence.waiting.push_back(rank);
          if (divergence.call.empty()) divergence.call = describe_entry(*found->second);
        }
      }
      out += fmt::format("stream {}: collective #{} {}\n", stream, stuck, divergence.call);
      for (const int rank : divergence.waiting) {
        const TraceEntry& entry = *calls[rank][stuck];
        const RankTrace& trace = *ranks[rank];
        const int64_t since = entry.started_ns > 0 ? entry.started_ns : entry.posted_ns;
        out += fmt::format("  rank {}: waiting in it ({}, {:.1f} s before its dump)\n", rank,
                           entry.state, static_cast<double>(trace.steady_ns - since) / 1e9);
      }
      for (const int rank : divergence.behind) {
        const std::string& last = divergence.last_of_behind[rank];
        out += fmt::format("  rank {}: BEHIND, never called it; last collective on stream {}: {}",
                           rank, stream, last.empty() ? "none recorded" : last);
        if (!divergence.last_partition[rank].empty()) {
          out += "; last partition call: " + divergence.last_partition[rank];
        }
        out += "\n";
      }
      for (const int rank : missing) {
        out += fmt::format("  rank {}: no file (stopped or killed before it could write one?)\n",
                           rank);
      }
    }
    for (const std::string& mismatch : divergence.mismatches) {
      out += "  MISMATCH: " + mismatch + "\n";
    }
    if (!divergence.behind.empty()) {
      out +=
          fmt::format("verdict: {} {} behind on stream {}: {} waiting in collective #{} {}\n",
                      ranks_word(divergence.behind), divergence.behind.size() == 1 ? "is" : "are",
                      stream, ranks_word(divergence.waiting), stuck, divergence.call);
    } else if (!missing.empty() && stuck >= 0) {
      out += fmt::format(
          "verdict: {} waiting in collective #{} {} on stream {}; {} wrote no file (the likely "
          "culprit: stopped or dead)\n",
          ranks_word(divergence.waiting), stuck, divergence.call, stream, ranks_word(missing));
    }
    result.divergences.push_back(std::move(divergence));
  }
  *report = std::move(result);
  return Status::ok();
}

}  // namespace zrt::tools
