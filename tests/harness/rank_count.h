// RankCount: the fixture of a test that runs one body on several rank counts, the count being
// the test's parameter (instead of one copied TEST per N). rank_count_name names each instance
// "N<size>", so a failure reads ".../N3" as the copied tests' names did.
#pragma once

#include <gtest/gtest.h>

#include <string>

namespace zrt::testing {

class RankCount : public ::testing::TestWithParam<int> {};

inline std::string rank_count_name(const ::testing::TestParamInfo<int>& info) {
  return "N" + std::to_string(info.param);
}

}  // namespace zrt::testing
