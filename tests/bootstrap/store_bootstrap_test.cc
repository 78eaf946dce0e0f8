// The store bootstrap across real forked ranks (tests/harness): all-gather and barrier for
// N = 1, 2, 3, 4, 8, local ranks derived from host names, and a missing rank named on timeout.
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <vector>

#include <gtest/gtest.h>

#include "lib/bootstrap/bootstrap.h"
#include "tests/harness/multirank.h"

namespace zrt {
namespace {

std::unique_ptr<Bootstrap> make_bootstrap(int64_t timeout_ms) {
  EnvRanks ranks;
  Status status = read_env_ranks(&ranks);
  EXPECT_TRUE(status.is_ok()) << status.message();
  std::unique_ptr<Bootstrap> bootstrap;
  status = create_store_bootstrap(ranks, timeout_ms, &bootstrap);
  EXPECT_TRUE(status.is_ok()) << status.message();
  return bootstrap;
}

// Each rank's record: `bytes` bytes derived from (rank, round), checked byte by byte.
uint8_t pattern(int rank, int round, size_t i) {
  return static_cast<uint8_t>(rank * 31 + round * 7 + static_cast<int>(i));
}

void check_rounds(Bootstrap& bootstrap, int size) {
  const size_t sizes[] = {1, 16, 4096, 100000};
  int round = 0;
  for (size_t bytes : sizes) {
    for (int repeat = 0; repeat < 3; ++repeat, ++round) {
      std::vector<uint8_t> mine(bytes);
      for (size_t i = 0; i < bytes; ++i) mine[i] = pattern(bootstrap.rank(), round, i);
      std::vector<uint8_t> all(bytes * static_cast<size_t>(size), 0);
      Status status = bootstrap.allgather(mine.data(), all.data(), bytes);
      ASSERT_TRUE(status.is_ok()) << status.message();
      for (int rank = 0; rank < size; ++rank) {
        for (size_t i = 0; i < bytes; ++i) {
          ASSERT_EQ(all[rank * bytes + i], pattern(rank, round, i))
              << "rank " << rank << " byte " << i << " round " << round;
        }
      }
      status = bootstrap.barrier();
      ASSERT_TRUE(status.is_ok()) << status.message();
    }
  }
}

class StoreBootstrapRanks : public ::testing::TestWithParam<int> {};

TEST_P(StoreBootstrapRanks, AllgatherAndBarrier) {
  zrt::testing::expect_ranks_pass(GetParam(),
                                  [](int rank, int size) {
                                    auto bootstrap = make_bootstrap(20000);
                                    ASSERT_TRUE(bootstrap);
                                    EXPECT_EQ(bootstrap->rank(), rank);
                                    EXPECT_EQ(bootstrap->size(), size);
                                    EXPECT_EQ(bootstrap->local_rank(), rank);
                                    EXPECT_EQ(bootstrap->local_size(), size);
                                    check_rounds(*bootstrap, size);
                                  },
                                  {.deadline_ms = 60000, .env = {}});
}

TEST_P(StoreBootstrapRanks, LocalRanksFromHostNames) {
  zrt::testing::expect_ranks_pass(GetParam(),
                                  [](int rank, int size) {
                                    unsetenv("LOCAL_RANK");
                                    unsetenv("LOCAL_WORLD_SIZE");
                                    auto bootstrap = make_bootstrap(20000);
                                    ASSERT_TRUE(bootstrap);
                                    EXPECT_EQ(bootstrap->local_rank(),
                                              rank);  // every rank runs on this host
                                    EXPECT_EQ(bootstrap->local_size(), size);
                                    ASSERT_TRUE(bootstrap->barrier().is_ok());
                                  },
                                  {.deadline_ms = 60000, .env = {}});
}

INSTANTIATE_TEST_SUITE_P(Sizes, StoreBootstrapRanks, ::testing::Values(1, 2, 3, 4, 8));

TEST(StoreBootstrap, MissingRankIsNamedOnTimeout) {
  zrt::testing::expect_ranks_pass(
      3,
      [](int rank, int) {
        if (rank == 2) return;  // never shows up
        auto bootstrap = make_bootstrap(1000);
        ASSERT_TRUE(bootstrap);
        const int mine = rank;
        int all[3] = {};
        const auto start = std::chrono::steady_clock::now();
        Status status = bootstrap->allgather(&mine, all, sizeof(mine));
        const auto elapsed = std::chrono::steady_clock::now() - start;
        EXPECT_EQ(status.code(), ZRT_TIMEOUT);
        EXPECT_NE(
            status.message().find("timed out after 1000 ms waiting for rank 2 of 3 at bootstrap "
                                  "allgather round 1"),
            std::string::npos)
            << status.message();
        EXPECT_LT(elapsed, std::chrono::milliseconds(5000));
      },
      {.deadline_ms = 30000, .env = {}});
}

TEST(StoreBootstrap, MismatchedTokenIsRefused) {
  zrt::testing::expect_ranks_pass(
      2,
      [](int rank, int) {
        if (rank == 1) setenv("ZRT_JOB_TOKEN", "not-the-job-token", 1);
        EnvRanks ranks;
        ASSERT_TRUE(read_env_ranks(&ranks).is_ok());
        std::unique_ptr<Bootstrap> bootstrap;
        Status status = create_store_bootstrap(ranks, 1000, &bootstrap);
        if (rank == 1) {
          EXPECT_EQ(status.code(), ZRT_REMOTE_ERROR);
          EXPECT_NE(status.message().find("belongs to another job"), std::string::npos)
              << status.message();
          return;
        }
        ASSERT_TRUE(status.is_ok()) << status.message();
        Status barrier = bootstrap->barrier();
        EXPECT_EQ(barrier.code(), ZRT_TIMEOUT);
        EXPECT_NE(barrier.message().find("rank 1 of 2"), std::string::npos) << barrier.message();
      },
      {.deadline_ms = 30000, .env = {}});
}

TEST(StoreBootstrap, BadArgumentsAreRefused) {
  EnvRanks ranks;
  ranks.size = 4;
  ranks.rank = 4;
  std::unique_ptr<Bootstrap> bootstrap;
  EXPECT_EQ(create_store_bootstrap(ranks, 1000, &bootstrap).code(), ZRT_INVALID_ARGUMENT);
  ranks.rank = 1;
  ranks.store_port = 0;
  Status status = create_store_bootstrap(ranks, 1000, &bootstrap);
  EXPECT_EQ(status.code(), ZRT_INVALID_ARGUMENT);
  EXPECT_NE(status.message().find("MASTER_PORT"), std::string::npos) << status.message();
  ranks.store_port = 1234;
  EXPECT_EQ(create_store_bootstrap(ranks, 0, &bootstrap).code(), ZRT_INVALID_ARGUMENT);
  EXPECT_EQ(create_store_bootstrap(ranks, 1000, nullptr).code(), ZRT_INVALID_ARGUMENT);
}

}  // namespace
}  // namespace zrt

