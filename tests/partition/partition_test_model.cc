#include "tests/partition/partition_test_model.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>

#include "kernels/reduce/reduce_kernels.h"

namespace zrt::testing {

MlpParams mlp_init(const MlpShape& shape, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-0.5f, 0.5f);
  MlpParams p;
  for (size_t l = 0; l + 1 < shape.dims.size(); ++l) {
    std::vector<float> w(static_cast<size_t>(shape.dims[l + 1] * shape.dims[l]));
    std::vector<float> b(static_cast<size_t>(shape.dims[l + 1]));
    for (float& v : w) v = dist(rng);
    for (float& v : b) v = 0.1f * dist(rng);
    p.tensors.push_back(std::move(w));
    p.tensors.push_back(std::move(b));
  }
  return p;
}

void mlp_data(const MlpShape& shape, int step, std::vector<float>* x, std::vector<float>* y) {
  std::mt19937 rng(1000u + static_cast<unsigned>(step));
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  x->resize(static_cast<size_t>(shape.batch * shape.dims.front()));
  y->resize(static_cast<size_t>(shape.batch * shape.dims.back()));
  for (float& v : *x) v = dist(rng);
  for (float& v : *y) v = dist(rng);
}

// Computed in double so that the batch split changes only the last bits of each gradient.
void mlp_forward_backward(const MlpShape& shape, const MlpParams& params, const float* x,
                          const float* y, int rows, float loss_scale, MlpParams* grads) {
  const size_t layers = shape.dims.size() - 1;
  grads->tensors.resize(params.tensors.size());
  for (size_t t = 0; t < params.tensors.size(); ++t) {
    grads->tensors[t].assign(params.tensors[t].size(), 0.0f);
  }
  std::vector<std::vector<double>> gw(params.tensors.size());
  for (size_t t = 0; t < params.tensors.size(); ++t) gw[t].assign(params.tensors[t].size(), 0.0);
  for (int r = 0; r < rows; ++r) {
    std::vector<std::vector<double>> acts(layers + 1);
    acts[0].assign(x + r * shape.dims[0], x + (r + 1) * shape.dims[0]);
    for (size_t l = 0; l < layers; ++l) {
      const int in = shape.dims[l], out = shape.dims[l + 1];
      const auto& w = params.tensors[2 * l];
      const auto& b = params.tensors[2 * l + 1];
      acts[l + 1].assign(static_cast<size_t>(out), 0.0);
      for (int o = 0; o < out; ++o) {
        double s = b[o];
        for (int i = 0; i < in; ++i) s += static_cast<double>(w[o * in + i]) * acts[l][i];
        acts[l + 1][o] = l + 1 < layers ? std::tanh(s) : s;
      }
    }
    const int out_dim = shape.dims.back();
    std::vector<double> delta(static_cast<size_t>(out_dim));
    for (int o = 0; o < out_dim; ++o) {
      delta[o] = (acts[layers][o] - y[r * out_dim + o]) * loss_scale / rows;
    }
    for (size_t l = layers; l-- > 0;) {
      const int in = shape.dims[l], out = shape.dims[l + 1];
      const auto& w = params.tensors[2 * l];
      std::vector<double> prev(static_cast<size_t>(in), 0.0);
      for (int o = 0; o < out; ++o) {
        gw[2 * l + 1][o] += delta[o];
        for (int i = 0; i < in; ++i) {
          gw[2 * l][o * in + i] += delta[o] * acts[l][i];
          prev[i] += delta[o] * w[o * in + i];
        }
      }
      if (l > 0) {
        for (int i = 0; i < in; ++i) prev[i] *= 1.0 - acts[l][i] * acts[l][i];
      }
      delta = std::move(prev);
    }
  }
  for (size_t t = 0; t < gw.size(); ++t) {
    for (size_t i = 0; i < gw[t].size(); ++i) grads->tensors[t][i] = static_cast<float>(gw[t][i]);
  }
}

