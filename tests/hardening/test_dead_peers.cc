// Survival of dead and stalled peers. One rank of three (the victim) fails at a chosen point:
// during bootstrap, inside a collective, or between two steps; it stalls (its main thread stops
// calling zrt, its process stays alive), freezes (SIGSTOP: every thread of it stops, sockets
// stay open), exits (_exit) or is killed (SIGKILL). Every survivor must get an error from the
// wait it is in, within the communicator's timeout plus scheduling slack, with a message that
// says what went wrong, and zrt_comm_destroy must then return promptly.
//
// The timeout is short (ZRT_TIMEOUT=2 s). The slack is generous because two cores run three
// ranks here, sometimes beside other builds: the test proves "seconds, not a 30-minute hang",
// not a latency figure.
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
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
constexpr int kTimeoutSeconds = 2;
constexpr int64_t kSlackMs = 5000;
constexpr int64_t kLimitMs = kTimeoutSeconds * 1000 + kSlackMs;
constexpr int kSteps = 3;
// Inside a collective: enough back-to-back all-reduces of 8 MiB that the failure, 30 ms after
// they are enqueued, lands in the middle of one (they take hundreds of ms in all).
constexpr size_t kBigCount = size_t{2} << 20;
constexpr int kBigCollectives = 40;

enum class Phase { kBootstrap, kInsideCollective, kBetweenSteps };
enum class Failure { kStall, kFreeze, kExit, kKill };

struct Scenario {
  Phase phase;
  Failure failure;
  int victim;
  bool no_cma = false;  // UCX_TLS=^cma (see the instantiations at the end)
};

std::string scenario_name(const ::testing::TestParamInfo<Scenario>& info) {
  const char* phase[] = {"Bootstrap", "InsideCollective", "BetweenSteps"};
  const char* failure[] = {"Stall", "Freeze", "Exit", "Kill"};
  return std::string(phase[static_cast<int>(info.param.phase)]) +
         failure[static_cast<int>(info.param.failure)] + "Rank" + std::to_string(info.param.victim);
}

// The victim's end. Stall and freeze leave the process for the survivors to kill.
[[noreturn]] void fail_now(Failure failure) {
  switch (failure) {
    case Failure::kStall:
      publish_victim_pid();
      for (;;) pause();
    case Failure::kFreeze:
      publish_victim_pid();
      raise(SIGSTOP);
      for (;;) pause();
    case Failure::kExit:
      _exit(1);
    case Failure::kKill:
      raise(SIGKILL);
  }
  _exit(2);
}

// Fails the whole process from a helper thread after `delay_ms`, while the main thread is
// inside zrt (a stall is the main thread's own choice, so it is not offered here).
void fail_later(Failure failure, int delay_ms) {
  std::thread([failure, delay_ms] {
    std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));
    fail_now(failure);
  }).detach();
}

// One training-like step: an all-reduce of a small gradient, checked.
zrt_status_t step(zrt_comm_t comm, zrt_stream_t stream, int size) {
  std::vector<float> grad(1000, 1.0f);
  zrt_status_t status =
      zrt_all_reduce(comm, grad.data(), grad.data(), grad.size(), ZRT_F32, ZRT_SUM, stream);
  if (status == ZRT_SUCCESS) status = zrt_stream_synchronize(stream);
  if (status == ZRT_SUCCESS && grad[999] != static_cast<float>(size)) return ZRT_INTERNAL_ERROR;
  return status;
}

void victim_body(const Scenario& scenario, int size) {
  if (scenario.phase == Phase::kBootstrap) {
    if (scenario.failure != Failure::kKill) fail_now(scenario.failure);
    fail_later(Failure::kKill, 5);  // dies somewhere inside the rendezvous
    zrt_comm_t comm = nullptr;
    zrt_comm_init_env(nullptr, &comm);
    fail_now(Failure::kKill);
  }
  zrt_comm_t comm = nullptr;
  ASSERT_OK(zrt_comm_init_env(nullptr, &comm));
  zrt_stream_t stream = nullptr;
  ASSERT_OK(zrt_stream_create(comm, ZRT_MEM_HOST, &stream));
  ASSERT_OK(barrier_sync(comm, stream));
  if (scenario.phase == Phase::kBetweenSteps) {
    for (int i = 0; i < kSteps; ++i) ASSERT_OK(step(comm, stream, size));
    // Between steps: every survivor has finished the last step with it before it fails (a
    // rank that dies while its sends are in flight fails that step, which is another case).
    ASSERT_OK(file_barrier(run_dir(), "between-steps", scenario.victim, size));
    fail_now(scenario.failure);
  }
  std::vector<float> data(kBigCount, 1.0f);
  for (int i = 0; i < kBigCollectives; ++i) {
    zrt_all_reduce(comm, data.data(), data.data(), data.size(), ZRT_F32, ZRT_MAX, stream);
  }
  fail_later(scenario.failure, 30);
  zrt_stream_synchronize(stream);
  for (;;) pause();  // the helper thread ends the process
}

// A survivor's failing wait: an error, in time, with a message; then a prompt destroy.
void expect_prompt_error(zrt_status_t status, int64_t waited_ms, const char* what) {
  const std::string message = zrt_last_error();
  EXPECT_NE(status, ZRT_SUCCESS) << what << " succeeded without the victim";
  EXPECT_TRUE(status == ZRT_TIMEOUT || status == ZRT_REMOTE_ERROR)
      << what << ": " << zrt_status_string(status) << ": " << message;
  EXPECT_LT(waited_ms, kLimitMs) << what << " took " << waited_ms << " ms: " << message;
  EXPECT_FALSE(message.empty()) << what;
  std::fprintf(stderr, "survivor: %s -> %s after %lld ms: %s\n", what, zrt_status_string(status),
               static_cast<long long>(waited_ms), message.c_str());
}

