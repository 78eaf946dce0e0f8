#include "adamw.h"

#include <cmath>

namespace train_lm {

void adamw_update(const AdamWConfig& config, int step, bool decay, float grad_multiplier,
                  float* params, const float* grads, float* exp_avg, float* exp_avg_sq,
                  size_t count) {
  const float bias1 = 1.0f - std::pow(config.beta1, static_cast<float>(step));
  const float bias2 = 1.0f - std::pow(config.beta2, static_cast<float>(step));
  const float step_size = config.learning_rate / bias1;
  const float decay_factor = decay ? 1.0f - config.learning_rate * config.weight_decay : 1.0f;
  for (size_t i = 0; i < count; ++i) {
    const float g = grads[i] * grad_multiplier;
    exp_avg[i] = config.beta1 * exp_avg[i] + (1.0f - config.beta1) * g;
    exp_avg_sq[i] = config.beta2 * exp_avg_sq[i] + (1.0f - config.beta2) * g * g;
    const float denom = std::sqrt(exp_avg_sq[i] / bias2) + config.epsilon;
    params[i] = params[i] * decay_factor - step_size * exp_avg[i] / denom;
  }
}

}  // namespace train_lm
