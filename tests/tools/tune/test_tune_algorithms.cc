// zrt-tune --algorithms without ranks: the table it writes from measured sweeps (bands of
// sizes, rank ranges between measured counts, a table the engine's parser loads back) and the
// table of what it measured.
#include <gtest/gtest.h>

#include "collectives/algorithm.h"
#include "tools/zrt-tune/algorithm_tune.h"

namespace zrt::tune {
namespace {

AlgorithmSweep sweep(int ranks, std::map<uint64_t, std::map<std::string, double>> times) {
  AlgorithmSweep s;
  s.op = TableOp::kAllReduce;
  s.ranks = ranks;
  s.time_us = std::move(times);
  return s;
}

TEST(TuneAlgorithms, BandsOfWinnersPerMeasuredRankCount) {
  const std::vector<AlgorithmSweep> sweeps = {
      sweep(4, {{4096, {{"ring", 9}, {"direct", 5}}}, {65536, {{"ring", 20}, {"direct", 30}}}}),
      sweep(2, {{4096, {{"ring", 9}, {"direct", 5}, {"rd", 6}}},
                {16384, {{"ring", 9}, {"direct", 7}, {"rd", 8}}},
                {65536, {{"ring", 10}, {"direct", 12}, {"rd", 11}}},
                {262144, {{"ring", 20}, {"direct", 40}, {"rd", 30}}}}),
  };
  const AlgorithmTable table = crossover_table(sweeps);
  ASSERT_EQ(table.rows().size(), 4u) << table.format();
  // 2 ranks covers 2-3; 4 ranks covers 4 and above.
  EXPECT_STREQ(table.find(TableOp::kAllReduce, 2, 0), "direct");
  EXPECT_STREQ(table.find(TableOp::kAllReduce, 3, 16384), "direct");
  EXPECT_STREQ(table.find(TableOp::kAllReduce, 3, 16385), "ring");
  EXPECT_STREQ(table.find(TableOp::kAllReduce, 2, uint64_t{1} << 40), "ring");
  EXPECT_STREQ(table.find(TableOp::kAllReduce, 4, 4096), "direct");
  EXPECT_STREQ(table.find(TableOp::kAllReduce, 4, 4097), "ring");
  EXPECT_STREQ(table.find(TableOp::kAllReduce, 64, 8), "direct");
  EXPECT_EQ(table.find(TableOp::kAllGather, 2, 8), nullptr);
  // Measured on this host: its rows leave jobs across hosts to the built-in table.
  EXPECT_EQ(table.find(TableOp::kAllReduce, 2, 0, {}, 2), nullptr);

  AlgorithmTable again;
  ASSERT_TRUE(AlgorithmTable::parse(table.format(), "written", &again).is_ok()) << table.format();
  ASSERT_EQ(again.rows().size(), table.rows().size());
  EXPECT_NE(table.format().find("all_reduce         2-3     1      16385-*           ring"),
            std::string::npos)
      << table.format();
}

TEST(TuneAlgorithms, RenderNamesEveryCandidateAndTheFastest) {
  const std::string text =
      render_sweeps({sweep(2, {{4096, {{"ring", 9.5}, {"direct", 5.25}, {"rd", 6}}}})});
  EXPECT_NE(text.find("all_reduce at 2 ranks"), std::string::npos) << text;
  EXPECT_NE(text.find("4 KiB      9.50      5.25      6.00         -         -  direct"),
            std::string::npos)
      << text;
}

}  // namespace
}  // namespace zrt::tune
