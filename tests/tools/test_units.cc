#include <gtest/gtest.h>

#include "tools/common/units.h"

namespace zrt::tools {
namespace {

TEST(ParseSize, AcceptsNcclTestsAndIecAndSiForms) {
  uint64_t v = 0;
  ASSERT_TRUE(parse_size("8", "-b", &v).is_ok());
  EXPECT_EQ(v, 8u);
  ASSERT_TRUE(parse_size("1M", "-b", &v).is_ok());
  EXPECT_EQ(v, 1u << 20);
  ASSERT_TRUE(parse_size("256MiB", "-b", &v).is_ok());
  EXPECT_EQ(v, 256u << 20);
  ASSERT_TRUE(parse_size("64KB", "-b", &v).is_ok());
  EXPECT_EQ(v, 64000u);
  ASSERT_TRUE(parse_size("2g", "-b", &v).is_ok());
  EXPECT_EQ(v, 2ull << 30);
  ASSERT_TRUE(parse_size("7.5e9", "-b", &v).is_ok());
  EXPECT_EQ(v, 7500000000ull);
  ASSERT_TRUE(parse_size("1.5K", "-b", &v).is_ok());
  EXPECT_EQ(v, 1536u);
  ASSERT_TRUE(parse_size(" 4 KiB ", "-b", &v).is_ok());
  EXPECT_EQ(v, 4096u);
}

TEST(ParseSize, RefusesBadInputWithAMessageNamingTheFlag) {
  uint64_t v = 123;
  Status s = parse_size("12Q", "-e", &v);
  EXPECT_EQ(s.code(), ZRT_INVALID_ARGUMENT);
  EXPECT_NE(s.message().find("-e"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("unknown unit 'Q'"), std::string::npos) << s.message();
  EXPECT_EQ(v, 123u) << "output written on failure";
  EXPECT_FALSE(parse_size("", "-b", &v).is_ok());
  EXPECT_FALSE(parse_size("-8", "-b", &v).is_ok());
  EXPECT_FALSE(parse_size("abc", "-b", &v).is_ok());
  EXPECT_FALSE(parse_size("inf", "-b", &v).is_ok());
  EXPECT_FALSE(parse_size("1.5", "-b", &v).is_ok());  // not whole bytes
  EXPECT_FALSE(parse_size("1e30", "-b", &v).is_ok());
  EXPECT_NE(parse_size("1.5", "-b", &v).message().find("whole"), std::string::npos);
}

TEST(ParseCount, DecimalUnits) {
  uint64_t v = 0;
  ASSERT_TRUE(parse_count("7.5e9", "--params", &v).is_ok());
  EXPECT_EQ(v, 7500000000ull);
  ASSERT_TRUE(parse_count("7.5B", "--params", &v).is_ok());
  EXPECT_EQ(v, 7500000000ull);
  ASSERT_TRUE(parse_count("125M", "--params", &v).is_ok());
  EXPECT_EQ(v, 125000000ull);
  ASSERT_TRUE(parse_count("1.3b", "--params", &v).is_ok());
  EXPECT_EQ(v, 1300000000ull);
  EXPECT_FALSE(parse_count("7.5GiB", "--params", &v).is_ok());
  EXPECT_FALSE(parse_count("0.5", "--params", &v).is_ok());
}

TEST(ParseRealSize, Fractions) {
  double v = 0;
  ASSERT_TRUE(parse_real_size("80GB", "--gpu-memory", &v).is_ok());
  EXPECT_DOUBLE_EQ(v, 80e9);
  ASSERT_TRUE(parse_real_size("0.5GiB", "--gpu-memory", &v).is_ok());
  EXPECT_DOUBLE_EQ(v, 0.5 * 1073741824.0);
}

TEST(FormatSize, CompactBinary) {
  EXPECT_EQ(format_size(8), "8 B");
  EXPECT_EQ(format_size(1024), "1 KiB");
  EXPECT_EQ(format_size(64ull << 20), "64 MiB");
  EXPECT_EQ(format_size(1536), "1.5 KiB");
  EXPECT_EQ(format_gb(120e9), "120.00 GB");
  EXPECT_EQ(format_count(7.5e9), "7.50 B");
}

}  // namespace
}  // namespace zrt::tools
