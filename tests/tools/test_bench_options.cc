#include <gtest/gtest.h>

#include "tools/zrt-bench/bench_options.h"

namespace zrt::bench {
namespace {

Status parse(std::vector<std::string> args, BenchOptions* options, ParseResult* result) {
  args.insert(args.begin(), "zrt-bench");
  std::vector<const char*> argv;
  for (const std::string& a : args) argv.push_back(a.c_str());
  return parse_bench_options(static_cast<int>(argv.size()), argv.data(), options, result);
}

TEST(BenchOptions, NcclTestsFlags) {
  BenchOptions o;
  ParseResult r;
  Status s = parse(
      {"all_reduce", "-b",   "8",  "-e",  "128M", "-f", "4",  "-n", "50", "-w", "3",  "-c",  "0",
       "-d",         "bf16", "-o", "max", "-r",   "1",  "-z", "1",  "-a", "3",  "-m", "host"},
      &o, &r);
  ASSERT_TRUE(s.is_ok()) << s.message();
  EXPECT_FALSE(r.show_help);
  EXPECT_EQ(o.collectives, std::vector<Coll>{Coll::kAllReduce});
  EXPECT_EQ(o.min_bytes, 8u);
  EXPECT_EQ(o.max_bytes, 128u << 20);
  EXPECT_EQ(o.step_factor, 4.0);
  EXPECT_EQ(o.iters, 50);
  EXPECT_EQ(o.warmup, 3);
  EXPECT_FALSE(o.check);
  EXPECT_EQ(o.dtypes, std::vector<zrt_dtype_t>{ZRT_BF16});
  EXPECT_EQ(o.ops, std::vector<zrt_op_t>{ZRT_MAX});
  EXPECT_EQ(o.root, 1);
  EXPECT_TRUE(o.blocking);
  EXPECT_EQ(o.average, Average::kMax);
  EXPECT_EQ(o.mem_kind, ZRT_MEM_HOST);
}

TEST(BenchOptions, DefaultsAndAll) {
  BenchOptions o;
  ParseResult r;
  ASSERT_TRUE(parse({"all", "--json", "out.json", "--plot", "bw.svg"}, &o, &r).is_ok());
  EXPECT_EQ(o.collectives.size(), 5u);
  EXPECT_EQ(o.collectives.front(), Coll::kReduceScatter);
  EXPECT_TRUE(o.check);
  EXPECT_EQ(o.json_path, "out.json");
  EXPECT_EQ(o.plot_path, "bw.svg");
  EXPECT_EQ(o.dtypes, std::vector<zrt_dtype_t>{ZRT_F32});
  ASSERT_TRUE(
      parse({"allreduce", "all-gather", "bcast", "-d", "all", "-o", "all"}, &o, &r).is_ok());
  EXPECT_EQ(o.collectives,
            (std::vector<Coll>{Coll::kAllReduce, Coll::kAllGather, Coll::kBroadcast}));
  EXPECT_EQ(o.dtypes.size(), 8u);
  EXPECT_EQ(o.ops.size(), 5u);
  ASSERT_TRUE(parse({"reduce", "-d", "half,float", "-o", "sum,min", "-m", "cuda"}, &o, &r).is_ok());
  EXPECT_EQ(o.dtypes, (std::vector<zrt_dtype_t>{ZRT_F16, ZRT_F32}));
  EXPECT_EQ(o.ops, (std::vector<zrt_op_t>{ZRT_SUM, ZRT_MIN}));
  EXPECT_EQ(o.mem_kind, ZRT_MEM_CUDA);
}

TEST(BenchOptions, HelpHasExamples) {
  BenchOptions o;
  ParseResult r;
  ASSERT_TRUE(parse({"--help"}, &o, &r).is_ok());
  EXPECT_TRUE(r.show_help);
  EXPECT_NE(r.text.find("Examples"), std::string::npos);
  EXPECT_NE(r.text.find("zrt-run -n 2 zrt-bench all_reduce"), std::string::npos);
  EXPECT_NE(r.text.find("Exit codes"), std::string::npos);
}

struct BadCase {
  std::vector<std::string> args;
  const char* must_mention;
};

TEST(BenchOptions, ErrorsSayWhatToFix) {
  const BadCase cases[] = {
      {{"alreduce"}, "unknown collective 'alreduce'"},
      {{"all_reduce", "-b", "12Q"}, "-b"},
      {{"all_reduce", "-e", "1x"}, "unknown unit"},
      {{"all_reduce", "-b", "1M", "-e", "1K"}, "smaller than -b"},
      {{"all_reduce", "-f", "1"}, "-f must be more than 1"},
      {{"all_reduce", "-f", "2", "-i", "1M"}, "excludes"},
      {{"all_reduce", "-d", "float8"}, "unknown data type 'float8'"},
      {{"all_reduce", "-o", "xor"}, "unknown reduction 'xor'"},
      {{"all_reduce", "-m", "tpu"}, "unknown memory kind 'tpu'"},
      {{"all_reduce", "-c", "2"}, "-c"},
      {{}, "collective"},
      {{"all_reduce", "--frobnicate"}, "frobnicate"},
  };
  for (const BadCase& c : cases) {
    BenchOptions o;
    ParseResult r;
    Status s = parse(c.args, &o, &r);
    EXPECT_EQ(s.code(), ZRT_INVALID_ARGUMENT) << c.must_mention;
    EXPECT_NE(s.message().find(c.must_mention), std::string::npos)
        << "message: " << s.message() << "\nexpected to mention: " << c.must_mention;
  }
}

TEST(BenchOptions, SweepSizes) {
  BenchOptions o;
  o.min_bytes = 8;
  o.max_bytes = 64;
  o.step_factor = 2;
  EXPECT_EQ(sweep_sizes(o), (std::vector<uint64_t>{8, 16, 32, 64}));
  o.step_bytes = 20;
  EXPECT_EQ(sweep_sizes(o), (std::vector<uint64_t>{8, 28, 48}));
  o.step_bytes = 0;
  o.min_bytes = 0;
  o.max_bytes = 4;
  EXPECT_EQ(sweep_sizes(o), (std::vector<uint64_t>{0, 1, 2, 4}));
}

}  // namespace
}  // namespace zrt::bench
