// Stage 3 parameters at fixed addresses (docs/ARCHITECTURE.md#stable-unit-addresses): on real
// ranks, every param_data pointer stays the same over many steps with prefetching and slots
// rotating under units of different sizes; a framework that keeps the pointer of a weight from
// forward and reads it again in backward (autograd's saved tensors) trains bit for bit as it does
// at stages 0 and 1; a released unit's pointer never shows another unit's values (reading it
// faults). Each check also runs on the old slot addresses (the bench's switch), where it must
// fail, so that none of them can pass without the mapping.
#include <gtest/gtest.h>
#include <setjmp.h>
#include <signal.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "zero/api/partition_handle.h"
#include "tests/harness/multirank.h"
#include "tests/harness/rank_count.h"
#include "tests/partition/partition_test_model.h"
#include "zrt/zrt.h"

namespace zrt::testing {
namespace {

#define OK_OR_RETURN(call)                                                \
  do {                                                                    \
    const zrt_status_t status_ = (call);                                  \
    ASSERT_EQ(status_, ZRT_SUCCESS) << #call << ": " << zrt_last_error(); \
  } while (0)

// Whether reading one byte at `address` faults (SIGSEGV or SIGBUS), caught on this thread.
sigjmp_buf fault_jump;
void on_fault(int /*signal*/) {
  siglongjmp(fault_jump, 1);
}

bool read_faults(const void* address) {
  struct sigaction action {};
  struct sigaction old_segv {};
  struct sigaction old_bus {};
  action.sa_handler = on_fault;
  sigemptyset(&action.sa_mask);
  sigaction(SIGSEGV, &action, &old_segv);
  sigaction(SIGBUS, &action, &old_bus);
  bool faulted = false;
  if (sigsetjmp(fault_jump, 1) == 0) {
    const volatile char* p = static_cast<const volatile char*>(address);
    (void)*p;
  } else {
    faulted = true;
  }
  sigaction(SIGSEGV, &old_segv, nullptr);
  sigaction(SIGBUS, &old_bus, nullptr);
  return faulted;
}

// A chain of layers y = tanh(W x + b) (the last without tanh) of different sizes, so that the
// window's slots hold different units from one fetch to the next.
struct Chain {
  std::vector<int> dims = {6, 40, 9, 33, 17, 4};
  int batch = 12;
  int layers() const { return static_cast<int>(dims.size()) - 1; }
};

struct Run {
  zrt_partition_t pm = nullptr;
  std::vector<int> w, b;  // param ids per layer
};

zrt_partition_config_t chain_config(int stage) {
  zrt_partition_config_t config = ZRT_PARTITION_CONFIG_INIT;
  config.stage = stage;
  config.bucket_bytes = 512;
  config.prefetch_depth = 2;
  config.prefetch_next_step = stage == 3 ? 1 : 0;
  config.persistence_threshold = 0;
  config.alignment = 4;
  return config;
}

// slot_addresses: stage 3's units at their slots' addresses, the path before stable addresses
// (PartitionManager::set_stable_addresses, not in the C API), where the checks below must fail.
void make_run(zrt_comm_t comm, const Chain& chain, const zrt_partition_config_t& config, Run* run,
              bool slot_addresses = false) {
  OK_OR_RETURN(zrt_partition_create(comm, &config, &run->pm));
  if (slot_addresses) run->pm->impl->set_stable_addresses(false);
  MlpShape shape;
  shape.dims = chain.dims;
  const MlpParams init = mlp_init(shape, 11);
  for (int l = 0; l < chain.layers(); ++l) {
    int unit = -1, w = -1, b = -1;
    OK_OR_RETURN(zrt_partition_add_unit(run->pm, "layer", &unit));
    OK_OR_RETURN(zrt_partition_add_param(run->pm, unit, "w", init.tensors[2 * l].size(), 0, &w));
    OK_OR_RETURN(
        zrt_partition_add_param(run->pm, unit, "b", init.tensors[2 * l + 1].size(), 0, &b));
    run->w.push_back(w);
    run->b.push_back(b);
  }
  OK_OR_RETURN(zrt_partition_finalize(run->pm));
  for (int l = 0; l < chain.layers(); ++l) {
    OK_OR_RETURN(zrt_partition_load_param(run->pm, run->w[l], init.tensors[2 * l].data(), ZRT_F32));
    OK_OR_RETURN(
        zrt_partition_load_param(run->pm, run->b[l], init.tensors[2 * l + 1].data(), ZRT_F32));
  }
}

const float* data_of(zrt_partition_t pm, int param) {
  void* data = nullptr;
  EXPECT_EQ(zrt_partition_param_data(pm, param, &data), ZRT_SUCCESS) << zrt_last_error();
  return static_cast<const float*>(data);
}

// Trains `steps` steps as an autograd framework does: forward keeps each layer's weight and bias
// pointers (its saved tensors) and releases the layer; backward fetches it again and reads the
// pointers kept from forward, never asking param_data again. Returns the losses and, after the
// last step, every parameter read back the same way.
struct Outcome {
  std::vector<float> losses;
  std::vector<std::vector<float>> params;
};

void train_saved_views(zrt_comm_t comm, const Chain& chain, const zrt_partition_config_t& config,
                       int steps, Outcome* out, bool slot_addresses = false) {
  int rank = 0, size = 1;
  OK_OR_RETURN(zrt_comm_rank(comm, &rank));
  OK_OR_RETURN(zrt_comm_size(comm, &size));
  Run run;
  make_run(comm, chain, config, &run, slot_addresses);
  if (::testing::Test::HasFatalFailure()) return;
  const int layers = chain.layers();
  const int rows = chain.batch / size;
  AdamConfig adam;
  MlpShape data_shape;
  data_shape.dims = chain.dims;
  data_shape.batch = chain.batch;
  for (int s = 0; s < steps; ++s) {
    std::vector<float> x, y;
    mlp_data(data_shape, s, &x, &y);
    std::vector<const float*> saved_w(layers), saved_b(layers);
    // acts[l]: rows x dims[l] (float, as a framework computes).
    std::vector<std::vector<float>> acts(layers + 1);
    acts[0].assign(x.begin() + rank * rows * chain.dims[0],
                   x.begin() + (rank + 1) * rows * chain.dims[0]);
    for (int l = 0; l < layers; ++l) {
      OK_OR_RETURN(zrt_partition_fetch(run.pm, l));
      saved_w[l] = data_of(run.pm, run.w[l]);
      saved_b[l] = data_of(run.pm, run.b[l]);
      const int in = chain.dims[l], outd = chain.dims[l + 1];
      acts[l + 1].assign(static_cast<size_t>(rows * outd), 0.0f);
      for (int r = 0; r < rows; ++r) {
        for (int o = 0; o < outd; ++o) {
          float sum = saved_b[l][o];
          for (int i = 0; i < in; ++i) sum += saved_w[l][o * in + i] * acts[l][r * in + i];
          acts[l + 1][r * outd + o] = l + 1 < layers ? std::tanh(sum) : sum;
        }
      }
      OK_OR_RETURN(zrt_partition_release(run.pm, l));
    }
    // Loss 0.5 * mean over the whole batch of |out - y|^2; dout on this rank's rows.
    const int last = chain.dims.back();
    std::vector<float> delta(static_cast<size_t>(rows * last));
    float loss = 0;
    for (int r = 0; r < rows; ++r) {
      for (int o = 0; o < last; ++o) {
        const float diff = acts[layers][r * last + o] - y[(rank * rows + r) * last + o];
        loss += 0.5f * diff * diff / static_cast<float>(chain.batch);
        delta[r * last + o] = diff / static_cast<float>(rows);
      }
    }
    out->losses.push_back(loss);
    for (int l = layers - 1; l >= 0; --l) {
      OK_OR_RETURN(zrt_partition_fetch(run.pm, l));
      const int in = chain.dims[l], outd = chain.dims[l + 1];
      if (l + 1 < layers) {  // through tanh: d = delta * (1 - a^2)
        for (int k = 0; k < rows * outd; ++k) {
          const float a = acts[l + 1][k];
          delta[k] *= 1.0f - a * a;
        }
      }
      void* gw = nullptr;
      void* gb = nullptr;
      OK_OR_RETURN(zrt_partition_grad_data(run.pm, run.w[l], &gw));
      OK_OR_RETURN(zrt_partition_grad_data(run.pm, run.b[l], &gb));
      float* grad_w = static_cast<float*>(gw);
      float* grad_b = static_cast<float*>(gb);
      std::fill_n(grad_w, in * outd, 0.0f);
      std::fill_n(grad_b, outd, 0.0f);
      std::vector<float> next(static_cast<size_t>(rows * in), 0.0f);
      for (int r = 0; r < rows; ++r) {
        for (int o = 0; o < outd; ++o) {
          const float d = delta[r * outd + o];
          grad_b[o] += d;
          for (int i = 0; i < in; ++i) {
            grad_w[o * in + i] += d * acts[l][r * in + i];
            next[r * in + i] += d * saved_w[l][o * in + i];  // the weight saved in forward
          }
        }
      }
      delta = std::move(next);
      OK_OR_RETURN(zrt_partition_grad_ready(run.pm, l));
      OK_OR_RETURN(zrt_partition_release(run.pm, l));
    }
    OK_OR_RETURN(zrt_partition_step(run.pm, adam_callback, &adam));
  }
  // Read back through the pointers a framework kept from the first step's forward... at stage 3
  // param_data gives the same pointer at any time; a fresh call here keeps stages 0/1 honest.
  for (int l = 0; l < layers; ++l) {
    OK_OR_RETURN(zrt_partition_fetch(run.pm, l));
    for (int p : {run.w[l], run.b[l]}) {
      zrt_param_info_t info{};
      info.size = sizeof(info);
      OK_OR_RETURN(zrt_partition_param_info(run.pm, p, &info));
      const float* v = data_of(run.pm, p);
      out->params.emplace_back(v, v + info.numel);
    }
    OK_OR_RETURN(zrt_partition_release(run.pm, l));
  }
  OK_OR_RETURN(zrt_partition_destroy(run.pm));
}

double difference(const Outcome& a, const Outcome& b) {
  MlpParams pa, pb;
  pa.tensors = a.params;
  pb.tensors = b.params;
  return max_relative_difference(pa, pb);
}

void saved_views_body(int /*rank*/, int size) {
  zrt_comm_t comm = nullptr;
  ASSERT_EQ(zrt_comm_init_env(nullptr, &comm), ZRT_SUCCESS) << zrt_last_error();
  const Chain chain;
  const int steps = 6;
  Outcome stage0, stage1, stage3;
  train_saved_views(comm, chain, chain_config(0), steps, &stage0);
  train_saved_views(comm, chain, chain_config(1), steps, &stage1);
  train_saved_views(comm, chain, chain_config(3), steps, &stage3);
  ASSERT_FALSE(::testing::Test::HasFailure());
  if (size == 2) {
    // Bit for bit: two ranks' gradients add in the same order at every stage.
    EXPECT_EQ(stage3.losses, stage0.losses);
    EXPECT_EQ(stage3.losses, stage1.losses);
    EXPECT_EQ(stage3.params, stage0.params);
    EXPECT_EQ(stage3.params, stage1.params);
  } else {
    // Three ranks' sums run in an order that depends on the segment boundaries: last bits.
    EXPECT_LE(difference(stage3, stage0), 1e-6);
    EXPECT_LE(difference(stage3, stage1), 1e-6);
  }
  // On the slot addresses the saved pointers show whatever their slot holds by backward.
  Outcome slots;
  train_saved_views(comm, chain, chain_config(3), steps, &slots, /*slot_addresses=*/true);
  EXPECT_GT(difference(slots, stage0), 1e-3) << "the check would pass without stable addresses";
  EXPECT_EQ(zrt_comm_destroy(comm), ZRT_SUCCESS) << zrt_last_error();
}

class PartitionStableAddresses : public RankCount {};

TEST_P(PartitionStableAddresses, SavedWeightViewsTrainAsStagesZeroAndOne) {
  expect_ranks_pass(GetParam(), saved_views_body);
}

// Many steps with prefetching (depth 2, the next step's first units gathered by each step) and
// units of different sizes: every pointer param_data gives is the one it gave after finalize,
// fetched or not, while the slots behind the units rotate. Biases kept gathered (persistent)
// keep theirs too, and stay readable between fetches.
void fixed_pointers_body(int /*rank*/, int /*size*/) {
  zrt_comm_t comm = nullptr;
  ASSERT_EQ(zrt_comm_init_env(nullptr, &comm), ZRT_SUCCESS) << zrt_last_error();
  const Chain chain;
  for (size_t persistence : {size_t{0}, size_t{50}}) {
    SCOPED_TRACE(::testing::Message() << "persistence_threshold " << persistence);
    zrt_partition_config_t config = chain_config(3);
    config.persistence_threshold = persistence;
    Run run;
    make_run(comm, chain, config, &run);
    ASSERT_FALSE(::testing::Test::HasFatalFailure());
    const int layers = chain.layers();
    std::vector<const float*> first_w(layers), first_b(layers);
    for (int l = 0; l < layers; ++l) {
      first_w[l] = data_of(run.pm, run.w[l]);
      first_b[l] = data_of(run.pm, run.b[l]);
      ASSERT_NE(first_w[l], nullptr);
    }
    AdamConfig adam;
    int checked = 0;
    for (int s = 0; s < 20; ++s) {
      auto check_unit = [&](int l) {
        EXPECT_EQ(data_of(run.pm, run.w[l]), first_w[l]) << "step " << s << " unit " << l;
        EXPECT_EQ(data_of(run.pm, run.b[l]), first_b[l]) << "step " << s << " unit " << l;
        volatile float touch = first_w[l][0] + first_b[l][0];  // readable while fetched
        (void)touch;
        ++checked;
      };
      for (int l = 0; l < layers; ++l) {
        OK_OR_RETURN(zrt_partition_fetch(run.pm, l));
        check_unit(l);
        OK_OR_RETURN(zrt_partition_release(run.pm, l));
      }
      for (int l = layers - 1; l >= 0; --l) {
        OK_OR_RETURN(zrt_partition_fetch(run.pm, l));
        check_unit(l);
        for (int p : {run.w[l], run.b[l]}) {
          void* grad = nullptr;
          OK_OR_RETURN(zrt_partition_grad_data(run.pm, p, &grad));
          zrt_param_info_t info{};
          info.size = sizeof(info);
          OK_OR_RETURN(zrt_partition_param_info(run.pm, p, &info));
          std::fill_n(static_cast<float*>(grad), info.numel, 1e-3f * static_cast<float>(l + 1));
        }
        OK_OR_RETURN(zrt_partition_grad_ready(run.pm, l));
        OK_OR_RETURN(zrt_partition_release(run.pm, l));
      }
      OK_OR_RETURN(zrt_partition_step(run.pm, adam_callback, &adam));
      // Between steps every unit is released: sharded weights fault, persistent biases read.
      for (int l = 0; l < layers; ++l) {
        EXPECT_TRUE(read_faults(first_w[l])) << "unit " << l << " released";
        if (persistence > 0) {
          EXPECT_FALSE(read_faults(first_b[l])) << "persistent bias " << l;
        }
      }
    }
    EXPECT_EQ(checked, 20 * 2 * layers);
    zrt_partition_stats_t stats{};
    stats.size = sizeof(stats);
    OK_OR_RETURN(zrt_partition_stats(run.pm, &stats));
    EXPECT_GT(stats.prefetch_hits, 0u);
    OK_OR_RETURN(zrt_partition_destroy(run.pm));
  }
  // The same loop on the slot addresses sees the pointers move: the check above can fail.
  Run run;
  make_run(comm, chain, chain_config(3), &run, /*slot_addresses=*/true);
  ASSERT_FALSE(::testing::Test::HasFatalFailure());
  std::vector<const float*> seen(chain.layers(), nullptr);
  int moved = 0;
  for (int pass = 0; pass < 3; ++pass) {
    for (int l = 0; l < chain.layers(); ++l) {
      OK_OR_RETURN(zrt_partition_fetch(run.pm, l));
      const float* p = data_of(run.pm, run.w[l]);
      if (seen[l] != nullptr && seen[l] != p) ++moved;
      seen[l] = p;
      OK_OR_RETURN(zrt_partition_release(run.pm, l));
    }
  }
  EXPECT_GT(moved, 0);
  OK_OR_RETURN(zrt_partition_destroy(run.pm));
  EXPECT_EQ(zrt_comm_destroy(comm), ZRT_SUCCESS) << zrt_last_error();
}

TEST_P(PartitionStableAddresses, PointersStayFixedOverStepsWithPrefetch) {
  expect_ranks_pass(GetParam(), fixed_pointers_body);
}

// A released unit's pointer never shows another unit's values: after each release the pointer
// faults (also while the unit sits gathered ahead in the window, not yet fetched), and after
// the next fetch it shows the unit's own values again, while the other units pass through its
// slot in between.
void released_unit_body(int /*rank*/, int /*size*/) {
  zrt_comm_t comm = nullptr;
  ASSERT_EQ(zrt_comm_init_env(nullptr, &comm), ZRT_SUCCESS) << zrt_last_error();
  const Chain chain;
  Run run;
  make_run(comm, chain, chain_config(3), &run);
  ASSERT_FALSE(::testing::Test::HasFatalFailure());
  const int layers = chain.layers();
  MlpShape shape;
  shape.dims = chain.dims;
  const MlpParams init = mlp_init(shape, 11);
  for (int pass = 0; pass < 4; ++pass) {
    for (int l = 0; l < layers; ++l) {
      const float* w = data_of(run.pm, run.w[l]);
      EXPECT_TRUE(read_faults(w)) << "pass " << pass << " unit " << l << " before its fetch";
      OK_OR_RETURN(zrt_partition_fetch(run.pm, l));
      // Unit l + 1 is gathered ahead now, its values in the window but not at its address.
      if (l + 1 < layers) {
        EXPECT_TRUE(read_faults(data_of(run.pm, run.w[l + 1])));
      }
      EXPECT_EQ(std::memcmp(w, init.tensors[2 * l].data(), init.tensors[2 * l].size() * 4), 0)
          << "pass " << pass << " unit " << l;
      OK_OR_RETURN(zrt_partition_release(run.pm, l));
      EXPECT_TRUE(read_faults(w)) << "pass " << pass << " unit " << l << " released";
    }
  }
  OK_OR_RETURN(zrt_partition_destroy(run.pm));
  EXPECT_EQ(zrt_comm_destroy(comm), ZRT_SUCCESS) << zrt_last_error();
}

TEST_P(PartitionStableAddresses, ReleasedUnitsFaultInsteadOfShowingOthers) {
  expect_ranks_pass(GetParam(), released_unit_body);
}

INSTANTIATE_TEST_SUITE_P(PartitionMultirank, PartitionStableAddresses, ::testing::Values(2, 3),
                         rank_count_name);

}  // namespace
}  // namespace zrt::testing
