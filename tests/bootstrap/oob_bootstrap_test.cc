// The out-of-band bootstrap over an OOB written here: records exchanged as files in the run's
// scratch folder (ZRT_TEST_RUN_DIR), the way a framework's own process group would carry them.
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "lib/bootstrap/bootstrap.h"
#include "lib/core/callback_status.h"
#include "tests/harness/multirank.h"

namespace zrt {
namespace {

struct FileOobState {
  std::string dir;
  int rank = 0;
  int size = 1;
  int round = 0;
  int frees = 0;
};

struct FileRequest {
  FileOobState* state;
  int round;
  void* recvbuf;
  size_t bytes;
};

std::string record_path(const FileOobState& state, int round, int rank) {
  return state.dir + "/oob." + std::to_string(round) + "." + std::to_string(rank);
}

zrt_status_t file_allgather(const void* sendbuf, void* recvbuf, size_t bytes, void* user_data,
                            void** request) {
  auto* state = static_cast<FileOobState*>(user_data);
  const int round = ++state->round;
  const std::string path = record_path(*state, round, state->rank);
  {
    std::ofstream out(path + ".tmp", std::ios::binary);
    out.write(static_cast<const char*>(sendbuf), static_cast<std::streamsize>(bytes));
    if (!out) return ZRT_SYSTEM_ERROR;
  }
  std::filesystem::rename(path + ".tmp", path);  // readers never see half a record
  *request = new FileRequest{state, round, recvbuf, bytes};
  return ZRT_SUCCESS;
}

zrt_status_t file_test(void* opaque) {
  auto* request = static_cast<FileRequest*>(opaque);
  const FileOobState& state = *request->state;
  for (int rank = 0; rank < state.size; ++rank) {
    if (!std::filesystem::exists(record_path(state, request->round, rank))) return ZRT_IN_PROGRESS;
  }
  for (int rank = 0; rank < state.size; ++rank) {
    std::ifstream in(record_path(state, request->round, rank), std::ios::binary);
    in.read(static_cast<char*>(request->recvbuf) + rank * request->bytes,
            static_cast<std::streamsize>(request->bytes));
    if (!in) return ZRT_SYSTEM_ERROR;
  }
  return ZRT_SUCCESS;
}

void file_free(void* opaque) {
  auto* request = static_cast<FileRequest*>(opaque);
  ++request->state->frees;
  delete request;
}

zrt_oob_t file_oob(FileOobState* state, int local_rank, int local_size) {
  return zrt_oob_t{sizeof(zrt_oob_t), file_allgather, file_test,  file_free, state,
                   state->rank,       state->size,    local_rank, local_size};
}

// A private folder for single-process tests, removed afterwards.
class ScratchDir {
 public:
  ScratchDir() {
    char path[] = "/tmp/zrt-oob-test-XXXXXX";
    const char* made = mkdtemp(path);
    path_ = made != nullptr ? made : "/nonexistent";
  }
  ~ScratchDir() { std::filesystem::remove_all(path_); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

class OobBootstrapRanks : public ::testing::TestWithParam<int> {};

TEST_P(OobBootstrapRanks, AllgatherBarrierAndLocalRanks) {
  zrt::testing::expect_ranks_pass(
      GetParam(),
      [](int rank, int size) {
        FileOobState state{std::getenv("ZRT_TEST_RUN_DIR"), rank, size};
        std::unique_ptr<Bootstrap> bootstrap;
        // local -1/-1: derived from host names through the OOB itself (one round).
        Status status = create_oob_bootstrap(file_oob(&state, -1, -1), 20000, &bootstrap);
        ASSERT_TRUE(status.is_ok()) << status.message();
        EXPECT_EQ(bootstrap->rank(), rank);
        EXPECT_EQ(bootstrap->size(), size);
        EXPECT_EQ(bootstrap->local_rank(), rank);
        EXPECT_EQ(bootstrap->local_size(), size);
        for (int round = 0; round < 4; ++round) {
          const uint64_t mine = static_cast<uint64_t>(rank) * 1000 + round;
          std::vector<uint64_t> all(size);
          status = bootstrap->allgather(&mine, all.data(), sizeof(mine));
          ASSERT_TRUE(status.is_ok()) << status.message();
          for (int peer = 0; peer < size; ++peer) {
            EXPECT_EQ(all[peer], static_cast<uint64_t>(peer) * 1000 + round);
          }
          ASSERT_TRUE(bootstrap->barrier().is_ok());
        }
        EXPECT_EQ(state.frees, state.round);  // every request freed exactly once
      },
      {.deadline_ms = 60000, .env = {}});
}

INSTANTIATE_TEST_SUITE_P(Sizes, OobBootstrapRanks, ::testing::Values(1, 2, 3, 4, 8));

TEST(OobBootstrap, GivenLocalRanksAreKept) {
  ScratchDir scratch;
  FileOobState state{scratch.path(), 0, 1};
  std::unique_ptr<Bootstrap> bootstrap;
  ASSERT_TRUE(create_oob_bootstrap(file_oob(&state, 0, 1), 1000, &bootstrap).is_ok());
  EXPECT_EQ(state.round, 0);  // nothing exchanged
  EXPECT_EQ(bootstrap->local_size(), 1);
}

TEST(OobBootstrap, BadArgumentsNameTheFault) {
  FileOobState state{"/nonexistent", 0, 2};
  std::unique_ptr<Bootstrap> bootstrap;
  zrt_oob_t oob = file_oob(&state, 0, 1);
  oob.test = nullptr;
  Status status = create_oob_bootstrap(oob, 1000, &bootstrap);
  EXPECT_EQ(status.code(), ZRT_INVALID_ARGUMENT);
  EXPECT_NE(status.message().find("callback test is NULL"), std::string::npos) << status.message();
  oob = file_oob(&state, 0, 1);
  oob.rank = 2;
  status = create_oob_bootstrap(oob, 1000, &bootstrap);
  EXPECT_EQ(status.code(), ZRT_INVALID_ARGUMENT);
  EXPECT_NE(status.message().find("rank 2"), std::string::npos) << status.message();
  oob = file_oob(&state, 0, -1);
  EXPECT_EQ(create_oob_bootstrap(oob, 1000, &bootstrap).code(), ZRT_INVALID_ARGUMENT);
  oob = file_oob(&state, 1, 1);
  EXPECT_EQ(create_oob_bootstrap(oob, 1000, &bootstrap).code(), ZRT_INVALID_ARGUMENT);
  oob.size = 0;
  EXPECT_EQ(create_oob_bootstrap(oob, 1000, &bootstrap).code(), ZRT_INVALID_ARGUMENT);
}

// Two ranks of which only one ever takes part: test() never completes.
TEST(OobBootstrap, TimeoutFreesTheRequest) {
  ScratchDir scratch;
  FileOobState state{scratch.path(), 0, 2};
  std::unique_ptr<Bootstrap> bootstrap;
  ASSERT_TRUE(create_oob_bootstrap(file_oob(&state, 0, 1), 200, &bootstrap).is_ok());
  const int mine = 1;
  int all[2];
  const auto start = std::chrono::steady_clock::now();
  Status status = bootstrap->allgather(&mine, all, sizeof(mine));
  EXPECT_EQ(status.code(), ZRT_TIMEOUT);
  EXPECT_NE(status.message().find("timed out after 200 ms"), std::string::npos) << status.message();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(2000));
  EXPECT_EQ(state.frees, 1);
}

TEST(OobBootstrap, CallbackErrorsAreRemoteErrors) {
  ScratchDir scratch;
  FileOobState state{scratch.path(), 0, 1};
  zrt_oob_t oob = file_oob(&state, 0, 1);
  oob.allgather = [](const void*, void*, size_t, void*, void**) { return ZRT_SYSTEM_ERROR; };
  std::unique_ptr<Bootstrap> bootstrap;
  ASSERT_TRUE(create_oob_bootstrap(oob, 1000, &bootstrap).is_ok());
  Status status = bootstrap->barrier();
  EXPECT_EQ(status.code(), ZRT_REMOTE_ERROR);
  EXPECT_NE(status.message().find("allgather callback failed with ZRT_SYSTEM_ERROR"),
            std::string::npos)
      << status.message();

  oob = file_oob(&state, 0, 1);
  oob.test = [](void*) { return ZRT_REMOTE_ERROR; };
  ASSERT_TRUE(create_oob_bootstrap(oob, 1000, &bootstrap).is_ok());
  status = bootstrap->barrier();
  EXPECT_EQ(status.code(), ZRT_REMOTE_ERROR);
  EXPECT_NE(status.message().find("test callback failed with ZRT_REMOTE_ERROR"), std::string::npos)
      << status.message();
  EXPECT_EQ(state.frees, 1);
}

// A callback that fails through zrt_callback_error (the message it leaves on the thread, which
// zrt_callback_error sets through set_callback_message) or returns a value outside zrt_status_t
// is a ZRT_CALLBACK_ERROR that says so.
TEST(OobBootstrap, FrameworkCallbackFailuresCarryTheirMessage) {
  ScratchDir scratch;
  FileOobState state{scratch.path(), 0, 1};
  zrt_oob_t oob = file_oob(&state, 0, 1);
  oob.allgather = [](const void*, void*, size_t, void*, void**) {
    set_callback_message("torch.distributed is not initialized");
    return ZRT_CALLBACK_ERROR;
  };
  std::unique_ptr<Bootstrap> bootstrap;
  ASSERT_TRUE(create_oob_bootstrap(oob, 1000, &bootstrap).is_ok());
  Status status = bootstrap->barrier();
  EXPECT_EQ(status.code(), ZRT_CALLBACK_ERROR);
  EXPECT_NE(status.message().find(
                "the out-of-band allgather callback failed: torch.distributed is not initialized"),
            std::string::npos)
      << status.message();

  oob = file_oob(&state, 0, 1);
  oob.test = [](void*) { return static_cast<zrt_status_t>(-7); };
  ASSERT_TRUE(create_oob_bootstrap(oob, 1000, &bootstrap).is_ok());
  status = bootstrap->barrier();
  EXPECT_EQ(status.code(), ZRT_CALLBACK_ERROR);
  EXPECT_NE(status.message().find("the out-of-band test callback returned -7, which is not a "
                                  "zrt_status_t value"),
            std::string::npos)
      << status.message();
}

}  // namespace
}  // namespace zrt
