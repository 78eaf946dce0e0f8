// The partition managers on real ranks over UCX: equivalence of every stage with a single-rank
// reference, exact traffic per step, measured memory against the ZeRO formula, and the stage 3
// prefetch window. Each rank count runs many configurations inside one fork.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
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

void equivalence_body(int /*rank*/, int size) {
  zrt_comm_t comm = make_comm();
  if (comm == nullptr) return;
  const MlpShape shape;
  const int steps = 3;
  const MlpParams reference = train_reference(shape, steps);
  struct Accumulation {
    int micro_batches;
    bool no_sync;
  };
  for (Accumulation acc : {Accumulation{1, false}, Accumulation{2, false}, Accumulation{2, true}}) {
    MlpParams stage0;
    for (int stage = 0; stage <= 3; ++stage) {
      for (int depth : {0, 1, 2}) {
        if (stage != 3 && depth != 1) continue;  // prefetching is a stage 3 matter
        for (bool recompute : {false, true}) {
          TrainOptions o;
          o.stage = stage;
          o.steps = steps;
          o.micro_batches = acc.micro_batches;
          o.no_sync = acc.no_sync;
          o.prefetch_depth = depth;
          o.recompute = recompute;
          SCOPED_TRACE(::testing::Message()
                       << "N " << size << " stage " << stage << " micro-batches "
                       << acc.micro_batches << (acc.no_sync ? " no-sync" : " sync") << " depth "
                       << depth << (recompute ? " recompute" : ""));
          const MlpParams got = train_zrt(comm, shape, o);
          if (::testing::Test::HasFailure()) break;
          EXPECT_LE(max_relative_difference(got, reference), 1e-6);
          if (stage == 0 && !recompute) stage0 = got;
          if (stage > 0) {
            EXPECT_LE(max_relative_difference(got, stage0), 1e-6);
          }
        }
      }
    }
  }
  // Stage 3 with small parameters kept gathered (the biases), and with each step gathering the
  // next forward's first units, with and without recomputation.
  for (bool recompute : {false, true}) {
    TrainOptions o;
    o.stage = 3;
    o.steps = steps;
    o.recompute = recompute;
    o.persistence_threshold = 12;
    SCOPED_TRACE(::testing::Message() << "N " << size << " stage 3 persistent biases");
    EXPECT_LE(max_relative_difference(train_zrt(comm, shape, o), reference), 1e-6);
    o.persistence_threshold = 0;
    o.prefetch_depth = 2;
    o.prefetch_next_step = true;
    SCOPED_TRACE("prefetch_next_step, depth 2, no persistent parameters");
    EXPECT_LE(max_relative_difference(train_zrt(comm, shape, o), reference), 1e-6);
  }
  // Mixed precision: 16-bit parameters and gradients, f32 or 16-bit reduction, f32 master.
  // Compared with the f32 reference at 16-bit resolution.
  for (zrt_dtype_t param : {ZRT_BF16, ZRT_F16}) {
    for (zrt_dtype_t reduce : {ZRT_F32, param}) {
      for (int stage = 0; stage <= 3; ++stage) {
        TrainOptions o;
        o.stage = stage;
        o.steps = steps;
        o.param_dtype = param;
        o.reduce_dtype = reduce;
        SCOPED_TRACE(::testing::Message() << "N " << size << " stage " << stage << " param dtype "
                                          << param << " reduce dtype " << reduce);
        EXPECT_LE(max_relative_difference(train_zrt(comm, shape, o), reference),
                  param == ZRT_BF16 ? 2e-2 : 3e-3);
      }
    }
  }
  EXPECT_EQ(zrt_comm_destroy(comm), ZRT_SUCCESS) << zrt_last_error();
}

class PartitionEquivalence : public RankCount {};
TEST_P(PartitionEquivalence, EveryStageMatchesTheReference) {
  expect_ranks_pass(GetParam(), equivalence_body);
}
INSTANTIATE_TEST_SUITE_P(PartitionMultirank, PartitionEquivalence, ::testing::Values(1, 2, 3, 4),
                         rank_count_name);

