// The progress engine over a real UCX transport: stream order, events, sticky failures and their
// propagation through events, abort, no-progress timeouts (naming the rank that went silent), a
// vanished peer, shutdown.
#include <gtest/gtest.h>

#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <thread>
#include <vector>

#include "tests/collectives/rig.h"
#include "tests/harness/multirank.h"
#include "tests/harness/status_assert.h"
#include "tests/harness/wait_until.h"

namespace zrt::testing {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// CPU seconds this process (all threads) has used so far.
double cpu_seconds() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return usage.ru_utime.tv_sec + usage.ru_stime.tv_sec +
         1e-6 * (usage.ru_utime.tv_usec + usage.ru_stime.tv_usec);
}

// An f32 sum all-reduce of `in` into `out` (equal sizes).
CollectiveArgs all_reduce_of(std::vector<float>& in, std::vector<float>& out) {
  CollectiveArgs args;
  args.kind = ZRT_COLL_ALL_REDUCE;
  args.count = in.size();
  args.sendbuf = in.data();
  args.recvbuf = out.data();
  return args;
}

TEST(Engine, HostFunctionsRunInStreamOrder) {
  expect_ranks_pass(1, [](int rank, int size) {
    Rig rig;
    ASSERT_OK(rig.init(rank, size, "order"));
    std::vector<int> seen;
    for (int i = 0; i < 200; ++i) {
      ASSERT_OK(rig.stream().enqueue_host_function(
          [&seen, i] {
            seen.push_back(i);
            return Status::ok();
          },
          "append"));
    }
    ASSERT_OK(rig.stream().synchronize());
    ASSERT_EQ(seen.size(), 200u);
    for (int i = 0; i < 200; ++i) EXPECT_EQ(seen[i], i);
    EXPECT_TRUE(rig.stream().query().is_ok());
  });
}

TEST(Engine, FailedStreamIsStickyAndEventsReportIt) {
  expect_ranks_pass(1, [](int rank, int size) {
    Rig rig;
    ASSERT_OK(rig.init(rank, size, "sticky"));
    Event* before = nullptr;
    Event* after = nullptr;
    Event* never = nullptr;
    ASSERT_OK(rig.engine->create_event(&before));
    ASSERT_OK(rig.engine->create_event(&after));
    ASSERT_OK(rig.engine->create_event(&never));
    EXPECT_TRUE(never->query().is_ok());  // never recorded: complete
    EXPECT_TRUE(never->synchronize().is_ok());
    ASSERT_OK(rig.stream().enqueue_host_function([] { return Status::ok(); }, "fine"));
    ASSERT_OK(before->record(rig.stream()));
    ASSERT_OK(rig.stream().enqueue_host_function(
        [] { return Status::invalid_usage("the original cause"); }, "failing step"));
    ASSERT_OK(after->record(rig.stream()));
    Status status = rig.stream().synchronize();
    EXPECT_EQ(status.code(), ZRT_INVALID_USAGE);
    EXPECT_NE(status.message().find("the original cause"), std::string::npos) << status.message();
    EXPECT_NE(status.message().find("failing step"), std::string::npos) << status.message();
    Status later = rig.stream().enqueue_host_function([] { return Status::ok(); }, "later");
    EXPECT_EQ(later.code(), ZRT_INVALID_USAGE);
    EXPECT_EQ(later.message(), status.message());
    EXPECT_EQ(after->query().code(), ZRT_INVALID_USAGE);
    EXPECT_EQ(after->synchronize().code(), ZRT_INVALID_USAGE);
    EXPECT_EQ(rig.stream().query().code(), ZRT_INVALID_USAGE);
    // A local failure breaks its stream only, not the engine.
    EXPECT_TRUE(rig.engine->error().is_ok());
  });
}

