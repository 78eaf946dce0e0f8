// The one-shot collectives (collectives/one_shot.h) on real ranks of one host, forced as
// ZRT_ALGO=oneshot does: all-reduce, reduce-scatter and all-gather at N = 2, 3, 4 and 8, f32,
// f64, bf16 and i32, odd counts, in place and out of place, at and just past the arena slot
// (past it the ring runs); the two-shot all-reduce (ZRT_ALGO=twoshot) alike. Reductions are
// compared bit for bit with a serial reduction through the same kernels in the order of the
// algorithm one-shot stands in for: the ring's for a reduce-scatter and for an all-reduce the ring
// would run, rank order for one the direct all-reduce would run; gathers byte for byte. Then the
// same calls through the ring or the direct all-reduce themselves, bit for bit, at N = 3 and 4
// where orders differ. Then hundreds of calls back to back without a wait between (the slots'
// parity and credits wrap many times, the progress thread runs them) mixed with large ring
// collectives on the same stream, calls completing on the submitting thread, the byte counters, and
// a late or dead peer: every survivor's error within the timeout.
#include <unistd.h>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <optional>
#include <thread>
#include <vector>

#include "collectives/algorithm.h"
#include "collectives/coll_task.h"
#include "collectives/one_shot.h"
#include "kernels/reduce/reduce_kernels.h"
#include "lib/core/dtype.h"
#include "tests/collectives/late_peer.h"
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

std::vector<std::vector<char>> all_inputs(zrt_dtype_t dtype, int size, size_t count,
                                          bool integral) {
  std::vector<std::vector<char>> all;
  for (int r = 0; r < size; ++r) all.push_back(inputs(dtype, r, count, integral));
  return all;
}

// Elements [first, first + count) of the ranks' inputs reduced in `order` (every input
// pre-multiplied by `scale`) into out: ((x[o1] + x[o2]) + x[o3]) + ...
void reduce_in(zrt_dtype_t dtype, const std::vector<std::vector<char>>& all,
               const std::vector<int>& order, size_t first, size_t count, double scale, char* out) {
  if (count == 0) return;
  const size_t at = first * dtype_size(dtype);
  reduce_elements(dtype, ReduceOp::kSum, all[order[0]].data() + at, all[order[1]].data() + at, out,
                  count, scale, scale);
  for (size_t i = 2; i < order.size(); ++i) {
    reduce_elements(dtype, ReduceOp::kSum, out, all[order[i]].data() + at, out, count, 1.0, scale);
  }
}

std::vector<int> rank_order(int size) {
  std::vector<int> order(size);
  for (int r = 0; r < size; ++r) order[r] = r;
  return order;
}

// The ring reduce-scatter's order for block b: b + 1, b + 2, ..., b (mod N).
std::vector<int> ring_order(int size, int block) {
  std::vector<int> order;
  for (int step = 1; step <= size; ++step) order.push_back((block + step) % size);
  return order;
}

// The all-reduce one-shot stands in for at this size: the direct all-reduce (rank order) or the
// ring (ring order over the ring's blocks), as the built-in table chooses without one-shot.
bool direct_would_run(int size, size_t bytes) {
  return std::string_view(choose_algorithm("", nullptr, TableOp::kAllReduce, size, bytes,
                                           kOneShotAlgorithm)) == "direct";
}

std::vector<char> expected_all_reduce(zrt_dtype_t dtype, int size, size_t count, double scale,
                                      bool integral) {
  const size_t esize = dtype_size(dtype);
  std::vector<char> out(count * esize);
  const auto all = all_inputs(dtype, size, count, integral);
  if (direct_would_run(size, count * esize)) {
    reduce_in(dtype, all, rank_order(size), 0, count, scale, out.data());
    return out;
  }
  const BlockLayout layout = BlockLayout::split(count, size);
  for (int b = 0; b < size; ++b) {
    reduce_in(dtype, all, ring_order(size, b), layout.offset(b), layout.length(b), scale,
              out.data() + layout.offset(b) * esize);
  }
  return out;
}

