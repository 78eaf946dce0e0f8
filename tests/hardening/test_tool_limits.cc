// The tools facing oversized or wrong inputs: a clear message and exit code 2 (or a correct
// figure), quickly, never std::bad_alloc, an uncaught exception or a hang.
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "tests/tools/run_command.h"

namespace {

using zrt::testing::CommandResult;
using zrt::testing::run_command;

std::string exe(const char* name) {
  const char* path = std::getenv(name);
  return path != nullptr ? path : "";
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// Runs a tool that must refuse quickly, with a message containing `expect`.
void expect_refused(const std::vector<std::string>& argv, const std::string& expect) {
  SCOPED_TRACE(argv.size() > 1 ? argv[1] : argv[0]);
  const auto start = std::chrono::steady_clock::now();
  const CommandResult result = run_command(argv, {}, 30000);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_FALSE(result.timed_out);
  EXPECT_LT(seconds, 10.0);
  EXPECT_NE(result.exit_code, 0) << result.out;
  EXPECT_NE(result.exit_code, -1) << "killed by a signal: " << result.err;
  EXPECT_TRUE(contains(result.err, expect)) << result.err;
  EXPECT_FALSE(contains(result.err, "bad_alloc")) << result.err;
  EXPECT_FALSE(contains(result.err, "terminate called")) << result.err;
}

TEST(ToolLimits, ZrtMemRefusesWhatItCannotRepresent) {
  const std::string mem = exe("ZRT_MEM_EXE");
  ASSERT_FALSE(mem.empty());
  // 10^15 parameters in 25 MiB buckets: too many buckets (the old abort was std::bad_alloc).
  expect_refused({mem, "--params", "1e15", "--ranks", "8"}, "buckets");
  expect_refused({mem, "--params", "2e15", "--ranks", "8"}, "2^50");
  expect_refused({mem, "--layers", "4", "--hidden", "2000000000", "--heads", "1", "--ranks", "8"},
                 "2^50");
  expect_refused({mem, "--params", "1B", "--ranks", "8", "--alignment", "0"}, "--alignment 0");
  expect_refused({mem, "--params", "1B", "--ranks", "8", "--alignment", "-3"}, "--alignment");
  // Stage 3 has one segment per unit: 10^15 parameters is a figure there, computed at once.
  const CommandResult stage3 =
      run_command({mem, "--params", "1e15", "--ranks", "1024", "--stage", "3"}, {}, 30000);
  EXPECT_EQ(stage3.exit_code, 0) << stage3.err;
  EXPECT_TRUE(contains(stage3.out, "stage 3")) << stage3.out;
}

TEST(ToolLimits, ZrtBenchRefusesSweepsItCannotRun) {
  const std::string bench = exe("ZRT_BENCH_EXE");
  ASSERT_FALSE(bench.empty());
  expect_refused({bench, "all_reduce", "-b", "8", "-e", "1.2e15"}, "limit");
  expect_refused({bench, "all_reduce", "-b", "1", "-e", "1G", "-i", "1"}, "more than 4096 sizes");
}

TEST(ToolLimits, TrainLmCorpusThatIsNoFileIsAClearError) {
  const std::string train = exe("TRAIN_LM_EXE");
  if (train.empty()) GTEST_SKIP() << "train_lm is not built here (no OpenBLAS)";
  expect_refused({train, "--corpus", "/tmp", "--steps", "1"}, "a directory");
  char dir[] = "/tmp/zrt-corpus-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  const std::string fifo = std::string(dir) + "/corpus";
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  expect_refused({train, "--corpus", fifo, "--steps", "1"}, "a FIFO");
  expect_refused({train, "--corpus", std::string(dir) + "/absent", "--steps", "1"}, "absent");
  unlink(fifo.c_str());
  rmdir(dir);
}

}  // namespace
