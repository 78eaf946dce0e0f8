// A multi-rank test harness: runs a test body on N real ranks (forked processes), each with the
// environment a launcher would set (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR,
// MASTER_PORT on a free loopback port, ZRT_JOB_TOKEN, and ZRT_TEST_RUN_DIR: an empty scratch
// folder shared by the ranks of one run, removed afterwards), and collects every rank's outcome.
// A rank passes when its body returns with no GoogleTest failure; GoogleTest prints the
// failures of each rank from that rank's process. A rank whose body skips (GTEST_SKIP) and did
// not fail exits with kRankSkippedExit and leaves its reason to the parent, which reports the
// test as skipped: a skip inside a rank is never a pass.
//
// Fork before creating any zrt object in the parent: the children must not inherit UCX state.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

namespace zrt::testing {

// The exit code of a rank that skipped: the one Meson and automake read as "skipped".
inline constexpr int kRankSkippedExit = 77;

struct RankOutcome {
  int rank = 0;
  int exit_code = -1;  // -1 when killed by a signal or by the harness
  int signal = 0;
  bool timed_out = false;  // still running at the deadline (then killed)
  std::string skip_reason;  // what the rank's GTEST_SKIP said, when it skipped
  bool passed() const { return exit_code == 0 && signal == 0 && !timed_out; }
  bool skipped() const { return exit_code == kRankSkippedExit && signal == 0 && !timed_out; }
  std::string describe() const;
};

struct RankOptions {
  // The harness kills ranks still running after this (times ZRT_TEST_DEADLINE_SCALE, which
  // the sanitizer runs set).
  int64_t deadline_ms = 120000;
  std::map<std::string, std::string> env;  // extra variables for every rank (e.g. ZRT_TIMEOUT)
};

// Runs body(rank, size) in `size` forked processes and returns their outcomes by rank.
std::vector<RankOutcome> run_ranks(int size, const std::function<void(int rank, int size)>& body,
                                   const RankOptions& options = {});

// run_ranks, then a GoogleTest failure naming every rank that did not pass; when no rank failed
// and one skipped, the calling test is skipped with that rank's reason (the test body goes on
// after this returns, as after any helper that skips).
void expect_ranks_pass(int size, const std::function<void(int rank, int size)>& body,
                       const RankOptions& options = {});

}  // namespace zrt::testing
