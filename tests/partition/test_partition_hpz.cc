// hpZ (config.hpz_group_size, docs/ARCHITECTURE.md#hpz-secondary-parameter-copy) on real ranks
// of one host: parameters after several steps bit-equal to flat stage 3 (an all-gather only
// copies, whichever ranks it runs over), the traffic split into the secondary group's and the
// world's bytes against its formula, the memory against flat stage 3 plus the secondary copy,
// and the errors for a bad group size or combination.
#include <gtest/gtest.h>

#include <cstring>
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

// Every H dividing N, the degenerate 1 (each rank keeps whole units) and N (the copy is the
// shard again) included.
std::vector<int> hpz_group_sizes(int size) {
  std::vector<int> sizes;
  for (int h = 1; h <= size; ++h) {
    if (size % h == 0) sizes.push_back(h);
  }
  return sizes;
}

// The same bits, tensor by tensor.
void expect_bit_equal(const MlpParams& a, const MlpParams& b) {
  ASSERT_EQ(a.tensors.size(), b.tensors.size());
  for (size_t t = 0; t < a.tensors.size(); ++t) {
    ASSERT_EQ(a.tensors[t].size(), b.tensors[t].size());
    EXPECT_EQ(
        std::memcmp(a.tensors[t].data(), b.tensors[t].data(), a.tensors[t].size() * sizeof(float)),
        0)
        << "tensor " << t << " differs (max relative difference " << max_relative_difference(a, b)
        << ")";
  }
}

void equivalence_body(int /*rank*/, int size) {
  zrt_comm_t comm = make_comm();
  if (comm == nullptr) return;
  const MlpShape shape;
  std::vector<TrainOptions> variants;
  for (int micro_batches : {1, 2}) {
    TrainOptions o;
    o.stage = 3;
    o.steps = 3;
    o.micro_batches = micro_batches;
    variants.push_back(o);
  }
  {
    // 16-bit parameters, persistent biases, recomputation, the next step's gathers, a deeper
    // window: every path a gather takes.
    TrainOptions o;
    o.stage = 3;
    o.steps = 3;
    o.micro_batches = 2;
    o.param_dtype = ZRT_F16;
    o.persistence_threshold = 12;
    o.recompute = true;
    o.prefetch_next_step = true;
    o.prefetch_depth = 2;
    variants.push_back(o);
  }
  {
    TrainOptions o;
    o.stage = 3;
    o.steps = 3;
    o.offload_optimizer = true;
    o.clip_norm = 0.05;
    variants.push_back(o);
  }
  for (size_t v = 0; v < variants.size(); ++v) {
    TrainOptions o = variants[v];
    if ((shape.batch / size) % o.micro_batches != 0) continue;
    SCOPED_TRACE(::testing::Message() << "N " << size << " variant " << v);
    const MlpParams flat = train_zrt(comm, shape, o);
    for (int h : hpz_group_sizes(size)) {
      SCOPED_TRACE(::testing::Message() << "H " << h);
      o.hpz_group_size = h;
      expect_bit_equal(train_zrt(comm, shape, o), flat);
    }
  }
  EXPECT_EQ(zrt_comm_destroy(comm), ZRT_SUCCESS) << zrt_last_error();
}

class PartitionHpzEquivalence : public RankCount {};
TEST_P(PartitionHpzEquivalence, HpzIsBitEqualToFlatStage3) {
  expect_ranks_pass(GetParam(), equivalence_body);
}
INSTANTIATE_TEST_SUITE_P(PartitionHpz, PartitionHpzEquivalence, ::testing::Values(2, 4),
                         rank_count_name);

// Bytes per rank over S steps of k micro-batches, Ppad the padded parameters (no persistent
// segment here), f32 parameters and gradients, e = 4 bytes:
//   across the groups (everything over the N ranks): per step one gather of every unit from the
//     flat shard (the first forward) and k reduce-scatters, (N-1)/N Ppad e each;
//   inside the group (the secondary copy): every other gather, k backward passes and k - 1
//     further forwards, (H-1)/H Ppad e each.
// The second step gathers over the world again: its step marked the copy stale.
void traffic_body(int /*rank*/, int size) {
  zrt_comm_t comm = make_comm();
  if (comm == nullptr) return;
  const MlpShape shape;
  const uint64_t n = static_cast<uint64_t>(size);
  for (int h : hpz_group_sizes(size)) {
    for (int micro_batches : {1, 2}) {
      TrainOptions o;
      o.stage = 3;
      o.steps = 2;
      o.micro_batches = micro_batches;
      o.hpz_group_size = h;
      TrainCounters counters;
      counters.attach(&o);
      const zrt_comm_stats_t& stats = counters.stats;
      const zrt_partition_memory_t& memory = counters.memory;
      const zrt_partition_traffic_t& traffic = counters.traffic;
      SCOPED_TRACE(::testing::Message()
                   << "N " << size << " H " << h << " micro-batches " << micro_batches);
      train_zrt(comm, shape, o);
      const uint64_t e = sizeof(float);
      const uint64_t ppad = memory.padded_parameters;
      const uint64_t k = static_cast<uint64_t>(micro_batches);
      const uint64_t steps = static_cast<uint64_t>(o.steps);
      const uint64_t world_pass = ppad * (n - 1) / n * e;
      const uint64_t group_pass = ppad * (h - 1) / h * e;
      EXPECT_EQ(ppad % (n * 4), 0u);
      EXPECT_EQ(traffic.shard_group_size, h);
      EXPECT_EQ(traffic.replica_groups, size / h);
      EXPECT_EQ(traffic.inter_group_bytes, steps * (1 + k) * world_pass);
      EXPECT_EQ(traffic.intra_group_bytes, steps * (2 * k - 1) * group_pass);
      // Flat stage 3 sends 3 passes per micro-batch over the world; hpZ keeps one gather.
      EXPECT_EQ(stats.user.bytes_sent, traffic.inter_group_bytes);
    }
  }
  EXPECT_EQ(zrt_comm_destroy(comm), ZRT_SUCCESS) << zrt_last_error();
}

