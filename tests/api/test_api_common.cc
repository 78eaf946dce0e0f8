// Entry points that need no communicator: status strings, versions, dtype sizes, last error.
#include <gtest/gtest.h>

#include <cstring>
#include <thread>

#include "zrt/zrt.h"

namespace {

TEST(ApiCommon, StatusStringsAreTheConstantNames) {
  EXPECT_STREQ(zrt_status_string(ZRT_SUCCESS), "ZRT_SUCCESS");
  EXPECT_STREQ(zrt_status_string(ZRT_TIMEOUT), "ZRT_TIMEOUT");
  EXPECT_STREQ(zrt_status_string(ZRT_INTERNAL_ERROR), "ZRT_INTERNAL_ERROR");
  EXPECT_STREQ(zrt_status_string(static_cast<zrt_status_t>(1234)), "ZRT_UNKNOWN_STATUS");
}

TEST(ApiCommon, VersionMatchesHeader) {
  int version = -1;
  ASSERT_EQ(zrt_get_version(&version), ZRT_SUCCESS);
  EXPECT_EQ(version, ZRT_VERSION_CODE);
  EXPECT_EQ(zrt_get_version(nullptr), ZRT_INVALID_ARGUMENT);
  EXPECT_NE(std::strstr(zrt_last_error(), "version"), nullptr) << zrt_last_error();
}

TEST(ApiCommon, DtypeSizeValidates) {
  size_t bytes = 0;
  ASSERT_EQ(zrt_dtype_size(ZRT_F64, &bytes), ZRT_SUCCESS);
  EXPECT_EQ(bytes, 8u);
  EXPECT_STREQ(zrt_last_error(), "");
  EXPECT_EQ(zrt_dtype_size(ZRT_DTYPE_COUNT, &bytes), ZRT_INVALID_ARGUMENT);
  EXPECT_NE(std::strstr(zrt_last_error(), "dtype"), nullptr);
  EXPECT_EQ(zrt_dtype_size(ZRT_F32, nullptr), ZRT_INVALID_ARGUMENT);
  EXPECT_NE(std::strstr(zrt_last_error(), "bytes"), nullptr);
}

TEST(ApiCommon, LastErrorIsPerThread) {
  size_t bytes = 0;
  ASSERT_EQ(zrt_dtype_size(ZRT_DTYPE_COUNT, &bytes), ZRT_INVALID_ARGUMENT);
  std::string other_thread_error = "unset";
  std::thread([&] { other_thread_error = zrt_last_error(); }).join();
  EXPECT_EQ(other_thread_error, "");
  EXPECT_NE(std::strstr(zrt_last_error(), "zrt_dtype_size"), nullptr);
}

}  // namespace
