// The kill matrix: one rank is killed (SIGKILL) at a random moment inside the first collective
// of a fresh stream, for every collective kind, every all-reduce algorithm (ZRT_ALGO) and both
// ring paths (ZRT_WINDOWS=0/1), at 2, 3 and 4 ranks. Every survivor must end that collective
// with an error naming the dead rank (or with success, when its part was done before the kill),
// within seconds; no survivor may crash (the first window handshake mapped a dead peer's memory
// through UCX's rkey unpack and segfaulted; cma's process_vm_readv against a dead peer aborted),
// and zrt_comm_destroy must return promptly.
//
// The moment is a random fraction (below kLatestKill) of how long the victim's own first
// collective of a fresh stream took just before, on a probe stream, so the kill lands inside
// the collective under test whatever its size and algorithm. A repetition whose victim returned
// from that collective before the kill did not test a death mid-collective: each case runs
// kDefaultReps times (ZRT_TEST_KILL_REPS overrides), prints how many repetitions killed the
// victim inside the call and how many had a survivor name it, and fails unless most were killed
// inside the call.
// scripts/kill_matrix.sh runs each case many times and tabulates the KILL lines this test prints,
// one per survivor:
//   KILL case=<name> rep=<i> victim=<v> kill_at=<fraction> rank=<r> outcome=<named|completed|
//   other>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
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

constexpr int kTimeoutSeconds = 5;
constexpr int64_t kLimitMs = kTimeoutSeconds * 1000 + 5000;
// 4 MiB of f32 per rank by default (a few ms here); ZRT_TEST_KILL_COUNT elements otherwise.
constexpr size_t kDefaultCount = size_t{1} << 20;
constexpr int kDefaultReps = 7;
// A fresh stream's first call is not always as long as the probe's: its first half is.
constexpr double kLatestKill = 0.5;
constexpr int kProbes = 3;

size_t element_count() {
  const char* text = std::getenv("ZRT_TEST_KILL_COUNT");
  const long long count = text != nullptr ? std::atoll(text) : 0;
  return count > 0 ? static_cast<size_t>(count) : kDefaultCount;
}

enum class Kind {
  kAllReduce,
  kReduceScatter,
  kAllGather,
  kBroadcast,
  kReduce,
  kBarrier,
  kSendRecv
};

struct Case {
  Kind kind;
  const char* algo;  // ZRT_ALGO, for all-reduce
  int windows;       // ZRT_WINDOWS
  int ranks;
};

const char* kind_name(Kind kind) {
  static const char* names[] = {"AllReduce", "ReduceScatter", "AllGather", "Broadcast",
                                "Reduce",    "Barrier",       "SendRecv"};
  return names[static_cast<int>(kind)];
}

std::string case_name(const Case& c) {
  std::string name = kind_name(c.kind);
  if (c.kind == Kind::kAllReduce) name += std::string("_") + c.algo;
  return name + "_W" + std::to_string(c.windows) + "_N" + std::to_string(c.ranks);
}

// The collective under test, enqueued on `stream` and waited for.
zrt_status_t run_collective(const Case& c, zrt_comm_t comm, zrt_stream_t stream, int rank,
                            int size) {
  const size_t kCount = element_count();
  std::vector<float> in(kCount, 1.0f), out(kCount * static_cast<size_t>(size), 0.0f);
  zrt_status_t status = ZRT_SUCCESS;
  switch (c.kind) {
    case Kind::kAllReduce:
      status = zrt_all_reduce(comm, in.data(), out.data(), kCount, ZRT_F32, ZRT_SUM, stream);
      break;
    case Kind::kReduceScatter:
      status = zrt_reduce_scatter(comm, out.data(), in.data(), kCount, ZRT_F32, ZRT_SUM, stream);
      break;
    case Kind::kAllGather:
      status = zrt_all_gather(comm, in.data(), out.data(), kCount, ZRT_F32, stream);
      break;
    case Kind::kBroadcast:
      status = zrt_broadcast(comm, in.data(), out.data(), kCount, ZRT_F32, 0, stream);
      break;
    case Kind::kReduce:
      status = zrt_reduce(comm, in.data(), out.data(), kCount, ZRT_F32, ZRT_SUM, 0, stream);
      break;
    case Kind::kBarrier:
      status = zrt_barrier(comm, stream);
      break;
    case Kind::kSendRecv: {
      // Around the ring, even ranks send first and odd ranks receive first: a stream runs its
      // operations in order, so with every rank sending first a rendezvous-sized send would
      // wait for a receive that no rank has posted yet, and only a death would end the wait.
      const int next = (rank + 1) % size, previous = (rank + size - 1) % size;
      if (rank % 2 == 0) {
        status = zrt_send(comm, in.data(), kCount, ZRT_F32, next, stream);
        if (status == ZRT_SUCCESS) {
          status = zrt_recv(comm, out.data(), kCount, ZRT_F32, previous, stream);
        }
      } else {
        status = zrt_recv(comm, out.data(), kCount, ZRT_F32, previous, stream);
        if (status == ZRT_SUCCESS) {
          status = zrt_send(comm, in.data(), kCount, ZRT_F32, next, stream);
        }
      }
      break;
    }
  }
  return status == ZRT_SUCCESS ? zrt_stream_synchronize(stream) : status;
}

