// The partition manager's parts on their own, on real ranks: a PartitionContext and its
// resources are made here, without PartitionManager, and GatherWindow, GradientPipeline and
// StepTransaction are driven directly, so each part's contract is pinned apart from the
// coordinator's checks.
#include <algorithm>
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "zero/api/handles.h"
#include "zero/partition/gather_window.h"
#include "zero/partition/gradient_pipeline.h"
#include "zero/partition/memory_model.h"
#include "zero/partition/partition_context.h"
#include "zero/partition/partition_resources.h"
#include "zero/partition/step_transaction.h"
#include "tests/harness/multirank.h"
#include "tests/harness/status_assert.h"

namespace zrt::testing {
namespace {

constexpr int kUnits = 3;

// Three units of one parameter each, as the manager would register them.
struct Parts {
  Parts(Communicator& comm, const PartitionOptions& options) : ctx(comm, options) {
    for (int u = 0; u < kUnits; ++u) {
      units.push_back({"unit" + std::to_string(u)});
      params.push_back({"w" + std::to_string(u), 300 + 7 * static_cast<size_t>(u), u, 0});
    }
  }
  ~Parts() {
    step.reset();
    grads.reset();
    window.reset();
    EXPECT_TRUE(resources.release(ctx).is_ok());
  }
  Status make() {
    ZRT_RETURN_IF_ERROR(Layout::build(ctx.options, ctx.size, units, params, &ctx.layout));
    ctx.plan = plan_buffers(ctx.options, ctx.layout);
    ZRT_RETURN_IF_ERROR(resources.setup(ctx));
    ctx.shard = ctx.layout.shard_map(ctx.layout.shards() == 1 ? 0 : ctx.rank);
    window = std::make_unique<GatherWindow>(ctx);
    grads = std::make_unique<GradientPipeline>(ctx);
    step = std::make_unique<StepTransaction>(ctx, *window, *grads);
    return Status::ok();
  }

