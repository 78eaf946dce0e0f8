// The one-shot collectives (collectives/one_shot.h) on real ranks of one host, forced as
// ZRT_ALGO=oneshot does: all-reduce, reduce-scatter and all-gather at N = 2, 3, 4 and 8, f32,
// f64, bf16 and i32, odd counts, in place and out of place, at and just past the arena slot
// (past it the ring runs). Reductions are compared bit for bit with a serial reduction in rank
// order through the same kernels, the order the direct all-reduce uses too; gathers byte for
// byte. Then hundreds of calls back to back without a wait between (the slots' parity and
// credits wrap many times, the progress thread runs them) mixed with large ring collectives on
// the same stream, calls completing on the submitting thread, the byte counters, and a late or
// dead peer: every survivor's error within the timeout.
#include <unistd.h>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <thread>
#include <vector>

#include "collectives/one_shot.h"
#include "collectives/reduce/reduce_kernels.h"
#include "lib/core/dtype.h"
#include "tests/collectives/rig.h"
#include "tests/collectives/values.h"
#include "tests/harness/multirank.h"
#include "tests/harness/status_assert.h"

namespace zrt::testing {
namespace {

// Rank `rank`'s element i: fractional (so the reduction order shows in the bits) unless
// `integral`, which every order sums exactly (for the ring past the slot).
double input_value(zrt_dtype_t dtype, int rank, size_t i, bool integral) {
  const double base = static_cast<double>((i * 7 + static_cast<size_t>(rank) * 13) % 29) - 14;
  if (integral || dtype == ZRT_I32) return base;
  return base / 3.0 + 0.1 * rank;
}

std::vector<char> inputs(zrt_dtype_t dtype, int rank, size_t count, bool integral) {
  std::vector<char> data(count * dtype_size(dtype));
  for (size_t i = 0; i < count; ++i) {
    store(dtype, data.data(), i, input_value(dtype, rank, i, integral));
  }
  return data;
}

// ((x0 + x1) + x2) + ... with every input pre-multiplied by `scale`, as one_shot.h reduces.
std::vector<char> rank_order_sum(zrt_dtype_t dtype, int size, size_t count, size_t offset,
                                 double scale, bool integral) {
  const size_t esize = dtype_size(dtype);
  std::vector<char> out(count * esize);
  if (count == 0) return out;
  std::vector<std::vector<char>> all;
  for (int r = 0; r < size; ++r) all.push_back(inputs(dtype, r, offset + count, integral));
  reduce_elements(dtype, ReduceOp::kSum, all[0].data() + offset * esize,
                  all[1].data() + offset * esize, out.data(), count, scale, scale);
  for (int r = 2; r < size; ++r) {
    reduce_elements(dtype, ReduceOp::kSum, out.data(), all[r].data() + offset * esize, out.data(),
                    count, 1.0, scale);
  }
  return out;
}

// One collective of `kind`, checked on this rank; in place when `in_place`.
void check_one(Rig& rig, zrt_coll_kind_t kind, zrt_dtype_t dtype, size_t count, bool in_place,
               zrt_op_t op, bool integral) {
  const int rank = rig.rank, size = rig.size;
  const size_t esize = dtype_size(dtype);
  const size_t n = static_cast<size_t>(size);
  const std::string what =
      fmt::format("{} {} x {} {} N={}", coll_kind_name(kind), count, dtype_name(dtype),
                  in_place ? "in place" : "out of place", size);
  if (count == 0) {  // nothing to compare; the call still takes its slot and sequence number
    ASSERT_OK(rig.run(collective_args(kind, nullptr, nullptr, 0, dtype, op)));
    return;
  }
  if (kind == ZRT_COLL_ALL_GATHER) {
    std::vector<char> mine = inputs(dtype, rank, count, integral);
    std::vector<char> out(count * n * esize, 0x5a);
    const void* send = mine.data();
    if (in_place) {
      std::memcpy(out.data() + rank * count * esize, mine.data(), mine.size());
      send = out.data() + rank * count * esize;
    }
    ASSERT_OK(rig.run(collective_args(kind, send, out.data(), count, dtype)));
    for (int r = 0; r < size; ++r) {
      const std::vector<char> theirs = inputs(dtype, r, count, integral);
      ASSERT_EQ(std::memcmp(out.data() + r * count * esize, theirs.data(), theirs.size()), 0)
          << what << ": block " << r;
    }
    return;
  }
  const double scale = op == ZRT_AVG ? 1.0 / size : 1.0;
  if (kind == ZRT_COLL_ALL_REDUCE) {
    std::vector<char> in = inputs(dtype, rank, count, integral);
    std::vector<char> out(count * esize, 0x5a);
    void* recv = in_place ? in.data() : out.data();
    ASSERT_OK(rig.run(collective_args(kind, in.data(), recv, count, dtype, op)));
    const std::vector<char> expected = rank_order_sum(dtype, size, count, 0, scale, integral);
    ASSERT_EQ(std::memcmp(recv, expected.data(), expected.size()), 0) << what;
    return;
  }
  std::vector<char> in = inputs(dtype, rank, count * n, integral);
  std::vector<char> out(count * esize, 0x5a);
  void* recv = in_place ? in.data() + rank * count * esize : out.data();
  ASSERT_OK(rig.run(collective_args(kind, in.data(), recv, count, dtype, op)));
  const std::vector<char> expected =
      rank_order_sum(dtype, size, count, rank * count, scale, integral);
  ASSERT_EQ(std::memcmp(recv, expected.data(), expected.size()), 0) << what;
}

class OneShotRanks : public ::testing::TestWithParam<int> {};

TEST_P(OneShotRanks, ExactAndInRankOrderAtEverySizeUpToTheSlotAndPast) {
  expect_ranks_pass(GetParam(), [](int rank, int size) {
    Rig rig;
    rig.algorithm = AllReduceAlgorithm::kOneShot;
    rig.check_order = size % 2;  // the order checker's setting does not change the path
    ASSERT_OK(rig.init(rank, size, "one_shot_exact"));
    const zrt_coll_kind_t kinds[] = {ZRT_COLL_ALL_REDUCE, ZRT_COLL_REDUCE_SCATTER,
                                     ZRT_COLL_ALL_GATHER};
    for (zrt_dtype_t dtype : {ZRT_F32, ZRT_F64, ZRT_BF16, ZRT_I32}) {
      for (zrt_coll_kind_t kind : kinds) {
        for (size_t count : {size_t{0}, size_t{1}, size_t{7}, size_t{1001}}) {
          for (bool in_place : {false, true}) {
            check_one(rig, kind, dtype, count, in_place, ZRT_SUM, false);
            if (::testing::Test::HasFatalFailure()) return;
          }
        }
      }
    }
    // ZRT_AVG: every input scaled by 1/N before the sum, as the direct all-reduce does.
    for (zrt_coll_kind_t kind : {ZRT_COLL_ALL_REDUCE, ZRT_COLL_REDUCE_SCATTER}) {
      check_one(rig, kind, ZRT_F32, 333, false, ZRT_AVG, false);
      if (::testing::Test::HasFatalFailure()) return;
    }
    // At the slot (the largest one-shot deposit) and one element past it (the ring).
    for (zrt_coll_kind_t kind : kinds) {
      const size_t per_slot =
          kOneShotSlotBytes / 4 / (kind == ZRT_COLL_REDUCE_SCATTER ? static_cast<size_t>(size) : 1);
      for (size_t count : {per_slot - 1, per_slot}) {
        check_one(rig, kind, ZRT_F32, count, false, ZRT_SUM, false);
        if (::testing::Test::HasFatalFailure()) return;
      }
      check_one(rig, kind, ZRT_F32, per_slot + 1, true, ZRT_SUM, true);
      if (::testing::Test::HasFatalFailure()) return;
    }
  });
}

INSTANTIATE_TEST_SUITE_P(Ranks, OneShotRanks, ::testing::Values(2, 3, 4, 8),
                         [](const auto& info) { return "N" + std::to_string(info.param); });

// 300 one-shot collectives enqueued without a wait between them, every 50th followed by a
// 4 MiB ring all-reduce, then one synchronize: the slots' parity and credits wrap 150 times on
// the progress thread, and the ring's windows share the stream.
void back_to_back(int rank, int size) {
  Rig rig;
  ASSERT_OK(rig.init(rank, size, "one_shot_back_to_back"));
  constexpr int kCalls = 300;
  constexpr size_t kCount = 257;
  const size_t n = static_cast<size_t>(size);
  std::vector<std::vector<int32_t>> ins(kCalls), outs(kCalls);
  const size_t big = size_t{1} << 20;
  std::vector<int32_t> big_in(big, rank + 1), big_out(big);
  for (int call = 0; call < kCalls; ++call) {
    const zrt_coll_kind_t kind = static_cast<zrt_coll_kind_t>(call % 3);  // AR, RS, AG
    ins[call].resize(kCount * n);
    outs[call].assign(kCount * n, -1);
    for (size_t i = 0; i < ins[call].size(); ++i) {
      ins[call][i] = static_cast<int32_t>((i + static_cast<size_t>(call) * 31 + rank * 5) % 1000);
    }
    ASSERT_OK(enqueue_collective(
        rig.stream(), rank, size,
        collective_args(kind, ins[call].data(), outs[call].data(), kCount, ZRT_I32)));
    if (call % 50 == 49) {
      ASSERT_OK(enqueue_collective(
          rig.stream(), rank, size,
          collective_args(ZRT_COLL_ALL_REDUCE, big_in.data(), big_out.data(), big, ZRT_I32)));
    }
  }
  ASSERT_OK(rig.stream().synchronize());
  auto value = [&](int call, int r, size_t i) {
    return static_cast<int32_t>((i + static_cast<size_t>(call) * 31 + r * 5) % 1000);
  };
  for (int call = 0; call < kCalls; ++call) {
    const int kind = call % 3;
    for (size_t i = 0; i < kCount; ++i) {
      if (kind == ZRT_COLL_ALL_GATHER) {
        for (int r = 0; r < size; ++r) {
          ASSERT_EQ(outs[call][r * kCount + i], value(call, r, i)) << "call " << call;
        }
        continue;
      }
      const size_t at = kind == ZRT_COLL_REDUCE_SCATTER ? rank * kCount + i : i;
      int32_t sum = 0;
      for (int r = 0; r < size; ++r) sum += value(call, r, at);
      ASSERT_EQ(outs[call][i], sum) << "call " << call << " element " << i;
    }
  }
  ASSERT_EQ(big_out[12345], size * (size + 1) / 2);
}

TEST(OneShot, BackToBackCallsWrapSlotsAndCreditsAmongLargeCollectives) {
  for (int size : {2, 4}) expect_ranks_pass(size, back_to_back);
}

// After the stream's first one-shot collective (the arenas' handshake) a call whose peers are
// there completes before enqueue returns: the stream is idle again at once. Peers may be late
// on a loaded host, so a few of many suffice; every call is exact either way.
TEST(OneShot, CallsCompleteOnTheSubmittingThreadAndCountTheirBytes) {
  expect_ranks_pass(2, [](int rank, int size) {
    Rig rig;
    ASSERT_OK(rig.init(rank, size, "one_shot_inline"));
    constexpr size_t kCount = 512;
    std::vector<float> in(kCount, static_cast<float>(rank + 1)), out(kCount);
    ASSERT_OK(
        rig.run(collective_args(ZRT_COLL_ALL_REDUCE, in.data(), out.data(), kCount, ZRT_F32)));
    rig.engine->counters().reset();
    int inline_done = 0;
    constexpr int kCalls = 200;
    for (int call = 0; call < kCalls; ++call) {
      ASSERT_OK(enqueue_collective(
          rig.stream(), rank, size,
          collective_args(ZRT_COLL_ALL_REDUCE, in.data(), out.data(), kCount, ZRT_F32)));
      if (rig.stream().query().is_ok()) ++inline_done;
      ASSERT_OK(rig.stream().synchronize());
      ASSERT_EQ(out[kCount - 1], 3.0f);
    }
    EXPECT_GT(inline_done, 0) << "no call completed on the submitting thread";
    zrt_comm_stats_t stats{};
    rig.engine->counters().snapshot(&stats);
    const zrt_coll_counters_t& counted = stats.per_kind[ZRT_COLL_ALL_REDUCE].user;
    EXPECT_EQ(counted.calls, static_cast<uint64_t>(kCalls));
    EXPECT_EQ(counted.bytes_sent, uint64_t{kCalls} * kCount * sizeof(float));
    EXPECT_EQ(counted.bytes_received, uint64_t{kCalls} * kCount * sizeof(float));
  });
}

// A peer that never calls: the others' one-shot wait ends in ZRT_TIMEOUT within the timeout
// (plus the engine's look interval and a loaded host's margin; a survivor may hear first that
// the other timed out and left: ZRT_REMOTE_ERROR), and a dead peer's the same or sooner
// through the transport's verdict.
void late_or_dead_peer(bool dies) {
  RankOptions options;
  options.deadline_ms = 60000;
  expect_ranks_pass(
      3,
      [dies](int rank, int size) {
        constexpr int64_t kTimeoutMs = 2000;
        Rig rig;
        ASSERT_OK(rig.init(rank, size, dies ? "one_shot_dead" : "one_shot_late", kTimeoutMs));
        std::vector<float> in(64, 1.0f), out(64);
        for (int i = 0; i < 5; ++i) {
          ASSERT_OK(
              rig.run(collective_args(ZRT_COLL_ALL_REDUCE, in.data(), out.data(), 64, ZRT_F32)));
        }
        if (rank == 2) {
          // A moment for the others' last warm-up call to return before this rank goes.
          std::this_thread::sleep_for(std::chrono::milliseconds(300));
          if (dies) _exit(0);
          std::this_thread::sleep_for(std::chrono::milliseconds(kTimeoutMs * 2));
          return;
        }
        const auto start = std::chrono::steady_clock::now();
        Status status =
            rig.run(collective_args(ZRT_COLL_ALL_REDUCE, in.data(), out.data(), 64, ZRT_F32));
        const auto took = std::chrono::duration_cast<std::chrono::milliseconds>(
                              std::chrono::steady_clock::now() - start)
                              .count();
        ASSERT_FALSE(status.is_ok()) << "rank " << rank << ": no error without rank 2";
        // The first survivor to time out leaves; the other may hear of that first.
        EXPECT_TRUE(status.code() == ZRT_TIMEOUT || status.code() == ZRT_REMOTE_ERROR)
            << status.message();
        EXPECT_LT(took, kTimeoutMs + 1500) << status.message();
      },
      options);
}

TEST(OneShot, ALatePeerTimesOutOnEverySurvivor) {
  late_or_dead_peer(false);
}

TEST(OneShot, ADeadPeerFailsEverySurvivorWithinTheTimeout) {
  late_or_dead_peer(true);
}

}  // namespace
}  // namespace zrt::testing
