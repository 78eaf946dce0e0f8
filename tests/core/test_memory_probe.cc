// The memory probe and admission (lib/core/memory_probe.h) on fake /proc and cgroup files: every
// limit is read, the tightest one refuses, and the refusal carries the figures.
#include "lib/core/memory_probe.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include <gtest/gtest.h>

namespace zrt {
namespace {

constexpr uint64_t kGiB = uint64_t{1} << 30;

class FakeMachine : public ::testing::Test {
 protected:
  void SetUp() override {
    char pattern[] = "/tmp/zrt_memory_probe_XXXXXX";
    ASSERT_NE(mkdtemp(pattern), nullptr);
    root_ = pattern;
    paths_.meminfo = root_ + "/meminfo";
    paths_.self_cgroup = root_ + "/self_cgroup";
    paths_.cgroup_root = root_ + "/cgroup";
    paths_.shm_dir = root_;  // a real directory: statvfs answers for /tmp's filesystem
  }
  void TearDown() override { std::filesystem::remove_all(root_); }
  void write(const std::string& relative, const std::string& text) {
    const std::filesystem::path path = root_ + "/" + relative;
    std::filesystem::create_directories(path.parent_path());
    std::ofstream(path) << text;
  }
  void meminfo(uint64_t available_kib) {
    write("meminfo", "MemTotal:       24683500 kB\nMemFree:        1000 kB\nMemAvailable:   " +
                         std::to_string(available_kib) + " kB\n");
  }

  std::string root_;
  MemoryProbePaths paths_;
};

TEST_F(FakeMachine, ReadsMemAvailable) {
  meminfo(8 * 1024 * 1024);
  write("self_cgroup", "0::/\n");
  const MemoryLimits limits = probe_memory(paths_);
  ASSERT_TRUE(limits.has_available);
  EXPECT_EQ(limits.available, 8 * kGiB);
  EXPECT_FALSE(limits.has_cgroup);
  EXPECT_TRUE(admit_memory("arena", 4 * kGiB, MemoryPlace::kPrivate, limits).is_ok());
  const Status refused = admit_memory("arena", 9 * kGiB, MemoryPlace::kPrivate, limits);
  EXPECT_EQ(refused.code(), ZRT_OUT_OF_MEMORY);
  EXPECT_NE(refused.message().find("arena needs 9663676416 bytes (9.00 GiB)"), std::string::npos)
      << refused.message();
  EXPECT_NE(refused.message().find("MemAvailable 8589934592 bytes"), std::string::npos)
      << refused.message();
  // The headroom stays for the rest of the machine.
  EXPECT_FALSE(
      admit_memory("arena", 8 * kGiB - kAdmissionHeadroomBytes + 1, MemoryPlace::kPrivate, limits)
          .is_ok());
}

TEST_F(FakeMachine, CgroupV2LimitOfAnAncestorBinds) {
  meminfo(64 * 1024 * 1024);
  write("self_cgroup", "0::/job/rank0\n");
  write("cgroup/job/rank0/memory.max", "max\n");
  write("cgroup/job/rank0/memory.current", "100\n");
  write("cgroup/job/memory.max", std::to_string(4 * kGiB) + "\n");
  write("cgroup/job/memory.current", std::to_string(1 * kGiB) + "\n");
  const MemoryLimits limits = probe_memory(paths_);
  ASSERT_TRUE(limits.has_cgroup);
  EXPECT_EQ(limits.cgroup_limit, 4 * kGiB);
  EXPECT_EQ(limits.cgroup_usage, 1 * kGiB);
  EXPECT_NE(limits.cgroup_where.find("job/memory.max"), std::string::npos);
  EXPECT_TRUE(admit_memory("staging", 2 * kGiB, MemoryPlace::kSharedAnon, limits).is_ok());
  const Status refused = admit_memory("staging", 3 * kGiB, MemoryPlace::kSharedAnon, limits);
  EXPECT_EQ(refused.code(), ZRT_OUT_OF_MEMORY);
  EXPECT_NE(refused.message().find("the memory cgroup"), std::string::npos) << refused.message();
  EXPECT_NE(refused.message().find("cgroup limit 4294967296 bytes"), std::string::npos)
      << refused.message();
}

TEST_F(FakeMachine, CgroupV1MemoryController) {
  meminfo(64 * 1024 * 1024);
  write("self_cgroup", "5:devices:/\n4:cpu,memory:/box\n0::/\n");
  write("cgroup/memory/box/memory.limit_in_bytes", std::to_string(2 * kGiB) + "\n");
  write("cgroup/memory/box/memory.usage_in_bytes", std::to_string(kGiB / 2) + "\n");
  const MemoryLimits limits = probe_memory(paths_);
  ASSERT_TRUE(limits.has_cgroup);
  EXPECT_EQ(limits.cgroup_limit, 2 * kGiB);
  EXPECT_FALSE(admit_memory("arena", 2 * kGiB, MemoryPlace::kPrivate, limits).is_ok());
  // "Unlimited" in v1 is a huge number, not a limit.
  write("cgroup/memory/box/memory.limit_in_bytes", "9223372036854771712\n");
  EXPECT_FALSE(probe_memory(paths_).has_cgroup);
}

TEST_F(FakeMachine, ShmFilesystemBindsOnlyNamedSegments) {
  MemoryLimits limits;
  limits.has_available = true;
  limits.available = 64 * kGiB;
  limits.has_shm = true;
  limits.shm_free = 1 * kGiB;
  EXPECT_TRUE(admit_memory("segment", 2 * kGiB, MemoryPlace::kSharedAnon, limits).is_ok());
  const Status refused = admit_memory("segment", 2 * kGiB, MemoryPlace::kShmFilesystem, limits);
  EXPECT_EQ(refused.code(), ZRT_OUT_OF_MEMORY);
  EXPECT_NE(refused.message().find("/dev/shm"), std::string::npos) << refused.message();
}

TEST_F(FakeMachine, NothingReadableAdmitsAndHugeRequestsDoNotOverflow) {
  // No files at all: no limit is known, so nothing is refused on a guess.
  EXPECT_TRUE(admit_memory("x", 1 * kGiB, MemoryPlace::kPrivate, probe_memory(paths_)).is_ok());
  meminfo(1024);
  EXPECT_EQ(admit_memory("x", UINT64_MAX, MemoryPlace::kPrivate, probe_memory(paths_)).code(),
            ZRT_OUT_OF_MEMORY);
}

TEST(MemoryProbe, ThisMachineHasMemAvailable) {
  const MemoryLimits limits = probe_memory();
  EXPECT_TRUE(limits.has_available);
  EXPECT_GT(limits.available, 0u);
}

}  // namespace
}  // namespace zrt
