// Hybrid sharding (config.shard_group_size, docs/ARCHITECTURE.md#hybrid-sharding) on real ranks
// of one host: the parameters after several steps against flat sharding and the one-rank
// reference, the traffic split into the group's and the replicas' bytes against its formula,
// the memory against a flat manager on G ranks, and the errors for a bad group size.
//
// Tolerance: the group reduces its G ranks' gradients, then the groups average their shards, so
// the sums run in another order than flat sharding's ring over N: not bit-equal, but within
// f32 rounding of a few additions per element (1e-6 relative after three Adam steps, as the
// flat stages are held to against the reference).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tests/harness/multirank.h"
#include "tests/harness/rank_count.h"
#include "tests/partition/partition_test_model.h"
#include "zrt/zrt.h"

namespace zrt::testing {
namespace {

zrt_comm_t make_comm() {
  zrt_comm_t comm = nullptr;
  const zrt_status_t status = zrt_comm_init_env(nullptr, &comm);
  EXPECT_EQ(status, ZRT_SUCCESS) << zrt_last_error();
  return comm;
}

// Group sizes below N that divide it.
std::vector<int> hybrid_group_sizes(int size) {
  std::vector<int> sizes;
  for (int g = 1; g < size; ++g) {
    if (size % g == 0) sizes.push_back(g);
  }
  return sizes;
}

void equivalence_body(int /*rank*/, int size) {
  zrt_comm_t comm = make_comm();
  if (comm == nullptr) return;
  const MlpShape shape;
  const int steps = 3;
  const MlpParams reference = train_reference(shape, steps);
  for (int stage = 1; stage <= 3; ++stage) {
    for (int micro_batches : {1, 2}) {
      if ((shape.batch / size) % micro_batches != 0) continue;  // whole rows per micro-batch
      TrainOptions o;
      o.stage = stage;
      o.steps = steps;
      o.micro_batches = micro_batches;
      o.shard_group_size = size;
      SCOPED_TRACE(::testing::Message()
                   << "N " << size << " stage " << stage << " micro-batches " << micro_batches);
      const MlpParams flat = train_zrt(comm, shape, o);
      for (int g : hybrid_group_sizes(size)) {
        SCOPED_TRACE(::testing::Message() << "G " << g);
        o.shard_group_size = g;
        const MlpParams hybrid = train_zrt(comm, shape, o);
        EXPECT_LE(max_relative_difference(hybrid, flat), 1e-6);
        EXPECT_LE(max_relative_difference(hybrid, reference), 1e-6);
      }
    }
  }
  // Stage 3 with recomputation, persistent biases and the next step's gathers; stage 2 with
  // no-sync micro-batches and clipping by the global norm (the norm needs the replicas' sum).
  for (int g : hybrid_group_sizes(size)) {
    TrainOptions o;
    o.stage = 3;
    o.steps = steps;
    o.shard_group_size = g;
    o.recompute = true;
    o.persistence_threshold = 12;
    o.prefetch_next_step = true;
    SCOPED_TRACE(::testing::Message() << "N " << size << " G " << g << " stage 3 variants");
    EXPECT_LE(max_relative_difference(train_zrt(comm, shape, o), reference), 1e-6);
    if ((shape.batch / size) % 2 != 0) continue;
    TrainOptions c;
    c.stage = 2;
    c.steps = steps;
    c.micro_batches = 2;
    c.no_sync = true;
    c.clip_norm = 0.05;
    c.shard_group_size = size;
    const MlpParams flat = train_zrt(comm, shape, c);
    c.shard_group_size = g;
    SCOPED_TRACE("stage 2, no-sync micro-batches, clipped");
    EXPECT_LE(max_relative_difference(train_zrt(comm, shape, c), flat), 1e-6);
  }
  EXPECT_EQ(zrt_comm_destroy(comm), ZRT_SUCCESS) << zrt_last_error();
}

class PartitionHybridEquivalence : public RankCount {};
TEST_P(PartitionHybridEquivalence, HybridMatchesFlatSharding) {
  expect_ranks_pass(GetParam(), equivalence_body);
}
INSTANTIATE_TEST_SUITE_P(PartitionHybrid, PartitionHybridEquivalence, ::testing::Values(4, 8),
                         rank_count_name);

// One step's bytes per rank, Ppad the padded parameters (segments padded to G x alignment):
// inside the group (G-1)/G Ppad per reduce-scatter or all-gather of the whole model (stages 1/2
// one of each, stage 3 two gathers and one reduce-scatter); across the groups one ring
// all-reduce of the Ppad/G shard over R = N/G ranks, 2 (R-1)/R of it (R = 2: the shard). Nothing of
// the partition runs on the world's communicator but the step's votes (internal).
void traffic_body(int /*rank*/, int size) {
  zrt_comm_t comm = make_comm();
  if (comm == nullptr) return;
  const MlpShape shape;
  for (int g : hybrid_group_sizes(size)) {
    const uint64_t r = static_cast<uint64_t>(size / g);
    for (int stage = 1; stage <= 3; ++stage) {
      TrainOptions o;
      o.stage = stage;
      o.steps = 1;
      o.shard_group_size = g;
      TrainCounters counters;
      counters.attach(&o);
      const zrt_comm_stats_t& stats = counters.stats;
      const zrt_partition_memory_t& memory = counters.memory;
      const zrt_partition_traffic_t& traffic = counters.traffic;
      SCOPED_TRACE(::testing::Message() << "N " << size << " G " << g << " stage " << stage);
      train_zrt(comm, shape, o);
      const uint64_t e = sizeof(float);
      const uint64_t per_pass = memory.padded_parameters * (g - 1) / g * e;
      const uint64_t passes = stage == 3 ? 3 : 2;
      const uint64_t shard = memory.padded_parameters / g * e;
      EXPECT_EQ(memory.padded_parameters % (static_cast<uint64_t>(g) * 4), 0u);
      EXPECT_EQ(traffic.shard_group_size, g);
      EXPECT_EQ(traffic.replica_groups, static_cast<int>(r));
      EXPECT_EQ(traffic.intra_group_bytes, passes * per_pass);
      if (r == 2) {
        // Two groups: every all-reduce algorithm sends the shard once.
        EXPECT_EQ(traffic.inter_group_bytes, 2 * (r - 1) * shard / r);
      } else {
        // More: the algorithm ZRT_ALGO picks by size (recursive doubling sends log2 R shards),
        // the ring's 2 (R-1)/R the least.
        EXPECT_GE(traffic.inter_group_bytes, 2 * (r - 1) * shard / r);
      }
      EXPECT_EQ(stats.user.bytes_sent, 0u);
    }
  }
  EXPECT_EQ(zrt_comm_destroy(comm), ZRT_SUCCESS) << zrt_last_error();
}

class PartitionHybridTraffic : public RankCount {};
TEST_P(PartitionHybridTraffic, TrafficSplitIsTheFormula) {
  expect_ranks_pass(GetParam(), traffic_body);
}
INSTANTIATE_TEST_SUITE_P(PartitionHybrid, PartitionHybridTraffic, ::testing::Values(4),
                         rank_count_name);

// Memory per rank is the stage's with N -> G: a hybrid manager on N ranks holds exactly what a
// flat one on a communicator of G ranks holds.
void memory_body(int rank, int size) {
  zrt_comm_t comm = make_comm();
  if (comm == nullptr) return;
  const int g = size / 2;
  zrt_comm_t half = nullptr;
  ASSERT_EQ(zrt_comm_split(comm, rank / g, rank, nullptr, &half), ZRT_SUCCESS) << zrt_last_error();
  const MlpShape shape;
  for (int stage = 1; stage <= 3; ++stage) {
    SCOPED_TRACE(::testing::Message() << "N " << size << " G " << g << " stage " << stage);
    zrt_partition_memory_t hybrid{}, flat{};
    hybrid.size = flat.size = sizeof(zrt_partition_memory_t);
    TrainOptions o;
    o.stage = stage;
    o.steps = 1;
    o.shard_group_size = g;
    o.memory = &hybrid;
    train_zrt(comm, shape, o);
    o.shard_group_size = 0;  // flat: all of `half`
    o.memory = &flat;
    train_zrt(half, shape, o);
    EXPECT_EQ(hybrid.full_params, flat.full_params);
    EXPECT_EQ(hybrid.param_shard, flat.param_shard);
    EXPECT_EQ(hybrid.gradients, flat.gradients);
    EXPECT_EQ(hybrid.grad_shard, flat.grad_shard);
    EXPECT_EQ(hybrid.master, flat.master);
    EXPECT_EQ(hybrid.optimizer_state, flat.optimizer_state);
    EXPECT_EQ(hybrid.model_state, flat.model_state);
    EXPECT_EQ(hybrid.padded_parameters, flat.padded_parameters);
    EXPECT_DOUBLE_EQ(hybrid.theoretical_model_state, flat.theoretical_model_state);
  }
  EXPECT_EQ(zrt_comm_destroy(half), ZRT_SUCCESS) << zrt_last_error();
  EXPECT_EQ(zrt_comm_destroy(comm), ZRT_SUCCESS) << zrt_last_error();
}

TEST(PartitionHybrid, MemoryIsTheStageFormulaOnGRanksN4) {
  expect_ranks_pass(4, memory_body);
}

// A bad group size fails on every rank with a message naming the field; nothing is split.
void bad_group_body(int /*rank*/, int size) {
  zrt_comm_t comm = make_comm();
  if (comm == nullptr) return;
  auto error_of = [&](int stage, int g, bool at_create) -> std::string {
    zrt_partition_config_t config = ZRT_PARTITION_CONFIG_INIT;
    config.stage = stage;
    config.shard_group_size = g;
    return refused_config_message(comm, config, at_create);
  };
  for (const std::string& message : {error_of(2, size - 1, false), error_of(3, 2 * size, false),
                                     error_of(0, 2, true), error_of(1, -2, true)}) {
    EXPECT_NE(message.find("config.shard_group_size"), std::string::npos) << message;
  }
  EXPECT_NE(error_of(2, 3, false).find("divide"), std::string::npos);
  // The manager still works afterwards: nothing was left half split.
  TrainOptions o;
  o.stage = 2;
  o.steps = 1;
  o.shard_group_size = size / 2;
  train_zrt(comm, MlpShape{}, o);
  EXPECT_EQ(zrt_comm_destroy(comm), ZRT_SUCCESS) << zrt_last_error();
}

TEST(PartitionHybrid, BadGroupSizeNamesTheFieldN4) {
  expect_ranks_pass(4, bad_group_body);
}

// Checkpoints are refused for hybrid managers, naming the field and what to set.
void checkpoint_body(int /*rank*/, int size) {
  zrt_comm_t comm = make_comm();
  if (comm == nullptr) return;
  zrt_partition_config_t config = ZRT_PARTITION_CONFIG_INIT;
  config.shard_group_size = size / 2;
  zrt_partition_t pm = nullptr;
  ASSERT_EQ(zrt_partition_create(comm, &config, &pm), ZRT_SUCCESS) << zrt_last_error();
  int unit = -1, param = -1;
  EXPECT_EQ(zrt_partition_add_unit(pm, "layer", &unit), ZRT_SUCCESS);
  EXPECT_EQ(zrt_partition_add_param(pm, unit, "w", 1000, 0, &param), ZRT_SUCCESS);
  EXPECT_EQ(zrt_partition_finalize(pm), ZRT_SUCCESS) << zrt_last_error();
  EXPECT_EQ(zrt_partition_save(pm, "/nonexistent-hybrid-ckpt"), ZRT_UNSUPPORTED);
  EXPECT_NE(std::string(zrt_last_error()).find("shard_group_size"), std::string::npos)
      << zrt_last_error();
  EXPECT_EQ(zrt_partition_destroy(pm), ZRT_SUCCESS) << zrt_last_error();
  EXPECT_EQ(zrt_comm_destroy(comm), ZRT_SUCCESS) << zrt_last_error();
}

TEST(PartitionHybrid, CheckpointsAreRefusedN4) {
  expect_ranks_pass(4, checkpoint_body);
}

}  // namespace
}  // namespace zrt::testing
