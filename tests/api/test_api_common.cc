// Entry points that need no communicator: status strings, versions, dtype sizes, last error.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <thread>

#include "zrt/zrt.h"

namespace {

TEST(ApiCommon, StatusStringsAreTheConstantNames) {
  EXPECT_STREQ(zrt_status_string(ZRT_SUCCESS), "ZRT_SUCCESS");
  EXPECT_STREQ(zrt_status_string(ZRT_TIMEOUT), "ZRT_TIMEOUT");
  EXPECT_STREQ(zrt_status_string(ZRT_INTERNAL_ERROR), "ZRT_INTERNAL_ERROR");
  EXPECT_STREQ(zrt_status_string(ZRT_CALLBACK_ERROR), "ZRT_CALLBACK_ERROR");
  EXPECT_STREQ(zrt_status_string(static_cast<zrt_status_t>(1234)), "ZRT_UNKNOWN_STATUS");
  EXPECT_STREQ(zrt_status_string(static_cast<zrt_status_t>(-1)), "ZRT_UNKNOWN_STATUS");
  // Every enumerator has its name: none falls through to the unknown one.
  for (int code = ZRT_SUCCESS; code <= ZRT_CALLBACK_ERROR; ++code) {
    EXPECT_STRNE(zrt_status_string(static_cast<zrt_status_t>(code)), "ZRT_UNKNOWN_STATUS") << code;
  }
}

// zrt_callback_error returns its status and leaves the thread's last error alone (the zrt call
// that runs the callback reports it: tests/partition/test_partition_framework.cc).
TEST(ApiCommon, CallbackErrorReturnsItsStatus) {
  size_t bytes = 0;
  ASSERT_EQ(zrt_dtype_size(ZRT_DTYPE_COUNT, &bytes), ZRT_INVALID_ARGUMENT);
  const std::string before = zrt_last_error();
  EXPECT_EQ(zrt_callback_error("the framework's message"), ZRT_CALLBACK_ERROR);
  EXPECT_EQ(zrt_callback_error(nullptr), ZRT_CALLBACK_ERROR);
  EXPECT_EQ(before, zrt_last_error());
}

// zrt_stream_synchronize(NULL) says how to wait for the default stream instead.
TEST(ApiCommon, SynchronizingTheNullStreamSaysWhatToDo) {
  EXPECT_EQ(zrt_stream_synchronize(nullptr), ZRT_INVALID_ARGUMENT);
  EXPECT_NE(std::strstr(zrt_last_error(), "zrt_event_record(event, NULL)"), nullptr)
      << zrt_last_error();
  EXPECT_NE(std::strstr(zrt_last_error(), "zrt_stream_create"), nullptr) << zrt_last_error();
  EXPECT_EQ(zrt_stream_query(nullptr), ZRT_INVALID_ARGUMENT);
  EXPECT_NE(std::strstr(zrt_last_error(), "zrt_event_synchronize"), nullptr) << zrt_last_error();
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
