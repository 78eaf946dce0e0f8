// The CUDA part of the C API in one process: argument validation, and the device probe's answer
// (a count, or ZRT_UNSUPPORTED with the runtime's "no device" reason). Runs on every machine.
#include <gtest/gtest.h>

#include <string>

#include "zrt/zrt.h"

namespace {

bool contains(const char* text, const char* part) {
  return std::string(text).find(part) != std::string::npos;
}

TEST(CudaApi, RefusesNullArguments) {
  EXPECT_EQ(zrt_cuda_device_count(nullptr), ZRT_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(zrt_last_error(), "zrt_cuda_device_count: count is NULL"))
      << zrt_last_error();
  EXPECT_EQ(zrt_nccl_version(nullptr), ZRT_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(zrt_last_error(), "version")) << zrt_last_error();
  zrt_stream_t stream = nullptr;
  EXPECT_EQ(zrt_stream_from_cuda(nullptr, nullptr, &stream), ZRT_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(zrt_last_error(), "zrt_stream_from_cuda: comm is NULL")) << zrt_last_error();
  EXPECT_EQ(stream, nullptr);
  void* cuda_stream = nullptr;
  EXPECT_EQ(zrt_stream_get_cuda(nullptr, &cuda_stream), ZRT_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(zrt_last_error(), "stream is NULL")) << zrt_last_error();
  zrt_event_t event = nullptr;
  EXPECT_EQ(zrt_event_create_cuda(nullptr, &event), ZRT_INVALID_ARGUMENT);
  EXPECT_EQ(event, nullptr);
}

TEST(CudaApi, RefusesForeignHandles) {
  // A pointer that is not a live handle is refused by its magic, not followed.
  alignas(16) unsigned char junk[256] = {};
  void* cuda_stream = nullptr;
  EXPECT_EQ(zrt_stream_get_cuda(reinterpret_cast<zrt_stream_t>(junk), &cuda_stream),
            ZRT_INVALID_ARGUMENT);
  zrt_stream_t stream = nullptr;
  EXPECT_EQ(zrt_stream_from_cuda(reinterpret_cast<zrt_comm_t>(junk), nullptr, &stream),
            ZRT_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(zrt_last_error(), "not a live zrt_comm_t")) << zrt_last_error();
}

TEST(CudaApi, NcclVersionWithoutDevice) {
  int version = 0;
  const zrt_status_t status = zrt_nccl_version(&version);
  if (status == ZRT_UNSUPPORTED) {
    EXPECT_TRUE(contains(zrt_last_error(), "built without NCCL")) << zrt_last_error();
    return;
  }
  ASSERT_EQ(status, ZRT_SUCCESS) << zrt_last_error();
  EXPECT_GE(version, 21900);
}

TEST(CudaApi, DeviceCountOrTheReasonThereIsNone) {
  int count = -1;
  const zrt_status_t status = zrt_cuda_device_count(&count);
  if (status == ZRT_SUCCESS) {
    EXPECT_GT(count, 0);
    return;
  }
  ASSERT_EQ(status, ZRT_UNSUPPORTED) << zrt_status_string(status) << ": " << zrt_last_error();
  EXPECT_EQ(count, -1);
  const char* why = zrt_last_error();
  EXPECT_TRUE(contains(why, "built without NCCL") || contains(why, "no usable CUDA device")) << why;
}

}  // namespace
