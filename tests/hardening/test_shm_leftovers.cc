// Nothing of a job stays in /dev/shm after its ranks are killed (SIGKILL) mid-collective or
// mid-training: zrt's registered memory is a memfd, and UCX's posix transport, which names a
// file there, is off by default (docs/ARCHITECTURE.md#registered-memory).
//
// Where the test may (root, or user namespaces), it runs the job under a private, empty tmpfs
// on /dev/shm, so that whatever the job leaves is seen, and only the job's. Everywhere, each
// rank checks that it has nothing of /dev/shm mapped or open while it communicates.
#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "tests/hardening/peer_failure.h"
#include "tests/harness/file_bootstrap.h"
#include "tests/harness/multirank.h"
#include "zrt/zrt.h"

namespace zrt::testing {
namespace {

constexpr int kRanks = 3;

// A private /dev/shm for this process and the ranks it forks; false where not permitted.
bool private_dev_shm() {
  static const bool done = [] {
    if (unshare(CLONE_NEWNS) != 0) return false;
    if (mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) return false;
    return mount("tmpfs", "/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV, "size=1g,mode=1777") == 0;
  }();
  return done;
}

std::vector<std::string> dev_shm_entries() {
  std::vector<std::string> names;
  std::error_code error;
  for (const auto& entry : std::filesystem::directory_iterator("/dev/shm", error)) {
    names.push_back(entry.path().filename().string());
  }
  return names;
}

// Lines of /proc/self/maps and fds of this process that point into /dev/shm.
std::vector<std::string> own_dev_shm_uses() {
  std::vector<std::string> uses;
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line)) {
    if (line.find("/dev/shm/") != std::string::npos) uses.push_back(line);
  }
  std::error_code error;
  for (const auto& fd : std::filesystem::directory_iterator("/proc/self/fd", error)) {
    const std::string target = std::filesystem::read_symlink(fd.path(), error).string();
    if (target.rfind("/dev/shm/", 0) == 0) uses.push_back(fd.path().string() + " -> " + target);
  }
  return uses;
}

void expect_no_dev_shm_use() {
  for (const std::string& use : own_dev_shm_uses()) ADD_FAILURE() << "uses /dev/shm: " << use;
}

[[noreturn]] void die_in(int delay_ms) {
  std::thread([delay_ms] {
    std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));
    raise(SIGKILL);
  }).detach();
  for (;;) pause();
}

void collectives_body(int rank, int size, int victim) {
  zrt_comm_t comm = nullptr;
  ASSERT_EQ(zrt_comm_init_env(nullptr, &comm), ZRT_SUCCESS) << zrt_last_error();
  zrt_stream_t stream = nullptr;
  ASSERT_EQ(zrt_stream_create(comm, ZRT_MEM_HOST, &stream), ZRT_SUCCESS);
  ASSERT_EQ(barrier_sync(comm, stream), ZRT_SUCCESS) << zrt_last_error();
  std::vector<float> data(size_t{2} << 20, 1.0f);
  for (int i = 0; i < 30; ++i) {
    zrt_all_reduce(comm, data.data(), data.data(), data.size(), ZRT_F32, ZRT_MAX, stream);
    zrt_all_gather(comm, data.data(), data.data(), data.size() / size, ZRT_F32, stream);
  }
  expect_no_dev_shm_use();
  if (rank == victim) die_in(40);
  EXPECT_NE(zrt_stream_synchronize(stream), ZRT_SUCCESS);
  kill_victim();
  zrt_comm_destroy(comm);
  (void)size;
}

zrt_status_t sgd(const zrt_optimizer_args_t* args, void*) {
  for (size_t i = 0; i < args->count; ++i) args->master[i] -= 0.01f * args->grad[i];
  return ZRT_SUCCESS;
}

