// ASSERT_OK / EXPECT_OK: the one success check of the test tree, for both error values zrt has.
// A zrt::Status fails with its own message; a zrt_status_t from the C API fails with the code's
// name and zrt_last_error(), read at once so a later call cannot overwrite it. The expression is
// evaluated once, and more context can be streamed after the macro as after any gtest assertion.
#pragma once

#include <gtest/gtest.h>

#include "lib/core/status.h"
#include "zrt/zrt.h"

namespace zrt::testing {

inline ::testing::AssertionResult StatusIsOk(const char* expression, const ::zrt::Status& status) {
  if (status.is_ok()) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << expression << ": " << status.message();
}

inline ::testing::AssertionResult StatusIsOk(const char* expression, zrt_status_t status) {
  if (status == ZRT_SUCCESS) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << expression << " -> " << zrt_status_string(status) << ": " << zrt_last_error();
}

}  // namespace zrt::testing

#define ASSERT_OK(expr) ASSERT_PRED_FORMAT1(::zrt::testing::StatusIsOk, expr)
#define EXPECT_OK(expr) EXPECT_PRED_FORMAT1(::zrt::testing::StatusIsOk, expr)
