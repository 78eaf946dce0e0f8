#include <gtest/gtest.h>

#include "tools/zrt-bench/bench_data.h"
#include "tools/zrt-bench/bench_report.h"

namespace zrt::bench {
namespace {

TEST(BenchReport, BusBandwidthFactorsAreNcclTests) {
  EXPECT_DOUBLE_EQ(busbw_factor(Coll::kReduceScatter, 4), 0.75);
  EXPECT_DOUBLE_EQ(busbw_factor(Coll::kAllGather, 4), 0.75);
  EXPECT_DOUBLE_EQ(busbw_factor(Coll::kAllReduce, 4), 1.5);
  EXPECT_DOUBLE_EQ(busbw_factor(Coll::kBroadcast, 4), 1.0);
  EXPECT_DOUBLE_EQ(busbw_factor(Coll::kReduce, 4), 1.0);
  EXPECT_DOUBLE_EQ(busbw_factor(Coll::kAllReduce, 1), 0.0);
}

TEST(BenchReport, SizeIsTheFullBufferForScatterAndGather) {
  CollShape rs = coll_shape(Coll::kReduceScatter, 1 << 20, ZRT_F32, 4);
  EXPECT_EQ(rs.count, (1u << 20) / 4 / 4);  // per-rank recvcount
  EXPECT_EQ(rs.bytes, 1u << 20);
  CollShape ar = coll_shape(Coll::kAllReduce, 1 << 20, ZRT_F32, 4);
  EXPECT_EQ(ar.count, (1u << 20) / 4);
  // 8 bytes of f32 over 3 ranks: at least one element per rank.
  CollShape tiny = coll_shape(Coll::kAllGather, 8, ZRT_F32, 3);
  EXPECT_EQ(tiny.count, 1u);
  EXPECT_EQ(tiny.bytes, 12u);
  // Rounds down to whole elements.
  EXPECT_EQ(coll_shape(Coll::kAllReduce, 10, ZRT_F64, 2).bytes, 8u);
}

TEST(BenchReport, MeasureComputesAlgAndBusBandwidth) {
  // 1 GB in 1e6 µs = 1 GB/s algbw; all_reduce at N = 2 doubles it.
  Measure m = make_measure(Coll::kAllReduce, 1000000000, 2, 1e6, 0);
  EXPECT_DOUBLE_EQ(m.algbw_gbs, 1.0);
  EXPECT_DOUBLE_EQ(m.busbw_gbs, 1.0);
  m = make_measure(Coll::kAllReduce, 1000000000, 4, 5e5, 0);
  EXPECT_DOUBLE_EQ(m.algbw_gbs, 2.0);
  EXPECT_DOUBLE_EQ(m.busbw_gbs, 3.0);
}

BenchRow sample_row(Coll coll, uint64_t bytes, double busbw, int64_t wrong) {
  BenchRow row;
  row.coll = coll;
  row.bytes = bytes;
  row.count = bytes / 4;
  row.out_of_place = {10.5, busbw, busbw, wrong};
  row.in_place = {10.25, busbw, busbw, wrong};
  return row;
}

TEST(BenchReport, RowMatchesNcclTestsColumns) {
  BenchRow row = sample_row(Coll::kAllGather, 1048576, 1.5, 0);
  row.count = 131072;
  // all_gather has no redop and no root: "none" and -1.
  EXPECT_EQ(format_row(row),
            "     1048576        131072     float    none      -1    10.50    1.50    1.50      0"
            "    10.25    1.50    1.50      0\n");
  row = sample_row(Coll::kBroadcast, 8, 0.0, -1);
  row.root = 1;
  std::string line = format_row(row);
  EXPECT_NE(line.find("     1  "), std::string::npos) << line;  // root column
  EXPECT_NE(line.find("N/A"), std::string::npos) << line;
  // Long times keep the 7-character column (fewer decimals).
  row.out_of_place.time_us = 130976.54;
  EXPECT_NE(format_row(row).find("   130977    "), std::string::npos) << format_row(row);
  std::string header = format_table_header();
  for (const char* column : {"size", "count", "type", "redop", "root", "time", "algbw", "busbw",
                             "#wrong", "out-of-place", "in-place"}) {
    EXPECT_NE(header.find(column), std::string::npos) << column;
  }
}

TEST(BenchReport, AverageAndWrongTotals) {
  std::vector<BenchRow> rows = {sample_row(Coll::kAllReduce, 8, 1.0, 0),
                                sample_row(Coll::kAllReduce, 16, 3.0, 2)};
  EXPECT_DOUBLE_EQ(average_busbw(rows), 2.0);
  EXPECT_EQ(total_wrong(rows), 4);
  rows = {sample_row(Coll::kAllReduce, 8, 1.0, -1)};
  EXPECT_EQ(total_wrong(rows), -1);
}

TEST(BenchReport, JsonRecordsRowsSettingsAndTopology) {
  BenchOptions options;
  options.collectives = {Coll::kReduceScatter, Coll::kAllReduce};
  RunInfo info;
  info.ranks = 2;
  info.local_ranks = 2;
  info.hostname = "vm";
  std::vector<BenchRow> rows = {sample_row(Coll::kReduceScatter, 8, 1.0, 0),
                                sample_row(Coll::kAllReduce, 8, 3.0, 0)};
  nlohmann::json j = rows_to_json(options, info, rows);
  EXPECT_EQ(j["tool"], "zrt-bench");
  EXPECT_EQ(j["settings"]["collectives"][0], "reduce_scatter");
  EXPECT_EQ(j["settings"]["iters"], 20);
  EXPECT_EQ(j["topology"]["ranks"], 2);
  ASSERT_EQ(j["rows"].size(), 2u);
  EXPECT_EQ(j["rows"][1]["collective"], "all_reduce");
  EXPECT_EQ(j["rows"][1]["redop"], "sum");
  EXPECT_EQ(j["rows"][0]["in_place"]["wrong"], 0);
  EXPECT_DOUBLE_EQ(j["avg_busbw_gbs"]["all_reduce"].get<double>(), 3.0);
  EXPECT_DOUBLE_EQ(j["avg_busbw_gbs"]["all"].get<double>(), 2.0);
  EXPECT_EQ(j["wrong"], 0);
}

TEST(BenchReport, PlotHasOneLinePerCollective) {
  std::vector<BenchRow> rows = {
      sample_row(Coll::kReduceScatter, 8, 1.0, 0), sample_row(Coll::kReduceScatter, 1024, 2.0, 0),
      sample_row(Coll::kAllGather, 8, 1.5, 0), sample_row(Coll::kAllGather, 1024, 2.5, 0)};
  std::string svg;
  ASSERT_TRUE(render_busbw_plot(rows, 2, &svg).is_ok());
  EXPECT_NE(svg.find(">reduce_scatter</text>"), std::string::npos);
  EXPECT_NE(svg.find(">all_gather</text>"), std::string::npos);
  EXPECT_NE(svg.find("bus bandwidth (GB/s)"), std::string::npos);
  EXPECT_NE(svg.find("log scale"), std::string::npos);
  EXPECT_NE(svg.find(">1KiB</text>"), std::string::npos);
}

// The checker must accept a correct result and count exactly the corrupted elements.
TEST(BenchData, CheckerAcceptsTruthAndCountsCorruption) {
  const int ranks = 3;
  for (zrt_dtype_t dtype :
       {ZRT_F32, ZRT_F64, ZRT_F16, ZRT_BF16, ZRT_I8, ZRT_U8, ZRT_I32, ZRT_I64}) {
    for (zrt_op_t op : {ZRT_SUM, ZRT_PROD, ZRT_MIN, ZRT_MAX, ZRT_AVG}) {
      if (op == ZRT_AVG && !dtype_is_float(dtype)) continue;
      const uint64_t count = 37;
      // all_reduce's expected result, computed here by a serial reference over the ranks' inputs.
      std::vector<char> result(count * dtype_bytes(dtype));
      for (uint64_t i = 0; i < count; ++i) {
        double acc = input_value(dtype, op, 0, i);
        for (int r = 1; r < ranks; ++r) {
          double v = input_value(dtype, op, r, i);
          acc = op == ZRT_PROD  ? acc * v
                : op == ZRT_MIN ? std::min(acc, v)
                : op == ZRT_MAX ? std::max(acc, v)
                                : acc + v;
        }
        if (op == ZRT_AVG) acc /= ranks;
        store_value(dtype, acc, result.data(), i);
      }
      EXPECT_EQ(count_wrong(Coll::kAllReduce, dtype, op, 1, ranks, 0, count, result.data()), 0)
          << dtype_display_name(dtype) << " " << op_display_name(op);
      store_value(dtype, 97, result.data(), 5);
      store_value(dtype, 97, result.data(), 30);
      EXPECT_EQ(count_wrong(Coll::kAllReduce, dtype, op, 1, ranks, 0, count, result.data()), 2)
          << dtype_display_name(dtype) << " " << op_display_name(op);
    }
  }
}

TEST(BenchData, GatherScatterBroadcastExpectations) {
  const int ranks = 4;
  const uint64_t count = 5;
  std::vector<float> gathered(ranks * count);
  for (int r = 0; r < ranks; ++r) fill_input(ZRT_F32, ZRT_SUM, r, 0, count, &gathered[r * count]);
  EXPECT_EQ(count_wrong(Coll::kAllGather, ZRT_F32, ZRT_SUM, 2, ranks, 0, count, gathered.data()),
            0);
  std::swap(gathered[0], gathered[count]);  // rank 0's and rank 1's first elements swapped
  EXPECT_EQ(count_wrong(Coll::kAllGather, ZRT_F32, ZRT_SUM, 2, ranks, 0, count, gathered.data()),
            2);

  std::vector<float> bcast(count);
  fill_input(ZRT_F32, ZRT_SUM, 3, 0, count, bcast.data());
  EXPECT_EQ(count_wrong(Coll::kBroadcast, ZRT_F32, ZRT_SUM, 1, ranks, 3, count, bcast.data()), 0);
  EXPECT_GT(count_wrong(Coll::kBroadcast, ZRT_F32, ZRT_SUM, 1, ranks, 2, count, bcast.data()), 0);

  // reduce_scatter: rank 1 holds elements [count, 2 count) of the sum.
  std::vector<float> shard(count);
  for (uint64_t i = 0; i < count; ++i) {
    double sum = 0;
    for (int r = 0; r < ranks; ++r) sum += input_value(ZRT_F32, ZRT_SUM, r, count + i);
    shard[i] = static_cast<float>(sum);
  }
  EXPECT_EQ(count_wrong(Coll::kReduceScatter, ZRT_F32, ZRT_SUM, 1, ranks, 0, count, shard.data()),
            0);
  EXPECT_GT(count_wrong(Coll::kReduceScatter, ZRT_F32, ZRT_SUM, 2, ranks, 0, count, shard.data()),
            0);
  // reduce: non-root ranks have nothing to check.
  EXPECT_EQ(count_wrong(Coll::kReduce, ZRT_F32, ZRT_SUM, 1, ranks, 0, count, shard.data()), 0);
}

TEST(BenchData, HalfConversionsRoundTripSmallIntegers) {
  uint16_t h = 0;
  for (double v : {-5.0, -1.0, 0.0, 1.0, 2.0, 97.0, 2048.0, 0.5}) {
    store_value(ZRT_F16, v, &h, 0);
    EXPECT_EQ(load_value(ZRT_F16, &h, 0), v);
    store_value(ZRT_BF16, v, &h, 0);
    EXPECT_EQ(load_value(ZRT_BF16, &h, 0), v);
  }
  store_value(ZRT_F16, 1.0 / 3, &h, 0);
  EXPECT_NEAR(load_value(ZRT_F16, &h, 0), 1.0 / 3, 1e-3);
}

}  // namespace
}  // namespace zrt::bench