// Stage-3 steps until one fails: the victim dies 300 ms in, somewhere in a fetch, a gradient
// reduction or the step.
void training_body(int rank, int, int victim) {
  zrt_comm_t comm = nullptr;
  ASSERT_EQ(zrt_comm_init_env(nullptr, &comm), ZRT_SUCCESS) << zrt_last_error();
  zrt_partition_config_t config = ZRT_PARTITION_CONFIG_INIT;
  config.stage = 3;
  zrt_partition_t pm = nullptr;
  ASSERT_EQ(zrt_partition_create(comm, &config, &pm), ZRT_SUCCESS) << zrt_last_error();
  constexpr int kUnits = 4;
  constexpr size_t kNumel = size_t{1} << 20;
  int params[kUnits];
  for (int u = 0; u < kUnits; ++u) {
    int unit = 0;
    ASSERT_EQ(zrt_partition_add_unit(pm, "layer", &unit), ZRT_SUCCESS);
    ASSERT_EQ(zrt_partition_add_param(pm, unit, "w", kNumel, 0, &params[u]), ZRT_SUCCESS);
  }
  ASSERT_EQ(zrt_partition_finalize(pm), ZRT_SUCCESS) << zrt_last_error();
  expect_no_dev_shm_use();
  ASSERT_TRUE(file_barrier(run_dir(), "trained", rank, kRanks).is_ok());
  if (rank == victim) publish_victim_pid();
  std::thread killer;
  if (rank == victim)
    killer = std::thread([] {
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
      raise(SIGKILL);
    });
  zrt_status_t status = ZRT_SUCCESS;
  for (int step = 0; step < 10000 && status == ZRT_SUCCESS; ++step) {
    for (int u = 0; u < kUnits && status == ZRT_SUCCESS; ++u) {
      status = zrt_partition_fetch(pm, u);
      if (status == ZRT_SUCCESS) status = zrt_partition_release(pm, u);
    }
    for (int u = kUnits; u-- > 0 && status == ZRT_SUCCESS;) {
      status = zrt_partition_fetch(pm, u);
      void* grad = nullptr;
      if (status == ZRT_SUCCESS) status = zrt_partition_grad_data(pm, params[u], &grad);
      if (status == ZRT_SUCCESS) status = zrt_partition_grad_ready(pm, u);
      if (status == ZRT_SUCCESS) status = zrt_partition_release(pm, u);
    }
    if (status == ZRT_SUCCESS) status = zrt_partition_step(pm, sgd, nullptr);
  }
  EXPECT_NE(status, ZRT_SUCCESS) << "training went on without the victim";
  std::fprintf(stderr, "rank %d: training ended with %s: %s\n", rank, zrt_status_string(status),
               zrt_last_error());
  zrt_partition_destroy(pm);
  zrt_comm_destroy(comm);
}

void run_and_check(const std::function<void(int, int, int)>& body, int victim) {
  const bool isolated = private_dev_shm();
  const std::vector<std::string> before = dev_shm_entries();
  RankOptions options;
  options.env["ZRT_TIMEOUT"] = "5";
  options.deadline_ms = 90000;
  const auto outcomes = run_ranks(
      kRanks, [&](int rank, int size) { body(rank, size, victim); }, options);
  for (const RankOutcome& outcome : outcomes) {
    if (outcome.rank == victim) {
      EXPECT_EQ(outcome.signal, SIGKILL) << outcome.describe();
    } else {
      EXPECT_TRUE(outcome.passed()) << outcome.describe();
    }
  }
  if (!isolated) {
    std::fprintf(stderr, "no private /dev/shm here: checked the ranks' own mappings only\n");
    return;
  }
  EXPECT_TRUE(before.empty());
  for (const std::string& name : dev_shm_entries()) {
    ADD_FAILURE() << "left in /dev/shm after the kill: " << name;
  }
}

TEST(ShmLeftovers, NoneAfterKillMidCollective) {
  run_and_check(collectives_body, 1);
}

TEST(ShmLeftovers, NoneAfterKillMidTraining) {
  run_and_check(training_body, 2);
}

}  // namespace
}  // namespace zrt::testing
