// CUDA streams, events and NCCL collectives through the C API on real ranks (forked processes,
// real UCX for the host side, real NCCL for the device side), checked against host references.
// One rank per GPU: NCCL refuses two ranks on one device. Without a GPU every device test skips
// with the runtime's reason, and one test checks that a CUDA stream is refused clearly.
//
// The parent process never calls CUDA (a CUDA context does not survive fork): it asks a child.
#include <gtest/gtest.h>

#include <cuda_runtime.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "tests/harness/multirank.h"
#include "tests/harness/status_assert.h"
#include "zrt/zrt.h"

namespace zrt::testing {
namespace {

struct Probe {
  int devices = 0;
  std::string reason;
};

// Asks a child process how many CUDA devices it can use, and why none if so.
Probe probe_devices() {
  int fds[2];
  if (pipe(fds) != 0) return Probe{0, "pipe failed"};
  const pid_t pid = fork();
  if (pid == 0) {
    close(fds[0]);
    int count = 0;
    const zrt_status_t status = zrt_cuda_device_count(&count);
    std::string line = status == ZRT_SUCCESS ? std::to_string(count) + "\n"
                                             : "0 " + std::string(zrt_last_error()) + "\n";
    ssize_t written = write(fds[1], line.data(), line.size());
    _exit(written == static_cast<ssize_t>(line.size()) ? 0 : 1);
  }
  close(fds[1]);
  std::string text;
  char buffer[512];
  ssize_t got;
  while ((got = read(fds[0], buffer, sizeof(buffer))) > 0) text.append(buffer, size_t(got));
  close(fds[0]);
  int wait_status = 0;
  waitpid(pid, &wait_status, 0);
  Probe probe;
  probe.devices = std::atoi(text.c_str());
  const size_t space = text.find(' ');
  if (space != std::string::npos) probe.reason = text.substr(space + 1);
  if (probe.devices == 0 && probe.reason.empty()) probe.reason = "probe failed: " + text;
  return probe;
}

const Probe& devices() {
  static const Probe probe = probe_devices();
  return probe;
}

zrt_comm_t make_comm() {
  zrt_comm_t comm = nullptr;
  EXPECT_EQ(zrt_comm_init_env(nullptr, &comm), ZRT_SUCCESS) << zrt_last_error();
  return comm;
}

// Exactly representable values, so sums in any order are exact and comparisons bitwise.
float value(int rank, size_t i) {
  return static_cast<float>((rank + 1) * int(i % 97)) * 0.25f;
}

class DeviceVector {
 public:
  explicit DeviceVector(size_t count) : count_(count) {
    EXPECT_EQ(cudaMalloc(&data_, std::max<size_t>(count, 1) * sizeof(float)), cudaSuccess);
    EXPECT_EQ(cudaMemset(data_, 0, std::max<size_t>(count, 1) * sizeof(float)), cudaSuccess);
  }
  ~DeviceVector() { cudaFree(data_); }
  DeviceVector(const DeviceVector&) = delete;
  DeviceVector& operator=(const DeviceVector&) = delete;
  float* get() const { return data_; }
  void upload(const std::vector<float>& host) {
    ASSERT_EQ(cudaMemcpy(data_, host.data(), host.size() * 4, cudaMemcpyHostToDevice), cudaSuccess);
  }
  std::vector<float> download() const {
    std::vector<float> host(count_);
    EXPECT_EQ(cudaMemcpy(host.data(), data_, count_ * 4, cudaMemcpyDeviceToHost), cudaSuccess);
    return host;
  }