TEST(Engine, ErrorPropagatesThroughEventToAnotherStream) {
  expect_ranks_pass(1, [](int rank, int size) {
    Rig rig;
    ASSERT_OK(rig.init(rank, size, "propagate", 30000, 2));
    Event* event = nullptr;
    ASSERT_OK(rig.engine->create_event(&event));
    ASSERT_OK(rig.stream(0).enqueue_host_function(
        [] { return Status(ZRT_REMOTE_ERROR, "peer 3 vanished"); }, "step on stream 0"));
    ASSERT_OK(event->record(rig.stream(0)));
    ASSERT_OK(rig.stream(1).wait_event(*event));
    std::atomic<bool> ran{false};
    // The progress thread may fail stream 1 through the wait before this enqueue (it did under
    // ThreadSanitizer's slower caller): the enqueue then returns the same sticky error.
    Status enqueued = rig.stream(1).enqueue_host_function(
        [&ran] {
          ran = true;
          return Status::ok();
        },
        "must not run");
    if (!enqueued.is_ok()) {
      EXPECT_EQ(enqueued.code(), ZRT_REMOTE_ERROR) << enqueued.message();
    }
    Status status = rig.stream(1).synchronize();
    EXPECT_EQ(status.code(), ZRT_REMOTE_ERROR);
    EXPECT_NE(status.message().find("peer 3 vanished"), std::string::npos) << status.message();
    EXPECT_FALSE(ran.load());
  });
}

TEST(Engine, EventOrdersStreams) {
  expect_ranks_pass(1, [](int rank, int size) {
    Rig rig;
    ASSERT_OK(rig.init(rank, size, "events", 30000, 2));
    Event* event = nullptr;
    ASSERT_OK(rig.engine->create_event(&event));
    std::atomic<int> step{0};
    for (int i = 0; i < 50; ++i) {
      ASSERT_OK(rig.stream(0).enqueue_host_function(
          [&step, i] {
            if (step.load() != 2 * i) return Status::invalid_usage("stream 0 out of order");
            step = 2 * i + 1;
            return Status::ok();
          },
          "first"));
      ASSERT_OK(event->record(rig.stream(0)));
      ASSERT_OK(rig.stream(1).wait_event(*event));
      ASSERT_OK(rig.stream(1).enqueue_host_function(
          [&step, i] {
            if (step.load() != 2 * i + 1) return Status::invalid_usage("stream 1 ran too early");
            step = 2 * i + 2;
            return Status::ok();
          },
          "second"));
      ASSERT_OK(event->record(rig.stream(1)));
      ASSERT_OK(rig.stream(0).wait_event(*event));
    }
    ASSERT_OK(rig.stream(0).synchronize());
    ASSERT_OK(rig.stream(1).synchronize());
    EXPECT_EQ(step.load(), 100);
  });
}

TEST(Engine, CudaStreamsAreRefusedAndShutdownIsIdempotent) {
  expect_ranks_pass(1, [](int rank, int size) {
    Rig rig;
    ASSERT_OK(rig.init(rank, size, "shutdown"));
    Stream* cuda = nullptr;
    EXPECT_EQ(rig.engine->create_stream(ZRT_MEM_CUDA, &cuda).code(), ZRT_UNSUPPORTED);
    EXPECT_EQ(rig.engine->create_stream(static_cast<zrt_mem_kind_t>(7), &cuda).code(),
              ZRT_INVALID_ARGUMENT);
    Stream* extra = nullptr;
    ASSERT_OK(rig.engine->create_stream(ZRT_MEM_HOST, &extra));
    EXPECT_EQ(extra->index(), 1);
    ASSERT_OK(rig.engine->destroy_stream(extra));
    ASSERT_OK(rig.engine->shutdown());
    ASSERT_OK(rig.engine->shutdown());
    Status late = rig.stream().enqueue_host_function([] { return Status::ok(); }, "late");
    EXPECT_EQ(late.code(), ZRT_INVALID_USAGE);
  });
}

