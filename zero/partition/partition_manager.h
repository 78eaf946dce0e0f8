// PartitionManager: the ZeRO stage-0/1/2/3 manager behind zrt_partition_t
// (docs/ARCHITECTURE.md#partition-manager). zrt.h states each call's contract and docs/API.md
// the protocol; this class registers the model, finalizes, checks each call's arguments and the
// manager's state and hands the work to its parts, which own their state:
//   - GatherWindow (gather_window.h): fetch/release, stage 3's gather window and prefetcher;
//   - GradientPipeline (gradient_pipeline.h): gradient windows, buckets, reductions,
//     micro-batches, the gradient norm;
//   - StepTransaction (step_transaction.h): the all-or-nothing step, its backup, publishing.
// What they share (layout, buffers, streams, StagePolicy) is a PartitionContext
// (partition_context.h) that finalize fills once; PartitionResources (partition_resources.h)
// makes and frees its memory, streams and events.
//
// Threading: one training thread calls the manager; the progress thread runs the host
// functions and piecewise tasks the parts enqueue (conversions of master, the backup's copies,
// copies into buckets, accumulation after reductions), which touch only buffers the training
// thread leaves alone until it waits for their events.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "lib/core/status.h"
#include "zero/partition/config.h"
#include "zero/partition/gather_window.h"
#include "zero/partition/gradient_pipeline.h"
#include "zero/partition/layout.h"
#include "zero/partition/memory_model.h"
#include "zero/partition/partition_context.h"
#include "zero/partition/partition_resources.h"
#include "zero/partition/shard_groups.h"
#include "zero/partition/step_transaction.h"
#include "zrt/zrt.h"

namespace zrt {

class Communicator;
class DeviceContext;

class PartitionManager {
 public:
  PartitionManager(Communicator& comm, const PartitionOptions& options);
  ~PartitionManager();
  PartitionManager(const PartitionManager&) = delete;
  PartitionManager& operator=(const PartitionManager&) = delete;

  Status add_unit(const std::string& name, int* unit);
  Status add_param(int unit, const std::string& name, size_t numel, uint32_t flags, int* param);
  Status add_param_shaped(int unit, const std::string& name, int ndim, const int64_t* dims,
                          zrt_dtype_t dtype, uint32_t flags, int* param);
  Status finalize();

  Status load_param(int param, const void* values, zrt_dtype_t dtype);
  Status param_info(int param, zrt_param_info_t* info) const;
  Status shard_pieces(const zrt_shard_piece_t** pieces, size_t* count) const;

  Status fetch(int unit);
  Status release(int unit);
  Status param_data(int param, void** data) const;
  // Waits for the parameters the last step or load published (zrt_partition_wait_params).
  Status wait_params();
  Status grad_data(int param, void** grad);
  Status set_sync(bool sync);
  Status grad_ready(int unit);
  Status grad_norm(double* norm, bool* has_nonfinite);
  Status step(const StepTransaction::Callback& optimizer);
  Status step_in_backward(zrt_optimizer_fn optimizer, void* user_data);
  // zrt_partition_set_optimizer_slots: collective, before the first step.
  Status set_optimizer_slots(int slots);

  Status memory(MemoryFigures* figures) const;
  // zrt_partition_traffic: the shard group's and the replicas' sent bytes.
  Status traffic(zrt_partition_traffic_t* traffic) const;
  Status window_stats(WindowStats* stats) const;
  const PartitionOptions& options() const { return ctx_->options; }

  // Waits for pending communication and releases streams, events and the arena.
  Status destroy();

  // ZRT_MEM_CUDA: the communicator's device context (made by the C API before finalize); the
  // manager's streams and events are CUDA ones from it, its buffers device memory.
  void set_device_context(std::shared_ptr<DeviceContext> device) {
    resources_.set_device_context(std::move(device));
  }

