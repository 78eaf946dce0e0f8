// zrt-tune without ranks: the profile parser (accepts, refuses with line and field, survives
// hostile input, round-trips), the presets, the search order on a known cost curve, and the
// config it writes as zrt_partition_config_load reads it.
#include <cmath>
#include <cstdio>
#include <fstream>
#include <random>
#include <set>

#include <gtest/gtest.h>

#include "tools/zrt-tune/presets.h"
#include "tools/zrt-tune/profile.h"
#include "tools/zrt-tune/report.h"
#include "tools/zrt-tune/search.h"
#include "tools/zrt-tune/tune_options.h"

namespace zrt::tune {
namespace {

const char* kGood = R"({
  "name": "two",
  "units": [
    {"name": "embed", "params": 1000, "forward_ms": 0.5, "backward_ms": 1.0},
    {"name": "block", "forward_ms": 2, "backward_ms": 4,
     "params": [{"name": "w", "numel": 4096}, {"name": "ln", "numel": 8, "frozen": true}]}
  ]
})";

Status parse(const std::string& text, Profile* p) {
  return parse_profile(text, "m.json", p);
}

TEST(TuneProfile, ParsesUnitsTensorsAndTimes) {
  Profile p;
  ASSERT_TRUE(parse(kGood, &p).is_ok());
  EXPECT_EQ(p.name, "two");
  ASSERT_EQ(p.units.size(), 2u);
  EXPECT_EQ(p.units[0].params.size(), 1u);
  EXPECT_EQ(p.units[0].params[0].name, "embed.weight");
  EXPECT_EQ(p.units[1].params[1].frozen, true);
  EXPECT_EQ(p.total_params(), 1000u + 4096 + 8);
  EXPECT_EQ(p.trainable_params(), 1000u + 4096);
  EXPECT_DOUBLE_EQ(p.compute_ms(), 7.5);
}

TEST(TuneProfile, RoundTripsThroughItsEncoder) {
  Profile p, q;
  ASSERT_TRUE(parse(kGood, &p).is_ok());
  Status s = parse(profile_to_json(p), &q);
  ASSERT_TRUE(s.is_ok()) << s.message();
  EXPECT_EQ(p, q);
}

struct BadCase {
  const char* text;
  const char* expect;  // must appear in the message
};

TEST(TuneProfile, RefusalsNameTheLineAndField) {
  const BadCase cases[] = {
      {"{\"units\": [\n {\"params\": 10, \"forward_ms\": 1,\n \"backward_ms\": \"x\"}]}",
       "m.json:3: units[0].backward_ms: expected a time"},
      {"{\"units\": [{\"params\": 10, \"forward_ms\": 1}]}", "missing \"backward_ms\""},
      {"{\"units\": [{\"params\": 0, \"forward_ms\": 1, \"backward_ms\": 1}]}",
       "units[0].params: a tensor needs at least one element"},
      {"{\"units\": [{\"params\": -5, \"forward_ms\": 1, \"backward_ms\": 1}]}",
       "units[0].params: expected a positive element count"},
      {"{\"units\": [{\"params\": 1.5, \"forward_ms\": 1, \"backward_ms\": 1}]}",
       "whole element count"},
      {"{\"units\": [{\"params\": 10, \"forward_ms\": -1, \"backward_ms\": 1}]}",
       "units[0].forward_ms: expected milliseconds"},
      {"{\"units\": [{\"params\": [], \"forward_ms\": 1, \"backward_ms\": 1}]}", "an empty list"},
      {"{\"units\": [{\"params\": [{\"numel\": 3, \"size\": 2}], \"forward_ms\": 1, "
       "\"backward_ms\": 1}]}",
       "units[0].params[0].size: unknown key"},
      {"{\"units\": []}", "units: expected a non-empty list"},
      {"{\"unit\": []}", "unknown key"},
      {"[1, 2]", "expected an object"},
      {"{\"units\": [\n{\"params\": 1,}]}", "m.json:2:"},  // syntax error: line and column
      {"", "not valid JSON"},
      {"{\"units\": [{\"params\": [{\"numel\": 5, \"frozen\": true}], \"forward_ms\": 1, "
       "\"backward_ms\": 1}]}",
       "every parameter is frozen"},
      {"{\"units\": [{\"params\": 2000000000000, \"forward_ms\": 1, \"backward_ms\": 1}]}",
       "at most 2^40"},
  };
  for (const BadCase& c : cases) {
    Profile p;
    Status s = parse(c.text, &p);
    EXPECT_EQ(s.code(), ZRT_INVALID_ARGUMENT) << c.text;
    EXPECT_NE(s.message().find(c.expect), std::string::npos) << c.text << "\n" << s.message();
  }
}