 private:
  float* data_ = nullptr;
  size_t count_ = 0;
};

void collectives_body(int rank, int size) {
  ASSERT_EQ(cudaSetDevice(rank % devices().devices), cudaSuccess);
  zrt_comm_t comm = make_comm();
  ASSERT_NE(comm, nullptr);
  zrt_stream_t reduce_stream = nullptr;
  zrt_stream_t gather_stream = nullptr;
  ASSERT_OK(zrt_stream_create(comm, ZRT_MEM_CUDA, &reduce_stream));
  ASSERT_OK(zrt_stream_create(comm, ZRT_MEM_CUDA, &gather_stream));
  void* raw = nullptr;
  ASSERT_OK(zrt_stream_get_cuda(reduce_stream, &raw));
  EXPECT_NE(raw, nullptr);

  const size_t count = 262147;  // odd: no size-friendly alignment
  std::vector<float> mine(count);
  std::vector<float> sum(count, 0.0f);
  float max_rank_value = 0;
  for (size_t i = 0; i < count; ++i) {
    mine[i] = value(rank, i);
    for (int r = 0; r < size; ++r) sum[i] += value(r, i);
  }
  DeviceVector send(count);
  DeviceVector recv(count);
  send.upload(mine);
  (void)max_rank_value;

  // all_reduce: sum, avg, premul(0.5), max.
  ASSERT_OK(zrt_all_reduce(comm, send.get(), recv.get(), count, ZRT_F32, ZRT_SUM, reduce_stream));
  ASSERT_OK(zrt_stream_synchronize(reduce_stream));
  EXPECT_EQ(recv.download(), sum);
  ASSERT_OK(zrt_all_reduce(comm, send.get(), recv.get(), count, ZRT_F32, ZRT_AVG, reduce_stream));
  ASSERT_OK(zrt_stream_synchronize(reduce_stream));
  std::vector<float> got = recv.download();
  for (size_t i = 0; i < count; ++i) {
    ASSERT_NEAR(got[i], sum[i] / float(size), 1e-6f * (1 + sum[i])) << "avg at " << i;
  }
  zrt_op_t half = ZRT_SUM;
  ASSERT_OK(zrt_op_create_premul_sum(comm, 0.5, &half));
  ASSERT_OK(zrt_all_reduce(comm, send.get(), recv.get(), count, ZRT_F32, half, reduce_stream));
  ASSERT_OK(zrt_stream_synchronize(reduce_stream));
  got = recv.download();
  for (size_t i = 0; i < count; ++i) ASSERT_EQ(got[i], sum[i] * 0.5f) << "premul at " << i;
  ASSERT_OK(zrt_op_destroy(comm, half));
  ASSERT_OK(zrt_all_reduce(comm, send.get(), recv.get(), count, ZRT_F32, ZRT_MAX, reduce_stream));
  ASSERT_OK(zrt_stream_synchronize(reduce_stream));
  got = recv.download();
  for (size_t i = 0; i < count; ++i) ASSERT_EQ(got[i], value(size - 1, i)) << "max at " << i;

  // reduce_scatter then all_gather on another stream, ordered by an event only.
  const size_t slice = count / size;
  DeviceVector shard(slice);
  DeviceVector gathered(slice * size);
  zrt_event_t reduced = nullptr;
  ASSERT_OK(zrt_event_create_cuda(comm, &reduced));
  ASSERT_OK(
      zrt_reduce_scatter(comm, send.get(), shard.get(), slice, ZRT_F32, ZRT_SUM, reduce_stream));
  ASSERT_OK(zrt_event_record(reduced, reduce_stream));
  ASSERT_OK(zrt_stream_wait_event(gather_stream, reduced));
  ASSERT_OK(zrt_all_gather(comm, shard.get(), gathered.get(), slice, ZRT_F32, gather_stream));
  ASSERT_OK(zrt_stream_synchronize(gather_stream));
  EXPECT_OK(zrt_event_query(reduced));
  got = gathered.download();
  for (size_t i = 0; i < slice * size; ++i) ASSERT_EQ(got[i], sum[i]) << "rs+ag at " << i;

  // broadcast from the last rank, reduce to rank 0, a ring of send/recv, a barrier.
  const int root = size - 1;
  ASSERT_OK(zrt_broadcast(comm, send.get(), recv.get(), count, ZRT_F32, root, reduce_stream));
  ASSERT_OK(zrt_stream_synchronize(reduce_stream));
  got = recv.download();
  for (size_t i = 0; i < count; ++i) ASSERT_EQ(got[i], value(root, i)) << "broadcast at " << i;
  ASSERT_OK(zrt_reduce(comm, send.get(), recv.get(), count, ZRT_F32, ZRT_SUM, 0, reduce_stream));
  ASSERT_OK(zrt_stream_synchronize(reduce_stream));
  if (rank == 0) {
    EXPECT_EQ(recv.download(), sum);
  }
  const int next = (rank + 1) % size;
  const int prev = (rank + size - 1) % size;
  if (rank % 2 == 0) {
    ASSERT_OK(zrt_send(comm, send.get(), count, ZRT_F32, next, reduce_stream));
    ASSERT_OK(zrt_recv(comm, recv.get(), count, ZRT_F32, prev, reduce_stream));
  } else {
    ASSERT_OK(zrt_recv(comm, recv.get(), count, ZRT_F32, prev, reduce_stream));
    ASSERT_OK(zrt_send(comm, send.get(), count, ZRT_F32, next, reduce_stream));
  }
  ASSERT_OK(zrt_barrier(comm, reduce_stream));
  ASSERT_OK(zrt_stream_synchronize(reduce_stream));
  got = recv.download();
  for (size_t i = 0; i < count; ++i) ASSERT_EQ(got[i], value(prev, i)) << "ring at " << i;

  // The framework's own stream, wrapped.
  cudaStream_t framework = nullptr;
  ASSERT_EQ(cudaStreamCreate(&framework), cudaSuccess);
  zrt_stream_t wrapped = nullptr;
  ASSERT_OK(zrt_stream_from_cuda(comm, framework, &wrapped));
  ASSERT_OK(zrt_all_reduce(comm, send.get(), recv.get(), count, ZRT_F32, ZRT_SUM, wrapped));
  ASSERT_EQ(cudaStreamSynchronize(framework), cudaSuccess);
  EXPECT_EQ(recv.download(), sum);

  // Host buffers on a CUDA stream are refused with a message that says so.
  std::vector<float> host(count);
  EXPECT_EQ(zrt_all_reduce(comm, host.data(), host.data(), count, ZRT_F32, ZRT_SUM, wrapped),
            ZRT_INVALID_ARGUMENT);
  EXPECT_NE(std::string(zrt_last_error()).find("not CUDA device memory"), std::string::npos)
      << zrt_last_error();

  ASSERT_OK(zrt_stream_synchronize(wrapped));
  zrt_comm_stats_t stats;
  stats.size = sizeof(stats);
  ASSERT_OK(zrt_comm_stats(comm, &stats));
  EXPECT_GE(stats.per_kind[ZRT_COLL_ALL_REDUCE].user.calls, 5u);

  EXPECT_OK(zrt_stream_destroy(wrapped));
  ASSERT_EQ(cudaStreamDestroy(framework), cudaSuccess);
  EXPECT_OK(zrt_event_destroy(reduced));
  EXPECT_OK(zrt_stream_destroy(gather_stream));
  EXPECT_OK(zrt_stream_destroy(reduce_stream));
  EXPECT_OK(zrt_comm_destroy(comm));
}

TEST(CudaMultirank, CudaStreamWithoutDeviceIsAClearError) {
  if (devices().devices > 0) GTEST_SKIP() << devices().devices << " CUDA device(s) usable here";
  expect_ranks_pass(1, [](int, int) {
    zrt_comm_t comm = make_comm();
    ASSERT_NE(comm, nullptr);
    zrt_stream_t stream = nullptr;
    EXPECT_EQ(zrt_stream_create(comm, ZRT_MEM_CUDA, &stream), ZRT_UNSUPPORTED);
    const std::string why = zrt_last_error();
    EXPECT_TRUE(why.find("no usable CUDA device") != std::string::npos ||
                why.find("built without NCCL") != std::string::npos)
        << why;
    EXPECT_EQ(stream, nullptr);
    EXPECT_EQ(zrt_stream_from_cuda(comm, nullptr, &stream), ZRT_UNSUPPORTED) << zrt_last_error();
    zrt_event_t event = nullptr;
    EXPECT_EQ(zrt_event_create_cuda(comm, &event), ZRT_UNSUPPORTED) << zrt_last_error();
    // A host stream is not a CUDA stream.
    zrt_stream_t host = nullptr;
    ASSERT_EQ(zrt_stream_create(comm, ZRT_MEM_HOST, &host), ZRT_SUCCESS) << zrt_last_error();
    void* raw = nullptr;
    EXPECT_EQ(zrt_stream_get_cuda(host, &raw), ZRT_INVALID_ARGUMENT);
    EXPECT_NE(std::string(zrt_last_error()).find("not a CUDA stream"), std::string::npos)
        << zrt_last_error();
    // The communicator is still healthy for host work after the refusal.
    EXPECT_EQ(zrt_comm_get_error(comm), ZRT_SUCCESS);
    EXPECT_EQ(zrt_stream_destroy(host), ZRT_SUCCESS);
    EXPECT_EQ(zrt_comm_destroy(comm), ZRT_SUCCESS) << zrt_last_error();
  });
}

// Two real ranks without a device: the NCCL set-up exchange still runs on the host path, so both
// ranks get the same clear refusal and stay in step for host work afterwards.
TEST(CudaMultirank, TwoRanksWithoutDeviceStayInStep) {
  if (devices().devices > 0) GTEST_SKIP() << devices().devices << " CUDA device(s) usable here";
  expect_ranks_pass(2, [](int rank, int size) {
    zrt_comm_t comm = make_comm();
    ASSERT_NE(comm, nullptr);
    zrt_stream_t stream = nullptr;
    EXPECT_EQ(zrt_stream_create(comm, ZRT_MEM_CUDA, &stream), ZRT_UNSUPPORTED);
    EXPECT_NE(std::string(zrt_last_error()).find("no usable CUDA device"), std::string::npos)
        << zrt_last_error();
    // A second attempt repeats the exchange (nothing was cached) and fails the same way.
    EXPECT_EQ(zrt_stream_create(comm, ZRT_MEM_CUDA, &stream), ZRT_UNSUPPORTED);
    zrt_stream_t host = nullptr;
    ASSERT_EQ(zrt_stream_create(comm, ZRT_MEM_HOST, &host), ZRT_SUCCESS) << zrt_last_error();
    std::vector<float> values(1000, static_cast<float>(rank + 1));
    ASSERT_EQ(
        zrt_all_reduce(comm, values.data(), values.data(), values.size(), ZRT_F32, ZRT_SUM, host),
        ZRT_SUCCESS)
        << zrt_last_error();
    ASSERT_EQ(zrt_stream_synchronize(host), ZRT_SUCCESS) << zrt_last_error();
    const float expected = static_cast<float>(size * (size + 1) / 2);
    for (float v : values) ASSERT_EQ(v, expected);
    EXPECT_EQ(zrt_comm_get_error(comm), ZRT_SUCCESS);
    EXPECT_EQ(zrt_stream_destroy(host), ZRT_SUCCESS);
    EXPECT_EQ(zrt_comm_destroy(comm), ZRT_SUCCESS) << zrt_last_error();
  });
}

// A rank that cannot use CUDA is named on the others (needs one GPU: rank 1 hides it).
TEST(CudaMultirank, RankWithoutDeviceIsNamed) {
  if (devices().devices < 1) GTEST_SKIP() << devices().reason;
  expect_ranks_pass(2, [](int rank, int) {
    if (rank == 1) setenv("CUDA_VISIBLE_DEVICES", "", 1);  // before this process touches CUDA
    if (rank == 0) {
      ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
    }
    zrt_comm_t comm = make_comm();
    ASSERT_NE(comm, nullptr);
    zrt_stream_t stream = nullptr;
    const zrt_status_t status = zrt_stream_create(comm, ZRT_MEM_CUDA, &stream);
    const std::string why = zrt_last_error();
    if (rank == 0) {
      EXPECT_EQ(status, ZRT_REMOTE_ERROR) << why;
      EXPECT_NE(why.find("rank 1 cannot use CUDA"), std::string::npos) << why;
    } else {
      EXPECT_EQ(status, ZRT_UNSUPPORTED) << why;
    }
    EXPECT_EQ(zrt_comm_destroy(comm), ZRT_SUCCESS) << zrt_last_error();
  });
}

TEST(CudaMultirank, NoDeviceReasonIsNoDevice) {
  if (devices().devices > 0) GTEST_SKIP() << devices().devices << " CUDA device(s) usable here";
  const std::string& why = devices().reason;
  EXPECT_TRUE(why.find("cudaErrorInsufficientDriver") != std::string::npos ||
              why.find("cudaErrorNoDevice") != std::string::npos ||
              why.find("none present") != std::string::npos ||
              why.find("built without NCCL") != std::string::npos)
      << why;
}

TEST(CudaMultirank, CollectivesOneRank) {
  if (devices().devices < 1) GTEST_SKIP() << devices().reason;
  expect_ranks_pass(1, collectives_body);
}

TEST(CudaMultirank, CollectivesTwoRanks) {
  if (devices().devices < 2) {
    GTEST_SKIP() << "needs 2 CUDA devices (one rank per GPU), have " << devices().devices << ": "
                 << devices().reason;
  }
  expect_ranks_pass(2, collectives_body);
}

TEST(CudaMultirank, CollectivesAllDevices) {
  if (devices().devices < 3) {
    GTEST_SKIP() << "needs 3+ CUDA devices, have " << devices().devices << ": " << devices().reason;
  }
  expect_ranks_pass(std::min(devices().devices, 8), collectives_body);
}

}  // namespace
}  // namespace zrt::testing