int repetitions() {
  const char* text = std::getenv("ZRT_TEST_KILL_REPS");
  const int reps = text != nullptr ? std::atoi(text) : kDefaultReps;
  return reps > 0 ? reps : kDefaultReps;
}

// What each survivor saw, written by the ranks into memory shared with the parent.
enum SurvivorOutcome : int { kNotReported = 0, kNamed, kCompleted, kOther, kVictimReturned };

class SharedOutcomes {
 public:
  explicit SharedOutcomes(int ranks) : ranks_(ranks) {
    void* memory = mmap(nullptr, bytes(), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS,
                        -1, 0);
    outcomes_ = memory == MAP_FAILED ? nullptr : static_cast<int*>(memory);
  }
  ~SharedOutcomes() {
    if (outcomes_ != nullptr) munmap(outcomes_, bytes());
  }
  SharedOutcomes(const SharedOutcomes&) = delete;
  SharedOutcomes& operator=(const SharedOutcomes&) = delete;

  bool mapped() const { return outcomes_ != nullptr; }
  void set(int rank, SurvivorOutcome outcome) { outcomes_[rank] = outcome; }
  SurvivorOutcome of(int rank) const { return static_cast<SurvivorOutcome>(outcomes_[rank]); }
  bool any_named() const {
    return std::count(outcomes_, outcomes_ + ranks_, static_cast<int>(kNamed)) > 0;
  }

 private:
  size_t bytes() const { return sizeof(int) * static_cast<size_t>(ranks_); }
  int ranks_;
  int* outcomes_ = nullptr;
};

struct Repetition {
  bool killed_inside = false;  // the victim died inside the collective under test
  bool named = false;          // a survivor's error named it
};

