// The flight recorder's ring (engine/flight_recorder.h) and zrt-trace's merge
// (tools/zrt-trace/trace_merge.h): wrap-around keeps the newest K in order, a written file
// parses back, and the merge names the rank that is behind and the call its peers wait in.
#include <gtest/gtest.h>

#include <unistd.h>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "engine/flight_recorder.h"
#include "tools/zrt-trace/trace_merge.h"

namespace zrt::tools {
namespace {

TraceCall all_reduce(size_t count) {
  TraceCall call;
  call.kind = ZRT_COLL_ALL_REDUCE;
  call.count = count;
  call.dtype = ZRT_F32;
  call.op = ZRT_SUM;
  call.stream = 0;
  return call;
}

TEST(FlightRecorder, KeepsTheNewestDepthRecordsInOrder) {
  FlightRecorder recorder(4);
  std::vector<uint64_t> tickets;
  for (size_t i = 0; i < 6; ++i) tickets.push_back(recorder.post(all_reduce(100 + i)));
  recorder.started(tickets[0], 0);  // overwritten: ignored
  recorder.started(tickets[4], 4);
  recorder.finished(tickets[4], true);
  recorder.started(tickets[5], 5);
  TraceRecord records[8];
  ASSERT_EQ(recorder.snapshot(records, 8), 4u);
  EXPECT_EQ(recorder.recorded(), 6u);
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(records[i].id, i + 3);
    EXPECT_EQ(records[i].call.count, 102 + i);
  }
  EXPECT_EQ(records[0].state, TraceState::kPosted);
  EXPECT_EQ(records[2].state, TraceState::kDone);
  EXPECT_EQ(records[2].sequence, 4u);
  EXPECT_EQ(records[3].state, TraceState::kStarted);
  EXPECT_GE(records[3].started_ns, records[3].posted_ns);
}

// Every depth keeps exactly its newest records (the ring's slot is a multiply, not a division:
// each of depth's slots must take its turn).
TEST(FlightRecorder, EveryDepthKeepsItsNewestRecords) {
  for (size_t depth : {1, 2, 3, 5, 7, 12, 100, 257}) {
    FlightRecorder recorder(depth);
    const size_t posted = 3 * depth + 2;
    for (size_t i = 0; i < posted; ++i) (void)recorder.post(all_reduce(i));
    std::vector<TraceRecord> records(depth + 1);
    ASSERT_EQ(recorder.snapshot(records.data(), records.size()), depth) << "depth " << depth;
    for (size_t i = 0; i < depth; ++i) {
      EXPECT_EQ(records[i].id, posted - depth + i + 1) << "depth " << depth;
      EXPECT_EQ(records[i].call.count, posted - depth + i) << "depth " << depth;
    }
  }
}

TEST(FlightRecorder, OffRecordsNothing) {
  FlightRecorder recorder(0);
  EXPECT_EQ(recorder.post(all_reduce(1)), 0u);
  TraceRecord record;
  EXPECT_EQ(recorder.snapshot(&record, 1), 0u);
}

// A rank's file: `done` collectives done, then one started (or none when `started` is false).
std::string rank_file(int rank, int size, int done, bool started) {
  FlightRecorder recorder(16);
  for (int i = 0; i < done; ++i) {
    const uint64_t ticket = recorder.post(all_reduce(1000));
    recorder.started(ticket, static_cast<uint32_t>(i));
    recorder.finished(ticket, true);
  }
  TraceCall step;
  step.partition = true;
  step.call = "grad_ready";
  step.purpose_id = 3;
  const uint64_t partition = recorder.post(step);
  recorder.started(partition, 0);
  recorder.finished(partition, true);
  if (started) recorder.started(recorder.post(all_reduce(2000)), static_cast<uint32_t>(done));
  char dir[] = "/tmp/zrt-trace-test-XXXXXX";
  EXPECT_NE(mkdtemp(dir), nullptr);
  TraceHeader header;
  header.rank = rank;
  header.size = size;
  header.reason = started ? "timeout" : "SIGUSR1";
  const std::string path = trace_file_path(dir, rank, 0);
  EXPECT_TRUE(write_trace_file(recorder, header, path).is_ok());
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  std::remove(path.c_str());
  rmdir(dir);
  return text.str();
}

TEST(TraceMerge, NamesTheRankBehindAndTheCallItsPeersWaitIn) {
  std::vector<RankTrace> traces(3);
  for (int rank = 0; rank < 3; ++rank) {
    const std::string text = rank_file(rank, 3, 2, rank != 2);
    ASSERT_TRUE(parse_rank_trace(text, "r" + std::to_string(rank), &traces[rank]).is_ok());
  }
  EXPECT_EQ(traces[0].entries.size(), 4u);
  EXPECT_EQ(traces[0].reason, "timeout");
  MergeReport report;
  ASSERT_TRUE(merge_traces(traces, &report).is_ok());
  ASSERT_EQ(report.divergences.size(), 1u);
  const Divergence& divergence = report.divergences[0];
  EXPECT_EQ(divergence.seq, 2);
  EXPECT_EQ(divergence.behind, std::vector<int>{2});
  EXPECT_EQ(divergence.waiting, (std::vector<int>{0, 1}));
  EXPECT_EQ(divergence.call, "all_reduce(2000 x f32, sum)");
  EXPECT_NE(report.text.find("verdict: rank 2 is behind on stream 0: ranks 0, 1 waiting in "
                             "collective #2 all_reduce(2000 x f32, sum)"),
            std::string::npos)
      << report.text;
  EXPECT_NE(report.text.find("last partition call: partition grad_ready(unit 3) (done)"),
            std::string::npos)
      << report.text;
}

TEST(TraceMerge, NamesMismatchedCallsAndMissingFiles) {
  std::vector<RankTrace> traces(2);
  ASSERT_TRUE(parse_rank_trace(rank_file(0, 3, 1, true), "r0", &traces[0]).is_ok());
  std::string other = rank_file(1, 3, 1, true);
  // Rank 1 called 3000 elements where rank 0 called 2000.
  const size_t at = other.rfind("\"count\":2000");
  ASSERT_NE(at, std::string::npos);
  other.replace(at, 12, "\"count\":3000");
  ASSERT_TRUE(parse_rank_trace(other, "r1", &traces[1]).is_ok());
  MergeReport report;
  ASSERT_TRUE(merge_traces(traces, &report).is_ok());
  EXPECT_NE(report.text.find("no file from rank 2"), std::string::npos) << report.text;
  EXPECT_NE(report.text.find("MISMATCH: collective #1 of stream 0: rank 0 called all_reduce(2000 "
                             "x f32, sum) where rank 1 called all_reduce(3000 x f32, sum)"),
            std::string::npos)
      << report.text;
}

TEST(TraceMerge, RefusesBadInput) {
  RankTrace trace;
  EXPECT_EQ(parse_rank_trace("", "empty", &trace).code(), ZRT_INVALID_ARGUMENT);
  EXPECT_EQ(parse_rank_trace("{\"x\":1}\n", "f", &trace).code(), ZRT_INVALID_ARGUMENT);
  const Status bad = parse_rank_trace("{\"zrt_trace\":1}\nnot json\n", "f", &trace);
  EXPECT_EQ(bad.code(), ZRT_INVALID_ARGUMENT);
  EXPECT_NE(bad.message().find("f:2:"), std::string::npos) << bad.message();
  MergeReport report;
  EXPECT_EQ(merge_traces({}, &report).code(), ZRT_INVALID_ARGUMENT);
}

}  // namespace
}  // namespace zrt::tools