namespace zrt {
namespace {

// Without a job identity, two processes that claim one rank number never form one
// communicator: three processes for a world of two (rank 1 twice); the second claimant of rank 1
// always fails, and whoever succeeds has a world of distinct processes.
TEST(StoreBootstrap, WithoutATokenARankClaimedTwiceFails) {
  zrt::testing::expect_ranks_pass(
      3,
      [](int process, int) {
        unsetenv("ZRT_JOB_TOKEN");
        setenv("WORLD_SIZE", "2", 1);
        setenv("LOCAL_WORLD_SIZE", "2", 1);
        setenv("RANK", process == 0 ? "0" : "1", 1);
        setenv("LOCAL_RANK", process == 0 ? "0" : "1", 1);
        EnvRanks ranks;
        ASSERT_TRUE(read_env_ranks(&ranks).is_ok());
        EXPECT_EQ(ranks.job_source, "");
        std::unique_ptr<Bootstrap> bootstrap;
        Status status = create_store_bootstrap(ranks, 3000, &bootstrap);
        if (!status.is_ok()) {
          // The claims' verdict, or a store already gone: the pair that claimed first has
          // finished before this late claimant said hello.
          const std::string& text = status.message();
          const bool claims = text.find("two jobs share this store's port") != std::string::npos;
          const bool gone = text.find("the store closed the connection") != std::string::npos ||
                            text.find("the store reset the connection") != std::string::npos ||
                            text.find("cannot connect to the store") != std::string::npos;
          EXPECT_TRUE(claims || gone) << text;
          return;
        }
        // The second claim came after this rank's bootstrap: the store refuses what follows,
        // or has gone (rank 0, refused, stopped serving it).
        int mine = process;
        int all[2] = {-1, -1};
        Status gathered = bootstrap->allgather(&mine, all, sizeof(mine));
        if (!gathered.is_ok()) {
          const std::string& text = gathered.message();
          EXPECT_TRUE(text.find("two jobs share this store's port") != std::string::npos ||
                      text.find("the store closed the connection") != std::string::npos ||
                      text.find("the store reset the connection") != std::string::npos ||
                      gathered.code() == ZRT_TIMEOUT)
              << text;
          return;
        }
        EXPECT_EQ(all[0], 0);
        EXPECT_TRUE(all[1] == 1 || all[1] == 2);
      },
      {.deadline_ms = 30000, .env = {}});
}

}  // namespace
}  // namespace zrt
