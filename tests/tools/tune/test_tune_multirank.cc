// zrt-tune under zrt-run on real ranks talking over UCX. Timing checks use margins far beyond
// this machine's noise: a 4 KiB bucket costs thousands of collectives per step, several times
// the step of a sensible bucket; the rerun of a recommendation must land in the same range.
#include <cstdlib>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tests/tools/run_command.h"
#include "zrt/zrt.h"

namespace zrt::testing {
namespace {

std::string env_path(const char* name) {
  const char* value = std::getenv(name);
  return value != nullptr ? value : "";
}

CommandResult run_tune(int ranks, const std::vector<std::string>& args) {
  std::vector<std::string> argv = {env_path("ZRT_RUN_EXE"), "-n",        std::to_string(ranks),
                                   "--no-prefix",           "--timeout", "250",
                                   env_path("ZRT_TUNE_EXE")};
  argv.insert(argv.end(), args.begin(), args.end());
  return run_command(argv, {{"ZRT_TIMEOUT", "60"}}, 280000);
}

class TuneMultirank : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_FALSE(env_path("ZRT_RUN_EXE").empty()) << "ZRT_RUN_EXE not set by meson";
    ASSERT_FALSE(env_path("ZRT_TUNE_EXE").empty()) << "ZRT_TUNE_EXE not set by meson";
    dir_ = make_temp_dir();
    ASSERT_FALSE(dir_.empty());
  }
  void TearDown() override {
    if (!dir_.empty()) std::system(("rm -rf '" + dir_ + "'").c_str());
  }
  std::string dir_;
};

TEST_F(TuneMultirank, StageTwoBeatsTinyBucketsAndRerunAgrees) {
  const std::string config = dir_ + "/zrt.json", report = dir_ + "/report.json";
  // 1 KiB buckets: a step of 4 KiB ones took 1.3-1.5x the best since small reduce-scatters run
  // inline and one-shot (down from 2-3.6x), which this machine's noise can cross; 1 KiB: 2.9x
  // there, 1.39-1.44x on a machine of the same shape whose small collectives are faster (its
  // 256-byte buckets too: the compute, ~50 ms, is most of every step).
  CommandResult r = run_tune(2, {"--preset", "gpt2-tiny", "--stage", "2", "--include-bucket",
                                 "1KiB", "-o", config, "--report", report});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("<- recommended"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("exposed ms"), std::string::npos) << r.out;

  zrt_partition_config_t loaded = ZRT_PARTITION_CONFIG_INIT;
  ASSERT_EQ(zrt_partition_config_load(config.c_str(), &loaded), ZRT_SUCCESS) << zrt_last_error();
  EXPECT_EQ(loaded.stage, 2);

  const nlohmann::json rep = nlohmann::json::parse(read_file(report));
  const int best = rep["recommended"].get<int>();
  ASSERT_GE(best, 0);
  const nlohmann::json& trials = rep["trials"];
  const double best_ms = rep["recommended_step_ms"].get<double>();
  EXPECT_EQ(trials[best]["bucket_bytes"].get<size_t>(), loaded.bucket_bytes);
  EXPECT_NE(loaded.bucket_bytes, 1024u);
  // The tiny bucket was measured first, in the same run, on the same ranks.
  ASSERT_EQ(trials[0]["bucket_bytes"].get<size_t>(), 1024u);
  const double tiny_ms = trials[0]["step_ms"].get<double>();
  EXPECT_GT(tiny_ms, 1.2 * best_ms) << r.out;
  // Every step carries the compute; none can beat it.
  EXPECT_GE(best_ms, 0.95 * rep["compute_ms"].get<double>());
  // Not a grid: a handful of candidates.
  EXPECT_LE(trials.size(), 14u);

  // Rerunning the recommended setting gives the reported step time, within noise.
  const std::string again = dir_ + "/again.json";
  r = run_tune(2, {"--preset", "gpt2-tiny", "--measure", config, "--report", again});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  const double rerun_ms = nlohmann::json::parse(read_file(again))["step_ms"].get<double>();
  EXPECT_GT(rerun_ms, best_ms / 1.5) << r.out;
  EXPECT_LT(rerun_ms, best_ms * 1.5) << r.out;
  EXPECT_LT(rerun_ms, tiny_ms) << r.out;
}

TEST_F(TuneMultirank, StageThreeHonoursTheMemoryCap) {
  const std::string config = dir_ + "/zrt3.json", report = dir_ + "/report3.json";
  CommandResult r = run_tune(2, {"--preset", "gpt2-tiny", "--stage", "3", "--mem-cap", "61MiB",
                                 "-o", config, "--report", report});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  zrt_partition_config_t loaded = ZRT_PARTITION_CONFIG_INIT;
  ASSERT_EQ(zrt_partition_config_load(config.c_str(), &loaded), ZRT_SUCCESS) << zrt_last_error();
  EXPECT_EQ(loaded.stage, 3);
  const nlohmann::json rep = nlohmann::json::parse(read_file(report));
  const nlohmann::json& trials = rep["trials"];
  const int best = rep["recommended"].get<int>();
  ASSERT_GE(best, 0);
  EXPECT_LE(trials[best]["memory_bytes"].get<double>(), 61.0 * (1 << 20));
  EXPECT_EQ(trials[best]["prefetch_depth"].get<int>(), loaded.prefetch_depth);
  bool over_cap_seen = false;
  for (const auto& t : trials) {
    if (!t["fits"].get<bool>()) over_cap_seen = true;
    // Deeper prefetching holds more gather window.
    if (t["fits"].get<bool>()) {
      EXPECT_LE(t["memory_bytes"].get<double>(), 61.0 * (1 << 20));
    }
  }
  EXPECT_TRUE(over_cap_seen) << r.out;  // depth 5: 71 MiB at 2 ranks (10.6 of it step backup)
}

TEST_F(TuneMultirank, NothingFitsExitsThree) {
  CommandResult r = run_tune(2, {"--preset", "gpt2-tiny", "--stage", "2", "--mem-cap", "1MiB", "-o",
                                 dir_ + "/never.json"});
  EXPECT_EQ(r.exit_code, 3) << r.out << r.err;
  EXPECT_NE(r.err.find("--mem-cap"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace zrt::testing