TEST(TuneProfile, DeepNestingIsRefusedBeforeParsing) {
  std::string deep(100000, '[');
  Profile p;
  Status s = parse(deep, &p);
  EXPECT_EQ(s.code(), ZRT_INVALID_ARGUMENT);
  EXPECT_NE(s.message().find("nesting deeper"), std::string::npos) << s.message();
  // Brackets inside strings do not count.
  std::string named = std::string("{\"name\": \"") + std::string(100, '[') +
                      "\", \"units\": [{\"params\": 3, \"forward_ms\": 0, \"backward_ms\": 0}]}";
  EXPECT_TRUE(parse(named, &p).is_ok());
}

// A deterministic stand-in for the fuzzer: random byte edits of a valid profile never crash,
// and whatever is accepted round-trips and stays within the limits.
TEST(TuneProfile, MutatedInputIsRefusedOrRoundTrips) {
  std::mt19937 rng(1234);
  const std::string base = kGood;
  const std::string alphabet = "{}[]\":,0123456789-.eE truefalsnul\\";
  int accepted = 0;
  for (int i = 0; i < 3000; ++i) {
    std::string text = base;
    const int edits = 1 + static_cast<int>(rng() % 4);
    for (int e = 0; e < edits && !text.empty(); ++e) {
      const size_t at = rng() % text.size();
      switch (rng() % 3) {
        case 0:
          text[at] = alphabet[rng() % alphabet.size()];
          break;
        case 1:
          text.erase(at, 1 + rng() % 3);
          break;
        default:
          text.insert(at, 1, alphabet[rng() % alphabet.size()]);
          break;
      }
    }
    Profile p;
    Status s = parse(text, &p);
    if (!s.is_ok()) {
      EXPECT_FALSE(s.message().empty());
      continue;
    }
    ++accepted;
    for (const ProfileUnit& u : p.units) {
      for (const ProfileTensor& t : u.params) {
        EXPECT_GT(t.numel, 0u);
        EXPECT_LE(t.numel, kMaxTensorNumel);
      }
      EXPECT_TRUE(std::isfinite(u.forward_ms) && u.forward_ms >= 0);
    }
    Profile q;
    ASSERT_TRUE(parse(profile_to_json(p), &q).is_ok()) << text;
    EXPECT_EQ(p, q) << text;
  }
  EXPECT_GT(accepted, 0);
}

TEST(TuneProfile, MissingFileIsASystemErrorNamingIt) {
  Profile p;
  Status s = load_profile("/nonexistent/model.json", &p);
  EXPECT_EQ(s.code(), ZRT_SYSTEM_ERROR);
  EXPECT_NE(s.message().find("/nonexistent/model.json"), std::string::npos);
}

TEST(TunePresets, ShapesMatchGpt2AndTimesFollowFlops) {
  Profile p;
  ASSERT_TRUE(make_preset("gpt2-small", 1024, 100, &p).is_ok());
  // GPT-2 small: 124 M parameters (tied output projection).
  EXPECT_NEAR(static_cast<double>(p.total_params()), 124.44e6, 0.01e6);
  EXPECT_EQ(p.units.size(), 14u);
  // Backward is twice forward; forward is about 2 x params x tokens / rate.
  EXPECT_DOUBLE_EQ(p.units[1].backward_ms, 2 * p.units[1].forward_ms);
  const double fwd = p.compute_ms() / 3;
  EXPECT_NEAR(fwd, 2.0 * 124.44e6 * 1024 / 100e12 * 1e3, 0.15 * fwd);
  Profile tiny;
  ASSERT_TRUE(make_preset("gpt2-tiny", 0, 0, &tiny).is_ok());
  EXPECT_LT(tiny.total_params() * 4, 10u << 20);  // a few MB, for tests
  Status s = make_preset("gpt3", 0, 0, &p);
  EXPECT_EQ(s.code(), ZRT_INVALID_ARGUMENT);
  EXPECT_NE(s.message().find("gpt2-tiny"), std::string::npos) << s.message();
}