void adam_update(const AdamConfig& adam, int64_t step, float* param, const float* grad, float* m,
                 float* v, size_t n) {
  const double c1 = 1.0 - std::pow(static_cast<double>(adam.beta1), static_cast<double>(step));
  const double c2 = 1.0 - std::pow(static_cast<double>(adam.beta2), static_cast<double>(step));
  for (size_t i = 0; i < n; ++i) {
    m[i] = adam.beta1 * m[i] + (1 - adam.beta1) * grad[i];
    v[i] = adam.beta2 * v[i] + (1 - adam.beta2) * grad[i] * grad[i];
    const double mhat = m[i] / c1, vhat = v[i] / c2;
    param[i] = static_cast<float>(param[i] - adam.lr * mhat / (std::sqrt(vhat) + adam.eps));
  }
}

zrt_status_t adam_callback(const zrt_optimizer_args_t* args, void* user_data) {
  const AdamConfig* adam = static_cast<const AdamConfig*>(user_data);
  if (args->num_state != 2) return ZRT_INVALID_ARGUMENT;
  const float* grad = args->grad;
  std::vector<float> scaled;
  if (adam->grad_scale != 1.0f) {
    scaled.assign(args->grad, args->grad + args->count);
    for (float& g : scaled) g *= adam->grad_scale;
    grad = scaled.data();
  }
  adam_update(*adam, args->step, args->master, grad, args->state[0], args->state[1], args->count);
  return ZRT_SUCCESS;
}

MlpParams train_reference(const MlpShape& shape, int steps) {
  MlpParams p = mlp_init(shape, 7);
  std::vector<std::vector<float>> m, v;
  for (const auto& t : p.tensors) {
    m.emplace_back(t.size(), 0.0f);
    v.emplace_back(t.size(), 0.0f);
  }
  AdamConfig adam;
  for (int s = 0; s < steps; ++s) {
    std::vector<float> x, y;
    mlp_data(shape, s, &x, &y);
    MlpParams g;
    mlp_forward_backward(shape, p, x.data(), y.data(), shape.batch, 1.0f, &g);
    for (size_t t = 0; t < p.tensors.size(); ++t) {
      adam_update(adam, s + 1, p.tensors[t].data(), g.tensors[t].data(), m[t].data(), v[t].data(),
                  p.tensors[t].size());
    }
  }
  return p;
}

namespace {

#define ZRT_TEST_OK(call)                                                                         \
  do {                                                                                            \
    zrt_status_t status_ = (call);                                                                \
    if (status_ != ZRT_SUCCESS) {                                                                 \
      ADD_FAILURE() << #call << " -> " << zrt_status_string(status_) << ": " << zrt_last_error(); \
      return result;                                                                              \
    }                                                                                             \
  } while (0)

}  // namespace

