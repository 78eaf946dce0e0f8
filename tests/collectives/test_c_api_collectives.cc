// The stream, event and collective entry points of the C API on real ranks: a round trip with
// streams, events, a premul op and the counters; every entry point's argument checks (NULL
// handles, objects of another communicator, bad dtype/op/root/peer, NULL buffers, overlap);
// zrt_comm_abort from another thread releasing a blocked synchronize.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "tests/harness/file_bootstrap.h"
#include "tests/harness/multirank.h"
#include "tests/harness/status_assert.h"
#include "zrt/zrt.h"

namespace zrt::testing {
namespace {

std::string dir() {
  const char* value = std::getenv("ZRT_TEST_RUN_DIR");
  return value != nullptr ? value : "/tmp";
}

// Expects ZRT_INVALID_ARGUMENT and a last-error message that contains `needle`.
#define EXPECT_INVALID(call, needle)                                           \
  do {                                                                         \
    zrt_status_t expect_invalid_status_ = (call);                              \
    EXPECT_EQ(expect_invalid_status_, ZRT_INVALID_ARGUMENT) << #call;          \
    EXPECT_NE(std::string(zrt_last_error()).find(needle), std::string::npos)   \
        << #call << ": '" << zrt_last_error() << "' lacks '" << needle << "'"; \
  } while (0)

zrt_comm_t make_comm(FileOob& oob, int64_t timeout_ms = 30000) {
  zrt_comm_config_t config = ZRT_COMM_CONFIG_INIT;
  config.timeout_ms = timeout_ms;
  zrt_comm_t comm = nullptr;
  zrt_status_t status = zrt_comm_init_oob(&oob.oob(), &config, &comm);
  EXPECT_EQ(status, ZRT_SUCCESS) << zrt_last_error();
  return comm;
}

TEST(CApiCollectives, StreamsEventsPremulAndCounters) {
  expect_ranks_pass(2, [](int rank, int size) {
    FileOob oob(dir(), "roundtrip", rank, size);
    zrt_comm_t comm = make_comm(oob);
    ASSERT_NE(comm, nullptr);
    zrt_stream_t a = nullptr, b = nullptr;
    ASSERT_EQ(zrt_stream_create(comm, ZRT_MEM_HOST, &a), ZRT_SUCCESS) << zrt_last_error();
    ASSERT_EQ(zrt_stream_create(comm, ZRT_MEM_HOST, &b), ZRT_SUCCESS) << zrt_last_error();
    zrt_event_t event = nullptr;
    ASSERT_EQ(zrt_event_create(comm, &event), ZRT_SUCCESS);
    EXPECT_OK(zrt_event_query(event));  // never recorded

    const size_t count = 100003;
    std::vector<float> in(count), reduced(count), gathered(count * size);
    for (size_t i = 0; i < count; ++i) in[i] = static_cast<float>(i % 100) + rank;
    zrt_op_t half = ZRT_SUM;
    ASSERT_EQ(zrt_op_create_premul_sum(comm, 0.5, &half), ZRT_SUCCESS) << zrt_last_error();
    EXPECT_OK(zrt_comm_stats_reset(comm));
    EXPECT_OK(zrt_all_reduce(comm, in.data(), reduced.data(), count, ZRT_F32, half, a));
    EXPECT_OK(zrt_event_record(event, a));
    EXPECT_OK(zrt_stream_wait_event(b, event));
    EXPECT_OK(zrt_all_gather(comm, reduced.data(), gathered.data(), count, ZRT_F32, b));
    EXPECT_OK(zrt_stream_synchronize(b));
    EXPECT_OK(zrt_event_synchronize(event));
    EXPECT_OK(zrt_stream_query(a));
    for (size_t i = 0; i < count; ++i) {
      const float expected = 0.5f * (2 * static_cast<float>(i % 100) + 1);
      ASSERT_EQ(reduced[i], expected) << i;
      ASSERT_EQ(gathered[i], expected) << i;
      ASSERT_EQ(gathered[count + i], expected) << i;
    }
    // Default stream (NULL), broadcast, reduce, barrier, send/recv.
    std::vector<int32_t> values(1000, rank == 1 ? 7 : 0), sum(1000, 0);
    EXPECT_OK(
        zrt_broadcast(comm, values.data(), values.data(), values.size(), ZRT_I32, 1, nullptr));
    EXPECT_OK(
        zrt_reduce(comm, values.data(), sum.data(), values.size(), ZRT_I32, ZRT_SUM, 0, nullptr));
    EXPECT_OK(zrt_barrier(comm, nullptr));
    const int peer = 1 - rank;
    std::vector<int32_t> got(1000, -1);
    if (rank == 0) {
      EXPECT_OK(zrt_send(comm, values.data(), 1000, ZRT_I32, peer, nullptr));
      EXPECT_OK(zrt_recv(comm, got.data(), 1000, ZRT_I32, peer, nullptr));
    } else {
      EXPECT_OK(zrt_recv(comm, got.data(), 1000, ZRT_I32, peer, nullptr));
      EXPECT_OK(zrt_send(comm, values.data(), 1000, ZRT_I32, peer, nullptr));
    }
    EXPECT_OK(zrt_barrier(comm, nullptr));
    EXPECT_OK(zrt_stream_synchronize(a));
    // Wait for the default stream through an event recorded on it.
    EXPECT_OK(zrt_event_record(event, nullptr));
    EXPECT_OK(zrt_event_synchronize(event));
    for (int v : values) ASSERT_EQ(v, 7);
    if (rank == 0) {
      for (int v : sum) ASSERT_EQ(v, 14);
    }
    for (int v : got) ASSERT_EQ(v, 7);

    zrt_comm_stats_t stats{};
    stats.size = sizeof(stats);
    ASSERT_EQ(zrt_comm_stats(comm, &stats), ZRT_SUCCESS) << zrt_last_error();
    const uint64_t s = count * sizeof(float) * size;
    EXPECT_EQ(stats.per_kind[ZRT_COLL_ALL_GATHER].user.bytes_sent, s / 2);
    EXPECT_EQ(stats.per_kind[ZRT_COLL_ALL_REDUCE].user.calls, 1u);
    EXPECT_OK(zrt_comm_stats_reset(comm));
    ASSERT_EQ(zrt_comm_stats(comm, &stats), ZRT_SUCCESS);
    EXPECT_EQ(stats.user.calls, 0u);

    EXPECT_OK(zrt_event_destroy(event));
    EXPECT_OK(zrt_stream_destroy(b));
    EXPECT_OK(zrt_stream_destroy(a));
    EXPECT_OK(zrt_op_destroy(comm, half));
    EXPECT_OK(zrt_comm_destroy(comm));
  });
}

TEST(CApiCollectives, BadInputForEveryEntryPoint) {
  expect_ranks_pass(2, [](int rank, int size) {
    FileOob oob(dir(), "bad", rank, size);
    zrt_comm_t comm = make_comm(oob);
    ASSERT_NE(comm, nullptr);
    FileOob other_oob(dir(), "bad-other", rank, size);
    zrt_comm_t other = make_comm(other_oob);
    ASSERT_NE(other, nullptr);
    zrt_stream_t stream = nullptr, foreign_stream = nullptr;
    ASSERT_EQ(zrt_stream_create(comm, ZRT_MEM_HOST, &stream), ZRT_SUCCESS);
    ASSERT_EQ(zrt_stream_create(other, ZRT_MEM_HOST, &foreign_stream), ZRT_SUCCESS);
    zrt_event_t event = nullptr, foreign_event = nullptr;
    ASSERT_EQ(zrt_event_create(comm, &event), ZRT_SUCCESS);
    ASSERT_EQ(zrt_event_create(other, &foreign_event), ZRT_SUCCESS);
    zrt_op_t foreign_op = ZRT_SUM;
    ASSERT_EQ(zrt_op_create_premul_sum(other, 2.0, &foreign_op), ZRT_SUCCESS);
    std::vector<float> buf(64);
    float* p = buf.data();

    // Streams and events.
    EXPECT_INVALID(zrt_stream_create(nullptr, ZRT_MEM_HOST, &stream), "comm");
    EXPECT_INVALID(zrt_stream_create(comm, ZRT_MEM_HOST, nullptr), "stream");
    EXPECT_INVALID(zrt_stream_create(comm, static_cast<zrt_mem_kind_t>(9), &stream), "kind");
    EXPECT_INVALID(zrt_stream_destroy(nullptr), "stream");
    EXPECT_INVALID(zrt_stream_synchronize(nullptr), "stream");
    EXPECT_INVALID(zrt_stream_query(nullptr), "stream");
    EXPECT_INVALID(zrt_stream_wait_event(nullptr, event), "stream");
    EXPECT_INVALID(zrt_stream_wait_event(stream, nullptr), "event");
    EXPECT_INVALID(zrt_stream_wait_event(stream, foreign_event), "another communicator");
    EXPECT_INVALID(zrt_event_create(nullptr, &event), "comm");
    EXPECT_INVALID(zrt_event_create(comm, nullptr), "event");
    EXPECT_INVALID(zrt_event_destroy(nullptr), "event");
    EXPECT_INVALID(zrt_event_record(nullptr, stream), "event");
    EXPECT_INVALID(zrt_event_record(event, foreign_stream), "another communicator");
    EXPECT_INVALID(zrt_event_query(nullptr), "event");
    EXPECT_INVALID(zrt_event_synchronize(nullptr), "event");
    EXPECT_EQ(std::string(zrt_last_error()).rfind("zrt_event_synchronize", 0), 0u)
        << zrt_last_error();

    // Collectives.
    EXPECT_INVALID(zrt_all_reduce(nullptr, p, p, 4, ZRT_F32, ZRT_SUM, nullptr), "comm");
    EXPECT_INVALID(zrt_all_reduce(comm, nullptr, p, 4, ZRT_F32, ZRT_SUM, nullptr), "sendbuf");
    EXPECT_INVALID(zrt_all_reduce(comm, p, nullptr, 4, ZRT_F32, ZRT_SUM, nullptr), "recvbuf");
    EXPECT_INVALID(zrt_all_reduce(comm, p, p + 1, 4, ZRT_F32, ZRT_SUM, nullptr), "overlap");
    EXPECT_INVALID(zrt_all_reduce(comm, p, p, 4, static_cast<zrt_dtype_t>(77), ZRT_SUM, nullptr),
                   "dtype");
    EXPECT_INVALID(zrt_all_reduce(comm, p, p, 4, ZRT_F32, static_cast<zrt_op_t>(-2), nullptr),
                   "op");
    EXPECT_INVALID(zrt_all_reduce(comm, p, p, 4, ZRT_F32, foreign_op, nullptr), "op");
    EXPECT_INVALID(zrt_all_reduce(comm, p, p, 4, ZRT_I32, ZRT_AVG, nullptr), "avg");
    EXPECT_INVALID(zrt_all_reduce(comm, p, p, 4, ZRT_F32, ZRT_SUM, foreign_stream),
                   "another communicator");
    EXPECT_INVALID(zrt_reduce_scatter(comm, nullptr, p, 4, ZRT_F32, ZRT_SUM, stream), "sendbuf");
    EXPECT_INVALID(zrt_reduce_scatter(comm, p, p + 2, 4, ZRT_F32, ZRT_SUM, stream), "recvbuf");
    EXPECT_INVALID(zrt_all_gather(comm, p, nullptr, 4, ZRT_F32, stream), "recvbuf");
    EXPECT_INVALID(zrt_all_gather(comm, p + 1, p, 4, ZRT_F32, stream), "overlap");
    EXPECT_INVALID(zrt_broadcast(comm, p, p, 4, ZRT_F32, size, stream), "root");
    EXPECT_INVALID(zrt_broadcast(comm, p, nullptr, 4, ZRT_F32, 0, stream), "recvbuf");
    EXPECT_INVALID(zrt_reduce(comm, p, p, 4, ZRT_F32, ZRT_SUM, -1, stream), "root");
    EXPECT_INVALID(zrt_reduce(comm, nullptr, p, 4, ZRT_F32, ZRT_MAX, 0, stream), "sendbuf");
    EXPECT_INVALID(zrt_barrier(nullptr, stream), "comm");
    EXPECT_INVALID(zrt_barrier(comm, foreign_stream), "another communicator");
    EXPECT_INVALID(zrt_send(comm, p, 4, ZRT_F32, size, stream), "peer");
    EXPECT_INVALID(zrt_send(comm, nullptr, 4, ZRT_F32, 0, stream), "sendbuf");
    EXPECT_INVALID(zrt_recv(comm, p, 4, ZRT_F32, -1, stream), "peer");
    EXPECT_INVALID(zrt_recv(comm, nullptr, 4, ZRT_F32, 0, stream), "recvbuf");
    EXPECT_INVALID(zrt_recv(comm, p, 4, static_cast<zrt_dtype_t>(8), 0, stream), "dtype");
    EXPECT_EQ(std::string(zrt_last_error()).rfind("zrt_recv", 0), 0u) << zrt_last_error();

    // Refused calls left the streams healthy and in step: a collective still works.
    std::vector<float> ones(8, 1.0f), out(8);
    EXPECT_OK(zrt_all_reduce(comm, ones.data(), out.data(), 8, ZRT_F32, ZRT_SUM, stream));
    EXPECT_OK(zrt_stream_synchronize(stream));
    for (float v : out) EXPECT_EQ(v, 2.0f);
    EXPECT_OK(zrt_comm_destroy(other));
    EXPECT_OK(zrt_comm_destroy(comm));
  });
}

TEST(CApiCollectives, AbortFromAnotherThreadReleasesSynchronize) {
  expect_ranks_pass(2, [](int rank, int size) {
    FileOob oob(dir(), "abort", rank, size);
    zrt_comm_t comm = make_comm(oob);
    ASSERT_NE(comm, nullptr);
    if (rank == 1) {
      // Never sends, and stays until rank 0 is done: its leaving would fail rank 0's receive
      // with a peer error before the abort. Out of band: rank 0's communicator is aborted.
      ASSERT_OK(file_barrier(dir(), "abort-done", rank, size));
      zrt_comm_abort(comm);
      (void)zrt_comm_destroy(comm);
      return;
    }
    std::vector<float> buffer(1024);
    ASSERT_EQ(zrt_recv(comm, buffer.data(), buffer.size(), ZRT_F32, 1, nullptr), ZRT_SUCCESS);
    // The stimulus: the abort must land while the event's synchronize blocks, so it comes a
    // while after the call, well inside the 1 s the wait is given and far below the
    // communicator's 30 s timeout, which would end it otherwise.
    std::thread aborter([comm] {
      usleep(200 * 1000);
      zrt_comm_abort(comm);
    });
    const auto start = std::chrono::steady_clock::now();
    zrt_status_t status = zrt_stream_synchronize(nullptr);
    EXPECT_EQ(status, ZRT_INVALID_ARGUMENT);  // a NULL stream handle is refused
    zrt_event_t event = nullptr;
    ASSERT_EQ(zrt_event_create(comm, &event), ZRT_SUCCESS);
    ASSERT_EQ(zrt_event_record(event, nullptr), ZRT_SUCCESS);
    status = zrt_event_synchronize(event);
    const double waited =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    aborter.join();
    EXPECT_EQ(status, ZRT_REMOTE_ERROR) << zrt_last_error();
    EXPECT_NE(std::string(zrt_last_error()).find("abort"), std::string::npos) << zrt_last_error();
    EXPECT_LT(waited, 1.0);
    EXPECT_EQ(zrt_comm_get_error(comm), ZRT_REMOTE_ERROR);
    EXPECT_EQ(zrt_all_reduce(comm, buffer.data(), buffer.data(), 4, ZRT_F32, ZRT_SUM, nullptr),
              ZRT_REMOTE_ERROR);
    (void)zrt_comm_destroy(comm);
    ASSERT_OK(file_barrier(dir(), "abort-done", rank, size));
  });
}

}  // namespace
}  // namespace zrt::testing
