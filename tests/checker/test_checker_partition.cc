// The collective-order checker through the C API and a stage-3 partition manager: two ranks
// that fetch their units in different orders get ZRT_INVALID_USAGE naming both units, instead
// of a hang or silently swapped parameters (the units have equal sizes, so only the unit
// number tells the gathers apart).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tests/harness/multirank.h"
#include "zrt/zrt.h"

namespace zrt::testing {
namespace {

TEST(OrderCheckPartition, UnitsFetchedInDifferentOrdersAreNamed) {
  RankOptions options;
  options.deadline_ms = 60000;
  options.env["ZRT_CHECK"] = "1";
  options.env["ZRT_TIMEOUT"] = "10";
  expect_ranks_pass(
      2,
      [](int rank, int) {
        zrt_comm_t comm = nullptr;
        ASSERT_EQ(zrt_comm_init_env(nullptr, &comm), ZRT_SUCCESS) << zrt_last_error();
        zrt_partition_config_t config = ZRT_PARTITION_CONFIG_INIT;
        config.stage = 3;
        config.prefetch_depth = 0;
        config.persistence_threshold = 0;
        zrt_partition_t pm = nullptr;
        ASSERT_EQ(zrt_partition_create(comm, &config, &pm), ZRT_SUCCESS) << zrt_last_error();
        for (int u = 0; u < 3; ++u) {
          int unit = 0, param = 0;
          ASSERT_EQ(zrt_partition_add_unit(pm, "layer", &unit), ZRT_SUCCESS);
          ASSERT_EQ(zrt_partition_add_param(pm, unit, "w", 4096, 0, &param), ZRT_SUCCESS);
        }
        ASSERT_EQ(zrt_partition_finalize(pm), ZRT_SUCCESS) << zrt_last_error();
        // Unit 0 on both ranks matches; then rank 0 goes on with unit 1, rank 1 with unit 2.
        ASSERT_EQ(zrt_partition_fetch(pm, 0), ZRT_SUCCESS) << zrt_last_error();
        ASSERT_EQ(zrt_partition_release(pm, 0), ZRT_SUCCESS) << zrt_last_error();
        const int mine = rank == 0 ? 1 : 2;
        EXPECT_EQ(zrt_partition_fetch(pm, mine), ZRT_INVALID_USAGE);
        const std::string message = zrt_last_error();
        // Either rank may find the mismatch first: a rank reports its own verdict ("rank P
        // called X where rank R called Y") or the peer's ("rank P reports: rank R called Y where
        // rank P called X"). Both name each rank's call, in one order or the other.
        for (int r = 0; r < 2; ++r) {
          const std::string call = "rank " + std::to_string(r) + " called all_gather(unit " +
                                   std::to_string(r == 0 ? 1 : 2) + ", ";
          EXPECT_NE(message.find(call), std::string::npos)
              << "no \"" << call << "\" in: " << message;
        }
        EXPECT_NE(message.find(" where rank "), std::string::npos) << message;
        (void)zrt_partition_destroy(pm);
        (void)zrt_comm_destroy(comm);
      },
      options);
}

}  // namespace
}  // namespace zrt::testing
