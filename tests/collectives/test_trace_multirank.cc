// The flight recorder on real ranks: a 3-rank job where rank 2 never calls the third collective.
// After the timeout each survivor has written its file (ZRT_TRACE_DIR), rank 2 writes its own on
// SIGUSR1 and goes on, and zrt-trace's merge names rank 2 as behind and the call ranks 0 and 1
// wait in. A rank that gets SIGTERM writes its file and then dies of the signal.
#include <gtest/gtest.h>

#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "engine/flight_recorder.h"
#include "tests/collectives/rig.h"
#include "tests/harness/multirank.h"
#include "tests/harness/status_assert.h"
#include "tools/zrt-trace/trace_merge.h"

namespace zrt::testing {
namespace {

std::string make_dir() {
  char dir[] = "/tmp/zrt-trace-mr-XXXXXX";
  if (mkdtemp(dir) == nullptr) return "";
  return dir;
}

bool wait_for(const std::string& path, int seconds) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
  while (!std::filesystem::exists(path)) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return true;
}

CollectiveArgs all_reduce(std::vector<float>& buffer, size_t count) {
  CollectiveArgs args;
  args.kind = ZRT_COLL_ALL_REDUCE;
  args.count = count;
  args.sendbuf = buffer.data();
  args.recvbuf = buffer.data();
  return args;
}

std::vector<tools::RankTrace> read_traces(const std::string& dir) {
  std::vector<tools::RankTrace> traces;
  for (const auto& item : std::filesystem::directory_iterator(dir)) {
    if (item.path().extension() != ".jsonl") continue;
    std::ifstream in(item.path());
    std::stringstream text;
    text << in.rdbuf();
    tools::RankTrace trace;
    EXPECT_TRUE(tools::parse_rank_trace(text.str(), item.path().string(), &trace).is_ok());
    traces.push_back(std::move(trace));
  }
  return traces;
}

TEST(FlightRecorder, StoppedRankIsNamedAfterTheTimeout) {
  const std::string dir = make_dir();
  ASSERT_FALSE(dir.empty());
  RankOptions options;
  options.env["ZRT_TRACE_DIR"] = dir;
  options.deadline_ms = 120000;
  expect_ranks_pass(
      3,
      [&dir](int rank, int size) {
        Rig rig;
        ASSERT_OK(rig.init(rank, size, "trace_stop", 3000));
        std::vector<float> buffer(2000, 1.0f);
        for (int i = 0; i < 2; ++i) ASSERT_OK(rig.run(all_reduce(buffer, 1000)));
        const std::string mine = trace_file_path(dir, rank, 0);
        if (rank == 2) {
          // Stops before the third collective; its file comes from SIGUSR1, and it goes on.
          ASSERT_EQ(raise(SIGUSR1), 0);
          ASSERT_TRUE(wait_for(mine, 20)) << mine;
          {
            std::ifstream in(mine);
            std::stringstream text;
            text << in.rdbuf();
            tools::RankTrace trace;
            ASSERT_OK(tools::parse_rank_trace(text.str(), mine, &trace));
            EXPECT_EQ(trace.reason, "SIGUSR1");
            ASSERT_EQ(trace.entries.size(), 2u);
            EXPECT_EQ(trace.entries[1].state, "done");
          }
          for (int peer = 0; peer < 2; ++peer) {
            ASSERT_TRUE(wait_for(dir + "/done." + std::to_string(peer), 60));
          }
          return;
        }
        const Status status = rig.run(all_reduce(buffer, 2000));
        EXPECT_EQ(status.code(), ZRT_TIMEOUT) << status.message();
        EXPECT_TRUE(wait_for(mine, 20)) << "no flight recorder file " << mine;
        std::ofstream(dir + "/done." + std::to_string(rank)) << "done\n";
      },
      options);

  std::vector<tools::RankTrace> traces = read_traces(dir);
  ASSERT_EQ(traces.size(), 3u);
  int timeouts = 0;
  for (const tools::RankTrace& trace : traces) {
    // The first to time out ends its communicator; a peer may then fail on that before its own
    // timeout (and rank 2's SIGUSR1 file is replaced when its communicator fails too).
    if (trace.rank != 2) {
      EXPECT_TRUE(trace.reason.find("made no progress") != std::string::npos ||
                  trace.reason.find("failed or disconnected") != std::string::npos)
          << trace.reason;
      timeouts += trace.reason.find("made no progress") != std::string::npos ? 1 : 0;
    }
  }
  EXPECT_GE(timeouts, 1);
  tools::MergeReport report;
  ASSERT_TRUE(tools::merge_traces(traces, &report).is_ok());
  std::printf("%s", report.text.c_str());
  EXPECT_NE(report.text.find("verdict: rank 2 is behind on stream 0: ranks 0, 1 waiting in "
                             "collective #2 all_reduce(2000 x f32, sum)"),
            std::string::npos)
      << report.text;
  std::filesystem::remove_all(dir);
}

TEST(FlightRecorder, SigtermWritesTheFileThenEndsTheRank) {
  const std::string dir = make_dir();
  ASSERT_FALSE(dir.empty());
  RankOptions options;
  options.env["ZRT_TRACE_DIR"] = dir;
  options.deadline_ms = 60000;
  const std::vector<RankOutcome> outcomes = run_ranks(
      2,
      [](int rank, int size) {
        Rig rig;
        if (!rig.init(rank, size, "trace_term", 5000).is_ok()) _exit(3);
        std::vector<float> buffer(1000, 1.0f);
        if (!rig.run(all_reduce(buffer, 1000)).is_ok()) _exit(4);
        if (rank == 1) {
          raise(SIGTERM);
          std::this_thread::sleep_for(std::chrono::seconds(20));  // the dumper ends the rank
          _exit(5);
        }
      },
      options);
  ASSERT_EQ(outcomes.size(), 2u);
  EXPECT_EQ(outcomes[1].signal, SIGTERM) << outcomes[1].describe();
  // Rank 0's communicator fails when rank 1 dies, and writes its own file too.
  bool found = false;
  for (const tools::RankTrace& trace : read_traces(dir)) {
    if (trace.rank != 1) continue;
    found = true;
    EXPECT_EQ(trace.reason, "SIGTERM");
    ASSERT_FALSE(trace.entries.empty());
    EXPECT_EQ(trace.entries.back().state, "done");
  }
  EXPECT_TRUE(found) << "rank 1 wrote no file on SIGTERM";
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace zrt::testing
