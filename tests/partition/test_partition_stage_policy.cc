// StagePolicy: what each ZeRO stage shards and when it communicates, for every stage, with and
// without no-sync accumulation.
#include "zero/partition/stage_policy.h"

#include <gtest/gtest.h>

namespace zrt {
namespace {

StagePolicy policy_of(int stage, bool no_sync = false) {
  PartitionOptions options;
  options.stage = stage;
  options.no_sync_accumulation = no_sync;
  return StagePolicy(options);
}

TEST(StagePolicy, Stage0ShardsNothingAndAllReduces) {
  const StagePolicy p = policy_of(0);
  EXPECT_EQ(p.stage(), 0);
  EXPECT_EQ(p.param_home(), ParamHome::kReplicated);
  EXPECT_EQ(p.grad_home(), GradHome::kFull);
  EXPECT_FALSE(p.shards_optimizer_state());
  EXPECT_FALSE(p.shards_grads());
  EXPECT_FALSE(p.shards_params());
  EXPECT_FALSE(p.gathers_after_step());
  EXPECT_FALSE(p.gathers_on_fetch());
  EXPECT_FALSE(p.has_persistent_segment());
  EXPECT_FALSE(p.segment_per_unit());
  EXPECT_TRUE(p.keeps_full_grads());
  EXPECT_FALSE(p.optimizer_grad_is_copy());
}

TEST(StagePolicy, Stage1ShardsOptimizerStateOnly) {
  const StagePolicy p = policy_of(1);
  EXPECT_EQ(p.param_home(), ParamHome::kOwnedSlices);
  EXPECT_EQ(p.grad_home(), GradHome::kOwnedSlices);
  EXPECT_TRUE(p.shards_optimizer_state());
  EXPECT_FALSE(p.shards_grads());
  EXPECT_FALSE(p.shards_params());
  EXPECT_TRUE(p.gathers_after_step());
  EXPECT_FALSE(p.gathers_on_fetch());
  EXPECT_TRUE(p.keeps_full_grads());
  EXPECT_TRUE(p.optimizer_grad_is_copy());
}

TEST(StagePolicy, Stage2ShardsGradientsToo) {
  const StagePolicy p = policy_of(2);
  EXPECT_EQ(p.param_home(), ParamHome::kOwnedSlices);
  EXPECT_EQ(p.grad_home(), GradHome::kShard);
  EXPECT_TRUE(p.shards_optimizer_state());
  EXPECT_TRUE(p.shards_grads());
  EXPECT_FALSE(p.shards_params());
  EXPECT_TRUE(p.gathers_after_step());
  EXPECT_FALSE(p.gathers_on_fetch());
  EXPECT_FALSE(p.segment_per_unit());
  EXPECT_FALSE(p.keeps_full_grads());
  EXPECT_FALSE(p.optimizer_grad_is_copy());
}

TEST(StagePolicy, Stage3ShardsEverythingAndGathersOnFetch) {
  const StagePolicy p = policy_of(3);
  EXPECT_EQ(p.param_home(), ParamHome::kShard);
  EXPECT_EQ(p.grad_home(), GradHome::kShard);
  EXPECT_TRUE(p.shards_optimizer_state());
  EXPECT_TRUE(p.shards_grads());
  EXPECT_TRUE(p.shards_params());
  EXPECT_FALSE(p.gathers_after_step());
  EXPECT_TRUE(p.gathers_on_fetch());
  EXPECT_TRUE(p.has_persistent_segment());
  EXPECT_TRUE(p.segment_per_unit());
  EXPECT_FALSE(p.keeps_full_grads());
}

TEST(StagePolicy, NoSyncAccumulationKeepsFullGradientsInStages2And3) {
  for (int stage = 0; stage <= 3; ++stage) {
    EXPECT_TRUE(policy_of(stage, /*no_sync=*/true).keeps_full_grads()) << "stage " << stage;
  }
  EXPECT_FALSE(policy_of(2).keeps_full_grads());
  EXPECT_FALSE(policy_of(3).keeps_full_grads());
  // It changes where gradients accumulate, not what the stage shards.
  EXPECT_TRUE(policy_of(2, true).shards_grads());
  EXPECT_EQ(policy_of(3, true).param_home(), ParamHome::kShard);
}

}  // namespace
}  // namespace zrt
