// StagePolicy: what a ZeRO stage shards and when it communicates, said once. The partition
// manager, the layout and the memory model ask it instead of comparing stage numbers, so the
// difference between stages reads in one place:
//
//   stage | parameters between steps         | reduced gradients               | master, state
//   ------+----------------------------------+---------------------------------+--------------
//     0   | full, replicated                 | full buffer (all-reduce AVG)    | replicated
//     1   | full; the owned slices gathered  | owned slices of the full buffer | sharded
//         | per segment after the step       | (reduce-scatter SUM)            |
//     2   | as stage 1                       | shard (reduce-scatter AVG)      | sharded
//     3   | shard; a unit gathered on fetch  | shard (reduce-scatter AVG)      | sharded
#pragma once

#include "zero/partition/config.h"

namespace zrt {

// Where this rank keeps its parameters between steps, and so how a step publishes them.
enum class ParamHome {
  kReplicated,   // stage 0: the full buffer, converted from master whole
  kOwnedSlices,  // stages 1/2: the full buffer; the owned slices are converted and all-gathered
  kShard,        // stage 3: a parameter shard; units are all-gathered into the window on fetch
};

// Where a segment's reduced gradient ends up, and so which collective reduces it.
enum class GradHome {
  kFull,         // stage 0: all-reduce AVG in the full gradient buffer
  kOwnedSlices,  // stage 1: reduce-scatter SUM in the full buffer, unowned slices cleared
  kShard,        // stages 2/3: reduce-scatter AVG, the owned slice into the gradient shard
};

class StagePolicy {
 public:
  // A stage outside 0-3 is refused by validate_partition_options (Layout::build) before any
  // answer is used.
  explicit StagePolicy(const PartitionOptions& options);

  int stage() const { return stage_; }  // for messages only; ask the questions below instead
  ParamHome param_home() const { return param_home_; }
  GradHome grad_home() const { return grad_home_; }

  // What is sharded over the ranks (stage 0: nothing, S = 1).
  bool shards_optimizer_state() const { return shards_optimizer_state_; }
  bool shards_grads() const { return grad_home_ == GradHome::kShard; }
  bool shards_params() const { return param_home_ == ParamHome::kShard; }

  // Stage 3: parameters of at most persistence_threshold elements (and unsharded ones) stay
  // gathered in a persistent segment; every unit has a segment of its own.
  bool has_persistent_segment() const { return shards_params(); }
  bool segment_per_unit() const { return shards_params(); }

  // When parameters travel: after the step, one all-gather per segment (fetch waits on its
  // event), or on fetch, into the gather window.
  bool gathers_after_step() const { return param_home_ == ParamHome::kOwnedSlices; }
  bool gathers_on_fetch() const { return param_home_ == ParamHome::kShard; }

  // A full local gradient buffer: stages 0/1 always, 2/3 only for no-sync accumulation.
  // Without it, gradients go through the reduction buckets.
  bool keeps_full_grads() const { return keeps_full_grads_; }
  // Stage 1: the owned slices sit apart in the full gradient buffer, so the optimizer always
  // reads a gathered copy of them.
  bool optimizer_grad_is_copy() const { return grad_home_ == GradHome::kOwnedSlices; }

 private:
  int stage_;
  ParamHome param_home_;
  GradHome grad_home_;
  bool shards_optimizer_state_;
  bool keeps_full_grads_;
};

}  // namespace zrt
