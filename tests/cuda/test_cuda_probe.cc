// What runs with or without a GPU: the device probe and its reason, NCCL's version and unique
// ids, the error mappings, the polling wait, and argument validation of the device kernels and
// arenas (all checked before any CUDA call).
#include <gtest/gtest.h>

#include <cstring>
#include <string>

#include "tests/cuda/cuda_test_util.h"
#include "device/cuda_status.h"
#include "device/device_arena.h"
#include "device/device_kernels.h"
#include "device/device_probe.h"
#include "device/nccl_comm.h"
#include "device/poll_wait.h"

namespace zrt {
namespace {

bool mentions_no_device(const std::string& message) {
  return message.find("cudaErrorInsufficientDriver") != std::string::npos ||
         message.find("cudaErrorNoDevice") != std::string::npos ||
         message.find("none present") != std::string::npos;
}

TEST(CudaProbe, CountOrNoDeviceReason) {
  int count = -1;
  Status status = cuda_device_count(&count);
  if (status.is_ok()) {
    EXPECT_GT(count, 0);
    return;
  }
  // Without a GPU the only acceptable answer is "no device": anything else is a real failure
  // hiding behind the skips of the other tests.
  EXPECT_EQ(status.code(), ZRT_UNSUPPORTED) << status.message();
  EXPECT_TRUE(mentions_no_device(status.message())) << status.message();
  EXPECT_NE(status.message().find("no usable CUDA device"), std::string::npos) << status.message();
  EXPECT_EQ(count, -1) << "output written on failure";
}

TEST(Nccl, VersionNeedsNoDevice) {
  int version = 0;
  Status status = nccl_version(&version);
  ASSERT_TRUE(status.is_ok()) << status.message();
  EXPECT_EQ(version / 10000, NCCL_MAJOR);
  EXPECT_GE(version, 21900);  // ncclCommSplit, non-blocking init, ncclMemAlloc
}

TEST(Nccl, UniqueIdNeedsNoDevice) {
  NcclUniqueIdBytes first{};
  NcclUniqueIdBytes second{};
  Status status = nccl_unique_id(&first);
  ASSERT_TRUE(status.is_ok()) << status.message();
  ASSERT_TRUE(nccl_unique_id(&second).is_ok());
  EXPECT_NE(std::memcmp(first.data(), second.data(), first.size()), 0);
  NcclUniqueIdBytes zero{};
  EXPECT_NE(std::memcmp(first.data(), zero.data(), first.size()), 0);
}

TEST(Nccl, EveryDtypeHasANcclType) {
  for (int d = 0; d < ZRT_DTYPE_COUNT; ++d) {
    ncclDataType_t type;
    EXPECT_TRUE(nccl_datatype(static_cast<zrt_dtype_t>(d), &type)) << d;
  }
  ncclDataType_t type;
  EXPECT_FALSE(nccl_datatype(ZRT_DTYPE_COUNT, &type));
}

TEST(CudaStatus, MapsCodes) {
  EXPECT_TRUE(cuda_status(cudaSuccess, "x").is_ok());
  Status no_driver = cuda_status(cudaErrorInsufficientDriver, "cudaFoo");
  EXPECT_EQ(no_driver.code(), ZRT_UNSUPPORTED);
  EXPECT_NE(no_driver.message().find("cudaFoo: cudaErrorInsufficientDriver"), std::string::npos)
      << no_driver.message();
  EXPECT_EQ(cuda_status(cudaErrorMemoryAllocation, "m").code(), ZRT_OUT_OF_MEMORY);
  EXPECT_EQ(cuda_status(cudaErrorLaunchFailure, "l").code(), ZRT_SYSTEM_ERROR);
  EXPECT_TRUE(nccl_status(ncclSuccess, "x").is_ok());
  EXPECT_EQ(nccl_status(ncclRemoteError, "r").code(), ZRT_REMOTE_ERROR);
  EXPECT_EQ(nccl_status(ncclInvalidArgument, "a").code(), ZRT_INVALID_ARGUMENT);
  EXPECT_EQ(nccl_status(ncclInvalidUsage, "u").code(), ZRT_INVALID_USAGE);
  EXPECT_EQ(nccl_status(ncclSystemError, "s").code(), ZRT_SYSTEM_ERROR);
  Status internal = nccl_status(ncclInternalError, "ncclBar");
  EXPECT_EQ(internal.code(), ZRT_INTERNAL_ERROR);
  EXPECT_EQ(internal.message().rfind("ncclBar: ", 0), 0u) << internal.message();
}

TEST(PollWait, ReturnsOutcomeOrTimesOut) {
  int calls = 0;
  Status done = poll_until(1000, "three polls", [&]() -> Status {
    return ++calls < 3 ? Status(ZRT_IN_PROGRESS, "") : Status::ok();
  });
  EXPECT_TRUE(done.is_ok());
  EXPECT_EQ(calls, 3);
  Status failed = poll_until(1000, "fails", [] { return Status(ZRT_REMOTE_ERROR, "peer 3 died"); });
  EXPECT_EQ(failed.code(), ZRT_REMOTE_ERROR);
  Status late = poll_until(30, "never done", [] { return Status(ZRT_IN_PROGRESS, ""); });
  EXPECT_EQ(late.code(), ZRT_TIMEOUT);
  EXPECT_NE(late.message().find("never done"), std::string::npos) << late.message();
}

// Validation happens before any CUDA call, so these run on any machine.
TEST(DeviceKernels, RefuseBadArguments) {
  int fake = 0;
  EXPECT_EQ(device_convert(ZRT_I32, &fake, ZRT_F16, &fake, 1, nullptr).code(),
            ZRT_INVALID_ARGUMENT);
  EXPECT_EQ(device_convert(ZRT_F32, nullptr, ZRT_F16, &fake, 1, nullptr).code(),
            ZRT_INVALID_ARGUMENT);
  char buffer[64];
  Status overlap = device_convert(ZRT_F32, buffer, ZRT_F16, buffer + 2, 4, nullptr);
  EXPECT_EQ(overlap.code(), ZRT_INVALID_ARGUMENT);
  EXPECT_NE(overlap.message().find("overlaps"), std::string::npos) << overlap.message();
  EXPECT_TRUE(device_convert(ZRT_F32, buffer, ZRT_F32, buffer, 4, nullptr).is_ok());  // no-op
  EXPECT_EQ(device_accumulate(ZRT_U8, buffer, ZRT_F32, buffer, 1, 1.0, nullptr).code(),
            ZRT_INVALID_ARGUMENT);
  EXPECT_EQ(device_accumulate(ZRT_F32, nullptr, ZRT_F32, buffer, 1, 1.0, nullptr).code(),
            ZRT_INVALID_ARGUMENT);
  DeviceCopySpan span;
  span.bytes = 8;
  Status null_span = device_copy_spans(&span, 1, nullptr);
  EXPECT_EQ(null_span.code(), ZRT_INVALID_ARGUMENT);
  EXPECT_NE(null_span.message().find("spans[0]"), std::string::npos) << null_span.message();
  EXPECT_EQ(device_copy_spans(nullptr, 2, nullptr).code(), ZRT_INVALID_ARGUMENT);
  EXPECT_EQ(
      device_sum_squares_nonfinite(ZRT_F32, buffer, 1, nullptr, nullptr, nullptr, nullptr).code(),
      ZRT_INVALID_ARGUMENT);
  EXPECT_GE(device_sum_squares_workspace_bytes(), 1024u * sizeof(double));
}

TEST(DeviceArena, RefusesZeroBytes) {
  std::unique_ptr<DeviceArena> arena;
  EXPECT_EQ(DeviceArena::create(0, 0, DeviceArena::Source::kCudaMalloc, &arena).code(),
            ZRT_INVALID_ARGUMENT);
  EXPECT_EQ(arena, nullptr);
}

TEST(DeviceArena, WithoutDeviceSaysWhy) {
  const std::string reason = testing::cuda_unusable_reason();
  if (reason.empty()) GTEST_SKIP() << "a CUDA device is usable here";
  std::unique_ptr<DeviceArena> arena;
  Status status = DeviceArena::create(0, 4096, DeviceArena::Source::kCudaMalloc, &arena);
  EXPECT_EQ(status.code(), ZRT_UNSUPPORTED) << status.message();
  EXPECT_EQ(arena, nullptr);
}

TEST(NcclComm, InitWithoutDeviceFailsCleanly) {
  const std::string reason = testing::cuda_unusable_reason();
  if (reason.empty()) GTEST_SKIP() << "a CUDA device is usable here";
  NcclUniqueIdBytes id{};
  ASSERT_TRUE(nccl_unique_id(&id).is_ok());
  NcclCommOptions options;
  options.timeout_ms = 5000;
  std::unique_ptr<NcclComm> comm;
  Status status = NcclComm::init(id, options, &comm);
  EXPECT_EQ(status.code(), ZRT_UNSUPPORTED) << status.message();
  EXPECT_EQ(comm, nullptr);
}

TEST(NcclComm, RefusesBadRank) {
  NcclUniqueIdBytes id{};
  NcclCommOptions options;
  options.rank = 2;
  options.size = 2;
  std::unique_ptr<NcclComm> comm;
  EXPECT_EQ(NcclComm::init(id, options, &comm).code(), ZRT_INVALID_ARGUMENT);
}

}  // namespace
}  // namespace zrt
