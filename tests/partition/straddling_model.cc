#include "tests/partition/straddling_model.h"

#include <cstring>

#include <gtest/gtest.h>

#include "tests/harness/status_assert.h"

namespace zrt::testing::straddling {

size_t unit_numel(int u) {
  return 300 + 7 * static_cast<size_t>(u);
}

zrt_partition_config_t model_config() {
  zrt_partition_config_t config = ZRT_PARTITION_CONFIG_INIT;
  config.bucket_bytes = 1024;          // several buckets and segments, parameters straddle them
  config.persistence_threshold = 305;  // stage 3: unit 0 stays gathered (persistent segment)
  config.alignment = 4;
  return config;
}

void create(Run* run, const zrt_partition_config_t& config) {
  ASSERT_OK(zrt_partition_create(run->comm, &config, &run->pm));
  run->params.clear();
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

void forward_backward(Run* run, int step) {
  std::vector<std::vector<float>> values(kUnits);
  for (int u = 0; u < kUnits; ++u) {
    ASSERT_OK(zrt_partition_fetch(run->pm, u));
    void* data = nullptr;
    ASSERT_OK(zrt_partition_param_data(run->pm, run->params[u], &data));
    values[u].assign(static_cast<float*>(data), static_cast<float*>(data) + unit_numel(u));
    ASSERT_OK(zrt_partition_release(run->pm, u));
  }
  for (int u = kUnits - 1; u >= 0; --u) {
    ASSERT_OK(zrt_partition_fetch(run->pm, u));
    void* grad = nullptr;
    ASSERT_OK(zrt_partition_grad_data(run->pm, run->params[u], &grad));
    float* g = static_cast<float*>(grad);
    for (size_t i = 0; i < unit_numel(u); ++i) {
      g[i] = 0.5f * values[u][i] + 0.01f * static_cast<float>((step + 1) * (run->rank + 1));
    }
    ASSERT_OK(zrt_partition_grad_ready(run->pm, u));
    ASSERT_OK(zrt_partition_release(run->pm, u));
  }
}

std::vector<float> read_params(Run* run) {
  std::vector<float> all;
  for (int u = 0; u < kUnits; ++u) {
    EXPECT_OK(zrt_partition_fetch(run->pm, u));
    void* data = nullptr;
    EXPECT_OK(zrt_partition_param_data(run->pm, run->params[u], &data));
    if (data != nullptr) {
      all.insert(all.end(), static_cast<float*>(data), static_cast<float*>(data) + unit_numel(u));
    }
    EXPECT_OK(zrt_partition_release(run->pm, u));
  }
  return all;
}

bool same_bytes(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

}  // namespace zrt::testing::straddling
