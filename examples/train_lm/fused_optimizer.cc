#include "fused_optimizer.h"

#include <cstdio>

namespace train_lm {

FusedOptimizer::~FusedOptimizer() {
  zrt_optimizer_pool_destroy(pool_);
}

bool FusedOptimizer::init(const std::string& name, int threads, const AdamWConfig& adamw,
                          const std::vector<bool>& decay_of_param) {
  if (name == "own") return true;
  zrt_optimizer_kind_t kind = ZRT_OPTIMIZER_ADAMW;
  if (name == "zrt-adamw") {
    fn_ = zrt_optimizer_adamw;
  } else if (name == "zrt-adam") {
    kind = ZRT_OPTIMIZER_ADAM;
    fn_ = zrt_optimizer_adam;
  } else if (name == "zrt-sgd") {
    kind = ZRT_OPTIMIZER_SGD;
    fn_ = zrt_optimizer_sgd;
  } else if (name == "zrt-lion") {
    kind = ZRT_OPTIMIZER_LION;
    fn_ = zrt_optimizer_lion;
  } else {
    std::fprintf(stderr, "train_lm: unknown optimizer %s\n", name.c_str());
    return false;
  }
  auto failed = [&](const char* call) {
    std::fprintf(stderr, "train_lm: %s: %s\n", call, zrt_last_error());
    fn_ = nullptr;
    return false;
  };
  if (zrt_optimizer_config_init(&config_, sizeof(config_), kind) != ZRT_SUCCESS) {
    return failed("zrt_optimizer_config_init");
  }
  config_.lr = adamw.learning_rate;
  config_.weight_decay = adamw.weight_decay;
  if (kind != ZRT_OPTIMIZER_SGD && kind != ZRT_OPTIMIZER_LION) {
    config_.beta1 = adamw.beta1;
    config_.beta2 = adamw.beta2;
    config_.eps = adamw.epsilon;
  }
  if (kind == ZRT_OPTIMIZER_SGD) config_.momentum = 0.9;
  decay_mask_.assign(decay_of_param.begin(), decay_of_param.end());
  config_.decay_mask = decay_mask_.data();
  config_.decay_mask_count = decay_mask_.size();
  if (zrt_optimizer_pool_create(threads, &pool_) != ZRT_SUCCESS) {
    return failed("zrt_optimizer_pool_create");
  }
  config_.pool = pool_;
  return true;
}

void* FusedOptimizer::step_config(float clip_factor) {
  config_.clip_factor = clip_factor;
  return &config_;
}

}  // namespace train_lm
