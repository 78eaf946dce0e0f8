// The straightforward scalar reference of the fused optimizers: torch.optim 1.13's
// single-tensor formulas written out element by element, each Python-side scalar computed in
// f64 and rounded to f32 once, each tensor op one f32 operation (std::fma where torch's CPU
// kernels fuse: add_ with alpha, addcmul_). Compiled with -ffp-contract=off.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "zrt/zrt.h"

namespace zrt::testing {

// One step over n elements of one piece (decay: whether its parameter decays).
void reference_step(zrt_optimizer_kind_t kind, const zrt_optimizer_config_t& config, int64_t step,
                    bool decay, float* param, const float* grad, float* state0, float* state1,
                    size_t n);

// One step over a whole shard: the pieces with their decay mask, padding without decay.
void reference_shard_step(zrt_optimizer_kind_t kind, const zrt_optimizer_config_t& config,
                          int64_t step, const std::vector<zrt_shard_piece_t>& pieces, float* master,
                          const float* grad, float* state0, float* state1, size_t count);

// Distance in units in the last place between two floats (0 for two NaNs; huge for NaN vs not).
uint32_t ulp_distance(float a, float b);

}  // namespace zrt::testing
