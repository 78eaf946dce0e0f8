// What an autograd framework needs from the partition API (issue 16): shapes at registration,
// accumulating gradient windows, reading parameters between steps, callback errors with their
// message on every rank, and the messages of a missing grad_ready and of ranks that registered
// different models. On real ranks over UCX.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "tests/harness/multirank.h"
#include "zrt/zrt.h"

namespace zrt::testing {
namespace {

#define EXPECT_ZRT_ERROR(call, code, needle)                                 \
  do {                                                                       \
    EXPECT_EQ((call), (code)) << #call;                                      \
    EXPECT_NE(std::string(zrt_last_error()).find(needle), std::string::npos) \
        << #call << ": " << zrt_last_error();                                \
  } while (0)

bool contains(const std::string& text, const std::string& needle) {
  return text.find(needle) != std::string::npos;
}

zrt_comm_t make_comm() {
  zrt_comm_t comm = nullptr;
  EXPECT_EQ(zrt_comm_init_env(nullptr, &comm), ZRT_SUCCESS) << zrt_last_error();
  return comm;
}

zrt_status_t sgd(const zrt_optimizer_args_t* a, void*) {
  for (size_t i = 0; i < a->count; ++i) a->master[i] -= 0.1f * a->grad[i];
  return ZRT_SUCCESS;
}

// --- The model of these tests: 3 units, each a shaped weight and a bias -------------------------

struct ParamDef {
  int unit;
  std::vector<int64_t> dims;
  size_t numel() const {
    size_t n = 1;
    for (int64_t d : dims) n *= static_cast<size_t>(d);
    return n;
  }
};

// Unit 1's weight is large enough (40000 elements) that its copies into buckets go to the
// progress thread; the biases are small enough to stay gathered at stage 3 (persistent).
const std::vector<ParamDef>& model_params() {
  static const std::vector<ParamDef> defs = {{0, {17, 19}}, {0, {17}},       {1, {200, 200}},
                                             {1, {200}},    {2, {11, 3, 7}}, {2, {11}}};
  return defs;
}

struct RunOptions {
  int stage = 0;
  bool accumulate = false;
  int parts = 1;  // gradient writes per element (accumulate mode), in an interleaved order
  int micro_batches = 1;
  bool no_sync = false;  // micro-batches before the last skip the reduction
  int steps = 3;
  int step_backup = ZRT_STEP_BACKUP_SEGMENT;
};

zrt_partition_t make_model(zrt_comm_t comm, const RunOptions& run, std::vector<int>* params) {
  zrt_partition_config_t config = ZRT_PARTITION_CONFIG_INIT;
  config.stage = run.stage;
  config.optimizer_slots = 0;
  config.bucket_bytes = 64 << 10;
  config.persistence_threshold = 256;
  config.prefetch_depth = 1;
  config.grad_accumulate = run.accumulate ? 1 : 0;
  config.no_sync_accumulation = run.no_sync && run.stage >= 2 ? 1 : 0;
  config.step_backup = run.step_backup;
  zrt_partition_t pm = nullptr;
  EXPECT_EQ(zrt_partition_create(comm, &config, &pm), ZRT_SUCCESS) << zrt_last_error();
  for (int u = 0; u < 3; ++u) {
    int unit = -1;
    EXPECT_EQ(zrt_partition_add_unit(pm, ("layer" + std::to_string(u)).c_str(), &unit),
              ZRT_SUCCESS);
  }
  const auto& defs = model_params();
  for (size_t p = 0; p < defs.size(); ++p) {
    int param = -1;
    const std::string name = p % 2 == 0 ? "weight" : "bias";
    EXPECT_EQ(zrt_partition_add_param_shaped(pm, defs[p].unit, name.c_str(),
                                             static_cast<int>(defs[p].dims.size()),
                                             defs[p].dims.data(), ZRT_F32, 0, &param),
              ZRT_SUCCESS)
        << zrt_last_error();
    params->push_back(param);
  }
  EXPECT_EQ(zrt_partition_finalize(pm), ZRT_SUCCESS) << zrt_last_error();
  for (size_t p = 0; p < defs.size(); ++p) {
    std::vector<float> init(defs[p].numel());
    for (size_t i = 0; i < init.size(); ++i) {
      init[i] = 0.01f * static_cast<float>((i * 7 + p * 13) % 23) - 0.1f;
    }
    EXPECT_EQ(zrt_partition_load_param(pm, (*params)[p], init.data(), ZRT_F32), ZRT_SUCCESS)
        << zrt_last_error();
  }
  return pm;
}

// Part k of element i's gradient; the gradient depends on the parameter, so steps compound.
float grad_part(int k, int parts, size_t p, size_t i, float param, int step, int micro, int rank) {
  const float g = 0.1f * std::sin(0.37f * static_cast<float>(i) + 1.3f * static_cast<float>(step) +
                                  0.7f * static_cast<float>(rank) +
                                  0.11f * static_cast<float>(micro) + static_cast<float>(p)) +
                  0.05f * param;
  return parts == 1 ? g : g * (k == 0 ? 0.5f : 0.5f / static_cast<float>(parts - 1));
}

// Trains and returns every parameter's final values (fetched after the last step).
std::vector<std::vector<float>> train(zrt_comm_t comm, int rank, const RunOptions& run,
                                      int overwrite_parts) {
  std::vector<int> params;
  zrt_partition_t pm = make_model(comm, run, &params);
  const auto& defs = model_params();
  for (int step = 0; step < run.steps; ++step) {
    for (int micro = 0; micro < run.micro_batches; ++micro) {
      if (run.no_sync) {
        EXPECT_EQ(zrt_partition_set_sync(pm, micro + 1 == run.micro_batches ? 1 : 0), ZRT_SUCCESS)
            << zrt_last_error();
      }
      for (int u = 0; u < 3; ++u) {
        EXPECT_EQ(zrt_partition_fetch(pm, u), ZRT_SUCCESS) << zrt_last_error();
        EXPECT_EQ(zrt_partition_release(pm, u), ZRT_SUCCESS) << zrt_last_error();
      }
      for (int u = 2; u >= 0; --u) {
        EXPECT_EQ(zrt_partition_fetch(pm, u), ZRT_SUCCESS) << zrt_last_error();
        std::vector<size_t> mine;
        for (size_t p = 0; p < defs.size(); ++p) {
          if (defs[p].unit == u) mine.push_back(p);
        }
        std::vector<float*> data(defs.size(), nullptr), grad(defs.size(), nullptr);
        for (size_t p : mine) {
          void* d = nullptr;
          void* g = nullptr;
          EXPECT_EQ(zrt_partition_param_data(pm, params[p], &d), ZRT_SUCCESS) << zrt_last_error();
          EXPECT_EQ(zrt_partition_grad_data(pm, params[p], &g), ZRT_SUCCESS) << zrt_last_error();
          data[p] = static_cast<float*>(d);
          grad[p] = static_cast<float*>(g);
        }
        if (run.accumulate) {
          // Several writers in any order: part by part, the unit's parameters backwards.
          for (int k = 0; k < run.parts; ++k) {
            for (auto it = mine.rbegin(); it != mine.rend(); ++it) {
              const size_t p = *it;
              for (size_t i = 0; i < defs[p].numel(); ++i) {
                grad[p][i] += grad_part(k, run.parts, p, i, data[p][i], step, micro, rank);
              }
            }
          }
        } else {
          for (size_t p : mine) {
            for (size_t i = 0; i < defs[p].numel(); ++i) {
              // The sum in the order an accumulating framework adds the parts.
              float sum = 0.0f;
              for (int k = 0; k < overwrite_parts; ++k) {
                sum += grad_part(k, overwrite_parts, p, i, data[p][i], step, micro, rank);
              }
              grad[p][i] = sum;
            }
          }
        }
        EXPECT_EQ(zrt_partition_grad_ready(pm, u), ZRT_SUCCESS) << zrt_last_error();
        EXPECT_EQ(zrt_partition_release(pm, u), ZRT_SUCCESS) << zrt_last_error();
      }
    }
    EXPECT_EQ(zrt_partition_step(pm, sgd, nullptr), ZRT_SUCCESS) << zrt_last_error();
  }
  std::vector<std::vector<float>> out(defs.size());
  for (int u = 0; u < 3; ++u) {
    EXPECT_EQ(zrt_partition_fetch(pm, u), ZRT_SUCCESS) << zrt_last_error();
    for (size_t p = 0; p < defs.size(); ++p) {
      if (defs[p].unit != u) continue;
      void* d = nullptr;
      EXPECT_EQ(zrt_partition_param_data(pm, params[p], &d), ZRT_SUCCESS) << zrt_last_error();
      const float* f = static_cast<const float*>(d);
      out[p].assign(f, f + defs[p].numel());
    }
    EXPECT_EQ(zrt_partition_release(pm, u), ZRT_SUCCESS) << zrt_last_error();
  }
  EXPECT_EQ(zrt_partition_destroy(pm), ZRT_SUCCESS) << zrt_last_error();
  return out;
}

bool bit_identical(const std::vector<std::vector<float>>& a,
                   const std::vector<std::vector<float>>& b) {
  if (a.size() != b.size()) return false;
  for (size_t p = 0; p < a.size(); ++p) {
    if (a[p].size() != b[p].size()) return false;
    if (std::memcmp(a[p].data(), b[p].data(), a[p].size() * sizeof(float)) != 0) return false;
  }
  return true;
}

// Accumulating windows give, bit for bit, what overwriting gives for the same sums: written
// once, and written in several partial writes in any order, at every stage, with and without
// no-sync micro-batches.
void accumulate_body(int rank, int /*size*/) {
  zrt_comm_t comm = make_comm();
  for (int stage = 0; stage <= 3; ++stage) {
    for (int variant = 0; variant < 3; ++variant) {
      RunOptions run;
      run.stage = stage;
      run.micro_batches = variant == 0 ? 1 : 2;
      run.no_sync = variant == 2;
      SCOPED_TRACE("stage " + std::to_string(stage) + ", micro-batches " +
                   std::to_string(run.micro_batches) + (run.no_sync ? ", no-sync" : ""));
      const auto overwrite_once = train(comm, rank, run, 1);
      const auto overwrite_parts = train(comm, rank, run, 3);
      run.accumulate = true;
      run.parts = 1;
      EXPECT_TRUE(bit_identical(train(comm, rank, run, 0), overwrite_once))
          << "one write into an accumulating window differs from overwriting";
      run.parts = 3;
      EXPECT_TRUE(bit_identical(train(comm, rank, run, 0), overwrite_parts))
          << "three partial writes differ from overwriting their sum";
    }
  }
  EXPECT_EQ(zrt_comm_destroy(comm), ZRT_SUCCESS);
}

TEST(PartitionFramework, AccumulatingGradientsMatchOverwritingAtEveryStage) {
  expect_ranks_pass(2, accumulate_body);
}

// --- Shapes ------------------------------------------------------------------------------------

void shapes_body(int /*rank*/, int /*size*/) {
  zrt_comm_t comm = make_comm();
  zrt_partition_config_t config = ZRT_PARTITION_CONFIG_INIT;
  config.param_dtype = ZRT_BF16;
  zrt_partition_t pm = nullptr;
  ASSERT_EQ(zrt_partition_create(comm, &config, &pm), ZRT_SUCCESS) << zrt_last_error();
  int unit = -1, w = -1, flat = -1, scalar = -1, param = -1;
  ASSERT_EQ(zrt_partition_add_unit(pm, "fc", &unit), ZRT_SUCCESS);
  const int64_t dims[3] = {4, 5, 6};
  ASSERT_EQ(zrt_partition_add_param_shaped(pm, unit, "weight", 3, dims, ZRT_F32, 0, &w),
            ZRT_SUCCESS)
      << zrt_last_error();
  ASSERT_EQ(zrt_partition_add_param(pm, unit, "flat", 10, 0, &flat), ZRT_SUCCESS);
  ASSERT_EQ(zrt_partition_add_param_shaped(pm, unit, "scale", 0, nullptr, ZRT_BF16, 0, &scalar),
            ZRT_SUCCESS)
      << zrt_last_error();

  EXPECT_ZRT_ERROR(zrt_partition_add_param_shaped(pm, unit, "w64", 3, dims, ZRT_F64, 0, &param),
                   ZRT_INVALID_ARGUMENT, "float64 parameters are not supported");
  EXPECT_NE(std::string(zrt_last_error()).find("\"w64\""), std::string::npos);
  EXPECT_NE(std::string(zrt_last_error()).find("float32"), std::string::npos);
  EXPECT_ZRT_ERROR(zrt_partition_add_param_shaped(pm, unit, "wi", 3, dims, ZRT_I32, 0, &param),
                   ZRT_INVALID_ARGUMENT, "not a parameter dtype");
  const int64_t zero[2] = {3, 0};
  EXPECT_ZRT_ERROR(zrt_partition_add_param_shaped(pm, unit, "empty", 2, zero, ZRT_F32, 0, &param),
                   ZRT_INVALID_ARGUMENT, "\"empty\": dims[1] is 0");
  const int64_t huge[3] = {int64_t{1} << 40, int64_t{1} << 20, int64_t{1} << 10};
  EXPECT_ZRT_ERROR(zrt_partition_add_param_shaped(pm, unit, "huge", 3, huge, ZRT_F32, 0, &param),
                   ZRT_INVALID_ARGUMENT, "\"huge\": the shape's element count overflows");
  EXPECT_ZRT_ERROR(zrt_partition_add_param_shaped(pm, unit, "deep", 9, dims, ZRT_F32, 0, &param),
                   ZRT_INVALID_ARGUMENT, "ndim is 9");
  EXPECT_ZRT_ERROR(zrt_partition_add_param_shaped(pm, unit, "null", 2, nullptr, ZRT_F32, 0, &param),
                   ZRT_INVALID_ARGUMENT, "dims is NULL");
  EXPECT_ZRT_ERROR(zrt_partition_add_param_shaped(pm, 7, "nounit", 3, dims, ZRT_F32, 0, &param),
                   ZRT_INVALID_ARGUMENT, "unit 7");
  ASSERT_EQ(zrt_partition_finalize(pm), ZRT_SUCCESS) << zrt_last_error();

  zrt_param_info_t info;
  info.size = sizeof(info);
  ASSERT_EQ(zrt_partition_param_info(pm, w, &info), ZRT_SUCCESS) << zrt_last_error();
  EXPECT_EQ(info.numel, 120u);
  EXPECT_EQ(info.dtype, ZRT_F32);
  ASSERT_EQ(info.ndim, 3);
  EXPECT_EQ(info.dims[0], 4);
  EXPECT_EQ(info.dims[1], 5);
  EXPECT_EQ(info.dims[2], 6);
  EXPECT_EQ(info.dims[3], 0);
  ASSERT_EQ(zrt_partition_param_info(pm, flat, &info), ZRT_SUCCESS);
  EXPECT_EQ(info.dtype, ZRT_BF16);  // the config's param_dtype
  ASSERT_EQ(info.ndim, 1);
  EXPECT_EQ(info.dims[0], 10);
  ASSERT_EQ(zrt_partition_param_info(pm, scalar, &info), ZRT_SUCCESS);
  EXPECT_EQ(info.numel, 1u);
  EXPECT_EQ(info.ndim, 0);
  // A caller that knows only the fields before the shape gets its prefix, no more.
  zrt_param_info_t older;
  std::memset(&older, 0x5a, sizeof(older));
  older.size = offsetof(zrt_param_info_t, dtype);
  ASSERT_EQ(zrt_partition_param_info(pm, w, &older), ZRT_SUCCESS);
  EXPECT_EQ(older.numel, 120u);
  EXPECT_EQ(older.ndim, 0x5a5a5a5a);
  EXPECT_EQ(zrt_partition_destroy(pm), ZRT_SUCCESS);
  EXPECT_EQ(zrt_comm_destroy(comm), ZRT_SUCCESS);
}

TEST(PartitionFramework, ShapesAreRegisteredCheckedAndReturned) {
  expect_ranks_pass(1, shapes_body);
}

// --- Item 7's messages -------------------------------------------------------------------------

// Rank 1 registers parameter 1 with another shape (same numel): every rank hears which
// parameter, and both sides' shape.
void mismatch_body(int rank, int /*size*/) {
  zrt_comm_t comm = make_comm();
  zrt_partition_t pm = nullptr;
  ASSERT_EQ(zrt_partition_create(comm, nullptr, &pm), ZRT_SUCCESS) << zrt_last_error();
  int unit = -1, param = -1;
  ASSERT_EQ(zrt_partition_add_unit(pm, "attn", &unit), ZRT_SUCCESS);
  const int64_t a[2] = {8, 4};
  const int64_t b0[2] = {6, 4}, b1[2] = {4, 6};
  ASSERT_EQ(zrt_partition_add_param_shaped(pm, unit, "q", 2, a, ZRT_F32, 0, &param), ZRT_SUCCESS);
  ASSERT_EQ(
      zrt_partition_add_param_shaped(pm, unit, "k", 2, rank == 0 ? b0 : b1, ZRT_F32, 0, &param),
      ZRT_SUCCESS);
  EXPECT_ZRT_ERROR(zrt_partition_finalize(pm), ZRT_INVALID_USAGE, "param 1 differs");
  const std::string message = zrt_last_error();
  EXPECT_TRUE(
      contains(message, "rank 0 has param 1 \"k\" of unit 0 \"attn\": numel 24, shape [6, 4]"))
      << message;
  EXPECT_TRUE(
      contains(message, "rank 1 has param 1 \"k\" of unit 0 \"attn\": numel 24, shape [4, 6]"))
      << message;
  EXPECT_EQ(zrt_partition_destroy(pm), ZRT_SUCCESS);

  // A parameter count that differs: rank 1 has one more.
  ASSERT_EQ(zrt_partition_create(comm, nullptr, &pm), ZRT_SUCCESS) << zrt_last_error();
  ASSERT_EQ(zrt_partition_add_unit(pm, "attn", &unit), ZRT_SUCCESS);
  ASSERT_EQ(zrt_partition_add_param(pm, unit, "q", 32, 0, &param), ZRT_SUCCESS);
  if (rank == 1) {
    ASSERT_EQ(zrt_partition_add_param(pm, unit, "extra", 5, 0, &param), ZRT_SUCCESS);
  }
  EXPECT_ZRT_ERROR(zrt_partition_finalize(pm), ZRT_INVALID_USAGE,
                   "the number of units and parameters differs");
  EXPECT_TRUE(contains(zrt_last_error(), "rank 0 has 1 units and 1 parameters"))
      << zrt_last_error();
  EXPECT_TRUE(contains(zrt_last_error(), "rank 1 has 1 units and 2 parameters"))
      << zrt_last_error();
  EXPECT_EQ(zrt_partition_destroy(pm), ZRT_SUCCESS);
  EXPECT_EQ(zrt_comm_destroy(comm), ZRT_SUCCESS);
}

TEST(PartitionFramework, RanksWithDifferentModelsHearWhichParameterDiffers) {
  expect_ranks_pass(2, mismatch_body);
}

void missing_grad_ready_body(int /*rank*/, int /*size*/) {
  zrt_comm_t comm = make_comm();
  RunOptions run;
  run.stage = 2;
  std::vector<int> params;
  zrt_partition_t pm = make_model(comm, run, &params);
  // Only unit 2 is signalled.
  void* g = nullptr;
  ASSERT_EQ(zrt_partition_grad_data(pm, params[4], &g), ZRT_SUCCESS) << zrt_last_error();
  ASSERT_EQ(zrt_partition_grad_ready(pm, 2), ZRT_SUCCESS) << zrt_last_error();
  EXPECT_ZRT_ERROR(zrt_partition_step(pm, sgd, nullptr), ZRT_INVALID_USAGE,
                   "zrt_partition_grad_ready was never called for units 0 (\"layer0\"), 1 "
                   "(\"layer1\")");
  EXPECT_TRUE(contains(zrt_last_error(), "call zrt_partition_grad_ready(pm, unit)"))
      << zrt_last_error();
  EXPECT_EQ(zrt_partition_destroy(pm), ZRT_SUCCESS);
  EXPECT_EQ(zrt_comm_destroy(comm), ZRT_SUCCESS);
}

TEST(PartitionFramework, MissingGradReadySaysTheCallWasNeverMade) {
  expect_ranks_pass(2, missing_grad_ready_body);
}

// --- Callback errors ---------------------------------------------------------------------------

zrt_status_t failing_on_rank1(const zrt_optimizer_args_t* a, void* user_data) {
  const int rank = *static_cast<const int*>(user_data);
  if (rank == 1) return zrt_callback_error("CUDA out of memory in the Adam kernel");
  return sgd(a, nullptr);
}

zrt_status_t garbage_on_rank0(const zrt_optimizer_args_t* a, void* user_data) {
  const int rank = *static_cast<const int*>(user_data);
  if (rank == 0) return static_cast<zrt_status_t>(12345);
  return sgd(a, nullptr);
}

zrt_status_t callback_error_without_message(const zrt_optimizer_args_t*, void*) {
  return ZRT_CALLBACK_ERROR;
}

void backward(zrt_partition_t pm, const std::vector<int>& params) {
  const auto& defs = model_params();
  for (int u = 2; u >= 0; --u) {
    for (size_t p = 0; p < defs.size(); ++p) {
      if (defs[p].unit != u) continue;
      void* g = nullptr;
      ASSERT_EQ(zrt_partition_grad_data(pm, params[p], &g), ZRT_SUCCESS) << zrt_last_error();
      std::fill_n(static_cast<float*>(g), defs[p].numel(), 0.25f);
    }
    ASSERT_EQ(zrt_partition_grad_ready(pm, u), ZRT_SUCCESS) << zrt_last_error();
  }
}

void callback_error_body(int rank, int /*size*/) {
  zrt_comm_t comm = make_comm();
  RunOptions run;
  run.stage = 1;
  run.step_backup = ZRT_STEP_BACKUP_FULL;  // every rank restored, so any optimizer may retry
  std::vector<int> params;
  zrt_partition_t pm = make_model(comm, run, &params);
  backward(pm, params);
  int me = rank;
  EXPECT_ZRT_ERROR(zrt_partition_step(pm, failing_on_rank1, &me), ZRT_CALLBACK_ERROR,
                   "rank 1: the optimizer callback failed: CUDA out of memory in the Adam kernel");
  EXPECT_TRUE(contains(zrt_last_error(), "rank(s) 1 (ZRT_CALLBACK_ERROR)")) << zrt_last_error();
  EXPECT_TRUE(contains(zrt_last_error(), "restored on every rank")) << zrt_last_error();
  EXPECT_ZRT_ERROR(zrt_partition_step(pm, garbage_on_rank0, &me), ZRT_CALLBACK_ERROR,
                   "rank 0: the optimizer callback returned 12345, which is not a zrt_status_t");
  EXPECT_ZRT_ERROR(zrt_partition_step(pm, callback_error_without_message, nullptr),
                   ZRT_CALLBACK_ERROR, "without a message");
  // The gradients survived the failed steps: the next one commits.
  EXPECT_EQ(zrt_partition_step(pm, sgd, nullptr), ZRT_SUCCESS) << zrt_last_error();
  int64_t step = 0;
  EXPECT_EQ(zrt_partition_get_step(pm, &step), ZRT_SUCCESS);
  EXPECT_EQ(step, 1);
  EXPECT_EQ(zrt_partition_destroy(pm), ZRT_SUCCESS);
  EXPECT_EQ(zrt_comm_destroy(comm), ZRT_SUCCESS);
}

TEST(PartitionFramework, CallbackErrorsCarryTheirMessageToEveryRank) {
  expect_ranks_pass(2, callback_error_body);
}

// --- An interrupted step (step_backup = segment) ------------------------------------------------

// SGD per segment that fails once, on one rank, at its `fail_at`-th call of the step.
struct Flaky {
  int rank = 0;
  int fail_rank = -1;
  int fail_at = -1;
  int calls = 0;
};

zrt_status_t flaky_sgd(const zrt_optimizer_args_t* a, void* user_data) {
  auto* flaky = static_cast<Flaky*>(user_data);
  const int call = flaky->calls++;
  if (flaky->rank == flaky->fail_rank && call == flaky->fail_at) {
    // Half the segment written before the failure: the segment backup must undo it.
    for (size_t i = 0; i < a->count / 2; ++i) a->master[i] = -1000.0f;
    return zrt_callback_error("injected failure");
  }
  return sgd(a, nullptr);
}

// Every parameter, gathered, in registration order.
std::vector<float> read_all_params(zrt_partition_t pm, const std::vector<int>& params) {
  std::vector<float> all;
  const auto& defs = model_params();
  for (int u = 0; u < 3; ++u) {
    EXPECT_EQ(zrt_partition_fetch(pm, u), ZRT_SUCCESS) << zrt_last_error();
    for (size_t p = 0; p < defs.size(); ++p) {
      if (defs[p].unit != u) continue;
      void* data = nullptr;
      EXPECT_EQ(zrt_partition_param_data(pm, params[p], &data), ZRT_SUCCESS) << zrt_last_error();
      const float* values = static_cast<const float*>(data);
      if (values != nullptr) all.insert(all.end(), values, values + defs[p].numel());
    }
    EXPECT_EQ(zrt_partition_release(pm, u), ZRT_SUCCESS) << zrt_last_error();
  }
  return all;
}

std::string g_interrupt_dir;  // made by the test before the ranks fork

void interrupted_step_body(int rank, int /*size*/) {
  zrt_comm_t comm = make_comm();
  RunOptions run;
  run.stage = 1;  // several segments (buckets), each rank's slice of each
  std::vector<int> params;
  zrt_partition_t pm = make_model(comm, run, &params);
  zrt_partition_t reference = make_model(comm, run, &params);
  const std::string checkpoint = g_interrupt_dir + "/before";
  ASSERT_EQ(zrt_partition_save(pm, checkpoint.c_str()), ZRT_SUCCESS) << zrt_last_error();
  const std::vector<float> before = read_all_params(pm, params);
  backward(reference, params);
  ASSERT_EQ(zrt_partition_step(reference, sgd, nullptr), ZRT_SUCCESS) << zrt_last_error();
  const std::vector<float> stepped = read_all_params(reference, params);
  ASSERT_NE(stepped, before);

  // Rank 1's second segment fails: its first segment holds the update, the rest do not.
  backward(pm, params);
  Flaky flaky{rank, /*fail_rank=*/1, /*fail_at=*/1};
  EXPECT_ZRT_ERROR(zrt_partition_step(pm, flaky_sgd, &flaky), ZRT_CALLBACK_ERROR,
                   "rank 1: segment 1 of ");
  EXPECT_TRUE(contains(zrt_last_error(), "injected failure")) << zrt_last_error();
  EXPECT_TRUE(contains(zrt_last_error(), "the step is interrupted")) << zrt_last_error();
  EXPECT_TRUE(contains(zrt_last_error(), "call zrt_partition_step again")) << zrt_last_error();
  int64_t step = -1;
  EXPECT_EQ(zrt_partition_get_step(pm, &step), ZRT_SUCCESS);
  EXPECT_EQ(step, 0);
  // Nothing may read or extend the half-stepped state until the step resumes or is dropped.
  EXPECT_ZRT_ERROR(zrt_partition_fetch(pm, 0), ZRT_INVALID_USAGE, "was interrupted");
  void* grad = nullptr;
  EXPECT_ZRT_ERROR(zrt_partition_grad_data(pm, params[0], &grad), ZRT_INVALID_USAGE,
                   "was interrupted");
  const std::string save_dir = g_interrupt_dir + "/half";
  EXPECT_NE(zrt_partition_save(pm, save_dir.c_str()), ZRT_SUCCESS);
  // Another optimizer would finish the step differently: refused on every rank.
  EXPECT_ZRT_ERROR(zrt_partition_step(pm, sgd, nullptr), ZRT_INVALID_ARGUMENT,
                   "interrupted with");
  // The same one resumes where each rank stopped: the bits of an uninterrupted step.
  ASSERT_EQ(zrt_partition_step(pm, flaky_sgd, &flaky), ZRT_SUCCESS) << zrt_last_error();
  EXPECT_EQ(zrt_partition_get_step(pm, &step), ZRT_SUCCESS);
  EXPECT_EQ(step, 1);
  EXPECT_EQ(read_all_params(pm, params), stepped);

  // Interrupted again, then dropped by a load: back to the checkpoint, usable at once.
  backward(pm, params);
  Flaky again{rank, /*fail_rank=*/0, /*fail_at=*/0};
  EXPECT_ZRT_ERROR(zrt_partition_step(pm, flaky_sgd, &again), ZRT_CALLBACK_ERROR,
                   "the step is interrupted");
  ASSERT_EQ(zrt_partition_load(pm, checkpoint.c_str()), ZRT_SUCCESS) << zrt_last_error();
  EXPECT_EQ(read_all_params(pm, params), before);
  backward(pm, params);
  ASSERT_EQ(zrt_partition_step(pm, sgd, nullptr), ZRT_SUCCESS) << zrt_last_error();
  EXPECT_EQ(read_all_params(pm, params), stepped);
  EXPECT_EQ(zrt_partition_destroy(reference), ZRT_SUCCESS);
  EXPECT_EQ(zrt_partition_destroy(pm), ZRT_SUCCESS);
  EXPECT_EQ(zrt_comm_destroy(comm), ZRT_SUCCESS);
}

TEST(PartitionFramework, InterruptedStepResumesToTheSameBitsOrIsDroppedByALoad) {
  char pattern[] = "/tmp/zrt-interrupt-XXXXXX";
  ASSERT_NE(::mkdtemp(pattern), nullptr);
  g_interrupt_dir = pattern;
  expect_ranks_pass(2, interrupted_step_body);
  std::filesystem::remove_all(g_interrupt_dir);
}

// A fused optimizer's config is checked before the first vote: a bad one on one rank stops
// every rank before any optimizer ran, and the step is not interrupted.
void fused_config_body(int rank, int /*size*/) {
  zrt_comm_t comm = make_comm();
  RunOptions run;
  run.stage = 2;
  std::vector<int> params;
  zrt_partition_t pm = make_model(comm, run, &params);
  backward(pm, params);
  zrt_optimizer_config_t config = ZRT_OPTIMIZER_CONFIG_INIT(ZRT_OPTIMIZER_SGD);
  config.lr = rank == 1 ? -1.0 : 0.1;
  if (rank == 1) {
    EXPECT_ZRT_ERROR(zrt_partition_step(pm, zrt_optimizer_sgd, &config), ZRT_INVALID_ARGUMENT,
                     "zrt_optimizer_sgd's config");
  } else {
    EXPECT_ZRT_ERROR(zrt_partition_step(pm, zrt_optimizer_sgd, &config), ZRT_REMOTE_ERROR,
                     "no rank ran its optimizer");
  }
  config.lr = 0.1;
  EXPECT_EQ(zrt_partition_step(pm, zrt_optimizer_sgd, &config), ZRT_SUCCESS) << zrt_last_error();
  EXPECT_EQ(zrt_partition_destroy(pm), ZRT_SUCCESS);
  EXPECT_EQ(zrt_comm_destroy(comm), ZRT_SUCCESS);
}

TEST(PartitionFramework, FusedOptimizerConfigIsCheckedBeforeAnyRankSteps) {
  expect_ranks_pass(2, fused_config_body);
}

// --- Reading parameters between steps ----------------------------------------------------------

// Redirects this process's stderr into a file of the run's folder until read back.
class StderrCapture {
 public:
  explicit StderrCapture(int rank) {
    const char* dir = std::getenv("ZRT_TEST_RUN_DIR");
    path_ = std::string(dir != nullptr ? dir : "/tmp") + "/stderr." + std::to_string(rank) + "." +
            std::to_string(getpid());
    std::fflush(stderr);
    saved_ = dup(2);
    const int fd = open(path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    dup2(fd, 2);
    close(fd);
  }
  std::string finish() {
    std::fflush(stderr);
    dup2(saved_, 2);
    close(saved_);
    std::ifstream in(path_);
    std::stringstream text;
    text << in.rdbuf();
    unlink(path_.c_str());
    return text.str();
  }

 private:
  std::string path_;
  int saved_ = -1;
};

// After a step, wait_params makes the resident parameters readable without fetching; fetching
// out of the recorded order warns only where prefetching follows that order (stage 3), and the
// warning carries the rank.
void read_between_steps_body(int rank, int /*size*/) {
  setenv("ZRT_LOG", "warn", 1);
  zrt_comm_t comm = make_comm();
  const auto& defs = model_params();
  for (int stage = 1; stage <= 3; ++stage) {
    SCOPED_TRACE("stage " + std::to_string(stage));
    RunOptions run;
    run.stage = stage;
    std::vector<int> params;
    zrt_partition_t pm = make_model(comm, run, &params);
    StderrCapture capture(rank);
    for (int step = 0; step < 2; ++step) {
      // Step 0 records the order 0, 1, 2; step 1 departs from it.
      const int order[2][3] = {{0, 1, 2}, {2, 0, 1}};
      for (int u : order[step]) {
        ASSERT_EQ(zrt_partition_fetch(pm, u), ZRT_SUCCESS) << zrt_last_error();
        ASSERT_EQ(zrt_partition_release(pm, u), ZRT_SUCCESS);
      }
      backward(pm, params);
      ASSERT_EQ(zrt_partition_step(pm, sgd, nullptr), ZRT_SUCCESS) << zrt_last_error();
    }
    ASSERT_EQ(zrt_partition_wait_params(pm), ZRT_SUCCESS) << zrt_last_error();
    // Resident parameters, read without a fetch, hold what a fetch then shows.
    std::vector<std::vector<float>> read(defs.size());
    for (size_t p = 0; p < defs.size(); ++p) {
      zrt_param_info_t info;
      info.size = sizeof(info);
      ASSERT_EQ(zrt_partition_param_info(pm, params[p], &info), ZRT_SUCCESS);
      if (!info.resident) continue;
      void* d = nullptr;
      ASSERT_EQ(zrt_partition_param_data(pm, params[p], &d), ZRT_SUCCESS) << zrt_last_error();
      read[p].assign(static_cast<float*>(d), static_cast<float*>(d) + defs[p].numel());
    }
    for (int u = 0; u < 3; ++u) {
      ASSERT_EQ(zrt_partition_fetch(pm, u), ZRT_SUCCESS) << zrt_last_error();
      for (size_t p = 0; p < defs.size(); ++p) {
        if (defs[p].unit != u || read[p].empty()) continue;
        void* d = nullptr;
        ASSERT_EQ(zrt_partition_param_data(pm, params[p], &d), ZRT_SUCCESS);
        EXPECT_EQ(std::memcmp(d, read[p].data(), read[p].size() * sizeof(float)), 0)
            << "param " << p;
        // Two SGD steps of 0.1 * 0.25 moved every element.
        EXPECT_NE(read[p][0], 0.01f * static_cast<float>((p * 13) % 23) - 0.1f) << "param " << p;
      }
      ASSERT_EQ(zrt_partition_release(pm, u), ZRT_SUCCESS);
    }
    const std::string log = capture.finish();
    if (stage < 3) {
      EXPECT_FALSE(contains(log, "departs from the order")) << log;
    } else {
      EXPECT_TRUE(contains(log, "departs from the order")) << log;
      EXPECT_TRUE(contains(log, ":r" + std::to_string(rank) + " zrt WARN")) << log;
      EXPECT_FALSE(contains(log, "r?")) << log;
    }
    EXPECT_EQ(zrt_partition_destroy(pm), ZRT_SUCCESS);
  }
  EXPECT_EQ(zrt_comm_destroy(comm), ZRT_SUCCESS);
}

TEST(PartitionFramework, ParametersReadBetweenStepsAndFetchOrderWarnings) {
  expect_ranks_pass(2, read_between_steps_body);
}

}  // namespace
}  // namespace zrt::testing