// Bytes each rank sends in one step: P(N-1)/N elements per reduce-scatter or all-gather of the
// whole (padded) model; stages 1/2 do one of each, stage 3 two gathers and one reduce-scatter,
// plus one gather per recomputed unit; and the step's two tiny votes (internal all-reduces).
void traffic_body(int /*rank*/, int size) {
  zrt_comm_t comm = make_comm();
  if (comm == nullptr) return;
  const MlpShape shape;
  for (int stage = 1; stage <= 3; ++stage) {
    for (bool recompute : {false, true}) {
      if (stage != 3 && recompute) continue;
      TrainOptions o;
      o.stage = stage;
      o.steps = 1;
      o.recompute = recompute;
      zrt_comm_stats_t stats{};
      stats.size = sizeof(stats);
      zrt_partition_memory_t memory{};
      memory.size = sizeof(memory);
      o.stats = &stats;
      o.memory = &memory;
      SCOPED_TRACE(::testing::Message()
                   << "N " << size << " stage " << stage << (recompute ? " recompute" : ""));
      train_zrt(comm, shape, o);
      const uint64_t per_pass = memory.padded_parameters * (size - 1) / size * sizeof(float);
      const uint64_t gathers = stage == 3 ? (recompute ? 3 : 2) : 1;
      EXPECT_EQ(stats.per_kind[ZRT_COLL_REDUCE_SCATTER].user.bytes_sent, per_pass);
      EXPECT_EQ(stats.per_kind[ZRT_COLL_ALL_GATHER].user.bytes_sent, gathers * per_pass);
      // The step's two votes (all-or-nothing, step_transaction.h) are all-reduces (max) of
      // N int32 each: internal traffic, counted apart from the ZeRO traffic, and independent of
      // the model size.
      const uint64_t votes = stats.per_kind[ZRT_COLL_ALL_REDUCE].internal.bytes_sent;
      EXPECT_GT(votes, 0u);
      EXPECT_LE(votes, 2u * 2 * size * size * sizeof(int32_t));
      EXPECT_EQ(stats.user.bytes_sent, (gathers + 1) * per_pass);
      EXPECT_EQ(stats.user.bytes_sent + stats.internal.bytes_sent,
                (gathers + 1) * per_pass + votes);
    }
  }
  EXPECT_EQ(zrt_comm_destroy(comm), ZRT_SUCCESS) << zrt_last_error();
}

class PartitionTraffic : public RankCount {};
TEST_P(PartitionTraffic, TrafficPerStepIsExact) {
  expect_ranks_pass(GetParam(), traffic_body);
}
INSTANTIATE_TEST_SUITE_P(PartitionMultirank, PartitionTraffic, ::testing::Values(2, 3),
                         rank_count_name);

// Measured memory: f16 parameters and gradients with Adam, two models of very different size.
void memory_body(int /*rank*/, int size) {
  zrt_comm_t comm = make_comm();
  if (comm == nullptr) return;
  for (int stage = 0; stage <= 3; ++stage) {
    zrt_partition_memory_t figures[2];
    for (int model = 0; model < 2; ++model) {
      zrt_partition_config_t config = ZRT_PARTITION_CONFIG_INIT;
      config.stage = stage;
      config.param_dtype = ZRT_F16;
      config.reduce_dtype = ZRT_F16;
      config.bucket_bytes = 64 << 10;
      config.persistence_threshold = 0;
      zrt_partition_t pm = nullptr;
      ASSERT_EQ(zrt_partition_create(comm, &config, &pm), ZRT_SUCCESS) << zrt_last_error();
      const int units = model == 0 ? 3 : 40;
      for (int u = 0; u < units; ++u) {
        int unit = 0, param = 0;
        ASSERT_EQ(zrt_partition_add_unit(pm, "block", &unit), ZRT_SUCCESS);
        ASSERT_EQ(zrt_partition_add_param(pm, unit, "w", 20011 + u % 5, 0, &param), ZRT_SUCCESS);
        ASSERT_EQ(zrt_partition_add_param(pm, unit, "b", 97, 0, &param), ZRT_SUCCESS);
      }
      ASSERT_EQ(zrt_partition_finalize(pm), ZRT_SUCCESS) << zrt_last_error();
      zrt_partition_memory_t& m = figures[model];
      m.size = sizeof(m);
      ASSERT_EQ(zrt_partition_memory(pm, &m), ZRT_SUCCESS) << zrt_last_error();
      const double n = size, p = static_cast<double>(m.parameters);
      const double t = static_cast<double>(m.padded_parameters);
      auto formula = [&](double e) {
        switch (stage) {
          case 0:
            return 16 * e;
          case 1:
            return 4 * e + 12 * e / n;
          case 2:
            return 2 * e + 14 * e / n;
          default:
            return 16 * e / n;
        }
      };
      SCOPED_TRACE(::testing::Message()
                   << "N " << size << " stage " << stage << " model " << model);
      EXPECT_DOUBLE_EQ(m.theoretical_model_state, formula(p));
      EXPECT_DOUBLE_EQ(static_cast<double>(m.model_state), formula(t)) << "formula + padding";
      EXPECT_EQ(m.model_state, m.full_params + m.param_shard + m.gradients + m.grad_shard +
                                   m.master + m.optimizer_state);
      if (size == 2 && model == 1) {
        std::printf(
            "memory N=%d stage %d: model state %llu bytes, formula %.0f, padding %.0f "
            "elements, buckets %llu, window %llu, staging %llu\n",
            size, stage, static_cast<unsigned long long>(m.model_state), m.theoretical_model_state,
            t - p, static_cast<unsigned long long>(m.buckets),
            static_cast<unsigned long long>(m.gather_window),
            static_cast<unsigned long long>(m.grad_staging));
      }
      EXPECT_EQ(zrt_partition_destroy(pm), ZRT_SUCCESS) << zrt_last_error();
    }
    EXPECT_EQ(figures[0].buckets, figures[1].buckets) << "stage " << stage;
    EXPECT_EQ(figures[0].gather_window, figures[1].gather_window) << "stage " << stage;
    EXPECT_GT(figures[1].model_state, 10 * figures[0].model_state);
  }
  EXPECT_EQ(zrt_comm_destroy(comm), ZRT_SUCCESS) << zrt_last_error();
}

