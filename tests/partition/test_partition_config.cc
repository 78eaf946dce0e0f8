// Partition configuration: defaults, the C struct's size/magic/version checks, and JSON files.
#include "lib/partition/config.h"

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

TEST(PartitionConfig, StepBackupDefaultsOnAndLoads) {
  EXPECT_TRUE(PartitionOptions{}.step_backup);
  zrt_partition_config_t config = ZRT_PARTITION_CONFIG_INIT;
  EXPECT_EQ(config.step_backup, 1);
  PartitionOptions options;
  config.step_backup = 0;
  ASSERT_TRUE(partition_options_from_config(&config, &options).is_ok());
  EXPECT_FALSE(options.step_backup);
  // The field is last: a caller compiled before it existed gets the default.
  config.size = offsetof(zrt_partition_config_t, step_backup);
  ASSERT_TRUE(partition_options_from_config(&config, &options).is_ok());
  EXPECT_TRUE(options.step_backup);
  config = ZRT_PARTITION_CONFIG_INIT;
  config.step_backup = 7;
  const Status bad = partition_options_from_config(&config, &options);
  EXPECT_EQ(bad.code(), ZRT_INVALID_ARGUMENT);
  EXPECT_NE(bad.message().find("config.step_backup"), std::string::npos) << bad.message();
  // JSON: bool or 0/1, and ranks that disagree on it disagree on the configuration.
  PartitionOptions loaded;
  ASSERT_TRUE(partition_options_apply_json(R"({"step_backup": false})", "t.json", &loaded).is_ok());
  EXPECT_FALSE(loaded.step_backup);
  EXPECT_NE(partition_options_hash(loaded, 1), partition_options_hash(PartitionOptions{}, 1));
  ASSERT_TRUE(partition_options_apply_json(R"({"step_backup": 1})", "t.json", &loaded).is_ok());
  EXPECT_TRUE(loaded.step_backup);
  EXPECT_EQ(partition_options_apply_json(R"({"step_backup": 2})", "t.json", &loaded).code(),
            ZRT_INVALID_ARGUMENT);
  zrt_partition_config_t back = ZRT_PARTITION_CONFIG_INIT;
  loaded.step_backup = false;
  partition_options_to_config(loaded, &back);
  EXPECT_EQ(back.step_backup, 0);
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
