// A small multi-layer perceptron with odd layer sizes, its forward/backward written out, a
// reference Adam, and a driver that trains it through the partition C API. The equivalence
// tests compare zrt at every stage against the single-rank reference.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "zrt/zrt.h"

namespace zrt::testing {

struct MlpShape {
  std::vector<int> dims = {7, 13, 5, 11, 3};  // input, hidden..., output
  int batch = 24;                             // divisible by 1, 2, 3, 4 and by 2 micro-batches
};

// Parameters of layer l: weight (dims[l+1] x dims[l]) then bias (dims[l+1]).
struct MlpParams {
  std::vector<std::vector<float>> tensors;  // 2 per layer
};

MlpParams mlp_init(const MlpShape& shape, unsigned seed);
// Deterministic inputs and targets for the whole batch.
void mlp_data(const MlpShape& shape, int step, std::vector<float>* x, std::vector<float>* y);

// Loss = mean over `rows` rows of 0.5 * |f(x) - y|^2, times loss_scale. Gradients of the
// layers are written into grads (same shapes as params).
void mlp_forward_backward(const MlpShape& shape, const MlpParams& params, const float* x,
                          const float* y, int rows, float loss_scale, MlpParams* grads);

struct AdamConfig {
  float lr = 1e-2f, beta1 = 0.9f, beta2 = 0.999f, eps = 1e-8f;
  float grad_scale = 1.0f;  // adam_callback multiplies the gradient by it first (clipping)
};
// One Adam update of n elements (the same arithmetic the zrt callback does).
void adam_update(const AdamConfig& adam, int64_t step, float* param, const float* grad, float* m,
                 float* v, size_t n);
zrt_status_t adam_callback(const zrt_optimizer_args_t* args, void* user_data);

// Reference: K steps on one rank with the whole batch.
MlpParams train_reference(const MlpShape& shape, int steps);

struct TrainOptions {
  int stage = 0;
  int steps = 3;
  int micro_batches = 1;
  bool no_sync = false;  // micro-batches before the last skip the reduction
  int prefetch_depth = 1;
  bool prefetch_next_step = false;  // stage 3: each step gathers the next forward's first units
  bool recompute = false;
  size_t bucket_bytes = 256;  // small: several buckets, parameters straddle them
  size_t persistence_threshold = 0;
  zrt_dtype_t param_dtype = ZRT_F32;
  zrt_dtype_t reduce_dtype = ZRT_F32;
  bool read_back = true;                     // fetch every unit after the last step to read results
  zrt_comm_stats_t* stats = nullptr;         // if set: counters of the training steps only
  zrt_partition_memory_t* memory = nullptr;  // if set: filled after finalize
  int shard_group_size = 0;                  // hybrid sharding (0: flat)
  int hpz_group_size = 0;                    // stage 3 hpZ's secondary group (0: off)
  // If set: zrt_partition_traffic over the training steps (the counters stats covers).
  zrt_partition_traffic_t* traffic = nullptr;
  bool offload_optimizer = false;
  // With offload_optimizer: zrt_partition_step_in_backward before the last micro-batch, so the
  // optimizer runs during its backward (not with clip_norm).
  bool step_in_backward = false;
  // > 0: before each step, zrt_partition_grad_norm and gradients scaled by
  // min(1, clip_norm / norm) (clipping by the global norm).
  double clip_norm = 0;
};

// The counters a traffic test reads around train_zrt: comm's statistics and
// zrt_partition_traffic over the training steps, the memory after finalize.
struct TrainCounters {
  zrt_comm_stats_t stats{};
  zrt_partition_memory_t memory{};
  zrt_partition_traffic_t traffic{};
  TrainCounters() {
    stats.size = sizeof(stats);
    memory.size = sizeof(memory);
    traffic.size = sizeof(traffic);
  }
  void attach(TrainOptions* options) {
    options->stats = &stats;
    options->memory = &memory;
    options->traffic = &traffic;
  }
};

// A configuration that must be refused: with at_create, zrt_partition_create must fail with
// ZRT_INVALID_ARGUMENT; else create succeeds and finalize of a one-parameter model must fail
// with it. Returns the error message (failures reported through GoogleTest).
std::string refused_config_message(zrt_comm_t comm, const zrt_partition_config_t& config,
                                   bool at_create);

// Trains through the C API on this rank's share of every batch and returns the full final
// parameters (read through fetch/param_data). Failures are reported through GoogleTest.
MlpParams train_zrt(zrt_comm_t comm, const MlpShape& shape, const TrainOptions& options);

// Largest |a - b| over all elements, relative to the largest magnitude of its tensor.
double max_relative_difference(const MlpParams& a, const MlpParams& b);

}  // namespace zrt::testing
