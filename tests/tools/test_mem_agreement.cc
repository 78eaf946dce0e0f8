// zrt-mem against the partition manager: real managers on real ranks register the same model
// with the same settings, and zrt_partition_memory (measured from their arenas) must equal
// zrt-mem's plan field by field, for every stage.
#include <gtest/gtest.h>

#include <utility>

#include "zero/partition/config.h"
#include "tests/harness/multirank.h"
#include "tests/harness/rank_count.h"
#include "tests/harness/status_assert.h"
#include "tools/zrt-mem/mem_plan.h"
#include "tools/zrt-mem/model_spec.h"
#include "zrt/zrt.h"

namespace zrt::mem {
namespace {

ModelSpec test_model() {
  TransformerShape shape;
  shape.layers = 3;
  shape.hidden = 96;
  shape.heads = 4;
  shape.vocab = 1000;
  shape.seq = 64;
  ModelSpec model;
  EXPECT_TRUE(model_from_transformer(shape, &model).is_ok());
  // A frozen tensor too: replicated, outside every segment.
  model.params.push_back({"h.0.frozen_table", 5000, 1, ZRT_PARAM_FROZEN});
  return model;
}

struct Setting {
  zrt_dtype_t param_dtype;
  zrt_dtype_t reduce_dtype;
  size_t bucket_bytes;
  int prefetch_depth;
  int slots;
};

void check_rank(int /*rank*/, int size) {
  zrt_comm_t comm = nullptr;
  ASSERT_OK(zrt_comm_init_env(nullptr, &comm));
  const ModelSpec model = test_model();
  const Setting settings[] = {{ZRT_BF16, ZRT_F32, 64 << 10, 1, 2},
                              {ZRT_F16, ZRT_F16, 1 << 20, 2, 1},
                              {ZRT_F32, ZRT_F32, 100 << 10, 0, 2}};
  for (const Setting& setting : settings) {
    // Stage 3 twice more with hpZ: secondary groups of one rank (whole units) and of all.
    const std::pair<int, int> stages[] = {{0, 0}, {1, 0}, {2, 0}, {3, 0}, {3, 1}, {3, size}};
    for (const auto& [stage, hpz] : stages) {
      SCOPED_TRACE(::testing::Message()
                   << "stage " << stage << " hpZ " << hpz << " param dtype " << setting.param_dtype
                   << " bucket " << setting.bucket_bytes);
      zrt_partition_config_t config = ZRT_PARTITION_CONFIG_INIT;
      config.stage = stage;
      config.param_dtype = setting.param_dtype;
      config.reduce_dtype = setting.reduce_dtype;
      config.bucket_bytes = setting.bucket_bytes;
      config.prefetch_depth = setting.prefetch_depth;
      config.optimizer_slots = setting.slots;
      config.hpz_group_size = hpz;
      // Below the default threshold every tensor of this small model would stay gathered, and
      // hpZ would have no unit to copy.
      if (hpz > 0) config.persistence_threshold = 1000;
      zrt_partition_t pm = nullptr;
      ASSERT_OK(zrt_partition_create(comm, &config, &pm));
      for (const UnitSpec& unit : model.units) {
        int index = 0;
        ASSERT_OK(zrt_partition_add_unit(pm, unit.name.c_str(), &index));
      }
      for (const ParamSpec& param : model.params) {
        int index = 0;
        ASSERT_OK(zrt_partition_add_param(pm, param.unit, param.name.c_str(), param.numel,
                                          param.flags, &index));
      }
      ASSERT_OK(zrt_partition_finalize(pm));
      zrt_partition_memory_t measured{};
      measured.size = sizeof(measured);
      ASSERT_OK(zrt_partition_memory(pm, &measured));
      ASSERT_OK(zrt_partition_destroy(pm));

      // zrt-mem's side: the same settings through its own path.
      MemRequest request;
      ASSERT_TRUE(partition_options_from_config(&config, &request.options).is_ok());
      request.ranks = size;
      request.model = model;
      request.stages = {stage};
      MemPlan plan;
      Status planned = plan_memory(request, &plan);
      ASSERT_TRUE(planned.is_ok()) << planned.message();
      const MemoryFigures& f = plan.stages[0].figures;
      EXPECT_EQ(measured.full_params, f.full_params);
      EXPECT_EQ(measured.param_shard, f.param_shard);
      EXPECT_EQ(measured.param_secondary, f.param_secondary);
      EXPECT_EQ(f.param_secondary > 0, hpz > 0);
      EXPECT_EQ(measured.gradients, f.gradients);
      EXPECT_EQ(measured.grad_shard, f.grad_shard);
      EXPECT_EQ(measured.master, f.master);
      EXPECT_EQ(measured.optimizer_state, f.optimizer_state);
      EXPECT_EQ(measured.buckets, f.buckets);
      EXPECT_EQ(measured.gather_window, f.gather_window);
      EXPECT_EQ(measured.grad_staging, f.grad_staging);
      EXPECT_EQ(measured.step_backup, f.step_backup);
      EXPECT_EQ(measured.model_state, f.model_state);
      EXPECT_EQ(measured.total, f.total);
      EXPECT_DOUBLE_EQ(measured.theoretical_model_state, f.theoretical_model_state);
      EXPECT_EQ(measured.parameters, f.parameters);
      EXPECT_EQ(measured.padded_parameters, f.padded_parameters);
      EXPECT_GT(f.model_state, 0u);
    }
  }
  ASSERT_OK(zrt_comm_destroy(comm));
}

class MemAgreement : public zrt::testing::RankCount {};
TEST_P(MemAgreement, MeasuredMemoryIsThePlan) {
  zrt::testing::expect_ranks_pass(GetParam(), check_rank);
}
INSTANTIATE_TEST_SUITE_P(ZrtMemAgreement, MemAgreement, ::testing::Values(1, 2, 3),
                         zrt::testing::rank_count_name);

}  // namespace
}  // namespace zrt::mem
