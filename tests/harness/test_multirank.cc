// The harness itself: a rank that skips is reported as skipped, with its reason, by run_ranks
// and by the parent test of expect_ranks_pass (never as a pass); a rank that fails and skips is
// a failure.
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <string>

#include "tests/harness/multirank.h"

namespace zrt::testing {
namespace {

TEST(RunRanks, ARankThatSkipsIsSkippedWithItsReasonNotPassed) {
  const std::vector<RankOutcome> outcomes = run_ranks(2, [](int rank, int) {
    if (rank == 1) GTEST_SKIP() << "rank one has no device";
  });
  ASSERT_EQ(outcomes.size(), 2u);
  EXPECT_TRUE(outcomes[0].passed()) << outcomes[0].describe();
  EXPECT_FALSE(outcomes[1].passed());
  EXPECT_TRUE(outcomes[1].skipped()) << outcomes[1].describe();
  EXPECT_EQ(outcomes[1].skip_reason, "rank one has no device");
  EXPECT_NE(outcomes[1].describe().find("rank 1 skipped: rank one has no device"),
            std::string::npos)
      << outcomes[1].describe();
}

TEST(RunRanks, ARankThatFailsBeforeItSkipsHasFailed) {
  const std::vector<RankOutcome> outcomes = run_ranks(2, [](int rank, int) {
    if (rank == 0) return;
    ADD_FAILURE() << "expected: this rank's failure";
    GTEST_SKIP() << "too late to skip";
  });
  ASSERT_EQ(outcomes.size(), 2u);
  EXPECT_TRUE(outcomes[0].passed());
  EXPECT_FALSE(outcomes[1].passed());
  EXPECT_FALSE(outcomes[1].skipped());
  EXPECT_EQ(outcomes[1].exit_code, 1);
}

// Run only as a child of the next test (disabled, so a normal run neither runs nor counts it).
TEST(HarnessChild, DISABLED_OneRankSkips) {
  expect_ranks_pass(3, [](int rank, int) {
    if (rank == 2) GTEST_SKIP() << "the third rank's reason";
  });
}

TEST(ExpectRanksPass, ASkipInsideARankSkipsTheParentTest) {
  // popen runs a shell, whose /proc/self is the shell's: name this binary by its pid instead.
  const std::string command = "/proc/" + std::to_string(getpid()) +
                              "/exe --gtest_also_run_disabled_tests "
                              "--gtest_filter=HarnessChild.DISABLED_OneRankSkips 2>&1";
  FILE* child = popen(command.c_str(), "r");
  ASSERT_NE(child, nullptr);
  std::string output;
  std::array<char, 4096> buffer{};
  size_t got = 0;
  while ((got = fread(buffer.data(), 1, buffer.size(), child)) > 0) {
    output.append(buffer.data(), got);
  }
  const int status = pclose(child);
  ASSERT_TRUE(WIFEXITED(status)) << output;
  EXPECT_EQ(WEXITSTATUS(status), 0) << output;
  EXPECT_NE(output.find("[  SKIPPED ] HarnessChild.DISABLED_OneRankSkips"), std::string::npos)
      << output;
  EXPECT_NE(output.find("rank 2 skipped: the third rank's reason"), std::string::npos) << output;
  EXPECT_EQ(output.find("[       OK ] HarnessChild.DISABLED_OneRankSkips"), std::string::npos)
      << output;
}

}  // namespace
}  // namespace zrt::testing
