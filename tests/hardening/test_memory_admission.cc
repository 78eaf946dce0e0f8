// Memory admission (docs/ARCHITECTURE.md#memory-admission): a partition whose arena cannot fit
// is refused at finalize with ZRT_OUT_OF_MEMORY and the figures, at once, instead of growing
// until the kernel's OOM killer ends some process; so is one that fits the machine but not the
// memory cgroup the ranks run in (when the test may create one; skipped otherwise).
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "lib/core/memory_probe.h"
#include "tests/hardening/peer_failure.h"
#include "tests/harness/multirank.h"
#include "zrt/zrt.h"

namespace zrt::testing {
namespace {

constexpr int kRanks = 2;
constexpr int64_t kPromptMs = 20000;  // "at once" on a loaded two-core machine

// Registers one parameter of `numel` elements at `stage` and finalizes; returns finalize's
// status, with the message in *message.
zrt_status_t finalize_one(zrt_comm_t comm, int stage, size_t numel, std::string* message) {
  zrt_partition_config_t config = ZRT_PARTITION_CONFIG_INIT;
  config.stage = stage;
  zrt_partition_t pm = nullptr;
  EXPECT_EQ(zrt_partition_create(comm, &config, &pm), ZRT_SUCCESS) << zrt_last_error();
  int unit = 0, param = 0;
  EXPECT_EQ(zrt_partition_add_unit(pm, "u", &unit), ZRT_SUCCESS) << zrt_last_error();
  EXPECT_EQ(zrt_partition_add_param(pm, unit, "huge", numel, 0, &param), ZRT_SUCCESS)
      << zrt_last_error();
  const zrt_status_t status = zrt_partition_finalize(pm);
  *message = zrt_last_error();
  EXPECT_EQ(zrt_partition_destroy(pm), ZRT_SUCCESS) << zrt_last_error();
  return status;
}

void expect_refused(int stage, size_t numel, const char* limit_words) {
  RankOptions options;
  options.deadline_ms = 90000;
  expect_ranks_pass(
      kRanks,
      [&](int, int) {
        zrt_comm_t comm = nullptr;
        ASSERT_EQ(zrt_comm_init_env(nullptr, &comm), ZRT_SUCCESS) << zrt_last_error();
        const auto start = std::chrono::steady_clock::now();
        std::string message;
        const zrt_status_t status = finalize_one(comm, stage, numel, &message);
        const int64_t took = elapsed_ms(start);
        std::fprintf(stderr, "stage %d, numel %zu: %s after %lld ms: %s\n", stage, numel,
                     zrt_status_string(status), static_cast<long long>(took), message.c_str());
        EXPECT_EQ(status, ZRT_OUT_OF_MEMORY) << message;
        EXPECT_LT(took, kPromptMs);
        EXPECT_NE(message.find("needs"), std::string::npos) << message;
        EXPECT_NE(message.find(limit_words), std::string::npos) << message;
        EXPECT_NE(message.find("partition arena"), std::string::npos) << message;
        // The communicator is still usable: nothing was half-allocated.
        zrt_stream_t stream = nullptr;
        ASSERT_EQ(zrt_stream_create(comm, ZRT_MEM_HOST, &stream), ZRT_SUCCESS);
        EXPECT_EQ(barrier_sync(comm, stream), ZRT_SUCCESS) << zrt_last_error();
        EXPECT_EQ(zrt_comm_destroy(comm), ZRT_SUCCESS) << zrt_last_error();
      },
      options);
}

TEST(MemoryAdmission, Stage3ParameterOf2To40ElementsIsRefused) {
  expect_refused(3, size_t{1} << 40, "MemAvailable");
}

TEST(MemoryAdmission, HugeStage2ParameterIsRefused) {
  expect_refused(2, size_t{1} << 36, "MemAvailable");
}

// A memory cgroup (v1 or v2) with a 512 MiB limit: a 2 GiB arena fits the machine but not it.
std::string make_cgroup() {
  const std::string name = "zrt_admission_" + std::to_string(getpid());
  std::ifstream self("/proc/self/cgroup");
  std::string line;
  while (std::getline(self, line)) {
    const size_t first = line.find(':'), second = line.find(':', first + 1);
    if (second == std::string::npos) continue;
    const std::string controllers = line.substr(first + 1, second - first - 1);
    const std::string path = line.substr(second + 1);
    std::string dir, limit_file;
    if (controllers == "memory" || controllers.find("memory,") != std::string::npos ||
        controllers.find(",memory") != std::string::npos) {
      dir = "/sys/fs/cgroup/memory" + (path == "/" ? "" : path) + "/" + name;
      limit_file = "memory.limit_in_bytes";
    } else if (line.rfind("0::", 0) == 0) {
      dir = "/sys/fs/cgroup" + (path == "/" ? "" : path) + "/" + name;
      limit_file = "memory.max";
    } else {
      continue;
    }
    if (mkdir(dir.c_str(), 0755) != 0) continue;
    std::ofstream limit(dir + "/" + limit_file);
    limit << (512 << 20) << "\n";
    limit.close();
    if (limit.fail()) {
      rmdir(dir.c_str());
      continue;
    }
    return dir;
  }
  return "";
}

TEST(MemoryAdmission, CgroupLimitIsRefused) {
  const std::string cgroup = make_cgroup();
  if (cgroup.empty()) GTEST_SKIP() << "cannot create a memory cgroup here";
  const MemoryLimits machine = probe_memory();
  if (!machine.has_available || machine.available < (size_t{8} << 30)) {
    rmdir(cgroup.c_str());
    GTEST_SKIP() << "under 8 GiB available: the machine, not the cgroup, would refuse";
  }
  RankOptions options;
  options.deadline_ms = 90000;
  expect_ranks_pass(
      kRanks,
      [&](int, int) {
        std::ofstream(cgroup + "/cgroup.procs") << getpid() << "\n";
        zrt_comm_t comm = nullptr;
        ASSERT_EQ(zrt_comm_init_env(nullptr, &comm), ZRT_SUCCESS) << zrt_last_error();
        std::string message;
        // Stage 0, 64 Mi elements: a little over 2 GiB of arena per rank.
        const zrt_status_t status = finalize_one(comm, 0, size_t{64} << 20, &message);
        std::fprintf(stderr, "in %s: %s: %s\n", cgroup.c_str(), zrt_status_string(status),
                     message.c_str());
        EXPECT_EQ(status, ZRT_OUT_OF_MEMORY) << message;
        EXPECT_NE(message.find("the memory cgroup"), std::string::npos) << message;
        EXPECT_NE(message.find(cgroup), std::string::npos) << message;
        EXPECT_EQ(zrt_comm_destroy(comm), ZRT_SUCCESS) << zrt_last_error();
      },
      options);
  // The ranks are gone; their cgroup can go too (a v1 cgroup may take a moment to empty).
  for (int i = 0; i < 50 && rmdir(cgroup.c_str()) != 0; ++i) usleep(100000);
}

// Bytes of zrt's registered memory (memfd) mapped by this process.
uint64_t registered_bytes() {
  std::ifstream maps("/proc/self/maps");
  std::string line;
  uint64_t total = 0;
  while (std::getline(maps, line)) {
    if (line.find("/memfd:zrt-registered") == std::string::npos) continue;
    unsigned long begin = 0, end = 0;
    if (std::sscanf(line.c_str(), "%lx-%lx", &begin, &end) == 2) total += end - begin;
  }
  return total;
}

// Staging is pooled: 1000 streams that each ran a collective hold a few scratch buffers and
// the first 4 streams' one-shot arenas, not 1000 of each (it was ~6 MB per stream); the stream
// cap is an error naming it.
TEST(MemoryAdmission, ThousandStreamsShareTheirStaging) {
  RankOptions options;
  options.deadline_ms = 120000;
  expect_ranks_pass(
      kRanks,
      [&](int, int) {
        zrt_comm_t comm = nullptr;
        ASSERT_EQ(zrt_comm_init_env(nullptr, &comm), ZRT_SUCCESS) << zrt_last_error();
        const uint64_t before = registered_bytes();
        std::vector<zrt_stream_t> streams(1000);
        std::vector<float> data(256, 1.0f);
        for (zrt_stream_t& stream : streams) {
          ASSERT_EQ(zrt_stream_create(comm, ZRT_MEM_HOST, &stream), ZRT_SUCCESS);
          ASSERT_EQ(
              zrt_all_reduce(comm, data.data(), data.data(), data.size(), ZRT_F32, ZRT_SUM, stream),
              ZRT_SUCCESS);
          ASSERT_EQ(zrt_stream_synchronize(stream), ZRT_SUCCESS) << zrt_last_error();
        }
        const uint64_t held = registered_bytes() - before;
        std::fprintf(stderr, "1000 streams after one all-reduce each: %llu bytes of staging\n",
                     static_cast<unsigned long long>(held));
        // The pooled scratch, plus the one-shot arenas of the first 4 streams (2 MiB each),
        // this rank's and its peer's as mapped here: 16 MiB of the bound.
        EXPECT_LE(held, uint64_t{32} << 20) << "staging is not shared across streams";
        // Up to the cap, then a clear refusal.
        std::vector<zrt_stream_t> more;
        zrt_status_t status = ZRT_SUCCESS;
        while (status == ZRT_SUCCESS && more.size() < 100) {
          zrt_stream_t stream = nullptr;
          status = zrt_stream_create(comm, ZRT_MEM_HOST, &stream);
          if (status == ZRT_SUCCESS) more.push_back(stream);
        }
        EXPECT_EQ(status, ZRT_INVALID_USAGE);
        // The communicator's own internal stream counts too.
        EXPECT_GE(streams.size() + more.size(), 1023u);
        EXPECT_LE(streams.size() + more.size(), 1024u);
        EXPECT_NE(std::string(zrt_last_error()).find("at most 1024 live streams"),
                  std::string::npos)
            << zrt_last_error();
        EXPECT_EQ(zrt_comm_destroy(comm), ZRT_SUCCESS) << zrt_last_error();
      },
      options);
}

}  // namespace
}  // namespace zrt::testing
