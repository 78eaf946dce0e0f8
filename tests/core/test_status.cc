#include <gtest/gtest.h>

#include <cerrno>

#include "lib/core/status.h"

namespace zrt {
namespace {

Status fails_with(zrt_status_t code) { return Status::error(code, "failed with {}", int(code)); }

Status propagates(zrt_status_t code, bool* reached_end) {
  ZRT_RETURN_IF_ERROR(fails_with(code));
  *reached_end = true;
  return Status::ok();
}

TEST(Status, DefaultIsOk) {
  Status status;
  EXPECT_TRUE(status.is_ok());
  EXPECT_EQ(status.code(), ZRT_SUCCESS);
  EXPECT_TRUE(status.message().empty());
}

TEST(Status, ErrorCarriesCodeAndFormattedMessage) {
  Status status = Status::invalid_argument("count = {} exceeds {}", 7, 3);
  EXPECT_FALSE(status.is_ok());
  EXPECT_EQ(status.code(), ZRT_INVALID_ARGUMENT);
  EXPECT_EQ(status.message(), "count = 7 exceeds 3");
}

TEST(Status, ReturnIfErrorStopsAtFirstFailure) {
  bool reached_end = false;
  Status status = propagates(ZRT_TIMEOUT, &reached_end);
  EXPECT_EQ(status.code(), ZRT_TIMEOUT);
  EXPECT_FALSE(reached_end);
}

TEST(Status, WithContextPrefixesOnlyErrors) {
  EXPECT_TRUE(Status::ok().with_context("ignored").is_ok());
  Status status = Status::invalid_usage("x").with_context("step");
  EXPECT_EQ(status.code(), ZRT_INVALID_USAGE);
  EXPECT_EQ(status.message(), "step: x");
}

TEST(Status, SystemErrorNamesErrno) {
  Status status = Status::system_error("open(/nonexistent)", ENOENT);
  EXPECT_EQ(status.code(), ZRT_SYSTEM_ERROR);
  EXPECT_NE(status.message().find("open(/nonexistent)"), std::string::npos);
  EXPECT_NE(status.message().find("No such file"), std::string::npos);
}

}  // namespace
}  // namespace zrt