// Rank `rank`'s block of a reduce-scatter of `count` elements a block, in the ring's order.
std::vector<char> expected_reduce_scatter(zrt_dtype_t dtype, int size, int rank, size_t count,
                                          double scale, bool integral) {
  std::vector<char> out(count * dtype_size(dtype));
  const auto all = all_inputs(dtype, size, count * static_cast<size_t>(size), integral);
  reduce_in(dtype, all, ring_order(size, rank), rank * count, count, scale, out.data());
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
    const std::vector<char> expected = expected_all_reduce(dtype, size, count, scale, integral);
    ASSERT_EQ(std::memcmp(recv, expected.data(), expected.size()), 0) << what;
    return;
  }
  std::vector<char> in = inputs(dtype, rank, count * n, integral);
  std::vector<char> out(count * esize, 0x5a);
  void* recv = in_place ? in.data() + rank * count * esize : out.data();
  ASSERT_OK(rig.run(collective_args(kind, in.data(), recv, count, dtype, op)));
  const std::vector<char> expected =
      expected_reduce_scatter(dtype, size, rank, count, scale, integral);
  ASSERT_EQ(std::memcmp(recv, expected.data(), expected.size()), 0) << what;
}

class OneShotRanks : public ::testing::TestWithParam<int> {};

TEST_P(OneShotRanks, ExactAndInTheReplacedAlgorithmsOrderAtEverySizeUpToTheSlotAndPast) {
  expect_ranks_pass(GetParam(), [](int rank, int size) {
    Rig rig;
    rig.algorithm = AllReduceAlgorithm::kOneShot;
    rig.check_order = size % 2;  // the order checker's setting does not change the path
    ASSERT_OK(rig.init(rank, size, "one_shot_exact"));
    const zrt_coll_kind_t kinds[] = {ZRT_COLL_ALL_REDUCE, ZRT_COLL_REDUCE_SCATTER,
                                     ZRT_COLL_ALL_GATHER};
    for (zrt_dtype_t dtype : {ZRT_F32, ZRT_F64, ZRT_BF16, ZRT_I32}) {
      for (zrt_coll_kind_t kind : kinds) {
        // 4 and 5: the largest deposit in the slot's header line (8 bytes of bf16) and past it.
        for (size_t count : {size_t{0}, size_t{1}, size_t{4}, size_t{5}, size_t{7}, size_t{1001}}) {
          for (bool in_place : {false, true}) {
            check_one(rig, kind, dtype, count, in_place, ZRT_SUM, false);
            if (::testing::Test::HasFatalFailure()) return;
          }
        }
      }
    }
    // ZRT_AVG: every input scaled by 1/N before the sum, as the ring and the direct
    // all-reduce do; an all-reduce in the ring's range too (past the direct one's).
    for (zrt_coll_kind_t kind : {ZRT_COLL_ALL_REDUCE, ZRT_COLL_REDUCE_SCATTER}) {
      check_one(rig, kind, ZRT_F32, 333, false, ZRT_AVG, false);
      if (::testing::Test::HasFatalFailure()) return;
    }
    check_one(rig, ZRT_COLL_ALL_REDUCE, ZRT_F32, 20011, false, ZRT_AVG, false);
    if (::testing::Test::HasFatalFailure()) return;
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

// The two-shot all-reduce: each rank's block (unequal where N does not divide the count, empty
// where the count is below N) reduced in the replaced algorithm's order, then gathered.
class TwoShotRanks : public ::testing::TestWithParam<int> {};

TEST_P(TwoShotRanks, ExactAndInTheReplacedAlgorithmsOrderAtEverySizeUpToTheSlotAndPast) {
  expect_ranks_pass(GetParam(), [](int rank, int size) {
    Rig rig;
    rig.algorithm = AllReduceAlgorithm::kTwoShot;
    rig.check_order = size % 2;
    ASSERT_OK(rig.init(rank, size, "two_shot_exact"));
    for (zrt_dtype_t dtype : {ZRT_F32, ZRT_F64, ZRT_BF16, ZRT_I32}) {
      // 1-4: deposits inside the slot's header line, over which each rank writes its block.
      for (size_t count : {size_t{0}, size_t{1}, size_t{2}, size_t{3}, size_t{4}, size_t{5},
                           size_t{7}, size_t{1001}}) {
        for (bool in_place : {false, true}) {
          check_one(rig, ZRT_COLL_ALL_REDUCE, dtype, count, in_place, ZRT_SUM, false);
          if (::testing::Test::HasFatalFailure()) return;
        }
      }
    }
    // The ring's range (past the direct all-reduce's), averaged; at the slot and past it.
    check_one(rig, ZRT_COLL_ALL_REDUCE, ZRT_F32, 20011, false, ZRT_AVG, false);
    if (::testing::Test::HasFatalFailure()) return;
    const size_t per_slot = kOneShotSlotBytes / 4;
    for (size_t count : {per_slot - 1, per_slot}) {
      check_one(rig, ZRT_COLL_ALL_REDUCE, ZRT_F32, count, true, ZRT_SUM, false);
      if (::testing::Test::HasFatalFailure()) return;
    }
    check_one(rig, ZRT_COLL_ALL_REDUCE, ZRT_F32, per_slot + 1, false, ZRT_SUM, true);
  });
}

INSTANTIATE_TEST_SUITE_P(Ranks, TwoShotRanks, ::testing::Values(2, 3, 4, 8),
                         [](const auto& info) { return "N" + std::to_string(info.param); });

// Rank 0 runs an all-reduce by one-shot, the others by two-shot (ZRT_ALGO differs across
// ranks): each sees a peer's header marked the other way and fails at once, naming two-shot,
// instead of a two-shot rank waiting out the timeout for a reduced block never published. With
// the order checker off and on, and a count one-shot deposits tiny (in its 16-byte line).
TEST(TwoShot, AModeMismatchAcrossRanksIsAnErrorOnEveryRank) {
  expect_ranks_pass(3, [](int rank, int size) {
    for (int check : {0, 1}) {
      for (size_t count : {size_t{1}, size_t{1000}}) {
        Rig rig;
        rig.algorithm = rank == 0 ? AllReduceAlgorithm::kOneShot : AllReduceAlgorithm::kTwoShot;
        rig.check_order = check;
        ASSERT_OK(
            rig.init(rank, size, fmt::format("two_shot_mismatch_{}_{}", check, count), 10000));
        std::vector<float> in(count, 1.0f), out(count);
        const auto start = std::chrono::steady_clock::now();
        const Status status =
            rig.run(collective_args(ZRT_COLL_ALL_REDUCE, in.data(), out.data(), count, ZRT_F32));
        const std::string what =
            fmt::format("rank {}, checker {}, {} elements", rank, check, count);
        ASSERT_FALSE(status.is_ok()) << what << ": reduced across modes";
        EXPECT_EQ(status.code(), ZRT_REMOTE_ERROR) << what << ": " << status.message();
        EXPECT_NE(status.message().find("two-shot"), std::string::npos)
            << what << ": " << status.message();
        EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5)) << what;
      }
    }
  });
}

// What each rank counts is what its peers read of its slot, as if sent: its input but its own
// block (each peer's block, to reduce), then its reduced block once per peer; received alike.
// At N = 3 with unequal blocks that is count + (N - 2) x its block, one-shot's (N - 1) x count:
// the counters also show that two-shot ran.
TEST(TwoShot, CountsWhatThePeersReadOfEachSlot) {
  expect_ranks_pass(3, [](int rank, int size) {
    Rig rig;
    rig.algorithm = AllReduceAlgorithm::kTwoShot;
    ASSERT_OK(rig.init(rank, size, "two_shot_counters"));
    constexpr size_t kCount = 1001;  // blocks of 334, 334 and 333
    std::vector<float> in(kCount, 1.0f), out(kCount);
    ASSERT_OK(
        rig.run(collective_args(ZRT_COLL_ALL_REDUCE, in.data(), out.data(), kCount, ZRT_F32)));
    rig.engine->counters().reset();
    constexpr int kCalls = 10;
    for (int call = 0; call < kCalls; ++call) {
      ASSERT_OK(
          rig.run(collective_args(ZRT_COLL_ALL_REDUCE, in.data(), out.data(), kCount, ZRT_F32)));
      ASSERT_EQ(out[kCount - 1], 3.0f);
    }
    zrt_comm_stats_t stats{};
    rig.engine->counters().snapshot(&stats);
    const zrt_coll_counters_t& counted = stats.per_kind[ZRT_COLL_ALL_REDUCE].user;
    const uint64_t block = BlockLayout::split(kCount, size).length(rank);
    const uint64_t per_call = (kCount + (size - 2) * block) * sizeof(float);
    EXPECT_EQ(counted.bytes_sent, kCalls * per_call);
    EXPECT_EQ(counted.bytes_received, kCalls * per_call);
  });
}

// The same inputs through one-shot and through the algorithm it stands in for (the ring's
// mapped windows, the tagged ring, the direct all-reduce) and two-shot, on communicators of the
// same ranks:
// equal bit for bit, so the table's choice between them never shows in a result. Where the
// orders differ (N >= 3): f32 and bf16, odd counts, sum and average, both all-reduce ranges.
void same_bits_as_the_replaced_algorithm(int rank, int size) {
  Rig one_shot, two_shot, window_ring, tagged_ring, direct;
  one_shot.algorithm = AllReduceAlgorithm::kOneShot;
  two_shot.algorithm = AllReduceAlgorithm::kTwoShot;
  window_ring.algorithm = tagged_ring.algorithm = AllReduceAlgorithm::kRing;
  tagged_ring.windows = false;
  direct.algorithm = AllReduceAlgorithm::kDirect;
  ASSERT_OK(one_shot.init(rank, size, "one_shot_bits_oneshot"));
  ASSERT_OK(two_shot.init(rank, size, "one_shot_bits_twoshot"));
  ASSERT_OK(window_ring.init(rank, size, "one_shot_bits_window"));
  ASSERT_OK(tagged_ring.init(rank, size, "one_shot_bits_tagged"));
  ASSERT_OK(direct.init(rank, size, "one_shot_bits_direct"));
  const size_t n = static_cast<size_t>(size);
  for (zrt_dtype_t dtype : {ZRT_F32, ZRT_BF16}) {
    const size_t esize = dtype_size(dtype);
    for (zrt_op_t op : {ZRT_SUM, ZRT_AVG}) {
      // All-reduce in the direct one's range and in the ring's (up to the slot).
      for (size_t count : {size_t{1001}, size_t{30011}, kOneShotSlotBytes / esize - 3}) {
        const std::vector<char> in = inputs(dtype, rank, count, false);
        std::vector<char> ours(in.size()), theirs(in.size());
        Rig& replaced = direct_would_run(size, count * esize) ? direct : window_ring;
        ASSERT_OK(one_shot.run(
            collective_args(ZRT_COLL_ALL_REDUCE, in.data(), ours.data(), count, dtype, op)));
        ASSERT_OK(replaced.run(
            collective_args(ZRT_COLL_ALL_REDUCE, in.data(), theirs.data(), count, dtype, op)));
        ASSERT_EQ(std::memcmp(ours.data(), theirs.data(), ours.size()), 0)
            << "all_reduce " << count << " x " << dtype_name(dtype) << " N=" << size;
        ASSERT_OK(two_shot.run(
            collective_args(ZRT_COLL_ALL_REDUCE, in.data(), theirs.data(), count, dtype, op)));
        ASSERT_EQ(std::memcmp(ours.data(), theirs.data(), ours.size()), 0)
            << "all_reduce (two-shot) " << count << " x " << dtype_name(dtype) << " N=" << size;
        if (&replaced == &window_ring) {
          ASSERT_OK(tagged_ring.run(
              collective_args(ZRT_COLL_ALL_REDUCE, in.data(), theirs.data(), count, dtype, op)));
          ASSERT_EQ(std::memcmp(ours.data(), theirs.data(), ours.size()), 0)
              << "all_reduce (tagged ring) " << count << " x " << dtype_name(dtype);
        }
      }
      for (size_t count : {size_t{7}, size_t{1001}, kOneShotSlotBytes / esize / n - 1}) {
        const std::vector<char> in = inputs(dtype, rank, count * n, false);
        std::vector<char> ours(count * esize), theirs(count * esize);
        ASSERT_OK(one_shot.run(
            collective_args(ZRT_COLL_REDUCE_SCATTER, in.data(), ours.data(), count, dtype, op)));
        for (Rig* ring : {&window_ring, &tagged_ring}) {
          ASSERT_OK(ring->run(collective_args(ZRT_COLL_REDUCE_SCATTER, in.data(), theirs.data(),
                                              count, dtype, op)));
          ASSERT_EQ(std::memcmp(ours.data(), theirs.data(), ours.size()), 0)
              << "reduce_scatter " << count << " x " << dtype_name(dtype) << " N=" << size
              << (ring == &tagged_ring ? " (tagged ring)" : " (window ring)");
        }
      }
    }
  }
}

TEST(OneShot, ResultsAreBitForBitThoseOfTheAlgorithmItStandsIn) {
  for (int size : {3, 4}) expect_ranks_pass(size, same_bits_as_the_replaced_algorithm);
}

// 300 one-shot collectives enqueued without a wait between them, every 50th followed by a
// 4 MiB ring all-reduce, then one synchronize: the slots' parity and credits wrap 150 times on
// the progress thread, and the ring's windows share the stream.
void back_to_back(int rank, int size, std::optional<AllReduceAlgorithm> algorithm) {
  Rig rig;
  rig.algorithm = algorithm;
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
  for (int size : {2, 4}) {
    expect_ranks_pass(size, [](int rank, int n) { back_to_back(rank, n, std::nullopt); });
  }
  // The all-reduces by two-shot: its `reduced` words wrap with the slots.
  expect_ranks_pass(3,
                    [](int rank, int n) { back_to_back(rank, n, AllReduceAlgorithm::kTwoShot); });
}

// After the stream's first one-shot collective (the arenas' handshake) a call whose peers are
// there completes before enqueue returns: the stream is idle again at once. Peers may be late
// on a loaded host, so a few of many suffice; every call is exact either way.
// The rig of the two tests below: inited, its stream's arenas mapped by a first all-reduce.
Status start_inline_rig(Rig& rig, int rank, int size, const char* name, std::vector<float>& in,
                        std::vector<float>& out) {
  ZRT_RETURN_IF_ERROR(rig.init(rank, size, name));
  return rig.run(collective_args(ZRT_COLL_ALL_REDUCE, in.data(), out.data(), in.size(), ZRT_F32));
}

// Submits an all-reduce of `in` into `out`; *idle: the stream was idle again when enqueue
// returned (the call ran on the submitting thread).
Status submit_all_reduce(Rig& rig, int rank, int size, std::vector<float>& in,
                         std::vector<float>& out, bool* idle) {
  ZRT_RETURN_IF_ERROR(enqueue_collective(
      rig.stream(), rank, size,
      collective_args(ZRT_COLL_ALL_REDUCE, in.data(), out.data(), in.size(), ZRT_F32)));
  *idle = rig.stream().query().is_ok();
  return Status::ok();
}

class OneShotModes : public ::testing::TestWithParam<AllReduceAlgorithm> {};

// At N = 2 two-shot counts what one-shot does: half the input each way for each half.
TEST_P(OneShotModes, CallsCompleteOnTheSubmittingThreadAndCountTheirBytes) {
  expect_ranks_pass(2, [](int rank, int size) {
    Rig rig;
    rig.algorithm = GetParam();
    constexpr size_t kCount = 512;
    std::vector<float> in(kCount, static_cast<float>(rank + 1)), out(kCount);
    ASSERT_OK(start_inline_rig(rig, rank, size, "one_shot_inline", in, out));
    rig.engine->counters().reset();
    int inline_done = 0;
    constexpr int kCalls = 200;
    for (int call = 0; call < kCalls; ++call) {
      bool idle = false;
      ASSERT_OK(submit_all_reduce(rig, rank, size, in, out, &idle));
      inline_done += idle ? 1 : 0;
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

INSTANTIATE_TEST_SUITE_P(Modes, OneShotModes,
                         ::testing::Values(AllReduceAlgorithm::kOneShot,
                                           AllReduceAlgorithm::kTwoShot),
                         [](const auto& info) { return std::string(algorithm_name(info.param)); });

// Calls submitted behind a barrier (a tagged collective on the progress thread) queue only
// while it is pending: once it completes, the next submission waits for the calls queued behind
// it and then runs on the submitting thread, instead of the loop queueing every later call
// (each then a hand-off to the progress thread and a wake-up, so the submitter stays ahead for
// the rest of the loop). How long the barrier takes depends on the host (and a sanitizer), so
// only the second half of each round, long after the barrier, is counted.
TEST(OneShot, CallsBehindABarrierReturnToTheSubmittingThread) {
  expect_ranks_pass(2, [](int rank, int size) {
    Rig rig;
    constexpr size_t kCount = 2;
    std::vector<float> in(kCount, static_cast<float>(rank + 1)), out(kCount);
    ASSERT_OK(start_inline_rig(rig, rank, size, "one_shot_behind_barrier", in, out));
    constexpr int kRounds = 5;
    constexpr int kCalls = 400;
    int idle_late = 0;
    for (int round = 0; round < kRounds; ++round) {
      ASSERT_OK(
          enqueue_collective(rig.stream(), rank, size,
                             collective_args(ZRT_COLL_BARRIER, nullptr, nullptr, 0, ZRT_F32)));
      for (int call = 0; call < kCalls; ++call) {
        bool idle = false;
        ASSERT_OK(submit_all_reduce(rig, rank, size, in, out, &idle));
        if (call >= kCalls / 2) idle_late += idle ? 1 : 0;
      }
      ASSERT_OK(rig.stream().synchronize());
      ASSERT_EQ(out[kCount - 1], 3.0f);
    }
    EXPECT_GE(idle_late, kRounds * kCalls / 4)
        << "calls behind a barrier queued instead of running on the submitting thread";
  });
}

// A late or dead peer (tests/collectives/late_peer.h) during a one-shot all-reduce.
void late_or_dead_peer(bool dies, AllReduceAlgorithm algorithm) {
  std::vector<float> in(64, 1.0f), out(64);
  expect_survivors_fail_without_rank2(
      dies,
      [dies, algorithm](Rig& rig, int rank, int size, int64_t timeout_ms) {
        rig.algorithm = algorithm;
        return rig.init(rank, size, dies ? "one_shot_dead" : "one_shot_late", timeout_ms);
      },
      [&](Rig& rig) {
        return rig.run(collective_args(ZRT_COLL_ALL_REDUCE, in.data(), out.data(), 64, ZRT_F32));
      });
}

TEST_P(OneShotModes, ALatePeerTimesOutOnEverySurvivor) {
  late_or_dead_peer(false, GetParam());
}

TEST_P(OneShotModes, ADeadPeerFailsEverySurvivorWithinTheTimeout) {
  late_or_dead_peer(true, GetParam());
}

}  // namespace
}  // namespace zrt::testing
