// ZRT_ALGO_TABLE on real ranks, through the C API: a table that forces each algorithm of each
// op gives exact results (integer-valued inputs, so every reduction order agrees) at sizes
// below, at and above the built-in crossover and the staging memory; a bad table fails
// communicator creation on every rank with the file, the line and what is wrong.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "collectives/algorithm.h"
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

std::string write_table(const std::string& name, const std::string& text) {
  const std::string path = dir() + "/" + name + ".table";
  std::ofstream(path) << text;
  return path;
}

float input(int rank, size_t i) {
  return static_cast<float>((i * 7 + static_cast<size_t>(rank) * 3) % 101);
}

float summed(int size, size_t i) {
  float sum = 0;
  for (int r = 0; r < size; ++r) sum += input(r, i);
  return sum;
}

// Runs reduce-scatter, all-gather or all-reduce of `op` under a table forcing `algorithm`.
void run_forced(int rank, int size, TableOp op, const char* algorithm) {
  const std::string name = std::string(table_op_name(op)) + "-" + algorithm;
  const std::string path = write_table(name + "-" + std::to_string(rank),
                                       std::string(table_op_name(op)) + " * * " + algorithm + "\n");
  setenv("ZRT_ALGO_TABLE", path.c_str(), 1);
  FileOob oob(dir(), name, rank, size);
  zrt_comm_config_t config = ZRT_COMM_CONFIG_INIT;
  config.timeout_ms = 30000;
  zrt_comm_t comm = nullptr;
  ASSERT_OK(zrt_comm_init_oob(&oob.oob(), &config, &comm));
  zrt_stream_t stream = nullptr;
  ASSERT_OK(zrt_stream_create(comm, ZRT_MEM_HOST, &stream));
  // Per-rank counts: one element, odd, around 64 KiB, and past the 4 MiB staging.
  for (size_t count : {size_t{1}, size_t{1023}, size_t{16384}, size_t{16385}, size_t{1} << 20}) {
    const size_t n = static_cast<size_t>(size);
    std::vector<float> send(count * n), recv(count * n, -1.0f);
    if (op == TableOp::kReduceScatter) {
      for (size_t i = 0; i < count * n; ++i) send[i] = input(rank, i);
      ASSERT_OK(
          zrt_reduce_scatter(comm, send.data(), recv.data(), count, ZRT_F32, ZRT_SUM, stream));
      ASSERT_OK(zrt_stream_synchronize(stream));
      for (size_t i = 0; i < count; ++i) {
        ASSERT_EQ(recv[i], summed(size, rank * count + i))
            << name << " count " << count << " " << i;
      }
    } else if (op == TableOp::kAllGather) {
      for (size_t i = 0; i < count; ++i) send[i] = input(rank, i);
      ASSERT_OK(zrt_all_gather(comm, send.data(), recv.data(), count, ZRT_F32, stream));
      ASSERT_OK(zrt_stream_synchronize(stream));
      for (size_t i = 0; i < count * n; ++i) {
        ASSERT_EQ(recv[i], input(static_cast<int>(i / count), i % count))
            << name << " count " << count << " " << i;
      }
    } else {
      for (size_t i = 0; i < count; ++i) send[i] = input(rank, i);
      ASSERT_OK(zrt_all_reduce(comm, send.data(), recv.data(), count, ZRT_F32, ZRT_SUM, stream));
      ASSERT_OK(zrt_stream_synchronize(stream));
      for (size_t i = 0; i < count; ++i) {
        ASSERT_EQ(recv[i], summed(size, i)) << name << " count " << count << " " << i;
      }
    }
  }
  ASSERT_OK(zrt_stream_destroy(stream));
  ASSERT_OK(zrt_comm_destroy(comm));
  unsetenv("ZRT_ALGO_TABLE");
}

class AlgorithmTableRanks : public ::testing::TestWithParam<int> {};

TEST_P(AlgorithmTableRanks, EveryForcedAlgorithmIsExact) {
  expect_ranks_pass(GetParam(), [](int rank, int size) {
    for (const AlgorithmInfo& info : algorithms()) {
      run_forced(rank, size, info.op, info.name);
      if (::testing::Test::HasFatalFailure()) return;
    }
  });
}

INSTANTIATE_TEST_SUITE_P(Ranks, AlgorithmTableRanks, ::testing::Values(2, 3),
                         [](const ::testing::TestParamInfo<int>& info) {
                           return "N" + std::to_string(info.param);
                         });

TEST(AlgorithmTable, BadFileFailsCommunicatorCreationOnEveryRank) {
  expect_ranks_pass(2, [](int rank, int size) {
    const std::string path = write_table("bad-" + std::to_string(rank),
                                         "# tuned\nall_reduce 2 * ring\nall_gather 2 0-4K rd\n");
    setenv("ZRT_ALGO_TABLE", path.c_str(), 1);
    FileOob oob(dir(), "bad-table", rank, size);
    zrt_comm_config_t config = ZRT_COMM_CONFIG_INIT;
    config.timeout_ms = 30000;
    zrt_comm_t comm = nullptr;
    EXPECT_EQ(zrt_comm_init_oob(&oob.oob(), &config, &comm), ZRT_INVALID_ARGUMENT);
    EXPECT_EQ(comm, nullptr);
    const std::string message = zrt_last_error();
    EXPECT_NE(
        message.find("ZRT_ALGO_TABLE=" + path +
                     ": line 3: all_gather has no algorithm 'rd' (it has: ring, oneshot, cma)"),
        std::string::npos)
        << message;
  });
}

}  // namespace
}  // namespace zrt::testing