Repetition run_one(const Case& c, int rep, uint64_t seed) {
  std::mt19937_64 random(seed);
  const int victim = static_cast<int>(random() % static_cast<uint64_t>(c.ranks));
  const double kill_at = std::uniform_real_distribution<double>(0.0, kLatestKill)(random);
  SharedOutcomes shared(c.ranks);
  if (!shared.mapped()) {
    ADD_FAILURE() << "mmap of the shared outcomes failed";
    return {};
  }
  RankOptions options;
  options.env["ZRT_TIMEOUT"] = std::to_string(kTimeoutSeconds);
  options.env["ZRT_ALGO"] = c.algo;
  options.env["ZRT_WINDOWS"] = std::to_string(c.windows);
  options.deadline_ms = 60000;
  const std::string name = case_name(c);
  const auto outcomes = run_ranks(
      c.ranks,
      [&](int rank, int size) {
        zrt_comm_t comm = nullptr;
        ASSERT_EQ(zrt_comm_init_env(nullptr, &comm), ZRT_SUCCESS) << zrt_last_error();
        zrt_stream_t warm = nullptr, probe = nullptr, fresh = nullptr;
        ASSERT_EQ(zrt_stream_create(comm, ZRT_MEM_HOST, &warm), ZRT_SUCCESS);
        ASSERT_EQ(barrier_sync(comm, warm), ZRT_SUCCESS) << zrt_last_error();
        // How long a first collective of a fresh stream takes here: the span the kill falls in.
        // The shortest of a few probes: one probe slowed by the scheduler (two cores, more
        // ranks and threads) put most kills after the collective under test had returned.
        auto first_call = std::chrono::steady_clock::duration::max();
        for (int p = 0; p < kProbes; ++p) {
          ASSERT_EQ(zrt_stream_create(comm, ZRT_MEM_HOST, &probe), ZRT_SUCCESS);
          const auto probe_start = std::chrono::steady_clock::now();
          ASSERT_EQ(run_collective(c, comm, probe, rank, size), ZRT_SUCCESS) << zrt_last_error();
          first_call = std::min(first_call, std::chrono::steady_clock::now() - probe_start);
          ASSERT_EQ(barrier_sync(comm, warm), ZRT_SUCCESS) << zrt_last_error();
        }
        ASSERT_EQ(zrt_stream_create(comm, ZRT_MEM_HOST, &fresh), ZRT_SUCCESS);
        // Every rank is out of the warm-up (a victim done with its barrier may die while a peer
        // still finishes it): the kill lands in the collective under test.
        ASSERT_TRUE(file_barrier(run_dir(), "warm", rank, size).is_ok());
        if (rank == victim) {
          const auto delay = std::chrono::duration_cast<std::chrono::nanoseconds>(
              first_call * kill_at);
          std::thread([delay] {
            std::this_thread::sleep_for(delay);
            raise(SIGKILL);
          }).detach();
          run_collective(c, comm, fresh, rank, size);
          shared.set(rank, kVictimReturned);
          for (;;) pause();  // the kill comes, whatever the collective did
        }
        const auto start = std::chrono::steady_clock::now();
        const zrt_status_t status = run_collective(c, comm, fresh, rank, size);
        const int64_t took = elapsed_ms(start);
        const std::string message = zrt_last_error();
        const std::string dead = "rank " + std::to_string(victim);
        const SurvivorOutcome seen = status == ZRT_SUCCESS                     ? kCompleted
                                     : message.find(dead) != std::string::npos ? kNamed
                                                                               : kOther;
        shared.set(rank, seen);
        const char* outcome = seen == kCompleted ? "completed" : seen == kNamed ? "named" : "other";
        std::fprintf(stderr,
                     "KILL case=%s rep=%d victim=%d kill_at=%.2f rank=%d outcome=%s ms=%lld "
                     "status=%s message=%s\n",
                     name.c_str(), rep, victim, kill_at, rank, outcome,
                     static_cast<long long>(took), zrt_status_string(status), message.c_str());
        if (status != ZRT_SUCCESS) {
          EXPECT_TRUE(status == ZRT_REMOTE_ERROR || status == ZRT_TIMEOUT)
              << zrt_status_string(status) << ": " << message;
          EXPECT_NE(message.find(dead), std::string::npos)
              << "the error does not name the dead " << dead << ": " << message;
        }
        EXPECT_LT(took, kLimitMs) << message;
        // Survivors stay until every survivor has its error: one that left early would look
        // dead to the others, which might then name it instead of the victim.
        const int index = rank < victim ? rank : rank - 1;
        EXPECT_TRUE(file_barrier(run_dir(), "survived", index, size - 1).is_ok());
        const auto destroy_start = std::chrono::steady_clock::now();
        zrt_comm_destroy(comm);
        EXPECT_LT(elapsed_ms(destroy_start), kLimitMs) << "zrt_comm_destroy after the kill";
      },
      options);
  for (const RankOutcome& outcome : outcomes) {
    if (outcome.rank == victim) {
      EXPECT_EQ(outcome.signal, SIGKILL) << name << ": the victim " << outcome.describe();
    } else {
      // A crash (SIGSEGV, SIGABRT) or a hang of a survivor is what this test exists to catch.
      EXPECT_TRUE(outcome.passed()) << name << " rep " << rep << " victim " << victim
                                    << " kill at " << kill_at << ": " << outcome.describe();
      if (outcome.signal != 0 || outcome.timed_out) {
        std::fprintf(stderr, "KILL case=%s rep=%d victim=%d kill_at=%.2f rank=%d outcome=%s\n",
                     name.c_str(), rep, victim, kill_at, outcome.rank,
                     outcome.timed_out ? "hang" : "crash");
      }
    }
  }
  return {.killed_inside = shared.of(victim) != kVictimReturned, .named = shared.any_named()};
}

class KillMatrix : public ::testing::TestWithParam<Case> {};

TEST_P(KillMatrix, SurvivorsNameTheDeadRank) {
  const Case c = GetParam();
  const int reps = repetitions();
  const uint64_t base = std::random_device{}();
  int inside = 0, named = 0;
  for (int rep = 0; rep < reps; ++rep) {
    const Repetition result = run_one(c, rep, base + static_cast<uint64_t>(rep));
    inside += result.killed_inside ? 1 : 0;
    named += result.named ? 1 : 0;
  }
  std::printf("%s: %d of %d repetitions killed the victim mid-collective, %d had a survivor "
              "name it (seed %llu)\n",
              case_name(c).c_str(), inside, reps, named, static_cast<unsigned long long>(base));
  EXPECT_GT(2 * inside, reps)
      << case_name(c) << ": in most repetitions the victim returned from the collective before "
      << "the kill, so a death mid-collective was not tested";
}

std::vector<Case> all_cases() {
  std::vector<Case> cases;
  for (int ranks : {2, 3, 4}) {
    for (int windows : {0, 1}) {
      for (const char* algo : {"ring", "direct", "rd"}) {
        cases.push_back(Case{Kind::kAllReduce, algo, windows, ranks});
      }
      cases.push_back(Case{Kind::kReduceScatter, "auto", windows, ranks});
      cases.push_back(Case{Kind::kAllGather, "auto", windows, ranks});
    }
    // Broadcast, reduce, barrier and send/recv never use the window path.
    for (Kind kind : {Kind::kBroadcast, Kind::kReduce, Kind::kBarrier, Kind::kSendRecv}) {
      cases.push_back(Case{kind, "auto", 1, ranks});
    }
  }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Hardening, KillMatrix, ::testing::ValuesIn(all_cases()),
                         [](const ::testing::TestParamInfo<Case>& info) {
                           return case_name(info.param);
                         });

}  // namespace
}  // namespace zrt::testing
