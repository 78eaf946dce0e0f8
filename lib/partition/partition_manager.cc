// Registration, finalize (layout, arenas, streams, cross-rank check), parameter loading and the
// queries of the partition manager. The training path lives in partition_fetch.cc,
// partition_grads.cc and partition_step.cc.
#include "lib/partition/partition_manager.h"

#include <algorithm>
#include <cstring>

#include "collectives/collectives.h"
#include "lib/comm/communicator.h"
#include "lib/core/dtype.h"
#include "lib/core/log.h"
#include "lib/engine/device.h"
#include "lib/engine/engine.h"
#include "lib/partition/piecewise_task.h"

namespace zrt {

PartitionManager::PartitionManager(Communicator& comm, const PartitionOptions& options)
    : comm_(comm), options_(options), rank_(comm.rank()), size_(comm.size()) {
  p_size_ = dtype_size(options.param_dtype);
  g_size_ = dtype_size(options.reduce_dtype);
}

PartitionManager::~PartitionManager() {
  const Status status = destroy();
  if (!status.is_ok()) ZRT_LOG_WARN("partition manager destroyed with: {}", status.message());
}

Status PartitionManager::check_finalized(const char* what) const {
  if (destroyed_) return Status::invalid_usage("{}: the partition manager was destroyed", what);
  if (!finalized_) {
    return Status::invalid_usage("{}: call zrt_partition_finalize first", what);
  }
  return Status::ok();
}

Status PartitionManager::check_unit(int unit) const {
  if (unit < 0 || static_cast<size_t>(unit) >= unit_specs_.size()) {
    return Status::invalid_argument("unit {} is unknown ({} units registered)", unit,
                                    unit_specs_.size());
  }
  return Status::ok();
}

Status PartitionManager::check_param(int param) const {
  if (param < 0 || static_cast<size_t>(param) >= param_specs_.size()) {
    return Status::invalid_argument("param {} is unknown ({} parameters registered)", param,
                                    param_specs_.size());
  }
  return Status::ok();
}

Status PartitionManager::add_unit(const std::string& name, int* unit) {
  if (finalized_) {
    return Status::invalid_usage("cannot add unit \"{}\": the partition is already finalized",
                                 name);
  }
  unit_specs_.push_back({name});
  *unit = static_cast<int>(unit_specs_.size()) - 1;
  return Status::ok();
}

Status PartitionManager::add_param(int unit, const std::string& name, size_t numel, uint32_t flags,
                                   int* param) {
  if (finalized_) {
    return Status::invalid_usage("cannot add param \"{}\": the partition is already finalized",
                                 name);
  }
  ZRT_RETURN_IF_ERROR(check_unit(unit));
  if (numel == 0) return Status::invalid_argument("param \"{}\": numel is 0", name);
  if ((flags & ~(ZRT_PARAM_FROZEN | ZRT_PARAM_UNSHARDED)) != 0) {
    return Status::invalid_argument("param \"{}\": unknown flags {:#x}", name, flags);
  }
  param_specs_.push_back({name, numel, unit, flags});
  *param = static_cast<int>(param_specs_.size()) - 1;
  return Status::ok();
}

size_t PartitionManager::segment_start(int segment) const {
  return layout_.segments()[segment].shard_offset * static_cast<size_t>(layout_.shards());
}

char* PartitionManager::param_ptr(char* base, size_t elements) const {
  return base + elements * p_size_;
}

char* PartitionManager::grad_ptr(char* base, size_t elements) const {
  return base + elements * g_size_;
}

Status PartitionManager::run_piecewise(Stream& stream, size_t total,
                                       std::function<void(size_t, size_t)> work, const char* name) {
  if (total == 0) return Status::ok();
  if (device_ != nullptr) {
    return ops_->run_on(
        stream,
        [&work, total]() {
          work(0, total);
          return Status::ok();
        },
        name);
  }
  // 64 Ki elements: at most 256 KiB of f32, the size of a collective's chunk.
  constexpr size_t kPiece = size_t{64} << 10;
  return stream.enqueue(std::make_unique<PiecewiseTask>(total, kPiece, std::move(work), name));
}

Status PartitionManager::allocate_buffers() {
  if (options_.mem_kind == ZRT_MEM_CUDA) {
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
    arena_ = std::make_unique<Arena>(create_host_arena_backend(comm_.transport()));
    ops_ = create_host_element_ops();
  }
  Arena& a = *arena_;
  const BufferPlan& b = plan_;
  const size_t h_full = a.plan(b.full_params * p_size_, MemoryCategory::kFullParams);
  const size_t h_frozen = a.plan(b.frozen * p_size_, MemoryCategory::kFullParams);
  const size_t h_pshard = a.plan(b.param_shard * p_size_, MemoryCategory::kParamShard);
  const size_t h_fgrads = a.plan(b.full_grads * g_size_, MemoryCategory::kGradients);
  const size_t h_gshard = a.plan(b.grad_shard * g_size_, MemoryCategory::kGradShard);
  const size_t h_master = a.plan(b.master * 4, MemoryCategory::kMaster);
  std::vector<size_t> h_state;
  for (int i = 0; i < b.optimizer_slots; ++i) {
    h_state.push_back(a.plan(b.master * 4, MemoryCategory::kOptimizerState));
  }
  std::vector<size_t> h_buckets;
  for (int i = 0; i < b.bucket_count; ++i) {
    h_buckets.push_back(a.plan(b.bucket_numel * g_size_, MemoryCategory::kBuckets));
  }
  const size_t h_pbucket = a.plan(b.persistent_bucket * g_size_, MemoryCategory::kBuckets);
  slot_bytes_ = b.window_slot_numel * p_size_;
  const size_t h_window =
      a.plan(slot_bytes_ * static_cast<size_t>(b.window_slots), MemoryCategory::kGatherWindow);
  std::vector<size_t> h_gwindows;
  for (int i = 0; i < b.grad_windows; ++i) {
    h_gwindows.push_back(a.plan(b.grad_window * p_size_, MemoryCategory::kGradStaging));
  }
  const size_t h_ograd = a.plan(b.optimizer_grad * 4, MemoryCategory::kGradStaging);
  const size_t h_bmaster = a.plan(b.backup * 4, MemoryCategory::kStepBackup);
  std::vector<size_t> h_bstate;
  if (b.backup > 0) {
    for (int i = 0; i < b.optimizer_slots; ++i) {
      h_bstate.push_back(a.plan(b.backup * 4, MemoryCategory::kStepBackup));
    }
  }
  ZRT_RETURN_IF_ERROR(a.commit());
  full_params_ = static_cast<char*>(a.address(h_full));
  frozen_ = static_cast<char*>(a.address(h_frozen));
  param_shard_ = static_cast<char*>(a.address(h_pshard));
  full_grads_ = static_cast<char*>(a.address(h_fgrads));
  grad_shard_ = static_cast<char*>(a.address(h_gshard));
  master_ = static_cast<float*>(a.address(h_master));
  for (size_t h : h_state) state_.push_back(static_cast<float*>(a.address(h)));
  for (size_t h : h_buckets) buckets_.push_back(static_cast<char*>(a.address(h)));
  persistent_bucket_ = static_cast<char*>(a.address(h_pbucket));
  window_ = static_cast<char*>(a.address(h_window));
  for (size_t h : h_gwindows) grad_windows_.push_back(static_cast<char*>(a.address(h)));
  window_busy_.assign(grad_windows_.size(), 0);
  optimizer_grad_ = static_cast<float*>(a.address(h_ograd));
  backup_master_ = static_cast<float*>(a.address(h_bmaster));
  for (size_t h : h_bstate) backup_state_.push_back(static_cast<float*>(a.address(h)));
  return Status::ok();
}

Status PartitionManager::create_streams() {
  ProgressEngine& engine = comm_.engine();
  if (device_ != nullptr) return create_device_streams();
  // Created in the same order on every rank: stream k talks to stream k.
  ZRT_RETURN_IF_ERROR(engine.create_stream(options_.mem_kind, &ag_stream_));
  ZRT_RETURN_IF_ERROR(engine.create_stream(options_.mem_kind, &rs_stream_));
  if (!buckets_.empty()) {
    ZRT_RETURN_IF_ERROR(engine.create_stream(options_.mem_kind, &copy_stream_));
    ZRT_RETURN_IF_ERROR(engine.create_event(&copy_event_));
    window_read_.assign(grad_windows_.size(), nullptr);
    for (Event*& event : window_read_) ZRT_RETURN_IF_ERROR(engine.create_event(&event));
  }
  auto make = [&engine](Event** event) { return engine.create_event(event); };
  return create_events(make);
}

// ZRT_MEM_CUDA: streams and events of the device context, owned by the manager (the engine
// does not know them), so one CUDA stream orders after another with cudaStreamWaitEvent.
Status PartitionManager::create_device_streams() {
  ProgressEngine& engine = comm_.engine();
  // Indexes only name the streams in messages; NCCL pairs collectives by enqueue order.
  constexpr int kFirstIndex = 0x5a00;
  for (Stream** stream : {&ag_stream_, &rs_stream_}) {
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
  return create_events(make);
}

Status PartitionManager::create_events(const std::function<Status(Event**)>& make) {
  if (options_.stage == 1 || options_.stage == 2) {
    segment_events_.assign(layout_.segments().size(), nullptr);
    for (Event*& event : segment_events_) ZRT_RETURN_IF_ERROR(make(&event));
  }
  if (options_.stage == 3) {
    ZRT_RETURN_IF_ERROR(make(&persistent_event_));
    slots_.assign(static_cast<size_t>(plan_.window_slots), Slot{});
    for (Slot& slot : slots_) ZRT_RETURN_IF_ERROR(make(&slot.event));
  }
  bucket_events_.assign(buckets_.size(), nullptr);
  for (Event*& event : bucket_events_) ZRT_RETURN_IF_ERROR(make(&event));
  return Status::ok();
}

// Every rank must have registered the same model with the same configuration, or the
// collectives would pair mismatched buffers: a wrong result or a hang. One all-gather of two
// digests per rank proves it before anything else runs.
Status PartitionManager::check_ranks_agree() {
  if (size_ == 1) return Status::ok();
  uint64_t mine[2] = {partition_options_hash(options_, 0x7a72), layout_.hash()};
  std::vector<uint64_t> all(2 * static_cast<size_t>(size_), 0);
  CollectiveArgs args;
  args.kind = ZRT_COLL_ALL_GATHER;
  args.sendbuf = mine;
  args.recvbuf = all.data();
  args.count = sizeof(mine);
  args.dtype = ZRT_U8;
  args.purpose = Purpose::kInternal;
  Stream& stream = comm_.default_stream();
  ZRT_RETURN_IF_ERROR(enqueue_collective(stream, rank_, size_, args));
  ZRT_RETURN_IF_ERROR(stream.synchronize());
  std::string config_differs, model_differs;
  for (int r = 0; r < size_; ++r) {
    if (all[2 * r] != all[0]) config_differs += fmt::format(" {}", r);
    if (all[2 * r + 1] != all[1]) model_differs += fmt::format(" {}", r);
  }
  if (!config_differs.empty()) {
    return Status::invalid_usage(
        "ranks disagree on the partition configuration: ranks{} differ from rank 0",
        config_differs);
  }
  if (!model_differs.empty()) {
    return Status::invalid_usage(
        "ranks registered different units/parameters: ranks{} differ from rank 0", model_differs);
  }
  return Status::ok();
}

Status PartitionManager::finalize() {
  if (destroyed_) return Status::invalid_usage("the partition manager was destroyed");
  if (finalized_) return Status::invalid_usage("zrt_partition_finalize was already called");
  ZRT_RETURN_IF_ERROR(Layout::build(options_, size_, unit_specs_, param_specs_, &layout_));
  ZRT_RETURN_IF_ERROR(check_ranks_agree());
  plan_ = plan_buffers(options_, layout_);
  ZRT_RETURN_IF_ERROR(allocate_buffers());
  ZRT_RETURN_IF_ERROR(create_streams());

  // This rank's piece map, and per parameter the pieces it owns (for load_param).
  const std::vector<ShardPiece> pieces = layout_.shard_pieces(layout_.shards() == 1 ? 0 : rank_);
  param_shard_pieces_.assign(param_specs_.size(), {});
  for (const ShardPiece& piece : pieces) {
    param_shard_pieces_[piece.param].push_back(static_cast<int>(pieces_.size()));
    pieces_.push_back({piece.param, piece.param_offset, piece.shard_offset, piece.count});
  }
  const size_t units = unit_specs_.size();
  const auto& segments = layout_.segments();
  unit_segments_.assign(units, {});
  unit_pieces_.assign(units, {});
  unit_piece_segment_.assign(units, {});
  segment_units_.assign(segments.size(), 0);
  for (size_t s = 0; s < segments.size(); ++s) {
    for (const SegmentPiece& piece : segments[s].pieces) {
      const int u = layout_.params()[piece.param].unit;
      if (unit_segments_[u].empty() || unit_segments_[u].back() != static_cast<int>(s)) {
        if (std::find(unit_segments_[u].begin(), unit_segments_[u].end(), static_cast<int>(s)) ==
            unit_segments_[u].end()) {
          unit_segments_[u].push_back(static_cast<int>(s));
          ++segment_units_[s];
        }
      }
      unit_pieces_[u].push_back(piece);
      unit_piece_segment_[u].push_back(static_cast<int>(s));
    }
  }
  segment_window_offset_.assign(segments.size(), kNotInWindow);
  if (copy_stream_ != nullptr && options_.param_dtype == options_.reduce_dtype) {
    for (size_t s = 0; s < segments.size(); ++s) {
      const Segment& seg = segments[s];
      if (seg.persistent || segment_units_[s] != 1) continue;
      // Contiguous: every piece sits at the same distance from its place in the segment.
      size_t start = kNotInWindow;
      bool contiguous = true;
      for (const SegmentPiece& piece : seg.pieces) {
        const size_t at = layout_.params()[piece.param].staging_offset + piece.param_offset;
        const size_t begin = at >= piece.segment_offset ? at - piece.segment_offset : kNotInWindow;
        if (start == kNotInWindow) start = begin;
        contiguous = contiguous && begin != kNotInWindow && begin == start;
      }
      // Padding after the pieces is zeroed in the window: only where the unit's gradients end
      // (a persistent parameter's may follow them), and only if the window has room.
      const int unit = layout_.params()[seg.pieces.front().param].unit;
      const bool padding_free =
          seg.numel == seg.used || start + seg.used == layout_.units()[unit].trainable_numel;
      if (contiguous && padding_free && start + seg.numel <= plan_.grad_window) {
        segment_window_offset_[s] = start;
      }
    }
  }
  trainable_units_ = 0;
  for (const UnitLayout& unit : layout_.units()) trainable_units_ += unit.trainable_numel > 0;
  pending_ = segment_units_;
  bucket_of_.assign(segments.size(), -1);
  bucket_segment_.assign(buckets_.size(), -1);
  grad_fresh_.assign(segments.size(), 1);
  shard_stale_.assign(segments.size(), 0);
  fetched_.assign(units, 0);
  signalled_.assign(units, 0);
  slot_of_.assign(units, -1);
  next_slot_.assign(units, -1);
  order_.reserve(4 * units + 16);
  finalized_ = true;
  ZRT_LOG_INFO("partition: stage {}, {} units, {} trainable elements ({} padded) in {} segments",
               options_.stage, units, layout_.trainable_numel(), layout_.padded_numel(),
               segments.size());
  return Status::ok();
}

Status PartitionManager::load_param(int param, const void* values, zrt_dtype_t dtype) {
  ZRT_RETURN_IF_ERROR(check_finalized("load_param"));
  ZRT_RETURN_IF_ERROR(check_param(param));
  if (values == nullptr) return Status::invalid_argument("values is NULL");
  if (dtype != ZRT_F32 && dtype != ZRT_F16 && dtype != ZRT_BF16) {
    return Status::invalid_argument("dtype {} is not f32, f16 or bf16", dtype_name(dtype));
  }
  // Parameters must not change under an all-gather that is reading them, nor master under
  // the step backup's copy; units gathered ahead hold the old parameters.
  ZRT_RETURN_IF_ERROR(ag_stream_->synchronize());
  ZRT_RETURN_IF_ERROR(settle_backup());
  invalidate_backup();
  if (options_.stage == 3) forget_window();
  const ParamLocation& loc = layout_.params()[param];
  const size_t in_size = dtype_size(dtype);
  const char* in = static_cast<const char*>(values);
  if (loc.place == ParamPlace::kFrozen) {
    ops_->convert(dtype, in, options_.param_dtype, param_ptr(frozen_, loc.view_offset), loc.numel);
    return Status::ok();
  }
  if (options_.stage <= 2) {
    ops_->convert(dtype, in, options_.param_dtype, param_ptr(full_params_, loc.view_offset),
                  loc.numel);
  } else if (loc.place == ParamPlace::kPersistent) {
    ops_->convert(dtype, in, options_.param_dtype, param_ptr(full_params_, loc.view_offset),
                  loc.numel);
  }
  for (int index : param_shard_pieces_[param]) {
    const zrt_shard_piece_t& piece = pieces_[index];
    const char* src = in + piece.param_offset * in_size;
    ops_->convert(dtype, src, ZRT_F32, master_ + piece.shard_offset, piece.count);
    if (param_shard_ != nullptr) {
      ops_->convert(dtype, src, options_.param_dtype, param_ptr(param_shard_, piece.shard_offset),
                    piece.count);
    }
  }
  return Status::ok();
}

Status PartitionManager::param_info(int param, zrt_param_info_t* info) const {
  ZRT_RETURN_IF_ERROR(check_finalized("param_info"));
  ZRT_RETURN_IF_ERROR(check_param(param));
  const ParamLocation& loc = layout_.params()[param];
  info->unit = loc.unit;
  info->numel = loc.numel;
  info->flags = loc.flags;
  info->resident = options_.stage <= 2 || loc.place != ParamPlace::kSegmented;
  info->first_segment = loc.first_segment;
  info->last_segment = loc.last_segment;
  info->segment_offset = loc.segment_offset;
  info->view_offset = loc.view_offset;
  return Status::ok();
}

Status PartitionManager::shard_pieces(const zrt_shard_piece_t** pieces, size_t* count) const {
  ZRT_RETURN_IF_ERROR(check_finalized("shard_pieces"));
  *pieces = pieces_.data();
  *count = pieces_.size();
  return Status::ok();
}

Status PartitionManager::param_data(int param, void** data) const {
  ZRT_RETURN_IF_ERROR(check_finalized("param_data"));
  ZRT_RETURN_IF_ERROR(check_param(param));
  const ParamLocation& loc = layout_.params()[param];
  if (loc.place == ParamPlace::kFrozen) {
    *data = param_ptr(frozen_, loc.view_offset);
  } else if (options_.stage <= 2 || loc.place == ParamPlace::kPersistent) {
    *data = param_ptr(full_params_, loc.view_offset);
  } else {
    const int slot = slot_of_[loc.unit];
    if (!fetched_[loc.unit] || slot < 0) {
      return Status::invalid_usage("param {} (\"{}\"): its unit {} is not fetched", param,
                                   param_specs_[param].name, loc.unit);
    }
    *data = param_ptr(window_ + static_cast<size_t>(slot) * slot_bytes_, loc.view_offset);
  }
  return Status::ok();
}

Status PartitionManager::memory(MemoryFigures* figures) const {
  ZRT_RETURN_IF_ERROR(check_finalized("memory"));
  MemoryFigures f = memory_figures(options_, layout_);  // theoretical figure and counts
  arena_->measure(&f);                                  // bytes actually carved
  *figures = f;
  return Status::ok();
}

Status PartitionManager::window_stats(WindowStats* stats) const {
  ZRT_RETURN_IF_ERROR(check_finalized("stats"));
  *stats = stats_;
  return Status::ok();
}

Status PartitionManager::destroy() {
  if (destroyed_) return Status::ok();
  destroyed_ = true;
  Status first;
  auto keep = [&first](const Status& status) {
    if (first.is_ok() && !status.is_ok()) first = status;
  };
  ProgressEngine& engine = comm_.engine();
  if (!device_streams_.empty()) {
    // CUDA: wait for the device to pass zrt's work before the buffers go; the streams and events
    // are this manager's own, freed here rather than by the engine.
    for (auto& stream : device_streams_) keep(stream->synchronize());
    device_streams_.clear();
    device_events_.clear();
    ag_stream_ = rs_stream_ = nullptr;
    segment_events_.clear();
    bucket_events_.clear();
    slots_.clear();
    persistent_event_ = nullptr;
  }
  // Destroying a stream waits for its work, so buffers are idle before the arena goes.
  if (ag_stream_ != nullptr) keep(engine.destroy_stream(ag_stream_));
  if (rs_stream_ != nullptr) keep(engine.destroy_stream(rs_stream_));
  if (copy_stream_ != nullptr) keep(engine.destroy_stream(copy_stream_));
  ag_stream_ = rs_stream_ = copy_stream_ = nullptr;
  if (copy_event_ != nullptr) keep(engine.destroy_event(copy_event_));
  copy_event_ = nullptr;
  for (Event* event : window_read_) {
    if (event != nullptr) keep(engine.destroy_event(event));
  }
  window_read_.clear();
  for (Event* event : segment_events_) {
    if (event != nullptr) keep(engine.destroy_event(event));
  }
  for (Event* event : bucket_events_) {
    if (event != nullptr) keep(engine.destroy_event(event));
  }
  for (Slot& slot : slots_) {
    if (slot.event != nullptr) keep(engine.destroy_event(slot.event));
  }
  if (persistent_event_ != nullptr) keep(engine.destroy_event(persistent_event_));
  segment_events_.clear();
  bucket_events_.clear();
  slots_.clear();
  persistent_event_ = nullptr;
  if (ops_ != nullptr) keep(ops_->bind(nullptr));  // a device op's failure not reported yet
  arena_.reset();
  ops_.reset();
  return first;
}

// --- Checkpoint access (used by lib/checkpoint) ----------------------------------------------

Status PartitionManager::checkpoint_quiesce(const char* what) {
  ZRT_RETURN_IF_ERROR(check_finalized(what));
  if (device_ != nullptr) {
    // The checkpoint layer reads and writes master, state and frozen store on the host.
    return Status(ZRT_UNSUPPORTED,
                  fmt::format("{}: checkpoints of ZRT_MEM_CUDA partitions are not supported; "
                              "copy the shard to host memory (zrt_partition_step's optimizer "
                              "sees it) or use mem_kind = ZRT_MEM_HOST",
                              what));
  }
  for (size_t u = 0; u < fetched_.size(); ++u) {
    if (fetched_[u]) {
      return Status::invalid_usage("{}: unit {} (\"{}\") is fetched; call it between steps", what,
                                   u, unit_specs_[u].name);
    }
  }
  if (microbatch_started_ || reduced_since_step_ || unreduced_local_) {
    return Status::invalid_usage(
        "{}: gradients of an unfinished step are pending (checkpoints hold no gradients); call "
        "it after zrt_partition_step",
        what);
  }
  ZRT_RETURN_IF_ERROR(ag_stream_->synchronize().with_context(
      fmt::format("{}: waiting for the post-step parameter gathers", what)));
  // The parameter shard is read as it is (read_param_shard): bring it up to date.
  return flush_shard_conversions().with_context(
      fmt::format("{}: converting master to the parameter shard", what));
}

Status PartitionManager::read_param_shard(size_t shard_offset, size_t count, void* out) const {
  if (shard_offset + count > layout_.shard_numel()) {
    return Status::invalid_argument("read_param_shard: [{}, {}) is outside the {}-element shard",
                                    shard_offset, shard_offset + count, layout_.shard_numel());
  }
  char* dst = static_cast<char*>(out);
  if (options_.stage == 0 || options_.stage == 3) {
    const char* base = options_.stage == 0 ? full_params_ : param_shard_;
    ops_->copy(dst, base + shard_offset * p_size_, count * p_size_);
    return Status::ok();
  }
  // Stages 1/2: the owned slice of each segment sits inside the full buffer.
  for (size_t s = 0; s < layout_.segments().size() && count > 0; ++s) {
    const Segment& seg = layout_.segments()[s];
    if (shard_offset >= seg.shard_offset + seg.slice) continue;
    const size_t in_slice = shard_offset - seg.shard_offset;
    const size_t n = std::min(count, seg.slice - in_slice);
    const size_t full =
        segment_start(static_cast<int>(s)) + static_cast<size_t>(rank_) * seg.slice + in_slice;
    ops_->copy(dst, full_params_ + full * p_size_, n * p_size_);
    dst += n * p_size_;
    shard_offset += n;
    count -= n;
  }
  return Status::ok();
}

Status PartitionManager::restore_checkpoint(const float* master,
                                            const std::vector<const float*>& states,
                                            const void* frozen, zrt_dtype_t frozen_dtype,
                                            int64_t step) {
  if (states.size() != state_.size()) {
    return Status(ZRT_INTERNAL_ERROR,
                  fmt::format("restore_checkpoint: {} optimizer state slots given, {} expected",
                              states.size(), state_.size()));
  }
  ZRT_RETURN_IF_ERROR(ag_stream_->synchronize());
  ZRT_RETURN_IF_ERROR(settle_backup());
  invalidate_backup();
  const size_t count = layout_.shard_numel();
  const zrt_dtype_t pdt = options_.param_dtype;
  ops_->copy(master_, master, count * sizeof(float));
  for (size_t i = 0; i < state_.size(); ++i)
    ops_->copy(state_[i], states[i], count * sizeof(float));
  if (frozen_ != nullptr && layout_.frozen_numel() > 0) {
    ops_->convert(frozen_dtype, frozen, pdt, frozen_, layout_.frozen_numel());
  }
  step_ = step;
  // Units gathered ahead hold the old parameters: forget them.
  forget_window();
  order_pos_ = 0;
  last_fetched_ = -1;
  direction_ = 1;
  // Publish master as a step does.
  return publish_params();
}

}  // namespace zrt
