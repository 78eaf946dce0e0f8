// The memory model against the ZeRO formulas: the model-state bytes equal the formula for the
// padded element count exactly, the unpadded figure is the textbook one (16P; 4P + 12P/N;
// 2P + 14P/N; 16P/N for f16 and Adam), and constant buffers do not grow with the model.
#include "zero/partition/memory_model.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

namespace zrt {
namespace {

void make_model(int units, size_t unit_numel, std::vector<UnitSpec>* u, std::vector<ParamSpec>* p) {
  for (int i = 0; i < units; ++i) {
    u->push_back({"layer"});
    p->push_back({"w", unit_numel - 1000 - static_cast<size_t>(i % 3), i, 0});
    p->push_back({"b", 1000, i, 0});
  }
}

// The textbook formula in bytes per element, f16 params/grads, Adam.
double textbook(int stage, int n, double elements) {
  switch (stage) {
    case 0:
      return 16 * elements;
    case 1:
      return 4 * elements + 12 * elements / n;
    case 2:
      return 2 * elements + 14 * elements / n;
    default:
      return 16 * elements / n;
  }
}

TEST(PartitionMemoryModel, ModelStateIsTheFormulaPlusPaddingExactly) {
  std::vector<UnitSpec> units;
  std::vector<ParamSpec> params;
  make_model(7, 30011, &units, &params);
  for (int stage = 0; stage <= 3; ++stage) {
    for (int n : {1, 2, 3, 4, 8}) {
      PartitionOptions o;
      o.stage = stage;
      o.param_dtype = ZRT_F16;
      o.reduce_dtype = ZRT_F16;
      o.persistence_threshold = 0;
      o.bucket_bytes = 64 << 10;
      MemoryFigures f;
      ASSERT_TRUE(compute_memory_figures(o, n, units, params, &f).is_ok());
      SCOPED_TRACE(::testing::Message() << "stage " << stage << " N " << n);
      const double p = static_cast<double>(f.parameters);
      const double t = static_cast<double>(f.padded_parameters);
      EXPECT_DOUBLE_EQ(f.theoretical_model_state, textbook(stage, n, p));
      EXPECT_DOUBLE_EQ(static_cast<double>(f.model_state), textbook(stage, n, t));
      EXPECT_GE(t, p);
      // Padding: at most one granule per segment.
      const int shards = stage == 0 ? 1 : n;
      const size_t segments = stage == 3 ? 7 : (f.padded_parameters * 2 / (64 << 10) + 1);
      EXPECT_LT(t - p, static_cast<double>(segments * shards * o.alignment));
    }
  }
}

TEST(PartitionMemoryModel, GeneralisedToDtypesAndSlots) {
  std::vector<UnitSpec> units;
  std::vector<ParamSpec> params;
  make_model(3, 4096, &units, &params);
  PartitionOptions o;
  o.stage = 2;
  o.param_dtype = ZRT_BF16;
  o.reduce_dtype = ZRT_F32;
  o.optimizer_slots = 1;  // momentum SGD
  o.alignment = 1;
  MemoryFigures f;
  ASSERT_TRUE(compute_memory_figures(o, 4, units, params, &f).is_ok());
  const double p = static_cast<double>(f.parameters);
  EXPECT_DOUBLE_EQ(f.theoretical_model_state, 2 * p + (4 + 4 + 4) * p / 4);
  // Two bf16 windows of the largest unit (their copies into host buckets are deferred); the
  // reduced f32 shard is handed over as is.
  EXPECT_EQ(f.grad_staging, 4096u * 2 * 2);
}

// The full backup is one copy of master and state; the segment one (the default) a copy of the
// largest segment's slice of them, which does not grow with the model; neither is model state.
TEST(PartitionMemoryModel, StepBackupIsOneCopyOfMasterAndStateOutsideModelState) {
  std::vector<UnitSpec> units;
  std::vector<ParamSpec> params;
  make_model(3, 4096, &units, &params);
  for (int stage = 0; stage <= 3; ++stage) {
    PartitionOptions o;
    o.stage = stage;
    o.optimizer_slots = 2;
    o.bucket_bytes = 4096;  // several segments at every stage
    o.persistence_threshold = 0;
    MemoryFigures full, segment, none;
    o.step_backup = ZRT_STEP_BACKUP_FULL;
    ASSERT_TRUE(compute_memory_figures(o, 4, units, params, &full).is_ok());
    o.step_backup = ZRT_STEP_BACKUP_SEGMENT;
    ASSERT_TRUE(compute_memory_figures(o, 4, units, params, &segment).is_ok());
    o.step_backup = ZRT_STEP_BACKUP_NONE;
    ASSERT_TRUE(compute_memory_figures(o, 4, units, params, &none).is_ok());
    Layout layout;
    ASSERT_TRUE(Layout::build(o, 4, units, params, &layout).is_ok());
    size_t largest = 0;
    for (const Segment& seg : layout.segments()) largest = std::max(largest, seg.slice);
    SCOPED_TRACE(::testing::Message() << "stage " << stage);
    EXPECT_EQ(full.step_backup, full.master + full.optimizer_state);
    EXPECT_EQ(segment.step_backup, largest * 4 * 3);
    EXPECT_LT(segment.step_backup, full.step_backup);
    EXPECT_EQ(none.step_backup, 0u);
    EXPECT_EQ(full.model_state, none.model_state);
    EXPECT_EQ(segment.model_state, none.model_state);
    EXPECT_DOUBLE_EQ(full.theoretical_model_state, none.theoretical_model_state);
  }
}

// Stage 3 on host memory with the reduce dtype the param dtype: the units' segments are reduced
// out of the gradient windows, so no bucket but the persistent segment's; two windows by
// default, one when asked.
TEST(PartitionMemoryModel, Stage3ReducesOutOfTheWindowsWithoutBuckets) {
  std::vector<UnitSpec> units;
  std::vector<ParamSpec> params;
  make_model(4, 10240, &units, &params);
  PartitionOptions o;
  o.stage = 3;
  o.param_dtype = ZRT_BF16;
  o.reduce_dtype = ZRT_BF16;
  o.persistence_threshold = 0;
  Layout layout;
  ASSERT_TRUE(Layout::build(o, 4, units, params, &layout).is_ok());
  ASSERT_TRUE(windows_are_buckets(o, layout));
  BufferPlan plan = plan_buffers(o, layout);
  EXPECT_EQ(plan.bucket_count, 0);
  EXPECT_EQ(plan.grad_windows, 2);
  EXPECT_GE(plan.grad_window, layout.max_unit_segment_numel());
  o.grad_windows = 1;
  EXPECT_EQ(plan_buffers(o, layout).grad_windows, 1);
  // A reduce dtype other than the parameters' needs the conversion into a bucket.
  o.grad_windows = 0;
  o.reduce_dtype = ZRT_F32;
  EXPECT_FALSE(windows_are_buckets(o, layout));
  plan = plan_buffers(o, layout);
  EXPECT_EQ(plan.bucket_count, kBucketCount);
}

// offload_optimizer: master and state (and the backup, and the optimizer's f32 gradient) move
// to the host columns; the device keeps the rest, and the formula splits the same way. With
// f16 parameters and Adam: stage 1 4P | 12P/N, stage 2 2P + 2P/N | 12P/N, stage 3 4P/N | 12P/N.
TEST(PartitionMemoryModel, OffloadSplitsDeviceAndHostColumns) {
  std::vector<UnitSpec> units;
  std::vector<ParamSpec> params;
  for (int i = 0; i < 3; ++i) {  // every segment splits evenly over 4 ranks: no padding
    units.push_back({"layer"});
    params.push_back({"w", 4096, i, 0});
    params.push_back({"b", 1024, i, 0});
  }
  const double device_per_p[] = {0, 4, 2, 0};
  const double device_per_p_over_n[] = {0, 0, 2, 4};
  for (int stage = 1; stage <= 3; ++stage) {
    SCOPED_TRACE(::testing::Message() << "stage " << stage);
    PartitionOptions o;
    o.stage = stage;
    o.param_dtype = ZRT_F16;
    o.reduce_dtype = ZRT_F16;
    o.optimizer_slots = 2;
    o.persistence_threshold = 0;
    o.alignment = 1;
    MemoryFigures plain, off;
    ASSERT_TRUE(compute_memory_figures(o, 4, units, params, &plain).is_ok());
    o.offload_optimizer = true;
    ASSERT_TRUE(compute_memory_figures(o, 4, units, params, &off).is_ok());
    const double p = static_cast<double>(off.parameters);
    EXPECT_EQ(off.padded_parameters, off.parameters);
    EXPECT_DOUBLE_EQ(off.theoretical_host_model_state, 12 * p / 4);
    EXPECT_DOUBLE_EQ(off.theoretical_device_model_state,
                     device_per_p[stage] * p + device_per_p_over_n[stage] * p / 4);
    EXPECT_EQ(static_cast<double>(off.host_model_state), 12 * p / 4);
    EXPECT_EQ(static_cast<double>(off.device_model_state),
              device_per_p[stage] * p + device_per_p_over_n[stage] * p / 4);
    // The same model state, split; the host also holds the backup and the f32 gradient.
    EXPECT_EQ(off.model_state, plain.model_state);
    EXPECT_DOUBLE_EQ(off.theoretical_model_state, plain.theoretical_model_state);
    EXPECT_EQ(off.host_total, off.host_model_state + off.step_backup + off.master);
    EXPECT_EQ(off.device_total + off.host_total, off.total);
    EXPECT_EQ(plain.host_total, 0u);
    EXPECT_EQ(plain.device_total, plain.total);
    EXPECT_EQ(plain.device_model_state, plain.model_state);
  }
}

TEST(PartitionMemoryModel, ConstantBuffersDoNotGrowWithTheModel) {
  for (int stage = 0; stage <= 3; ++stage) {
    PartitionOptions o;
    o.stage = stage;
    o.param_dtype = ZRT_BF16;
    o.reduce_dtype = ZRT_F32;  // a 16-bit reduce dtype adds an f32 shard copy (model-sized)
    o.persistence_threshold = 0;
    o.bucket_bytes = 256 << 10;
    std::vector<UnitSpec> small_units, big_units;
    std::vector<ParamSpec> small_params, big_params;
    make_model(4, 100000, &small_units, &small_params);
    make_model(64, 100000, &big_units, &big_params);
    MemoryFigures small, big;
    ASSERT_TRUE(compute_memory_figures(o, 4, small_units, small_params, &small).is_ok());
    ASSERT_TRUE(compute_memory_figures(o, 4, big_units, big_params, &big).is_ok());
    SCOPED_TRACE(::testing::Message() << "stage " << stage);
    EXPECT_EQ(small.buckets, big.buckets);
    EXPECT_EQ(small.gather_window, big.gather_window);
    if (stage != 1) {
      EXPECT_EQ(small.grad_staging, big.grad_staging);
    }
    EXPECT_GT(big.model_state, 10 * small.model_state);
    if (stage == 2) {
      EXPECT_EQ(small.buckets, uint64_t{kBucketCount} * (256 << 10));
    }
    if (stage == 3) {
      EXPECT_EQ(small.gather_window, 2u * 100352 * 2);
    }
  }
}

TEST(PartitionMemoryModel, GatherWindowFollowsDepthAndLiveCap) {
  std::vector<UnitSpec> units;
  std::vector<ParamSpec> params;
  make_model(8, 10240, &units, &params);
  PartitionOptions o;
  o.stage = 3;
  o.persistence_threshold = 0;
  o.alignment = 1;
  o.prefetch_depth = 3;
  Layout layout;
  ASSERT_TRUE(Layout::build(o, 2, units, params, &layout).is_ok());
  EXPECT_EQ(window_slots(o, layout), 4);
  o.max_live_bytes = 2 * 10240 * 4;
  EXPECT_EQ(window_slots(o, layout), 2);
  o.max_live_bytes = 1;
  EXPECT_EQ(window_slots(o, layout), 1);
}

}  // namespace
}  // namespace zrt
