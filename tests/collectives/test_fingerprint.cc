// The default mismatch fingerprint (collectives/fingerprint_check.h), with the order checker
// off: every kind of mismatched call (op, dtype, kind, count) fails on every rank, at N = 2 and
// 3, through the window rings and the tagged-message paths, and at 2 simulated hosts x 2
// through the two-level collectives, with a message naming both calls
// (the ranks that saw it directly, the others through the peer verdict); matched calls before
// it give the right results.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "tests/collectives/rig.h"
#include "tests/harness/multirank.h"
#include "tests/harness/status_assert.h"

namespace zrt::testing {
namespace {

struct Case {
  const char* name;
  zrt_coll_kind_t kind;
  size_t count;           // per rank for reduce-scatter and all-gather
  zrt_coll_kind_t kind0;  // what rank 0 calls instead
  size_t count0;
  zrt_dtype_t dtype0;
  zrt_op_t op0;
  const char* theirs;  // in rank 0's call's description
  const char* ours;    // in the other ranks' description
};

const Case kCases[] = {
    {"op_ring", ZRT_COLL_ALL_REDUCE, 300000, ZRT_COLL_ALL_REDUCE, 300000, ZRT_F32, ZRT_MAX,
     "f32 = 1.1 MiB, max)", "f32 = 1.1 MiB, sum)"},
    {"op_direct", ZRT_COLL_ALL_REDUCE, 1000, ZRT_COLL_ALL_REDUCE, 1000, ZRT_F32, ZRT_MAX,
     "1000 x f32 = 3.9 KiB, max)", "1000 x f32 = 3.9 KiB, sum)"},
    // 8 bytes: one-shot's tiny deposit (tag and data in one 16-byte store,
    // collectives/one_shot_deposit.cc), whose tag hashes the call; 8 against 16 bytes: a tiny
    // deposit against a header one.
    {"op_tiny", ZRT_COLL_ALL_REDUCE, 2, ZRT_COLL_ALL_REDUCE, 2, ZRT_F32, ZRT_MAX, "max)", "sum)"},
    {"count_tiny", ZRT_COLL_ALL_REDUCE, 2, ZRT_COLL_ALL_REDUCE, 4, ZRT_F32, ZRT_SUM,
     "all_reduce(4 x f32", "all_reduce(2 x f32"},
    {"dtype", ZRT_COLL_ALL_REDUCE, 300000, ZRT_COLL_ALL_REDUCE, 300000, ZRT_I32, ZRT_SUM,
     "300000 x i32", "300000 x f32"},
    // At N = 3 through windows the all-gathers (1.2 MB of output) run one-shot and rank 0's
    // reduce-scatter (1.2 MB of input) the ring: found through the call the ring announces in
    // the stream's one-shot arena (one_shot.h), not by a timeout.
    {"kind", ZRT_COLL_ALL_GATHER, 100000, ZRT_COLL_REDUCE_SCATTER, 100000, ZRT_F32, ZRT_SUM,
     "reduce_scatter(100000 x f32", "all_gather(100000 x f32"},
    {"count", ZRT_COLL_ALL_GATHER, 100000, ZRT_COLL_ALL_GATHER, 100001, ZRT_F32, ZRT_SUM,
     "all_gather(100001 x f32", "all_gather(100000 x f32"},
    {"broadcast_dtype", ZRT_COLL_BROADCAST, 50000, ZRT_COLL_BROADCAST, 50000, ZRT_I32, ZRT_SUM,
     "broadcast(50000 x i32", "broadcast(50000 x f32"},
    {"reduce_op", ZRT_COLL_REDUCE, 50000, ZRT_COLL_REDUCE, 50000, ZRT_F32, ZRT_MIN,
     "reduce(50000 x f32 = 195.3 KiB, min, root 0)",
     "reduce(50000 x f32 = 195.3 KiB, sum, root 0)"},
};

CollectiveArgs args_for(zrt_coll_kind_t kind, size_t count, zrt_dtype_t dtype, zrt_op_t op,
                        std::vector<float>& in, std::vector<float>& out) {
  CollectiveArgs args;
  args.kind = kind;
  args.count = count;
  args.dtype = dtype;
  args.op = op;
  args.root = 0;
  args.sendbuf = in.data();
  args.recvbuf = out.data();
  return args;
}

size_t count_of(const std::string& text, const std::string& word) {
  size_t found = 0;
  for (size_t at = text.find(word); at != std::string::npos; at = text.find(word, at + 1)) {
    ++found;
  }
  return found;
}

// `hosts` > 0: the ranks stand for that many hosts, and the rings are the two-level collectives
// (ZRT_ALGO=ring: on one machine the table would pick one-shot for the small cases), whose
// fingerprint travels in front of the first message across hosts for blocks below
// kFingerprintHeaderMaxBytes (op_direct, op_tiny, count_tiny) and in the companion above.
// Who makes rank 0's call there: every rank of host 0 (only the links between hosts see the
// difference) or local rank 0 of every host (only the links inside a host see it).
enum class Differs { kRankZero, kFirstHost, kFirstLocalRank };

void run_cases(int size, bool windows, int hosts = 0, Differs who = Differs::kRankZero) {
  RankOptions options;
  options.env["ZRT_CHECK"] = "0";
  if (hosts > 0) options.env["ZRT_ALGO"] = "ring";
  options.deadline_ms = 240000;
  expect_ranks_pass(
      size,
      [windows, hosts, who](int rank, int size) {
        for (const Case& c : kCases) {
          // The buffers outlive the rig: after the mismatch fails the communicator, a transfer
          // the transport had started may still land in them until the rig's teardown has
          // cancelled it (zrt.h: buffers of failed work stay valid until the destroy returns).
          const size_t total = 300001 * static_cast<size_t>(size);
          std::vector<float> in(total, 1.0f + static_cast<float>(rank)), out(total, 0.0f);
          Rig rig;
          rig.windows = windows;
          rig.two_level_hosts = hosts;
          const std::string name = std::string("fp_") + c.name + (windows ? "_w" : "_t") +
                                   (who == Differs::kFirstHost        ? "_host"
                                    : who == Differs::kFirstLocalRank ? "_local"
                                                                      : "");
          ASSERT_OK(rig.init(rank, size, name, 20000));
          // A matched call first: the fingerprint leaves it alone.
          ASSERT_OK(rig.run(args_for(ZRT_COLL_ALL_REDUCE, 1000, ZRT_F32, ZRT_SUM, in, out)));
          const float expected = static_cast<float>(size * (size + 1) / 2);
          for (size_t i = 0; i < 1000; ++i) ASSERT_EQ(out[i], expected) << c.name << " " << i;

          const int local = hosts > 0 ? size / hosts : size;
          const bool differs = who == Differs::kFirstHost        ? rank < local
                               : who == Differs::kFirstLocalRank ? rank % local == 0
                                                                 : rank == 0;
          CollectiveArgs args = differs ? args_for(c.kind0, c.count0, c.dtype0, c.op0, in, out)
                                        : args_for(c.kind, c.count, ZRT_F32, ZRT_SUM, in, out);
          const Status status = rig.run(args);
          ASSERT_FALSE(status.is_ok()) << c.name << ": rank " << rank << " saw no mismatch";
          EXPECT_EQ(status.code(), ZRT_INVALID_USAGE) << c.name << ": " << status.message();
          const std::string& message = status.message();
          EXPECT_GE(count_of(message, " called "), 2u) << c.name << ": " << message;
          EXPECT_NE(message.find(c.theirs), std::string::npos) << c.name << ": " << message;
          EXPECT_NE(message.find(c.ours), std::string::npos) << c.name << ": " << message;
          EXPECT_NE(message.find("collective #1 of stream 0"), std::string::npos)
              << c.name << ": " << message;
          // Every rank has its error before any closes: a rank whose transport goes while a
          // peer still copies from it (UCX's cma) takes that peer down (issue 21's item 2).
          const char* run_dir = std::getenv("ZRT_TEST_RUN_DIR");
          const std::string base = std::string(run_dir != nullptr ? run_dir : "/tmp") + "/" + name;
          std::ofstream(base + "." + std::to_string(rank)) << "done\n";
          for (int peer = 0; peer < size; ++peer) {
            const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(30);
            while (!std::filesystem::exists(base + "." + std::to_string(peer)) &&
                   std::chrono::steady_clock::now() < until) {
              std::this_thread::sleep_for(std::chrono::milliseconds(5));
            }
          }
        }
      },
      options);
}

TEST(Fingerprint, MismatchesFailOnEveryRankThroughWindowsN2) {
  run_cases(2, true);
}
TEST(Fingerprint, MismatchesFailOnEveryRankThroughWindowsN3) {
  run_cases(3, true);
}
TEST(Fingerprint, MismatchesFailOnEveryRankThroughTaggedMessagesN2) {
  run_cases(2, false);
}
TEST(Fingerprint, MismatchesFailOnEveryRankThroughTaggedMessagesN3) {
  run_cases(3, false);
}
TEST(Fingerprint, TwoLevelMismatchesBetweenHostsFailOnEveryRank) {
  run_cases(4, true, 2, Differs::kFirstHost);
}
TEST(Fingerprint, TwoLevelMismatchesInsideHostsFailOnEveryRank) {
  run_cases(4, true, 2, Differs::kFirstLocalRank);
}

}  // namespace
}  // namespace zrt::testing