class PartitionMemory : public RankCount {};
TEST_P(PartitionMemory, MeasuredMemoryIsTheFormulaPlusPadding) {
  expect_ranks_pass(GetParam(), memory_body);
}
INSTANTIATE_TEST_SUITE_P(PartitionMultirank, PartitionMemory, ::testing::Values(2, 3),
                         rank_count_name);

// Stage 3 window: units of different sizes, depth d; never more than d + 1 units gathered,
// never more bytes than max_live_bytes, and prefetching does happen.
void window_body(int /*rank*/, int /*size*/) {
  zrt_comm_t comm = make_comm();
  if (comm == nullptr) return;
  const std::vector<size_t> sizes = {1000, 3000, 500, 2500, 4000, 800, 1200, 3500};
  for (int depth : {0, 1, 2, 3}) {
    zrt_partition_config_t config = ZRT_PARTITION_CONFIG_INIT;
    config.stage = 3;
    config.prefetch_depth = depth;
    config.persistence_threshold = 0;
    config.max_live_bytes = 3 * 4096 * 4;  // at most three of the largest units
    zrt_partition_t pm = nullptr;
    ASSERT_EQ(zrt_partition_create(comm, &config, &pm), ZRT_SUCCESS) << zrt_last_error();
    std::vector<int> params;
    for (size_t u = 0; u < sizes.size(); ++u) {
      int unit = 0, param = 0;
      ASSERT_EQ(zrt_partition_add_unit(pm, "u", &unit), ZRT_SUCCESS);
      ASSERT_EQ(zrt_partition_add_param(pm, unit, "w", sizes[u], 0, &param), ZRT_SUCCESS);
      params.push_back(param);
    }
    ASSERT_EQ(zrt_partition_finalize(pm), ZRT_SUCCESS) << zrt_last_error();
    for (size_t u = 0; u < sizes.size(); ++u) {
      std::vector<float> values(sizes[u], static_cast<float>(u + 1));
      ASSERT_EQ(zrt_partition_load_param(pm, params[u], values.data(), ZRT_F32), ZRT_SUCCESS);
    }
    const int units = static_cast<int>(sizes.size());
    auto check_unit = [&](int u) {
      void* data = nullptr;
      ASSERT_EQ(zrt_partition_param_data(pm, params[u], &data), ZRT_SUCCESS) << zrt_last_error();
      const float* f = static_cast<const float*>(data);
      EXPECT_EQ(f[0], static_cast<float>(u + 1));
      EXPECT_EQ(f[sizes[u] - 1], static_cast<float>(u + 1));
    };
    zrt_optimizer_fn keep = [](const zrt_optimizer_args_t*, void*) { return ZRT_SUCCESS; };
    for (int step = 0; step < 3; ++step) {
      for (int u = 0; u < units; ++u) {
        ASSERT_EQ(zrt_partition_fetch(pm, u), ZRT_SUCCESS) << zrt_last_error();
        check_unit(u);
        ASSERT_EQ(zrt_partition_release(pm, u), ZRT_SUCCESS);
      }
      // Step 2 fetches backward in a different order: the recording is dropped, data stays
      // right.
      for (int i = units - 1; i >= 0; --i) {
        const int u = step == 2 ? (i + 3) % units : i;
        ASSERT_EQ(zrt_partition_fetch(pm, u), ZRT_SUCCESS) << zrt_last_error();
        check_unit(u);
        void* grad = nullptr;
        ASSERT_EQ(zrt_partition_grad_data(pm, params[u], &grad), ZRT_SUCCESS);
        std::fill_n(static_cast<float*>(grad), sizes[u], 0.0f);
        ASSERT_EQ(zrt_partition_grad_ready(pm, u), ZRT_SUCCESS) << zrt_last_error();
        ASSERT_EQ(zrt_partition_release(pm, u), ZRT_SUCCESS);
      }
      ASSERT_EQ(zrt_partition_step(pm, keep, nullptr), ZRT_SUCCESS) << zrt_last_error();
    }
    zrt_partition_stats_t stats{};
    stats.size = sizeof(stats);
    ASSERT_EQ(zrt_partition_stats(pm, &stats), ZRT_SUCCESS);
    SCOPED_TRACE(::testing::Message() << "depth " << depth);
    EXPECT_LE(stats.max_gathered_units, depth + 1);
    EXPECT_LE(stats.max_gathered_bytes, config.max_live_bytes);
    EXPECT_EQ(stats.fetches, 3u * 2 * units);
    if (depth > 0) {
      EXPECT_GT(stats.prefetches, 0u);
      EXPECT_GT(stats.prefetch_hits, 0u);
    } else {
      EXPECT_EQ(stats.prefetches, 0u);
    }
    EXPECT_EQ(stats.order_recorded, 1);
    EXPECT_EQ(stats.order_invalidated, 1);
    EXPECT_EQ(zrt_partition_destroy(pm), ZRT_SUCCESS) << zrt_last_error();
  }
  EXPECT_EQ(zrt_comm_destroy(comm), ZRT_SUCCESS) << zrt_last_error();
}

