// zrt-run's multi-node job shape: its text form and who may join.
#include <gtest/gtest.h>

#include "tools/zrt-run/node_shape.h"

namespace zrt {
namespace {

TEST(NodeShape, RoundTrips) {
  const JobShape shape{3, 4};
  EXPECT_EQ(format_job_shape(shape), "nnodes=3 nproc_per_node=4");
  JobShape parsed;
  ASSERT_TRUE(parse_job_shape(format_job_shape(shape), &parsed));
  EXPECT_EQ(parsed.nnodes, 3);
  EXPECT_EQ(parsed.nproc_per_node, 4);
  EXPECT_EQ(parsed.world(), 12);
}

TEST(NodeShape, RejectsOtherText) {
  JobShape parsed{7, 7};
  EXPECT_FALSE(parse_job_shape("", &parsed));
  EXPECT_FALSE(parse_job_shape("nnodes=2", &parsed));
  EXPECT_FALSE(parse_job_shape("nnodes=2 nproc_per_node=2 extra", &parsed));
  EXPECT_FALSE(parse_job_shape("nnodes=0 nproc_per_node=2", &parsed));
  EXPECT_EQ(parsed.nnodes, 7);  // untouched on failure
}

TEST(NodeShape, MismatchNamesBothShapes) {
  EXPECT_EQ(job_shape_mismatch({2, 2}, {2, 2}), "");
  const std::string why = job_shape_mismatch({2, 2}, {2, 3});
  EXPECT_NE(why.find("node 0 runs a job of 4 ranks (--nnodes 2 --nproc-per-node 2)"),
            std::string::npos)
      << why;
  EXPECT_NE(why.find("--nnodes 2 --nproc-per-node 3 (6 ranks)"), std::string::npos) << why;
  EXPECT_NE(job_shape_mismatch({2, 2}, {3, 2}), "");
}

TEST(NodeShape, GlobalRanksAreNodeMajor) {
  const JobShape shape{2, 3};
  EXPECT_EQ(global_rank(shape, 0, 0), 0);
  EXPECT_EQ(global_rank(shape, 0, 2), 2);
  EXPECT_EQ(global_rank(shape, 1, 0), 3);
  EXPECT_EQ(global_rank(shape, 1, 2), 5);
}

}  // namespace
}  // namespace zrt
