// The fused optimizer kernels behind zrt_optimizer_adamw/adam/sgd/lion: one pass over a stretch
// of the shard that reads master, gradient and state and writes master, state and the
// parameters' copy. One kernel table per SIMD variant (generic, AVX2, AVX-512), each compiled
// from the same body (optim_body.inc) with -ffp-contract=off and the same explicit operations
// (multiply, add, divide, square root, fused multiply-add where torch's CPU kernels fuse), so
// every variant rounds every element alike and the variants agree bit for bit. The dispatcher
// (optim_dispatch.cc) picks a table the way the reduction kernels are picked.
#pragma once

#include <cstddef>
#include <cstdint>

#include "zrt/zrt.h"

namespace zrt::optim {

enum class Kind { kAdamW = 0, kAdam = 1, kSgd = 2, kLion = 3 };
inline constexpr int kKindCount = 4;

// The f32 constants of one step. torch.optim computes them in Python (f64) and its kernels
// round each to f32 once; step_constants (fused_step.h) does the same.
struct StepConstants {
  float unscale = 1.0f;       // 1 / grad_scale
  float clip = 1.0f;          // clip_factor
  float decay_factor = 1.0f;  // AdamW, Lion: 1 - lr * weight_decay
  float weight_decay = 0.0f;  // Adam, SGD: the gradient gains weight_decay * param
  float beta1 = 0.0f, one_minus_beta1 = 0.0f;
  float beta2 = 0.0f, one_minus_beta2 = 0.0f;
  float bias2_sqrt = 1.0f;     // Adam(W): sqrt(1 - beta2^step)
  float eps = 0.0f;            // Adam(W)
  float neg_step_size = 0.0f;  // Adam(W): -lr / (1 - beta1^step)
  float momentum = 0.0f;       // SGD
  float one_minus_dampening = 1.0f;
  float neg_lr = 0.0f;  // SGD, Lion
  bool has_momentum = false;
  bool nesterov = false;
  bool first_step = false;  // SGD: the momentum buffer starts as the gradient
};

// What the parameter copy is written as (or not at all).
enum class OutType { kNone = 0, kF32 = 1, kF16 = 2, kBf16 = 3 };
inline constexpr int kOutTypeCount = 4;

// A stretch of the shard with one weight-decay setting and one destination for its parameter
// copy: element i of every array belongs to shard element (run start + i).
struct Run {
  float* master = nullptr;
  const float* grad = nullptr;
  float* state0 = nullptr;  // exp_avg / momentum buffer (unused by plain SGD)
  float* state1 = nullptr;  // exp_avg_sq (Adam, AdamW)
  void* out = nullptr;      // OutType elements, or nullptr with kNone
  size_t count = 0;
};

using RunKernel = void (*)(const StepConstants& constants, const Run& run);

struct KernelTable {
  const char* name;
  // [kind][decay][out type]
  RunKernel kernels[kKindCount][2][kOutTypeCount];

  RunKernel kernel(Kind kind, bool decay, OutType out) const {
    return kernels[static_cast<int>(kind)][decay ? 1 : 0][static_cast<int>(out)];
  }
};

// Defined by each variant library.
const KernelTable& generic_optim_table();
#if defined(__x86_64__)
const KernelTable& avx2_optim_table();
const KernelTable& avx512_optim_table();
#endif

}  // namespace zrt::optim