void survivor_body(const Scenario& scenario, int rank, int size) {
  zrt_comm_t comm = nullptr;
  auto start = std::chrono::steady_clock::now();
  const zrt_status_t init = zrt_comm_init_env(nullptr, &comm);
  if (scenario.phase == Phase::kBootstrap) {
    if (init == ZRT_SUCCESS) {
      // A victim killed late in the rendezvous may let it finish: then the first step with it
      // must fail instead.
      zrt_stream_t stream = nullptr;
      ASSERT_OK(zrt_stream_create(comm, ZRT_MEM_HOST, &stream));
      start = std::chrono::steady_clock::now();
      expect_prompt_error(step(comm, stream, size), elapsed_ms(start), "the first step");
      zrt_comm_destroy(comm);
    } else {
      expect_prompt_error(init, elapsed_ms(start), "zrt_comm_init_env");
    }
    kill_victim();
    return;
  }
  ASSERT_OK(init);
  zrt_stream_t stream = nullptr;
  ASSERT_OK(zrt_stream_create(comm, ZRT_MEM_HOST, &stream));
  ASSERT_OK(barrier_sync(comm, stream));
  zrt_status_t status = ZRT_SUCCESS;
  if (scenario.phase == Phase::kBetweenSteps) {
    for (int i = 0; i < kSteps; ++i) ASSERT_OK(step(comm, stream, size));
    ASSERT_OK(file_barrier(run_dir(), "between-steps", rank, size));
    start = std::chrono::steady_clock::now();
    status = step(comm, stream, size);
  } else {
    std::vector<float> data(kBigCount, 1.0f);
    start = std::chrono::steady_clock::now();
    for (int i = 0; i < kBigCollectives && status == ZRT_SUCCESS; ++i) {
      status =
          zrt_all_reduce(comm, data.data(), data.data(), data.size(), ZRT_F32, ZRT_MAX, stream);
    }
    if (status == ZRT_SUCCESS) status = zrt_stream_synchronize(stream);
  }
  expect_prompt_error(status, elapsed_ms(start), "the collective with the victim");
  EXPECT_NE(zrt_comm_get_error(comm), ZRT_SUCCESS);
  // Later work on the failed stream reports the same failure at once, no new wait.
  start = std::chrono::steady_clock::now();
  EXPECT_NE(zrt_stream_synchronize(stream), ZRT_SUCCESS);
  EXPECT_LT(elapsed_ms(start), 1000);
  kill_victim();
  start = std::chrono::steady_clock::now();
  zrt_comm_destroy(comm);  // local after an error; its status is the error already seen
  EXPECT_LT(elapsed_ms(start), kLimitMs) << "zrt_comm_destroy after the failure";
}

class DeadPeers : public ::testing::TestWithParam<Scenario> {};

TEST_P(DeadPeers, SurvivorsFailWithinTimeout) {
  const Scenario scenario = GetParam();
  RankOptions options;
  options.env["ZRT_TIMEOUT"] = std::to_string(kTimeoutSeconds);
  options.deadline_ms = 60000;
  if (scenario.no_cma) options.env["UCX_TLS"] = "^cma";
  const auto outcomes = run_ranks(
      kRanks,
      [&scenario](int rank, int size) {
        if (rank == scenario.victim) {
          victim_body(scenario, size);
        } else {
          survivor_body(scenario, rank, size);
        }
      },
      options);
  ASSERT_EQ(outcomes.size(), static_cast<size_t>(kRanks));
  for (const RankOutcome& outcome : outcomes) {
    if (outcome.rank == scenario.victim) {
      EXPECT_FALSE(outcome.timed_out) << "the survivors did not end the victim";
    } else {
      EXPECT_TRUE(outcome.passed()) << outcome.describe();
    }
  }
}

// The store is served by rank 0, so its death during bootstrap is a case of its own.
INSTANTIATE_TEST_SUITE_P(
    Hardening, DeadPeers,
    ::testing::Values(Scenario{Phase::kBootstrap, Failure::kStall, 2},
                      Scenario{Phase::kBootstrap, Failure::kExit, 2},
                      Scenario{Phase::kBootstrap, Failure::kKill, 2},
                      Scenario{Phase::kBootstrap, Failure::kStall, 0},
                      Scenario{Phase::kBootstrap, Failure::kKill, 0},
                      Scenario{Phase::kInsideCollective, Failure::kFreeze, 2},
                      Scenario{Phase::kInsideCollective, Failure::kExit, 1, true},
                      Scenario{Phase::kInsideCollective, Failure::kKill, 0, true},
                      Scenario{Phase::kBetweenSteps, Failure::kStall, 1},
                      Scenario{Phase::kBetweenSteps, Failure::kFreeze, 0},
                      Scenario{Phase::kBetweenSteps, Failure::kExit, 2},
                      Scenario{Phase::kBetweenSteps, Failure::kKill, 1}),
    scenario_name);

// With the default transports (cma included): data endpoints are in UCX error mode NONE, and
// UCX 1.13 treated cma's process_vm_readv ESRCH against a dead peer as fatal on an endpoint
// without an error callback, aborting the *survivor* (5 of 8 runs once). Every endpoint now
// carries the callback (transports/ucx/ucx_transport.cc), so these run like the ones above.
INSTANTIATE_TEST_SUITE_P(Cma, DeadPeers,
                         ::testing::Values(Scenario{Phase::kInsideCollective, Failure::kExit, 1},
                                           Scenario{Phase::kInsideCollective, Failure::kKill, 0}),
                         scenario_name);

}  // namespace
}  // namespace zrt::testing
