// Collectives beyond the value matrix: two streams in flight at once, events between streams,
// byte counters (S(N-1)/N exactly for ring reduce-scatter and all-gather; internal collectives
// counted apart), point-to-point (including to oneself), forced algorithms (ZRT_ALGO), and every
// kind of bad argument.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "collectives/algorithm.h"
#include "collectives/internal.h"
#include "tests/collectives/rig.h"
#include "tests/collectives/values.h"
#include "tests/harness/multirank.h"
#include "tests/harness/rank_count.h"
#include "tests/harness/status_assert.h"

namespace zrt::testing {
namespace {

TEST(Collectives, ReduceScatterAndAllGatherConcurrentlyOnTwoStreams) {
  expect_ranks_pass(3, [](int rank, int size) {
    Rig rig;
    ASSERT_OK(rig.init(rank, size, "concurrent", 30000, 2));
    const size_t count = 300001;  // per rank
    std::vector<int32_t> rs_in(count * size), rs_out(count), ag_in(count), ag_out(count * size);
    for (int iteration = 0; iteration < 20; ++iteration) {
      for (size_t i = 0; i < rs_in.size(); ++i) {
        rs_in[i] = static_cast<int32_t>((i + rank * 7 + iteration) % 1000);
      }
      for (size_t i = 0; i < count; ++i) ag_in[i] = static_cast<int32_t>(i * 3 + rank + iteration);
      ASSERT_OK(enqueue_collective(
          rig.stream(0), rank, size,
          collective_args(ZRT_COLL_REDUCE_SCATTER, rs_in.data(), rs_out.data(), count, ZRT_I32)));
      ASSERT_OK(enqueue_collective(
          rig.stream(1), rank, size,
          collective_args(ZRT_COLL_ALL_GATHER, ag_in.data(), ag_out.data(), count, ZRT_I32)));
      ASSERT_OK(rig.stream(0).synchronize());
      ASSERT_OK(rig.stream(1).synchronize());
      for (size_t i = 0; i < count; ++i) {
        const size_t global = rank * count + i;
        int32_t expected = 0;
        for (int r = 0; r < size; ++r)
          expected += static_cast<int32_t>((global + r * 7 + iteration) % 1000);
        ASSERT_EQ(rs_out[i], expected) << "iteration " << iteration << " element " << i;
      }
      for (int b = 0; b < size; ++b) {
        for (size_t i = 0; i < count; ++i) {
          ASSERT_EQ(ag_out[b * count + i], static_cast<int32_t>(i * 3 + b + iteration));
        }
      }
    }
  });
}

TEST(Collectives, EventHandsAllReduceResultToAllGatherOnAnotherStream) {
  expect_ranks_pass(2, [](int rank, int size) {
    Rig rig;
    ASSERT_OK(rig.init(rank, size, "event", 30000, 2));
    Event* event = nullptr;
    ASSERT_OK(rig.engine->create_event(&event));
    const size_t count = 1 << 18;
    std::vector<float> in(count, static_cast<float>(rank + 1)), reduced(count),
        gathered(count * size);
    for (int iteration = 0; iteration < 10; ++iteration) {
      ASSERT_OK(enqueue_collective(
          rig.stream(0), rank, size,
          collective_args(ZRT_COLL_ALL_REDUCE, in.data(), reduced.data(), count)));
      ASSERT_OK(event->record(rig.stream(0)));
      ASSERT_OK(rig.stream(1).wait_event(*event));
      ASSERT_OK(enqueue_collective(
          rig.stream(1), rank, size,
          collective_args(ZRT_COLL_ALL_GATHER, reduced.data(), gathered.data(), count)));
      ASSERT_OK(rig.stream(1).synchronize());
      for (float value : gathered) ASSERT_EQ(value, 3.0f);
      std::fill(gathered.begin(), gathered.end(), 0.0f);
      std::fill(reduced.begin(), reduced.end(), 0.0f);
    }
  });
}

TEST(Collectives, RingBytesAreExactlySTimesNMinusOneOverN) {
  expect_ranks_pass(3, [](int rank, int size) {
    Rig rig;
    ASSERT_OK(rig.init(rank, size, "counters"));
    const size_t count = 1000003;  // per rank
    std::vector<float> big(count * size, 1.0f), small(count);
    rig.engine->counters().reset();
    ASSERT_OK(rig.run(collective_args(ZRT_COLL_REDUCE_SCATTER, big.data(), small.data(), count)));
    ASSERT_OK(rig.run(collective_args(ZRT_COLL_ALL_GATHER, small.data(), big.data(), count)));
    zrt_comm_stats_t stats{};
    rig.engine->counters().snapshot(&stats);
    const uint64_t total_bytes = count * size * sizeof(float);  // S
    const uint64_t expected = total_bytes * (size - 1) / size;
    EXPECT_EQ(stats.per_kind[ZRT_COLL_REDUCE_SCATTER].user.bytes_sent, expected);
    EXPECT_EQ(stats.per_kind[ZRT_COLL_REDUCE_SCATTER].user.bytes_received, expected);
    EXPECT_EQ(stats.per_kind[ZRT_COLL_ALL_GATHER].user.bytes_sent, expected);
    EXPECT_EQ(stats.per_kind[ZRT_COLL_ALL_GATHER].user.bytes_received, expected);
    EXPECT_EQ(stats.per_kind[ZRT_COLL_REDUCE_SCATTER].user.calls, 1u);
    EXPECT_GT(stats.per_kind[ZRT_COLL_REDUCE_SCATTER].user.busy_ns, 0u);
    EXPECT_EQ(stats.user.bytes_sent, 2 * expected);
    rig.engine->counters().reset();
    rig.engine->counters().snapshot(&stats);
    EXPECT_EQ(stats.user.calls, 0u);
    EXPECT_EQ(stats.user.bytes_sent, 0u);
  });
}

// An internal collective (run_internal_collective) counts on the internal side only, a plain
// one on the user side only, with the same bytes either way; an error carries the caller's
// context.
TEST(Collectives, InternalCollectivesCountApartFromUserOnes) {
  expect_ranks_pass(3, [](int rank, int size) {
    Rig rig;
    ASSERT_OK(rig.init(rank, size, "internal"));
    const size_t count = 1000;  // per rank
    std::vector<float> mine(count, 1.0f), all(count * size);
    rig.engine->counters().reset();
    ASSERT_OK(run_internal_collective(
        rig.stream(), rank, size,
        collective_args(ZRT_COLL_ALL_GATHER, mine.data(), all.data(), count), "test gather"));
    for (float v : all) ASSERT_EQ(v, 1.0f);
    zrt_comm_stats_t stats{};
    rig.engine->counters().snapshot(&stats);
    const uint64_t expected = count * sizeof(float) * (size - 1);
    EXPECT_EQ(stats.per_kind[ZRT_COLL_ALL_GATHER].internal.calls, 1u);
    EXPECT_EQ(stats.per_kind[ZRT_COLL_ALL_GATHER].internal.bytes_sent, expected);
    EXPECT_EQ(stats.internal.bytes_sent, expected);
    EXPECT_EQ(stats.user.calls, 0u);
    EXPECT_EQ(stats.user.bytes_sent, 0u);

    ASSERT_OK(rig.run(collective_args(ZRT_COLL_ALL_GATHER, mine.data(), all.data(), count)));
    rig.engine->counters().snapshot(&stats);
    EXPECT_EQ(stats.per_kind[ZRT_COLL_ALL_GATHER].user.calls, 1u);
    EXPECT_EQ(stats.per_kind[ZRT_COLL_ALL_GATHER].user.bytes_sent, expected);
    EXPECT_EQ(stats.internal.calls, 1u);
    EXPECT_EQ(stats.internal.bytes_sent, expected);

    const Status bad = run_internal_collective(
        rig.stream(), rank, size, collective_args(ZRT_COLL_ALL_GATHER, nullptr, all.data(), count),
        "test gather");
    EXPECT_EQ(bad.code(), ZRT_INVALID_ARGUMENT);
    EXPECT_EQ(bad.message().rfind("test gather: ", 0), 0u) << bad.message();
  });
}

// Ranks that disagree on the count (with the order checker off) get an error on both paths,
// never a result built from the wrong bytes: the default fingerprint names both calls.
void expect_count_mismatch_fails(bool windows) {
  RankOptions options;
  options.env["ZRT_CHECK"] = "0";
  options.deadline_ms = 60000;
  expect_ranks_pass(
      2,
      [windows](int rank, int size) {
        Rig rig;
        rig.windows = windows;
        ASSERT_OK(rig.init(rank, size, windows ? "mismatch_w" : "mismatch_t", 10000));
        const size_t count = rank == 0 ? 1000 : 1001;
        std::vector<float> in(count * size, 1.0f), out(count);
        Status status =
            rig.run(collective_args(ZRT_COLL_REDUCE_SCATTER, in.data(), out.data(), count));
        ASSERT_FALSE(status.is_ok()) << "rank " << rank << ": mismatched counts went unnoticed";
        // The longer side may see a short message, the shorter a truncation: both name the peer.
        const std::string peer = "rank " + std::to_string(1 - rank);
        EXPECT_NE(status.message().find(peer), std::string::npos) << status.message();
        // The default fingerprint (collectives/fingerprint_check.h) names both calls on both
        // paths; before it, the window ring's byte count said ZRT_REMOTE_ERROR.
        EXPECT_EQ(status.code(), ZRT_INVALID_USAGE) << status.message();
        EXPECT_NE(status.message().find("mismatched collective arguments"), std::string::npos)
            << status.message();
        (void)windows;
      },
      options);
}

// The parameter: through peer windows (true) or tagged messages.
class CountMismatch : public ::testing::TestWithParam<bool> {};
TEST_P(CountMismatch, AcrossRanksFails) {
  expect_count_mismatch_fails(GetParam());
}
INSTANTIATE_TEST_SUITE_P(Collectives, CountMismatch, ::testing::Values(true, false),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return std::string(info.param ? "ThroughWindows"
                                                         : "ThroughTaggedMessages");
                         });

TEST(Collectives, PointToPointRingAndSelf) {
  expect_ranks_pass(3, [](int rank, int size) {
    Rig rig;
    ASSERT_OK(rig.init(rank, size, "p2p"));
    const size_t count = 100003;
    std::vector<int64_t> out(count), in(count), self_in(count);
    for (size_t i = 0; i < count; ++i) out[i] = static_cast<int64_t>(i) * 10 + rank;
    const int right = (rank + 1) % size;
    const int left = (rank + size - 1) % size;
    CollectiveArgs send = collective_args(ZRT_COLL_SEND, out.data(), nullptr, count, ZRT_I64);
    send.peer = right;
    CollectiveArgs recv = collective_args(ZRT_COLL_RECV, nullptr, in.data(), count, ZRT_I64);
    recv.peer = left;
    CollectiveArgs self_send = send;
    self_send.peer = rank;
    CollectiveArgs self_recv =
        collective_args(ZRT_COLL_RECV, nullptr, self_in.data(), count, ZRT_I64);
    self_recv.peer = rank;
    for (int iteration = 0; iteration < 5; ++iteration) {
      ASSERT_OK(enqueue_collective(rig.stream(), rank, size, self_send));
      ASSERT_OK(enqueue_collective(rig.stream(), rank, size, self_recv));
      // Even ranks send first; the order on each stream is what pairs them.
      if (rank % 2 == 0) {
        ASSERT_OK(enqueue_collective(rig.stream(), rank, size, send));
        ASSERT_OK(enqueue_collective(rig.stream(), rank, size, recv));
      } else {
        ASSERT_OK(enqueue_collective(rig.stream(), rank, size, recv));
        ASSERT_OK(enqueue_collective(rig.stream(), rank, size, send));
      }
      // A collective after point-to-point still matches on every rank (p2p takes no
      // collective sequence number).
      ASSERT_OK(enqueue_collective(rig.stream(), rank, size,
                                   collective_args(ZRT_COLL_BARRIER, nullptr, nullptr, 0)));
      ASSERT_OK(rig.stream().synchronize());
      for (size_t i = 0; i < count; ++i) {
        ASSERT_EQ(in[i], static_cast<int64_t>(i) * 10 + left);
        ASSERT_EQ(self_in[i], out[i]);
      }
    }
  });
}

// Every forced all-reduce algorithm against the f64 reference, with power-of-two and other N
// (the recursive doubling fold), several ops, and messages beyond the staging memory
// (segmented direct and recursive doubling); the results of each algorithm agree bitwise
// across ranks.
void forced_algorithms(int rank, int size) {
  const zrt_dtype_t dtypes[] = {ZRT_F32, ZRT_BF16, ZRT_I32, ZRT_F64};
  const zrt_op_t ops[] = {ZRT_SUM, ZRT_AVG, ZRT_MIN, ZRT_MAX, ZRT_PROD};
  const size_t counts[] = {1, 7, 1023, 1048579};
  std::vector<char> in(1048579 * 8), out(1048579 * 8);
  uint64_t hash = 1469598103934665603ull;
  // ZRT_ALGO is read once, when the engine is created: one rig per algorithm.
  std::unique_ptr<Rig> rig;
  for (const char* algo : {"ring", "direct", "rd"}) {
    setenv("ZRT_ALGO", algo, 1);
    rig.reset();
    rig = std::make_unique<Rig>();
    ASSERT_OK(rig->init(rank, size, std::string("algo-") + algo));
    ASSERT_TRUE(rig->engine->options().all_reduce_algorithm.has_value());
    EXPECT_STREQ(algorithm_name(*rig->engine->options().all_reduce_algorithm), algo);
    for (zrt_dtype_t dtype : dtypes) {
      for (zrt_op_t op : ops) {
        if (op == ZRT_AVG && !dtype_is_floating(dtype)) continue;
        for (size_t count : counts) {
          if (count == 1048579 && op != ZRT_SUM) continue;
          for (size_t i = 0; i < count; ++i) {
            store(dtype, in.data(), i, input_value(dtype, op, rank, size, i));
          }
          ASSERT_OK(rig->run(
              collective_args(ZRT_COLL_ALL_REDUCE, in.data(), out.data(), count, dtype, op)));
          const double tol = tolerance(dtype, op);
          for (size_t i = 0; i < count; ++i) {
            const double expected = reference(dtype, op, size, i);
            const double got = load(dtype, out.data(), i);
            ASSERT_TRUE(tol == 0 ? got == expected : std::fabs(got - expected) <= tol)
                << algo << " " << dtype_name(dtype) << " " << op_name(op) << " count " << count
                << " element " << i << ": " << got << " != " << expected;
          }
          hash = fnv1a(out.data(), count * dtype_size(dtype), hash);
        }
      }
    }
  }
  // A value ZRT_ALGO does not accept fails the engine's creation, before any call.
  setenv("ZRT_ALGO", "butterfly", 1);
  EngineOptions bad_options;
  bad_options.rank = rank;
  bad_options.size = size;
  std::unique_ptr<ProgressEngine> bad_engine;
  Status bad = create_progress_engine(*rig->transport, bad_options, &bad_engine);
  EXPECT_EQ(bad.code(), ZRT_INVALID_ARGUMENT);
  EXPECT_NE(bad.message().find("ZRT_ALGO='butterfly'"), std::string::npos) << bad.message();
  unsetenv("ZRT_ALGO");
  std::vector<uint64_t> hashes(size);
  CollectiveArgs gather = collective_args(ZRT_COLL_ALL_GATHER, &hash, hashes.data(), 1, ZRT_I64);
  ASSERT_OK(rig->run(gather));
  for (int r = 0; r < size; ++r) EXPECT_EQ(hashes[r], hashes[0]) << "rank " << r;
}

class ForcedAlgorithms : public RankCount {};
TEST_P(ForcedAlgorithms, EveryAlgorithmMatchesTheReference) {
  expect_ranks_pass(GetParam(), forced_algorithms);
}
INSTANTIATE_TEST_SUITE_P(Collectives, ForcedAlgorithms, ::testing::Values(3, 4, 6),
                         rank_count_name);

void expect_invalid(Rig& rig, const CollectiveArgs& args, const char* needle) {
  Status status = enqueue_collective(rig.stream(), rig.rank, rig.size, args);
  EXPECT_EQ(status.code(), ZRT_INVALID_ARGUMENT) << needle << ": " << status.message();
  EXPECT_NE(status.message().find(needle), std::string::npos)
      << "expected '" << needle << "' in: " << status.message();
}

TEST(Collectives, BadArgumentsAreRefusedWithTheArgumentNamed) {
  expect_ranks_pass(2, [](int rank, int size) {
    Rig rig;
    ASSERT_OK(rig.init(rank, size, "bad"));
    std::vector<float> buffer(64);
    float* b = buffer.data();
    expect_invalid(rig, collective_args(ZRT_COLL_ALL_REDUCE, nullptr, b, 4), "sendbuf is NULL");
    expect_invalid(rig, collective_args(ZRT_COLL_ALL_REDUCE, b, nullptr, 4), "recvbuf is NULL");
    expect_invalid(rig, collective_args(ZRT_COLL_ALL_REDUCE, b, b + 2, 4), "overlap");
    expect_invalid(rig, collective_args(ZRT_COLL_REDUCE_SCATTER, b, b + 1, 4),
                   "recvbuf != sendbuf");
    expect_invalid(rig, collective_args(ZRT_COLL_ALL_GATHER, b + 1, b, 4), "overlap");
    expect_invalid(rig, collective_args(ZRT_COLL_ALL_REDUCE, b, b, 4, static_cast<zrt_dtype_t>(99)),
                   "dtype");
    expect_invalid(
        rig, collective_args(ZRT_COLL_ALL_REDUCE, b, b, 4, ZRT_F32, static_cast<zrt_op_t>(42)),
        "op 42");
    expect_invalid(rig, collective_args(ZRT_COLL_ALL_REDUCE, b, b, 4, ZRT_I32, ZRT_AVG), "op avg");
    CollectiveArgs premul = collective_args(ZRT_COLL_REDUCE_SCATTER, b, b + 4 * rank, 4, ZRT_I64);
    premul.premul = true;
    premul.premul_scale = 0.5;
    expect_invalid(rig, premul, "premul_sum");
    CollectiveArgs root = collective_args(ZRT_COLL_BROADCAST, b, b, 4);
    root.root = size;
    expect_invalid(rig, root, "root 2");
    root.kind = ZRT_COLL_REDUCE;
    root.root = -1;
    expect_invalid(rig, root, "root -1");
    CollectiveArgs peer = collective_args(ZRT_COLL_SEND, b, nullptr, 4);
    peer.peer = size;
    expect_invalid(rig, peer, "peer 2");
    peer.kind = ZRT_COLL_RECV;
    peer.recvbuf = b;
    peer.peer = -3;
    expect_invalid(rig, peer, "peer -3");
    expect_invalid(rig, collective_args(static_cast<zrt_coll_kind_t>(12), b, b, 4), "kind 12");
    expect_invalid(rig, collective_args(ZRT_COLL_ALL_REDUCE, b, b, SIZE_MAX / 2), "too large");
    // Valid edge cases are accepted: count 0 with NULL buffers, in-place layouts.
    ASSERT_OK(rig.run(collective_args(ZRT_COLL_ALL_REDUCE, nullptr, nullptr, 0)));
    ASSERT_OK(rig.run(collective_args(ZRT_COLL_REDUCE_SCATTER, b, b + 4 * rank, 4)));
    ASSERT_OK(rig.run(collective_args(ZRT_COLL_ALL_GATHER, b + 4 * rank, b, 4)));
    // A receive from oneself with no send before it fails its stream only.
    CollectiveArgs lonely = collective_args(ZRT_COLL_RECV, nullptr, b, 4);
    lonely.peer = rank;
    ASSERT_OK(enqueue_collective(rig.stream(), rank, size, lonely));
    EXPECT_EQ(rig.stream().synchronize().code(), ZRT_INVALID_USAGE);
    EXPECT_TRUE(rig.engine->error().is_ok());
  });
}

}  // namespace
}  // namespace zrt::testing
