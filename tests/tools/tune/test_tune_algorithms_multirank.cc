// zrt-tune --algorithms on this machine: it runs every all-reduce candidate under zrt-run,
// writes a table the engine's parser loads, and zrt-bench runs with that table
// (ZRT_ALGO_TABLE) and checks its results. No timing is asserted: which algorithm wins is the
// machine's business.
#include <cstdlib>

#include <gtest/gtest.h>

#include "collectives/algorithm.h"
#include "tests/tools/run_command.h"

namespace zrt::testing {
namespace {

std::string env_path(const char* name) {
  const char* value = std::getenv(name);
  return value != nullptr ? value : "";
}

TEST(TuneAlgorithmsMultirank, WritesATableTheEngineLoads) {
  const std::string run = env_path("ZRT_RUN_EXE"), bench = env_path("ZRT_BENCH_EXE");
  ASSERT_FALSE(run.empty() || bench.empty() || env_path("ZRT_TUNE_EXE").empty())
      << "ZRT_RUN_EXE, ZRT_BENCH_EXE and ZRT_TUNE_EXE are set by meson";
  const std::string dir = make_temp_dir();
  const std::string table = dir + "/zrt-algo.table";
  CommandResult r = run_command({env_path("ZRT_TUNE_EXE"),
                                 "--algorithms",
                                 "--ranks",
                                 "2",
                                 "-b",
                                 "4K",
                                 "-e",
                                 "256K",
                                 "-f",
                                 "8",
                                 "--rounds",
                                 "1",
                                 "--iters",
                                 "3",
                                 "--zrt-run",
                                 run,
                                 "--zrt-bench",
                                 bench,
                                 "-o",
                                 table},
                                {{"ZRT_TIMEOUT", "60"}}, 280000);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("all_reduce at 2 ranks"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("# wrote " + table), std::string::npos) << r.out;

  AlgorithmTable loaded;
  Status status = AlgorithmTable::load(table, &loaded);
  ASSERT_TRUE(status.is_ok()) << status.message() << "\n" << read_file(table);
  // Every all-reduce size at 2 ranks is covered, by an algorithm all-reduce has.
  for (uint64_t bytes : {uint64_t{0}, uint64_t{4096}, uint64_t{100000}, uint64_t{1} << 30}) {
    const char* name = loaded.find(TableOp::kAllReduce, 2, bytes);
    ASSERT_NE(name, nullptr) << bytes << "\n" << read_file(table);
    EXPECT_TRUE(op_has_algorithm(TableOp::kAllReduce, name)) << name;
  }

  CommandResult b = run_command({run, "-n", "2", "--no-prefix", bench, "all_reduce", "-b", "4K",
                                 "-e", "256K", "-f", "8", "-n", "2", "-w", "1", "--no-progress"},
                                {{"ZRT_ALGO_TABLE", table}, {"ZRT_TIMEOUT", "60"}}, 120000);
  EXPECT_EQ(b.exit_code, 0) << b.out << b.err;
  EXPECT_NE(b.out.find("Out of bounds values : 0 OK"), std::string::npos) << b.out;
  std::system(("rm -rf '" + dir + "'").c_str());
}

}  // namespace
}  // namespace zrt::testing