MlpParams train_zrt(zrt_comm_t comm, const MlpShape& shape, const TrainOptions& options) {
  MlpParams result;
  int rank = 0, size = 1;
  ZRT_TEST_OK(zrt_comm_rank(comm, &rank));
  ZRT_TEST_OK(zrt_comm_size(comm, &size));
  zrt_partition_config_t config = ZRT_PARTITION_CONFIG_INIT;
  config.stage = options.stage;
  config.bucket_bytes = options.bucket_bytes;
  config.prefetch_depth = options.prefetch_depth;
  config.prefetch_next_step = options.prefetch_next_step ? 1 : 0;
  config.persistence_threshold = options.persistence_threshold;
  config.alignment = 4;
  config.param_dtype = options.param_dtype;
  config.reduce_dtype = options.reduce_dtype;
  config.no_sync_accumulation = options.no_sync && options.stage >= 2;
  config.offload_optimizer = options.offload_optimizer ? 1 : 0;
  config.shard_group_size = options.shard_group_size;
  config.hpz_group_size = options.hpz_group_size;
  zrt_partition_t pm = nullptr;
  ZRT_TEST_OK(zrt_partition_create(comm, &config, &pm));
  const size_t layers = shape.dims.size() - 1;
  const MlpParams init = mlp_init(shape, 7);
  std::vector<int> ids;
  for (size_t l = 0; l < layers; ++l) {
    int unit = -1, w = -1, b = -1;
    ZRT_TEST_OK(zrt_partition_add_unit(pm, "layer", &unit));
    ZRT_TEST_OK(zrt_partition_add_param(pm, unit, "w", init.tensors[2 * l].size(), 0, &w));
    ZRT_TEST_OK(zrt_partition_add_param(pm, unit, "b", init.tensors[2 * l + 1].size(), 0, &b));
    ids.push_back(w);
    ids.push_back(b);
  }
  ZRT_TEST_OK(zrt_partition_finalize(pm));
  for (size_t t = 0; t < ids.size(); ++t) {
    ZRT_TEST_OK(zrt_partition_load_param(pm, ids[t], init.tensors[t].data(), ZRT_F32));
  }
  if (options.memory != nullptr) ZRT_TEST_OK(zrt_partition_memory(pm, options.memory));
  if (options.stats != nullptr) ZRT_TEST_OK(zrt_comm_stats_reset(comm));
  zrt_partition_traffic_t traffic_before{};
  traffic_before.size = sizeof(traffic_before);
  if (options.traffic != nullptr) ZRT_TEST_OK(zrt_partition_traffic(pm, &traffic_before));
  auto read_traffic = [&]() -> zrt_status_t {
    options.traffic->size = sizeof(*options.traffic);
    const zrt_status_t status = zrt_partition_traffic(pm, options.traffic);
    options.traffic->intra_group_bytes -= traffic_before.intra_group_bytes;
    options.traffic->inter_group_bytes -= traffic_before.inter_group_bytes;
    return status;
  };
  AdamConfig adam;
  const int local_rows = shape.batch / size;
  const int micro_rows = local_rows / options.micro_batches;
  MlpParams params;
  params.tensors = init.tensors;
  auto read_unit = [&](size_t l) -> zrt_status_t {
    for (size_t k = 2 * l; k < 2 * l + 2; ++k) {
      void* data = nullptr;
      const zrt_status_t status = zrt_partition_param_data(pm, ids[k], &data);
      if (status != ZRT_SUCCESS) return status;
      convert_elements(options.param_dtype, data, ZRT_F32, params.tensors[k].data(),
                       params.tensors[k].size());
    }
    return ZRT_SUCCESS;
  };
  for (int s = 0; s < options.steps; ++s) {
    std::vector<float> x, y;
    mlp_data(shape, s, &x, &y);
    for (int mb = 0; mb < options.micro_batches; ++mb) {
      const bool sync = !options.no_sync || mb + 1 == options.micro_batches;
      ZRT_TEST_OK(zrt_partition_set_sync(pm, sync ? 1 : 0));
      if (options.step_in_backward && mb + 1 == options.micro_batches) {
        ZRT_TEST_OK(zrt_partition_step_in_backward(pm, adam_callback, &adam));
      }
      // Forward: each unit's parameters are read while fetched.
      for (size_t l = 0; l < layers; ++l) {
        ZRT_TEST_OK(zrt_partition_fetch(pm, static_cast<int>(l)));
        ZRT_TEST_OK(read_unit(l));
        ZRT_TEST_OK(zrt_partition_release(pm, static_cast<int>(l)));
      }
      const int row0 = rank * local_rows + mb * micro_rows;
      MlpParams grads;
      mlp_forward_backward(shape, params, x.data() + row0 * shape.dims.front(),
                           y.data() + row0 * shape.dims.back(), micro_rows,
                           1.0f / options.micro_batches, &grads);
      // Backward in reverse; under recomputation each unit is fetched once more first.
      for (size_t l = layers; l-- > 0;) {
        const int unit = static_cast<int>(l);
        if (options.recompute) {
          ZRT_TEST_OK(zrt_partition_fetch(pm, unit));
          ZRT_TEST_OK(read_unit(l));
          ZRT_TEST_OK(zrt_partition_release(pm, unit));
        }
        ZRT_TEST_OK(zrt_partition_fetch(pm, unit));
        ZRT_TEST_OK(read_unit(l));
        for (size_t k = 2 * l; k < 2 * l + 2; ++k) {
          void* grad = nullptr;
          ZRT_TEST_OK(zrt_partition_grad_data(pm, ids[k], &grad));
          convert_elements(ZRT_F32, grads.tensors[k].data(), options.param_dtype, grad,
                           grads.tensors[k].size());
        }
        ZRT_TEST_OK(zrt_partition_grad_ready(pm, unit));
        ZRT_TEST_OK(zrt_partition_release(pm, unit));
      }
    }
    if (options.clip_norm > 0) {
      double norm = 0;
      ZRT_TEST_OK(zrt_partition_grad_norm(pm, &norm, nullptr));
      adam.grad_scale = static_cast<float>(std::min(1.0, options.clip_norm / (norm + 1e-6)));
    }
    ZRT_TEST_OK(zrt_partition_step(pm, adam_callback, &adam));
  }
  // Stages 1/2 publish the parameters with all-gathers that fetch waits for: count them after
  // the read-back. Stage 3's read-back gathers (not part of the step): count before it.
  if (options.stats != nullptr && options.stage == 3) {
    ZRT_TEST_OK(zrt_comm_stats(comm, options.stats));
  }
  if (options.traffic != nullptr && options.stage == 3) ZRT_TEST_OK(read_traffic());
  for (size_t l = 0; options.read_back && l < layers; ++l) {
    ZRT_TEST_OK(zrt_partition_fetch(pm, static_cast<int>(l)));
    ZRT_TEST_OK(read_unit(l));
    ZRT_TEST_OK(zrt_partition_release(pm, static_cast<int>(l)));
  }
  if (options.stats != nullptr && options.stage != 3) {
    ZRT_TEST_OK(zrt_comm_stats(comm, options.stats));
  }
  if (options.traffic != nullptr && options.stage != 3) ZRT_TEST_OK(read_traffic());
  ZRT_TEST_OK(zrt_partition_destroy(pm));
  result = params;
  return result;
}

