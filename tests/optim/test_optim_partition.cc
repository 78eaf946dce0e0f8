// The fused optimizer inside zrt_partition_step on real ranks (FileOob bootstrap, UCX): at every
// stage and parameter dtype, the parameter copy the optimizer writes in its pass replaces zrt's
// conversion (the fetched parameters are what the optimizer wrote) and gives bit for bit the
// parameters of the separate conversion; a step that fails on one rank after others wrote their
// copies leaves every rank's parameters as they were. The same with offload_optimizer at stages
// 1-3, where the optimizer runs per segment and writes each segment's slice of the parameters.
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "kernels/reduce/reduce_kernels.h"
#include "tests/harness/file_bootstrap.h"
#include "tests/harness/multirank.h"
#include "tests/harness/rank_count.h"
#include "tests/harness/status_assert.h"
#include "zrt/zrt.h"

namespace zrt::testing {
namespace {

constexpr int kUnits = 3;

size_t unit_numel(int u) {
  return 301 + 37 * static_cast<size_t>(u);
}

std::string run_dir() {
  const char* dir = std::getenv("ZRT_TEST_RUN_DIR");
  return dir != nullptr ? dir : "/tmp";
}

// How the optimizer callback runs this time.
enum class Mode {
  kFused,       // zrt_optimizer_adamw as it is: writes the parameter copy
  kConversion,  // the same update, but zrt converts (params_written withheld)
  kNegated,     // the update, then a copy of -master: shows zrt did not convert over it
  kFailLast,    // the update with its copy on every rank, then the last rank fails
};

struct Callback {
  Mode mode = Mode::kFused;
  zrt_optimizer_config_t config{};
  int rank = 0;
  int size = 1;
  int written = -1;  // what the optimizer reported
};

zrt_status_t callback(const zrt_optimizer_args_t* args, void* user) {
  auto* cb = static_cast<Callback*>(user);
  zrt_optimizer_args_t mine = *args;
  int written = 0;
  mine.params_written = cb->mode == Mode::kConversion ? nullptr : &written;
  const zrt_status_t status = zrt_optimizer_adamw(&mine, &cb->config);
  if (status != ZRT_SUCCESS) return status;
  cb->written = written;
  if (cb->mode == Mode::kNegated) {
    // Negation commutes with rounding: the copy is exactly -(zrt's conversion).
    std::vector<float> negated(args->count);
    for (size_t i = 0; i < args->count; ++i) negated[i] = -args->master[i];
    for (size_t s = 0; s < args->num_param_spans; ++s) {
      const zrt_param_span_t& span = args->param_spans[s];
      convert_elements(ZRT_F32, negated.data() + span.shard_offset, args->param_dtype, span.data,
                       span.count);
    }
  }
  if (written) *args->params_written = 1;
  if (cb->mode == Mode::kFailLast && cb->rank == cb->size - 1) return ZRT_SYSTEM_ERROR;
  return ZRT_SUCCESS;
}

struct Run {
  zrt_comm_t comm = nullptr;
  zrt_partition_t pm = nullptr;
  std::vector<int> params;
  int rank = 0;
  zrt_dtype_t dtype = ZRT_F32;
};

void make_pm(Run* run, int stage, zrt_dtype_t dtype, bool offload = false,
             int step_backup = ZRT_STEP_BACKUP_SEGMENT) {
  zrt_partition_config_t config = ZRT_PARTITION_CONFIG_INIT;
  config.stage = stage;
  config.step_backup = step_backup;
  config.offload_optimizer = offload ? 1 : 0;
  config.param_dtype = dtype;
  config.reduce_dtype = dtype;
  config.bucket_bytes = 1024;          // several buckets, parameters straddle them
  config.persistence_threshold = 305;  // stage 3: unit 0 stays gathered
  config.alignment = 4;
  run->dtype = dtype;
  run->params.clear();
  ASSERT_OK(zrt_partition_create(run->comm, &config, &run->pm));
  for (int u = 0; u < kUnits; ++u) {
    int unit = 0, param = 0;
    ASSERT_OK(zrt_partition_add_unit(run->pm, "layer", &unit));
    ASSERT_OK(zrt_partition_add_param(run->pm, unit, "w", unit_numel(u), 0, &param));
    run->params.push_back(param);
  }
  ASSERT_OK(zrt_partition_finalize(run->pm));
  for (int u = 0; u < kUnits; ++u) {
    std::vector<float> values(unit_numel(u));
    for (size_t i = 0; i < values.size(); ++i) values[i] = 0.01f * static_cast<float>(i % 97) - u;
    ASSERT_OK(zrt_partition_load_param(run->pm, run->params[u], values.data(), ZRT_F32));
  }
}

// A unit's full parameters as f32.
std::vector<float> unit_params(Run* run, int u) {
  void* data = nullptr;
  EXPECT_OK(zrt_partition_param_data(run->pm, run->params[u], &data));
  std::vector<float> values(unit_numel(u));
  if (data != nullptr) convert_elements(run->dtype, data, ZRT_F32, values.data(), values.size());
  return values;
}

std::vector<float> read_params(Run* run) {
  std::vector<float> all;
  for (int u = 0; u < kUnits; ++u) {
    EXPECT_OK(zrt_partition_fetch(run->pm, u));
    const std::vector<float> values = unit_params(run, u);
    all.insert(all.end(), values.begin(), values.end());
    EXPECT_OK(zrt_partition_release(run->pm, u));
  }
  return all;
}

// Forward (reading the parameters) and backward of one step.
void forward_backward(Run* run, int step) {
  std::vector<std::vector<float>> values(kUnits);
  for (int u = 0; u < kUnits; ++u) {
    ASSERT_OK(zrt_partition_fetch(run->pm, u));
    values[u] = unit_params(run, u);
    ASSERT_OK(zrt_partition_release(run->pm, u));
  }
  for (int u = kUnits - 1; u >= 0; --u) {
    ASSERT_OK(zrt_partition_fetch(run->pm, u));
    void* grad = nullptr;
    ASSERT_OK(zrt_partition_grad_data(run->pm, run->params[u], &grad));
    std::vector<float> g(unit_numel(u));
    for (size_t i = 0; i < g.size(); ++i) {
      g[i] = 0.5f * values[u][i] + 0.01f * static_cast<float>((step + 1) * (run->rank + 1));
    }
    convert_elements(ZRT_F32, g.data(), run->dtype, grad, g.size());
    ASSERT_OK(zrt_partition_grad_ready(run->pm, u));
    ASSERT_OK(zrt_partition_release(run->pm, u));
  }
}

// `steps` steps in `mode`; the parameters after each.
// in_backward (with offload): the step armed with zrt_partition_step_in_backward before its
// forward, so the fused optimizer runs on zrt's thread during backward.
std::vector<std::vector<float>> train(Run* run, int stage, zrt_dtype_t dtype, Mode mode, int steps,
                                      int size, bool offload = false, bool in_backward = false) {
  std::vector<std::vector<float>> after;
  make_pm(run, stage, dtype, offload);
  if (::testing::Test::HasFailure()) return after;
  Callback cb;
  cb.mode = mode;
  cb.rank = run->rank;
  cb.size = size;
  EXPECT_OK(zrt_optimizer_config_init(&cb.config, sizeof(cb.config), ZRT_OPTIMIZER_ADAMW));
  cb.config.lr = 0.05;
  for (int step = 0; step < steps; ++step) {
    if (in_backward) {
      EXPECT_OK(zrt_partition_step_in_backward(run->pm, callback, &cb));
    }
    forward_backward(run, step);
    if (::testing::Test::HasFailure()) break;
    EXPECT_OK(zrt_partition_step(run->pm, callback, &cb));
    EXPECT_EQ(cb.written, mode == Mode::kConversion ? 0 : 1);
    after.push_back(read_params(run));
  }
  EXPECT_OK(zrt_partition_destroy(run->pm));
  run->pm = nullptr;
  return after;
}

void init_comm(Run* run, int rank, int size, const std::string& name) {
  run->rank = rank;
  static std::vector<std::unique_ptr<FileOob>> oobs;  // must outlive the communicator
  oobs.push_back(std::make_unique<FileOob>(run_dir(), name, rank, size));
  ASSERT_OK(zrt_comm_init_oob(&oobs.back()->oob(), nullptr, &run->comm));
}

void copy_body(int rank, int size) {
  Run run;
  init_comm(&run, rank, size, "optim-copy");
  if (::testing::Test::HasFailure()) return;
  for (zrt_dtype_t dtype : {ZRT_F32, ZRT_BF16, ZRT_F16}) {
    for (int stage = 0; stage <= 3; ++stage) {
      SCOPED_TRACE(::testing::Message()
                   << "N " << size << " stage " << stage << " dtype " << static_cast<int>(dtype));
      const auto converted = train(&run, stage, dtype, Mode::kConversion, 3, size);
      const auto fused = train(&run, stage, dtype, Mode::kFused, 3, size);
      ASSERT_EQ(converted.size(), 3u);
      ASSERT_EQ(fused.size(), 3u);
      for (size_t s = 0; s < 3; ++s) {
        EXPECT_EQ(std::memcmp(fused[s].data(), converted[s].data(), fused[s].size() * 4), 0)
            << "step " << s + 1 << ": the optimizer's copy differs from zrt's conversion";
      }
      // The copy is not converted over: an optimizer writing -master is what fetch shows.
      const auto negated = train(&run, stage, dtype, Mode::kNegated, 1, size);
      ASSERT_EQ(negated.size(), 1u);
      size_t mismatches = 0;
      for (size_t i = 0; i < negated[0].size(); ++i) {
        mismatches += negated[0][i] != -converted[0][i];
      }
      EXPECT_EQ(mismatches, 0u) << "zrt converted master over the optimizer's copy";
      if (stage == 0) continue;
      // Offloaded: each segment's callback writes its slice, bit for bit the same parameters.
      const auto offloaded = train(&run, stage, dtype, Mode::kFused, 3, size, /*offload=*/true);
      ASSERT_EQ(offloaded.size(), 3u);
      for (size_t s = 0; s < 3; ++s) {
        EXPECT_EQ(std::memcmp(offloaded[s].data(), converted[s].data(), offloaded[s].size() * 4), 0)
            << "step " << s + 1 << ": the offloaded optimizer's copy differs";
      }
      const auto in_backward =
          train(&run, stage, dtype, Mode::kFused, 3, size, /*offload=*/true, /*in_backward=*/true);
      ASSERT_EQ(in_backward.size(), 3u);
      for (size_t s = 0; s < 3; ++s) {
        EXPECT_EQ(
            std::memcmp(in_backward[s].data(), converted[s].data(), in_backward[s].size() * 4), 0)
            << "step " << s + 1 << ": the copy of the optimizer run during backward differs";
      }
      const auto negated_offloaded =
          train(&run, stage, dtype, Mode::kNegated, 1, size, /*offload=*/true);
      ASSERT_EQ(negated_offloaded.size(), 1u);
      mismatches = 0;
      for (size_t i = 0; i < negated_offloaded[0].size(); ++i) {
        mismatches += negated_offloaded[0][i] != -converted[0][i];
      }
      EXPECT_EQ(mismatches, 0u) << "offloaded: zrt converted master over the optimizer's copy";
    }
  }
  EXPECT_OK(zrt_comm_destroy(run.comm));
}

void rollback_body(int rank, int size) {
  Run run;
  init_comm(&run, rank, size, "optim-rollback");
  if (::testing::Test::HasFailure()) return;
  for (int variant = 0; variant <= 6; ++variant) {
    // 0-3: stages 0-3; 4-6: stages 1-3 offloaded.
    const int stage = variant <= 3 ? variant : variant - 3;
    const bool offload = variant > 3;
    SCOPED_TRACE(::testing::Message()
                 << "N " << size << " stage " << stage << (offload ? " offloaded" : ""));
    // The whole step rolls back only with the full backup (the segment one's contract is
    // test_partition_framework's).
    make_pm(&run, stage, ZRT_BF16, offload, ZRT_STEP_BACKUP_FULL);
    Callback cb;
    cb.rank = rank;
    cb.size = size;
    ASSERT_OK(zrt_optimizer_config_init(&cb.config, sizeof(cb.config), ZRT_OPTIMIZER_ADAMW));
    cb.config.lr = 0.05;
    forward_backward(&run, 0);
    ASSERT_OK(zrt_partition_step(run.pm, callback, &cb));
    forward_backward(&run, 1);
    const std::vector<float> before = read_params(&run);
    cb.mode = Mode::kFailLast;
    EXPECT_EQ(zrt_partition_step(run.pm, callback, &cb), ZRT_SYSTEM_ERROR) << zrt_last_error();
    EXPECT_EQ(cb.written, 1);
    const std::vector<float> after = read_params(&run);
    EXPECT_EQ(std::memcmp(before.data(), after.data(), before.size() * 4), 0)
        << "the parameters the optimizer wrote were not rolled back";
    // The retry commits.
    cb.mode = Mode::kFused;
    EXPECT_OK(zrt_partition_step(run.pm, callback, &cb));
    ASSERT_OK(zrt_partition_destroy(run.pm));
  }
  EXPECT_OK(zrt_comm_destroy(run.comm));
}

class OptimCopyRanks : public RankCount {};
TEST_P(OptimCopyRanks, OptimizerCopyReplacesTheConversionBitForBit) {
  expect_ranks_pass(GetParam(), copy_body);
}
TEST_P(OptimCopyRanks, FailedStepRollsBackTheCopy) {
  expect_ranks_pass(GetParam(), rollback_body);
}
INSTANTIATE_TEST_SUITE_P(OptimPartition, OptimCopyRanks, ::testing::Values(1, 2), rank_count_name);

}  // namespace
}  // namespace zrt::testing
