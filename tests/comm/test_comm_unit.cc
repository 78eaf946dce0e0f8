// Single-process tests of the communicator's option resolution and of the C API's argument
// checks: every comm function refuses bad input with ZRT_INVALID_ARGUMENT and a message that
// names the argument.
#include <stdlib.h>

#include <string>

#include <gtest/gtest.h>

#include "lib/comm/communicator.h"
#include "zrt/zrt.h"

namespace zrt {
namespace {

void expect_invalid(zrt_status_t status, const std::string& needle) {
  EXPECT_EQ(status, ZRT_INVALID_ARGUMENT) << zrt_last_error();
  EXPECT_NE(std::string(zrt_last_error()).find(needle), std::string::npos)
      << "'" << zrt_last_error() << "' does not name '" << needle << "'";
}

TEST(CommOptions, DefaultsAndEnvironment) {
  unsetenv("ZRT_TIMEOUT");
  CommOptions options;
  ASSERT_TRUE(resolve_comm_options(nullptr, &options).is_ok());
  EXPECT_EQ(options.timeout_ms, 60000);
  EXPECT_EQ(options.name, "zrt");
  setenv("ZRT_TIMEOUT", "2.5", 1);
  ASSERT_TRUE(resolve_comm_options(nullptr, &options).is_ok());
  EXPECT_EQ(options.timeout_ms, 2500);
  zrt_comm_config_t config = ZRT_COMM_CONFIG_INIT;
  config.timeout_ms = 1234;
  config.name = "mine";
  ASSERT_TRUE(resolve_comm_options(&config, &options).is_ok());
  EXPECT_EQ(options.timeout_ms, 1234);  // the config wins over the environment
  EXPECT_EQ(options.name, "mine");
  for (const char* bad : {"abc", "-1", "0", "5s", "nan"}) {
    setenv("ZRT_TIMEOUT", bad, 1);
    Status status = resolve_comm_options(nullptr, &options);
    EXPECT_EQ(status.code(), ZRT_INVALID_ARGUMENT) << bad;
    EXPECT_NE(status.message().find("ZRT_TIMEOUT"), std::string::npos) << status.message();
  }
  unsetenv("ZRT_TIMEOUT");
}

TEST(CommOptions, RefusesBadConfig) {
  CommOptions options;
  zrt_comm_config_t config = ZRT_COMM_CONFIG_INIT;
  config.size = 8;
  Status status = resolve_comm_options(&config, &options);
  EXPECT_EQ(status.code(), ZRT_INVALID_ARGUMENT);
  EXPECT_NE(status.message().find("config->size"), std::string::npos) << status.message();
  config = ZRT_COMM_CONFIG_INIT;
  config.magic = 0x1234;
  status = resolve_comm_options(&config, &options);
  EXPECT_NE(status.message().find("config->magic"), std::string::npos) << status.message();
  config = ZRT_COMM_CONFIG_INIT;
  config.version = 0;
  status = resolve_comm_options(&config, &options);
  EXPECT_NE(status.message().find("config->version"), std::string::npos) << status.message();
  config = ZRT_COMM_CONFIG_INIT;
  config.timeout_ms = -1;
  status = resolve_comm_options(&config, &options);
  EXPECT_NE(status.message().find("config->timeout_ms"), std::string::npos) << status.message();
  config = ZRT_COMM_CONFIG_INIT;
  config.name = "";
  status = resolve_comm_options(&config, &options);
  EXPECT_NE(status.message().find("config->name"), std::string::npos) << status.message();
}

zrt_status_t dummy_allgather(const void*, void*, size_t, void*, void**) {
  return ZRT_SUCCESS;
}
zrt_status_t dummy_test(void*) {
  return ZRT_SUCCESS;
}
void dummy_free(void*) {}

TEST(CommApi, NullHandlesAndPointers) {
  int value = 0;
  expect_invalid(zrt_comm_rank(nullptr, &value), "comm");
  expect_invalid(zrt_comm_size(nullptr, &value), "comm");
  expect_invalid(zrt_comm_local_rank(nullptr, &value), "comm");
  expect_invalid(zrt_comm_local_size(nullptr, &value), "comm");
  zrt_comm_t out = nullptr;
  expect_invalid(zrt_comm_split(nullptr, 0, 0, nullptr, &out), "comm");
  expect_invalid(zrt_comm_abort(nullptr), "comm");
  expect_invalid(zrt_comm_get_error(nullptr), "comm");
  zrt_op_t op;
  expect_invalid(zrt_op_create_premul_sum(nullptr, 0.5, &op), "comm");
  expect_invalid(zrt_op_destroy(nullptr, ZRT_SUM), "comm");
  zrt_comm_stats_t stats{};
  stats.size = sizeof(stats);
  expect_invalid(zrt_comm_stats(nullptr, &stats), "comm");
  expect_invalid(zrt_comm_stats_reset(nullptr), "comm");
  EXPECT_EQ(zrt_comm_destroy(nullptr), ZRT_SUCCESS);
  expect_invalid(zrt_comm_init_env(nullptr, nullptr), "comm");
  expect_invalid(zrt_comm_init_oob(nullptr, nullptr, &out), "oob");
  // A foreign pointer is refused, not followed.
  alignas(8) char garbage[256] = {};
  expect_invalid(zrt_comm_rank(reinterpret_cast<zrt_comm_t>(garbage), &value), "comm");
}

TEST(CommApi, BadOobAndConfig) {
  zrt_oob_t oob{sizeof(zrt_oob_t), dummy_allgather, dummy_test, dummy_free, nullptr, 0, 1, -1, -1};
  zrt_comm_t comm = nullptr;
  zrt_oob_t bad = oob;
  bad.allgather = nullptr;
  expect_invalid(zrt_comm_init_oob(&bad, nullptr, &comm), "oob->allgather");
  bad = oob;
  bad.test = nullptr;
  expect_invalid(zrt_comm_init_oob(&bad, nullptr, &comm), "oob->test");
  bad = oob;
  bad.free = nullptr;
  expect_invalid(zrt_comm_init_oob(&bad, nullptr, &comm), "oob->free");
  bad = oob;
  bad.rank = 1;
  expect_invalid(zrt_comm_init_oob(&bad, nullptr, &comm), "oob->rank");
  bad = oob;
  bad.rank = -1;
  expect_invalid(zrt_comm_init_oob(&bad, nullptr, &comm), "oob->rank");
  bad = oob;
  bad.size = 0;
  expect_invalid(zrt_comm_init_oob(&bad, nullptr, &comm), "oob->size");
  bad = oob;
  bad.local_rank = 0;
  expect_invalid(zrt_comm_init_oob(&bad, nullptr, &comm), "oob->local");
  expect_invalid(zrt_comm_init_oob(&oob, nullptr, nullptr), "comm");
  zrt_comm_config_t config = ZRT_COMM_CONFIG_INIT;
  config.magic = 7;
  expect_invalid(zrt_comm_init_oob(&oob, &config, &comm), "config->magic");
  config = ZRT_COMM_CONFIG_INIT;
  config.size = 3;
  expect_invalid(zrt_comm_init_env(&config, &comm), "config->size");
  EXPECT_EQ(comm, nullptr);  // outputs are written only on success
}

}  // namespace
}  // namespace zrt
