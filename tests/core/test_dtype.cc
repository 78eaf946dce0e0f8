#include <gtest/gtest.h>

#include "lib/core/dtype.h"

namespace zrt {
namespace {

TEST(Dtype, SizesMatchTheirTypes) {
  EXPECT_EQ(dtype_size(ZRT_F32), 4u);
  EXPECT_EQ(dtype_size(ZRT_F64), 8u);
  EXPECT_EQ(dtype_size(ZRT_F16), 2u);
  EXPECT_EQ(dtype_size(ZRT_BF16), 2u);
  EXPECT_EQ(dtype_size(ZRT_I8), 1u);
  EXPECT_EQ(dtype_size(ZRT_U8), 1u);
  EXPECT_EQ(dtype_size(ZRT_I32), 4u);
  EXPECT_EQ(dtype_size(ZRT_I64), 8u);
  EXPECT_EQ(dtype_size(ZRT_DTYPE_COUNT), 0u);
  EXPECT_EQ(dtype_size(static_cast<zrt_dtype_t>(-1)), 0u);
}

TEST(Dtype, NamesRoundTrip) {
  for (int i = 0; i < ZRT_DTYPE_COUNT; ++i) {
    zrt_dtype_t dtype = static_cast<zrt_dtype_t>(i);
    zrt_dtype_t parsed = ZRT_DTYPE_COUNT;
    ASSERT_TRUE(dtype_from_name(dtype_name(dtype), &parsed)) << dtype_name(dtype);
    EXPECT_EQ(parsed, dtype);
  }
  zrt_dtype_t parsed;
  EXPECT_TRUE(dtype_from_name("BFloat16", &parsed));
  EXPECT_EQ(parsed, ZRT_BF16);
  EXPECT_FALSE(dtype_from_name("f128", &parsed));
  EXPECT_FALSE(dtype_from_name(nullptr, &parsed));
}

TEST(Dtype, OpsRoundTrip) {
  for (int i = 0; i < ZRT_OP_COUNT; ++i) {
    zrt_op_t op = static_cast<zrt_op_t>(i);
    zrt_op_t parsed = ZRT_OP_COUNT;
    ASSERT_TRUE(op_from_name(op_name(op), &parsed));
    EXPECT_EQ(parsed, op);
  }
  EXPECT_STREQ(op_name(static_cast<zrt_op_t>(ZRT_OP_COUNT)), "premul_sum");
  zrt_op_t parsed;
  EXPECT_FALSE(op_from_name("xor", &parsed));
}

TEST(Dtype, CheckNamesTheArgument) {
  EXPECT_TRUE(check_dtype(ZRT_BF16, "dtype").is_ok());
  Status status = check_dtype(static_cast<zrt_dtype_t>(42), "grad_dtype");
  EXPECT_EQ(status.code(), ZRT_INVALID_ARGUMENT);
  EXPECT_NE(status.message().find("grad_dtype"), std::string::npos);
  EXPECT_NE(status.message().find("42"), std::string::npos);
}

TEST(Dtype, FloatingClassification) {
  EXPECT_TRUE(dtype_is_floating(ZRT_BF16));
  EXPECT_TRUE(dtype_is_floating(ZRT_F64));
  EXPECT_FALSE(dtype_is_floating(ZRT_I32));
  EXPECT_FALSE(dtype_is_floating(ZRT_U8));
}

}  // namespace
}  // namespace zrt