TEST(PartitionHpz, TrafficSplitIsTheFormulaN4) {
  expect_ranks_pass(4, traffic_body);
}

// Memory per rank is flat stage 3's plus the secondary copy: 1/H of every unit segment (padded;
// the persistent segment stays gathered), in param dtype, counted as model state.
void memory_body(int /*rank*/, int size) {
  zrt_comm_t comm = make_comm();
  if (comm == nullptr) return;
  const MlpShape shape;
  const size_t threshold = 12;
  const MlpParams init = mlp_init(shape, 7);
  uint64_t persistent = 0;
  uint64_t trainable = 0;
  for (const std::vector<float>& tensor : init.tensors) {
    trainable += tensor.size();
    if (tensor.size() < threshold) persistent += tensor.size();
  }
  ASSERT_GT(persistent, 0u);
  const uint64_t p = 2;  // f16
  for (int h : hpz_group_sizes(size)) {
    SCOPED_TRACE(::testing::Message() << "N " << size << " H " << h);
    zrt_partition_memory_t hpz{}, flat{};
    hpz.size = flat.size = sizeof(zrt_partition_memory_t);
    TrainOptions o;
    o.stage = 3;
    o.steps = 1;
    o.param_dtype = ZRT_F16;
    o.persistence_threshold = threshold;
    o.memory = &flat;
    train_zrt(comm, shape, o);
    o.hpz_group_size = h;
    o.memory = &hpz;
    train_zrt(comm, shape, o);
    // The persistent segment, padded: full_params holds it and nothing else (no frozen).
    const uint64_t persistent_padded = flat.full_params / p;
    const uint64_t units_padded = flat.padded_parameters - persistent_padded;
    EXPECT_EQ(units_padded % static_cast<uint64_t>(size), 0u);
    EXPECT_EQ(flat.param_secondary, 0u);
    EXPECT_EQ(hpz.param_secondary, units_padded / static_cast<uint64_t>(h) * p);
    EXPECT_EQ(hpz.full_params, flat.full_params);
    EXPECT_EQ(hpz.param_shard, flat.param_shard);
    EXPECT_EQ(hpz.gradients, flat.gradients);
    EXPECT_EQ(hpz.grad_shard, flat.grad_shard);
    EXPECT_EQ(hpz.master, flat.master);
    EXPECT_EQ(hpz.optimizer_state, flat.optimizer_state);
    EXPECT_EQ(hpz.buckets, flat.buckets);
    EXPECT_EQ(hpz.gather_window, flat.gather_window);
    EXPECT_EQ(hpz.grad_staging, flat.grad_staging);
    EXPECT_EQ(hpz.step_backup, flat.step_backup);
    EXPECT_EQ(hpz.padded_parameters, flat.padded_parameters);
    EXPECT_EQ(hpz.model_state, flat.model_state + hpz.param_secondary);
    EXPECT_EQ(hpz.total, flat.total + hpz.param_secondary);
    EXPECT_DOUBLE_EQ(
        hpz.theoretical_model_state,
        flat.theoretical_model_state + static_cast<double>((trainable - persistent) * p) / h);
  }
  EXPECT_EQ(zrt_comm_destroy(comm), ZRT_SUCCESS) << zrt_last_error();
}

TEST(PartitionHpz, MemoryIsStage3PlusTheSecondaryCopyN4) {
  expect_ranks_pass(4, memory_body);
}

// Bad values fail on every rank naming the field; nothing is left split.
void bad_input_body(int /*rank*/, int size) {
  zrt_comm_t comm = make_comm();
  if (comm == nullptr) return;
  auto error_of = [&](int stage, int hpz, int shard_group, bool at_create) -> std::string {
    zrt_partition_config_t config = ZRT_PARTITION_CONFIG_INIT;
    config.stage = stage;
    config.hpz_group_size = hpz;
    config.shard_group_size = shard_group;
    return refused_config_message(comm, config, at_create);
  };
  for (int stage : {0, 1, 2}) {
    const std::string message = error_of(stage, 2, 0, true);
    EXPECT_NE(message.find("config.hpz_group_size"), std::string::npos) << message;
    EXPECT_NE(message.find("stage 3"), std::string::npos) << message;
  }
  for (const std::string& message : {error_of(3, -2, 0, true), error_of(3, size - 1, 0, false),
                                     error_of(3, 2 * size, 0, false)}) {
    EXPECT_NE(message.find("config.hpz_group_size"), std::string::npos) << message;
  }
  EXPECT_NE(error_of(3, size - 1, 0, false).find("divide"), std::string::npos);
  const std::string both = error_of(3, 2, size / 2, false);
  EXPECT_NE(both.find("config.shard_group_size"), std::string::npos) << both;
  EXPECT_NE(both.find("config.hpz_group_size"), std::string::npos) << both;
  // The manager still works afterwards.
  TrainOptions o;
  o.stage = 3;
  o.steps = 1;
  o.hpz_group_size = size / 2;
  train_zrt(comm, MlpShape{}, o);
  EXPECT_EQ(zrt_comm_destroy(comm), ZRT_SUCCESS) << zrt_last_error();
}

TEST(PartitionHpz, BadGroupSizeNamesTheFieldN4) {
  expect_ranks_pass(4, bad_input_body);
}

}  // namespace
}  // namespace zrt::testing
