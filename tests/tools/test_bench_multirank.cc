// zrt-bench as users run it: under zrt-run, on real ranks talking over UCX. Checks the table,
// the JSON record, the plot, that #wrong is 0 with -c 1, and the errors users can make.
#include <cstdlib>
#include <map>
#include <sstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tests/tools/run_command.h"

namespace zrt::testing {
namespace {

std::string env_path(const char* name) {
  const char* value = std::getenv(name);
  return value != nullptr ? value : "";
}

CommandResult run_bench(int ranks, const std::vector<std::string>& args, int timeout_ms = 240000,
                        std::map<std::string, std::string> env = {}) {
  std::vector<std::string> argv = {
      env_path("ZRT_RUN_EXE"),  "-n", std::to_string(ranks), "--no-prefix", "--timeout", "200",
      env_path("ZRT_BENCH_EXE")};
  argv.insert(argv.end(), args.begin(), args.end());
  env.emplace("ZRT_TIMEOUT", "60");
  return run_command(argv, env, timeout_ms);
}

struct TableRow {
  uint64_t size = 0, count = 0;
  std::string type, redop;
  int root = 0;
  double time[2] = {0, 0}, algbw[2] = {0, 0}, busbw[2] = {0, 0};
  std::string wrong[2];
};

// Data lines of the table: everything not starting with '#'.
std::vector<TableRow> parse_table(const std::string& out) {
  std::vector<TableRow> rows;
  std::istringstream in(out);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream fields(line);
    TableRow r;
    fields >> r.size >> r.count >> r.type >> r.redop >> r.root;
    for (int p = 0; p < 2; ++p) fields >> r.time[p] >> r.algbw[p] >> r.busbw[p] >> r.wrong[p];
    if (fields) rows.push_back(r);
  }
  return rows;
}

class BenchMultirank : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_FALSE(env_path("ZRT_RUN_EXE").empty()) << "ZRT_RUN_EXE not set by meson";
    ASSERT_FALSE(env_path("ZRT_BENCH_EXE").empty()) << "ZRT_BENCH_EXE not set by meson";
    dir_ = make_temp_dir();
    ASSERT_FALSE(dir_.empty());
  }
  void TearDown() override {
    if (!dir_.empty()) std::system(("rm -rf '" + dir_ + "'").c_str());
  }
  std::string dir_;
};

TEST_F(BenchMultirank, AllCollectivesTwoRanksTableJsonPlot) {
  const std::string json_path = dir_ + "/bench.json", svg_path = dir_ + "/busbw.svg";
  CommandResult r = run_bench(2, {"all", "-b", "8", "-e", "256K", "-f", "4", "-n", "5", "-w", "2",
                                  "-c", "1", "--json", json_path, "--plot", svg_path});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  // nccl-tests' header and footer.
  for (const char* text :
       {"out-of-place", "in-place", "#wrong", "busbw", "(GB/s)", "Avg bus bandwidth",
        "# Collective: reduce_scatter", "# Collective: broadcast", "Using ranks"}) {
    EXPECT_NE(r.out.find(text), std::string::npos) << text << "\n" << r.out;
  }
  std::vector<TableRow> rows = parse_table(r.out);
  // 5 collectives × sizes 8, 32, 128, ..., 256K (8 sizes).
  ASSERT_EQ(rows.size(), 5u * 8) << r.out;
  for (const TableRow& row : rows) {
    for (int p = 0; p < 2; ++p) {
      EXPECT_EQ(row.wrong[p], "0") << "size " << row.size << "\n" << r.out;
      EXPECT_GT(row.time[p], 0);
    }
  }
  nlohmann::json j = nlohmann::json::parse(read_file(json_path));
  ASSERT_EQ(j["rows"].size(), rows.size());
  EXPECT_EQ(j["topology"]["ranks"], 2);
  EXPECT_EQ(j["settings"]["iters"], 5);
  EXPECT_EQ(j["wrong"], 0);
  for (const auto& row : j["rows"]) {
    const std::string coll = row["collective"];
    double factor = coll == "all_reduce"                      ? 1.0
                    : coll == "broadcast" || coll == "reduce" ? 1.0
                                                              : 0.5;
    // busbw = algbw × nccl-tests' factor; algbw = size / time.
    for (const char* p : {"out_of_place", "in_place"}) {
      double algbw = row[p]["algbw_gbs"], busbw = row[p]["busbw_gbs"], t = row[p]["time_us"];
      EXPECT_NEAR(busbw, algbw * factor, 1e-9 + 1e-9 * algbw) << coll;
      EXPECT_NEAR(algbw, row["size"].get<double>() / (t * 1e3), 1e-6 * algbw + 1e-12) << coll;
    }
    if (coll == "reduce_scatter" || coll == "all_gather") {
      EXPECT_EQ(row["size"].get<uint64_t>(), row["count"].get<uint64_t>() * 4 * 2) << coll;
    }
  }
  std::string svg = read_file(svg_path);
  EXPECT_NE(svg.find("<svg"), std::string::npos);
  EXPECT_NE(svg.find(">all_reduce</text>"), std::string::npos);
  EXPECT_NE(svg.find(">reduce_scatter</text>"), std::string::npos);
}