TEST(PartitionMultirank, PrefetchWindowStaysWithinDepthAndBudgetN2) {
  expect_ranks_pass(2, window_body);
}

// Gradient windows read in place. Units of 768 Ki elements (a multiple of N x 128 for N = 2, 3)
// and buckets of one unit: every
// segment lies whole in its unit's gradient window, so its first reduction after a step reads
// the window itself, while the framework, as soon as grad_data hands the next window out, fills
// it. Each unit's gradient is a value of its own per rank, so a window overwritten before its
// reduction had read it shows in the reduced shard; a second micro-batch (reduced into the
// shard, not straight from the window) and a few steps are checked too, every element.
void window_reuse_body(int rank, int size) {
  zrt_comm_t comm = make_comm();
  if (comm == nullptr) return;
  constexpr size_t kNumel = size_t{3} << 18;
  constexpr int kUnits = 6;
  for (int stage : {2, 3}) {
    for (int micro_batches : {1, 2}) {
      SCOPED_TRACE(::testing::Message()
                   << "stage " << stage << ", " << micro_batches << " micro-batch(es)");
      zrt_partition_config_t config = ZRT_PARTITION_CONFIG_INIT;
      config.stage = stage;
      config.optimizer_slots = 0;
      config.persistence_threshold = 0;
      config.bucket_bytes = kNumel * sizeof(float);
      zrt_partition_t pm = nullptr;
      ASSERT_EQ(zrt_partition_create(comm, &config, &pm), ZRT_SUCCESS) << zrt_last_error();
      std::vector<int> params;
      for (int u = 0; u < kUnits; ++u) {
        int unit = 0, param = 0;
        ASSERT_EQ(zrt_partition_add_unit(pm, "u", &unit), ZRT_SUCCESS);
        ASSERT_EQ(zrt_partition_add_param(pm, unit, "w", kNumel, 0, &param), ZRT_SUCCESS);
        params.push_back(param);
      }
      ASSERT_EQ(zrt_partition_finalize(pm), ZRT_SUCCESS) << zrt_last_error();
      // Rank r writes g(u, r, step) = (u + 1) * (r + 1) + step * 100: the average over ranks
      // is (u + 1) * (N + 1) / 2 + step * 100, times the micro-batch count.
      struct Expect {
        std::vector<int> params;
        int size, micro_batches, step, wrong;
      } expect{params, size, micro_batches, 0, 0};
      zrt_optimizer_fn check = [](const zrt_optimizer_args_t* args, void* user) {
        auto* e = static_cast<Expect*>(user);
        for (size_t i = 0; i < args->num_pieces; ++i) {
          const zrt_shard_piece_t& piece = args->pieces[i];
          const float want = static_cast<float>(
              e->micro_batches * ((piece.param + 1) * (e->size + 1) / 2.0 + e->step * 100));
          for (size_t k = 0; k < piece.count; ++k) {
            if (std::fabs(args->grad[piece.shard_offset + k] - want) > 1e-6f * want) ++e->wrong;
          }
        }
        return ZRT_SUCCESS;
      };
      for (int step = 0; step < 3; ++step) {
        for (int mb = 0; mb < micro_batches; ++mb) {
          for (int u = 0; u < kUnits; ++u) {
            ASSERT_EQ(zrt_partition_fetch(pm, u), ZRT_SUCCESS) << zrt_last_error();
            ASSERT_EQ(zrt_partition_release(pm, u), ZRT_SUCCESS);
          }
          for (int u = kUnits - 1; u >= 0; --u) {
            ASSERT_EQ(zrt_partition_fetch(pm, u), ZRT_SUCCESS) << zrt_last_error();
            void* grad = nullptr;
            ASSERT_EQ(zrt_partition_grad_data(pm, params[u], &grad), ZRT_SUCCESS)
                << zrt_last_error();
            std::fill_n(static_cast<float*>(grad), kNumel,
                        static_cast<float>((u + 1) * (rank + 1) + step * 100));
            ASSERT_EQ(zrt_partition_grad_ready(pm, u), ZRT_SUCCESS) << zrt_last_error();
            ASSERT_EQ(zrt_partition_release(pm, u), ZRT_SUCCESS);
          }
        }
        expect.step = step;
        ASSERT_EQ(zrt_partition_step(pm, check, &expect), ZRT_SUCCESS) << zrt_last_error();
        EXPECT_EQ(expect.wrong, 0) << "step " << step;
      }
      EXPECT_EQ(zrt_partition_destroy(pm), ZRT_SUCCESS) << zrt_last_error();
    }
  }
  EXPECT_EQ(zrt_comm_destroy(comm), ZRT_SUCCESS) << zrt_last_error();
}