TEST(Engine, AbortUnblocksSynchronizeAtOnce) {
  expect_ranks_pass(2, [](int rank, int size) {
    Rig rig;
    ASSERT_OK(rig.init(rank, size, "abort", 30000));
    if (rank == 1) {
      // Never sends, and stays until rank 0 is done: its leaving would fail rank 0's receive
      // with a peer error before the abort. Out of band: rank 0's engine is aborted.
      ASSERT_OK(rig.bootstrap->barrier());
      return;
    }
    std::vector<float> buffer(16);
    CollectiveArgs args;
    args.kind = ZRT_COLL_RECV;
    args.peer = 1;
    args.count = buffer.size();
    args.recvbuf = buffer.data();
    ASSERT_OK(enqueue_collective(rig.stream(), rank, size, args));
    EXPECT_EQ(rig.stream().query().code(), ZRT_IN_PROGRESS);
    // The stimulus: the abort must land while synchronize blocks, so it comes a while after
    // the call, well inside the 1 s synchronize is given to return and far below the engine's
    // 30 s timeout, which would end the wait otherwise.
    std::thread aborter([&rig] {
      usleep(200 * 1000);
      rig.engine->abort(Status(ZRT_REMOTE_ERROR, "communicator aborted"));
    });
    const auto start = Clock::now();
    Status status = rig.stream().synchronize();
    const double waited = seconds_since(start);
    aborter.join();
    EXPECT_EQ(status.code(), ZRT_REMOTE_ERROR);
    EXPECT_NE(status.message().find("communicator aborted"), std::string::npos);
    EXPECT_LT(waited, 1.0);
    EXPECT_EQ(rig.engine->error().code(), ZRT_REMOTE_ERROR);
    ASSERT_OK(rig.bootstrap->barrier());
  });
}

// A stream destroyed after the communicator failed is let go only once the progress thread
// has finished with its running task: its synchronize returns the failure at once, and the
// caller then frees what the task works on (a partition's copy into a bucket ran on freed
// memory: a survivor's segfault after a peer was killed, shm_leftovers).
TEST(Engine, DestroyingAFailedStreamWaitsForItsRunningTask) {
  expect_ranks_pass(1, [](int rank, int size) {
    auto entered = std::make_shared<std::atomic<bool>>(false);
    auto returned = std::make_shared<std::atomic<bool>>(false);
    Rig rig;
    ASSERT_OK(rig.init(rank, size, "destroy_failed"));
    Stream* copy = nullptr;
    ASSERT_OK(rig.engine->create_stream(ZRT_MEM_HOST, &copy));
    // The stimulus: a task that is still running when the failure lands (the sleep stands for
    // a long copy; the abort comes as soon as it has begun).
    ASSERT_OK(copy->enqueue_host_function(
        [entered, returned] {
          *entered = true;
          std::this_thread::sleep_for(std::chrono::milliseconds(300));
          *returned = true;
          return Status::ok();
        },
        "long copy"));
    ASSERT_TRUE(wait_until([&] { return entered->load(); }, std::chrono::seconds(10),
                           "the host function starts"));
    rig.engine->abort(Status(ZRT_REMOTE_ERROR, "a peer died"));
    EXPECT_EQ(copy->synchronize().code(), ZRT_REMOTE_ERROR);
    EXPECT_EQ(rig.engine->destroy_stream(copy).code(), ZRT_REMOTE_ERROR);
    EXPECT_TRUE(returned->load()) << "destroy_stream returned while the stream's task ran";
  });
}

TEST(Engine, NoProgressTimesOutNamingTheCallAndPeer) {
  expect_ranks_pass(2, [](int rank, int size) {
    Rig rig;
    ASSERT_OK(rig.init(rank, size, "timeout", 1000));
    if (rank == 1) {
      // Takes no part, and stays alive until rank 0 has seen its timeout: leaving would turn
      // the timeout into a peer error.
      ASSERT_OK(rig.bootstrap->barrier());
      return;
    }
    std::vector<float> in(1 << 16, 1.0f), out(1 << 16);
    CollectiveArgs args;
    args.kind = ZRT_COLL_ALL_GATHER;
    args.count = in.size() / 2;
    args.sendbuf = in.data();
    args.recvbuf = out.data();
    const auto start = Clock::now();
    Status status = rig.run(args);
    const double waited = seconds_since(start);
    EXPECT_EQ(status.code(), ZRT_TIMEOUT) << status.message();
    EXPECT_NE(status.message().find("all_gather(32768 x f32) on stream 0 made no progress for "
                                    "1000 ms; waiting on rank 1"),
              std::string::npos)
        << status.message();
    EXPECT_GE(waited, 0.9);
    EXPECT_LT(waited, 2.0);
    EXPECT_EQ(rig.engine->error().code(), ZRT_TIMEOUT);
    ASSERT_OK(rig.bootstrap->barrier());
  });
}

