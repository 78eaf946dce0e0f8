// zrt_comm_abort from another thread unblocks every wait at once, and zrt_comm_destroy gives
// back everything a communicator took (threads, fds, shared memory), healthy or after a peer
// died.
//
// Counting resources needs a warm-up: UCX initialises process-wide state lazily on the first
// context (its memory hooks, a global async thread, the topology cache, log and config
// tables), kept until the process exits. It is the library's state, not the communicator's,
// so the baseline is taken after one whole init/barrier/destroy round; from then on, every
// round must end where it started.
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "tests/hardening/peer_failure.h"
#include "tests/hardening/process_resources.h"
#include "tests/harness/file_bootstrap.h"
#include "tests/harness/multirank.h"
#include "zrt/zrt.h"

namespace zrt::testing {
namespace {

// The ranks receive from each other and nobody sends, under a 60 s timeout: only rank 0's
// abort, 300 ms later on a helper thread, can end its waits (one in zrt_stream_synchronize, one
// in zrt_event_synchronize on another thread). Rank 1 does not abort: its waits must end
// promptly too, with an error naming rank 0, once rank 0 has aborted (and left).
TEST(Abort, UnblocksStreamAndEventWaitsAtOnce) {
  RankOptions options;
  options.env["ZRT_TIMEOUT"] = "60";
  options.deadline_ms = 30000;
  expect_ranks_pass(
      2,
      [](int rank, int size) {
        FileOob oob(run_dir(), "abort", rank, size);
        zrt_comm_t comm = nullptr;
        ASSERT_OK(zrt_comm_init_oob(&oob.oob(), nullptr, &comm));
        zrt_stream_t stream = nullptr;
        zrt_stream_t other = nullptr;
        zrt_event_t event = nullptr;
        ASSERT_OK(zrt_stream_create(comm, ZRT_MEM_HOST, &stream));
        ASSERT_OK(zrt_stream_create(comm, ZRT_MEM_HOST, &other));
        ASSERT_OK(zrt_event_create(comm, &event));
        ASSERT_OK(barrier_sync(comm, stream));
        std::vector<char> buffer(64);
        std::vector<char> buffer2(64);
        ASSERT_OK(zrt_recv(comm, buffer.data(), buffer.size(), ZRT_U8, 1 - rank, stream));
        ASSERT_OK(zrt_recv(comm, buffer2.data(), buffer2.size(), ZRT_U8, 1 - rank, other));
        ASSERT_OK(zrt_event_record(event, other));

        zrt_status_t event_status = ZRT_SUCCESS;
        int64_t event_ms = 0;
        const auto start = std::chrono::steady_clock::now();
        std::thread event_waiter([&] {
          event_status = zrt_event_synchronize(event);
          event_ms = elapsed_ms(start);
        });
        // The stimulus: the abort must land while both waits block, so it comes a while after
        // them; the bounds below are measured from it, far below the 3 s timeout.
        static constexpr int kAbortAfterMs = 300;
        std::thread aborter([comm, rank] {
          if (rank != 0) return;
          std::this_thread::sleep_for(std::chrono::milliseconds(kAbortAfterMs));
          EXPECT_OK(zrt_comm_abort(comm));
        });
        const zrt_status_t status = zrt_stream_synchronize(stream);
        const int64_t stream_ms = elapsed_ms(start);
        const std::string message = zrt_last_error();
        aborter.join();
        event_waiter.join();
        EXPECT_EQ(status, ZRT_REMOTE_ERROR) << message;
        EXPECT_EQ(event_status, ZRT_REMOTE_ERROR);
        EXPECT_NE(message.find(rank == 0 ? "abort" : "rank 0"), std::string::npos) << message;
        // "At once": the abort comes at kAbortAfterMs; allow for a loaded 2-core machine.
        EXPECT_GE(stream_ms, rank == 0 ? kAbortAfterMs - 50 : 0);
        EXPECT_LT(stream_ms, 2300) << message;
        EXPECT_LT(event_ms, 2300);
        EXPECT_EQ(zrt_comm_get_error(comm), ZRT_REMOTE_ERROR);
        // Aborted means every future operation fails too, without waiting.
        EXPECT_EQ(zrt_barrier(comm, stream) == ZRT_SUCCESS ? zrt_stream_synchronize(stream)
                                                           : ZRT_REMOTE_ERROR,
                  ZRT_REMOTE_ERROR);
        const auto destroy_start = std::chrono::steady_clock::now();
        zrt_comm_destroy(comm);
        EXPECT_LT(elapsed_ms(destroy_start), 2000);
      },
      options);
}

// One communicator's life on every rank: init through the file OOB, a barrier and a checked
// all-reduce, then (if `victim` >= 0) that rank exits and the others see the next all-reduce
// fail; then destroy. Returns on the victim only by exiting.
void one_round(const std::string& name, int rank, int size, int victim) {
  FileOob oob(run_dir(), name, rank, size);
  zrt_comm_t comm = nullptr;
  ASSERT_OK(zrt_comm_init_oob(&oob.oob(), nullptr, &comm));
  zrt_stream_t stream = nullptr;
  ASSERT_OK(zrt_stream_create(comm, ZRT_MEM_HOST, &stream));
  zrt_stream_t second = nullptr;
  ASSERT_OK(zrt_stream_create(comm, ZRT_MEM_HOST, &second));
  zrt_event_t event = nullptr;
  ASSERT_OK(zrt_event_create(comm, &event));
  ASSERT_OK(barrier_sync(comm, stream));
  std::vector<float> data(1 << 20, 1.0f);  // large enough for UCX's single-copy path
  ASSERT_OK(zrt_all_reduce(comm, data.data(), data.data(), data.size(), ZRT_F32, ZRT_SUM, second));
  ASSERT_OK(zrt_event_record(event, second));
  ASSERT_OK(zrt_stream_wait_event(stream, event));
  ASSERT_OK(barrier_sync(comm, stream));
  EXPECT_EQ(data[0], static_cast<float>(size));
  if (victim >= 0) {
    // The victim leaves only once every rank has finished the barrier with it (else a peer
    // still in it would fail there, not in the all-reduce below). Out of band, through files.
    ASSERT_OK(file_barrier(run_dir(), name + "-before-exit", rank, size));
    if (rank == victim) _exit(0);
    const zrt_status_t status =
        zrt_all_reduce(comm, data.data(), data.data(), data.size(), ZRT_F32, ZRT_SUM, stream);
    EXPECT_NE(status == ZRT_SUCCESS ? zrt_stream_synchronize(stream) : status, ZRT_SUCCESS);
  }
  // Streams and events are left for destroy to free, as a framework that hit an error would.
  const zrt_status_t destroyed = zrt_comm_destroy(comm);
  if (victim < 0) {
    EXPECT_OK(destroyed);
  }
}

class Release : public ::testing::TestWithParam<int> {};

TEST_P(Release, DestroyGivesBackThreadsFdsAndSharedMemory) {
  const int victim = GetParam();
  RankOptions options;
  options.env["ZRT_TIMEOUT"] = "3";
  options.deadline_ms = 60000;
  const auto outcomes = run_ranks(
      3,
      [victim](int rank, int size) {
        one_round("warmup", rank, size, -1);
        const ProcessResources before = count_process_resources();
        one_round("round", rank, size, victim);
        const ProcessResources after = count_process_resources();
        std::fprintf(stderr, "rank %d before: %s\nrank %d after:  %s\n", rank,
                     before.describe().c_str(), rank, after.describe().c_str());
        EXPECT_EQ(resource_leaks(before, after), "");
      },
      options);
  for (const RankOutcome& outcome : outcomes) {
    if (outcome.rank != victim) {
      EXPECT_TRUE(outcome.passed()) << outcome.describe();
    }
  }
}

// -1: a healthy round; 2: rank 2 exits after the first collectives.
INSTANTIATE_TEST_SUITE_P(Hardening, Release, ::testing::Values(-1, 2),
                         [](const ::testing::TestParamInfo<int>& info) {
                           return info.param < 0
                                      ? std::string("Healthy")
                                      : "AfterRank" + std::to_string(info.param) + "Died";
                         });

}  // namespace
}  // namespace zrt::testing