  std::vector<UnitSpec> units;
  std::vector<ParamSpec> params;
  PartitionContext ctx;
  PartitionResources resources;
  std::unique_ptr<GatherWindow> window;
  std::unique_ptr<GradientPipeline> grads;
  std::unique_ptr<StepTransaction> step;
};

// What rank `rank` writes as param p's gradient: the average over N ranks is (N+1)/2 (1 + p).
float grad_value(int rank, int param) {
  return static_cast<float>((rank + 1) * (1 + param));
}
float average_grad(int size, int param) {
  return 0.5f * static_cast<float>(size + 1) * (1 + param);
}

// One micro-batch of backward, units in backward order, through the pipeline alone.
void backward(Parts& parts) {
  for (int u = kUnits - 1; u >= 0; --u) {
    void* grad = nullptr;
    ASSERT_OK(parts.grads->grad_data(u, &grad));
    float* g = static_cast<float*>(grad);
    for (size_t i = 0; i < parts.params[u].numel; ++i) g[i] = grad_value(parts.ctx.rank, u);
    ASSERT_OK(parts.grads->grad_ready(u));
  }
}

Communicator& communicator(zrt_comm_t comm) {
  return *comm->impl;
}

void gather_window_body(int rank, int /*size*/) {
  zrt_comm_t comm = nullptr;
  ASSERT_EQ(zrt_comm_init_env(nullptr, &comm), ZRT_SUCCESS) << zrt_last_error();
  {
    PartitionOptions options;
    options.stage = 3;
    options.prefetch_depth = 1;
    options.persistence_threshold = 0;
    Parts parts(communicator(comm), options);
    ASSERT_OK(parts.make());
    const PartitionContext& ctx = parts.ctx;
    // The shard holds, at each segment element it owns, 1000 x segment + the element's index in
    // the segment: a gathered unit must read 0, 1, 2, ... after its segment's 1000 x s.
    float* shard = reinterpret_cast<float*>(ctx.buffers.param_shard);
    for (size_t s = 0; s < ctx.layout.segments().size(); ++s) {
      const Segment& seg = ctx.layout.segments()[s];
      for (size_t k = 0; k < seg.slice; ++k) {
        shard[seg.shard_offset + k] = static_cast<float>(1000 * s + rank * seg.slice + k);
      }
    }
    GatherWindow& window = *parts.window;
    for (int u = 0; u < kUnits; ++u) {
      ASSERT_OK(window.fetch(u));
      EXPECT_TRUE(window.is_fetched(u));
      const int s = ctx.layout.units()[u].segment;
      const float* view = reinterpret_cast<const float*>(window.unit_view(u));
      ASSERT_NE(view, nullptr);
      for (size_t j = 0; j < ctx.layout.segments()[s].numel; ++j) {
        ASSERT_EQ(view[j], static_cast<float>(1000 * s + j)) << "unit " << u << " element " << j;
      }
      ASSERT_OK(window.release(u));
      EXPECT_FALSE(window.is_fetched(u));
      EXPECT_EQ(window.unit_view(u), nullptr);
    }
    // Two slots: each fetch found its unit gathered ahead by the one before, except the first.
    const WindowStats& stats = window.stats();
    EXPECT_EQ(stats.fetches, 3u);
    EXPECT_EQ(stats.gathers, 1u);
    EXPECT_EQ(stats.prefetches, 2u);
    EXPECT_EQ(stats.prefetch_hits, 2u);
    EXPECT_EQ(stats.evictions, 0u);
    EXPECT_EQ(stats.max_gathered_units, 2);
    EXPECT_EQ(window.first_fetched(), -1);
    window.end_step();
    EXPECT_TRUE(window.stats().order_recorded);
    // A fetch out of the recorded order is still served, and drops the recording.
    ASSERT_OK(window.fetch(2));
    EXPECT_TRUE(window.stats().order_invalidated);
    EXPECT_EQ(window.first_fetched(), 2);
    ASSERT_OK(window.release(2));
  }
  EXPECT_EQ(zrt_comm_destroy(comm), ZRT_SUCCESS) << zrt_last_error();
}

void gradient_pipeline_body(int /*rank*/, int size) {
  zrt_comm_t comm = nullptr;
  ASSERT_EQ(zrt_comm_init_env(nullptr, &comm), ZRT_SUCCESS) << zrt_last_error();
  for (int stage = 0; stage <= 3; ++stage) {
    SCOPED_TRACE("stage " + std::to_string(stage));
    PartitionOptions options;
    options.stage = stage;
    options.bucket_bytes = 256;  // several buckets, parameters straddle them (stages 0-2)
    options.persistence_threshold = 0;
    Parts parts(communicator(comm), options);
    ASSERT_OK(parts.make());
    GradientPipeline& grads = *parts.grads;
    EXPECT_FALSE(grads.pending());
    // finish_reductions refuses before any synchronised micro-batch.
    EXPECT_FALSE(grads.finish_reductions().is_ok());
    backward(parts);
    EXPECT_TRUE(grads.pending());
    EXPECT_FALSE(grads.microbatch_started());
    ASSERT_OK(grads.finish_reductions());
    // The optimizer's f32 gradient as the step reads it, a segment at a time.
    std::vector<float> whole(parts.ctx.layout.shard_numel());
    auto read_whole = [&] {
      const auto& segments = parts.ctx.layout.segments();
      for (size_t s = 0; s < segments.size(); ++s) {
        const float* slice = nullptr;
        ASSERT_OK(grads.segment_optimizer_grad(static_cast<int>(s), &slice));
        std::copy_n(slice, segments[s].slice, whole.begin() + segments[s].shard_offset);
      }
    };
    read_whole();
    const float* g = whole.data();
    double expected_sum = 0;
    for (const zrt_shard_piece_t& piece : parts.ctx.shard.pieces) {
      const float want = average_grad(size, piece.param);
      for (size_t i = 0; i < piece.count; ++i) {
        ASSERT_EQ(g[piece.shard_offset + i], want) << "param " << piece.param << " at " << i;
      }
    }
    for (int p = 0; p < kUnits; ++p) {
      const double v = average_grad(size, p);
      expected_sum += v * v * static_cast<double>(parts.params[p].numel);
    }
    double norm = 0;
    bool nonfinite = true;
    ASSERT_OK(grads.grad_norm(&norm, &nonfinite));
    EXPECT_NEAR(norm, std::sqrt(expected_sum), 1e-6 * std::sqrt(expected_sum));
    EXPECT_FALSE(nonfinite);
    grads.end_step();
    EXPECT_FALSE(grads.pending());
    // The next step's first reductions overwrite the shard: the same gradients again.
    backward(parts);
    ASSERT_OK(grads.finish_reductions());
    read_whole();
    for (const zrt_shard_piece_t& piece : parts.ctx.shard.pieces) {
      ASSERT_EQ(g[piece.shard_offset], average_grad(size, piece.param)) << "second step";
    }
  }
  EXPECT_EQ(zrt_comm_destroy(comm), ZRT_SUCCESS) << zrt_last_error();
}

// SGD with lr 0.1 that fails on rank `fail_rank` (after scribbling over master).
struct Sgd {
  int fail_rank = -1;
  int rank = 0;
};
zrt_status_t sgd(const zrt_optimizer_args_t* a, void* user) {
  const auto* s = static_cast<const Sgd*>(user);
  for (size_t i = 0; i < a->count; ++i) a->master[i] -= 0.1f * a->grad[i];
  return s->rank == s->fail_rank ? ZRT_SYSTEM_ERROR : ZRT_SUCCESS;
}

StepTransaction::Callback sgd_callback(Sgd* sgd_state) {
  StepTransaction::Callback callback;
  callback.fn = sgd;
  callback.user_data = sgd_state;
  return callback;
}

void step_transaction_body(int rank, int size) {
  zrt_comm_t comm = nullptr;
  ASSERT_EQ(zrt_comm_init_env(nullptr, &comm), ZRT_SUCCESS) << zrt_last_error();
  {
    PartitionOptions options;
    options.stage = 2;
    options.bucket_bytes = 256;
    options.step_backup = ZRT_STEP_BACKUP_FULL;
    Parts parts(communicator(comm), options);
    ASSERT_OK(parts.make());
    const PartitionContext& ctx = parts.ctx;
    const size_t count = ctx.layout.shard_numel();
    std::fill_n(ctx.buffers.master, count, 1.0f);
    StepTransaction& step = *parts.step;
    Sgd ok{-1, rank};
    // Phase 1 refuses a step without gradients, on every rank, before any optimizer.
    EXPECT_FALSE(step.step(sgd_callback(&ok)).is_ok());
    EXPECT_EQ(step.step_count(), 0);

    backward(parts);
    ASSERT_OK(step.step(sgd_callback(&ok)));
    EXPECT_EQ(step.step_count(), 1);
    // Published: every rank's full parameters hold every rank's update, after the gathers.
    for (int u = 0; u < kUnits; ++u) ASSERT_OK(parts.window->fetch(u));
    const float* full = reinterpret_cast<const float*>(ctx.buffers.full_params);
    for (int p = 0; p < kUnits; ++p) {
      const ParamLocation& loc = ctx.layout.params()[p];
      const float want = 1.0f - 0.1f * average_grad(size, p);
      for (size_t i = 0; i < loc.numel; ++i) {
        ASSERT_EQ(full[loc.view_offset + i], want) << "param " << p << " element " << i;
      }
    }
    for (int u = 0; u < kUnits; ++u) ASSERT_OK(parts.window->release(u));

    // A step whose optimizer fails on the last rank: every rank restores master from the backup.
    const std::vector<float> before(ctx.buffers.master, ctx.buffers.master + count);
    for (int u = 0; u < kUnits; ++u) {
      ASSERT_OK(parts.window->fetch(u));
      step.on_fetch();  // a share of the backup behind each fetch
    }
    for (int u = 0; u < kUnits; ++u) ASSERT_OK(parts.window->release(u));
    backward(parts);
    Sgd failing{size - 1, rank};
    const Status failed = step.step(sgd_callback(&failing));
    EXPECT_FALSE(failed.is_ok());
    EXPECT_NE(failed.message().find("optimizer callback failed"), std::string::npos)
        << failed.message();
    EXPECT_EQ(step.step_count(), 1);
    EXPECT_EQ(std::vector<float>(ctx.buffers.master, ctx.buffers.master + count), before);
  }
  EXPECT_EQ(zrt_comm_destroy(comm), ZRT_SUCCESS) << zrt_last_error();
}

TEST(PartitionParts, GatherWindowGathersAheadAndServesFetches) {
  expect_ranks_pass(2, gather_window_body);
}

TEST(PartitionParts, GradientPipelineAveragesAtEveryStage) {
  expect_ranks_pass(2, gradient_pipeline_body);
}

TEST(PartitionParts, GradientPipelineOnOneRank) {
  expect_ranks_pass(1, gradient_pipeline_body);
}

TEST(PartitionParts, StepTransactionPublishesOrRestores) {
  expect_ranks_pass(2, step_transaction_body);
}

}  // namespace
}  // namespace zrt::testing
