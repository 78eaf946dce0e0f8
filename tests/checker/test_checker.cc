// The collective-order checker on real ranks over UCX: every kind of disagreement between
// ranks (kind, count, dtype, op, root, purpose, a skipped collective) fails on every rank with
// ZRT_INVALID_USAGE naming both calls, a rank that calls fewer collectives is named as behind
// in the timeout, and the checker's traffic stays out of the payload counters (and is zero
// with the checker off).
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <vector>

#include "collectives/order_check.h"
#include "tests/collectives/rig.h"
#include "tests/harness/multirank.h"
#include "tests/harness/status_assert.h"

namespace zrt::testing {
namespace {

RankOptions checked(const char* check = "1") {
  RankOptions options;
  options.deadline_ms = 60000;
  options.env["ZRT_CHECK"] = check;
  // These tests read the checker's messages: one-shot collectives (on one host, up to 1 MiB)
  // compare fingerprints in their slots instead and send none, so the ring runs here.
  options.env["ZRT_ALGO"] = "ring";
  return options;
}

// Keeps a rank's communicator open until every rank has its verdict (an out-of-band barrier
// before the rig's teardown, whatever way the body leaves). A rank that fails and closes its
// endpoints at once can otherwise make a slower peer see it vanish before that peer reached
// the mismatched collective (see the report: the checker cannot help a rank that is behind).
struct Linger {
  Rig& rig;
  ~Linger() {
    if (rig.bootstrap != nullptr) (void)rig.bootstrap->barrier();
  }
};

bool contains(const std::string& text, const std::string& needle) {
  return text.find(needle) != std::string::npos;
}

// Buffers big enough for any call below (all_gather of `count` on 8 ranks).
struct Buffers {
  explicit Buffers(size_t elements) : send(elements, 1.0), recv(elements, 0.0) {}
  std::vector<double> send;
  std::vector<double> recv;
};

CollectiveArgs call(zrt_coll_kind_t kind, Buffers& buffers, size_t count,
                    zrt_dtype_t dtype = ZRT_F32, zrt_op_t op = ZRT_SUM, int root = 0) {
  CollectiveArgs args;
  args.kind = kind;
  args.sendbuf = buffers.send.data();
  args.recvbuf = buffers.recv.data();
  args.count = count;
  args.dtype = dtype;
  args.op = op;
  args.root = root;
  return args;
}

// Runs `mine` on every rank (after `before` matching collectives) and expects it to fail with
// ZRT_INVALID_USAGE whose message contains every needle of the rank.
void expect_mismatch(int size, const std::function<CollectiveArgs(int rank, Buffers&)>& mine,
                     const std::function<std::vector<std::string>(int rank)>& needles,
                     const char* name) {
  expect_ranks_pass(
      size,
      [&](int rank, int n) {
        Buffers buffers(1 << 20);  // outlives the transport, which peers may still read from
        Rig rig;
        ASSERT_OK(rig.init(rank, n, name, 20000));
        Linger linger{rig};
        // A matching collective first: the check passes it, and it does not disturb what follows.
        ASSERT_OK(rig.run(call(ZRT_COLL_ALL_REDUCE, buffers, 1000)));
        Status status = rig.run(mine(rank, buffers));
        ASSERT_EQ(status.code(), ZRT_INVALID_USAGE) << status.message();
        for (const std::string& needle : needles(rank)) {
          EXPECT_TRUE(contains(status.message(), needle))
              << "rank " << rank << " message lacks '" << needle << "': " << status.message();
        }
        EXPECT_TRUE(contains(status.message(), "collective #1 of stream 0")) << status.message();
        // The communicator stays failed with the same cause.
        EXPECT_EQ(rig.engine->error().code(), ZRT_INVALID_USAGE);
      },
      checked());
}

TEST(OrderCheck, DifferentKindsNameBothCallsAndPurposes) {
  expect_mismatch(
      2,
      [](int rank, Buffers& buffers) {
        CollectiveArgs args = rank == 0 ? call(ZRT_COLL_REDUCE_SCATTER, buffers, 1 << 19)
                                        : call(ZRT_COLL_ALL_GATHER, buffers, 3 << 16);
        args.purpose = rank == 0 ? Purpose::kBucket : Purpose::kUnit;
        args.purpose_id = rank == 0 ? 3 : 7;
        return args;
      },
      [](int rank) -> std::vector<std::string> {
        const std::string rs = "reduce_scatter(bucket 3, 524288 x f32 = 2 MiB, sum)";
        const std::string ag = "all_gather(unit 7, 196608 x f32 = 768 KiB)";
        if (rank == 0) return {"rank 1 called " + ag + " where rank 0 called " + rs};
        return {"rank 0 called " + rs + " where rank 1 called " + ag};
      },
      "kinds");
}

TEST(OrderCheck, OneDeviatingRankIsReportedOnEveryRank) {
  // Four ranks, rank 2 deviates: every rank compares with every peer, so even rank 0 (not a
  // ring neighbour of rank 2) fails with the mismatch itself rather than a vanished peer.
  expect_mismatch(
      4,
      [](int rank, Buffers& buffers) {
        return call(rank == 2 ? ZRT_COLL_ALL_GATHER : ZRT_COLL_ALL_REDUCE, buffers, 4096);
      },
      [](int rank) -> std::vector<std::string> {
        if (rank == 2) return {"where rank 2 called all_gather(4096 x f32 = 16 KiB)"};
        return {"rank 2 called all_gather(4096 x f32 = 16 KiB) where rank " + std::to_string(rank) +
                " called all_reduce(4096 x f32 = 16 KiB, sum)"};
      },
      "deviant");
}

TEST(OrderCheck, DifferentCounts) {
  // Large enough for the ring: the data phases disagree on chunk sizes before the fingerprints
  // are compared, and the mismatch must still be what is reported.
  expect_mismatch(
      3,
      [](int rank, Buffers& buffers) {
        return call(ZRT_COLL_ALL_REDUCE, buffers, rank == 1 ? 300000 : 200000);
      },
      [](int rank) -> std::vector<std::string> {
        if (rank == 1) return {"all_reduce(200000 x f32", "where rank 1 called all_reduce(300000"};
        return {"rank 1 called all_reduce(300000 x f32 = 1.1 MiB, sum)"};
      },
      "counts");
}

TEST(OrderCheck, DifferentDtypes) {
  expect_mismatch(
      2,
      [](int rank, Buffers& buffers) {
        return call(ZRT_COLL_ALL_REDUCE, buffers, 512, rank == 0 ? ZRT_F32 : ZRT_I32);
      },
      [](int) -> std::vector<std::string> {
        return {"512 x f32 = 2 KiB, sum", "512 x i32 = 2 KiB, sum"};
      },
      "dtypes");
}

TEST(OrderCheck, DifferentOps) {
  expect_mismatch(
      2,
      [](int rank, Buffers& buffers) {
        return call(ZRT_COLL_REDUCE_SCATTER, buffers, 64, ZRT_F64, rank == 0 ? ZRT_SUM : ZRT_MAX);
      },
      [](int) -> std::vector<std::string> {
        return {"reduce_scatter(64 x f64 = 512 B, sum)", "reduce_scatter(64 x f64 = 512 B, max)"};
      },
      "ops");
}

TEST(OrderCheck, DifferentRoots) {
  expect_mismatch(
      3,
      [](int rank, Buffers& buffers) {
        return call(ZRT_COLL_BROADCAST, buffers, 100, ZRT_F32, ZRT_SUM, rank == 2 ? 1 : 0);
      },
      [](int) -> std::vector<std::string> {
        return {"broadcast(100 x f32 = 400 B, root 0)", "broadcast(100 x f32 = 400 B, root 1)"};
      },
      "roots");
}

TEST(OrderCheck, SkippedCollective) {
  // Rank 1 skips the all_gather: its reduce_scatter meets the others' all_gather.
  expect_ranks_pass(
      3,
      [](int rank, int size) {
        Buffers buffers(1 << 16);
        Rig rig;
        ASSERT_OK(rig.init(rank, size, "skip", 20000));
        Linger linger{rig};
        ASSERT_OK(rig.run(call(ZRT_COLL_ALL_REDUCE, buffers, 256)));
        Status status;
        if (rank != 1) {
          status = rig.run(call(ZRT_COLL_ALL_GATHER, buffers, 256));
          if (status.is_ok()) status = rig.run(call(ZRT_COLL_REDUCE_SCATTER, buffers, 256));
        } else {
          status = rig.run(call(ZRT_COLL_REDUCE_SCATTER, buffers, 256));
        }
        ASSERT_EQ(status.code(), ZRT_INVALID_USAGE) << status.message();
        const std::string expected =
            rank == 1 ? "where rank 1 called reduce_scatter(256 x f32 = 1 KiB, sum)"
                      : "rank 1 called reduce_scatter(256 x f32 = 1 KiB, sum) where rank " +
                            std::to_string(rank) + " called all_gather(256 x f32 = 1 KiB)";
        EXPECT_TRUE(contains(status.message(), expected)) << status.message();
      },
      checked());
}

TEST(OrderCheck, RankThatCallsFewerIsNamedAsBehind) {
  // Rank 1 stops after one all_reduce (and stays alive). Rank 0's second all_reduce times out,
  // naming rank 1 as behind and the last collective both matched.
  expect_ranks_pass(
      2,
      [](int rank, int size) {
        Buffers buffers(1 << 16);
        Rig rig;
        ASSERT_OK(rig.init(rank, size, "fewer", 1500));
        ASSERT_OK(rig.run(call(ZRT_COLL_ALL_REDUCE, buffers, 1000)));
        if (rank == 1) {
          // Stays alive (its leaving would be a peer error) until rank 0 has seen the timeout.
          ASSERT_OK(rig.bootstrap->barrier());
          return;
        }
        const auto start = std::chrono::steady_clock::now();
        Status status = rig.run(call(ZRT_COLL_ALL_GATHER, buffers, 2000));
        const auto waited = std::chrono::steady_clock::now() - start;
        ASSERT_EQ(status.code(), ZRT_TIMEOUT) << status.message();
        EXPECT_TRUE(contains(status.message(),
                             "waiting on rank 1 (behind: has not called "
                             "collective #1 of stream 0, all_gather(2000 x f32"))
            << status.message();
        EXPECT_TRUE(contains(status.message(),
                             "the last collective matched on stream 0 was #0 "
                             "all_reduce(1000 x f32 = 3.9 KiB, sum)"))
            << status.message();
        EXPECT_LT(waited, std::chrono::milliseconds(3500));
        ASSERT_OK(rig.bootstrap->barrier());
      },
      checked());
}

TEST(OrderCheck, CountersKeepPayloadApartAndCheckOffSendsNothing) {
  for (const char* check : {"0", "1"}) {
    SCOPED_TRACE(std::string("ZRT_CHECK=") + check);
    expect_ranks_pass(
        3,
        [check](int rank, int size) {
          Rig rig;
          ASSERT_OK(rig.init(rank, size, std::string("counters") + check, 20000));
          EXPECT_EQ(rig.engine->options().check_order, check[0] == '1' ? 1 : 0);
          Buffers buffers(1 << 20);
          const size_t count = 100000;  // per rank
          for (int i = 0; i < 4; ++i) {
            ASSERT_OK(rig.run(call(ZRT_COLL_REDUCE_SCATTER, buffers, count)));
            ASSERT_OK(rig.run(call(ZRT_COLL_ALL_GATHER, buffers, count)));
          }
          zrt_comm_stats_t stats{};
          rig.engine->counters().snapshot(&stats);
          // The ring moves exactly (N-1) blocks each way, whether or not the checker runs.
          const uint64_t ring_bytes = uint64_t{4} * count * 4 * (size - 1);
          EXPECT_EQ(stats.per_kind[ZRT_COLL_REDUCE_SCATTER].user.bytes_sent, ring_bytes);
          EXPECT_EQ(stats.per_kind[ZRT_COLL_REDUCE_SCATTER].user.bytes_received, ring_bytes);
          EXPECT_EQ(stats.per_kind[ZRT_COLL_ALL_GATHER].user.bytes_sent, ring_bytes);
          EXPECT_EQ(stats.per_kind[ZRT_COLL_ALL_GATHER].user.bytes_received, ring_bytes);
          const uint64_t messages = check[0] == '1' ? uint64_t{8} * (size - 1) : 0;
          EXPECT_EQ(rig.engine->counters().check_messages(), messages);
          EXPECT_EQ(rig.engine->counters().check_bytes(), messages * sizeof(OrderFingerprint));
        },
        checked(check));
  }
}

TEST(OrderCheck, MatchingCallsStillAgreeAcrossStreamsAndKinds) {
  // Two streams interleaved, every kind: nothing is flagged, results are right.
  expect_ranks_pass(
      4,
      [](int rank, int size) {
        Rig rig;
        ASSERT_OK(rig.init(rank, size, "agree", 20000, 2));
        std::vector<float> in(4096, static_cast<float>(rank + 1)), out(4096 * size);
        std::vector<float> in2(4096, 1.0f), out2(4096 * size);
        for (int i = 0; i < 5; ++i) {
          CollectiveArgs a;
          a.kind = ZRT_COLL_ALL_REDUCE;
          a.sendbuf = in.data();
          a.recvbuf = out.data();
          a.count = 4096;
          CollectiveArgs b = a;
          b.kind = ZRT_COLL_ALL_GATHER;
          b.sendbuf = in2.data();
          b.recvbuf = out2.data();
          b.count = 1024;
          b.purpose = Purpose::kUnit;
          b.purpose_id = i;
          ASSERT_OK(enqueue_collective(rig.stream(0), rank, size, a));
          ASSERT_OK(enqueue_collective(rig.stream(1), rank, size, b));
          CollectiveArgs barrier;
          barrier.kind = ZRT_COLL_BARRIER;
          ASSERT_OK(enqueue_collective(rig.stream(1), rank, size, barrier));
          ASSERT_OK(rig.stream(0).synchronize());
          ASSERT_OK(rig.stream(1).synchronize());
          ASSERT_FLOAT_EQ(out[17], static_cast<float>(size * (size + 1) / 2));
        }
        EXPECT_EQ(rig.engine->counters().check_messages(), uint64_t{15} * (size - 1));
      },
      checked());
}

}  // namespace
}  // namespace zrt::testing
