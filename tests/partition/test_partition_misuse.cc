// Misuse of the partition protocol gets a clear status and message on every rank, never a hang
// or wrong data.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "tests/harness/multirank.h"
#include "zrt/zrt.h"

namespace zrt::testing {
namespace {

// Expects `call` to fail with `code` and a message containing `needle`.
#define EXPECT_ZRT_ERROR(call, code, needle)                                 \
  do {                                                                       \
    EXPECT_EQ((call), (code)) << #call;                                      \
    EXPECT_NE(std::string(zrt_last_error()).find(needle), std::string::npos) \
        << #call << ": " << zrt_last_error();                                \
  } while (0)

zrt_partition_t make_pm(zrt_comm_t comm, int stage, int depth, size_t bucket_bytes,
                        std::vector<int>* params) {
  zrt_partition_config_t config = ZRT_PARTITION_CONFIG_INIT;
  config.stage = stage;
  config.prefetch_depth = depth;
  config.persistence_threshold = 0;
  config.bucket_bytes = bucket_bytes;
  zrt_partition_t pm = nullptr;
  EXPECT_EQ(zrt_partition_create(comm, &config, &pm), ZRT_SUCCESS) << zrt_last_error();
  for (int u = 0; u < 3; ++u) {
    int unit = 0, param = 0;
    EXPECT_EQ(zrt_partition_add_unit(pm, "unit", &unit), ZRT_SUCCESS);
    EXPECT_EQ(zrt_partition_add_param(pm, unit, "w", 300 + 7 * u, 0, &param), ZRT_SUCCESS);
    params->push_back(param);
  }
  int unit = 0, frozen = 0;
  EXPECT_EQ(zrt_partition_add_unit(pm, "embedding", &unit), ZRT_SUCCESS);
  EXPECT_EQ(zrt_partition_add_param(pm, unit, "table", 50, ZRT_PARAM_FROZEN, &frozen), ZRT_SUCCESS);
  params->push_back(frozen);
  return pm;
}

void write_grads(zrt_partition_t pm, int param, size_t numel) {
  void* grad = nullptr;
  ASSERT_EQ(zrt_partition_grad_data(pm, param, &grad), ZRT_SUCCESS) << zrt_last_error();
  std::fill_n(static_cast<float*>(grad), numel, 0.5f);
}

void misuse_body(int rank, int /*size*/) {
  zrt_comm_t comm = nullptr;
  ASSERT_EQ(zrt_comm_init_env(nullptr, &comm), ZRT_SUCCESS) << zrt_last_error();
  zrt_optimizer_fn sgd = [](const zrt_optimizer_args_t* a, void*) {
    for (size_t i = 0; i < a->count; ++i) a->master[i] -= 0.1f * a->grad[i];
    return ZRT_SUCCESS;
  };

  EXPECT_ZRT_ERROR(zrt_partition_fetch(nullptr, 0), ZRT_INVALID_ARGUMENT, "pm is NULL");
  for (int stage = 2; stage <= 3; ++stage) {
    std::vector<int> params;
    zrt_partition_t pm = make_pm(comm, stage, 0, 1024, &params);
    EXPECT_ZRT_ERROR(zrt_partition_fetch(pm, 0), ZRT_INVALID_USAGE, "finalize");
    ASSERT_EQ(zrt_partition_finalize(pm), ZRT_SUCCESS) << zrt_last_error();
    int unit = 0;
    EXPECT_ZRT_ERROR(zrt_partition_add_unit(pm, "late", &unit), ZRT_INVALID_USAGE, "finalized");
    EXPECT_ZRT_ERROR(zrt_partition_add_param(pm, 0, "late", 3, 0, &unit), ZRT_INVALID_USAGE,
                     "finalized");
    EXPECT_ZRT_ERROR(zrt_partition_finalize(pm), ZRT_INVALID_USAGE, "already");
    EXPECT_ZRT_ERROR(zrt_partition_fetch(pm, 99), ZRT_INVALID_ARGUMENT, "unit 99");
    EXPECT_ZRT_ERROR(zrt_partition_release(pm, 1), ZRT_INVALID_USAGE, "not fetched");
    EXPECT_ZRT_ERROR(zrt_partition_step(pm, sgd, nullptr), ZRT_INVALID_USAGE,
                     "no synchronised micro-batch");
    EXPECT_ZRT_ERROR(zrt_partition_set_sync(pm, 0), ZRT_INVALID_USAGE, "no_sync_accumulation");
    void* grad = nullptr;
    EXPECT_ZRT_ERROR(zrt_partition_grad_data(pm, params[3], &grad), ZRT_INVALID_ARGUMENT, "frozen");

    ASSERT_EQ(zrt_partition_fetch(pm, 0), ZRT_SUCCESS) << zrt_last_error();
    EXPECT_ZRT_ERROR(zrt_partition_fetch(pm, 0), ZRT_INVALID_USAGE, "already fetched");
    if (stage == 3) {
      // Depth 0: one slot, held by unit 0.
      EXPECT_ZRT_ERROR(zrt_partition_fetch(pm, 1), ZRT_INVALID_USAGE, "release");
    }
    ASSERT_EQ(zrt_partition_release(pm, 0), ZRT_SUCCESS);

    // Backward with unit 0's gradients missing, then unit 2 signalled twice.
    for (int u = 2; u >= 1; --u) {
      write_grads(pm, params[u], 300 + 7 * u);
      ASSERT_EQ(zrt_partition_grad_ready(pm, u), ZRT_SUCCESS) << zrt_last_error();
    }
    EXPECT_ZRT_ERROR(zrt_partition_grad_ready(pm, 2), ZRT_INVALID_USAGE, "twice");
    EXPECT_ZRT_ERROR(zrt_partition_step(pm, sgd, nullptr), ZRT_INVALID_USAGE, "units 0");
    double norm = 0;
    EXPECT_ZRT_ERROR(zrt_partition_grad_norm(pm, &norm, nullptr), ZRT_INVALID_USAGE, "units 0");
    write_grads(pm, params[0], 300);
    ASSERT_EQ(zrt_partition_grad_ready(pm, 0), ZRT_SUCCESS) << zrt_last_error();
    int nonfinite = 1;
    ASSERT_EQ(zrt_partition_grad_norm(pm, &norm, &nonfinite), ZRT_SUCCESS) << zrt_last_error();
    EXPECT_NEAR(norm, 0.5 * std::sqrt(300.0 + 307 + 314), 1e-9);
    EXPECT_EQ(nonfinite, 0);
    ASSERT_EQ(zrt_partition_fetch(pm, 1), ZRT_SUCCESS);
    EXPECT_ZRT_ERROR(zrt_partition_step(pm, sgd, nullptr), ZRT_INVALID_USAGE, "still fetched");
    ASSERT_EQ(zrt_partition_release(pm, 1), ZRT_SUCCESS);
    ASSERT_EQ(zrt_partition_step(pm, sgd, nullptr), ZRT_SUCCESS) << zrt_last_error();
    // The update is visible, identical on every rank: 0 - 0.1 * 0.5.
    ASSERT_EQ(zrt_partition_fetch(pm, 2), ZRT_SUCCESS) << zrt_last_error();
    void* data = nullptr;
    ASSERT_EQ(zrt_partition_param_data(pm, params[2], &data), ZRT_SUCCESS);
    EXPECT_FLOAT_EQ(static_cast<float*>(data)[313], -0.05f);
    ASSERT_EQ(zrt_partition_release(pm, 2), ZRT_SUCCESS);
    // A NaN on one rank is seen by every rank (flag and norm in one all-reduce).
    for (int u = 2; u >= 0; --u) {
      write_grads(pm, params[u], 300 + 7 * u);
      if (u == 1 && rank == 1) {
        void* grad = nullptr;
        ASSERT_EQ(zrt_partition_grad_data(pm, params[u], &grad), ZRT_SUCCESS);
        static_cast<float*>(grad)[5] = std::nanf("");
      }
      ASSERT_EQ(zrt_partition_grad_ready(pm, u), ZRT_SUCCESS) << zrt_last_error();
    }
    nonfinite = 0;
    ASSERT_EQ(zrt_partition_grad_norm(pm, nullptr, &nonfinite), ZRT_SUCCESS) << zrt_last_error();
    EXPECT_EQ(nonfinite, 1);
    ASSERT_EQ(zrt_partition_step(pm, sgd, nullptr), ZRT_SUCCESS) << zrt_last_error();
    // A unit whose gradients the framework never asked for (unused parameters) reduces zeros,
    // not what an earlier unit left in the gradient window.
    for (int u = 2; u >= 0; --u) {
      if (u != 1) write_grads(pm, params[u], 300 + 7 * u);
      ASSERT_EQ(zrt_partition_grad_ready(pm, u), ZRT_SUCCESS) << zrt_last_error();
    }
    ASSERT_EQ(zrt_partition_grad_norm(pm, &norm, &nonfinite), ZRT_SUCCESS) << zrt_last_error();
    EXPECT_NEAR(norm, 0.5 * std::sqrt(300.0 + 314), 1e-9);
    EXPECT_EQ(nonfinite, 0);
    EXPECT_EQ(zrt_partition_destroy(pm), ZRT_SUCCESS) << zrt_last_error();
  }

  // Ranks that disagree on the configuration are caught at finalize, on every rank.
  std::vector<int> params;
  zrt_partition_t pm = make_pm(comm, 2, 1, rank == 1 ? 2048 : 1024, &params);
  EXPECT_ZRT_ERROR(zrt_partition_finalize(pm), ZRT_INVALID_USAGE, "ranks 1");
  EXPECT_EQ(zrt_partition_destroy(pm), ZRT_SUCCESS) << zrt_last_error();
  EXPECT_EQ(zrt_comm_destroy(comm), ZRT_SUCCESS) << zrt_last_error();
}

// load_param while units are gathered ahead (stage 3 prefetch): the next fetch of such a unit
// must see the loaded values, not the gathered copy of the old ones.
void load_after_prefetch_body(int /*rank*/, int /*size*/) {
  zrt_comm_t comm = nullptr;
  ASSERT_EQ(zrt_comm_init_env(nullptr, &comm), ZRT_SUCCESS) << zrt_last_error();
  std::vector<int> params;
  zrt_partition_t pm = make_pm(comm, 3, 2, 1024, &params);
  ASSERT_EQ(zrt_partition_finalize(pm), ZRT_SUCCESS) << zrt_last_error();
  ASSERT_EQ(zrt_partition_fetch(pm, 0), ZRT_SUCCESS) << zrt_last_error();  // gathers 1 and 2 ahead
  ASSERT_EQ(zrt_partition_release(pm, 0), ZRT_SUCCESS);
  const std::vector<float> loaded(307, 7.0f);
  ASSERT_EQ(zrt_partition_load_param(pm, params[1], loaded.data(), ZRT_F32), ZRT_SUCCESS)
      << zrt_last_error();
  ASSERT_EQ(zrt_partition_fetch(pm, 1), ZRT_SUCCESS) << zrt_last_error();
  void* data = nullptr;
  ASSERT_EQ(zrt_partition_param_data(pm, params[1], &data), ZRT_SUCCESS);
  const float* values = static_cast<const float*>(data);
  EXPECT_TRUE(std::all_of(values, values + 307, [](float v) { return v == 7.0f; }))
      << "first element " << values[0];
  ASSERT_EQ(zrt_partition_release(pm, 1), ZRT_SUCCESS);
  EXPECT_EQ(zrt_partition_destroy(pm), ZRT_SUCCESS) << zrt_last_error();
  EXPECT_EQ(zrt_comm_destroy(comm), ZRT_SUCCESS) << zrt_last_error();
}

TEST(PartitionMisuse, ClearErrorsNeverHangs) {
  expect_ranks_pass(2, misuse_body);
}

TEST(PartitionMisuse, LoadParamAfterPrefetchIsSeenByTheNextFetch) {
  expect_ranks_pass(2, load_after_prefetch_body);
}

}  // namespace
}  // namespace zrt::testing
