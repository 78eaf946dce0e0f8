// One fused optimizer step over a shard: checks the configuration and the shard's arguments,
// derives the step's f32 constants, cuts the shard into stretches of one weight-decay setting
// and one parameter destination (the piece map and the decay mask, the parameter spans), and
// runs a kernel table's update over them, split across a thread pool in contiguous,
// cache-line-aligned ranges. The update is elementwise, so neither the thread count nor the
// variant changes a value.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "lib/core/status.h"
#include "kernels/optim/optim_kernels.h"
#include "kernels/optim/thread_pool.h"
#include "zrt/zrt.h"

namespace zrt::optim {

const char* kind_name(Kind kind);  // "adamw", "adam", "sgd", "lion"

// The defaults of ZRT_OPTIMIZER_CONFIG_INIT(kind).
zrt_optimizer_config_t default_config(Kind kind);

// Refuses a hyperparameter out of range (NaN included), naming the field and what it accepts.
Status check_config(Kind kind, const zrt_optimizer_config_t& config);

// The f32 constants of step `step` (>= 1), each rounded once from torch's f64 expression.
StepConstants step_constants(Kind kind, const zrt_optimizer_config_t& config, int64_t step);

// State arrays the rule needs.
int state_slots_needed(Kind kind, const zrt_optimizer_config_t& config);

// A stretch of the shard: elements [begin, begin + count), with or without weight decay, whose
// parameter copy starts at out (nullptr: none).
struct Stretch {
  size_t begin = 0;
  size_t count = 0;
  bool decay = false;
  void* out = nullptr;
};

// What fused_step writes the parameter copy as: kNone unless args asks for it (params_written
// and spans present).
Status output_type(const zrt_optimizer_args_t& args, OutType* out);

// The stretches in shard order, covering [0, args.count). Checks the pieces (in order, inside
// the shard, covered by the decay mask) and the spans (tiling the shard), naming the bad one.
Status plan_stretches(const zrt_optimizer_args_t& args, const zrt_optimizer_config_t& config,
                      OutType out, std::vector<Stretch>* stretches);

// Elements below which a thread is not worth waking.
inline constexpr size_t kMinElementsPerThread = size_t{1} << 15;

// The whole step: checks, then the update, with `pool` (nullptr: the calling thread alone).
// args is a whole struct (the C layer widened the caller's); config too. On success with
// output, *params_written = 1. Nothing is written on failure.
Status fused_step(Kind kind, const zrt_optimizer_config_t& config, const zrt_optimizer_args_t& args,
                  const KernelTable& table, ThreadPool* pool);

}  // namespace zrt::optim
