/* The smallest complete zrt program: a two-unit model trained for one ZeRO stage-3 step with a
 * plain SGD optimizer, in C99. Run it under a launcher:  zrt-run -n 2 ./c_api_minimal        */
#include <stdio.h>
#include <string.h>

#include "zrt/zrt.h"

#define CHECK(call)                                                                     \
  do {                                                                                  \
    zrt_status_t s_ = (call);                                                           \
    if (s_ != ZRT_SUCCESS) {                                                            \
      fprintf(stderr, "%s: %s (%s)\n", #call, zrt_status_string(s_), zrt_last_error()); \
      return 1;                                                                         \
    }                                                                                   \
  } while (0)

/* The framework's optimizer: zrt hands it the local shard (f32 master weights and the reduced,
 * rank-averaged gradient); here plain SGD. */
static zrt_status_t sgd(const zrt_optimizer_args_t* args, void* user_data) {
  const float lr = *(const float*)user_data;
  size_t i;
  for (i = 0; i < args->count; ++i) args->master[i] -= lr * args->grad[i];
  return ZRT_SUCCESS;
}

int main(void) {
  zrt_comm_t comm;
  zrt_partition_t pm;
  zrt_partition_config_t config = ZRT_PARTITION_CONFIG_INIT;
  zrt_partition_memory_t memory;
  zrt_comm_stats_t stats;
  int rank, size, unit, u, weight[2];
  const size_t numel[2] = {1000, 3000};
  static float ones[3000], *grad;
  float lr = 0.1f;

  CHECK(zrt_comm_init_env(NULL, &comm)); /* ranks from zrt-run, torchrun, mpirun or srun */
  CHECK(zrt_comm_rank(comm, &rank));
  CHECK(zrt_comm_size(comm, &size));

  config.stage = 3;
  config.optimizer_slots = 0;       /* SGD keeps no state */
  config.persistence_threshold = 0; /* shard even these small parameters */
  CHECK(zrt_partition_create(comm, &config, &pm));
  for (u = 0; u < 2; ++u) { /* two units ("layers"), one parameter each */
    CHECK(zrt_partition_add_unit(pm, u == 0 ? "layer0" : "layer1", &unit));
    CHECK(zrt_partition_add_param(pm, unit, "weight", numel[u], ZRT_PARAM_DEFAULT, &weight[u]));
  }
  CHECK(zrt_partition_finalize(pm)); /* lays out shards, allocates every buffer once */
  for (u = 0; u < 3000; ++u) ones[u] = 1.0f;
  for (u = 0; u < 2; ++u) CHECK(zrt_partition_load_param(pm, weight[u], ones, ZRT_F32));

  for (u = 0; u < 2; ++u) { /* forward: gather each unit just before it is used */
    CHECK(zrt_partition_fetch(pm, u));
    /* ... the framework's forward kernels read zrt_partition_param_data(pm, weight[u]) ... */
    CHECK(zrt_partition_release(pm, u));
  }
  for (u = 1; u >= 0; --u) { /* backward: gather again, write gradients, hand them over */
    CHECK(zrt_partition_fetch(pm, u));
    CHECK(zrt_partition_grad_data(pm, weight[u], (void**)&grad));
    memcpy(grad, ones, numel[u] * sizeof(float)); /* d(loss)/d(weight) = 1 everywhere */
    CHECK(zrt_partition_grad_ready(pm, u));       /* starts this unit's reduce-scatter */
    CHECK(zrt_partition_release(pm, u));
  }
  CHECK(zrt_partition_step(pm, sgd, &lr)); /* optimizer on the local shard only */

  memory.size = sizeof(memory);
  stats.size = sizeof(stats);
  CHECK(zrt_partition_memory(pm, &memory));
  CHECK(zrt_comm_stats(comm, &stats));
  printf("rank %d/%d: model state %llu B (ZeRO-3 formula %.0f B), sent %llu B in %llu ops\n", rank,
         size, (unsigned long long)memory.model_state, memory.theoretical_model_state,
         (unsigned long long)stats.user.bytes_sent, (unsigned long long)stats.user.calls);

  CHECK(zrt_partition_destroy(pm));
  CHECK(zrt_comm_destroy(comm));
  return 0;
}