// Rank 2 stops (SIGSTOP: alive, its connections open, silent) before a ring all-reduce. Ranks 0
// and 1 time out; whichever neighbour each waits on, both name rank 2 as the one whose traffic
// stopped, since its beacons stopped too while each other's kept coming.
TEST(Engine, TimeoutNamesTheStoppedRankNotTheNeighbourWaitingOnIt) {
  expect_ranks_pass(3, [](int rank, int size) {
    Rig rig;
    ASSERT_OK(rig.init(rank, size, "silent", 1500));
    std::vector<pid_t> pids(static_cast<size_t>(size));
    const pid_t mine = getpid();
    ASSERT_OK(rig.bootstrap->allgather(&mine, pids.data(), sizeof(mine)));
    std::vector<float> in(1 << 20, 1.0f), out(1 << 20);
    const CollectiveArgs args = all_reduce_of(in, out);
    ASSERT_OK(rig.run(args));  // all three healthy
    ASSERT_OK(rig.bootstrap->barrier());
    if (rank == 2) {
      kill(mine, SIGSTOP);  // until rank 0 or 1 sends SIGCONT
      ASSERT_OK(rig.bootstrap->barrier());
      return;
    }
    Status status = rig.run(args);
    EXPECT_EQ(status.code(), ZRT_TIMEOUT) << status.message();
    EXPECT_NE(status.message().find("made no progress for 1500 ms; no traffic from rank 2 for "),
              std::string::npos)
        << status.message();
    EXPECT_NE(status.message().find("(it died, is unreachable or stopped; every other rank was "
                                    "heard from within"),
              std::string::npos)
        << status.message();
    EXPECT_NE(status.message().find("; waiting on rank "), std::string::npos) << status.message();
    // The other survivor times out within milliseconds of this one (both waited since the
    // barrier); a second later it has, and rank 2 may speak again.
    usleep(1000 * 1000);
    kill(pids[2], SIGCONT);
    ASSERT_OK(rig.bootstrap->barrier());
  });
}

TEST(Engine, VanishedPeerFailsSurvivorsWithinTimeout) {
  std::vector<RankOutcome> outcomes = run_ranks(3, [](int rank, int size) {
    Rig rig;
    ASSERT_OK(rig.init(rank, size, "vanish", 2000));
    std::vector<float> in(1 << 22, 1.0f), out(1 << 22);
    const CollectiveArgs args = all_reduce_of(in, out);
    ASSERT_OK(rig.run(args));  // all three healthy
    // Out of band, so that rank 2 cannot leave while a peer still finishes the all-reduce above
    // (that peer would then fail there, not in the runs below).
    ASSERT_OK(rig.bootstrap->barrier());
    if (rank == 2) _exit(0);  // vanishes without a word
    const auto start = Clock::now();
    Status status;
    for (int i = 0; i < 3 && status.is_ok(); ++i) status = rig.run(args);
    EXPECT_FALSE(status.is_ok());
    EXPECT_TRUE(status.code() == ZRT_TIMEOUT || status.code() == ZRT_REMOTE_ERROR)
        << status.message();
    EXPECT_LT(seconds_since(start), 8.0);
    // A failed engine sleeps: no spinning on the error. A measurement window, not a wait: a
    // spinning progress thread would burn most of this second, a sleeping one almost none.
    const double cpu_before = cpu_seconds();
    usleep(1000 * 1000);
    EXPECT_LT(cpu_seconds() - cpu_before, 0.2);
  });
  EXPECT_TRUE(outcomes[0].passed()) << outcomes[0].describe();
  EXPECT_TRUE(outcomes[1].passed()) << outcomes[1].describe();
}

