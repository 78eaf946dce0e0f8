// Soak: 4 ranks run thousands of mixed collectives on three streams (all-reduce, reduce-scatter,
// all-gather, broadcast, reduce, barrier; f32 and i32; sizes from 0 to 64 Ki elements,
// log-uniform), with events linking the streams and random delays injected on each rank
// (so ranks arrive skewed and streams overtake each other). Every result is checked. Resident
// memory is read after a warm-up and at the end and must stay flat: a per-operation leak of
// even a few hundred bytes shows over thousands of operations.
//
// The test's own buffers are a fixed pool (a ring of slots per stream), so its memory does not
// move; what could grow is the library's. ZRT_SOAK_OPS and ZRT_SOAK_SEED adjust a run.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <fstream>
#include <functional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "tests/harness/file_bootstrap.h"
#include "tests/harness/multirank.h"
#include "tests/harness/status_assert.h"
#include "zrt/zrt.h"

namespace zrt::testing {
namespace {

constexpr int kRanks = 4;
constexpr int kStreams = 3;
constexpr int kSlots = 4;  // operations in flight per stream
constexpr size_t kMaxCount = size_t{64} << 10;
// Allowed RSS growth between the warm-up and the end, for the allocator's own drift.
constexpr int64_t kRssSlackBytes = int64_t{8} << 20;

uint64_t env_or(const char* name, uint64_t fallback) {
  const char* value = std::getenv(name);
  return value != nullptr ? std::strtoull(value, nullptr, 10) : fallback;
}

int64_t rss_bytes() {
  std::ifstream statm("/proc/self/statm");
  int64_t pages = 0, resident = 0;
  statm >> pages >> resident;
  return resident * sysconf(_SC_PAGESIZE);
}

// Small integers, so that sums over 4 ranks are exact in f32.
int32_t value(uint64_t op, int rank, size_t i) {
  return static_cast<int32_t>((op * 7 + static_cast<uint64_t>(rank) * 3 + i) % 17);
}

struct Op {
  uint64_t id = 0;
  int kind = 0;  // 0 all-reduce, 1 reduce-scatter, 2 all-gather, 3 broadcast, 4 reduce, 5 barrier
  bool f32 = true;
  size_t count = 0;
  int root = 0;
};

struct Slot {
  std::vector<int32_t> send = std::vector<int32_t>(kMaxCount * kRanks);
  std::vector<int32_t> recv = std::vector<int32_t>(kMaxCount * kRanks);
  Op op;
};

template <typename T>
T as(int32_t v) {
  return static_cast<T>(v);
}

// Fills the slot's send buffer (as float or int32) and enqueues its op.
zrt_status_t enqueue(zrt_comm_t comm, zrt_stream_t stream, Slot& slot, int rank, int size) {
  const Op& op = slot.op;
  const size_t in = (op.kind == 1) ? op.count * static_cast<size_t>(size) : op.count;
  for (size_t i = 0; i < in; ++i) {
    const int32_t v = value(op.id, rank, i);
    if (op.f32) {
      reinterpret_cast<float*>(slot.send.data())[i] = as<float>(v);
    } else {
      slot.send[i] = v;
    }
  }
  std::fill(slot.recv.begin(), slot.recv.end(), -1);
  const zrt_dtype_t dtype = op.f32 ? ZRT_F32 : ZRT_I32;
  void* send = slot.send.data();
  void* recv = slot.recv.data();
  switch (op.kind) {
    case 0:
      return zrt_all_reduce(comm, send, recv, op.count, dtype, ZRT_SUM, stream);
    case 1:
      return zrt_reduce_scatter(comm, send, recv, op.count, dtype, ZRT_SUM, stream);
    case 2:
      return zrt_all_gather(comm, send, recv, op.count, dtype, stream);
    case 3:
      return zrt_broadcast(comm, send, recv, op.count, dtype, op.root, stream);
    case 4:
      return zrt_reduce(comm, send, recv, op.count, dtype, ZRT_SUM, op.root, stream);
    default:
      return zrt_barrier(comm, stream);
  }
}

// Empty if the slot's result is right, else the first wrong element.
std::string check(const Slot& slot, int rank, int size) {
  const Op& op = slot.op;
  auto got = [&](size_t i) {
    return op.f32 ? static_cast<int64_t>(reinterpret_cast<const float*>(slot.recv.data())[i])
                  : static_cast<int64_t>(slot.recv[i]);
  };
  auto sum = [&](size_t i) {
    int64_t s = 0;
    for (int r = 0; r < size; ++r) s += value(op.id, r, i);
    return s;
  };
  size_t n = 0;
  std::function<int64_t(size_t)> want;
  switch (op.kind) {
    case 0:
      n = op.count;
      want = sum;
      break;
    case 1:
      n = op.count;
      want = [&](size_t i) { return sum(static_cast<size_t>(rank) * op.count + i); };
      break;
    case 2:
      n = op.count * static_cast<size_t>(size);
      want = [&](size_t i) {
        return static_cast<int64_t>(value(op.id, static_cast<int>(i / op.count), i % op.count));
      };
      break;
    case 3:
      n = op.count;
      want = [&](size_t i) { return static_cast<int64_t>(value(op.id, op.root, i)); };
      break;
    case 4:
      n = rank == op.root ? op.count : 0;
      want = sum;
      break;
    default:
      return "";
  }
  for (size_t i = 0; i < n; ++i) {
    if (got(i) != want(i)) {
      return "op " + std::to_string(op.id) + " kind " + std::to_string(op.kind) + " count " +
             std::to_string(op.count) + " element " + std::to_string(i) + ": got " +
             std::to_string(got(i)) + ", want " + std::to_string(want(i));
    }
  }
  return "";
}

void soak_body(uint64_t seed, uint64_t total_ops, int rank, int size) {
  FileOob oob(std::getenv("ZRT_TEST_RUN_DIR"), "soak", rank, size);
  zrt_comm_t comm = nullptr;
  ASSERT_OK(zrt_comm_init_oob(&oob.oob(), nullptr, &comm));
  zrt_stream_t streams[kStreams] = {};
  for (auto& stream : streams) ASSERT_OK(zrt_stream_create(comm, ZRT_MEM_HOST, &stream));
  zrt_event_t event = nullptr;
  ASSERT_OK(zrt_event_create(comm, &event));
  std::vector<std::vector<Slot>> slots(kStreams);
  for (auto& ring : slots) ring.resize(kSlots);
  std::deque<int> in_flight[kStreams];  // slot indices, oldest first
  int next_slot[kStreams] = {};

  std::mt19937_64 shared(seed);                 // the same operations on every rank
  std::mt19937_64 local(seed * 31 + rank + 1);  // this rank's delays
  const uint64_t warmup = total_ops / 10;
  int64_t rss_start = 0;
  const auto start = std::chrono::steady_clock::now();

  // Waits for the oldest op of stream s and checks it.
  auto retire = [&](int s) {
    // Each op was enqueued after the previous ones of its stream: synchronizing the stream
    // retires all of them; the ring just bounds the buffers.
    ASSERT_OK(zrt_stream_synchronize(streams[s]));
    while (!in_flight[s].empty()) {
      const std::string wrong = check(slots[s][in_flight[s].front()], rank, size);
      ASSERT_EQ(wrong, "") << "stream " << s;
      in_flight[s].pop_front();
    }
  };

  for (uint64_t id = 0; id < total_ops; ++id) {
    if (id == warmup) rss_start = rss_bytes();
    const int s = static_cast<int>(shared() % kStreams);
    if (in_flight[s].size() == kSlots) {
      retire(s);
      if (::testing::Test::HasFatalFailure()) return;
    }
    Slot& slot = slots[s][next_slot[s]];
    slot.op.id = id;
    slot.op.kind = static_cast<int>(shared() % 6);
    slot.op.f32 = shared() % 2 == 0;
    // Log-uniform in [1, 64 Ki], and sometimes 0.
    const double exponent = static_cast<double>(shared() % 1000) / 1000.0 * 16.0;
    slot.op.count = shared() % 50 == 0 ? 0 : static_cast<size_t>(std::pow(2.0, exponent));
    slot.op.root = static_cast<int>(shared() % static_cast<uint64_t>(size));
    const bool link = shared() % 8 == 0;  // order this stream after another one's tail
    const int other = static_cast<int>(shared() % kStreams);
    if (local() % 16 == 0) {
      // The stimulus: this rank's own random jitter (up to 3 ms), so ranks reach each call at
      // different times and the streams interleave differently on every rank.
      std::this_thread::sleep_for(std::chrono::microseconds(local() % 3000));
    }
    if (link && other != s) {
      ASSERT_OK(zrt_event_record(event, streams[other]));
      ASSERT_OK(zrt_stream_wait_event(streams[s], event));
    }
    ASSERT_OK(enqueue(comm, streams[s], slot, rank, size));
    in_flight[s].push_back(next_slot[s]);
    next_slot[s] = (next_slot[s] + 1) % kSlots;
  }
  for (int s = 0; s < kStreams; ++s) {
    retire(s);
    if (::testing::Test::HasFatalFailure()) return;
  }
  const int64_t rss_end = rss_bytes();
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::fprintf(stderr,
               "soak rank %d: %llu collectives in %.1f s; RSS after warm-up %.1f MiB, at end "
               "%.1f MiB (%+.2f MiB)\n",
               rank, static_cast<unsigned long long>(total_ops), seconds,
               static_cast<double>(rss_start) / (1 << 20), static_cast<double>(rss_end) / (1 << 20),
               static_cast<double>(rss_end - rss_start) / (1 << 20));
  EXPECT_LT(rss_end - rss_start, kRssSlackBytes) << "resident memory grew";
  zrt_comm_stats_t stats{};
  stats.size = sizeof(stats);
  ASSERT_OK(zrt_comm_stats(comm, &stats));
  EXPECT_GE(stats.user.calls, total_ops);
  ASSERT_OK(zrt_comm_destroy(comm));
}

TEST(Soak, MixedCollectivesOnThreeStreams) {
  const uint64_t seed = env_or("ZRT_SOAK_SEED", std::random_device{}());
  const uint64_t ops = env_or("ZRT_SOAK_OPS", 30000);
  std::fprintf(stderr, "soak: seed %llu, %llu collectives, %d ranks (replay: ZRT_SOAK_SEED=%llu)\n",
               static_cast<unsigned long long>(seed), static_cast<unsigned long long>(ops), kRanks,
               static_cast<unsigned long long>(seed));
  RankOptions options;
  options.env["ZRT_TIMEOUT"] = "60";
  options.deadline_ms = 280000;
  expect_ranks_pass(
      kRanks, [seed, ops](int rank, int size) { soak_body(seed, ops, rank, size); }, options);
}

}  // namespace
}  // namespace zrt::testing
