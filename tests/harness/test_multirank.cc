// The harness itself: a rank that skips is reported as skipped, with its reason, by run_ranks
// and by the parent test of expect_ranks_pass (never as a pass); a rank that fails and skips is
// a failure.
#include <gtest/gtest.h>

#include <string>

#include "tests/harness/multirank.h"
#include "tests/tools/run_command.h"

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
  const CommandResult child = run_command(
      {"/proc/self/exe", "--gtest_also_run_disabled_tests",
       "--gtest_filter=HarnessChild.DISABLED_OneRankSkips"});
  const std::string output = child.out + child.err;
  ASSERT_FALSE(child.timed_out) << output;
  EXPECT_EQ(child.exit_code, 0) << output;
  EXPECT_NE(output.find("[  SKIPPED ] HarnessChild.DISABLED_OneRankSkips"), std::string::npos)
      << output;
  EXPECT_NE(output.find("rank 2 skipped: the third rank's reason"), std::string::npos) << output;
  EXPECT_EQ(output.find("[       OK ] HarnessChild.DISABLED_OneRankSkips"), std::string::npos)
      << output;
}

}  // namespace
}  // namespace zrt::testing
