// The two-level collectives (collectives/two_level_*.h) on one machine, its ranks standing for
// hosts of consecutive ranks (Rig::two_level_hosts): reduce-scatter, all-gather and all-reduce
// with the in-host ring over the mapped windows give exactly the integer reference, and the
// same bits as the in-host ring over tagged messages (ZRT_WINDOWS=0's path) on values whose
// sums round, since both sum in the same order. Several collectives run back to back on one
// stream (one mapped inbox for all), at counts from one element per rank to several pipeline
// chunks per block, with blocks of unequal length.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "tests/collectives/rig.h"
#include "tests/harness/multirank.h"
#include "tests/harness/status_assert.h"

namespace zrt::testing {
namespace {

// Elements per rank (reduce-scatter's block, all-gather's contribution); all-reduce takes
// count * size + 3, so that its blocks differ in length.
const size_t kCounts[] = {1, 7, 65537, 700001};

float value_of(int rank, size_t i, int round) {
  // Not exactly summable: any other order of the sums would show in the low bits.
  return static_cast<float>(((i * 2654435761u + rank * 40503u + round) % 100003) * 1e-3 +
                            0.1 * rank);
}

struct Results {
  std::vector<std::vector<float>> rs, ag, ar;
  std::vector<std::vector<int32_t>> ints;
};

// Every collective of the test on one rig; the integer ones are checked here.
void run_all(Rig& rig, int rank, int size, Results* results) {
  for (size_t count : kCounts) {
    for (int round = 0; round < 2; ++round) {
      std::vector<float> in(count * size), rs(count), ag(count * size);
      for (size_t i = 0; i < in.size(); ++i) in[i] = value_of(rank, i, round);
      ASSERT_OK(rig.run(collective_args(ZRT_COLL_REDUCE_SCATTER, in.data(), rs.data(), count)));
      ASSERT_OK(rig.run(collective_args(ZRT_COLL_ALL_GATHER, rs.data(), ag.data(), count)));
      const size_t ar_count = count * size + 3;
      std::vector<float> ar_in(ar_count), ar(ar_count);
      for (size_t i = 0; i < ar_count; ++i) ar_in[i] = value_of(rank, i + 11, round);
      ASSERT_OK(rig.run(collective_args(ZRT_COLL_ALL_REDUCE, ar_in.data(), ar.data(), ar_count)));
      // In place, the same bits: the output is then part of the input that the host's own
      // level-one job still reads.
      std::vector<float> rs_in_place = in;
      float* own_block = rs_in_place.data() + static_cast<size_t>(rank) * count;
      ASSERT_OK(
          rig.run(collective_args(ZRT_COLL_REDUCE_SCATTER, rs_in_place.data(), own_block, count)));
      ASSERT_EQ(std::memcmp(own_block, rs.data(), count * sizeof(float)), 0)
          << "in-place reduce-scatter, count " << count;
      std::vector<float> ar_in_place = ar_in;
      ASSERT_OK(rig.run(
          collective_args(ZRT_COLL_ALL_REDUCE, ar_in_place.data(), ar_in_place.data(), ar_count)));
      ASSERT_EQ(std::memcmp(ar_in_place.data(), ar.data(), ar_count * sizeof(float)), 0)
          << "in-place all-reduce, count " << ar_count;
      results->rs.push_back(std::move(rs));
      results->ag.push_back(std::move(ag));
      results->ar.push_back(std::move(ar));

      // Integers: the sums are exact in any order, so the reference is plain arithmetic.
      std::vector<int32_t> iin(ar_count), iout(ar_count);
      for (size_t i = 0; i < ar_count; ++i) iin[i] = static_cast<int32_t>((i * 7 + rank) % 1000);
      ASSERT_OK(rig.run(
          collective_args(ZRT_COLL_ALL_REDUCE, iin.data(), iout.data(), ar_count, ZRT_I32)));
      for (size_t i = 0; i < ar_count; ++i) {
        int32_t expected = 0;
        for (int r = 0; r < size; ++r) expected += static_cast<int32_t>((i * 7 + r) % 1000);
        ASSERT_EQ(iout[i], expected) << "all-reduce count " << ar_count << " element " << i;
      }
      std::vector<int32_t> irs(count), iag(count * size);
      ASSERT_OK(rig.run(
          collective_args(ZRT_COLL_REDUCE_SCATTER, iin.data(), irs.data(), count, ZRT_I32)));
      for (size_t i = 0; i < count; ++i) {
        const size_t global = rank * count + i;
        int32_t expected = 0;
        for (int r = 0; r < size; ++r) expected += static_cast<int32_t>((global * 7 + r) % 1000);
        ASSERT_EQ(irs[i], expected) << "reduce-scatter count " << count << " element " << i;
      }
      ASSERT_OK(
          rig.run(collective_args(ZRT_COLL_ALL_GATHER, irs.data(), iag.data(), count, ZRT_I32)));
      for (size_t i = 0; i < count * size; ++i) {
        int32_t expected = 0;
        for (int r = 0; r < size; ++r) expected += static_cast<int32_t>((i * 7 + r) % 1000);
        ASSERT_EQ(iag[i], expected) << "all-gather count " << count << " element " << i;
      }
      results->ints.push_back(std::move(iag));
    }
  }
}

void expect_same_bits(const std::vector<std::vector<float>>& a,
                      const std::vector<std::vector<float>>& b, const char* what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  for (size_t k = 0; k < a.size(); ++k) {
    ASSERT_EQ(a[k].size(), b[k].size()) << what;
    for (size_t i = 0; i < a[k].size(); ++i) {
      uint32_t x = 0, y = 0;
      std::memcpy(&x, &a[k][i], 4);
      std::memcpy(&y, &b[k][i], 4);
      ASSERT_EQ(x, y) << what << " call " << k << " element " << i << ": " << a[k][i] << " vs "
                      << b[k][i];
    }
  }
}

void windows_match_tagged(int hosts, int ranks) {
  expect_ranks_pass(ranks, [hosts](int rank, int size) {
    Results with_windows, tagged;
    {
      Rig rig;
      rig.two_level_hosts = hosts;
      rig.windows = true;
      rig.check_order = 0;  // the default fingerprint: in front of the data across hosts
      ASSERT_OK(rig.init(rank, size, "twolevel_windows"));
      run_all(rig, rank, size, &with_windows);
    }
    {
      Rig rig;
      rig.two_level_hosts = hosts;
      rig.windows = false;
      rig.check_order = 1;  // the order checker instead
      ASSERT_OK(rig.init(rank, size, "twolevel_tagged"));
      run_all(rig, rank, size, &tagged);
    }
    expect_same_bits(with_windows.rs, tagged.rs, "reduce-scatter");
    expect_same_bits(with_windows.ag, tagged.ag, "all-gather");
    expect_same_bits(with_windows.ar, tagged.ar, "all-reduce");
  });
}

TEST(TwoLevel, TwoHostsOfTwoWindowsMatchTaggedAndReference) {
  windows_match_tagged(2, 4);
}

// Three ranks a host: the in-host ring forwards partials and blocks through a middle rank.
TEST(TwoLevel, TwoHostsOfThreeWindowsMatchTaggedAndReference) {
  windows_match_tagged(2, 6);
}

}  // namespace
}  // namespace zrt::testing
