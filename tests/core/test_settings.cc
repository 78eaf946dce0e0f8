// The settings registry: every type's parsing, the message for a value a setting does not
// accept, the defaults, and loading a whole environment (from a map, not the process's).
#include <gtest/gtest.h>

#include <map>
#include <set>
#include <string>

#include "lib/core/settings.h"
#include "engine/engine.h"
#include "engine/stream_resources.h"

namespace zrt {
namespace {

SettingSpec spec_of(SettingType type) {
  return SettingSpec{.id = SettingId::kLog,
                     .name = "ZRT_X",
                     .type = type,
                     .default_value = "1",
                     .doc = "doc",
                     .accepts = "alpha|beta",
                     .min = 2,
                     .max = 64};
}

SettingValue parse_ok(const SettingSpec& spec, const char* text) {
  SettingValue value;
  const Status status = parse_setting(spec, text, &value);
  EXPECT_TRUE(status.is_ok()) << text << ": " << status.message();
  return value;
}

std::string parse_error(const SettingSpec& spec, const char* text) {
  SettingValue value;
  value.text = "untouched";
  const Status status = parse_setting(spec, text, &value);
  EXPECT_EQ(status.code(), ZRT_INVALID_ARGUMENT) << text;
  EXPECT_EQ(value.text, "untouched") << text;
  return status.message();
}

TEST(Settings, Bool) {
  const SettingSpec spec = spec_of(SettingType::kBool);
  EXPECT_EQ(parse_ok(spec, "0").integer, 0);
  EXPECT_EQ(parse_ok(spec, "1").integer, 1);
  for (const char* bad : {"yes", "true", "2", " 1", "01"}) {
    EXPECT_EQ(parse_error(spec, bad), fmt::format("ZRT_X='{}' is not 0 or 1", bad));
  }
}

TEST(Settings, Int) {
  SettingSpec spec = spec_of(SettingType::kInt);
  spec.default_value = "8";
  EXPECT_EQ(parse_ok(spec, "2").integer, 2);
  EXPECT_EQ(parse_ok(spec, "64").integer, 64);
  EXPECT_EQ(parse_ok(spec, "+8").integer, 8);  // strtoll's reading, as before the registry
  for (const char* bad : {"1", "65", "-3", "8x", "x", "99999999999999999999"}) {
    EXPECT_EQ(parse_error(spec, bad), fmt::format("ZRT_X='{}' is not an integer in [2, 64]", bad));
  }
  spec.multiple_of = 4;
  EXPECT_EQ(parse_ok(spec, "12").integer, 12);
  EXPECT_EQ(parse_error(spec, "10"), "ZRT_X='10' is not a multiple of 4 in [2, 64]");
}

TEST(Settings, Seconds) {
  SettingSpec spec = spec_of(SettingType::kSeconds);
  spec.default_value = "60";
  EXPECT_EQ(parse_ok(spec, "2.5").integer, 2500);
  EXPECT_EQ(parse_ok(spec, "60").integer, 60000);
  EXPECT_EQ(parse_ok(spec, "0.0001").integer, 1);  // never 0 ms
  for (const char* bad : {"abc", "-1", "0", "5s", "nan", "inf", "1e10"}) {
    EXPECT_EQ(parse_error(spec, bad),
              fmt::format("ZRT_X='{}' is not a positive number of seconds (e.g. 60 or 0.5)", bad));
  }
}

TEST(Settings, Enum) {
  SettingSpec spec = spec_of(SettingType::kEnum);
  spec.default_value = "alpha";
  SettingValue beta = parse_ok(spec, "BeTa");
  EXPECT_EQ(beta.text, "beta");
  EXPECT_EQ(beta.integer, 1);
  EXPECT_EQ(beta.source, SettingSource::kEnvironment);
  EXPECT_EQ(parse_error(spec, "gamma"), "ZRT_X='gamma' is not one of alpha, beta");
  EXPECT_EQ(parse_error(spec, "alph"), "ZRT_X='alph' is not one of alpha, beta");
}

TEST(Settings, UnsetAndEmptyMeanTheDefault) {
  SettingSpec spec = spec_of(SettingType::kEnum);
  spec.default_value = "beta";
  for (const char* unset : {static_cast<const char*>(nullptr), ""}) {
    SettingValue value = parse_ok(spec, unset);
    EXPECT_EQ(value.text, "beta");
    EXPECT_EQ(value.source, SettingSource::kDefault);
  }
}

TEST(Settings, TableIsWellFormed) {
  std::set<std::string> names;
  size_t index = 0;
  for (const SettingSpec& spec : setting_specs()) {
    EXPECT_EQ(static_cast<size_t>(spec.id), index++);
    EXPECT_EQ(std::string(spec.name).rfind("ZRT_", 0), 0u) << spec.name;
    EXPECT_TRUE(names.insert(spec.name).second) << spec.name << " declared twice";
    EXPECT_NE(std::string(spec.doc), "") << spec.name;
    EXPECT_EQ(spec.type == SettingType::kEnum, spec.accepts != nullptr) << spec.name;
    SettingValue value;
    EXPECT_TRUE(parse_setting(spec, nullptr, &value).is_ok()) << spec.name << "'s default";
    EXPECT_EQ(&setting_spec(spec.id), &spec);
  }
  EXPECT_EQ(names.size(), kSettingCount);
}

TEST(Settings, Defaults) {
  const Settings settings;
  EXPECT_EQ(settings.text(SettingId::kLog), "warn");
  EXPECT_EQ(settings.integer(SettingId::kTimeout), 60000);
  EXPECT_EQ(all_reduce_algorithm(settings.text(SettingId::kAlgo)), AllReduceAlgorithm::kAuto);
  EXPECT_TRUE(settings.flag(SettingId::kWindows));
  EXPECT_EQ(settings.integer(SettingId::kWindowSlots), 8);
  EXPECT_EQ(settings.integer(SettingId::kWindowSlotKib), 256);
  EXPECT_EQ(settings.text(SettingId::kSimd), "auto");
#ifdef NDEBUG
  EXPECT_FALSE(settings.flag(SettingId::kCheck));
#else
  EXPECT_TRUE(settings.flag(SettingId::kCheck));
#endif
  EXPECT_EQ(settings.text(SettingId::kUcxErrMode), "hybrid");
  for (const SettingSpec& spec : setting_specs()) {
    EXPECT_EQ(settings.value(spec.id).source, SettingSource::kDefault) << spec.name;
  }
}

TEST(Settings, LoadsAnEnvironmentAndDescribesIt) {
  std::map<std::string, std::string> environment = {
      {"ZRT_TIMEOUT", "2.5"}, {"ZRT_ALGO", "rd"}, {"ZRT_WINDOWS", ""}, {"RANK", "3"}};
  const EnvironmentLookup lookup = [&environment](const char* name) -> const char* {
    auto found = environment.find(name);
    return found == environment.end() ? nullptr : found->second.c_str();
  };
  Settings settings;
  ASSERT_TRUE(Settings::load(lookup, &settings).is_ok());
  EXPECT_EQ(settings.integer(SettingId::kTimeout), 2500);
  EXPECT_EQ(all_reduce_algorithm(settings.text(SettingId::kAlgo)),
            AllReduceAlgorithm::kRecursiveDoubling);
  EXPECT_TRUE(settings.flag(SettingId::kWindows));
  const std::string description = settings.describe();
  EXPECT_NE(description.find("ZRT_TIMEOUT=2.5 (environment)"), std::string::npos) << description;
  EXPECT_NE(description.find("ZRT_ALGO=rd (environment)"), std::string::npos) << description;
  EXPECT_NE(description.find("ZRT_WINDOWS=1 (default)"), std::string::npos) << description;
  EXPECT_NE(description.find("ZRT_LOG=warn (default)"), std::string::npos) << description;
  EXPECT_EQ(description.find("RANK"), std::string::npos) << "not a setting: " << description;

  environment["ZRT_WINDOW_SLOT_KIB"] = "6";
  Settings refused = settings;
  const Status status = Settings::load(lookup, &refused);
  EXPECT_EQ(status.code(), ZRT_INVALID_ARGUMENT);
  EXPECT_EQ(status.message(), "ZRT_WINDOW_SLOT_KIB='6' is not a multiple of 4 in [4, 16384]");
  EXPECT_EQ(refused.integer(SettingId::kTimeout), 2500) << "a refused load leaves *settings alone";
}

TEST(Settings, WindowSettingsMatchTheEngine) {
  const SettingSpec& slots = setting_spec(SettingId::kWindowSlots);
  EXPECT_EQ(slots.min, 2);
  EXPECT_EQ(slots.max, kWindowMaxSlots);
  EXPECT_EQ(Settings().integer(SettingId::kWindowSlots), kWindowSlots);
  const SettingSpec& kib = setting_spec(SettingId::kWindowSlotKib);
  EXPECT_EQ(static_cast<size_t>(kib.min) << 10, kWindowMinSlotBytes);
  EXPECT_EQ(static_cast<size_t>(kib.max) << 10, kWindowMaxSlotBytes);
  EXPECT_EQ(static_cast<size_t>(kib.multiple_of) << 10, kWindowMinSlotBytes);
  EXPECT_EQ(static_cast<size_t>(Settings().integer(SettingId::kWindowSlotKib)) << 10,
            kWindowSlotBytes);
}

TEST(Settings, PollSettingMatchesTheEngine) {
  const SettingSpec& poll = setting_spec(SettingId::kPollUs);
  EXPECT_EQ(poll.min, 0);
  EXPECT_EQ(poll.max, kMaxBusyPollMicros);
  EXPECT_EQ(Settings().integer(SettingId::kPollUs), kBusyPollMicros);
  Settings settings;
  const EnvironmentLookup lookup = [](const char* name) -> const char* {
    return std::string_view(name) == "ZRT_POLL_US" ? "-1" : nullptr;
  };
  const Status status = Settings::load(lookup, &settings);
  EXPECT_EQ(status.code(), ZRT_INVALID_ARGUMENT);
  EXPECT_EQ(status.message(), "ZRT_POLL_US='-1' is not an integer in [0, 1000000]");
}

TEST(Settings, AllReduceAlgorithmNames) {
  EXPECT_EQ(all_reduce_algorithm("auto"), AllReduceAlgorithm::kAuto);
  EXPECT_EQ(all_reduce_algorithm("ring"), AllReduceAlgorithm::kRing);
  EXPECT_EQ(all_reduce_algorithm("direct"), AllReduceAlgorithm::kDirect);
  EXPECT_EQ(all_reduce_algorithm("rd"), AllReduceAlgorithm::kRecursiveDoubling);
  EXPECT_EQ(all_reduce_algorithm("oneshot"), AllReduceAlgorithm::kOneShot);
  EXPECT_EQ(all_reduce_algorithm("twoshot"), AllReduceAlgorithm::kTwoShot);
  EXPECT_EQ(all_reduce_algorithm("cma"), AllReduceAlgorithm::kCma);
}

}  // namespace
}  // namespace zrt
