// Partition configuration: defaults, the C struct's size/magic/version checks, and JSON files.
#include "zero/partition/config.h"

#include <gtest/gtest.h>

#include <cstddef>
#include <cstdio>
#include <fstream>

namespace zrt {
namespace {

TEST(PartitionConfig, InitMacroMatchesTheDefaults) {
  zrt_partition_config_t config = ZRT_PARTITION_CONFIG_INIT;
  PartitionOptions options;
  ASSERT_TRUE(partition_options_from_config(&config, &options).is_ok());
  const PartitionOptions defaults;
  EXPECT_EQ(partition_options_hash(options, 1), partition_options_hash(defaults, 1));
  PartitionOptions from_null;
  ASSERT_TRUE(partition_options_from_config(nullptr, &from_null).is_ok());
  EXPECT_EQ(partition_options_hash(from_null, 1), partition_options_hash(defaults, 1));
}

TEST(PartitionConfig, BadStructsAndValuesAreNamed) {
  zrt_partition_config_t config = ZRT_PARTITION_CONFIG_INIT;
  PartitionOptions options;
  config.magic = 1;
  EXPECT_EQ(partition_options_from_config(&config, &options).code(), ZRT_INVALID_ARGUMENT);
  config = ZRT_PARTITION_CONFIG_INIT;
  config.stage = 4;
  Status status = partition_options_from_config(&config, &options);
  EXPECT_EQ(status.code(), ZRT_INVALID_ARGUMENT);
  EXPECT_NE(status.message().find("config.stage"), std::string::npos);
  config = ZRT_PARTITION_CONFIG_INIT;
  config.master_dtype = ZRT_BF16;
  status = partition_options_from_config(&config, &options);
  EXPECT_NE(status.message().find("master_dtype"), std::string::npos);
  // An older caller's shorter struct: the missing fields keep their defaults.
  config = ZRT_PARTITION_CONFIG_INIT;
  config.stage = 3;
  config.no_sync_accumulation = 1;
  config.size = offsetof(zrt_partition_config_t, no_sync_accumulation);
  ASSERT_TRUE(partition_options_from_config(&config, &options).is_ok());
  EXPECT_EQ(options.stage, 3);
  EXPECT_FALSE(options.no_sync_accumulation);
}

TEST(PartitionConfig, JsonOverridesAndRefusesUnknownKeys) {
  PartitionOptions options;
  ASSERT_TRUE(partition_options_apply_json(
                  R"({"stage": 3, "param_dtype": "bf16", "bucket_bytes": 1048576,
                      "prefetch_depth": 2, "no_sync_accumulation": true})",
                  "tuned.json", &options)
                  .is_ok());
  EXPECT_EQ(options.stage, 3);
  EXPECT_EQ(options.param_dtype, ZRT_BF16);
  EXPECT_EQ(options.bucket_bytes, 1048576u);
  EXPECT_EQ(options.prefetch_depth, 2);
  EXPECT_TRUE(options.no_sync_accumulation);
  EXPECT_EQ(options.reduce_dtype, ZRT_F32);

  Status status = partition_options_apply_json(R"({"stgae": 1})", "tuned.json", &options);
  EXPECT_EQ(status.code(), ZRT_INVALID_ARGUMENT);
  EXPECT_NE(status.message().find("stgae"), std::string::npos);
  status = partition_options_apply_json(R"({"stage": "two"})", "x.json", &options);
  EXPECT_NE(status.message().find("\"stage\""), std::string::npos);
  status = partition_options_apply_json("{", "x.json", &options);
  EXPECT_EQ(status.code(), ZRT_INVALID_ARGUMENT);
  EXPECT_EQ(options.stage, 3) << "a failed load leaves the options alone";
}

