#include "tests/harness/multirank.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <thread>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "lib/bootstrap/socket_util.h"

namespace zrt::testing {

std::string RankOutcome::describe() const {
  if (timed_out) return fmt::format("rank {} still running at the deadline (killed)", rank);
  if (signal != 0)
    return fmt::format("rank {} killed by signal {} ({})", rank, signal, strsignal(signal));
  if (skipped()) return fmt::format("rank {} skipped: {}", rank, skip_reason);
  return fmt::format("rank {} exited with code {}", rank, exit_code);
}

namespace {

std::string skip_file(const std::string& run_dir, int rank) {
  return fmt::format("{}/rank-{}-skipped", run_dir, rank);
}

// The reasons of the current test's skips, for the parent to report (a forked rank's own
// GoogleTest never prints them: the rank leaves with _exit).
std::string current_skip_reason() {
  const ::testing::TestInfo* test = ::testing::UnitTest::GetInstance()->current_test_info();
  if (test == nullptr) return "";
  std::string reason;
  const ::testing::TestResult* result = test->result();
  for (int i = 0; i < result->total_part_count(); ++i) {
    const ::testing::TestPartResult& part = result->GetTestPartResult(i);
    if (!part.skipped()) continue;
    if (!reason.empty()) reason += "; ";
    reason += part.message();
  }
  return reason.empty() ? "(no reason given)" : reason;
}

// Leaves a forked rank: 0 when it passed, kRankSkippedExit with its reason written for the
// parent when it skipped without failing, 1 when it failed.
[[noreturn]] void exit_rank(const std::string& run_dir, int rank) {
  int code = 0;
  if (::testing::Test::HasFailure()) {
    code = 1;
  } else if (::testing::Test::IsSkipped()) {
    code = kRankSkippedExit;
    FILE* file = run_dir.empty() ? nullptr : std::fopen(skip_file(run_dir, rank).c_str(), "w");
    if (file != nullptr) {
      std::fputs(current_skip_reason().c_str(), file);
      std::fclose(file);
    }
  }
  std::fflush(stdout);
  std::fflush(stderr);
  _exit(code);
}

std::string read_skip_reason(const std::string& run_dir, int rank) {
  std::string reason;
  if (FILE* file = std::fopen(skip_file(run_dir, rank).c_str(), "r")) {
    char buffer[512];
    size_t got = 0;
    while ((got = std::fread(buffer, 1, sizeof(buffer), file)) > 0) reason.append(buffer, got);
    std::fclose(file);
  }
  return reason.empty() ? "(its reason was not left)" : reason;
}

// Sanitizer builds run several times slower than the release build the deadlines are sized
// for; scripts/sanitize.sh stretches them as it stretches meson's timeouts.
int64_t deadline_scale() {
  const char* text = std::getenv("ZRT_TEST_DEADLINE_SCALE");
  if (text == nullptr) return 1;
  const long scale = std::strtol(text, nullptr, 10);
  return scale >= 1 && scale <= 100 ? scale : 1;
}

}  // namespace

std::vector<RankOutcome> run_ranks(int size, const std::function<void(int, int)>& body,
                                   const RankOptions& options) {
  std::fflush(stdout);
  std::fflush(stderr);
  // Rank 0's store binds this port after the fork (pick_free_port says why it is not bind(0)'s).
  int port = 0;
  const Status picked = pick_free_port(&port);
  if (!picked.is_ok()) {
    ADD_FAILURE() << picked.message();
    std::vector<RankOutcome> unstarted(size);
    for (int rank = 0; rank < size; ++rank) {
      unstarted[rank].rank = rank;
      unstarted[rank].exit_code = 1;
    }
    return unstarted;
  }
  const std::string token = fmt::format("test-token-{}-{}", getpid(), port);
  // A scratch folder per run, for tests that exchange files (e.g. an out-of-band all-gather).
  char run_dir_template[] = "/tmp/zrt-test-XXXXXX";
  const char* run_dir = mkdtemp(run_dir_template);
  const std::string run_dir_path = run_dir != nullptr ? run_dir : "";
  std::vector<pid_t> pids(size, -1);
  std::vector<RankOutcome> outcomes(size);
  for (int rank = 0; rank < size; ++rank) {
    outcomes[rank].rank = rank;
    pid_t pid = fork();
    if (pid == 0) {
      setenv("RANK", std::to_string(rank).c_str(), 1);
      setenv("WORLD_SIZE", std::to_string(size).c_str(), 1);
      setenv("LOCAL_RANK", std::to_string(rank).c_str(), 1);
      setenv("LOCAL_WORLD_SIZE", std::to_string(size).c_str(), 1);
      setenv("MASTER_ADDR", "127.0.0.1", 1);
      setenv("MASTER_PORT", std::to_string(port).c_str(), 1);
      setenv("ZRT_JOB_TOKEN", token.c_str(), 1);
      setenv("ZRT_TEST_RUN_DIR", run_dir_path.c_str(), 1);
      for (const auto& [name, value] : options.env) setenv(name.c_str(), value.c_str(), 1);
      body(rank, size);
      exit_rank(run_dir_path, rank);
    }
    pids[rank] = pid;
  }

  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::milliseconds(options.deadline_ms * deadline_scale());
  int remaining = 0;
  for (pid_t pid : pids) remaining += pid > 0 ? 1 : 0;
  std::vector<bool> reaped(size, false);
  while (remaining > 0) {
    bool progressed = false;
    for (int rank = 0; rank < size; ++rank) {
      if (reaped[rank] || pids[rank] <= 0) continue;
      int status = 0;
      pid_t done = waitpid(pids[rank], &status, WNOHANG);
      if (done == pids[rank]) {
        reaped[rank] = true;
        --remaining;
        progressed = true;
        if (WIFEXITED(status)) outcomes[rank].exit_code = WEXITSTATUS(status);
        if (WIFSIGNALED(status)) outcomes[rank].signal = WTERMSIG(status);
      }
    }
    if (remaining == 0) break;
    if (std::chrono::steady_clock::now() > deadline) {
      for (int rank = 0; rank < size; ++rank) {
        if (reaped[rank] || pids[rank] <= 0) continue;
        kill(pids[rank], SIGKILL);
        waitpid(pids[rank], nullptr, 0);
        outcomes[rank].timed_out = true;
      }
      break;
    }
    if (!progressed) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  for (int rank = 0; rank < size; ++rank) {
    if (pids[rank] <= 0) outcomes[rank].exit_code = -1;
    if (outcomes[rank].skipped()) {
      outcomes[rank].skip_reason = read_skip_reason(run_dir_path, rank);
    }
  }
  if (!run_dir_path.empty()) std::filesystem::remove_all(run_dir_path);
  return outcomes;
}

void expect_ranks_pass(int size, const std::function<void(int, int)>& body,
                       const RankOptions& options) {
  std::vector<RankOutcome> outcomes = run_ranks(size, body, options);
  const RankOutcome* skipped = nullptr;
  bool failed = false;
  for (const RankOutcome& outcome : outcomes) {
    if (outcome.skipped()) {
      if (skipped == nullptr) skipped = &outcome;
      continue;
    }
    failed = failed || !outcome.passed();
    EXPECT_TRUE(outcome.passed()) << outcome.describe() << " (of " << size << " ranks)";
  }
  if (skipped != nullptr && !failed) GTEST_SKIP() << skipped->describe();
}

}  // namespace zrt::testing
