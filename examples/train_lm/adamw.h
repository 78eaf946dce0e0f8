// train_lm's own optimizer: AdamW over a range of the local shard (the framework's side of the
// line: zrt hands the shard over in zrt_partition_step's callback and never sees the update rule).
#pragma once

#include <cstddef>

namespace train_lm {

struct AdamWConfig {
  float learning_rate = 3e-3f;
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float epsilon = 1e-8f;
  float weight_decay = 0.01f;
};

// Updates elements [0, count) in place. `step` counts from 1. `decay` selects decoupled weight
// decay for this range (matrices) or not (biases, embeddings). Gradients are multiplied by
// grad_multiplier first (gradient clipping).
void adamw_update(const AdamWConfig& config, int step, bool decay, float grad_multiplier,
                  float* params, const float* grads, float* exp_avg, float* exp_avg_sq,
                  size_t count);

}  // namespace train_lm
