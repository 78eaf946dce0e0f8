// Single-process tests of the communicator's option resolution and of the C API's argument
// checks: every comm function refuses bad input with ZRT_INVALID_ARGUMENT and a message that
// names the argument.
#include <spawn.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <iterator>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "kernels/reduce/reduce_kernels.h"
#include "zero/comm/communicator.h"
#include "zero/comm/host_cpus.h"
#include "zrt/zrt.h"

extern char** environ;

namespace zrt {
namespace {

void expect_invalid(zrt_status_t status, const std::string& needle) {
  EXPECT_EQ(status, ZRT_INVALID_ARGUMENT) << zrt_last_error();
  EXPECT_NE(std::string(zrt_last_error()).find(needle), std::string::npos)
      << "'" << zrt_last_error() << "' does not name '" << needle << "'";
}

cpu_set_t cpus_of(std::initializer_list<int> cpus) {
  cpu_set_t set;
  CPU_ZERO(&set);
  for (int cpu : cpus) CPU_SET(cpu, &set);
  return set;
}

// EngineOptions::core_per_rank compares a host's ranks with this count: the union of the masks of
// the ranks on the same host, so a binding (one CPU each) and a cpuset both count.
TEST(HostCpus, CountsTheUnionOfTheMasksOfTheRanksOnTheSameHost) {
  const std::vector<cpu_set_t> masks = {cpus_of({0}), cpus_of({1}), cpus_of({0}), cpus_of({5, 6})};
  EXPECT_EQ(union_cpu_count(masks, {}, 0), 4);            // one host: {0, 1, 5, 6}
  EXPECT_EQ(union_cpu_count(masks, {7, 7, 9, 9}, 0), 2);  // host 7: ranks 0 and 1, {0, 1}
  EXPECT_EQ(union_cpu_count(masks, {7, 7, 9, 9}, 3), 3);  // host 9: ranks 2 and 3, {0, 5, 6}
  // Two ranks bound to the same CPU share it: one CPU for two ranks, oversubscribed.
  EXPECT_EQ(union_cpu_count({cpus_of({3}), cpus_of({3})}, {}, 1), 1);
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

// One policy for every ZRT_* setting: a value it does not accept fails communicator creation,
// naming the variable, the value and what it accepts; a valid one reaches the options.
TEST(CommOptions, RefusesABadSettingAtCreation) {
  const std::pair<const char*, const char*> bad_settings[] = {
      {"ZRT_LOG", "loud"},       {"ZRT_ALGO", "butterfly"},    {"ZRT_WINDOWS", "2"},
      {"ZRT_WINDOW_SLOTS", "1"}, {"ZRT_WINDOW_SLOT_KIB", "6"}, {"ZRT_SIMD", "sse9000"},
      {"ZRT_CHECK", "yes"},      {"ZRT_UCX_ERR_MODE", "maybe"}};
  for (const auto& [name, bad] : bad_settings) {
    setenv(name, bad, 1);
    CommOptions options;
    Status status = resolve_comm_options(nullptr, &options);
    EXPECT_EQ(status.code(), ZRT_INVALID_ARGUMENT) << name;
    const std::string expected = std::string(name) + "='" + bad + "' is not ";
    EXPECT_EQ(status.message().rfind(expected, 0), 0u) << status.message();
    // The C API's init paths refuse it before any bootstrap.
    zrt_comm_t comm = nullptr;
    expect_invalid(zrt_comm_init_env(nullptr, &comm), expected);
    EXPECT_EQ(comm, nullptr);
    unsetenv(name);
  }
  // A variant this CPU cannot run is refused too, not replaced by another.
  if (std::string(reduce_kernels_variant()) != "avx512") {
    setenv("ZRT_SIMD", "avx512", 1);
    CommOptions options;
    Status status = resolve_comm_options(nullptr, &options);
    EXPECT_EQ(status.code(), ZRT_INVALID_ARGUMENT);
    EXPECT_NE(status.message().find("ZRT_SIMD='avx512'"), std::string::npos) << status.message();
    unsetenv("ZRT_SIMD");
  }
  setenv("ZRT_ALGO", "direct", 1);
  setenv("ZRT_UCX_ERR_MODE", "peer", 1);
  CommOptions options;
  ASSERT_TRUE(resolve_comm_options(nullptr, &options).is_ok());
  EXPECT_EQ(options.settings.text(SettingId::kAlgo), "direct");
  EXPECT_EQ(options.settings.value(SettingId::kAlgo).source, SettingSource::kEnvironment);
  EXPECT_EQ(options.settings.text(SettingId::kUcxErrMode), "peer");
  unsetenv("ZRT_ALGO");
  unsetenv("ZRT_UCX_ERR_MODE");
}

// ZRT_LOG=info prints the effective settings once, at the first communicator's creation. The
// logger reads ZRT_LOG once per process, so this runs in a child: this binary, re-run on
// PrintsSettingsChild with the variables set and its stderr in a file. Disabled, so that a
// normal run neither runs it nor reports it as skipped.
TEST(CommOptions, DISABLED_PrintsSettingsChild) {
  if (std::getenv("ZRT_TEST_SETTINGS_CHILD") == nullptr) GTEST_SKIP() << "run by PrintsSettings";
  for (int i = 0; i < 2; ++i) {
    zrt_comm_t comm = nullptr;
    ASSERT_EQ(zrt_comm_init_env(nullptr, &comm), ZRT_SUCCESS) << zrt_last_error();
    ASSERT_EQ(zrt_comm_destroy(comm), ZRT_SUCCESS) << zrt_last_error();
  }
}

TEST(CommOptions, PrintsSettings) {
  char path[] = "/tmp/zrt-settings-XXXXXX";
  const int fd = mkstemp(path);
  ASSERT_GE(fd, 0);
  std::vector<std::string> env_strings = {"ZRT_LOG=info", "ZRT_TIMEOUT=7",
                                          "ZRT_TEST_SETTINGS_CHILD=1", "UCX_LOG_LEVEL=warn"};
  for (char** entry = environ; *entry != nullptr; ++entry) {
    if (std::string(*entry).rfind("ZRT_", 0) != 0) env_strings.emplace_back(*entry);
  }
  std::vector<char*> envp;
  for (auto& text : env_strings) envp.push_back(text.data());
  envp.push_back(nullptr);
  std::string exe = "/proc/self/exe";
  std::string filter = "--gtest_filter=CommOptions.DISABLED_PrintsSettingsChild";
  std::string disabled = "--gtest_also_run_disabled_tests";
  char* argv[] = {exe.data(), filter.data(), disabled.data(), nullptr};
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, fd, 2);
  pid_t pid = 0;
  ASSERT_EQ(posix_spawn(&pid, exe.c_str(), &actions, nullptr, argv, envp.data()), 0);
  posix_spawn_file_actions_destroy(&actions);
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  close(fd);
  std::ifstream file(path);
  const std::string err((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
  unlink(path);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << err;
  const std::string line =
      "settings: ZRT_LOG=info (environment), ZRT_TIMEOUT=7 (environment), "
      "ZRT_ALGO=auto (default), ZRT_ALGO_TABLE= (default), ZRT_WINDOWS=1 (default)";
  const size_t first = err.find(line);
  EXPECT_NE(first, std::string::npos) << err;
  EXPECT_EQ(err.find("settings: ", first + 1), std::string::npos) << "printed twice: " << err;
  // The launcher variables in effect, beside the settings: here the UCX one the test set.
  EXPECT_NE(err.find("launcher variables: "), std::string::npos) << err;
  EXPECT_NE(err.find("UCX_LOG_LEVEL=warn"), std::string::npos) << err;
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
  void* buffer = nullptr;
  size_t held = 0;
  expect_invalid(zrt_mem_alloc(nullptr, 64, &buffer), "comm");
  expect_invalid(zrt_mem_free(nullptr, &held), "comm");
  expect_invalid(zrt_mem_held(nullptr, &held), "comm");
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
