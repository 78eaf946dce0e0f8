// Random sequences of public calls with random, often invalid, arguments. Two ranks share one
// seeded generator for the valid collectives (so that their collective order agrees, as the
// contract requires) and each has its own generator for the invalid calls in between (which
// must be refused locally, before any communication, or the ranks' sequences would diverge
// and hang: a refused call that still communicated is exactly what this test is for).
// Every call must return a status; every refusal must come with a message; the communicator
// must stay healthy (argument errors are the caller's, not the communicator's); the valid
// collectives' results are checked; and a final collective must succeed.
//
// The seed is printed; ZRT_MISUSE_SEED=<seed> replays a run. ZRT_MISUSE_STEPS sets its length.
// Freed handles are not used: that is undefined behaviour in C, as with free().
#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "tests/hardening/peer_failure.h"
#include "tests/harness/file_bootstrap.h"
#include "tests/harness/multirank.h"
#include "zrt/zrt.h"

namespace zrt::testing {
namespace {

uint64_t env_or(const char* name, uint64_t fallback) {
  const char* value = std::getenv(name);
  return value != nullptr ? std::strtoull(value, nullptr, 10) : fallback;
}

// A refused call: any error but a success or an internal error, and a message.
#define EXPECT_REFUSED(expr)                                                             \
  do {                                                                                   \
    const zrt_status_t refused_status_ = (expr);                                         \
    EXPECT_NE(refused_status_, ZRT_SUCCESS) << #expr << " was accepted";                 \
    EXPECT_NE(refused_status_, ZRT_INTERNAL_ERROR) << #expr << ": " << zrt_last_error(); \
    EXPECT_NE(std::string(zrt_last_error()), "") << #expr << " gave no message";         \
  } while (0)

struct World {
  int rank = 0;
  int size = 0;
  zrt_comm_t comm = nullptr;
  zrt_comm_t other = nullptr;  // a second communicator: its handles are "foreign" to comm
  zrt_stream_t streams[3] = {};
  zrt_stream_t foreign_stream = nullptr;
  zrt_event_t event = nullptr;
  zrt_event_t foreign_event = nullptr;
  zrt_op_t premul = ZRT_SUM;
  zrt_op_t foreign_premul = ZRT_SUM;
  zrt_partition_t pm = nullptr;  // never finalized (finalize is collective)
  int unit = -1;
};

// One invalid call, chosen by the rank's own generator: refused locally, whatever it is.
void invalid_call(World& w, std::mt19937_64& rng) {
  std::vector<float> buf(64, 1.0f);
  float* data = buf.data();
  const zrt_stream_t stream = w.streams[rng() % 3];
  const auto bad_dtype = static_cast<zrt_dtype_t>(ZRT_DTYPE_COUNT + rng() % 1000);
  const auto bad_op = static_cast<zrt_op_t>(ZRT_OP_COUNT + 1000 + rng() % 1000);
  const int bad_root =
      (rng() % 2 == 0) ? -1 - static_cast<int>(rng() % 5) : w.size + static_cast<int>(rng() % 5);
  const size_t huge = std::numeric_limits<size_t>::max() / (2 + rng() % 4);
  switch (rng() % 26) {
    case 0:
      EXPECT_REFUSED(zrt_all_reduce(w.comm, data, data, 16, bad_dtype, ZRT_SUM, stream));
      break;
    case 1:
      EXPECT_REFUSED(zrt_all_reduce(w.comm, data, data, 16, ZRT_F32, bad_op, stream));
      break;
    case 2:
      EXPECT_REFUSED(zrt_broadcast(w.comm, data, data, 16, ZRT_F32, bad_root, stream));
      break;
    case 3:
      EXPECT_REFUSED(zrt_reduce(w.comm, data, data, 16, ZRT_F32, ZRT_SUM, bad_root, stream));
      break;
    case 4:
      EXPECT_REFUSED(zrt_all_reduce(w.comm, nullptr, data, 16, ZRT_F32, ZRT_SUM, stream));
      break;
    case 5:
      EXPECT_REFUSED(zrt_all_gather(w.comm, data, nullptr, 8, ZRT_F32, stream));
      break;
    case 6:  // a stream of another communicator
      EXPECT_REFUSED(zrt_all_reduce(w.comm, data, data, 16, ZRT_F32, ZRT_SUM, w.foreign_stream));
      break;
    case 7:
      EXPECT_REFUSED(zrt_stream_wait_event(stream, w.foreign_event));
      break;
    case 8:
      EXPECT_REFUSED(zrt_event_record(w.foreign_event, stream));
      break;
    case 9:
      EXPECT_REFUSED(
          zrt_stream_create(w.comm, static_cast<zrt_mem_kind_t>(2 + rng() % 100), nullptr));
      break;
    case 10: {
      zrt_stream_t made = nullptr;
      EXPECT_REFUSED(
          zrt_stream_create(w.comm, static_cast<zrt_mem_kind_t>(2 + rng() % 100), &made));
      EXPECT_EQ(made, nullptr) << "output written on failure";
      break;
    }
    case 11:
      EXPECT_REFUSED(zrt_op_destroy(w.comm, static_cast<zrt_op_t>(rng() % ZRT_OP_COUNT)));
      break;
    case 12:
      EXPECT_REFUSED(zrt_op_destroy(w.comm, w.foreign_premul));
      break;
    case 13:  // a premul op is for floating types, and for its own communicator
      if (rng() % 2 == 0) {
        EXPECT_REFUSED(zrt_all_reduce(w.comm, data, data, 16, ZRT_I32, w.premul, stream));
      } else {
        EXPECT_REFUSED(zrt_all_reduce(w.comm, data, data, 16, ZRT_F32, w.foreign_premul, stream));
      }
      break;
    case 14: {
      zrt_comm_stats_t stats{};
      stats.size = rng() % sizeof(zrt_coll_counters_t);
      EXPECT_REFUSED(zrt_comm_stats(w.comm, &stats));
      break;
    }
    case 15: {
      zrt_comm_t split = nullptr;
      EXPECT_REFUSED(
          zrt_comm_split(w.comm, -2 - static_cast<int>(rng() % 100), 0, nullptr, &split));
      break;
    }
    case 16:  // overlapping buffers that are not the in-place layout on any rank
      EXPECT_REFUSED(zrt_reduce_scatter(w.comm, data, data + 1, 8, ZRT_F32, ZRT_SUM, stream));
      break;
    case 17:
      EXPECT_REFUSED(zrt_send(w.comm, data, 4, ZRT_F32, bad_root, stream));
      break;
    case 18:
      EXPECT_REFUSED(zrt_recv(w.comm, data, 4, bad_dtype, 1 - w.rank, stream));
      break;
    case 19:  // element counts whose byte size overflows size_t
      if (rng() % 2 == 0) {
        EXPECT_REFUSED(zrt_all_gather(w.comm, data, data + 64, huge, ZRT_F64, stream));
      } else {
        EXPECT_REFUSED(zrt_reduce_scatter(w.comm, data, data + 64, huge, ZRT_F32, ZRT_SUM, stream));
      }
      break;
    case 20: {
      zrt_partition_config_t config = ZRT_PARTITION_CONFIG_INIT;
      config.magic = static_cast<uint32_t>(rng());
      zrt_partition_t pm = nullptr;
      EXPECT_REFUSED(zrt_partition_create(w.comm, &config, &pm));
      break;
    }
    case 21:  // wrong order: not finalized
      EXPECT_REFUSED(zrt_partition_fetch(w.pm, w.unit));
      break;
    case 22: {
      int param = -1;
      const int which = static_cast<int>(rng() % 3);
      if (which == 0) EXPECT_REFUSED(zrt_partition_add_param(w.pm, w.unit, "p", 0, 0, &param));
      if (which == 1) EXPECT_REFUSED(zrt_partition_add_param(w.pm, 99, "p", 4, 0, &param));
      if (which == 2) EXPECT_REFUSED(zrt_partition_add_param(w.pm, w.unit, "p", 4, 0x80, &param));
      break;
    }
    case 23: {
      zrt_partition_config_t config = ZRT_PARTITION_CONFIG_INIT;
      config.stage = 4 + static_cast<int>(rng() % 10);
      zrt_partition_t pm = nullptr;
      EXPECT_REFUSED(zrt_partition_create(w.comm, &config, &pm));
      break;
    }
    case 24: {
      zrt_comm_config_t config = ZRT_COMM_CONFIG_INIT;
      config.size = rng() % sizeof(size_t);  // too small to hold even its own header
      zrt_comm_t comm = nullptr;
      EXPECT_REFUSED(zrt_comm_init_env(&config, &comm));
      break;
    }
    case 25: {
      zrt_oob_t oob = ZRT_OOB_INIT;
      oob.rank = w.size;
      oob.size = w.size;
      zrt_comm_t comm = nullptr;
      EXPECT_REFUSED(zrt_comm_init_oob(&oob, nullptr, &comm));
      break;
    }
  }
  // Nothing above reached a peer or started work: the communicator is as healthy as before.
  EXPECT_EQ(zrt_comm_get_error(w.comm), ZRT_SUCCESS) << zrt_last_error();
}

// One valid collective, chosen by the shared generator (identical on both ranks), checked.
void valid_call(World& w, std::mt19937_64& shared) {
  const int kind = static_cast<int>(shared() % 7);
  const size_t count = shared() % 3000;
  const zrt_stream_t stream = w.streams[shared() % 3];
  const int root = static_cast<int>(shared() % w.size);
  const float r = static_cast<float>(w.rank + 1);
  const size_t n = static_cast<size_t>(w.size);
  std::vector<float> send(count * n, r);
  std::vector<float> recv(count * n, -1.0f);
  std::vector<float> expect;
  switch (kind) {
    case 0:
      ASSERT_OK(zrt_all_reduce(w.comm, send.data(), recv.data(), count, ZRT_F32, ZRT_SUM, stream));
      expect.assign(count, static_cast<float>(n * (n + 1) / 2));
      break;
    case 1:
      ASSERT_OK(
          zrt_reduce_scatter(w.comm, send.data(), recv.data(), count, ZRT_F32, ZRT_MAX, stream));
      expect.assign(count, static_cast<float>(n));
      break;
    case 2:
      ASSERT_OK(zrt_all_gather(w.comm, send.data(), recv.data(), count, ZRT_F32, stream));
      for (size_t k = 0; k < n; ++k) expect.insert(expect.end(), count, static_cast<float>(k + 1));
      break;
    case 3:
      ASSERT_OK(zrt_broadcast(w.comm, send.data(), recv.data(), count, ZRT_F32, root, stream));
      expect.assign(count, static_cast<float>(root + 1));
      break;
    case 4:
      ASSERT_OK(zrt_all_reduce(w.comm, send.data(), recv.data(), count, ZRT_F32, w.premul, stream));
      expect.assign(count, 0.5f * static_cast<float>(n * (n + 1) / 2));
      break;
    case 5:
      ASSERT_OK(zrt_barrier(w.comm, stream));
      break;
    case 6:  // rank 0 sends to rank 1
      if (w.rank == 0) {
        ASSERT_OK(zrt_send(w.comm, send.data(), count, ZRT_F32, 1, stream));
      } else {
        ASSERT_OK(zrt_recv(w.comm, recv.data(), count, ZRT_F32, 0, stream));
        expect.assign(count, 1.0f);
      }
      break;
  }
  ASSERT_OK(zrt_stream_synchronize(stream));
  for (size_t i = 0; i < expect.size(); ++i) {
    ASSERT_EQ(recv[i], expect[i]) << "collective kind " << kind << " count " << count << " element "
                                  << i;
  }
}

void misuse_body(uint64_t seed, int steps, int rank, int size) {
  World w;
  w.rank = rank;
  w.size = size;
  FileOob oob(run_dir(), "main", rank, size);
  ASSERT_OK(zrt_comm_init_oob(&oob.oob(), nullptr, &w.comm));
  FileOob oob2(run_dir(), "other", rank, size);
  ASSERT_OK(zrt_comm_init_oob(&oob2.oob(), nullptr, &w.other));
  for (auto& stream : w.streams) ASSERT_OK(zrt_stream_create(w.comm, ZRT_MEM_HOST, &stream));
  ASSERT_OK(zrt_stream_create(w.other, ZRT_MEM_HOST, &w.foreign_stream));
  ASSERT_OK(zrt_event_create(w.comm, &w.event));
  ASSERT_OK(zrt_event_create(w.other, &w.foreign_event));
  ASSERT_OK(zrt_op_create_premul_sum(w.comm, 0.5, &w.premul));
  // Ops are numbered per communicator, so the other's first op has the same value as ours: its
  // second one is the op that exists only there.
  zrt_op_t first_foreign = ZRT_SUM;
  ASSERT_OK(zrt_op_create_premul_sum(w.other, 0.25, &first_foreign));
  ASSERT_OK(zrt_op_create_premul_sum(w.other, 0.125, &w.foreign_premul));
  ASSERT_NE(w.foreign_premul, w.premul);
  ASSERT_OK(zrt_partition_create(w.comm, nullptr, &w.pm));
  ASSERT_OK(zrt_partition_add_unit(w.pm, "layer", &w.unit));

  std::mt19937_64 shared(seed);
  std::mt19937_64 local(seed ^ (0x9e3779b97f4a7c15ull * static_cast<uint64_t>(rank + 1)));
  for (int i = 0; i < steps; ++i) {
    // Each rank makes a different number of invalid calls between two valid collectives.
    const int invalid = static_cast<int>(local() % 4);
    for (int k = 0; k < invalid; ++k) invalid_call(w, local);
    if (::testing::Test::HasFailure()) return;
    valid_call(w, shared);
    if (::testing::Test::HasFailure()) return;
  }

  // Still usable: one more checked collective on a fresh stream, and a clean destroy.
  zrt_stream_t fresh = nullptr;
  ASSERT_OK(zrt_stream_create(w.comm, ZRT_MEM_HOST, &fresh));
  std::vector<double> values(1000, 1.0);
  ASSERT_OK(
      zrt_all_reduce(w.comm, values.data(), values.data(), values.size(), ZRT_F64, ZRT_SUM, fresh));
  ASSERT_OK(zrt_stream_synchronize(fresh));
  EXPECT_EQ(values[999], static_cast<double>(size));
  EXPECT_OK(zrt_partition_destroy(w.pm));
  EXPECT_OK(zrt_comm_destroy(w.other));
  EXPECT_OK(zrt_comm_destroy(w.comm));
}

TEST(ApiMisuse, RandomCallsOnTwoRanks) {
  const uint64_t seed = env_or("ZRT_MISUSE_SEED", std::random_device{}());
  const int steps = static_cast<int>(env_or("ZRT_MISUSE_STEPS", 600));
  std::fprintf(stderr, "API misuse: seed %llu, %d steps (replay: ZRT_MISUSE_SEED=%llu)\n",
               static_cast<unsigned long long>(seed), steps, static_cast<unsigned long long>(seed));
  ::testing::Test::RecordProperty("seed", std::to_string(seed));
  RankOptions options;
  options.env["ZRT_TIMEOUT"] = "20";
  options.deadline_ms = 100000;
  expect_ranks_pass(
      2, [seed, steps](int rank, int size) { misuse_body(seed, steps, rank, size); }, options);
}

// Calls that need no communicator: NULL outputs and handles, unknown enums, bad configs.
TEST(ApiMisuse, NoCommunicatorCalls) {
  std::mt19937_64 rng(env_or("ZRT_MISUSE_SEED", 1));
  for (int i = 0; i < 2000; ++i) {
    const auto dtype = static_cast<zrt_dtype_t>(static_cast<int>(rng() % 40) - 20);
    size_t bytes = 0;
    const zrt_status_t status = zrt_dtype_size(dtype, &bytes);
    if (dtype >= 0 && dtype < ZRT_DTYPE_COUNT) {
      EXPECT_OK(status);
      EXPECT_GT(bytes, 0u);
    } else {
      EXPECT_REFUSED(status);
    }
    EXPECT_NE(zrt_status_string(static_cast<zrt_status_t>(static_cast<int>(rng() % 40) - 20)),
              nullptr);
  }
  EXPECT_REFUSED(zrt_dtype_size(ZRT_F32, nullptr));
  EXPECT_REFUSED(zrt_get_version(nullptr));
  EXPECT_REFUSED(zrt_comm_rank(nullptr, nullptr));
  EXPECT_REFUSED(zrt_comm_abort(nullptr));
  EXPECT_REFUSED(zrt_stream_synchronize(nullptr));
  EXPECT_REFUSED(zrt_event_synchronize(nullptr));
  EXPECT_REFUSED(zrt_all_reduce(nullptr, nullptr, nullptr, 0, ZRT_F32, ZRT_SUM, nullptr));
  EXPECT_REFUSED(zrt_comm_init_env(nullptr, nullptr));
  EXPECT_REFUSED(zrt_comm_init_oob(nullptr, nullptr, nullptr));
  EXPECT_REFUSED(zrt_partition_config_load(nullptr, nullptr));
  zrt_partition_config_t config = ZRT_PARTITION_CONFIG_INIT;
  EXPECT_REFUSED(zrt_partition_config_load("/nonexistent/zrt-config.json", &config));
  EXPECT_EQ(zrt_comm_destroy(nullptr), ZRT_SUCCESS);
  EXPECT_EQ(zrt_partition_destroy(nullptr), ZRT_SUCCESS);
}

}  // namespace
}  // namespace zrt::testing
