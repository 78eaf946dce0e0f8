#include "lib/partition/partition_resources.h"

#include "lib/comm/communicator.h"
#include "lib/engine/device.h"
#include "lib/engine/engine.h"
#include "lib/partition/host_mapped_window.h"

namespace zrt {

Status PartitionResources::setup(PartitionContext& ctx) {
  ctx.on_device = device_ != nullptr;
  ZRT_RETURN_IF_ERROR(allocate_buffers(ctx));
  return create_streams(ctx);
}

Status PartitionResources::allocate_buffers(PartitionContext& ctx) {
  const size_t p_size = ctx.p_size;
  const size_t g_size = ctx.g_size;
  if (ctx.options.mem_kind == ZRT_MEM_CUDA) {
    if (device_ == nullptr) {
      return Status(ZRT_UNSUPPORTED,
                    "partition buffers in ZRT_MEM_CUDA memory need the communicator's device "
                    "context (zrt_partition_create makes it)");
    }
    std::unique_ptr<ArenaBackend> backend;
    ZRT_RETURN_IF_ERROR(device_->create_arena_backend(&backend));
    ZRT_RETURN_IF_ERROR(device_->create_element_ops(&ops_));
    arena_ = std::make_unique<Arena>(std::move(backend));
  } else {
    arena_ = std::make_unique<Arena>(create_host_arena_backend(ctx.comm.transport()));
    ops_ = create_host_element_ops();
  }
  ctx.ops = ops_.get();
  ctx.master_ops = ops_.get();
  const BufferPlan& b = ctx.plan;
  if (b.offload) ZRT_RETURN_IF_ERROR(make_host_arena(ctx));
  Arena& a = *arena_;
  // Offload: master, state, backup and the optimizer's gradient in host memory.
  Arena& m = b.offload ? *host_arena_ : a;
  const size_t h_full = a.plan(b.full_params * p_size, MemoryCategory::kFullParams);
  const size_t h_frozen = a.plan(b.frozen * p_size, MemoryCategory::kFullParams);
  const size_t h_pshard = a.plan(b.param_shard * p_size, MemoryCategory::kParamShard);
  const size_t h_psecondary = a.plan(b.param_secondary * p_size, MemoryCategory::kParamSecondary);
  const size_t h_fgrads = a.plan(b.full_grads * g_size, MemoryCategory::kGradients);
  const size_t h_gshard = a.plan(b.grad_shard * g_size, MemoryCategory::kGradShard);
  const size_t h_master = m.plan(b.master * 4, MemoryCategory::kMaster);
  std::vector<size_t> h_state;
  for (int i = 0; i < b.optimizer_slots; ++i) {
    h_state.push_back(m.plan(b.master * 4, MemoryCategory::kOptimizerState));
  }
  std::vector<size_t> h_buckets;
  for (int i = 0; i < b.bucket_count; ++i) {
    h_buckets.push_back(a.plan(b.bucket_numel * g_size, MemoryCategory::kBuckets));
  }
  const size_t h_pbucket = a.plan(b.persistent_bucket * g_size, MemoryCategory::kBuckets);
  const size_t slot_bytes = b.window_slot_numel * p_size;
  const size_t window_bytes = slot_bytes * static_cast<size_t>(b.window_slots);
  const bool mapped = window_bytes > 0 && stable_addresses_;
  size_t h_window = 0;
  if (mapped) {
    a.count_external(window_bytes, MemoryCategory::kGatherWindow);
  } else {
    h_window = a.plan(window_bytes, MemoryCategory::kGatherWindow);
  }
  std::vector<size_t> h_gwindows;
  for (int i = 0; i < b.grad_windows; ++i) {
    h_gwindows.push_back(a.plan(b.grad_window * p_size, MemoryCategory::kGradStaging));
  }
  const size_t h_ograd = m.plan(b.optimizer_grad * 4, MemoryCategory::kGradStaging);
  const size_t h_bmaster = m.plan(b.backup * 4, MemoryCategory::kStepBackup);
  std::vector<size_t> h_bstate;
  if (b.backup > 0) {
    for (int i = 0; i < b.optimizer_slots; ++i) {
      h_bstate.push_back(m.plan(b.backup * 4, MemoryCategory::kStepBackup));
    }
  }
  ZRT_RETURN_IF_ERROR(a.commit());
  if (b.offload) ZRT_RETURN_IF_ERROR(m.commit().with_context("the offloaded optimizer state"));
  PartitionBuffers& buf = ctx.buffers;
  buf.full_params = static_cast<char*>(a.address(h_full));
  buf.frozen = static_cast<char*>(a.address(h_frozen));
  buf.param_shard = static_cast<char*>(a.address(h_pshard));
  buf.param_secondary = static_cast<char*>(a.address(h_psecondary));
  buf.full_grads = static_cast<char*>(a.address(h_fgrads));
  buf.grad_shard = static_cast<char*>(a.address(h_gshard));
  buf.master = static_cast<float*>(m.address(h_master));
  for (size_t h : h_state) buf.state.push_back(static_cast<float*>(m.address(h)));
  for (size_t h : h_buckets) buf.buckets.push_back(static_cast<char*>(a.address(h)));
  buf.persistent_bucket = static_cast<char*>(a.address(h_pbucket));
  if (!mapped) {
    buf.window = static_cast<char*>(a.address(h_window));
    buf.slot_bytes = slot_bytes;
  }
  for (size_t h : h_gwindows) buf.grad_windows.push_back(static_cast<char*>(a.address(h)));
  buf.optimizer_grad = static_cast<float*>(m.address(h_ograd));
  buf.backup_master = static_cast<float*>(m.address(h_bmaster));
  for (size_t h : h_bstate) buf.backup_state.push_back(static_cast<float*>(m.address(h)));
  return mapped ? create_mapped_window(ctx) : Status::ok();
}

Status PartitionResources::create_mapped_window(PartitionContext& ctx) {
  MappedWindowSpec spec;
  spec.slots = ctx.plan.window_slots;
  spec.slot_bytes = ctx.plan.window_slot_numel * ctx.p_size;
  for (const UnitLayout& unit : ctx.layout.units()) {
    spec.unit_bytes.push_back(
        unit.segment < 0 ? 0 : ctx.layout.segments()[unit.segment].numel * ctx.p_size);
  }
  if (device_ != nullptr) {
    ZRT_RETURN_IF_ERROR(device_->create_mapped_window(spec, &mapped_window_));
  } else {
    ZRT_RETURN_IF_ERROR(create_host_mapped_window(spec, &mapped_window_));
  }
  ctx.buffers.mapped_window = mapped_window_.get();
  return Status::ok();
}

// Host memory for offload_optimizer: a second host arena beside host parameters; beside CUDA
// parameters pinned memory from the device context (copies to and from it run at the link's
// speed, asynchronously), with host element ops for what the CPU does to it.
Status PartitionResources::make_host_arena(PartitionContext& ctx) {
  if (device_ == nullptr) {
    host_arena_ = std::make_unique<Arena>(create_host_arena_backend(ctx.comm.transport()));
    return Status::ok();
  }
  std::unique_ptr<ArenaBackend> pinned;
  ZRT_RETURN_IF_ERROR(device_->create_pinned_host_backend(&pinned));
  host_arena_ = std::make_unique<Arena>(std::move(pinned));
  host_ops_ = create_host_element_ops();
  ctx.master_ops = host_ops_.get();
  return Status::ok();
}

void PartitionResources::measure(MemoryFigures* figures) const {
  arena_->measure(figures);
  if (host_arena_ == nullptr) return;
  MemoryFigures host;
  host_arena_->measure(&host);
  MemoryFigures& f = *figures;
  f.master += host.master;
  f.optimizer_state += host.optimizer_state;
  f.grad_staging += host.grad_staging;
  f.step_backup += host.step_backup;
  f.host_model_state = host.model_state;
  f.host_total = host.total;
  complete_memory_figures(&f);
}

Status PartitionResources::create_streams(PartitionContext& ctx) {
  ProgressEngine& engine = ctx.comm.engine();
  if (device_ != nullptr) return create_device_streams(ctx);
  const zrt_mem_kind_t kind = ctx.options.mem_kind;
  PartitionStreams& s = ctx.streams;
  // Created in the same order on every rank: stream k talks to stream k.
  ZRT_RETURN_IF_ERROR(engine.create_stream(kind, &s.ag));
  ZRT_RETURN_IF_ERROR(engine.create_stream(kind, &s.rs));
  if (!ctx.buffers.buckets.empty()) {
    ZRT_RETURN_IF_ERROR(engine.create_stream(kind, &s.copy));
    ZRT_RETURN_IF_ERROR(engine.create_event(&s.copy_event));
    s.window_read.assign(ctx.buffers.grad_windows.size(), nullptr);
    for (Event*& event : s.window_read) ZRT_RETURN_IF_ERROR(engine.create_event(&event));
  }
  // Offload: the gradient slices the optimizer cannot read in place, copied on the progress
  // thread while the training thread runs the optimizer (gradient_pipeline.h).
  if (ctx.plan.offload) ZRT_RETURN_IF_ERROR(engine.create_stream(kind, &s.offload));
  auto make = [&engine](Event** event) { return engine.create_event(event); };
  ZRT_RETURN_IF_ERROR(create_events(ctx, make));
  return ctx.secondary != nullptr ? create_secondary_streams(ctx) : Status::ok();
}

// hpZ (host memory only, shard_groups.cc refuses the rest): a stream and slot events on the
// secondary group's engine, and the per-segment copy events on the world's.
Status PartitionResources::create_secondary_streams(PartitionContext& ctx) {
  ProgressEngine& group = ctx.secondary->engine();
  PartitionStreams& s = ctx.streams;
  ZRT_RETURN_IF_ERROR(group.create_stream(ctx.options.mem_kind, &s.secondary_ag));
  s.secondary_slot_events.assign(s.slot_events.size(), nullptr);
  for (Event*& event : s.secondary_slot_events) ZRT_RETURN_IF_ERROR(group.create_event(&event));
  ProgressEngine& world = ctx.comm.engine();
  s.secondary_copied.assign(ctx.layout.segments().size(), nullptr);
  for (Event*& event : s.secondary_copied) ZRT_RETURN_IF_ERROR(world.create_event(&event));
  return Status::ok();
}

// ZRT_MEM_CUDA: streams and events of the device context, owned here (the engine does not know
// them), so one CUDA stream orders after another with cudaStreamWaitEvent.
Status PartitionResources::create_device_streams(PartitionContext& ctx) {
  ProgressEngine& engine = ctx.comm.engine();
  // Indexes only name the streams in messages; NCCL pairs collectives by enqueue order.
  constexpr int kFirstIndex = 0x5a00;
  std::vector<Stream**> streams = {&ctx.streams.ag, &ctx.streams.rs};
  if (ctx.plan.offload) streams.push_back(&ctx.streams.offload);  // copies to and from the host
  for (Stream** stream : streams) {
    std::unique_ptr<Stream> made;
    ZRT_RETURN_IF_ERROR(device_->create_stream(
        engine, kFirstIndex + static_cast<int>(device_streams_.size()), nullptr, false, &made));
    *stream = made.get();
    device_streams_.push_back(std::move(made));
  }
  auto make = [this, &engine](Event** event) {
    std::unique_ptr<Event> made;
    ZRT_RETURN_IF_ERROR(device_->create_event(engine, &made));
    *event = made.get();
    device_events_.push_back(std::move(made));
    return Status::ok();
  };
  return create_events(ctx, make);
}

Status PartitionResources::create_events(PartitionContext& ctx,
                                         const std::function<Status(Event**)>& make) {
  PartitionStreams& s = ctx.streams;
  if (ctx.policy.gathers_after_step()) {
    s.segment_events.assign(ctx.layout.segments().size(), nullptr);
    for (Event*& event : s.segment_events) ZRT_RETURN_IF_ERROR(make(&event));
  }
  if (ctx.policy.gathers_on_fetch()) {
    ZRT_RETURN_IF_ERROR(make(&s.persistent_event));
    s.slot_events.assign(static_cast<size_t>(ctx.plan.window_slots), nullptr);
    for (Event*& event : s.slot_events) ZRT_RETURN_IF_ERROR(make(&event));
  }
  s.bucket_events.assign(ctx.buffers.buckets.size(), nullptr);
  for (Event*& event : s.bucket_events) ZRT_RETURN_IF_ERROR(make(&event));
  if (ctx.plan.offload) {
    const size_t segments = ctx.layout.segments().size();
    s.segment_reduced.assign(segments, nullptr);
    s.segment_copied.assign(segments, nullptr);
    for (Event*& event : s.segment_reduced) ZRT_RETURN_IF_ERROR(make(&event));
    for (Event*& event : s.segment_copied) ZRT_RETURN_IF_ERROR(make(&event));
    ZRT_RETURN_IF_ERROR(make(&s.backup_taken));
  }
  return Status::ok();
}

Status PartitionResources::release(PartitionContext& ctx) {
  Status first;
  auto keep = [&first](const Status& status) {
    if (first.is_ok() && !status.is_ok()) first = status;
  };
  ProgressEngine& engine = ctx.comm.engine();
  PartitionStreams& s = ctx.streams;
  if (!device_streams_.empty()) {
    // CUDA: wait for the device to pass zrt's work before the buffers go; the streams and events
    // are owned here, freed here rather than by the engine.
    for (auto& stream : device_streams_) keep(stream->synchronize());
    device_streams_.clear();
    device_events_.clear();
    s.ag = s.rs = s.offload = nullptr;
    s.segment_events.clear();
    s.segment_reduced.clear();
    s.segment_copied.clear();
    s.backup_taken = nullptr;
    s.bucket_events.clear();
    s.slot_events.clear();
    s.persistent_event = nullptr;
  }
  // Destroying a stream waits for its work, so buffers are idle before the arena goes.
  if (ctx.secondary != nullptr) {
    ProgressEngine& group = ctx.secondary->engine();
    if (s.secondary_ag != nullptr) keep(group.destroy_stream(s.secondary_ag));
    for (Event* event : s.secondary_slot_events) {
      if (event != nullptr) keep(group.destroy_event(event));
    }
  }
  for (Event* event : s.secondary_copied) {
    if (event != nullptr) keep(engine.destroy_event(event));
  }
  s.secondary_ag = nullptr;
  s.secondary_slot_events.clear();
  s.secondary_copied.clear();
  if (s.ag != nullptr) keep(engine.destroy_stream(s.ag));
  if (s.rs != nullptr) keep(engine.destroy_stream(s.rs));
  if (s.copy != nullptr) keep(engine.destroy_stream(s.copy));
  if (s.offload != nullptr) keep(engine.destroy_stream(s.offload));
  s.ag = s.rs = s.copy = s.offload = nullptr;
  if (s.copy_event != nullptr) keep(engine.destroy_event(s.copy_event));
  s.copy_event = nullptr;
  for (Event* event : s.window_read) {
    if (event != nullptr) keep(engine.destroy_event(event));
  }
  s.window_read.clear();
  for (Event* event : s.segment_events) {
    if (event != nullptr) keep(engine.destroy_event(event));
  }
  for (Event* event : s.bucket_events) {
    if (event != nullptr) keep(engine.destroy_event(event));
  }
  for (Event* event : s.slot_events) {
    if (event != nullptr) keep(engine.destroy_event(event));
  }
  if (s.persistent_event != nullptr) keep(engine.destroy_event(s.persistent_event));
  for (Event* event : s.segment_reduced) {
    if (event != nullptr) keep(engine.destroy_event(event));
  }
  for (Event* event : s.segment_copied) {
    if (event != nullptr) keep(engine.destroy_event(event));
  }
  if (s.backup_taken != nullptr) keep(engine.destroy_event(s.backup_taken));
  s.backup_taken = nullptr;
  s.segment_reduced.clear();
  s.segment_copied.clear();
  s.segment_events.clear();
  s.bucket_events.clear();
  s.slot_events.clear();
  s.persistent_event = nullptr;
  if (ops_ != nullptr) keep(ops_->bind(nullptr));  // a device op's failure not reported yet
  ctx.ops = nullptr;
  ctx.master_ops = nullptr;
  ctx.buffers.mapped_window = nullptr;
  mapped_window_.reset();
  arena_.reset();
  host_arena_.reset();
  ops_.reset();
  host_ops_.reset();
  return first;
}

}  // namespace zrt