// A cost curve with one valley at 2 MiB: latency per bucket plus an exposed tail that grows
// with the bucket.
double bucket_cost(size_t bytes) {
  const double grads = 64.0 * (1 << 20);
  const double b = static_cast<double>(bytes);
  return 40.0 + std::ceil(grads / b) * 0.1 + b / (1 << 20) * 3.2;
}

TEST(TuneSearch, RefinesAroundTheCoarseBestAndConfirms) {
  SearchSpace space;
  space.stage = 2;
  space.grad_bytes = uint64_t{64} << 20;
  space.base_prefetch_depth = 1;
  Candidate bad;
  bad.bucket_bytes = 4096;
  bad.prefetch_depth = 1;
  bad.origin = "extra";
  space.extras.push_back(bad);
  std::vector<size_t> order;
  int confirms = 0;
  SearchResult r;
  Status s = run_search(
      space,
      [&](const Candidate& c, bool confirm, Measurement* m) {
        if (confirm)
          ++confirms;
        else
          order.push_back(c.bucket_bytes);
        m->step_ms = bucket_cost(c.bucket_bytes);
        m->memory_bytes = static_cast<double>(c.bucket_bytes) * 2;
        return Status::ok();
      },
      nullptr, &r);
  ASSERT_TRUE(s.is_ok()) << s.message();
  EXPECT_EQ(order.front(), 4096u);  // extras first
  EXPECT_EQ(confirms, 3);
  std::set<size_t> unique(order.begin(), order.end());
  EXPECT_EQ(unique.size(), order.size()) << "a setting was measured twice";
  EXPECT_LE(order.size(), 12u) << "not a blind grid";
  ASSERT_GE(r.best, 0);
  // The true minimum of the curve is sqrt(64 MiB * 0.1 / 3.2 MiB-ms) ~ 1.4 MiB.
  const size_t best = r.trials[r.best].candidate.bucket_bytes;
  EXPECT_GE(best, size_t{1} << 20);
  EXPECT_LE(best, size_t{2} << 20);
  EXPECT_GT(r.trials[r.best].confirm_ms, 0);
}

TEST(TuneSearch, SkipsLargerSettingsOnceOneIsOverTheCap) {
  SearchSpace space;
  space.stage = 3;
  space.units = 20;
  space.typical_unit_bytes = 1 << 20;
  int measured = 0;
  SearchResult r;
  Status s = run_search(
      space,
      [&](const Candidate& c, bool, Measurement* m) {
        ++measured;
        m->memory_bytes = 10.0 + c.prefetch_depth;
        m->fits = m->memory_bytes <= 12.5;  // depths 0..2 fit
        m->step_ms = m->fits ? 100.0 - 10 * c.prefetch_depth : 0;
        return Status::ok();
      },
      nullptr, &r);
  ASSERT_TRUE(s.is_ok());
  ASSERT_GE(r.best, 0);
  EXPECT_EQ(r.trials[r.best].candidate.prefetch_depth, 2);
  int skipped = 0;
  for (const Trial& t : r.trials) {
    if (t.sweep.skipped) {
      ++skipped;
      EXPECT_GT(t.candidate.prefetch_depth, 4);
    }
  }
  EXPECT_GE(skipped, 3);  // 8, 16, 19 never allocated
  EXPECT_EQ(coarse_depths(20), (std::vector<int>{0, 1, 2, 4, 8, 16, 19}));
  EXPECT_EQ(coarse_depths(1), (std::vector<int>{0}));
}