// prefetch_next_step: the step ends by gathering the next forward's first units (depth 2:
// units 0 and 1), which hold the updated parameters; the next step then gathers nothing on
// demand, and every step sends exactly 3P(N-1)/N. Counters count completed operations, so
// gathers are read just before each step, when backward's last fetch has waited for every
// gather queued before it, and reductions just after it. Unit sizes are multiples of N x 128
// for N = 2, 3 (no padding).
void prefetch_next_step_body(int /*rank*/, int size) {
  zrt_comm_t comm = make_comm();
  if (comm == nullptr) return;
  const std::vector<size_t> sizes = {768 * 3, 768 * 5, 768 * 2, 768 * 4};
  zrt_partition_config_t config = ZRT_PARTITION_CONFIG_INIT;
  config.stage = 3;
  config.optimizer_slots = 0;
  config.prefetch_depth = 2;
  config.persistence_threshold = 0;
  config.prefetch_next_step = 1;
  zrt_partition_t pm = nullptr;
  ASSERT_EQ(zrt_partition_create(comm, &config, &pm), ZRT_SUCCESS) << zrt_last_error();
  std::vector<int> params;
  for (size_t numel : sizes) {
    int unit = 0, param = 0;
    ASSERT_EQ(zrt_partition_add_unit(pm, "u", &unit), ZRT_SUCCESS);
    ASSERT_EQ(zrt_partition_add_param(pm, unit, "w", numel, 0, &param), ZRT_SUCCESS);
    params.push_back(param);
  }
  ASSERT_EQ(zrt_partition_finalize(pm), ZRT_SUCCESS) << zrt_last_error();
  const int units = static_cast<int>(sizes.size());
  uint64_t model = 0;
  for (size_t numel : sizes) model += numel;
  const uint64_t pass = model * (size - 1) / size * sizeof(float);  // bytes of one pass
  // The optimizer sets every master element to the step number.
  zrt_optimizer_fn set_step = [](const zrt_optimizer_args_t* args, void*) {
    std::fill_n(args->master, args->count, static_cast<float>(args->step));
    return ZRT_SUCCESS;
  };
  auto sent = [&](zrt_coll_kind_t kind) {
    zrt_comm_stats_t stats{};
    stats.size = sizeof(stats);
    EXPECT_EQ(zrt_comm_stats(comm, &stats), ZRT_SUCCESS) << zrt_last_error();
    return stats.per_kind[kind].user.bytes_sent;
  };
  auto partition_stats = [&] {
    zrt_partition_stats_t stats{};
    stats.size = sizeof(stats);
    EXPECT_EQ(zrt_partition_stats(pm, &stats), ZRT_SUCCESS) << zrt_last_error();
    return stats;
  };
  // From after finalize (its cross-rank check is internal traffic: not in these counters).
  uint64_t gathered = sent(ZRT_COLL_ALL_GATHER);
  uint64_t reduced = sent(ZRT_COLL_REDUCE_SCATTER);
  for (int step = 1; step <= 3; ++step) {
    SCOPED_TRACE(::testing::Message() << "N " << size << " step " << step);
    const zrt_partition_stats_t start = partition_stats();
    for (int u = 0; u < units; ++u) {
      ASSERT_EQ(zrt_partition_fetch(pm, u), ZRT_SUCCESS) << zrt_last_error();
      void* data = nullptr;
      ASSERT_EQ(zrt_partition_param_data(pm, params[u], &data), ZRT_SUCCESS);
      const float* f = static_cast<const float*>(data);
      // Step 1 sees the initial zeros; later steps what the previous step's optimizer wrote.
      EXPECT_EQ(f[0], static_cast<float>(step - 1)) << "unit " << u;
      EXPECT_EQ(f[sizes[u] - 1], static_cast<float>(step - 1)) << "unit " << u;
      ASSERT_EQ(zrt_partition_release(pm, u), ZRT_SUCCESS);
    }
    for (int u = units - 1; u >= 0; --u) {
      ASSERT_EQ(zrt_partition_fetch(pm, u), ZRT_SUCCESS) << zrt_last_error();
      void* grad = nullptr;
      ASSERT_EQ(zrt_partition_grad_data(pm, params[u], &grad), ZRT_SUCCESS);
      std::fill_n(static_cast<float*>(grad), sizes[u], 1.0f);
      ASSERT_EQ(zrt_partition_grad_ready(pm, u), ZRT_SUCCESS) << zrt_last_error();
      ASSERT_EQ(zrt_partition_release(pm, u), ZRT_SUCCESS);
    }
    const zrt_partition_stats_t before_step = partition_stats();
    // Later steps found units 0 and 1 gathered by the step before (whose bytes that step's
    // figures hold: two passes per step either way) and the rest by look-ahead.
    if (step > 1) {
      EXPECT_EQ(before_step.gathers - start.gathers, 0u) << "on-demand gathers";
    }
    const uint64_t gathered_now = sent(ZRT_COLL_ALL_GATHER);
    EXPECT_EQ(gathered_now - gathered, 2 * pass);
    gathered = gathered_now;
    ASSERT_EQ(zrt_partition_step(pm, set_step, nullptr), ZRT_SUCCESS) << zrt_last_error();
    EXPECT_EQ(partition_stats().prefetches - before_step.prefetches, 2u)
        << "the step gathers the next forward's first two units";
    const uint64_t reduced_now = sent(ZRT_COLL_REDUCE_SCATTER);
    EXPECT_EQ(reduced_now - reduced, pass);
    reduced = reduced_now;
  }
  EXPECT_EQ(zrt_partition_destroy(pm), ZRT_SUCCESS) << zrt_last_error();
  EXPECT_EQ(zrt_comm_destroy(comm), ZRT_SUCCESS) << zrt_last_error();
}

class PartitionPrefetchNextStep : public RankCount {};
TEST_P(PartitionPrefetchNextStep, PrefetchNextStepGathersTheFirstUnits) {
  expect_ranks_pass(GetParam(), prefetch_next_step_body);
}
INSTANTIATE_TEST_SUITE_P(PartitionMultirank, PartitionPrefetchNextStep, ::testing::Values(2, 3),
                         rank_count_name);

class PartitionGradientWindows : public RankCount {};
TEST_P(PartitionGradientWindows, GradientWindowsAreNotRewrittenWhileReduced) {
  expect_ranks_pass(GetParam(), window_reuse_body);
}
INSTANTIATE_TEST_SUITE_P(PartitionMultirank, PartitionGradientWindows, ::testing::Values(2, 3),
                         rank_count_name);

}  // namespace
}  // namespace zrt::testing
