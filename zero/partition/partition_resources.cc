#include "zero/partition/partition_resources.h"

#include "zero/comm/communicator.h"
#include "engine/device.h"
#include "engine/engine.h"
#include "zero/partition/host_mapped_window.h"

namespace zrt {

Status PartitionResources::setup(PartitionContext& ctx) {
  ctx.on_device = device_ != nullptr;
  ZRT_RETURN_IF_ERROR(allocate_buffers(ctx));
  return create_streams(ctx);
}

Status PartitionResources::allocate_buffers(PartitionContext& ctx) {
  ZRT_RETURN_IF_ERROR(create_arena(ctx));
  const BufferPlan& b = ctx.plan;
  if (b.offload) ZRT_RETURN_IF_ERROR(make_host_arena(ctx));
  Arena& a = *arena_;
  // Offload: master, state, backup and the optimizer's gradient in host memory.
  Arena& m = b.offload ? *host_arena_ : a;
  const BufferHandles handles = plan_in_arenas(ctx, a, m);
  ZRT_RETURN_IF_ERROR(a.commit());
  if (b.offload) ZRT_RETURN_IF_ERROR(m.commit().with_context("the offloaded optimizer state"));
  carve_buffers(handles, a, m, &ctx.buffers);
  OptimizerState state;
  ZRT_RETURN_IF_ERROR(prepare_optimizer_state(ctx, b.optimizer_slots, b.backup, &state));
  adopt_optimizer_state(ctx, std::move(state));
  return handles.mapped ? create_mapped_window(ctx) : Status::ok();
}

Status PartitionResources::make_master_side_backend(
    const PartitionContext& ctx, std::unique_ptr<ArenaBackend>* backend) const {
  if (device_ == nullptr) {
    *backend = create_host_arena_backend(ctx.comm.transport());
    return Status::ok();
  }
  if (ctx.plan.offload) return device_->create_pinned_host_backend(backend);
  return device_->create_arena_backend(backend);
}

Status PartitionResources::prepare_optimizer_state(const PartitionContext& ctx, int slots,
                                                   size_t backup_numel,
                                                   OptimizerState* staged) const {
  std::unique_ptr<ArenaBackend> backend;
  ZRT_RETURN_IF_ERROR(make_master_side_backend(ctx, &backend));
  auto arena = std::make_unique<Arena>(std::move(backend));
  const size_t numel = ctx.plan.master;
  std::vector<size_t> state, backup;
  for (int i = 0; i < slots; ++i) {
    state.push_back(arena->plan(numel * 4, MemoryCategory::kOptimizerState));
  }
  if (backup_numel > 0) {
    for (int i = 0; i < slots; ++i) {
      backup.push_back(arena->plan(backup_numel * 4, MemoryCategory::kStepBackup));
    }
  }
  ZRT_RETURN_IF_ERROR(arena->commit().with_context(
      fmt::format("{} optimizer state slot(s) of {} elements", slots, numel)));
  staged->state.clear();
  staged->backup_state.clear();
  for (size_t i : state) staged->state.push_back(static_cast<float*>(arena->address(i)));
  for (size_t i : backup) staged->backup_state.push_back(static_cast<float*>(arena->address(i)));
  staged->arena = std::move(arena);
  return Status::ok();
}

void PartitionResources::adopt_optimizer_state(PartitionContext& ctx, OptimizerState staged) {
  ctx.buffers.state = staged.state;
  ctx.buffers.backup_state = staged.backup_state;
  optimizer_state_ = std::move(staged);  // the old arena goes here
}

Status PartitionResources::create_arena(PartitionContext& ctx) {
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
  return Status::ok();
}

PartitionResources::BufferHandles PartitionResources::plan_in_arenas(const PartitionContext& ctx,
                                                                     Arena& a, Arena& m) const {
  const BufferPlan& b = ctx.plan;
  const size_t p_size = ctx.p_size;
  const size_t g_size = ctx.g_size;
  BufferHandles h;
  h.full_params = a.plan(b.full_params * p_size, MemoryCategory::kFullParams);
  h.frozen = a.plan(b.frozen * p_size, MemoryCategory::kFullParams);
  h.param_shard = a.plan(b.param_shard * p_size, MemoryCategory::kParamShard);
  h.param_secondary = a.plan(b.param_secondary * p_size, MemoryCategory::kParamSecondary);
  h.full_grads = a.plan(b.full_grads * g_size, MemoryCategory::kGradients);
  h.grad_shard = a.plan(b.grad_shard * g_size, MemoryCategory::kGradShard);
  h.master = m.plan(b.master * 4, MemoryCategory::kMaster);
  for (int i = 0; i < b.bucket_count; ++i) {
    h.buckets.push_back(a.plan(b.bucket_numel * g_size, MemoryCategory::kBuckets));
  }
  h.persistent_bucket = a.plan(b.persistent_bucket * g_size, MemoryCategory::kBuckets);
  h.slot_bytes = b.window_slot_numel * p_size;
  const size_t window_bytes = h.slot_bytes * static_cast<size_t>(b.window_slots);
  h.mapped = window_bytes > 0 && stable_addresses_;
  if (h.mapped) {
    a.count_external(window_bytes, MemoryCategory::kGatherWindow);
  } else {
    h.window = a.plan(window_bytes, MemoryCategory::kGatherWindow);
  }
  for (int i = 0; i < b.grad_windows; ++i) {
    h.grad_windows.push_back(a.plan(b.grad_window * p_size, MemoryCategory::kGradStaging));
  }
  h.optimizer_grad = m.plan(b.optimizer_grad * 4, MemoryCategory::kGradStaging);
  h.backup_master = m.plan(b.backup * 4, MemoryCategory::kStepBackup);
  return h;
}

void PartitionResources::carve_buffers(const BufferHandles& h, Arena& a, Arena& m,
                                       PartitionBuffers* buffers) {
  PartitionBuffers& buf = *buffers;
  buf.full_params = static_cast<char*>(a.address(h.full_params));
  buf.frozen = static_cast<char*>(a.address(h.frozen));
  buf.param_shard = static_cast<char*>(a.address(h.param_shard));
  buf.param_secondary = static_cast<char*>(a.address(h.param_secondary));
  buf.full_grads = static_cast<char*>(a.address(h.full_grads));
  buf.grad_shard = static_cast<char*>(a.address(h.grad_shard));
  buf.master = static_cast<float*>(m.address(h.master));
  for (size_t i : h.buckets) buf.buckets.push_back(static_cast<char*>(a.address(i)));
  buf.persistent_bucket = static_cast<char*>(a.address(h.persistent_bucket));
  if (!h.mapped) {
    buf.window = static_cast<char*>(a.address(h.window));
    buf.slot_bytes = h.slot_bytes;
  }
  for (size_t i : h.grad_windows) buf.grad_windows.push_back(static_cast<char*>(a.address(i)));
  buf.optimizer_grad = static_cast<float*>(m.address(h.optimizer_grad));
  buf.backup_master = static_cast<float*>(m.address(h.backup_master));
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

namespace {

// The optimizer state arena's bytes into the figures of master's side.
void add_optimizer_state(const MemoryFigures& state, MemoryFigures* side) {
  side->optimizer_state += state.optimizer_state;
  side->step_backup += state.step_backup;
  complete_memory_figures(side);
}

}  // namespace

void PartitionResources::measure(MemoryFigures* figures) const {
  MemoryFigures state;
  if (optimizer_state_.arena != nullptr) optimizer_state_.arena->measure(&state);
  arena_->measure(figures);
  if (host_arena_ == nullptr) {
    add_optimizer_state(state, figures);
    return;
  }
  MemoryFigures host;
  host_arena_->measure(&host);
  add_optimizer_state(state, &host);
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
  if (!ctx.buffers.buckets.empty() || ctx.plan.windows_are_buckets) {
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
  return ctx.secondary.comm != nullptr ? create_secondary_streams(ctx) : Status::ok();
}

// hpZ (host memory only, shard_groups.cc refuses the rest): a stream and slot events on the
// secondary group's engine, and the per-segment copy events on the world's.
Status PartitionResources::create_secondary_streams(PartitionContext& ctx) {
  ProgressEngine& group = ctx.secondary.comm->engine();
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

namespace {

void keep_first(Status* first, const Status& status) {
  if (first->is_ok() && !status.is_ok()) *first = status;
}

void destroy_stream(ProgressEngine& engine, Stream** stream, Status* first) {
  if (*stream != nullptr) keep_first(first, engine.destroy_stream(*stream));
  *stream = nullptr;
}

void destroy_event(ProgressEngine& engine, Event** event, Status* first) {
  if (*event != nullptr) keep_first(first, engine.destroy_event(*event));
  *event = nullptr;
}

void destroy_events(ProgressEngine& engine, std::vector<Event*>* events, Status* first) {
  for (Event* event : *events) {
    if (event != nullptr) keep_first(first, engine.destroy_event(event));
  }
  events->clear();
}

// hpZ's stream and slot events on the secondary group's engine, its copy events on the world's.
void destroy_secondary_streams(PartitionContext& ctx, Status* first) {
  PartitionStreams& s = ctx.streams;
  if (ctx.secondary.comm != nullptr) {
    ProgressEngine& group = ctx.secondary.comm->engine();
    destroy_stream(group, &s.secondary_ag, first);
    destroy_events(group, &s.secondary_slot_events, first);
  }
  destroy_events(ctx.comm.engine(), &s.secondary_copied, first);
  s.secondary_ag = nullptr;
  s.secondary_slot_events.clear();
}

// What create_streams made on the engine (after release_device_streams: only what is left).
void destroy_engine_streams(ProgressEngine& engine, PartitionStreams& s, Status* first) {
  destroy_stream(engine, &s.ag, first);
  destroy_stream(engine, &s.rs, first);
  destroy_stream(engine, &s.copy, first);
  destroy_stream(engine, &s.offload, first);
  destroy_event(engine, &s.copy_event, first);
  destroy_events(engine, &s.window_read, first);
  destroy_events(engine, &s.segment_events, first);
  destroy_events(engine, &s.bucket_events, first);
  destroy_events(engine, &s.slot_events, first);
  destroy_event(engine, &s.persistent_event, first);
  destroy_events(engine, &s.segment_reduced, first);
  destroy_events(engine, &s.segment_copied, first);
  destroy_event(engine, &s.backup_taken, first);
}

}  // namespace

// CUDA: wait for the device to pass zrt's work before the buffers go; the streams and events
// are owned here, freed here rather than by the engine.
void PartitionResources::release_device_streams(PartitionStreams& s, Status* first) {
  for (auto& stream : device_streams_) keep_first(first, stream->synchronize());
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

Status PartitionResources::release(PartitionContext& ctx) {
  Status first;
  if (!device_streams_.empty()) release_device_streams(ctx.streams, &first);
  // Destroying a stream waits for its work, so buffers are idle before the arena goes.
  destroy_secondary_streams(ctx, &first);
  destroy_engine_streams(ctx.comm.engine(), ctx.streams, &first);
  // A device op's failure not reported yet.
  if (ops_ != nullptr) keep_first(&first, ops_->bind(nullptr));
  ctx.ops = nullptr;
  ctx.master_ops = nullptr;
  ctx.buffers.mapped_window = nullptr;
  mapped_window_.reset();
  arena_.reset();
  host_arena_.reset();
  ctx.buffers.state.clear();
  ctx.buffers.backup_state.clear();
  optimizer_state_ = OptimizerState{};
  ops_.reset();
  host_ops_.reset();
  return first;
}

}  // namespace zrt
