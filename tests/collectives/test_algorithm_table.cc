// The algorithm table (collectives/algorithm.h): parsing, lookup (first match, the built-in
// table behind a file, ZRT_ALGO over both), format() round trips, and every kind of bad file
// named by its line and what is wrong.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "collectives/algorithm.h"
#include "collectives/algorithm_plan.h"
#include "tests/harness/status_assert.h"

namespace zrt {
namespace {

AlgorithmTable parsed(const std::string& text) {
  AlgorithmTable table;
  Status status = AlgorithmTable::parse(text, "test", &table);
  EXPECT_TRUE(status.is_ok()) << status.message();
  return table;
}

std::string error_of(const std::string& text) {
  AlgorithmTable table;
  Status status = AlgorithmTable::parse(text, "t.table", &table);
  EXPECT_EQ(status.code(), ZRT_INVALID_ARGUMENT) << text;
  return status.message();
}

TEST(AlgorithmTable, BuiltinParsesAndKeepsTheMeasuredCrossover) {
  const AlgorithmTable& builtin = AlgorithmTable::builtin();
  ASSERT_FALSE(builtin.rows().empty());
  EXPECT_STREQ(builtin.find(TableOp::kAllReduce, 2, 8), "oneshot");
  EXPECT_STREQ(builtin.find(TableOp::kAllGather, 4, 64 << 10), "oneshot");
  EXPECT_STREQ(builtin.find(TableOp::kReduceScatter, 2, 256 << 10), "oneshot");
  // One-shot reduces in the order of what it stands in for, so it runs at 3+ ranks too.
  EXPECT_STREQ(builtin.find(TableOp::kReduceScatter, 3, 8), "oneshot");
  EXPECT_STREQ(builtin.find(TableOp::kReduceScatter, 4, 1 << 20), "oneshot");
  EXPECT_STREQ(builtin.find(TableOp::kReduceScatter, 4, (1 << 20) + 4), "ring");
  EXPECT_STREQ(builtin.find(TableOp::kAllReduce, 4, 32 << 10), "oneshot");
  EXPECT_STREQ(builtin.find(TableOp::kAllReduce, 4, (32 << 10) + 4), "twoshot");
  EXPECT_STREQ(builtin.find(TableOp::kAllReduce, 4, 1 << 20), "twoshot");
  EXPECT_STREQ(builtin.find(TableOp::kAllReduce, 4, (1 << 20) + 4), "ring");
  EXPECT_STREQ(builtin.find(TableOp::kAllReduce, 8, 8 << 10), "oneshot");
  EXPECT_STREQ(builtin.find(TableOp::kAllReduce, 8, (8 << 10) + 4), "twoshot");
  EXPECT_STREQ(builtin.find(TableOp::kAllReduce, 8, (1 << 20) + 4), "ring");
  EXPECT_STREQ(builtin.find(TableOp::kAllReduce, 2, 32 << 10), "oneshot");
  EXPECT_STREQ(builtin.find(TableOp::kAllReduce, 2, 512 << 10), "twoshot");
  EXPECT_STREQ(builtin.find(TableOp::kAllReduce, 2, (512 << 10) + 4), "ring");
  EXPECT_STREQ(builtin.find(TableOp::kAllReduce, 9, 64 << 10), "direct");
  EXPECT_STREQ(builtin.find(TableOp::kAllGather, 8, 256 << 10), "oneshot");
  EXPECT_STREQ(builtin.find(TableOp::kAllGather, 2, 8 << 10), "oneshot");
  EXPECT_STREQ(builtin.find(TableOp::kAllGather, 2, (8 << 10) + 8), "cma");
  EXPECT_STREQ(builtin.find(TableOp::kAllGather, 2, 32 << 20), "cma");
  EXPECT_STREQ(builtin.find(TableOp::kAllGather, 2, (32 << 20) + 8), "ring");
  EXPECT_STREQ(builtin.find(TableOp::kAllGather, 4, 4 << 20), "oneshot");
  EXPECT_STREQ(builtin.find(TableOp::kAllGather, 4, (4 << 20) + 16), "cma");
  EXPECT_STREQ(builtin.find(TableOp::kAllGather, 4, (16 << 20) + 16), "ring");
  // Where the ranks cannot read each other's memory (cma unavailable), one-shot up to its slot.
  EXPECT_STREQ(builtin.find(TableOp::kAllGather, 2, 1 << 20, "cma"), "oneshot");
  EXPECT_STREQ(builtin.find(TableOp::kAllGather, 2, (1 << 20) + 8, "cma"), "ring");
  EXPECT_STREQ(builtin.find(TableOp::kAllGather, 2, 64 << 10, Unavailable("oneshot", "cma")),
               "ring");
  EXPECT_STREQ(builtin.find(TableOp::kAllGather, 9, 8), "ring");
  EXPECT_STREQ(builtin.find(TableOp::kReduceScatter, 9, 8), "ring");
  // Across hosts (oneshot unavailable) the rows behind it.
  EXPECT_STREQ(builtin.find(TableOp::kAllReduce, 2, 8, "oneshot"), "direct");
  EXPECT_STREQ(builtin.find(TableOp::kAllReduce, 4, 64 << 10, "oneshot"), "direct");
  EXPECT_STREQ(builtin.find(TableOp::kAllReduce, 4, (64 << 10) + 4, "oneshot"), "ring");
  // Two-shot runs in the one-shot arena: unavailable with it, forced or in a row.
  EXPECT_TRUE(Unavailable("oneshot").has("twoshot"));
  EXPECT_TRUE(Unavailable("cma", "twoshot").has("twoshot"));
  EXPECT_FALSE(Unavailable("twoshot").has("oneshot"));
  EXPECT_FALSE(Unavailable("cma").has("twoshot"));
  EXPECT_STREQ(builtin.find(TableOp::kAllReduce, 4, 256 << 10, "oneshot"), "ring");
  EXPECT_STREQ(choose_algorithm("twoshot", nullptr, TableOp::kAllReduce, 4, 8, "oneshot"),
               "direct");
  EXPECT_STREQ(choose_algorithm("twoshot", nullptr, TableOp::kAllReduce, 4, 8), "twoshot");
  EXPECT_STREQ(choose_algorithm("twoshot", nullptr, TableOp::kReduceScatter, 4, 8), "oneshot");
  EXPECT_STREQ(builtin.find(TableOp::kAllGather, 2, 8, Unavailable("oneshot", "cma")), "ring");
  EXPECT_STREQ(builtin.find(TableOp::kAllReduce, 65, 8), "ring");
  for (TableOp op : {TableOp::kReduceScatter, TableOp::kAllGather, TableOp::kAllReduce}) {
    for (int ranks : {2, 3, 8, 1000}) {
      for (uint64_t bytes : {uint64_t{0}, uint64_t{4096}, uint64_t{1} << 40, kAnyBytes}) {
        const char* name = builtin.find(op, ranks, bytes);
        ASSERT_NE(name, nullptr) << table_op_name(op) << " " << ranks << " " << bytes;
        EXPECT_TRUE(op_has_algorithm(op, name));
      }
    }
  }
}

TEST(AlgorithmTable, EveryOpHasARegisteredFallback) {
  for (TableOp op : {TableOp::kReduceScatter, TableOp::kAllGather, TableOp::kAllReduce}) {
    EXPECT_TRUE(op_has_algorithm(op, "ring")) << table_op_name(op);
  }
  EXPECT_FALSE(op_has_algorithm(TableOp::kAllGather, "direct"));
}

TEST(AlgorithmTable, RangesUnitsCommentsAndFirstMatch) {
  const AlgorithmTable table = parsed(
      "# a comment line\n"
      "\n"
      "all_reduce   2     0-4K      rd     # trailing comment\n"
      "all_reduce   2-3   4K-1MiB   direct\n"
      "all_reduce   4-*   16        direct\n"
      "all_reduce   *     *         ring\r\n"
      "all_gather   3     2G-*      ring\n");
  ASSERT_EQ(table.rows().size(), 5u);
  EXPECT_EQ(table.rows()[0].line, 3);
  EXPECT_STREQ(table.find(TableOp::kAllReduce, 2, 0), "rd");
  EXPECT_STREQ(table.find(TableOp::kAllReduce, 2, 4096), "rd");  // first match wins
  EXPECT_STREQ(table.find(TableOp::kAllReduce, 2, 4097), "direct");
  EXPECT_STREQ(table.find(TableOp::kAllReduce, 3, 1 << 20), "direct");
  EXPECT_STREQ(table.find(TableOp::kAllReduce, 3, (1 << 20) + 1), "ring");
  EXPECT_STREQ(table.find(TableOp::kAllReduce, 4096, 16), "direct");
  EXPECT_STREQ(table.find(TableOp::kAllReduce, 4096, 17), "ring");
  EXPECT_STREQ(table.find(TableOp::kAllGather, 3, uint64_t{2} << 30), "ring");
  EXPECT_EQ(table.find(TableOp::kAllGather, 3, (uint64_t{2} << 30) - 1), nullptr);
  EXPECT_EQ(table.find(TableOp::kReduceScatter, 2, 0), nullptr);
}

TEST(AlgorithmTable, FormatRoundTrips) {
  const AlgorithmTable table = parsed(
      "all_reduce 2 0-4K rd\n"
      "all_reduce 2-3 4097-1M direct\n"
      "all_reduce 2-64 2-* 0-4K rd\n"
      "reduce_scatter 4-* 16 ring\n"
      "all_gather * * ring\n");
  const std::string text = table.format();
  const AlgorithmTable again = parsed(text);
  ASSERT_EQ(again.rows().size(), table.rows().size()) << text;
  for (size_t i = 0; i < table.rows().size(); ++i) {
    const AlgorithmRow& a = table.rows()[i];
    const AlgorithmRow& b = again.rows()[i];
    EXPECT_EQ(a.op, b.op) << text;
    EXPECT_EQ(a.min_ranks, b.min_ranks) << text;
    EXPECT_EQ(a.max_ranks, b.max_ranks) << text;
    EXPECT_EQ(a.min_hosts, b.min_hosts) << text;
    EXPECT_EQ(a.max_hosts, b.max_hosts) << text;
    EXPECT_EQ(a.min_bytes, b.min_bytes) << text;
    EXPECT_EQ(a.max_bytes, b.max_bytes) << text;
    EXPECT_EQ(a.algorithm, b.algorithm) << text;
  }
  EXPECT_NE(text.find("4097-1M"), std::string::npos) << text;
  EXPECT_NE(text.find("2-64    2-*"), std::string::npos) << text;
}

// A crossover measured on one host need not hold across a network: rows say on how many hosts
// they apply, and a row without the column applies on any number.
TEST(AlgorithmTable, HostsColumnSelectsRowsByHowManyHostsTheRanksAreOn) {
  const AlgorithmTable table = parsed(
      "all_reduce 2-64 1   0-64K direct\n"
      "all_reduce 2-64 2-3 0-8K  rd\n"
      "all_reduce *    0-16K     direct\n"
      "all_reduce *    *   *     ring\n");
  EXPECT_EQ(table.rows()[0].max_hosts, 1);
  EXPECT_EQ(table.rows()[2].min_hosts, 1);
  EXPECT_EQ(table.rows()[2].max_hosts, kAnyRanks);
  EXPECT_STREQ(table.find(TableOp::kAllReduce, 4, 64 << 10, {}, 1), "direct");
  EXPECT_STREQ(table.find(TableOp::kAllReduce, 4, 64 << 10, {}, 2), "ring");
  EXPECT_STREQ(table.find(TableOp::kAllReduce, 4, 8 << 10, {}, 2), "rd");
  EXPECT_STREQ(table.find(TableOp::kAllReduce, 4, 8 << 10, {}, 4), "direct");  // four fields
  EXPECT_STREQ(table.find(TableOp::kAllReduce, 4, (16 << 10) + 1, {}, 4), "ring");
  EXPECT_STREQ(choose_algorithm("", &table, TableOp::kAllReduce, 4, 8 << 10, {}, 3), "rd");
  EXPECT_STREQ(choose_algorithm("direct", &table, TableOp::kAllReduce, 4, 1 << 20, {}, 2),
               "direct");  // ZRT_ALGO still wins
}

// The built-in rows measured on one host stay there: across hosts the direct all-reduce, which
// sends every input whole over the network, stops at 8 KiB, and nothing picks one-shot or cma.
TEST(AlgorithmTable, BuiltinAcrossHostsKeepsTheDirectAllReduceSmall) {
  const AlgorithmTable& builtin = AlgorithmTable::builtin();
  EXPECT_STREQ(builtin.find(TableOp::kAllReduce, 4, 64 << 10, "oneshot", 1), "direct");
  EXPECT_STREQ(builtin.find(TableOp::kAllReduce, 4, 64 << 10, {}, 2), "ring");
  EXPECT_STREQ(builtin.find(TableOp::kAllReduce, 4, 8 << 10, {}, 2), "direct");
  EXPECT_STREQ(builtin.find(TableOp::kAllReduce, 4, (8 << 10) + 4, {}, 2), "ring");
  EXPECT_STREQ(builtin.find(TableOp::kAllReduce, 8, 8, {}, 4), "direct");
  EXPECT_STREQ(builtin.find(TableOp::kAllGather, 4, 64 << 10, {}, 2), "ring");
  EXPECT_STREQ(builtin.find(TableOp::kReduceScatter, 4, 64 << 10, {}, 2), "ring");
  const AlgorithmPlan across(AllReduceAlgorithm::kAuto, nullptr, 4, 2);
  EXPECT_EQ(across.choose(TableOp::kAllReduce, 64 << 10, false, false), AllReduceAlgorithm::kRing);
  EXPECT_EQ(across.choose(TableOp::kAllReduce, 4 << 10, false, false), AllReduceAlgorithm::kDirect);
}

TEST(AlgorithmTable, ChooseAppliesOverrideThenTableThenBuiltin) {
  const AlgorithmTable table = parsed("all_reduce 2 0-1M rd\n");
  EXPECT_STREQ(choose_algorithm("", &table, TableOp::kAllReduce, 2, 8), "rd");
  EXPECT_STREQ(choose_algorithm("auto", &table, TableOp::kAllReduce, 2, 8), "rd");
  // Not covered by the file: the built-in table.
  EXPECT_STREQ(choose_algorithm("", &table, TableOp::kAllReduce, 3, 8), "oneshot");
  EXPECT_STREQ(choose_algorithm("", &table, TableOp::kAllReduce, 3, 8, "oneshot"), "direct");
  EXPECT_STREQ(choose_algorithm("", &table, TableOp::kAllReduce, 2, 2 << 20), "ring");
  EXPECT_STREQ(choose_algorithm("", nullptr, TableOp::kAllReduce, 2, 8), "oneshot");
  // An unavailable algorithm, forced or in the file, is passed over.
  EXPECT_STREQ(choose_algorithm("oneshot", nullptr, TableOp::kAllGather, 2, 8), "oneshot");
  EXPECT_STREQ(choose_algorithm("oneshot", nullptr, TableOp::kAllGather, 2, 8, "oneshot"), "cma");
  EXPECT_STREQ(choose_algorithm("cma", nullptr, TableOp::kAllGather, 2, 8), "cma");
  EXPECT_STREQ(
      choose_algorithm("cma", nullptr, TableOp::kAllGather, 2, 8, Unavailable("oneshot", "cma")),
      "ring");
  const AlgorithmTable one_shot = parsed("all_reduce * * oneshot\n");
  EXPECT_STREQ(choose_algorithm("", &one_shot, TableOp::kAllReduce, 2, 1 << 20, "oneshot"), "ring");
  // ZRT_ALGO wins for the ops that have its algorithm, and leaves the others to the tables.
  EXPECT_STREQ(choose_algorithm("ring", &table, TableOp::kAllReduce, 2, 8), "ring");
  EXPECT_STREQ(choose_algorithm("direct", &table, TableOp::kAllReduce, 2, 2 << 20), "direct");
  EXPECT_STREQ(choose_algorithm("direct", &table, TableOp::kAllGather, 2, 8), "oneshot");
  EXPECT_STREQ(choose_algorithm("direct", &table, TableOp::kAllGather, 2, 8, "oneshot"), "cma");
  EXPECT_STREQ(choose_algorithm("rd", nullptr, TableOp::kReduceScatter, 4, 8, "oneshot"), "ring");
}

// The plan answers as choose_algorithm does, at every row boundary and on either side of it, for
// the built-in table, a file in front of it, every forced algorithm and every availability.
TEST(AlgorithmPlan, AgreesWithChooseAlgorithmAtEveryBoundary) {
  const AlgorithmTable file = parsed(
      "all_reduce 2 0-1M rd\nall_gather 3-4 100-5000 ring\nreduce_scatter * 7K-9K oneshot\n");
  const AllReduceAlgorithm forced_values[] = {
      AllReduceAlgorithm::kAuto,    AllReduceAlgorithm::kRing,
      AllReduceAlgorithm::kDirect,  AllReduceAlgorithm::kRecursiveDoubling,
      AllReduceAlgorithm::kOneShot, AllReduceAlgorithm::kCma,
      AllReduceAlgorithm::kTwoShot};
  std::vector<uint64_t> sizes{0, 1, kAnyBytes - 1, kAnyBytes};
  for (const AlgorithmTable* table : {&AlgorithmTable::builtin(), &file}) {
    for (const AlgorithmRow& row : table->rows()) {
      for (uint64_t edge : {row.min_bytes, row.max_bytes}) {
        for (uint64_t delta : {uint64_t{0}, uint64_t{1}}) {
          sizes.push_back(edge - std::min(edge, delta));
          if (edge < kAnyBytes) sizes.push_back(edge + delta);
        }
      }
    }
  }
  int compared = 0;
  for (const AlgorithmTable* table : {static_cast<const AlgorithmTable*>(nullptr), &file}) {
    for (AllReduceAlgorithm forced : forced_values) {
      for (int ranks : {1, 2, 3, 4, 8, 65}) {
        for (int hosts : {1, 2, 3}) {
          const AlgorithmPlan plan(forced, table, ranks, hosts);
          for (TableOp op : {TableOp::kReduceScatter, TableOp::kAllGather, TableOp::kAllReduce}) {
            for (int available = 0; available < 4; ++available) {
              const bool one_shot = (available & 2) != 0;
              const bool cma = (available & 1) != 0;
              const Unavailable unavailable(one_shot ? "" : kOneShotAlgorithm,
                                            cma ? "" : kCmaAlgorithm);
              for (uint64_t bytes : sizes) {
                const char* expected = choose_algorithm(algorithm_name(forced), table, op, ranks,
                                                        bytes, unavailable, hosts);
                ASSERT_STREQ(algorithm_name(plan.choose(op, bytes, one_shot, cma)), expected)
                    << table_op_name(op) << " " << bytes << " bytes, " << ranks << " ranks on "
                    << hosts << " host(s), forced " << algorithm_name(forced) << ", oneshot "
                    << one_shot << ", cma " << cma << "\n"
                    << plan.describe();
                ++compared;
              }
            }
          }
        }
      }
    }
  }
  EXPECT_GT(compared, 10000);
  // What the log shows of it.
  const std::string text = AlgorithmPlan(AllReduceAlgorithm::kAuto, nullptr, 2, 1).describe();
  EXPECT_NE(text.find("all_reduce (oneshot, cma): 0-"), std::string::npos) << text;
}

TEST(AlgorithmTable, BadRowsNameTheLineAndTheProblem) {
  struct Case {
    const char* text;
    const char* needle;
  };
  const Case cases[] = {
      {"all_reduce * *\n",
       "line 1: 3 field(s), expected 5: op ranks hosts bytes algorithm (or 4, without hosts)"},
      {"# ok\nall_reduce * * * ring extra\n", "line 2: 6 field(s)"},
      {"all_reduce * 0 * ring\n", "line 1: hosts '0' is not N, A-B, A-* or *"},
      {"all_reduce * 3-1 * ring\n", "hosts '3-1' is not"},
      {"all_reduce * * 4X ring\n", "bytes '4X' is not"},
      {"allreduce * * ring\n", "line 1: op 'allreduce' is not reduce_scatter, all_gather or"},
      {"all_reduce 4-2 * ring\n", "line 1: ranks '4-2' is not"},
      {"all_reduce 0 * ring\n", "ranks '0' is not"},
      {"all_reduce two * ring\n", "ranks 'two' is not"},
      {"all_reduce 99999999999 * ring\n", "ranks '99999999999'"},
      {"all_reduce * 1M-4K ring\n", "line 1: bytes '1M-4K' is not"},
      {"all_reduce * 4X ring\n", "bytes '4X' is not"},
      {"all_reduce * -4K ring\n", "bytes '-4K' is not"},
      {"all_reduce * 99999999999999999999G ring\n", "bytes '99999999999999999999G'"},
      {"all_reduce * 17179869184G ring\n", "bytes '17179869184G'"},
      {"\n\nall_gather * * direct\n",
       "t.table: line 3: all_gather has no algorithm 'direct' "
       "(it has: ring, oneshot, cma)"},
      {"all_reduce * * tree\n",
       "all_reduce has no algorithm 'tree' (it has: ring, direct, rd, oneshot, twoshot)"},
  };
  for (const Case& c : cases) {
    const std::string message = error_of(c.text);
    EXPECT_NE(message.find(c.needle), std::string::npos)
        << "'" << message << "' lacks '" << c.needle << "'";
  }
}

TEST(AlgorithmTable, LoadNamesTheVariableAndThePath) {
  AlgorithmTable table;
  Status status = AlgorithmTable::load("/nonexistent/zrt.table", &table);
  EXPECT_EQ(status.code(), ZRT_INVALID_ARGUMENT);
  EXPECT_NE(status.message().find("ZRT_ALGO_TABLE=/nonexistent/zrt.table: cannot open"),
            std::string::npos)
      << status.message();

  const std::string path = ::testing::TempDir() + "zrt_algorithm_table_test.table";
  {
    std::ofstream file(path);
    file << "all_reduce 2 * rd\nall_reduce 3 * * rd x\n";
  }
  status = AlgorithmTable::load(path, &table);
  EXPECT_NE(status.message().find("ZRT_ALGO_TABLE=" + path + ": line 2: 6 field(s)"),
            std::string::npos)
      << status.message();
  {
    std::ofstream file(path);
    file << "all_reduce 2 * rd\n";
  }
  ASSERT_OK(AlgorithmTable::load(path, &table));
  EXPECT_STREQ(table.find(TableOp::kAllReduce, 2, 123), "rd");
  std::remove(path.c_str());
}

}  // namespace
}  // namespace zrt