// An event the engine did not create (the shape of a CUDA event): complete or failed as its
// owner says; the engine polls it.
class OwnerEvent final : public Event {
 public:
  explicit OwnerEvent(ProgressEngine& engine) : engine_(engine) {}
  Status record(Stream&) override { return Status::ok(); }
  Status query() override {
    polls_.fetch_add(1);
    const int state = state_.load();
    if (state == 0) return Status(ZRT_IN_PROGRESS, "not yet");
    if (state == 1) return Status::ok();
    return Status(ZRT_REMOTE_ERROR, "device work failed");
  }
  Status synchronize() override { return query(); }
  ProgressEngine& engine() override { return engine_; }
  std::atomic<int> state_{0};
  std::atomic<int> polls_{0};  // query() calls: the engine's polls

 private:
  ProgressEngine& engine_;
};

TEST(Engine, StreamsWaitOnEventsOfAnotherKind) {
  expect_ranks_pass(1, [](int rank, int size) {
    Rig rig;
    ASSERT_OK(rig.init(rank, size, "foreign", 30000, 2));
    OwnerEvent event(*rig.engine);
    ASSERT_OK(rig.stream(0).wait_event(event));
    std::atomic<bool> ran_after{false};
    ASSERT_OK(rig.stream(0).enqueue_host_function(
        [&] {
          ran_after = event.state_.load() == 1;
          return Status::ok();
        },
        "after"));
    // Twice polled and still pending, the engine has had its chance to run the function early.
    ASSERT_TRUE(wait_until([&] { return event.polls_.load() >= 2; }, std::chrono::seconds(10),
                           "the engine polling the foreign event"));
    EXPECT_EQ(rig.stream(0).query().code(), ZRT_IN_PROGRESS);
    event.state_ = 1;
    ASSERT_OK(rig.stream(0).synchronize());
    EXPECT_TRUE(ran_after.load());
    OwnerEvent failing(*rig.engine);
    failing.state_ = 2;
    ASSERT_OK(rig.stream(1).wait_event(failing));
    Status status = rig.stream(1).synchronize();
    EXPECT_EQ(status.code(), ZRT_REMOTE_ERROR);
    EXPECT_NE(status.message().find("device work failed"), std::string::npos) << status.message();
  });
}

TEST(Engine, WaitsBlockWithoutSpinning) {
  expect_ranks_pass(2, [](int rank, int size) {
    Rig rig;
    ASSERT_OK(rig.init(rank, size, "block"));
    std::vector<float> buffer(1 << 20);
    CollectiveArgs args;
    args.count = buffer.size();
    args.peer = 1 - rank;
    if (rank == 1) {
      // The stimulus: rank 0 must wait for the message, through its 300 ms idle window and
      // then about 0.9 s blocked in the receive, long enough for spinning to show in its CPU
      // time.
      usleep(1200 * 1000);
      args.kind = ZRT_COLL_SEND;
      args.sendbuf = buffer.data();
      ASSERT_OK(rig.run(args));
      return;
    }
    // Idle engine, then an engine waiting for a message, then a host thread blocked on it.
    double cpu_before = cpu_seconds();
    usleep(300 * 1000);  // a measurement window: an idle engine uses no CPU in it
    EXPECT_LT(cpu_seconds() - cpu_before, 0.1) << "idle engine";
    args.kind = ZRT_COLL_RECV;
    args.recvbuf = buffer.data();
    cpu_before = cpu_seconds();
    ASSERT_OK(rig.run(args));
    EXPECT_LT(cpu_seconds() - cpu_before, 0.2) << "waiting for a message for about 0.9 s";
  });
}

}  // namespace
}  // namespace zrt::testing