std::string refused_config_message(zrt_comm_t comm, const zrt_partition_config_t& config,
                                   bool at_create) {
  zrt_partition_t pm = nullptr;
  const zrt_status_t created = zrt_partition_create(comm, &config, &pm);
  if (at_create) {
    EXPECT_EQ(created, ZRT_INVALID_ARGUMENT);
    EXPECT_EQ(pm, nullptr);
    return zrt_last_error();
  }
  EXPECT_EQ(created, ZRT_SUCCESS) << zrt_last_error();
  if (pm == nullptr) return "";
  int unit = -1, param = -1;
  EXPECT_EQ(zrt_partition_add_unit(pm, "layer", &unit), ZRT_SUCCESS);
  EXPECT_EQ(zrt_partition_add_param(pm, unit, "w", 1000, 0, &param), ZRT_SUCCESS);
  EXPECT_EQ(zrt_partition_finalize(pm), ZRT_INVALID_ARGUMENT);
  const std::string message = zrt_last_error();
  EXPECT_EQ(zrt_partition_destroy(pm), ZRT_SUCCESS);
  return message;
}

// Relative to each tensor's largest magnitude: parameters that cross zero during training are
// compared at the scale of their tensor, not of their own tiny value.
double max_relative_difference(const MlpParams& a, const MlpParams& b) {
  if (a.tensors.size() != b.tensors.size()) return 1e30;
  double worst = 0;
  for (size_t t = 0; t < a.tensors.size(); ++t) {
    if (a.tensors[t].size() != b.tensors[t].size()) return 1e30;
    double scale = 1e-30;
    for (size_t i = 0; i < a.tensors[t].size(); ++i) {
      scale =
          std::max({scale, std::fabs(double{a.tensors[t][i]}), std::fabs(double{b.tensors[t][i]})});
    }
    for (size_t i = 0; i < a.tensors[t].size(); ++i) {
      worst = std::max(worst, std::fabs(double{a.tensors[t][i]} - b.tensors[t][i]) / scale);
    }
  }
  return worst;
}

}  // namespace zrt::testing