  // Before finalize: stage 3's units at their slots' addresses instead of fixed ones
  // (PartitionResources::set_stable_addresses). Not in the C API: for bench_overlap and tests.
  void set_stable_addresses(bool stable) { resources_.set_stable_addresses(stable); }

  // --- Checkpoint access (used by zero/checkpoint: zrt_partition_save/load/export_full) ---
  // Read access to the trained state and one call that replaces it. The checkpoint layer owns
  // the file format; the manager only exposes its buffers in shard layout.
  // The shard group's communicator (the world's when flat); checkpoints refuse hybrid managers.
  Communicator& communicator() { return ctx_->comm; }
  const Layout& layout() const { return ctx_->layout; }
  const std::vector<ParamSpec>& param_specs() const { return param_specs_; }
  size_t registered_numel_ = 0;  // sum of param_specs_ numel (each <= kMaxNumel)
  const std::vector<UnitSpec>& unit_specs() const { return unit_specs_; }
  bool is_finalized() const { return finalized_ && !destroyed_; }
  int64_t step_count() const { return step_ != nullptr ? step_->step_count() : 0; }
  const float* master_shard() const { return ctx_->buffers.master; }
  const std::vector<float*>& state_shards() const { return ctx_->buffers.state; }
  const char* frozen_store() const { return ctx_->buffers.frozen; }  // param_dtype, frozen view
  // Fails unless finalized and between steps: no unit fetched, no micro-batch begun, and (to
  // read) no step unfinished. Waits for the post-step all-gathers, so the buffers above are
  // quiescent afterwards. kReplace (a load) may drop an unfinished step: restore_checkpoint
  // discards its gradients and, after a failed callback, its interrupted update.
  enum class CheckpointAccess { kRead, kReplace };
  Status checkpoint_quiesce(const char* what, CheckpointAccess access = CheckpointAccess::kRead);
  // Copies `count` param_dtype elements of the local shard from `shard_offset` into `out`,
  // wherever the stage keeps them (shard buffer, or the owned slices of the full buffer).
  Status read_param_shard(size_t shard_offset, size_t count, void* out) const;
  // Replaces the state with a checkpoint's (staging buffers in this manager's shard layout, the
  // frozen store in `frozen_dtype`), then does what a step does after the optimizer: converts
  // master to param_dtype and publishes it (stages 1/2 gather, stage 3 shard + persistent
  // gather), so the manager behaves as if it had trained to `step`. Call checkpoint_quiesce first.
  Status restore_checkpoint(const float* master, const std::vector<const float*>& states,
                            const void* frozen, zrt_dtype_t frozen_dtype, int64_t step);

 private:
  Status check_finalized(const char* what) const;
  Status check_unit(int unit) const;
  Status check_param(int param) const;
  // set_optimizer_slots' local checks: the count's range, before the first step, not armed.
  Status check_slots_settable(int slots) const;
  // ZRT_INVALID_USAGE when the step's optimizer is armed (zrt_partition_step_in_backward) and
  // `what` would change or read what it changes, naming `what`.
  Status check_not_armed(const char* what) const;
  // ZRT_INVALID_USAGE when the armed step's micro-batch is over: `what` would begin another.
  Status check_armed_microbatch(const char* what) const;
  Status register_param(ParamSpec spec, int* param);
  // Every rank registered the same model with the same configuration.
  Status check_ranks_agree();

  Communicator& world_;
  // Formed by finalize; with G < N, ctx_ is then remade on the shard group's communicator.
  ShardGroups groups_;
  std::unique_ptr<PartitionContext> ctx_;
  PartitionResources resources_;
  bool finalized_ = false;
  bool destroyed_ = false;
  std::vector<UnitSpec> unit_specs_;
  std::vector<ParamSpec> param_specs_;
  // The parts, made by finalize.
  std::unique_ptr<GatherWindow> window_;
  std::unique_ptr<GradientPipeline> grads_;
  std::unique_ptr<StepTransaction> step_;
};

}  // namespace zrt
