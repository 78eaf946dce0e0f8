// train_lm --optimizer zrt-adamw|zrt-adam|zrt-sgd|zrt-lion: zrt's fused optimizers
// (zrt_optimizer_adamw, ...) instead of train_lm's own AdamW, on the same settings (learning
// rate, betas, eps, weight decay of the decaying parameters, clipping), with a pool of
// --optimizer-threads threads.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "adamw.h"
#include "zrt/zrt.h"

namespace train_lm {

class FusedOptimizer {
 public:
  FusedOptimizer() = default;
  ~FusedOptimizer();
  FusedOptimizer(const FusedOptimizer&) = delete;
  FusedOptimizer& operator=(const FusedOptimizer&) = delete;

  // name: "own" (not enabled) or "zrt-<kind>". threads: 0 = every CPU of the affinity mask.
  // decay_of_param: per zrt parameter index. Prints zrt's message and returns false on error.
  bool init(const std::string& name, int threads, const AdamWConfig& adamw,
            const std::vector<bool>& decay_of_param);
  bool enabled() const { return fn_ != nullptr; }
  zrt_optimizer_fn fn() const { return fn_; }
  // The config for this step's zrt_partition_step (clip_factor: the clipping multiplier).
  void* step_config(float clip_factor);

 private:
  zrt_optimizer_fn fn_ = nullptr;
  zrt_optimizer_config_t config_{};
  std::vector<uint8_t> decay_mask_;
  zrt_optimizer_pool_t pool_ = nullptr;
};

}  // namespace train_lm
