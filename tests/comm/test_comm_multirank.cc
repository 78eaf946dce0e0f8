// Multi-rank tests of the communicator C API over real UCX between forked ranks: init through
// the file OOB and through the environment (store), queries, split, destroy and re-init, ops,
// stats, abort, and a peer that dies.
#include <unistd.h>

#include <chrono>
#include <cstddef>
#include <cstring>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "tests/harness/file_bootstrap.h"
#include "tests/harness/multirank.h"
#include "tests/harness/status_assert.h"
#include "zrt/zrt.h"

namespace zrt::testing {
namespace {

std::string run_dir() {
  const char* dir = std::getenv("ZRT_TEST_RUN_DIR");
  return dir != nullptr ? dir : "";
}

// Barrier on a fresh stream, waited for: proves every rank of `comm` can talk.
void barrier(zrt_comm_t comm) {
  zrt_stream_t stream = nullptr;
  ASSERT_OK(zrt_stream_create(comm, ZRT_MEM_HOST, &stream));
  EXPECT_OK(zrt_barrier(comm, stream));
  EXPECT_OK(zrt_stream_synchronize(stream));
  EXPECT_OK(zrt_stream_destroy(stream));
}

// One extra round of the file OOB, waited for: every rank has reached this point.
void file_barrier(FileOob& oob, int size) {
  char token = 1;
  std::vector<char> all(size);
  void* request = nullptr;
  ASSERT_EQ(oob.oob().allgather(&token, all.data(), 1, oob.oob().user_data, &request), ZRT_SUCCESS);
  zrt_status_t status = ZRT_IN_PROGRESS;
  while (status == ZRT_IN_PROGRESS) status = oob.oob().test(request);
  oob.oob().free(request);
  ASSERT_EQ(status, ZRT_SUCCESS);
}

void check_queries(zrt_comm_t comm, int rank, int size) {
  int value = -1;
  EXPECT_OK(zrt_comm_rank(comm, &value));
  EXPECT_EQ(value, rank);
  EXPECT_OK(zrt_comm_size(comm, &value));
  EXPECT_EQ(value, size);
  int local_rank = -1, local_size = -1;
  EXPECT_OK(zrt_comm_local_rank(comm, &local_rank));
  EXPECT_OK(zrt_comm_local_size(comm, &local_size));
  EXPECT_EQ(local_size, size);  // one host
  EXPECT_EQ(local_rank, rank);
  EXPECT_EQ(zrt_comm_rank(comm, nullptr), ZRT_INVALID_ARGUMENT);
  EXPECT_NE(std::string(zrt_last_error()).find("rank"), std::string::npos);
  EXPECT_EQ(zrt_comm_get_error(comm), ZRT_SUCCESS);
}

class CommOob : public ::testing::TestWithParam<int> {};

// Init, query, barrier, destroy; then a second communicator in the same process.
TEST_P(CommOob, InitQueryDestroyReinit) {
  expect_ranks_pass(GetParam(), [](int rank, int size) {
    for (int round = 0; round < 2; ++round) {
      FileOob oob(run_dir(), "oob" + std::to_string(round), rank, size);
      zrt_comm_t comm = nullptr;
      ASSERT_OK(zrt_comm_init_oob(&oob.oob(), nullptr, &comm));
      check_queries(comm, rank, size);
      barrier(comm);
      EXPECT_OK(zrt_comm_destroy(comm));
    }
  });
}

INSTANTIATE_TEST_SUITE_P(Ranks, CommOob, ::testing::Values(1, 2, 3, 4));

class CommEnv : public ::testing::TestWithParam<int> {};

TEST_P(CommEnv, InitFromEnvironment) {
  expect_ranks_pass(GetParam(), [](int rank, int size) {
    zrt_comm_t comm = nullptr;
    ASSERT_OK(zrt_comm_init_env(nullptr, &comm));
    check_queries(comm, rank, size);
    barrier(comm);
    EXPECT_OK(zrt_comm_destroy(comm));
  });
}

INSTANTIATE_TEST_SUITE_P(Ranks, CommEnv, ::testing::Values(1, 2, 3, 4));

// Splits 4 ranks by parity with reversed keys, and once more with rank 3 opting out; checks the
// new ranks and that each new communicator reduces over exactly its members.
TEST(CommSplit, ColorsKeysAndNoColor) {
  expect_ranks_pass(4, [](int rank, int size) {
    FileOob oob(run_dir(), "split", rank, size);
    zrt_comm_t comm = nullptr;
    ASSERT_OK(zrt_comm_init_oob(&oob.oob(), nullptr, &comm));
    zrt_comm_t half = nullptr;
    ASSERT_OK(zrt_comm_split(comm, rank % 2, -rank, nullptr, &half));
    ASSERT_NE(half, nullptr);
    int new_rank = -1, new_size = -1;
    EXPECT_OK(zrt_comm_rank(half, &new_rank));
    EXPECT_OK(zrt_comm_size(half, &new_size));
    EXPECT_EQ(new_size, 2);
    EXPECT_EQ(new_rank, rank >= 2 ? 0 : 1);  // key -rank: the higher old rank comes first
    zrt_stream_t stream = nullptr;
    ASSERT_OK(zrt_stream_create(half, ZRT_MEM_HOST, &stream));
    int32_t value = rank, sum = 0;
    EXPECT_OK(zrt_all_reduce(half, &value, &sum, 1, ZRT_I32, ZRT_SUM, stream));
    EXPECT_OK(zrt_stream_synchronize(stream));
    EXPECT_EQ(sum, rank % 2 == 0 ? 0 + 2 : 1 + 3);

    zrt_comm_t most = nullptr;
    ASSERT_OK(zrt_comm_split(comm, rank == 3 ? ZRT_SPLIT_NOCOLOR : 7, 0, nullptr, &most));
    if (rank == 3) {
      EXPECT_EQ(most, nullptr);
    } else {
      ASSERT_NE(most, nullptr);
      check_queries(most, rank, 3);
      barrier(most);
      EXPECT_OK(zrt_comm_destroy(most));
    }
    EXPECT_EQ(zrt_comm_split(comm, -2, 0, nullptr, &most), ZRT_INVALID_ARGUMENT);
    EXPECT_NE(std::string(zrt_last_error()).find("color"), std::string::npos);
    EXPECT_EQ(zrt_comm_split(comm, 0, 0, nullptr, nullptr), ZRT_INVALID_ARGUMENT);
    EXPECT_NE(std::string(zrt_last_error()).find("newcomm"), std::string::npos);
    EXPECT_OK(zrt_comm_destroy(half));  // destroys `stream` too
    barrier(comm);                      // the parent still works
    EXPECT_OK(zrt_comm_destroy(comm));
  });
}

TEST(CommOps, PremulOpsStatsAbort) {
  expect_ranks_pass(2, [](int rank, int size) {
    FileOob oob(run_dir(), "ops", rank, size);
    zrt_comm_t comm = nullptr;
    ASSERT_OK(zrt_comm_init_oob(&oob.oob(), nullptr, &comm));
    zrt_op_t op;
    ASSERT_OK(zrt_op_create_premul_sum(comm, 0.5, &op));
    EXPECT_GE(static_cast<int>(op), ZRT_OP_COUNT);
    EXPECT_EQ(zrt_op_create_premul_sum(comm, 0.5, nullptr), ZRT_INVALID_ARGUMENT);
    EXPECT_OK(zrt_op_destroy(comm, op));
    EXPECT_EQ(zrt_op_destroy(comm, op), ZRT_INVALID_ARGUMENT);  // already gone
    EXPECT_EQ(zrt_op_destroy(comm, ZRT_SUM), ZRT_INVALID_ARGUMENT);
    EXPECT_NE(std::string(zrt_last_error()).find("built-in"), std::string::npos);

    zrt_comm_stats_t stats{};
    // Shorter (older) structs are accepted down to the end of `user` (CommStats below).
    stats.size = offsetof(zrt_comm_stats_t, user) + sizeof(zrt_coll_counters_t) - 1;
    EXPECT_EQ(zrt_comm_stats(comm, &stats), ZRT_INVALID_ARGUMENT);
    EXPECT_NE(std::string(zrt_last_error()).find("stats->size"), std::string::npos);
    barrier(comm);
    stats.size = sizeof(stats);
    EXPECT_OK(zrt_comm_stats(comm, &stats));
    EXPECT_GE(stats.per_kind[ZRT_COLL_BARRIER].user.calls, 1u);
    EXPECT_OK(zrt_comm_stats_reset(comm));
    EXPECT_OK(zrt_comm_stats(comm, &stats));
    EXPECT_EQ(stats.user.calls, 0u);

    // Both ranks are done talking before either aborts, and both have aborted before either
    // closes (a local close after an abort looks like a failure to a peer still running).
    barrier(comm);
    file_barrier(oob, size);
    EXPECT_OK(zrt_comm_abort(comm));
    EXPECT_EQ(zrt_comm_get_error(comm), ZRT_REMOTE_ERROR);
    EXPECT_NE(std::string(zrt_last_error()).find("aborted"), std::string::npos);
    file_barrier(oob, size);
    zrt_comm_destroy(comm);  // local after an abort: returns, whatever status
  });
}

// zrt_mem_alloc's buffers: zeroed, counted, gathered exactly as collective buffers (at N = 2 the
// peers read them through mappings, at N = 3 through the one-shot slots), and a free of anything
// but a live buffer of this communicator refused by name. One buffer is left to
// zrt_comm_destroy, which frees it (AddressSanitizer would see a leak otherwise).
TEST(CommMemory, RegisteredBuffersGatherExactlyAndForeignFreesAreRefused) {
  for (int n : {2, 3}) {
    expect_ranks_pass(n, [](int rank, int size) {
      FileOob oob(run_dir(), "memory", rank, size);
      zrt_comm_t comm = nullptr;
      ASSERT_OK(zrt_comm_init_oob(&oob.oob(), nullptr, &comm));
      void* buffer = nullptr;
      EXPECT_EQ(zrt_mem_alloc(comm, 0, &buffer), ZRT_INVALID_ARGUMENT);
      EXPECT_NE(std::string(zrt_last_error()).find("bytes"), std::string::npos);
      EXPECT_EQ(zrt_mem_alloc(comm, 64, nullptr), ZRT_INVALID_ARGUMENT);
      EXPECT_NE(std::string(zrt_last_error()).find("buffer"), std::string::npos);

      const size_t bytes = (64 << 10) + 12;  // not whole pages
      void* send = nullptr;
      void* recv = nullptr;
      ASSERT_OK(zrt_mem_alloc(comm, bytes, &send));
      ASSERT_OK(zrt_mem_alloc(comm, bytes * static_cast<size_t>(size), &recv));
      size_t held = 0;
      ASSERT_OK(zrt_mem_held(comm, &held));
      const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
      auto pages = [page](size_t b) { return (b + page - 1) / page * page; };
      EXPECT_EQ(held, pages(bytes) + pages(bytes * static_cast<size_t>(size)));
      EXPECT_EQ(reinterpret_cast<uintptr_t>(send) % page, 0u);
      auto* in = static_cast<unsigned char*>(send);
      auto* out = static_cast<unsigned char*>(recv);
      size_t nonzero = 0;
      for (size_t i = 0; i < bytes; ++i) nonzero += in[i] != 0;
      EXPECT_EQ(nonzero, 0u) << "zrt_mem_alloc's memory is zeroed";

      auto value = [](int r, int call, size_t i) {
        return static_cast<unsigned char>((i * 7 + static_cast<size_t>(r) * 31 + call) & 0xff);
      };
      zrt_stream_t stream = nullptr;
      ASSERT_OK(zrt_stream_create(comm, ZRT_MEM_HOST, &stream));
      for (int call = 0; call < 4; ++call) {
        const bool in_place = call % 2 == 1;
        unsigned char* source = in_place ? out + static_cast<size_t>(rank) * bytes : in;
        for (size_t i = 0; i < bytes; ++i) source[i] = value(rank, call, i);
        ASSERT_OK(zrt_all_gather(comm, source, out, bytes, ZRT_U8, stream));
        ASSERT_OK(zrt_stream_synchronize(stream));
        for (int r = 0; r < size; ++r) {
          size_t wrong = 0;
          for (size_t i = 0; i < bytes; ++i) {
            wrong += out[static_cast<size_t>(r) * bytes + i] != value(r, call, i);
          }
          ASSERT_EQ(wrong, 0u) << "call " << call << " block " << r << " N=" << size;
        }
      }
      ASSERT_OK(zrt_stream_destroy(stream));

      int local = 0;
      EXPECT_EQ(zrt_mem_free(comm, &local), ZRT_INVALID_ARGUMENT);
      EXPECT_NE(std::string(zrt_last_error()).find("zrt_mem_alloc"), std::string::npos);
      EXPECT_EQ(zrt_mem_free(comm, in + page), ZRT_INVALID_ARGUMENT);  // inside, not the start
      EXPECT_OK(zrt_mem_free(comm, nullptr));
      EXPECT_OK(zrt_mem_free(comm, send));
      EXPECT_EQ(zrt_mem_free(comm, send), ZRT_INVALID_ARGUMENT);  // twice
      ASSERT_OK(zrt_mem_held(comm, &held));
      EXPECT_EQ(held, pages(bytes * static_cast<size_t>(size)));
      barrier(comm);
      EXPECT_OK(zrt_comm_destroy(comm));  // frees `recv`
    });
  }
}

// The stats layout (size first, the per-kind array last): older callers rely on these offsets.
static_assert(offsetof(zrt_comm_stats_t, size) == 0);
static_assert(offsetof(zrt_comm_stats_t, user) == 8);
static_assert(offsetof(zrt_comm_stats_t, internal) == 40);
static_assert(offsetof(zrt_comm_stats_t, per_kind) == 72);
static_assert(sizeof(zrt_comm_stats_t) == 72 + ZRT_COLL_KIND_COUNT * 64);
static_assert(sizeof(zrt_coll_counters_t) == 32 && offsetof(zrt_coll_counters_t, busy_ns) == 24);
static_assert(offsetof(zrt_coll_kind_stats_t, internal) == 32);

// zrt's own exchanges (a split's all-gathers) count on the internal side and a user all-reduce
// on the user side; an older, shorter stats struct gets exactly its prefix and nothing past it.
TEST(CommStats, UserAndInternalApartAndOlderSizes) {
  expect_ranks_pass(2, [](int rank, int size) {
    FileOob oob(run_dir(), "stats", rank, size);
    zrt_comm_t comm = nullptr;
    ASSERT_OK(zrt_comm_init_oob(&oob.oob(), nullptr, &comm));
    ASSERT_OK(zrt_comm_stats_reset(comm));
    zrt_comm_t child = nullptr;
    ASSERT_OK(zrt_comm_split(comm, 0, rank, nullptr, &child));
    ASSERT_NE(child, nullptr);
    zrt_comm_stats_t stats{};
    stats.size = sizeof(stats);
    ASSERT_OK(zrt_comm_stats(comm, &stats));
    EXPECT_EQ(stats.user.calls, 0u);
    EXPECT_EQ(stats.user.bytes_sent, 0u);
    EXPECT_GE(stats.per_kind[ZRT_COLL_ALL_GATHER].internal.calls, 1u);
    EXPECT_GT(stats.per_kind[ZRT_COLL_ALL_GATHER].internal.bytes_sent, 0u);
    EXPECT_EQ(stats.internal.bytes_sent, stats.per_kind[ZRT_COLL_ALL_GATHER].internal.bytes_sent);
    const zrt_coll_counters_t split_traffic = stats.internal;

    zrt_stream_t stream = nullptr;
    ASSERT_OK(zrt_stream_create(comm, ZRT_MEM_HOST, &stream));
    std::vector<float> values(256, 1.0f);
    EXPECT_OK(zrt_all_reduce(comm, values.data(), values.data(), values.size(), ZRT_F32, ZRT_SUM,
                             stream));
    EXPECT_OK(zrt_stream_synchronize(stream));
    ASSERT_OK(zrt_comm_stats(comm, &stats));
    EXPECT_EQ(stats.per_kind[ZRT_COLL_ALL_REDUCE].user.calls, 1u);
    EXPECT_EQ(stats.per_kind[ZRT_COLL_ALL_REDUCE].user.bytes_sent, values.size() * sizeof(float));
    EXPECT_EQ(stats.user.calls, 1u);
    EXPECT_EQ(stats.per_kind[ZRT_COLL_ALL_REDUCE].internal.calls, 0u);
    EXPECT_EQ(stats.internal.calls, split_traffic.calls);
    EXPECT_EQ(stats.internal.bytes_sent, split_traffic.bytes_sent);

    // Older callers: a struct that ends after `user`, and one that ends before per_kind. The
    // guard bytes past each size stay as they were; the prefix matches the full query.
    for (size_t size_of_old :
         {offsetof(zrt_comm_stats_t, internal), offsetof(zrt_comm_stats_t, per_kind)}) {
      SCOPED_TRACE(size_of_old);
      std::vector<unsigned char> raw(sizeof(zrt_comm_stats_t) + 64, 0xAB);
      std::memcpy(raw.data(), &size_of_old, sizeof(size_of_old));
      ASSERT_OK(zrt_comm_stats(comm, reinterpret_cast<zrt_comm_stats_t*>(raw.data())));
      size_t size_after = 0;
      std::memcpy(&size_after, raw.data(), sizeof(size_after));
      EXPECT_EQ(size_after, size_of_old);
      EXPECT_EQ(std::memcmp(raw.data() + sizeof(size_t),
                            reinterpret_cast<const unsigned char*>(&stats) + sizeof(size_t),
                            size_of_old - sizeof(size_t)),
                0);
      for (size_t i = size_of_old; i < raw.size(); ++i) ASSERT_EQ(raw[i], 0xAB) << "byte " << i;
    }
    // A newer caller's longer struct: zrt writes its own fields and nothing past them.
    std::vector<unsigned char> raw(sizeof(zrt_comm_stats_t) + 64, 0xAB);
    const size_t newer = raw.size();
    std::memcpy(raw.data(), &newer, sizeof(newer));
    ASSERT_OK(zrt_comm_stats(comm, reinterpret_cast<zrt_comm_stats_t*>(raw.data())));
    EXPECT_EQ(std::memcmp(raw.data() + sizeof(size_t),
                          reinterpret_cast<const unsigned char*>(&stats) + sizeof(size_t),
                          sizeof(zrt_comm_stats_t) - sizeof(size_t)),
              0);
    for (size_t i = sizeof(zrt_comm_stats_t); i < raw.size(); ++i) ASSERT_EQ(raw[i], 0xAB);

    EXPECT_OK(zrt_comm_destroy(child));
    EXPECT_OK(zrt_comm_destroy(comm));
  });
}

// A rank that exits right after init: the others' receive from it fails with ZRT_REMOTE_ERROR
// or ZRT_TIMEOUT within the (short) timeout, and destroy still returns.
// Parameter: ZRT_UCX_ERR_MODE. "hybrid" (default) notices the death through UCX's endpoint
// error; "none" has no watcher, so the engine's no-progress timeout is what ends the wait.
class CommFailure : public ::testing::TestWithParam<const char*> {};

TEST_P(CommFailure, PeerExitsBeforeReceive) {
  RankOptions options;
  options.env["ZRT_TIMEOUT"] = "5";
  options.env["ZRT_UCX_ERR_MODE"] = GetParam();
  expect_ranks_pass(
      3,
      [](int rank, int size) {
        FileOob oob(run_dir(), "death", rank, size);
        zrt_comm_t comm = nullptr;
        ASSERT_OK(zrt_comm_init_oob(&oob.oob(), nullptr, &comm));
        zrt_stream_t stream = nullptr;
        ASSERT_OK(zrt_stream_create(comm, ZRT_MEM_HOST, &stream));
        barrier(comm);
        // Out of band, so that the dying rank cannot leave while a peer still finishes the
        // barrier above (that peer would then fail there instead of in the receive below).
        file_barrier(oob, size);
        if (rank == size - 1) _exit(0);
        const auto start = std::chrono::steady_clock::now();
        std::vector<char> buffer(64);
        // The death may be noticed before the receive is even enqueued (then the enqueue
        // reports it) or while it waits (then the synchronize does).
        zrt_status_t status =
            zrt_recv(comm, buffer.data(), buffer.size(), ZRT_U8, size - 1, stream);
        if (status == ZRT_SUCCESS) status = zrt_stream_synchronize(stream);
        const auto elapsed = std::chrono::duration_cast<std::chrono::milliseconds>(
                                 std::chrono::steady_clock::now() - start)
                                 .count();
        EXPECT_TRUE(status == ZRT_REMOTE_ERROR || status == ZRT_TIMEOUT)
            << zrt_status_string(status) << ": " << zrt_last_error();
        EXPECT_LT(elapsed, 8000);
        EXPECT_NE(zrt_comm_get_error(comm), ZRT_SUCCESS);
        const auto destroy_start = std::chrono::steady_clock::now();
        zrt_comm_destroy(comm);
        EXPECT_LT(std::chrono::duration_cast<std::chrono::milliseconds>(
                      std::chrono::steady_clock::now() - destroy_start)
                      .count(),
                  8000);
      },
      options);
}

INSTANTIATE_TEST_SUITE_P(ErrorModes, CommFailure, ::testing::Values("hybrid", "none"));

}  // namespace
}  // namespace zrt::testing
