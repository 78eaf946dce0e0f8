#include "zero/partition/memory_model.h"

#include <algorithm>
#include <cstddef>

#include "lib/core/dtype.h"
#include "zero/partition/stage_policy.h"

namespace zrt {

int window_slots(const PartitionOptions& options, const Layout& layout) {
  if (!StagePolicy(options).gathers_on_fetch() || layout.max_unit_segment_numel() == 0) return 0;
  int slots = options.prefetch_depth + 1;
  if (options.max_live_bytes > 0) {
    const size_t slot_bytes = layout.max_unit_segment_numel() * dtype_size(options.param_dtype);
    slots = static_cast<int>(std::min<size_t>(slots, options.max_live_bytes / slot_bytes));
  }
  return std::max(slots, 1);
}

size_t secondary_numel(const PartitionOptions& options, const Layout& layout) {
  if (options.hpz_group_size <= 0 || !StagePolicy(options).shards_params()) return 0;
  const auto& segments = layout.segments();
  size_t numel = 0;
  for (size_t s = 0; s < segments.size(); ++s) {
    if (static_cast<int>(s) == layout.persistent_segment()) continue;
    numel += segments[s].numel / static_cast<size_t>(options.hpz_group_size);
  }
  return numel;
}

bool windows_are_buckets(const PartitionOptions& options, const Layout& layout) {
  // Host memory in the reduce dtype: the gradient pipeline reduces a segment out of the window
  // that holds it (gradient_pipeline.h). When every segment but the persistent one is held so
  // (stage 3's one segment per unit), no reduction needs a bucket.
  if (options.mem_kind != ZRT_MEM_HOST || options.param_dtype != options.reduce_dtype) {
    return false;
  }
  if (!StagePolicy(options).segment_per_unit()) return false;
  const auto& segments = layout.segments();
  for (size_t s = 0; s < segments.size(); ++s) {
    if (segments[s].persistent) continue;
    if (!layout.segment_window_offset(static_cast<int>(s)).has_value()) return false;
  }
  return true;
}

BufferPlan plan_buffers(const PartitionOptions& options, const Layout& layout) {
  BufferPlan plan;
  const StagePolicy policy(options);
  const bool f32_reduce = options.reduce_dtype == ZRT_F32;
  plan.frozen = layout.frozen_numel();
  plan.master = layout.shard_numel();
  plan.optimizer_slots = options.optimizer_slots;
  plan.grad_window = layout.grad_window_numel();
  const bool full_grads = policy.keeps_full_grads();
  if (full_grads) plan.full_grads = layout.padded_numel();
  if (!policy.shards_params()) {
    plan.full_params = layout.padded_numel();
  } else {
    plan.param_shard = layout.shard_numel();
    plan.param_secondary = secondary_numel(options, layout);
    if (layout.persistent_segment() >= 0) {
      plan.full_params = layout.segments()[layout.persistent_segment()].numel;
    }
    plan.window_slots = window_slots(options, layout);
    plan.window_slot_numel = layout.max_unit_segment_numel();
  }
  if (policy.shards_grads()) plan.grad_shard = layout.shard_numel();
  if (!full_grads) {
    plan.windows_are_buckets = windows_are_buckets(options, layout);
    plan.bucket_count = plan.windows_are_buckets ? 0 : kBucketCount;
    plan.bucket_numel = !policy.segment_per_unit()
                            ? std::min(layout.bucket_numel(), layout.padded_numel())
                            : layout.max_unit_segment_numel();
    if (plan.bucket_numel == 0 || plan.bucket_count == 0) {
      plan.bucket_count = 0;
      plan.bucket_numel = 0;
    }
    if (policy.has_persistent_segment() && layout.persistent_segment() >= 0) {
      plan.persistent_bucket = layout.segments()[layout.persistent_segment()].numel;
    }
  }
  // The optimizer sees one contiguous f32 gradient shard: stage 0 hands it the full gradient
  // and stages 2/3 the gradient shard when they are f32; stage 1's owned slices are spread over
  // the full gradient buffer, so they are always gathered into a copy.
  // Offload: the CPU optimizer reads an f32 copy in host memory, whatever the reduce dtype.
  plan.offload = options.offload_optimizer;
  size_t largest_slice = 0;
  for (const Segment& seg : layout.segments()) largest_slice = std::max(largest_slice, seg.slice);
  // A step that calls the optimizer per segment (step_backup = segment) converts each
  // segment's slice just before its callback, through one constant buffer.
  const bool per_segment = keeps_segment_backup(options);
  plan.per_segment_step = per_segment;
  if (policy.optimizer_grad_is_copy() || !f32_reduce || plan.offload) {
    plan.optimizer_grad = per_segment ? largest_slice : layout.shard_numel();
  }
  if (keeps_full_backup(options)) {
    plan.backup = layout.shard_numel();
  } else if (per_segment) {
    plan.backup = largest_slice;
  }
  // Host buckets take each unit's gradients out of the window on the progress thread, after
  // grad_ready returns: a second window lets the framework write the next unit meanwhile.
  const bool read_later = plan.bucket_count > 0 || plan.windows_are_buckets;
  if (read_later && options.mem_kind == ZRT_MEM_HOST) plan.grad_windows = 2;
  if (options.grad_windows > 0) plan.grad_windows = options.grad_windows;
  return plan;
}

double zero_model_state_bytes(const PartitionOptions& options, int ranks, double elements,
                              const Layout& layout) {
  const double p = static_cast<double>(dtype_size(options.param_dtype));
  const double g = static_cast<double>(dtype_size(options.reduce_dtype));
  const double m = 4.0 * (1.0 + options.optimizer_slots);  // master + state, f32
  const StagePolicy policy(options);
  const double n = policy.shards_optimizer_state() ? static_cast<double>(ranks) : 1.0;
  // Parameters, gradients and master + state cost their bytes per element on every rank, or
  // divided by N where the stage shards them.
  double replicated = 0;
  double sharded = 0;
  (policy.shards_params() ? sharded : replicated) += p;
  (policy.shards_grads() ? sharded : replicated) += g;
  (policy.shards_optimizer_state() ? sharded : replicated) += m;
  double bytes = elements * replicated + elements * sharded / n;
  bytes += static_cast<double>(layout.frozen_numel()) * p;
  if (policy.has_persistent_segment()) bytes += static_cast<double>(layout.persistent_numel()) * p;
  if (policy.shards_grads() && options.no_sync_accumulation) bytes += elements * g;
  if (policy.shards_params() && options.hpz_group_size > 0) {
    const double units = elements - static_cast<double>(layout.persistent_numel());
    bytes += units * p / static_cast<double>(options.hpz_group_size);
  }
  return bytes;
}

double zero_host_model_state_bytes(const PartitionOptions& options, int ranks, double elements) {
  if (!options.offload_optimizer) return 0;
  const double m = 4.0 * (1.0 + options.optimizer_slots);
  // Offload is refused at stage 0, so master and state are always sharded here.
  return elements * m / static_cast<double>(ranks);
}

void complete_memory_figures(MemoryFigures* f) {
  f->model_state = f->full_params + f->param_shard + f->param_secondary + f->gradients +
                   f->grad_shard + f->master + f->optimizer_state;
  f->total = f->model_state + f->buckets + f->gather_window + f->grad_staging + f->step_backup;
  f->device_model_state = f->model_state - f->host_model_state;
  f->device_total = f->total - f->host_total;
}

MemoryFigures memory_figures(const PartitionOptions& options, const Layout& layout) {
  const BufferPlan plan = plan_buffers(options, layout);
  const uint64_t p = dtype_size(options.param_dtype);
  const uint64_t g = dtype_size(options.reduce_dtype);
  MemoryFigures f;
  f.full_params = (plan.full_params + plan.frozen) * p;
  f.param_shard = plan.param_shard * p;
  f.param_secondary = plan.param_secondary * p;
  f.gradients = plan.full_grads * g;
  f.grad_shard = plan.grad_shard * g;
  f.master = plan.master * 4;
  f.optimizer_state = plan.master * 4 * static_cast<uint64_t>(plan.optimizer_slots);
  f.buckets =
      (static_cast<uint64_t>(plan.bucket_count) * plan.bucket_numel + plan.persistent_bucket) * g;
  f.gather_window = static_cast<uint64_t>(plan.window_slots) * plan.window_slot_numel * p;
  f.grad_staging =
      plan.grad_window * static_cast<uint64_t>(plan.grad_windows) * p + plan.optimizer_grad * 4;
  f.step_backup = plan.backup * 4 * (1 + static_cast<uint64_t>(plan.optimizer_slots));
  if (plan.offload) {
    f.host_model_state = f.master + f.optimizer_state;
    f.host_total = f.host_model_state + f.step_backup + plan.optimizer_grad * 4;
  }
  complete_memory_figures(&f);
  // The persistent segment's padding is not a trainable element: count the formula's Q from
  // the unpadded persistent parameters, and its padding goes with the other padding.
  f.theoretical_model_state = zero_model_state_bytes(
      options, layout.ranks(), static_cast<double>(layout.trainable_numel()), layout);
  f.theoretical_host_model_state = zero_host_model_state_bytes(
      options, layout.ranks(), static_cast<double>(layout.trainable_numel()));
  f.theoretical_device_model_state = f.theoretical_model_state - f.theoretical_host_model_state;
  f.parameters = layout.trainable_numel();
  f.padded_parameters = layout.padded_numel();
  return f;
}

Status compute_memory_figures(const PartitionOptions& options, int ranks,
                              const std::vector<UnitSpec>& units,
                              const std::vector<ParamSpec>& params, MemoryFigures* figures) {
  Layout layout;
  ZRT_RETURN_IF_ERROR(Layout::build(options, ranks, units, params, &layout));
  *figures = memory_figures(options, layout);
  return Status::ok();
}

void memory_figures_to_c(const MemoryFigures& f, zrt_partition_memory_t* out) {
  out->full_params = f.full_params;
  out->param_shard = f.param_shard;
  out->gradients = f.gradients;
  out->grad_shard = f.grad_shard;
  out->master = f.master;
  out->optimizer_state = f.optimizer_state;
  out->buckets = f.buckets;
  out->gather_window = f.gather_window;
  out->grad_staging = f.grad_staging;
  out->model_state = f.model_state;
  out->total = f.total;
  out->theoretical_model_state = f.theoretical_model_state;
  out->parameters = f.parameters;
  out->padded_parameters = f.padded_parameters;
  // Older callers' structs end before step_backup (zrt_partition_memory checks the size).
  if (out->size >= offsetof(zrt_partition_memory_t, step_backup) + sizeof(out->step_backup)) {
    out->step_backup = f.step_backup;
  }
  if (out->size >= offsetof(zrt_partition_memory_t, theoretical_host_model_state) +
                       sizeof(out->theoretical_host_model_state)) {
    out->device_model_state = f.device_model_state;
    out->device_total = f.device_total;
    out->host_model_state = f.host_model_state;
    out->host_total = f.host_total;
    out->theoretical_device_model_state = f.theoretical_device_model_state;
    out->theoretical_host_model_state = f.theoretical_host_model_state;
  }
  if (out->size >=
      offsetof(zrt_partition_memory_t, param_secondary) + sizeof(out->param_secondary)) {
    out->param_secondary = f.param_secondary;
  }
}

}  // namespace zrt
