// PartitionOptions: the partition manager's configuration in C++ form, resolved from the public
// zrt_partition_config_t or from a JSON file (so that settings tuned by zrt-tune can be applied),
// validated once, and hashed so finalize can prove that every rank agrees.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "lib/core/status.h"
#include "zrt/zrt.h"

namespace zrt {

// Defaults, and why (ZRT_PARTITION_CONFIG_INIT in zrt.h repeats the values, docs/API.md's
// defaults table the reasons, for framework authors).
// The most f32 optimizer state arrays a configuration may ask for (optimizer_slots).
inline constexpr int kMaxOptimizerSlots = 16;

struct PartitionOptions {
  // ZeRO stage. 2 halves gradient memory against stage 1 at the same traffic, so it is the
  // best default when the parameters still fit; 3 is opt-in because it adds 50% traffic.
  int stage = 2;
  // f32 unless asked: a framework that registers f32 tensors must get f32 back.
  zrt_dtype_t param_dtype = ZRT_F32;
  // Gradients are reduced in f32: 16-bit sums over many ranks lose the small contributions.
  zrt_dtype_t reduce_dtype = ZRT_F32;
  // Master weights are f32 (the only value accepted): optimizer updates vanish in 16 bits.
  zrt_dtype_t master_dtype = ZRT_F32;
  // Adam keeps two moments.
  int optimizer_slots = 2;
  // 25 MiB, PyTorch DDP's bucket_cap_mb: large enough that each reduce-scatter runs at the
  // transport's bandwidth, small enough that the first one starts early in backward.
  size_t bucket_bytes = size_t{25} << 20;
  // One unit ahead: hides one gather behind one unit's compute at the cost of one more slot.
  int prefetch_depth = 1;
  // Bytes of prefetched (not yet fetched) units in flight; 0 = no limit beyond the depth.
  size_t prefetch_bytes = 0;
  // Bytes of gathered units at once (fetched or prefetched); 0 = no limit beyond depth + 1.
  size_t max_live_bytes = 0;
  // Stage 3: trainable parameters with fewer elements stay gathered (DeepSpeed's
  // stage3_param_persistence_threshold, same default): biases and norms cost more in
  // per-collective latency than they save in memory.
  size_t persistence_threshold = 100000;
  // Elements. Every slice of every segment starts on a multiple of this many elements: 128
  // elements is 256 bytes in 16-bit dtypes (the CUDA allocation alignment, four cache lines,
  // a whole number of AVX-512 vectors) and 512 bytes in f32.
  size_t alignment = 128;
  zrt_mem_kind_t mem_kind = ZRT_MEM_HOST;
  // Stages 2/3: keep a full local gradient buffer so micro-batches can skip the reduction
  // (no-sync accumulation, FSDP's no_sync). Off by default: it costs a full gradient copy.
  bool no_sync_accumulation = false;
  // What a step whose optimizer callback fails can undo (zrt_step_backup_t,
  // step_transaction.h). A segment at a time by default: the copy of one segment's master and
  // state costs a constant (1 + slots) x 4 bytes per element of the largest segment, where the
  // full copy costs as much again as the state it protects, which ZeRO's memory formula does
  // not allow for; the full copy stays for callbacks that must roll back whole.
  int step_backup = ZRT_STEP_BACKUP_SEGMENT;
  // Stage 3: the step ends by gathering the next forward's first units, so the next step's
  // first fetch finds them. Off by default: after a run's last step the gathers go unused, and
  // per-step traffic is then 3P(N-1)/N from the second step on, not in every step.
  bool prefetch_next_step = false;
  // Stages 1-3: master, optimizer state and backup in host memory, the optimizer run per
  // segment on the CPU as reductions end (ZeRO-Offload). Off by default: on host memory it
  // only adds copies, and on a device it trades device memory for host bandwidth.
  bool offload_optimizer = false;
  // The framework accumulates into zeroed gradient windows (torch's .grad += ...) instead of
  // overwriting them. Off by default: the overwrite protocol is the older one, and a window
  // handed out zeroed costs nothing only because zrt zeroes it while reading it.
  bool grad_accumulate = false;
  // Stages 1-3: ranks per shard group (hybrid sharding, shard_groups.h); 0 = the ranks of one
  // host. A node by default because the links inside one are the fast ones: the gathers and
  // reduce-scatters, which carry most bytes, stay there, and only the all-reduce of a shard
  // (1/G of the gradients) crosses hosts.
  int shard_group_size = 0;
  // Stage 3: ranks sharing the secondary copy of hpZ (shard_groups.h; -1 = the ranks of one
  // host), 0 = off. Off by default: it costs Ppad/G parameter elements more per rank, which
  // pays only where the links between hosts are the slow ones. Finalize replaces -1 by the
  // group size it resolved (0 when it resolved off).
  int hpz_group_size = 0;
  // Gradient staging windows (1 or 2; 0 = by the memory: two where the reductions read a
  // window after grad_ready returns, on host memory, so the framework writes the next unit
  // meanwhile). One saves the largest unit's gradients in memory for a wait in grad_data.
  int grad_windows = 0;
};

// Checks ranges and combinations; messages name the field.
Status validate_partition_options(const PartitionOptions& options);

// From the C struct (NULL = defaults). Refuses a bad size/magic/version; fields a smaller
// (older) struct lacks keep their defaults.
Status partition_options_from_config(const zrt_partition_config_t* config,
                                     PartitionOptions* options);
void partition_options_to_config(const PartitionOptions& options, zrt_partition_config_t* config);

// Applies the keys of a JSON object over *options (absent keys keep their value). Unknown keys
// and wrong types are refused, naming the key. Keys are the C struct's field names; dtypes and
// the memory kind are strings ("bf16", "host").
Status partition_options_apply_json(const std::string& json_text, const std::string& origin,
                                    PartitionOptions* options);
Status partition_options_load_json_file(const std::string& path, PartitionOptions* options);

// A stable digest of every field (FNV-1a), for the cross-rank consistency check.
uint64_t partition_options_hash(const PartitionOptions& options, uint64_t seed);

// step_backup as the step applies it: offload's callbacks run before the step knows that every
// rank's reductions succeeded, so there a segment backup becomes the full copy.
inline bool keeps_full_backup(const PartitionOptions& o) {
  return o.step_backup == ZRT_STEP_BACKUP_FULL ||
         (o.step_backup == ZRT_STEP_BACKUP_SEGMENT && o.offload_optimizer);
}
inline const char* step_backup_name(int step_backup) {
  switch (step_backup) {
    case ZRT_STEP_BACKUP_NONE:
      return "none";
    case ZRT_STEP_BACKUP_FULL:
      return "full";
    case ZRT_STEP_BACKUP_SEGMENT:
      return "segment";
    default:
      return "?";
  }
}
inline bool keeps_segment_backup(const PartitionOptions& o) {
  return o.step_backup == ZRT_STEP_BACKUP_SEGMENT && !o.offload_optimizer;
}

}  // namespace zrt
