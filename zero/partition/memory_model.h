// The memory model: a pure function from a configuration and a registered model to the bytes a
// rank holds per category, and to the ZeRO formula's figure. The partition manager allocates
// exactly the buffers of this plan, and zrt-mem prints the same figures without running
// anything, so both always agree.
//
// Model state (P trainable elements, N ranks, p/g bytes per param/reduce element, k optimizer
// slots of f32, f32 master):
//   stage 0: P (p + g + 4 + 4k)                    (f16, Adam: 16P)
//   stage 1: P (p + g) + P (4 + 4k) / N             (4P + 12P/N)
//   stage 2: P p + P (g + 4 + 4k) / N               (2P + 14P/N)
//   stage 3: P (p + g + 4 + 4k) / N                 (16P/N)
// plus, replicated on every rank: frozen parameters (F p), stage 3's persistent parameters
// (Q p, gathered for good), and with no_sync_accumulation in stages 2/3 the full local
// gradients (P g). The measured figure uses the padded element count in place of P; the
// difference is the padding, at most S x alignment per segment.
//
// hpZ (stage 3, hpz_group_size = H): plus the secondary copy, (P - Q) p / H (f16: 2P/H), padded:
// 1/H of every unit segment. Model state, since it holds parameters for the whole step.
//
// Constant buffers (independent of the number of units): two reduction buckets (stage 2: of
// the bucket size; stage 3: of the largest unit, plus one for the persistent segment; none but
// that one at stage 3 on host memory with equal dtypes, where the windows are reduced), the
// stage 3 gather window (depth + 1 slots of the largest unit), and the gradient staging window
// (the largest unit's gradients in param dtype, plus an f32 copy of the gradient for the
// optimizer when the reduced gradients are not already f32 and contiguous: of one segment's
// slice when the optimizer runs per segment, step_backup = segment, else of the whole shard).
//
// Step backup (step_backup): by default (segment) one segment's slice of master + optimizer
// state, (1 + k) x 4 bytes per element of the largest segment's slice, a constant; with
// step_backup = full one copy of the whole shard's, (1 + k) x 4 bytes per shard element, so a
// failed step can be rolled back whole (step_transaction.h). It is not model state (the ZeRO
// formula does not count it) but is part of the total.
//
// Offload (offload_optimizer, stages 1-3): master, optimizer state, the step backup and an f32
// copy of the gradient shard (what the CPU optimizer reads) live in host memory; everything
// else stays where the parameters are (mem_kind). The model state splits into
//   host:   P (4 + 4k) / N                          (12P/N)
//   device: the rest of the stage's formula         (stage 2, f16: 2P + 2P/N)
// and the figures carry both columns (device + host = the totals).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "lib/core/status.h"
#include "zero/partition/config.h"
#include "zero/partition/layout.h"

namespace zrt {

// Reduction buckets in flight: one filling while the other reduces.
inline constexpr int kBucketCount = 2;

// Element counts of every buffer the manager allocates (dtypes follow from the options).
struct BufferPlan {
  size_t full_params = 0;   // param dtype: stages 0-2 flat buffer; stage 3 persistent segment
  size_t frozen = 0;        // param dtype: replicated frozen parameters
  size_t param_shard = 0;   // param dtype, stage 3
  size_t full_grads = 0;    // reduce dtype
  size_t grad_shard = 0;    // reduce dtype, stages 2/3
  size_t master = 0;        // f32
  int optimizer_slots = 0;  // f32 arrays of `master` elements
  int bucket_count = 0;     // reduce dtype buckets of bucket_numel
  bool windows_are_buckets = false;  // every unit segment is reduced out of its window
  size_t bucket_numel = 0;
  size_t persistent_bucket = 0;  // reduce dtype, stage 3 without full gradients
  int window_slots = 0;          // param dtype slots of window_slot_numel, stage 3
  size_t window_slot_numel = 0;
  size_t grad_window = 0;     // param dtype: one gradient staging window (the largest unit)
  int grad_windows = 1;       // windows that alternate (2 when their copies are deferred)
  size_t optimizer_grad = 0;  // f32 copy of the gradient shard for the optimizer
  size_t backup = 0;          // f32 elements per backed-up array (master, then each state slot)
  // step_backup = segment: the optimizer runs per segment, so the backup and the optimizer's
  // f32 gradient hold one segment's slice at a time.
  bool per_segment_step = false;
  // offload_optimizer: master, state, backup and optimizer_grad are carved from host memory.
  bool offload = false;
  // Param dtype, stage 3 hpZ: the secondary copy (secondary_numel).
  size_t param_secondary = 0;
};

struct MemoryFigures {
  uint64_t full_params = 0;
  uint64_t param_shard = 0;
  uint64_t gradients = 0;
  uint64_t grad_shard = 0;
  uint64_t master = 0;
  uint64_t optimizer_state = 0;
  uint64_t buckets = 0;
  uint64_t gather_window = 0;
  uint64_t grad_staging = 0;
  uint64_t model_state = 0;
  uint64_t total = 0;
  double theoretical_model_state = 0;
  uint64_t parameters = 0;
  uint64_t padded_parameters = 0;
  uint64_t step_backup = 0;
  // Where they live (see the top of this file): host is the offload memory, zero without it.
  uint64_t device_model_state = 0;
  uint64_t device_total = 0;
  uint64_t host_model_state = 0;
  uint64_t host_total = 0;
  double theoretical_device_model_state = 0;
  double theoretical_host_model_state = 0;
  uint64_t param_secondary = 0;
};

// Sets model_state, total and the device columns from the byte fields and the host ones.
void complete_memory_figures(MemoryFigures* figures);

// Stage 3 gather window slots: depth + 1, fewer when max_live_bytes allows fewer (never < 1).
int window_slots(const PartitionOptions& options, const Layout& layout);

// hpZ: elements of the secondary copy, 1/H of every unit segment (the persistent one stays
// gathered); 0 when hpz_group_size is not a resolved H > 0.
size_t secondary_numel(const PartitionOptions& options, const Layout& layout);

// Stage 3 on host memory, param dtype = reduce dtype: every unit's segment is reduced out of
// its gradient window in place, so no bucket is needed besides the persistent segment's.
bool windows_are_buckets(const PartitionOptions& options, const Layout& layout);

BufferPlan plan_buffers(const PartitionOptions& options, const Layout& layout);

// The ZeRO formula for `elements` trainable elements (see the top of this file).
double zero_model_state_bytes(const PartitionOptions& options, int ranks, double elements,
                              const Layout& layout);
// The part of it that offload_optimizer moves to host memory (0 without offload).
double zero_host_model_state_bytes(const PartitionOptions& options, int ranks, double elements);

// The figures of a plan (what the manager will hold).
MemoryFigures memory_figures(const PartitionOptions& options, const Layout& layout);

// Everything from the registration alone (zrt-mem's entry point).
Status compute_memory_figures(const PartitionOptions& options, int ranks,
                              const std::vector<UnitSpec>& units,
                              const std::vector<ParamSpec>& params, MemoryFigures* figures);

void memory_figures_to_c(const MemoryFigures& figures, zrt_partition_memory_t* out);

}  // namespace zrt