// A 0/1 switch of the config, checked the same way for each: its default, the struct field (a
// caller compiled before the field existed gets the default), a bad value named, JSON as bool
// or 0/1, the cross-rank hash (ranks that disagree on it disagree on the configuration), and
// the way back into the struct.
struct Switch {
  std::string name;
  int zrt_partition_config_t::*field;
  bool PartitionOptions::*option;
  size_t offset;  // offsetof(zrt_partition_config_t, field)
  bool default_on;
};

void expect_switch_loads(const Switch& sw) {
  SCOPED_TRACE(sw.name);
  const int on = sw.default_on ? 1 : 0;
  EXPECT_EQ(PartitionOptions{}.*sw.option, sw.default_on);
  zrt_partition_config_t config = ZRT_PARTITION_CONFIG_INIT;
  EXPECT_EQ(config.*sw.field, on);
  PartitionOptions options;
  config.*sw.field = 1 - on;
  ASSERT_TRUE(partition_options_from_config(&config, &options).is_ok());
  EXPECT_EQ(options.*sw.option, !sw.default_on);
  config.size = sw.offset;
  ASSERT_TRUE(partition_options_from_config(&config, &options).is_ok());
  EXPECT_EQ(options.*sw.option, sw.default_on);
  config = ZRT_PARTITION_CONFIG_INIT;
  config.*sw.field = 7;
  const Status bad = partition_options_from_config(&config, &options);
  EXPECT_EQ(bad.code(), ZRT_INVALID_ARGUMENT);
  EXPECT_NE(bad.message().find("config." + sw.name), std::string::npos) << bad.message();
  PartitionOptions loaded;
  const std::string flip =
      std::string(R"({")") + sw.name + R"(": )" + (sw.default_on ? "false" : "true") + "}";
  ASSERT_TRUE(partition_options_apply_json(flip, "t.json", &loaded).is_ok());
  EXPECT_EQ(loaded.*sw.option, !sw.default_on);
  EXPECT_NE(partition_options_hash(loaded, 1), partition_options_hash(PartitionOptions{}, 1));
  const std::string back_on = R"({")" + sw.name + R"(": )" + std::to_string(on) + "}";
  ASSERT_TRUE(partition_options_apply_json(back_on, "t.json", &loaded).is_ok());
  EXPECT_EQ(loaded.*sw.option, sw.default_on);
  const Status bad_json =
      partition_options_apply_json(R"({")" + sw.name + R"(": 2})", "t.json", &loaded);
  EXPECT_EQ(bad_json.code(), ZRT_INVALID_ARGUMENT);
  EXPECT_NE(bad_json.message().find(sw.name), std::string::npos) << bad_json.message();
  zrt_partition_config_t back = ZRT_PARTITION_CONFIG_INIT;
  loaded.*sw.option = !sw.default_on;
  partition_options_to_config(loaded, &back);
  EXPECT_EQ(back.*sw.field, 1 - on);
}

// step_backup is a choice of three: segment by default, each value kept, the rest refused by
// name, in the struct and in JSON; older callers' structs get the default.
TEST(PartitionConfig, StepBackupModes) {
  EXPECT_EQ(PartitionOptions{}.step_backup, ZRT_STEP_BACKUP_SEGMENT);
  zrt_partition_config_t config = ZRT_PARTITION_CONFIG_INIT;
  EXPECT_EQ(config.step_backup, ZRT_STEP_BACKUP_SEGMENT);
  for (int mode : {ZRT_STEP_BACKUP_NONE, ZRT_STEP_BACKUP_FULL, ZRT_STEP_BACKUP_SEGMENT}) {
    PartitionOptions options;
    config.step_backup = mode;
    ASSERT_TRUE(partition_options_from_config(&config, &options).is_ok());
    EXPECT_EQ(options.step_backup, mode);
    zrt_partition_config_t back = ZRT_PARTITION_CONFIG_INIT;
    partition_options_to_config(options, &back);
    EXPECT_EQ(back.step_backup, mode);
    PartitionOptions loaded;
    const std::string json = R"({"step_backup": )" + std::to_string(mode) + "}";
    ASSERT_TRUE(partition_options_apply_json(json, "t.json", &loaded).is_ok());
    EXPECT_EQ(loaded.step_backup, mode);
  }
  PartitionOptions full;
  full.step_backup = ZRT_STEP_BACKUP_FULL;
  EXPECT_NE(partition_options_hash(full, 1), partition_options_hash(PartitionOptions{}, 1));
  PartitionOptions options;
  config.step_backup = ZRT_STEP_BACKUP_FULL;
  config.size = offsetof(zrt_partition_config_t, step_backup);
  ASSERT_TRUE(partition_options_from_config(&config, &options).is_ok());
  EXPECT_EQ(options.step_backup, ZRT_STEP_BACKUP_SEGMENT);
  for (int bad : {-1, 3, 7}) {
    config = ZRT_PARTITION_CONFIG_INIT;
    config.step_backup = bad;
    const Status status = partition_options_from_config(&config, &options);
    EXPECT_EQ(status.code(), ZRT_INVALID_ARGUMENT);
    EXPECT_NE(status.message().find("config.step_backup"), std::string::npos) << status.message();
  }
  const Status bad_json = partition_options_apply_json(R"({"step_backup": 3})", "t.json", &options);
  EXPECT_EQ(bad_json.code(), ZRT_INVALID_ARGUMENT);
  EXPECT_NE(bad_json.message().find("step_backup"), std::string::npos) << bad_json.message();
}

TEST(PartitionConfig, GradWindowsDefaultAndLoad) {
  EXPECT_EQ(PartitionOptions{}.grad_windows, 0);
  zrt_partition_config_t config = ZRT_PARTITION_CONFIG_INIT;
  EXPECT_EQ(config.grad_windows, 0);
  PartitionOptions options;
  config.grad_windows = 1;
  ASSERT_TRUE(partition_options_from_config(&config, &options).is_ok());
  EXPECT_EQ(options.grad_windows, 1);
  config.grad_windows = 3;
  const Status bad = partition_options_from_config(&config, &options);
  EXPECT_EQ(bad.code(), ZRT_INVALID_ARGUMENT);
  EXPECT_NE(bad.message().find("config.grad_windows"), std::string::npos) << bad.message();
  config.size = offsetof(zrt_partition_config_t, grad_windows);  // an older caller's struct
  ASSERT_TRUE(partition_options_from_config(&config, &options).is_ok());
  EXPECT_EQ(options.grad_windows, 0);
  PartitionOptions loaded;
  ASSERT_TRUE(partition_options_apply_json(R"({"grad_windows": 2})", "t.json", &loaded).is_ok());
  EXPECT_EQ(loaded.grad_windows, 2);
  EXPECT_NE(partition_options_hash(loaded, 1), partition_options_hash(PartitionOptions{}, 1));
}

TEST(PartitionConfig, SwitchesDefaultAndLoad) {
  expect_switch_loads({"prefetch_next_step", &zrt_partition_config_t::prefetch_next_step,
                       &PartitionOptions::prefetch_next_step,
                       offsetof(zrt_partition_config_t, prefetch_next_step), false});
  expect_switch_loads({"offload_optimizer", &zrt_partition_config_t::offload_optimizer,
                       &PartitionOptions::offload_optimizer,
                       offsetof(zrt_partition_config_t, offload_optimizer), false});
  expect_switch_loads({"grad_accumulate", &zrt_partition_config_t::grad_accumulate,
                       &PartitionOptions::grad_accumulate,
                       offsetof(zrt_partition_config_t, grad_accumulate), false});
}

TEST(PartitionConfig, OffloadNeedsAShardedStage) {
  zrt_partition_config_t config = ZRT_PARTITION_CONFIG_INIT;
  config.offload_optimizer = 1;
  PartitionOptions options;
  for (int stage = 1; stage <= 3; ++stage) {
    config.stage = stage;
    EXPECT_TRUE(partition_options_from_config(&config, &options).is_ok()) << stage;
  }
  config.stage = 0;
  const Status refused = partition_options_from_config(&config, &options);
  EXPECT_EQ(refused.code(), ZRT_INVALID_ARGUMENT);
  EXPECT_NE(refused.message().find("offload_optimizer"), std::string::npos) << refused.message();
  EXPECT_NE(refused.message().find("stage 1, 2 or 3"), std::string::npos) << refused.message();
}

// hpz_group_size: stage 3 only, read only from structs that hold it, loaded from JSON, hashed
// and written back.
TEST(PartitionConfig, HpzGroupSizeIsStage3Only) {
  zrt_partition_config_t config = ZRT_PARTITION_CONFIG_INIT;
  EXPECT_EQ(config.hpz_group_size, 0);
  EXPECT_EQ(PartitionOptions{}.hpz_group_size, 0);
  config.stage = 3;
  config.hpz_group_size = 2;
  PartitionOptions options;
  ASSERT_TRUE(partition_options_from_config(&config, &options).is_ok());
  EXPECT_EQ(options.hpz_group_size, 2);
  EXPECT_NE(partition_options_hash(options, 1), partition_options_hash(PartitionOptions{}, 1));
  config.size = offsetof(zrt_partition_config_t, hpz_group_size);
  ASSERT_TRUE(partition_options_from_config(&config, &options).is_ok());
  EXPECT_EQ(options.hpz_group_size, 0);
  config.size = sizeof(config);
  for (int stage = 0; stage < 3; ++stage) {
    config.stage = stage;
    const Status refused = partition_options_from_config(&config, &options);
    EXPECT_EQ(refused.code(), ZRT_INVALID_ARGUMENT);
    EXPECT_NE(refused.message().find("config.hpz_group_size"), std::string::npos)
        << refused.message();
  }
  config.stage = 3;
  for (int64_t bad : {int64_t{-2}, int64_t{1} << 40}) {
    config.hpz_group_size = bad;
    const Status refused = partition_options_from_config(&config, &options);
    EXPECT_EQ(refused.code(), ZRT_INVALID_ARGUMENT) << bad;
    EXPECT_NE(refused.message().find("config.hpz_group_size"), std::string::npos)
        << refused.message();
  }
  PartitionOptions loaded;
  ASSERT_TRUE(
      partition_options_apply_json(R"({"stage": 3, "hpz_group_size": -1})", "t.json", &loaded)
          .is_ok());
  EXPECT_EQ(loaded.hpz_group_size, ZRT_SHARD_GROUP_HOST);
  const Status at_stage_2 =
      partition_options_apply_json(R"({"stage": 2, "hpz_group_size": 4})", "t.json", &loaded);
  EXPECT_EQ(at_stage_2.code(), ZRT_INVALID_ARGUMENT);
  EXPECT_NE(at_stage_2.message().find("hpz_group_size"), std::string::npos);
  zrt_partition_config_t back = ZRT_PARTITION_CONFIG_INIT;
  partition_options_to_config(loaded, &back);
  EXPECT_EQ(back.hpz_group_size, ZRT_SHARD_GROUP_HOST);
}

TEST(PartitionConfig, JsonFile) {
  const std::string path = ::testing::TempDir() + "/zrt_partition_config.json";
  {
    std::ofstream out(path);
    out << R"({"stage": 1, "alignment": 64})";
  }
  PartitionOptions options;
  ASSERT_TRUE(partition_options_load_json_file(path, &options).is_ok());
  EXPECT_EQ(options.stage, 1);
  EXPECT_EQ(options.alignment, 64u);
  std::remove(path.c_str());
  EXPECT_EQ(partition_options_load_json_file(path, &options).code(), ZRT_SYSTEM_ERROR);
}

}  // namespace
}  // namespace zrt