TEST_F(BenchMultirank, ThreeRanksTypesOpsAndRootChecked) {
  CommandResult r = run_bench(3, {"reduce_scatter",
                                  "all_gather",
                                  "reduce",
                                  "broadcast",
                                  "-b",
                                  "1K",
                                  "-e",
                                  "64K",
                                  "-f",
                                  "8",
                                  "-n",
                                  "3",
                                  "-w",
                                  "1",
                                  "-d",
                                  "bf16,int32",
                                  "-o",
                                  "sum,max",
                                  "-r",
                                  "2",
                                  "-z",
                                  "1",
                                  "-a",
                                  "3"});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  std::vector<TableRow> rows = parse_table(r.out);
  ASSERT_FALSE(rows.empty()) << r.out;
  for (const TableRow& row : rows) {
    EXPECT_EQ(row.wrong[0], "0") << r.out;
    EXPECT_EQ(row.wrong[1], "0") << r.out;
  }
  EXPECT_NE(r.out.find("bfloat16"), std::string::npos);
  EXPECT_NE(r.out.find("int32"), std::string::npos);
  EXPECT_NE(r.out.find("     2  "), std::string::npos) << "root column";
}

TEST_F(BenchMultirank, JsonToStdoutReplacesTheTable) {
  CommandResult r = run_bench(
      2, {"all_reduce", "-b", "1K", "-e", "4K", "-n", "2", "-w", "1", "-c", "0", "--json", "-"});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  nlohmann::json j = nlohmann::json::parse(r.out);  // nothing else on stdout
  ASSERT_EQ(j["rows"].size(), 3u);
  EXPECT_TRUE(j["rows"][0]["out_of_place"]["wrong"].is_null());  // -c 0: not checked
}

TEST_F(BenchMultirank, UncheckedRunSaysSoInsteadOfOk) {
  CommandResult r =
      run_bench(2, {"all_reduce", "-b", "1K", "-e", "4K", "-n", "2", "-w", "1", "-c", "0"});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("Out of bounds values : not checked (validation off: -c 0)"),
            std::string::npos)
      << r.out;
  EXPECT_EQ(r.out.find("Out of bounds values : 0 OK"), std::string::npos) << r.out;
}

// UCX writes its log to stdout: at info level, every rank's first lines (a warning at teardown
// otherwise, which broke the report in 3 of 13 multihost runs under load). They go to stderr.
TEST_F(BenchMultirank, JsonToStdoutStaysJsonWhileUcxLogs) {
  CommandResult r = run_bench(
      2, {"all_reduce", "-b", "8", "-e", "8", "-n", "2", "-w", "1", "-c", "1", "--json", "-"},
      240000, {{"UCX_LOG_LEVEL", "info"}});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.err.find("UCX  INFO"), std::string::npos) << "UCX logged nothing: " << r.err;
  nlohmann::json j = nlohmann::json::parse(r.out, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << "stdout is not the JSON report alone:\n" << r.out;
  EXPECT_EQ(j["rows"].size(), 1u);
}

TEST_F(BenchMultirank, UserErrorsExitNonZeroWithAMessage) {
  CommandResult r = run_bench(2, {"alreduce"});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("unknown collective 'alreduce'"), std::string::npos) << r.err;
  r = run_bench(2, {"broadcast", "-r", "5", "-e", "1K"});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("-r 5"), std::string::npos) << r.err;
  r = run_bench(2, {"all_reduce", "-b", "1Q"});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("-b"), std::string::npos) << r.err;
}

// zrt-run --bind: each rank runs on the CPUs of the binding plan and sees them in its
// environment.
TEST_F(BenchMultirank, ZrtRunBindAppliesThePlan) {
  CommandResult r =
      run_command({env_path("ZRT_RUN_EXE"), "-n", "2", "--bind", "--timeout", "60", "sh", "-c",
                   "echo \"cpus=$(grep Cpus_allowed_list /proc/self/status | "
                   "cut -f2) env=$ZRT_BIND_CPUS progress=$ZRT_PROGRESS_CPU\""},
                  {}, 90000);
#if !ZRT_TOOLS_TEST_HAVE_HWLOC
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("hwloc"), std::string::npos) << r.err;
  return;
#endif
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  std::istringstream in(r.out);
  std::string line;
  int seen = 0;
  while (std::getline(in, line)) {
    size_t cpus = line.find("cpus="), env = line.find(" env="), progress = line.find(" progress=");
    ASSERT_NE(cpus, std::string::npos) << line;
    std::string actual = line.substr(cpus + 5, env - cpus - 5);
    std::string planned = line.substr(env + 5, progress - env - 5);
    EXPECT_EQ(actual, planned) << line;
    EXPECT_FALSE(line.substr(progress + 10).empty()) << line;
    ++seen;
  }
  EXPECT_EQ(seen, 2) << r.out;
}

}  // namespace
}  // namespace zrt::testing