TEST(TuneSearch, NothingFitsGivesNoRecommendation) {
  SearchSpace space;
  space.stage = 2;
  space.grad_bytes = 1 << 20;
  SearchResult r;
  ASSERT_TRUE(run_search(
                  space,
                  [](const Candidate&, bool, Measurement* m) {
                    m->fits = false;
                    return Status::ok();
                  },
                  nullptr, &r)
                  .is_ok());
  EXPECT_EQ(r.best, -1);
}

TEST(TuneReport, ConfigLoadsIntoAPartitionConfig) {
  RunSettings settings;
  settings.stage = 3;
  settings.param_dtype = ZRT_BF16;
  settings.reduce_dtype = ZRT_F32;
  settings.optimizer_slots = 1;
  Candidate c;
  c.bucket_bytes = 3 << 20;
  c.prefetch_depth = 3;
  c.prefetch_bytes = 5 << 20;
  const std::string path = ::testing::TempDir() + "/tune_config.json";
  {
    std::ofstream out(path);
    out << config_json(settings, c).dump(2);
  }
  zrt_partition_config_t config = ZRT_PARTITION_CONFIG_INIT;
  ASSERT_EQ(zrt_partition_config_load(path.c_str(), &config), ZRT_SUCCESS) << zrt_last_error();
  EXPECT_EQ(config.stage, 3);
  EXPECT_EQ(config.param_dtype, ZRT_BF16);
  EXPECT_EQ(config.reduce_dtype, ZRT_F32);
  EXPECT_EQ(config.optimizer_slots, 1);
  EXPECT_EQ(config.bucket_bytes, size_t{3} << 20);
  EXPECT_EQ(config.prefetch_depth, 3);
  EXPECT_EQ(config.prefetch_bytes, size_t{5} << 20);
  std::remove(path.c_str());
}

Status parse_args(std::vector<std::string> args, TuneOptions* options) {
  args.insert(args.begin(), "zrt-tune");
  std::vector<const char*> argv;
  for (const std::string& a : args) argv.push_back(a.c_str());
  return parse_tune_command(static_cast<int>(argv.size()), argv.data(), options);
}

TEST(TuneOptions, ErrorsSayWhatToFix) {
  const std::pair<std::vector<std::string>, const char*> cases[] = {
      {{"--preset", "gpt2-tiny", "--mem-cap", "12 parsecs"}, "--mem-cap"},
      {{"--preset", "gpt2-tiny", "--include-bucket", "4QB"}, "--include-bucket"},
      {{}, "give exactly one model"},
      {{"--preset", "gpt2-tiny", "--profile", "x.json"}, "give exactly one model"},
      {{"--preset", "gpt2-tiny", "--dtype", "f8"}, "--dtype: unknown data type 'f8'"},
      {{"--preset", "gpt2-tiny", "--stage", "3", "--include-bucket", "1M"}, "stage 3"},
      {{"--preset", "gpt2-tiny", "--stage", "2", "--include-depth", "2"}, "stage 3"},
      {{"--preset", "gpt2-tiny", "--stage", "5"}, "--stage"},
      {{"--profile", "/nonexistent.json"}, "/nonexistent.json"},
  };
  for (const auto& [args, expect] : cases) {
    TuneOptions options;
    Status s = parse_args(args, &options);
    EXPECT_FALSE(s.is_ok());
    EXPECT_NE(s.message().find(expect), std::string::npos) << s.message();
  }
  TuneOptions options;
  ASSERT_TRUE(parse_args({"--preset", "gpt2-tiny", "--stage", "2", "--dtype", "bf16",
                          "--include-bucket", "4KiB", "--mem-cap", "1.5GiB"},
                         &options)
                  .is_ok());
  EXPECT_EQ(options.settings.param_dtype, ZRT_BF16);
  EXPECT_EQ(options.settings.reduce_dtype, ZRT_BF16);
  EXPECT_EQ(options.extra_buckets, std::vector<size_t>{4096});
  EXPECT_DOUBLE_EQ(options.settings.mem_cap, 1.5 * (1 << 30));
}

}  // namespace
}  // namespace zrt::tune
