// zrt-run end to end: it launches real ranks of zrt_run_helper and is judged by its exit status
// and its stdout / stderr, captured separately.
#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "tests/harness/wait_until.h"

namespace {

struct RunResult {
  int exit_code = -1;
  std::string out;
  std::string err;
  std::chrono::milliseconds elapsed{0};
};

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

std::string path_from_env(const char* name) {
  const char* value = std::getenv(name);
  return value != nullptr ? value : "";
}

// Runs zrt-run with `args` (the helper's path is appended before helper_args), bounded by
// zrt-run's own --timeout so that a broken launcher cannot hang the test.
// signal_when not empty: send SIGTERM to zrt-run once its stdout holds every one of these
// strings (the ranks say they are running).
RunResult run_launcher(const std::vector<std::string>& args,
                       const std::vector<std::string>& helper_args,
                       const std::vector<std::string>& signal_when = {}) {
  char dir_template[] = "/tmp/zrt-run-test-XXXXXX";
  const std::string dir = mkdtemp(dir_template);
  std::vector<std::string> argv = {path_from_env("ZRT_RUN_EXE"), "--timeout", "20"};
  argv.insert(argv.end(), args.begin(), args.end());
  argv.push_back(path_from_env("ZRT_RUN_HELPER"));
  argv.insert(argv.end(), helper_args.begin(), helper_args.end());
  const auto start = std::chrono::steady_clock::now();
  const pid_t pid = fork();
  if (pid == 0) {
    const int out = open((dir + "/out").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    const int err = open((dir + "/err").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    dup2(out, STDOUT_FILENO);
    dup2(err, STDERR_FILENO);
    std::vector<char*> raw;
    for (std::string& arg : argv) raw.push_back(arg.data());
    raw.push_back(nullptr);
    execv(raw[0], raw.data());
    _exit(127);
  }
  RunResult result;
  int status = 0;
  if (!signal_when.empty()) {
    // Within zrt-run's own 20 s --timeout, which would end the run first.
    EXPECT_TRUE(zrt::testing::wait_until(
        [&] {
          const std::string out = read_file(dir + "/out");
          return std::all_of(signal_when.begin(), signal_when.end(), [&](const std::string& part) {
            return out.find(part) != std::string::npos;
          });
        },
        std::chrono::seconds(15), "the ranks reporting that they run"));
    kill(pid, SIGTERM);
  }
  waitpid(pid, &status, 0);
  result.elapsed = std::chrono::duration_cast<std::chrono::milliseconds>(
      std::chrono::steady_clock::now() - start);
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  result.out = read_file(dir + "/out");
  result.err = read_file(dir + "/err");
  std::filesystem::remove_all(dir);
  return result;
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

class ZrtRun : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(std::filesystem::exists(path_from_env("ZRT_RUN_EXE"))) << "set ZRT_RUN_EXE";
    ASSERT_TRUE(std::filesystem::exists(path_from_env("ZRT_RUN_HELPER"))) << "set ZRT_RUN_HELPER";
  }
};

TEST_F(ZrtRun, EnvironmentAndPrefixedStreams) {
  setenv("ZRT_RANK", "99", 1);  // would outrank RANK: the launcher must clear it
  RunResult result = run_launcher({"-n", "3"}, {"env"});
  unsetenv("ZRT_RANK");
  ASSERT_EQ(result.exit_code, 0) << result.err;
  for (int rank = 0; rank < 3; ++rank) {
    const std::string prefix = "[" + std::to_string(rank) + "] ";
    EXPECT_TRUE(contains(result.out, prefix + "RANK=" + std::to_string(rank) +
                                         " WORLD_SIZE=3 LOCAL_RANK=" + std::to_string(rank) +
                                         " LOCAL_WORLD_SIZE=3 MASTER_ADDR=127.0.0.1\n"))
        << result.out;
    EXPECT_TRUE(contains(result.out, prefix + "MASTER_PORT=")) << result.out;
    EXPECT_TRUE(contains(result.out, "ZRT_STORE_EXTERNAL=1 TOKEN_LENGTH=32 ZRT_RANK=unset"))
        << result.out;
    EXPECT_TRUE(contains(result.out, prefix + "no newline at the end\n")) << result.out;
    EXPECT_TRUE(contains(result.err, prefix + "to stderr\n")) << result.err;
    EXPECT_FALSE(contains(result.out, prefix + "to stderr")) << "stderr leaked into stdout";
  }
}

TEST_F(ZrtRun, NoPrefixAndTagOutput) {
  RunResult plain = run_launcher({"-n", "2", "--no-prefix"}, {"env"});
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  EXPECT_TRUE(contains(plain.out, "\nRANK=1 ") || plain.out.rfind("RANK=1 ", 0) == 0) << plain.out;
  EXPECT_FALSE(contains(plain.out, "[0]")) << plain.out;
  RunResult tagged = run_launcher({"-n", "2", "--tag-output"}, {"env"});
  ASSERT_EQ(tagged.exit_code, 0) << tagged.err;
  EXPECT_TRUE(contains(tagged.out, "[1:stdout] RANK=1 ")) << tagged.out;
  EXPECT_TRUE(contains(tagged.err, "[0:stderr] to stderr")) << tagged.err;
}

TEST_F(ZrtRun, FailingRankIsReportedAndOthersTerminated) {
  RunResult result = run_launcher({"-n", "3", "--grace-ms", "1000"}, {"fail", "2", "3"});
  EXPECT_EQ(result.exit_code, 3) << result.err;
  EXPECT_TRUE(contains(result.err, "zrt-run: rank 2 exited with code 3")) << result.err;
  EXPECT_FALSE(contains(result.out, "survived")) << result.out;
  EXPECT_LT(result.elapsed, std::chrono::milliseconds(15000));
}

TEST_F(ZrtRun, KilledRankIsReportedBySignal) {
  RunResult result = run_launcher({"-n", "3", "--grace-ms", "1000"}, {"kill", "1"});
  EXPECT_NE(result.exit_code, 0);
  EXPECT_TRUE(contains(result.err, "zrt-run: rank 1 killed by signal 9 (Killed)")) << result.err;
  EXPECT_FALSE(contains(result.out, "survived")) << result.out;
  EXPECT_LT(result.elapsed, std::chrono::milliseconds(15000));
}

TEST_F(ZrtRun, SigtermIsForwardedToTheRanks) {
  RunResult result = run_launcher({"-n", "3", "--grace-ms", "5000"}, {"fail", "99", "0"},
                                  {"[0] waiting", "[1] waiting", "[2] waiting"});
  EXPECT_EQ(result.exit_code, 128 + SIGTERM) << result.err;
  EXPECT_TRUE(contains(result.err, "forwarding it to the ranks")) << result.err;
  EXPECT_TRUE(contains(result.out, "[2] waiting")) << result.out;
  EXPECT_FALSE(contains(result.out, "survived")) << result.out;
  EXPECT_LT(result.elapsed, std::chrono::milliseconds(4500));  // before the SIGKILL fallback
}

TEST_F(ZrtRun, RanksMeetInTheLaunchersStore) {
  RunResult result = run_launcher({"-n", "4"}, {"bootstrap"});
  ASSERT_EQ(result.exit_code, 0) << result.err;
  for (int rank = 0; rank < 4; ++rank) {
    EXPECT_TRUE(
        contains(result.out, "[" + std::to_string(rank) + "] gathered 0 10 20 30 external=1"))
        << result.out;
  }
}

TEST_F(ZrtRun, MissingProgramAndBadOptions) {
  RunResult missing = run_launcher({"-n", "2", "/nonexistent/program"}, {});
  EXPECT_NE(missing.exit_code, 0);
  EXPECT_TRUE(contains(missing.err, "cannot execute '/nonexistent/program'")) << missing.err;
  RunResult bad = run_launcher({"-n", "0"}, {"env"});
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_TRUE(contains(bad.err, "--ranks")) << bad.err;
}

// The launcher dies by SIGKILL mid-job. This test process is the ranks' subreaper, so the
// orphans become its children and their ends can be read: each must be gone within about a
// second, a zrt rank by its launcher watch (exit code 1, even while printing: no SIGPIPE), a
// rank that never touched zrt by the parent-death signal (SIGTERM).
struct OrphanEnd {
  int status = 0;
  double seconds = -1;  // after the launcher's death; -1 = still running at the limit
};

std::vector<OrphanEnd> kill_launcher_and_reap(const std::string& mode, int ranks) {
  prctl(PR_SET_CHILD_SUBREAPER, 1);
  char dir_template[] = "/tmp/zrt-orphan-XXXXXX";
  const std::string dir = mkdtemp(dir_template);
  std::vector<std::string> argv = {
      path_from_env("ZRT_RUN_EXE"),    "--timeout", "60", "-n", std::to_string(ranks),
      path_from_env("ZRT_RUN_HELPER"), mode,        dir};
  const pid_t launcher = fork();
  if (launcher == 0) {
    const int out = open((dir + "/out").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    dup2(out, STDOUT_FILENO);
    dup2(out, STDERR_FILENO);
    std::vector<char*> raw;
    for (std::string& arg : argv) raw.push_back(arg.data());
    raw.push_back(nullptr);
    execv(raw[0], raw.data());
    _exit(127);
  }
  std::vector<pid_t> pids(static_cast<size_t>(ranks), -1);
  EXPECT_TRUE(zrt::testing::wait_until(
      [&] {
        for (int rank = 0; rank < ranks; ++rank) {
          std::ifstream in(dir + "/rank" + std::to_string(rank) + ".pid");
          pid_t pid = -1;
          if (in >> pid) pids[static_cast<size_t>(rank)] = pid;
        }
        return std::all_of(pids.begin(), pids.end(), [](pid_t pid) { return pid > 0; });
      },
      std::chrono::seconds(20), "the ranks writing their pids"));
  std::this_thread::sleep_for(std::chrono::milliseconds(200));  // the ranks are printing
  kill(launcher, SIGKILL);
  const auto killed = std::chrono::steady_clock::now();
  int status = 0;
  waitpid(launcher, &status, 0);
  std::vector<OrphanEnd> ends(static_cast<size_t>(ranks));
  size_t left = 0;
  for (pid_t pid : pids) left += pid > 0 ? 1 : 0;
  while (left > 0 && std::chrono::steady_clock::now() - killed < std::chrono::seconds(5)) {
    bool reaped = false;
    for (int rank = 0; rank < ranks; ++rank) {
      OrphanEnd& end = ends[static_cast<size_t>(rank)];
      const pid_t pid = pids[static_cast<size_t>(rank)];
      if (pid <= 0 || end.seconds >= 0) continue;
      if (waitpid(pid, &end.status, WNOHANG) == pid) {
        end.seconds =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - killed).count();
        --left;
        reaped = true;
      }
    }
    if (!reaped) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  for (int rank = 0; rank < ranks; ++rank) {
    const pid_t pid = pids[static_cast<size_t>(rank)];
    if (pid > 0 && ends[static_cast<size_t>(rank)].seconds < 0) {
      kill(pid, SIGKILL);  // a failed test must not leave the orphan behind either
      waitpid(pid, nullptr, 0);
    }
  }
  std::filesystem::remove_all(dir);
  return ends;
}

TEST_F(ZrtRun, KilledLauncherEndsPrintingZrtRanks) {
  const std::vector<OrphanEnd> ends = kill_launcher_and_reap("orphan", 3);
  for (size_t rank = 0; rank < ends.size(); ++rank) {
    const OrphanEnd& end = ends[rank];
    ASSERT_GE(end.seconds, 0) << "rank " << rank << " outlived its launcher by 5 s";
    EXPECT_LT(end.seconds, 2.0) << "rank " << rank;
    EXPECT_TRUE(WIFEXITED(end.status) && WEXITSTATUS(end.status) == 1)
        << "rank " << rank << " ended with status " << end.status
        << (WIFSIGNALED(end.status) ? std::string(" signal ") + strsignal(WTERMSIG(end.status))
                                    : "");
  }
}

TEST_F(ZrtRun, KilledLauncherEndsRanksThatNeverBootstrap) {
  const std::vector<OrphanEnd> ends = kill_launcher_and_reap("plain", 2);
  for (size_t rank = 0; rank < ends.size(); ++rank) {
    const OrphanEnd& end = ends[rank];
    ASSERT_GE(end.seconds, 0) << "rank " << rank << " outlived its launcher by 5 s";
    EXPECT_LT(end.seconds, 2.0) << "rank " << rank;
    EXPECT_TRUE(WIFSIGNALED(end.status) && WTERMSIG(end.status) == SIGTERM)
        << "rank " << rank << " ended with status " << end.status;
  }
}

// The message of the launcher watch, seen directly: a one-rank job whose lifeline closes.
TEST_F(ZrtRun, LauncherWatchSaysWhyTheRankStops) {
  char dir_template[] = "/tmp/zrt-watch-XXXXXX";
  const std::string dir = mkdtemp(dir_template);
  int lifeline[2];
  ASSERT_EQ(pipe(lifeline), 0);
  const pid_t rank = fork();
  if (rank == 0) {
    close(lifeline[1]);
    const int err = open((dir + "/err").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    dup2(err, STDERR_FILENO);
    const int out = open("/dev/null", O_WRONLY);
    dup2(out, STDOUT_FILENO);
    setenv("RANK", "0", 1);
    setenv("WORLD_SIZE", "1", 1);
    setenv("ZRT_LAUNCHER_FD", std::to_string(lifeline[0]).c_str(), 1);
    const std::string helper = path_from_env("ZRT_RUN_HELPER");
    execl(helper.c_str(), helper.c_str(), "orphan", dir.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  close(lifeline[0]);
  EXPECT_TRUE(zrt::testing::wait_until([&] { return std::filesystem::exists(dir + "/rank0.pid"); },
                                       std::chrono::seconds(20), "the rank starting"));
  close(lifeline[1]);
  int status = 0;
  waitpid(rank, &status, 0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 1) << status;
  const std::string err = read_file(dir + "/err");
  EXPECT_TRUE(contains(err, "rank 0")) << err;
  EXPECT_TRUE(contains(err, "the launcher (zrt-run, parent pid) is gone")) << err;
  std::filesystem::remove_all(dir);
}

// Not a pipe: a clear refusal, not a watch on some other file.
TEST_F(ZrtRun, LauncherFdThatIsNoPipeIsRefused) {
  setenv("RANK", "0", 1);
  setenv("WORLD_SIZE", "1", 1);
  setenv("ZRT_LAUNCHER_FD", "0", 1);
  const std::string helper = path_from_env("ZRT_RUN_HELPER");
  const int null_fd = open("/dev/null", O_RDONLY);
  const pid_t rank = fork();
  if (rank == 0) {
    dup2(null_fd, STDIN_FILENO);
    execl(helper.c_str(), helper.c_str(), "bootstrap", static_cast<char*>(nullptr));
    _exit(127);
  }
  close(null_fd);
  unsetenv("ZRT_LAUNCHER_FD");
  unsetenv("RANK");
  unsetenv("WORLD_SIZE");
  int status = 0;
  waitpid(rank, &status, 0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 3) << status;
}

}  // namespace
